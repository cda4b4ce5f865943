//! `runner eval report DIR`: one self-contained HTML file (no network, no CDN) that an
//! evaluator can work in: the run's facts (date, runner's version, model, settings), two
//! small charts, a table of attempts to search by task id and filter by status and
//! reason, and beside it a panel with one attempt's instruction, why it was not resolved,
//! its diff, every file it left and its transcript. Each attempt has a permalink,
//! `report.html#TASK/ATTEMPT`; `?q=`, `?status=` and `?reason=` set the search and the
//! filters, so a link can carry a whole view.
//!
//! Everything in it that came from a task (instructions, diffs, logs, transcripts) is
//! untrusted: the task's author or the agent wrote it. It travels as JSON inside a
//! `<script type="application/json">` block (with `<` escaped, so no text can close the
//! block) and is put on the page with `textContent` only, never as markup.
//!
//! A file of an attempt can be as large as what the agent wrote (a patch of a gigabyte):
//! the report reads a head and a tail of each, never the whole, and names the file on
//! disk for the rest. Its memory does not follow the agent's output.

mod diff;
mod files;
mod page;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::EvalError;
use super::results::{self, Status, TaskResult};

/// The diff's head and tail shown (binary files and test leftovers left out first).
const DIFF_HEAD: usize = 128 * 1024;
const DIFF_TAIL: usize = 128 * 1024;
/// Each other file's head and tail shown: there can be many of them per attempt.
const LOG_HEAD: u64 = 16 * 1024;
const LOG_TAIL: u64 = 16 * 1024;
/// The transcript made from the session, at most (it is made here, so cut here).
const TRANSCRIPT_BYTES: usize = 256 * 1024;
/// A session file larger than this is shown as its head and tail, not read whole and
/// turned into a transcript.
const SESSION_READ_LIMIT: u64 = 32 << 20;

/// Writes `DIR/report.html` and returns its path.
pub fn write(out: &Path) -> Result<PathBuf, EvalError> {
    let summary = super::summary(out)?;
    let all = results::collect(out);
    let attempts = results::attempts_of(out, &all);
    let mut instructions: BTreeMap<&str, &str> = BTreeMap::new();
    for r in &all {
        if let Some(text) = &r.instruction {
            instructions.entry(&r.id).or_insert(text);
        }
    }
    let rows: Vec<Value> = all
        .iter()
        .map(|r| {
            row(
                out,
                r,
                &results::attempt_dir(out, &r.id, r.attempt, attempts),
            )
        })
        .collect();
    let statuses: Vec<&str> = Status::ALL.iter().map(|s| s.name()).collect();
    let data = json!({
        "summary": summary,
        "runs": results::runs_of(out),
        "started_unix_s": all.iter().filter_map(|r| r.started_unix_s).min(),
        "runner_versions": versions(&all),
        "instructions": instructions,
        "rows": rows,
        "statuses": statuses,
    });
    let html = page::page(&data);
    let path = out.join("report.html");
    runner_workspace::write_file(&path, html.as_bytes()).map_err(EvalError::io("write", &path))?;
    Ok(path)
}

/// Every runner version the attempts were run with (a resumed run may mix them).
fn versions(all: &[TaskResult]) -> Vec<&str> {
    let mut seen: Vec<&str> = all
        .iter()
        .filter_map(|r| r.runner_version.as_deref())
        .collect();
    seen.sort_unstable();
    seen.dedup();
    seen
}

/// One attempt's row: its numbers for the table, and its panel's contents.
fn row(out: &Path, r: &TaskResult, dir: &Path) -> Value {
    let diff = diff_of(out, dir);
    json!({
        "id": r.id,
        "attempt": r.attempt,
        "status": r.status.name(),
        "reward": r.reward,
        "steps": r.steps,
        "tokens_in": r.usage.input + r.usage.cache_read + r.usage.cache_write,
        "tokens_cached": r.usage.cache_read,
        "tokens_out": r.usage.output,
        "cost_usd": r.cost_usd.map(|c| (c * 1e4).round() / 1e4),
        "build_s": r.timings.build_ms as f64 / 1000.0,
        "agent_s": r.timings.agent_ms as f64 / 1000.0,
        "verify_s": r.timings.verify_ms as f64 / 1000.0,
        "total_s": r.timings.total_ms as f64 / 1000.0,
        "started_unix_s": r.started_unix_s,
        "error": r.reason().unwrap_or_default(),
        "kind": reason_kind(r),
        "why": why(r),
        "diff": diff,
        "transcript": transcript_of(dir),
        "logs": files::logs(dir, out, LOG_HEAD, LOG_TAIL),
        "folder": dir.strip_prefix(out).unwrap_or(dir).display().to_string(),
    })
}

/// The reason's kind, for the reason filter: how the verifier ended, or the phase that
/// failed and the start of its error (the part before its first colon, which names what
/// failed; the rest quotes what was printed).
fn reason_kind(r: &TaskResult) -> String {
    if r.status == Status::Resolved {
        return String::new();
    }
    if r.status == Status::Unresolved
        && let Some(v) = &r.verifier
    {
        return match v.exit {
            Some(code) => format!("the verifier exited {code}"),
            None => "the verifier was stopped".into(),
        };
    }
    let Some(error) = &r.error else {
        return r.status.name().to_string();
    };
    let head = error.split(':').next().unwrap_or_default();
    let mut head: String = head.chars().take(60).collect();
    if head.len() < error.len() && !error.starts_with(&format!("{head}:")) {
        head.push('…');
    }
    match &r.phase {
        Some(phase) => format!("{phase}: {head}"),
        None => head,
    }
}

/// Why the attempt was not resolved, in full: the one line, the verifier's exit status,
/// the lines of its output that read as failures, and its last lines.
fn why(r: &TaskResult) -> Value {
    let Some(line) = r.reason() else {
        return Value::Null;
    };
    let verifier = r.verifier.as_ref().map(|v| {
        json!({
            "exit": v.exit,
            "failing": v.failing_lines(),
            "tail": v.tail,
        })
    });
    json!({
        "line": line,
        "phase": r.phase,
        "error": r.error,
        "verifier": verifier,
        "diff_error": r.diff_error,
    })
}

/// The diff as shown (see [`diff::show`]), or `null` when the attempt has none.
fn diff_of(out: &Path, dir: &Path) -> Value {
    let path = dir.join("diff.patch");
    let shown_path = path.strip_prefix(out).unwrap_or(&path);
    match diff::show(&path, shown_path, DIFF_HEAD, DIFF_TAIL) {
        Ok(d) => json!({
            "text": d.text,
            "size": d.size,
            "cut": d.cut,
            "path": shown_path.display().to_string(),
            "binary": {"count": d.binary.count, "names": d.binary.names},
            "ignored": {"count": d.ignored.count, "names": d.ignored.names},
        }),
        Err(_) => Value::Null,
    }
}

/// The attempt's conversation; the oracle has none, and what its solution printed stands
/// in. A session too large to read whole is shown as its raw head and tail.
fn transcript_of(dir: &Path) -> String {
    let session = dir.join("session.jsonl");
    let size = std::fs::metadata(&session).map_or(0, |m| m.len());
    let half = TRANSCRIPT_BYTES as u64 / 2;
    if size > SESSION_READ_LIMIT {
        return files::head_and_tail(&session, Path::new("session.jsonl"), half, half)
            .map_or_else(|_| String::new(), |s| s.text);
    }
    match runner_agent::record::Loaded::read(&session) {
        Ok(loaded) => cut(runner_agent::transcript::transcript(&loaded)),
        Err(_) => files::head_and_tail(&dir.join("agent.log"), Path::new("agent.log"), half, half)
            .map_or_else(|_| String::new(), |s| s.text),
    }
}

/// Text made here (a transcript) held to the report's size per file.
fn cut(mut text: String) -> String {
    if text.len() > TRANSCRIPT_BYTES {
        let mut at = TRANSCRIPT_BYTES;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push_str("\n… (cut here; the whole session is session.jsonl in the attempt's folder)");
    }
    text
}

#[cfg(test)]
mod tests;
