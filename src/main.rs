fn main() -> std::process::ExitCode {
    runner::cli::main()
}
