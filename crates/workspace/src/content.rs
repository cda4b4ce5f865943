//! A file's content, read in bounded pieces: its digest, and a copy of it hashed on the way.
//!
//! Nothing here reads a file whole. A file is read in blocks of [`BLOCK`] bytes into one
//! buffer, and the blocks the file system reports as holes (`SEEK_DATA`) are not read at
//! all: a 100 GiB sparse file costs a few system calls and a hash of its block digests.
//! The digest depends only on the bytes (a hole and a block of written zeros hash alike),
//! so a file and its copy compare equal whatever their layout on disk.
//!
//! Files read here may be the agent's (a copy's `work/`): each is opened without following a
//! link and without blocking on a FIFO, and must be a regular file once open.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::OnceLock;

use sha2::{Digest as _, Sha256};

/// How much of a file is read (and hashed) at a time.
pub const BLOCK: usize = 1 << 20;

/// A digest of a file's bytes: SHA-256 over its size and the SHA-256 of each [`BLOCK`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest([u8; 32]);

/// What identifies one state of a file on disk: a write or `chmod` changes its ctime, which
/// nobody can set back (short of setting the clock), so the same stamp means the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    ctime: (i64, i64),
}

impl Stamp {
    pub fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// Opens a regular file for reading without following a link at its last component, and
/// without waiting on a FIFO put where a file was.
pub fn open_plain(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// The digest of `file`'s first `size` bytes.
pub fn digest(file: &File, size: u64) -> io::Result<Digest> {
    copy(file, size, None, &|| false)
}

/// The digest of the file at `path`, which must still be in the state `stamp` names.
pub fn digest_at(path: &Path, stamp: &Stamp) -> io::Result<Digest> {
    let file = open_plain(path)?;
    let unchanged = |file: &File| -> io::Result<()> {
        if Stamp::of(&file.metadata()?) != *stamp {
            return Err(io::Error::other("it changed while it was being read"));
        }
        Ok(())
    };
    unchanged(&file)?;
    let digest = digest(&file, stamp.size)?;
    unchanged(&file)?;
    Ok(digest)
}

/// Hashes the first `size` bytes of `from` and, given `to`, writes them there: the digest is
/// of exactly the bytes written (a file that shrinks meanwhile reads as zeros to `size`).
/// Holes in `from` stay holes in `to`, as do blocks of zeros. `stop` is asked between
/// blocks; when it says so the copy ends with [`io::ErrorKind::Interrupted`].
pub fn copy(
    from: &File,
    size: u64,
    to: Option<&File>,
    stop: &dyn Fn() -> bool,
) -> io::Result<Digest> {
    let mut outer = Sha256::new();
    outer.update(b"runner-content-1");
    outer.update(size.to_le_bytes());
    let mut buf = Vec::new();
    let mut data = next_data(from, 0)?;
    let mut at = 0u64;
    while at < size {
        let len = (size - at).min(BLOCK as u64) as usize;
        let end = at + len as u64;
        if data.is_none_or(|d| d >= end) {
            // A hole the whole block long: not read, not written.
            outer.update(zero_block(len));
            at = end;
            continue;
        }
        if stop() {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
        }
        buf.resize(len, 0);
        let got = read_at_most(from, &mut buf, at)?;
        buf[got..].fill(0);
        outer.update(Sha256::digest(&buf));
        if let Some(to) = to
            && buf.iter().any(|b| *b != 0)
        {
            to.write_all_at(&buf, at)?;
        }
        at = end;
        if data.is_some_and(|d| d < at) {
            data = next_data(from, at)?;
        }
    }
    if let Some(to) = to {
        to.set_len(size)?;
    }
    Ok(Digest(outer.finalize().into()))
}

/// The digest of a block of `len` zero bytes (the full-size one computed once).
fn zero_block(len: usize) -> [u8; 32] {
    static FULL: OnceLock<[u8; 32]> = OnceLock::new();
    let hash = |len: usize| -> [u8; 32] { Sha256::digest(vec![0u8; len]).into() };
    if len == BLOCK {
        *FULL.get_or_init(|| hash(BLOCK))
    } else {
        hash(len)
    }
}

/// Where the next data at or after `at` starts: `None` when only a hole is left. A file
/// system that cannot say is all data.
fn next_data(file: &File, at: u64) -> io::Result<Option<u64>> {
    let Ok(offset) = libc::off_t::try_from(at) else {
        return Ok(Some(at));
    };
    // SAFETY: lseek on a descriptor we own; the offset it moves is not used (reads are
    // positioned).
    let found = unsafe { libc::lseek(file.as_raw_fd(), offset, libc::SEEK_DATA) };
    if found >= 0 {
        return Ok(Some(found as u64));
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ENXIO) => Ok(None),
        Some(libc::EINVAL | libc::EOPNOTSUPP) => Ok(Some(at)),
        _ => Err(err),
    }
}

/// Reads into `buf` from `at` until it is full or the file ends; how much was read.
fn read_at_most(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The first `limit` bytes of a file at most (for showing it), opened as [`open_plain`]
/// does; it must be the file `stamp` names (not another one put on its way meanwhile).
pub fn read_head(path: &Path, limit: u64, stamp: &Stamp) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let file = open_plain(path)?;
    let now = Stamp::of(&file.metadata()?);
    if (now.dev, now.ino) != (stamp.dev, stamp.ino) {
        return Err(io::Error::other("it was replaced while being read"));
    }
    let mut out = Vec::new();
    file.take(limit).read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(chunks: &[(u64, &[u8])], size: u64) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        for (at, bytes) in chunks {
            f.as_file().write_all_at(bytes, *at).unwrap();
        }
        f.as_file().set_len(size).unwrap();
        f
    }

    #[test]
    fn a_hole_and_written_zeros_hash_alike_and_a_copy_keeps_bytes_and_holes() {
        let size = 5 * BLOCK as u64 + 123;
        let sparse = file_with(&[(3 * BLOCK as u64 + 7, b"middle")], size);
        let mut dense_bytes = vec![0u8; size as usize];
        dense_bytes[3 * BLOCK + 7..3 * BLOCK + 13].copy_from_slice(b"middle");
        let dense = file_with(&[(0, &dense_bytes)], size);
        let a = digest(sparse.as_file(), size).unwrap();
        assert_eq!(a, digest(dense.as_file(), size).unwrap());
        let other = file_with(&[(3 * BLOCK as u64 + 7, b"middlE")], size);
        assert_ne!(a, digest(other.as_file(), size).unwrap());
        // The size is part of it: trailing zeros are not nothing.
        assert_ne!(
            digest(sparse.as_file(), size).unwrap(),
            digest(sparse.as_file(), size + 1).unwrap()
        );

        let out = tempfile::NamedTempFile::new().unwrap();
        let copied = copy(dense.as_file(), size, Some(out.as_file()), &|| false).unwrap();
        assert_eq!(copied, a);
        assert_eq!(std::fs::read(out.path()).unwrap(), dense_bytes);
        // Only the one block with data was written.
        let blocks = out.as_file().metadata().unwrap().blocks() * 512;
        assert!(blocks <= 2 * BLOCK as u64, "{blocks} bytes allocated");
    }

    #[test]
    fn a_huge_sparse_file_is_hashed_without_reading_it_and_a_stop_ends_a_copy() {
        let size = 100u64 << 30;
        let f = file_with(&[], size);
        let t = std::time::Instant::now();
        let d = digest(f.as_file(), size).unwrap();
        assert!(t.elapsed() < std::time::Duration::from_secs(10));
        assert_eq!(d, digest(f.as_file(), size).unwrap());

        let data = file_with(&[(0, &[1u8; 3 * BLOCK])], 3 * BLOCK as u64);
        let out = tempfile::NamedTempFile::new().unwrap();
        let asked = std::cell::Cell::new(0);
        let stop = || {
            asked.set(asked.get() + 1);
            asked.get() > 1
        };
        let err = copy(data.as_file(), 3 * BLOCK as u64, Some(out.as_file()), &stop).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Interrupted);
    }

    #[test]
    fn a_file_that_changed_since_its_stamp_is_not_hashed_as_it() {
        let f = file_with(&[(0, b"one")], 3);
        let stamp = Stamp::of(&f.as_file().metadata().unwrap());
        assert!(digest_at(f.path(), &stamp).is_ok());
        std::thread::sleep(std::time::Duration::from_millis(20));
        f.as_file().write_all_at(b"two", 0).unwrap();
        assert!(digest_at(f.path(), &stamp).is_err());
        let link = f.path().with_extension("link");
        std::os::unix::fs::symlink(f.path(), &link).unwrap();
        assert!(open_plain(&link).is_err(), "a link is not followed");
        std::fs::remove_file(link).unwrap();
    }
}
