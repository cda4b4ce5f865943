//! The sandbox's own `/tmp`.
//!
//! Programs write scratch files to `/tmp` by name, not only to `$TMPDIR` (compilers, test
//! suites, inspect's conformance checks). The host's `/tmp` cannot be handed to them: it
//! holds other users' and other projects' files, and what a command left there would
//! outlive the sandbox. So, in the server's mount namespace, `/tmp` becomes a fresh tmpfs
//! that starts empty, is writable, and goes away with the namespace.
//!
//! Worktrees often live under the host's `/tmp` (a test's temp folder, a harness's
//! per-sample checkout), and the new tmpfs hides them. Each allowed root beneath `/tmp` is
//! therefore opened before the tmpfs goes up and bound back at its own path afterwards, so
//! every path the host hands the server still names the same folder. The folders leading
//! to a root (`/tmp/abc` of `/tmp/abc/wt`) sit on a small tmpfs of their own that is made
//! read-only once the roots are in: nothing can be written beside the worktree, and no
//! folder on the way to it can be renamed (landlock's rule for `/tmp` would allow both).
//! A root given read-only is bound back read-only, for the same reason, together with
//! every mount the host has inside it.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::mount::{mount, read_only};
use super::{ConfineError, Confinement};

/// Where programs look for a scratch folder shared by everyone on the machine.
const TMP: &str = "/tmp";

/// A root beneath `/tmp`, held open while the tmpfs hides its path.
struct Kept {
    path: PathBuf,
    file: File,
    writable: bool,
}

/// Mounts the private `/tmp` and binds back every root beneath it. Returns the path to add
/// to landlock's writable rules, or `None` where there is no private `/tmp`: the machine
/// has no `/tmp`, or a root is `/tmp` itself or holds it (then the caller asked for it).
/// Runs in the new mount namespace, before anything else is mounted.
pub fn private_tmp(c: &Confinement) -> Result<Option<PathBuf>, ConfineError> {
    let Ok(tmp) = std::fs::canonicalize(TMP) else {
        return Ok(None);
    };
    let roots = c
        .writable
        .iter()
        .map(|p| (p, true))
        .chain(c.readable.iter().map(|p| (p, false)));
    if roots.clone().any(|(p, _)| tmp.starts_with(p)) {
        return Ok(None);
    }
    let kept = open_roots_beneath(&tmp, roots)?;
    let options = format!("size={},mode=1777", c.tmp_bytes);
    mount(
        Some("tmpfs".as_ref()),
        &tmp,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&options),
    )
    .map_err(|e| ConfineError::new("private /tmp", format!("{}: {e}", tmp.display())))?;
    let mut ways: Vec<PathBuf> = Vec::new();
    for root in &kept {
        bind_back(&tmp, root, &mut ways).map_err(|e| {
            ConfineError::new(
                "private /tmp",
                format!("cannot bind {} back: {e}", root.path.display()),
            )
        })?;
    }
    for way in &ways {
        read_only(way)
            .map_err(|e| ConfineError::new("private /tmp", format!("{}: {e}", way.display())))?;
    }
    Ok(Some(tmp))
}

/// The roots beneath `tmp`, outermost first, each opened (`O_PATH`) so that it can be
/// found once its path is hidden. A root inside another comes along with the outer one,
/// unless it is writable and the outer one is not: then it is bound again on top.
fn open_roots_beneath<'a>(
    tmp: &Path,
    roots: impl Iterator<Item = (&'a PathBuf, bool)>,
) -> Result<Vec<Kept>, ConfineError> {
    let mut beneath: Vec<(&PathBuf, bool)> = roots.filter(|(p, _)| p.starts_with(tmp)).collect();
    beneath.sort_by_key(|(p, _)| p.components().count());
    let mut kept: Vec<Kept> = Vec::new();
    for (path, writable) in beneath {
        if kept
            .iter()
            .any(|k| path.starts_with(&k.path) && (k.writable || !writable))
        {
            continue;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| {
                ConfineError::new(
                    "private /tmp",
                    format!("cannot open {}: {e}", path.display()),
                )
            })?;
        kept.push(Kept {
            path: path.clone(),
            file,
            writable,
        });
    }
    Ok(kept)
}

/// Makes `root`'s path again in the new `/tmp` and binds the folder it held there. The
/// first folder on the way (`/tmp/abc` of `/tmp/abc/wt`), unless an earlier root or way
/// made it, gets a small tmpfs of its own, recorded in `ways`, to be made read-only once
/// every root is back.
fn bind_back(tmp: &Path, root: &Kept, ways: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let relative = root.path.strip_prefix(tmp).unwrap_or(&root.path);
    let mut parts = relative.components();
    if let (Some(first), Some(_)) = (parts.next(), parts.next()) {
        let way = tmp.join(first);
        if !way.exists() {
            std::fs::DirBuilder::new().mode(0o755).create(&way)?;
            mount(
                Some("tmpfs".as_ref()),
                &way,
                Some("tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some("size=1m,mode=0755"),
            )?;
            ways.push(way);
        }
    }
    std::fs::DirBuilder::new()
        .mode(0o755)
        .recursive(true)
        .create(&root.path)?;
    let source = PathBuf::from(format!("/proc/self/fd/{}", root.file.as_raw_fd()));
    mount(
        Some(source.as_os_str()),
        &root.path,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )?;
    if !root.writable {
        read_only_tree(&root.path)?;
    }
    Ok(())
}

/// Makes the mount at `path` and every mount beneath it read-only. Beneath `/tmp` landlock
/// lets the sandbox write everything, so a mount the host has inside a read-only root (a
/// loop-mounted workspace, a bind) would otherwise be writable through it. One
/// `mount_setattr` with `AT_RECURSIVE` (Linux 5.12, older than landlock) covers the tree
/// at once and keeps each mount's other flags, locked or not.
fn read_only_tree(path: &Path) -> std::io::Result<()> {
    /// `struct mount_attr` of linux/mount.h, which libc does not carry.
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid C string and a `mount_attr` of the size passed, both outliving the
    // call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            libc::AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
