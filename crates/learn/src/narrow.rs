//! The narrowest rules for what a trail shows: one allow per subject it shows allowed,
//! written so that it matches that subject and as little else as the rule language allows,
//! under one `"*" = "deny"` for everything else.
//!
//! The language has no escape: in a subject, `*` and `?` would be wildcards. `?` matches one
//! character, so each of them becomes `?`, which matches the subject and only the subjects
//! that differ from it in those places (a `*` there would match any run). For the same
//! reason a subject starting with `~` or `$HOME` (which a loader expands) starts with `?`.
//! A backslash matches `/` and the other way round; nothing narrower exists.
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

/// The narrowest pattern that matches `subject`.
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

/// An allow per allowed subject, and per other spelling of an allowed command.
pub fn allows(observed: &Observed, worktree: &Path, home: Option<&Path>) -> Table {
    let mut table = Table::new();
    for (permission, subjects) in allowed_subjects(observed) {
        let mut entries: Vec<Entry> = subjects
            .iter()
            .map(|(subject, calls)| Entry {
                pattern: pattern_of(subject),
                action: Action::Allow,
                calls: *calls,
                note: None,
            })
            .collect();
        if permission == "bash" {
            for (subject, spelling) in spellings(subjects.keys(), worktree, home) {
                let pattern = pattern_of(&spelling);
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
        table.insert(permission, entries);
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
