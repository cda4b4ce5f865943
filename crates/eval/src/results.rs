//! What an evaluation leaves on disk, and the summary made from it. The disk is the
//! truth: every file is written whole or not at all, a task's `result.json` is written
//! last (its presence means the attempt finished), and the summary is always recomputed
//! from the result files, so a resumed run and an uninterrupted one agree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::EvalError;
use crate::llm::Usage;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Resolved,
    Unresolved,
    /// The agent's own doing ended the attempt (it brought its sandbox down).
    AgentError,
    Timeout,
    /// Not the agent's fault: a broken task, a failed build, a dying engine, a provider
    /// that kept failing.
    InfraError,
}

impl Status {
    pub const ALL: [Status; 5] = [
        Status::Resolved,
        Status::Unresolved,
        Status::AgentError,
        Status::Timeout,
        Status::InfraError,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Status::Resolved => "resolved",
            Status::Unresolved => "unresolved",
            Status::AgentError => "agent_error",
            Status::Timeout => "timeout",
            Status::InfraError => "infra_error",
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timings {
    /// Building the task's image (Harbor tasks; 0 when it was already built).
    #[serde(default)]
    pub build_ms: u64,
    pub setup_ms: u64,
    pub agent_ms: u64,
    pub verify_ms: u64,
    pub total_ms: u64,
}

/// `tasks/<id>/result.json` (or `tasks/<id>/<attempt>/result.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskResult {
    pub id: String,
    pub attempt: u32,
    pub status: Status,
    /// 1 resolved, 0 not; absent when no verdict was taken.
    pub reward: Option<f64>,
    /// Every reward the verifier wrote, when it wrote a map (`reward.json`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rewards: BTreeMap<String, f64>,
    /// The phase that ended the attempt early: prepare, setup, agent, verify.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub model: String,
    /// The commit the attempt started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// How the agent's run ended (finished, max_steps, refused, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    pub steps: u32,
    pub usage: Usage,
    pub timings: Timings,
    /// The engine the attempt ran on, when the evaluation had more than one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// Infrastructure failures retried before this result.
    #[serde(default)]
    pub infra_retries: u32,
    /// Why there is no `diff.patch`, if there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff_error: Option<String>,
    /// How the verifier's run ended, for an attempt it did not resolve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifier: Option<VerifierEnd>,
    /// The verifier's connections through the proxy, one line each (`allow pypi.org:443 (…)`,
    /// `deny example.com:443: …`); also in `verifier-network.jsonl` in full.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verifier_network: Vec<String>,
    /// A multi-step task's steps, in the order they ran, each with its rewards (empty when
    /// its verifier left none); the attempt's `reward` is their roll-up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_rewards: Vec<(String, BTreeMap<String, f64>)>,
    /// What the model's tokens cost in US dollars, where the config gives the model's
    /// price (`[provider.NAME.prices]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// How a verifier's run ended: its exit status and the last lines it printed, where the
/// reason an attempt is not resolved usually is (a failed assertion, a missing tool).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VerifierEnd {
    /// `None`: it was killed (its time ran out) or its status could not be read.
    pub exit: Option<i64>,
    /// Its last lines: at most [`TAIL_LINES`] of them and [`TAIL_BYTES`] bytes.
    pub tail: String,
}

/// How much of the verifier's output a result keeps (all of it is in `verify.log`).
pub const TAIL_LINES: usize = 12;
pub const TAIL_BYTES: usize = 2000;

impl VerifierEnd {
    /// The end of `log` (lossy UTF-8), its trailing blank lines dropped.
    pub fn of(exit: Option<i64>, log: &[u8]) -> VerifierEnd {
        let text = String::from_utf8_lossy(log);
        let lines: Vec<&str> = text.trim_end().lines().collect();
        let mut tail = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
        if tail.len() > TAIL_BYTES {
            let mut cut = tail.len() - TAIL_BYTES;
            while !tail.is_char_boundary(cut) {
                cut += 1;
            }
            tail = format!("…{}", &tail[cut..]);
        }
        VerifierEnd { exit, tail }
    }

    /// One line: the exit status and the last line the verifier printed itself (not the
    /// `[test.sh exited with N]` runner adds to the log).
    pub fn summary(&self) -> String {
        let last = self
            .tail
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with("[test.sh exited with"));
        let status = match self.exit {
            Some(code) => format!("the verifier exited {code}"),
            None => "the verifier was stopped".to_string(),
        };
        match last {
            Some(line) => format!("{status}: {line}"),
            None => format!("{status} and printed nothing"),
        }
    }
}

impl TaskResult {
    /// Why the attempt was not resolved, in a line: its error, else how the verifier
    /// ended; `None` for a resolved attempt.
    pub fn reason(&self) -> Option<String> {
        if self.status == Status::Resolved {
            return None;
        }
        self.error
            .clone()
            .or_else(|| self.verifier.as_ref().map(VerifierEnd::summary))
    }

    pub fn new(id: &str, attempt: u32, model: String) -> TaskResult {
        TaskResult {
            id: id.to_string(),
            attempt,
            status: Status::Unresolved,
            reward: None,
            rewards: BTreeMap::new(),
            phase: None,
            error: None,
            model,
            base: None,
            end: None,
            steps: 0,
            usage: Usage::default(),
            timings: Timings::default(),
            engine: None,
            infra_retries: 0,
            diff_error: None,
            verifier: None,
            verifier_network: Vec::new(),
            step_rewards: Vec::new(),
            cost_usd: None,
        }
    }
}

/// The folder of one attempt: `tasks/<id>/`, or `tasks/<id>/<n>/` when a task has more
/// than one.
pub fn attempt_dir(out: &Path, id: &str, attempt: u32, attempts: u32) -> PathBuf {
    let task = out.join("tasks").join(id);
    if attempts > 1 {
        task.join(attempt.to_string())
    } else {
        task
    }
}

/// `run.json`: what the folder's results were made with. A rerun must match it, or its
/// results would be mixed with another run's (and the folder layout depends on it).
#[derive(Debug, Serialize, Deserialize)]
struct RunRecord {
    attempts: u32,
    model: String,
}

/// Takes `out` for a run with these settings, or says why it cannot.
pub fn claim(out: &Path, attempts: u32, model: &str) -> Result<(), EvalError> {
    let path = out.join("run.json");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let old: RunRecord = serde_json::from_str(&text)
            .map_err(|e| EvalError::NotOurs(format!("{} is not runner's: {e}", path.display())))?;
        if old.attempts != attempts || old.model != model {
            return Err(EvalError::NotOurs(format!(
                "{} holds a run of {} with --attempts {}; rerun with the same, or pick another --out",
                out.display(),
                old.model,
                old.attempts
            )));
        }
        return Ok(());
    }
    let text = serde_json::to_vec_pretty(&RunRecord {
        attempts,
        model: model.to_string(),
    })
    .expect("a run record is plain data");
    crate::workspace::write_file(&path, &text).map_err(EvalError::io("write", &path))
}

/// The attempts per task the folder was run with.
pub fn attempts_of(out: &Path, results: &[TaskResult]) -> u32 {
    std::fs::read_to_string(out.join("run.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<RunRecord>(&t).ok())
        .map(|r| r.attempts)
        .unwrap_or_else(|| results.iter().map(|r| r.attempt).max().unwrap_or(1))
}

pub fn read_result(dir: &Path) -> Option<TaskResult> {
    let text = std::fs::read_to_string(dir.join("result.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub tasks: usize,
    pub attempts: usize,
    /// Attempts per status, every status present.
    pub counts: BTreeMap<String, usize>,
    /// Resolved attempts over attempts with a verdict or a failure of the agent's own
    /// (infrastructure failures are not the agent's and are left out).
    pub resolved_rate: f64,
    /// pass@k for each k up to the attempts per task (unbiased estimator).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pass_at: BTreeMap<String, f64>,
    pub usage: Usage,
    pub agent_ms: u64,
    /// Building task images, and verifying, summed over the attempts.
    #[serde(default)]
    pub build_ms: u64,
    #[serde(default)]
    pub verify_ms: u64,
    pub total_ms: u64,
    /// The attempts' cost where their model's price is known; `None` where none is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    pub model: String,
    pub runner_version: String,
    pub task_set_hash: String,
    /// Every attempt that was not resolved, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_resolved: Vec<NotResolved>,
}

/// An attempt that was not resolved, in the summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotResolved {
    pub id: String,
    pub attempt: u32,
    pub status: String,
    pub reason: String,
}

/// Everything finished under `out`, as results.
pub fn collect(out: &Path) -> Vec<TaskResult> {
    let mut results = Vec::new();
    let Ok(tasks) = std::fs::read_dir(out.join("tasks")) else {
        return results;
    };
    for task in tasks.flatten() {
        let dir = task.path();
        if let Some(r) = read_result(&dir) {
            results.push(r);
            continue;
        }
        if let Ok(attempts) = std::fs::read_dir(&dir) {
            results.extend(attempts.flatten().filter_map(|a| read_result(&a.path())));
        }
    }
    results.sort_by(|a, b| a.id.cmp(&b.id).then(a.attempt.cmp(&b.attempt)));
    results
}

pub fn summarize(results: &[TaskResult], model: &str, task_set_hash: &str) -> Summary {
    let mut counts: BTreeMap<String, usize> = Status::ALL
        .iter()
        .map(|s| (s.name().to_string(), 0))
        .collect();
    let mut usage = Usage::default();
    let (mut agent_ms, mut total_ms, mut build_ms, mut verify_ms) = (0, 0, 0, 0);
    let mut cost_usd: Option<f64> = None;
    let mut per_task: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for r in results {
        *counts.entry(r.status.name().to_string()).or_default() += 1;
        usage.add(&r.usage);
        agent_ms += r.timings.agent_ms;
        total_ms += r.timings.total_ms;
        build_ms += r.timings.build_ms;
        verify_ms += r.timings.verify_ms;
        if let Some(c) = r.cost_usd {
            *cost_usd.get_or_insert(0.0) += c;
        }
        // An attempt the infrastructure failed tells nothing about the agent: it is not
        // one of the n that pass@k draws from, as it is not in the resolved rate.
        let t = per_task.entry(&r.id).or_default();
        if r.status != Status::InfraError {
            t.0 += 1;
            t.1 += usize::from(r.status == Status::Resolved);
        }
    }
    let judged = results
        .iter()
        .filter(|r| r.status != Status::InfraError)
        .count();
    let resolved = counts["resolved"];
    let judged_tasks: Vec<(usize, usize)> =
        per_task.values().copied().filter(|t| t.0 > 0).collect();
    let k_max = judged_tasks.iter().map(|t| t.0).min().unwrap_or(0);
    let most = results.iter().map(|r| r.attempt).max().unwrap_or(1);
    let mut pass_at = BTreeMap::new();
    if most > 1 && k_max >= 1 {
        for k in 1..=k_max {
            let mean = judged_tasks
                .iter()
                .map(|&(n, c)| pass_at_k(n, c, k))
                .sum::<f64>()
                / judged_tasks.len() as f64;
            pass_at.insert(k.to_string(), round(mean));
        }
    }
    Summary {
        tasks: per_task.len(),
        attempts: results.len(),
        counts,
        resolved_rate: if judged == 0 {
            0.0
        } else {
            round(resolved as f64 / judged as f64)
        },
        pass_at,
        usage,
        agent_ms,
        build_ms,
        verify_ms,
        total_ms,
        cost_usd,
        model: model.to_string(),
        runner_version: env!("CARGO_PKG_VERSION").to_string(),
        task_set_hash: task_set_hash.to_string(),
        not_resolved: results
            .iter()
            .filter(|r| r.status != Status::Resolved)
            .map(|r| NotResolved {
                id: r.id.clone(),
                attempt: r.attempt,
                status: r.status.name().to_string(),
                reason: r.reason().unwrap_or_default(),
            })
            .collect(),
    }
}

/// The chance that at least one of `k` attempts drawn from `n` (of which `c` resolved)
/// resolved: 1 − C(n−c, k) / C(n, k).
fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    if n - c < k {
        return 1.0;
    }
    let mut miss = 1.0;
    for i in (n - c + 1)..=n {
        miss *= 1.0 - k as f64 / i as f64;
    }
    1.0 - miss
}

fn round(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// `predictions.jsonl` in SWE-bench's format, one line per task (its first resolved
/// attempt's patch, else its first attempt's), written into `path` (through a file beside
/// it, renamed over it when whole). Each patch is copied in pieces: a patch of a gigabyte
/// costs no gigabyte of memory.
pub fn write_predictions(
    path: &Path,
    out: &Path,
    results: &[TaskResult],
    model: &str,
    attempts: u32,
) -> std::io::Result<()> {
    use std::io::Write;
    let mut chosen: BTreeMap<&str, &TaskResult> = BTreeMap::new();
    for r in results {
        let e = chosen.entry(&r.id).or_insert(r);
        if e.status != Status::Resolved && r.status == Status::Resolved {
            *e = r;
        }
    }
    let part = path.with_extension("jsonl.part");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&part)?);
    for (id, r) in chosen {
        let patch = attempt_dir(out, id, r.attempt, attempts).join("diff.patch");
        write!(
            file,
            "{{\"instance_id\":{},\"model_name_or_path\":{},\"model_patch\":\"",
            serde_json::to_string(id)?,
            serde_json::to_string(model)?
        )?;
        // A patch that is not UTF-8 (or not there) is an empty one, as it always was.
        if is_utf8(&patch) {
            copy_escaped(&patch, &mut file)?;
        }
        file.write_all(b"\"}\n")?;
    }
    let file = file.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    std::fs::rename(&part, path)
}

/// Whether the file at `path` is there and UTF-8 throughout (read a piece at a time).
fn is_utf8(path: &Path) -> bool {
    let mut ok = true;
    let read = each_str(path, &mut |_| Ok(()), &mut ok);
    read.is_ok() && ok
}

/// The file at `path` as the inside of a JSON string, into `to`.
fn copy_escaped(path: &Path, to: &mut impl std::io::Write) -> std::io::Result<()> {
    let mut ok = true;
    each_str(
        path,
        &mut |text| {
            // Through `Value`'s own `Display`: the escaping runs as serde_json was built
            // (optimised), not as a generic made here, which is many times slower in a
            // debug build over a gigabyte.
            let quoted = serde_json::Value::String(text.to_owned()).to_string();
            to.write_all(&quoted.as_bytes()[1..quoted.len() - 1])
        },
        &mut ok,
    )
}

/// The file at `path` as text, a piece at a time, to `each`; a character cut by a piece's
/// end waits for the next. `ok` turns false at the first byte that is not UTF-8 (and the
/// reading stops there).
fn each_str(
    path: &Path,
    each: &mut dyn FnMut(&str) -> std::io::Result<()>,
    ok: &mut bool,
) -> std::io::Result<()> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 256 << 10];
    let mut held = 0;
    loop {
        let n = file.read(&mut buf[held..])?;
        let filled = held + n;
        let valid = match std::str::from_utf8(&buf[..filled]) {
            Ok(_) => filled,
            Err(e) if e.error_len().is_none() && n > 0 => e.valid_up_to(),
            Err(_) => {
                *ok = false;
                return Ok(());
            }
        };
        let text = std::str::from_utf8(&buf[..valid]).unwrap_or_default();
        each(text)?;
        if n == 0 {
            return Ok(());
        }
        buf.copy_within(valid..filled, 0);
        held = filled - valid;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streamed lines are the JSON a whole-file encoder writes: characters cut by a
    /// piece's end, quotes, controls and newlines come out whole; a patch that is not
    /// UTF-8, or none, is empty.
    #[test]
    fn predictions_are_written_in_pieces_and_read_back_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path();
        let mut patch = "x".repeat((256 << 10) - 1);
        patch.push_str("é\"\\\n\u{1b}€🎉 end");
        let mk = |id: &str, status| {
            let mut r = TaskResult::new(id, 1, "m".into());
            r.status = status;
            r
        };
        let results = [
            mk("big", Status::Resolved),
            mk("latin1", Status::Unresolved),
            mk("none", Status::AgentError),
        ];
        for (id, body) in [("big", patch.as_bytes()), ("latin1", b"caf\xe9".as_slice())] {
            let dir = attempt_dir(out, id, 1, 1);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("diff.patch"), body).unwrap();
        }
        let path = out.join("predictions.jsonl");
        write_predictions(&path, out, &results, "m\"odel", 1).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["instance_id"], "big");
        assert_eq!(lines[0]["model_name_or_path"], "m\"odel");
        assert_eq!(lines[0]["model_patch"], patch.as_str());
        assert_eq!(lines[1]["model_patch"], "");
        assert_eq!(lines[2]["model_patch"], "");
        assert!(!out.join("predictions.jsonl.part").exists());
    }

    #[test]
    fn pass_at_k_matches_the_estimator() {
        assert_eq!(pass_at_k(3, 0, 1), 0.0);
        assert_eq!(pass_at_k(3, 3, 1), 1.0);
        assert!((pass_at_k(3, 1, 1) - 1.0 / 3.0).abs() < 1e-9);
        assert!((pass_at_k(3, 1, 2) - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(pass_at_k(3, 1, 3), 1.0);
    }

    #[test]
    fn infrastructure_failures_do_not_count_against_the_agent() {
        let mk = |id: &str, s: Status| {
            let mut r = TaskResult::new(id, 1, "m".into());
            r.status = s;
            r
        };
        let s = summarize(
            &[
                mk("a", Status::Resolved),
                mk("b", Status::Unresolved),
                mk("c", Status::InfraError),
            ],
            "m",
            "h",
        );
        assert_eq!(s.counts["resolved"], 1);
        assert_eq!(s.counts["timeout"], 0);
        assert_eq!(s.resolved_rate, 0.5);
    }
}
