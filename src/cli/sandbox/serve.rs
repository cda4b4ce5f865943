//! `runner sandbox serve --stdio`: one sandbox served over standard input and output to a
//! harness (the Python package in python/, for inspect_ai and Harbor). The work is
//! `runner_sandbox_stdio`'s; the protocol is in docs/PYTHON.md.

use std::path::PathBuf;

use super::super::exit;
use super::super::permission::RuleArgs;
use super::super::tool::SandboxArgs;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Speak the JSON-lines protocol on standard input and output (the one transport).
    #[arg(long, required = true)]
    pub stdio: bool,
    /// The worktree the sandbox is made for (commands start there).
    #[arg(long, default_value = ".")]
    pub root: PathBuf,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    pub rules: RuleArgs,
    /// Append the sandbox's start, each connection the allow-list judged and its end to
    /// FILE as OCSF JSON lines, besides `[audit] file` in your config. See docs/AUDIT.md.
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
    /// Serve a container of IMAGE instead of a worktree: its own file system is the
    /// worktree, and its root may run commands as other users (docker engine only).
    #[arg(long, value_name = "IMAGE", conflicts_with = "build")]
    pub task_image: Option<String>,
    /// As --task-image, with the image built by runner's engine from DIR/Dockerfile.
    #[arg(long, value_name = "DIR")]
    pub build: Option<PathBuf>,
    /// With a task image: where commands start (default the image's WORKDIR).
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<String>,
    /// With a task image: who commands run as (default the image's USER).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
}

/// Serves until standard input closes or SIGTERM; 0 then, or runner's status for a
/// sandbox that did not open (the reason on standard error).
pub async fn run(args: ServeArgs) -> u8 {
    let mut options = args.sandbox.options(&args.root, &args.rules, None);
    options.audit.file = args.audit.clone();
    let task = (args.task_image.is_some() || args.build.is_some()).then(|| {
        runner_sandbox_stdio::TaskImageOptions {
            image: args.task_image.clone(),
            build: args.build.clone(),
            workdir: args.workdir.clone(),
            user: args.user.clone(),
        }
    });
    let opened = match runner_sandbox_stdio::open(options, task).await {
        Ok(o) => o,
        Err(e) => {
            eprintln!("runner: {}", runner_display::escape(&e.to_string()));
            return match e {
                runner_sandbox_stdio::OpenFailure::Session(e) => exit::of_open(e.kind()),
                _ => exit::FAILED,
            };
        }
    };
    match runner_sandbox_stdio::serve(
        opened,
        runner_sandbox_stdio::lines_of(std::io::stdin()),
        tokio::io::stdout(),
    )
    .await
    {
        Ok(served) => {
            super::super::tool::report_network(served.network.as_deref()).await;
            super::super::changes::report(served.workspace);
            exit::OK
        }
        Err(e) => {
            eprintln!("runner: the harness's pipe failed: {e}");
            exit::FAILED
        }
    }
}
