//! `multiedit`: several edits of one file, applied in order, all or nothing.
//!
//! OpenCode's version wrote after every edit, so a failure halfway left the file half
//! edited although its description promised atomicity. Here the edits are applied to the
//! text in memory and the file is written once.

use schemars::JsonSchema;
use serde::Deserialize;

use super::edit::{Edit, edit_file};
use super::{Tool, ToolContext, ToolError, ToolResult};
use runner_permission::PermissionRequest;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MultiEditParams {
    /// The absolute path to the file to modify
    pub file_path: String,
    /// Array of edit operations to perform sequentially on the file
    pub edits: Vec<Edit>,
}

pub struct MultiEditTool;

impl Tool for MultiEditTool {
    type Params = MultiEditParams;

    fn id(&self) -> &'static str {
        "multiedit"
    }

    fn description(&self) -> &'static str {
        include_str!("multiedit.txt")
    }

    async fn permissions(
        &self,
        params: &MultiEditParams,
        ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        super::edit::file_edit_asks(&params.file_path, ctx)
    }

    async fn execute(&self, params: MultiEditParams, ctx: &ToolContext) -> ToolResult {
        if params.edits.is_empty() {
            return Err(ToolError::Failed(
                "edits must contain at least one edit".into(),
            ));
        }
        let mut out = edit_file(ctx, &params.file_path, &params.edits).await?;
        out.metadata
            .insert("edits".into(), params.edits.len().into());
        Ok(out)
    }
}
