//! The nine candidate generators ("replacers") of OpenCode's `edit` tool.
//!
//! A replacer never edits anything. Given the file `content` and the model's
//! `find` (= `oldString`), it proposes *candidate spans*: substrings of
//! `content` that the model plausibly meant. [`crate::replace::replace`] tries the
//! replacers in [`REPLACERS`] order and, within one replacer, the candidates
//! in order; the first candidate that occurs exactly once in the file wins.
//!
//! Every candidate returned here is a sub-slice of `content` (OpenCode's
//! generators yield strings that are "actual substrings of content"; where
//! OpenCode yields a computed string such as `find.trim()` only when content
//! includes it, this port yields the slice of content at its first
//! occurrence, which is the same string).
//!
//! # Complexity
//!
//! OpenCode's TypeScript is quadratic in several places (each anchor line
//! scans forward to the end of the file for the closing anchor; windows are
//! re-joined into fresh strings). A 20,000-line file whose every line is the
//! first anchor made that ~2·10⁸ line comparisons. This port keeps the exact
//! yield semantics but:
//!
//! * splits the file into lines and trims every line at most once per edit,
//!   shared by all replacers through [`Haystack`];
//! * finds "the first line ≥ i+2 whose trim equals the last anchor" through a
//!   table built in one backward pass (`next_index_of`), so BlockAnchor and
//!   ContextAware are O(lines);
//! * compares windows (contiguous slices of `content`, never re-joined) with
//!   streaming, early-exit comparisons, so window scans are O(lines × m) with
//!   m = number of `find` lines, and usually far less.
//!
//! Line splitting follows JavaScript's `split("\n")`: a CRLF file's lines keep
//! their trailing `\r`, which `trim()` removes before comparison.

use std::cell::OnceCell;

use crate::text::{
    byte_offset_of_char, is_js_whitespace, js_line_count, js_trim, leading_ws_chars,
};

/// A candidate generator: returns candidate sub-slices of the haystack's
/// content, in the order OpenCode's generator would yield them.
pub type Replacer = for<'a> fn(&Haystack<'a>, &str) -> Vec<&'a str>;

/// BlockAnchor similarity a lone anchor pair's middle lines must reach.
///
/// OpenCode shipped this as `0.0` (v1.2.27 and earlier): any block whose
/// first and last lines matched the model's anchors was replaced, whatever it
/// contained. Issue #30932 is the result: `oldString` = "fn a() {" … "}" with
/// a stale body matched an unrelated function further down and silently
/// replaced it. The fix (2026-06-05) raised both thresholds to 0.65 so the
/// middle must actually resemble what the model thinks is there.
pub const SINGLE_CANDIDATE_SIMILARITY_THRESHOLD: f64 = 0.65;

/// BlockAnchor similarity the best of several anchor pairs must reach (was
/// `0.3`; raised with [`SINGLE_CANDIDATE_SIMILARITY_THRESHOLD`], #30932).
pub const MULTIPLE_CANDIDATES_SIMILARITY_THRESHOLD: f64 = 0.65;

/// The cascade, in OpenCode's order, with the names reported by
/// [`crate::replace::replace_with_info`]. Order matters: strict replacers come first
/// so a fuzzy one only runs when nothing stricter produced a unique match.
pub const REPLACERS: [(&str, Replacer); 9] = [
    ("Simple", simple),
    ("LineTrimmed", line_trimmed),
    ("BlockAnchor", block_anchor),
    ("WhitespaceNormalized", whitespace_normalized),
    ("IndentationFlexible", indentation_flexible),
    ("EscapeNormalized", escape_normalized),
    ("TrimmedBoundary", trimmed_boundary),
    ("ContextAware", context_aware),
    ("MultiOccurrence", multi_occurrence),
];

/// The file being edited, with its line index computed lazily and at most
/// once per [`crate::replace::replace`] call.
///
/// Every line-based replacer needs `content.split("\n")` and most need each
/// line trimmed. OpenCode recomputes both in every replacer; on a 20,000-line
/// file that is eight splits and five trims per edit, and the allocation
/// churn alone was a visible share of the run time. Sharing one index keeps
/// an edit to one split and one trim. `Simple` does not touch it, so an exact
/// match never pays for it.
pub struct Haystack<'a> {
    content: &'a str,
    index: OnceCell<LineIndex<'a>>,
    trimmed: OnceCell<Vec<&'a str>>,
}

/// `content.split("\n")` with the byte offset of every line, so any window of
/// consecutive lines is a slice of `content` (never re-joined).
struct LineIndex<'a> {
    starts: Vec<usize>,
    lines: Vec<&'a str>,
}

impl<'a> Haystack<'a> {
    /// Wrap `content`; nothing is computed until a replacer asks.
    pub fn new(content: &'a str) -> Self {
        Haystack {
            content,
            index: OnceCell::new(),
            trimmed: OnceCell::new(),
        }
    }

    /// The whole file.
    pub fn content(&self) -> &'a str {
        self.content
    }

    fn index(&self) -> &LineIndex<'a> {
        self.index.get_or_init(|| {
            let capacity = self.content.bytes().filter(|&b| b == b'\n').count() + 1;
            let mut starts = Vec::with_capacity(capacity);
            let mut lines = Vec::with_capacity(capacity);
            let mut start = 0;
            for line in self.content.split('\n') {
                starts.push(start);
                lines.push(line);
                start += line.len() + 1;
            }
            LineIndex { starts, lines }
        })
    }

    /// The lines, as JavaScript's `split("\n")` returns them (a CRLF file's
    /// lines keep their `\r`).
    pub fn lines(&self) -> &[&'a str] {
        &self.index().lines
    }

    /// Every line, `trim()`med the JavaScript way; computed once.
    pub fn trimmed(&self) -> &[&'a str] {
        self.trimmed
            .get_or_init(|| self.lines().iter().map(|l| js_trim(l)).collect())
    }

    /// Lines `first..=last` joined by `\n` (no trailing newline), as a slice.
    fn span(&self, first: usize, last: usize) -> &'a str {
        let index = self.index();
        &self.content[index.starts[first]..index.starts[last] + index.lines[last].len()]
    }
}

/// `find.split("\n")`, dropping one trailing empty element (a `find` that
/// ends with a newline).
fn split_drop_trailing_empty(find: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = find.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    lines
}

/// The trimmed `find` lines for the anchor replacers (BlockAnchor, ContextAware), or `None`
/// when `find` has fewer than 3 lines (counted before dropping a trailing empty one), too
/// few for a first and last anchor with something between them.
fn anchored_lines(find: &str) -> Option<Vec<&str>> {
    find.split('\n').nth(2)?;
    Some(
        split_drop_trailing_empty(find)
            .into_iter()
            .map(js_trim)
            .collect(),
    )
}

/// `next[i]` = smallest `j >= i` with `lines[j] == target`, or `lines.len()`.
/// One backward pass; replaces OpenCode's per-anchor forward scan.
fn next_index_of(lines: &[&str], target: &str) -> Vec<usize> {
    let n = lines.len();
    let mut next = vec![n; n + 1];
    for i in (0..n).rev() {
        next[i] = if lines[i] == target { i } else { next[i + 1] };
    }
    next
}

/// Levenshtein edit distance over Unicode scalar values (OpenCode counts
/// UTF-16 units; the two agree on BMP text). Two-row DP, O(|a|·|b|) time,
/// O(min) memory; equal strings short-circuit, which keeps files made of
/// repeated lines cheap.
pub fn levenshtein(a: &str, b: &str) -> usize {
    if a == b {
        return 0;
    }
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    if short.is_empty() {
        return long.len();
    }
    let mut prev: Vec<usize> = (0..=short.len()).collect();
    let mut cur = vec![0; short.len() + 1];
    for (i, &lc) in long.iter().enumerate() {
        cur[0] = i + 1;
        for (j, &sc) in short.iter().enumerate() {
            let cost = usize::from(lc != sc);
            cur[j + 1] = (prev[j + 1] + 1).min(cur[j] + 1).min(prev[j] + cost);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[short.len()]
}

/// Simple (replacer 1 of 9): `find` itself.
pub fn simple<'a>(hay: &Haystack<'a>, find: &str) -> Vec<&'a str> {
    let content = hay.content();
    content
        .find(find)
        .map(|i| &content[i..i + find.len()])
        .into_iter()
        .collect()
}

/// LineTrimmed (replacer 2 of 9): every window of lines whose trimmed lines equal the
/// trimmed `find` lines. Catches wrong indentation and trailing spaces; the
/// candidate is the file's original text (its indentation, not the model's).
pub fn line_trimmed<'a>(hay: &Haystack<'a>, find: &str) -> Vec<&'a str> {
    let content = hay.content();
    let search: Vec<&str> = split_drop_trailing_empty(find)
        .into_iter()
        .map(js_trim)
        .collect();
    let n = hay.lines().len();
    let m = search.len();
    if m == 0 {
        // Only for `find == ""`, which replace() rejects up front; OpenCode
        // yields empty spans here.
        return vec![&content[..0]];
    }
    if m > n {
        return Vec::new();
    }
    let trimmed = hay.trimmed();
    (0..=n - m)
        .filter(|&i| trimmed[i..i + m] == search[..])
        .map(|i| hay.span(i, i + m - 1))
        .collect()
}

/// Average Levenshtein similarity of the middle lines of the block
/// `start..=end` against the middle `search` lines (both pre-trimmed).
///
/// Faithful quirks: lines blank on both sides are skipped but still count in
/// the divisor; with `early_exit = Some(t)` (the single-candidate path) the
/// running sum is pre-divided and the loop stops once it reaches `t`.
fn middle_similarity(
    trimmed: &[&str],
    start: usize,
    end: usize,
    search: &[&str],
    early_exit: Option<f64>,
) -> f64 {
    let size = search.len();
    let actual = end - start + 1;
    let shorter = size.min(actual);
    if shorter <= 2 {
        // No middle lines to compare: accept on the anchors alone.
        return 1.0;
    }
    let lines_to_check = (shorter - 2) as f64;
    let mut similarity = 0.0;
    for j in 1..shorter - 1 {
        let a = trimmed[start + j];
        let b = search[j];
        let max_len = a.chars().count().max(b.chars().count());
        if max_len == 0 {
            continue;
        }
        let line_similarity = 1.0 - levenshtein(a, b) as f64 / max_len as f64;
        match early_exit {
            Some(threshold) => {
                similarity += line_similarity / lines_to_check;
                if similarity >= threshold {
                    break;
                }
            }
            None => similarity += line_similarity,
        }
    }
    if early_exit.is_none() {
        similarity /= lines_to_check;
    }
    similarity
}

/// BlockAnchor (replacer 3 of 9): the model got the first and last lines right but the
/// middle drifted (a reworded comment, a changed literal).
///
/// For each line equal (trimmed) to the first anchor, the block ends at the
/// *first* line ≥ 2 lines later equal to the last anchor. Two guards exist
/// because of #30932, where a lone anchor pair (`fn x() {` … `}`) replaced
/// unrelated code:
/// * the block's line count must be within `max(1, ⌊size/4⌋)` of the
///   model's block, so an anchor pair spanning half the file is not a block;
/// * the middle lines must be ≥ 65 % similar
///   ([`SINGLE_CANDIDATE_SIMILARITY_THRESHOLD`],
///   [`MULTIPLE_CANDIDATES_SIMILARITY_THRESHOLD`]).
///
/// Needs ≥ 3 `find` lines, counted before dropping a trailing empty line.
/// With several anchor pairs, the most similar one (first on ties) is the
/// only candidate.
pub fn block_anchor<'a>(hay: &Haystack<'a>, find: &str) -> Vec<&'a str> {
    let Some(search) = anchored_lines(find) else {
        return Vec::new();
    };
    let size = search.len();
    let (first, last) = (search[0], search[size - 1]);
    // Math.max(1, Math.floor(size * 0.25))
    let max_line_delta = (size / 4).max(1);

    let trimmed = hay.trimmed();
    let n = trimmed.len();
    let next_last = next_index_of(trimmed, last);

    let mut candidates: Vec<(usize, usize)> = Vec::new();
    for i in 0..n {
        if trimmed[i] != first {
            continue;
        }
        if i + 2 >= n {
            break;
        }
        let j = next_last[i + 2];
        if j == n {
            // No closing anchor after i+2, hence none after any later line.
            break;
        }
        if (j - i + 1).abs_diff(size) <= max_line_delta {
            candidates.push((i, j));
        }
    }

    match candidates.as_slice() {
        [] => Vec::new(),
        &[(start, end)] => {
            let sim = middle_similarity(
                trimmed,
                start,
                end,
                &search,
                Some(SINGLE_CANDIDATE_SIMILARITY_THRESHOLD),
            );
            if sim >= SINGLE_CANDIDATE_SIMILARITY_THRESHOLD {
                vec![hay.span(start, end)]
            } else {
                Vec::new()
            }
        }
        many => {
            let mut best = None;
            let mut max_similarity = -1.0;
            for &(start, end) in many {
                let sim = middle_similarity(trimmed, start, end, &search, None);
                if sim > max_similarity {
                    max_similarity = sim;
                    best = Some((start, end));
                }
            }
            match best {
                Some((start, end))
                    if max_similarity >= MULTIPLE_CANDIDATES_SIMILARITY_THRESHOLD =>
                {
                    vec![hay.span(start, end)]
                }
                _ => Vec::new(),
            }
        }
    }
}

/// Whitespace-separated tokens (JS `\s` set). `norm(a) == norm(b)` in OpenCode
/// (`s.replace(/\s+/g, " ").trim()`) iff the token sequences are equal.
fn ws_tokens(s: &str) -> impl Iterator<Item = &str> {
    s.split(is_js_whitespace).filter(|t| !t.is_empty())
}

/// Streaming `norm(s) == tokens.join(" ")`; stops at the first mismatch.
fn tokens_equal(s: &str, tokens: &[&str]) -> bool {
    let mut it = ws_tokens(s);
    tokens.iter().all(|t| it.next() == Some(*t)) && it.next().is_none()
}

/// First (leftmost) match in `line` of the regex OpenCode builds from the
/// find's words, `w1\s+w2\s+…\s+wk` (words escaped, so literal). Words contain
/// no whitespace, so each `\s+` must consume a maximal whitespace run and the
/// regex is deterministic at any start. A match exists iff `norm(line)`
/// includes `norm(find)`, which is the condition OpenCode checks first.
fn find_whitespace_flexible<'a>(line: &'a str, words: &[&str]) -> Option<&'a str> {
    let Some((first, rest)) = words.split_first() else {
        // `find` is all whitespace: the regex is empty and matches "" at 0.
        return Some(&line[..0]);
    };
    let mut from = 0;
    while let Some(rel) = line[from..].find(first) {
        let start = from + rel;
        let mut pos = start + first.len();
        let mut matched = true;
        for word in rest {
            let after_ws = pos
                + line[pos..]
                    .find(|c: char| !is_js_whitespace(c))
                    .unwrap_or(line.len() - pos);
            if after_ws == pos || !line[after_ws..].starts_with(word) {
                matched = false;
                break;
            }
            pos = after_ws + word.len();
        }
        if matched {
            return Some(&line[start..pos]);
        }
        // Overlapping retry one char later, like a regex scan.
        from = start + line[start..].chars().next().map_or(1, char::len_utf8);
    }
    None
}

/// WhitespaceNormalized (replacer 4 of 9): equal after collapsing every whitespace run to a
/// single space. First per line (a whole line, or the part of a line matching
/// the words with flexible spacing), then — for a multi-line `find` — every
/// window of `find`'s line count.
pub fn whitespace_normalized<'a>(hay: &Haystack<'a>, find: &str) -> Vec<&'a str> {
    let tokens: Vec<&str> = ws_tokens(find).collect();
    let mut out = Vec::new();
    for &line in hay.lines() {
        if tokens_equal(line, &tokens) {
            out.push(line);
        } else if let Some(m) = find_whitespace_flexible(line, &tokens) {
            out.push(m);
        }
    }
    let m = js_line_count(find);
    let n = hay.lines().len();
    if m > 1 && m <= n {
        for i in 0..=n - m {
            let window = hay.span(i, i + m - 1);
            if tokens_equal(window, &tokens) {
                out.push(window);
            }
        }
    }
    out
}

/// OpenCode's `removeIndentation`, per line: strip the smallest indentation
/// of the non-blank lines from every non-blank line; blank lines are kept.
fn dedent_lines<'s>(lines: &[&'s str]) -> Vec<&'s str> {
    let min = lines
        .iter()
        .filter(|l| !js_trim(l).is_empty())
        .map(|l| leading_ws_chars(l))
        .min();
    lines
        .iter()
        .map(|&l| match min {
            Some(k) if !js_trim(l).is_empty() => &l[byte_offset_of_char(l, k)..],
            _ => l,
        })
        .collect()
}

/// IndentationFlexible (replacer 5 of 9): windows equal to `find` once both have their
/// common indentation removed (the model re-indented the whole block, e.g.
/// copied it out of a nested scope). Relative indentation must still agree.
pub fn indentation_flexible<'a>(hay: &Haystack<'a>, find: &str) -> Vec<&'a str> {
    let find_lines: Vec<&str> = find.split('\n').collect();
    let target = dedent_lines(&find_lines);
    let m = find_lines.len();
    let n = hay.lines().len();
    if m > n {
        return Vec::new();
    }
    // Indentation (chars) of each non-blank line, computed once.
    let lines = hay.lines();
    let indent: Vec<Option<usize>> = lines
        .iter()
        .map(|l| (!js_trim(l).is_empty()).then(|| leading_ws_chars(l)))
        .collect();
    let mut out = Vec::new();
    for i in 0..=n - m {
        let min = indent[i..i + m].iter().flatten().min().copied();
        let equal = (0..m).all(|j| {
            let line = lines[i + j];
            let dedented = match (indent[i + j], min) {
                (Some(_), Some(k)) => &line[byte_offset_of_char(line, k)..],
                _ => line,
            };
            dedented == target[j]
        });
        if equal {
            out.push(hay.span(i, i + m - 1));
        }
    }
    out
}

/// The escapes OpenCode undoes: `\n \t \r \' \" \` \\ \<newline> \$`.
fn unescape_char(c: char) -> Option<char> {
    Some(match c {
        'n' | '\n' => '\n',
        't' => '\t',
        'r' => '\r',
        '\'' => '\'',
        '"' => '"',
        '`' => '`',
        '\\' => '\\',
        '$' => '$',
        _ => return None,
    })
}

/// Lazily unescaped chars of a string, scanning left to right with
/// non-overlapping matches like a global regex replace.
fn unescaped_chars(s: &str) -> impl Iterator<Item = char> + '_ {
    let mut chars = s.chars().peekable();
    std::iter::from_fn(move || {
        let c = chars.next()?;
        if c == '\\'
            && let Some(u) = chars.peek().and_then(|&n| unescape_char(n))
        {
            chars.next();
            return Some(u);
        }
        Some(c)
    })
}

/// OpenCode's `unescapeString`.
pub fn unescape(s: &str) -> String {
    unescaped_chars(s).collect()
}

/// EscapeNormalized (replacer 6 of 9): the model over-escaped (`\n`, `\"` written literally
/// inside `oldString`, a common JSON double-encoding slip). Yields the
/// unescaped `find` if the file contains it, then every window whose
/// unescaped text equals the unescaped `find`.
pub fn escape_normalized<'a>(hay: &Haystack<'a>, find: &str) -> Vec<&'a str> {
    let content = hay.content();
    let target = unescape(find);
    let mut out = Vec::new();
    if let Some(i) = content.find(target.as_str()) {
        out.push(&content[i..i + target.len()]);
    }
    let k = js_line_count(&target);
    let n = hay.lines().len();
    if k <= n {
        for i in 0..=n - k {
            let window = hay.span(i, i + k - 1);
            // Unescaping only shrinks (2 bytes -> 1 ASCII byte), so a shorter
            // window can never match; otherwise compare lazily.
            if window.len() >= target.len() && unescaped_chars(window).eq(target.chars()) {
                out.push(window);
            }
        }
    }
    out
}

/// TrimmedBoundary (replacer 7 of 9): the model added blank lines or spaces around the
/// block. Only for a `find` with surrounding whitespace: yields `find.trim()`
/// if present, then windows of `find`'s line count whose trim equals it.
pub fn trimmed_boundary<'a>(hay: &Haystack<'a>, find: &str) -> Vec<&'a str> {
    let content = hay.content();
    let trimmed_find = js_trim(find);
    if trimmed_find.len() == find.len() {
        return Vec::new();
    }
    let mut out = Vec::new();
    if let Some(i) = content.find(trimmed_find) {
        out.push(&content[i..i + trimmed_find.len()]);
    }
    let m = js_line_count(find);
    let n = hay.lines().len();
    if m <= n {
        for i in 0..=n - m {
            let window = hay.span(i, i + m - 1);
            if js_trim(window) == trimmed_find {
                out.push(window);
            }
        }
    }
    out
}

/// ContextAware (replacer 8 of 9): anchors plus a coarse body check — a block with the same
/// line count whose middle lines are at least 50 % identical (trimmed),
/// counting only lines non-blank on either side. One candidate per first
/// anchor; the block always ends at the first closing anchor ≥ 2 lines on.
///
/// Unlike BlockAnchor this kept its original rule; it is made safe by the
/// equal-line-count requirement and by replace()'s disproportion check,
/// which every candidate of every replacer must pass.
pub fn context_aware<'a>(hay: &Haystack<'a>, find: &str) -> Vec<&'a str> {
    let Some(search) = anchored_lines(find) else {
        return Vec::new();
    };
    let size = search.len();
    let (first, last) = (search[0], search[size - 1]);
    let trimmed = hay.trimmed();
    let n = trimmed.len();
    let next_last = next_index_of(trimmed, last);

    let mut out = Vec::new();
    for i in 0..n {
        if trimmed[i] != first {
            continue;
        }
        if i + 2 >= n {
            break;
        }
        let j = next_last[i + 2];
        if j == n {
            break;
        }
        if j - i + 1 != size {
            continue;
        }
        let mut matching = 0usize;
        let mut total = 0usize;
        for k in 1..size - 1 {
            let (b, f) = (trimmed[i + k], search[k]);
            if !b.is_empty() || !f.is_empty() {
                total += 1;
                if b == f {
                    matching += 1;
                }
            }
        }
        if total == 0 || matching as f64 / total as f64 >= 0.5 {
            out.push(hay.span(i, j));
        }
    }
    out
}

/// MultiOccurrence (replacer 9 of 9): `find` once per non-overlapping exact occurrence.
/// With `replaceAll` the first one replaces every occurrence; otherwise these
/// are all ambiguous and only serve to report "multiple matches". replace()
/// skips candidates it already tried, so the repeats cost a hash lookup, not
/// another scan of the file.
pub fn multi_occurrence<'a>(hay: &Haystack<'a>, find: &str) -> Vec<&'a str> {
    let content = hay.content();
    content.match_indices(find).map(|(_, s)| s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every candidate must be a slice of content (pointer within bounds).
    fn assert_substrings(content: &str, found: &[&str]) {
        let base = content.as_ptr() as usize;
        for s in found {
            let p = s.as_ptr() as usize;
            assert!(p >= base && p + s.len() <= base + content.len(), "{s:?}");
        }
    }

    fn run(r: Replacer, content: &str, find: &str) -> Vec<String> {
        let found = r(&Haystack::new(content), find);
        assert_substrings(content, &found);
        found.into_iter().map(str::to_owned).collect()
    }

    #[test]
    fn levenshtein_basics() {
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("abc", ""), 3);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("same", "same"), 0);
        assert_eq!(levenshtein("héllo", "hello"), 1);
        assert_eq!(levenshtein("ab", "ba"), 2);
    }

    #[test]
    fn simple_positive_and_negative() {
        assert_eq!(run(simple, "a foo b", "foo"), ["foo"]);
        assert!(run(simple, "a foo b", "bar").is_empty());
    }

    #[test]
    fn line_trimmed_matches_reindented_block() {
        let content = "fn a() {\n    let x = 1;  \n    let y = 2;\n}\n";
        assert_eq!(
            run(line_trimmed, content, "let x = 1;\n  let y = 2;\n"),
            ["    let x = 1;  \n    let y = 2;"]
        );
    }

    #[test]
    fn line_trimmed_refuses_changed_text() {
        let content = "    let x = 1;\n    let y = 2;\n";
        assert!(run(line_trimmed, content, "let x = 1;\nlet y = 3;").is_empty());
        // More lines than the file has.
        assert!(run(line_trimmed, "a", "a\nb\nc").is_empty());
    }

    #[test]
    fn line_trimmed_keeps_crlf_inside_span() {
        let content = "a\r\n  b\r\n  c\r\nd";
        assert_eq!(run(line_trimmed, content, "b\r\nc"), ["  b\r\n  c\r"]);
    }

    const FUNCS: &str = "fn alpha() {\n    let total = compute(1, 2);\n    log(total);\n    total\n}\n\nfn beta() {\n    let v = vec![1, 2, 3];\n    v.len()\n}\n";

    #[test]
    fn block_anchor_accepts_similar_middle() {
        // One middle line slightly drifted: still ≥ 0.65 similar.
        let find = "fn alpha() {\n    let total = compute(1, 3);\n    log(total);\n    total\n}";
        assert_eq!(
            run(block_anchor, FUNCS, find),
            ["fn alpha() {\n    let total = compute(1, 2);\n    log(total);\n    total\n}"]
        );
    }

    #[test]
    fn block_anchor_refuses_loose_anchor_pair() {
        // #30932: anchors match, the middle is about something else entirely.
        let find = "fn alpha() {\n    open_socket(\"0.0.0.0:80\").unwrap();\n    spawn_workers(16);\n    serve_forever()\n}";
        assert!(run(block_anchor, FUNCS, find).is_empty());
    }

    #[test]
    fn block_anchor_refuses_block_of_wrong_size() {
        // Anchors 10 lines apart while the model's block has 3 lines.
        let content = "start\na\nb\nc\nd\ne\nf\ng\nh\ni\nend\n";
        assert!(run(block_anchor, content, "start\na\nend").is_empty());
        // Within max(1, 3/4) = 1 line, the block is accepted.
        assert_eq!(
            run(block_anchor, "start\na\nb\nend", "start\na\nend"),
            ["start\na\nb\nend"]
        );
    }

    #[test]
    fn block_anchor_needs_three_lines() {
        assert!(run(block_anchor, "a\nx\nb", "a\nb").is_empty());
    }

    #[test]
    fn block_anchor_multiple_candidates_picks_most_similar() {
        let content = "{\n  red\n}\n{\n  green\n}\n";
        assert_eq!(
            run(block_anchor, content, "{\n  greem\n}"),
            ["{\n  green\n}"]
        );
        // Neither is similar enough.
        assert!(run(block_anchor, content, "{\n  xyzzy\n}").is_empty());
    }

    #[test]
    fn block_anchor_blank_middle_lines_count_against() {
        // Both-blank middle lines add 0 but still count in the divisor
        // (faithful): 1 equal line out of 3 => 0.33 < 0.65.
        let content = "begin\nbody\n\n\nend";
        assert!(run(block_anchor, content, "begin\nbody\n\n\nend\n").is_empty());
    }

    #[test]
    fn whitespace_normalized_multiline_window() {
        let content = "if  x   {\n\ty =  1;\n}\n";
        assert_eq!(
            run(whitespace_normalized, content, "if x {\n  y = 1;\n}"),
            ["if  x   {\n\ty =  1;\n}"]
        );
    }

    #[test]
    fn whitespace_normalized_within_line() {
        let content = "    let x   =  1; // note\n";
        assert_eq!(run(whitespace_normalized, content, "x = 1;"), ["x   =  1;"]);
        // Whole-line equality yields the full line.
        assert_eq!(run(whitespace_normalized, "  a  b  ", "a b"), ["  a  b  "]);
        // Overlapping start: "aa" first occurs at 0 but only matches at 1.
        assert_eq!(run(whitespace_normalized, "aaa  b", "aa b"), ["aa  b"]);
    }

    #[test]
    fn whitespace_normalized_refuses_different_tokens() {
        assert!(
            run(
                whitespace_normalized,
                "let x = 1;\nlet y = 2;",
                "let x = 2;"
            )
            .is_empty()
        );
        // Whitespace *inside* a token is not flexible.
        assert!(run(whitespace_normalized, "let xy = 1;", "let x y = 1;").is_empty());
    }

    #[test]
    fn indentation_flexible_matches_uniform_shift() {
        let content = "mod m {\n        if a {\n            b();\n        }\n}\n";
        assert_eq!(
            run(indentation_flexible, content, "if a {\n    b();\n}"),
            ["        if a {\n            b();\n        }"]
        );
    }

    #[test]
    fn indentation_flexible_refuses_changed_relative_indent() {
        let content = "if a {\nb();\n}\n";
        assert!(run(indentation_flexible, content, "if a {\n    b();\n}").is_empty());
    }

    #[test]
    fn escape_normalized_unescapes_find() {
        let content = "let s = \"a\";\nprint(s)\n";
        // Model sent literal backslash escapes. The direct hit comes first,
        // then the equal window (OpenCode yields both; replace() dedupes).
        let found = run(escape_normalized, content, "let s = \\\"a\\\";\\nprint(s)");
        assert_eq!(
            found,
            ["let s = \"a\";\nprint(s)", "let s = \"a\";\nprint(s)"]
        );
    }

    #[test]
    fn escape_normalized_window_in_escaped_file() {
        // The file itself contains an escape sequence; the model sent the
        // real tab. Direct search fails, the window comparison succeeds.
        let content = "x = \"a\\tb\"\n";
        assert_eq!(
            run(escape_normalized, content, "x = \"a\tb\""),
            ["x = \"a\\tb\""]
        );
        assert_eq!(unescape("\\\\n"), "\\n");
        assert_eq!(unescape("\\q\\$"), "\\q$");
        assert_eq!(unescape("a\\\nb"), "a\nb");
    }

    #[test]
    fn escape_normalized_refuses_other_text() {
        assert!(run(escape_normalized, "let s = 1;", "let s = 2;").is_empty());
    }

    #[test]
    fn trimmed_boundary_positive_and_negative() {
        assert_eq!(
            run(trimmed_boundary, "xfoo bar", "\n  foo bar  \n"),
            ["foo bar"]
        );
        // Already trimmed: this replacer has nothing to add.
        assert!(run(trimmed_boundary, "foo", "foo").is_empty());
        assert!(run(trimmed_boundary, "foo", "  bar ").is_empty());
    }

    #[test]
    fn trimmed_boundary_window() {
        // Window whose trim equals the trimmed find (file has extra spaces).
        let content = "x\n\n  foo\nbar  \ny";
        assert_eq!(
            run(trimmed_boundary, content, "foo\nbar\n"),
            ["foo\nbar", "\n  foo\nbar  "]
        );
    }

    #[test]
    fn context_aware_half_the_middle_suffices() {
        let content = "fn f() {\n    a();\n    b();\n}\n";
        // One of two middle lines identical: 50 %.
        assert_eq!(
            run(
                context_aware,
                content,
                "fn f() {\n    a();\n    totally_different();\n}"
            ),
            ["fn f() {\n    a();\n    b();\n}"]
        );
    }

    #[test]
    fn context_aware_refuses_low_overlap_or_other_length() {
        let content = "fn f() {\n    a();\n    b();\n}\n";
        assert!(run(context_aware, content, "fn f() {\n    x();\n    y();\n}").is_empty());
        assert!(run(context_aware, content, "fn f() {\n    a();\n}").is_empty());
        assert!(
            run(
                context_aware,
                content,
                "fn f() {\n    a();\n    b();\n    c();\n}"
            )
            .is_empty()
        );
    }

    #[test]
    fn multi_occurrence_positive_and_negative() {
        assert_eq!(run(multi_occurrence, "ab ab ab", "ab").len(), 3);
        assert_eq!(run(multi_occurrence, "aaaa", "aa").len(), 2);
        assert!(run(multi_occurrence, "ab", "c").is_empty());
    }

    #[test]
    fn anchors_without_closing_line_are_linear() {
        // Every line is the first anchor and the last anchor never occurs.
        let content = "fn a() {\n".repeat(50_000);
        let find = "fn a() {\n    x();\n}";
        let hay = Haystack::new(&content);
        assert!(block_anchor(&hay, find).is_empty());
        assert!(context_aware(&hay, find).is_empty());
    }
}
