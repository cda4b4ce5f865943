//! What differs between two trees, file by file, and bringing those differences over to a
//! third: the checkout a copy was made from.
//!
//! Files are compared by kind (file or link), executable bit and a digest of the content,
//! so a binary file, a deletion, a rename (a deletion and an addition), a mode change and
//! a link's new target are all changes. `.git` at the top is left out on both sides.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde::Serialize;

/// One path's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    File { executable: bool, sha256: String },
    Link { target: String },
}

/// One path that differs.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub path: String,
    /// `added`, `deleted`, `modified` (content, or a link's target, or file ↔ link) or
    /// `mode` (only the executable bit).
    pub change: &'static str,
    #[serde(skip)]
    pub before: Option<Entry>,
    #[serde(skip)]
    pub after: Option<Entry>,
}

/// Every file and link below `root`, by relative path.
fn entries(root: &Path) -> Result<BTreeMap<String, Entry>, String> {
    let mut out = BTreeMap::new();
    let walk = ignore::WalkBuilder::new(root)
        .standard_filters(false)
        .filter_entry(|e| !(e.depth() == 1 && e.file_name() == ".git"))
        .build();
    for entry in walk {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", root.display()))?;
        let path = entry.path();
        let Some(kind) = entry.file_type() else {
            continue;
        };
        let rel = match path.strip_prefix(root) {
            Ok(r) if !r.as_os_str().is_empty() => r.to_string_lossy().into_owned(),
            _ => continue,
        };
        let read = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
        let state = if kind.is_symlink() {
            Entry::Link {
                target: std::fs::read_link(path)
                    .map_err(read)?
                    .to_string_lossy()
                    .into_owned(),
            }
        } else if kind.is_file() {
            let mode = std::fs::metadata(path).map_err(read)?.permissions().mode();
            Entry::File {
                executable: mode & 0o111 != 0,
                sha256: digest(path).map_err(read)?,
            }
        } else {
            continue;
        };
        out.insert(rel, state);
    }
    Ok(out)
}

/// What changed from `base` to `work`.
pub fn between(base: &Path, work: &Path) -> Result<Vec<Change>, String> {
    let (before, after) = (entries(base)?, entries(work)?);
    let paths: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let mut out = Vec::new();
    for path in paths {
        let (b, a) = (before.get(path), after.get(path));
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
            path: path.clone(),
            change,
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

/// The paths whose real state in `target` is no longer what was copied: applying over
/// them would lose someone's work.
pub fn conflicts(changes: &[Change], target: &Path) -> Vec<String> {
    changes
        .iter()
        .filter(|c| state_of(&target.join(&c.path)) != c.before)
        .map(|c| c.path.clone())
        .collect()
}

/// One path's state on disk now (`None`: absent, or a directory).
fn state_of(path: &Path) -> Option<Entry> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        return Some(Entry::Link {
            target: std::fs::read_link(path)
                .ok()?
                .to_string_lossy()
                .into_owned(),
        });
    }
    if !meta.is_file() {
        return None;
    }
    Some(Entry::File {
        executable: meta.permissions().mode() & 0o111 != 0,
        sha256: digest(path).ok()?,
    })
}

/// A file's SHA-256, read in pieces (a large file is not loaded whole).
fn digest(path: &Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
    }
    Ok(hash.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Makes each changed path in `target` what it is in `work`: deletions first (a file may
/// give way to a directory of the same name), then files and links, each written beside
/// its place and renamed over it, so no file is ever half-written.
pub fn apply(changes: &[Change], work: &Path, target: &Path) -> Result<(), String> {
    for c in changes.iter().filter(|c| c.after.is_none()) {
        let path = target.join(&c.path);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot delete {}: {e}", path.display())),
        }
    }
    for c in changes {
        let Some(after) = &c.after else { continue };
        let (from, to) = (work.join(&c.path), target.join(&c.path));
        let fail = |e: std::io::Error| format!("cannot write {}: {e}", to.display());
        let dir = to.parent().unwrap_or(target);
        std::fs::create_dir_all(dir).map_err(fail)?;
        let temp = dir.join(format!(
            ".runner-apply-{}-{}",
            std::process::id(),
            to.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        ));
        let _ = std::fs::remove_file(&temp);
        match after {
            Entry::Link { target: link } => {
                std::os::unix::fs::symlink(link, &temp).map_err(fail)?
            }
            // The copy keeps the file's permission bits, the executable one with them.
            Entry::File { .. } => {
                std::fs::copy(&from, &temp).map_err(fail)?;
            }
        }
        if let Err(e) = std::fs::rename(&temp, &to) {
            let _ = std::fs::remove_file(&temp);
            return Err(fail(e));
        }
    }
    Ok(())
}
