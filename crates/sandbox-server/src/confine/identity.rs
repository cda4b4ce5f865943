//! Two identities in a container: the server keeps a user id that no command has.
//!
//! Why: the server's standard input and output are the protocol, and the server (with the
//! container's init) is a process a command could signal. On Linux, "not dumpable" keeps a
//! command of the same user out of `/proc/SERVER/fd`, and init ignores signals from its own
//! namespace. gVisor honours neither (a command of the same user opens the server's pipes
//! through `/proc/1/fd/0` and SIGKILLs init), but it does check user ids, as Linux does. So
//! the container starts as root with four capabilities, and before anything else the server
//! splits itself:
//!
//! - real and saved user id `S` (0, or 65534 when commands run as root), effective and file
//!   system user id `C`, the command user: every file the server writes is `C`'s, as before;
//! - the protocol's descriptors, where they belong to `C`, are handed to `S` (a pipe is
//!   opened through `/proc` by its owner's permissions under gVisor);
//! - the bounding set emptied and every capability set cleared.
//!
//! A command becomes `C` entirely (`setresuid(C, C, C)`, which needs no privilege since
//! `C` is one of the server's ids). Linux lets a process signal another only when one of
//! the sender's real or effective ids is the target's real or saved id, and opens
//! `/proc/PID/fd` only to a caller whose id matches all three of the target's: `C` matches
//! neither of the server's `S` ids. The server still signals commands (its effective id is
//! theirs).

use std::sync::OnceLock;

use super::{ConfineError, process};

/// Who commands run as, from `--command-user UID:GID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandUser {
    pub uid: u32,
    pub gid: u32,
}

impl std::str::FromStr for CommandUser {
    type Err = String;
    fn from_str(s: &str) -> Result<CommandUser, String> {
        let (uid, gid) = s
            .split_once(':')
            .ok_or_else(|| format!("expected UID:GID, got {s:?}"))?;
        let id = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| format!("{v:?} is not a numeric id (in {s:?})"))
        };
        Ok(CommandUser {
            uid: id(uid)?,
            gid: id(gid)?,
        })
    }
}

impl CommandUser {
    /// The id the server keeps as its real and saved one: never the command user's.
    pub fn server_uid(self) -> u32 {
        if self.uid == 0 { NOBODY } else { 0 }
    }

    pub fn server_gid(self) -> u32 {
        if self.gid == 0 { NOBODY } else { 0 }
    }
}

const NOBODY: u32 = 65534;

/// Limits set on every command between fork and exec, never on the server itself: the
/// server must still start a thread, and map the buffers of its answers, when a command has
/// used up everything a command may (a server under a 256 MiB RLIMIT_AS sits a few MiB
/// below it at rest, and a thread it could not start left a call unanswered).
///
/// In a container they exist for gVisor: its processes are threads of one host process, so
/// the host's cgroup sees the whole sandbox as one thing, and a command that passes the
/// cgroup's limit takes the sandbox down with it. Inside gVisor's kernel these rlimits fail
/// the one call that asked too much. Under landlock they back up the cgroup (where the host
/// can make one): RLIMIT_AS stops a single memory bomb, RLIMIT_NPROC a fork bomb of a
/// non-root user.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommandLimits {
    /// RLIMIT_NPROC: the most processes the command user may have.
    pub processes: Option<u64>,
    /// RLIMIT_AS: the most address space one command may map. gVisor checks it on every
    /// `mmap`, `mremap` and `brk`, so an allocation past it fails with ENOMEM (Python's
    /// MemoryError, a C program's NULL) instead of pushing the sandbox past its memory.
    pub address_space: Option<u64>,
}

/// Who commands become, where the server split its identity.
static COMMAND_USER: OnceLock<CommandUser> = OnceLock::new();
/// What every command is limited to.
static COMMAND_LIMITS: OnceLock<CommandLimits> = OnceLock::new();

/// Sets the limits every command gets from now on (the first call wins).
pub fn limit_commands(limits: CommandLimits) {
    let _ = COMMAND_LIMITS.set(limits);
}

/// Splits the calling process as the module says. Runs first, single-threaded (the id
/// changes below are made per thread by the kernel; glibc's wrappers change every thread,
/// but there must be no other thread to race), as root with CAP_SETUID, CAP_SETGID,
/// CAP_SETPCAP and CAP_CHOWN.
pub fn split(user: CommandUser, limits: CommandLimits) -> Result<(), ConfineError> {
    let (server_uid, server_gid) = (user.server_uid(), user.server_gid());
    hand_over_protocol(user, server_uid, server_gid)?;
    // Fails only with EPERM here (EINVAL ends its loop): no CAP_SETPCAP.
    process::drop_bounding_set(true).map_err(|e| ConfineError {
        message: format!("{}{}", e.message, must_have("CAP_SETPCAP")),
        step: e.step,
    })?;
    // SAFETY: plain syscalls on integers and a one-element array.
    unsafe {
        if libc::setgroups(1, &user.gid) != 0 {
            return Err(failed("set groups", "CAP_SETGID"));
        }
        if libc::setresgid(server_gid, user.gid, server_gid) != 0 {
            return Err(failed("set group ids", "CAP_SETGID"));
        }
        if libc::setresuid(server_uid, user.uid, server_uid) != 0 {
            return Err(failed("set user ids", "CAP_SETUID"));
        }
    }
    process::clear_capability_sets()?;
    let _ = COMMAND_USER.set(user);
    limit_commands(limits);
    Ok(())
}

/// The protocol's descriptors (0, 1, 2) that belong to the command user are given to the
/// server's id. A terminal stays as it is (it is the user's, for `runner sandbox shell`).
fn hand_over_protocol(user: CommandUser, uid: u32, gid: u32) -> Result<(), ConfineError> {
    for fd in 0..=2 {
        // SAFETY: fstat into a local, isatty and fchown on descriptors we hold.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) != 0 || libc::isatty(fd) == 1 || st.st_uid != user.uid {
                continue;
            }
            if libc::fchown(fd, uid, gid) != 0 {
                return Err(failed("hand the protocol to the server's id", "CAP_CHOWN"));
            }
        }
    }
    Ok(())
}

/// For a child between fork and exec: takes the commands' limits (where any were set), then
/// becomes the command user entirely, or stays as it is where the server did not split.
/// Async-signal-safe (plain syscalls).
pub fn become_command_user() -> std::io::Result<()> {
    if let Some(limits) = COMMAND_LIMITS.get() {
        if let Some(n) = limits.processes {
            lower_limit(libc::RLIMIT_NPROC, n)?;
        }
        if let Some(n) = limits.address_space {
            lower_limit(libc::RLIMIT_AS, n)?;
        }
    }
    let Some(user) = COMMAND_USER.get() else {
        return Ok(());
    };
    // SAFETY: plain syscalls on integers.
    unsafe {
        if libc::setresgid(user.gid, user.gid, user.gid) != 0
            || libc::setresuid(user.uid, user.uid, user.uid) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sets both values of a resource limit to `n`, never above the hard limit it has (raising
/// that needs a capability). Async-signal-safe.
fn lower_limit(resource: libc::__rlimit_resource_t, n: u64) -> std::io::Result<()> {
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(resource, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        limit.rlim_max = limit.rlim_max.min(n);
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(resource, &limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The step's failure from the last error; EPERM means the container was made without the
/// capability the step needs, and the message says so.
fn failed(step: &'static str, cap: &str) -> ConfineError {
    let e = std::io::Error::last_os_error();
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) => must_have(cap),
        _ => String::new(),
    };
    ConfineError::new(step, format!("{e}{hint}"))
}

fn must_have(cap: &str) -> String {
    format!(" (the container must start as root with {cap})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_never_keeps_the_command_users_id() {
        for (uid, gid) in [(0, 0), (1000, 1000), (65534, 65534), (0, 1000), (1000, 0)] {
            let u = CommandUser { uid, gid };
            assert_ne!(u.server_uid(), uid);
            assert_ne!(u.server_gid(), gid);
        }
        assert_eq!(
            "1000:100".parse::<CommandUser>(),
            Ok(CommandUser {
                uid: 1000,
                gid: 100
            })
        );
        assert!("1000".parse::<CommandUser>().is_err());
        assert!("me:100".parse::<CommandUser>().is_err());
    }
}
