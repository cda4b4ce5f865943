//! `runner eval submit --slurm TASKS --shards N --out SHARED`: an evaluation as a Slurm
//! job array, one element per shard ([`crate::shard`]), followed to its end and merged
//! ([`crate::merge`]).
//!
//! runner schedules no machines: Slurm does. This module writes the job script
//! ([`script`]), hands it to `sbatch`, follows the array with `scontrol` ([`queue`]),
//! passes each shard's events on as the shard writes them ([`follow`]), and merges the
//! shards into SHARED when every element has ended. The disk is the truth throughout:
//! which shards are finished is read from their folders, so the same command run again
//! submits only the shards that are not (and each of them runs only its unfinished
//! attempts), and an array an earlier command submitted that is still queued or running
//! is followed, not submitted twice (two elements of one shard would write the same
//! files). Ctrl-C cancels the arrays (`scancel`) and waits for their elements to end:
//! a cancelled shard ends its attempts and removes their containers before it exits.

mod follow;
pub mod queue;
pub mod script;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::events::{self, Event, EventSink};
use crate::merge::{self, MergeError, Merged};
use crate::shard::{Progress, Shard};
use crate::{AgentKind, EvalError, EvalOptions, Report, results, scheduler};

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The command line cannot make a submission.
    #[error("{0}")]
    Usage(String),
    /// A Slurm command could not run or failed.
    #[error("{message}")]
    Command { command: String, message: String },
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Merge(#[from] MergeError),
    #[error(transparent)]
    Eval(#[from] EvalError),
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SlurmError {
    let path = path.to_path_buf();
    move |source| SlurmError::Io {
        action,
        path,
        source,
    }
}

/// What `eval submit --slurm` is asked to do.
pub struct SubmitOptions {
    /// The evaluation, as `eval run` would take it; its `out` is the folder every shard
    /// writes under (a shared file system's).
    pub eval: EvalOptions,
    pub shards: u32,
    /// `eval run`'s arguments as given (the task sets and every flag), for the job script.
    pub run_args: Vec<OsString>,
    /// Further sbatch options (a partition, CPUs per task, a time limit).
    pub sbatch_args: Vec<OsString>,
    /// The runner each element runs: this executable.
    pub runner: PathBuf,
    /// How often Slurm is asked how the array stands.
    pub poll: Duration,
}

/// `OUT/slurm/jobs.json`: every array submitted for OUT, so a later command follows one
/// still running instead of submitting its shards again.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Jobs {
    jobs: Vec<JobRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct JobRecord {
    job: String,
    of: u32,
    shards: Vec<u32>,
    submitted_unix_s: u64,
}

/// The folder under OUT with the job script, the jobs and each element's output.
const LOGS: &str = "slurm";

/// Submits the shards not yet finished, follows them, and merges every shard into `out`.
/// `stop` (Ctrl-C) cancels the arrays; the merge then says what is unfinished.
pub async fn submit(
    mut options: SubmitOptions,
    stop: CancellationToken,
    events: Arc<dyn EventSink>,
) -> Result<Merged, SlurmError> {
    check(&options)?;
    let out = std::path::absolute(&options.eval.out).map_err(io("find", &options.eval.out))?;
    options.eval.out = out.clone();
    let logs = out.join(LOGS);
    std::fs::create_dir_all(&logs).map_err(io("create", &logs))?;
    let (loaded, _hash, problems) = scheduler::load_sets(&options.eval)?;
    let ids: Vec<String> = loaded.iter().map(|l| l.id().to_string()).collect();
    let of = options.shards;
    let progress: Vec<(Shard, Progress)> = (1..=of)
        .map(|k| {
            let shard = Shard { index: k, of };
            let mine: Vec<String> = ids.iter().filter(|id| shard.holds(id)).cloned().collect();
            (
                shard,
                Progress::of(&shard.folder(&out), &mine, options.eval.attempts),
            )
        })
        .collect();
    events.emit(&start_event(
        &options.eval,
        ids.len(),
        progress.iter().map(|(_, p)| p.to_run()).sum(),
    ));
    for p in &problems {
        events.emit(p);
    }
    if ids.is_empty() {
        return Ok(empty(&options.eval, problems.len()));
    }
    let running = still_running(&logs, of).await?;
    let mut followed: Vec<follow::Followed> = running
        .iter()
        .map(|(job, shard)| follow::Followed::new(job, *shard, &out, &logs))
        .collect();
    let to_submit: Vec<u32> = progress
        .iter()
        .filter(|(s, p)| !p.done() && !running.iter().any(|(_, r)| r == s))
        .map(|(s, _)| s.index)
        .collect();
    for (shard, _) in progress.iter().filter(|(_, p)| p.done()) {
        events.emit(&merge::shard_report(*shard, &shard.folder(&out)).event(None));
    }
    if !to_submit.is_empty() && !stop.is_cancelled() {
        let job = submit_array(&options, &out, &logs, &to_submit, &*events).await?;
        followed.extend(
            to_submit
                .iter()
                .map(|&k| follow::Followed::new(&job, Shard { index: k, of }, &out, &logs)),
        );
    }
    follow::follow(&mut followed, options.poll, &stop, &*events).await;
    let found: Vec<(Shard, PathBuf)> = (1..=of)
        .map(|k| {
            let shard = Shard { index: k, of };
            (shard, shard.folder(&out))
        })
        .collect();
    Ok(merge::merge_shards(of, &found, &out)?)
}

/// What cannot make a submission, refused before anything is written or submitted.
fn check(options: &SubmitOptions) -> Result<(), SlurmError> {
    scheduler::check(&options.eval)?;
    if options.shards == 0 {
        return Err(SlurmError::Usage("--shards must be at least 1".into()));
    }
    if options.eval.shard.is_some() {
        return Err(SlurmError::Usage(
            "--shard is for one shard's run; eval submit runs every shard (--shards N)".into(),
        ));
    }
    if let Some(why) = script::refused(&options.sbatch_args) {
        return Err(SlurmError::Usage(why));
    }
    let out = options.eval.out.to_string_lossy();
    if out.contains('%') || out.contains('\n') {
        return Err(SlurmError::Usage(format!(
            "--out {out:?}: Slurm reads % in an output file's name as a pattern; pick a folder without % or a newline"
        )));
    }
    Ok(())
}

/// The command's `run_start`: the whole evaluation's tasks, and the attempts its shards
/// have still to run.
fn start_event(options: &EvalOptions, tasks: usize, to_run: usize) -> Event {
    Event::RunStart {
        schema: events::SCHEMA,
        out: options.out.display().to_string(),
        tasks,
        attempts: options.attempts,
        to_run,
        jobs: options.jobs,
        agent: match options.agent {
            AgentKind::Model => "model",
            AgentKind::Oracle => "oracle",
        }
        .into(),
        model: options.model_label(),
    }
}

/// Sets with no task: nothing submitted, and nothing to merge.
fn empty(options: &EvalOptions, load_problems: usize) -> Merged {
    Merged {
        report: Report {
            summary: results::summarize(&[], &options.model_label(), ""),
            unfinished: 0,
            tasks: 0,
            load_problems,
        },
        shards: Vec::new(),
        model: options.model_label(),
        attempts: options.attempts,
        out: options.out.clone(),
    }
}

/// Arrays an earlier command submitted for this split whose elements are still queued or
/// running: `(job, shard)` for each such element.
async fn still_running(logs: &Path, of: u32) -> Result<Vec<(String, Shard)>, SlurmError> {
    let mut running = Vec::new();
    for record in read_jobs(logs).jobs.iter().filter(|j| j.of == of) {
        let Some(elements) = queue::elements(&record.job).await? else {
            continue;
        };
        for k in &record.shards {
            if elements.get(k).is_some_and(|e| !e.ended()) {
                say(&format!(
                    "shard {k}/{of} is still in Slurm's queue as job {}_{k}: following it, not submitting it again",
                    record.job
                ));
                running.push((record.job.clone(), Shard { index: *k, of }));
            }
        }
    }
    Ok(running)
}

fn read_jobs(logs: &Path) -> Jobs {
    std::fs::read(logs.join("jobs.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Writes the job script and submits `shards` as one array; the job's id.
async fn submit_array(
    options: &SubmitOptions,
    out: &Path,
    logs: &Path,
    shards: &[u32],
    events: &dyn EventSink,
) -> Result<String, SlurmError> {
    let of = options.shards;
    let cwd = std::env::current_dir().map_err(io("find", Path::new(".")))?;
    let path = logs.join(format!("shards-of-{of}.sh"));
    let text = script::text(
        &options.runner,
        &options.run_args,
        of,
        &cwd,
        &script::carried(std::env::vars_os()),
    );
    runner_workspace::write_file(&path, &text).map_err(io("write", &path))?;
    let list = queue::array_list(shards);
    let mut args: Vec<OsString> = vec![
        "--job-name=runner-eval".into(),
        format!("--array={list}").into(),
        with("--output=", &logs.join("%A-%a.out")),
        with("--error=", &logs.join("%A-%a.err")),
        with("--chdir=", &cwd),
        "--export=ALL".into(),
    ];
    args.extend(options.sbatch_args.iter().cloned());
    args.push(path.clone().into());
    let job = queue::sbatch(&args).await?;
    let mut jobs = read_jobs(logs);
    jobs.jobs.push(JobRecord {
        job: job.clone(),
        of,
        shards: shards.to_vec(),
        submitted_unix_s: results::unix_now(),
    });
    let jobs_path = logs.join("jobs.json");
    let bytes = serde_json::to_vec_pretty(&jobs).map_err(|e| io("encode", &jobs_path)(e.into()))?;
    runner_workspace::write_file(&jobs_path, &bytes).map_err(io("write", &jobs_path))?;
    say(&format!(
        "submitted shards {list} of {of} as Slurm job {job} ({}); results in {}",
        path.display(),
        out.display()
    ));
    events.emit(&Event::Submitted {
        job: job.clone(),
        shards: shards.to_vec(),
        of,
        script: path.display().to_string(),
    });
    Ok(job)
}

/// `--flag=` followed by a path, as one argument.
fn with(flag: &str, path: &Path) -> OsString {
    let mut arg = OsString::from(flag);
    arg.push(path.as_os_str());
    arg
}

/// A line of the command's own on the terminal; it carries task ids, paths and what
/// Slurm printed, so it is escaped.
fn say(text: &str) {
    eprintln!("runner: {}", runner_display::escape(text));
}
