//! A cgroup per landlock sandbox, where the machine lets us make one (root, cgroup v1
//! controllers or a v2 tree with the controllers delegated). It is what contains a fork bomb
//! run as root, which RLIMIT_NPROC never applies to, and the memory of a whole process tree
//! rather than of one process.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::owner;
use crate::spec::Limits;

/// Every cgroup runner makes is named `runner-<pid>-<n>`, so cleanup can find them.
pub const PREFIX: &str = "runner-";

/// The directories of one sandbox's cgroup (one per v1 controller, or one v2 directory).
/// Dropping it kills what is left inside and removes the directories.
#[derive(Debug)]
pub struct SandboxCgroup {
    pub dirs: Vec<PathBuf>,
    /// Which limits are enforced, for `sandbox doctor`.
    pub enforces_pids: bool,
    pub enforces_memory: bool,
    pub enforces_cpu: bool,
    /// Why a cgroup v2 leaf lacks the limits it lacks, when there is more to say than the
    /// limits (which controllers runner's cgroup has, what to do).
    pub v2_note: Option<String>,
}

/// What the process's own cgroups are, per hierarchy: (mount point, own path).
fn own_cgroups() -> Vec<(String, PathBuf)> {
    let Ok(text) = std::fs::read_to_string("/proc/self/cgroup") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = PathBuf::from(path.trim_start_matches('/'));
        if controllers.is_empty() {
            out.push(("unified".to_string(), path));
        } else {
            for c in controllers.split(',') {
                out.push((c.to_string(), path.clone()));
            }
        }
    }
    out
}

fn write(path: &Path, value: &str) -> std::io::Result<()> {
    std::fs::write(path, value)
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Makes the cgroup and sets its limits; `None` when this machine gives us none (not root,
/// no delegation). Partial success counts: each limit says whether it is enforced.
pub fn create(limits: &Limits) -> Option<SandboxCgroup> {
    let name = format!(
        "{PREFIX}{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let own = own_cgroups();
    let base = Path::new("/sys/fs/cgroup");
    let mut cg = SandboxCgroup {
        dirs: Vec::new(),
        enforces_pids: false,
        enforces_memory: false,
        enforces_cpu: false,
        v2_note: None,
    };
    // cgroup v1: one directory per controller.
    for (controller, own_path) in &own {
        let mount = base.join(controller);
        if controller == "unified" || !mount.join("cgroup.procs").exists() {
            continue;
        }
        let dir = mount.join(own_path).join(&name);
        let ok = match controller.as_str() {
            "pids" => {
                std::fs::create_dir(&dir).is_ok()
                    && write(&dir.join("pids.max"), &limits.pids.to_string()).is_ok()
            }
            "memory" => {
                std::fs::create_dir(&dir).is_ok()
                    && write(
                        &dir.join("memory.limit_in_bytes"),
                        &limits.memory_bytes.to_string(),
                    )
                    .is_ok()
            }
            "cpu" => {
                std::fs::create_dir(&dir).is_ok()
                    && write(&dir.join("cpu.cfs_period_us"), "100000").is_ok()
                    && write(
                        &dir.join("cpu.cfs_quota_us"),
                        &((limits.cpus * 100_000.0) as u64).to_string(),
                    )
                    .is_ok()
            }
            _ => continue,
        };
        if ok {
            cg.enforces_pids |= controller == "pids";
            cg.enforces_memory |= controller == "memory";
            cg.enforces_cpu |= controller == "cpu";
            cg.dirs.push(dir);
        } else {
            let _ = std::fs::remove_dir(&dir);
        }
    }
    if cg.dirs.is_empty() {
        v2::create(&name, limits, &mut cg);
    }
    if cg.dirs.is_empty() { None } else { Some(cg) }
}

/// The limits a sandbox goes without, said once when it starts: `None` when its cgroup
/// enforces them all. Without one, memory is bounded per process only (RLIMIT_AS: a tree
/// of processes can use more), processes by RLIMIT_NPROC, and CPU time not at all.
pub fn missing_limits(cg: Option<&SandboxCgroup>) -> Option<String> {
    let Some(cg) = cg else {
        return Some(
            "no cgroup (only root may make one on cgroup v1, and no delegated cgroup v2 \
             tree is writable): memory is limited per process (RLIMIT_AS), not for the \
             whole sandbox, processes by RLIMIT_NPROC, CPU not at all"
                .into(),
        );
    };
    let missing: Vec<&str> = [
        (!cg.enforces_memory).then_some("memory (RLIMIT_AS per process only)"),
        (!cg.enforces_pids).then_some("processes (RLIMIT_NPROC only, never for root)"),
        (!cg.enforces_cpu).then_some("CPU (not limited)"),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!missing.is_empty()).then(|| {
        let why = cg
            .v2_note
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        format!("no cgroup limit for {}{why}", missing.join(", "))
    })
}

fn pids_in(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Kills every process in the directories and removes them, retrying while the dying
/// processes leave.
pub fn destroy(dirs: &[PathBuf]) {
    // The server is reaped before this runs, so the cgroup is usually empty at once; what
    // is left (a process still dying) is waited for in short, growing steps.
    let mut pause = Duration::from_millis(1);
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        let mut left = false;
        for dir in dirs {
            if !dir.exists() {
                continue;
            }
            // cgroup v2 (Linux 5.14+) kills the whole cgroup at once, a process forking
            // while it is killed included.
            let _ = write(&dir.join("cgroup.kill"), "1");
            for pid in pids_in(dir) {
                // SAFETY: plain syscall; the pid came from the sandbox's own cgroup.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            if std::fs::remove_dir(dir).is_err() {
                left = true;
            }
        }
        if !left {
            return;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

impl Drop for SandboxCgroup {
    fn drop(&mut self) {
        // Synchronous: a process about to exit must not leave its cgroups behind. Killing
        // everything inside makes the wait short (the dying processes' exit only).
        destroy(&self.dirs);
    }
}

/// Leftover runner cgroups of processes that are gone (for `sandbox cleanup`, and swept at
/// every landlock start).
pub fn leftovers() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (controller, own_path) in own_cgroups() {
        let parent = if controller == "unified" {
            let Some(own) = v2::own() else { continue };
            own
        } else {
            Path::new("/sys/fs/cgroup")
                .join(&controller)
                .join(&own_path)
        };
        for dir in owner::orphans_in(&parent, PREFIX) {
            if !out.contains(&dir) {
                out.push(dir);
            }
        }
    }
    out
}

/// cgroup v2: a leaf per sandbox beneath runner's own cgroup, where that cgroup is this
/// user's to write: root's, or delegated to the user the way systemd delegates a unit with
/// `Delegate=yes` (`systemd-run --user --scope -p Delegate=yes runner …`), which hands the
/// unit's directory and its `cgroup.procs` and `cgroup.subtree_control` to the user.
///
/// A leaf gets a limit only for a controller its parent passes on (`cgroup.subtree_control`).
/// A parent that has a controller but does not pass it on yet may only start to once no
/// process is in it (cgroup v2's "no internal processes" rule), so when runner is alone in
/// its cgroup (a scope of its own) it first moves itself into a leaf of its own
/// (`runner-<pid>-host`) and then passes the controllers on.
pub mod v2 {
    use std::path::{Path, PathBuf};
    use std::sync::OnceLock;

    use super::{PREFIX, SandboxCgroup, write};
    use crate::spec::Limits;

    /// The controllers runner sets limits with.
    const WANTED: [&str; 3] = ["memory", "pids", "cpu"];

    /// Where the cgroup v2 hierarchy is mounted: `/sys/fs/cgroup` on a v2 machine,
    /// `/sys/fs/cgroup/unified` on a hybrid one.
    /// Read once: every landlock start sweeps leftovers beneath it.
    pub fn mount() -> Option<PathBuf> {
        static MOUNT: OnceLock<Option<PathBuf>> = OnceLock::new();
        MOUNT
            .get_or_init(|| {
                let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
                mount_in(&text)
            })
            .clone()
    }

    /// The mount point of the first `cgroup2` line of a mountinfo text.
    fn mount_in(mountinfo: &str) -> Option<PathBuf> {
        mountinfo.lines().find_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            (after.split_whitespace().next()? == "cgroup2")
                .then(|| before.split_whitespace().nth(4).map(PathBuf::from))
                .flatten()
        })
    }

    /// Runner's own v2 cgroup directory: where it was started, also after it moved itself
    /// into its leaf there ([`pass_on`]).
    pub(super) fn own() -> Option<PathBuf> {
        let path = super::own_cgroups()
            .into_iter()
            .find(|(c, _)| c == "unified")?
            .1;
        let dir = mount()?.join(path);
        let host = format!("{PREFIX}{}-host", std::process::id());
        match dir.file_name() {
            Some(leaf) if leaf.to_string_lossy() == host => dir.parent().map(Path::to_path_buf),
            _ => Some(dir),
        }
    }

    fn words(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    /// What runner's cgroup passes on to the leaves, found (and, if it can be, arranged)
    /// once per process: the controllers, or why there are none of some.
    struct Parent {
        dir: PathBuf,
        passed: Vec<String>,
        note: Option<String>,
    }

    fn parent() -> Option<&'static Parent> {
        static PARENT: OnceLock<Option<Parent>> = OnceLock::new();
        PARENT.get_or_init(arrange).as_ref()
    }

    fn arrange() -> Option<Parent> {
        let dir = own()?;
        // Delegated to us (or we are root): we may make directories and move processes.
        if !writable(&dir) || !writable(&dir.join("cgroup.procs")) {
            return None;
        }
        let has = words(&dir.join("cgroup.controllers"));
        let mut passed = words(&dir.join("cgroup.subtree_control"));
        let missing: Vec<&str> = WANTED
            .into_iter()
            .filter(|c| !passed.iter().any(|p| p == c))
            .collect();
        let can_pass: Vec<&str> = missing
            .iter()
            .copied()
            .filter(|c| has.iter().any(|h| h == c))
            .collect();
        let mut note = None;
        if !can_pass.is_empty() {
            match pass_on(&dir, &can_pass) {
                Ok(()) => passed = words(&dir.join("cgroup.subtree_control")),
                Err(why) => note = Some(why),
            }
        }
        let absent: Vec<&str> = missing
            .iter()
            .copied()
            .filter(|c| !has.iter().any(|h| h == c))
            .collect();
        if note.is_none() && !absent.is_empty() {
            note = Some(format!(
                "runner's cgroup {} has no {} controller to pass on (it has: {}); a \
                 systemd user unit with Delegate=yes gets memory, pids and cpu",
                dir.display(),
                absent.join(", "),
                if has.is_empty() {
                    "none".to_string()
                } else {
                    has.join(" ")
                }
            ));
        }
        Some(Parent { dir, passed, note })
    }

    /// Moves runner into a leaf of its own, then passes `controllers` on. Only when runner
    /// is alone in its cgroup: moving it out of a cgroup it shares (a terminal's) would
    /// not empty that cgroup, and runner would be split from it for nothing.
    fn pass_on(dir: &Path, controllers: &[&str]) -> Result<(), String> {
        let me = std::process::id().to_string();
        let procs = words(&dir.join("cgroup.procs"));
        if procs.iter().any(|p| *p != me) {
            return Err(format!(
                "runner's cgroup {} holds other processes too, so it cannot pass its \
                 controllers on; start runner in a scope of its own: systemd-run --user \
                 --scope -p Delegate=yes runner …",
                dir.display()
            ));
        }
        let host = dir.join(format!("{PREFIX}{me}-host"));
        std::fs::create_dir_all(&host)
            .and_then(|()| write(&host.join("cgroup.procs"), &me))
            .map_err(|e| format!("cannot move runner into {}: {e}", host.display()))?;
        let enable: Vec<String> = controllers.iter().map(|c| format!("+{c}")).collect();
        write(&dir.join("cgroup.subtree_control"), &enable.join(" ")).map_err(|e| {
            format!(
                "cannot pass {} on in {}: {e}",
                controllers.join(", "),
                dir.display()
            )
        })
    }

    /// `access(path, W_OK)` for the real user.
    fn writable(path: &Path) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: a NUL-terminated path we own.
        unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
    }

    /// A leaf for one sandbox, with the limits its parent's controllers allow.
    pub fn create(name: &str, limits: &Limits, cg: &mut SandboxCgroup) {
        let Some(parent) = parent() else {
            return;
        };
        let dir = parent.dir.join(name);
        if std::fs::create_dir(&dir).is_err() {
            return;
        }
        let passes = |c: &str| parent.passed.iter().any(|p| p == c);
        for (file, value) in limit_files(limits) {
            let controller = file.split('.').next().unwrap_or_default();
            // memory.swap.max is a refinement (absent without swap accounting): the memory
            // limit is memory.max's.
            if passes(controller)
                && write(&dir.join(file), &value).is_ok()
                && file != "memory.swap.max"
            {
                cg.enforces_pids |= controller == "pids";
                cg.enforces_memory |= controller == "memory";
                cg.enforces_cpu |= controller == "cpu";
            }
        }
        cg.v2_note = parent.note.clone();
        cg.dirs.push(dir);
    }

    /// The v2 files a sandbox's limits go into, with their values.
    pub fn limit_files(limits: &Limits) -> [(&'static str, String); 4] {
        [
            ("pids.max", limits.pids.to_string()),
            ("memory.max", limits.memory_bytes.to_string()),
            // No swap beyond the memory limit, as the docker sandbox's memory_swap does.
            ("memory.swap.max", "0".to_string()),
            (
                "cpu.max",
                format!("{} 100000", (limits.cpus * 100_000.0) as u64),
            ),
        ]
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_v2_mount_is_found_on_hybrid_and_unified_machines() {
            let hybrid = "30 24 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                          41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                          42 31 0:39 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
            assert_eq!(
                mount_in(hybrid),
                Some(PathBuf::from("/sys/fs/cgroup/unified"))
            );
            let unified =
                "35 24 0:30 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n";
            assert_eq!(mount_in(unified), Some(PathBuf::from("/sys/fs/cgroup")));
            assert_eq!(
                mount_in("42 31 0:39 / /x rw - cgroup cgroup rw,pids\n"),
                None
            );
        }

        #[test]
        fn limits_are_written_in_the_v2_formats() {
            let limits = Limits {
                memory_bytes: 256 << 20,
                pids: 64,
                cpus: 1.5,
                ..Limits::default()
            };
            let files = limit_files(&limits);
            assert_eq!(files[0], ("pids.max", "64".to_string()));
            assert_eq!(files[1], ("memory.max", (256u64 << 20).to_string()));
            assert_eq!(files[2], ("memory.swap.max", "0".to_string()));
            assert_eq!(files[3], ("cpu.max", "150000 100000".to_string()));
        }
    }
}
