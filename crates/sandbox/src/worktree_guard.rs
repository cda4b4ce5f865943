//! What keeps a worktree from turning against the host once the sandbox is gone, computed
//! once per sandbox and applied by each backend in its own way (bind mounts in the landlock
//! server's namespace, mounts of the container).
//!
//! Host git runs commands that a repository's files name: hooks, and config keys such as
//! `core.fsmonitor`, `core.hooksPath`, `core.sshCommand`, `diff.external`, `filter.*` or
//! `credential.helper`, in the repository's `config`, its `config.worktree`, any file an
//! `include.path` names, or the common directory `commondir` points at. So, for every
//! repository in the worktree when the sandbox starts (the top `.git`, absorbed submodules
//! under `.git/modules`, linked worktrees' `.git/worktrees/*`, nested and bare repositories):
//!
//! - its directory is pinned as a mount point of its own, so it cannot be renamed away and
//!   replaced by one with new hooks;
//! - its `config`, `hooks`, `commondir` and `config.worktree`, the worktree files its config
//!   includes, and every `gitdir:` file pointing at it, become read-only;
//! - those that do not exist cannot be kept from being created, so they are `forbid`den:
//!   swept after every command and when the sandbox closes.
//!
//! Repositories the sandbox makes are disarmed by [`RepositorySweep`], in the server after
//! each command and here once more when the sandbox has closed. The same goes for special
//! bits, device nodes and FIFOs the sandbox leaves in the checkout ([`SpecialFiles`]).
//!
//! The read-only mounts and the pins need a mount namespace. Where the machine refuses one
//! (a user without unprivileged user namespaces), the read-only paths are copied at the
//! start and put back instead ([`ProtectedCopy`]), after every command and here at close:
//! a replaced `.git` then gets the same config and hooks back, so the pins are not needed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use runner_sandbox_server::git_sweep::{Repositories, RepositorySweep};
use runner_sandbox_server::restore::ProtectedCopy;
use runner_sandbox_server::special_files::SpecialFiles;

/// The files of a repository directory whose contents git runs, or that redirect it to
/// another repository whose contents it runs.
const EXECUTABLE_STATE: &[&str] = &["config", "hooks", "commondir", "config.worktree"];

#[derive(Debug, Clone, Default)]
pub struct WorktreeGuard {
    /// Real host paths that stay read-only.
    pub read_only: Vec<PathBuf>,
    /// Repository directories pinned as mount points, parents first.
    pub pins: Vec<PathBuf>,
    /// Host paths that must not exist after a command (they did not when it started).
    pub forbid: Vec<PathBuf>,
    /// The repositories there at the start, which the sweep leaves alone.
    pub repositories: Repositories,
}

impl WorktreeGuard {
    /// `worktree` must be canonical; `protected` are further worktree-relative paths that
    /// stay read-only (a profile's).
    pub fn new(worktree: &Path, protected: &[PathBuf]) -> WorktreeGuard {
        // Only what exists can be mounted over, and a path resolving outside the worktree
        // is not ours to protect (nor writable in the sandbox).
        let inside = |p: &Path| {
            std::fs::canonicalize(p)
                .ok()
                .filter(|real| real.starts_with(worktree))
        };
        let repositories = Repositories::scan(worktree);
        let mut read_only = BTreeSet::new();
        let mut forbid = BTreeSet::new();
        for dir in &repositories.dirs {
            for name in EXECUTABLE_STATE {
                let path = dir.join(name);
                match std::fs::symlink_metadata(&path) {
                    Ok(_) => read_only.extend(inside(&path)),
                    Err(_) => {
                        forbid.insert(path);
                    }
                }
            }
            for included in config_includes(&dir.join("config")) {
                if !included.starts_with(worktree) {
                    continue;
                }
                match inside(&included) {
                    Some(real) => {
                        read_only.insert(real);
                    }
                    None if std::fs::symlink_metadata(&included).is_err() => {
                        forbid.insert(included);
                    }
                    None => {}
                }
            }
        }
        let pointers = repositories
            .pointers
            .iter()
            .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file()));
        read_only.extend(pointers.cloned());
        read_only.extend(
            protected
                .iter()
                .filter_map(|rel| inside(&worktree.join(rel))),
        );
        let mut pins: Vec<PathBuf> = repositories
            .dirs
            .iter()
            .filter_map(|d| inside(d))
            .filter(|d| d.is_dir())
            .collect();
        pins.sort_by_key(|p| p.components().count());
        pins.dedup();
        WorktreeGuard {
            read_only: read_only.into_iter().collect(),
            pins,
            forbid: forbid.into_iter().collect(),
            repositories,
        }
    }

    /// The same paths as seen in a sandbox where the worktree is mounted at `inside`.
    pub fn moved(&self, worktree: &Path, inside: &Path) -> WorktreeGuard {
        let map = |p: &PathBuf| {
            p.strip_prefix(worktree)
                .map(|rest| inside.join(rest))
                .unwrap_or_else(|_| p.clone())
        };
        let all = |v: &[PathBuf]| v.iter().map(map).collect();
        WorktreeGuard {
            read_only: all(&self.read_only),
            pins: all(&self.pins),
            forbid: all(&self.forbid),
            repositories: Repositories {
                dirs: all(&self.repositories.dirs),
                pointers: all(&self.repositories.pointers),
            },
        }
    }

    /// What the host sweeps when the sandbox has closed: the protected paths put back
    /// from `kept` (where no mount kept them read-only), the forbidden paths, and with
    /// `repositories` (a checkout the user works in) every repository the sandbox made and
    /// every special bit, device node, FIFO or socket it left. Called before the sandbox
    /// starts: it reads what is there now.
    pub fn sweep_on_close(
        &self,
        worktree: &Path,
        repositories: bool,
        kept: Option<ProtectedCopy>,
    ) -> SweepOnClose {
        SweepOnClose {
            kept,
            forbid: self.forbid.clone(),
            repositories: repositories
                .then(|| RepositorySweep::knowing(worktree, &self.repositories)),
            special: repositories.then(|| SpecialFiles::scan(worktree)),
        }
    }
}

/// The files a git config includes (`include.path`, `includeIf.*.path`), resolved as git
/// resolves them: relative to the config file's directory. `~` paths are in the home
/// directory, outside every worktree, and are left out.
pub fn config_includes(config: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(config) else {
        return Vec::new();
    };
    let base = config.parent().unwrap_or(Path::new("/"));
    let mut in_include = false;
    let mut found = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let name = header
                .split(|c: char| c == ']' || c == '"' || c == '.' || c.is_whitespace())
                .next()
                .unwrap_or("");
            in_include =
                name.eq_ignore_ascii_case("include") || name.eq_ignore_ascii_case("includeif");
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if !in_include || !key.trim().eq_ignore_ascii_case("path") {
            continue;
        }
        let value = value.trim().trim_matches('"');
        if value.is_empty() || value.starts_with('~') {
            continue;
        }
        found.push(base.join(value));
    }
    found
}

/// Removes what the sandbox planted at forbidden paths and disarms the repositories it
/// made, once nothing in it runs any more. What it found is said on standard error: it was
/// planted by something that outlived its command.
pub struct SweepOnClose {
    kept: Option<ProtectedCopy>,
    forbid: Vec<PathBuf>,
    repositories: Option<RepositorySweep>,
    special: Option<SpecialFiles>,
}

impl Drop for SweepOnClose {
    fn drop(&mut self) {
        // First what was there at the start, then what must not be: a restored `.git`
        // directory must not keep a `commondir` planted in the one it replaced.
        let mut done = self
            .kept
            .as_ref()
            .map(ProtectedCopy::restore)
            .unwrap_or_default();
        done.extend(
            self.forbid
                .iter()
                .filter(|p| runner_sandbox_server::remove_planted(p))
                .map(|p| format!("removed {}", p.display())),
        );
        if let Some(repositories) = &self.repositories {
            done.extend(repositories.sweep());
        }
        if !done.is_empty() {
            eprintln!(
                "runner: when the sandbox closed, {} (git on the host would have run what \
                 the sandbox wrote there)",
                // The paths are names the sandbox chose: shown, never obeyed by the terminal.
                runner_display::escape(&done.join("; "))
            );
        }
        let mended = self
            .special
            .as_ref()
            .map(SpecialFiles::on_close)
            .unwrap_or_default();
        if !mended.is_empty() {
            eprintln!(
                "runner: when the sandbox closed, {} (in the checkout, such files act with \
                 more than their reader's rights or make host tools hang)",
                runner_display::escape(&mended.join("; "))
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_are_read_relative_to_the_config() {
        let tmp = tempfile::tempdir().unwrap();
        let config = tmp.path().join("config");
        std::fs::write(
            &config,
            "[core]\n\tbare = false\n[include]\n\tpath = ../shared.inc\n\
             [includeIf \"gitdir:/x/\"]\n  PATH = \"local.inc\"\n[other]\n\tpath = no\n\
             [include]\n\tpath = ~/home.inc\n",
        )
        .unwrap();
        assert_eq!(
            config_includes(&config),
            [
                tmp.path().join("../shared.inc"),
                tmp.path().join("local.inc")
            ]
        );
    }

    #[test]
    fn every_repository_is_pinned_and_its_state_read_only_or_forbidden() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = std::fs::canonicalize(tmp.path()).unwrap();
        let git = |args: &[&str]| {
            assert!(
                std::process::Command::new("git")
                    .arg("-C")
                    .arg(&wt)
                    .args(args)
                    .env("GIT_CONFIG_GLOBAL", "/dev/null")
                    .status()
                    .unwrap()
                    .success()
            )
        };
        git(&["init", "-q"]);
        git(&["init", "-q", "vendor/lib"]);
        std::fs::write(wt.join("sub.git"), "").unwrap();
        std::fs::create_dir(wt.join("sub")).unwrap();
        std::fs::write(wt.join("sub/.git"), "gitdir: ../vendor/lib/.git\n").unwrap();
        let guard = WorktreeGuard::new(&wt, &[]);
        assert_eq!(guard.pins, [wt.join(".git"), wt.join("vendor/lib/.git")]);
        for p in [
            ".git/config",
            ".git/hooks",
            "vendor/lib/.git/config",
            "sub/.git",
        ] {
            assert!(guard.read_only.contains(&wt.join(p)), "{p}: {guard:?}");
        }
        for p in [
            ".git/commondir",
            ".git/config.worktree",
            "vendor/lib/.git/commondir",
        ] {
            assert!(guard.forbid.contains(&wt.join(p)), "{p}: {guard:?}");
        }
    }
}
