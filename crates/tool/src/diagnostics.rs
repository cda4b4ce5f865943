//! Errors a language server finds after an edit, appended to the tool's output as OpenCode
//! does: `write`, `edit`, `multiedit` and `apply_patch` show the server the file as written
//! and wait (a bounded time, returning as soon as the server answers) for its diagnostics.
//! Only errors count, the edited file's first, then new ones in other files, each capped.
//! No server for the file, one that does not start, or one too slow: nothing is added, and
//! the edit stands as it is.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::ToolContext;

/// How long an edit waits for the server's verdict.
const WAIT: Duration = Duration::from_secs(3);
/// Errors shown per file.
const PER_FILE: usize = 20;
/// Other files shown.
const OTHER_FILES: usize = 5;

/// What to append to an edit's output for `path`, now holding `text`: the server's errors,
/// or nothing.
pub async fn after_edit(ctx: &ToolContext, path: &Path, text: &str) -> String {
    let Some(servers) = ctx.services.lsp.as_deref() else {
        return String::new();
    };
    let Ok(client) = servers.for_file(path, ctx).await else {
        return String::new();
    };
    let Ok(Some(found)) = client.diagnose(path, text, WAIT).await else {
        return String::new();
    };
    let mut out = String::new();
    if let Some(block) = block(&path.display().to_string(), &found.file) {
        out.push_str(&format!(
            "\n\nThe language server ({}) reports errors in this file; fix them:\n{block}",
            client.name
        ));
    }
    let mut others: Vec<(String, String)> = found
        .others
        .iter()
        .filter_map(|(u, items)| {
            let shown = u.strip_prefix("file://").unwrap_or(u).to_string();
            block(&shown, items).map(|b| (shown, b))
        })
        .collect();
    others.sort();
    if !others.is_empty() {
        out.push_str("\n\nIt also reports new errors in other files:");
        for (_, b) in others.iter().take(OTHER_FILES) {
            out.push('\n');
            out.push_str(b);
        }
        if others.len() > OTHER_FILES {
            out.push_str(&format!(
                "\n... and {} more files",
                others.len() - OTHER_FILES
            ));
        }
    }
    out
}

/// A file's errors (severity 1) as `<diagnostics file="…">`, one `ERROR [line:col]` line
/// each, 1-based; `None` when it has none.
fn block(file: &str, items: &[Value]) -> Option<String> {
    let errors: Vec<String> = items
        .iter()
        .filter(|d| d["severity"].as_u64() == Some(1))
        .map(|d| {
            let start = &d["range"]["start"];
            format!(
                "ERROR [{}:{}] {}",
                start["line"].as_u64().unwrap_or(0) + 1,
                start["character"].as_u64().unwrap_or(0) + 1,
                d["message"].as_str().unwrap_or_default().trim()
            )
        })
        .collect();
    if errors.is_empty() {
        return None;
    }
    let mut lines: Vec<String> = errors.iter().take(PER_FILE).cloned().collect();
    if errors.len() > PER_FILE {
        lines.push(format!("... and {} more", errors.len() - PER_FILE));
    }
    Some(format!(
        "<diagnostics file=\"{file}\">\n{}\n</diagnostics>",
        lines.join("\n")
    ))
}
