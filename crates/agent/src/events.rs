//! What a run reports as it goes: one [`Event`] at a time to an [`EventSink`]. The terminal
//! view and `--json` (one event per line) are two sinks over the same events, and the
//! shape of the JSON is part of runner's interface (README, insta snapshots).

use std::io::Write;
use std::sync::Mutex;

use serde::Serialize;

use runner_llm::Usage;

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
    /// A call still running, at most every [`PROGRESS_EVERY`] and only once it has run
    /// for [`PROGRESS_AFTER`]: quick calls (most of them) send none. Without it a long test
    /// run looks, to a harness or a person, exactly like a hang.
    ToolProgress {
        session: String,
        id: String,
        tool: String,
        /// Milliseconds since the call started, to the microsecond.
        elapsed_ms: f64,
        /// The last lines of the output so far (bash), exact: a viewer escapes it.
        #[serde(skip_serializing_if = "Option::is_none")]
        output: Option<String>,
    },
    ToolEnd {
        session: String,
        id: String,
        tool: String,
        title: String,
        /// ok, failed, denied (a rule or a person refused it), cancelled (Ctrl-C or the
        /// run's end stopped it, even when the tool still returned what it had),
        /// sandbox_lost
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

/// How long a call runs before it reports progress: a call that ends sooner shows nothing
/// but its final line, so a quick call does not flicker a spinner.
pub const PROGRESS_AFTER: std::time::Duration = std::time::Duration::from_millis(500);
/// The shortest gap between two progress events of one call.
pub const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
/// The longest gap between two progress events when the output has not changed.
pub const PROGRESS_QUIET: std::time::Duration = std::time::Duration::from_secs(1);

/// Milliseconds to the microsecond, for event timings.
pub fn millis(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

pub trait EventSink: Send + Sync {
    fn emit(&self, event: &Event);

    /// A person is (`true`) or no longer (`false`) being asked something on the terminal.
    /// A view that redraws lines in place (the spinner of a running call) stops while the
    /// question is up, so it never draws over the prompt. Calls nest: one `false` per `true`.
    fn asking(&self, _on: bool) {}
}

/// The last `lines` lines of a call's output (a carriage return starts a line too, as it
/// does on a terminal: a progress bar's latest state is its last piece), blank ones left
/// out, each cut to `width` characters. Exact text: whoever shows it escapes it.
pub fn output_tail(output: &str, lines: usize, width: usize) -> String {
    let mut tail: Vec<String> = output
        .rsplit(['\n', '\r'])
        .filter(|l| !l.trim().is_empty())
        .take(lines)
        .map(|l| {
            let mut cut: String = l.chars().take(width).collect();
            if cut.len() < l.len() {
                cut.push('…');
            }
            cut
        })
        .collect();
    tail.reverse();
    tail.join("\n")
}

/// Discards everything: a subagent in a test, a benchmark, an evaluation's attempts (whose
/// results are their files), and `runner eval run` without `--json`. One type for every
/// event stream: runner-eval implements its own sink trait for it.
pub struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _event: &Event) {}
}

/// `--json`: one event per line on a writer (stdout), flushed per line so a harness reading
/// the pipe sees each event when it happens. One writer for every event stream (`runner run
/// --json` and `runner eval run --json`): runner-eval implements its own sink trait with
/// [`JsonLines::line`].
pub struct JsonLines<W: Write + Send> {
    out: Mutex<W>,
}

impl<W: Write + Send> JsonLines<W> {
    pub fn new(out: W) -> Self {
        JsonLines {
            out: Mutex::new(out),
        }
    }

    /// `value` as one line. Exact JSON in which no character a terminal acts on is raw: the
    /// stream may well be read on one, and it carries words of the model, the tools and
    /// the tasks.
    pub fn line<T: Serialize>(&self, value: &T) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let line = runner_display::json(value);
        if !line.is_empty() {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }

    /// The writer back, with everything written to it (tests).
    pub fn into_inner(self) -> W {
        self.out.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}

impl<W: Write + Send> EventSink for JsonLines<W> {
    fn emit(&self, event: &Event) {
        self.line(event)
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
