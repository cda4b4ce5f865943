//! The registry of tools and the one path every call takes through it:
//! name lookup → argument parsing and validation → the tool (which asks the permission gate)
//! → output truncation.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use super::{Attachment, DynTool, ToolContext, ToolError, ToolOutput, truncate::Truncator};
use runner_permission::{PermissionGate, PermissionRequest};

/// How a call ended, for exit codes and harnesses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// The tool ran but could not do what was asked (or the call was malformed).
    Failed,
    /// A rule denied the call or the asked party refused it.
    Denied,
    Cancelled,
    /// The sandbox itself failed (its server died): nothing more can run in it.
    SandboxLost,
}

/// The result of one call, as `runner tool call --json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct CallResult {
    pub tool: String,
    pub title: String,
    pub output: String,
    pub metadata: Map<String, Value>,
    pub attachments: Vec<Attachment>,
    pub error: Option<String>,
    #[serde(skip)]
    pub outcome: Outcome,
}

#[derive(Clone)]
pub struct Registry {
    tools: Vec<Arc<dyn DynTool>>,
}

impl Registry {
    /// A registry of exactly these tools, in this order (the built-in list is
    /// [`Registry::builtin`], in `builtin.rs`).
    pub fn of(tools: Vec<Arc<dyn DynTool>>) -> Self {
        Registry { tools }
    }

    /// This registry with one more tool, placed before `invalid` (which stays last). For
    /// tools built at run time, such as `skill` after [`super::SkillTool::discover`]. A tool
    /// whose id is already present replaces it in place.
    pub fn with(mut self, tool: Arc<dyn DynTool>) -> Self {
        if let Some(slot) = self.tools.iter_mut().find(|t| t.id() == tool.id()) {
            *slot = tool;
            return self;
        }
        let at = self
            .tools
            .iter()
            .position(|t| t.id() == "invalid")
            .unwrap_or(self.tools.len());
        self.tools.insert(at, tool);
        self
    }

    pub fn tools(&self) -> impl Iterator<Item = &Arc<dyn DynTool>> {
        self.tools.iter()
    }

    /// Exact id first; a name that differs only in case is repaired, as OpenCode does.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn DynTool>> {
        self.tools.iter().find(|t| t.id() == name).or_else(|| {
            self.tools
                .iter()
                .find(|t| t.id().eq_ignore_ascii_case(name))
        })
    }

    /// A call whose arguments arrive as raw text from the model.
    pub async fn call_raw(&self, name: &str, raw_args: &str, ctx: &ToolContext) -> CallResult {
        let trimmed = raw_args.trim();
        let parsed = if trimmed.is_empty() {
            Ok(Value::Object(Map::new()))
        } else {
            serde_json::from_str::<Value>(trimmed)
        };
        match parsed {
            Ok(args) => self.call(name, args, ctx).await,
            Err(e) => {
                self.call_invalid(
                    name,
                    format!("the arguments are not valid JSON ({e}); send a JSON object"),
                    ctx,
                )
                .await
            }
        }
    }

    pub async fn call(&self, name: &str, args: Value, ctx: &ToolContext) -> CallResult {
        let Some(tool) = self.get(name).cloned() else {
            let available: Vec<&str> = self
                .tools
                .iter()
                .map(|t| t.id())
                .filter(|id| *id != "invalid")
                .collect();
            let error = format!(
                "Unknown tool '{name}'. Available tools: {}",
                available.join(", ")
            );
            return self.call_invalid(name, error, ctx).await;
        };
        if !args.is_object() {
            let error = format!("the arguments must be a JSON object, got {args}");
            return self.call_invalid(name, error, ctx).await;
        }
        let ctx = &ctx.for_tool(tool.id());
        if let Some(rule) = ctx.gate.disabled(permission_key(tool.id())) {
            let error = ToolError::Failed(format!(
                "The {} tool is not available: the rule {} {:?} = deny ({} #{}) turns it off. Do the task with the other tools.",
                tool.id(),
                rule.permission,
                rule.pattern,
                rule.source.origin,
                rule.source.position
            ));
            let mut result = finish(tool.as_ref(), Err(error), &ctx.services.truncator);
            result.outcome = Outcome::Denied;
            return result;
        }
        // OpenCode's doom-loop guard: the third identical call in a row asks whether the
        // model should go on repeating itself.
        if ctx.conversation.record_call(tool.id(), &args) {
            let ask = PermissionRequest::new(
                "doom_loop",
                vec![tool.id().to_string()],
                vec![tool.id().to_string()],
            )
            .with_metadata(serde_json::json!({ "tool": tool.id(), "input": args }));
            if let Err(e) = ctx.ask(ask).await {
                return finish(tool.as_ref(), Err(e), &ctx.services.truncator);
            }
        }
        let Some(hooks) = ctx.services.hooks.clone() else {
            let result = tool.call(args, ctx).await;
            return finish(tool.as_ref(), result, &ctx.services.truncator);
        };
        // A before_tool hook that says no blocks the call; what it said is the message.
        if let Err(blocked) = hooks.before(tool.id(), &args, ctx).await {
            let mut result = finish(
                tool.as_ref(),
                Err(ToolError::Failed(blocked.to_string())),
                &ctx.services.truncator,
            );
            result.outcome = Outcome::Denied;
            return result;
        }
        let result = finish(
            tool.as_ref(),
            tool.call(args.clone(), ctx).await,
            &ctx.services.truncator,
        );
        let seen = serde_json::json!({
            "output": result.output, "error": result.error, "outcome": result.outcome,
        });
        hooks.after(tool.id(), &args, seen, ctx).await;
        result
    }

    /// What a call would ask the permission gate, in order, without running it (see
    /// [`super::Tool::permissions`]). Errors are the tool's own: unknown tool, bad arguments.
    pub async fn permissions(
        &self,
        name: &str,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        let tool = self
            .get(name)
            .ok_or_else(|| ToolError::Failed(format!("unknown tool {name:?}")))?;
        tool.permissions(args, ctx).await
    }

    /// The tools the model is offered: those whose permission the rules do not turn off.
    pub fn visible<'a>(
        &'a self,
        gate: &'a dyn PermissionGate,
    ) -> impl Iterator<Item = &'a Arc<dyn DynTool>> + 'a {
        self.tools
            .iter()
            .filter(move |t| gate.disabled(permission_key(t.id())).is_none())
    }

    /// Routes a call that cannot run to the `invalid` tool, whose output explains the
    /// problem to the model. The call still counts as failed.
    pub async fn call_invalid(&self, name: &str, error: String, ctx: &ToolContext) -> CallResult {
        let invalid = super::invalid::InvalidTool;
        let args = serde_json::json!({ "tool": name, "error": error });
        let mut result = finish(
            &invalid,
            DynTool::call(&invalid, args, ctx).await,
            &ctx.services.truncator,
        );
        result.error = Some(result.output.clone());
        result.outcome = Outcome::Failed;
        result
    }
}

/// The permission a tool answers to: the file-changing tools share `edit`, as in OpenCode.
pub fn permission_key(tool: &str) -> &str {
    match tool {
        "write" | "edit" | "multiedit" | "apply_patch" | "patch" => "edit",
        other => other,
    }
}

fn finish(
    tool: &dyn DynTool,
    result: Result<ToolOutput, ToolError>,
    truncator: &Truncator,
) -> CallResult {
    let id = tool.id().to_string();
    match result {
        Ok(mut out) => {
            // Tools that cut their own output (read, grep, …) say so in `truncated`.
            if !out.metadata.contains_key("truncated") {
                match truncator.truncate(&out.output, tool.truncation()) {
                    Ok(t) => {
                        out.output = t.content;
                        out.metadata
                            .insert("truncated".into(), Value::Bool(t.output_path.is_some()));
                        if let Some(path) = t.output_path {
                            out.metadata.insert(
                                "outputPath".into(),
                                Value::String(path.to_string_lossy().into_owned()),
                            );
                        }
                    }
                    Err(e) => {
                        // Better a long answer than a lost one: keep the output whole.
                        out.metadata.insert("truncated".into(), Value::Bool(false));
                        out.metadata.insert(
                            "truncationError".into(),
                            Value::String(format!(
                                "cannot save the full output to {}: {e}",
                                truncator.dir().display()
                            )),
                        );
                    }
                }
            }
            CallResult {
                tool: id,
                title: out.title,
                output: out.output,
                metadata: out.metadata,
                attachments: out.attachments,
                error: None,
                outcome: Outcome::Ok,
            }
        }
        Err(e) => {
            let outcome = match &e {
                ToolError::Permission(_) => Outcome::Denied,
                ToolError::Cancelled => Outcome::Cancelled,
                ToolError::Sandbox(_) => Outcome::SandboxLost,
                _ => Outcome::Failed,
            };
            CallResult {
                tool: id,
                title: String::new(),
                output: String::new(),
                metadata: Map::new(),
                attachments: Vec::new(),
                error: Some(e.to_string()),
                outcome,
            }
        }
    }
}
