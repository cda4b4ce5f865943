//! Permission rules learned from audit trails (`runner permission learn`).
//!
//! A session run with wide rules and an audit trail shows what the agent actually needed.
//! This writes the narrowest rules that would have let exactly that through: an allow for
//! each subject the trail shows allowed ([`narrow`]), under a `"*" = "deny"` that refuses
//! everything else, what the trail shows denied included ([`trail`] says which decisions
//! count as which). Replayed with these rules and `--ask deny`, the session runs the same
//! calls; a call it never made is denied.
//!
//! Nothing is trusted to be right by construction: the file is parsed back as the loader
//! reads it and every call of the trail is put to the gate's own verdict under it
//! ([`verify`]). A denied call an allow also matches gets an explicit deny after the
//! allows; what still comes out different (a denied request all of whose subjects were
//! allowed in other calls, which no rule on subjects can tell apart) is named at the top of
//! the file and returned, never silently dropped. An allowed subject the rule language
//! cannot say literally (a `*` or `?` in it, a leading `~`) gets no allow, since every
//! pattern that matches it matches more (see [`narrow`]): it is named in the file and
//! returned as [`Learned::unsayable`], and the catch-all deny refuses it. With a boundary, the prover
//! (`runner_prove`) decides on every subject that the rules stay within it before anything
//! is written.

pub mod narrow;
pub mod render;
pub mod trail;
mod verify;

use std::path::{Path, PathBuf};

use runner_permission::layers::ConfigError;
use runner_permission::rules::{Action, Rule};

pub use trail::{Call, Observed};

#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    #[error("cannot read the trail {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}: {message}; an audit trail has one OCSF JSON record a line (written with --audit FILE)", path.display())]
    Line {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error(
        "{} holds no permission decision: name a trail a session wrote with --audit FILE (or [audit] file)",
        path.display()
    )]
    NoDecisions { path: PathBuf },
    /// The rules written could not be read back: a bug here, reported as one.
    #[error("internal error: the learned rules do not load ({0}); please report it")]
    Unreadable(ConfigError),
    /// The boundary named could not be read.
    #[error("the boundary: {0}")]
    Boundary(ConfigError),
    #[error(transparent)]
    Prove(#[from] runner_prove::ProveError),
    /// Outside the boundary: each counterexample, one a line.
    #[error(
        "the learned rules reach beyond the boundary {}; nothing was written:\n{}",
        boundary.display(),
        counterexamples.join("\n")
    )]
    OutsideBoundary {
        boundary: PathBuf,
        counterexamples: Vec<String>,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The rules learned, as the file's text and as the loader reads it.
#[derive(Debug, Clone)]
pub struct Learned {
    pub text: String,
    pub rules: Vec<Rule>,
    /// Calls of the trail the rules decide otherwise than it shows (see the crate's docs).
    pub conflicts: Vec<String>,
    /// Allowed subjects left to the deny because no pattern says them literally:
    /// (permission, subject, calls).
    pub unsayable: Vec<(String, String, u64)>,
}

/// Where file subjects are taken against (the trail's worktree, or the one named), and the
/// home `~` means.
pub struct Options {
    pub worktree: PathBuf,
    pub home: String,
}

/// What name the rules are loaded under, for the rules' origin.
const ORIGIN: &str = "learned rules";

/// Learns the rules for what `observed` shows, checked through the gate.
pub fn learn(observed: &Observed, options: &Options) -> Result<Learned, LearnError> {
    let home = (!options.home.is_empty()).then(|| Path::new(&options.home));
    let mut table = narrow::allows(observed, &options.worktree, home);
    let denied = narrow::denied_subjects(observed);
    let unsayable = narrow::unsayable(observed);
    let load = |text: &str| {
        runner_permission::layers::parse_toml(text, ORIGIN, &options.home)
            .map_err(LearnError::Unreadable)
    };
    let listed: Vec<(String, String, u64)> = unsayable
        .iter()
        .flat_map(|(p, subjects)| subjects.iter().map(|(s, n)| (p.clone(), s.clone(), *n)))
        .collect();
    // An allowed call with a subject not learned is denied on purpose, not a conflict.
    let mismatches = |text: &str| -> Result<Vec<&Call>, LearnError> {
        let wrong = verify::mismatches(observed, &load(text)?, &options.worktree, home);
        Ok(wrong
            .into_iter()
            .filter(|c| {
                !(c.allowed
                    && c.subjects.iter().any(|s| {
                        unsayable
                            .get(&c.permission)
                            .is_some_and(|u| u.contains_key(s))
                    }))
            })
            .collect())
    };
    let text = render::toml(&table, &denied, &unsayable, observed, &[]);
    let wrong = mismatches(&text)?;
    if wrong.is_empty() {
        let rules = load(&text)?;
        return Ok(Learned {
            text,
            rules,
            conflicts: Vec::new(),
            unsayable: listed,
        });
    }
    // A denied call an allow matches too: its own subjects denied after the allows.
    for call in wrong.iter().filter(|c| !c.allowed) {
        let entries = table.entry(call.permission.clone()).or_default();
        for subject in &call.subjects {
            let pattern = narrow::pattern_of(subject);
            let allowed_literal = entries
                .iter()
                .any(|e| e.action == Action::Allow && e.pattern == pattern);
            if !allowed_literal
                && !entries
                    .iter()
                    .any(|e| e.pattern == pattern && e.action == Action::Deny)
            {
                entries.push(narrow::Entry {
                    pattern,
                    action: Action::Deny,
                    calls: call.calls,
                    note: Some("denied in the trails; an allow above matches it too".into()),
                });
            }
        }
    }
    let text = render::toml(&table, &denied, &unsayable, observed, &[]);
    let still = mismatches(&text)?;
    let conflicts: Vec<String> = still.iter().copied().map(verify::describe).collect();
    let text = render::toml(&table, &denied, &unsayable, observed, &conflicts);
    let rules = load(&text)?;
    Ok(Learned {
        text,
        rules,
        conflicts,
        unsayable: listed,
    })
}

/// Proves the learned rules within `boundary` (a ruleset of its own), on every subject of
/// every permission: `Ok` when they are, the counterexamples otherwise.
pub fn within(
    learned: &Learned,
    boundary_file: &Path,
    boundary: &[Rule],
    worktree: &Path,
) -> Result<(), LearnError> {
    let proof = runner_prove::prove(&learned.rules, boundary, worktree)?;
    if proof.holds() {
        return Ok(());
    }
    let shown = |action: Action, rule: Option<&Rule>| match rule {
        Some(r) => format!(
            "{action} by {} {:?} = {} ({} #{})",
            r.permission, r.pattern, r.action, r.source.origin, r.source.position
        ),
        None => format!("{action} (no rule matched)"),
    };
    let counterexamples = proof
        .counterexamples
        .iter()
        .map(|c| {
            format!(
                "  {} {:?}: the learned rules {}; the boundary: {}",
                c.permission,
                c.subject,
                shown(c.action, c.rule.as_ref()),
                shown(c.limit, c.limit_rule.as_ref())
            )
        })
        .collect();
    Err(LearnError::OutsideBoundary {
        boundary: boundary_file.to_path_buf(),
        counterexamples,
    })
}

/// Writes `text` to `path` whole or not at all: a temporary file beside it, renamed over it.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), LearnError> {
    use std::io::Write;
    let err = |source| LearnError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(err)?;
    tmp.write_all(text.as_bytes()).map_err(err)?;
    tmp.as_file().sync_all().map_err(err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests;
