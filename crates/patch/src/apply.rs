//! Hunks → verified [`FileChange`]s, without touching the file system.
//!
//! Why plan everything before writing anything: Codex applies hunk after
//! hunk and leaves earlier ones applied when a later one fails, so a model
//! that retries a half-failed patch patches already-patched files. Planning
//! first makes `apply_patch` all-or-nothing at the verification level (the
//! only failures left for the writer are I/O errors), and gives the tool
//! every before/after pair for the single permission prompt and diff.
//!
//! To keep Codex's *sequential* meaning while planning up front, the planner
//! keeps an in-memory view of the files it has already changed: a later
//! hunk reads the result of an earlier one. Two Update hunks for the same
//! file therefore compose (the second sees the first's edits), an Update
//! after an Add edits the added text, and an Update or Delete after a
//! Delete (or of a moved-away source) fails with "missing". Such patches are
//! accepted rather than rejected because models do emit two Update hunks for
//! one file, and Codex applies them. The resulting changes must be written
//! in order.
//!
//! Paths are opaque to this module (the tool resolves and sandboxes them);
//! only for the in-memory view are `.` segments and repeated `/` ignored, so
//! that `./a.txt` and `a.txt` are recognised as the same file.

use std::collections::HashMap;

use crate::seek::seek_sequence;
use crate::{FileChange, Hunk, PatchError, ReadFailure, UpdateChunk};

/// Verifies the whole patch and computes every change before anything is
/// written. `read` returns a file's current text by the path as written in
/// the patch; it is called for every file the patch reads or creates (to
/// reject adding or moving onto a directory), and not again for a path an
/// earlier hunk already changed.
pub fn plan(
    hunks: &[Hunk],
    read: &mut dyn FnMut(&str) -> Result<String, ReadFailure>,
) -> Result<Vec<FileChange>, PatchError> {
    let mut view = View {
        changed: HashMap::new(),
        read,
    };
    let mut changes = Vec::with_capacity(hunks.len());
    for hunk in hunks {
        match hunk {
            Hunk::Add { path, contents } => {
                if view.read(path) == Err(ReadFailure::IsDirectory) {
                    return Err(PatchError::AddIsDirectory { path: path.clone() });
                }
                let content = add_content(contents);
                view.set(path, Some(content.clone()));
                changes.push(FileChange::Add {
                    path: path.clone(),
                    content,
                });
            }
            Hunk::Delete { path } => {
                let old_content = view.read(path).map_err(|failure| match failure {
                    ReadFailure::Missing => PatchError::DeleteMissing { path: path.clone() },
                    ReadFailure::IsDirectory => {
                        PatchError::DeleteIsDirectory { path: path.clone() }
                    }
                    ReadFailure::Other(reason) => PatchError::DeleteReadFailed {
                        path: path.clone(),
                        reason,
                    },
                })?;
                view.set(path, None);
                changes.push(FileChange::Delete {
                    path: path.clone(),
                    old_content,
                });
            }
            Hunk::Update {
                path,
                move_path,
                chunks,
            } => {
                let old_content =
                    view.read(path)
                        .map_err(|failure| PatchError::UpdateReadFailed {
                            path: path.clone(),
                            reason: match failure {
                                ReadFailure::Missing | ReadFailure::IsDirectory => None,
                                ReadFailure::Other(reason) => Some(reason),
                            },
                        })?;
                let new_content = derive_new_contents(path, &old_content, chunks)?;
                // A move onto the source itself is a plain update: writing the
                // destination and then removing the source would lose the file.
                let move_path = move_path
                    .as_ref()
                    .filter(|dest| view_key(dest) != view_key(path));
                if let Some(dest) = move_path {
                    if view.read(dest) == Err(ReadFailure::IsDirectory) {
                        return Err(PatchError::MoveDestinationIsDirectory {
                            path: path.clone(),
                            move_path: dest.clone(),
                        });
                    }
                    view.set(path, None);
                    view.set(dest, Some(new_content.clone()));
                } else {
                    view.set(path, Some(new_content.clone()));
                }
                changes.push(FileChange::Update {
                    path: path.clone(),
                    move_path: move_path.cloned(),
                    old_content,
                    new_content,
                });
            }
        }
    }
    Ok(changes)
}

/// The file contents for an Add: a final newline is added unless the text is
/// empty or already ends with one (OpenCode's rule).
fn add_content(contents: &str) -> String {
    if contents.is_empty() || contents.ends_with('\n') {
        contents.to_string()
    } else {
        format!("{contents}\n")
    }
}

/// The files as they will be after the hunks planned so far.
struct View<'r> {
    /// Normalised path → new content, or `None` once deleted or moved away.
    changed: HashMap<String, Option<String>>,
    read: &'r mut dyn FnMut(&str) -> Result<String, ReadFailure>,
}

impl View<'_> {
    fn read(&mut self, path: &str) -> Result<String, ReadFailure> {
        match self.changed.get(&view_key(path)) {
            Some(Some(content)) => Ok(content.clone()),
            Some(None) => Err(ReadFailure::Missing),
            None => (self.read)(path),
        }
    }

    fn set(&mut self, path: &str, content: Option<String>) {
        self.changed.insert(view_key(path), content);
    }
}

/// `./a//b/./c` → `a/b/c`. `..` is kept: resolving it needs the file system.
fn view_key(path: &str) -> String {
    let absolute = path.starts_with('/');
    let parts: Vec<&str> = path
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect();
    let joined = parts.join("/");
    if absolute {
        format!("/{joined}")
    } else {
        joined
    }
}

/// One line of the file being edited: its text without the line break, and
/// the break that followed it (`None` for new lines and for a last line that
/// had none).
#[derive(Clone, Copy)]
struct Line<'a> {
    text: &'a str,
    ending: Option<&'a str>,
}

fn split_lines(content: &str) -> Vec<Line<'_>> {
    let mut lines = Vec::new();
    let mut rest = content;
    while let Some(pos) = rest.find('\n') {
        let raw = &rest[..pos];
        let line = match raw.strip_suffix('\r') {
            Some(text) => Line {
                text,
                ending: Some("\r\n"),
            },
            None => Line {
                text: raw,
                ending: Some("\n"),
            },
        };
        lines.push(line);
        rest = &rest[pos + 1..];
    }
    if !rest.is_empty() {
        lines.push(Line {
            text: rest,
            ending: None,
        });
    }
    lines
}

/// New file contents for an Update hunk.
///
/// Line endings: lines are matched without their `\r`, so a CRLF file can be
/// patched with an LF patch (what models always produce). Lines the patch
/// does not touch keep their own ending byte for byte; lines it writes get
/// the file's dominant ending (CRLF when most line breaks are CRLF, else
/// LF). A CRLF file therefore stays CRLF, and a mixed file is only
/// normalised where it was edited.
///
/// Context lines are written as the file has them, text and line ending,
/// even when the patch spelled them differently and matched only fuzzily
/// (trailing whitespace, indentation, typographic punctuation): only the
/// `-` and `+` lines are meant to change. Removed lines are replaced by the
/// `+` lines exactly as the patch writes them.
///
/// The result always ends with a line break (Codex and OpenCode both add
/// one), except when every line was removed, which leaves an empty file.
/// Unlike their join-based implementation, a blank last line is kept rather
/// than swallowed as the terminator.
///
/// Chunks are located in order, each after the previous one (see
/// `compute_replacements`), and are applied from the bottom up so earlier
/// indices stay valid.
pub fn derive_new_contents(
    path: &str,
    original: &str,
    chunks: &[UpdateChunk],
) -> Result<String, PatchError> {
    let mut lines = split_lines(original);
    let texts: Vec<&str> = lines.iter().map(|line| line.text).collect();
    let mut replacements = compute_replacements(path, &texts, chunks)?;
    replacements.sort_by_key(|replacement| replacement.start);

    let crlf = lines
        .iter()
        .filter(|line| line.ending == Some("\r\n"))
        .count();
    let lf = lines
        .iter()
        .filter(|line| line.ending == Some("\n"))
        .count();
    let dominant = if crlf > lf { "\r\n" } else { "\n" };

    for replacement in replacements.iter().rev() {
        let mut new_lines: Vec<Line<'_>> = replacement
            .new_lines
            .iter()
            .map(|text| Line { text, ending: None })
            .collect();
        // Replacements do not overlap and are applied bottom-up, so the
        // matched lines are still the file's own here.
        for &(old, new) in replacement.context {
            if old < replacement.old_len
                && let Some(slot) = new_lines.get_mut(new)
            {
                *slot = lines[replacement.start + old];
            }
        }
        lines.splice(
            replacement.start..replacement.start + replacement.old_len,
            new_lines,
        );
    }

    let mut out = String::with_capacity(original.len() + 64);
    for line in &lines {
        out.push_str(line.text);
        out.push_str(line.ending.unwrap_or(dominant));
    }
    Ok(out)
}

struct Replacement<'c> {
    start: usize,
    old_len: usize,
    new_lines: &'c [String],
    /// The chunk's context pairs; a pair whose old or new index falls
    /// outside `old_len` or `new_lines` (dropped trailing blank lines) is
    /// ignored.
    context: &'c [(usize, usize)],
}

/// Finds where every chunk applies.
///
/// * `@@ context` is sought from the current position; the chunk's lines
///   must come after it.
/// * A chunk without old lines is a pure insertion and goes at the end of
///   the file whatever its context (Codex's and OpenCode's rule).
/// * If the old lines are not found and end with blank lines, the search is
///   retried without them (and without the matching trailing blank new
///   lines): such lines are usually the separator before the next hunk that
///   the parser read as blank context (see the parser docs). Only trailing
///   lines that are blank after trimming are dropped, one at a time, and
///   never the last remaining line.
/// * The position then moves past the match so chunks apply in order and
///   never overlap.
fn compute_replacements<'c>(
    path: &str,
    lines: &[&str],
    chunks: &'c [UpdateChunk],
) -> Result<Vec<Replacement<'c>>, PatchError> {
    let mut replacements = Vec::with_capacity(chunks.len());
    let mut position = 0;
    for chunk in chunks {
        if let Some(context) = &chunk.change_context {
            match seek_sequence(lines, std::slice::from_ref(context), position, false) {
                Some(found) => position = found + 1,
                None => {
                    return Err(PatchError::ContextNotFound {
                        path: path.to_string(),
                        context: context.clone(),
                    });
                }
            }
        }
        if chunk.old_lines.is_empty() {
            replacements.push(Replacement {
                start: lines.len(),
                old_len: 0,
                new_lines: &chunk.new_lines,
                context: &[],
            });
            continue;
        }
        let mut old: &[String] = &chunk.old_lines;
        let mut new: &'c [String] = &chunk.new_lines;
        let found = loop {
            if let Some(found) = seek_sequence(lines, old, position, chunk.is_end_of_file) {
                break found;
            }
            match old.split_last() {
                Some((last, rest)) if !rest.is_empty() && last.trim().is_empty() => {
                    old = rest;
                    if let Some((last_new, rest_new)) = new.split_last()
                        && last_new.trim().is_empty()
                    {
                        new = rest_new;
                    }
                }
                _ => {
                    return Err(PatchError::ExpectedLinesNotFound {
                        path: path.to_string(),
                        lines: chunk.old_lines.join("\n"),
                    });
                }
            }
        };
        replacements.push(Replacement {
            start: found,
            old_len: old.len(),
            new_lines: new,
            context: &chunk.context,
        });
        position = found + old.len();
    }
    Ok(replacements)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn chunk(ctx: Option<&str>, old: &[&str], new: &[&str], eof: bool) -> UpdateChunk {
        UpdateChunk {
            change_context: ctx.map(str::to_string),
            old_lines: s(old),
            new_lines: s(new),
            context: Vec::new(),
            is_end_of_file: eof,
        }
    }

    /// A chunk as the parser builds it from prefixed lines (`' '`, `'-'`,
    /// `'+'` then the text), context pairs included.
    fn patch_chunk(lines: &[&str]) -> UpdateChunk {
        let text = format!(
            "*** Begin Patch\n*** Update File: f.txt\n@@\n{}\n*** End Patch",
            lines.join("\n")
        );
        match crate::parse_patch(&text).as_deref() {
            Ok([Hunk::Update { chunks, .. }]) if chunks.len() == 1 => chunks[0].clone(),
            other => panic!("unexpected parse: {other:?}"),
        }
    }

    fn derive(original: &str, chunks: &[UpdateChunk]) -> String {
        match derive_new_contents("f.txt", original, chunks) {
            Ok(out) => out,
            Err(e) => panic!("derive failed: {e}"),
        }
    }

    #[test]
    fn replaces_single_line() {
        assert_eq!(
            derive("a\nb\nc\n", &[chunk(None, &["b"], &["B"], false)]),
            "a\nB\nc\n"
        );
    }

    #[test]
    fn multiple_chunks_apply_in_order() {
        let out = derive(
            "1\n2\n3\n4\n5\n",
            &[
                chunk(None, &["2"], &["two"], false),
                chunk(None, &["4"], &["four", "four.5"], false),
            ],
        );
        assert_eq!(out, "1\ntwo\n3\nfour\nfour.5\n5\n");
    }

    #[test]
    fn context_selects_occurrence() {
        let original = "fn a() {\n    x();\n}\nfn b() {\n    x();\n}\n";
        let out = derive(
            original,
            &[chunk(Some("fn b() {"), &["    x();"], &["    y();"], false)],
        );
        assert_eq!(out, "fn a() {\n    x();\n}\nfn b() {\n    y();\n}\n");
    }

    #[test]
    fn stacked_contexts_narrow_the_search() {
        let original = "class A\n  def f\n    x\nclass B\n  def f\n    x\n";
        let out = derive(
            original,
            &[
                chunk(Some("class B"), &[], &[], false),
                chunk(Some("def f"), &["    x"], &["    y"], false),
            ],
        );
        assert_eq!(out, "class A\n  def f\n    x\nclass B\n  def f\n    y\n");
    }

    #[test]
    fn missing_context_is_an_error() {
        assert_eq!(
            derive_new_contents(
                "f.txt",
                "a\n",
                &[chunk(Some("nope"), &["a"], &["b"], false)]
            ),
            Err(PatchError::ContextNotFound {
                path: "f.txt".into(),
                context: "nope".into()
            })
        );
    }

    #[test]
    fn missing_lines_is_an_error_listing_them() {
        let err = derive_new_contents("f.txt", "a\n", &[chunk(None, &["x", "y"], &["z"], false)]);
        assert_eq!(
            err,
            Err(PatchError::ExpectedLinesNotFound {
                path: "f.txt".into(),
                lines: "x\ny".into()
            })
        );
        let message = err.map_err(|e| e.to_string()).err();
        assert_eq!(
            message.as_deref(),
            Some("Failed to find expected lines in f.txt:\nx\ny")
        );
    }

    #[test]
    fn chunks_must_follow_each_other() {
        // The second chunk's line is before the first's: not found.
        let err = derive_new_contents(
            "f.txt",
            "a\nb\n",
            &[
                chunk(None, &["b"], &["B"], false),
                chunk(None, &["a"], &["A"], false),
            ],
        );
        assert!(matches!(err, Err(PatchError::ExpectedLinesNotFound { .. })));
    }

    #[test]
    fn pure_insertion_goes_to_end_of_file() {
        assert_eq!(
            derive("a\nb\n", &[chunk(Some("a"), &[], &["c", "d"], false)]),
            "a\nb\nc\nd\n"
        );
        assert_eq!(derive("", &[chunk(None, &[], &["x"], false)]), "x\n");
    }

    #[test]
    fn two_pure_insertions_keep_patch_order() {
        assert_eq!(
            derive(
                "a\n",
                &[
                    chunk(None, &[], &["1"], false),
                    chunk(None, &[], &["2"], false)
                ]
            ),
            "a\n1\n2\n"
        );
    }

    #[test]
    fn end_of_file_chunk_matches_last_occurrence() {
        let original = "end\nmiddle\nend\n";
        assert_eq!(
            derive(original, &[chunk(None, &["end"], &["END"], true)]),
            "end\nmiddle\nEND\n"
        );
        assert_eq!(
            derive(original, &[chunk(None, &["end"], &["END"], false)]),
            "END\nmiddle\nend\n"
        );
    }

    #[test]
    fn trailing_blank_old_line_is_retried_without_it() {
        let out = derive("a\nb\n", &[chunk(None, &["b", ""], &["B", ""], false)]);
        assert_eq!(out, "a\nB\n");
        // When the file does have the blank line, it is matched and kept.
        let out = derive("b\n\nc\n", &[chunk(None, &["b", ""], &["B", ""], false)]);
        assert_eq!(out, "B\n\nc\n");
        // Several trailing blanks, one whitespace-only.
        let out = derive(
            "x\ny\n",
            &[chunk(None, &["y", "", "  "], &["z", "", "  "], false)],
        );
        assert_eq!(out, "x\nz\n");
    }

    #[test]
    fn blank_context_line_matches_blank_file_line() {
        let original = "fn a() {}\n\nfn b() {}\n";
        let out = derive(
            original,
            &[chunk(
                None,
                &["fn a() {}", "", "fn b() {}"],
                &["fn a() {}", "", "fn c() {}"],
                false,
            )],
        );
        assert_eq!(out, "fn a() {}\n\nfn c() {}\n");
    }

    #[test]
    fn fuzzy_match_writes_patch_lines() {
        let out = derive(
            "  x = 1;   \n",
            &[chunk(None, &["x = 1;"], &["x = 2;"], false)],
        );
        assert_eq!(out, "x = 2;\n");
    }

    #[test]
    fn context_lines_keep_trailing_whitespace() {
        // The context lines match only once trailing blanks are ignored;
        // they must come out as the file has them.
        let original = "key = 1   \nvalue = 2\t \nend  \n";
        let out = derive(
            original,
            &[patch_chunk(&[
                " key = 1",
                "-value = 2",
                "+value = 3",
                " end",
            ])],
        );
        assert_eq!(out, "key = 1   \nvalue = 3\nend  \n");
    }

    #[test]
    fn context_lines_keep_indentation() {
        let original = "fn f() {\n\tlet a = 1;\n\tlet b = 2;\n}\n";
        let out = derive(
            original,
            &[patch_chunk(&[
                "     let a = 1;",
                "-    let b = 2;",
                "+\tlet b = 3;",
                " }",
            ])],
        );
        assert_eq!(out, "fn f() {\n\tlet a = 1;\n\tlet b = 3;\n}\n");
    }

    #[test]
    fn context_lines_keep_typographic_punctuation() {
        // Smart quotes, an em dash, an ellipsis and non-breaking spaces in
        // the file; the patch types ASCII. Only the `+` line is the patch's.
        let original =
            "say(\u{201C}it\u{2019}s \u{2014} ok\u{2026}\u{201D})\nx\u{00A0}=\u{00A0}1\ny = 2\n";
        let out = derive(
            original,
            &[patch_chunk(&[
                " say(\"it's - ok...\")",
                " x = 1",
                "-y = 2",
                "+y = \"3 - 4\"",
            ])],
        );
        assert_eq!(
            out,
            "say(\u{201C}it\u{2019}s \u{2014} ok\u{2026}\u{201D})\nx\u{00A0}=\u{00A0}1\ny = \"3 - 4\"\n"
        );
    }

    #[test]
    fn context_lines_keep_their_own_line_ending() {
        // A CRLF context line in a mostly-LF file stays CRLF; the new line
        // gets the dominant LF.
        let out = derive("a\r\nb\nc\nd\n", &[patch_chunk(&[" a", "+new", " b"])]);
        assert_eq!(out, "a\r\nnew\nb\nc\nd\n");
    }

    #[test]
    fn context_pairs_survive_the_trailing_blank_retry() {
        // The trailing blank context line is not in the file and is
        // dropped; the remaining context still comes from the file.
        let out = derive("a  \nb\n", &[patch_chunk(&[" a", "-b", "+B", ""])]);
        assert_eq!(out, "a  \nB\n");
    }

    #[test]
    fn removed_then_re_added_line_takes_the_patch_text() {
        // `-` then `+` with the same text is an edit, not context: the
        // patch's spelling replaces the fuzzy-matched file line.
        let out = derive("x = 1   \n", &[patch_chunk(&["-x = 1", "+x = 1"])]);
        assert_eq!(out, "x = 1\n");
    }

    #[test]
    fn adds_missing_trailing_newline() {
        assert_eq!(
            derive("a\nb", &[chunk(None, &["a"], &["A"], false)]),
            "A\nb\n"
        );
        assert_eq!(
            derive("a\nb", &[chunk(None, &["b"], &["B"], false)]),
            "a\nB\n"
        );
    }

    #[test]
    fn keeps_blank_last_line() {
        assert_eq!(
            derive("a\n\n", &[chunk(None, &["a"], &["A"], false)]),
            "A\n\n"
        );
    }

    #[test]
    fn removing_everything_leaves_empty_file() {
        assert_eq!(derive("a\n", &[chunk(None, &["a"], &[], false)]), "");
    }

    #[test]
    fn crlf_file_stays_crlf() {
        assert_eq!(
            derive(
                "a\r\nb\r\nc\r\n",
                &[chunk(None, &["b"], &["B", "B2"], false)]
            ),
            "a\r\nB\r\nB2\r\nc\r\n"
        );
        assert_eq!(
            derive("a\r\nb", &[chunk(None, &["a"], &["A"], false)]),
            "A\r\nb\r\n"
        );
    }

    #[test]
    fn mixed_endings_are_kept_outside_the_edit() {
        // Two LF, one CRLF: new lines get LF; the CRLF line is untouched.
        assert_eq!(
            derive("a\r\nb\nc\n", &[chunk(None, &["c"], &["C"], false)]),
            "a\r\nb\nC\n"
        );
    }

    fn fs(files: &[(&str, &str)]) -> impl FnMut(&str) -> Result<String, ReadFailure> {
        let files: HashMap<String, String> = files
            .iter()
            .map(|(p, c)| (p.to_string(), c.to_string()))
            .collect();
        move |path: &str| {
            if path == "dir" {
                return Err(ReadFailure::IsDirectory);
            }
            files.get(path).cloned().ok_or(ReadFailure::Missing)
        }
    }

    fn update(path: &str, move_path: Option<&str>, chunks: Vec<UpdateChunk>) -> Hunk {
        Hunk::Update {
            path: path.into(),
            move_path: move_path.map(str::to_string),
            chunks,
        }
    }

    #[test]
    fn plan_add_appends_newline() {
        let mut read = fs(&[]);
        let hunks = [
            Hunk::Add {
                path: "a".into(),
                contents: "x".into(),
            },
            Hunk::Add {
                path: "b".into(),
                contents: String::new(),
            },
            Hunk::Add {
                path: "c".into(),
                contents: "y\n".into(),
            },
        ];
        let changes = plan(&hunks, &mut read);
        assert_eq!(
            changes,
            Ok(vec![
                FileChange::Add {
                    path: "a".into(),
                    content: "x\n".into()
                },
                FileChange::Add {
                    path: "b".into(),
                    content: String::new()
                },
                FileChange::Add {
                    path: "c".into(),
                    content: "y\n".into()
                },
            ])
        );
    }

    #[test]
    fn plan_reports_read_failures() {
        let mut read = fs(&[]);
        let cases = [
            (
                Hunk::Delete {
                    path: "gone".into(),
                },
                "Failed to delete file gone: file does not exist",
            ),
            (
                Hunk::Delete { path: "dir".into() },
                "Failed to delete file dir: path is a directory",
            ),
            (
                update("gone", None, vec![chunk(None, &["a"], &["b"], false)]),
                "Failed to read file to update: gone",
            ),
            (
                update("dir", None, vec![chunk(None, &["a"], &["b"], false)]),
                "Failed to read file to update: dir",
            ),
            (
                Hunk::Add {
                    path: "dir".into(),
                    contents: "x".into(),
                },
                "Failed to add file dir: path is a directory",
            ),
        ];
        for (hunk, message) in cases {
            let result = plan(std::slice::from_ref(&hunk), &mut read);
            assert_eq!(result.map_err(|e| e.to_string()), Err(message.to_string()));
        }
    }

    #[test]
    fn plan_other_read_failure_carries_reason() {
        let mut read = |_: &str| Err(ReadFailure::Other("permission denied".into()));
        let result = plan(
            &[update("a", None, vec![chunk(None, &["a"], &["b"], false)])],
            &mut read,
        );
        assert_eq!(
            result.map_err(|e| e.to_string()),
            Err("Failed to read file to update: a (permission denied)".to_string())
        );
    }

    #[test]
    fn plan_move_onto_directory_is_rejected() {
        let mut read = fs(&[("a", "x\n")]);
        let result = plan(&[update("a", Some("dir"), vec![])], &mut read);
        assert_eq!(
            result,
            Err(PatchError::MoveDestinationIsDirectory {
                path: "a".into(),
                move_path: "dir".into()
            })
        );
    }

    #[test]
    fn plan_move_onto_itself_is_plain_update() {
        let mut read = fs(&[("a", "x\n")]);
        let result = plan(
            &[update(
                "a",
                Some("./a"),
                vec![chunk(None, &["x"], &["y"], false)],
            )],
            &mut read,
        );
        assert_eq!(
            result,
            Ok(vec![FileChange::Update {
                path: "a".into(),
                move_path: None,
                old_content: "x\n".into(),
                new_content: "y\n".into()
            }])
        );
    }

    #[test]
    fn plan_later_hunks_see_earlier_ones() {
        let mut read = fs(&[("a", "1\n2\n"), ("b", "b\n")]);
        let hunks = [
            update("a", None, vec![chunk(None, &["1"], &["one"], false)]),
            update("./a", None, vec![chunk(None, &["2"], &["two"], false)]),
            Hunk::Add {
                path: "n".into(),
                contents: "new".into(),
            },
            update(
                "n",
                Some("m"),
                vec![chunk(None, &["new"], &["newer"], false)],
            ),
            Hunk::Delete { path: "m".into() },
        ];
        let changes = match plan(&hunks, &mut read) {
            Ok(changes) => changes,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(changes.len(), 5);
        assert_eq!(
            changes[1],
            FileChange::Update {
                path: "./a".into(),
                move_path: None,
                old_content: "one\n2\n".into(),
                new_content: "one\ntwo\n".into()
            }
        );
        assert_eq!(
            changes[4],
            FileChange::Delete {
                path: "m".into(),
                old_content: "newer\n".into()
            }
        );
        // The moved-away source is gone for later hunks.
        let again = [
            update("b", Some("c"), vec![]),
            Hunk::Delete { path: "b".into() },
        ];
        assert_eq!(
            plan(&again, &mut read),
            Err(PatchError::DeleteMissing { path: "b".into() })
        );
    }

    #[test]
    fn view_key_normalises_dots_and_slashes() {
        assert_eq!(view_key("./a//b/./c"), "a/b/c");
        assert_eq!(view_key("/x/./y"), "/x/y");
        assert_eq!(view_key("../z"), "../z");
    }

    #[test]
    fn io_error_kinds_map_to_read_failures() {
        use std::io::{Error, ErrorKind};
        assert_eq!(
            ReadFailure::from(Error::from(ErrorKind::NotFound)),
            ReadFailure::Missing
        );
        assert_eq!(
            ReadFailure::from(Error::from(ErrorKind::IsADirectory)),
            ReadFailure::IsDirectory
        );
        assert!(matches!(
            ReadFailure::from(Error::from(ErrorKind::PermissionDenied)),
            ReadFailure::Other(_)
        ));
    }

    #[test]
    fn tool_message_prefixes_all_but_empty_patch() {
        assert_eq!(
            PatchError::EmptyPatch.tool_message(),
            "patch rejected: empty patch"
        );
        assert_eq!(
            PatchError::NoHunks.tool_message(),
            "apply_patch verification failed: no hunks found"
        );
    }
}
