//! The narrowest rules for what a trail shows: one allow per subject it shows allowed,
//! written so that it matches that subject and as little else as the rule language allows,
//! under one `"*" = "deny"` for everything else.
//!
//! The language has no escape: in a pattern, `*` and `?` are always wildcards, and a
//! leading `~` or `$HOME` is expanded by the loader. A subject holding one of them cannot
//! be said literally, and any pattern that matches it matches more: `rm -rf ?` (for the
//! `rm -rf *` a session ran in a scratch folder) would also allow `rm -rf /` and
//! `rm -rf ~`. Such a subject is therefore not learned ([`literal`] gives `None`): the file
//! names it in a comment, the catch-all deny refuses it, and whoever needs it writes the
//! rule they mean by hand. A backslash matches `/` and the other way round; nothing
//! narrower exists, and neither widens a path beyond its one spelling.
//!
//! The gate also holds a `bash` pattern's other spellings (`/bin/rm x` is also `rm x`) to
//! the deny rules; under a `"*" = "deny"` every spelling not allowed would deny the call, so
//! each allowed command's spellings are allowed too (the same command, written otherwise).

use std::collections::BTreeMap;
use std::path::Path;

use runner_permission::bash_scan::{self, ScanContext};
use runner_permission::rules::Action;

use crate::trail::Observed;

/// One rule to write, with what it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub pattern: String,
    pub action: Action,
    /// The calls of the trail it decides.
    pub calls: u64,
    /// Why it is there, when not for the calls themselves.
    pub note: Option<String>,
}

/// Each permission's rules, in the order they are written (later wins).
pub type Table = BTreeMap<String, Vec<Entry>>;

/// The pattern that matches `subject` and nothing else, when the language can say it.
pub fn literal(subject: &str) -> Option<String> {
    let expanded = runner_permission::wildcard::expand_home(subject, "");
    (!subject.contains(['*', '?']) && expanded == subject).then(|| subject.to_string())
}

/// A pattern that matches `subject` and as little else as the language allows (each `*`
/// one character, a leading `~` or `$HOME` one character): only for denies, where matching
/// more is the safe side.
pub fn pattern_of(subject: &str) -> String {
    let mut out: String = subject
        .chars()
        .map(|c| if c == '*' { '?' } else { c })
        .collect();
    if out.starts_with('~') || out.starts_with("$HOME") {
        out.replace_range(..1, "?");
    }
    out
}

/// The subjects each permission shows allowed, with the calls that asked for each.
pub fn allowed_subjects(observed: &Observed) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for call in observed.calls.iter().filter(|c| c.allowed) {
        let subjects = out.entry(call.permission.clone()).or_default();
        for subject in &call.subjects {
            *subjects.entry(subject.clone()).or_default() += call.calls;
        }
    }
    out
}

/// The subjects each permission shows only denied (never allowed), with their calls.
pub fn denied_subjects(observed: &Observed) -> BTreeMap<String, BTreeMap<String, u64>> {
    let allowed = allowed_subjects(observed);
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for call in observed.calls.iter().filter(|c| !c.allowed) {
        for subject in &call.subjects {
            let seen_allowed = allowed
                .get(&call.permission)
                .is_some_and(|s| s.contains_key(subject));
            if !seen_allowed {
                let subjects = out.entry(call.permission.clone()).or_default();
                *subjects.entry(subject.clone()).or_default() += call.calls;
            }
        }
    }
    out
}

/// The subjects each permission shows allowed that the language cannot say literally
/// (see the module's docs), with their calls: left to the catch-all deny.
pub fn unsayable(observed: &Observed) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut out = allowed_subjects(observed);
    for subjects in out.values_mut() {
        subjects.retain(|subject, _| literal(subject).is_none());
    }
    out.retain(|_, subjects| !subjects.is_empty());
    out
}

/// An allow per allowed subject, and per other spelling of an allowed command, of those
/// the language can say literally.
pub fn allows(observed: &Observed, worktree: &Path, home: Option<&Path>) -> Table {
    let mut table = Table::new();
    for (permission, subjects) in allowed_subjects(observed) {
        let mut entries: Vec<Entry> = subjects
            .iter()
            .filter_map(|(subject, calls)| {
                Some(Entry {
                    pattern: literal(subject)?,
                    action: Action::Allow,
                    calls: *calls,
                    note: None,
                })
            })
            .collect();
        if permission == "bash" {
            let said = subjects.keys().filter(|s| literal(s).is_some());
            for (subject, spelling) in spellings(said, worktree, home) {
                let Some(pattern) = literal(&spelling) else {
                    continue;
                };
                if !entries.iter().any(|e| e.pattern == pattern) {
                    entries.push(Entry {
                        pattern,
                        action: Action::Allow,
                        calls: 0,
                        note: Some(format!("another spelling of {subject:?}")),
                    });
                }
            }
        }
        if !entries.is_empty() {
            table.insert(permission, entries);
        }
    }
    table
}

/// The other spellings the gate holds each command to (see the module's docs).
pub fn spellings<'a>(
    commands: impl Iterator<Item = &'a String>,
    worktree: &Path,
    home: Option<&Path>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for command in commands {
        for spelling in deny_spellings(command, worktree, home) {
            out.push((command.clone(), spelling));
        }
    }
    out
}

/// What the bash analyser gives `command` as its other spellings, as the gate gets them.
pub fn deny_spellings(command: &str, worktree: &Path, home: Option<&Path>) -> Vec<String> {
    let scan = bash_scan::scan(
        command,
        &ScanContext {
            cwd: worktree,
            worktree,
            home,
        },
    );
    scan.deny_spellings
        .into_iter()
        .filter(|(pattern, _)| pattern == command)
        .flat_map(|(_, others)| others)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner_permission::wildcard::matches;

    #[test]
    fn a_subject_with_a_wildcard_or_a_home_has_no_literal_pattern() {
        for subject in [
            "rm -rf *", "ls ?.rs", "*", "~", "~/notes", "$HOME/x", "$HOMEx",
        ] {
            assert_eq!(literal(subject), None, "{subject:?}");
        }
        for subject in ["git status", "rm -rf build", "a~b", "~notes", "x/$HOME"] {
            assert_eq!(literal(subject).as_deref(), Some(subject), "{subject:?}");
        }
    }

    #[test]
    fn a_pattern_matches_its_subject_and_little_else() {
        for (subject, also, never) in [
            ("git status", None, "git status -s"),
            ("ls *.rs", Some("ls a.rs"), "ls ab.rs"),
            ("rm -rf *", Some("rm -rf a"), "rm -rf ab"),
            ("~/notes", Some("x/notes"), "/home/u/notes"),
            ("what?", Some("whatx"), "what"),
        ] {
            let p = pattern_of(subject);
            assert!(matches(subject, &p), "{subject:?} by {p:?}");
            if let Some(also) = also {
                assert!(matches(also, &p), "{also:?} by {p:?}");
            }
            assert!(!matches(never, &p), "{never:?} by {p:?}");
        }
        // `"cmd *"` would also match `cmd`: its `?` form does not.
        assert!(!matches("rm -rf", &pattern_of("rm -rf *")));
    }
}
