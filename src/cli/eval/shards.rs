//! `runner eval merge` and `runner eval submit --slurm`: flags in, [`runner_eval::merge`]
//! and [`runner_eval::slurm`] do the work.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::{FailOn, RunArgs, exit, failed, finish_as, options_of};
use crate::cli::signals::Signals;
use runner_agent::events::{JsonLines, NoEvents};
use runner_eval::Outcome;
use runner_eval::events::EventSink;
use runner_eval::merge::Merged;
use runner_eval::slurm::{SlurmError, SubmitOptions};

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Shard folders (OUT/shards/K-of-N), or folders holding a shards/ of them (an
    /// `eval run --shard`'s --out).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// The merged folder: tasks/, summary.json, predictions.jsonl, report.html. It may
    /// be the shards' shared --out.
    #[arg(long)]
    out: PathBuf,
    /// Events as JSON lines on stdout: run_start, one shard event per shard, run_end.
    #[arg(long)]
    json: bool,
    /// Exit 10 when an attempt was not resolved, as `eval run --fail-on unresolved`.
    #[arg(long, value_name = "WHAT", value_enum)]
    fail_on: Option<FailOn>,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Submit to Slurm (sbatch; followed with scontrol, cancelled with scancel).
    #[arg(long, required = true)]
    slurm: bool,
    /// How many shards: one array element each.
    #[arg(long)]
    shards: u32,
    #[command(flatten)]
    run: RunArgs,
    /// Options for sbatch, after `--` (`-- --partition=cpu --cpus-per-task=8`).
    #[arg(last = true, value_name = "SBATCH_ARGS")]
    sbatch: Vec<OsString>,
}

pub(super) fn merge(args: MergeArgs) -> u8 {
    let events = sink(args.json);
    match runner_eval::merge::merge(&args.dirs, &args.out) {
        Ok(merged) => {
            events.emit(&merged.start_event(0, 0));
            for shard in &merged.shards {
                events.emit(&shard.event(None));
            }
            end(&merged, false, args.fail_on, args.json, &*events)
        }
        Err(e) => failed(&*events, exit::FAILED, &e.to_string()),
    }
}

pub(super) async fn submit(args: SubmitArgs) -> u8 {
    let (json, fail_on) = (args.run.json, args.run.fail_on);
    let events = sink(json);
    let run_args = run_args(&std::env::args_os().collect::<Vec<_>>());
    let eval = match options_of(args.run) {
        Ok(o) => o,
        Err(message) => return failed(&*events, exit::USAGE, &message),
    };
    let runner = match std::env::current_exe() {
        Ok(path) => path,
        Err(e) => {
            return failed(
                &*events,
                exit::FAILED,
                &format!("cannot find runner's own path: {e}"),
            );
        }
    };
    // Ctrl-C cancels the arrays and waits for their shards to end; a second exits at once.
    let signals = Signals::listen(
        Some("stopping: the Slurm jobs are cancelled; their shards keep what they finished"),
        Box::new(|| {}),
    );
    let stop = signals.turn();
    let options = SubmitOptions {
        eval,
        shards: args.shards,
        run_args,
        sbatch_args: args.sbatch,
        runner,
        poll: Duration::from_secs(1),
    };
    match runner_eval::slurm::submit(options, stop.clone(), events.clone()).await {
        Ok(merged) => end(&merged, stop.is_cancelled(), fail_on, json, &*events),
        Err(e) => {
            let code = match e {
                SlurmError::Usage(_) | SlurmError::Eval(runner_eval::EvalError::Options(_)) => {
                    exit::USAGE
                }
                _ => exit::FAILED,
            };
            failed(&*events, code, &e.to_string())
        }
    }
}

fn sink(json: bool) -> Arc<dyn EventSink> {
    if json {
        Arc::new(JsonLines::new(std::io::stdout()))
    } else {
        Arc::new(NoEvents)
    }
}

/// Each shard that is not complete in a line, then the summary and the status by eval's
/// table, a missing or half-written shard counting as an incomplete run.
fn end(
    merged: &Merged,
    stopped: bool,
    fail_on: Option<FailOn>,
    json: bool,
    events: &dyn EventSink,
) -> u8 {
    let problems = merged.problems();
    for problem in &problems {
        eprintln!("runner: {}", runner_display::escape(problem));
    }
    let outcome = merged.outcome(stopped, fail_on == Some(FailOn::Unresolved));
    let why = (outcome == Outcome::Incomplete && !problems.is_empty()).then(|| {
        format!(
            "{} of {} shards are missing or half-written (said above): the counts are not the agent's whole score; run those shards again (the same eval submit, or eval run … --shard K/N) and merge again",
            problems.len(),
            merged.shards.len()
        )
    });
    finish_as(&merged.report, outcome, &merged.out, json, events, why)
}

/// `eval run`'s arguments within this command line (after `submit`, before `--`), less
/// submit's own (`--slurm`, `--shards N`) and `--json`, which the job script adds: clap
/// has checked them all, and each shard runs them as they were given.
fn run_args(argv: &[OsString]) -> Vec<OsString> {
    let eval = argv.iter().position(|a| a == "eval").unwrap_or(0);
    let start = argv[eval..]
        .iter()
        .position(|a| a == "submit")
        .map_or(argv.len(), |i| eval + i + 1);
    let mut kept = Vec::new();
    let mut rest = argv[start..].iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            break;
        }
        if arg == "--shards" {
            rest.next();
        } else if arg != "--slurm"
            && arg != "--json"
            && !arg.to_string_lossy().starts_with("--shards=")
        {
            kept.push(arg.clone());
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shards_run_the_run_arguments_as_given() {
        let argv: Vec<OsString> = [
            "/bin/runner",
            "eval",
            "submit",
            "--slurm",
            "tasks",
            "--shards",
            "3",
            "--out",
            "o",
            "--json",
            "--agent",
            "oracle",
            "--shards=4",
            "--",
            "--partition=p",
        ]
        .map(OsString::from)
        .to_vec();
        assert_eq!(
            run_args(&argv),
            ["tasks", "--out", "o", "--agent", "oracle"].map(OsString::from)
        );
    }
}
