//! The process-level parts of confinement: parent-death signal, a private mount namespace
//! (read-only protected paths, a size-limited tmpfs), resource limits and capabilities.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::mount::{errno, mount, read_only};
use super::{ConfineError, Confinement};
use runner_protocol::Network;

/// If the controller dies without closing our input (SIGKILL of a frozen process), the
/// server must not outlive it.
pub fn die_with_parent() -> Result<(), ConfineError> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        return Err(ConfineError::new("parent-death signal", errno()));
    }
    Ok(())
}

/// The server's standard input and output are the protocol. Under landlock a command runs
/// as the same user, so while the server is dumpable it could open `/proc/SERVER/fd/1` and
/// write frames of its own to the controller (or `fd/0`, and send the server requests).
/// Not dumpable, those files (and `ptrace`, `pidfd_getfd`) are refused to anyone without
/// CAP_SYS_PTRACE, which no command has. Commands get the flag back when they exec. (In a
/// container the server also keeps a user id of its own, for gVisor, which ignores this
/// flag: see [`super::identity`].)
pub fn not_dumpable() -> Result<(), ConfineError> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(ConfineError::new("not dumpable", errno()));
    }
    Ok(())
}

/// A new session without a controlling terminal: a command that opens `/dev/tty` then gets
/// nothing, instead of the terminal runner was started from, where it could type into the
/// user's shell with TIOCSTI after runner exits (bubblewrap's CVE-2017-5226).
pub fn leave_terminal() -> Result<(), ConfineError> {
    // SAFETY: plain syscall. It fails only for a process-group leader, which the server,
    // started as a child of runner, is not.
    if unsafe { libc::setsid() } < 0 {
        return Err(ConfineError::new("new session", errno()));
    }
    Ok(())
}

/// Landlock cannot make a path beneath a writable tree read-only (its rules only add
/// rights), so `.git/hooks` is protected with a read-only bind mount in a mount namespace of
/// our own. The same namespace gives the private temp directory a tmpfs with a size limit.
/// As root the namespace needs no user namespace; otherwise an unprivileged user namespace
/// maps us to ourselves.
///
/// The sandbox's `/tmp` is a tmpfs of its own there too (see [`super::tmp`]).
///
/// A new PID namespace comes with it where the kernel allows one: then the sandbox's
/// `/proc` shows only its own processes, not the host's command lines. Returns what was
/// made; when `with_pids`, [`enter_pid_namespace`] must then follow.
pub fn private_mounts(c: &Confinement) -> Result<Mounts, ConfineError> {
    // SAFETY: plain syscalls.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut flags = namespace_flags();
    let private_network = c.network == Network::Allowlist;
    if private_network {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: unshare takes only flags; we are single-threaded here.
    let with_pids = unsafe { libc::unshare(flags | libc::CLONE_NEWPID) } == 0;
    if !with_pids && unsafe { libc::unshare(flags) } != 0 {
        let e = errno();
        if private_network {
            // The proxy is the only way out only if the sandbox has no network of its own.
            return Err(ConfineError::new(
                "network namespace",
                format!(
                    "{e}; --network allowlist needs a private network namespace (only a \
                     loopback inside), and this machine refuses one. Allow unprivileged user \
                     namespaces (sysctl kernel.unprivileged_userns_clone=1, or the AppArmor \
                     userns policy), or use --sandbox docker"
                ),
            ));
        }
        if c.protected.is_empty() && c.pinned.is_empty() {
            // Nothing depends on the namespace but the tmpfs size, which then falls back to
            // the per-file limit (`sandbox doctor` reports it).
            return Ok(Mounts::default());
        }
        return Err(ConfineError::new(
            "mount namespace",
            format!(
                "{e}; it is needed to keep {} read-only. Allow unprivileged user namespaces \
                 (sysctl kernel.unprivileged_userns_clone=1, or the AppArmor userns policy), \
                 or use --sandbox docker",
                c.protected
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if private_network {
        loopback_up().map_err(|e| {
            ConfineError::new("network namespace", format!("cannot bring up lo: {e}"))
        })?;
    }
    if uid != 0 {
        let write = |file: &str, data: String| {
            std::fs::write(file, data).map_err(|e| ConfineError::new("user namespace", e))
        };
        write("/proc/self/setgroups", "deny".into())?;
        write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    }
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
    .map_err(|e| ConfineError::new("make mounts private", e))?;
    // First: the roots it binds back are where the mounts below find them.
    let tmp = super::tmp::private_tmp(c)?;
    // A mount point cannot be renamed or removed: `.git` stays where host git looks for it.
    for dir in &c.pinned {
        bind_onto_itself(dir)
            .map_err(|e| ConfineError::new("pin directory", format!("{}: {e}", dir.display())))?;
    }
    for path in &c.protected {
        protect(path)
            .map_err(|e| ConfineError::new("protect path", format!("{}: {e}", path.display())))?;
    }
    let options = format!("size={},mode=0700", c.tmp_bytes);
    mount(
        Some("tmpfs".as_ref()),
        &c.tmp,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&options),
    )
    .map_err(|e| ConfineError::new("temp directory", format!("{}: {e}", c.tmp.display())))?;
    Ok(Mounts { with_pids, tmp })
}

/// What [`private_mounts`] made.
#[derive(Debug, Default)]
pub struct Mounts {
    /// A PID namespace, still to be entered.
    pub with_pids: bool,
    /// The private `/tmp`, for landlock to let the sandbox write.
    pub tmp: Option<std::path::PathBuf>,
}

/// The namespaces [`private_mounts`] makes, for this user: root needs only a mount
/// namespace, anyone else a user namespace to make it in.
fn namespace_flags() -> libc::c_int {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } == 0 {
        libc::CLONE_NEWNS
    } else {
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS
    }
}

/// Why this process could not make the server's namespaces, or `None` when it can. Tried
/// in a forked child, as the server would: `unshare(CLONE_NEWUSER)` refuses a
/// multi-threaded caller, and only a real attempt sees every policy that may refuse it (a
/// sysctl, AppArmor, a seccomp filter, a container's profile).
pub fn namespaces_refused() -> Option<String> {
    let flags = namespace_flags();
    // SAFETY: the child makes only async-signal-safe calls (unshare, _exit) before it
    // exits; the parent reaps it.
    let code = unsafe {
        let child = libc::fork();
        if child == 0 {
            let rc = libc::unshare(flags);
            let e = *libc::__errno_location();
            libc::_exit(if rc == 0 { 0 } else { e.clamp(1, 255) });
        }
        if child < 0 {
            return Some(format!("cannot fork to try them: {}", errno()));
        }
        let mut status = 0;
        if libc::waitpid(child, &mut status, 0) != child || !libc::WIFEXITED(status) {
            return Some("the process that tried them did not exit normally".into());
        }
        libc::WEXITSTATUS(status)
    };
    (code != 0).then(|| {
        let e = std::io::Error::from_raw_os_error(code);
        format!("unshare: {e}; {}", userns_policy())
    })
}

/// What on this machine refuses user namespaces, as far as the sysctls tell.
fn userns_policy() -> &'static str {
    let is =
        |file: &str, value: &str| std::fs::read_to_string(file).is_ok_and(|s| s.trim() == value);
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } == 0 {
        "root without CAP_SYS_ADMIN (a container?) cannot make a mount namespace"
    } else if is(
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        "1",
    ) {
        "AppArmor restricts unprivileged user namespaces \
         (kernel.apparmor_restrict_unprivileged_userns=1)"
    } else if is("/proc/sys/user/max_user_namespaces", "0") {
        "user namespaces are off (user.max_user_namespaces=0)"
    } else if is("/proc/sys/kernel/unprivileged_userns_clone", "0") {
        "unprivileged user namespaces are off (kernel.unprivileged_userns_clone=0)"
    } else {
        "something refuses unprivileged user namespaces (a seccomp filter, a container's \
         policy)"
    }
}

/// Set once the server is the subreaper of everything its commands leave behind.
static SUBREAPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Without a PID namespace nothing dies with the sandbox: a `setsid` process would outlive
/// it, and could change the worktree after the host has put the protected files back. As a
/// child subreaper the server inherits every orphan of its commands instead of init, so
/// [`kill_orphans`] can find them all when it stops.
pub fn become_subreaper() -> Result<(), ConfineError> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(ConfineError::new("child subreaper", errno()));
    }
    SUBREAPER.store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// Kills and reaps every child of the server (its commands and the orphans they left),
/// again and again as the children of the dying are handed to it, for up to two seconds.
/// Does nothing unless `become_subreaper` ran (a PID namespace kills them by itself).
pub fn kill_orphans() {
    if !SUBREAPER.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    // SAFETY: plain syscall.
    let me = unsafe { libc::getpid() };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let children = children_of(me);
        if children.is_empty() || std::time::Instant::now() > deadline {
            return;
        }
        for &pid in &children {
            // SAFETY: kill and a non-blocking waitpid on our own children.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The processes whose parent is `parent`, from `/proc/PID/stat` (after the command
/// name, which may hold spaces and parentheses: state, then the parent's pid).
fn children_of(parent: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
                    == Some(parent)
            })
        })
        .collect()
}

/// After `unshare(CLONE_NEWPID)` only children enter the new namespace, so this forks
/// twice: the calling process stays outside as the supervisor the host knows (it forwards
/// termination signals and exits with the server's status), its child is the namespace's
/// init (it mounts the namespace's own `/proc`, reaps orphans, forwards signals), and the
/// grandchild returns from here to be the server. All three die with their parent.
pub fn enter_pid_namespace() -> Result<(), ConfineError> {
    // SAFETY: fork in a single-threaded process; each side only makes syscalls afterwards.
    let init = unsafe { libc::fork() };
    if init < 0 {
        return Err(ConfineError::new("pid namespace", errno()));
    }
    if init > 0 {
        supervise(init, false);
    }
    die_with_parent()?;
    mount(
        Some("proc".as_ref()),
        Path::new("/proc"),
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )
    .map_err(|e| ConfineError::new("mount /proc", e))?;
    // SAFETY: as above.
    let server = unsafe { libc::fork() };
    if server < 0 {
        return Err(ConfineError::new("pid namespace", errno()));
    }
    if server > 0 {
        supervise(server, true);
    }
    die_with_parent()
}

/// In a container the server is the first process (no `docker-init`: an init the server
/// does not control would hold the protocol's pipes, dumpable, where a command could open
/// them through `/proc/1/fd`). As PID 1 it forks: this process stays the container's init
/// (reaps orphans, forwards termination signals, not dumpable), the child returns to serve.
/// Elsewhere (a test starting the server by hand) it does nothing.
pub fn container_init() -> Result<(), ConfineError> {
    // SAFETY: getpid and fork in a single-threaded process; the parent only makes syscalls.
    unsafe {
        if libc::getpid() != 1 {
            return Ok(());
        }
        let server = libc::fork();
        if server < 0 {
            return Err(ConfineError::new("container init", errno()));
        }
        if server > 0 {
            supervise(server, true);
        }
    }
    die_with_parent()
}

/// Waits for `child`, forwarding SIGTERM, SIGINT and SIGHUP to it; as init, also reaps
/// every orphan. Exits with the child's status.
fn supervise(child: libc::pid_t, reap_all: bool) -> ! {
    // SAFETY: signal-mask calls on local sets; waitpid/kill on our own children.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
            libc::sigaddset(&mut set, sig);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        loop {
            // A child may have ended before the mask was set: look before waiting.
            loop {
                let mut status = 0;
                let target = if reap_all { -1 } else { child };
                let pid = libc::waitpid(target, &mut status, libc::WNOHANG);
                if pid <= 0 {
                    break;
                }
                if pid == child {
                    let code = if libc::WIFEXITED(status) {
                        libc::WEXITSTATUS(status)
                    } else {
                        128 + libc::WTERMSIG(status)
                    };
                    libc::_exit(code);
                }
            }
            let mut sig = 0;
            if libc::sigwait(&set, &mut sig) == 0 && sig != libc::SIGCHLD {
                libc::kill(child, sig);
            }
        }
    }
}

/// A new network namespace starts with `lo` down; the proxy listens on it.
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: a datagram socket used only for two interface ioctls on a zeroed ifreq whose
    // name is set below; the descriptor is closed before returning.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(errno());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo\0".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let mut result = Ok(());
        if libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req) != 0 {
            result = Err(errno());
        } else {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req) != 0 {
                result = Err(errno());
            }
        }
        libc::close(fd);
        result
    }
}

fn bind_onto_itself(path: &Path) -> std::io::Result<()> {
    mount(
        Some(path.as_os_str()),
        path,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )
}

fn protect(path: &Path) -> std::io::Result<()> {
    bind_onto_itself(path)?;
    read_only(path)
}

/// Per-process limits. They back up the cgroup limits the host sets where it can (as root).
/// RLIMIT_FSIZE (a single file filling the disk) and RLIMIT_CORE hold for the server and
/// every command. RLIMIT_AS (a single memory bomb) and RLIMIT_NPROC (a fork bomb of a
/// non-root user; the kernel never applies it to root, which is why the host puts root's
/// sandboxes in a pids cgroup) are set on each command as it starts (see [`super::apply`]),
/// never on the server: it must still answer when a command has used up its share.
pub fn set_limits(c: &Confinement) -> Result<(), ConfineError> {
    let set = |resource, value: u64, name: &'static str| {
        let lim = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: valid pointer to an rlimit.
        if unsafe { libc::setrlimit(resource, &lim) } != 0 {
            return Err(ConfineError::new(name, errno()));
        }
        Ok(())
    };
    set(
        libc::RLIMIT_FSIZE,
        c.tmp_bytes,
        "file size limit (RLIMIT_FSIZE)",
    )?;
    set(libc::RLIMIT_CORE, 0, "core dump limit")?;
    Ok(())
}

/// The RLIMIT_NPROC each command gets: none for root (the kernel never applies it), else
/// the user's current count of tasks plus the sandbox's allowance, since the limit counts
/// every task of the user, sandboxed or not.
pub fn command_processes(c: &Confinement) -> Option<u64> {
    // SAFETY: plain syscall.
    let uid = unsafe { libc::getuid() };
    (uid != 0).then(|| tasks_of(uid).saturating_add(c.pids))
}

fn tasks_of(uid: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut total = 0u64;
    for entry in entries.flatten() {
        if !entry.file_name().as_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if field("Uid:") == Some(u64::from(uid)) {
            total += field("Threads:").unwrap_or(1);
        }
    }
    total
}

/// Drops every capability, from the bounding set too, so that root inside the sandbox is an
/// ordinary user: no CAP_SYS_ADMIN, no CAP_DAC_OVERRIDE, nothing regained on exec.
pub fn drop_capabilities() -> Result<(), ConfineError> {
    drop_bounding_set(false)?;
    clear_capability_sets()
}

/// Empties the bounding set, so that no later exec can gain a capability (not even as
/// root). `required`: fail when this process lacks CAP_SETPCAP; otherwise that is taken as
/// a bounding set that already holds nothing of use.
pub fn drop_bounding_set(required: bool) -> Result<(), ConfineError> {
    // SAFETY: prctl with integer arguments; EINVAL past the last capability ends the loop.
    unsafe {
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                let e = errno();
                if e.raw_os_error() == Some(libc::EINVAL) {
                    break;
                }
                if required || e.raw_os_error() != Some(libc::EPERM) {
                    return Err(ConfineError::new("drop the bounding capabilities", e));
                }
            }
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
    }
    Ok(())
}

/// Clears the effective, permitted and inheritable sets (lowering them needs no privilege).
pub fn clear_capability_sets() -> Result<(), ConfineError> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: header and a two-element data array, as capset(2) requires for version 3.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
        return Err(ConfineError::new("drop capabilities", errno()));
    }
    Ok(())
}
