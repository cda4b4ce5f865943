//! `grep`: lines matching a regex, grouped by file, files newest first.

use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolResult};
use runner_permission::PermissionRequest;

pub const LIMIT: usize = 100;
const MAX_LINE_CHARS: usize = 2000;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct GrepParams {
    /// The regex pattern to search for in file contents
    pub pattern: String,
    /// The directory to search in. Defaults to the worktree.
    #[serde(default)]
    pub path: Option<String>,
    /// File pattern to include in the search (e.g. "*.js", "*.{ts,tsx}")
    #[serde(default)]
    pub include: Option<String>,
}

pub struct GrepTool;

impl Tool for GrepTool {
    type Params = GrepParams;

    fn id(&self) -> &'static str {
        "grep"
    }

    fn description(&self) -> &'static str {
        include_str!("grep.txt")
    }

    /// Its own permission first, then the directory (OpenCode's order).
    async fn permissions(
        &self,
        params: &GrepParams,
        ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        let mut asks = vec![PermissionRequest::new(
            "grep",
            vec![params.pattern.clone()],
            vec!["*".into()],
        )];
        let root = super::glob::search_root(params.path.as_deref(), ctx)?;
        asks.extend(ctx.external_request(&root, true));
        Ok(asks)
    }

    async fn execute(&self, params: GrepParams, ctx: &ToolContext) -> ToolResult {
        if params.pattern.is_empty() {
            return Err(ToolError::Failed("pattern is required".into()));
        }
        ctx.ask_all(self.permissions(&params, ctx).await?).await?;
        let root = super::glob::search_root(params.path.as_deref(), ctx)?;
        let include = params.include.as_deref().filter(|i| !i.trim().is_empty());
        let found = ctx
            .sandbox()
            .client
            .grep(root.clone(), &params.pattern, include, LIMIT)
            .await?;
        let title = params.pattern.clone();
        if found.matches.is_empty() {
            return Ok(ToolOutput {
                title,
                output: "No files found".into(),
                metadata: crate::meta! { "matches" => 0, "truncated" => false },
                attachments: Vec::new(),
            });
        }
        let mut output = format!("Found {} matches", found.total_matches);
        if found.truncated {
            output.push_str(&format!(" (showing first {LIMIT})"));
        }
        let mut current: Option<&Path> = None;
        for m in &found.matches {
            if current != Some(m.path.as_path()) {
                output.push_str(&format!("\n\n{}:", m.path.display()));
                current = Some(m.path.as_path());
            }
            output.push_str(&format!(
                "\n  Line {}: {}",
                m.line_number,
                cut_line(&m.text)
            ));
        }
        if found.truncated {
            output.push_str(&format!(
                "\n\n(Results truncated: showing {LIMIT} of {} matches ({} hidden). Consider using a more specific path or pattern.)",
                found.total_matches,
                found.total_matches - found.matches.len()
            ));
        }
        if found.partial {
            output.push_str("\n\n(Some paths were inaccessible and skipped)");
        }
        Ok(ToolOutput {
            title,
            output,
            metadata: crate::meta! { "matches" => found.total_matches, "truncated" => found.truncated },
            attachments: Vec::new(),
        })
    }
}

fn cut_line(text: &str) -> String {
    match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}
