//! Proofs about permission rules, decided exactly rather than by trying examples.
//!
//! A rule's pattern is a wildcard, and a wildcard's language is regular; so is the set of
//! subjects a ruleset allows, since last-match-wins is a boolean combination of those
//! languages. Two rulesets can therefore be compared on *every* subject by running their
//! patterns' automata side by side ([`glob`]) and searching the product breadth first: the
//! first subject found where one side decides more loosely than the other is a shortest
//! counterexample, and a search that ends without one is a proof.
//!
//! What the gate does beyond matching is modelled too: a file subject (`read`, `edit`,
//! `list`) also matches under its second spelling, which depends on the worktree
//! ([`spelling`]); permission names are wildcards, so every class of names is proved
//! ([`names`]); a boundary's rules cap the stack ([`runner_permission::rules::evaluate`]).
//! Every counterexample is checked against the gate's own evaluation before it is reported,
//! so a disagreement between this model and the gate is an error, never a wrong answer.
//!
//! What is not proved: how the bash analyser splits a command into subjects, and whether
//! the wall enforces what the rules decide. Both are tested elsewhere; here, a subject is
//! any string.

mod glob;
mod names;
mod search;
mod spelling;

use std::path::Path;
use std::sync::Arc;

use runner_permission::PermissionRequest;
use runner_permission::gate::{PolicyAsker, RuleGate};
use runner_permission::rules::{Action, Layer, Rule};

pub use names::KNOWN;

/// A ruleset as one side of a comparison.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    /// The merged rules in precedence order, a boundary's (layer [`Layer::Boundary`]) last.
    pub rules: &'a [Rule],
    /// The profile answers every ask with deny (`ask = "deny"`): an ask counts as a deny.
    pub asks_denied: bool,
}

impl<'a> Side<'a> {
    pub fn new(rules: &'a [Rule]) -> Self {
        Side {
            rules,
            asks_denied: false,
        }
    }
}

/// One subject on which the rules decide more loosely than the limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Counterexample {
    pub permission: String,
    pub subject: String,
    /// What the rules decide (allow or ask), and the rule that decides it (`None`: no rule
    /// matched, so ask).
    pub action: Action,
    pub rule: Option<Rule>,
    /// What the limit (the boundary, or the old rules of a diff) decides, and its rule.
    pub limit: Action,
    pub limit_rule: Option<Rule>,
}

/// The answer: it holds when there is no counterexample. At most one per permission name
/// (a shortest one).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Proof {
    pub counterexamples: Vec<Counterexample>,
}

impl Proof {
    pub fn holds(&self) -> bool {
        self.counterexamples.is_empty()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProveError {
    /// The search grew past its bound (patterns built to blow the product up).
    #[error(
        "the rules for permission {permission:?} are too intricate to prove (more than {limit} states); simplify the patterns"
    )]
    TooLarge { permission: String, limit: usize },
    /// The model and the gate disagree on a subject: a bug in the prover, reported rather
    /// than turned into a wrong answer.
    #[error(
        "internal error: the prover's model and the gate disagree on {permission} {subject:?} (model {model}, gate {gate}); please report it"
    )]
    Disagrees {
        permission: String,
        subject: String,
        model: String,
        gate: String,
    },
}

/// Proves that `merged` never decides more loosely than `boundary` for any permission and
/// subject: whatever `merged` allows `boundary` allows, whatever it asks `boundary` allows or
/// asks. `boundary` is read as a ruleset of its own (last match wins, no match asks),
/// whatever layer its rules carry. `worktree` is the absolute worktree the file rules'
/// spellings are taken against.
pub fn prove(merged: &[Rule], boundary: &[Rule], worktree: &Path) -> Result<Proof, ProveError> {
    prove_within(Side::new(merged), boundary, worktree)
}

/// [`prove`] for merged rules under a profile that may answer asks with deny.
pub fn prove_within(merged: Side, boundary: &[Rule], worktree: &Path) -> Result<Proof, ProveError> {
    let plain = as_plain(boundary);
    compare(merged, Side::new(&plain), worktree)
}

/// The reach `new` adds over `old`: every permission with a subject `new` decides more
/// loosely than `old` does, with a shortest such subject. Empty when `new` adds nothing.
pub fn diff(old: &[Rule], new: &[Rule], worktree: &Path) -> Result<Proof, ProveError> {
    compare(Side::new(new), Side::new(old), worktree)
}

/// The general form: where `loose` decides more loosely than `limit`.
pub fn compare(loose: Side, limit: Side, worktree: &Path) -> Result<Proof, ProveError> {
    let permission_patterns: Vec<&str> = loose
        .rules
        .iter()
        .chain(limit.rules)
        .map(|r| r.permission.as_str())
        .collect();
    let name_globs: Vec<glob::Glob> = permission_patterns
        .iter()
        .map(|p| glob::Glob::new(p))
        .collect();
    let worktree_text = worktree.to_string_lossy();
    let mut problem = search::Problem::new(loose, limit, &worktree_text);
    let mut found = Vec::new();
    for name in names::classes(&permission_patterns) {
        let active = names::matched(&name_globs, &name);
        let file = names::FILE.contains(&name.as_str());
        if let Some(subject) = problem.counterexample(&name, &active, file)? {
            found.push(confirm(loose, limit, worktree, &name, subject)?);
        }
    }
    Ok(Proof {
        counterexamples: found,
    })
}

/// `rules` as one plain ruleset: a boundary file read on its own.
fn as_plain(rules: &[Rule]) -> Vec<Rule> {
    rules
        .iter()
        .cloned()
        .map(|r| r.in_layer(Layer::Other))
        .collect()
}

/// The gate's own verdict on the counterexample, which must be the model's.
fn confirm(
    loose: Side,
    limit: Side,
    worktree: &Path,
    permission: &str,
    found: search::Found,
) -> Result<Counterexample, ProveError> {
    let judge = |side: Side| {
        let gate = RuleGate::new(
            worktree,
            side.rules.to_vec(),
            Arc::new(PolicyAsker::allow()),
        );
        let request = PermissionRequest::new(permission, vec![found.subject.clone()], Vec::new());
        let verdict = gate.verdict(&request);
        let action = match verdict.action {
            Action::Ask if side.asks_denied => Action::Deny,
            a => a,
        };
        (action, verdict.rule)
    };
    let (action, rule) = judge(loose);
    let (limit_action, limit_rule) = judge(limit);
    if (action, limit_action) != (found.loose, found.limit) {
        return Err(ProveError::Disagrees {
            permission: permission.to_string(),
            subject: found.subject,
            model: format!("{} over {}", found.loose, found.limit),
            gate: format!("{action} over {limit_action}"),
        });
    }
    Ok(Counterexample {
        permission: permission.to_string(),
        subject: found.subject,
        action,
        rule,
        limit: limit_action,
        limit_rule,
    })
}

/// A character no pattern names: it stands for every such character.
fn other_char(named: &[char]) -> char {
    ['x', 'y', 'z', 'q', 'k', 'j', 'v', 'w', '0', '1', '2', 'é']
        .into_iter()
        .chain(('a'..='z').chain('A'..='Z'))
        .chain((0x100u32..).filter_map(char::from_u32))
        .find(|c| !named.contains(c) && !matches!(c, '/' | '\\' | '.' | '*'))
        .unwrap_or('\u{10FFFF}')
}

#[cfg(test)]
mod tests;
