//! What differs between two trees, file by file, and bringing those differences over to a
//! third: the checkout a copy was made from.
//!
//! Files are compared by kind (file or link), executable bit and a digest of the content,
//! so a binary file, a deletion, a rename (a deletion and an addition), a mode change and
//! a link's new target are all changes. Every `.git` is left out on both sides.
//!
//! The copy is the agent's, so nothing in it is trusted while applying: names are kept as
//! the bytes they are (two names that only look alike stay two), a file is opened without
//! following links and must still hash to what was reviewed, and nothing is written
//! through a link in the checkout, even with `--force`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

/// One path's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    File {
        executable: bool,
        sha256: String,
    },
    Link {
        target: PathBuf,
    },
    /// A directory where a file was expected (only ever seen in the checkout).
    Dir,
}

/// One path that differs.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    /// For people and JSON; `rel` is the path itself.
    pub path: String,
    /// `added`, `deleted`, `modified` (content, or a link's target, or file ↔ link) or
    /// `mode` (only the executable bit).
    pub change: &'static str,
    #[serde(skip)]
    pub rel: PathBuf,
    #[serde(skip)]
    pub before: Option<Entry>,
    #[serde(skip)]
    pub after: Option<Entry>,
}

/// Every file and link below `root`, by relative path.
fn entries(root: &Path) -> Result<BTreeMap<PathBuf, Entry>, String> {
    let mut out = BTreeMap::new();
    for entry in super::walk(root) {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", root.display()))?;
        let rel = match entry.path().strip_prefix(root) {
            Ok(r) if !r.as_os_str().is_empty() => r.to_path_buf(),
            _ => continue,
        };
        if let Some(state) = state_of(entry.path()).filter(|s| *s != Entry::Dir) {
            out.insert(rel, state);
        }
    }
    Ok(out)
}

/// What changed from `base` to `work`.
pub fn between(base: &Path, work: &Path) -> Result<Vec<Change>, String> {
    let (before, after) = (entries(base)?, entries(work)?);
    let paths: std::collections::BTreeSet<&PathBuf> = before.keys().chain(after.keys()).collect();
    let mut out = Vec::new();
    for rel in paths {
        let (b, a) = (before.get(rel), after.get(rel));
        let change = match (b, a) {
            (None, Some(_)) => "added",
            (Some(_), None) => "deleted",
            (Some(x), Some(y)) if x == y => continue,
            (Some(Entry::File { sha256: s1, .. }), Some(Entry::File { sha256: s2, .. }))
                if s1 == s2 =>
            {
                "mode"
            }
            _ => "modified",
        };
        out.push(Change {
            path: rel.to_string_lossy().into_owned(),
            change,
            rel: rel.clone(),
            before: b.cloned(),
            after: a.cloned(),
        });
    }
    Ok(out)
}

/// The changes as a git-style patch (text hunks; binary files, renames and modes named).
pub fn patch(base: &Path, work: &Path) -> Result<String, String> {
    let (b, w) = (
        super::diff::Snapshot::from_dir(base)?,
        super::diff::Snapshot::from_dir(work)?,
    );
    Ok(super::diff::diff(&b, &w))
}

/// Paths that cannot be applied at all, whatever `--force` says: a path that is not plainly
/// below the checkout, or one whose way there in the checkout goes through a link.
pub fn unsafe_paths(changes: &[Change], target: &Path) -> Vec<String> {
    changes
        .iter()
        .filter(|c| !plainly_below(target, &c.rel))
        .map(|c| c.path.clone())
        .collect()
}

fn plainly_below(target: &Path, rel: &Path) -> bool {
    let mut at = target.to_path_buf();
    let parts: Vec<Component> = rel.components().collect();
    if parts.is_empty() || !parts.iter().all(|p| matches!(p, Component::Normal(_))) {
        return false;
    }
    for part in &parts[..parts.len() - 1] {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => return false,
            Ok(m) if !m.is_dir() => return false,
            Ok(_) => {}
            // What does not exist yet is made by the apply, as a directory.
            Err(_) => return true,
        }
    }
    true
}

/// The paths whose real state in `target` is neither what was copied nor already what the
/// copy holds: applying over them would lose someone's work.
pub fn conflicts(changes: &[Change], target: &Path) -> Vec<String> {
    changes
        .iter()
        .filter(|c| {
            let now = state_of(&target.join(&c.rel));
            now != c.before && now != c.after
        })
        .map(|c| c.path.clone())
        .collect()
}

/// One path's state on disk now (`None`: absent).
fn state_of(path: &Path) -> Option<Entry> {
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
    Some(Entry::File {
        executable: meta.permissions().mode() & 0o111 != 0,
        sha256: digest(&mut open_plain(path).ok()?, None).ok()?,
    })
}

/// Opens a file without following a link at its last component.
fn open_plain(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// A file's SHA-256, read in pieces (a large file is not loaded whole), copying it to
/// `sink` on the way.
fn digest(
    file: &mut std::fs::File,
    mut sink: Option<&mut std::fs::File>,
) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        if let Some(out) = sink.as_deref_mut() {
            out.write_all(&buf[..n])?;
        }
    }
    Ok(hash.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Makes each changed path in `target` what it is in `work`: deletions first (a file may
/// give way to a directory of the same name), then files and links, each written beside
/// its place and renamed over it, so no file is ever half-written. A path already as the
/// copy has it is left alone (an apply that stopped half-way can be run again).
pub fn apply(changes: &[Change], work: &Path, target: &Path) -> Result<(), String> {
    let refused = unsafe_paths(changes, target);
    if !refused.is_empty() {
        return Err(format!(
            "not applied: these paths lead through a link or out of {}: {}",
            target.display(),
            refused.join(", ")
        ));
    }
    for c in changes.iter().filter(|c| c.after.is_none()) {
        let path = target.join(&c.rel);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot delete {}: {e}", path.display())),
        }
    }
    for c in changes {
        let Some(after) = &c.after else { continue };
        let to = target.join(&c.rel);
        if state_of(&to).as_ref() == Some(after) {
            continue;
        }
        let fail = |e: &dyn std::fmt::Display| format!("cannot write {}: {e}", to.display());
        let dir = to.parent().unwrap_or(target);
        std::fs::create_dir_all(dir).map_err(|e| fail(&e))?;
        let temp = tempfile::Builder::new()
            .prefix(".runner-apply-")
            .make_in(dir, |p| match after {
                Entry::Link { target: link } => std::os::unix::fs::symlink(link, p),
                _ => Ok(()),
            })
            .map_err(|e| fail(&e))?;
        if let Entry::File { executable, sha256 } = after {
            // Opened without following a link, and hashed as it is copied: what lands in
            // the checkout is exactly what was reviewed, or nothing.
            let from = work.join(&c.rel);
            let mut src = open_plain(&from).map_err(|e| fail(&e))?;
            let mut out = std::fs::File::create(temp.path()).map_err(|e| fail(&e))?;
            let got = digest(&mut src, Some(&mut out)).map_err(|e| fail(&e))?;
            if got != *sha256 {
                return Err(format!(
                    "not applied: {} changed in the copy after it was reviewed; look again with `runner changes`",
                    c.path
                ));
            }
            let mode = src.metadata().map_err(|e| fail(&e))?.permissions().mode() & 0o7777;
            let mode = if *executable {
                mode | 0o100
            } else {
                mode & !0o111
            };
            std::fs::set_permissions(temp.path(), std::fs::Permissions::from_mode(mode))
                .map_err(|e| fail(&e))?;
        }
        temp.persist(&to).map_err(|e| fail(&e.error))?;
    }
    Ok(())
}
