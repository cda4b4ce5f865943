//! Text helpers shared by the `edit` tool and its replacers.
//!
//! OpenCode is written in TypeScript, so several of its string primitives
//! (`String.prototype.trim`, the regex class `\s`, `.length`) behave slightly
//! differently from their Rust namesakes. The helpers here reproduce the
//! JavaScript behaviour where it matters for matching, so that a port of the
//! replacer cascade accepts and refuses the same inputs as the original.
//!
//! All offsets in this module and in [`crate::replacers`] are **byte** offsets
//! into UTF-8 strings and are always char boundaries; lengths that OpenCode
//! compares numerically (`isDisproportionateMatch`) are measured in UTF-16
//! code units, exactly like JavaScript's `.length`.

/// The line ending a file uses, detected once per edit.
///
/// OpenCode normalises the model's `oldString`/`newString` to the file's
/// ending before matching: models almost always emit `\n`, and without this a
/// CRLF file could never match a multi-line `oldString` exactly (and a
/// successful fuzzy match would splice LF lines into a CRLF file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEnding {
    /// `\n`
    Lf,
    /// `\r\n`
    Crlf,
}

impl LineEnding {
    /// The ending as a string slice.
    pub fn as_str(self) -> &'static str {
        match self {
            LineEnding::Lf => "\n",
            LineEnding::Crlf => "\r\n",
        }
    }
}

/// OpenCode's `detectLineEnding`: CRLF as soon as the content contains a
/// single `"\r\n"`, otherwise LF. A mixed file is therefore treated as CRLF,
/// which is what OpenCode does.
pub fn detect_line_ending(content: &str) -> LineEnding {
    if content.contains("\r\n") {
        LineEnding::Crlf
    } else {
        LineEnding::Lf
    }
}

/// `normalizeLineEndings` then `convertToLineEnding`: CRLF is first folded to
/// LF (so an input that already uses CRLF is not turned into `\r\r\n`), then
/// every LF is expanded to the target ending. A lone `\r` is left alone.
pub fn convert_line_endings(s: &str, ending: LineEnding) -> String {
    let lf = s.replace("\r\n", "\n");
    match ending {
        LineEnding::Lf => lf,
        LineEnding::Crlf => lf.replace('\n', "\r\n"),
    }
}

/// The UTF-8 byte order mark as a char (U+FEFF).
pub const BOM: char = '\u{FEFF}';

/// Split off a leading UTF-8 BOM. Returns whether one was present and the
/// text after it.
///
/// Latest OpenCode preserves a BOM across edits: the match runs on the text
/// without it (a model never reproduces an invisible U+FEFF in `oldString`),
/// and [`join_bom`] puts it back before writing.
pub fn split_bom(content: &str) -> (bool, &str) {
    match content.strip_prefix(BOM) {
        Some(rest) => (true, rest),
        None => (false, content),
    }
}

/// Inverse of [`split_bom`].
pub fn join_bom(had_bom: bool, content: &str) -> String {
    if had_bom {
        let mut out = String::with_capacity(content.len() + BOM.len_utf8());
        out.push(BOM);
        out.push_str(content);
        out
    } else {
        content.to_owned()
    }
}

/// JavaScript's whitespace set, as used by `String.prototype.trim` and the
/// regex class `\s`: WhiteSpace (TAB, VT, FF, SP, NBSP, ZWNBSP and the `Zs`
/// category) plus LineTerminator (LF, CR, LS, PS).
///
/// It differs from [`char::is_whitespace`]: JS counts U+FEFF and not U+0085.
/// Using Rust's set would make e.g. `trim()` comparisons disagree with
/// OpenCode on files containing those characters.
pub fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r' | ' ' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}

/// JavaScript's `String.prototype.trim`, returning a sub-slice.
pub fn js_trim(s: &str) -> &str {
    s.trim_matches(is_js_whitespace)
}

/// Number of leading JS-whitespace chars (the length of `/^(\s*)/`'s match;
/// every JS whitespace char is one UTF-16 unit, so chars == JS length here).
pub fn leading_ws_chars(s: &str) -> usize {
    s.chars().take_while(|&c| is_js_whitespace(c)).count()
}

/// Byte offset just after the first `n` chars of `s` (or `s.len()` if it has
/// fewer), i.e. where JavaScript's `s.slice(n)` would start for BMP text.
pub fn byte_offset_of_char(s: &str, n: usize) -> usize {
    s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)
}

/// JavaScript `.length`: UTF-16 code units.
pub fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Number of lines as JavaScript's `s.split("\n").length` counts them.
pub fn js_line_count(s: &str) -> usize {
    s.bytes().filter(|&b| b == b'\n').count() + 1
}

fn is_diff_content_line(line: &str) -> bool {
    (line.starts_with('+') || line.starts_with('-') || line.starts_with(' '))
        && !line.starts_with("---")
        && !line.starts_with("+++")
}

/// OpenCode's `trimDiff`: strip the indentation common to every non-blank
/// content line of a unified diff.
///
/// Why: an edit deep inside a nested block produces a diff whose every line
/// starts with the same 8–16 columns of whitespace; the diff is shown to the
/// user in the permission prompt and to the model, and the common indent is
/// pure noise there. Headers (`---`/`+++`) and hunk markers are untouched.
/// If the common indent is 0 (or there is no non-blank content line) the diff
/// is returned unchanged. Blank content lines lose up to the same amount.
pub fn trim_diff(diff: &str) -> String {
    let mut min: Option<usize> = None;
    for line in diff.split('\n').filter(|l| is_diff_content_line(l)) {
        let body = &line[1..];
        if !js_trim(body).is_empty() {
            let indent = leading_ws_chars(body);
            min = Some(min.map_or(indent, |m| m.min(indent)));
        }
    }
    let min = match min {
        None | Some(0) => return diff.to_owned(),
        Some(m) => m,
    };
    let mut out = String::with_capacity(diff.len());
    for (i, line) in diff.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if is_diff_content_line(line) {
            // The prefix is one ASCII byte; `slice(min)` drops `min` chars
            // (all whitespace here, hence BMP, hence one UTF-16 unit each).
            let body = &line[1..];
            out.push_str(&line[..1]);
            out.push_str(&body[byte_offset_of_char(body, min)..]);
        } else {
            out.push_str(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_crlf_and_lf() {
        assert_eq!(detect_line_ending("a\r\nb"), LineEnding::Crlf);
        assert_eq!(detect_line_ending("a\nb\r\n"), LineEnding::Crlf);
        assert_eq!(detect_line_ending("a\nb"), LineEnding::Lf);
        assert_eq!(detect_line_ending("a\rb"), LineEnding::Lf);
        assert_eq!(detect_line_ending(""), LineEnding::Lf);
    }

    #[test]
    fn converts_line_endings_without_doubling_cr() {
        assert_eq!(
            convert_line_endings("a\nb\r\nc", LineEnding::Crlf),
            "a\r\nb\r\nc"
        );
        assert_eq!(convert_line_endings("a\r\nb\nc", LineEnding::Lf), "a\nb\nc");
        assert_eq!(convert_line_endings("a\rb", LineEnding::Crlf), "a\rb");
        assert_eq!(LineEnding::Crlf.as_str(), "\r\n");
        assert_eq!(LineEnding::Lf.as_str(), "\n");
    }

    #[test]
    fn bom_round_trip() {
        let (bom, rest) = split_bom("\u{FEFF}fn main() {}");
        assert!(bom);
        assert_eq!(rest, "fn main() {}");
        assert_eq!(join_bom(bom, rest), "\u{FEFF}fn main() {}");
        let (bom, rest) = split_bom("plain");
        assert!(!bom);
        assert_eq!(rest, "plain");
        assert_eq!(join_bom(bom, rest), "plain");
        // Only a leading BOM counts.
        assert_eq!(split_bom("a\u{FEFF}"), (false, "a\u{FEFF}"));
    }

    #[test]
    fn js_trim_matches_javascript_set() {
        assert_eq!(js_trim("\u{FEFF} x \u{3000}"), "x");
        // U+0085 is whitespace for Rust but not for JavaScript.
        assert_eq!(js_trim("\u{85}x"), "\u{85}x");
        assert_eq!(js_trim(" \t\r\n"), "");
        assert_eq!(utf16_len("a😀"), 3);
        assert_eq!(js_line_count("a\nb\n"), 3);
        assert_eq!(byte_offset_of_char("ééx", 2), 4);
        assert_eq!(byte_offset_of_char("é", 5), 2);
    }

    #[test]
    fn trim_diff_removes_common_indent() {
        let diff = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n     if x {\n-        old();\n+        new();\n     }";
        let expected = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n if x {\n-    old();\n+    new();\n }";
        assert_eq!(trim_diff(diff), expected);
    }

    #[test]
    fn trim_diff_blank_lines_do_not_count_but_are_trimmed() {
        let diff = "@@\n     a\n \n+      \n-     b";
        // min = 4 (from the " a" line; "-b" has 5; blank lines are ignored)
        assert_eq!(trim_diff(diff), "@@\n a\n \n+  \n- b");
    }

    #[test]
    fn trim_diff_unchanged_when_no_common_indent() {
        let diff = "--- a\n+++ b\n@@\n-x\n+    y";
        assert_eq!(trim_diff(diff), diff);
        assert_eq!(trim_diff("no content lines"), "no content lines");
        assert_eq!(trim_diff(""), "");
    }
}
