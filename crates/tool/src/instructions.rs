//! The instructions a project writes for agents (`AGENTS.md`, else `CLAUDE.md`) in its
//! folders. The worktree root's file is in the system prompt; a folder's own file speaks to
//! the files below it, so `read` shows it the first time the model reads a file there (as
//! OpenCode does), once per conversation. Every file is read through the sandbox, like
//! anything else the model sees.

use std::path::{Path, PathBuf};

use super::ToolContext;

/// The names an instruction file has, in the order one is chosen in a folder.
pub const INSTRUCTION_FILES: &[&str] = &["AGENTS.md", "CLAUDE.md"];

/// More than this of one instruction file is not read.
pub const MAX_INSTRUCTIONS: u64 = 64 * 1024;

/// The instruction file of `dir` (`AGENTS.md`, else `CLAUDE.md`) and its text.
pub async fn in_folder(ctx: &ToolContext, dir: &Path) -> Option<(PathBuf, String)> {
    for name in INSTRUCTION_FILES {
        let path = dir.join(name);
        if let Ok(r) = ctx.sandbox().client.read_all(&path, MAX_INSTRUCTIONS).await {
            return Some((path, String::from_utf8_lossy(&r.data).into_owned()));
        }
    }
    None
}

/// The instruction files of the folders between `file` and the worktree root (the root's
/// own excluded: it is in the system prompt), outermost first, that this conversation has
/// not shown yet; each is marked shown. A file that is itself an instruction file counts
/// as shown by being read.
pub async fn unseen_around(ctx: &ToolContext, file: &Path) -> Vec<(PathBuf, String)> {
    let worktree = ctx.worktree();
    if file
        .file_name()
        .is_some_and(|n| INSTRUCTION_FILES.iter().any(|i| n == *i))
    {
        ctx.conversation.first_sight_of_instructions(file);
    }
    let mut folders: Vec<&Path> = file
        .ancestors()
        .skip(1)
        .take_while(|d| d.starts_with(worktree) && *d != worktree)
        .collect();
    folders.reverse();
    let mut found = Vec::new();
    for dir in folders {
        if let Some((path, text)) = in_folder(ctx, dir).await
            && path != file
            && ctx.conversation.first_sight_of_instructions(&path)
        {
            found.push((path, text));
        }
    }
    found
}

/// The reminder `read` appends for `files` (empty when there are none).
pub fn reminder(ctx: &ToolContext, files: &[(PathBuf, String)]) -> String {
    if files.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n\n<system-reminder>\n");
    for (path, text) in files {
        let dir = path.parent().map(|d| ctx.relative(d)).unwrap_or_default();
        out.push_str(&format!(
            "Instructions from {} (they apply to the files under {dir}/):\n{}\n",
            ctx.relative(path),
            text.trim()
        ));
    }
    out.push_str("</system-reminder>");
    out
}

/// The most files one glob of a config's `instructions` brings into the prompt.
const MAX_GLOB_FILES: usize = 20;

/// The files an OpenCode config's `instructions` name, each with its text, in the order
/// given. A relative entry (a file or a glob) is in the worktree and read through the
/// sandbox, like AGENTS.md, so a link in a repository cannot reach past the wall. An
/// absolute or `~/` entry is one of the user's own files, named in the user's own config,
/// and read on the host as the user's own AGENTS.md is (no glob there). Entries that match
/// nothing are left out.
pub async fn configured(ctx: &ToolContext, entries: &[String]) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    for entry in entries {
        let host = match entry.strip_prefix("~/") {
            Some(rest) => std::env::var_os("HOME").map(|h| Path::new(&h).join(rest)),
            None => Some(PathBuf::from(entry)).filter(|p| p.is_absolute()),
        };
        if let Some(path) = host {
            if let Ok(text) = std::fs::read_to_string(&path) {
                found.push((path, text));
            }
            continue;
        }
        for path in in_worktree(ctx, entry).await {
            if let Ok(r) = ctx.sandbox().client.read_all(&path, MAX_INSTRUCTIONS).await
                && !found.iter().any(|(p, _)| *p == path)
            {
                found.push((path, String::from_utf8_lossy(&r.data).into_owned()));
            }
        }
    }
    found
}

/// The worktree's files that `entry` names: itself, or what it matches as a glob (sorted,
/// so the prompt is the same from run to run).
async fn in_worktree(ctx: &ToolContext, entry: &str) -> Vec<PathBuf> {
    let worktree = ctx.worktree().to_path_buf();
    if !entry.contains(['*', '?', '[', '{']) {
        return vec![worktree.join(entry)];
    }
    let Ok(hits) = ctx
        .sandbox()
        .client
        .glob(worktree.clone(), entry, MAX_GLOB_FILES)
        .await
    else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = hits
        .files
        .into_iter()
        .map(|f| {
            if f.path.is_absolute() {
                f.path
            } else {
                worktree.join(f.path)
            }
        })
        .collect();
    paths.sort();
    paths
}
