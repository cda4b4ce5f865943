//! What differs between two trees, file by file, and whether a third (the checkout a copy
//! was made from) still holds what the first did.
//!
//! Files are compared by kind (file or link), mode (the executable bit and any special bit,
//! [`super::leaf::review_mode`]) and content, so a binary file, a deletion, a rename (a
//! deletion and an addition), a mode change and a link's new target are all changes. Every
//! `.git` is left out on both sides.
//!
//! Memory stays bounded whatever the trees hold: the two trees are walked side by side, one
//! directory at a time, and only the changed paths are kept. Content is compared only where
//! the sizes agree (a new file, or one whose size changed, is a change without reading it),
//! and then by a digest read in pieces ([`super::content`]), computed once per file and only
//! when asked for.

use std::cell::OnceCell;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::content::{self, Digest, Stamp};
use super::leaf::{Leaf, review_mode};
use crate::Error;

/// One path's state.
#[derive(Debug, Clone)]
pub enum Entry {
    File(FileEntry),
    Link {
        target: PathBuf,
    },
    /// A directory (only ever a change's side as the checkout holds it).
    Dir,
}

/// A regular file as it was found.
#[derive(Debug, Clone)]
pub struct FileEntry {
    /// [`review_mode`]: 0o644 or 0o755, with the special bits the file has.
    pub mode: u32,
    pub size: u64,
    /// Which state of the file this describes: its digest is of that state or not taken.
    pub(crate) stamp: Stamp,
    digest: OnceCell<Digest>,
}

impl FileEntry {
    /// The mode an apply gives the file: 0o644 or 0o755, never a special bit.
    pub fn applied_mode(&self) -> u32 {
        self.mode & 0o777
    }

    /// The digest of the file at `path`, which this entry was read from (taken once).
    pub(crate) fn digest(&self, path: &Path) -> Result<Digest, Error> {
        if let Some(d) = self.digest.get() {
            return Ok(*d);
        }
        let d = content::digest_at(path, &self.stamp).map_err(Error::io("read", path))?;
        Ok(*self.digest.get_or_init(|| d))
    }

    /// Records the digest of this state, known from a copy of it.
    pub(crate) fn knows(&self, digest: Digest) {
        let _ = self.digest.set(digest);
    }

    pub(crate) fn known_digest(&self) -> Option<Digest> {
        self.digest.get().copied()
    }
}

impl Entry {
    /// How the patch names it; a directory is not part of a patch.
    pub(crate) fn leaf(&self) -> Option<Leaf> {
        match self {
            Entry::File(f) => Some(Leaf::File {
                mode: f.mode,
                size: f.size,
            }),
            Entry::Link { target } => Some(Leaf::Link(target.to_string_lossy().into_owned())),
            Entry::Dir => None,
        }
    }
}

/// Whether two files hold the same bytes: sizes first, digests only when they agree.
pub(crate) fn same_content(
    a: &FileEntry,
    a_path: &Path,
    b: &FileEntry,
    b_path: &Path,
) -> Result<bool, Error> {
    Ok(a.size == b.size && (a.size == 0 || a.digest(a_path)? == b.digest(b_path)?))
}

/// Whether `a` (at `a_path`) is `b` (at `b_path`): the same kind, mode and content; two
/// absent paths are the same. `as_applied` compares `b` as an apply writes it.
pub(crate) fn same(
    a: Option<&Entry>,
    a_path: &Path,
    b: Option<&Entry>,
    b_path: &Path,
    as_applied: bool,
) -> Result<bool, Error> {
    Ok(match (a, b) {
        (None, None) => true,
        (Some(Entry::File(x)), Some(Entry::File(y))) => {
            let mode = if as_applied { y.applied_mode() } else { y.mode };
            x.mode == mode && same_content(x, a_path, y, b_path)?
        }
        (Some(Entry::Link { target: x }), Some(Entry::Link { target: y })) => x == y,
        (Some(Entry::Dir), Some(Entry::Dir)) => true,
        _ => false,
    })
}

/// One path that differs.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    /// For people and JSON; `rel` is the path itself.
    pub path: String,
    /// `added`, `deleted`, `modified` (content, or a link's target, or file ↔ link) or
    /// `mode` (only the mode: the executable bit or a special bit).
    pub change: &'static str,
    #[serde(skip)]
    pub rel: PathBuf,
    #[serde(skip)]
    pub before: Option<Entry>,
    #[serde(skip)]
    pub after: Option<Entry>,
}

/// What changed from `base` to `work`, in path order (a path before what is below it).
pub fn between(base: &Path, work: &Path) -> Result<Vec<Change>, Error> {
    let mut out = Vec::new();
    compare_dirs((base, work), (true, true), Path::new(""), &mut out, false)?;
    Ok(out)
}

/// Whether anything changed from `base` to `work`: [`between`], stopping at the first
/// change (a copy with changes is told from one without without reading all of it).
pub fn any_between(base: &Path, work: &Path) -> Result<bool, Error> {
    let mut out = Vec::new();
    compare_dirs((base, work), (true, true), Path::new(""), &mut out, true)?;
    Ok(!out.is_empty())
}

/// Compares the folder `rel` of both trees (`present`: whether it is a folder on each side);
/// with `first`, only until one change is found.
fn compare_dirs(
    roots: (&Path, &Path),
    present: (bool, bool),
    rel: &Path,
    out: &mut Vec<Change>,
    first: bool,
) -> Result<(), Error> {
    let mut names = children(&roots.0.join(rel), present.0)?;
    names.extend(children(&roots.1.join(rel), present.1)?);
    names.sort_unstable();
    names.dedup();
    for name in names {
        let rel = rel.join(name);
        let (b_path, w_path) = (roots.0.join(&rel), roots.1.join(&rel));
        let before = present.0.then(|| state_of(&b_path)).flatten();
        let after = present.1.then(|| state_of(&w_path)).flatten();
        let is_dir = |e: &Option<Entry>| matches!(e, Some(Entry::Dir));
        let dirs = (is_dir(&before), is_dir(&after));
        let before = before.filter(|_| !dirs.0);
        let after = after.filter(|_| !dirs.1);
        let change = match (&before, &after) {
            (None, None) => None,
            (None, Some(_)) => Some("added"),
            (Some(_), None) => Some("deleted"),
            (Some(Entry::File(x)), Some(Entry::File(y))) => {
                match (same_content(x, &b_path, y, &w_path)?, x.mode == y.mode) {
                    (true, true) => None,
                    (true, false) => Some("mode"),
                    (false, _) => Some("modified"),
                }
            }
            (Some(x), Some(y)) => {
                (!same(Some(x), &b_path, Some(y), &w_path, false)?).then_some("modified")
            }
        };
        if let Some(change) = change {
            out.push(Change {
                path: rel.to_string_lossy().into_owned(),
                change,
                rel: rel.clone(),
                before,
                after,
            });
        }
        if dirs.0 || dirs.1 {
            compare_dirs(roots, dirs, &rel, out, first)?;
        }
        if first && !out.is_empty() {
            return Ok(());
        }
    }
    Ok(())
}

/// The names in a folder but `.git`, in byte order (none when it is not `present`).
fn children(dir: &Path, present: bool) -> Result<Vec<OsString>, Error> {
    if !present {
        return Ok(Vec::new());
    }
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(Error::io("read", dir))? {
        let name = entry.map_err(Error::io("read", dir))?.file_name();
        // A `.git` anywhere (a submodule's, or one the agent made) is not a change: its
        // config and hooks would run on the host.
        if name != ".git" {
            names.push(name);
        }
    }
    names.sort_unstable();
    Ok(names)
}

/// The paths whose real state in `target` is neither what was copied nor what the copy
/// holds (as it is, or as an apply writes it): applying over them would lose someone's work.
pub fn conflicts(
    changes: &[Change],
    base: &Path,
    work: &Path,
    target: &Path,
) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    for c in changes {
        let here = target.join(&c.rel);
        let now = state_of(&here);
        let (b, w) = (base.join(&c.rel), work.join(&c.rel));
        // A folder the copy replaced with a file, still a folder here: its files are
        // changes of their own, checked one by one.
        let still_folder =
            matches!(now, Some(Entry::Dir)) && matches!(state_of(&b), Some(Entry::Dir));
        let kept = still_folder
            || same(now.as_ref(), &here, c.before.as_ref(), &b, false)?
            || same(now.as_ref(), &here, c.after.as_ref(), &w, false)?
            || same(now.as_ref(), &here, c.after.as_ref(), &w, true)?;
        if !kept {
            out.push(c.path.clone());
        }
    }
    Ok(out)
}

/// One path's state on disk now (`None`: absent, or neither a file, a link nor a folder).
pub(crate) fn state_of(path: &Path) -> Option<Entry> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        return Some(Entry::Link {
            target: std::fs::read_link(path).ok()?,
        });
    }
    if meta.is_dir() {
        return Some(Entry::Dir);
    }
    if !meta.is_file() {
        return None;
    }
    Some(Entry::File(FileEntry {
        mode: review_mode(meta.permissions().mode()),
        size: meta.len(),
        stamp: Stamp::of(&meta),
        digest: OnceCell::new(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `any_between` agrees with `between` on whether anything changed, a change deep in
    /// a folder or only in the mode included.
    #[test]
    fn any_between_finds_what_between_finds() {
        let tmp = tempfile::tempdir().unwrap();
        let (base, work) = (tmp.path().join("base"), tmp.path().join("work"));
        for root in [&base, &work] {
            std::fs::create_dir_all(root.join("a/b")).unwrap();
            std::fs::write(root.join("a/b/c.txt"), "same\n").unwrap();
            std::fs::write(root.join("z.txt"), "same\n").unwrap();
        }
        assert!(between(&base, &work).unwrap().is_empty());
        assert!(!any_between(&base, &work).unwrap());
        std::fs::write(work.join("a/b/c.txt"), "diff\n").unwrap();
        assert!(any_between(&base, &work).unwrap());
        std::fs::write(work.join("a/b/c.txt"), "same\n").unwrap();
        assert!(!any_between(&base, &work).unwrap());
        std::fs::set_permissions(work.join("z.txt"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        assert!(any_between(&base, &work).unwrap());
        assert_eq!(between(&base, &work).unwrap()[0].change, "mode");
    }
}
