//! Which permission names to prove for.
//!
//! Permission names in rules are wildcards too (`mcp_*`, `*`), so "every permission" is
//! every string. What a name decides depends only on which rules' permission patterns it
//! matches (and on whether it is a file permission, whose subjects have two spellings), so
//! the names fall into finitely many classes: the states of all those patterns run side
//! by side. Every class gets one name, a well-known one where it has one.

use std::collections::{HashSet, VecDeque};

use super::glob::{Bits, Glob};

/// The permissions runner's tools ask, proved under their own names.
pub const KNOWN: [&str; 21] = [
    "bash",
    "read",
    "edit",
    "list",
    "glob",
    "grep",
    "external_directory",
    "network",
    "http",
    "webfetch",
    "websearch",
    "codesearch",
    "programs",
    "secrets",
    "remote_mcp",
    "task",
    "todowrite",
    "question",
    "skill",
    "lsp",
    "doom_loop",
];

/// The file permissions: their subjects are matched under two spellings.
pub const FILE: [&str; 3] = ["read", "edit", "list"];

/// Which of `patterns` `name` matches.
pub fn matched(patterns: &[Glob], name: &str) -> Vec<bool> {
    let chars: Vec<char> = name.chars().collect();
    patterns
        .iter()
        .map(|g| g.accepts(&g.step_all(&g.start(), &chars)))
        .collect()
}

/// One name per class of names: the well-known names, then for every other set of
/// `patterns` some name matches (and no well-known name stands for), a shortest such name
/// (not the empty one unless only it is left).
pub fn classes(patterns: &[&str]) -> Vec<String> {
    let mut globs: Vec<Glob> = patterns.iter().map(|p| Glob::new(p)).collect();
    let pattern_count = globs.len();
    // The file names as patterns of their own, so that a class never hides them.
    globs.extend(FILE.iter().map(|f| Glob::new(f)));
    let key = |b: &[bool]| -> Option<Vec<bool>> {
        (!b[pattern_count..].iter().any(|f| *f)).then(|| b[..pattern_count].to_vec())
    };
    let mut seen: HashSet<Vec<bool>> = HashSet::new();
    let mut out: Vec<String> = KNOWN.iter().map(|n| n.to_string()).collect();
    for name in KNOWN {
        if let Some(k) = key(&matched(&globs, name)) {
            seen.insert(k);
        }
    }
    let mut alphabet: Vec<char> = globs.iter().flat_map(|g| g.literals()).collect();
    alphabet.push(super::other_char(&alphabet));
    alphabet.sort();
    alphabet.dedup();
    let start: Vec<Bits> = globs.iter().map(Glob::start).collect();
    let mut visited: HashSet<Vec<Bits>> = HashSet::from([start.clone()]);
    let mut queue = VecDeque::from([(start, String::new())]);
    let mut empty_key = None;
    while let Some((state, name)) = queue.pop_front() {
        let accepted: Vec<bool> = globs
            .iter()
            .zip(&state)
            .map(|(g, b)| g.accepts(b))
            .collect();
        if let Some(k) = key(&accepted) {
            if name.is_empty() {
                empty_key = Some(k);
            } else if seen.insert(k) {
                out.push(name.clone());
            }
        }
        for c in &alphabet {
            let next: Vec<Bits> = globs
                .iter()
                .zip(&state)
                .map(|(g, b)| g.step(b, *c))
                .collect();
            if visited.insert(next.clone()) {
                queue.push_back((next, format!("{name}{c}")));
            }
        }
    }
    if let Some(k) = empty_key
        && !seen.contains(&k)
    {
        out.push(String::new());
    }
    out
}
