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
//!
//! A run's own folders (an evaluation's attempts, [`attach_for_run`]) are different: their
//! mount is worth nothing once the run is gone, and a run killed with SIGKILL cannot unmount
//! it. So each is recorded in a folder of runner's data directory with its owner's pid and
//! start time, the way containers carry an owner label, and [`sweep_leftovers`] (at the
//! first mount of any later command, and in `runner sandbox cleanup`) unmounts, detaches and
//! removes those whose owner is gone, wherever their `--out` was.

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
/// says why the machine gives no budget. The first mount of a process first sweeps what
/// killed runs left ([`sweep_leftovers`]).
pub fn attach(dir: &Path, mount: &Path, need: Need, budget: u64) -> Result<(), Error> {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::NoBudget(
            "runner is not running as root, and a budget is a loop-mounted file system",
        ));
    }
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        for line in sweep_leftovers().notes {
            eprintln!("runner: {line}");
        }
    });
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
        unmount(work)?;
    }
    let image = dir.join(IMAGE);
    match std::fs::remove_file(&image) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", &image)(e)),
        _ => {
            forget(dir);
            Ok(())
        }
    }
}

/// `umount`, or where something still uses the file system, a lazy one: it is gone from
/// the tree now and from the kernel when its last user ends.
fn unmount(path: &Path) -> Result<(), Error> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| Error::io("unmount", path)(e.into()))?;
    // SAFETY: a valid C string; plain syscalls.
    let failed = unsafe {
        libc::umount2(c.as_ptr(), 0) != 0 && libc::umount2(c.as_ptr(), libc::MNT_DETACH) != 0
    };
    if failed {
        return Err(Error::io("unmount the copy's file system at", path)(
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// The folder of runner's data directory where runs' mounts are recorded.
const RECORDS: &str = "mounts";

/// A run's loop mount, recorded while its owner lives ([`attach_for_run`]).
#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    owner_pid: i32,
    /// The owner's start, in clock ticks after boot (`/proc/PID/stat`): a process that
    /// got the dead owner's pid does not keep its mount alive.
    owner_start: u64,
    /// The owner's machine and boot ([`runner_sandbox::owner::boot_id`]).
    boot: String,
    /// The run's folder (canonical): its image and its `work/` mount point.
    dir: PathBuf,
}

impl Record {
    fn owner_gone(&self) -> bool {
        match runner_sandbox::owner::judge_here(&self.boot) {
            Some(true) => running_since(self.owner_pid) != Some(self.owner_start),
            Some(false) => true,
            // Another machine's (a shared data directory): its owner is not ours to judge.
            None => false,
        }
    }
}

fn records_dir() -> Option<PathBuf> {
    runner_dirs::data_home().map(|d| d.join("runner").join(RECORDS))
}

/// The record of the run folder `dir`, named by a hash of its canonical path (it cannot
/// be named by the path itself: a task's name is part of it).
fn record_of(dir: &Path) -> Option<PathBuf> {
    use sha2::{Digest, Sha256};
    let dir = std::fs::canonicalize(dir).ok()?;
    let hash = Sha256::digest(dir.as_os_str().as_encoded_bytes());
    let name: String = hash[..12].iter().map(|b| format!("{b:02x}")).collect();
    Some(records_dir()?.join(format!("{name}.json")))
}

/// When process `pid` started, if it runs: one reading of `/proc` for records and
/// containers alike ([`runner_sandbox::owner::started_at`]).
fn running_since(pid: i32) -> Option<u64> {
    runner_sandbox::owner::started_at(pid)
}

/// Like [`attach`], for a folder that belongs to this run alone (an evaluation's attempt):
/// the mount is recorded first, so that whatever ends the run, a later command finds it.
pub fn attach_for_run(dir: &Path, mount: &Path, need: Need, budget: u64) -> Result<(), Error> {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } == 0 {
        record(dir)?;
    }
    let attached = attach(dir, mount, need, budget);
    if attached.is_err() {
        forget(dir);
    }
    attached
}

/// Writes the record of run folder `dir`, owned by this process. Without a data directory
/// (no `HOME`) nothing is recorded: the next run into the same folder still clears it.
fn record(dir: &Path) -> Result<(), Error> {
    let Some(path) = record_of(dir) else {
        return Ok(());
    };
    let me = std::process::id() as i32;
    let record = Record {
        owner_pid: me,
        owner_start: running_since(me).unwrap_or_default(),
        boot: runner_sandbox::owner::boot_id(),
        dir: std::fs::canonicalize(dir).map_err(Error::io("resolve", dir))?,
    };
    let folder = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(folder).map_err(Error::io("create", folder))?;
    let text = serde_json::to_vec(&record).unwrap_or_default();
    crate::write_file(&path, &text).map_err(Error::io("record the mount in", &path))
}

/// Removes the record of run folder `dir`, if it has one.
fn forget(dir: &Path) {
    if let Some(path) = record_of(dir) {
        let _ = std::fs::remove_file(path);
    }
}

/// Unmounts, detaches and removes what runs whose owner is gone left mounted (recorded by
/// [`attach_for_run`]), wherever their folder is: a run killed with SIGKILL leaves its
/// attempts' images loop-mounted.
pub fn sweep_leftovers() -> Swept {
    let mut swept = Swept::default();
    for (path, record) in records() {
        if !record.owner_gone() {
            continue;
        }
        let shown = runner_display::shown(record.dir.display());
        match remove_leftover(&record.dir) {
            Ok(()) => {
                let _ = std::fs::remove_file(&path);
                swept.removed += 1;
                swept.notes.push(format!(
                    "removed the disk image a killed run left mounted at {shown}"
                ));
            }
            Err(e) => swept.notes.push(format!(
                "cannot remove what a killed run left at {shown}: {}; as root, `umount -l` it and remove the folder",
                runner_display::shown(e)
            )),
        }
    }
    swept
}

/// Every recorded run mount, with the file of its record.
fn records() -> Vec<(PathBuf, Record)> {
    let Some(entries) = records_dir().and_then(|d| std::fs::read_dir(d).ok()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter_map(|path| {
            let record = std::fs::read(&path)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<Record>(&bytes).ok())?;
            Some((path, record))
        })
        .collect()
}

/// A run's recorded mount as [`sweep_leftovers`] would judge it, for `runner sandbox
/// cleanup --dry-run`, which says what would go and what stays without touching either.
#[derive(Debug, Clone)]
pub struct Leftover {
    /// The run's folder, holding its image and its `work/` mount point.
    pub dir: PathBuf,
    pub owner_pid: i32,
    /// Whether its owner is gone, by the same rule the sweep uses (pid, start time, boot).
    pub owner_gone: bool,
}

/// Every run mount on record, live or not.
pub fn leftovers() -> Vec<Leftover> {
    records()
        .into_iter()
        .map(|(_, r)| Leftover {
            owner_gone: r.owner_gone(),
            owner_pid: r.owner_pid,
            dir: r.dir,
        })
        .collect()
}

/// What [`sweep_leftovers`] did.
#[derive(Debug, Default)]
pub struct Swept {
    /// Folders of dead runs cleared.
    pub removed: usize,
    /// A line for each folder cleared or that could not be, ready for the terminal.
    pub notes: Vec<String>,
}

/// Clears one dead run's folder: its file system unmounted (only if it is the folder's
/// own image that is mounted there), the loop device let go, the image and folder removed.
fn remove_leftover(dir: &Path) -> Result<(), Error> {
    let work = dir.join("work");
    let image = dir.join(IMAGE);
    if is_mount(&work) {
        if !backed_by(&work, &image) {
            return Err(Error::io("clear", &work)(std::io::Error::other(
                "something other than the run's image is mounted there",
            )));
        }
        unmount(&work)?;
    }
    for device in loop_devices_of(&image) {
        release_loop(&device);
    }
    match std::fs::remove_file(&image) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io("remove", &image)(e));
        }
        _ => {}
    }
    // The rest of the folder was the run's alone (a copy made for it, its outputs).
    crate::remove_tree(dir);
    Ok(())
}

/// Whether the file system mounted at `mount` is a loop device over `image`.
fn backed_by(mount: &Path, image: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(mount) else {
        return false;
    };
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/loop/backing_file"))
        .is_ok_and(|b| same_backing(&b, image))
}

/// The kernel's name of a loop device's file, against `image`: it says ` (deleted)` after
/// a removed one.
fn same_backing(backing: &str, image: &Path) -> bool {
    let backing = backing.trim_end_matches('\n');
    let backing = backing.strip_suffix(" (deleted)").unwrap_or(backing);
    Path::new(backing) == image
}

/// The loop devices (`/dev/loopN`) whose file is `image`.
fn loop_devices_of(image: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("loop/backing_file"))
                .is_ok_and(|b| same_backing(&b, image))
        })
        .map(|e| Path::new("/dev").join(e.file_name()))
        .collect()
}

/// Lets go of a loop device (`LOOP_CLR_FD`): at once when nothing holds it, else when its
/// last user does (the kernel marks it to clear itself).
fn release_loop(device: &Path) {
    const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
    use std::os::fd::AsRawFd;
    if let Ok(file) = std::fs::File::open(device) {
        // SAFETY: an open descriptor; the request takes no argument.
        unsafe { libc::ioctl(file.as_raw_fd(), LOOP_CLR_FD as _, 0) };
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
    fn a_record_outlives_its_owner_only_by_pid_and_start_time() {
        let me = std::process::id() as i32;
        let record = |owner_pid, owner_start| Record {
            owner_pid,
            owner_start,
            boot: runner_sandbox::owner::boot_id(),
            dir: PathBuf::from("/nowhere"),
        };
        let started = running_since(me).expect("this process has a start time");
        assert!(!record(me, started).owner_gone());
        // The same pid, started at another time: another process got the dead owner's pid.
        assert!(record(me, started + 1).owner_gone());
        assert!(record(4_194_305, 0).owner_gone());
        // Another boot of this machine: gone whatever the pid.
        let mut rebooted = record(me, started);
        rebooted.boot = format!("{}/earlier", rebooted.boot.split('/').next().unwrap());
        assert!(rebooted.owner_gone());
    }

    #[test]
    fn the_kernel_names_a_removed_backing_file_with_a_suffix() {
        let image = Path::new("/out/.work/t-1/disk.img");
        assert!(same_backing("/out/.work/t-1/disk.img\n", image));
        assert!(same_backing("/out/.work/t-1/disk.img (deleted)\n", image));
        assert!(!same_backing("/out/.work/t-2/disk.img\n", image));
    }

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
