//! `todowrite` and `todoread`: the model's own plan for the session, a short list of steps
//! with a status each. The list lives in the [`super::Session`]; nothing touches files.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolResult};
use runner_permission::PermissionRequest;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Completed,
    Cancelled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TodoPriority {
    High,
    Medium,
    Low,
}

/// One step of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Todo {
    /// What the step is, in a few words
    pub content: String,
    /// pending, in_progress (at most one step at a time), completed or cancelled
    pub status: TodoStatus,
    /// high, medium or low
    pub priority: TodoPriority,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct TodoWriteParams {
    /// The whole updated list; it replaces the previous one
    pub todos: Vec<Todo>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct TodoReadParams {}

pub struct TodoWriteTool;
pub struct TodoReadTool;

impl Tool for TodoWriteTool {
    type Params = TodoWriteParams;

    fn id(&self) -> &'static str {
        "todowrite"
    }

    fn description(&self) -> &'static str {
        include_str!("todowrite.txt")
    }

    async fn permissions(
        &self,
        _params: &TodoWriteParams,
        _ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        Ok(vec![PermissionRequest::new(
            "todowrite",
            vec!["*".into()],
            vec!["*".into()],
        )])
    }

    async fn execute(&self, params: TodoWriteParams, ctx: &ToolContext) -> ToolResult {
        validate(&params.todos)?;
        ctx.ask_all(self.permissions(&params, ctx).await?).await?;
        ctx.conversation.set_todos(params.todos.clone());
        Ok(render(&params.todos))
    }
}

impl Tool for TodoReadTool {
    type Params = TodoReadParams;

    fn id(&self) -> &'static str {
        "todoread"
    }

    fn description(&self) -> &'static str {
        include_str!("todoread.txt")
    }

    async fn permissions(
        &self,
        _params: &TodoReadParams,
        _ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        Ok(vec![PermissionRequest::new(
            "todoread",
            vec!["*".into()],
            vec!["*".into()],
        )])
    }

    async fn execute(&self, params: TodoReadParams, ctx: &ToolContext) -> ToolResult {
        ctx.ask_all(self.permissions(&params, ctx).await?).await?;
        Ok(render(&ctx.conversation.todos()))
    }
}

/// Statuses and priorities are checked by deserialisation (an unknown value fails with the
/// list of allowed ones); what remains is the content and the single step in progress.
fn validate(todos: &[Todo]) -> Result<(), ToolError> {
    if let Some(i) = todos.iter().position(|t| t.content.trim().is_empty()) {
        return Err(ToolError::Failed(format!(
            "Todo {} has empty content; every step needs a short description.",
            i + 1
        )));
    }
    let active: Vec<&str> = todos
        .iter()
        .filter(|t| t.status == TodoStatus::InProgress)
        .map(|t| t.content.as_str())
        .collect();
    if active.len() > 1 {
        return Err(ToolError::Failed(format!(
            "Only one todo may be in_progress at a time, but {} are: {}. Keep the one you are working on in_progress, set the others to pending (or completed if they are done), and send the list again.",
            active.len(),
            active
                .iter()
                .map(|c| format!("{c:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(())
}

/// The list as pretty JSON; the title counts the steps not yet completed.
fn render(todos: &[Todo]) -> ToolOutput {
    let open = todos
        .iter()
        .filter(|t| t.status != TodoStatus::Completed)
        .count();
    ToolOutput {
        title: format!("{open} todos"),
        output: serde_json::to_string_pretty(todos).unwrap_or_else(|_| "[]".into()),
        metadata: crate::meta! { "todos" => todos },
        attachments: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::registry::Outcome;
    use crate::testing::{TestCtx, ask};
    use crate::{DynTool, Registry};

    #[tokio::test]
    async fn write_then_read_round_trips_through_the_session() {
        let t = TestCtx::new().await;
        let reg = Registry::builtin();
        let todos = json!([
            { "content": "read the code", "status": "completed", "priority": "high" },
            { "content": "write the tool", "status": "in_progress", "priority": "high" },
            { "content": "tests", "status": "pending", "priority": "medium" },
            { "content": "docs", "status": "cancelled", "priority": "low" },
        ]);
        let r = reg
            .call("todowrite", json!({ "todos": todos }), &t.ctx)
            .await;
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        assert_eq!(r.title, "3 todos");
        let parsed: serde_json::Value = serde_json::from_str(&r.output).unwrap();
        assert_eq!(parsed, todos);
        assert!(r.output.contains("\n  {"), "pretty JSON: {}", r.output);
        assert_eq!(r.metadata["todos"], todos);

        let r = reg.call("todoread", json!({}), &t.ctx).await;
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        assert_eq!(r.title, "3 todos");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&r.output).unwrap(),
            todos
        );
        assert_eq!(
            t.asks(),
            vec![
                ask("todowrite", &["*"], &["*"]),
                ask("todoread", &["*"], &["*"])
            ]
        );
    }

    #[tokio::test]
    async fn read_of_an_empty_session_is_an_empty_list() {
        let t = TestCtx::new().await;
        let r = Registry::builtin()
            .call("todoread", json!({}), &t.ctx)
            .await;
        assert_eq!(r.outcome, Outcome::Ok);
        assert_eq!(r.title, "0 todos");
        assert_eq!(r.output, "[]");
    }

    #[tokio::test]
    async fn unknown_status_and_two_in_progress_are_refused() {
        let t = TestCtx::new().await;
        let reg = Registry::builtin();
        let r = reg
            .call(
                "todowrite",
                json!({ "todos": [{ "content": "x", "status": "done", "priority": "high" }] }),
                &t.ctx,
            )
            .await;
        assert_eq!(r.outcome, Outcome::Failed);
        let err = r.error.unwrap();
        assert!(
            err.contains("unknown variant `done`") && err.contains("`in_progress`"),
            "{err}"
        );

        let r = reg
            .call(
                "todowrite",
                json!({ "todos": [
                    { "content": "a", "status": "in_progress", "priority": "high" },
                    { "content": "b", "status": "in_progress", "priority": "low" },
                ] }),
                &t.ctx,
            )
            .await;
        assert_eq!(r.outcome, Outcome::Failed);
        let err = r.error.unwrap();
        assert!(err.starts_with("Only one todo may be in_progress"), "{err}");
        assert!(err.contains("\"a\", \"b\""), "{err}");
        // Nothing was stored and nothing asked.
        assert!(t.ctx.conversation.todos().is_empty());
        assert!(t.asks().is_empty());
    }

    #[test]
    fn schema_lists_the_allowed_values() {
        let schema = DynTool::parameters(&TodoWriteTool).to_string();
        for v in ["in_progress", "cancelled", "medium"] {
            assert!(schema.contains(v), "{schema}");
        }
        let read = DynTool::parameters(&TodoReadTool);
        assert_eq!(read["type"], "object", "{read}");
    }
}
