//! `write`: replace a file's whole content, atomically, only over the version the model read.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolResult, diff};
use runner_permission::PermissionRequest;
use runner_sandbox::api::WritePrecondition;

/// Existing files bigger than this are not loaded for the diff; they can still be replaced.
const DIFF_LIMIT: u64 = 8 * 1024 * 1024;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteParams {
    /// The absolute path to the file to write (must be absolute, not relative)
    pub file_path: String,
    /// The content to write to the file
    pub content: String,
}

pub struct WriteTool;

impl Tool for WriteTool {
    type Params = WriteParams;

    fn id(&self) -> &'static str {
        "write"
    }

    fn description(&self) -> &'static str {
        include_str!("write.txt")
    }

    /// The directory, then `edit` for the worktree-relative path (the diff is attached when
    /// the call runs).
    async fn permissions(
        &self,
        params: &WriteParams,
        ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        super::edit::file_edit_asks(&params.file_path, ctx)
    }

    async fn execute(&self, params: WriteParams, ctx: &ToolContext) -> ToolResult {
        let mut asks = self.permissions(&params, ctx).await?;
        let edit_ask = asks.pop();
        ctx.ask_all(asks).await?;
        let path = ctx.resolve(&params.file_path)?;
        let _guard = ctx.conversation.lock_file(&path).await;
        let client = &ctx.services.sandbox.client;

        let existing = ctx.stat_for_overwrite(&path).await?;
        let (before, precondition) = match &existing {
            Some(stat) => {
                let before = if stat.stamp.size <= DIFF_LIMIT {
                    let old = client.read_all(&path, DIFF_LIMIT).await?;
                    String::from_utf8_lossy(&old.data).into_owned()
                } else {
                    String::new()
                };
                (before, WritePrecondition::Unchanged(stat.stamp))
            }
            None => (String::new(), WritePrecondition::Absent),
        };

        let rel = ctx.relative(&path);
        let patch = diff::unified(&rel, &before, &params.content);
        if let Some(ask) = edit_ask {
            ctx.ask(ask.with_metadata(serde_json::json!({ "filepath": path, "diff": patch })))
                .await?;
        }

        ctx.write_checked(&path, params.content.into_bytes(), precondition)
            .await?;
        Ok(ToolOutput {
            title: rel,
            output: "Wrote file successfully.".into(),
            metadata: crate::meta! {
                "filepath" => path,
                "exists" => existing.is_some(),
                "diff" => patch,
            },
            attachments: Vec::new(),
        })
    }
}
