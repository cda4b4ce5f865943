//! What an evaluation reports as it goes, for a harness to read: one [`Event`] at a time to
//! an [`EventSink`]. `runner eval run --json` writes them to stdout as JSON lines; the
//! terminal's own lines (progress, reasons, load problems) go to stderr either way.
//!
//! The shape is an interface: every event has a `type`, as `runner run --json`'s events
//! do, and the run's first event says which [`SCHEMA`] the stream follows. A field may be
//! added without a new schema number; one renamed, removed or changed in meaning takes one.
//! docs/EVALUATIONS.md lists the events.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::results::{Summary, TaskResult};
use runner_agent::events::{JsonLines, NoEvents};
use runner_llm::Usage;

/// The version of the event stream's shape, in [`Event::RunStart`].
pub const SCHEMA: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// First, once the task sets are read and the engines reached.
    RunStart {
        schema: u32,
        /// The output folder (`--out`).
        out: String,
        /// Tasks in the sets, those that cannot run included.
        tasks: usize,
        /// Attempts per task (`--attempts`).
        attempts: u32,
        /// Attempts this run starts: the others finished in an earlier run of the same
        /// folder, or belong to tasks that cannot run.
        to_run: usize,
        jobs: usize,
        /// `model` (runner's own loop) or `oracle` (the tasks' solutions).
        agent: String,
        /// `provider/model`, or `oracle`.
        model: String,
    },
    /// A task that cannot run (its line or folder is wrong), or a set that holds no task.
    /// Sent after `run_start`; the terminal says the same as soon as it is found.
    LoadProblem {
        /// The task file, or the task's folder (or its `task.toml`).
        file: String,
        /// 1-based, where the file has lines and the problem is on one; else null.
        line: Option<usize>,
        /// The task's id (its `result.json` says `infra_error`); null for a set that
        /// holds no task.
        task: Option<String>,
        message: String,
    },
    AttemptStart {
        task: String,
        attempt: u32,
    },
    /// The try failed for the infrastructure's reasons and runs again.
    AttemptRetry {
        task: String,
        attempt: u32,
        /// This retry's number, from 1.
        retry: u32,
        /// Retries allowed.
        of: u32,
        reason: String,
    },
    /// A Harbor task's image, made ahead of its attempts (every task's image is built
    /// before and alongside the attempts): one per task folder and engine, as it is made.
    Image {
        /// `runner-task:<hash>`, or the task's `docker_image`; null when it could not be made.
        image: Option<String>,
        /// The task's folder.
        task_dir: String,
        /// True when built (or pulled) in this run; false when the engine had it.
        built: bool,
        /// How long it took to build, pull or find.
        seconds: f64,
        /// The engine it is on, when the run has more than one.
        engine: Option<String>,
        /// Why it could not be made (each attempt of the task tries again).
        error: Option<String>,
    },
    /// One phase of the attempt that counts (the last try's), sent when the attempt ends,
    /// before its `attempt_end`, in the order they ran.
    Phase {
        task: String,
        attempt: u32,
        /// build (Harbor tasks), setup (tasks with a setup command), agent, verify.
        phase: String,
        seconds: f64,
    },
    AttemptEnd {
        task: String,
        attempt: u32,
        /// resolved, unresolved, agent_error, timeout, infra_error.
        status: String,
        /// null when no verdict was taken.
        reward: Option<f64>,
        /// Why it was not resolved, in a line; null when it was.
        reason: Option<String>,
        /// The phase that ended the attempt early (prepare, build, setup, agent, verify).
        phase: Option<String>,
        tokens: Usage,
        /// US dollars, where the config gives the model's price.
        cost_usd: Option<f64>,
        seconds: f64,
        /// Infrastructure failures retried before this end.
        retries: u32,
        /// The attempt's `result.json`.
        result: String,
        /// The attempt's folder: its logs, transcript and diff.
        logs: String,
    },
    /// `eval submit`: shards handed to the batch engine as one job array.
    Submitted {
        /// The engine's id of the array (Slurm's array job id).
        job: String,
        /// The shards it runs (the array's indices), of `of`.
        shards: Vec<u32>,
        of: u32,
        /// The job script.
        script: String,
    },
    /// `eval submit` (as a shard's job ends, or at the start for a shard finished before)
    /// and `eval merge`: one shard as its folder stands.
    Shard {
        shard: u32,
        of: u32,
        /// `complete` (every attempt has a result), `half_written` (some have none: cut
        /// short, or still running elsewhere) or `missing` (no folder, or no record in it).
        state: String,
        /// Attempts the shard plans (null when missing), and those with a result.
        attempts: Option<usize>,
        finished: usize,
        /// The shard's folder.
        folder: String,
        /// What the batch engine said of the shard's job (`COMPLETED`, `FAILED`,
        /// `CANCELLED`, …), when this command followed it.
        job_state: Option<String>,
        exit_code: Option<i32>,
        /// What is missing, for a shard that is not complete.
        message: Option<String>,
    },
    /// Last: the summary of every result in the output folder, and the exit status.
    RunEnd {
        summary: Summary,
        /// Attempts a stop left unrun (a rerun of the same command runs them).
        unfinished: usize,
        load_problems: usize,
        exit_code: u8,
    },
    /// The run could not start or go on (no model, an output folder of another run, no
    /// engine): the stream's last event, its code the exit status.
    Error {
        code: u8,
        message: String,
    },
}

impl Event {
    /// The end of an attempt, from its result in `dir`.
    pub fn attempt_end(r: &TaskResult, dir: &Path) -> Event {
        Event::AttemptEnd {
            task: r.id.clone(),
            attempt: r.attempt,
            status: r.status.name().into(),
            reward: r.reward,
            reason: r.reason(),
            phase: r.phase.clone(),
            tokens: r.usage,
            cost_usd: r.cost_usd,
            seconds: r.timings.total_ms as f64 / 1000.0,
            retries: r.infra_retries,
            result: dir.join("result.json").display().to_string(),
            logs: dir.display().to_string(),
        }
    }

    /// The phases the attempt reached, with their seconds, from its timings: those past the
    /// phase that ended it early did not run. `harbor`: it had an image to build; `setup`:
    /// its task has a setup command.
    pub fn phases(r: &TaskResult, harbor: bool, setup: bool) -> Vec<Event> {
        const ORDER: [&str; 5] = ["prepare", "build", "setup", "agent", "verify"];
        let rank = |p: &str| ORDER.iter().position(|o| *o == p);
        // An unknown phase name ("load") ended it before anything ran.
        let reached = match r.phase.as_deref() {
            None => ORDER.len(),
            Some(p) => rank(p).map_or(0, |i| i + 1),
        };
        let t = &r.timings;
        [
            ("build", harbor, t.build_ms),
            ("setup", setup, t.setup_ms),
            ("agent", true, t.agent_ms),
            ("verify", true, t.verify_ms),
        ]
        .into_iter()
        .filter(|(name, applies, _)| *applies && rank(name).is_some_and(|i| i < reached))
        .map(|(name, _, ms)| Event::Phase {
            task: r.id.clone(),
            attempt: r.attempt,
            phase: name.into(),
            seconds: ms as f64 / 1000.0,
        })
        .collect()
    }
}

pub trait EventSink: Send + Sync {
    fn emit(&self, event: &Event);
}

/// Events go nowhere: the terminal's lines are all there is. The sink is the agent's
/// (one type for every event stream).
impl EventSink for NoEvents {
    fn emit(&self, _event: &Event) {}
}

/// `--json`: one event per line, flushed per line so a harness reading the pipe sees each
/// attempt when it ends, not when the run does. The writer is the agent's (`runner run
/// --json` writes its events the same way); task ids, reasons and messages are the tasks'
/// words, and it leaves nothing a terminal acts on raw.
impl<W: Write + Send> EventSink for JsonLines<W> {
    fn emit(&self, event: &Event) {
        self.line(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Status;

    fn names(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Event::Phase { phase, .. } => phase.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// A whole attempt has each of its phases; one ended early has those up to the one
    /// that ended it; a task that never ran has none.
    #[test]
    fn phases_stop_at_the_one_that_ended_the_attempt() {
        let mut r = TaskResult::new("t", 1, "oracle".into());
        r.timings.build_ms = 1500;
        r.timings.agent_ms = 250;
        assert_eq!(
            names(&Event::phases(&r, true, false)),
            ["build", "agent", "verify"]
        );
        assert_eq!(
            names(&Event::phases(&r, false, true)),
            ["setup", "agent", "verify"]
        );
        let Event::Phase { seconds, .. } = &Event::phases(&r, true, false)[0] else {
            unreachable!()
        };
        assert_eq!(*seconds, 1.5);
        r.status = Status::InfraError;
        r.phase = Some("build".into());
        assert_eq!(names(&Event::phases(&r, true, false)), ["build"]);
        r.phase = Some("agent".into());
        assert_eq!(
            names(&Event::phases(&r, true, true)),
            ["build", "setup", "agent"]
        );
        r.phase = Some("load".into());
        assert!(Event::phases(&r, true, true).is_empty());
    }

    /// Each event is one line with its `type`, and a task's words cannot move a terminal's
    /// cursor through it.
    #[test]
    fn json_lines_are_one_event_each_with_a_type() {
        let sink = JsonLines::new(Vec::new());
        sink.emit(&Event::AttemptStart {
            task: "t\x1b[2J".into(),
            attempt: 2,
        });
        sink.emit(&Event::Error {
            code: 2,
            message: "no model".into(),
        });
        let text = String::from_utf8(sink.into_inner()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["type"], "attempt_start");
        assert_eq!(lines[0]["task"], "t\x1b[2J");
        assert!(!text.contains('\x1b'), "{text:?}");
        assert_eq!(
            lines[1],
            serde_json::json!({"type": "error", "code": 2, "message": "no model"})
        );
    }
}
