//! What a repository's own `.runner/config.toml` may say.
//!
//! The project layer sits above the user's config in the stack, and evaluation takes the
//! last matching rule, so without a check a checkout could ship `"rm *" = "allow"` and undo
//! the user's `"rm *" = "deny"` without anyone noticing. The rule here: a project rule may
//! only make an action *stricter* (allow < ask < deny) than what the layers below it (the
//! built-in defaults, the profile, the user's config) give for any subject it matches. A
//! rule that would loosen is screened out:
//!
//! - loosening the profile or the user's config: always dropped, with a note;
//! - loosening only a built-in default (an `external_directory` ask, a `.env` read ask):
//!   kept only when the person trusts this config (see `Sources::trust` in
//!   [`super::layers`]), else dropped with a note.
//!
//! `--config FILE` and the session come after the project in the stack, so they already win
//! wherever they match and need no check.
//!
//! "Matches any subject" must hold for every string a subject could be, so the check is on
//! the patterns, not on examples: two wildcards *overlap* when some string matches both
//! (decided exactly, see [`overlap`]), and a later rule below *covers* a project rule only
//! when every string the project rule matches is sure to match it too (a safe
//! under-approximation, see [`covers`]). A project rule loosens when some stricter rule
//! below overlaps it and no later rule below covers it. This errs towards dropping: a rule
//! is only kept when it provably loosens nothing.

use std::path::Path;

use super::rules::{Action, Layer, Rule};

/// A project rule left out because it would loosen `over`.
#[derive(Debug, Clone)]
pub struct Loosening {
    /// The repository's rule.
    pub rule: Rule,
    /// Its line in the file, when it could be found (1-based).
    pub line: Option<usize>,
    /// A stricter rule below it that it would override.
    pub over: Rule,
}

impl Loosening {
    /// Whether only built-in defaults are loosened (trust can let it through).
    pub fn of_defaults_only(&self) -> bool {
        self.over.source.layer == Layer::Defaults
    }

    /// `bash "rm *" = "allow" (/repo/.runner/config.toml:3)`: the rule and where it is.
    pub fn describe(&self) -> String {
        let at = match self.line {
            Some(line) => format!("{}:{line}", self.rule.source.origin),
            None => format!(
                "{} (rule {})",
                self.rule.source.origin, self.rule.source.position
            ),
        };
        format!("{} ({at})", show(&self.rule))
    }

    /// What it would have loosened: `bash "rm *" = "deny" (rule 1 of /home/u/…)`.
    pub fn describe_over(&self) -> String {
        format!(
            "{} (rule {} of {})",
            show(&self.over),
            self.over.source.position,
            self.over.source.origin
        )
    }
}

fn show(rule: &Rule) -> String {
    format!(
        "{} {:?} = \"{}\"",
        rule.permission, rule.pattern, rule.action
    )
}

/// How much an action holds back.
fn strictness(action: Action) -> u8 {
    match action {
        Action::Allow => 0,
        Action::Ask => 1,
        Action::Deny => 2,
    }
}

/// The project's rules split into those that only tighten (kept in their order) and those
/// that would loosen something in `below` (defaults, profile, user, in stack order, each
/// with its layer set). `worktree` is the absolute worktree: a file subject is matched by
/// its relative and its absolute spelling, so a relative project pattern is also compared
/// as the absolute path it names.
pub fn screen(project: Vec<Rule>, below: &[Rule], worktree: &Path) -> (Vec<Rule>, Vec<Loosening>) {
    let mut kept = Vec::new();
    let mut loosened = Vec::new();
    for rule in project {
        match loosens(&rule, below, worktree) {
            Some(over) => loosened.push(Loosening {
                over: over.clone(),
                rule,
                line: None,
            }),
            None => kept.push(rule),
        }
    }
    (kept, loosened)
}

/// The stricter rule below that `rule` would override, preferring one of the profile or the
/// user's config (those can never be loosened) over a built-in default.
fn loosens<'r>(rule: &Rule, below: &'r [Rule], worktree: &Path) -> Option<&'r Rule> {
    let root = worktree.to_string_lossy();
    let absolute = |pattern: &str| -> Option<String> {
        (!pattern.starts_with('/') && !pattern.starts_with('*'))
            .then(|| format!("{}/{pattern}", root.trim_end_matches('/')))
    };
    let patterns_overlap = |b: &str| {
        overlap(&rule.pattern, b)
            || absolute(&rule.pattern).is_some_and(|a| overlap(&a, b))
            || absolute(b).is_some_and(|a| overlap(&rule.pattern, &a))
    };
    let blocking = below.iter().enumerate().filter(|(i, b)| {
        strictness(b.action) > strictness(rule.action)
            && overlap(&rule.permission, &b.permission)
            && patterns_overlap(&b.pattern)
            && !below[i + 1..].iter().any(|c| {
                covers(&c.permission, &rule.permission) && covers(&c.pattern, &rule.pattern)
            })
    });
    let mut found = None;
    for (_, b) in blocking {
        if b.source.layer != Layer::Defaults {
            return Some(b);
        }
        found.get_or_insert(b);
    }
    found
}

fn chars(pattern: &str) -> Vec<char> {
    pattern
        .chars()
        .map(|c| if c == '\\' { '/' } else { c })
        .collect()
}

/// A pattern's languages: itself, and for a pattern ending in `" *"` also the pattern
/// without it (`"ls *"` matches `ls`, see [`super::wildcard`]).
fn alternatives(pattern: &str) -> Vec<Vec<char>> {
    let p = chars(pattern);
    let mut out = vec![p.clone()];
    if p.len() >= 2 && p[p.len() - 2..] == [' ', '*'] {
        out.push(p[..p.len() - 2].to_vec());
    }
    out
}

/// Whether some string matches both wildcards. Exact: a search over pairs of positions,
/// where a `*` may match nothing or take one character the other side produces (two stars
/// facing each other only ever need to skip).
pub fn overlap(a: &str, b: &str) -> bool {
    let (a, b) = (alternatives(a), alternatives(b));
    a.iter().any(|a| b.iter().any(|b| intersect(a, b)))
}

fn intersect(a: &[char], b: &[char]) -> bool {
    let width = b.len() + 1;
    let mut seen = vec![false; (a.len() + 1) * width];
    let mut todo = vec![(0usize, 0usize)];
    while let Some((i, j)) = todo.pop() {
        if std::mem::replace(&mut seen[i * width + j], true) {
            continue;
        }
        if i == a.len() && j == b.len() {
            return true;
        }
        let (x, y) = (a.get(i).copied(), b.get(j).copied());
        let mut next = |i: usize, j: usize| {
            if !seen[i * width + j] {
                todo.push((i, j));
            }
        };
        if x == Some('*') {
            next(i + 1, j);
            if y.is_some_and(|y| y != '*') {
                next(i, j + 1);
            }
        }
        if y == Some('*') {
            next(i, j + 1);
            if x.is_some_and(|x| x != '*') {
                next(i + 1, j);
            }
        }
        if let (Some(x), Some(y)) = (x, y)
            && x != '*'
            && y != '*'
            && (x == '?' || y == '?' || x == y)
        {
            next(i + 1, j + 1);
        }
    }
    false
}

/// Whether every string `inner` matches surely matches `outer`: `outer` is `*`, the same
/// pattern, or a literal prefix and a final `*` that `inner` starts with literally. Anything
/// else counts as not covered, which can only drop more project rules, never fewer.
pub fn covers(outer: &str, inner: &str) -> bool {
    if outer == "*" || outer == inner {
        return true;
    }
    let Some(prefix) = outer.strip_suffix('*') else {
        return false;
    };
    !prefix.contains(['*', '?', '\\']) && !inner.contains('\\') && inner.starts_with(prefix)
}

/// The line of a TOML config on which `rule` is written, found by its pattern (quoted or
/// bare key) or, for a permission given a bare action, by the permission's key. Best
/// effort: `None` when the text does not show it plainly.
pub fn line_of(text: &str, rule: &Rule, home: &str) -> Option<usize> {
    let mut spellings = vec![rule.pattern.clone()];
    if !home.is_empty()
        && let Some(rest) = rule.pattern.strip_prefix(home)
    {
        spellings.push(format!("~{rest}"));
        spellings.push(format!("$HOME{rest}"));
    }
    let key_is = |line: &str, key: &str| {
        let line = line.trim_start();
        let after = line
            .strip_prefix(&format!("\"{key}\""))
            .or_else(|| line.strip_prefix(&format!("'{key}'")))
            .or_else(|| line.strip_prefix(key));
        after.is_some_and(|rest| rest.trim_start().starts_with('='))
    };
    let lines: Vec<&str> = text.lines().collect();
    let by_pattern = lines.iter().position(|l| {
        spellings.iter().any(|s| {
            key_is(l, s) || l.contains(&format!("\"{s}\" =")) || l.contains(&format!("\"{s}\"="))
        })
    });
    let by_permission = || {
        lines
            .iter()
            .position(|l| key_is(l, &rule.permission) && !l.trim_start().starts_with('['))
    };
    by_pattern
        .or_else(|| (rule.pattern == "*").then(by_permission).flatten())
        .map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action::*;

    fn r(permission: &str, pattern: &str, action: Action, layer: Layer) -> Rule {
        Rule::new(permission, pattern, action, "x", 1).in_layer(layer)
    }

    #[test]
    fn overlap_is_exact_on_wildcards() {
        let cases: &[(&str, &str, bool)] = &[
            ("rm *", "rm *", true),
            ("rm *", "*", true),
            ("rm *", "* -rf x", true),
            ("rm *", "rmdir x", false),
            ("rm *", "rm", true),
            ("git *", "gi?", true),
            ("a?c", "abc", true),
            ("a?c", "abd", false),
            ("*.env", "*.env.*", true),
            ("*.rs", "*.toml", false),
            ("*.env", "src/*", true),
            ("/etc/*", "/home/*", false),
            ("*", "", true),
            ("", "a", false),
        ];
        for (a, b, want) in cases {
            assert_eq!(overlap(a, b), *want, "{a} / {b}");
            assert_eq!(overlap(b, a), *want, "{b} / {a}");
        }
    }

    #[test]
    fn cover_is_only_claimed_when_sure() {
        assert!(covers("*", "anything *"));
        assert!(covers("git *", "git status *"));
        assert!(covers("git *", "git *"));
        assert!(!covers("git ?", "git *"));
        assert!(!covers("rm *", "*"));
        assert!(!covers("*.rs", "src/*"));
    }

    #[test]
    fn a_project_rule_may_tighten_never_loosen() {
        let wt = Path::new("/w");
        let below = vec![
            r("*", "*", Allow, Layer::Defaults),
            r("external_directory", "*", Ask, Layer::Defaults),
            r("bash", "rm *", Deny, Layer::User),
            r("bash", "git *", Allow, Layer::User),
        ];
        let project = vec![
            r("bash", "rm *", Allow, Layer::Other),
            r("bash", "*", Allow, Layer::Other),
            r("bash", "git push *", Deny, Layer::Other),
            r("bash", "git status", Allow, Layer::Other),
            r("external_directory", "/srv/*", Allow, Layer::Other),
            r("edit", "*", Ask, Layer::Other),
        ];
        let (kept, loosened) = screen(project, &below, wt);
        let kept: Vec<_> = kept.iter().map(|r| r.pattern.as_str()).collect();
        assert_eq!(kept, ["git push *", "git status", "*"]);
        let over: Vec<_> = loosened
            .iter()
            .map(|l| (l.rule.pattern.as_str(), l.of_defaults_only()))
            .collect();
        // `"*" = allow` overlaps the user's `rm *` deny even though neither pattern matches
        // the other as text.
        assert_eq!(over, [("rm *", false), ("*", false), ("/srv/*", true)]);
    }

    #[test]
    fn a_relative_project_pattern_meets_an_absolute_user_rule() {
        let below = vec![
            r("*", "*", Allow, Layer::Defaults),
            r("edit", "/w/secret/*", Deny, Layer::User),
        ];
        let (kept, loosened) = screen(
            vec![r("edit", "secret/*", Allow, Layer::Other)],
            &below,
            Path::new("/w"),
        );
        assert!(kept.is_empty());
        assert_eq!(loosened.len(), 1);
    }

    #[test]
    fn a_later_covering_rule_below_settles_it() {
        // The user allowed every outside directory themselves: a project allow of one
        // loosens nothing.
        let below = vec![
            r("external_directory", "*", Ask, Layer::Defaults),
            r("external_directory", "*", Allow, Layer::User),
        ];
        let (kept, loosened) = screen(
            vec![r("external_directory", "/srv/*", Allow, Layer::Other)],
            &below,
            Path::new("/w"),
        );
        assert_eq!(kept.len(), 1);
        assert!(loosened.is_empty());
    }

    #[test]
    fn lines_are_found_by_key() {
        let text = "[permission]\nedit = \"allow\"\n[permission.bash]\n\"rm *\" = \"allow\"\n[permission.external_directory]\n\"~/x/*\" = \"allow\"\n";
        let rule = |p: &str, pat: &str| Rule::new(p, pat, Allow, "f", 1);
        assert_eq!(line_of(text, &rule("bash", "rm *"), "/h"), Some(4));
        assert_eq!(line_of(text, &rule("edit", "*"), "/h"), Some(2));
        assert_eq!(
            line_of(text, &rule("external_directory", "/h/x/*"), "/h"),
            Some(6)
        );
    }
}
