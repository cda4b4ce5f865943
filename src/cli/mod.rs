//! The command line: one file per subcommand.

mod changes;
mod docs;
mod eval;
mod exec;
pub mod exit;
mod image;
mod mcp;
mod permission;
mod profile;
mod run;
mod sandbox;
mod sandbox_server;
mod sessions;
mod signals;
mod tool;
mod typo;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "runner",
    version = docs::LONG_VERSION,
    about = "A sandboxed agent runner: OpenCode's tools behind a real isolation boundary",
    after_help = docs::EXAMPLES_SHORT,
    after_long_help = docs::EXAMPLES,
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Without a subcommand, runner runs the agent (as `runner run`).
    #[command(flatten)]
    run: run::RunArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the agent on a task (also what `runner [OPTIONS] [PROMPT]` does).
    Run(run::RunArgs),
    /// Run many tasks, each in its own sandbox, and sum up the results.
    #[command(subcommand)]
    Eval(eval::EvalCommand),
    /// List, show or export recorded sessions.
    #[command(subcommand)]
    Sessions(sessions::SessionsCommand),
    /// List the tools, or call them directly (one call, or a script of calls).
    #[command(subcommand)]
    Tool(tool::ToolCommand),
    /// Check, enter or clean up sandboxes.
    #[command(subcommand)]
    Sandbox(sandbox::SandboxCommand),
    /// What the permission rules say about a tool call or a subject, without running it.
    #[command(subcommand)]
    Permission(permission::PermissionCommand),
    /// List profiles, or show one with its merged permission rules.
    #[command(subcommand)]
    Profile(profile::ProfileCommand),
    /// Build sandbox images.
    #[command(subcommand)]
    Image(image::ImageCommand),
    /// Run any program inside the wall, the terminal passed through: `runner exec
    /// --sandbox docker -- make test`. Exits with the program's status.
    Exec(exec::ExecArgs),
    /// The MCP servers of the config: list them, or call one of their tools.
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
    /// The copy workspaces waiting for this worktree, or what one of them changed.
    Changes(changes::ChangesArgs),
    /// Bring a copy workspace's changes over to its worktree (and remove the copy).
    Apply(changes::ApplyArgs),
    /// Remove a copy workspace without applying it.
    Discard(changes::DiscardArgs),
    /// Print a shell's completion script: `source <(runner completions bash)`.
    Completions(docs::CompletionsArgs),
    /// Print the manual page (every subcommand, the environment, exit statuses) as roff:
    /// `runner man | man -l -`.
    Man,
    /// Serve the sandbox API on stdin/stdout (started by the runner inside the sandbox).
    #[command(hide = true)]
    SandboxServer(sandbox_server::ServerArgs),
}

/// The whole command tree, as clap sees it: for completions, the man page and tests.
pub fn command() -> clap::Command {
    Cli::command()
}

pub fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // A mistyped subcommand stops here, before anything is read or started.
    if let Some(err) = typo::check(&Cli::command(), &args) {
        err.exit();
    }
    let cli = Cli::parse_from(&args);
    let code = match cli.command {
        None => block_on_plain(run::run(cli.run)),
        Some(Command::Run(args)) => block_on_plain(run::run(args)),
        Some(Command::Sessions(cmd)) => sessions::run(cmd),
        Some(Command::Eval(cmd)) => eval::run(cmd),
        Some(Command::Changes(args)) => changes::changes(args),
        Some(Command::Mcp(cmd)) => block_on_plain(mcp::run(cmd)),
        Some(Command::Apply(args)) => changes::apply(args),
        Some(Command::Discard(args)) => changes::discard(args),
        Some(Command::SandboxServer(args)) => sandbox_server::run(args),
        Some(Command::Tool(cmd)) => block_on(tool::run(cmd)),
        // The program's signals are its own: exec passes them on and waits it out.
        Some(Command::Exec(args)) => block_on_plain(exec::run(args)),
        // The shell's Ctrl-C belongs to the shell, not to runner.
        Some(Command::Sandbox(cmd @ sandbox::SandboxCommand::Shell { .. })) => {
            block_on_plain(sandbox::run(cmd))
        }
        // A served sandbox closes itself on SIGTERM, in order, before runner ends.
        Some(Command::Sandbox(cmd @ sandbox::SandboxCommand::Serve(_))) => {
            block_on_plain(sandbox::run(cmd))
        }
        Some(Command::Sandbox(cmd)) => block_on(sandbox::run(cmd)),
        Some(Command::Image(cmd)) => block_on(image::run(cmd)),
        Some(Command::Permission(cmd)) => block_on(permission::run(cmd)),
        Some(Command::Profile(cmd)) => profile::run(cmd),
        Some(Command::Completions(args)) => docs::completions(args),
        Some(Command::Man) => docs::man(),
    };
    ExitCode::from(code)
}

/// Runs a command to completion, or until Ctrl-C / SIGTERM / SIGHUP: then the command's
/// future is dropped, which closes its sandbox (containers removed, servers stopped, their
/// commands killed) before the process exits.
fn block_on(command: impl std::future::Future<Output = u8>) -> u8 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runner: cannot start the async runtime: {e}");
            return exit::FAILED;
        }
    };
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) else {
            return command.await;
        };
        tokio::select! {
            code = command => code,
            _ = term.recv() => { eprintln!("runner: terminated; sandbox closed"); 128 + 15 }
            _ = int.recv() => { eprintln!("runner: interrupted; sandbox closed"); 128 + 2 }
            _ = hup.recv() => 128 + 1,
        }
    })
}

fn block_on_plain(command: impl std::future::Future<Output = u8>) -> u8 {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(command),
        Err(e) => {
            eprintln!("runner: cannot start the async runtime: {e}");
            exit::FAILED
        }
    }
}

/// A flag whose values are a library enum's names, listed with their descriptions in
/// `--help` and checked by clap (the libraries know nothing of clap).
fn choice_arg<T: Copy + Send + Sync + 'static, const N: usize>(
    all: [T; N],
    name: fn(T) -> &'static str,
    about: fn(T) -> &'static str,
) -> impl clap::builder::TypedValueParser<Value = T> {
    use clap::builder::{PossibleValue, TypedValueParser};
    let values = all.map(|v| PossibleValue::new(name(v)).help(about(v)));
    clap::builder::PossibleValuesParser::new(values).try_map(move |s| {
        all.into_iter()
            .find(|v| name(*v) == s)
            .ok_or_else(|| format!("{s} is not one of the values listed"))
    })
}

/// `--sandbox`'s values: the backends.
fn backend_arg() -> impl clap::builder::TypedValueParser<Value = runner_sandbox::BackendKind> {
    use runner_sandbox::BackendKind;
    choice_arg(BackendKind::ALL, BackendKind::name, BackendKind::about)
}

/// `--ask`'s values: who answers what the rules leave open.
fn ask_arg() -> impl clap::builder::TypedValueParser<Value = runner_agent::config::profile::AskMode>
{
    use runner_agent::config::profile::AskMode;
    choice_arg(AskMode::ALL, AskMode::name, AskMode::about)
}

/// `--workspace`'s values: the workspace modes.
fn workspace_arg() -> impl clap::builder::TypedValueParser<Value = runner_workspace::Mode> {
    use runner_workspace::Mode;
    choice_arg(Mode::ALL, Mode::name, Mode::about)
}

/// `--network`'s values: the protocol's modes (which know nothing of clap), listed in
/// `--help` and checked by clap like any value enum.
fn network_arg() -> impl clap::builder::TypedValueParser<Value = runner_sandbox::spec::Network> {
    use clap::builder::TypedValueParser;
    use runner_sandbox::spec::Network;
    clap::builder::PossibleValuesParser::new(Network::ALL.map(Network::as_arg))
        .try_map(|s| s.parse::<Network>())
}
