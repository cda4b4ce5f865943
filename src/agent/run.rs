//! One turn of the conversation: steps until the model stops calling tools, the step
//! limit, a refusal, a provider failure, a dead sandbox or an interruption.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::events::Event;
use super::record::Record;
use super::{Agent, End, Outcome, Runtime, compact, prompt, task};
use crate::llm::{Finish, Image, LlmError, Message, Request, ToolCall, ToolSpec, Turn};
use crate::tool::registry::{CallResult, Outcome as CallOutcome};
use crate::tool::{Registry, ToolContext};

/// Subagents may start subagents, but not without end.
const MAX_DEPTH: u32 = 3;

/// The tools an agent is offered: the built-ins, the skills found for this worktree, and
/// `task` while it may still nest.
pub(super) async fn registry_for(rt: &Arc<Runtime>, ctx: &ToolContext, depth: u32) -> Registry {
    let skills = crate::tool::skill::SkillTool::discover(ctx).await;
    let mut registry = Registry::builtin().with(Arc::new(skills));
    if depth < MAX_DEPTH {
        registry = registry.with(Arc::new(task::TaskTool::new(rt)));
    }
    registry
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
        let tools = self.tools();
        loop {
            if cancel.is_cancelled() {
                return End::Interrupted;
            }
            if self.steps >= self.rt.options.max_steps {
                return End::MaxSteps;
            }
            if let Err(e) = self.keep_within_context(cancel).await {
                return e;
            }
            let started = Instant::now();
            let turn = {
                let events = self.rt.events.clone();
                let session = self.id.clone();
                let sink = move |delta: &str| {
                    events.emit(&Event::Text {
                        session: session.clone(),
                        delta: delta.to_string(),
                    })
                };
                let request = Request {
                    model: &self.rt.model.model,
                    system: &self.system,
                    messages: &self.messages,
                    tools: &tools,
                    max_tokens: self.rt.model.max_tokens,
                };
                tokio::select! {
                    turn = self.rt.provider.turn(&request, &sink) => turn,
                    _ = cancel.cancelled() => return End::Interrupted,
                }
            };
            let turn = match turn {
                Ok(t) => t,
                Err(e) => return End::ProviderError(provider_message(&e)),
            };
            self.steps += 1;
            let elapsed = started.elapsed();
            let duration_ms = elapsed.as_millis() as u64;
            self.usage.add(&turn.usage);
            self.last_context = turn.usage.context();
            self.record(Record::Turn {
                session: self.id.clone(),
                step: self.steps,
                duration_ms,
                turn: turn.clone(),
            });
            self.rt.events.emit(&Event::StepEnd {
                session: self.id.clone(),
                step: self.steps,
                finish: finish_name(&turn.finish),
                usage: turn.usage,
                duration_ms: super::events::millis(elapsed),
            });
            let Turn {
                text, tool_calls, ..
            } = turn;
            self.messages.push(Message::Assistant {
                text,
                tool_calls: tool_calls.clone(),
            });
            if tool_calls.is_empty() {
                return End::Finished;
            }
            let results = self.run_calls(&tool_calls, cancel).await;
            let mut sandbox_lost = None;
            for (call, result) in tool_calls.iter().zip(results) {
                if result.outcome == CallOutcome::SandboxLost {
                    sandbox_lost = result.error.clone();
                }
                let message = self.result_message(call, result).await;
                self.record(Record::Message {
                    session: self.id.clone(),
                    message: message.clone(),
                });
                self.messages.push(message);
            }
            if let Some(e) = sandbox_lost {
                return End::SandboxError(e);
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

    /// Runs a step's calls: at most `parallel` at once, calls that change the same file in
    /// the order the model gave them. Results come back in call order.
    async fn run_calls(
        &mut self,
        calls: &[ToolCall],
        cancel: &CancellationToken,
    ) -> Vec<CallResult> {
        let mut groups: Vec<(Option<String>, Vec<usize>)> = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            match edited_file(call) {
                Some(f) => match groups.iter_mut().find(|g| g.0.as_deref() == Some(&f)) {
                    Some(g) => g.1.push(i),
                    None => groups.push((Some(f), vec![i])),
                },
                None => groups.push((None, vec![i])),
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
        let result = self
            .registry
            .call_raw(&call.name, &call.arguments, ctx)
            .await;
        let elapsed = started.elapsed();
        let duration_ms = elapsed.as_millis() as u64;
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

    /// The message the model reads for a call: the output, or the error; a `read` that
    /// enters a directory with its own AGENTS.md brings that file along, once.
    async fn result_message(&mut self, call: &ToolCall, result: CallResult) -> Message {
        let is_error = result.error.is_some();
        let mut content = match &result.error {
            Some(e) => e.clone(),
            None => result.output.clone(),
        };
        if !is_error && result.tool == "read" {
            for (path, text) in self.nested_instructions(call).await {
                content.push_str(&format!(
                    "\n\n<instructions from=\"{}\">\n{}\n</instructions>",
                    self.ctx.relative(&path),
                    text.trim()
                ));
            }
        }
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

    /// AGENTS.md (or CLAUDE.md) files in the directories between the worktree root and
    /// the file read, not given to the model yet.
    async fn nested_instructions(&mut self, call: &ToolCall) -> Vec<(PathBuf, String)> {
        let Some(file) = serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .and_then(|v| {
                v.get("filePath")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
        else {
            return Vec::new();
        };
        let Ok(path) = self.ctx.resolve(&file) else {
            return Vec::new();
        };
        let root = self.ctx.worktree().to_path_buf();
        let mut dirs: Vec<PathBuf> = path
            .ancestors()
            .skip(1)
            .take_while(|d| d.starts_with(&root) && *d != root)
            .map(Path::to_path_buf)
            .collect();
        dirs.reverse();
        let mut found = Vec::new();
        for dir in dirs {
            if !self.instructions_seen.insert(dir.clone()) {
                continue;
            }
            for name in prompt::INSTRUCTION_FILES {
                let candidate = dir.join(name);
                if candidate == path {
                    break;
                }
                if let Ok(r) = self
                    .ctx
                    .sandbox
                    .client
                    .read_all(&candidate, 64 * 1024)
                    .await
                {
                    found.push((candidate, String::from_utf8_lossy(&r.data).into_owned()));
                    break;
                }
            }
        }
        found
    }

    /// Past the threshold: prune old tool output; if the estimate is still over, compact.
    async fn keep_within_context(&mut self, cancel: &CancellationToken) -> Result<(), End> {
        let window = self.rt.model.context_window;
        let limit = (window as f64 * self.rt.options.context_threshold) as u64;
        if self.last_context <= limit || self.messages.is_empty() {
            return Ok(());
        }
        let before = compact::chars(&self.messages).max(1);
        let pruned = compact::prune(&mut self.messages, compact::PROTECT_CHARS);
        let after = compact::chars(&self.messages);
        let estimate = self.last_context * after as u64 / before as u64;
        if pruned > 0 {
            self.rt.events.emit(&Event::Context {
                session: self.id.clone(),
                action: "prune".into(),
                tokens_before: self.last_context,
                window,
            });
            if estimate <= limit {
                self.last_context = estimate;
                return Ok(());
            }
        }
        self.rt.events.emit(&Event::Context {
            session: self.id.clone(),
            action: "compact".into(),
            tokens_before: self.last_context,
            window,
        });
        let summary = tokio::select! {
            s = compact::summarize(self.rt.provider.as_ref(), &self.rt.model.model, &self.system, &self.messages, self.rt.model.max_tokens) => s,
            _ = cancel.cancelled() => return Err(End::Interrupted),
        };
        let summary = summary.map_err(|e| End::ProviderError(provider_message(&e)))?;
        self.record(Record::Compaction {
            session: self.id.clone(),
            summary: summary.clone(),
        });
        self.messages = vec![compact::summary_message(&summary)];
        self.last_context = 0;
        Ok(())
    }
}

fn provider_message(e: &LlmError) -> String {
    let hint = match e {
        LlmError::Status {
            status: 401 | 403, ..
        } => " (check the API key in the environment)",
        LlmError::Status { status: 404, .. } => " (check the model name and the base URL)",
        LlmError::Status { status: 400, .. } => {
            " (the request was refused: a context too long, or a parameter the model does not support)"
        }
        LlmError::Status { .. } | LlmError::Transport { .. } => {
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

/// The one file a call edits, for ordering edits of the same file within a step.
fn edited_file(call: &ToolCall) -> Option<String> {
    if !matches!(call.name.as_str(), "write" | "edit" | "multiedit") {
        return None;
    }
    let v: Value = serde_json::from_str(&call.arguments).ok()?;
    v.get("filePath")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Files a successful call changed, worktree-relative, for the summary line.
fn changed_files(call: &ToolCall, ctx: &ToolContext) -> Vec<String> {
    let Ok(v) = serde_json::from_str::<Value>(&call.arguments) else {
        return Vec::new();
    };
    let rel = |p: &str| ctx.resolve(p).map(|p| ctx.relative(&p)).ok();
    match call.name.as_str() {
        "write" | "edit" | "multiedit" => v
            .get("filePath")
            .and_then(Value::as_str)
            .and_then(rel)
            .into_iter()
            .collect(),
        "apply_patch" => v
            .get("patchText")
            .and_then(Value::as_str)
            .map(|text| {
                text.lines()
                    .filter_map(|l| {
                        [
                            "*** Add File: ",
                            "*** Update File: ",
                            "*** Delete File: ",
                            "*** Move to: ",
                        ]
                        .iter()
                        .find_map(|p| l.strip_prefix(p))
                    })
                    .filter_map(|p| rel(p.trim()))
                    .collect()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}
