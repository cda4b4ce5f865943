//! Repositories that host git must never pick up from a worktree the sandbox wrote.
//!
//! Host git trusts whatever repository it finds: its `config` (`core.fsmonitor`,
//! `core.hooksPath`, `diff.external`, `filter.*`, …) and its hooks are commands it runs as
//! the user. The worktree's own `.git` and every repository already in it when the sandbox
//! starts are walled off by mounts (see [`crate::sandbox::worktree_guard`]); this module
//! handles what no mount can stop, a repository the sandbox *makes*:
//!
//! - a nested `.git` (directory, `gitdir:` file or symlink) anywhere below the worktree's
//!   top: `git add` records it as a gitlink, and host git then runs `git status` inside it,
//!   with its config; a user who runs git in that subdirectory uses it directly;
//! - a directory git would take for a bare repository (`HEAD` beside `objects` or `refs`),
//!   which git discovers when run inside it, and which a `gitdir:` file can point at;
//! - a new repository under `.git/modules/`, which `git submodule update` would use for a
//!   submodule the user has initialised but not yet cloned.
//!
//! Each is *disarmed*, not deleted: a `.git` entry is renamed to `.git.disarmed` and the
//! `HEAD` of a repository directory to `HEAD.disarmed`, so git no longer sees a repository
//! and nothing the agent made is lost. The sweep runs after every command and every write
//! or rename the server makes, and once more on the host when the sandbox has closed and
//! nothing in it can plant anything again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The name a disarmed `.git` entry gets (a number follows if it is taken).
pub const DISARMED_GIT: &str = ".git.disarmed";
/// The name a disarmed repository's `HEAD` gets.
pub const DISARMED_HEAD: &str = "HEAD.disarmed";

/// The repositories of a worktree: what git would use as a repository directory, and the
/// `.git` entries (files and symlinks) that point at one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Repositories {
    /// Repository directories: the top `.git`, nested `.git` directories, bare-looking
    /// directories, and those under `.git/modules` and `.git/worktrees`.
    pub dirs: Vec<PathBuf>,
    /// `.git` entries that are not directories (`gitdir:` files, symlinks).
    pub pointers: Vec<PathBuf>,
}

impl Repositories {
    /// Every repository in `worktree`, without following symlinks. Repository
    /// directories are not searched further (their objects can be many), except for their
    /// `modules` and `worktrees`, where git keeps more repositories.
    pub fn scan(worktree: &Path) -> Repositories {
        let mut found = Repositories::default();
        let mut stack = vec![worktree.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                let path = entry.path();
                if entry.file_name() == ".git" {
                    if kind.is_dir() {
                        found.add_dir(path);
                    } else {
                        found.pointers.push(path);
                    }
                } else if kind.is_dir() {
                    if looks_like_repository(&path) {
                        found.add_dir(path);
                    } else {
                        stack.push(path);
                    }
                }
            }
        }
        found.dirs.sort();
        found.pointers.sort();
        found
    }

    /// A repository directory, and the repositories git keeps inside it.
    fn add_dir(&mut self, dir: PathBuf) {
        let mut inner = vec![dir.join("modules")];
        if let Ok(entries) = std::fs::read_dir(dir.join("worktrees")) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    self.dirs.push(e.path());
                }
            }
        }
        self.dirs.push(dir);
        // A submodule's name may hold slashes: its repository is then nested in folders.
        while let Some(d) = inner.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let p = e.path();
                if looks_like_repository(&p) {
                    self.add_dir(p);
                } else {
                    inner.push(p);
                }
            }
        }
    }
}

/// Whether git could take `dir` for a repository: a `HEAD` (of any kind) beside `objects`
/// or `commondir`. Git itself asks a little more (a valid `HEAD`, and `refs` too); asking
/// less errs on the side of disarming. (`HEAD` beside `refs` alone is a repository's
/// `logs` folder.)
pub fn looks_like_repository(dir: &Path) -> bool {
    let has = |name: &str| std::fs::symlink_metadata(dir.join(name)).is_ok();
    has("HEAD") && (has("objects") || has("commondir"))
}

/// The repositories present when the sandbox started, and the sweep that disarms any
/// other. Paths are as the server sees them.
#[derive(Debug, Clone, Default)]
pub struct RepositorySweep {
    pub worktree: PathBuf,
    /// Repository directories and pointers that were there at the start; they are walled
    /// off by mounts instead (read-only config and hooks, pinned directories).
    pub known: BTreeSet<PathBuf>,
}

impl RepositorySweep {
    pub fn new(worktree: &Path, at_start: &Repositories) -> RepositorySweep {
        RepositorySweep {
            worktree: worktree.to_path_buf(),
            known: at_start
                .dirs
                .iter()
                .chain(&at_start.pointers)
                .cloned()
                .collect(),
        }
    }

    /// Disarms every repository that was not there at the start; returns what it did, one
    /// line each, worktree-relative.
    pub fn sweep(&self) -> Vec<String> {
        let now = Repositories::scan(&self.worktree);
        let mut done = Vec::new();
        // Directories first: a new `.git` directory loses its `HEAD`, then its name.
        for dir in now.dirs.iter().filter(|d| !self.known.contains(*d)) {
            if let Some(line) = self.disarm_dir(dir) {
                done.push(line);
            }
        }
        for entry in now.dirs.iter().chain(&now.pointers) {
            if entry.file_name().is_some_and(|n| n == ".git") && !self.known.contains(entry) {
                if let Some(line) = self.rename_git_entry(entry) {
                    done.push(line);
                }
            }
        }
        done
    }

    /// The cheap check after a write or rename of `path`: the path itself and the
    /// directories above it, up to the worktree. A full sweep only if one of them is, or
    /// holds, a repository that was not there at the start.
    pub fn sweep_around(&self, path: &Path) -> Vec<String> {
        let suspect = path
            .ancestors()
            .take_while(|a| a.starts_with(&self.worktree))
            .any(|a| {
                let new = |p: &Path| !self.known.contains(p);
                (a.file_name().is_some_and(|n| n == ".git") && new(a))
                    || (looks_like_repository(a) && new(a))
                    || (std::fs::symlink_metadata(a.join(".git")).is_ok() && new(&a.join(".git")))
            });
        if suspect { self.sweep() } else { Vec::new() }
    }

    fn relative<'a>(&self, p: &'a Path) -> std::borrow::Cow<'a, str> {
        p.strip_prefix(&self.worktree)
            .unwrap_or(p)
            .to_string_lossy()
    }

    fn disarm_dir(&self, dir: &Path) -> Option<String> {
        let head = dir.join("HEAD");
        std::fs::symlink_metadata(&head).ok()?;
        let to = free_name(dir, DISARMED_HEAD);
        match std::fs::rename(&head, &to) {
            Ok(()) => Some(format!(
                "{}/HEAD renamed to {}",
                self.relative(dir),
                self.relative(&to)
            )),
            Err(e) => Some(format!(
                "cannot disarm the repository {}: {e}",
                self.relative(dir)
            )),
        }
    }

    fn rename_git_entry(&self, entry: &Path) -> Option<String> {
        let parent = entry.parent()?;
        let to = free_name(parent, DISARMED_GIT);
        match std::fs::rename(entry, &to) {
            Ok(()) => Some(format!(
                "{} renamed to {}",
                self.relative(entry),
                self.relative(&to)
            )),
            Err(e) => Some(format!("cannot disarm {}: {e}", self.relative(entry))),
        }
    }
}

/// `dir/name`, or `dir/name.N` for the first N not taken.
fn free_name(dir: &Path, name: &str) -> PathBuf {
    let first = dir.join(name);
    if std::fs::symlink_metadata(&first).is_err() {
        return first;
    }
    (1..)
        .map(|n| dir.join(format!("{name}.{n}")))
        .find(|p| std::fs::symlink_metadata(p).is_err())
        .unwrap_or(first)
}

/// The note a command's output ends with when the sweep disarmed something.
pub fn note(done: &[String]) -> Option<String> {
    (!done.is_empty()).then(|| {
        format!(
            "\n[runner: disarmed {} — git on the host would run the config and hooks of a \
             repository made in the sandbox. The files are kept; nested repositories cannot \
             live in this worktree]\n",
            done.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    #[test]
    fn scan_finds_every_kind_of_repository() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path();
        git(wt, &["init", "-q"]);
        git(wt, &["init", "-q", "vendor/nested"]);
        git(wt, &["init", "-q", "--bare", "fixtures/bare.git"]);
        std::fs::create_dir_all(wt.join(".git/modules/a/b")).unwrap();
        git(wt, &["init", "-q", "--bare", ".git/modules/a/b"]);
        std::fs::create_dir_all(wt.join("sub")).unwrap();
        std::fs::write(wt.join("sub/.git"), "gitdir: ../.git/modules/a/b\n").unwrap();
        let found = Repositories::scan(wt);
        let rel: Vec<_> = found
            .dirs
            .iter()
            .map(|d| d.strip_prefix(wt).unwrap().to_path_buf())
            .collect();
        assert_eq!(
            rel,
            [
                ".git",
                ".git/modules/a/b",
                "fixtures/bare.git",
                "vendor/nested/.git"
            ]
            .map(PathBuf::from)
        );
        assert_eq!(found.pointers, [wt.join("sub/.git")]);
    }

    #[test]
    fn sweep_disarms_only_what_is_new_and_keeps_the_files() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path();
        git(wt, &["init", "-q"]);
        git(wt, &["init", "-q", "old"]);
        let sweep = RepositorySweep::new(wt, &Repositories::scan(wt));
        assert!(sweep.sweep().is_empty(), "nothing new yet");
        git(wt, &["init", "-q", "new"]);
        git(wt, &["init", "-q", "--bare", "bare"]);
        std::fs::write(wt.join("old/.git/config.new"), "x").unwrap();
        let done = sweep.sweep();
        assert_eq!(done.len(), 3, "{done:?}");
        assert!(wt.join("new/.git.disarmed/HEAD.disarmed").is_file());
        assert!(!wt.join("new/.git").exists());
        assert!(wt.join("bare/HEAD.disarmed").is_file() && !wt.join("bare/HEAD").exists());
        assert!(wt.join("old/.git/HEAD").is_file() && wt.join(".git/HEAD").is_file());
        // A second repository at the same place gets a name of its own.
        git(wt, &["init", "-q", "new"]);
        assert_eq!(sweep.sweep().len(), 2);
        assert!(wt.join("new/.git.disarmed.1").is_dir());
    }

    #[test]
    fn sweep_around_a_write_sees_a_pointer_and_leaves_ordinary_writes_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path();
        git(wt, &["init", "-q"]);
        let sweep = RepositorySweep::new(wt, &Repositories::scan(wt));
        std::fs::create_dir_all(wt.join("src")).unwrap();
        std::fs::write(wt.join("src/main.rs"), "fn main() {}").unwrap();
        assert!(sweep.sweep_around(&wt.join("src/main.rs")).is_empty());
        std::fs::write(wt.join("src/.git"), "gitdir: ../evil\n").unwrap();
        let done = sweep.sweep_around(&wt.join("src/.git"));
        assert_eq!(done.len(), 1, "{done:?}");
        assert!(wt.join("src/.git.disarmed").is_file());
    }
}
