//! What an evaluation leaves on disk, and the summary made from it. The disk is the
//! truth: every file is written whole or not at all, a task's `result.json` is written
//! last (its presence means the attempt finished), and the summary is always recomputed
//! from the result files, so a resumed run and an uninterrupted one agree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::EvalError;
use super::harbor::RewardFile;
use runner_llm::Usage;

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
    /// What runner gave each phase of a Harbor attempt (each step's, in a multi-step
    /// task): the mode, what decided it, and the phase's connections.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<super::verifier_network::PhaseNetwork>,
    /// A multi-step task's steps, in the order they ran, each with its rewards (empty when
    /// its verifier left none); the attempt's `reward` is their roll-up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_rewards: Vec<(String, BTreeMap<String, f64>)>,
    /// What the model's tokens cost in US dollars, where the config gives the model's
    /// price (`[provider.NAME.prices]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// When the attempt began, in seconds since the Unix epoch (the report's run date;
    /// absent in results written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix_s: Option<u64>,
    /// The runner version that ran the attempt: a resumed run may mix versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_version: Option<String>,
    /// What the agent was asked, at most [`INSTRUCTION_BYTES`] of it, so that a report
    /// made after the task files moved can still show it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
}

/// How much of an instruction a result keeps (a task's instruction is the task author's
/// text, normally a few KiB; the rest is in the task's own files).
pub const INSTRUCTION_BYTES: usize = 64 * 1024;

/// How a verifier's run ended: its exit status and the last lines it printed, where the
/// reason an attempt is not resolved usually is (a failed assertion, a missing tool).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VerifierEnd {
    /// `None`: it was killed (its time ran out) or its status could not be read.
    pub exit: Option<i64>,
    /// Its last lines: at most [`TAIL_LINES`] of them and [`TAIL_BYTES`] bytes.
    pub tail: String,
    /// The last lines of its whole output that read as a failure (an assertion, a
    /// `FAILED` test, a missing command), at most [`FAILING_LINES`]: the cause is often
    /// printed well before the verifier's last line, which may be a bare `OK` or a
    /// summary. Empty in results written before it was kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<String>,
    /// The file a Harbor verifier wrote its rewards in, with what it held: a verifier that
    /// wrote 0 judged the work, and the reason must say so rather than read its silence as
    /// the cause. `None` for a verify command (its exit status decides), a multi-step
    /// task's roll-up, and results written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward_file: Option<RewardFile>,
}

impl RewardFile {
    /// `reward 0 to /logs/verifier/reward.txt`, or `rewards {…} to …/reward.json`.
    fn wrote(&self) -> String {
        let what = if self.path.ends_with(".json") {
            "rewards"
        } else {
            "reward"
        };
        format!("{what} {} to {}", self.text, self.path)
    }
}

/// How many failing lines a result keeps, each cut to [`FAILING_LINE_BYTES`].
pub const FAILING_LINES: usize = 6;
pub const FAILING_LINE_BYTES: usize = 300;

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
        let failing = failing_lines(&text);
        VerifierEnd {
            exit,
            tail,
            failing,
            reward_file: None,
        }
    }

    /// The failing lines: those kept, else (a result written before they were) the ones
    /// in the tail.
    pub fn failing_lines(&self) -> Vec<String> {
        if self.failing.is_empty() {
            failing_lines(&self.tail)
        } else {
            self.failing.clone()
        }
    }

    /// One line: the reward it wrote (quoting its file), the exit status and the line that
    /// best says why: the last assertion the verifier printed, else its last failing line,
    /// else its last line (never the `[test.sh exited with N]` runner adds to the log).
    pub fn summary(&self) -> String {
        let failing = self.failing_lines();
        let asserted = failing.iter().rev().find(|l| is_assertion(l));
        let last = asserted.or(failing.last()).map(String::as_str).or_else(|| {
            self.tail
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| !l.is_empty() && !is_ours(l))
        });
        let ended = match self.exit {
            Some(code) => format!("exited {code}"),
            None => "was stopped".to_string(),
        };
        let status = match &self.reward_file {
            Some(file) => format!("the verifier wrote {}; it {ended}", file.wrote()),
            None => format!("the verifier {ended}"),
        };
        match last {
            Some(line) => format!("{status}: {line}"),
            None => format!("{status} and printed nothing"),
        }
    }
}

/// The line runner appends to a verifier's log.
fn is_ours(line: &str) -> bool {
    line.starts_with("[test.sh exited with")
}

/// Whether a line reads as an assertion that failed (pytest's `E   assert …`, an
/// `AssertionError`, a `FAILED … - assert …` summary).
fn is_assertion(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    line.starts_with("E ") || lower.contains("assert")
}

/// Whether a line of a verifier's output reads as a failure. Words test runners print
/// when something fails (pytest, unittest, go test, cargo test, TAP, a shell).
fn is_failing(line: &str) -> bool {
    const WORDS: [&str; 14] = [
        "fail",
        "error",
        "assert",
        "traceback",
        "not ok",
        "not found",
        "no such file",
        "panicked",
        "exception",
        "expected",
        "mismatch",
        "denied",
        "timed out",
        "cannot",
    ];
    if is_ours(line) {
        return false;
    }
    let lower = line.to_ascii_lowercase();
    // A test that passed may be named for what it checks (`test_error_path PASSED`,
    // `ok 3 - fails on bad input`); a count of failures beside passes still counts.
    let passed = lower.contains("passed")
        || lower.starts_with("ok ")
        || lower.ends_with(" ok")
        || line.contains('✓');
    if passed && !lower.contains("failed") {
        return false;
    }
    line.starts_with("E ") || line.contains('✗') || WORDS.iter().any(|w| lower.contains(w))
}

/// The last [`FAILING_LINES`] lines of `text` that read as failures, trimmed and cut.
pub fn failing_lines(text: &str) -> Vec<String> {
    let mut found: Vec<String> = text
        .lines()
        .rev()
        .map(str::trim)
        .filter(|l| !l.is_empty() && is_failing(l))
        .take(FAILING_LINES)
        .map(|l| {
            let mut at = l.len().min(FAILING_LINE_BYTES);
            while !l.is_char_boundary(at) {
                at -= 1;
            }
            if at < l.len() {
                format!("{}…", &l[..at])
            } else {
                l.to_string()
            }
        })
        .collect();
    found.reverse();
    found
}

impl TaskResult {
    /// Why the attempt was not resolved, in a line; `None` for a resolved attempt. An
    /// attempt the verifier judged says how the verifier ended and what failed first, then
    /// the error made of its run (no reward file): "wrote neither reward.txt nor
    /// reward.json" alone hides the assertion that explains it. Otherwise the error, else
    /// how the verifier ended.
    pub fn reason(&self) -> Option<String> {
        if self.status == Status::Resolved {
            return None;
        }
        match (&self.error, &self.verifier) {
            (Some(error), Some(v)) if self.status == Status::Unresolved => {
                Some(format!("{}; {error}", v.summary()))
            }
            (Some(error), _) => Some(error.clone()),
            (None, Some(v)) if !self.step_rewards.is_empty() => Some(format!(
                "the steps' rewards came to {}; {}",
                self.steps_said(),
                v.summary()
            )),
            (None, Some(v)) => Some(v.summary()),
            (None, None) => None,
        }
    }

    /// A multi-step attempt's reward and each step's: `0.5 (one: reward 1; two: reward 0)`.
    fn steps_said(&self) -> String {
        let steps: Vec<String> = self
            .step_rewards
            .iter()
            .map(|(name, rewards)| {
                let each: Vec<String> = rewards.iter().map(|(k, v)| format!("{k} {v}")).collect();
                let each = if each.is_empty() {
                    "none".to_string()
                } else {
                    each.join(", ")
                };
                format!("{name}: {each}")
            })
            .collect();
        let total = self
            .reward
            .map_or_else(|| "nothing".to_string(), |r| r.to_string());
        format!("{total} ({})", steps.join("; "))
    }

    /// Keeps `text` as the attempt's instruction, cut to [`INSTRUCTION_BYTES`].
    pub fn set_instruction(&mut self, text: &str) {
        let mut at = text.len().min(INSTRUCTION_BYTES);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        let mut kept = text[..at].to_string();
        if at < text.len() {
            kept.push_str("\n… (cut here; the whole instruction is in the task's files)");
        }
        self.instruction = Some(kept);
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
            network: Vec::new(),
            step_rewards: Vec::new(),
            cost_usd: None,
            started_unix_s: Some(unix_now()),
            runner_version: Some(env!("CARGO_PKG_VERSION").to_string()),
            instruction: None,
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
    /// Each run into the folder (the first, then every resume), oldest first: when it
    /// began, with which runner and settings. Absent in folders made before it was kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    runs: Vec<RunStart>,
}

/// One run into a results folder, as `run.json` keeps it and the report shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunStart {
    pub started_unix_s: u64,
    pub runner_version: String,
    /// The run's settings: what else, beside the tasks and the model, made its results.
    pub settings: BTreeMap<String, serde_json::Value>,
}

/// A resumed run's history is kept to this many runs (the first and the latest ones).
const RUNS_KEPT: usize = 50;

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The settings of `options` worth reading beside a run's results.
fn settings_of(options: &super::EvalOptions) -> BTreeMap<String, serde_json::Value> {
    use serde_json::json;
    let backend = options.backend.map(|b| format!("{b:?}").to_lowercase());
    let paths =
        |p: &[PathBuf]| -> Vec<String> { p.iter().map(|p| p.display().to_string()).collect() };
    [
        ("agent", json!(options.model_label())),
        ("task_sets", json!(paths(&options.task_sets))),
        ("attempts", json!(options.attempts)),
        ("jobs", json!(options.jobs)),
        ("sandbox", json!(backend)),
        ("profile", json!(options.profile)),
        ("image", json!(options.image)),
        ("runtime", json!(options.runtime)),
        (
            "config",
            json!(options.config.as_ref().map(|p| p.display().to_string())),
        ),
        (
            "timeouts_s",
            json!({
                "setup": options.timeouts.setup.as_secs(),
                "agent": options.timeouts.agent.as_secs(),
                "verify": options.timeouts.verify.as_secs(),
            }),
        ),
        ("timeout_multiplier", json!(options.timeout_multiplier)),
        ("max_steps", json!(options.max_steps)),
        ("infra_retries", json!(options.infra_retries)),
        ("docker_hosts", json!(options.docker_hosts)),
        ("rebuild", json!(options.rebuild)),
        ("build_network", json!(options.build_network)),
        ("shard", json!(options.shard.map(|s| s.to_string()))),
        (
            "agent_network",
            json!(format!("{:?}", options.agent_network)),
        ),
        (
            "verifier_network",
            json!(format!("{:?}", options.verifier_network)),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Takes `out` for a run with these options, or says why it cannot; the run is added to
/// the folder's history (`run.json`'s `runs`).
pub fn claim(out: &Path, options: &super::EvalOptions) -> Result<(), EvalError> {
    let (attempts, model) = (options.attempts, options.model_label());
    let path = out.join("run.json");
    let mut record = match std::fs::read_to_string(&path) {
        Ok(text) => {
            let old: RunRecord = serde_json::from_str(&text).map_err(|e| {
                EvalError::NotOurs(format!("{} is not runner's: {e}", path.display()))
            })?;
            if old.attempts != attempts || old.model != model {
                return Err(EvalError::NotOurs(format!(
                    "{} holds a run of {} with --attempts {}; rerun with the same, or pick another --out",
                    out.display(),
                    old.model,
                    old.attempts
                )));
            }
            old
        }
        Err(_) => RunRecord {
            attempts,
            model,
            runs: Vec::new(),
        },
    };
    record.runs.push(RunStart {
        started_unix_s: unix_now(),
        runner_version: env!("CARGO_PKG_VERSION").to_string(),
        settings: settings_of(options),
    });
    if record.runs.len() > RUNS_KEPT {
        record.runs.drain(1..record.runs.len() - RUNS_KEPT + 1);
    }
    let text =
        serde_json::to_vec_pretty(&record).map_err(|e| EvalError::io("write", &path)(e.into()))?;
    runner_workspace::write_file(&path, &text).map_err(EvalError::io("write", &path))
}

/// Writes `run.json` for a folder whose results were made elsewhere (a merge of shards):
/// the attempts and the model they were made with, and the runs that made them.
pub fn record_runs(
    out: &Path,
    attempts: u32,
    model: &str,
    runs: Vec<RunStart>,
) -> Result<(), EvalError> {
    let path = out.join("run.json");
    let record = RunRecord {
        attempts,
        model: model.to_string(),
        runs,
    };
    let text =
        serde_json::to_vec_pretty(&record).map_err(|e| EvalError::io("write", &path)(e.into()))?;
    runner_workspace::write_file(&path, &text).map_err(EvalError::io("write", &path))
}

/// The runs into the folder, oldest first (empty for a folder made before they were kept).
pub fn runs_of(out: &Path) -> Vec<RunStart> {
    std::fs::read_to_string(out.join("run.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<RunRecord>(&t).ok())
        .map(|r| r.runs)
        .unwrap_or_default()
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
    use crate::harbor::REWARD_TEXT_BYTES;

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

    /// The why names the failing assertion, not the verifier's last line ("OK") nor only
    /// the missing reward file; a verifier that printed no failure still gives its last
    /// line, as before.
    #[test]
    fn the_reason_quotes_the_failing_assertion() {
        let log = b"collected 3 items\ntests/test_x.py::test_error_path PASSED\nok 2 - fails on bad input\nE   assert 41 == 42\nFAILED tests/test_x.py::test_answer\n1 failed, 2 passed in 0.1s\nOK\n\n[test.sh exited with 1]\n";
        let end = VerifierEnd::of(Some(1), log);
        assert_eq!(
            end.failing,
            [
                "E   assert 41 == 42",
                "FAILED tests/test_x.py::test_answer",
                "1 failed, 2 passed in 0.1s"
            ]
        );
        assert_eq!(end.summary(), "the verifier exited 1: E   assert 41 == 42");
        let mut r = TaskResult::new("t", 1, "m".into());
        r.status = Status::Unresolved;
        r.phase = Some("verify".into());
        r.error =
            Some("the verifier wrote neither /logs/verifier/reward.txt nor reward.json".into());
        r.verifier = Some(end);
        assert_eq!(
            r.reason().unwrap(),
            "the verifier exited 1: E   assert 41 == 42; the verifier wrote neither /logs/verifier/reward.txt nor reward.json"
        );
        // Without a failing line, the last line the verifier printed.
        let plain = VerifierEnd::of(
            Some(4),
            b"PASS\npytest: command not found\n[test.sh exited with 4]\n",
        );
        assert_eq!(
            plain.summary(),
            "the verifier exited 4: pytest: command not found"
        );
        let quiet = VerifierEnd::of(Some(2), b"checking\nstill checking\n");
        assert_eq!(quiet.summary(), "the verifier exited 2: still checking");
        // A result written before `failing` was kept reads it from its tail.
        let old: VerifierEnd =
            serde_json::from_str(r#"{"exit": 1, "tail": "x\nAssertionError: 1 != 2\nOK"}"#)
                .unwrap();
        assert_eq!(
            old.summary(),
            "the verifier exited 1: AssertionError: 1 != 2"
        );
        // A timeout keeps its own words first.
        r.status = Status::Timeout;
        r.error = Some("verify ran past 60 s".into());
        assert_eq!(r.reason().unwrap(), "verify ran past 60 s");
    }

    /// A verifier that wrote reward 0 judged the work: the reason says so and quotes its
    /// file, beside the exit status and what it printed (here nothing, which alone would
    /// read as a verifier that did not run). A map in reward.json is quoted on one line.
    #[test]
    fn the_reason_quotes_the_reward_the_verifier_wrote() {
        let written = |path: &str, text: &str, exit: i64, log: &[u8]| {
            let mut r = TaskResult::new("t", 1, "m".into());
            r.reward = Some(0.0);
            r.verifier = Some(VerifierEnd {
                reward_file: Some(RewardFile::new(path, text)),
                ..VerifierEnd::of(Some(exit), log)
            });
            r.reason().unwrap()
        };
        assert_eq!(
            written("/logs/verifier/reward.txt", "0\n", 0, b""),
            "the verifier wrote reward 0 to /logs/verifier/reward.txt; it exited 0 and printed nothing"
        );
        assert_eq!(
            written(
                "/logs/verifier/reward.txt",
                "0",
                1,
                b"E   assert 41 == 42\n[test.sh exited with 1]\n"
            ),
            "the verifier wrote reward 0 to /logs/verifier/reward.txt; it exited 1: E   assert 41 == 42"
        );
        assert_eq!(
            written(
                "/logs/verifier/reward.json",
                "{\n  \"a\": 1,\n  \"b\": 0.5\n}\n",
                0,
                b"done\n"
            ),
            "the verifier wrote rewards { \"a\": 1, \"b\": 0.5 } to /logs/verifier/reward.json; it exited 0: done"
        );
        // A file of any length is quoted in a line of its own size.
        let long = RewardFile::new("/logs/verifier/reward.json", &"é".repeat(400));
        assert!(
            long.text.len() <= REWARD_TEXT_BYTES + '…'.len_utf8(),
            "{long:?}"
        );
        assert!(long.text.ends_with('…'));
        // A multi-step task's roll-up is no one file: the steps say where it came from.
        let mut r = TaskResult::new("t", 1, "m".into());
        r.reward = Some(0.5);
        r.step_rewards = vec![
            ("one".into(), [("reward".to_string(), 1.0)].into()),
            ("two".into(), [("reward".to_string(), 0.0)].into()),
        ];
        r.verifier = Some(VerifierEnd::of(Some(0), b""));
        assert_eq!(
            r.reason().unwrap(),
            "the steps' rewards came to 0.5 (one: reward 1; two: reward 0); the verifier exited 0 and printed nothing"
        );
    }

    /// Results and run records written before the report's fields were kept still load.
    #[test]
    fn older_results_still_load() {
        let r: TaskResult = serde_json::from_str(
            r#"{"id":"t","attempt":1,"status":"unresolved","reward":0.0,"model":"m","steps":0,
                "usage":{"input":0,"output":0,"cache_read":0,"cache_write":0},
                "timings":{"setup_ms":0,"agent_ms":0,"verify_ms":0,"total_ms":0}}"#,
        )
        .unwrap();
        assert_eq!((r.started_unix_s, r.instruction), (None, None));
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("run.json"), r#"{"attempts":1,"model":"m"}"#).unwrap();
        assert!(runs_of(tmp.path()).is_empty());
        let mut options = crate::EvalOptions::new(Vec::new(), tmp.path().to_path_buf());
        options.model = Some("m".into());
        claim(tmp.path(), &options).unwrap();
        claim(tmp.path(), &options).unwrap();
        let runs = runs_of(tmp.path());
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[1].settings["attempts"], 1);
        options.attempts = 3;
        assert!(claim(tmp.path(), &options).is_err());
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
