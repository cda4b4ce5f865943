//! `edit`: replace a string in a file, finding it even when the model's copy differs in
//! whitespace, indentation or escaping (OpenCode's cascade of replacers, in runner-edit),
//! but never replacing text that is not recognisably the block the model meant.
//!
//! The core ([`edit_file`]) is shared with `multiedit`: all edits are applied to the text in
//! memory and the file is written once, atomically, only over the version the model read.

use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolResult, diff};
use runner_edit::replace::{self, ReplaceError};
use runner_edit::text;
use runner_permission::PermissionRequest;
use runner_protocol::WritePrecondition;

/// Files bigger than this are not edited in memory; use bash tools on them.
const MAX_FILE: u64 = 64 * 1024 * 1024;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EditParams {
    /// The absolute path to the file to modify
    pub file_path: String,
    /// The text to replace
    pub old_string: String,
    /// The text to replace it with (must be different from oldString)
    pub new_string: String,
    /// Replace all occurrences of oldString (default false)
    #[serde(default)]
    pub replace_all: Option<bool>,
}

pub struct EditTool;

impl Tool for EditTool {
    type Params = EditParams;

    fn id(&self) -> &'static str {
        "edit"
    }

    fn description(&self) -> &'static str {
        include_str!("edit.txt")
    }

    async fn permissions(
        &self,
        params: &EditParams,
        ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        file_edit_asks(&params.file_path, ctx)
    }

    async fn execute(&self, params: EditParams, ctx: &ToolContext) -> ToolResult {
        let edit = Edit {
            old: params.old_string,
            new: params.new_string,
            replace_all: params.replace_all.unwrap_or(false),
        };
        edit_file(ctx, &params.file_path, std::slice::from_ref(&edit)).await
    }
}

/// One replacement, as `edit` and each entry of `multiedit` describe it.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Edit {
    /// The text to replace
    #[serde(rename = "oldString")]
    pub old: String,
    /// The text to replace it with (must be different from oldString)
    #[serde(rename = "newString")]
    pub new: String,
    /// Replace all occurrences of oldString (default false)
    #[serde(default, rename = "replaceAll")]
    pub replace_all: bool,
}

/// What changing one file asks, shared by write, edit and multiedit: its directory when it
/// is outside the worktree, then `edit` for the worktree-relative path (last, so callers can
/// attach the diff to it once they have one).
pub fn file_edit_asks(
    file_path: &str,
    ctx: &ToolContext,
) -> Result<Vec<PermissionRequest>, ToolError> {
    Ok(ctx.file_asks(&ctx.resolve(file_path)?, false, "edit"))
}

/// Applies `edits` in order to one file and writes it once. If any edit fails, the file is
/// not touched and the error names the edit.
/// The file as it is now and the precondition its write must meet: its text and stamp
/// (it must not change under the edit), or absent.
async fn read_current(
    ctx: &ToolContext,
    path: &Path,
) -> Result<(Option<String>, WritePrecondition), ToolError> {
    let Some(stat) = ctx.stat_for_overwrite(path).await? else {
        return Ok((None, WritePrecondition::Absent));
    };
    let read = ctx.services.sandbox.client.read_all(path, MAX_FILE).await?;
    if read.stamp != stat.stamp {
        return Err(ToolError::Failed(format!(
            "File {} changed while it was being edited. Read it again, then retry.",
            path.display()
        )));
    }
    let text = String::from_utf8(read.data).map_err(|_| {
        ToolError::Failed(format!(
            "{} is not UTF-8 text; edit works on text files. Use bash to change binary files.",
            path.display()
        ))
    })?;
    Ok((Some(text), WritePrecondition::Unchanged(stat.stamp)))
}

/// The edits applied in order to `body`, each written in the file's own line endings. An
/// empty `old` creates the file, and is refused on a file with content (it would discard
/// it silently).
fn apply_edits(
    body: &str,
    edits: &[Edit],
    exists: bool,
    path: &Path,
    numbered: &dyn Fn(usize, String) -> String,
) -> Result<String, ToolError> {
    let ending = text::detect_line_ending(body);
    let mut current = body.to_string();
    for (i, e) in edits.iter().enumerate() {
        let old = text::convert_line_endings(&e.old, ending);
        let new = text::convert_line_endings(&e.new, ending);
        if old.is_empty() {
            if !current.is_empty() {
                return Err(ToolError::Failed(numbered(
                    i,
                    ReplaceError::EmptyOld.to_string(),
                )));
            }
            current = new;
            continue;
        }
        if !exists && i == 0 {
            return Err(ToolError::Failed(format!(
                "File {} not found",
                path.display()
            )));
        }
        current = replace::replace(&current, &old, &new, e.replace_all)
            .map_err(|err| ToolError::Failed(numbered(i, err.to_string())))?;
    }
    Ok(current)
}

pub async fn edit_file(ctx: &ToolContext, file_path: &str, edits: &[Edit]) -> ToolResult {
    let numbered = |i: usize, msg: String| {
        if edits.len() > 1 {
            format!("Edit {} of {}: {msg}", i + 1, edits.len())
        } else {
            msg
        }
    };
    // Checked before touching the file, as OpenCode does, so the model learns at once.
    for (i, e) in edits.iter().enumerate() {
        if e.old == e.new {
            return Err(ToolError::Failed(numbered(
                i,
                ReplaceError::Identical.to_string(),
            )));
        }
    }
    let mut asks = file_edit_asks(file_path, ctx)?;
    let edit_ask = asks.pop();
    ctx.ask_all(asks).await?;
    let path = ctx.resolve(file_path)?;
    let _guard = ctx.conversation.lock_file(&path).await;

    let (original, precondition) = read_current(ctx, &path).await?;
    let (had_bom, body) = match &original {
        Some(text) => {
            let (bom, rest) = text::split_bom(text);
            (bom, rest.to_string())
        }
        None => (false, String::new()),
    };
    let current = apply_edits(&body, edits, original.is_some(), &path, &numbered)?;
    let rel = ctx.relative(&path);
    let patch = text::trim_diff(&diff::unified(&rel, &body, &current));
    let (additions, deletions) = diff::count_changes(&body, &current);
    if let Some(ask) = edit_ask {
        ctx.ask(ask.with_metadata(serde_json::json!({ "filepath": path, "diff": patch })))
            .await?;
    }

    let mut bytes = Vec::with_capacity(current.len() + 3);
    if had_bom {
        bytes.extend_from_slice("\u{feff}".as_bytes());
    }
    bytes.extend_from_slice(current.as_bytes());
    ctx.write_checked(&path, bytes, precondition).await?;
    let errors = super::diagnostics::after_edit(ctx, &path, &current).await;

    Ok(ToolOutput {
        title: rel.clone(),
        output: format!("Edit applied successfully.{errors}"),
        metadata: crate::meta! {
            "diff" => patch,
            "filediff" => serde_json::json!({ "file": path, "additions": additions, "deletions": deletions }),
            "additions" => additions,
            "deletions" => deletions,
        },
        attachments: Vec::new(),
    })
}
