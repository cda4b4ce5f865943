//! The file operations of the sandbox API: read, write, stat, list, remove, rename.
//!
//! Each resolves its paths through [`Roots`], so no operation can be talked into touching a
//! file outside the roots by a symlink. Writes are atomic (a temporary file in the same
//! directory, then `rename`), so a crash or a full disk never leaves a user's file half
//! written.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::roots::{Roots, errno_error, mkdir_beneath, open_at_root, open_beneath};
use runner_protocol::{
    ApiError, DirEntry, ErrorKind, FileKind, FileStamp, ReadRequest, ReadResponse, Stat,
    WritePrecondition, WriteRequest, WriteResponse,
};

// The casts are no-ops on x86_64 but not on every target's `stat`.
#[allow(clippy::unnecessary_cast)]
fn stamp_of(st: &rustix::fs::Stat) -> FileStamp {
    FileStamp {
        mtime_ns: st.st_mtime as i64 * 1_000_000_000 + st.st_mtime_nsec as i64,
        size: st.st_size as u64,
        ino: st.st_ino,
    }
}

fn kind_of(st: &rustix::fs::Stat) -> FileKind {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => FileKind::File,
        FileType::Directory => FileKind::Dir,
        FileType::Symlink => FileKind::Symlink,
        _ => FileKind::Other,
    }
}

fn fstat(fd: &OwnedFd, path: &Path) -> Result<rustix::fs::Stat, ApiError> {
    rustix::fs::fstat(fd).map_err(|e| {
        ApiError::at(
            ErrorKind::Io,
            path,
            format!("cannot stat {}: {e}", path.display()),
        )
    })
}

/// Reads a regular file. A read is often the first look at a path (the `read` tool sends
/// no `stat` before it), so what is there is looked at through an `O_PATH` descriptor
/// first: a device, socket or pipe is refused without being opened for reading (opening
/// one can act: a FIFO waits for a writer, some devices do something on open).
pub fn read(roots: &Roots, req: &ReadRequest) -> Result<ReadResponse, ApiError> {
    let (probe, located) = roots.open(&req.path, OFlags::PATH)?;
    let display = located.display();
    only_files(&fstat(&probe, &display)?, &display)?;
    drop(probe);
    // O_NONBLOCK, and the kind checked again: a FIFO swapped in since the look cannot
    // hang the server.
    let fd = open_beneath(&located, OFlags::RDONLY | OFlags::NONBLOCK)?;
    let st = fstat(&fd, &display)?;
    only_files(&st, &display)?;
    let size = st.st_size as u64;
    let want = req.max_bytes.min(size.saturating_sub(req.offset)) as usize;
    let mut data = vec![0u8; want];
    let file = File::from(fd);
    let mut filled = 0;
    while filled < want {
        match file.read_at(&mut data[filled..], req.offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(ApiError::at(
                    ErrorKind::Io,
                    &display,
                    format!("cannot read {}: {e}", display.display()),
                ));
            }
        }
    }
    data.truncate(filled);
    Ok(ReadResponse {
        data,
        size,
        stamp: stamp_of(&st),
    })
}

/// A read's refusal of anything but a regular file: a directory (which the caller may list
/// instead) and anything else, each with its own kind.
fn only_files(st: &rustix::fs::Stat, display: &Path) -> Result<(), ApiError> {
    match kind_of(st) {
        FileKind::File => Ok(()),
        FileKind::Dir => Err(ApiError::at(
            ErrorKind::IsDirectory,
            display,
            format!("{} is a directory, not a file", display.display()),
        )),
        _ => Err(ApiError::at(
            ErrorKind::NotAFile,
            display,
            format!(
                "{} is not a regular file (a device, socket or pipe)",
                display.display()
            ),
        )),
    }
}

pub fn stat(roots: &Roots, path: &Path) -> Result<Stat, ApiError> {
    let (fd, located) = roots.open(path, OFlags::PATH)?;
    let st = fstat(&fd, &located.display())?;
    Ok(Stat {
        real_path: roots.path_of(&fd)?,
        kind: kind_of(&st),
        stamp: stamp_of(&st),
        mode: st.st_mode & 0o7777,
    })
}

pub fn list(roots: &Roots, path: &Path) -> Result<Vec<DirEntry>, ApiError> {
    let (fd, located) = roots.open(path, OFlags::RDONLY | OFlags::DIRECTORY)?;
    let display = located.display();
    let io_err = |e: rustix::io::Errno| {
        ApiError::at(
            ErrorKind::Io,
            &display,
            format!("cannot list {}: {e}", display.display()),
        )
    };
    let dir = rustix::fs::Dir::read_from(&fd).map_err(io_err)?;
    let mut entries = Vec::new();
    for entry in dir {
        let entry = entry.map_err(io_err)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::RegularFile => FileKind::File,
            FileType::Directory => FileKind::Dir,
            // A link counts as what it points to, if that stays beneath the root.
            _ => match open_at_root(located.root, &located.rel.join(&name), OFlags::PATH)
                .ok()
                .and_then(|fd| rustix::fs::fstat(&fd).ok())
            {
                Some(st) => kind_of(&st),
                None => FileKind::Symlink,
            },
        };
        entries.push(DirEntry { name, kind });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

pub fn write(roots: &Roots, req: &WriteRequest) -> Result<WriteResponse, ApiError> {
    let located = roots.locate(&req.path)?;
    let display = located.display();
    if !located.root.writable {
        return Err(ApiError::at(
            ErrorKind::ReadOnly,
            &display,
            format!(
                "{} is in a read-only part of the sandbox",
                display.display()
            ),
        ));
    }
    located.split_parent()?;

    // Where the bytes go: through a symlink that stays beneath the root, to its target, as
    // an editor would; a dangling or absent path is created as a regular file.
    let existing = match open_beneath(&located, OFlags::PATH) {
        Ok(fd) => Some(fd),
        Err(e) if e.kind == ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let (target, old) = match &existing {
        Some(fd) => {
            let st = fstat(fd, &display)?;
            if kind_of(&st) == FileKind::Dir {
                return Err(ApiError::at(
                    ErrorKind::IsDirectory,
                    &display,
                    format!("{} is a directory, not a file", display.display()),
                ));
            }
            let real = roots.path_of(fd)?;
            (roots.locate(&real)?, Some(st))
        }
        None => (located, None),
    };
    check_precondition(req.precondition, old.as_ref(), &display)?;

    let (parent_rel, name) = target.split_parent()?;
    let parent = mkdir_beneath(target.root, &parent_rel, &display)?;
    let mode = old.as_ref().map(|st| st.st_mode & 0o7777);

    let tmp_name = format!(
        ".{}.runner-{}-{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let tmp_fd = rustix::fs::openat(
        &parent,
        tmp_name.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode.unwrap_or(0o666)),
    )
    .map_err(|e| errno_error(e, &display, target.root))?;
    let result = fill_and_commit(
        &parent,
        tmp_fd,
        &tmp_name,
        name,
        mode,
        req,
        &display,
        old.as_ref(),
    );
    if result.is_err() {
        let _ = rustix::fs::unlinkat(&parent, tmp_name.as_str(), AtFlags::empty());
    }
    result.map(|stamp| WriteResponse {
        stamp,
        created: old.is_none(),
    })
}

#[allow(clippy::too_many_arguments)]
fn fill_and_commit(
    parent: &OwnedFd,
    tmp_fd: OwnedFd,
    tmp_name: &str,
    name: &std::ffi::OsStr,
    mode: Option<u32>,
    req: &WriteRequest,
    display: &Path,
    old: Option<&rustix::fs::Stat>,
) -> Result<FileStamp, ApiError> {
    let io_err = |what: &str, e: std::io::Error| {
        ApiError::at(
            ErrorKind::Io,
            display,
            format!(
                "cannot {what} {}: {e}; the file was left unchanged",
                display.display()
            ),
        )
    };
    if let Some(mode) = mode {
        // The umask narrowed the creation mode; the file keeps the mode it had.
        rustix::fs::fchmod(&tmp_fd, Mode::from_raw_mode(mode))
            .map_err(|e| io_err("set the mode of", e.into()))?;
    }
    let mut file = File::from(tmp_fd);
    file.write_all(&req.data).map_err(|e| io_err("write", e))?;
    file.sync_data().map_err(|e| io_err("sync", e))?;

    // The file may have changed while we wrote; look once more right before replacing it.
    if old.is_some() || matches!(req.precondition, Some(WritePrecondition::Absent)) {
        let now = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).ok();
        check_precondition(req.precondition, now.as_ref(), display)?;
    }
    rustix::fs::renameat(parent, tmp_name, parent, name)
        .map_err(|e| io_err("replace", e.into()))?;
    let st = rustix::fs::fstat(file.as_fd()).map_err(|e| io_err("stat", e.into()))?;
    Ok(stamp_of(&st))
}

fn check_precondition(
    precondition: Option<WritePrecondition>,
    current: Option<&rustix::fs::Stat>,
    display: &Path,
) -> Result<(), ApiError> {
    match (precondition, current) {
        (None, _) => Ok(()),
        (Some(WritePrecondition::Absent), None) => Ok(()),
        (Some(WritePrecondition::Absent), Some(_)) => Err(ApiError::at(
            ErrorKind::AlreadyExists,
            display,
            format!("{} already exists", display.display()),
        )),
        (Some(WritePrecondition::Unchanged(_)), None) => Err(ApiError::at(
            ErrorKind::Stale,
            display,
            format!("{} was deleted since it was last read", display.display()),
        )),
        (Some(WritePrecondition::Unchanged(expected)), Some(st)) => {
            if stamp_of(st) == expected {
                Ok(())
            } else {
                Err(ApiError::at(
                    ErrorKind::Stale,
                    display,
                    format!(
                        "{} has been modified since it was last read",
                        display.display()
                    ),
                ))
            }
        }
    }
}

/// Removes a file or symlink (never a directory: no tool needs a recursive delete, and a
/// bash `rm -r` goes through the permission rules instead).
pub fn remove(roots: &Roots, path: &Path) -> Result<(), ApiError> {
    let located = roots.locate(path)?;
    let display = located.display();
    if !located.root.writable {
        return Err(ApiError::at(
            ErrorKind::ReadOnly,
            &display,
            format!(
                "{} is in a read-only part of the sandbox",
                display.display()
            ),
        ));
    }
    let (parent_rel, name) = located.split_parent()?;
    let parent = open_at_root(
        located.root,
        dot(&parent_rel),
        OFlags::DIRECTORY | OFlags::RDONLY,
    )
    .map_err(|e| errno_error(e, &display, located.root))?;
    let st = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| errno_error(e, &display, located.root))?;
    if kind_of(&st) == FileKind::Dir {
        return Err(ApiError::at(
            ErrorKind::IsDirectory,
            &display,
            format!(
                "{} is a directory; only files can be removed",
                display.display()
            ),
        ));
    }
    rustix::fs::unlinkat(&parent, name, AtFlags::empty())
        .map_err(|e| errno_error(e, &display, located.root))
}

/// Renames a file; the destination's missing directories are created.
pub fn rename(roots: &Roots, from: &Path, to: &Path) -> Result<(), ApiError> {
    let src = roots.locate(from)?;
    let dst = roots.locate(to)?;
    for l in [&src, &dst] {
        if !l.root.writable {
            return Err(ApiError::at(
                ErrorKind::ReadOnly,
                l.display(),
                format!(
                    "{} is in a read-only part of the sandbox",
                    l.display().display()
                ),
            ));
        }
    }
    let (src_parent_rel, src_name) = src.split_parent()?;
    let (dst_parent_rel, dst_name) = dst.split_parent()?;
    let src_parent = open_at_root(
        src.root,
        dot(&src_parent_rel),
        OFlags::DIRECTORY | OFlags::RDONLY,
    )
    .map_err(|e| errno_error(e, &src.display(), src.root))?;
    let dst_parent = mkdir_beneath(dst.root, &dst_parent_rel, &dst.display())?;
    if let Ok(st) = rustix::fs::statat(&dst_parent, dst_name, AtFlags::SYMLINK_NOFOLLOW)
        && kind_of(&st) == FileKind::Dir
    {
        return Err(ApiError::at(
            ErrorKind::IsDirectory,
            dst.display(),
            format!("{} is a directory", dst.display().display()),
        ));
    }
    rustix::fs::renameat(&src_parent, src_name, &dst_parent, dst_name)
        .map_err(|e| errno_error(e, &src.display(), src.root))
}

fn dot(rel: &Path) -> &Path {
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roots::RootSpec;
    use std::os::unix::fs::{PermissionsExt, symlink};

    struct Fixture {
        _tmp: tempfile::TempDir,
        outside: std::path::PathBuf,
        wt: std::path::PathBuf,
        roots: Roots,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path().join("wt");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "top secret").unwrap();
        let roots = Roots::new(&[RootSpec {
            path: wt.clone(),
            writable: true,
        }])
        .unwrap();
        Fixture {
            _tmp: tmp,
            outside,
            wt,
            roots,
        }
    }

    fn write_req(
        path: &Path,
        data: &[u8],
        precondition: Option<WritePrecondition>,
    ) -> WriteRequest {
        WriteRequest {
            path: path.to_path_buf(),
            data: data.to_vec(),
            precondition,
        }
    }

    #[test]
    fn write_is_atomic_keeps_mode_and_leaves_no_temp_files() {
        let f = fixture();
        let path = f.wt.join("script.sh");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let resp = write(&f.roots, &write_req(&path, b"new\r\n\0bytes", None)).unwrap();
        assert!(!resp.created);
        assert_eq!(std::fs::read(&path).unwrap(), b"new\r\n\0bytes");
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o755
        );
        let names: Vec<_> = std::fs::read_dir(&f.wt)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("script.sh")]);
    }

    #[test]
    fn write_creates_parents_and_reports_creation() {
        let f = fixture();
        let path = f.wt.join("a/b/c.txt");
        let resp = write(
            &f.roots,
            &write_req(&path, b"x", Some(WritePrecondition::Absent)),
        )
        .unwrap();
        assert!(resp.created);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "x");
        let err = write(
            &f.roots,
            &write_req(&path, b"y", Some(WritePrecondition::Absent)),
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::AlreadyExists);
    }

    #[test]
    fn stale_precondition_refuses_and_keeps_the_file() {
        let f = fixture();
        let path = f.wt.join("f.txt");
        std::fs::write(&path, "v1").unwrap();
        let read1 = read(
            &f.roots,
            &ReadRequest {
                path: path.clone(),
                offset: 0,
                max_bytes: 100,
            },
        )
        .unwrap();
        std::fs::write(&path, "v2 changed behind our back").unwrap();
        let err = write(
            &f.roots,
            &write_req(
                &path,
                b"v3",
                Some(WritePrecondition::Unchanged(read1.stamp)),
            ),
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Stale);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "v2 changed behind our back"
        );
    }

    #[test]
    fn write_through_an_escaping_symlink_is_refused_and_the_target_untouched() {
        let f = fixture();
        symlink(f.outside.join("secret"), f.wt.join("link")).unwrap();
        symlink(&f.outside, f.wt.join("dirlink")).unwrap();
        for p in [
            f.wt.join("link"),
            f.wt.join("dirlink/new.txt"),
            f.wt.join("dirlink/secret"),
        ] {
            let err = write(&f.roots, &write_req(&p, b"pwned", None)).unwrap_err();
            assert_eq!(
                err.kind,
                ErrorKind::SymlinkEscape,
                "{}: {}",
                p.display(),
                err.message
            );
        }
        assert_eq!(
            std::fs::read_to_string(f.outside.join("secret")).unwrap(),
            "top secret"
        );
        assert!(!f.outside.join("new.txt").exists());
    }

    #[test]
    fn write_through_an_inner_symlink_updates_the_target() {
        let f = fixture();
        std::fs::write(f.wt.join("AGENTS.md"), "old").unwrap();
        symlink("AGENTS.md", f.wt.join("CLAUDE.md")).unwrap();
        write(&f.roots, &write_req(&f.wt.join("CLAUDE.md"), b"new", None)).unwrap();
        assert_eq!(
            std::fs::read_to_string(f.wt.join("AGENTS.md")).unwrap(),
            "new"
        );
        assert!(
            std::fs::symlink_metadata(f.wt.join("CLAUDE.md"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn read_in_pieces_and_refuses_escapes_and_fifos() {
        let f = fixture();
        let path = f.wt.join("big");
        std::fs::write(&path, b"0123456789").unwrap();
        let r = read(
            &f.roots,
            &ReadRequest {
                path: path.clone(),
                offset: 4,
                max_bytes: 3,
            },
        )
        .unwrap();
        assert_eq!((r.data.as_slice(), r.size), (&b"456"[..], 10));

        symlink(f.outside.join("secret"), f.wt.join("s")).unwrap();
        let err = read(
            &f.roots,
            &ReadRequest {
                path: f.wt.join("s"),
                offset: 0,
                max_bytes: 99,
            },
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::SymlinkEscape);

        rustix::fs::mknodat(
            rustix::fs::CWD,
            f.wt.join("fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let err = read(
            &f.roots,
            &ReadRequest {
                path: f.wt.join("fifo"),
                offset: 0,
                max_bytes: 9,
            },
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotAFile);
    }

    #[test]
    fn list_reports_kinds_following_only_inner_links() {
        let f = fixture();
        std::fs::create_dir(f.wt.join("sub")).unwrap();
        std::fs::write(f.wt.join("file"), "").unwrap();
        symlink("sub", f.wt.join("sublink")).unwrap();
        symlink(&f.outside, f.wt.join("outlink")).unwrap();
        let entries = list(&f.roots, &f.wt).unwrap();
        let got: Vec<_> = entries.iter().map(|e| (e.name.as_str(), e.kind)).collect();
        assert_eq!(
            got,
            vec![
                ("file", FileKind::File),
                ("outlink", FileKind::Symlink),
                ("sub", FileKind::Dir),
                ("sublink", FileKind::Dir)
            ]
        );
    }

    #[test]
    fn remove_and_rename_stay_beneath_the_root() {
        let f = fixture();
        std::fs::write(f.wt.join("a"), "a").unwrap();
        rename(&f.roots, &f.wt.join("a"), &f.wt.join("x/y/b")).unwrap();
        assert_eq!(std::fs::read_to_string(f.wt.join("x/y/b")).unwrap(), "a");
        symlink(&f.outside, f.wt.join("out")).unwrap();
        let err = rename(&f.roots, &f.wt.join("x/y/b"), &f.wt.join("out/b")).unwrap_err();
        assert_eq!(err.kind, ErrorKind::SymlinkEscape);
        let err = remove(&f.roots, &f.wt.join("out/secret")).unwrap_err();
        assert_eq!(err.kind, ErrorKind::SymlinkEscape);
        assert!(f.outside.join("secret").exists());
        remove(&f.roots, &f.wt.join("x/y/b")).unwrap();
        assert!(!f.wt.join("x/y/b").exists());
        let err = remove(&f.roots, &f.wt.join("x")).unwrap_err();
        assert_eq!(err.kind, ErrorKind::IsDirectory);
    }
}
