//! The command line: one file per subcommand.

mod sandbox_server;
mod tool;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit statuses shared by the subcommands.
pub mod exit {
    pub const OK: u8 = 0;
    /// The tool ran and failed (or the call was malformed).
    pub const FAILED: u8 = 1;
    /// Bad command-line usage (clap uses 2 as well).
    pub const USAGE: u8 = 2;
    /// A permission rule denied the call, or the ask was refused.
    pub const DENIED: u8 = 3;
}

#[derive(Debug, Parser)]
#[command(
    name = "runner",
    version,
    about = "A sandboxed agent runner: OpenCode's tools behind a real isolation boundary"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the tools, or call them directly (one call, or a script of calls).
    #[command(subcommand)]
    Tool(tool::ToolCommand),
    /// Serve the sandbox API on stdin/stdout (started by the runner inside the sandbox).
    #[command(hide = true)]
    SandboxServer(sandbox_server::ServerArgs),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::SandboxServer(args) => sandbox_server::run(args),
        Command::Tool(cmd) => match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(tool::run(cmd)),
            Err(e) => {
                eprintln!("runner: cannot start the async runtime: {e}");
                exit::FAILED
            }
        },
    };
    ExitCode::from(code)
}
