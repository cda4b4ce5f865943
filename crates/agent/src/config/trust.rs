//! Trusting a repository's config to loosen a built-in default.
//!
//! A checkout's `.runner/config.toml` can never loosen the profile's or the user's rules
//! (see `permission::project`). It may loosen one of the built-in defaults (say, allow an
//! outside directory that would otherwise ask) only when the person running runner trusts
//! that config: granted with `--trust-project`, or by answering `y` on a terminal. The
//! answer is remembered for that worktree and that exact text, so the same config is
//! asked about once, and any change to it asks again: trust is in what was read, not in
//! the repository's name.
//!
//! The record lives in `$XDG_DATA_HOME/runner/trusted-projects.jsonl`, one
//! `{"repo": canonical path, "sha256": hex of the file's bytes}` per line.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use runner_display::escape;
use runner_permission::layers::ProjectReview;

/// How this process settles trust when a project config loosens a default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TrustMode {
    /// A remembered yes, else the question on a terminal, else no.
    #[default]
    Ask,
    /// A remembered yes, else no: nothing may stop to ask (evaluations, private worktrees).
    NoQuestion,
    /// `--trust-project`: yes, and remembered.
    Grant,
}

/// Where trusted configs are recorded; `None` when there is no data directory.
pub fn store_path() -> Option<PathBuf> {
    runner_dirs::data_home().map(|d| d.join("runner").join("trusted-projects.jsonl"))
}

/// Hex SHA-256 of a config's bytes.
pub fn digest(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The worktree as it is recorded: its canonical path, so that two spellings of one
/// checkout share their trust.
fn repo_key(worktree: &Path) -> String {
    std::fs::canonicalize(worktree)
        .unwrap_or_else(|_| worktree.to_path_buf())
        .to_string_lossy()
        .into_owned()
}

/// Whether `store` records this worktree with this digest.
pub fn remembered(store: &Path, repo: &str, sha256: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(store) else {
        return false;
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .any(|v| v["repo"] == repo && v["sha256"] == sha256)
}

/// Records this worktree with this digest.
pub fn remember(store: &Path, repo: &str, sha256: &str) -> std::io::Result<()> {
    if let Some(dir) = store.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let line = serde_json::json!({ "repo": repo, "sha256": sha256 });
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(store)?;
    writeln!(f, "{line}")
}

/// Answers already given in this process, by (repo, digest): a session may build its rules
/// more than once, and a question must not come twice.
static DECIDED: Mutex<Vec<(String, String, bool)>> = Mutex::new(Vec::new());

/// Settles trust for one review, per `mode`. Problems recording a yes are said on stderr
/// (the answer still holds for this run).
pub fn decide(review: &ProjectReview, mode: TrustMode) -> bool {
    let repo = repo_key(review.worktree);
    let sha = digest(review.text);
    let mut decided = DECIDED.lock().unwrap_or_else(|p| p.into_inner());
    if mode != TrustMode::Grant
        && let Some((_, _, yes)) = decided.iter().find(|(r, s, _)| *r == repo && *s == sha)
    {
        return *yes;
    }
    let store = store_path();
    let known = store.as_deref().is_some_and(|s| remembered(s, &repo, &sha));
    let yes = known
        || match mode {
            TrustMode::Grant => true,
            TrustMode::NoQuestion => false,
            TrustMode::Ask => {
                std::io::stdin().is_terminal()
                    && std::io::stderr().is_terminal()
                    && runner_permission::terminal::confirm(&question(review))
            }
        };
    if yes && !known {
        match &store {
            Some(store) => {
                if let Err(e) = remember(store, &repo, &sha) {
                    eprintln!(
                        "runner: could not record the trust in {}: {e}; it holds for this run only",
                        store.display()
                    );
                }
            }
            None => eprintln!(
                "runner: neither XDG_DATA_HOME nor HOME is set, so the trust in {} holds for this run only",
                escape(&review.path.display().to_string())
            ),
        }
    }
    decided.push((repo, sha, yes));
    yes
}

/// The question: each loosened rule with its file and line, and what it loosens. The
/// rules are the repository's text, so they are escaped.
pub fn question(review: &ProjectReview) -> String {
    let mut out = format!(
        "runner: {} loosens built-in defaults:\n",
        escape(&review.path.display().to_string())
    );
    for l in review.loosened {
        out.push_str(&format!(
            "  {}\n    instead of {}\n",
            escape(&l.describe()),
            escape(&l.describe_over())
        ));
    }
    out.push_str("Trust this config as it is now? It is asked again when the file changes. [y/N] ");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner_permission::project::Loosening;
    use runner_permission::rules::{Action, Rule};

    #[test]
    fn the_record_is_by_repo_and_content() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("sub/trusted-projects.jsonl");
        let a = digest("[permission]\n");
        assert!(!remembered(&store, "/r", &a));
        remember(&store, "/r", &a).unwrap();
        assert!(remembered(&store, "/r", &a));
        assert!(!remembered(&store, "/other", &a));
        assert!(!remembered(&store, "/r", &digest("[permission]\nx = 1\n")));
    }

    #[test]
    fn the_question_names_each_rule_and_escapes_it() {
        let rule = Rule::new(
            "external_directory",
            "/srv/\x1b[2J*",
            Action::Allow,
            "/r/.runner/config.toml",
            1,
        );
        let over = Rule::new(
            "external_directory",
            "*",
            Action::Ask,
            "built-in defaults",
            3,
        );
        let loosened = [Loosening {
            rule,
            line: Some(2),
            over,
        }];
        let q = question(&ProjectReview {
            worktree: Path::new("/r"),
            path: Path::new("/r/.runner/config.toml"),
            text: "",
            loosened: &loosened,
        });
        assert!(q.contains("/r/.runner/config.toml:2"), "{q}");
        assert!(q.contains("rule 3 of built-in defaults"), "{q}");
        assert!(!q.contains('\x1b'), "{q:?}");
        assert!(q.ends_with("[y/N] "));
    }
}
