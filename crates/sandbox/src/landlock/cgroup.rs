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
    // cgroup v2: one directory, if the parent delegates the controllers to children.
    if cg.dirs.is_empty()
        && let Some((_, own_path)) = own.iter().find(|(c, _)| c == "unified")
        && base.join("cgroup.controllers").exists()
    {
        let parent = base.join(own_path);
        let dir = parent.join(&name);
        let subtree =
            std::fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
        if std::fs::create_dir(&dir).is_ok() {
            if subtree.contains("pids")
                && write(&dir.join("pids.max"), &limits.pids.to_string()).is_ok()
            {
                cg.enforces_pids = true;
            }
            if subtree.contains("memory")
                && write(&dir.join("memory.max"), &limits.memory_bytes.to_string()).is_ok()
            {
                cg.enforces_memory = true;
            }
            if subtree.contains("cpu")
                && write(
                    &dir.join("cpu.max"),
                    &format!("{} 100000", (limits.cpus * 100_000.0) as u64),
                )
                .is_ok()
            {
                cg.enforces_cpu = true;
            }
            cg.dirs.push(dir);
        }
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
    (!missing.is_empty()).then(|| format!("no cgroup limit for {}", missing.join(", ")))
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
            Path::new("/sys/fs/cgroup").join(&own_path)
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
