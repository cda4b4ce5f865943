//! `batch`: several independent tool calls in one, run concurrently. Each goes through the
//! registry exactly as a call of its own would (validation, its own permission asks, output
//! truncation), and each result is reported on its own: one failing call does not fail the
//! others.

use std::sync::Arc;

use futures_util::future::join_all;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::registry::{CallResult, Outcome, Registry};
use super::{Attachment, Tool, ToolContext, ToolError, ToolOutput, ToolResult};
use runner_permission::PermissionRequest;

pub const MAX_CALLS: usize = 25;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct BatchCall {
    /// The name of the tool to call
    pub tool: String,
    /// The tool's parameters, exactly as a call of that tool on its own would take them
    #[serde(default)]
    pub parameters: Map<String, Value>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct BatchParams {
    /// The calls to run together (1 to 25)
    #[schemars(length(min = 1, max = 25))]
    pub tool_calls: Vec<BatchCall>,
}

pub struct BatchTool;

impl BatchTool {
    fn registry(ctx: &ToolContext) -> Arc<Registry> {
        ctx.registry
            .clone()
            .unwrap_or_else(|| Arc::new(Registry::builtin()))
    }
}

fn is_batch(registry: &Registry, name: &str) -> bool {
    registry
        .get(name)
        .map_or(name.eq_ignore_ascii_case("batch"), |t| t.id() == "batch")
}

fn check_count(calls: &[BatchCall]) -> Result<(), ToolError> {
    if calls.is_empty() {
        return Err(ToolError::Failed(
            "Give at least one call in tool_calls.".into(),
        ));
    }
    if calls.len() > MAX_CALLS {
        return Err(ToolError::Failed(format!(
            "A batch holds at most {MAX_CALLS} calls, got {}. Split them into several batches.",
            calls.len()
        )));
    }
    Ok(())
}

impl Tool for BatchTool {
    type Params = BatchParams;

    fn id(&self) -> &'static str {
        "batch"
    }

    fn description(&self) -> &'static str {
        include_str!("batch.txt")
    }

    /// Batch asks nothing itself; these are its calls' asks, one call after the other
    /// (when it runs, the calls ask concurrently). Calls that would be refused or whose
    /// arguments are wrong ask nothing.
    async fn permissions(
        &self,
        params: &BatchParams,
        ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        check_count(&params.tool_calls)?;
        let registry = Self::registry(ctx);
        let mut asks = Vec::new();
        for call in &params.tool_calls {
            if is_batch(&registry, &call.tool) {
                continue;
            }
            let args = Value::Object(call.parameters.clone());
            if let Ok(more) = registry.permissions(&call.tool, args, ctx).await {
                asks.extend(more);
            }
        }
        Ok(asks)
    }

    async fn execute(&self, params: BatchParams, ctx: &ToolContext) -> ToolResult {
        check_count(&params.tool_calls)?;
        let registry = Self::registry(ctx);
        let results: Vec<CallResult> = join_all(params.tool_calls.iter().map(|call| {
            let registry = &registry;
            async move {
                if is_batch(registry, &call.tool) {
                    return refused(&call.tool);
                }
                registry
                    .call(&call.tool, Value::Object(call.parameters.clone()), ctx)
                    .await
            }
        }))
        .await;

        let total = results.len();
        let ok = results.iter().filter(|r| r.outcome == Outcome::Ok).count();
        let mut output = format!("{ok} of {total} calls succeeded.\n");
        let mut attachments: Vec<Attachment> = Vec::new();
        let mut calls = Vec::with_capacity(total);
        // A dead sandbox ends the run, not just this entry.
        if let Some(lost) = results.iter().find(|r| r.outcome == Outcome::SandboxLost) {
            return Err(ToolError::Sandbox(
                runner_sandbox::SandboxError::Disconnected(lost.error.clone().unwrap_or_default()),
            ));
        }
        for (i, (call, r)) in params.tool_calls.iter().zip(results).enumerate() {
            let status = match r.outcome {
                Outcome::SandboxLost => "sandbox_lost",
                Outcome::Ok => "ok",
                Outcome::Failed => "error",
                Outcome::Denied => "denied",
                Outcome::Cancelled => "cancelled",
            };
            let body = r.error.as_deref().unwrap_or(&r.output);
            output.push_str(&format!(
                "\n<call index=\"{}\" tool=\"{}\" status=\"{status}\">\n{}",
                i + 1,
                attr(&call.tool),
                body.trim_end()
            ));
            if !r.attachments.is_empty() {
                output.push_str(&format!(
                    "\n({} attachment(s) from this call are attached to the batch result)",
                    r.attachments.len()
                ));
            }
            output.push_str("\n</call>\n");
            calls.push(serde_json::json!({
                "tool": call.tool,
                "ok": r.outcome == Outcome::Ok,
                "outcome": r.outcome,
                "title": r.title,
                "error": r.error,
            }));
            attachments.extend(r.attachments);
        }
        Ok(ToolOutput {
            title: format!("{ok}/{total} succeeded"),
            output: output.trim_end().to_string(),
            metadata: crate::meta! { "calls" => calls },
            attachments,
        })
    }
}

fn refused(tool: &str) -> CallResult {
    CallResult {
        tool: tool.to_string(),
        title: String::new(),
        output: String::new(),
        metadata: Map::new(),
        attachments: Vec::new(),
        error: Some(
            "batch cannot run inside batch. Put these calls directly in the outer batch instead."
                .into(),
        ),
        outcome: Outcome::Failed,
    }
}

fn attr(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testing::{TestCtx, ask};
    use runner_permission::AskPolicy;

    #[tokio::test]
    async fn two_reads_run_and_report_each() {
        let t = TestCtx::new().await;
        t.write("a.txt", "alpha\n");
        t.write("b.txt", "beta\n");
        let ctx = t.ctx.clone().with_registry(Arc::new(Registry::builtin()));
        let r = Registry::builtin()
            .call(
                "batch",
                json!({ "tool_calls": [
                    { "tool": "read", "parameters": { "filePath": "a.txt" } },
                    { "tool": "read", "parameters": { "filePath": "b.txt" } },
                ] }),
                &ctx,
            )
            .await;
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        assert_eq!(r.title, "2/2 succeeded");
        assert!(
            r.output.starts_with(
                "2 of 2 calls succeeded.\n\n<call index=\"1\" tool=\"read\" status=\"ok\">\n"
            ),
            "{}",
            r.output
        );
        assert!(r.output.contains("1: alpha"), "{}", r.output);
        assert!(
            r.output
                .contains("<call index=\"2\" tool=\"read\" status=\"ok\">\n"),
            "{}",
            r.output
        );
        assert!(r.output.contains("1: beta"), "{}", r.output);
        assert_eq!(
            r.metadata["calls"],
            json!([
                { "tool": "read", "ok": true, "outcome": "ok", "title": "a.txt", "error": null },
                { "tool": "read", "ok": true, "outcome": "ok", "title": "b.txt", "error": null },
            ])
        );
        // Each call asked its own permission.
        let mut asks = t.asks();
        asks.sort();
        assert_eq!(
            asks,
            vec![
                ask("read", &["a.txt"], &["*"]),
                ask("read", &["b.txt"], &["*"])
            ]
        );
        let tools: Vec<Option<String>> = t.gate.asked().into_iter().map(|r| r.tool).collect();
        assert_eq!(tools, [Some("read".to_string()), Some("read".to_string())]);
    }

    #[tokio::test]
    async fn a_failing_call_does_not_fail_the_others() {
        let t = TestCtx::new().await;
        t.write("a.txt", "alpha\n");
        // Without a registry on the context, the built-in one is used.
        let r = Registry::builtin()
            .call(
                "batch",
                json!({ "tool_calls": [
                    { "tool": "read", "parameters": { "filePath": "missing.txt" } },
                    { "tool": "read", "parameters": { "filePath": "a.txt" } },
                    { "tool": "nope" },
                ] }),
                &t.ctx,
            )
            .await;
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        assert_eq!(r.title, "1/3 succeeded");
        assert!(
            r.output
                .contains("<call index=\"1\" tool=\"read\" status=\"error\">\nFile not found"),
            "{}",
            r.output
        );
        assert!(
            r.output
                .contains("<call index=\"2\" tool=\"read\" status=\"ok\">"),
            "{}",
            r.output
        );
        assert!(r.output.contains("<call index=\"3\" tool=\"nope\" status=\"error\">\nThe arguments provided to the tool are invalid: Unknown tool 'nope'"), "{}", r.output);
        let calls = r.metadata["calls"].as_array().unwrap();
        assert_eq!(calls[0]["ok"], json!(false));
        assert_eq!(calls[1]["ok"], json!(true));
    }

    #[tokio::test]
    async fn a_denied_call_is_reported_as_denied() {
        let t = TestCtx::with_policy(AskPolicy::Deny).await;
        t.write("a.txt", "alpha\n");
        let r = Registry::builtin()
            .call(
                "batch",
                json!({ "tool_calls": [{ "tool": "read", "parameters": { "filePath": "a.txt" } }] }),
                &t.ctx,
            )
            .await;
        assert_eq!(r.outcome, Outcome::Ok);
        assert_eq!(r.title, "0/1 succeeded");
        assert!(r.output.contains("status=\"denied\""), "{}", r.output);
    }

    #[tokio::test]
    async fn nested_batch_and_too_many_calls_are_refused() {
        let t = TestCtx::new().await;
        t.write("a.txt", "alpha\n");
        let reg = Registry::builtin();
        let r = reg
            .call(
                "batch",
                json!({ "tool_calls": [
                    { "tool": "Batch", "parameters": { "tool_calls": [] } },
                    { "tool": "read", "parameters": { "filePath": "a.txt" } },
                ] }),
                &t.ctx,
            )
            .await;
        assert_eq!(r.title, "1/2 succeeded");
        assert!(
            r.output.contains(
                "<call index=\"1\" tool=\"Batch\" status=\"error\">\nbatch cannot run inside batch"
            ),
            "{}",
            r.output
        );

        let calls: Vec<Value> = (0..26)
            .map(|_| json!({ "tool": "read", "parameters": { "filePath": "a.txt" } }))
            .collect();
        let r = reg
            .call("batch", json!({ "tool_calls": calls }), &t.ctx)
            .await;
        assert_eq!(r.outcome, Outcome::Failed);
        assert!(r.error.unwrap().contains("at most 25 calls, got 26"));
        let r = reg.call("batch", json!({ "tool_calls": [] }), &t.ctx).await;
        assert_eq!(r.outcome, Outcome::Failed);
        assert_eq!(t.asks(), vec![ask("read", &["a.txt"], &["*"])]);
    }

    #[tokio::test]
    async fn permissions_are_the_calls_asks() {
        let t = TestCtx::new().await;
        let asks = Registry::builtin()
            .permissions(
                "batch",
                json!({ "tool_calls": [
                    { "tool": "glob", "parameters": { "pattern": "*.rs" } },
                    { "tool": "batch", "parameters": {} },
                    { "tool": "todoread" },
                ] }),
                &t.ctx,
            )
            .await
            .unwrap();
        let asks: Vec<(String, Vec<String>)> = asks
            .into_iter()
            .map(|a| (a.permission, a.patterns))
            .collect();
        assert_eq!(
            asks,
            vec![
                ("glob".to_string(), vec!["*.rs".to_string()]),
                ("todoread".to_string(), vec!["*".to_string()]),
            ]
        );
        let schema = crate::DynTool::parameters(&BatchTool);
        assert_eq!(
            schema["properties"]["tool_calls"]["maxItems"],
            json!(25),
            "{schema}"
        );
    }
}
