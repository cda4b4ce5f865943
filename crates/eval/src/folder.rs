//! Reading a task's folder without leaving it.
//!
//! A task set is downloaded from the internet: its folders are untrusted input. A link in
//! one (`tests -> ~/.ssh`, `instruction.md -> ~/.aws/credentials`, `environment -> /`) would
//! otherwise carry the host's files into the task container, the prompt or an image. So
//! every file runner takes from a task is opened relative to a descriptor of the task's
//! folder, beneath it, by the same resolver the sandbox server uses for its roots
//! (`openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, or the component-by-component walk
//! where the kernel lacks it). A link that stays inside is followed when a file is read,
//! and kept as a link when a tree is packed or copied; one that leaves the folder makes an
//! [`FolderError::Outside`] that names it. A lexical check could not do this: where a link
//! lands is only known once every link on the way is read.

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use runner_sandbox_server::roots::{self, Resolver, Root};

/// Whether there is anything at `path` itself, a link included (not followed): whether a
/// folder is a task of one layout or the other is decided by a name being there, whatever
/// it is.
pub fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// A task's folder (or a build context), open; what is read through it stays beneath it.
pub struct Folder {
    root: Root,
}

impl std::fmt::Debug for Folder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Folder").field(&self.root.path).finish()
    }
}

/// Why something of a task's folder could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    /// A link that leads out of the folder: refused, never followed.
    #[error(
        "{} is a link to {}, which leads outside {}: runner reads nothing of a task through a link that leaves its folder (copy the files into the task, or point the link inside it)",
        link.display(), target.display(), folder.display()
    )]
    Outside {
        link: PathBuf,
        target: PathBuf,
        folder: PathBuf,
    },
    /// Something that is not a regular file where one is read (a FIFO would never end).
    #[error("{} is not a regular file", path.display())]
    NotAFile { path: PathBuf },
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl FolderError {
    /// Whether this is the error of a path that is not there (and nothing worse).
    pub fn is_missing(&self) -> bool {
        matches!(self, FolderError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// What a path in the folder is, its links followed (beneath the folder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    File,
    Dir,
    /// A FIFO, socket or device: never read.
    Other,
}

/// One entry of a tree walked in a folder, links not followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    /// A link, with its target as written; `inside`: it resolves beneath the folder (or
    /// names nothing, and its words do not climb out of it).
    Link {
        target: PathBuf,
        inside: bool,
    },
}

#[derive(Debug, Clone)]
pub struct Entry {
    /// Relative to the folder walked (not to the [`Folder`]'s root).
    pub rel: PathBuf,
    pub kind: Kind,
    /// `st_mode`, type bits included.
    pub mode: u32,
}

impl Folder {
    /// Opens `path` itself (the person running runner named it; its own links are theirs).
    pub fn open(path: &Path) -> Result<Folder, FolderError> {
        let fd = rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FolderError::Io {
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        Ok(Folder::from_fd(path.to_path_buf(), fd))
    }

    fn from_fd(path: PathBuf, dir: OwnedFd) -> Folder {
        Folder {
            root: Root {
                real: path.clone(),
                path,
                dir,
                writable: false,
                resolver: Resolver::chosen(),
            },
        }
    }

    pub fn path(&self) -> &Path {
        &self.root.path
    }

    /// `rel` opened beneath the folder with `flags`: the server's resolver, on a root of
    /// our own.
    fn open_at(&self, rel: &Path, flags: OFlags) -> Result<OwnedFd, FolderError> {
        let rel = dot(rel);
        roots::open_at_root(&self.root, &rel, flags).map_err(|e| self.failed(&rel, e))
    }

    /// The error of opening `rel`: a link that leaves the folder, named, for `EXDEV` (the
    /// resolution climbed out) and `ELOOP` (a magic link, or links without end).
    fn failed(&self, rel: &Path, e: Errno) -> FolderError {
        if matches!(e, Errno::XDEV | Errno::LOOP)
            && let Some(outside) = self.leaving_link(rel)
        {
            return outside;
        }
        FolderError::Io {
            path: self.path().join(rel),
            source: e.into(),
        }
    }

    /// The first link on the way to `rel` that does not resolve beneath the folder.
    fn leaving_link(&self, rel: &Path) -> Option<FolderError> {
        let mut prefix = PathBuf::new();
        for part in rel.components() {
            prefix.push(part);
            let Component::Normal(name) = part else {
                continue;
            };
            let parent = prefix.parent().unwrap_or(Path::new(""));
            let target = self.link_target(parent, name)?;
            let Some(target) = target else { continue };
            let resolves =
                roots::open_at_root(&self.root, &dot(&prefix), OFlags::PATH | OFlags::CLOEXEC);
            if matches!(resolves, Err(Errno::XDEV | Errno::LOOP)) {
                return Some(FolderError::Outside {
                    link: self.path().join(&prefix),
                    target,
                    folder: self.path().to_path_buf(),
                });
            }
        }
        None
    }

    /// `Some(Some(target))` when `parent/name` is a link, `Some(None)` when it is
    /// something else, `None` when it cannot be looked at.
    fn link_target(&self, parent: &Path, name: &OsStr) -> Option<Option<PathBuf>> {
        let dir = self
            .open_at(parent, OFlags::PATH | OFlags::DIRECTORY)
            .ok()?;
        let st = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
            return Some(None);
        }
        let target = rustix::fs::readlinkat(&dir, name, Vec::new()).ok()?;
        Some(Some(PathBuf::from(OsStr::from_bytes(target.as_bytes()))))
    }

    /// What `rel` is, links inside followed; `None` when there is nothing there.
    pub fn find(&self, rel: &Path) -> Result<Option<Found>, FolderError> {
        let fd = match roots::open_at_root(&self.root, &dot(rel), OFlags::PATH | OFlags::CLOEXEC) {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::NOTDIR) => return Ok(None),
            Err(e) => return Err(self.failed(rel, e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| self.io(rel, e))?;
        Ok(Some(match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Found::File,
            FileType::Directory => Found::Dir,
            _ => Found::Other,
        }))
    }

    pub fn is_file(&self, rel: &Path) -> Result<bool, FolderError> {
        Ok(self.find(rel)? == Some(Found::File))
    }

    pub fn is_dir(&self, rel: &Path) -> Result<bool, FolderError> {
        Ok(self.find(rel)? == Some(Found::Dir))
    }

    fn io(&self, rel: &Path, e: Errno) -> FolderError {
        FolderError::Io {
            path: self.path().join(rel),
            source: e.into(),
        }
    }

    /// A regular file, opened for reading; `follow`: a link at its place is followed (while
    /// it stays inside).
    fn open_file(&self, rel: &Path, follow: bool) -> Result<std::fs::File, FolderError> {
        let nofollow = if follow {
            OFlags::empty()
        } else {
            OFlags::NOFOLLOW
        };
        let fd = self.open_at(rel, OFlags::RDONLY | OFlags::NONBLOCK | nofollow)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| self.io(rel, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(FolderError::NotAFile {
                path: self.path().join(rel),
            });
        }
        Ok(std::fs::File::from(fd))
    }

    /// The whole of a file, links inside followed.
    pub fn read(&self, rel: &Path) -> Result<Vec<u8>, FolderError> {
        let mut bytes = Vec::new();
        self.open_file(rel, true)?
            .read_to_end(&mut bytes)
            .map_err(|source| FolderError::Io {
                path: self.path().join(rel),
                source,
            })?;
        Ok(bytes)
    }

    pub fn read_string(&self, rel: &Path) -> Result<String, FolderError> {
        let bytes = self.read(rel)?;
        String::from_utf8(bytes).map_err(|e| FolderError::Io {
            path: self.path().join(rel),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
    }

    /// A folder beneath this one, as a folder of its own (a build context): what is read
    /// through it stays beneath *it*.
    pub fn sub(&self, rel: &Path) -> Result<Folder, FolderError> {
        let fd = self.open_at(rel, OFlags::PATH | OFlags::DIRECTORY)?;
        Ok(Folder::from_fd(self.path().join(rel), fd))
    }

    /// Every entry below `rel` (not `rel` itself), links not followed, in a stable order;
    /// each link with whether it stays inside this folder.
    pub fn walk(&self, rel: &Path) -> Result<Vec<Entry>, FolderError> {
        let mut entries = Vec::new();
        let mut stack = vec![PathBuf::new()];
        while let Some(sub) = stack.pop() {
            let here = rel.join(&sub);
            let dir = self.open_at(&here, OFlags::RDONLY | OFlags::DIRECTORY)?;
            let listing = rustix::fs::Dir::read_from(&dir).map_err(|e| self.io(&here, e))?;
            for item in listing {
                let item = item.map_err(|e| self.io(&here, e))?;
                let name = OsStr::from_bytes(item.file_name().to_bytes());
                if name == "." || name == ".." {
                    continue;
                }
                let st = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| self.io(&here.join(name), e))?;
                let kind = match FileType::from_raw_mode(st.st_mode) {
                    FileType::Directory => {
                        stack.push(sub.join(name));
                        Kind::Dir
                    }
                    FileType::RegularFile => Kind::File,
                    FileType::Symlink => {
                        let target = rustix::fs::readlinkat(&dir, name, Vec::new())
                            .map_err(|e| self.io(&here.join(name), e))?;
                        let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
                        let inside = self.stays_inside(&here.join(name), &target)?;
                        Kind::Link { target, inside }
                    }
                    // FIFOs, sockets and devices are nothing a task needs.
                    _ => continue,
                };
                entries.push(Entry {
                    rel: sub.join(name),
                    kind,
                    mode: st.st_mode,
                });
            }
        }
        entries.sort_by(|a, b| a.rel.cmp(&b.rel));
        Ok(entries)
    }

    /// [`Self::walk`], refusing the first link that leaves the folder.
    pub fn walk_inside(&self, rel: &Path) -> Result<Vec<Entry>, FolderError> {
        let entries = self.walk(rel)?;
        for e in &entries {
            if let Kind::Link {
                target,
                inside: false,
            } = &e.kind
            {
                return Err(FolderError::Outside {
                    link: self.path().join(rel).join(&e.rel),
                    target: target.clone(),
                    folder: self.path().to_path_buf(),
                });
            }
        }
        Ok(entries)
    }

    /// Whether the link at `rel` (whose words are `target`) resolves beneath the folder: by
    /// the kernel where it leads somewhere; by its words where it leads nowhere (it is
    /// never followed then, but its words must not climb out either).
    fn stays_inside(&self, rel: &Path, target: &Path) -> Result<bool, FolderError> {
        match roots::open_at_root(&self.root, rel, OFlags::PATH | OFlags::CLOEXEC) {
            Ok(_) => Ok(true),
            Err(Errno::XDEV | Errno::LOOP) => Ok(false),
            Err(Errno::NOENT | Errno::NOTDIR) => Ok(lexically_inside(
                rel.parent().unwrap_or(Path::new("")),
                target,
            )),
            Err(e) => Err(self.io(rel, e)),
        }
    }

    /// Adds the walked `entry` (of the walk from `from`) to `tar` as `name`: a file's
    /// bytes, read without following a link put in its place meanwhile; a link as a link.
    pub fn append<W: std::io::Write>(
        &self,
        tar: &mut tar::Builder<W>,
        from: &Path,
        entry: &Entry,
        name: &Path,
    ) -> Result<(), FolderError> {
        let rel = from.join(&entry.rel);
        let mut header = tar::Header::new_gnu();
        header.set_mode(entry.mode & 0o7777);
        let added = match &entry.kind {
            Kind::File => {
                let file = self.open_file(&rel, false)?;
                let meta = file.metadata().map_err(|source| FolderError::Io {
                    path: self.path().join(&rel),
                    source,
                })?;
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(meta.len());
                header.set_mtime(std::os::unix::fs::MetadataExt::mtime(&meta).max(0) as u64);
                // A file that grows meanwhile must not spill past its header's size.
                tar.append_data(&mut header, name, file.take(meta.len()))
            }
            Kind::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                tar.append_data(&mut header, name, std::io::empty())
            }
            Kind::Link { target, .. } => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                tar.append_link(&mut header, name, target)
            }
        };
        added.map_err(|source| FolderError::Io {
            path: self.path().join(&rel),
            source,
        })
    }

    /// Copies the walked `entry` (of the walk from `from`) to `to` on the host: a file by
    /// its bytes, a link as a link.
    pub fn copy_out(&self, from: &Path, entry: &Entry, to: &Path) -> Result<(), FolderError> {
        use std::os::unix::fs::PermissionsExt;
        let rel = from.join(&entry.rel);
        let written = |source| FolderError::Io {
            path: to.to_path_buf(),
            source,
        };
        match &entry.kind {
            Kind::Dir => std::fs::create_dir_all(to).map_err(written),
            Kind::Link { target, .. } => std::os::unix::fs::symlink(target, to).map_err(written),
            Kind::File => {
                let mut file = self.open_file(&rel, false)?;
                let mut copy = std::fs::File::create(to).map_err(written)?;
                std::io::copy(&mut file, &mut copy).map_err(written)?;
                copy.set_permissions(std::fs::Permissions::from_mode(entry.mode & 0o777))
                    .map_err(written)
            }
        }
    }

    /// A file's bytes into `to`, links inside followed (a converted task's scripts).
    pub fn copy_file(&self, rel: &Path, to: &Path) -> Result<(), FolderError> {
        use std::os::unix::fs::PermissionsExt;
        let mut file = self.open_file(rel, true)?;
        let written = |source| FolderError::Io {
            path: to.to_path_buf(),
            source,
        };
        let mode = file.metadata().map_err(written)?.permissions().mode();
        let mut copy = std::fs::File::create(to).map_err(written)?;
        std::io::copy(&mut file, &mut copy).map_err(written)?;
        copy.set_permissions(std::fs::Permissions::from_mode(mode & 0o777))
            .map_err(written)
    }

    /// A file of the walk, for hashing or copying through another channel, never through a
    /// link put in its place.
    pub fn open_entry(&self, from: &Path, entry: &Entry) -> Result<std::fs::File, FolderError> {
        self.open_file(&from.join(&entry.rel), false)
    }

    /// The file a link inside leads to (read through the link, beneath the folder).
    pub fn open_through(&self, rel: &Path) -> Result<std::fs::File, FolderError> {
        self.open_file(rel, true)
    }
}

/// `rel` as the resolver wants it: `.` for the folder itself.
fn dot(rel: &Path) -> PathBuf {
    if rel.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        rel.to_path_buf()
    }
}

/// Whether `target`, read as words from the folder `dir` (relative to the root), stays
/// beneath the root.
fn lexically_inside(dir: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let mut depth = dir
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count() as i64;
    for part in target.components() {
        match part {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A folder with a secret beside it, links to it of each kind, and links that stay.
    fn planted() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let secret = tmp.path().join("secret");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("key"), "SECRET-KEY").unwrap();
        let task = tmp.path().join("task");
        std::fs::create_dir_all(task.join("tests/deep")).unwrap();
        std::fs::write(task.join("tests/test.sh"), "echo ok").unwrap();
        symlink("../test.sh", task.join("tests/deep/again.sh")).unwrap();
        symlink("nowhere", task.join("tests/dangling")).unwrap();
        (tmp, task)
    }

    #[test]
    fn links_inside_are_kept_and_links_out_are_named() {
        let (tmp, task) = planted();
        let folder = Folder::open(&task).unwrap();
        let entries = folder.walk_inside(Path::new("tests")).unwrap();
        let kinds: Vec<(String, &Kind)> = entries
            .iter()
            .map(|e| (e.rel.display().to_string(), &e.kind))
            .collect();
        assert!(kinds.contains(&(
            "deep/again.sh".into(),
            &Kind::Link {
                target: "../test.sh".into(),
                inside: true
            }
        )));
        assert_eq!(
            folder.read(Path::new("tests/deep/again.sh")).unwrap(),
            b"echo ok"
        );
        // The secret, by every road out: an absolute link, a relative one, a folder link
        // on the way, a link to a link.
        let abs = tmp.path().join("secret");
        symlink(&abs, task.join("tests/abs")).unwrap();
        let err = folder.walk_inside(Path::new("tests")).unwrap_err();
        assert!(
            matches!(&err, FolderError::Outside { link, .. } if link.ends_with("tests/abs")),
            "{err}"
        );
        std::fs::remove_file(task.join("tests/abs")).unwrap();
        symlink("../secret", task.join("env")).unwrap();
        symlink("env", task.join("env2")).unwrap();
        for rel in ["env/key", "env2/key"] {
            let err = folder.read(Path::new(rel)).unwrap_err();
            let FolderError::Outside { link, target, .. } = &err else {
                panic!("{rel}: {err}");
            };
            assert!(
                link.ends_with("env") || link.ends_with("env2"),
                "{rel}: {err}"
            );
            assert!(!target.as_os_str().is_empty());
            assert!(err.to_string().contains("leads outside"), "{err}");
        }
        assert!(matches!(
            folder.find(Path::new("env/key")),
            Err(FolderError::Outside { .. })
        ));
        symlink("../../../secret/key", task.join("tests/deep/up")).unwrap();
        assert!(matches!(
            folder.walk_inside(Path::new("tests")),
            Err(FolderError::Outside { .. })
        ));
        // A dangling link whose words climb out is as bad as one that lands out.
        std::fs::remove_file(task.join("tests/deep/up")).unwrap();
        symlink("../../../gone", task.join("tests/deep/up")).unwrap();
        assert!(matches!(
            folder.walk_inside(Path::new("tests")),
            Err(FolderError::Outside { .. })
        ));
    }

    #[test]
    fn a_missing_file_is_missing_and_a_fifo_is_not_read() {
        let (_tmp, task) = planted();
        let folder = Folder::open(&task).unwrap();
        assert_eq!(folder.find(Path::new("none")).unwrap(), None);
        assert_eq!(folder.find(Path::new("tests/test.sh/x")).unwrap(), None);
        assert!(folder.read(Path::new("none")).unwrap_err().is_missing());
        let fifo = task.join("pipe");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        assert!(matches!(
            folder.read(Path::new("pipe")),
            Err(FolderError::NotAFile { .. })
        ));
    }

    #[test]
    fn words_of_a_dangling_link() {
        assert!(lexically_inside(Path::new("a/b"), Path::new("../../c")));
        assert!(!lexically_inside(Path::new("a/b"), Path::new("../../../c")));
        assert!(!lexically_inside(Path::new(""), Path::new("/etc")));
        assert!(lexically_inside(Path::new(""), Path::new("./x/../y")));
    }
}
