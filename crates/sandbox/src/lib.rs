//! The isolation boundary, host side: the client and the backends that start the server.
//! The protocol both sides speak is a crate of its own (`runner_protocol`), and so is what
//! runs inside the wall (`runner_sandbox_server`), which cannot link the host's code; callers
//! name them directly.
//!
//! Backends differ only in how the server is started; every tool talks to the same
//! [`SandboxClient`], so tool code runs unchanged on every backend.

pub mod choose;
pub mod client;
pub use runner_sandbox_server::confine;
pub mod docker;
pub mod engine_fault;
pub mod exec;
pub mod landlock;
pub mod local;
pub mod owner;
pub mod self_test;
pub mod spec;
pub mod splice;
pub mod start_error;
pub mod terminal;
pub mod trust;
pub mod worktree_guard;

use std::path::{Path, PathBuf};

pub use client::{SandboxClient, SandboxError};

/// Which wall the tools run behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// No isolation: the server is a plain child process; only the permission rules and the
    /// server's own path resolution stand between the agent and the machine.
    None,
    /// The server confines itself with landlock and seccomp before serving: the worktree
    /// read-write, system directories read-only, a private temp directory, no network.
    Landlock,
    /// The server runs in a hardened container that sees only the worktree.
    Docker,
}

impl BackendKind {
    pub const ALL: [BackendKind; 3] = [
        BackendKind::None,
        BackendKind::Landlock,
        BackendKind::Docker,
    ];

    /// What the wall is, in a sentence (the variants' docs, for `--help`).
    pub fn about(self) -> &'static str {
        match self {
            BackendKind::None => {
                "No isolation: the server is a plain child process; only the permission rules and the server's own path resolution stand between the agent and the machine"
            }
            BackendKind::Landlock => {
                "The server confines itself with landlock and seccomp before serving: the worktree read-write, system directories read-only, a private temp directory, no network"
            }
            BackendKind::Docker => {
                "The server runs in a hardened container that sees only the worktree"
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BackendKind::None => "none",
            BackendKind::Landlock => "landlock",
            BackendKind::Docker => "docker",
        }
    }
}

/// Starts the sandbox a spec asks for. Fails, never falls back: if the wall cannot be
/// built, nothing runs.
pub async fn open(spec: &spec::SandboxSpec) -> Result<Sandbox, SandboxError> {
    match spec.backend {
        BackendKind::None => {
            let mut sandbox =
                local::spawn_child(&spec.server_exe, &spec.worktree, &spec.read_only).await?;
            // The profile's additions to the allow-list hold here too.
            for key in &spec.env_allow {
                if !sandbox.env.iter().any(|(have, _)| have == key)
                    && let Ok(value) = std::env::var(key)
                {
                    sandbox.env.push((key.clone(), value));
                }
            }
            Ok(sandbox)
        }
        BackendKind::Landlock => checked(landlock::open(spec).await?, spec).await,
        BackendKind::Docker => checked(docker::open(spec).await?, spec).await,
    }
}

/// A walled sandbox after its self-test ([`self_test`]): kept with its report when every
/// check passed, closed with the failed check's error otherwise.
async fn checked(mut sandbox: Sandbox, spec: &spec::SandboxSpec) -> Result<Sandbox, SandboxError> {
    if let Some(wall) = sandbox.wall {
        sandbox.self_test = Some(self_test::run(&sandbox, wall, spec.network).await?);
    }
    Ok(sandbox)
}

/// A started sandbox: the client plus whatever keeps the server alive.
pub struct Sandbox {
    pub client: SandboxClient,
    /// The worktree as seen inside the sandbox.
    pub worktree: PathBuf,
    pub backend: BackendKind,
    /// The environment commands run with: an allow-list, never the host's whole environment.
    pub env: Vec<(String, String)>,
    /// The container the server runs in (docker backend), e.g. for `docker exec`.
    pub container_id: Option<String>,
    /// What the person running runner should know about this wall, once, at the start
    /// (what the machine made it go without).
    pub notes: Vec<String>,
    /// What the self-test judges this wall as (`None`: no wall to test).
    pub wall: Option<self_test::Wall>,
    /// The self-test's report, once it passed ([`self_test`]).
    pub self_test: Option<self_test::SelfTestReport>,
    _keepalive: local::Keepalive,
}

impl Sandbox {
    pub fn worktree(&self) -> &Path {
        &self.worktree
    }
}

/// Host variables a command may see. Everything else (API keys, tokens, cloud credentials)
/// stays on the host.
pub const ENV_ALLOW_LIST: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "SHELL",
];

pub fn allowed_env() -> Vec<(String, String)> {
    ENV_ALLOW_LIST
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect()
}
