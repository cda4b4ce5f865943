//! A copy workspace's disk budget: its `work/` is a file system of its own.
//!
//! A command in the sandbox can write as much as the file system under its worktree holds.
//! For a copy that would be the host's disk, so the copy's `work/` is instead an ext4 file
//! system in a sparse image file (`disk.img`, beside `work/` in the workspace's folder),
//! loop-mounted before the checkout is copied into it. The image is as large as the copy
//! plus the budget (`disk` under `[sandbox]` in the profile), so a command that writes past
//! the budget gets `ENOSPC` from the kernel, and the host's disk loses at most the image's
//! size, whatever runs. No polling: the limit is the file system's size.
//!
//! The mount outlives the run (the copy waits for `runner changes` and `apply`); a later
//! command that finds the image but not the mount (after a reboot) mounts it again before
//! reading the copy ([`ready`]); discarding the copy unmounts it and removes the image
//! ([`detach`]). Mounting needs root and a loop device; where the machine gives neither the
//! copy is made without a budget, and the run says so once ([`unavailable`]).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::Error;

/// The image file in the workspace's folder.
const IMAGE: &str = "disk.img";
/// The file system's block size, fixed so that the copy's size can be estimated.
const BLOCK: u64 = 4096;
/// Bytes of budget per inode: as many files as a tree of 16 KiB files would need.
const BYTES_PER_INODE: u64 = 16 << 10;
/// Free space under which a copy's file system counts as full ([`full_note`]).
const FULL_BELOW: u64 = 4 << 20;
/// ext4's own inode size.
const INODE_SIZE: u64 = 256;

/// What a copy of a tree takes on an ext4 file system with 4 KiB blocks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Need {
    pub bytes: u64,
    pub inodes: u64,
}

/// Measures `source` as [`super::copy_tree`] copies it: everything but `skip`, `.git`
/// included, links not followed. Sparse files count what they hold (`cp` keeps holes).
pub fn measure(source: &Path, skip: Option<&Path>) -> Need {
    let skip = skip.map(Path::to_path_buf);
    let walk = ignore::WalkBuilder::new(source)
        .standard_filters(false)
        .filter_entry(move |e| skip.as_deref() != Some(e.path()))
        .build();
    let mut need = Need::default();
    for entry in walk.flatten() {
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        need.inodes += 1;
        let held = (meta.blocks() * 512).min(meta.len().max(BLOCK));
        need.bytes += held.div_ceil(BLOCK).max(1) * BLOCK;
    }
    need
}

/// The image's size and inode count for a copy that needs `need` and a budget on top.
/// The slack covers ext4's own metadata (bitmaps, group descriptors, extent blocks): the
/// command sees about the budget free, never less.
fn geometry(need: Need, budget: u64) -> (u64, u64) {
    let inodes = need.inodes + budget / BYTES_PER_INODE + 1024;
    let data = need.bytes + budget;
    let size = data + inodes * INODE_SIZE + data / 256 + (4 << 20);
    (size.div_ceil(BLOCK) * BLOCK, inodes)
}

/// Makes `dir/disk.img` for a copy that needs `need` plus `budget`, and mounts it on
/// `mount` (an empty folder). On an error nothing is left but the empty folder; the error
/// says why the machine gives no budget.
pub fn attach(dir: &Path, mount: &Path, need: Need, budget: u64) -> Result<(), Error> {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::NoBudget(
            "runner is not running as root, and a budget is a loop-mounted file system",
        ));
    }
    let mkfs = find_tool("mkfs.ext4").ok_or(Error::NoBudget(
        "mkfs.ext4 (e2fsprogs) is not installed, and a budget is an ext4 image",
    ))?;
    let image = dir.join(IMAGE);
    let (size, inodes) = geometry(need, budget);
    let made = std::fs::File::create_new(&image)
        .and_then(|f| f.set_len(size))
        .map_err(Error::io("make", &image));
    let done = made
        .and_then(|()| format(&mkfs, &image, inodes))
        .and_then(|()| mount_image(&image, mount));
    if let Err(e) = done {
        let _ = std::fs::remove_file(&image);
        return Err(e);
    }
    // mke2fs makes `lost+found`; in the copy it would be a change of the agent's.
    let _ = std::fs::remove_dir(mount.join("lost+found"));
    Ok(())
}

/// `mkfs.ext4` without a journal (a copy is not worth one, and it would take budget) and
/// without a root reserve (root in the sandbox gets the same budget as anyone).
fn format(mkfs: &Path, image: &Path, inodes: u64) -> Result<(), Error> {
    let out = Command::new(mkfs)
        .args(["-q", "-F", "-m", "0", "-b", "4096", "-O", "^has_journal"])
        .args([
            "-E",
            "lazy_itable_init=1,nodiscard",
            "-L",
            "runner-copy",
            "-N",
        ])
        .arg(inodes.to_string())
        .arg(image)
        .output()
        .map_err(Error::io("run", mkfs))?;
    if out.status.success() {
        return Ok(());
    }
    Err(Error::program(
        format!("make the file system with {}", mkfs.display()),
        &out.stderr,
    ))
}

/// `mount -o loop`: util-linux finds a free loop device and marks it to go with the mount.
/// `nosuid,nodev`: nothing the sandbox makes there is a setuid program or a device on the
/// host. `noinit_itable`: the image is sparse, its inode tables already read as zeros.
fn mount_image(image: &Path, mount: &Path) -> Result<(), Error> {
    let out = Command::new(find_tool("mount").unwrap_or_else(|| "mount".into()))
        .args(["-t", "ext4", "-o", "loop,nosuid,nodev,noinit_itable"])
        .arg(image)
        .arg(mount)
        .output()
        .map_err(Error::io("run", Path::new("mount")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(Error::program(
        format!("loop-mount {}", image.display()),
        &out.stderr,
    ))
}

/// Whether the workspace in `dir` has a budget (an image).
pub fn has_image(dir: &Path) -> bool {
    dir.join(IMAGE).is_file()
}

/// Whether `path` is the root of a file system other than its parent's.
fn is_mount(path: &Path) -> bool {
    let dev = |p: &Path| std::fs::symlink_metadata(p).map(|m| m.dev());
    match (dev(path), path.parent().map(dev)) {
        (Ok(a), Some(Ok(b))) => a != b,
        _ => false,
    }
}

/// Makes sure a budgeted copy's `work/` is its file system before anything reads it: a
/// reboot leaves the image but not the mount, and reading the empty folder under it would
/// look like the agent deleted every file.
pub fn ready(dir: &Path, work: &Path) -> Result<(), Error> {
    if !has_image(dir) || is_mount(work) {
        return Ok(());
    }
    mount_image(&dir.join(IMAGE), work).map_err(|e| Error::Unmounted {
        source: Box::new(e),
        work: work.to_path_buf(),
    })
}

/// Unmounts a budgeted copy's `work/` and removes its image. Busy (a process still in it),
/// it is detached: it goes when its last user does.
pub fn detach(dir: &Path, work: &Path) -> Result<(), Error> {
    if is_mount(work) {
        let c = std::ffi::CString::new(work.as_os_str().as_encoded_bytes())
            .map_err(|e| Error::io("unmount", work)(e.into()))?;
        // SAFETY: a valid C string; plain syscalls.
        let failed = unsafe {
            libc::umount2(c.as_ptr(), 0) != 0 && libc::umount2(c.as_ptr(), libc::MNT_DETACH) != 0
        };
        if failed {
            return Err(Error::io("unmount the copy's file system at", work)(
                std::io::Error::last_os_error(),
            ));
        }
    }
    match std::fs::remove_file(dir.join(IMAGE)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io("remove", &dir.join(IMAGE))(e))
        }
        _ => Ok(()),
    }
}

/// Says once per run that copies get no budget here, and why.
pub fn unavailable(why: &Error) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        eprintln!(
            "runner: no disk budget for the copy: {why}; a command in it can fill the host's disk"
        );
    }
}

/// When the copy's file system under `worktree` is full: a line naming the budget and the
/// profile key that raises it. `None` for a worktree without a budget.
pub fn full_note(worktree: &Path) -> Option<String> {
    let dir = worktree.parent()?;
    if !has_image(dir) || !is_mount(worktree) {
        return None;
    }
    let fs = rustix::fs::statvfs(worktree).ok()?;
    // A writer is refused while a little is still free (ext4 reserves room for the blocks
    // a write may need, and a big write fails whole): nearly full counts as full.
    let free = fs.f_bavail.saturating_mul(fs.f_frsize);
    let size = fs.f_blocks.saturating_mul(fs.f_frsize);
    if free >= FULL_BELOW.max(size / 100) && fs.f_favail > 0 {
        return None;
    }
    let budget = std::fs::read_to_string(dir.join("meta.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<super::Meta>(&t).ok())
        .and_then(|m| m.disk)
        .map(|b| format!(" of {}", size_text(b)))
        .unwrap_or_default();
    Some(format!(
        "the copy's disk budget{budget} is used up (No space left on device); `disk` under [sandbox] in the profile raises it"
    ))
}

/// `64 MiB`, `10 GiB`, `1.5 GiB`.
pub fn size_text(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, unit) in UNITS {
        if bytes >= unit {
            let n = bytes as f64 / unit as f64;
            return if bytes.is_multiple_of(unit) {
                format!("{} {name}", bytes / unit)
            } else {
                format!("{n:.1} {name}")
            };
        }
    }
    format!("{bytes} bytes")
}

/// A system tool by name: on PATH, else in the sbin folders a non-login PATH leaves out.
fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size_text(64 << 20), "64 MiB");
        assert_eq!(size_text(10 << 30), "10 GiB");
        assert_eq!(size_text(3 << 29), "1.5 GiB");
        assert_eq!(size_text(100), "100 bytes");
    }

    #[test]
    fn the_image_holds_the_copy_and_the_budget_with_room_for_ext4() {
        let need = Need {
            bytes: 100 << 20,
            inodes: 5000,
        };
        let (size, inodes) = geometry(need, 64 << 20);
        assert!(size >= (164 << 20) + 5000 * INODE_SIZE, "{size}");
        assert!(size < 175 << 20, "{size}");
        assert!(inodes >= 5000 + (64 << 20) / BYTES_PER_INODE);
        assert_eq!(size % BLOCK, 0);
    }
}
