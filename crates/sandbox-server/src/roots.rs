//! Resolving request paths beneath the allowed roots.
//!
//! Every path a request names is resolved relative to a directory descriptor of its root,
//! beneath it: by the kernel with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` where it
//! has that call, else by [`walk`], which gives the same guarantees one component at a time.
//! A symlink inside the worktree that points at `/etc/shadow` or `~/.ssh` therefore fails
//! with `EXDEV` instead of being followed, even in the `none` backend where nothing else
//! stands in the way. A lexical prefix check alone cannot do this: the escape is only
//! visible once the links are read.
//!
//! `openat2` came with Linux 5.6; older kernels (RHEL 8, older LTS releases) and gVisor
//! (`runsc`), which does not implement it, answer `ENOSYS`. [`Resolver::chosen`] probes once,
//! at the server's start. `RUNNER_RESOLVE=walk` (or `openat2`) forces one: a switch for
//! tests and diagnosis, so that both resolvers face the same attacks on a kernel that has
//! both.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use runner_protocol::{ApiError, ErrorKind};

/// A root as the server is told about it on its command line.
#[derive(Debug, Clone)]
pub struct RootSpec {
    pub path: PathBuf,
    pub writable: bool,
}

/// A `--root` that is not an absolute path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("root {0:?} must be an absolute path")]
pub struct RelativeRoot(pub String);

impl std::str::FromStr for RootSpec {
    type Err = RelativeRoot;

    /// `PATH` or `PATH:ro` / `PATH:rw` (read-write is the default).
    fn from_str(s: &str) -> Result<Self, RelativeRoot> {
        let (path, writable) = match s.rsplit_once(':') {
            Some((p, "ro")) => (p, false),
            Some((p, "rw")) => (p, true),
            _ => (s, true),
        };
        if !Path::new(path).is_absolute() {
            return Err(RelativeRoot(path.to_string()));
        }
        Ok(RootSpec {
            path: PathBuf::from(path),
            writable,
        })
    }
}

/// How paths are resolved beneath a root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// The kernel's `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`.
    Openat2,
    /// [`walk`]: a component at a time with `O_PATH | O_NOFOLLOW`, for kernels without
    /// `openat2` (before 5.6) and gVisor.
    Walk,
}

/// The variable that forces a resolver (`walk` or `openat2`); for tests and diagnosis.
pub const RESOLVE_VAR: &str = "RUNNER_RESOLVE";

impl Resolver {
    /// The resolver of this process, chosen at its first use (the server's start):
    /// [`RESOLVE_VAR`] if set, else `openat2` when the kernel has it, else the walk.
    pub fn chosen() -> Resolver {
        Resolver::choose(None)
    }

    /// [`Resolver::chosen`], with `forced` (`walk`, `openat2`: the server's `--resolve`)
    /// winning over the variable, when this is the first call.
    pub fn choose(forced: Option<&str>) -> Resolver {
        static CHOSEN: OnceLock<Resolver> = OnceLock::new();
        *CHOSEN.get_or_init(|| {
            match forced
                .map(str::to_string)
                .or_else(|| std::env::var(RESOLVE_VAR).ok())
                .as_deref()
            {
                Some("walk") => Resolver::Walk,
                Some("openat2") => Resolver::Openat2,
                _ => Resolver::detect(),
            }
        })
    }

    /// The `--resolve` flags that pass this process's [`RESOLVE_VAR`] on to a server it
    /// starts (whose environment is not this one's).
    pub fn forward_args() -> Vec<std::ffi::OsString> {
        match std::env::var(RESOLVE_VAR).as_deref() {
            Ok(v @ ("walk" | "openat2")) => vec!["--resolve".into(), v.into()],
            _ => Vec::new(),
        }
    }

    /// `openat2` if the kernel answers it, else the walk. `ENOSYS`: no such call (before
    /// 5.6, gVisor); `EPERM`: a seccomp profile that predates it (older container engines).
    pub fn detect() -> Resolver {
        match rustix::fs::openat2(
            rustix::fs::CWD,
            "/",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH,
        ) {
            Err(Errno::NOSYS) | Err(Errno::PERM) => Resolver::Walk,
            _ => Resolver::Openat2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Resolver::Openat2 => "openat2",
            Resolver::Walk => "walk",
        }
    }
}

pub struct Root {
    /// The root as requests name it.
    pub path: PathBuf,
    /// The root with its own symlinks resolved; descriptors report paths in this form.
    pub real: PathBuf,
    pub dir: OwnedFd,
    pub writable: bool,
    pub resolver: Resolver,
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
        Roots::with_resolver(specs, Resolver::chosen())
    }

    pub fn with_resolver(specs: &[RootSpec], resolver: Resolver) -> io::Result<Roots> {
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
                resolver,
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
    match root.resolver {
        Resolver::Openat2 => openat2_beneath(root.dir.as_fd(), rel, flags),
        Resolver::Walk => {
            let mut attempts = 0;
            loop {
                match walk(root.dir.as_fd(), rel, flags) {
                    Err(Errno::AGAIN) if attempts < 16 => attempts += 1,
                    other => return other,
                }
            }
        }
    }
}

fn openat2_beneath(dir: BorrowedFd<'_>, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    let how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    // EAGAIN means a concurrent rename raced the lookup; the kernel asks us to retry.
    let mut attempts = 0;
    loop {
        match rustix::fs::openat2(
            dir,
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

/// The kernel's limit on symlinks followed in one lookup (`MAXSYMLINKS`).
const MAX_SYMLINKS: usize = 40;
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// Opens `rel` beneath `dir` as `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` would,
/// without it: one component at a time, each opened `O_PATH | O_NOFOLLOW` relative to the
/// descriptor of the directory before it, so no path string is ever resolved twice and a
/// symlink swapped in mid-walk is seen as a symlink, not followed. The same answers as the
/// kernel's:
///
/// - `..` goes back to the descriptor the walk came through (never the kernel's `..`);
///   above `dir` it is `EXDEV`;
/// - a symlink's target is read (`readlinkat` on the link itself) and walked in its place,
///   relative to the directory holding it; an absolute target is `EXDEV`;
/// - more than 40 links is `ELOOP`, and so is any symlink on procfs (`/proc/self/fd/N`,
///   `/proc/PID/root`, … the magic links whose targets are not paths);
/// - the last component is opened with the caller's flags plus `O_NOFOLLOW`; a link there
///   is followed unless the caller asked for `O_NOFOLLOW` itself.
pub fn walk(dir: BorrowedFd<'_>, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    if rel.as_os_str().is_empty() {
        return Err(Errno::NOENT);
    }
    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_front(&mut pending, rel.as_os_str());
    // The directories walked through, from `dir` (the bottom, never popped) down.
    let mut stack: Vec<OwnedFd> = Vec::new();
    let mut links = 0;
    fn top<'a>(dir: BorrowedFd<'a>, stack: &'a [OwnedFd]) -> BorrowedFd<'a> {
        stack.last().map_or(dir, |fd| fd.as_fd())
    }
    let caller_nofollow = flags.contains(OFlags::NOFOLLOW);
    loop {
        let Some(name) = pending.pop_front() else {
            // Nothing left: the walk ends on a directory (`.`, `a/..`, the root itself).
            return rustix::fs::openat(
                top(dir, &stack),
                ".",
                flags | OFlags::CLOEXEC,
                Mode::empty(),
            );
        };
        if name.is_empty() || name == "." {
            continue;
        }
        if name == ".." {
            if stack.pop().is_none() {
                return Err(Errno::XDEV);
            }
            continue;
        }
        // A trailing `/` became a `.` (see `push_front`), so `f/` is not the last and must
        // be a directory, as for the kernel.
        let last = pending.iter().all(|n| n.is_empty());
        // What the last component's own open said, when it met a link there.
        let mut refusal = None;
        if last {
            // The real open, never following a link: a link here (ELOOP; ENOTDIR with
            // O_DIRECTORY; or, with O_PATH, a descriptor of the link itself) is read and
            // walked below.
            match rustix::fs::openat(
                top(dir, &stack),
                &name,
                flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) if caller_nofollow => return Ok(fd),
                Ok(fd) => {
                    if !is_symlink(&fd)? {
                        return Ok(fd);
                    }
                    // Swapped back between the two opens: the kernel's answer to a race.
                    refusal = Some(Errno::AGAIN);
                }
                Err(e @ (Errno::LOOP | Errno::NOTDIR)) if !caller_nofollow => refusal = Some(e),
                Err(e) => return Err(e),
            }
        }
        let fd = rustix::fs::openat(
            top(dir, &stack),
            &name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let st = rustix::fs::fstat(&fd)?;
        match rustix::fs::FileType::from_raw_mode(st.st_mode) {
            rustix::fs::FileType::Symlink => {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(Errno::LOOP);
                }
                // Magic links have no path to walk; RESOLVE_NO_MAGICLINKS refuses them.
                let fs = rustix::fs::fstatfs(&fd)?;
                if fs.f_type as i64 == PROC_SUPER_MAGIC {
                    return Err(Errno::LOOP);
                }
                let target = rustix::fs::readlinkat(&fd, "", Vec::new())?;
                let target = OsStr::from_bytes(target.as_bytes());
                if target.as_bytes().first() == Some(&b'/') {
                    return Err(Errno::XDEV);
                }
                push_front(&mut pending, target);
            }
            // Not a link after all: the last open's error stands (ENOTDIR for a file
            // opened as a directory; ELOOP or EAGAIN if a link was swapped out meanwhile).
            _ if refusal.is_some() => return Err(refusal.unwrap_or(Errno::AGAIN)),
            rustix::fs::FileType::Directory => stack.push(fd),
            _ => return Err(Errno::NOTDIR),
        }
    }
}

fn is_symlink(fd: &OwnedFd) -> Result<bool, Errno> {
    let st = rustix::fs::fstat(fd)?;
    Ok(rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink)
}

/// Puts the components of `path` at the front of `pending`, in order; a trailing `/` as a
/// `.`, which makes what comes before it a directory the walk must go through.
fn push_front(pending: &mut VecDeque<OsString>, path: &OsStr) {
    let bytes = path.as_bytes();
    if bytes.len() > 1 && bytes.ends_with(b"/") {
        pending.push_front(".".into());
    }
    for part in bytes.split(|b| *b == b'/').rev() {
        pending.push_front(OsStr::from_bytes(part).to_os_string());
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

    const BOTH: [Resolver; 2] = [Resolver::Openat2, Resolver::Walk];

    fn roots_with(dir: &Path, resolver: Resolver) -> Roots {
        Roots::with_resolver(
            &[RootSpec {
                path: dir.to_path_buf(),
                writable: true,
            }],
            resolver,
        )
        .unwrap()
    }

    fn roots_for(dir: &Path) -> Roots {
        roots_with(dir, Resolver::chosen())
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
        for resolver in BOTH {
            let roots = roots_with(&wt, resolver);

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
    }

    #[test]
    fn mkdir_beneath_refuses_to_create_through_an_escaping_ancestor() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path().join("wt");
        let outside_dir = tmp.path().join("outside");
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::create_dir_all(&outside_dir).unwrap();
        symlink(&outside_dir, wt.join("link")).unwrap();
        for resolver in BOTH {
            let roots = roots_with(&wt, resolver);
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

    /// Where each resolver lands (device and inode), or the errno it refuses with.
    fn landing(
        dir: BorrowedFd<'_>,
        r: Resolver,
        rel: &str,
        flags: OFlags,
    ) -> Result<(u64, u64), Errno> {
        let fd = match r {
            Resolver::Openat2 => openat2_beneath(dir, Path::new(rel), flags),
            Resolver::Walk => walk(dir, Path::new(rel), flags),
        }?;
        let st = rustix::fs::fstat(&fd)?;
        Ok((st.st_dev, st.st_ino))
    }

    /// The walk answers exactly as the kernel's openat2 does, path by path, on a tree of
    /// every kind of link: inside, out (absolute and by `..`), chains, loops, dangling,
    /// through files, and `..` at every depth.
    #[test]
    fn the_walk_lands_where_openat2_does() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path();
        let wt = base.join("wt");
        std::fs::create_dir_all(wt.join("a/b/c")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(base.join("outside/secret"), "out").unwrap();
        std::fs::write(wt.join("a/b/f"), "in").unwrap();
        std::fs::write(wt.join("top"), "top").unwrap();
        for (link, to) in [
            ("l_in", "a/b"),
            ("a/l_up", ".."),
            ("a/b/l_upup", "../.."),
            ("a/b/l_out", "../../../outside/secret"),
            ("l_abs", "/etc/passwd"),
            ("l_abs_in", wt.join("top").to_str().unwrap()),
            ("l_dot", "."),
            ("l_chain1", "l_chain2"),
            ("l_chain2", "a/l_up/top"),
            ("l_loop1", "l_loop2"),
            ("l_loop2", "l_loop1"),
            ("l_self", "l_self/x"),
            ("l_dangling", "nowhere"),
            ("l_file_dir", "top/x"),
            ("a/b/c/l_root", "../../.."),
            ("a/b/c/l_past", "../../../.."),
            ("l_proc", "/proc/self/root"),
        ] {
            symlink(to, wt.join(link)).unwrap();
        }
        let paths = [
            ".",
            "",
            "a",
            "a/b/f",
            "a/b/../../top",
            "..",
            "a/../..",
            "a/b/c/../../../..",
            "l_in/f",
            "l_in/../b/f",
            "a/l_up/top",
            "a/l_up/..",
            "a/b/l_upup/top",
            "a/b/l_upup/..",
            "a/b/l_out",
            "l_abs",
            "l_abs_in",
            "l_dot/top",
            "l_dot/..",
            "l_chain1",
            "l_loop1",
            "l_self",
            "l_dangling",
            "l_file_dir",
            "top/x",
            "a/b/c/l_root/top",
            "a/b/c/l_past",
            "a/b/c/l_past/wt/top",
            "l_proc",
            "missing/x",
            "a//b///f",
            "./a/./b/f",
            "a/b/f/",
        ];
        let flag_sets = [
            OFlags::RDONLY,
            OFlags::PATH,
            OFlags::PATH | OFlags::NOFOLLOW,
            OFlags::RDONLY | OFlags::NOFOLLOW,
            OFlags::DIRECTORY | OFlags::RDONLY,
            OFlags::WRONLY,
        ];
        let root = rustix::fs::open(&wt, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let mut checked = 0;
        for path in paths {
            for flags in flag_sets {
                let kernel = landing(root.as_fd(), Resolver::Openat2, path, flags);
                let walked = landing(root.as_fd(), Resolver::Walk, path, flags);
                assert_eq!(walked, kernel, "{path:?} with {flags:?}");
                checked += 1;
            }
        }
        // A few that must be refused, whatever else agrees.
        for (path, errno) in [
            ("a/b/l_out", Errno::XDEV),
            ("l_abs", Errno::XDEV),
            ("..", Errno::XDEV),
            ("a/b/c/l_past", Errno::XDEV),
            ("l_loop1", Errno::LOOP),
        ] {
            assert_eq!(
                landing(root.as_fd(), Resolver::Walk, path, OFlags::RDONLY),
                Err(errno),
                "{path}"
            );
        }
        assert!(checked > 100);
    }

    /// Magic links (`/proc/self/root`, `/proc/self/fd/N`, `/proc/self/cwd`) are refused
    /// with ELOOP by both, even when procfs itself is the root they walk beneath.
    #[test]
    fn magic_links_are_refused_by_both() {
        let proc_self = rustix::fs::open(
            "/proc/self",
            OFlags::PATH | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        for r in BOTH {
            for path in ["root/etc/passwd", "cwd", "fd/0", "exe", "root"] {
                assert_eq!(
                    landing(proc_self.as_fd(), r, path, OFlags::RDONLY),
                    Err(Errno::LOOP),
                    "{r:?} {path}"
                );
            }
            // Plain files of procfs are fine.
            assert!(
                landing(proc_self.as_fd(), r, "status", OFlags::RDONLY).is_ok(),
                "{r:?}"
            );
        }
    }

    /// A directory swapped for a symlink out of the worktree, over and over, while the
    /// resolver walks through it: whatever it opens is inside, never the secret.
    #[test]
    fn a_symlink_swap_racing_the_walk_never_lands_outside() {
        use std::sync::atomic::{AtomicBool, Ordering};
        for r in BOTH {
            let tmp = tempfile::tempdir().unwrap();
            let base = tmp.path().to_path_buf();
            let wt = base.join("wt");
            std::fs::create_dir_all(base.join("outside")).unwrap();
            std::fs::write(base.join("outside/f"), "SECRET").unwrap();
            std::fs::create_dir_all(wt.join("real")).unwrap();
            std::fs::write(wt.join("real/f"), "inside").unwrap();
            symlink("real", wt.join("d")).unwrap();
            let stop = std::sync::Arc::new(AtomicBool::new(false));
            let swapper = {
                let (wt, base, stop) = (wt.clone(), base.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let tmp_link = wt.join(format!("t{n}"));
                        let to = if n.is_multiple_of(2) {
                            base.join("outside")
                        } else {
                            PathBuf::from("real")
                        };
                        let _ = symlink(&to, &tmp_link);
                        let _ = std::fs::rename(&tmp_link, wt.join("d"));
                        // A relative way out too: `d` -> `../outside`.
                        let tmp_link = wt.join(format!("u{n}"));
                        let _ = symlink("../outside", &tmp_link);
                        let _ = std::fs::rename(&tmp_link, wt.join("d"));
                        n += 1;
                    }
                })
            };
            let roots = roots_with(&wt, r);
            let (mut inside, mut refused) = (0, 0);
            for _ in 0..3000 {
                match roots.open(&wt.join("d/f"), OFlags::RDONLY) {
                    Ok((fd, _)) => {
                        let mut buf = [0u8; 16];
                        let n = rustix::io::read(&fd, &mut buf).unwrap();
                        assert_eq!(&buf[..n], b"inside", "{r:?} read outside the root");
                        inside += 1;
                    }
                    Err(e) => {
                        assert!(
                            matches!(e.kind, ErrorKind::SymlinkEscape | ErrorKind::NotFound),
                            "{r:?}: {e:?}"
                        );
                        refused += 1;
                    }
                }
            }
            stop.store(true, Ordering::Relaxed);
            swapper.join().unwrap();
            assert!(
                refused > 0,
                "{r:?}: the race never showed ({inside} inside)"
            );
        }
    }

    #[test]
    fn the_switch_names_a_resolver() {
        assert_eq!(
            Resolver::detect(),
            Resolver::Openat2,
            "this kernel has openat2"
        );
        assert_eq!(Resolver::Walk.name(), "walk");
    }
}
