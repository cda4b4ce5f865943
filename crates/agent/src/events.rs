//! What a run reports as it goes: one [`Event`] at a time to an [`EventSink`]. The terminal
//! view and `--json` (one event per line) are two sinks over the same events, and the
//! shape of the JSON is part of runner's interface (README, insta snapshots).

use std::io::Write;
use std::sync::Mutex;

use serde::Serialize;

use crate::llm::Usage;

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    SessionStart {
        session: String,
        model: String,
        agent: String,
        sandbox: String,
        root: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        resumed_from: Option<String>,
    },
    /// A piece of the model's text as it streams.
    Text { session: String, delta: String },
    ToolStart {
        session: String,
        id: String,
        tool: String,
        input: serde_json::Value,
    },
    ToolEnd {
        session: String,
        id: String,
        tool: String,
        title: String,
        /// ok, failed, denied, cancelled, sandbox_lost
        outcome: String,
        /// Milliseconds, to the microsecond.
        duration_ms: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    Permission {
        session: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        permission: String,
        patterns: Vec<String>,
        /// allow, deny (a rule), reject (the person asked), refused (nobody could answer)
        decision: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    StepEnd {
        session: String,
        step: u32,
        finish: String,
        usage: Usage,
        duration_ms: f64,
    },
    Retry {
        session: String,
        attempt: u32,
        of: u32,
        delay_ms: u64,
        error: String,
        /// The text deltas this turn sent so far are void: the answer starts over.
        discard_text: bool,
    },
    /// Old tool output was pruned, or the conversation compacted into a summary.
    Context {
        session: String,
        action: String,
        tokens_before: u64,
        window: u64,
    },
    SessionEnd {
        session: String,
        /// finished, max_steps, provider_error, refused, interrupted, sandbox_error
        reason: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        steps: u32,
        usage: Usage,
        duration_ms: f64,
        files_changed: Vec<String>,
    },
}

/// Milliseconds to the microsecond, for event timings.
pub fn millis(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

pub trait EventSink: Send + Sync {
    fn emit(&self, event: &Event);
}

/// Discards everything (subagents in tests, benchmarks).
pub struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _event: &Event) {}
}

/// `--json`: one event per line on a writer (stdout), flushed per line so a harness reading
/// the pipe sees each event when it happens.
pub struct JsonLines<W: Write + Send> {
    out: Mutex<W>,
}

impl<W: Write + Send> JsonLines<W> {
    pub fn new(out: W) -> Self {
        JsonLines {
            out: Mutex::new(out),
        }
    }
}

impl<W: Write + Send> EventSink for JsonLines<W> {
    fn emit(&self, event: &Event) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        // Exact JSON in which no character a terminal acts on is raw (`--json` may well be
        // read on one).
        let line = crate::display::json(event);
        if !line.is_empty() {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

/// Keeps every event (tests).
#[derive(Default)]
pub struct Collect(pub Mutex<Vec<Event>>);

impl EventSink for Collect {
    fn emit(&self, event: &Event) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event.clone());
    }
}

impl Collect {
    pub fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

tokio::task_local! {
    /// The session a provider call is made for. The retry layer sits below the agents and
    /// is shared by all of them; this is how its notices name the subagent that waits.
    pub static ASKING: String;
}
