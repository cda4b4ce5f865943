//! `.env` reads: every argument that names an env file, literally or through a glob or a
//! brace expansion, is a `read` of it, whatever the command.

use super::*;

impl<'a> Scanner<'a> {
    /// Every argument naming an env file is a read, whatever the command: `grep`, `source`
    /// and `docker --env-file=` read secrets just as well as `cat`.
    pub(super) fn env_reads(&mut self, args: &[Node], src: &str) {
        let mut dashdash = false;
        for &arg in args {
            match classify(arg, src, &mut dashdash, false) {
                Arg::Value(Some(word)) => self.env_read(word),
                // `$'.env'` is as static as `'.env'`.
                Arg::Value(None) => {
                    if let Some(word) = decoded_word(arg, src) {
                        self.env_read(word);
                    }
                }
                Arg::Flag => {}
            }
        }
    }

    /// A static name that is an env file, or a glob that could match one (`.env*`, `*`,
    /// `.e{n,}v`): a glob is reported as written, resolved like a path, since the files it
    /// matches are only known when it runs. Arguments known only at run time (`cat "$f"`)
    /// are not reads: any command could be reading anything then, and reporting `*` for
    /// every `$f` would drown the rule in noise; the `external` check already covers where.
    pub(super) fn env_read(&mut self, word: Word) {
        let named = match word.glob {
            None => is_env_file(&word.text),
            Some(at) => glob_may_name_env_file(&word.text, at),
        };
        if !named {
            return;
        }
        let Some(word) = self.expand_tilde(word) else {
            return;
        };
        let Some(places) = self.candidates(&word.text) else {
            // Directory unknown: the name is what the `read` rules match on.
            return self.reads.push(&word.text);
        };
        for place in places {
            let real = resolve(&place);
            let shown = self.display(&real);
            self.reads.push(&shown);
        }
    }
}

/// `.env`, `.env.local`, `.env.example`, `prod.env`, but not `.envrc` or `environment.ts`.
pub(super) fn is_env_file(path: &str) -> bool {
    let name = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    name.starts_with(".env.") || name.ends_with(".env")
}

/// Whether a glob (its first unquoted glob or brace character at byte `at`) could match an
/// env file name in its last component: `.env` or `<x>.env` (the name ends in `.env`), or
/// `.env.<x>`. Bash globs never match a leading `.` with a wildcard, so `*.rs` and `*` cannot
/// match `.env.rs`, while `*` can match `prod.env`. Brace alternatives are expanded first
/// (`.e{n,}v` → `.env`, `.ev`); quoted glob characters after `at` are treated as wildcards,
/// which can only say "could" more often.
pub(super) fn glob_may_name_env_file(text: &str, at: usize) -> bool {
    if text.len() > MAX_GLOB_LEN {
        return true;
    }
    let Some(alternatives) = brace_alternatives(text, at) else {
        return true;
    };
    alternatives.iter().any(|alt| {
        let name = alt.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        let tokens = glob_tokens(name);
        if tokens.is_empty() {
            return false;
        }
        let reversed: Vec<Glob> = tokens.iter().rev().cloned().collect();
        let ends_env = glob_may_start_with(&reversed, "vne.");
        // Only a literal `.` (or a bracket holding one) matches a leading dot.
        let dot_first = match &tokens[0] {
            Glob::Char(c) => *c == '.',
            class @ Glob::Class(..) => class.matches('.'),
            Glob::One | Glob::Star => false,
        };
        ends_env || (dot_first && glob_may_start_with(&tokens, ".env."))
    })
}

/// The words a brace expression expands to, braces before byte `from` being quoted;
/// `{a..z}` sequences become `*`. `None` when there would be too many to check.
pub(super) fn brace_alternatives(text: &str, from: usize) -> Option<Vec<String>> {
    let mut pending = vec![(text.to_string(), from)];
    let mut done = Vec::new();
    let mut steps = 0;
    while let Some((word, from)) = pending.pop() {
        steps += 1;
        if steps > MAX_BRACE_ALTERNATIVES * 4 || done.len() + pending.len() > MAX_BRACE_ALTERNATIVES
        {
            return None;
        }
        match expand_first_brace(&word, from) {
            Some(expanded) => pending.extend(expanded),
            None => done.push(word),
        }
    }
    Some(done)
}

/// Expands the first brace expression at or after `from`: the words it becomes, each with
/// the offset to continue from. `None` when there is none.
pub(super) fn expand_first_brace(word: &str, from: usize) -> Option<Vec<(String, usize)>> {
    let bytes = word.as_bytes();
    let mut open = from;
    while open < bytes.len() {
        if bytes[open] == b'{'
            && let Some(expanded) = expand_brace_at(word, open)
        {
            return Some(expanded);
        }
        open += 1;
    }
    None
}

/// Expands the brace expression opening at byte `open`, if it is one (`{a,b}`, `{1..3}`).
pub(super) fn expand_brace_at(word: &str, open: usize) -> Option<Vec<(String, usize)>> {
    let bytes = word.as_bytes();
    let mut depth = 0usize;
    let mut commas = Vec::new();
    let mut close = None;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            b',' if depth == 1 => commas.push(i),
            _ => {}
        }
    }
    let close = close?;
    let (head, tail) = (&word[..open], &word[close + 1..]);
    let body = &word[open + 1..close];
    if commas.is_empty() {
        // `{x..y}` is a sequence; what it yields does not matter here, any text will do.
        return body
            .contains("..")
            .then(|| vec![(format!("{head}*{tail}"), open + 1)]);
    }
    let mut cuts = vec![open];
    cuts.extend(commas);
    cuts.push(close);
    let expanded = cuts
        .windows(2)
        .map(|w| {
            let piece = &word[w[0] + 1..w[1]];
            (format!("{head}{piece}{tail}"), open)
        })
        .collect();
    Some(expanded)
}

/// One element of a bash glob.
#[derive(Clone, Debug)]
pub(super) enum Glob {
    Char(char),
    /// `?`, a bracket expression we do not model (`[[:alpha:]]`), or an extglob.
    One,
    Star,
    /// `[…]`: ranges, negated with `!` or `^`.
    Class(Vec<(char, char)>, bool),
}

impl Glob {
    pub(super) fn matches(&self, c: char) -> bool {
        match self {
            Glob::Char(x) => *x == c,
            Glob::One | Glob::Star => true,
            Glob::Class(ranges, negated) => {
                ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
            }
        }
    }
}

pub(super) fn glob_tokens(name: &str) -> Vec<Glob> {
    let chars: Vec<char> = name.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let token = match chars[i] {
            '*' => Glob::Star,
            '?' => Glob::One,
            // Extended globs (`@(…)`, `!(…)`): anything from here on.
            '(' | '|' | ')' => Glob::Star,
            '[' => match bracket(&chars, i) {
                Some((token, end)) => {
                    i = end;
                    token
                }
                None => Glob::Char('['),
            },
            c => Glob::Char(c),
        };
        tokens.push(token);
        i += 1;
    }
    tokens
}

/// The bracket expression starting at `chars[open]` (`[`), and the index of its `]`.
pub(super) fn bracket(chars: &[char], open: usize) -> Option<(Glob, usize)> {
    let mut i = open + 1;
    let negated = matches!(chars.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let first = i;
    let mut ranges = Vec::new();
    let mut unmodelled = false;
    while i < chars.len() && (chars[i] != ']' || i == first) {
        if chars[i] == '[' && matches!(chars.get(i + 1), Some(':' | '=' | '.')) {
            unmodelled = true;
        }
        if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|&c| c != ']') {
            ranges.push((chars[i], chars[i + 2]));
            i += 3;
        } else {
            ranges.push((chars[i], chars[i]));
            i += 1;
        }
    }
    if i >= chars.len() {
        return None;
    }
    let token = if unmodelled {
        Glob::One
    } else {
        Glob::Class(ranges, negated)
    };
    Some((token, i))
}

/// Whether the glob matches some string that starts with `prefix`: the prefix is run through
/// the glob as a set of reachable positions; whatever remains can always match something.
pub(super) fn glob_may_start_with(tokens: &[Glob], prefix: &str) -> bool {
    let close = |states: &mut Vec<bool>| {
        for k in 0..tokens.len() {
            if states[k] && matches!(tokens[k], Glob::Star) {
                states[k + 1] = true;
            }
        }
    };
    let mut states = vec![false; tokens.len() + 1];
    states[0] = true;
    close(&mut states);
    for c in prefix.chars() {
        let mut next = vec![false; tokens.len() + 1];
        for k in 0..tokens.len() {
            if !states[k] {
                continue;
            }
            match tokens[k] {
                Glob::Star => next[k] = true,
                ref t if t.matches(c) => next[k + 1] = true,
                _ => {}
            }
        }
        close(&mut next);
        if !next.contains(&true) {
            return false;
        }
        states = next;
    }
    true
}
