//! Files in a checkout that act with more than their reader's rights once the sandbox has
//! written them: what a direct workspace must not hand back to the host.
//!
//! A command in the wall can `chmod 6755` a copy of a program it owns. In a copy workspace
//! `apply` refuses such a file, but in a direct workspace the checkout *is* the worktree:
//! when runner runs as root, that file is a setuid-root program for anyone who can reach
//! the checkout. So, for everything the sandbox created or changed:
//!
//! - setuid, setgid and sticky bits are cleared (a directory keeps a setgid bit that its
//!   parent has too: the kernel gave it, as in a group-shared folder);
//! - device nodes are removed (a node for a disk is the disk, to whoever may open it);
//! - FIFOs and sockets are removed when the sandbox closes, not before: a process the
//!   agent started may still use them, and once it is gone they only make host tools that
//!   open them hang.
//!
//! What was special when the sandbox started is left as it was, unless the sandbox changed
//! it: each entry is known by path, inode, bits and (but for a folder) change time, and a
//! `chmod`, a write or a replacement changes one of them. The check runs in the server after every command and
//! after each write or rename (there only below the changed path), and on the host once
//! more when the sandbox has closed. A full check reads every entry of the worktree once
//! (a directory listing and one `stat` each): see [`SpecialFiles::after_command`].
//!
//! Every change is made through descriptors opened without following links, from a
//! directory opened the same way, so that a command racing the check cannot point it at a
//! file outside the worktree.

use std::collections::HashMap;
use std::ffi::{CStr, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat};

/// setuid, setgid and sticky.
const SPECIAL_BITS: u32 = 0o7000;
const SETGID: u32 = 0o2000;

/// An entry as it was at the start: inode, special bits and, but for a folder, change
/// time (seconds, nanoseconds). A folder's change time moves with every file made in it.
type Stamp = (u64, u32, i64, i64);

fn stamp(st: &Stat) -> Stamp {
    let bits = st.st_mode & SPECIAL_BITS;
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        return (st.st_ino, bits, 0, 0);
    }
    (st.st_ino, bits, st.st_ctime, st.st_ctime_nsec as i64)
}

/// The special entries of a worktree when the sandbox started, and the check that clears
/// every other.
#[derive(Debug, Default, Clone)]
pub struct SpecialFiles {
    worktree: PathBuf,
    /// Worktree-relative paths of entries that were special at the start.
    known: HashMap<PathBuf, Stamp>,
}

/// How far a check goes.
#[derive(Clone, Copy, PartialEq)]
enum When {
    /// After a command or a write: bits and device nodes.
    Running,
    /// The sandbox has closed: FIFOs and sockets too.
    Closed,
}

impl SpecialFiles {
    /// Reads `worktree` (canonical, as this process sees it) for what is special before
    /// anything runs in it.
    pub fn scan(worktree: &Path) -> SpecialFiles {
        let mut known = HashMap::new();
        walk(
            worktree,
            Path::new(""),
            &mut |_, _, rel, st, parent_setgid| {
                if is_special(st, parent_setgid, When::Closed) {
                    known.insert(rel.to_path_buf(), stamp(st));
                }
            },
        );
        SpecialFiles {
            worktree: worktree.to_path_buf(),
            known,
        }
    }

    /// After a command: the whole worktree, as a `chmod` deep down changes no folder above
    /// it. One listing of each folder and one `stat` of each entry (about 30 ms for 20,000
    /// files with a warm cache). Returns what it did, one line each.
    pub fn after_command(&self) -> Vec<String> {
        self.check(Path::new(""), When::Running)
    }

    /// After a write or rename through the file API: `path` (absolute, in the worktree),
    /// and everything below it when it is a folder.
    pub fn after_file_change(&self, path: &Path) -> Vec<String> {
        match path.strip_prefix(&self.worktree) {
            Ok(rel) if !rel.as_os_str().is_empty() => self.check(rel, When::Running),
            _ => Vec::new(),
        }
    }

    /// When the sandbox has closed and nothing in it runs any more.
    pub fn on_close(&self) -> Vec<String> {
        self.check(Path::new(""), When::Closed)
    }

    fn check(&self, from: &Path, when: When) -> Vec<String> {
        let mut done = Vec::new();
        walk(
            &self.worktree,
            from,
            &mut |parent, name, rel, st, parent_setgid| {
                if self.known.get(rel) == Some(&stamp(st)) || !is_special(st, parent_setgid, when) {
                    return;
                }
                done.push(mend(parent, name, rel, st, parent_setgid));
            },
        );
        done
    }
}

/// Whether an entry is one the module is about (see the module's docs).
fn is_special(st: &Stat, parent_setgid: bool, when: When) -> bool {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::CharacterDevice | FileType::BlockDevice => true,
        FileType::Fifo | FileType::Socket => when == When::Closed,
        FileType::RegularFile | FileType::Directory => excess_bits(st, parent_setgid) != 0,
        _ => false,
    }
}

/// The special bits an entry must lose.
fn excess_bits(st: &Stat, parent_setgid: bool) -> u32 {
    let mut bits = st.st_mode & SPECIAL_BITS;
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory && parent_setgid {
        bits &= !SETGID;
    }
    bits
}

/// Clears the bits of, or removes, entry `name` of the folder `parent`; says what it did.
fn mend(parent: &OwnedFd, name: &OsStr, rel: &Path, st: &Stat, parent_setgid: bool) -> String {
    let shown = match rel.as_os_str().is_empty() {
        true => "the worktree".to_string(),
        false => format!("{:?}", rel.to_string_lossy()),
    };
    let what = match FileType::from_raw_mode(st.st_mode) {
        FileType::CharacterDevice | FileType::BlockDevice => "the device node",
        FileType::Fifo => "the FIFO",
        FileType::Socket => "the socket",
        _ => {
            return match clear_bits(parent, name, parent_setgid) {
                Ok(bits) => format!("cleared the {} of {shown}", bit_names(bits)),
                Err(e) => format!("cannot clear the special bits of {shown}: {e}"),
            };
        }
    };
    match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
        Ok(()) => format!("removed {what} {shown}"),
        Err(e) => format!("cannot remove {what} {shown}: {e}"),
    }
}

/// Opens the entry without following a link, and takes its special bits off through the
/// descriptor; returns the bits it took.
fn clear_bits(parent: &OwnedFd, name: &OsStr, parent_setgid: bool) -> std::io::Result<u32> {
    let flags = OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
    let fd = match rustix::fs::openat(parent, name, flags | OFlags::RDONLY, Mode::empty()) {
        Ok(fd) => fd,
        // A file its owner may not read (`chmod 4111`): a path descriptor, changed through
        // its name in /proc, which names that very inode.
        Err(rustix::io::Errno::ACCESS) => {
            let fd = rustix::fs::openat(parent, name, flags | OFlags::PATH, Mode::empty())?;
            return clear_through_proc(&fd, parent_setgid);
        }
        Err(e) => return Err(e.into()),
    };
    let st = rustix::fs::fstat(&fd)?;
    let bits = excess_bits(&st, parent_setgid);
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(st.st_mode & 0o7777 & !bits))?;
    Ok(bits)
}

fn clear_through_proc(fd: &OwnedFd, parent_setgid: bool) -> std::io::Result<u32> {
    use std::os::fd::AsRawFd;
    let st = rustix::fs::fstat(fd)?;
    if !matches!(
        FileType::from_raw_mode(st.st_mode),
        FileType::RegularFile | FileType::Directory
    ) {
        return Ok(0);
    }
    let bits = excess_bits(&st, parent_setgid);
    let by_proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::chmod(by_proc, Mode::from_raw_mode(st.st_mode & 0o7777 & !bits))?;
    Ok(bits)
}

fn bit_names(bits: u32) -> String {
    let names: Vec<&str> = [(0o4000, "setuid"), (0o2000, "setgid"), (0o1000, "sticky")]
        .into_iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, name)| name)
        .collect();
    format!(
        "{} bit{}",
        names.join(" and "),
        if names.len() > 1 { "s" } else { "" }
    )
}

/// A folder to read: its descriptor is opened when it is reached, from its parent's
/// (shared while siblings wait), so that the open descriptors are about the tree's depth.
struct Pending {
    parent: Rc<OwnedFd>,
    name: std::ffi::OsString,
    rel: PathBuf,
    setgid: bool,
}

/// What a walk shows of each entry: the folder it is in (the worktree itself for the
/// worktree), its name there (`.` for the worktree), its worktree-relative path, its
/// `stat`, and whether its folder has the setgid bit.
type Visit<'a> = dyn FnMut(&OwnedFd, &OsStr, &Path, &Stat, bool) + 'a;

/// Visits `from` (relative to `worktree`; empty for the worktree itself) and everything
/// below it, without following links. Entries that vanish meanwhile are skipped.
fn walk(worktree: &Path, from: &Path, visit: &mut Visit) {
    let Ok(root) = rustix::fs::open(worktree, DIR_FLAGS, Mode::empty()) else {
        return;
    };
    let root = Rc::new(root);
    let (parent, name, parent_setgid) = if from.as_os_str().is_empty() {
        // Only `stat` of the worktree's parent: the wall may not let it be opened.
        let setgid = worktree
            .parent()
            .and_then(|p| rustix::fs::stat(p).ok())
            .is_some_and(|st| st.st_mode & SETGID != 0);
        (root, OsStr::new(".").to_os_string(), setgid)
    } else {
        let Some((parent, name)) = descend(&root, from) else {
            return;
        };
        let setgid = rustix::fs::fstat(&*parent).is_ok_and(|st| st.st_mode & SETGID != 0);
        (parent, name, setgid)
    };
    let Ok(st) = rustix::fs::statat(&*parent, &name, AtFlags::SYMLINK_NOFOLLOW) else {
        return;
    };
    visit(&parent, &name, from, &st, parent_setgid);
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return;
    }
    let setgid = is_setgid_dir(&parent, &name);
    let mut stack = vec![Pending {
        parent,
        name,
        rel: from.to_path_buf(),
        setgid,
    }];
    while let Some(dir) = stack.pop() {
        let Ok(fd) = rustix::fs::openat(&*dir.parent, &dir.name, DIR_FLAGS, Mode::empty()) else {
            continue;
        };
        let fd = Rc::new(fd);
        for (name, kind) in listing(&fd) {
            if kind == FileType::Symlink {
                continue;
            }
            let Ok(st) = rustix::fs::statat(&*fd, &name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let rel = dir.rel.join(&name);
            visit(&fd, &name, &rel, &st, dir.setgid);
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                // Read again: the visit may have cleared the bit.
                let setgid = is_setgid_dir(&fd, &name);
                stack.push(Pending {
                    parent: fd.clone(),
                    name,
                    rel,
                    setgid,
                });
            }
        }
    }
}

const DIR_FLAGS: OFlags = OFlags::DIRECTORY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC)
    .union(OFlags::RDONLY);

fn is_setgid_dir(parent: &OwnedFd, name: &OsStr) -> bool {
    rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|s| s.st_mode & SETGID != 0)
}

/// The folder holding `rel` and its last name, opened a component at a time without
/// following links; `None` for a path that leaves the worktree (`..`) or is not there.
fn descend(root: &Rc<OwnedFd>, rel: &Path) -> Option<(Rc<OwnedFd>, std::ffi::OsString)> {
    use std::path::Component;
    let mut names = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => names.push(n),
            Component::CurDir => {}
            _ => return None,
        }
    }
    let last = names.pop()?.to_os_string();
    let mut at = root.clone();
    for name in names {
        at = Rc::new(rustix::fs::openat(&*at, name, DIR_FLAGS, Mode::empty()).ok()?);
    }
    Some((at, last))
}

/// A folder's entries but `.` and `..`, with the type the listing gives.
fn listing(fd: &OwnedFd) -> Vec<(std::ffi::OsString, FileType)> {
    let Ok(dir) = Dir::read_from(fd.as_fd()) else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| !matches!(e.file_name().to_bytes(), b"." | b".."))
        .map(|e| (os(e.file_name()), e.file_type()))
        .collect()
}

fn os(name: &CStr) -> std::ffi::OsString {
    OsStr::from_bytes(name.to_bytes()).to_os_string()
}

/// The note a command's output ends with when the check changed something.
pub fn note(done: &[String]) -> Option<String> {
    (!done.is_empty()).then(|| {
        format!(
            "\n[runner: {} — the worktree is the user's checkout, where such files would act \
             with more than their reader's rights]\n",
            done.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    fn chmod(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    #[test]
    fn new_and_changed_bits_are_cleared_and_what_was_there_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = std::fs::canonicalize(tmp.path()).unwrap();
        for f in ["kept", "changed", "plain", "sub/deep"] {
            std::fs::create_dir_all(wt.join(f).parent().unwrap()).unwrap();
            std::fs::write(wt.join(f), "x").unwrap();
        }
        chmod(&wt.join("kept"), 0o4755);
        chmod(&wt.join("changed"), 0o2755);
        std::fs::create_dir(wt.join("shared")).unwrap();
        chmod(&wt.join("shared"), 0o2775);
        let special = SpecialFiles::scan(&wt);

        // What a command does: new bits on new and old files, a sticky folder, a folder
        // under a setgid one (which inherits the bit), an old setuid file rewritten.
        std::fs::write(wt.join("new"), "x").unwrap();
        chmod(&wt.join("new"), 0o6755);
        chmod(&wt.join("sub/deep"), 0o4700);
        chmod(&wt.join("sub"), 0o1777);
        std::fs::create_dir(wt.join("shared/inner")).unwrap();
        chmod(&wt.join("shared/inner"), 0o2775);
        chmod(&wt.join("changed"), 0o6755);
        chmod(&wt.join("plain"), 0o755);
        let done = special.after_command();

        assert_eq!(mode(&wt.join("new")), 0o755, "{done:?}");
        assert_eq!(mode(&wt.join("sub/deep")), 0o700);
        assert_eq!(mode(&wt.join("sub")), 0o777);
        assert_eq!(mode(&wt.join("changed")), 0o755);
        assert_eq!(done.len(), 4, "{done:?}");
        // Control: untouched bits stay, an inherited setgid folder too, and plain
        // executable bits are not special.
        assert_eq!(mode(&wt.join("kept")), 0o4755);
        assert_eq!(mode(&wt.join("shared")), 0o2775);
        assert_eq!(mode(&wt.join("shared/inner")), 0o2775);
        assert_eq!(mode(&wt.join("plain")), 0o755);
        assert!(special.after_command().is_empty());
        // A setgid folder the checkout had keeps its bit when files are made in it.
        chmod(&wt, 0o2775);
        let special = SpecialFiles::scan(&wt);
        std::fs::write(wt.join("another"), "x").unwrap();
        assert!(special.after_command().is_empty());
        assert_eq!(mode(&wt), 0o2775);
    }

    #[test]
    fn fifos_go_at_close_and_a_write_is_checked_where_it_lands() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = std::fs::canonicalize(tmp.path()).unwrap();
        let special = SpecialFiles::scan(&wt);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            wt.join("f"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        std::fs::create_dir_all(wt.join("a/b")).unwrap();
        std::fs::write(wt.join("a/b/x"), "x").unwrap();
        chmod(&wt.join("a/b/x"), 0o4755);
        std::fs::write(wt.join("y"), "y").unwrap();
        chmod(&wt.join("y"), 0o4755);
        // A rename of `a` is checked below `a` only.
        assert_eq!(special.after_file_change(&wt.join("a")).len(), 1);
        assert_eq!(mode(&wt.join("a/b/x")), 0o755);
        assert_eq!(mode(&wt.join("y")), 0o4755);
        // After a command the FIFO stays (something may still read it).
        assert_eq!(special.after_command().len(), 1);
        assert!(wt.join("f").exists());
        let done = special.on_close();
        assert_eq!(done, [r#"removed the FIFO "f""#], "{done:?}");
        assert!(std::fs::symlink_metadata(wt.join("f")).is_err());
    }

    #[test]
    fn a_link_is_not_followed_out_of_the_worktree() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let (wt, outside) = (root.join("wt"), root.join("outside"));
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::create_dir_all(outside.join("d")).unwrap();
        std::fs::write(outside.join("prog"), "x").unwrap();
        chmod(&outside.join("prog"), 0o4755);
        chmod(&outside.join("d"), 0o1777);
        let special = SpecialFiles::scan(&wt);
        std::os::unix::fs::symlink(outside.join("prog"), wt.join("prog")).unwrap();
        std::os::unix::fs::symlink(outside.join("d"), wt.join("d")).unwrap();
        assert!(special.after_command().is_empty());
        assert!(special.after_file_change(&wt.join("prog")).is_empty());
        assert_eq!(mode(&outside.join("prog")), 0o4755);
        assert_eq!(mode(&outside.join("d")), 0o1777);
    }

    /// The cost of a check on a worktree of 20,000 files in 1,000 folders (run with
    /// `--ignored --nocapture`; the figure in [`SpecialFiles::after_command`]).
    #[test]
    #[ignore = "a measurement"]
    fn cost_of_a_check_on_20k_files() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = std::fs::canonicalize(tmp.path()).unwrap();
        for d in 0..1000 {
            let dir = wt.join(format!("d{}/e{d}", d % 50));
            std::fs::create_dir_all(&dir).unwrap();
            for f in 0..20 {
                std::fs::write(dir.join(format!("f{f}")), "x").unwrap();
            }
        }
        let started = std::time::Instant::now();
        let special = SpecialFiles::scan(&wt);
        let scan = started.elapsed();
        let mut checks = Vec::new();
        for _ in 0..10 {
            let started = std::time::Instant::now();
            assert!(special.after_command().is_empty());
            checks.push(started.elapsed());
        }
        checks.sort();
        eprintln!(
            "20k files: scan {scan:?}, check median {:?} (min {:?}, max {:?})",
            checks[5], checks[0], checks[9]
        );
    }
}
