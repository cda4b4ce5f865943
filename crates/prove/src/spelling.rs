//! A file subject's second spelling, as a machine that reads the subject and writes it.
//!
//! The gate matches a `read`, `edit` or `list` subject under two spellings (see
//! `RuleGate::spellings`): a relative path also as the worktree joined with it (a leading
//! `./` taken off first; a path that is absolute after it replaces the worktree, as
//! `Path::join` does), and an absolute path inside the worktree also as the part below the
//! worktree (`.` when nothing is left). "Inside" is `Path::strip_prefix`'s: component by
//! component, with empty and `.` components skipped, and what is left trimmed of empty and
//! `.` components at both ends (not in the middle). The subject `*` has no second spelling.
//!
//! The machine here is nondeterministic and writes at most a fixed string per character
//! read; a state of it beside a wildcard's positions ([`super::glob`]) says which subjects
//! have a second spelling that matches. Guesses that turn out wrong die, so the one path
//! that survives to the end is the real spelling.

/// Where the reading of a subject stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum At {
    Start,
    /// Read `*`: the subject `*` itself has no second spelling.
    Star,
    /// Read `.`, not the start of a `./` prefix.
    Dot,
    /// Read `.`, guessing a `./` prefix.
    DotPrefix,
    /// Read `./`.
    Stripped,
    /// Copying the rest of a relative subject.
    Copy,
    /// `i` components of the worktree matched, at the start of the next.
    Between(usize),
    /// A `.` component between them.
    BetweenDot(usize),
    /// `j` characters of the worktree's component `i` matched.
    Component(usize, usize),
    /// All of the worktree matched and a `/` read: skipping empty and `.` components.
    Lead,
    LeadDot,
    /// The part below the worktree starts with `.` (and is not `.` or `./…`).
    MidDot,
    /// In the part below: the last character is not `/`, nor the last two `/.`.
    Mid,
    MidSlash,
    MidSlashDot,
    /// Trailing empty and `.` components.
    Trail,
    TrailDot,
}

/// The second spelling's writer for one worktree.
#[derive(Debug, Clone)]
pub struct Speller {
    /// The worktree with one `/` after it (`Path::join`'s separator).
    joined: Vec<char>,
    components: Vec<Vec<char>>,
}

impl Speller {
    pub fn new(worktree: &str) -> Speller {
        let mut joined: Vec<char> = worktree.chars().collect();
        if joined.last() != Some(&'/') {
            joined.push('/');
        }
        let components = worktree
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(|c| c.chars().collect())
            .collect();
        Speller { joined, components }
    }

    /// The characters of the worktree, which belong in the alphabet.
    pub fn literals(&self) -> impl Iterator<Item = char> + '_ {
        self.joined.iter().copied()
    }

    fn with_joined(&self, tail: &[char]) -> Vec<char> {
        let mut out = self.joined.clone();
        out.extend_from_slice(tail);
        out
    }

    /// After the worktree's component `i` is whole: the next state on `/`.
    fn after_component(&self, i: usize) -> At {
        if i + 1 == self.components.len() {
            At::Lead
        } else {
            At::Between(i + 1)
        }
    }

    /// The moves on reading `c` at `at`, each with what it writes.
    pub fn step(&self, at: At, c: char) -> Vec<(At, Vec<char>)> {
        use At::*;
        let one = |to: At, out: Vec<char>| vec![(to, out)];
        match (at, c) {
            (Start, '/') if self.components.is_empty() => one(Lead, vec![]),
            (Start, '/') => one(Between(0), vec![]),
            (Start, '.') => vec![(Dot, self.with_joined(&['.'])), (DotPrefix, vec![])],
            (Start, '*') => one(Star, self.with_joined(&['*'])),
            (Start, c) => one(Copy, self.with_joined(&[c])),
            (Star, c) | (Copy, c) => one(Copy, vec![c]),
            (Dot, '/') => vec![],
            (Dot, c) => one(Copy, vec![c]),
            (DotPrefix, '/') => one(Stripped, vec![]),
            (DotPrefix, _) => vec![],
            // `./` then `/…`: an absolute path, which the join takes as it is.
            (Stripped, '/') => one(Copy, vec!['/']),
            (Stripped, c) => one(Copy, self.with_joined(&[c])),
            (Between(i), c) => {
                let mut out = Vec::new();
                if c == '/' {
                    out.push((Between(i), vec![]));
                }
                if c == '.' {
                    out.push((BetweenDot(i), vec![]));
                }
                if self.components[i].first() == Some(&c) {
                    out.push((Component(i, 1), vec![]));
                }
                out
            }
            (BetweenDot(i), '/') => one(Between(i), vec![]),
            (BetweenDot(_), _) => vec![],
            (Component(i, j), c) => {
                let name = &self.components[i];
                if j < name.len() {
                    if name[j] == c {
                        one(Component(i, j + 1), vec![])
                    } else {
                        vec![]
                    }
                } else if c == '/' {
                    one(self.after_component(i), vec![])
                } else {
                    vec![]
                }
            }
            (Lead, '/') | (LeadDot, '/') => one(Lead, vec![]),
            (Lead, '.') => vec![(LeadDot, vec![]), (MidDot, vec!['.'])],
            (Lead, c) => one(Mid, vec![c]),
            (LeadDot, _) => vec![],
            (MidDot, '/') => vec![],
            (MidDot, c) => one(Mid, vec![c]),
            (Mid, '/') => vec![(MidSlash, vec!['/']), (Trail, vec![])],
            (Mid, c) => one(Mid, vec![c]),
            (MidSlash, '/') | (MidSlashDot, '/') => one(MidSlash, vec!['/']),
            (MidSlash, '.') => one(MidSlashDot, vec!['.']),
            (MidSlash, c) | (MidSlashDot, c) => one(Mid, vec![c]),
            (Trail, '/') | (TrailDot, '/') => one(Trail, vec![]),
            (Trail, '.') => one(TrailDot, vec![]),
            (Trail, _) | (TrailDot, _) => vec![],
        }
    }

    /// What is still to write when the subject ends at `at`, or `None` when a subject
    /// ending there has no second spelling (or the guesses that led there were wrong).
    pub fn end(&self, at: At) -> Option<Vec<char>> {
        use At::*;
        match at {
            Start | Stripped => Some(self.joined.clone()),
            Dot | Copy | Mid | Trail | TrailDot => Some(vec![]),
            Lead | LeadDot => Some(vec!['.']),
            Component(i, j) if i + 1 == self.components.len() && j == self.components[i].len() => {
                Some(vec!['.'])
            }
            Star | DotPrefix | Between(_) | BetweenDot(_) | Component(..) | MidDot | MidSlash
            | MidSlashDot => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every second spelling the machine can write for `subject`.
    fn spell(s: &Speller, subject: &str) -> Vec<String> {
        let mut now: Vec<(At, Vec<char>)> = vec![(At::Start, vec![])];
        for c in subject.chars() {
            now = now
                .into_iter()
                .flat_map(|(at, written)| {
                    s.step(at, c).into_iter().map(move |(to, out)| {
                        let mut w = written.clone();
                        w.extend(out);
                        (to, w)
                    })
                })
                .collect();
        }
        let mut out: Vec<String> = now
            .into_iter()
            .filter_map(|(at, mut w)| {
                w.extend(s.end(at)?);
                Some(w.into_iter().collect())
            })
            .collect();
        out.sort();
        out
    }

    /// What the gate does (`RuleGate::spellings`), written out again with `Path`.
    fn by_path(worktree: &str, subject: &str) -> Vec<String> {
        use std::path::Path;
        if subject == "*" {
            return vec![];
        }
        let path = Path::new(subject);
        if path.is_absolute() {
            match path.strip_prefix(worktree) {
                Ok(rel) => {
                    let rel = rel.to_string_lossy().to_string();
                    vec![if rel.is_empty() { ".".into() } else { rel }]
                }
                Err(_) => vec![],
            }
        } else {
            let rel = subject.strip_prefix("./").unwrap_or(subject);
            vec![Path::new(worktree).join(rel).to_string_lossy().into_owned()]
        }
    }

    #[test]
    fn the_machine_writes_what_path_would() {
        let subjects = [
            "",
            ".",
            "./",
            ".//x",
            "./a",
            "a",
            "*",
            "**",
            "/",
            "/w",
            "/w/",
            "/w/.",
            "/w/a",
            "/w/./a",
            "//w//a//",
            "/./w/a/./",
            "/w/a/./b",
            "/w/a/.",
            "/w/.a",
            "/w/..",
            "/w/a/..",
            "/wx/a",
            "/v/a",
            "/w/a//b/",
            "/w/a/.x",
            "\\w\\a",
            "../x",
            "/w/./",
        ];
        for worktree in ["/w", "/", "/w/x."] {
            let s = Speller::new(worktree);
            for subject in subjects {
                assert_eq!(
                    spell(&s, subject),
                    by_path(worktree, subject),
                    "{worktree} {subject:?}"
                );
            }
        }
    }
}
