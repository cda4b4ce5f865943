//! Resolving request paths beneath the allowed roots.
//!
//! Every path a request names is resolved by the kernel with `openat2(RESOLVE_BENEATH)`
//! relative to a directory descriptor of its root. A symlink inside the worktree that points
//! at `/etc/shadow` or `~/.ssh` therefore fails with `EXDEV` instead of being followed, even
//! in the `none` backend where nothing else stands in the way. A lexical prefix check alone
//! cannot do this: the escape is only visible once the links are read.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::sandbox::api::{ApiError, ErrorKind};

/// A root as the server is told about it on its command line.
#[derive(Debug, Clone)]
pub struct RootSpec {
    pub path: PathBuf,
    pub writable: bool,
}

impl std::str::FromStr for RootSpec {
    type Err = String;

    /// `PATH` or `PATH:ro` / `PATH:rw` (read-write is the default).
    fn from_str(s: &str) -> Result<Self, String> {
        let (path, writable) = match s.rsplit_once(':') {
            Some((p, "ro")) => (p, false),
            Some((p, "rw")) => (p, true),
            _ => (s, true),
        };
        if !Path::new(path).is_absolute() {
            return Err(format!("root {path:?} must be an absolute path"));
        }
        Ok(RootSpec {
            path: PathBuf::from(path),
            writable,
        })
    }
}

pub struct Root {
    /// The root as requests name it.
    pub path: PathBuf,
    /// The root with its own symlinks resolved; descriptors report paths in this form.
    pub real: PathBuf,
    pub dir: OwnedFd,
    pub writable: bool,
}

/// A path located beneath a root: the root and the normalised relative path (empty for the
/// root itself).
pub struct Located<'a> {
    pub root: &'a Root,
    pub rel: PathBuf,
}

impl Located<'_> {
    /// The path as requests name it.
    pub fn display(&self) -> PathBuf {
        self.root.path.join(&self.rel)
    }

    /// The relative path in the form `openat2` wants ("." for the root itself).
    pub fn rel_or_dot(&self) -> &Path {
        if self.rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &self.rel
        }
    }

    pub fn split_parent(&self) -> Result<(PathBuf, &OsStr), ApiError> {
        match (self.rel.parent(), self.rel.file_name()) {
            (Some(parent), Some(name)) => Ok((parent.to_path_buf(), name)),
            _ => Err(ApiError::at(
                ErrorKind::InvalidArgument,
                self.display(),
                format!(
                    "{} is the sandbox root itself, not a file",
                    self.display().display()
                ),
            )),
        }
    }
}

pub struct Roots {
    roots: Vec<Root>,
}

impl Roots {
    pub fn new(specs: &[RootSpec]) -> io::Result<Roots> {
        let mut roots = Vec::with_capacity(specs.len());
        for spec in specs {
            let dir = rustix::fs::open(
                &spec.path,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| {
                io::Error::new(
                    io::Error::from(e).kind(),
                    format!("cannot open sandbox root {}: {e}", spec.path.display()),
                )
            })?;
            let real = fd_path(&dir).unwrap_or_else(|_| spec.path.clone());
            roots.push(Root {
                path: normalize(&spec.path).unwrap_or_else(|| spec.path.clone()),
                real,
                dir,
                writable: spec.writable,
            });
        }
        // Longest first, so that a nested root wins over the root that contains it.
        roots.sort_by_key(|r| std::cmp::Reverse(r.path.as_os_str().len()));
        Ok(Roots { roots })
    }

    pub fn iter(&self) -> impl Iterator<Item = &Root> {
        self.roots.iter()
    }

    /// Finds the root a path lies under, lexically. `..` is applied lexically first, so
    /// `/work/tree/../secret` is outside `/work/tree`, as a user would read it.
    pub fn locate(&self, path: &Path) -> Result<Located<'_>, ApiError> {
        if !path.is_absolute() {
            return Err(ApiError::at(
                ErrorKind::InvalidArgument,
                path,
                format!("{} is not an absolute path", path.display()),
            ));
        }
        let normal = normalize(path).ok_or_else(|| outside(path))?;
        for root in &self.roots {
            for base in [&root.path, &root.real] {
                if let Ok(rel) = normal.strip_prefix(base) {
                    return Ok(Located {
                        root,
                        rel: rel.to_path_buf(),
                    });
                }
            }
        }
        Err(outside(path))
    }

    /// Opens a path beneath its root, following symlinks only while they stay beneath it.
    pub fn open(&self, path: &Path, flags: OFlags) -> Result<(OwnedFd, Located<'_>), ApiError> {
        let located = self.locate(path)?;
        let fd = open_beneath(&located, flags)?;
        Ok((fd, located))
    }

    /// The real path of a descriptor, reported as requests would name it (under the root's
    /// given path, not its resolved one).
    pub fn path_of(&self, fd: &OwnedFd) -> Result<PathBuf, ApiError> {
        let real = fd_path(fd)
            .map_err(|e| ApiError::new(ErrorKind::Io, format!("cannot resolve a path: {e}")))?;
        for root in &self.roots {
            if let Ok(rel) = real.strip_prefix(&root.real) {
                return Ok(root.path.join(rel));
            }
        }
        Ok(real)
    }
}

pub fn open_beneath(located: &Located<'_>, flags: OFlags) -> Result<OwnedFd, ApiError> {
    open_at_root(located.root, located.rel_or_dot(), flags)
        .map_err(|e| errno_error(e, &located.display(), located.root))
}

pub fn open_at_root(root: &Root, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    let how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    // EAGAIN means a concurrent rename raced the lookup; the kernel asks us to retry.
    let mut attempts = 0;
    loop {
        match rustix::fs::openat2(
            root.dir.as_fd(),
            rel,
            flags | OFlags::CLOEXEC,
            // openat2 refuses a mode unless it creates, and nothing here creates.
            Mode::empty(),
            how,
        ) {
            Err(Errno::AGAIN) if attempts < 16 => attempts += 1,
            other => return other,
        }
    }
}

/// Creates `rel` and its missing ancestors beneath the root, one component at a time, each
/// step resolved beneath the root so that a symlinked ancestor cannot redirect the creation.
pub fn mkdir_beneath(root: &Root, rel: &Path, display: &Path) -> Result<OwnedFd, ApiError> {
    let dir_flags = OFlags::DIRECTORY | OFlags::RDONLY;
    let mut current = open_at_root(root, Path::new("."), dir_flags)
        .map_err(|e| errno_error(e, &root.path, root))?;
    let mut prefix = PathBuf::new();
    for component in rel.components() {
        let Component::Normal(name) = component else {
            continue;
        };
        prefix.push(name);
        current = match open_at_root(root, &prefix, dir_flags) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                match rustix::fs::mkdirat(&current, name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(errno_error(e, &root.path.join(&prefix), root)),
                }
                open_at_root(root, &prefix, dir_flags)
                    .map_err(|e| errno_error(e, &root.path.join(&prefix), root))?
            }
            Err(e) => return Err(errno_error(e, display, root)),
        };
    }
    Ok(current)
}

/// Turns an errno from a beneath-resolution into an error that says what happened and why.
pub fn errno_error(e: Errno, path: &Path, root: &Root) -> ApiError {
    let p = path.display();
    let (kind, message) = match e {
        Errno::XDEV => (
            ErrorKind::SymlinkEscape,
            format!(
                "{p} resolves outside {} through a symlink; the sandbox does not follow links out of the worktree",
                root.path.display()
            ),
        ),
        Errno::LOOP => (
            ErrorKind::SymlinkEscape,
            format!(
                "{p}: too many levels of symlinks, or a /proc magic link, which the sandbox does not follow"
            ),
        ),
        Errno::NOENT => (ErrorKind::NotFound, format!("{p} does not exist")),
        Errno::NOTDIR => (
            ErrorKind::NotADirectory,
            format!("{p}: a component of the path is not a directory"),
        ),
        Errno::ISDIR => (ErrorKind::IsDirectory, format!("{p} is a directory")),
        Errno::ACCESS | Errno::PERM => (
            ErrorKind::PermissionDenied,
            format!("{p}: permission denied"),
        ),
        Errno::ROFS => (
            ErrorKind::ReadOnly,
            format!("{p} is on a read-only file system"),
        ),
        other => (ErrorKind::Io, format!("{p}: {}", io::Error::from(other))),
    };
    ApiError::at(kind, path, message)
}

fn outside(path: &Path) -> ApiError {
    ApiError::at(
        ErrorKind::OutsideRoots,
        path,
        format!(
            "{} is outside the directories this sandbox can reach (the worktree); work inside the worktree",
            path.display()
        ),
    )
}

/// Applies `.` and `..` lexically. `None` when `..` climbs above `/`.
pub fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() || out.as_os_str().is_empty() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
            Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// The path the kernel has for a descriptor. Used to learn where a beneath-resolution with
/// symlinks actually landed.
pub fn fd_path(fd: &OwnedFd) -> io::Result<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn roots_for(dir: &Path) -> Roots {
        Roots::new(&[RootSpec {
            path: dir.to_path_buf(),
            writable: true,
        }])
        .unwrap()
    }

    #[test]
    fn normalize_applies_dots_lexically() {
        assert_eq!(
            normalize(Path::new("/a/./b/../c")),
            Some(PathBuf::from("/a/c"))
        );
        assert_eq!(normalize(Path::new("/a/..")), Some(PathBuf::from("/")));
        assert_eq!(normalize(Path::new("/..")), None);
    }

    #[test]
    fn dotdot_out_of_the_root_is_outside() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path().join("wt");
        std::fs::create_dir(&wt).unwrap();
        let roots = roots_for(&wt);
        let err = roots.locate(&wt.join("../secret")).err().unwrap();
        assert_eq!(err.kind, ErrorKind::OutsideRoots);
        assert!(roots.locate(&wt.join("a/../b")).is_ok());
    }

    #[test]
    fn symlink_inside_is_followed_symlink_out_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path().join("wt");
        std::fs::create_dir_all(wt.join("real")).unwrap();
        std::fs::write(wt.join("real/f.txt"), "in").unwrap();
        std::fs::write(tmp.path().join("secret"), "out").unwrap();
        symlink("real", wt.join("alias")).unwrap();
        symlink(tmp.path().join("secret"), wt.join("escape")).unwrap();
        symlink("../secret", wt.join("relative_escape")).unwrap();
        symlink("/proc/self/root/etc/passwd", wt.join("magic")).unwrap();
        let roots = roots_for(&wt);

        let (fd, _) = roots.open(&wt.join("alias/f.txt"), OFlags::RDONLY).unwrap();
        assert_eq!(roots.path_of(&fd).unwrap(), wt.join("real/f.txt"));

        for name in ["escape", "relative_escape", "magic"] {
            let err = roots.open(&wt.join(name), OFlags::RDONLY).err().unwrap();
            assert_eq!(
                err.kind,
                ErrorKind::SymlinkEscape,
                "{name}: {}",
                err.message
            );
            assert!(err.message.contains("symlink"), "{}", err.message);
        }
    }

    #[test]
    fn mkdir_beneath_refuses_to_create_through_an_escaping_ancestor() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path().join("wt");
        let outside_dir = tmp.path().join("outside");
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::create_dir_all(&outside_dir).unwrap();
        symlink(&outside_dir, wt.join("link")).unwrap();
        let roots = roots_for(&wt);
        let located = roots.locate(&wt.join("link/new/deeper")).unwrap();
        let err = mkdir_beneath(located.root, &located.rel, &located.display())
            .err()
            .unwrap();
        assert_eq!(err.kind, ErrorKind::SymlinkEscape);
        assert!(!outside_dir.join("new").exists());

        let located = roots.locate(&wt.join("a/b/c")).unwrap();
        mkdir_beneath(located.root, &located.rel, &located.display()).unwrap();
        assert!(wt.join("a/b/c").is_dir());
    }
}
