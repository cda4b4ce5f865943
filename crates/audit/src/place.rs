//! Where a trail file may be: never where the sandbox can write.
//!
//! The trail records what the walled commands did. A file they can reach they can also
//! truncate, or fill with lines that look like runner's: `--audit runner.jsonl` given in
//! the checkout put the record inside the very worktree the commands write. So each file
//! is located as the kernel will open it (the folder resolved through every symbolic link
//! and `..`), and refused when that lies under a place the sandbox writes: the worktree,
//! the folder copies of it are made in, any other writable folder the wall grants. A file
//! that is itself a symbolic link is refused too (what it points to can change after the
//! check), and so is one with other hard links (one of them may be in the worktree).
//!
//! Paths alone are not enough: a bind mount shows the worktree under a second name that no
//! link or `..` leads from, and no prefix of the worktree's path matches. What a bind mount
//! cannot change is the folder itself, the kernel's (device, inode) pair. So the trail's
//! folder and every folder above it are also compared, by that pair, with each writable
//! place: the worktree mounted anywhere, or a folder holding it mounted anywhere, is
//! recognised for what it is. (A folder *inside* the worktree mounted elsewhere has no
//! ancestor in common with it; only the mount table would tell.)

use std::path::{Component, Path, PathBuf};

use crate::AuditError;

/// A folder the sandbox can write, which no trail may be in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writable {
    pub dir: PathBuf,
    /// What it is, for the error: `the worktree`, `the folder --workspace copy makes its
    /// copies in`.
    pub what: String,
}

impl Writable {
    pub fn new(dir: impl Into<PathBuf>, what: impl Into<String>) -> Writable {
        Writable {
            dir: dir.into(),
            what: what.into(),
        }
    }
}

/// Where `file` really is (its folder resolved, relative to the current directory), or why
/// a trail may not go there.
pub fn check(file: &Path, writable: &[Writable]) -> Result<PathBuf, AuditError> {
    let absolute = match file.is_absolute() {
        true => file.to_path_buf(),
        false => std::env::current_dir()
            .map_err(|e| AuditError::open(file, e))?
            .join(file),
    };
    if absolute
        .symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink())
    {
        return Err(AuditError::Symlink {
            path: file.to_path_buf(),
        });
    }
    let name = match absolute.file_name() {
        Some(n)
            if !matches!(
                absolute.components().next_back(),
                Some(Component::ParentDir)
            ) =>
        {
            n
        }
        _ => {
            return Err(AuditError::NotAFile {
                path: file.to_path_buf(),
            });
        }
    };
    let dir = absolute.parent().unwrap_or(Path::new("/"));
    let resolved = resolve_dir(dir)
        .map_err(|e| AuditError::open(file, e))?
        .join(name);
    if let Some(area) = writable_area_of(&resolved, writable) {
        return Err(AuditError::Writable {
            path: file.to_path_buf(),
            resolved,
            area: area.clone(),
        });
    }
    if let Ok(meta) = resolved.symlink_metadata() {
        use std::os::unix::fs::MetadataExt;
        if !meta.is_file() {
            return Err(AuditError::NotAFile {
                path: file.to_path_buf(),
            });
        }
        if meta.nlink() > 1 {
            return Err(AuditError::Linked {
                path: file.to_path_buf(),
                links: meta.nlink(),
            });
        }
    }
    Ok(resolved)
}

/// The writable place `resolved` (a file, its folder resolved) lies in, by path or by the
/// identity of its folder or of one above it.
fn writable_area_of<'a>(resolved: &Path, writable: &'a [Writable]) -> Option<&'a Writable> {
    let by_path = writable.iter().find(|area| {
        // An area not made yet is compared where it will be.
        resolve_dir(&area.dir).is_ok_and(|inside| resolved.starts_with(inside))
    });
    by_path.or_else(|| {
        // A folder not made yet has no identity; the first existing one above it does, and
        // `create_dir_all` makes the rest inside it.
        let above: Vec<Identity> = resolved.ancestors().skip(1).filter_map(identity).collect();
        writable
            .iter()
            .find(|area| identity(&area.dir).is_some_and(|id| above.contains(&id)))
    })
}

/// A folder as the kernel knows it, whatever path reached it: (device, inode).
type Identity = (u64, u64);

fn identity(dir: &Path) -> Option<Identity> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// `dir` as the kernel will find it: its longest existing part canonical (every symbolic
/// link and `..` in it followed), the rest, which `create_dir_all` will make as real
/// folders, added by name.
fn resolve_dir(dir: &Path) -> std::io::Result<PathBuf> {
    let mut existing = dir.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        match std::fs::canonicalize(&existing) {
            Ok(real) => {
                let mut out = real;
                for name in rest.iter().rev() {
                    match name.to_str() {
                        Some("..") => {
                            out.pop();
                        }
                        Some(".") => {}
                        _ => out.push(name),
                    }
                }
                return Ok(out);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let last = existing.components().next_back();
                match (last, existing.parent()) {
                    (Some(c), Some(parent)) => {
                        rest.push(c.as_os_str().to_os_string());
                        existing = parent.to_path_buf();
                    }
                    _ => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Places {
        _tmp: tempfile::TempDir,
        worktree: PathBuf,
        outside: PathBuf,
    }

    fn places() -> Places {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let worktree = root.join("wt");
        let outside = root.join("logs");
        std::fs::create_dir_all(worktree.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        Places {
            _tmp: tmp,
            worktree,
            outside,
        }
    }

    fn walls(p: &Places) -> Vec<Writable> {
        vec![Writable::new(&p.worktree, "the worktree")]
    }

    fn refused(p: &Places, file: &Path) -> String {
        match check(file, &walls(p)) {
            Ok(at) => panic!("{} was let through as {}", file.display(), at.display()),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn every_spelling_of_a_place_in_the_worktree_is_refused() {
        let p = places();
        // Plain, deeper and not yet made, through `..`, through a link to the worktree.
        let e = refused(&p, &p.worktree.join("audit.jsonl"));
        assert!(e.contains("the worktree") && e.contains("outside"), "{e}");
        refused(&p, &p.worktree.join("new/deeper/audit.jsonl"));
        refused(&p, &p.outside.join("../wt/sub/../audit.jsonl"));
        refused(&p, &p.worktree.join("missing/../audit.jsonl"));
        let link = p.outside.join("to-wt");
        symlink(&p.worktree, &link).unwrap();
        let e = refused(&p, &link.join("audit.jsonl"));
        assert!(e.contains(&p.worktree.display().to_string()), "{e}");
        // A link inside pointing out: the folder it is in is the worktree's.
        let out = p.outside.join("real.jsonl");
        std::fs::write(&out, "").unwrap();
        symlink(&out, p.worktree.join("trail.jsonl")).unwrap();
        let e = refused(&p, &p.worktree.join("trail.jsonl"));
        assert!(e.contains("symbolic link"), "{e}");
        // A link outside pointing in, and a hard link to a file in the worktree.
        std::fs::write(p.worktree.join("inside.jsonl"), "").unwrap();
        symlink(
            p.worktree.join("inside.jsonl"),
            p.outside.join("points-in.jsonl"),
        )
        .unwrap();
        let e = refused(&p, &p.outside.join("points-in.jsonl"));
        assert!(e.contains("symbolic link"), "{e}");
        std::fs::hard_link(
            p.worktree.join("inside.jsonl"),
            p.outside.join("hard.jsonl"),
        )
        .unwrap();
        let e = refused(&p, &p.outside.join("hard.jsonl"));
        assert!(e.contains("2 names"), "{e}");
    }

    #[test]
    fn a_relative_name_is_where_the_current_folder_puts_it() {
        let p = places();
        // Tests share the process's current folder: it is read, never changed.
        let here = std::env::current_dir().unwrap();
        let walls = [Writable::new(&here, "the worktree")];
        assert!(check(Path::new("runner.jsonl"), &walls).is_err());
        assert!(check(Path::new("./a/../runner.jsonl"), &walls).is_err());
        assert_eq!(
            check(&p.outside.join("runner.jsonl"), &walls).unwrap(),
            p.outside.join("runner.jsonl")
        );
    }

    #[test]
    fn a_file_outside_is_kept_as_the_kernel_finds_it() {
        let p = places();
        let got = check(&p.worktree.join("../logs/./a/audit.jsonl"), &walls(&p)).unwrap();
        assert_eq!(got, p.outside.join("a/audit.jsonl"));
        // A folder holding the worktree is not inside it.
        let beside = p.worktree.parent().unwrap().join("wt-audit.jsonl");
        assert_eq!(check(&beside, &walls(&p)).unwrap(), beside);
        // A writable area not made yet is refused where it will be.
        let later = [Writable::new(p.outside.join("copies"), "copies")];
        assert!(check(&p.outside.join("copies/x.jsonl"), &later).is_err());
        assert!(check(&p.outside.join("x.jsonl"), &later).is_ok());
        assert!(
            check(&p.outside, &walls(&p)).is_err(),
            "a folder is no file"
        );
    }

    /// A bind mount of `from` at `at`, taken down when dropped, a failing test too.
    struct Bound(PathBuf);

    fn bind(from: &Path, at: &Path) -> Bound {
        std::fs::create_dir_all(at).unwrap();
        let out = std::process::Command::new("mount")
            .arg("--bind")
            .args([from, at])
            .output()
            .unwrap();
        assert!(out.status.success(), "mount --bind: {out:?}");
        Bound(at.to_path_buf())
    }

    impl Drop for Bound {
        fn drop(&mut self) {
            let out = std::process::Command::new("umount").arg(&self.0).output();
            if !out.as_ref().is_ok_and(|o| o.status.success()) {
                eprintln!("umount {}: {out:?}", self.0.display());
            }
        }
    }

    #[test]
    fn the_worktree_under_a_bind_mount_is_refused_and_another_mounted_folder_is_not() {
        let p = places();
        let walls = walls(&p);
        // The attack: the worktree itself, and a folder holding it, shown elsewhere.
        let at = p.outside.join("bm");
        let _wt = bind(&p.worktree, &at);
        let e = refused(&p, &at.join("trail.jsonl"));
        assert!(
            e.contains("the worktree") && e.contains("the sandbox can write"),
            "{e}"
        );
        refused(&p, &at.join("sub/trail.jsonl"));
        refused(&p, &at.join("not/made/yet/trail.jsonl"));
        let up = p.outside.join("up");
        let _up = bind(p.worktree.parent().unwrap(), &up);
        refused(&p, &up.join("wt/trail.jsonl"));
        // The controls: a plain folder outside, the folder above the worktree through the
        // same mount, and an outside folder mounted elsewhere are all kept.
        let kept = p.outside.join("trail.jsonl");
        assert_eq!(check(&kept, &walls).unwrap(), kept);
        let beside = up.join("wt-trail.jsonl");
        assert_eq!(check(&beside, &walls).unwrap(), beside);
        let mine = p.worktree.parent().unwrap().join("mine");
        std::fs::create_dir_all(&mine).unwrap();
        let shown = p.outside.join("shown");
        let _mine = bind(&mine, &shown);
        let there = shown.join("new/trail.jsonl");
        assert_eq!(check(&there, &walls).unwrap(), there);
    }
}
