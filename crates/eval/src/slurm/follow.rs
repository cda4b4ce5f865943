//! Following a job array: each element's state from `scontrol`, its events as its shard
//! writes them (its standard output, a file on the shared disk), and each shard's end
//! as its element's does.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{SlurmError, queue, say};
use crate::events::{Event, EventSink};
use crate::merge;
use crate::shard::Shard;

/// One element followed: the shard it runs, in which job, and what has been read of it.
pub struct Followed {
    pub job: String,
    pub shard: Shard,
    pub folder: PathBuf,
    state: Option<String>,
    tail: Tail,
    err: PathBuf,
    ended: bool,
}

impl Followed {
    /// The element of `job` that runs `shard`, whose files are in `logs`.
    pub fn new(job: &str, shard: Shard, out: &Path, logs: &Path) -> Followed {
        let name = |ext: &str| logs.join(format!("{job}-{}.{ext}", shard.index));
        Followed {
            job: job.to_string(),
            shard,
            folder: shard.folder(out),
            state: None,
            tail: Tail::new(name("out")),
            err: name("err"),
            ended: false,
        }
    }
}

/// Follows `elements` until each has ended, passing their attempts' events on as they
/// come and a `shard` event as each ends. `stop`: cancel every job once, then follow the
/// elements to their end (a cancelled shard cleans up what it ran before it exits).
pub async fn follow(
    elements: &mut [Followed],
    poll: Duration,
    stop: &CancellationToken,
    events: &dyn EventSink,
) {
    let mut cancelled = false;
    let mut failing: Option<String> = None;
    loop {
        // A controller that does not answer for a while (a restart, a failover) is said
        // once and asked again: the shards run on without it.
        match states(elements).await {
            Ok(states) => {
                failing = None;
                for e in elements.iter_mut().filter(|e| !e.ended) {
                    e.tail.pass_on(e.shard, events);
                    if let Some(now) = states.get(&e.job) {
                        let element = now.as_ref().and_then(|s| s.get(&e.shard.index));
                        update(e, element, now.is_none(), events);
                    }
                }
            }
            Err(e) => {
                let said = e.to_string();
                if failing.as_ref() != Some(&said) {
                    say(&format!("{said} (asking again)"));
                }
                failing = Some(said);
            }
        }
        if elements.iter().all(|e| e.ended) {
            return;
        }
        if stop.is_cancelled() && !cancelled {
            cancelled = true;
            cancel(elements).await;
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = stop.cancelled(), if !cancelled => {}
        }
    }
}

/// Each job's elements, as `scontrol` has them (`None`: the job is gone).
async fn states(
    elements: &[Followed],
) -> Result<BTreeMap<String, Option<BTreeMap<u32, queue::Element>>>, SlurmError> {
    let mut states = BTreeMap::new();
    for e in elements.iter().filter(|e| !e.ended) {
        if !states.contains_key(&e.job) {
            states.insert(e.job.clone(), queue::elements(&e.job).await?);
        }
    }
    Ok(states)
}

/// Cancels every job of `elements` that still runs something.
async fn cancel(elements: &[Followed]) {
    let mut jobs: Vec<&str> = elements
        .iter()
        .filter(|e| !e.ended)
        .map(|e| e.job.as_str())
        .collect();
    jobs.sort();
    jobs.dedup();
    for job in jobs {
        say(&format!(
            "cancelling Slurm job {job} (scancel {job}); its shards stop and clean up"
        ));
        if let Err(e) = queue::scancel(job).await {
            say(&e.to_string());
        }
    }
}

/// Takes in what Slurm says of `e` now (`gone`: Slurm no longer knows its job; an element
/// missing from a job Slurm knows has ended too); says a change of state, and its end.
fn update(e: &mut Followed, now: Option<&queue::Element>, gone: bool, events: &dyn EventSink) {
    let state = now.map(|n| n.state.clone());
    if state != e.state && state.is_some() {
        let st = state.as_deref().unwrap_or("");
        if !now.is_some_and(queue::Element::ended) {
            say(&format!(
                "shard {} (job {}_{}): {st}",
                e.shard, e.job, e.shard.index
            ));
        }
        e.state = state;
    }
    let ended = gone || now.is_none_or(queue::Element::ended);
    if !ended {
        return;
    }
    e.ended = true;
    e.tail.pass_on(e.shard, events);
    let report = merge::shard_report(e.shard, &e.folder);
    let job_state = e
        .state
        .clone()
        .unwrap_or_else(|| "GONE (no longer known to Slurm)".into());
    let exit = now.and_then(|n| n.exit);
    events.emit(&report.event(Some((&job_state, exit))));
    let exit_said = exit.map(|c| format!(", exit {c}")).unwrap_or_default();
    let how = match report.problem() {
        None => format!(
            "{} of {} attempts have a result",
            report.finished,
            report.attempts.unwrap_or(0)
        ),
        Some(problem) => problem,
    };
    say(&format!(
        "shard {} (job {}_{}) ended: {job_state}{exit_said}: {how}",
        e.shard, e.job, e.shard.index
    ));
    if report.problem().is_some() {
        for line in last_lines(&e.err, 5) {
            say(&format!("  {}: {line}", e.err.display()));
        }
    }
}

/// The last `n` lines of the file at `path` (at most 64 KiB of it read).
fn last_lines(path: &Path, n: usize) -> Vec<String> {
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = file.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// A shard's event stream as its file grows: whole lines only, each read once.
struct Tail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl Tail {
    fn new(path: PathBuf) -> Tail {
        Tail {
            path,
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// The lines added since the last call, parsed; the attempts' events are passed on
    /// (the shard's own start and end are not: the command's stream has one of each).
    fn pass_on(&mut self, shard: Shard, events: &dyn EventSink) {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return;
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        let Ok(n) = file.read_to_end(&mut buf) else {
            return;
        };
        self.offset += n as u64;
        self.partial.extend_from_slice(&buf);
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            match serde_json::from_slice::<Event>(&line) {
                Ok(
                    event @ (Event::AttemptStart { .. }
                    | Event::AttemptRetry { .. }
                    | Event::Phase { .. }
                    | Event::AttemptEnd { .. }),
                ) => {
                    if let Event::AttemptEnd {
                        task,
                        attempt,
                        status,
                        reason: Some(why),
                        ..
                    } = &event
                    {
                        say(&format!(
                            "shard {shard}: {task} attempt {attempt}: {status}: {why}"
                        ));
                    }
                    events.emit(&event);
                }
                Ok(Event::Error { message, .. }) => {
                    say(&format!("shard {shard}: {message}"));
                }
                _ => {}
            }
        }
    }
}
