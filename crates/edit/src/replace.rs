//! The string-replacement engine behind the `edit` tool, ported from
//! OpenCode (`packages/opencode/src/tool/edit.ts`, latest thresholds).
//!
//! Models rarely reproduce `oldString` byte for byte: indentation drifts,
//! whitespace collapses, quotes get escaped twice, a comment in the middle of
//! the block was misremembered. Failing every such edit wastes a turn (the
//! model re-reads the file and retries), so OpenCode tries a cascade of
//! increasingly tolerant matchers ([`crate::replacers::REPLACERS`]) and accepts the
//! first candidate that is **unique** in the file.
//!
//! Tolerance is dangerous in the other direction: a fuzzy match that lands
//! on the wrong code silently destroys it. Two guards exist for that, both
//! from OpenCode issue #30932 (a lone `fn …() {` / `}` anchor pair replaced an
//! unrelated function):
//! * BlockAnchor requires ≥ 65 % middle-line similarity and a block of about
//!   the model's size (see [`crate::replacers::block_anchor`]);
//! * every candidate of every replacer must pass
//!   [`is_disproportionate_match`]: a span much larger than `oldString` is
//!   refused outright ([`ReplaceError::Disproportionate`]) rather than
//!   skipped, because it means the model's picture of the file is stale.
//!
//! `newString` is inserted literally (no `$&`/`$1` expansion as JavaScript's
//! `String.replace` would do) and verbatim: a fuzzy match is not re-indented.
//!
//! Two departures from OpenCode, both about line ends: line-based fuzzy
//! candidates end at the end of their last line *excluding* the `\n` but
//! *including* a CRLF file's `\r`. OpenCode therefore (a) left an extra blank
//! line when an `oldString` ending with a newline was matched fuzzily and
//! replaced by a `newString` ending with one, and (b) left a bare `\n` in a
//! CRLF file when the `newString` had no trailing newline. Here the file's
//! newline joins the span in case (a) and the `\r` is carried over in case
//! (b), so a CRLF file stays CRLF and no blank line appears.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use crate::replacers::{Haystack, REPLACERS};
use crate::text::{js_line_count, js_trim, utf16_len};

/// Why a replacement was refused. `Display` gives OpenCode's exact messages,
/// which are what the model sees and has been trained against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaceError {
    /// `oldString == newString`; checked first, so `""`/`""` reports this.
    Identical,
    /// `oldString` is empty (use `write` to create or overwrite a file).
    EmptyOld,
    /// No replacer produced a candidate that occurs in the file.
    NotFound,
    /// Candidates were found but none was unique.
    Multiple,
    /// A candidate is much larger than `oldString`.
    Disproportionate,
}

impl fmt::Display for ReplaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReplaceError::Identical => {
                "No changes to apply: oldString and newString are identical."
            }
            ReplaceError::EmptyOld => {
                "oldString cannot be empty when editing an existing file. Provide the exact text to replace, or use write for an intentional full-file replacement."
            }
            ReplaceError::NotFound => {
                "Could not find oldString in the file. It must match exactly, including whitespace, indentation, and line endings."
            }
            ReplaceError::Multiple => {
                "Found multiple matches for oldString. Provide more surrounding context to make the match unique."
            }
            ReplaceError::Disproportionate => {
                "Refusing replacement because the matched span is much larger than oldString. Re-read the file and provide the full exact oldString for the intended replacement."
            }
        })
    }
}

impl std::error::Error for ReplaceError {}

/// Replace `old` by `new` in `content` (OpenCode's `replace()`).
///
/// With `replace_all`, every occurrence of the first matching candidate is
/// replaced; otherwise the candidate must occur exactly once.
pub fn replace(
    content: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<String, ReplaceError> {
    replace_with_info(content, old, new, replace_all).map(|(s, _)| s)
}

/// [`replace`], also returning the name of the replacer that matched (see
/// [`crate::replacers::REPLACERS`]); useful in tests, logs and benchmarks.
/// In a CRLF file a line-based span ends with the last line's `\r` (lines are split on
/// `\n`). Replacing it with text that lacks the `\r` would leave a bare `\n` in a CRLF
/// file, so the `\r` is carried over.
fn keep_line_ending<'n>(search: &str, new: &'n str) -> Cow<'n, str> {
    if search.ends_with('\r') && !new.ends_with('\r') && !new.ends_with('\n') {
        Cow::Owned(format!("{new}\r"))
    } else {
        Cow::Borrowed(new)
    }
}

pub fn replace_with_info(
    content: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<(String, &'static str), ReplaceError> {
    if old == new {
        return Err(ReplaceError::Identical);
    }
    if old.is_empty() {
        return Err(ReplaceError::EmptyOld);
    }
    let old_size = SpanSize::of(old);
    let mut not_found = true;
    // Candidates already tried. The outcome for a candidate depends only on
    // its text, so skipping repeats is exact; it is what keeps a file of
    // 20,000 identical lines linear (LineTrimmed, WhitespaceNormalized,
    // MultiOccurrence… each yield the same string once per line, and
    // OpenCode scanned the whole file twice for every one of them).
    let mut tried: HashSet<&str> = HashSet::new();
    // Repeats usually come back to back (one per line of a run of identical
    // lines); comparing with the previous candidate is cheaper than hashing.
    let mut previous: Option<&str> = None;
    let hay = Haystack::new(content);
    for (name, replacer) in REPLACERS {
        for search in replacer(&hay, old) {
            if previous == Some(search) || !tried.insert(search) {
                continue;
            }
            previous = Some(search);
            let Some(index) = content.find(search) else {
                continue;
            };
            not_found = false;
            if disproportionate(SpanSize::of(search), old_size) {
                return Err(ReplaceError::Disproportionate);
            }
            // An exact match is spliced literally, whatever it ends with.
            let new = if name == "Simple" {
                Cow::Borrowed(new)
            } else {
                keep_line_ending(search, new)
            };
            if replace_all {
                return Ok((content.replace(search, &new), name));
            }
            if content.rfind(search) != Some(index) {
                continue;
            }
            let mut end = index + search.len();
            // A line-based replacer's span stops before the last line's `\n` even when
            // oldString ended with one; if newString ends with one too, take the file's
            // newline into the span, or the edit would leave an extra blank line behind.
            if old.ends_with('\n')
                && !search.ends_with('\n')
                && new.ends_with('\n')
                && content[end..].starts_with('\n')
            {
                end += 1;
            }
            let mut out = String::with_capacity(content.len() - (end - index) + new.len());
            out.push_str(&content[..index]);
            out.push_str(&new);
            out.push_str(&content[end..]);
            return Ok((out, name));
        }
    }
    Err(if not_found {
        ReplaceError::NotFound
    } else {
        ReplaceError::Multiple
    })
}

/// The two measures `isDisproportionateMatch` compares: JS
/// `split("\n").length` and `trim().length` (UTF-16 units).
#[derive(Clone, Copy)]
struct SpanSize {
    lines: usize,
    trimmed_len: usize,
}

impl SpanSize {
    fn of(s: &str) -> Self {
        SpanSize {
            lines: js_line_count(s),
            trimmed_len: utf16_len(js_trim(s)),
        }
    }
}

fn disproportionate(search: SpanSize, old: SpanSize) -> bool {
    if search.lines >= (old.lines + 3).max(old.lines * 2) {
        return true;
    }
    if old.lines == 1 {
        return false;
    }
    search.trimmed_len > (old.trimmed_len + 500).max(old.trimmed_len * 4)
}

/// OpenCode's `isDisproportionateMatch`: is the candidate `search` so much
/// larger than the model's `old` that replacing it would destroy code the
/// model never looked at?
///
/// True if `search` has at least `max(old_lines + 3, 2 · old_lines)` lines;
/// otherwise (for multi-line `old` only) if its trimmed length exceeds
/// `max(old + 500, 4 · old)` UTF-16 units. A one-line `old` is only judged by
/// line count, since short single-line fuzzy matches are normal.
pub fn is_disproportionate_match(search: &str, old: &str) -> bool {
    disproportionate(SpanSize::of(search), SpanSize::of(old))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::{LineEnding, convert_line_endings, detect_line_ending, join_bom, split_bom};

    fn info(content: &str, old: &str, new: &str) -> Result<(String, &'static str), ReplaceError> {
        replace_with_info(content, old, new, false)
    }

    #[test]
    fn messages_are_opencodes() {
        assert_eq!(
            ReplaceError::Identical.to_string(),
            "No changes to apply: oldString and newString are identical."
        );
        assert_eq!(
            ReplaceError::NotFound.to_string(),
            "Could not find oldString in the file. It must match exactly, including whitespace, indentation, and line endings."
        );
        assert_eq!(
            ReplaceError::Multiple.to_string(),
            "Found multiple matches for oldString. Provide more surrounding context to make the match unique."
        );
        assert_eq!(
            ReplaceError::Disproportionate.to_string(),
            "Refusing replacement because the matched span is much larger than oldString. Re-read the file and provide the full exact oldString for the intended replacement."
        );
        assert_eq!(
            ReplaceError::EmptyOld.to_string(),
            "oldString cannot be empty when editing an existing file. Provide the exact text to replace, or use write for an intentional full-file replacement."
        );
        let boxed: Box<dyn std::error::Error> = Box::new(ReplaceError::Multiple);
        assert!(boxed.to_string().starts_with("Found multiple"));
    }

    #[test]
    fn identical_is_checked_before_empty() {
        assert_eq!(replace("x", "", "", false), Err(ReplaceError::Identical));
        assert_eq!(replace("x", "a", "a", true), Err(ReplaceError::Identical));
        assert_eq!(replace("x", "", "y", false), Err(ReplaceError::EmptyOld));
    }

    #[test]
    fn exact_unique_match() {
        assert_eq!(info("a b c", "b", "B"), Ok(("a B c".into(), "Simple")));
    }

    #[test]
    fn not_found_and_multiple() {
        assert_eq!(
            replace("abc", "xyz", "q", false),
            Err(ReplaceError::NotFound)
        );
        assert_eq!(
            replace("foo\nfoo\n", "foo", "bar", false),
            Err(ReplaceError::Multiple)
        );
    }

    #[test]
    fn many_identical_lines_report_multiple() {
        // Thousands of identical candidates: each is tried once (dedupe).
        let content = "    same();\n".repeat(5_000);
        assert_eq!(
            replace(&content, "same();", "x", false),
            Err(ReplaceError::Multiple)
        );
        assert_eq!(
            replace(&content, "same();\nsame();\nsame();", "x", false),
            Err(ReplaceError::Multiple)
        );
    }

    #[test]
    fn replace_all_is_literal() {
        assert_eq!(
            replace("a b a", "a", "$&$1$$", true),
            Ok("$&$1$$ b $&$1$$".to_owned())
        );
        assert_eq!(replace("x", "x", "$&", false), Ok("$&".to_owned()));
    }

    #[test]
    fn replace_all_uses_first_matching_candidate() {
        // Exact text absent; LineTrimmed's candidate is then replaced everywhere.
        let content = "  foo\nbar\n  foo\n";
        assert_eq!(
            replace_with_info(content, "foo  ", "X", true),
            Ok(("X\nbar\nX\n".into(), "LineTrimmed"))
        );
    }

    #[test]
    fn fuzzy_ambiguity_falls_through_to_next_candidate() {
        // LineTrimmed sees two indentations of `x();`; only one is unique
        // as a string, and that one wins.
        let content = "  x();\n    x();\n  x();\n";
        assert_eq!(
            info(content, "x(); ", "y();"),
            Ok(("  x();\ny();\n  x();\n".into(), "LineTrimmed"))
        );
    }

    #[test]
    fn line_trimmed_via_replace() {
        let content = "fn main() {\n    let a = 1;\n    let b = 2;\n}\n";
        let (out, name) = info(content, "let a = 1;\nlet b = 2;", "    let c = 3;").unwrap();
        assert_eq!(name, "LineTrimmed");
        assert_eq!(out, "fn main() {\n    let c = 3;\n}\n");
    }

    const TWO_FNS: &str = "fn load() {\n    let path = config_path();\n    let text = read(path);\n    parse(text)\n}\n\nfn save(data: &Data) {\n    let text = render(data);\n    write(config_path(), text);\n    flush()\n}\n";

    #[test]
    fn loose_anchor_pair_with_unrelated_middle_is_refused() {
        // #30932: the anchors exist, but the body the model describes is not
        // the body in the file. Must not replace `load`.
        let old = "fn load() {\n    let socket = bind(\"0.0.0.0:8080\");\n    accept_forever(socket, 64);\n    shutdown()\n}";
        assert_eq!(
            replace(TWO_FNS, old, "fn load() {}", false),
            Err(ReplaceError::NotFound)
        );
    }

    #[test]
    fn anchor_with_similar_middle_is_accepted() {
        let old = "fn load() {\n    let path = config_path();\n    let text = read_to_string(path);\n    parse(text)\n}";
        let (out, name) = info(TWO_FNS, old, "fn load() {}").unwrap();
        assert_eq!(name, "BlockAnchor");
        assert!(out.starts_with("fn load() {}\n\nfn save"));
    }

    #[test]
    fn whitespace_normalized_via_replace() {
        let content = "let  total =   a + b;\n";
        assert_eq!(
            info(content, "let total = a + b;", "let total = a - b;"),
            Ok(("let total = a - b;\n".into(), "WhitespaceNormalized"))
        );
    }

    #[test]
    fn escape_normalized_via_replace() {
        let content = "say(\"hi\");\n";
        assert_eq!(
            info(content, "say(\\\"hi\\\");", "say(\"bye\");"),
            Ok(("say(\"bye\");\n".into(), "EscapeNormalized"))
        );
    }

    #[test]
    fn trimmed_boundary_via_replace() {
        // Two leading blank lines: the model's block has more lines than the
        // file, so every window-based replacer gives up; the trimmed text
        // is still there.
        assert_eq!(
            info("x\ny", "\n\nx\ny", "X"),
            Ok(("X".into(), "TrimmedBoundary"))
        );
    }

    #[test]
    fn context_aware_via_replace() {
        // Half the middle identical, half rewritten: too different for
        // BlockAnchor (0.5 < 0.65), enough for ContextAware (≥ 50 %).
        let content = "start {\n    keep_one();\n    old_two_aaaaaaaaaaaa();\n}\n";
        let old = "start {\n    keep_one();\n    zzzzzzzzzzzzzzzzzzzzzzz;\n}";
        assert_eq!(
            info(content, old, "start {}"),
            Ok(("start {}\n".into(), "ContextAware"))
        );
    }

    #[test]
    fn disproportionate_span_is_refused() {
        // ContextAware would accept this block (1 of 2 middle lines equal),
        // but its span is far larger than oldString.
        let long = "x".repeat(600);
        let content = format!("{{\n    a\n    {long}\n}}\n");
        assert_eq!(
            replace(&content, "{\n    a\n    b\n}", "{}", false),
            Err(ReplaceError::Disproportionate)
        );
    }

    #[test]
    fn disproportionate_by_line_count() {
        // A one-line oldString whose escapes unescape to four lines.
        let content = "a\nb\nc\nd\n";
        assert_eq!(
            replace(content, "a\\nb\\nc\\nd", "z", false),
            Err(ReplaceError::Disproportionate)
        );
        assert!(is_disproportionate_match("1\n2\n3\n4", "x"));
        assert!(!is_disproportionate_match("1\n2\n3", "x"));
        assert!(is_disproportionate_match(
            "1\n2\n3\n4\n5\n6\n7\n8\n9\n10",
            "a\nb\nc\nd\ne"
        ));
        assert!(!is_disproportionate_match(&"y".repeat(10_000), "x"));
        assert!(is_disproportionate_match(
            &format!("a\n{}", "y".repeat(600)),
            "a\nb"
        ));
        assert!(!is_disproportionate_match(
            &format!("a\n{}", "y".repeat(400)),
            "a\nb"
        ));
    }

    #[test]
    fn crlf_tool_flow_keeps_crlf() {
        let file = "fn a() {\r\n    one();\r\n    two();\r\n}\r\n";
        let ending = detect_line_ending(file);
        assert_eq!(ending, LineEnding::Crlf);
        let old = convert_line_endings("    one();\n    two();\n", ending);
        let new = convert_line_endings("    three();\n", ending);
        assert_eq!(
            replace(file, &old, &new, false),
            Ok("fn a() {\r\n    three();\r\n}\r\n".to_owned())
        );
    }

    #[test]
    fn crlf_fuzzy_match_keeps_the_carriage_return() {
        // OpenCode left "a\r\nB\nc": the span took the line's `\r` with it.
        let file = "a\r\n  b\r\nc";
        assert_eq!(
            replace_with_info(file, "  b  ", "B", false),
            Ok(("a\r\nB\r\nc".into(), "LineTrimmed"))
        );
    }

    #[test]
    fn fuzzy_match_of_a_whole_line_leaves_no_extra_blank_line() {
        // OpenCode left "a\nB\n\nc\n": the span stopped before the line's `\n`.
        let file = "a\n  b\nc\n";
        assert_eq!(
            replace_with_info(file, "b \n", "B\n", false),
            Ok(("a\nB\nc\n".into(), "LineTrimmed"))
        );
        let crlf = "a\r\n  b\r\nc\r\n";
        assert_eq!(
            replace(crlf, "b \r\n", "B\r\n", false),
            Ok("a\r\nB\r\nc\r\n".into())
        );
    }

    #[test]
    fn bom_is_outside_the_match() {
        let file = "\u{FEFF}x = 1\n";
        let (bom, body) = split_bom(file);
        let out = replace(body, "x = 1", "x = 2", false).unwrap();
        assert_eq!(join_bom(bom, &out), "\u{FEFF}x = 2\n");
    }

    #[test]
    fn multibyte_text_is_sliced_on_char_boundaries() {
        let content = "  héllo wörld 日本\n  ünïcode\n";
        assert_eq!(
            info(content, "héllo   wörld 日本", "ok"),
            // Whole-line equality yields the whole line, indentation included.
            Ok(("ok\n  ünïcode\n".into(), "WhitespaceNormalized"))
        );
    }
}

/// Property tests: files built from a small vocabulary (so lines repeat, and
/// near-repeats differing only in indentation or trailing whitespace are
/// common), with multi-byte text, `$&`-style patterns, literal backslashes,
/// and random LF or CRLF endings.
#[cfg(test)]
mod prop_tests {
    use proptest::prelude::*;

    use super::replace;
    use crate::replacers::{Haystack, REPLACERS};
    use crate::text::{LineEnding, convert_line_endings, detect_line_ending};

    const INDENTS: &[&str] = &["", "  ", "    ", "\t", " \t"];
    const BODIES: &[&str] = &[
        "fn main() {",
        "}",
        "let x = 1;",
        "let x  =  1;",
        "return x;",
        "",
        "// héllo wörld",
        "日本語 テキスト 😀",
        "if a { b(); }",
        "x",
        "$& $1 $$",
        "print(\"a\\nb\")",
        "\"quoted\"",
        "`tick` \\ back",
    ];
    const TRAILING: &[&str] = &["", " ", "\t", "  "];

    fn line() -> impl Strategy<Value = String> {
        (
            prop::sample::select(INDENTS),
            prop::sample::select(BODIES),
            prop::sample::select(TRAILING),
        )
            .prop_map(|(i, b, t)| format!("{i}{b}{t}"))
    }

    /// Lines, some of them deliberately copied over others to force repeats.
    fn lines() -> impl Strategy<Value = Vec<String>> {
        (
            prop::collection::vec(line(), 1..40),
            prop::collection::vec((any::<usize>(), any::<usize>()), 0..6),
        )
            .prop_map(|(mut lines, dups)| {
                let n = lines.len();
                for (from, to) in dups {
                    lines[to % n] = lines[from % n].clone();
                }
                lines
            })
    }

    fn file(lines: &[String], ending: LineEnding, trailing_newline: bool) -> String {
        let mut s = lines.join(ending.as_str());
        if trailing_newline {
            s.push_str(ending.as_str());
        }
        s
    }

    /// Replacement text with newlines (LF only), `$` patterns and multi-byte chars.
    fn new_text() -> impl Strategy<Value = String> {
        "[a-z $&\\n\u{e9}\u{65e5}]{0,16}"
    }

    /// Picks `[start, end)` among `cuts` (sorted byte offsets) with end > start.
    fn pick(cuts: &[usize], a: usize, len: usize) -> (usize, usize) {
        let si = a % (cuts.len() - 1);
        let ei = (si + len).min(cuts.len() - 1);
        (cuts[si], cuts[ei])
    }

    fn is_unique(content: &str, s: &str) -> bool {
        content.find(s) == content.rfind(s)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// A region that occurs exactly once is replaced exactly there.
        #[test]
        fn unique_region_is_replaced_in_place(
            lines in lines(),
            crlf in any::<bool>(),
            trailing in any::<bool>(),
            a in any::<usize>(),
            len in 1usize..80,
            new in new_text(),
        ) {
            let ending = if crlf { LineEnding::Crlf } else { LineEnding::Lf };
            let content = file(&lines, ending, trailing);
            prop_assume!(!content.is_empty());
            let cuts: Vec<usize> = content
                .char_indices()
                .map(|(i, _)| i)
                .chain([content.len()])
                .collect();
            let (start, end) = pick(&cuts, a, len);
            let region = &content[start..end];
            prop_assume!(is_unique(&content, region));
            prop_assume!(region != new);
            let expected = format!("{}{}{}", &content[..start], new, &content[end..]);
            prop_assert_eq!(replace(&content, region, &new, false), Ok(expected));
        }

        /// The edit tool's flow on a CRLF file: the model sends LF text, both
        /// strings are converted to the file's ending, and the result has no bare
        /// LF. Regions never split a `\r\n` pair (a model cannot express that).
        #[test]
        fn crlf_file_stays_crlf(
            lines in lines(),
            trailing in any::<bool>(),
            a in any::<usize>(),
            len in 1usize..80,
            new_lf in new_text(),
        ) {
            let content = file(&lines, LineEnding::Crlf, trailing);
            prop_assume!(content.contains("\r\n"));
            let bytes = content.as_bytes();
            let cuts: Vec<usize> = content
                .char_indices()
                .map(|(i, _)| i)
                .chain([content.len()])
                .filter(|&p| !(p > 0 && p < bytes.len() && bytes[p - 1] == b'\r' && bytes[p] == b'\n'))
                .collect();
            let (start, end) = pick(&cuts, a, len);
            let region = &content[start..end];
            let old_lf = region.replace("\r\n", "\n");

            let ending = detect_line_ending(&content);
            prop_assert_eq!(ending, LineEnding::Crlf);
            let old = convert_line_endings(&old_lf, ending);
            let new = convert_line_endings(&new_lf, ending);
            prop_assert_eq!(old.as_str(), region);
            prop_assume!(is_unique(&content, &old));
            prop_assume!(old != new);

            let out = replace(&content, &old, &new, false);
            let expected = format!("{}{}{}", &content[..start], new, &content[end..]);
            prop_assert_eq!(out.as_deref(), Ok(expected.as_str()));
            let out_bytes = expected.as_bytes();
            for (i, &b) in out_bytes.iter().enumerate() {
                if b == b'\n' {
                    prop_assert!(i > 0 && out_bytes[i - 1] == b'\r', "bare LF at {}", i);
                }
            }
        }

        /// Fuzzy inputs (a region re-indented and with whitespace changed): every
        /// replacer returns only sub-slices of the content, and replace() never
        /// panics (no mid-char slicing, no out-of-range index).
        #[test]
        fn fuzzy_inputs_never_panic(
            lines in lines(),
            crlf in any::<bool>(),
            a in any::<usize>(),
            len in 1usize..12,
            indent in prop::sample::select(INDENTS),
            replace_all in any::<bool>(),
            new in new_text(),
        ) {
            let ending = if crlf { LineEnding::Crlf } else { LineEnding::Lf };
            let content = file(&lines, ending, true);
            let n = lines.len();
            let from = a % n;
            let to = (from + len).min(n);
            let old: String = lines[from..to]
                .iter()
                .map(|l| format!("{indent}{}", l.trim().replace(' ', "  ")))
                .collect::<Vec<_>>()
                .join("\n");
            let base = content.as_ptr() as usize;
            let hay = Haystack::new(&content);
            for (name, replacer) in REPLACERS {
                for candidate in replacer(&hay, &old) {
                    let p = candidate.as_ptr() as usize;
                    prop_assert!(
                        p >= base && p + candidate.len() <= base + content.len(),
                        "{} yielded a string outside content", name
                    );
                }
            }
            let _ = replace(&content, &old, &new, replace_all);
        }
    }
}
