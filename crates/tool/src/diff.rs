//! Unified diffs for edit metadata and permission asks.

use similar::TextDiff;

/// A unified diff of `before` → `after` with three lines of context, both sides named
/// `path`, line endings normalised so a CRLF file does not show every line as changed.
/// Headed as OpenCode's diffs are (jsdiff's `createTwoFilesPatch` with one name):
/// `Index: PATH` and a rule of `=` before the `---`/`+++` lines. No change, no diff.
pub fn unified(path: &str, before: &str, after: &str) -> String {
    let before = before.replace("\r\n", "\n");
    let after = after.replace("\r\n", "\n");
    let body = TextDiff::from_lines(&before, &after)
        .unified_diff()
        .context_radius(3)
        .header(path, path)
        .to_string();
    if body.is_empty() {
        return body;
    }
    format!("Index: {path}\n{RULE}\n{body}")
}

/// The line between a diff's `Index:` and its file names (67 `=`, as jsdiff writes it).
const RULE: &str = "===================================================================";

/// Lines added and removed.
pub fn count_changes(before: &str, after: &str) -> (usize, usize) {
    let before = before.replace("\r\n", "\n");
    let after = after.replace("\r\n", "\n");
    let diff = TextDiff::from_lines(&before, &after);
    let mut added = 0;
    let mut removed = 0;
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => added += 1,
            similar::ChangeTag::Delete => removed += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    (added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_the_file_and_counts_lines() {
        let d = unified("a.txt", "one\ntwo\n", "one\n2\nthree\n");
        assert!(
            d.starts_with(&format!("Index: a.txt\n{RULE}\n--- a.txt\n+++ a.txt\n@@")),
            "{d}"
        );
        assert_eq!(RULE.len(), 67);
        assert_eq!(unified("a.txt", "same\n", "same\n"), "");
        assert!(d.contains("-two\n+2\n+three\n"), "{d}");
        assert_eq!(count_changes("one\ntwo\n", "one\n2\nthree\n"), (2, 1));
    }

    #[test]
    fn crlf_only_differences_do_not_show() {
        assert_eq!(count_changes("a\r\nb\r\n", "a\nb\n"), (0, 0));
    }
}
