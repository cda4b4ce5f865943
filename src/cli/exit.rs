//! Runner's exit statuses: one table for every command. The library crates say what
//! happened as a kind (a run's [`End`], a start's [`StartKind`], a session's [`OpenKind`],
//! an evaluation's outcome); only here does a kind become a number, so two commands can
//! never give one status two meanings. `runner man` prints [`TABLE`], and docs/GUIDE.md
//! lists the same.

use runner_agent::End;
use runner_agent::session::OpenKind;
use runner_agent::start::{StartError, StartKind};

/// Done: the task finished, the command did what it was asked.
pub const OK: u8 = 0;
/// The tool ran and failed (or the call was malformed), or something went wrong that is
/// none of the below (the session file could not be created, …).
pub const FAILED: u8 = 1;
/// Bad command-line usage or config (clap uses 2 as well).
pub const USAGE: u8 = 2;
/// A permission rule denied the call, or the ask was refused.
pub const DENIED: u8 = 3;
/// The model's provider failed once asked.
pub const PROVIDER: u8 = 4;
/// The run used all its `--max-steps`.
pub const MAX_STEPS: u8 = 5;
/// The sandbox could not start, or failed under the run.
pub const SANDBOX: u8 = 6;
/// The model declined to answer.
pub const MODEL_REFUSED: u8 = 7;
/// `eval run`: an attempt ended in `infra_error`, or a task could not be loaded (the
/// counts are not the agent's whole score).
pub const EVAL_INCOMPLETE: u8 = 8;
/// `eval run`: the task sets hold no task, so nothing ran.
pub const EVAL_EMPTY: u8 = 9;
/// `eval run --fail-on unresolved`: an attempt was not resolved.
pub const EVAL_UNRESOLVED: u8 = 10;
/// 128 + SIGINT, as shells report an interrupted program.
pub const INTERRUPTED: u8 = 130;
/// 128 + SIGTERM (129 for SIGHUP).
pub const TERMINATED: u8 = 128 + 15;

/// Every status with what it means, as `runner man` lists them.
pub const TABLE: [(u8, &str); 13] = [
    (
        OK,
        "Done: the task finished, the command did what it was asked.",
    ),
    (
        FAILED,
        "Failed: a tool call or command failed, or something went wrong that is none of \
         the below.",
    ),
    (
        USAGE,
        "Usage or config, found before any work starts: a bad flag or argument, a \
         mistyped subcommand, no model, a provider that is misnamed or has no API key, \
         a workspace id that names none, or a bad config.",
    ),
    (
        DENIED,
        "Denied: a permission rule denied a call, or an ask was refused.",
    ),
    (
        PROVIDER,
        "The model's provider failed once asked (a key it refused, the network, an API \
         error, retries used up).",
    ),
    (MAX_STEPS, "The run used all its --max-steps."),
    (
        SANDBOX,
        "The sandbox could not start, or failed under the run.",
    ),
    (MODEL_REFUSED, "The model declined to answer."),
    (
        EVAL_INCOMPLETE,
        "eval run: an attempt ended in infra_error, or a task could not be loaded (a \
         malformed line, a missing instruction.md): the counts are not the agent's \
         whole score. eval merge and eval submit: also a shard that is missing or \
         half-written.",
    ),
    (
        EVAL_EMPTY,
        "eval run: the task sets hold no task, so nothing ran.",
    ),
    (
        EVAL_UNRESOLVED,
        "eval run --fail-on unresolved: an attempt was not resolved (without the flag, \
         a run whose every attempt reached a verdict exits 0).",
    ),
    (INTERRUPTED, "Interrupted by Ctrl-C (128 + SIGINT)."),
    (
        TERMINATED,
        "Terminated by SIGTERM (128 + the signal; 129 for SIGHUP).",
    ),
];

/// The status a run ends with.
pub fn of_end(end: &End) -> u8 {
    match end {
        End::Finished => OK,
        End::Refused(_) => DENIED,
        End::ModelRefused(_) => MODEL_REFUSED,
        End::ProviderError(_) => PROVIDER,
        End::MaxSteps => MAX_STEPS,
        End::SandboxError(_) => SANDBOX,
        End::Interrupted => INTERRUPTED,
    }
}

/// The status of a run that could not start.
pub fn of_start(e: &StartError) -> u8 {
    match e.kind() {
        StartKind::Usage => USAGE,
        // The provider could not be made from the model and the config (a misnamed
        // provider, no key, a spec that is not provider/model): a config error. A provider
        // that fails once asked exits PROVIDER from the run's end instead.
        StartKind::Provider => USAGE,
        StartKind::Sandbox => SANDBOX,
        StartKind::Failed => FAILED,
    }
}

/// The status of a one-call command (`tool call`, `mcp serve`) whose session could not
/// open: the caller's to fix, or a failure.
pub fn of_open(kind: OpenKind) -> u8 {
    match kind {
        OpenKind::Usage => USAGE,
        OpenKind::Sandbox | OpenKind::Failed => FAILED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_status_has_one_meaning() {
        let mut codes: Vec<u8> = TABLE.iter().map(|(code, _)| *code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), TABLE.len(), "a status listed twice: {TABLE:?}");
    }

    /// docs/GUIDE.md's "Exit status" paragraph lists the same table `runner man` prints:
    /// every status in it is named there, as a number followed by what it means.
    #[test]
    fn the_guide_lists_every_status_of_the_table() {
        let guide = include_str!("../../docs/GUIDE.md");
        let start = guide
            .find("**Exit status**")
            .expect("GUIDE.md has an Exit status paragraph");
        let paragraph = &guide[start..];
        let paragraph = &paragraph[..paragraph.find("\n\n").unwrap_or(paragraph.len())];
        let words: Vec<&str> = paragraph
            .split(|c: char| c.is_whitespace() || c == ';' || c == ':' || c == '(' || c == ',')
            .collect();
        for (code, what) in TABLE {
            assert!(
                words.contains(&code.to_string().as_str()),
                "GUIDE.md's Exit status paragraph does not list {code} ({what})"
            );
        }
    }
}
