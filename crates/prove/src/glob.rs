//! One wildcard as an automaton: the positions of the pattern a subject read so far can be
//! at. This is the language [`runner_permission::wildcard::matches`] decides, state by
//! state, so that many patterns can be run side by side on every subject at once.

/// A set of small numbers (pattern positions), compared and hashed as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bits(Vec<u64>);

impl Bits {
    pub fn empty(len: usize) -> Bits {
        Bits(vec![0; len.div_ceil(64)])
    }

    pub fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    pub fn get(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    pub fn union_with(&mut self, other: &Bits) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Star,
    One,
    Lit(char),
}

/// A compiled wildcard: `*` any run, `?` one character, anything else itself, `\` read as
/// `/` on both sides, and a trailing `" *"` that may also match nothing.
#[derive(Debug, Clone)]
pub struct Glob {
    parts: Vec<Part>,
    /// The pattern ends in `" *"`: being just before it at the end also matches.
    short_end: bool,
}

/// `\` counts as `/` on both sides of a match.
pub fn slash(c: char) -> char {
    if c == '\\' { '/' } else { c }
}

impl Glob {
    pub fn new(pattern: &str) -> Glob {
        let parts: Vec<Part> = pattern
            .chars()
            .map(|c| match slash(c) {
                '*' => Part::Star,
                '?' => Part::One,
                c => Part::Lit(c),
            })
            .collect();
        let short_end =
            parts.len() >= 2 && parts[parts.len() - 2..] == [Part::Lit(' '), Part::Star];
        Glob { parts, short_end }
    }

    fn positions(&self) -> usize {
        self.parts.len() + 1
    }

    /// Where the empty subject leaves the pattern.
    pub fn start(&self) -> Bits {
        let mut b = Bits::empty(self.positions());
        b.set(0);
        self.close(&mut b);
        b
    }

    /// A star may match nothing: standing before it is also standing after it.
    fn close(&self, b: &mut Bits) {
        for (i, part) in self.parts.iter().enumerate() {
            if *part == Part::Star && b.get(i) {
                b.set(i + 1);
            }
        }
    }

    pub fn step(&self, from: &Bits, c: char) -> Bits {
        let c = slash(c);
        let mut out = Bits::empty(self.positions());
        for (i, part) in self.parts.iter().enumerate() {
            if !from.get(i) {
                continue;
            }
            match part {
                Part::Star => out.set(i),
                Part::One => out.set(i + 1),
                Part::Lit(l) if *l == c => out.set(i + 1),
                Part::Lit(_) => {}
            }
        }
        self.close(&mut out);
        out
    }

    pub fn step_all(&self, from: &Bits, text: &[char]) -> Bits {
        text.iter().fold(from.clone(), |b, c| self.step(&b, *c))
    }

    /// Whether a subject that left the pattern at `b` matches it.
    pub fn accepts(&self, b: &Bits) -> bool {
        let n = self.parts.len();
        b.get(n) || (self.short_end && b.get(n - 2))
    }

    /// The literal characters the pattern names (the rest of the alphabet behaves alike).
    pub fn literals(&self) -> impl Iterator<Item = char> + '_ {
        self.parts.iter().filter_map(|p| match p {
            Part::Lit(c) => Some(*c),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner_permission::wildcard::matches;

    #[test]
    fn the_automaton_decides_what_the_matcher_decides() {
        let patterns = [
            "*",
            "",
            "ls *",
            "a* *",
            "*.env.*",
            "a?b",
            "src\\*",
            "**/c",
            "git checkout *",
        ];
        let subjects = [
            "",
            "ls",
            "ls -la",
            "lsblk",
            "a",
            "a b",
            "ab",
            "a/b",
            ".env.x",
            "src/x",
            "src\\y",
            "x/c",
            "c",
            "git checkout",
            "git",
        ];
        for p in patterns {
            let g = Glob::new(p);
            for s in subjects {
                let chars: Vec<char> = s.chars().collect();
                let end = g.step_all(&g.start(), &chars);
                assert_eq!(g.accepts(&end), matches(s, p), "{s:?} / {p:?}");
            }
        }
    }
}
