//! Text → [`Hunk`]s. The parser is deliberately lenient, like OpenCode's:
//! the text comes from a model, and a patch that is *unambiguous* but
//! slightly malformed is better applied than bounced back for another
//! round-trip. Anything it cannot place it skips; the planner then fails
//! loudly if the remaining lines do not match the file.
//!
//! Rules, in order:
//!
//! 1. The text is trimmed, and a heredoc wrapper (`cat <<'EOF'`, `<<EOF`,
//!    `<<"EOF"`, any word as tag, closed by a line holding the tag) is
//!    stripped: models sometimes pass the shell form of the Codex command.
//! 2. Lines are split on `\n` and one trailing `\r` is dropped from each, so a
//!    CRLF patch parses like an LF one (files added by it are written with
//!    LF; updated files keep their own line endings, see [`crate::apply`]).
//! 3. The patch is what lies between the first line that trims to
//!    `*** Begin Patch` and the next one that trims to `*** End Patch`;
//!    anything outside is ignored.
//! 4. Headers are recognised after trimming; unknown lines between hunks
//!    (including unknown `*** Something:` headers) are skipped silently.
//! 5. Add: the `+` lines up to the next header, `+` stripped, joined by `\n`;
//!    other lines are ignored.
//! 6. Update: optional `*** Move to:` on the next line, then chunks:
//!    * `@@ text` opens a chunk with context `text` (trimmed; none if empty).
//!      A unified-diff range (`@@ -12,3 +12,4 @@ fn f`) is tolerated: the
//!      numbers are dropped and only the trailing text is used as context.
//!    * ` `, `-`, `+` lines go to old+new, old, new; a context line's place on
//!      both sides is recorded so the planner can keep the file's text for it.
//!      Change lines before the first `@@` open a chunk without context
//!      (Codex allows this).
//!    * **An empty line inside a chunk is an empty context line**, as in
//!      Codex. Editors and models often strip the single space that should
//!      prefix a blank context line; treating it as context makes such a
//!      patch apply where the file has a blank line. If the empty line was
//!      really just a separator at the end of a chunk, the planner retries
//!      without trailing blank lines. Empty lines outside any chunk are
//!      skipped.
//!    * `*** End of File` marks the current chunk as anchored at the end of
//!      the file and closes it (OpenCode's port never sets the flag; Codex
//!      does, and so do we).
//!    * Any other line is ignored, as in OpenCode.
//! 7. Empty paths are rejected rather than skipped: skipping would silently
//!    drop the hunk's lines, and an Update with no change lines is rejected
//!    as empty (unless it is a pure rename) because it would do nothing.

use crate::{Hunk, PatchError, UpdateChunk};

const BEGIN_MARKER: &str = "*** Begin Patch";
const END_MARKER: &str = "*** End Patch";
const ADD_HEADER: &str = "*** Add File:";
const DELETE_HEADER: &str = "*** Delete File:";
const UPDATE_HEADER: &str = "*** Update File:";
const MOVE_HEADER: &str = "*** Move to:";
const EOF_MARKER: &str = "*** End of File";

/// Headers that end an Add or Update section even when indented.
const SECTION_HEADERS: [&str; 5] = [
    ADD_HEADER,
    DELETE_HEADER,
    UPDATE_HEADER,
    MOVE_HEADER,
    EOF_MARKER,
];

/// Parses a patch. Errors: [`PatchError::MissingMarkers`],
/// [`PatchError::EmptyPatch`] (nothing but blank lines between the markers),
/// [`PatchError::NoHunks`] (text but no recognised header),
/// [`PatchError::EmptyPath`], [`PatchError::EmptyUpdate`].
pub fn parse_patch(text: &str) -> Result<Vec<Hunk>, PatchError> {
    let text = strip_heredoc(text.trim());
    let lines: Vec<&str> = text
        .split('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .collect();
    let begin = lines
        .iter()
        .position(|line| line.trim() == BEGIN_MARKER)
        .ok_or(PatchError::MissingMarkers)?;
    let end = lines[begin + 1..]
        .iter()
        .position(|line| line.trim() == END_MARKER)
        .map(|offset| begin + 1 + offset)
        .ok_or(PatchError::MissingMarkers)?;
    let body = &lines[begin + 1..end];
    let hunks = parse_body(body)?;
    if !hunks.is_empty() {
        Ok(hunks)
    } else if body.iter().all(|line| line.trim().is_empty()) {
        Err(PatchError::EmptyPatch)
    } else {
        Err(PatchError::NoHunks)
    }
}

/// Returns the text inside a heredoc wrapper, or `text` unchanged.
fn strip_heredoc(text: &str) -> &str {
    let Some((first, rest)) = text.split_once('\n') else {
        return text;
    };
    let Some(tag) = heredoc_tag(first.trim()) else {
        return text;
    };
    let Some((inner, last)) = rest.rsplit_once('\n') else {
        return text;
    };
    if last.trim() == tag { inner } else { text }
}

/// The tag of a heredoc opener: `[cat ]<<[ ]TAG`, TAG optionally quoted
/// with `'` or `"`, made of letters, digits and `_`.
fn heredoc_tag(line: &str) -> Option<&str> {
    let line = match line.strip_prefix("cat") {
        Some(rest) if rest.starts_with(char::is_whitespace) => rest.trim_start(),
        _ => line,
    };
    let rest = line.strip_prefix("<<")?.trim_start();
    let (tag, after) = match rest.chars().next() {
        Some(quote @ ('\'' | '"')) => {
            let inner = &rest[1..];
            let close = inner.find(quote)?;
            (&inner[..close], &inner[close + 1..])
        }
        _ => {
            let len = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            rest.split_at(len)
        }
    };
    let valid = !tag.is_empty()
        && tag.chars().all(|c| c.is_alphanumeric() || c == '_')
        && after.trim().is_empty();
    valid.then_some(tag)
}

/// Whether `line` ends the current Add or Update section.
fn is_section_break(line: &str) -> bool {
    let trimmed = line.trim_start();
    line.starts_with("***")
        || SECTION_HEADERS
            .iter()
            .any(|header| trimmed.starts_with(header))
}

fn header_path(rest: &str, header: &str) -> Result<String, PatchError> {
    let path = rest.trim();
    if path.is_empty() {
        Err(PatchError::EmptyPath {
            header: header.to_string(),
        })
    } else {
        Ok(path.to_string())
    }
}

fn parse_body(body: &[&str]) -> Result<Vec<Hunk>, PatchError> {
    let mut hunks = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let header = body[i].trim();
        i += 1;
        if let Some(rest) = header.strip_prefix(ADD_HEADER) {
            let path = header_path(rest, ADD_HEADER)?;
            let mut content = Vec::new();
            while i < body.len() && !is_section_break(body[i]) {
                if let Some(line) = body[i].strip_prefix('+') {
                    content.push(line);
                }
                i += 1;
            }
            hunks.push(Hunk::Add {
                path,
                contents: content.join("\n"),
            });
        } else if let Some(rest) = header.strip_prefix(DELETE_HEADER) {
            let path = header_path(rest, DELETE_HEADER)?;
            hunks.push(Hunk::Delete { path });
        } else if let Some(rest) = header.strip_prefix(UPDATE_HEADER) {
            let path = header_path(rest, UPDATE_HEADER)?;
            let mut move_path = None;
            if let Some(rest) = body.get(i).and_then(|l| l.trim().strip_prefix(MOVE_HEADER)) {
                move_path = Some(header_path(rest, MOVE_HEADER)?);
                i += 1;
            }
            let (chunks, next) = parse_chunks(body, i);
            i = next;
            let has_changes = chunks
                .iter()
                .any(|c| !c.old_lines.is_empty() || !c.new_lines.is_empty());
            if !has_changes && move_path.is_none() {
                return Err(PatchError::EmptyUpdate { path });
            }
            hunks.push(Hunk::Update {
                path,
                move_path,
                chunks,
            });
        }
    }
    Ok(hunks)
}

/// Parses Update chunks from `body[i..]`; returns them and the index of the
/// first line not consumed.
fn parse_chunks(body: &[&str], mut i: usize) -> (Vec<UpdateChunk>, usize) {
    let mut chunks = Vec::new();
    let mut current: Option<UpdateChunk> = None;
    while i < body.len() {
        let line = body[i];
        if line.trim() == EOF_MARKER {
            if let Some(mut chunk) = current.take() {
                chunk.is_end_of_file = true;
                chunks.push(chunk);
            } else if let Some(chunk) = chunks.last_mut() {
                chunk.is_end_of_file = true;
            }
            i += 1;
            continue;
        }
        if is_section_break(line) {
            break;
        }
        i += 1;
        if let Some(rest) = line.strip_prefix("@@") {
            chunks.extend(current.take());
            current = Some(UpdateChunk {
                change_context: parse_context(rest),
                ..UpdateChunk::default()
            });
            continue;
        }
        let Some(prefix) = line.chars().next() else {
            // Empty line: a blank context line inside a chunk (see module docs).
            if let Some(chunk) = current.as_mut() {
                push_context(chunk, String::new());
            }
            continue;
        };
        let text = &line[prefix.len_utf8()..];
        match prefix {
            ' ' | '-' | '+' => {
                let chunk = current.get_or_insert_with(UpdateChunk::default);
                match prefix {
                    ' ' => push_context(chunk, text.to_string()),
                    '-' => chunk.old_lines.push(text.to_string()),
                    _ => chunk.new_lines.push(text.to_string()),
                }
            }
            _ => {}
        }
    }
    chunks.extend(current);
    (chunks, i)
}

/// Appends a context line: to both sides, and to the pairs that tell the
/// planner to keep the file's own text for it.
fn push_context(chunk: &mut UpdateChunk, text: String) {
    chunk
        .context
        .push((chunk.old_lines.len(), chunk.new_lines.len()));
    chunk.old_lines.push(text.clone());
    chunk.new_lines.push(text);
}

/// The context of an `@@` line: the trimmed rest, without a unified-diff
/// range if the model wrote one; `None` when nothing is left.
fn parse_context(rest: &str) -> Option<String> {
    let rest = rest.trim();
    let context = strip_unified_range(rest).unwrap_or(rest);
    (!context.is_empty()).then(|| context.to_string())
}

/// `-12,3 +12,4 @@ tail` → `tail`; `None` if `text` is not such a range.
fn strip_unified_range(text: &str) -> Option<&str> {
    let rest = skip_range(text.strip_prefix('-')?)?;
    let rest = skip_range(rest.trim_start().strip_prefix('+')?)?;
    let rest = rest.trim_start();
    if rest.is_empty() {
        return Some(rest);
    }
    rest.strip_prefix("@@").map(str::trim)
}

/// Skips `N` or `N,M` (digits required) and returns the remainder.
fn skip_range(text: &str) -> Option<&str> {
    let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n = digits(text);
    if n == 0 {
        return None;
    }
    let rest = &text[n..];
    match rest.strip_prefix(',') {
        Some(after) => {
            let m = digits(after);
            (m > 0).then(|| &after[m..])
        }
        None => Some(rest),
    }
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

    /// `chunk` with its context pairs `(old index, new index)`.
    fn with_context(mut chunk: UpdateChunk, pairs: &[(usize, usize)]) -> UpdateChunk {
        chunk.context = pairs.to_vec();
        chunk
    }

    fn parse(text: &str) -> Vec<Hunk> {
        match parse_patch(text) {
            Ok(hunks) => hunks,
            Err(e) => panic!("parse failed: {e}"),
        }
    }

    #[test]
    fn parses_every_header_kind() {
        let hunks = parse(
            "*** Begin Patch\n\
             *** Add File: path/add.py\n\
             +abc\n\
             +def\n\
             *** Delete File: path/delete.py\n\
             *** Update File: path/update.py\n\
             *** Move to: path/update2.py\n\
             @@ def f():\n\
             -    pass\n\
             +    return 123\n\
             *** End Patch",
        );
        assert_eq!(
            hunks,
            vec![
                Hunk::Add {
                    path: "path/add.py".into(),
                    contents: "abc\ndef".into()
                },
                Hunk::Delete {
                    path: "path/delete.py".into()
                },
                Hunk::Update {
                    path: "path/update.py".into(),
                    move_path: Some("path/update2.py".into()),
                    chunks: vec![chunk(
                        Some("def f():"),
                        &["    pass"],
                        &["    return 123"],
                        false
                    )],
                },
            ]
        );
    }

    #[test]
    fn add_ignores_non_plus_lines_and_keeps_blank_plus_lines() {
        let hunks = parse("*** Begin Patch\n*** Add File: a\n+one\nnoise\n+\n+two\n*** End Patch");
        assert_eq!(
            hunks,
            vec![Hunk::Add {
                path: "a".into(),
                contents: "one\n\ntwo".into()
            }]
        );
    }

    #[test]
    fn add_with_no_lines_is_empty_file() {
        let hunks = parse("*** Begin Patch\n*** Add File: empty.txt\n*** End Patch");
        assert_eq!(
            hunks,
            vec![Hunk::Add {
                path: "empty.txt".into(),
                contents: String::new()
            }]
        );
    }

    #[test]
    fn update_then_add() {
        let hunks = parse(
            "*** Begin Patch\n*** Update File: file.py\n@@\n+line\n*** Add File: other.py\n+content\n*** End Patch",
        );
        assert_eq!(
            hunks,
            vec![
                Hunk::Update {
                    path: "file.py".into(),
                    move_path: None,
                    chunks: vec![chunk(None, &[], &["line"], false)],
                },
                Hunk::Add {
                    path: "other.py".into(),
                    contents: "content".into()
                },
            ]
        );
    }

    #[test]
    fn multiple_chunks_and_context() {
        let hunks = parse(
            "*** Begin Patch\n*** Update File: m.txt\n@@ class A\n-a\n+A\n@@\n b\n-c\n+C\n*** End Patch",
        );
        let Hunk::Update { chunks, .. } = &hunks[0] else {
            panic!("not an update")
        };
        assert_eq!(
            chunks,
            &vec![
                chunk(Some("class A"), &["a"], &["A"], false),
                with_context(chunk(None, &["b", "c"], &["b", "C"], false), &[(0, 0)]),
            ]
        );
    }

    #[test]
    fn chunk_without_at_at_is_accepted() {
        let hunks = parse("*** Begin Patch\n*** Update File: f\n import foo\n+bar\n*** End Patch");
        assert_eq!(
            hunks,
            vec![Hunk::Update {
                path: "f".into(),
                move_path: None,
                chunks: vec![with_context(
                    chunk(None, &["import foo"], &["import foo", "bar"], false),
                    &[(0, 0)]
                )],
            }]
        );
    }

    #[test]
    fn end_of_file_sets_flag_on_current_chunk() {
        let hunks = parse(
            "*** Begin Patch\n*** Update File: f\n@@\n first\n-second\n+second updated\n*** End of File\n*** End Patch",
        );
        assert_eq!(
            hunks,
            vec![Hunk::Update {
                path: "f".into(),
                move_path: None,
                chunks: vec![with_context(
                    chunk(
                        None,
                        &["first", "second"],
                        &["first", "second updated"],
                        true
                    ),
                    &[(0, 0)]
                )],
            }]
        );
    }

    #[test]
    fn end_of_file_only_flags_its_own_chunk() {
        let hunks = parse(
            "*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n@@\n-y\n+z\n*** End of File\n*** End Patch",
        );
        let Hunk::Update { chunks, .. } = &hunks[0] else {
            panic!("not an update")
        };
        assert!(!chunks[0].is_end_of_file);
        assert!(chunks[1].is_end_of_file);
    }

    #[test]
    fn empty_line_inside_chunk_is_blank_context() {
        let hunks = parse("*** Begin Patch\n*** Update File: f\n@@\n a\n\n-b\n+c\n*** End Patch");
        let Hunk::Update { chunks, .. } = &hunks[0] else {
            panic!("not an update")
        };
        assert_eq!(
            chunks,
            &vec![with_context(
                chunk(None, &["a", "", "b"], &["a", "", "c"], false),
                &[(0, 0), (1, 1)]
            )]
        );
    }

    #[test]
    fn empty_lines_outside_chunks_are_skipped() {
        let hunks = parse("*** Begin Patch\n*** Update File: f\n\n@@\n-b\n+c\n*** End Patch");
        let Hunk::Update { chunks, .. } = &hunks[0] else {
            panic!("not an update")
        };
        assert_eq!(chunks, &vec![chunk(None, &["b"], &["c"], false)]);
    }

    #[test]
    fn unknown_lines_in_chunk_are_ignored() {
        let hunks = parse(
            "*** Begin Patch\n*** Update File: f\n@@\n-b\n\\ No newline at end of file\n+c\n*** End Patch",
        );
        let Hunk::Update { chunks, .. } = &hunks[0] else {
            panic!("not an update")
        };
        assert_eq!(chunks, &vec![chunk(None, &["b"], &["c"], false)]);
    }

    #[test]
    fn unified_range_in_context_is_dropped() {
        assert_eq!(
            parse_context(" -1,3 +1,4 @@ fn main()"),
            Some("fn main()".into())
        );
        assert_eq!(parse_context(" -1 +1 @@"), None);
        assert_eq!(parse_context(" -1,3 +1,4"), None);
        assert_eq!(parse_context(" -x +1 @@"), Some("-x +1 @@".into()));
        assert_eq!(parse_context(" -- comment"), Some("-- comment".into()));
        assert_eq!(parse_context("   "), None);
    }

    #[test]
    fn markers_may_be_padded_and_text_surrounded() {
        let hunks = parse(
            "\n\n  *** Begin Patch  \n*** Delete File: a\n\t*** End Patch \nignored trailer\n",
        );
        assert_eq!(hunks, vec![Hunk::Delete { path: "a".into() }]);
        let hunks = parse("apply_patch\n*** Begin Patch\n*** Delete File: a\n*** End Patch");
        assert_eq!(hunks, vec![Hunk::Delete { path: "a".into() }]);
    }

    #[test]
    fn headers_may_be_padded() {
        let hunks = parse(
            "*** Begin Patch\n  *** Delete File:   a b.txt  \n *** Update File: c\n  *** Move to: d\n@@\n-x\n+y\n*** End Patch",
        );
        assert_eq!(
            hunks,
            vec![
                Hunk::Delete {
                    path: "a b.txt".into()
                },
                Hunk::Update {
                    path: "c".into(),
                    move_path: Some("d".into()),
                    chunks: vec![chunk(None, &["x"], &["y"], false)],
                },
            ]
        );
    }

    #[test]
    fn crlf_patch_text_parses_like_lf() {
        let hunks =
            parse("*** Begin Patch\r\n*** Update File: f\r\n@@\r\n-a\r\n+b\r\n*** End Patch\r\n");
        assert_eq!(
            hunks,
            vec![Hunk::Update {
                path: "f".into(),
                move_path: None,
                chunks: vec![chunk(None, &["a"], &["b"], false)],
            }]
        );
    }

    #[test]
    fn heredoc_wrappers_are_stripped() {
        for opener in [
            "cat <<'EOF'",
            "<<EOF",
            "<<\"EOF\"",
            "cat << PATCH",
            "<<'PATCH'",
        ] {
            let tag = if opener.contains("PATCH") {
                "PATCH"
            } else {
                "EOF"
            };
            let text =
                format!("{opener}\n*** Begin Patch\n*** Delete File: a\n*** End Patch\n{tag}\n");
            assert_eq!(
                parse(&text),
                vec![Hunk::Delete { path: "a".into() }],
                "{opener}"
            );
        }
    }

    #[test]
    fn heredoc_tag_parsing() {
        assert_eq!(heredoc_tag("cat <<'EOF'"), Some("EOF"));
        assert_eq!(heredoc_tag("<<EOF"), Some("EOF"));
        assert_eq!(heredoc_tag("<<\"END_P\""), Some("END_P"));
        assert_eq!(heredoc_tag("cat <<'EOF' > file"), None);
        assert_eq!(heredoc_tag("catalog <<EOF"), None);
        assert_eq!(heredoc_tag("<<''"), None);
        assert_eq!(heredoc_tag("echo hi"), None);
    }

    #[test]
    fn heredoc_with_mismatched_tag_is_left_alone() {
        // The closing line is not the tag, so nothing is stripped; the
        // markers are still found inside.
        let text = "<<EOF\n*** Begin Patch\n*** Delete File: a\n*** End Patch\nEND";
        assert_eq!(parse(text), vec![Hunk::Delete { path: "a".into() }]);
    }

    #[test]
    fn missing_markers() {
        for text in [
            "",
            "hello",
            "*** Begin Patch\n*** Delete File: a",
            "*** Delete File: a\n*** End Patch",
            "*** End Patch\n*** Begin Patch",
        ] {
            assert_eq!(
                parse_patch(text),
                Err(PatchError::MissingMarkers),
                "{text:?}"
            );
        }
    }

    #[test]
    fn empty_patch() {
        assert_eq!(
            parse_patch("*** Begin Patch\n*** End Patch"),
            Err(PatchError::EmptyPatch)
        );
        assert_eq!(
            parse_patch("  *** Begin Patch\n\n   \n*** End Patch\n"),
            Err(PatchError::EmptyPatch)
        );
    }

    #[test]
    fn unknown_headers_are_skipped() {
        assert_eq!(
            parse_patch("*** Begin Patch\n*** Frobnicate File: foo\n+x\n*** End Patch"),
            Err(PatchError::NoHunks)
        );
        let hunks =
            parse("*** Begin Patch\n*** Frobnicate File: foo\n*** Delete File: a\n*** End Patch");
        assert_eq!(hunks, vec![Hunk::Delete { path: "a".into() }]);
    }

    #[test]
    fn empty_paths_are_rejected() {
        for header in [ADD_HEADER, DELETE_HEADER, UPDATE_HEADER] {
            let text = format!("*** Begin Patch\n{header}   \n+x\n*** End Patch");
            assert_eq!(
                parse_patch(&text),
                Err(PatchError::EmptyPath {
                    header: header.to_string()
                })
            );
        }
        assert_eq!(
            parse_patch(
                "*** Begin Patch\n*** Update File: a\n*** Move to:\n@@\n-x\n+y\n*** End Patch"
            ),
            Err(PatchError::EmptyPath {
                header: MOVE_HEADER.to_string()
            })
        );
    }

    #[test]
    fn empty_update_is_rejected_but_pure_rename_is_not() {
        assert_eq!(
            parse_patch("*** Begin Patch\n*** Update File: a\n*** End Patch"),
            Err(PatchError::EmptyUpdate { path: "a".into() })
        );
        assert_eq!(
            parse_patch("*** Begin Patch\n*** Update File: a\nno prefix\n@@ ctx\n*** End Patch"),
            Err(PatchError::EmptyUpdate { path: "a".into() })
        );
        assert_eq!(
            parse("*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** End Patch"),
            vec![Hunk::Update {
                path: "a".into(),
                move_path: Some("b".into()),
                chunks: vec![]
            }]
        );
    }

    #[test]
    fn indented_header_ends_update_section() {
        let hunks = parse(
            "*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\n  *** Delete File: b\n*** End Patch",
        );
        assert_eq!(hunks.len(), 2);
        assert_eq!(hunks[1], Hunk::Delete { path: "b".into() });
    }

    #[test]
    fn context_pairs_record_where_context_lines_sit() {
        // Context lines interleaved with removals and additions: each pair
        // points at the same line on both sides.
        let hunks = parse(
            "*** Begin Patch\n*** Update File: f\n@@\n a\n-b\n+B\n+B2\n c\n\n-d\n e\n*** End Patch",
        );
        let Hunk::Update { chunks, .. } = &hunks[0] else {
            panic!("not an update")
        };
        let chunk = &chunks[0];
        assert_eq!(chunk.old_lines, s(&["a", "b", "c", "", "d", "e"]));
        assert_eq!(chunk.new_lines, s(&["a", "B", "B2", "c", "", "e"]));
        assert_eq!(chunk.context, vec![(0, 0), (2, 3), (3, 4), (5, 5)]);
        for &(old, new) in &chunk.context {
            assert_eq!(chunk.old_lines[old], chunk.new_lines[new]);
        }
    }

    #[test]
    fn context_line_starting_with_stars_after_space_is_context() {
        let hunks =
            parse("*** Begin Patch\n*** Update File: a.md\n@@\n ***bold***\n+x\n*** End Patch");
        let Hunk::Update { chunks, .. } = &hunks[0] else {
            panic!("not an update")
        };
        assert_eq!(
            chunks,
            &vec![with_context(
                chunk(None, &["***bold***"], &["***bold***", "x"], false),
                &[(0, 0)]
            )]
        );
    }
}
