//! `list`: the files under a directory drawn as a tree, skipping build and cache folders.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolResult};
use runner_permission::PermissionRequest;
use runner_protocol::FileKind;

pub const LIMIT: usize = 100;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListParams {
    /// The absolute path to the directory to list (must be absolute, not relative)
    #[serde(default)]
    pub path: Option<String>,
    /// List of glob patterns to ignore
    #[serde(default)]
    pub ignore: Option<Vec<String>>,
}

pub struct ListTool;

impl Tool for ListTool {
    type Params = ListParams;

    fn id(&self) -> &'static str {
        "list"
    }

    fn description(&self) -> &'static str {
        include_str!("list.txt")
    }

    /// The directory first, then its own permission (OpenCode's order).
    async fn permissions(
        &self,
        params: &ListParams,
        ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        let root = super::glob::search_root(params.path.as_deref(), ctx)?;
        let mut asks: Vec<PermissionRequest> =
            ctx.external_request(&root, true).into_iter().collect();
        asks.push(PermissionRequest::new(
            "list",
            vec![root.to_string_lossy().into_owned()],
            vec!["*".into()],
        ));
        Ok(asks)
    }

    async fn execute(&self, params: ListParams, ctx: &ToolContext) -> ToolResult {
        ctx.ask_all(self.permissions(&params, ctx).await?).await?;
        let root = super::glob::search_root(params.path.as_deref(), ctx)?;
        if ctx.services.sandbox.client.stat(&root).await?.kind != FileKind::Dir {
            return Err(ToolError::Failed(format!(
                "{} is not a directory",
                root.display()
            )));
        }
        let found = ctx
            .sandbox()
            .client
            .tree(root.clone(), params.ignore.unwrap_or_default(), LIMIT)
            .await?;
        let output = render_tree(&root, &found.files);
        Ok(ToolOutput {
            title: ctx.relative(&root),
            output,
            metadata: crate::meta! { "count" => found.files.len(), "truncated" => found.truncated },
            attachments: Vec::new(),
        })
    }
}

/// OpenCode's layout: the root, then per directory its sub-directories (sorted, each with a
/// trailing `/`) before its files (sorted), two spaces of indent per level.
pub fn render_tree(root: &Path, files: &[PathBuf]) -> String {
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
    let mut files_by_dir: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
    for file in files {
        let parent = file.parent().unwrap_or(Path::new("")).to_path_buf();
        let mut ancestor = parent.clone();
        loop {
            dirs.insert(ancestor.clone());
            if !ancestor.pop() {
                break;
            }
        }
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        files_by_dir.entry(parent).or_default().push(name);
    }
    let mut out = format!("{}/\n", root.display().to_string().trim_end_matches('/'));
    render_dir(Path::new(""), 0, &dirs, &files_by_dir, &mut out);
    out
}

fn render_dir(
    dir: &Path,
    depth: usize,
    dirs: &BTreeSet<PathBuf>,
    files_by_dir: &BTreeMap<PathBuf, Vec<String>>,
    out: &mut String,
) {
    if depth > 0 {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        out.push_str(&format!("{}{name}/\n", "  ".repeat(depth)));
    }
    for child in dirs
        .iter()
        .filter(|d| d.parent() == Some(dir) && d.as_path() != dir)
    {
        render_dir(child, depth + 1, dirs, files_by_dir, out);
    }
    if let Some(files) = files_by_dir.get(dir) {
        let mut files = files.clone();
        files.sort();
        for f in files {
            out.push_str(&format!("{}{f}\n", "  ".repeat(depth + 1)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_puts_directories_before_files_at_each_level() {
        let files: Vec<PathBuf> = [
            "b.txt",
            "src/main.rs",
            "src/util/x.rs",
            "a.txt",
            "docs/readme.md",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        let tree = render_tree(Path::new("/w"), &files);
        assert_eq!(
            tree,
            "/w/\n  docs/\n    readme.md\n  src/\n    util/\n      x.rs\n    main.rs\n  a.txt\n  b.txt\n"
        );
    }
}
