//! The breadth-first search over the product of every pattern's automaton.
//!
//! A state holds, for each pattern in play, where the subject read so far leaves it: under
//! the subject's own spelling, and under its second spelling for each place the speller
//! may stand ([`super::spelling`]). From a state both sides' decisions on the subject that
//! ends there follow, as the gate computes them; the first state where the loose side
//! decides more loosely gives a shortest counterexample.

use std::collections::{BTreeMap, HashMap, VecDeque};

use runner_permission::rules::{Action, Layer, Rule, strictness};

use super::glob::{Bits, Glob};
use super::spelling::{At, Speller};
use super::{ProveError, Side};

/// The most states one permission's search may visit.
const LIMIT: usize = 400_000;

/// A rule as the search sees it.
struct RuleInfo {
    pattern: usize,
    action: Action,
    /// The boundary file it belongs to (its run), if any.
    run: Option<usize>,
}

struct SideInfo {
    rules: Vec<RuleInfo>,
    runs: usize,
    asks_denied: bool,
}

/// Two sides, their patterns compiled once.
pub struct Problem {
    loose: SideInfo,
    limit: SideInfo,
    globs: Vec<Glob>,
    speller: Speller,
    alphabet: Vec<char>,
}

/// A subject on which the loose side decides `loose` and the limit `limit`.
#[derive(Debug, Clone)]
pub struct Found {
    pub subject: String,
    pub loose: Action,
    pub limit: Action,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PatternState {
    own: Bits,
    /// Second-spelling positions by where the speller stands (none for other
    /// permissions).
    spelled: Vec<(At, Bits)>,
}

impl Problem {
    pub fn new(loose: Side, limit: Side, worktree: &str) -> Problem {
        let mut patterns: Vec<String> = Vec::new();
        let mut index = |p: &str| match patterns.iter().position(|q| q == p) {
            Some(i) => i,
            None => {
                patterns.push(p.to_string());
                patterns.len() - 1
            }
        };
        let loose = side_info(loose, &mut index);
        let limit = side_info(limit, &mut index);
        let globs: Vec<Glob> = patterns.iter().map(|p| Glob::new(p)).collect();
        let speller = Speller::new(worktree);
        let mut named: Vec<char> = globs.iter().flat_map(|g| g.literals()).collect();
        named.extend(speller.literals());
        named.extend(['/', '\\', '.', '*']);
        named.sort();
        named.dedup();
        let mut alphabet = vec![super::other_char(&named)];
        alphabet.extend(named);
        Problem {
            loose,
            limit,
            globs,
            speller,
            alphabet,
        }
    }

    /// A shortest subject of `permission` (whose rules are those `active` marks, the loose
    /// side's first) on which the loose side decides more loosely than the limit.
    pub fn counterexample(
        &mut self,
        permission: &str,
        active: &[bool],
        file: bool,
    ) -> Result<Option<Found>, ProveError> {
        let (loose_active, limit_active) = active.split_at(self.loose.rules.len());
        let in_play = self.in_play(active);
        let start = self.start(&in_play, file);
        let mut states = vec![start.clone()];
        let mut parent: Vec<Option<(usize, char)>> = vec![None];
        let mut seen = HashMap::from([(start, 0usize)]);
        let mut queue = VecDeque::from([0usize]);
        while let Some(id) = queue.pop_front() {
            let matched = self.matched(&in_play, &states[id]);
            let loose = decide(&self.loose, loose_active, &matched);
            let limit = decide(&self.limit, limit_active, &matched);
            if strictness(loose) < strictness(limit) {
                return Ok(Some(Found {
                    subject: spell_out(&parent, id),
                    loose,
                    limit,
                }));
            }
            for c in self.alphabet.clone() {
                let next = self.step(&in_play, &states[id], c);
                if seen.contains_key(&next) {
                    continue;
                }
                if states.len() >= LIMIT {
                    return Err(ProveError::TooLarge {
                        permission: permission.to_string(),
                        limit: LIMIT,
                    });
                }
                seen.insert(next.clone(), states.len());
                queue.push_back(states.len());
                states.push(next);
                parent.push(Some((id, c)));
            }
        }
        Ok(None)
    }

    /// Both sides' decisions, by the model alone, on every subject over `letters` up to
    /// `max` characters, each told to `visit` (the property test holds them to the gate).
    #[cfg(test)]
    pub fn walk(
        &self,
        active: &[bool],
        file: bool,
        letters: &[char],
        max: usize,
        visit: &mut dyn FnMut(&str, (Action, Action)),
    ) {
        let in_play = self.in_play(active);
        let mut todo = vec![(String::new(), self.start(&in_play, file))];
        while let Some((subject, state)) = todo.pop() {
            let (loose_active, limit_active) = active.split_at(self.loose.rules.len());
            let matched = self.matched(&in_play, &state);
            visit(
                &subject,
                (
                    decide(&self.loose, loose_active, &matched),
                    decide(&self.limit, limit_active, &matched),
                ),
            );
            if subject.chars().count() == max {
                continue;
            }
            for c in letters {
                // A character no pattern names behaves as the one that stands for them all.
                let as_named = if self.alphabet.contains(c) {
                    *c
                } else {
                    self.alphabet[0]
                };
                todo.push((
                    format!("{subject}{c}"),
                    self.step(&in_play, &state, as_named),
                ));
            }
        }
    }

    /// The patterns of the rules `active` marks (the loose side's first), each once.
    fn in_play(&self, active: &[bool]) -> Vec<usize> {
        let rules = self.loose.rules.iter().chain(&self.limit.rules);
        let mut in_play: Vec<usize> = Vec::new();
        for (r, _) in rules.zip(active).filter(|(_, on)| **on) {
            if !in_play.contains(&r.pattern) {
                in_play.push(r.pattern);
            }
        }
        in_play
    }

    /// Where the empty subject leaves each pattern in play.
    fn start(&self, in_play: &[usize], file: bool) -> Vec<PatternState> {
        in_play
            .iter()
            .map(|p| {
                let g = &self.globs[*p];
                PatternState {
                    own: g.start(),
                    spelled: if file {
                        vec![(At::Start, g.start())]
                    } else {
                        Vec::new()
                    },
                }
            })
            .collect()
    }

    fn step(&self, in_play: &[usize], state: &[PatternState], c: char) -> Vec<PatternState> {
        in_play
            .iter()
            .zip(state)
            .map(|(p, s)| {
                let g = &self.globs[*p];
                let mut spelled: BTreeMap<At, Bits> = BTreeMap::new();
                for (at, bits) in &s.spelled {
                    for (to, out) in self.speller.step(*at, c) {
                        let moved = g.step_all(bits, &out);
                        if moved.is_empty() {
                            continue;
                        }
                        match spelled.get_mut(&to) {
                            Some(b) => b.union_with(&moved),
                            None => {
                                spelled.insert(to, moved);
                            }
                        }
                    }
                }
                PatternState {
                    own: g.step(&s.own, c),
                    spelled: spelled.into_iter().collect(),
                }
            })
            .collect()
    }

    /// Which patterns (by index) a subject ending in `state` matches, under either
    /// spelling.
    fn matched(&self, in_play: &[usize], state: &[PatternState]) -> Vec<bool> {
        let mut out = vec![false; self.globs.len()];
        for (p, s) in in_play.iter().zip(state) {
            let g = &self.globs[*p];
            out[*p] = g.accepts(&s.own)
                || s.spelled.iter().any(|(at, bits)| {
                    self.speller
                        .end(*at)
                        .is_some_and(|rest| g.accepts(&g.step_all(bits, &rest)))
                });
        }
        out
    }
}

fn side_info(side: Side, index: &mut impl FnMut(&str) -> usize) -> SideInfo {
    let mut rules = Vec::new();
    let mut runs = 0;
    let mut previous: Option<&Rule> = None;
    for r in side.rules {
        let run = (r.source.layer == Layer::Boundary).then(|| {
            let continues = previous.is_some_and(|p| {
                p.source.layer == Layer::Boundary && p.source.origin == r.source.origin
            });
            if !continues {
                runs += 1;
            }
            runs - 1
        });
        previous = Some(r);
        rules.push(RuleInfo {
            pattern: index(&r.pattern),
            action: r.action,
            run,
        });
    }
    SideInfo {
        rules,
        runs,
        asks_denied: side.asks_denied,
    }
}

/// The side's decision for a subject matching `matched`, as `rules::evaluate` makes it:
/// the stack's last match (ask without one), held back by each boundary file's.
fn decide(side: &SideInfo, active: &[bool], matched: &[bool]) -> Action {
    let last = |run: Option<usize>| {
        side.rules
            .iter()
            .zip(active)
            .rev()
            .find(|(r, on)| **on && r.run == run && matched[r.pattern])
            .map_or(Action::Ask, |(r, _)| r.action)
    };
    let mut action = last(None);
    for run in 0..side.runs {
        let capped = last(Some(run));
        if strictness(capped) > strictness(action) {
            action = capped;
        }
    }
    match action {
        Action::Ask if side.asks_denied => Action::Deny,
        a => a,
    }
}

fn spell_out(parent: &[Option<(usize, char)>], mut id: usize) -> String {
    let mut chars = Vec::new();
    while let Some((from, c)) = parent[id] {
        chars.push(c);
        id = from;
    }
    chars.iter().rev().collect()
}
