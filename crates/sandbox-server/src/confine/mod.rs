//! Self-confinement of the in-sandbox server for the `landlock` backend.
//!
//! The server applies every restriction to itself, on its single thread, before it serves
//! its first request: landlock rules and seccomp filters are inherited by every process it
//! starts and can never be lifted, so the server and every command share one wall. Order
//! matters: mounts first (they need privileges the later steps take away), then limits, then
//! capabilities, then landlock, then seccomp (which forbids the syscalls the earlier steps
//! used).
//!
//! Nothing here falls back on its own: a step that cannot be applied is an error, and the
//! server exits before serving anything. The one choice is the host's, made before the
//! server starts ([`namespaces_refused`]): where the machine refuses the namespaces, the
//! server is told to make none, and the host has said what that gives up.

mod identity;
mod landlock;
mod mount;
mod process;
mod seccomp;
mod tmp;

use std::path::PathBuf;

use runner_protocol::Network;

pub use identity::{CommandLimits, CommandUser, become_command_user, split as split_identity};
pub use landlock::{LandlockSupport, SYSTEM_DIRS, probe as probe_landlock};
pub use process::{kill_orphans, namespaces_refused};
pub use seccomp::deny_filter as seccomp_program;

/// Why seccomp filters do not hold here.
#[derive(Debug, thiserror::Error)]
pub enum SeccompUnusable {
    #[error(transparent)]
    Build(#[from] ConfineError),
    #[error("{0}")]
    Apply(#[from] seccompiler::Error),
    #[error("the filter applied but an AF_INET socket was still created")]
    NotEnforced,
    #[error("the probe thread panicked")]
    Panicked,
}

/// Whether seccomp filters apply here, found by applying runner's own filter to a
/// throwaway thread and trying what it forbids (an `AF_INET` socket).
pub fn probe_seccomp() -> Result<(), SeccompUnusable> {
    std::thread::spawn(|| {
        let prog = seccomp_program(Network::None, true)?;
        seccompiler::apply_filter(&prog)?;
        // SAFETY: plain syscall; the descriptor, if any, is closed at once.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        if fd >= 0 {
            // SAFETY: a descriptor this thread just opened.
            unsafe { libc::close(fd) };
            return Err(SeccompUnusable::NotEnforced);
        }
        Ok(())
    })
    .join()
    .unwrap_or(Err(SeccompUnusable::Panicked))
}

/// What the server must confine itself to. Built from `runner sandbox-server --confine`
/// flags, so the host-side backend and the server agree through the command line only.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// Directories readable and writable: the worktree and the private temp directory.
    pub writable: Vec<PathBuf>,
    /// Further directories readable (saved tool output).
    pub readable: Vec<PathBuf>,
    /// The private temp directory, which gets a size-limited tmpfs when a mount namespace
    /// is available.
    pub tmp: PathBuf,
    /// Existing paths under the writable ones that must stay read-only (`.git/hooks`).
    pub protected: Vec<PathBuf>,
    /// Directories bound onto themselves, so they cannot be renamed (`.git`).
    pub pinned: Vec<PathBuf>,
    /// Whether to make the mount and PID namespaces. The host says no where the machine
    /// refuses them ([`namespaces_refused`]): landlock and seccomp need none, and the
    /// protected paths are then kept by copy (see [`crate::restore`]).
    pub namespaces: bool,
    pub network: Network,
    pub memory_bytes: u64,
    pub pids: u64,
    pub tmp_bytes: u64,
    /// A layer left out on purpose, so that the self-test's tests can see it fail. Only a
    /// debug build's command line can set it (`--test-gap`); see [`TestGap`].
    pub test_gap: Option<TestGap>,
}

/// A layer of the wall a debug build can be told to leave out, for the tests that prove
/// the start's self-test notices. A release build has no flag that sets one, so neither a
/// repository nor a user can open a gap in a wall that ships.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestGap {
    Seccomp,
    Landlock,
}

impl std::str::FromStr for TestGap {
    type Err = String;
    fn from_str(s: &str) -> Result<TestGap, String> {
        match s {
            "seccomp" => Ok(TestGap::Seccomp),
            "landlock" => Ok(TestGap::Landlock),
            other => Err(format!("no layer {other:?} (seccomp, landlock)")),
        }
    }
}

impl TestGap {
    pub fn name(self) -> &'static str {
        match self {
            TestGap::Seccomp => "seccomp",
            TestGap::Landlock => "landlock",
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot confine the sandbox: {step}: {message}")]
pub struct ConfineError {
    pub step: &'static str,
    pub message: String,
}

impl ConfineError {
    fn new(step: &'static str, message: impl std::fmt::Display) -> ConfineError {
        ConfineError {
            step,
            message: message.to_string(),
        }
    }
}

/// Applies the whole confinement to the calling (single-threaded) process. `interactive`
/// keeps the controlling terminal (for `runner sandbox shell`, where the terminal is the
/// user's on purpose).
pub fn apply(c: &Confinement, interactive: bool) -> Result<(), ConfineError> {
    process::die_with_parent()?;
    if !interactive {
        process::leave_terminal()?;
    }
    let mounts = if c.namespaces {
        process::private_mounts(c)?
    } else {
        process::become_subreaper()?;
        process::Mounts::default()
    };
    // After the user namespace's maps are written (they need a dumpable process), before
    // the supervisors fork: none of them may be opened through `/proc/PID/fd` by a command.
    process::not_dumpable()?;
    if mounts.with_pids {
        process::enter_pid_namespace()?;
    }
    process::set_limits(c)?;
    identity::limit_commands(CommandLimits {
        processes: process::command_processes(c),
        address_space: Some(c.memory_bytes),
    });
    process::drop_capabilities()?;
    if c.test_gap != Some(TestGap::Landlock) {
        landlock::restrict(c, mounts.tmp.as_slice())?;
    }
    // Landlock (ABI 7) does not govern connect() to a pathname Unix socket, so the Docker
    // socket, an ssh-agent or a D-Bus session would be one connect away: no Unix socket
    // can be created at all (socketpair still works).
    if c.test_gap != Some(TestGap::Seccomp) {
        seccomp::install(c.network, true)?;
    }
    Ok(())
}

/// The seccomp part alone, for the server inside a container: it adds what the engine's
/// default profile allows and we do not (ptrace, io_uring, vsock, namespaces, …).
pub fn seccomp_only(network: Network, test_gap: Option<TestGap>) -> Result<(), ConfineError> {
    process::not_dumpable()?;
    process::container_init()?;
    if test_gap == Some(TestGap::Seccomp) {
        return Ok(());
    }
    seccomp::install(network, false)
}
