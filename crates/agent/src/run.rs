//! One turn of the conversation: steps until the model stops calling tools, the step
//! limit, a refusal, a provider failure, a dead sandbox or an interruption.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::events::{Event, PROGRESS_AFTER, PROGRESS_EVERY, PROGRESS_QUIET, output_tail};
use super::record::Record;
use super::{Agent, AgentDef, End, Outcome, Runtime, compact, plan_mode, task};
use runner_llm::{Finish, Image, LlmError, Message, Request, ToolCall, ToolSpec, Turn};
use runner_tool::registry::{CallResult, Outcome as CallOutcome};
use runner_tool::{Registry, ToolContext};

/// How much of a running command's output its progress carries: the last lines, each cut
/// to a terminal's width (the view cuts again to the one it has).
const TAIL_LINES: usize = 2;
const TAIL_WIDTH: usize = 200;

/// Subagents may start subagents, but not without end.
const MAX_DEPTH: u32 = 3;

const CONTINUE_AFTER_CUT: &str =
    "Your last answer was cut off at the output token limit. Continue exactly where it stopped.";
const CALL_CUT: &str = "Not run: your answer was cut off at the output token limit while writing this call, so its arguments may be incomplete. Make the call again, smaller if it was large (for example, write a big file in parts).";

/// An agent's tools: the session's (built-ins, the user's and the project's own), the
/// skills found for this worktree, `task` while subagents may nest deeper, and for the
/// session's lead (`lead`: its id and agent) the plan-mode switch its agent has
/// (`plan_exit` for `plan`, `plan_enter` for `build`).
pub(super) async fn registry_for(
    rt: &Arc<Runtime>,
    ctx: &ToolContext,
    depth: u32,
    lead: Option<(&str, &str)>,
) -> Registry {
    agents_registry(Arc::downgrade(rt), &rt.agents, ctx, depth, lead)
        .await
        .0
}

/// What `runner tool list` shows: the tools the lead agent `lead` of a new session over
/// `ctx` is offered, from the same function an agent's registry comes from. `task` and the
/// plan-mode switch are built unbound: they describe themselves and are never called.
/// The notes are the user's and project's tool files that could not be read.
pub async fn offered_to_lead(
    ctx: &ToolContext,
    agents: &[AgentDef],
    lead: &str,
) -> (Registry, Vec<String>) {
    agents_registry(std::sync::Weak::new(), agents, ctx, 0, Some(("", lead))).await
}

async fn agents_registry(
    rt: std::sync::Weak<Runtime>,
    agents: &[AgentDef],
    ctx: &ToolContext,
    depth: u32,
    lead: Option<(&str, &str)>,
) -> (Registry, Vec<String>) {
    let skills = runner_tool::skill::SkillTool::discover(ctx).await;
    let (registry, notes) = runner_tool::user::registry(ctx).await;
    let mut registry = registry.with(Arc::new(skills));
    if depth < MAX_DEPTH {
        registry = registry.with(Arc::new(task::TaskTool::new(rt.clone(), agents)));
    }
    match lead {
        Some((session, "plan")) => {
            registry = registry.with(Arc::new(plan_mode::PlanExit::new(rt, session)));
        }
        Some((session, "build")) => {
            registry = registry.with(Arc::new(plan_mode::PlanEnter::new(rt, session)));
        }
        _ => {}
    }
    (registry, notes)
}

impl Agent {
    /// Runs the conversation from a new user message to its end.
    pub async fn run(&mut self, prompt: &str, cancel: CancellationToken) -> Outcome {
        let message = Message::User {
            text: prompt.to_string(),
        };
        self.record(Record::Message {
            session: self.id.clone(),
            message: message.clone(),
        });
        self.messages.push(message);
        let end = self.steps_until_end(&cancel).await;
        let answer = self
            .messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::Assistant { text, .. } if !text.is_empty() => Some(text.clone()),
                _ => None,
            })
            .unwrap_or_default();
        Outcome { end, answer }
    }

    fn record(&self, r: Record) {
        self.rt.recorder.write(&r);
    }

    /// A message the model will read, into the conversation and the session file.
    fn push_recorded(&mut self, message: Message) {
        self.record(Record::Message {
            session: self.id.clone(),
            message: message.clone(),
        });
        self.messages.push(message);
    }

    fn tools(&self) -> Vec<ToolSpec> {
        self.registry
            .visible(self.ctx.gate.as_ref())
            .filter(|t| t.id() != "invalid")
            .map(|t| ToolSpec {
                name: t.id().to_string(),
                description: t.description().to_string(),
                parameters: t.parameters(),
            })
            .collect()
    }

    async fn steps_until_end(&mut self, cancel: &CancellationToken) -> End {
        let mut tools = self.tools();
        // The limit is per prompt: a conversation, or a subagent resumed by `task_id`,
        // gets the full budget for each new message.
        let first_step = self.steps;
        // One compaction on the provider's word that the conversation no longer fits; a
        // second refusal right after it is final.
        let mut shrunk_on_refusal = false;
        loop {
            if cancel.is_cancelled() {
                return End::Interrupted;
            }
            if self.steps - first_step >= self.rt.options.max_steps {
                return End::MaxSteps;
            }
            if let Err(e) = self.keep_within_context(&tools, cancel).await {
                return e;
            }
            let started = Instant::now();
            let turn = tokio::select! {
                turn = self.ask_model(&tools) => turn,
                _ = cancel.cancelled() => return End::Interrupted,
            };
            let turn = match turn {
                Ok(t) => t,
                Err(e) if !shrunk_on_refusal && too_long(&e) && !self.messages.is_empty() => {
                    shrunk_on_refusal = true;
                    // Count the window as full: the next pass prunes, then compacts.
                    self.last_context = self.model.context_window;
                    self.chars_at_turn = compact::chars(&self.messages);
                    continue;
                }
                Err(e) => return End::ProviderError(provider_message(&e)),
            };
            shrunk_on_refusal = false;
            let cut_off = turn.finish == Finish::Length;
            let declined = turn.finish == Finish::Refusal;
            self.count_turn(&turn, started.elapsed());
            let Turn {
                text, tool_calls, ..
            } = turn;
            self.messages.push(Message::Assistant {
                text,
                tool_calls: tool_calls.clone(),
            });
            self.chars_at_turn = compact::chars(&self.messages);
            if declined {
                // Its calls, if a refusal came with any, are not run.
                return End::ModelRefused(MODEL_DECLINED.to_string());
            }
            if tool_calls.is_empty() {
                if cut_off {
                    // An answer cut at the output limit is not an end: ask for the rest.
                    self.push_recorded(Message::User {
                        text: CONTINUE_AFTER_CUT.to_string(),
                    });
                    continue;
                }
                return End::Finished;
            }
            let sandbox_lost = self.answer_calls(&tool_calls, cut_off, cancel).await;
            if let Some(e) = sandbox_lost {
                return End::SandboxError(e);
            }
            if let Some(agent) = self.rt.take_handoff(&self.id) {
                self.switch_to(&agent).await;
                tools = self.tools();
            }
            if cancel.is_cancelled() {
                return End::Interrupted;
            }
            if !self.rt.options.continue_on_deny
                && let Some(refusal) = self.rt.take_refusal()
            {
                return End::Refused(refusal);
            }
        }
    }

    /// One turn of the model on the conversation so far, its text streamed to the
    /// observers as it comes.
    async fn ask_model(&self, tools: &[runner_llm::ToolSpec]) -> Result<Turn, LlmError> {
        let events = self.rt.events.clone();
        let session = self.id.clone();
        let sink = move |delta: &str| {
            events.emit(&Event::Text {
                session: session.clone(),
                delta: delta.to_string(),
            })
        };
        let request = Request {
            model: &self.model.model,
            system: &self.system,
            messages: &self.messages,
            tools,
            max_tokens: self.model.max_tokens,
        };
        super::events::ASKING
            .scope(self.id.clone(), self.provider.turn(&request, &sink))
            .await
    }

    /// A finished turn counted: steps, usage, the context it filled, its record and its
    /// event.
    fn count_turn(&mut self, turn: &Turn, elapsed: std::time::Duration) {
        self.steps += 1;
        let duration_ms = elapsed.as_millis() as u64;
        self.usage.add(&turn.usage);
        if self.parent.is_none() {
            self.rt.note_root_progress(self.steps, self.usage);
        }
        self.last_context = turn.usage.context();
        self.record(Record::Turn {
            session: self.id.clone(),
            step: self.steps,
            duration_ms,
            turn: turn.clone(),
            summary: false,
        });
        self.rt.events.emit(&Event::StepEnd {
            session: self.id.clone(),
            step: self.steps,
            finish: finish_name(&turn.finish),
            usage: turn.usage,
            duration_ms: super::events::millis(elapsed),
        });
    }

    /// Runs the turn's calls and puts their results in the conversation. Only the last
    /// call can have been cut short (`cut_off`): its arguments cannot be trusted, so it is
    /// answered as cut, not run. Returns why the sandbox was lost, if a call lost it.
    async fn answer_calls(
        &mut self,
        tool_calls: &[ToolCall],
        cut_off: bool,
        cancel: &CancellationToken,
    ) -> Option<String> {
        let (whole, cut) = match cut_off {
            true => tool_calls.split_at(tool_calls.len() - 1),
            false => (tool_calls, &[][..]),
        };
        let results = self.run_calls(whole, cancel).await;
        let mut sandbox_lost = None;
        for (call, result) in whole.iter().zip(results) {
            if result.outcome == CallOutcome::SandboxLost {
                sandbox_lost = result.error.clone();
            }
            let message = self.result_message(call, result).await;
            self.push_recorded(message);
        }
        for call in cut {
            self.push_recorded(Message::Tool {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content: CALL_CUT.to_string(),
                is_error: true,
                images: Vec::new(),
            });
        }
        sandbox_lost
    }

    /// Runs a step's calls: at most `parallel` at once, calls that change the same file in
    /// the order the model gave them. Results come back in call order.
    async fn run_calls(
        &mut self,
        calls: &[ToolCall],
        cancel: &CancellationToken,
    ) -> Vec<CallResult> {
        // Calls that touch a common file form one group, run in the model's order; the
        // groups run side by side.
        let mut groups: Vec<(Vec<PathBuf>, Vec<usize>)> = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let files = touched_files(call, &self.ctx);
            let mut joined: Option<usize> = None;
            let mut g = 0;
            while g < groups.len() {
                if files.is_empty() || !groups[g].0.iter().any(|f| files.contains(f)) {
                    g += 1;
                    continue;
                }
                match joined {
                    None => {
                        joined = Some(g);
                        g += 1;
                    }
                    // The call bridges two groups: they become one, in call order.
                    Some(first) => {
                        let (more_files, more_calls) = groups.remove(g);
                        groups[first].0.extend(more_files);
                        groups[first].1.extend(more_calls);
                        groups[first].1.sort_unstable();
                    }
                }
            }
            match joined {
                Some(g) => {
                    groups[g].0.extend(files);
                    groups[g].1.push(i);
                }
                None => groups.push((files, vec![i])),
            }
        }
        let mut ctx = self.ctx.clone();
        ctx.cancel = cancel.child_token();
        let ctx = &ctx;
        let this = &*self;
        let mut done: Vec<(usize, CallResult)> = futures_util::stream::iter(groups)
            .map(|(_, indices)| async move {
                let mut out = Vec::new();
                for i in indices {
                    out.push((i, this.run_call(&calls[i], ctx).await));
                }
                out
            })
            .buffer_unordered(self.rt.options.parallel.max(1))
            .flat_map(futures_util::stream::iter)
            .collect()
            .await;
        done.sort_by_key(|(i, _)| *i);
        for (i, result) in &done {
            if result.outcome == CallOutcome::Ok {
                self.files_changed
                    .extend(changed_files(&calls[*i], &self.ctx));
            }
        }
        self.files_changed.sort();
        self.files_changed.dedup();
        done.into_iter().map(|(_, r)| r).collect()
    }

    async fn run_call(&self, call: &ToolCall, ctx: &ToolContext) -> CallResult {
        let input = serde_json::from_str::<Value>(&call.arguments)
            .unwrap_or_else(|_| Value::String(call.arguments.clone()));
        self.rt.events.emit(&Event::ToolStart {
            session: self.id.clone(),
            id: call.id.clone(),
            tool: call.name.clone(),
            input,
        });
        let started = Instant::now();
        let mut result = self.call_reporting_progress(call, ctx, started).await;
        let elapsed = started.elapsed();
        let duration_ms = elapsed.as_millis() as u64;
        // bash hands back what a stopped command printed (the model reads it), so the
        // registry counts it done; the person and the harness are told it was stopped.
        if result.outcome == CallOutcome::Ok
            && result.metadata.get("cancelled") == Some(&Value::Bool(true))
        {
            result.outcome = CallOutcome::Cancelled;
        }
        let outcome = outcome_name(result.outcome).to_string();
        self.rt.events.emit(&Event::ToolEnd {
            session: self.id.clone(),
            id: call.id.clone(),
            tool: result.tool.clone(),
            title: result.title.clone(),
            outcome: outcome.clone(),
            duration_ms: super::events::millis(elapsed),
            error: result.error.clone(),
        });
        self.record(Record::Tool {
            session: self.id.clone(),
            id: call.id.clone(),
            tool: result.tool.clone(),
            title: result.title.clone(),
            outcome,
            duration_ms,
            metadata: Value::Object(result.metadata.clone()),
        });
        result
    }

    /// The call through the registry, with a [`Event::ToolProgress`] now and then while it
    /// runs long: its time so far, and the tail of the output a tool streams (bash) through
    /// the context's progress sink.
    async fn call_reporting_progress(
        &self,
        call: &ToolCall,
        ctx: &ToolContext,
        started: Instant,
    ) -> CallResult {
        let latest: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
        let mut ctx = ctx.clone();
        let outer = ctx.progress.clone();
        let seen = latest.clone();
        ctx.progress = Arc::new(move |p: runner_tool::Progress| {
            if let Some(output) = p.metadata.get("output").and_then(Value::as_str) {
                let tail = output_tail(output, TAIL_LINES, TAIL_WIDTH);
                *seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(tail);
            }
            outer(p);
        });
        let running = self.registry.call_raw(&call.name, &call.arguments, &ctx);
        tokio::pin!(running);
        let first = tokio::time::Instant::from_std(started) + PROGRESS_AFTER;
        let mut tick = tokio::time::interval_at(first, PROGRESS_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sent: Option<(Instant, Option<String>)> = None;
        loop {
            tokio::select! {
                result = &mut running => return result,
                _ = tick.tick() => {
                    let output = latest.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    let quiet = sent.as_ref().is_some_and(|(at, last)| {
                        *last == output && at.elapsed() < PROGRESS_QUIET
                    });
                    if quiet {
                        continue;
                    }
                    self.rt.events.emit(&Event::ToolProgress {
                        session: self.id.clone(),
                        id: call.id.clone(),
                        tool: call.name.clone(),
                        elapsed_ms: super::events::millis(started.elapsed()),
                        output: output.clone(),
                    });
                    sent = Some((Instant::now(), output));
                }
            }
        }
    }

    /// The message the model reads for a call: the output, or the error, and the images
    /// it attached.
    async fn result_message(&mut self, call: &ToolCall, result: CallResult) -> Message {
        let is_error = result.error.is_some();
        let content = match &result.error {
            Some(e) => e.clone(),
            None => result.output.clone(),
        };
        let images = result
            .attachments
            .iter()
            .filter(|a| a.mime.starts_with("image/"))
            .filter_map(|a| {
                let data = a.url.split_once(";base64,")?.1;
                Some(Image {
                    mime: a.mime.clone(),
                    data: data.to_string(),
                })
            })
            .collect();
        Message::Tool {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content,
            is_error,
            images,
        }
    }

    /// What the next request will fill of the window: the last turn's exact count plus
    /// an estimate for what was added since (tool results, a new prompt). Without a turn
    /// yet (a resumed session) it is all estimate.
    fn context_estimate(&self) -> u64 {
        let now = compact::chars(&self.messages);
        if self.last_context == 0 {
            return (now + self.system.len()) as u64 / compact::CHARS_PER_TOKEN;
        }
        self.last_context + now.saturating_sub(self.chars_at_turn) as u64 / compact::CHARS_PER_TOKEN
    }

    /// Past the threshold: prune old tool output; if the estimate is still over, compact.
    async fn keep_within_context(
        &mut self,
        tools: &[ToolSpec],
        cancel: &CancellationToken,
    ) -> Result<(), End> {
        let window = self.model.context_window;
        let limit = (window as f64 * self.rt.options.context_threshold) as u64;
        let estimate = self.context_estimate();
        if estimate <= limit || self.messages.is_empty() {
            return Ok(());
        }
        let before = compact::chars(&self.messages);
        let pruned = compact::prune(&mut self.messages, compact::PROTECT_CHARS);
        let saved = (before - compact::chars(&self.messages)) as u64 / compact::CHARS_PER_TOKEN;
        if pruned > 0 {
            self.rt.events.emit(&Event::Context {
                session: self.id.clone(),
                action: "prune".into(),
                tokens_before: estimate,
                window,
            });
            // The next turn's count is exact again; until then, the estimate.
            self.last_context = self.last_context.saturating_sub(saved);
            if estimate.saturating_sub(saved) <= limit {
                return Ok(());
            }
        }
        self.rt.events.emit(&Event::Context {
            session: self.id.clone(),
            action: "compact".into(),
            tokens_before: estimate,
            window,
        });
        let summary = tokio::select! {
            s = super::events::ASKING.scope(self.id.clone(), compact::summarize(self.provider.as_ref(), &self.model.model, &self.system, &self.messages, tools, self.model.max_tokens)) => s,
            _ = cancel.cancelled() => return Err(End::Interrupted),
        };
        let turn = summary.map_err(|e| End::ProviderError(provider_message(&e)))?;
        self.usage.add(&turn.usage);
        // Recorded as a turn, so that a replay hands it to the same compaction.
        self.record(Record::Turn {
            session: self.id.clone(),
            step: self.steps,
            duration_ms: 0,
            turn: turn.clone(),
            summary: true,
        });
        if turn.text.trim().is_empty() {
            // Nothing to restart from: keep the (pruned) conversation rather than lose it,
            // and let the provider say if it no longer fits.
            self.rt.events.emit(&Event::Context {
                session: self.id.clone(),
                action: "compact_failed".into(),
                tokens_before: estimate,
                window,
            });
            return Ok(());
        }
        self.record(Record::Compaction {
            session: self.id.clone(),
            summary: turn.text.clone(),
        });
        self.messages = vec![compact::summary_message(&turn.text)];
        self.last_context = 0;
        self.chars_at_turn = 0;
        Ok(())
    }
}

/// The provider refused the request for its size: our estimate fell short of its count.
/// Said with a status before the answer, or as an error event inside it.
fn too_long(e: &LlmError) -> bool {
    let m = match e {
        LlmError::Status {
            status: 400 | 413,
            message,
            ..
        } => message.to_ascii_lowercase(),
        LlmError::Stream { kind, message, .. } => format!("{kind} {message}").to_ascii_lowercase(),
        _ => return false,
    };
    [
        "context_length_exceeded",
        "context length",
        "context window",
        "prompt is too long",
        "input is too long",
        "request_too_large",
        "too many tokens",
    ]
    .iter()
    .any(|p| m.contains(p))
}

/// What a run that ends in the model's refusal says (the refusal itself was shown as the
/// model's text).
const MODEL_DECLINED: &str =
    "the model declined to answer (its provider marked the answer a refusal)";

fn provider_message(e: &LlmError) -> String {
    let hint = match e {
        LlmError::Status {
            status: 401 | 403, ..
        } => " (check the API key in the environment)",
        LlmError::Status { status: 404, .. } => " (check the model name and the base URL)",
        LlmError::Status { status: 400, .. } => {
            " (the request was refused: a context too long, or a parameter the model does not support)"
        }
        LlmError::Status {
            status: 429,
            message,
            ..
        } if message.contains("insufficient_quota") => {
            " (the account is out of credit: check its plan and billing)"
        }
        LlmError::Stream { kind, .. } if kind == "insufficient_quota" => {
            " (the account is out of credit: check its plan and billing)"
        }
        LlmError::Status { message, .. }
        | LlmError::Transport { message, .. }
        | LlmError::Stream { message, .. }
            if message.contains("gave up after") =>
        {
            " (the provider kept failing; try again later)"
        }
        _ => "",
    };
    format!("{e}{hint}")
}

fn finish_name(f: &Finish) -> String {
    match f {
        Finish::Stop => "stop".into(),
        Finish::ToolCalls => "tool_calls".into(),
        Finish::Length => "length".into(),
        Finish::Refusal => "refusal".into(),
        Finish::Other(o) => o.clone(),
    }
}

pub fn outcome_name(o: CallOutcome) -> &'static str {
    match o {
        CallOutcome::Ok => "ok",
        CallOutcome::Failed => "failed",
        CallOutcome::Denied => "denied",
        CallOutcome::Cancelled => "cancelled",
        CallOutcome::SandboxLost => "sandbox_lost",
    }
}

/// The files a call reads or changes, resolved (so `a.rs`, `./a.rs` and the absolute
/// path are one file), for ordering calls on the same file within a step.
fn touched_files(call: &ToolCall, ctx: &ToolContext) -> Vec<PathBuf> {
    let names = match call.name.as_str() {
        "read" => file_path(call).into_iter().collect(),
        _ => edited_files(call),
    };
    names.iter().filter_map(|p| ctx.resolve(p).ok()).collect()
}

fn file_path(call: &ToolCall) -> Option<String> {
    let v: Value = serde_json::from_str(&call.arguments).ok()?;
    v.get("filePath")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The files a call edits, as the model named them.
fn edited_files(call: &ToolCall) -> Vec<String> {
    match call.name.as_str() {
        "write" | "edit" | "multiedit" => file_path(call).into_iter().collect(),
        "apply_patch" => serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .and_then(|v| v.get("patchText").and_then(Value::as_str).map(patch_files))
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

fn patch_files(text: &str) -> Vec<String> {
    const HEADERS: [&str; 4] = [
        "*** Add File: ",
        "*** Update File: ",
        "*** Delete File: ",
        "*** Move to: ",
    ];
    text.lines()
        .filter_map(|l| HEADERS.iter().find_map(|h| l.strip_prefix(h)))
        .map(|p| p.trim().to_string())
        .collect()
}

/// Files a successful call changed, worktree-relative, for the summary line.
fn changed_files(call: &ToolCall, ctx: &ToolContext) -> Vec<String> {
    edited_files(call)
        .iter()
        .filter_map(|p| ctx.resolve(p).map(|p| ctx.relative(&p)).ok())
        .collect()
}
