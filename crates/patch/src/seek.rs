//! Finding a chunk's lines in a file, tolerating the small differences that
//! models routinely introduce when they retype code: trailing whitespace,
//! re-indentation and typographic punctuation.

use std::borrow::Cow;

/// How strictly two lines must agree. The passes run from strictest to
/// loosest so that an exact occurrence always wins over a fuzzy one
/// elsewhere in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Exact,
    TrimEnd,
    Trim,
    /// `trim` plus [`normalise_punctuation`].
    Normalised,
}

const PASSES: [Pass; 4] = [Pass::Exact, Pass::TrimEnd, Pass::Trim, Pass::Normalised];

fn key(pass: Pass, line: &str) -> Cow<'_, str> {
    match pass {
        Pass::Exact => Cow::Borrowed(line),
        Pass::TrimEnd => Cow::Borrowed(line.trim_end()),
        Pass::Trim => Cow::Borrowed(line.trim()),
        Pass::Normalised => normalise_punctuation(line),
    }
}

/// The ASCII stand-in for a typographic character, if it has one.
fn ascii_for(c: char) -> Option<&'static str> {
    match c {
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' => Some("'"),
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' => Some("\""),
        '\u{2010}'..='\u{2015}' | '\u{2212}' => Some("-"),
        '\u{2026}' => Some("..."),
        '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => Some(" "),
        _ => None,
    }
}

/// Maps smart quotes, Unicode dashes, the ellipsis and non-breaking or
/// typographic spaces to ASCII, then trims. Models usually type the ASCII
/// form even when the file holds the typographic one (or the reverse).
pub(super) fn normalise_punctuation(line: &str) -> Cow<'_, str> {
    if !line.chars().any(|c| ascii_for(c).is_some()) {
        return Cow::Borrowed(line.trim());
    }
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        match ascii_for(c) {
            Some(ascii) => out.push_str(ascii),
            None => out.push(c),
        }
    }
    Cow::Owned(out.trim().to_string())
}

fn window_matches<L: AsRef<str>, P: AsRef<str>>(
    lines: &[L],
    pattern: &[P],
    at: usize,
    pass: Pass,
) -> bool {
    pattern
        .iter()
        .zip(&lines[at..])
        .all(|(p, l)| key(pass, l.as_ref()) == key(pass, p.as_ref()))
}

/// Index of the first occurrence of `pattern` in `lines` at or after
/// `start`, or `None`.
///
/// Four passes run in order (exact, `trim_end`, `trim`, normalised
/// punctuation), each a forward scan from `start`. With `eof` (the chunk was
/// marked `*** End of File`) the end-aligned position is tried with all four
/// passes *before* any forward scan: the model said the lines close the
/// file, so an identical block earlier in the file must not capture the
/// edit. The end position is only used if it is at or after `start`, so an
/// EOF chunk can never overlap an earlier chunk.
///
/// An empty pattern never matches: callers treat "no old lines" as a pure
/// insertion and must not reach here with one.
pub fn seek_sequence<L: AsRef<str>, P: AsRef<str>>(
    lines: &[L],
    pattern: &[P],
    start: usize,
    eof: bool,
) -> Option<usize> {
    if pattern.is_empty() || pattern.len() > lines.len() {
        return None;
    }
    let last_start = lines.len() - pattern.len();
    if start > last_start {
        return None;
    }
    if eof
        && PASSES
            .iter()
            .any(|&pass| window_matches(lines, pattern, last_start, pass))
    {
        return Some(last_start);
    }
    for pass in PASSES {
        let line_keys: Vec<Cow<'_, str>> = lines[start..]
            .iter()
            .map(|l| key(pass, l.as_ref()))
            .collect();
        let pattern_keys: Vec<Cow<'_, str>> =
            pattern.iter().map(|p| key(pass, p.as_ref())).collect();
        if let Some(offset) = line_keys
            .windows(pattern_keys.len())
            .position(|window| window == pattern_keys.as_slice())
        {
            return Some(start + offset);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_match() {
        assert_eq!(
            seek_sequence(&["foo", "bar", "baz"], &["bar", "baz"], 0, false),
            Some(1)
        );
    }

    #[test]
    fn exact_match_respects_start() {
        let lines = ["x", "a", "x", "a"];
        assert_eq!(seek_sequence(&lines, &["x"], 0, false), Some(0));
        assert_eq!(seek_sequence(&lines, &["x"], 1, false), Some(2));
        assert_eq!(seek_sequence(&lines, &["x"], 3, false), None);
    }

    #[test]
    fn exact_match_beats_earlier_fuzzy_match() {
        // Line 0 matches only after trimming; line 1 matches exactly.
        let lines = ["foo  ", "foo"];
        assert_eq!(seek_sequence(&lines, &["foo"], 0, false), Some(1));
    }

    #[test]
    fn trim_end_pass_ignores_trailing_whitespace() {
        let lines = ["foo   ", "bar\t\t"];
        assert_eq!(seek_sequence(&lines, &["foo", "bar"], 0, false), Some(0));
        // And the other way round: the pattern has the trailing blanks.
        assert_eq!(seek_sequence(&["foo"], &["foo  "], 0, false), Some(0));
    }

    #[test]
    fn trim_pass_ignores_indentation() {
        let lines = ["fn main() {", "        body();", "}"];
        assert_eq!(seek_sequence(&lines, &["    body();"], 0, false), Some(1));
    }

    #[test]
    fn normalised_pass_maps_typographic_punctuation() {
        let lines = [
            "let s = \u{201C}hi\u{201D};",
            "it\u{2019}s \u{2014} fine\u{2026}",
            "a\u{00A0}b",
            "x \u{2212} y",
        ];
        let pattern = ["let s = \"hi\";", "it's - fine...", "a b", "x - y"];
        assert_eq!(seek_sequence(&lines, &pattern, 0, false), Some(0));
        // ...and the other direction: typographic pattern, ASCII file.
        assert_eq!(seek_sequence(&pattern, &lines, 0, false), Some(0));
    }

    #[test]
    fn normalise_leaves_plain_lines_borrowed() {
        assert!(matches!(
            normalise_punctuation("  plain  "),
            Cow::Borrowed("plain")
        ));
        assert_eq!(normalise_punctuation("\u{2018}a\u{2019}"), "'a'");
    }

    #[test]
    fn eof_prefers_end_of_file() {
        let lines = ["a", "b", "mid", "a", "b"];
        assert_eq!(seek_sequence(&lines, &["a", "b"], 0, false), Some(0));
        assert_eq!(seek_sequence(&lines, &["a", "b"], 0, true), Some(3));
    }

    #[test]
    fn eof_prefers_fuzzy_end_over_exact_earlier() {
        let lines = ["end", "x", "end  "];
        assert_eq!(seek_sequence(&lines, &["end"], 0, true), Some(2));
    }

    #[test]
    fn eof_falls_back_to_forward_scan() {
        let lines = ["a", "b", "c"];
        assert_eq!(seek_sequence(&lines, &["a"], 0, true), Some(0));
    }

    #[test]
    fn eof_end_position_must_not_precede_start() {
        let lines = ["a", "b"];
        assert_eq!(seek_sequence(&lines, &["a", "b"], 1, true), None);
    }

    #[test]
    fn no_match() {
        assert_eq!(seek_sequence(&["a", "b"], &["c"], 0, false), None);
        assert_eq!(seek_sequence(&["a", "b"], &["c"], 0, true), None);
    }

    #[test]
    fn pattern_longer_than_input_is_no_match() {
        assert_eq!(seek_sequence(&["one"], &["one", "two"], 0, false), None);
    }

    #[test]
    fn empty_pattern_is_no_match() {
        let empty: [&str; 0] = [];
        assert_eq!(seek_sequence(&["a"], &empty, 0, false), None);
    }
}
