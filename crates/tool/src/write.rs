//! `write`: replace a file's whole content, atomically, only over the version the model read.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolResult, diff};
use runner_edit::text::{BOM, join_bom, split_bom};
use runner_permission::PermissionRequest;
use runner_protocol::WritePrecondition;

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
        let (before, had_bom, precondition) = match &existing {
            Some(stat) if stat.stamp.size <= DIFF_LIMIT => {
                let old = client.read_all(&path, DIFF_LIMIT).await?;
                let before = String::from_utf8_lossy(&old.data).into_owned();
                let had_bom = split_bom(&before).0;
                (before, had_bom, WritePrecondition::Unchanged(stat.stamp))
            }
            Some(stat) => {
                // Too big to show in the diff: only its first character matters here.
                let head = client.read(&path, 0, 3).await?;
                let had_bom = head.data.starts_with("\u{feff}".as_bytes());
                (
                    String::new(),
                    had_bom,
                    WritePrecondition::Unchanged(stat.stamp),
                )
            }
            None => (String::new(), false, WritePrecondition::Absent),
        };
        // A file that starts with a byte order mark keeps it, as with `edit`: the model
        // never writes the invisible U+FEFF, and the tools that want it would stop reading
        // the file right.
        let (_, content) = split_bom(&params.content);
        let content = join_bom(had_bom || params.content.starts_with(BOM), content);

        let rel = ctx.relative(&path);
        let patch = diff::unified(&rel, &before, &content);
        if let Some(ask) = edit_ask {
            ctx.ask(ask.with_metadata(serde_json::json!({ "filepath": path, "diff": patch })))
                .await?;
        }

        ctx.write_checked(&path, content.clone().into_bytes(), precondition)
            .await?;
        let errors = super::diagnostics::after_edit(ctx, &path, &content).await;
        Ok(ToolOutput {
            title: rel,
            output: format!("Wrote file successfully.{errors}"),
            metadata: crate::meta! {
                "filepath" => path,
                "exists" => existing.is_some(),
                "diff" => patch,
            },
            attachments: Vec::new(),
        })
    }
}
