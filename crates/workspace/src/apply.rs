//! Bringing a copy's changes over to the checkout it was made from: exactly what the
//! changes list, with plain modes, all or nothing.
//!
//! The copy is the agent's, so nothing in it is trusted: names are kept as the bytes they
//! are, a file is opened without following links, must still be the state that was listed
//! (its ctime, which nobody can set back, and its size) and is hashed as it is copied, and
//! nothing is written through a link in the checkout, even with `--force`. Regular files
//! land as 0644 or 0755 (executable when the copy's file had any executable bit): a setuid,
//! setgid or sticky bit is dropped, with a note naming the file.
//!
//! All or nothing: every file and link is first staged beside its place (a temporary name in
//! the nearest folder of the checkout that stays), and everything is checked, before the
//! checkout changes at all. Then each change is made by a rename: a replaced file is swapped
//! with its staged one (`RENAME_EXCHANGE`), so the old one waits under the staged name, a
//! deleted one is renamed aside, and every step is recorded. If a step fails, the steps
//! made are undone in reverse and the staged files removed: the checkout is as it was. Only
//! when every step is made are the old files removed.

use std::collections::BTreeSet;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{CWD, RenameFlags, renameat_with};

use super::changes::{Change, Entry, FileEntry, conflicts, same, state_of};
use super::content::{self, Stamp};
use super::leaf::SPECIAL;
use crate::Error;

/// What kept an apply from being made. In every case but [`Refused::Commit`] with a
/// `lost` list the checkout is as it was.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// These paths changed in the checkout since the copy was made.
    #[error("not applied: these files changed since the copy was made: {}", .0.join(", "))]
    Conflicts(Vec<String>),
    /// These paths lead through a link or out of the checkout.
    #[error("not applied: these paths lead through a link or out of {}: {}", target.display(), paths.join(", "))]
    Unsafe { target: PathBuf, paths: Vec<String> },
    /// Something in the checkout stands where a change goes.
    #[error("not applied: {path} {blocked}")]
    Blocked { path: String, blocked: Blocked },
    /// The person interrupted the apply while files were staged.
    #[error("interrupted: nothing was applied")]
    Interrupted,
    /// The copy's file changed after the changes were listed.
    #[error(
        "not applied: {0} changed in the copy after it was reviewed; look again with `runner changes`"
    )]
    ChangedInCopy(String),
    /// A file or link could not be staged beside its place.
    #[error("not applied: cannot write {}: {source}; nothing was changed", path.display())]
    Stage { path: PathBuf, source: io::Error },
    /// A step of the commit failed; what was done is undone, and `lost` says what could not
    /// be put back and where it is.
    #[error("{}", commit_message(step, target, lost))]
    Commit {
        step: Box<Error>,
        target: PathBuf,
        lost: Vec<String>,
    },
    /// A file to compare could not be read.
    #[error(transparent)]
    Read(Box<Error>),
}

/// What stands in the checkout where a change goes (after the path, in the message).
#[derive(Debug, thiserror::Error)]
pub enum Blocked {
    #[error("is neither a file, a link nor a folder in {}", .0.display())]
    Special(PathBuf),
    #[error("is a folder in {} now; the copy deletes a file there", .0.display())]
    FolderForDeleted(PathBuf),
    #[error("is a folder in {} that cannot be read: {}", .0.display(), .1)]
    Unreadable(PathBuf, io::Error),
    #[error("is a folder in {} that holds {} (not in the copy's changes)", .0.display(), .1.display())]
    Holds(PathBuf, PathBuf),
}

fn commit_message(step: &Error, target: &Path, lost: &[String]) -> String {
    if lost.is_empty() {
        format!(
            "not applied: {step}; nothing was changed in {}",
            target.display()
        )
    } else {
        format!(
            "not applied: {step}; undoing what was done also failed, so {} is not as it was: {}",
            target.display(),
            lost.join("; ")
        )
    }
}

impl From<Error> for Refused {
    fn from(e: Error) -> Refused {
        Refused::Read(Box::new(e))
    }
}

/// Makes each changed path in `target` what it is in `work` (measured against `base`):
/// refused where the checkout changed since the copy (unless `force`), or where a path
/// leads through a link or out of it. `stop` is asked while files are staged: when it says
/// so, nothing is applied. Returns notes for the person (special bits dropped, an old file
/// that could not be removed).
pub fn apply(
    changes: &[Change],
    base: &Path,
    work: &Path,
    target: &Path,
    force: bool,
    stop: &dyn Fn() -> bool,
) -> Result<Vec<String>, Refused> {
    apply_with(changes, base, work, target, force, stop, &mut |_| Ok(()))
}

/// [`apply`], with `fail` asked before each step of the commit (its number from 0): a test
/// makes one fail to see the steps before it undone.
pub(crate) fn apply_with(
    changes: &[Change],
    base: &Path,
    work: &Path,
    target: &Path,
    force: bool,
    stop: &dyn Fn() -> bool,
    fail: &mut dyn FnMut(usize) -> io::Result<()>,
) -> Result<Vec<String>, Refused> {
    let deleted: BTreeSet<&Path> = changes
        .iter()
        .filter(|c| c.after.is_none())
        .map(|c| c.rel.as_path())
        .collect();
    let refused = unsafe_paths(changes, target, &deleted);
    if !refused.is_empty() {
        return Err(Refused::Unsafe {
            target: target.to_path_buf(),
            paths: refused,
        });
    }
    if !force {
        let conflicts = conflicts(changes, base, work, target)?;
        if !conflicts.is_empty() {
            return Err(Refused::Conflicts(conflicts));
        }
    }
    let plan = Plan::make(changes, work, target, &deleted)?;
    let mut notes = plan.notes.clone();
    let mut staged = Staged::make(&plan, work, target, stop)?;
    let mut journal = Vec::new();
    if let Err(e) = commit(&plan, &staged, target, &mut journal, fail) {
        let lost = undo(journal, &mut staged);
        return Err(Refused::Commit {
            step: Box::new(e),
            target: target.to_path_buf(),
            lost,
        });
    }
    notes.extend(remove_old(&journal));
    // Made: the old files swapped out go with their staged names.
    drop(staged);
    Ok(notes)
}

/// Once every step is made, the old files set aside go; notes for those that stay.
fn remove_old(journal: &[Done]) -> Vec<String> {
    let mut notes = Vec::new();
    for done in journal {
        if let Done::Aside { backup, path } = done
            && let Err(e) = std::fs::remove_file(backup)
        {
            notes.push(format!(
                "the old {} is left at {}: {e}",
                path.display(),
                backup.display()
            ));
        }
    }
    notes
}

/// Paths that cannot be applied at all, whatever `--force` says: a path that is not plainly
/// below the checkout, or one whose way there in the checkout goes through a link.
pub fn unsafe_paths(changes: &[Change], target: &Path, deleted: &BTreeSet<&Path>) -> Vec<String> {
    changes
        .iter()
        .filter(|c| !plainly_below(target, &c.rel, deleted))
        .map(|c| c.path.clone())
        .collect()
}

/// Whether every folder on the way to `rel` is a folder of the checkout (or not there yet,
/// or a file or link this apply deletes, and so made a folder by it).
fn plainly_below(target: &Path, rel: &Path, deleted: &BTreeSet<&Path>) -> bool {
    let parts: Vec<Component> = rel.components().collect();
    if parts.is_empty() || !parts.iter().all(|p| matches!(p, Component::Normal(_))) {
        return false;
    }
    let mut sub = PathBuf::new();
    for part in &parts[..parts.len() - 1] {
        sub.push(part);
        match std::fs::symlink_metadata(target.join(&sub)) {
            Ok(m) if m.is_dir() => {}
            // Moved aside before anything is put below it; nothing goes through it.
            Ok(_) if deleted.contains(sub.as_path()) => return true,
            Ok(_) => return false,
            // What does not exist yet is made by the apply, as a folder.
            Err(_) => return true,
        }
    }
    true
}

/// What the commit does, checked against the checkout as it is now.
struct Plan<'a> {
    /// Paths to remove (each is there now).
    deletes: Vec<&'a Change>,
    /// Paths to write, with what goes there.
    writes: Vec<(&'a Change, &'a Entry)>,
    /// Folders of the checkout a file or link takes the place of (each holds only files
    /// this apply deletes).
    replaced: BTreeSet<PathBuf>,
    notes: Vec<String>,
}

impl<'a> Plan<'a> {
    /// The plan for `changes`, of which `deleted` are the deletions.
    fn make(
        changes: &'a [Change],
        work: &Path,
        target: &Path,
        deleted: &BTreeSet<&Path>,
    ) -> Result<Plan<'a>, Refused> {
        let mut plan = Plan {
            deletes: Vec::new(),
            writes: Vec::new(),
            replaced: BTreeSet::new(),
            notes: Vec::new(),
        };
        for c in changes {
            let here = target.join(&c.rel);
            let now = state_of(&here);
            if now.is_none() && std::fs::symlink_metadata(&here).is_ok() {
                return Err(Refused::Blocked {
                    path: c.path.clone(),
                    blocked: Blocked::Special(target.to_path_buf()),
                });
            }
            let Some(after) = &c.after else {
                match now {
                    None => {}
                    Some(Entry::Dir) => {
                        return Err(Refused::Blocked {
                            path: c.path.clone(),
                            blocked: Blocked::FolderForDeleted(target.to_path_buf()),
                        });
                    }
                    Some(_) => plan.deletes.push(c),
                }
                continue;
            };
            if let Entry::File(f) = after
                && let Some(note) = special_note(&c.path, f)
            {
                plan.notes.push(note);
            }
            if same(now.as_ref(), &here, Some(after), &work.join(&c.rel), true)? {
                // Already as the copy has it (an earlier apply, or the same edit made here).
                continue;
            }
            if let Some(Entry::Dir) = now {
                holds_only(&here, &c.rel, deleted).map_err(|blocked| Refused::Blocked {
                    path: c.path.clone(),
                    blocked: blocked.at(target),
                })?;
                plan.replaced.insert(c.rel.clone());
            }
            plan.writes.push((c, after));
        }
        Ok(plan)
    }

    /// Where `rel`'s staged file or set-aside old file waits: the deepest folder on its way
    /// that the apply keeps.
    fn anchor(&self, target: &Path, rel: &Path) -> PathBuf {
        let mut at = target.to_path_buf();
        let mut sub = PathBuf::new();
        for part in rel.parent().into_iter().flat_map(Path::components) {
            sub.push(part);
            if self.replaced.contains(&sub) {
                break;
            }
            let next = target.join(&sub);
            if !std::fs::symlink_metadata(&next).is_ok_and(|m| m.is_dir()) {
                break;
            }
            at = next;
        }
        at
    }
}

/// Says so when a file's special bits are dropped.
fn special_note(path: &str, f: &FileEntry) -> Option<String> {
    let special = f.mode & SPECIAL;
    if special == 0 {
        return None;
    }
    let names: Vec<&str> = [(0o4000, "setuid"), (0o2000, "setgid"), (0o1000, "sticky")]
        .into_iter()
        .filter(|(bit, _)| special & bit != 0)
        .map(|(_, name)| name)
        .collect();
    Some(format!(
        "{path}: {} dropped: the copy's file has mode {:04o}, applied as {:04o}",
        match names.as_slice() {
            [one] => format!("the {one} bit"),
            [init @ .., last] => format!("the {} and {last} bits", init.join(", ")),
            [] => String::new(),
        },
        f.mode,
        f.applied_mode()
    ))
}

/// Checks that the folder `dir` (the checkout's `rel`) holds nothing but folders and
/// files in `deleted`.
fn holds_only(dir: &Path, rel: &Path, deleted: &BTreeSet<&Path>) -> Result<(), NotOnly> {
    let entries = std::fs::read_dir(dir).map_err(NotOnly::Unreadable)?;
    for entry in entries {
        let entry = entry.map_err(NotOnly::Unreadable)?;
        let sub = rel.join(entry.file_name());
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            holds_only(&entry.path(), &sub, deleted)?;
        } else if !deleted.contains(sub.as_path()) {
            return Err(NotOnly::Holds(sub));
        }
    }
    Ok(())
}

/// Why a folder of the checkout cannot simply give way to a file ([`holds_only`]).
enum NotOnly {
    Unreadable(io::Error),
    Holds(PathBuf),
}

impl NotOnly {
    /// As said of the folder in `target`.
    fn at(self, target: &Path) -> Blocked {
        match self {
            NotOnly::Unreadable(e) => Blocked::Unreadable(target.to_path_buf(), e),
            NotOnly::Holds(sub) => Blocked::Holds(target.to_path_buf(), sub),
        }
    }
}

/// The staged files and links, one per write of the plan: removed when dropped, unless
/// [`Staged::keep`] took one out (its name then holds what must stay).
struct Staged(Vec<Option<PathBuf>>);

impl Staged {
    fn make(
        plan: &Plan,
        work: &Path,
        target: &Path,
        stop: &dyn Fn() -> bool,
    ) -> Result<Staged, Refused> {
        let mut staged = Staged(Vec::with_capacity(plan.writes.len()));
        for (c, after) in &plan.writes {
            if stop() {
                return Err(Refused::Interrupted);
            }
            let dir = plan.anchor(target, &c.rel);
            let fail = |source: io::Error| Refused::Stage {
                path: target.join(&c.rel),
                source,
            };
            let path = match after {
                Entry::Link { target: to } => {
                    temp(&dir, |p| std::os::unix::fs::symlink(to, p)).map_err(fail)?
                }
                Entry::File(f) => stage_file(&work.join(&c.rel), f, &dir, stop).map_err(|e| {
                    if e.kind() == io::ErrorKind::Interrupted {
                        return Refused::Interrupted;
                    }
                    match e.downcast::<Changed>() {
                        Ok(_) => Refused::ChangedInCopy(c.path.clone()),
                        Err(e) => fail(e),
                    }
                })?,
                Entry::Dir => return Err(fail(io::Error::other("a folder is not a change"))),
            };
            staged.0.push(Some(path));
        }
        Ok(staged)
    }

    fn path(&self, i: usize) -> &Path {
        self.0[i].as_deref().unwrap_or(Path::new(""))
    }

    fn keep(&mut self, i: usize) {
        self.0[i] = None;
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        for path in self.0.iter().flatten() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The copy's file changed since it was listed.
#[derive(Debug)]
struct Changed;

impl std::fmt::Display for Changed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("changed since it was listed")
    }
}

impl std::error::Error for Changed {}

/// Copies the copy's file `from` (as `f` lists it) to a new temporary file in `dir`, hashed
/// on the way, with its applied mode. Only what was listed is copied: the file must be the
/// same state before and after (its stamp), and match the digest the listing took, if any.
fn stage_file(
    from: &Path,
    f: &FileEntry,
    dir: &Path,
    stop: &dyn Fn() -> bool,
) -> io::Result<PathBuf> {
    let changed = || io::Error::other(Changed);
    let src = content::open_plain(from)?;
    if Stamp::of(&src.metadata()?) != f.stamp {
        return Err(changed());
    }
    let tmp = tempfile::Builder::new()
        .prefix(".runner-apply-")
        .tempfile_in(dir)?;
    let digest = content::copy(&src, f.size, Some(tmp.as_file()), stop)?;
    if Stamp::of(&src.metadata()?) != f.stamp || f.known_digest().is_some_and(|d| d != digest) {
        return Err(changed());
    }
    f.knows(digest);
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(f.applied_mode()))?;
    tmp.into_temp_path().keep().map_err(|e| e.error)
}

/// A new name in `dir` made by `make` (which fails with `AlreadyExists` when the name is
/// taken), returned as a plain path: nothing removes it by itself.
fn temp(dir: &Path, make: impl FnMut(&Path) -> io::Result<()>) -> io::Result<PathBuf> {
    tempfile::Builder::new()
        .prefix(".runner-apply-")
        .make_in(dir, make)?
        .into_temp_path()
        .keep()
        .map_err(|e| e.error)
}

/// One step of the commit, as it can be undone.
enum Done {
    /// `path` was renamed to `backup`.
    Aside { path: PathBuf, backup: PathBuf },
    /// The staged write `write` and `path` were swapped: `path` is new, the staged name old.
    Swapped { path: PathBuf, write: usize },
    /// The staged write was renamed to `path`, where nothing was.
    Placed { path: PathBuf },
    /// A folder made on the way.
    MadeDir(PathBuf),
    /// An empty folder removed for a file to take its place.
    RemovedDir { path: PathBuf, mode: u32 },
}

/// Makes every change, recording each step in `journal` as it is made.
fn commit(
    plan: &Plan,
    staged: &Staged,
    target: &Path,
    journal: &mut Vec<Done>,
    fail: &mut dyn FnMut(usize) -> io::Result<()>,
) -> Result<(), Error> {
    let mut steps = 0;
    let mut step = |what: &Path| -> Result<(), Error> {
        steps += 1;
        fail(steps - 1).map_err(Error::io("change", what))
    };
    for c in &plan.deletes {
        let path = target.join(&c.rel);
        step(&path)?;
        let backup = temp(&plan.anchor(target, &c.rel), |p| rename_noreplace(&path, p))
            .map_err(Error::io("delete", &path))?;
        journal.push(Done::Aside { path, backup });
    }
    for (i, (c, _)) in plan.writes.iter().enumerate() {
        put(target, &c.rel, staged.path(i), i, journal, &mut step)?;
    }
    Ok(())
}

/// Puts the staged write `write` (at `from`) in its place `rel`: the folders on the way
/// made, an empty folder there removed, a file or link there swapped out.
fn put(
    target: &Path,
    rel: &Path,
    from: &Path,
    write: usize,
    journal: &mut Vec<Done>,
    step: &mut dyn FnMut(&Path) -> Result<(), Error>,
) -> Result<(), Error> {
    let path = target.join(rel);
    let fail = |e: io::Error| Error::io("write", &path)(e);
    let mut sub = PathBuf::new();
    for part in rel.parent().into_iter().flat_map(Path::components) {
        sub.push(part);
        let dir = target.join(&sub);
        if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            step(&dir)?;
            std::fs::create_dir(&dir).map_err(fail)?;
            journal.push(Done::MadeDir(dir));
        }
    }
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => remove_empty_dirs(&path, journal, step).map_err(fail)?,
        Ok(_) => {
            step(&path)?;
            match renameat_with(CWD, from, CWD, &path, RenameFlags::EXCHANGE) {
                Ok(()) => {
                    journal.push(Done::Swapped { path, write });
                    return Ok(());
                }
                // A file system that cannot swap: the old file aside, the new one in.
                Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
                    let dir = path.parent().unwrap_or(target);
                    let backup = temp(dir, |p| rename_noreplace(&path, p)).map_err(fail)?;
                    journal.push(Done::Aside {
                        path: path.clone(),
                        backup,
                    });
                }
                Err(e) => return Err(fail(e.into())),
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e)),
    }
    step(&path)?;
    rename_noreplace(from, &path).map_err(fail)?;
    journal.push(Done::Placed { path });
    Ok(())
}

/// Removes `dir` and the empty folders in it, deepest first, each a step.
fn remove_empty_dirs(
    dir: &Path,
    journal: &mut Vec<Done>,
    step: &mut dyn FnMut(&Path) -> Result<(), Error>,
) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_empty_dirs(&entry.path(), journal, step)?;
        }
    }
    let mode = std::fs::symlink_metadata(dir)?.permissions().mode() & 0o7777;
    step(dir).map_err(io::Error::other)?;
    std::fs::remove_dir(dir)?;
    journal.push(Done::RemovedDir {
        path: dir.to_path_buf(),
        mode,
    });
    Ok(())
}

/// Undoes the steps made, last first; what could not be put back, and where it is. A staged
/// name that holds an old file it could not swap back is kept.
fn undo(journal: Vec<Done>, staged: &mut Staged) -> Vec<String> {
    let mut lost = Vec::new();
    for done in journal.into_iter().rev() {
        let kept_at = |path: &Path, e: &dyn std::fmt::Display, at: &Path| {
            format!(
                "{} could not be put back ({e}); it is at {}",
                path.display(),
                at.display()
            )
        };
        let undone = match &done {
            Done::Aside { path, backup } => {
                rename_noreplace(backup, path).map_err(|e| kept_at(path, &e, backup))
            }
            Done::Swapped { path, write } => {
                let at = staged.path(*write).to_path_buf();
                renameat_with(CWD, &at, CWD, path, RenameFlags::EXCHANGE).map_err(|e| {
                    staged.keep(*write);
                    kept_at(path, &e, &at)
                })
            }
            Done::Placed { path } => std::fs::remove_file(path)
                .map_err(|e| format!("the new {} could not be removed: {e}", path.display())),
            Done::MadeDir(dir) => std::fs::remove_dir(dir)
                .map_err(|e| format!("the new folder {} could not be removed: {e}", dir.display())),
            Done::RemovedDir { path, mode } => std::fs::create_dir(path)
                .and_then(|()| {
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode))
                })
                .map_err(|e| format!("the folder {} could not be made again: {e}", path.display())),
        };
        if let Err(e) = undone {
            lost.push(e);
        }
    }
    lost
}

/// `rename`, refused when `to` exists (where the file system cannot say, checked first).
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Err(rustix::io::Errno::INVAL) => {
            if std::fs::symlink_metadata(to).is_ok() {
                return Err(io::ErrorKind::AlreadyExists.into());
            }
            std::fs::rename(from, to)
        }
        other => other.map_err(Into::into),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// Every path below `root` with its kind, full mode and content (or link target).
    fn snapshot(root: &Path) -> Vec<(String, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let rel = path.strip_prefix(root).unwrap().display().to_string();
                let body = if meta.file_type().is_symlink() {
                    std::fs::read_link(&path)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes()
                } else if meta.is_dir() {
                    stack.push(path.clone());
                    Vec::new()
                } else {
                    std::fs::read(&path).unwrap()
                };
                out.push((rel, std::os::unix::fs::MetadataExt::mode(&meta), body));
            }
        }
        out.sort();
        out
    }

    fn write(path: &Path, text: &str, mode: u32) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// The checkout before: a file to modify, one to delete, one to chmod, a link, a file
    /// that becomes a folder and a folder that becomes a file.
    fn checkout(root: &Path) {
        write(&root.join("a.txt"), "a\n", 0o644);
        write(&root.join("gone.txt"), "gone\n", 0o644);
        write(&root.join("run.sh"), "echo\n", 0o644);
        write(&root.join("private.txt"), "mine\n", 0o600);
        write(&root.join("was-file"), "file\n", 0o644);
        write(&root.join("was-dir/inner.txt"), "inner\n", 0o644);
        write(&root.join("z.txt"), "z\n", 0o644);
        symlink("a.txt", root.join("link")).unwrap();
    }

    /// What the agent made of it.
    fn agent(work: &Path) {
        write(&work.join("a.txt"), "a, changed\n", 0o644);
        std::fs::remove_file(work.join("gone.txt")).unwrap();
        write(&work.join("run.sh"), "echo\n", 0o4755);
        write(&work.join("new/deep/file.txt"), "new\n", 0o6755);
        std::fs::remove_file(work.join("was-file")).unwrap();
        write(&work.join("was-file/now-inside.txt"), "inside\n", 0o644);
        std::fs::remove_dir_all(work.join("was-dir")).unwrap();
        write(&work.join("was-dir"), "now a file\n", 0o700);
        write(&work.join("z.txt"), "z, changed\n", 0o1644);
        std::fs::remove_file(work.join("link")).unwrap();
        symlink("z.txt", work.join("link")).unwrap();
    }

    struct Fixture {
        _tmp: tempfile::TempDir,
        base: PathBuf,
        work: PathBuf,
        target: PathBuf,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let (base, work, target) = (
            tmp.path().join("base"),
            tmp.path().join("work"),
            tmp.path().join("target"),
        );
        for dir in [&base, &work, &target] {
            std::fs::create_dir(dir).unwrap();
            checkout(dir);
        }
        agent(&work);
        Fixture {
            _tmp: tmp,
            base,
            work,
            target,
        }
    }

    fn run(
        f: &Fixture,
        fail: &mut dyn FnMut(usize) -> io::Result<()>,
    ) -> Result<Vec<String>, Refused> {
        let changes = super::super::changes::between(&f.base, &f.work).unwrap();
        apply_with(
            &changes,
            &f.base,
            &f.work,
            &f.target,
            false,
            &|| false,
            fail,
        )
    }

    /// An apply of `changes` to the fixture's checkout with no step made to fail.
    fn apply_plain(
        f: &Fixture,
        changes: &[Change],
        force: bool,
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<String>, Refused> {
        apply_with(
            changes,
            &f.base,
            &f.work,
            &f.target,
            force,
            stop,
            &mut |_| Ok(()),
        )
    }

    #[test]
    fn a_failure_at_any_step_of_the_commit_leaves_the_checkout_as_it_was() {
        let mut at = 0;
        loop {
            let f = fixture();
            let before = snapshot(&f.target);
            let mut reached = false;
            let result = run(&f, &mut |n| {
                if n == at {
                    reached = true;
                    return Err(io::Error::other("injected"));
                }
                Ok(())
            });
            if !reached {
                // Past the last step: the whole apply.
                let notes = result.unwrap();
                let mut expected = snapshot(&f.work);
                for (path, mode, _) in &mut expected {
                    if !matches!(path.as_str(), "link") && *mode & 0o170000 == 0o100000 {
                        *mode = 0o100000 | if *mode & 0o111 != 0 { 0o755 } else { 0o644 };
                    }
                }
                // A file the copy did not change keeps its own mode.
                for (path, mode, _) in &mut expected {
                    if path == "private.txt" {
                        *mode = 0o100600;
                    }
                }
                assert_eq!(snapshot(&f.target), expected);
                assert_eq!(notes.len(), 3, "{notes:?}");
                assert!(
                    notes
                        .iter()
                        .any(|n| n
                            .starts_with("new/deep/file.txt: the setuid and setgid bits dropped")),
                    "{notes:?}"
                );
                assert!(
                    notes
                        .iter()
                        .any(|n| n.starts_with("run.sh: the setuid bit dropped")),
                    "{notes:?}"
                );
                assert!(
                    notes
                        .iter()
                        .any(|n| n.starts_with("z.txt: the sticky bit dropped")),
                    "{notes:?}"
                );
                assert!(at > 10, "only {at} steps");
                break;
            }
            let Err(refused @ Refused::Commit { .. }) = result else {
                panic!("step {at}: {result:?}");
            };
            let e = refused.to_string();
            assert!(
                e.contains("injected") && e.contains("nothing was changed"),
                "{e}"
            );
            assert_eq!(snapshot(&f.target), before, "after a failure at step {at}");
            at += 1;
        }
    }

    #[test]
    fn a_stop_while_staging_and_a_copy_changed_since_listed_apply_nothing() {
        let f = fixture();
        let before = snapshot(&f.target);
        let changes = super::super::changes::between(&f.base, &f.work).unwrap();
        let asked = std::cell::Cell::new(0);
        let stop = || {
            asked.set(asked.get() + 1);
            asked.get() > 2
        };
        let result = apply_plain(&f, &changes, false, &stop);
        assert!(matches!(&result, Err(Refused::Interrupted)), "{result:?}");
        assert_eq!(snapshot(&f.target), before);

        // The agent's file changes after the listing (same size): refused, nothing written.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(f.work.join("z.txt"), "Z, CHANGED\n").unwrap();
        let result = apply_plain(&f, &changes, false, &|| false);
        assert!(
            matches!(&result, Err(e @ Refused::ChangedInCopy(_)) if e.to_string().contains("z.txt changed in the copy")),
            "{result:?}"
        );
        assert_eq!(snapshot(&f.target), before);
    }

    #[test]
    fn a_folder_with_the_users_own_files_is_not_replaced_and_a_conflict_writes_nothing() {
        let f = fixture();
        write(&f.target.join("was-dir/users.txt"), "user\n", 0o644);
        let before = snapshot(&f.target);
        let changes = super::super::changes::between(&f.base, &f.work).unwrap();
        let result = apply_plain(&f, &changes, true, &|| false);
        assert!(
            matches!(&result, Err(e @ Refused::Blocked { .. }) if e.to_string().contains("was-dir/users.txt")),
            "{result:?}"
        );
        assert_eq!(snapshot(&f.target), before);

        std::fs::write(f.target.join("a.txt"), "the user's\n").unwrap();
        let before = snapshot(&f.target);
        let result = apply_plain(&f, &changes, false, &|| false);
        assert!(
            matches!(&result, Err(Refused::Conflicts(c)) if c.contains(&"a.txt".to_string())),
            "{result:?}"
        );
        assert_eq!(snapshot(&f.target), before);
    }
}
