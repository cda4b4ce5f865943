//! The wall's self-test at start: what the host asks the server to try from inside, and
//! what the server saw.
//!
//! The server only looks; the host judges. Each probe is a fact (an errno, a bit mask, a
//! mode) with the time it took, and what the fact must be depends on the backend and the
//! network mode, which the host knows and the server need not (see the host's
//! `self_test` module). A server that was started without a layer, by a bug or by a
//! machine that quietly went without, reports the fact as it is, and the host refuses to
//! go on.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What to try from inside the wall.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SelfTestRequest {
    /// The worktree as the sandbox sees it: a file is made there, written and removed.
    pub worktree: PathBuf,
    /// A file the host made outside the worktree: opening it must fail.
    pub canary: PathBuf,
}

/// One probe's fact. `errno` is the error the attempt ended in (`None`: it worked);
/// `value` what it read, where it read something (a mask in hex, a mode).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    /// How long the probe took inside the wall.
    pub micros: u64,
}

/// Every probe's fact, in the order they ran.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WallFacts {
    pub probes: Vec<Probe>,
}

impl WallFacts {
    pub fn probe(&self, name: &str) -> Option<&Probe> {
        self.probes.iter().find(|p| p.name == name)
    }
}

/// The probes' names, shared by both sides so that neither misspells the other's.
pub mod probes {
    /// Make, write and remove a file in the worktree.
    pub const WORKTREE_WRITE: &str = "worktree_write";
    /// Open the host's canary for reading.
    pub const CANARY_READ: &str = "canary_read";
    /// `prctl(PR_GET_SECCOMP)`: 2 under a filter.
    pub const SECCOMP_MODE: &str = "seccomp_mode";
    /// `ptrace(PTRACE_PEEKDATA)` of the server itself, which no one traces: the kernel
    /// answers ESRCH and changes nothing; runner's filter answers EPERM first. A container
    /// engine's default profile allows `ptrace` (on kernels from 4.8), so this tells runner's
    /// filter from the engine's.
    pub const SECCOMP_DENIES: &str = "seccomp_denies";
    /// `socket(AF_INET, SOCK_STREAM)`.
    pub const INET_SOCKET: &str = "inet_socket";
    /// `connect()` of a UDP socket to 192.0.2.1 (TEST-NET-1): needs a route, sends nothing.
    pub const ROUTE_V4: &str = "route_v4";
    /// The same to 2001:db8::1 (the documentation prefix).
    pub const ROUTE_V6: &str = "route_v6";
    /// The capability sets, as masks (bit N: capability N).
    pub const CAP_EFFECTIVE: &str = "cap_effective";
    pub const CAP_PERMITTED: &str = "cap_permitted";
    pub const CAP_BOUNDING: &str = "cap_bounding";
    pub const CAP_AMBIENT: &str = "cap_ambient";
    /// `prctl(PR_GET_NO_NEW_PRIVS)`: 1 when no exec can gain privileges.
    pub const NO_NEW_PRIVS: &str = "no_new_privs";
}
