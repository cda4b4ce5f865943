//! Protected paths kept by copy, where no mount namespace can make them read-only.
//!
//! The landlock backend keeps `.git/hooks`, `.git/config` and the other files host git runs
//! (see the host's `sandbox::worktree_guard`) read-only with bind mounts in a mount namespace
//! of the server's own. Where the machine refuses one (an unprivileged user on Ubuntu
//! 24.04's AppArmor policy, `user.max_user_namespaces=0`), landlock alone cannot help: its
//! rights on a directory cover the whole tree below it, so nothing under the writable
//! worktree can be made read-only. Instead the files are copied when the sandbox starts and
//! put back as they were: by the server after every command and file write, and by the host
//! once more when the sandbox has closed and every process in it is dead.
//!
//! This is weaker than a read-only mount: while a command runs, it can change the files,
//! and a process it left in the background can change them again after the server's check.
//! Host git runs only when the session is over, though, and what it then finds is what the
//! host put back at close. Putting back never follows a link: every component below the
//! worktree is opened without following symlinks, and one that is not a directory any more
//! (a link or a `gitdir:` file where `.git` was) is renamed to `NAME.disarmed`.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// More than this in the protected paths (hooks are a few KiB) is refused: the copy is held
/// in memory by the server and the host.
const MAX_BYTES: u64 = 64 << 20;

/// What a protected path held when the sandbox started.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    File {
        data: Vec<u8>,
        mode: u32,
    },
    Dir {
        mode: u32,
        entries: BTreeMap<OsString, Node>,
    },
    Link(OsString),
}

/// The protected paths of one worktree and what they held at the start.
#[derive(Debug, Clone, Default)]
pub struct ProtectedCopy {
    worktree: PathBuf,
    /// Paths relative to the worktree, parents before what they hold.
    entries: Vec<(PathBuf, Node)>,
}

/// A protected path that could not be copied to be kept (unreadable, or over the budget).
#[derive(Debug, thiserror::Error)]
#[error("cannot copy {} to keep it: {source}", path.display())]
pub struct NotKept {
    pub path: PathBuf,
    pub source: std::io::Error,
}

impl ProtectedCopy {
    /// Copies `paths` (absolute, beneath `worktree`; others are left out). Fails when they
    /// hold more than 64 MiB or cannot be read.
    pub fn take(worktree: &Path, paths: &[PathBuf]) -> Result<ProtectedCopy, NotKept> {
        let mut budget = MAX_BYTES;
        let mut entries = Vec::new();
        for path in paths {
            let Ok(rel) = path.strip_prefix(worktree) else {
                continue;
            };
            let node = read_node(path, &mut budget).map_err(|source| NotKept {
                path: path.to_path_buf(),
                source,
            })?;
            entries.push((rel.to_path_buf(), node));
        }
        entries.sort_by_key(|(rel, _)| rel.components().count());
        Ok(ProtectedCopy {
            worktree: worktree.to_path_buf(),
            entries,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Puts every protected path back as it was; says what it changed.
    pub fn restore(&self) -> Vec<String> {
        let mut done = Vec::new();
        if self.entries.is_empty() {
            return done;
        }
        let root = match rustix::fs::open(
            &self.worktree,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(e) => {
                done.push(format!("could not open {}: {e}", self.worktree.display()));
                return done;
            }
        };
        for (rel, node) in &self.entries {
            let Some(name) = rel.file_name() else {
                continue;
            };
            let shown = self.worktree.join(rel);
            let Some(parent) = self.open_parent(&root, rel, &mut done) else {
                continue;
            };
            if let Err(e) = fix(&parent, name, node, &shown, &mut done) {
                done.push(format!("could not restore {}: {e}", shown.display()));
            }
        }
        done
    }

    /// The directory holding `rel`, opened component by component without following
    /// links. A component that is not a directory any more is renamed away (git would
    /// follow it); a missing one means there is nothing for git to find.
    fn open_parent(&self, root: &OwnedFd, rel: &Path, done: &mut Vec<String>) -> Option<OwnedFd> {
        let mut dir = rustix::io::dup(root).ok()?;
        let mut shown = self.worktree.clone();
        for part in rel.parent()?.components() {
            let Component::Normal(name) = part else {
                return None;
            };
            shown.push(name);
            match open_dir(&dir, name) {
                Ok(next) => dir = next,
                Err(Errno::NOTDIR | Errno::LOOP) => {
                    done.push(disarm(&dir, name, &shown));
                    return None;
                }
                Err(_) => return None,
            }
        }
        Some(dir)
    }
}

/// The note a command's output ends with when something was put back.
pub fn note(done: &[String]) -> Option<String> {
    (!done.is_empty()).then(|| {
        format!(
            "\n[runner: put back {} — these files stay as they were when the sandbox started \
             (host git runs what they name); without a mount namespace they are put back \
             after every command instead of being read-only]\n",
            done.join("; ")
        )
    })
}

fn read_node(path: &Path, budget: &mut u64) -> std::io::Result<Node> {
    let meta = std::fs::symlink_metadata(path)?;
    let mode = meta.permissions().mode() & 0o7777;
    let too_big = || std::io::Error::other("the protected files hold more than 64 MiB");
    if meta.file_type().is_symlink() {
        return Ok(Node::Link(std::fs::read_link(path)?.into_os_string()));
    }
    if meta.is_dir() {
        let mut entries = BTreeMap::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            entries.insert(entry.file_name(), read_node(&entry.path(), budget)?);
        }
        return Ok(Node::Dir { mode, entries });
    }
    if !meta.is_file() {
        return Err(std::io::Error::other(
            "neither a file, a directory nor a link",
        ));
    }
    *budget = budget.checked_sub(meta.len()).ok_or_else(too_big)?;
    Ok(Node::File {
        data: std::fs::read(path)?,
        mode,
    })
}

fn open_dir(dir: &OwnedFd, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Renames `name` in `dir` to the first free `name.disarmed[.N]`.
fn disarm(dir: &OwnedFd, name: &OsStr, shown: &Path) -> String {
    let base = format!("{}.disarmed", name.to_string_lossy());
    let free = std::iter::once(base.clone())
        .chain((1..1000).map(|n| format!("{base}.{n}")))
        .find(|n| rustix::fs::statat(dir, n.as_str(), AtFlags::SYMLINK_NOFOLLOW).is_err());
    match free.map(|n| rustix::fs::renameat(dir, name, dir, n.as_str()).map(|()| n)) {
        Some(Ok(n)) => format!(
            "disarmed {} (it was no directory any more; now {n})",
            shown.display()
        ),
        Some(Err(e)) => format!("could not disarm {}: {e}", shown.display()),
        None => format!("could not disarm {}: no free name", shown.display()),
    }
}

/// Makes `name` in `dir` what `want` says, replacing whatever else is there.
fn fix(
    dir: &OwnedFd,
    name: &OsStr,
    want: &Node,
    shown: &Path,
    done: &mut Vec<String>,
) -> std::io::Result<()> {
    let have = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok();
    let kind = have.as_ref().map(|s| FileType::from_raw_mode(s.st_mode));
    match want {
        Node::Dir { mode, entries } if kind == Some(FileType::Directory) => {
            let sub = open_dir(dir, name)?;
            let wanted: Vec<&OsStr> = entries.keys().map(OsString::as_os_str).collect();
            for extra in list(&sub)?
                .iter()
                .filter(|n| !wanted.contains(&n.as_os_str()))
            {
                remove(&sub, extra)?;
                done.push(format!("removed {}", shown.join(extra).display()));
            }
            for (child, node) in entries {
                fix(&sub, child, node, &shown.join(child), done)?;
            }
            let now = have.map_or(0, |s| s.st_mode & 0o7777);
            if now != *mode {
                rustix::fs::fchmod(&sub, Mode::from_raw_mode(*mode))?;
                done.push(format!("restored the mode of {}", shown.display()));
            }
            Ok(())
        }
        Node::File { data, mode } if kind == Some(FileType::RegularFile) => {
            let now = have.map_or(0, |s| s.st_mode & 0o7777);
            if now == *mode && same_content(dir, name, data) {
                return Ok(());
            }
            replace(dir, name, want)?;
            done.push(format!("restored {}", shown.display()));
            Ok(())
        }
        Node::Link(target) if kind == Some(FileType::Symlink) => {
            let now = rustix::fs::readlinkat(dir, name, Vec::new())?;
            if now.as_bytes() != target.as_bytes() {
                replace(dir, name, want)?;
                done.push(format!("restored {}", shown.display()));
            }
            Ok(())
        }
        _ => {
            replace(dir, name, want)?;
            done.push(format!("restored {}", shown.display()));
            Ok(())
        }
    }
}

/// Removes what is at `name` (if anything) and creates `want` there afresh: never writing
/// into an existing file, which might be a hard link to one elsewhere.
fn replace(dir: &OwnedFd, name: &OsStr, want: &Node) -> std::io::Result<()> {
    if rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).is_ok() {
        remove(dir, name)?;
    }
    match want {
        Node::File { data, mode } => {
            let fd = rustix::fs::openat(
                dir,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(*mode),
            )?;
            // The umask may have taken bits away.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(*mode))?;
            std::io::Write::write_all(&mut std::fs::File::from(fd), data)
        }
        Node::Link(target) => Ok(rustix::fs::symlinkat(target.as_os_str(), dir, name)?),
        Node::Dir { mode, entries } => {
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(*mode))?;
            let sub = open_dir(dir, name)?;
            rustix::fs::fchmod(&sub, Mode::from_raw_mode(*mode))?;
            for (child, node) in entries {
                replace(&sub, child, node)?;
            }
            Ok(())
        }
    }
}

fn same_content(dir: &OwnedFd, name: &OsStr, data: &[u8]) -> bool {
    // Non-blocking: a FIFO swapped in after the stat must not hang the check.
    let Ok(fd) = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    if !rustix::fs::fstat(&fd).is_ok_and(|s| FileType::from_raw_mode(s.st_mode).is_file()) {
        return false;
    }
    let mut now = Vec::with_capacity(data.len());
    let read = std::fs::File::from(fd)
        .take(data.len() as u64 + 1)
        .read_to_end(&mut now);
    read.is_ok() && now == data
}

fn list(dir: &OwnedFd) -> std::io::Result<Vec<OsString>> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    Ok(names)
}

/// Removes `name` in `dir`, a whole tree if it is a directory, never following a link.
fn remove(dir: &OwnedFd, name: &OsStr) -> std::io::Result<()> {
    let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
        let sub = open_dir(dir, name)?;
        for child in list(&sub)? {
            remove(&sub, &child)?;
        }
        rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
    } else {
        rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let wt = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(wt.join(".git/hooks")).unwrap();
        std::fs::write(wt.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
        std::fs::write(wt.join(".git/hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            wt.join(".git/hooks/pre-commit.sample"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        (tmp, wt)
    }

    fn copy(wt: &Path) -> ProtectedCopy {
        ProtectedCopy::take(wt, &[wt.join(".git/config"), wt.join(".git/hooks")]).unwrap()
    }

    #[test]
    fn untouched_files_need_nothing() {
        let (_tmp, wt) = tree();
        assert_eq!(copy(&wt).restore(), Vec::<String>::new());
    }

    #[test]
    fn a_changed_config_a_new_hook_and_a_mode_are_put_back() {
        let (_tmp, wt) = tree();
        let saved = copy(&wt);
        std::fs::write(wt.join(".git/config"), "[core]\n\tfsmonitor = evil\n").unwrap();
        std::fs::write(wt.join(".git/hooks/post-checkout"), "#!/bin/sh\nevil\n").unwrap();
        std::fs::create_dir(wt.join(".git/hooks/nested")).unwrap();
        std::fs::write(wt.join(".git/hooks/nested/x"), "").unwrap();
        std::fs::set_permissions(
            wt.join(".git/hooks/pre-commit.sample"),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        let done = saved.restore();
        assert_eq!(done.len(), 4, "{done:?}");
        assert_eq!(
            std::fs::read_to_string(wt.join(".git/config")).unwrap(),
            "[core]\n\tbare = false\n"
        );
        assert!(!wt.join(".git/hooks/post-checkout").exists());
        assert!(!wt.join(".git/hooks/nested").exists());
        let mode = std::fs::metadata(wt.join(".git/hooks/pre-commit.sample"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755);
        assert!(saved.restore().is_empty(), "a second pass finds nothing");
    }

    #[test]
    fn a_link_in_place_of_the_repository_is_disarmed_not_followed() {
        let (_tmp, wt) = tree();
        let saved = copy(&wt);
        let outside = tempfile::tempdir().unwrap();
        std::fs::rename(wt.join(".git"), wt.join("moved")).unwrap();
        symlink(outside.path(), wt.join(".git")).unwrap();
        let done = saved.restore();
        assert!(done.iter().any(|d| d.contains("disarmed")), "{done:?}");
        assert!(wt.join(".git.disarmed").is_symlink());
        assert!(!wt.join(".git").exists());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_link_in_place_of_a_protected_file_is_replaced_not_written_through() {
        let (_tmp, wt) = tree();
        let saved = copy(&wt);
        let outside = tempfile::NamedTempFile::new().unwrap();
        std::fs::remove_file(wt.join(".git/config")).unwrap();
        symlink(outside.path(), wt.join(".git/config")).unwrap();
        saved.restore();
        assert!(!wt.join(".git/config").is_symlink());
        assert_eq!(std::fs::read(outside.path()).unwrap(), b"");
        std::fs::remove_dir_all(wt.join(".git/hooks")).unwrap();
        std::fs::write(wt.join(".git/hooks"), "a file").unwrap();
        saved.restore();
        assert!(wt.join(".git/hooks/pre-commit.sample").is_file());
    }
}
