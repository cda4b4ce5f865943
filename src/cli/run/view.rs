//! The run view on a terminal: the model's text as it streams, each tool call while it runs
//! and the line it leaves when it ends, retries, denials, and a summary at the end.
//!
//! A call that runs for a while (the agent's [`Event::ToolProgress`]) gets a live line: a
//! spinner, its title and its time so far, and for bash the last lines of its output,
//! redrawn in place with `indicatif`. Without it a six-second test run looks exactly like a
//! hang. The live lines are cleared when the call ends, and the line that stays says how it
//! ended: ✓ done, ✗ failed, ⊘ cancelled or refused.
//!
//! Only a terminal is redrawn. Piped, the view writes plain lines, one per finished call,
//! with no spinner and no carriage return, so a log of a run reads like the run. Every piece
//! of text the model or a command chose (titles, output tails, errors) goes through
//! [`escape`] first: a command whose output holds a carriage return or an escape sequence
//! cannot use the live line to redraw or recolour anything.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use serde_json::Value;

use super::{colour, paint, short_duration};
use runner_agent::events::{Event, EventSink};
use runner_display::escape;

/// How wide a live output line may be, in characters, before it is cut (after escaping).
const TAIL_SHOWN: usize = 100;
/// How often the spinner turns and the time is redrawn.
const TICK: Duration = Duration::from_millis(120);

pub(super) struct TerminalView {
    /// Whether the last thing printed left the cursor mid-line.
    mid_line: AtomicBool,
    /// The live lines; `None` when stdout is not a terminal (nothing is ever redrawn).
    live: Option<Live>,
}

/// The calls in flight and their live lines.
struct Live {
    multi: MultiProgress,
    state: Mutex<LiveState>,
}

#[derive(Default)]
struct LiveState {
    /// By session and call id: subagents run calls of their own, with ids of their own.
    calls: HashMap<(String, String), Running>,
    /// Questions on the terminal now; while any is, nothing is drawn.
    asking: u32,
}

struct Running {
    /// The tool and what the call is about, as the model gave it (unescaped).
    title: String,
    bar: Option<ProgressBar>,
}

impl TerminalView {
    pub(super) fn new() -> Self {
        let live = std::io::stdout().is_terminal().then(|| Live {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stdout()),
            state: Mutex::new(LiveState::default()),
        });
        TerminalView {
            mid_line: AtomicBool::new(false),
            live,
        }
    }

    /// Writes to stdout with the live lines out of the way (they come back below).
    fn write(&self, f: impl FnOnce(&mut std::io::StdoutLock)) {
        let write = || {
            let mut out = std::io::stdout().lock();
            f(&mut out);
            let _ = out.flush();
        };
        match &self.live {
            Some(live) => live.multi.suspend(write),
            None => write(),
        }
    }

    fn line(&self, text: &str) {
        let mid_line = self.mid_line.swap(false, Ordering::Relaxed);
        self.write(|out| {
            if mid_line {
                let _ = writeln!(out);
            }
            let _ = writeln!(out, "{text}");
        });
    }

    fn started(&self, session: &str, id: &str, tool: &str, input: &Value) {
        let Some(live) = &self.live else { return };
        let title = running_title(tool, input);
        live.lock().calls.insert(
            (session.to_string(), id.to_string()),
            Running { title, bar: None },
        );
    }

    /// A call still running: its live line appears (the first time) or shows the output's
    /// latest tail.
    fn progress(&self, session: &str, id: &str, elapsed_ms: f64, output: Option<&str>) {
        let Some(live) = &self.live else { return };
        let mut state = live.lock();
        let Some(running) = state.calls.get_mut(&(session.to_string(), id.to_string())) else {
            return;
        };
        let bar = match &running.bar {
            Some(bar) => bar.clone(),
            None => {
                // The live line starts on a line of its own, below any text mid-line.
                if self.mid_line.swap(false, Ordering::Relaxed) {
                    live.multi.suspend(|| println!());
                }
                let elapsed = Duration::from_secs_f64(elapsed_ms.max(0.0) / 1e3);
                let bar = live.multi.add(
                    ProgressBar::no_length()
                        .with_style(live_style())
                        .with_prefix(escape(&running.title).into_owned())
                        .with_elapsed(elapsed),
                );
                bar.enable_steady_tick(TICK);
                running.bar = Some(bar.clone());
                bar
            }
        };
        if let Some(output) = output {
            bar.set_message(shown_tail(output));
        }
    }

    /// A call ended: its live line goes, and the line that stays is printed.
    fn ended(&self, session: &str, id: &str, kept: &str) {
        if let Some(live) = &self.live {
            let running = live
                .lock()
                .calls
                .remove(&(session.to_string(), id.to_string()));
            if let Some(bar) = running.and_then(|r| r.bar) {
                bar.finish_and_clear();
                live.multi.remove(&bar);
            }
        }
        self.line(kept);
    }
}

impl Live {
    fn lock(&self) -> std::sync::MutexGuard<'_, LiveState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Spinner, title, time so far, then the output's tail (the message) on lines below.
fn live_style() -> ProgressStyle {
    let template = if colour() {
        "  {spinner:.cyan} {prefix} {took:.dim}{msg}"
    } else {
        "  {spinner} {prefix} {took}{msg}"
    };
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .with_key(
            "took",
            |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&short_duration(state.elapsed()));
            },
        )
}

/// The output's last lines as the live line shows them: escaped (a carriage return or an
/// escape sequence in them is shown, never acted on), cut to a width, each under the title.
fn shown_tail(output: &str) -> String {
    output
        .lines()
        .map(|line| {
            let shown = escape(line);
            let mut cut: String = shown.chars().take(TAIL_SHOWN).collect();
            if cut.len() < shown.len() {
                cut.push('…');
            }
            format!("\n    │ {cut}")
        })
        .collect()
}

/// What a running call is about, from its input: bash's description (or its command), a
/// file, a pattern, an address.
fn running_title(tool: &str, input: &Value) -> String {
    let field = |k: &str| {
        input
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let about = match tool {
        "bash" => field("description").or_else(|| field("command")),
        _ => ["filePath", "path", "pattern", "url", "query", "description"]
            .into_iter()
            .find_map(field),
    };
    match about {
        Some(about) => {
            let first: String = about
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(120)
                .collect();
            format!("{tool} {first}")
        }
        None => tool.to_string(),
    }
}

impl EventSink for TerminalView {
    fn emit(&self, event: &Event) {
        match event {
            Event::SessionStart {
                model,
                sandbox,
                agent,
                root,
                ..
            } => self.line(&paint(
                "2",
                &format!("runner · {model} · {agent} · sandbox {sandbox} · {root}"),
            )),
            Event::Text { delta, .. } => {
                // Escaped a character at a time, so a sequence split across deltas is
                // shown as surely as a whole one.
                let shown = escape(delta);
                self.write(|out| {
                    let _ = write!(out, "{shown}");
                });
                self.mid_line
                    .store(!delta.ends_with('\n'), Ordering::Relaxed);
            }
            Event::ToolStart {
                session,
                id,
                tool,
                input,
            } => self.started(session, id, tool, input),
            Event::ToolProgress {
                session,
                id,
                elapsed_ms,
                output,
                ..
            } => self.progress(session, id, *elapsed_ms, output.as_deref()),
            Event::StepEnd { .. } => {}
            Event::ToolEnd {
                session,
                id,
                tool,
                title,
                outcome,
                duration_ms,
                error,
            } => self.ended(
                session,
                id,
                &tool_line(tool, title, outcome, *duration_ms, error.as_deref()),
            ),
            Event::Permission {
                decision,
                permission,
                patterns,
                ..
            } if decision != "allow" => {
                self.line(&paint(
                    "33",
                    &format!("  ! {permission} {}: {decision}", patterns.join(", ")),
                ));
            }
            Event::Permission { .. } => {}
            Event::Retry {
                attempt,
                of,
                delay_ms,
                error,
                discard_text,
                ..
            } => self.line(&paint(
                "33",
                &format!(
                    "  ↻ retry {attempt}/{of} in {}: {error}{}",
                    short_duration(Duration::from_millis(*delay_ms)),
                    if *discard_text {
                        " (the answer above was cut; it starts over)"
                    } else {
                        ""
                    }
                ),
            )),
            Event::Context {
                action,
                tokens_before,
                window,
                ..
            } => self.line(&paint(
                "2",
                &format!("  ⋯ context {tokens_before}/{window} tokens: {action}"),
            )),
            Event::SessionEnd { message, .. } => {
                if let Some(m) = message {
                    self.line(&paint("31", &format!("runner: {m}")));
                }
                self.line(&paint("2", &end_line(event)));
            }
        }
    }

    /// While a question is on the terminal the live lines are cleared and not drawn, so a
    /// spinner never writes over the prompt; they come back when the last answer is in.
    fn asking(&self, on: bool) {
        let Some(live) = &self.live else { return };
        let mut state = live.lock();
        match on {
            true => {
                state.asking += 1;
                if state.asking == 1 {
                    let _ = live.multi.clear();
                    live.multi.set_draw_target(ProgressDrawTarget::hidden());
                }
            }
            false => {
                state.asking = state.asking.saturating_sub(1);
                if state.asking == 0 {
                    live.multi.set_draw_target(ProgressDrawTarget::stdout());
                }
            }
        }
    }
}

/// A finished call: how it ended (✓ done, ✗ failed, ⊘ cancelled or refused), the tool and
/// its title, how long it took, and the first line of its error.
fn tool_line(
    tool: &str,
    title: &str,
    outcome: &str,
    duration_ms: f64,
    error: Option<&str>,
) -> String {
    let (mark, tone) = match outcome {
        "ok" => (paint("32", "✓"), "31"),
        "cancelled" | "denied" => (paint("33", "⊘"), "33"),
        _ => (paint("31", "✗"), "31"),
    };
    let what = if title.is_empty() {
        escape(tool).into_owned()
    } else {
        escape(&format!("{tool} {title}")).into_owned()
    };
    let mut text = format!(
        "  {mark} {what} {}",
        paint(
            "2",
            &short_duration(Duration::from_secs_f64(duration_ms / 1e3))
        )
    );
    if outcome == "cancelled" {
        text.push_str(&format!(" {}", paint("33", "cancelled")));
    }
    if let Some(e) = error {
        let first = e.lines().next().unwrap_or_default();
        let cut: String = first.chars().take(160).collect();
        text.push_str(&format!("\n    {}", paint(tone, &cut)));
    }
    text
}

/// The session's last line: why it ended, its steps, tokens, time and changed files.
fn end_line(event: &Event) -> String {
    let Event::SessionEnd {
        reason,
        steps,
        usage,
        duration_ms,
        files_changed,
        ..
    } = event
    else {
        return String::new();
    };
    let files = if files_changed.is_empty() {
        "no files changed".to_string()
    } else {
        format!(
            "{} file(s) changed: {}",
            files_changed.len(),
            files_changed.join(", ")
        )
    };
    format!(
        "── {reason} · {steps} steps · {} in / {} out / {} cached tokens · {} · {files}",
        usage.input + usage.cache_write,
        usage.output,
        usage.cache_read,
        short_duration(Duration::from_secs_f64(*duration_ms / 1e3))
    )
}
