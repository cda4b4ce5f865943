//! `task`: hands a piece of work to a subagent, a child conversation in the same sandbox
//! with its own messages. Its gate keeps every deny of the parent's (see
//! [`Agent::child`]). It returns the child's final answer and a `task_id` that continues
//! the same child later.

use std::sync::{Arc, Weak};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::agents::Mode;
use super::{Agent, Runtime};
use runner_permission::PermissionRequest;
use runner_tool::{Tool, ToolContext, ToolError, ToolOutput, ToolResult};

#[derive(Debug, Deserialize, JsonSchema)]
pub struct TaskParams {
    /// A short (3-5 words) description of the task
    pub description: String,
    /// The task for the subagent: everything it needs to know, since it sees nothing of this conversation
    pub prompt: String,
    /// Which subagent does the work
    pub subagent_type: String,
    /// The task_id of an earlier task, to continue that subagent's conversation instead of starting a new one
    #[serde(default)]
    pub task_id: Option<String>,
}

pub struct TaskTool {
    /// Weak: the runtime owns the agents, whose registries own this tool.
    rt: Weak<Runtime>,
    description: String,
}

impl TaskTool {
    /// The tool for the runtime `rt`, offering `agents`' subagents. An unbound `rt`
    /// (`Weak::new()`, for a listing) describes itself and refuses every call.
    pub fn new(rt: Weak<Runtime>, agents: &[super::AgentDef]) -> Self {
        let mut description = String::from(include_str!("task.txt"));
        description.push_str("\nSubagents:\n");
        for a in agents.iter().filter(|a| a.mode != Mode::Primary) {
            description.push_str(&format!("- {}: {}\n", a.name, a.description));
        }
        TaskTool { rt, description }
    }
}

impl Tool for TaskTool {
    type Params = TaskParams;

    fn id(&self) -> &'static str {
        "task"
    }

    fn description(&self) -> &str {
        &self.description
    }

    async fn permissions(
        &self,
        params: &TaskParams,
        _ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        Ok(vec![PermissionRequest::new(
            "task",
            vec![params.subagent_type.clone()],
            vec![params.subagent_type.clone()],
        )])
    }

    async fn execute(&self, params: TaskParams, ctx: &ToolContext) -> ToolResult {
        let rt = self
            .rt
            .upgrade()
            .ok_or_else(|| ToolError::Failed("the run is over".into()))?;
        ctx.ask_all(self.permissions(&params, ctx).await?).await?;
        let parent_id = ctx.conversation.id.clone();
        let mut child = match &params.task_id {
            Some(id) => rt.children.lock().await.remove(id).ok_or_else(|| {
                ToolError::Failed(format!(
                    "No task {id:?} to continue (it may still be running, or belong to another run). Start a new task without task_id."
                ))
            })?,
            None => {
                let def = rt
                    .agents
                    .iter()
                    .find(|a| a.name == params.subagent_type && a.mode != Mode::Primary)
                    .cloned()
                    .ok_or_else(|| {
                        let names: Vec<&str> = rt
                            .agents
                            .iter()
                            .filter(|a| a.mode != Mode::Primary)
                            .map(|a| a.name.as_str())
                            .collect();
                        ToolError::Failed(format!(
                            "Unknown agent type: {} is not a valid agent type. Available: {}",
                            params.subagent_type,
                            names.join(", ")
                        ))
                    })?;
                Box::pin(Agent::child_of(&rt, &parent_id, def))
                    .await
                    .map_err(|e| ToolError::Failed(e.to_string()))?
            }
        };
        let outcome = Box::pin(child.run(&params.prompt, ctx.cancel.child_token())).await;
        let task_id = child.id.clone();
        let steps = child.steps;
        rt.children.lock().await.insert(task_id.clone(), child);
        let mut metadata = serde_json::Map::new();
        metadata.insert("task_id".into(), json!(task_id));
        metadata.insert("agent".into(), json!(params.subagent_type));
        metadata.insert("steps".into(), json!(steps));
        metadata.insert("end".into(), json!(outcome.end.reason()));
        let note = match &outcome.end {
            super::End::Finished => String::new(),
            other => format!(
                "\n(The subagent stopped early: {}{})",
                other.reason(),
                other
                    .message()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
        };
        Ok(ToolOutput {
            title: format!(
                "{} (@{} subagent)",
                params.description, params.subagent_type
            ),
            output: format!(
                "task_id: {task_id} (pass it as task_id to continue this subagent)\n\n<task_result>\n{}{note}\n</task_result>",
                outcome.answer
            ),
            metadata,
            attachments: Vec::new(),
        })
    }
}

impl Agent {
    /// A subagent under the session `parent_id`: the parent's rules, the subagent's own,
    /// then the parent's denies again, so no subagent definition can reopen what the
    /// parent may not do.
    async fn child_of(
        rt: &Arc<Runtime>,
        parent_id: &str,
        def: super::AgentDef,
    ) -> Result<Agent, super::UnusableModel> {
        let llm = rt.model_for(&def)?;
        let parent_rules = rt.rules_of(parent_id);
        let mut rules = parent_rules.clone();
        rules.extend(def.rules.iter().cloned());
        rules.extend(
            parent_rules
                .iter()
                .filter(|r| r.action == runner_permission::rules::Action::Deny)
                .cloned(),
        );
        let depth = rt.depth_of(parent_id) + 1;
        let id = super::record::new_id();
        rt.remember(&id, rules.clone(), depth);
        Ok(Agent::new(rt, id, Some(parent_id.to_string()), def, rules, depth, llm).await)
    }
}
