//! `apply_patch`: the `*** Begin Patch` format. The whole patch is parsed and verified
//! against the files before anything is written, so a patch that fails anywhere changes
//! nothing; if a write itself fails midway (disk full), the writes already made are undone.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolResult, diff};
use runner_patch::{FileChange, Hunk, ReadFailure, parse_patch, plan};
use runner_permission::PermissionRequest;
use runner_protocol::{ErrorKind, FileStamp, WritePrecondition};
use runner_sandbox::SandboxError;

/// Files bigger than this are not patched; a patch to a file this size is almost surely a
/// mistake, and the whole text has to travel through the sandbox twice.
const MAX_FILE: u64 = 64 * 1024 * 1024;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplyPatchParams {
    /// The full patch text that describes all changes to be made
    pub patch_text: String,
}

pub struct ApplyPatchTool;

fn parse(params: &ApplyPatchParams) -> Result<Vec<Hunk>, ToolError> {
    if params.patch_text.trim().is_empty() {
        return Err(ToolError::Failed("patchText is required".into()));
    }
    parse_patch(&params.patch_text).map_err(|e| ToolError::Failed(e.tool_message()))
}

/// The file a hunk changes and, for a move, where it goes.
fn hunk_paths(hunk: &Hunk) -> (&String, Option<&String>) {
    match hunk {
        Hunk::Add { path, .. } | Hunk::Delete { path } => (path, None),
        Hunk::Update {
            path, move_path, ..
        } => (path, move_path.as_ref()),
    }
}

/// What was on disk before the patch, per resolved path.
type Before = HashMap<PathBuf, Result<(String, FileStamp), ReadFailure>>;

impl Tool for ApplyPatchTool {
    type Params = ApplyPatchParams;

    fn id(&self) -> &'static str {
        "apply_patch"
    }

    fn description(&self) -> &'static str {
        include_str!("apply_patch.txt")
    }

    /// Every file's directory when outside the worktree (move targets too), then one `edit`
    /// ask naming every file the patch touches, both ends of a move included (OpenCode names
    /// only the source, so a deny on the target never fired).
    async fn permissions(
        &self,
        params: &ApplyPatchParams,
        ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        let hunks = parse(params)?;
        let mut asks = Vec::new();
        let mut patterns: Vec<String> = Vec::new();
        for hunk in &hunks {
            let (path, move_path) = hunk_paths(hunk);
            for p in std::iter::once(path).chain(move_path) {
                let resolved = ctx.resolve(p)?;
                if let Some(ask) = ctx.external_request(&resolved, false)
                    && !asks.contains(&ask)
                {
                    asks.push(ask);
                }
            }
            // A move writes its target too: a rule denying edits there must see it.
            for p in std::iter::once(path).chain(move_path) {
                let rel = ctx.relative(&ctx.resolve(p)?);
                if !patterns.contains(&rel) {
                    patterns.push(rel);
                }
            }
        }
        asks.push(PermissionRequest::new("edit", patterns, vec!["*".into()]));
        Ok(asks)
    }

    async fn execute(&self, params: ApplyPatchParams, ctx: &ToolContext) -> ToolResult {
        let hunks = parse(&params)?;
        let mut asks = self.permissions(&params, ctx).await?;
        let edit_ask = asks.pop();
        ctx.ask_all(asks).await?;

        let before = read_all_before(&hunks, ctx).await?;
        let mut read = |p: &str| -> Result<String, ReadFailure> {
            let resolved = ctx
                .resolve(p)
                .map_err(|e| ReadFailure::Other(e.to_string()))?;
            match before.get(&resolved) {
                Some(Ok((text, _))) => Ok(text.clone()),
                Some(Err(e)) => Err(e.clone()),
                None => Err(ReadFailure::Missing),
            }
        };
        let changes = plan(&hunks, &mut read).map_err(|e| ToolError::Failed(e.tool_message()))?;

        let Described {
            files,
            patterns,
            summary,
            combined,
        } = describe(&changes, &before, ctx)?;
        if let Some(ask) = edit_ask {
            ctx.ask(ask.with_metadata(
                json!({ "filepath": patterns.join(", "), "diff": combined, "files": files }),
            ))
            .await?;
        }

        let mut guards = Vec::new();
        let mut locked: Vec<&PathBuf> = before.keys().collect();
        locked.sort();
        for path in locked {
            guards.push(ctx.conversation.lock_file(path).await);
        }
        apply_all(ctx, &changes, &before).await?;

        let title = format!(
            "Success. Updated the following files:\n{}",
            summary.join("\n")
        );
        let errors = errors_after(&changes, ctx).await;
        Ok(ToolOutput {
            output: format!("{title}{errors}"),
            title,
            metadata: crate::meta! { "diff" => combined, "files" => files },
            attachments: Vec::new(),
        })
    }
}

/// Every file the hunks name (and every move target), as it is before the patch: read
/// once, so the plan and the diffs the ask shows see the same text.
async fn read_all_before(hunks: &[Hunk], ctx: &ToolContext) -> Result<Before, ToolError> {
    let mut before: Before = HashMap::new();
    for hunk in hunks {
        let (path, move_path) = hunk_paths(hunk);
        for p in std::iter::once(path).chain(move_path) {
            let resolved = ctx.resolve(p)?;
            if let std::collections::hash_map::Entry::Vacant(slot) = before.entry(resolved) {
                let state = read_before(ctx, slot.key()).await?;
                slot.insert(state);
            }
        }
    }
    Ok(before)
}

/// What a patch's changes look like to the person asked and to the model: each file's
/// diff and counts, the paths, one summary line per file, and the whole diff.
struct Described {
    files: Vec<serde_json::Value>,
    patterns: Vec<String>,
    summary: Vec<String>,
    combined: String,
}

/// The language servers' errors in the files the patch wrote (a deleted file has none).
async fn errors_after(changes: &[FileChange], ctx: &ToolContext) -> String {
    let mut out = String::new();
    for change in changes {
        let (path, text) = match change {
            FileChange::Add { path, content } => (path, content),
            FileChange::Update {
                path,
                move_path,
                new_content,
                ..
            } => (move_path.as_ref().unwrap_or(path), new_content),
            FileChange::Delete { .. } => continue,
        };
        if let Ok(path) = ctx.resolve(path) {
            out.push_str(&super::diagnostics::after_edit(ctx, &path, text).await);
        }
    }
    out
}

fn describe(
    changes: &[FileChange],
    before: &Before,
    ctx: &ToolContext,
) -> Result<Described, ToolError> {
    let mut files = Vec::new();
    let mut patterns = Vec::new();
    let mut summary = Vec::new();
    let mut combined = String::new();
    for change in changes {
        let path = ctx.resolve(change.path())?;
        let rel = ctx.relative(&path);
        let (kind, before_text, after_text, move_rel, line) = match change {
            FileChange::Add { content, .. } => {
                let old = before
                    .get(&path)
                    .and_then(|s| s.as_ref().ok())
                    .map(|(t, _)| t.as_str());
                (
                    "add",
                    old.unwrap_or(""),
                    content.as_str(),
                    None,
                    format!("A {rel}"),
                )
            }
            FileChange::Delete { old_content, .. } => {
                ("delete", old_content.as_str(), "", None, format!("D {rel}"))
            }
            FileChange::Update {
                move_path,
                old_content,
                new_content,
                ..
            } => {
                let target = match move_path {
                    Some(m) => Some(ctx.relative(&ctx.resolve(m)?)),
                    None => None,
                };
                let line = format!("M {}", target.as_deref().unwrap_or(&rel));
                let kind = if target.is_some() { "move" } else { "update" };
                (
                    kind,
                    old_content.as_str(),
                    new_content.as_str(),
                    target,
                    line,
                )
            }
        };
        let file_diff = diff::unified(&rel, before_text, after_text);
        let (additions, deletions) = diff::count_changes(before_text, after_text);
        combined.push_str(&file_diff);
        files.push(json!({
            "filePath": path, "relativePath": rel, "type": kind, "diff": file_diff,
            "additions": additions, "deletions": deletions, "movePath": move_rel,
        }));
        if !patterns.contains(&rel) {
            patterns.push(rel);
        }
        summary.push(line);
    }
    Ok(Described {
        files,
        patterns,
        summary,
        combined,
    })
}

async fn read_before(
    ctx: &ToolContext,
    path: &Path,
) -> Result<Result<(String, FileStamp), ReadFailure>, ToolError> {
    match ctx.services.sandbox.client.read_all(path, MAX_FILE).await {
        Ok(r) => Ok(match String::from_utf8(r.data) {
            Ok(text) => Ok((text, r.stamp)),
            Err(_) => Err(ReadFailure::Other(format!(
                "{} is not UTF-8 text",
                path.display()
            ))),
        }),
        Err(SandboxError::Api(e)) => Ok(Err(match e.kind {
            ErrorKind::NotFound => ReadFailure::Missing,
            ErrorKind::IsDirectory => ReadFailure::IsDirectory,
            _ => ReadFailure::Other(e.message),
        })),
        Err(e) => Err(e.into()),
    }
}

/// One step taken, with what is needed to take it back.
enum Undo {
    Restore { path: PathBuf, content: String },
    Remove { path: PathBuf },
}

async fn apply_all(
    ctx: &ToolContext,
    changes: &[FileChange],
    before: &Before,
) -> Result<(), ToolError> {
    let client = &ctx.services.sandbox.client;
    // Expected stamps: a file patched twice is expected in the version the first write left.
    let mut stamps: HashMap<PathBuf, Option<FileStamp>> = before
        .iter()
        .map(|(p, s)| (p.clone(), s.as_ref().ok().map(|(_, st)| *st)))
        .collect();
    let mut undo: Vec<Undo> = Vec::new();
    let mut content_now: HashMap<PathBuf, Option<String>> = before
        .iter()
        .map(|(p, s)| (p.clone(), s.as_ref().ok().map(|(t, _)| t.clone())))
        .collect();

    let result: Result<(), (PathBuf, SandboxError)> = async {
        for change in changes {
            let path = ctx
                .resolve(change.path())
                .map_err(|e| (PathBuf::new(), SandboxError::Protocol(e.to_string())))?;
            match change {
                FileChange::Add { content, .. } => {
                    write_tracked(
                        ctx,
                        &path,
                        content,
                        &mut stamps,
                        &mut content_now,
                        &mut undo,
                    )
                    .await?;
                }
                FileChange::Update {
                    move_path: None,
                    new_content,
                    ..
                } => {
                    write_tracked(
                        ctx,
                        &path,
                        new_content,
                        &mut stamps,
                        &mut content_now,
                        &mut undo,
                    )
                    .await?;
                }
                FileChange::Update {
                    move_path: Some(dest),
                    new_content,
                    ..
                } => {
                    let dest = ctx
                        .resolve(dest)
                        .map_err(|e| (PathBuf::new(), SandboxError::Protocol(e.to_string())))?;
                    write_tracked(
                        ctx,
                        &dest,
                        new_content,
                        &mut stamps,
                        &mut content_now,
                        &mut undo,
                    )
                    .await?;
                    remove_tracked(ctx, &path, &mut content_now, &mut undo).await?;
                }
                FileChange::Delete { .. } => {
                    remove_tracked(ctx, &path, &mut content_now, &mut undo).await?
                }
            }
        }
        Ok(())
    }
    .await;

    let Err((path, error)) = result else {
        return Ok(());
    };
    let rollback = roll_back(client, undo).await;
    Err(ToolError::Failed(format!(
        "apply_patch failed while writing {}: {error}. {rollback}",
        path.display()
    )))
}

/// Undoes the writes and removals already made, last first: what to tell the model about
/// the files as they are now.
async fn roll_back(client: &runner_sandbox::SandboxClient, undo: Vec<Undo>) -> String {
    let mut unrestored = Vec::new();
    for step in undo.into_iter().rev() {
        let outcome = match &step {
            Undo::Restore { path, content } => client
                .write(path, content.clone().into_bytes(), None)
                .await
                .map(|_| ()),
            Undo::Remove { path } => client.remove(path).await,
        };
        if outcome.is_err() {
            unrestored.push(match step {
                Undo::Restore { path, .. } | Undo::Remove { path } => path.display().to_string(),
            });
        }
    }
    if unrestored.is_empty() {
        "The changes already made were undone; no file was changed.".to_string()
    } else {
        format!(
            "These files could not be restored and need a look: {}",
            unrestored.join(", ")
        )
    }
}

async fn write_tracked(
    ctx: &ToolContext,
    path: &Path,
    content: &str,
    stamps: &mut HashMap<PathBuf, Option<FileStamp>>,
    content_now: &mut HashMap<PathBuf, Option<String>>,
    undo: &mut Vec<Undo>,
) -> Result<(), (PathBuf, SandboxError)> {
    let precondition = match stamps.get(path).copied().flatten() {
        Some(stamp) => WritePrecondition::Unchanged(stamp),
        None => WritePrecondition::Absent,
    };
    let written = ctx
        .sandbox()
        .client
        .write(path, content.as_bytes().to_vec(), Some(precondition))
        .await
        .map_err(|e| (path.to_path_buf(), e))?;
    undo.push(match content_now.get(path).cloned().flatten() {
        Some(old) => Undo::Restore {
            path: path.to_path_buf(),
            content: old,
        },
        None => Undo::Remove {
            path: path.to_path_buf(),
        },
    });
    stamps.insert(path.to_path_buf(), Some(written.stamp));
    content_now.insert(path.to_path_buf(), Some(content.to_string()));
    ctx.conversation.file_times.record(path, written.stamp);
    Ok(())
}

async fn remove_tracked(
    ctx: &ToolContext,
    path: &Path,
    content_now: &mut HashMap<PathBuf, Option<String>>,
    undo: &mut Vec<Undo>,
) -> Result<(), (PathBuf, SandboxError)> {
    ctx.services
        .sandbox
        .client
        .remove(path)
        .await
        .map_err(|e| (path.to_path_buf(), e))?;
    if let Some(old) = content_now.get(path).cloned().flatten() {
        undo.push(Undo::Restore {
            path: path.to_path_buf(),
            content: old,
        });
    }
    content_now.insert(path.to_path_buf(), None);
    Ok(())
}
