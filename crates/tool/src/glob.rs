//! `glob`: files by name pattern, newest first.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolResult};
use runner_permission::PermissionRequest;
use runner_protocol::FileKind;

pub const LIMIT: usize = 100;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct GlobParams {
    /// The glob pattern to match files against
    pub pattern: String,
    /// The directory to search in. Defaults to the worktree. Must be a directory if given.
    #[serde(default)]
    pub path: Option<String>,
}

pub struct GlobTool;

impl Tool for GlobTool {
    type Params = GlobParams;

    fn id(&self) -> &'static str {
        "glob"
    }

    fn description(&self) -> &'static str {
        include_str!("glob.txt")
    }

    /// Its own permission first, then the directory (OpenCode's order).
    async fn permissions(
        &self,
        params: &GlobParams,
        ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        let mut asks = vec![PermissionRequest::new(
            "glob",
            vec![params.pattern.clone()],
            vec!["*".into()],
        )];
        asks.extend(ctx.external_request(&search_root(params.path.as_deref(), ctx)?, true));
        Ok(asks)
    }

    async fn execute(&self, params: GlobParams, ctx: &ToolContext) -> ToolResult {
        if params.pattern.trim().is_empty() {
            return Err(ToolError::Failed("pattern is required".into()));
        }
        ctx.ask_all(self.permissions(&params, ctx).await?).await?;
        let root = search_root(params.path.as_deref(), ctx)?;
        if ctx.services.sandbox.client.stat(&root).await?.kind != FileKind::Dir {
            return Err(ToolError::Failed(format!(
                "glob path must be a directory: {}",
                root.display()
            )));
        }
        let found = ctx
            .sandbox()
            .client
            .glob(root.clone(), &params.pattern, LIMIT)
            .await?;
        let mut output = if found.files.is_empty() {
            "No files found".to_string()
        } else {
            found
                .files
                .iter()
                .map(|f| f.path.to_string_lossy())
                .collect::<Vec<_>>()
                .join("\n")
        };
        if found.truncated {
            output.push_str(&format!(
                "\n\n(Results are truncated: showing first {LIMIT} results. Consider using a more specific path or pattern.)"
            ));
        }
        Ok(ToolOutput {
            title: ctx.relative(&root),
            output,
            metadata: crate::meta! { "count" => found.files.len(), "truncated" => found.truncated },
            attachments: Vec::new(),
        })
    }
}

/// The directory a search starts in: `path` against the worktree, else the worktree.
pub(super) fn search_root(path: Option<&str>, ctx: &ToolContext) -> Result<PathBuf, ToolError> {
    match path {
        Some(p) if !p.trim().is_empty() => ctx.resolve(p),
        _ => Ok(ctx.worktree().to_path_buf()),
    }
}
