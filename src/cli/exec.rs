//! `runner exec [wall flags] -- PROGRAM ARGS…`: any program (a test suite, a build, a whole
//! agent CLI) run inside the wall the agent's commands get, with the terminal passed
//! through when there is one. The work is the library's (`runner_sandbox::exec`); this
//! is the command line around it. See docs/EXEC.md.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;

use super::permission::RuleArgs;
use super::tool::SandboxArgs;

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The worktree the program's sandbox is made for (its working directory), as
    /// `runner run --root`.
    #[arg(long, default_value = ".")]
    pub root: PathBuf,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    pub rules: RuleArgs,
    /// Append the session's decisions (the sandbox's start with the program run, each
    /// connection the allow-list judged, the end with its status) to FILE as OCSF JSON
    /// lines, besides `[audit] file` in your config. FILE may not be where the sandbox can
    /// write (the worktree). See docs/AUDIT.md.
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
    /// The program and its arguments, passed as they are (no shell reads them); the
    /// program is looked up on the sandbox's PATH.
    #[arg(last = true, required = true, value_name = "PROGRAM", value_parser = clap::value_parser!(OsString))]
    pub argv: Vec<OsString>,
}

/// Exits with the program's status (128 + N after signal N, 127 when it is not found), or
/// with runner's own status when the wall could not be built.
pub async fn run(args: ExecArgs) -> u8 {
    super::sandbox::exec_in_wall(
        &args.root,
        &args.sandbox,
        &args.rules,
        &args.argv,
        args.audit.as_deref(),
    )
    .await
}
