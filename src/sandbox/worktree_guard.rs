//! What keeps a worktree from turning against the host once the sandbox is gone, computed
//! once per sandbox and applied by each backend in its own way (bind mounts in the landlock
//! server's namespace, mounts of the container):
//!
//! - `protected` paths (`.git/hooks`, `.git/config`) become read-only: a planted hook or a
//!   `core.fsmonitor` line would run on the host later, outside every wall;
//! - `.git` is pinned as a mount point of its own, so it cannot be renamed away and replaced
//!   by a repository with new hooks;
//! - files that would redirect host git elsewhere (`.git/commondir`) cannot be kept from
//!   being created, so they are swept after every command and when the sandbox closes.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default)]
pub struct WorktreeGuard {
    /// Real host paths of the protected paths that exist inside the worktree.
    pub read_only: Vec<PathBuf>,
    /// The real `.git` directory, if the worktree has one.
    pub pin: Option<PathBuf>,
    /// Host paths that must not exist after a command (they did not when it started).
    pub forbid: Vec<PathBuf>,
}

impl WorktreeGuard {
    /// `worktree` must be canonical; `protected` are worktree-relative.
    pub fn new(worktree: &Path, protected: &[PathBuf]) -> WorktreeGuard {
        // Only what exists can be mounted over, and a path resolving outside the worktree
        // is not ours to protect (nor writable in the sandbox).
        let inside = |p: &Path| {
            std::fs::canonicalize(p)
                .ok()
                .filter(|real| real.starts_with(worktree))
        };
        let read_only = protected
            .iter()
            .filter_map(|rel| inside(&worktree.join(rel)))
            .collect();
        let pin = inside(&worktree.join(".git")).filter(|d| d.is_dir());
        let forbid = pin
            .iter()
            .map(|git| git.join("commondir"))
            .filter(|p| std::fs::symlink_metadata(p).is_err())
            .collect();
        WorktreeGuard {
            read_only,
            pin,
            forbid,
        }
    }

    /// The same paths as seen in a sandbox where the worktree is mounted at `inside`.
    pub fn moved(&self, worktree: &Path, inside: &Path) -> WorktreeGuard {
        let map = |p: &PathBuf| {
            p.strip_prefix(worktree)
                .map(|rest| inside.join(rest))
                .unwrap_or_else(|_| p.clone())
        };
        WorktreeGuard {
            read_only: self.read_only.iter().map(map).collect(),
            pin: self.pin.as_ref().map(map),
            forbid: self.forbid.iter().map(map).collect(),
        }
    }
}

/// Removes what the sandbox planted at forbidden paths once nothing in it runs any more.
pub struct SweepOnClose(pub Vec<PathBuf>);

impl Drop for SweepOnClose {
    fn drop(&mut self) {
        for path in &self.0 {
            super::server::remove_planted(path);
        }
    }
}
