//! What a sandbox is asked to be: the backend, the directories it sees, its limits, its
//! network and the environment commands get. Profiles fill this in; every backend reads the
//! same struct, so "the same limits in both backends" is one value, not two code paths.

use std::path::{Path, PathBuf};

use super::BackendKind;

// The network mode and where the proxy listens are part of the protocol: the server
// inside the wall needs them as much as the host does.
pub use runner_protocol::network::{LOOPBACK_NAMES, Network, PROXY_PORT, proxy_env, set_proxy_env};

/// Resource limits. Each backend enforces what it can; `runner sandbox doctor` says which it
/// cannot.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    pub memory_bytes: u64,
    pub cpus: f64,
    pub pids: u64,
    pub tmp_bytes: u64,
    /// `--network allowlist`: connections through the proxy open at once.
    #[serde(default = "default_net_connections")]
    pub net_connections: u64,
    /// `--network allowlist`: bytes through the proxy, both ways, over the sandbox's life.
    #[serde(default = "default_net_bytes")]
    pub net_bytes: u64,
    /// `--workspace copy`: what commands may write in the copy beyond the copy itself
    /// (its own file system's free space; the workspace module makes it).
    #[serde(default = "default_disk_bytes")]
    pub disk_bytes: u64,
}

/// `disk_bytes` when the profile names none: room for a large build (a Rust or C++ target
/// folder, `node_modules`, a model checkpoint or two) while a runaway loop still stops long
/// before a typical host disk is full. The copy's image is sparse: only what is written costs.
pub const DEFAULT_DISK_BUDGET: u64 = 10 << 30;

fn default_disk_bytes() -> u64 {
    DEFAULT_DISK_BUDGET
}

fn default_net_connections() -> u64 {
    64
}

fn default_net_bytes() -> u64 {
    8 << 30
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 4 << 30,
            cpus: 2.0,
            pids: 1024,
            tmp_bytes: 1 << 30,
            net_connections: default_net_connections(),
            net_bytes: default_net_bytes(),
            disk_bytes: default_disk_bytes(),
        }
    }
}

/// The default sandbox image, built by `runner image build`.
pub const DEFAULT_IMAGE: &str = "runner-sandbox:bookworm";

/// Paths inside the worktree that sandboxed commands may read but never change: a planted
/// git hook or an `core.fsmonitor` line in `.git/config` would run on the host later, outside
/// every wall.
pub const DEFAULT_PROTECTED: &[&str] = &[".git/hooks", ".git/config"];

#[derive(Debug, Clone)]
pub struct SandboxSpec {
    pub backend: BackendKind,
    /// The worktree on the host; read-write.
    pub worktree: PathBuf,
    /// Further host directories the tools may read (e.g. saved full tool outputs).
    pub read_only: Vec<PathBuf>,
    pub limits: Limits,
    pub network: Network,
    /// The loopback names (of [`runner_protocol::network::LOOPBACK_NAMES`]) that mean the
    /// host's own under `--network allowlist`: the user's own config opens them, so
    /// `no_proxy` leaves them to the proxy ([`set_proxy_env`]). The others stay the
    /// sandbox's own loopback.
    pub host_loopback: Vec<String>,
    /// Host variables passed to commands besides the fixed allow-list.
    pub env_allow: Vec<String>,
    /// Worktree-relative paths mounted read-only.
    pub protected: Vec<PathBuf>,
    /// The certificate bundle commands trust ([`crate::trust`]): the host's authorities
    /// and the user's extra ones, mounted read-only in containers. `None`: the image's own.
    pub ca_bundle: Option<PathBuf>,
    /// Disarm repositories commands make in the worktree (see
    /// [`runner_sandbox_server::git_sweep`]): for a checkout the user runs git in.
    pub sweep_repositories: bool,
    /// The `runner` executable that serves inside the sandbox. It must be static for the
    /// docker backend (every runner build is).
    pub server_exe: PathBuf,
    pub docker: DockerSpec,
    /// A layer the server leaves out on purpose, so that tests can see the self-test stop
    /// the start ([`runner_sandbox_server::confine::TestGap`]). Debug builds only pass it
    /// on (and read [`TEST_GAP_ENV`]); a release build's server has no flag for it.
    pub test_gap: Option<TestGap>,
}

pub use runner_sandbox_server::confine::TestGap;

/// Debug builds only: the layer ([`TestGap`]) every sandbox this process starts leaves
/// out, for the tests of the self-test through `runner run`.
pub const TEST_GAP_ENV: &str = "RUNNER_TEST_GAP";

/// The layer [`TEST_GAP_ENV`] names, in a debug build; `None` in a release build.
fn test_gap_from_env() -> Option<TestGap> {
    #[cfg(debug_assertions)]
    return std::env::var(TEST_GAP_ENV)
        .ok()
        .and_then(|v| v.parse().ok());
    #[cfg(not(debug_assertions))]
    None
}

/// The server's flag for the spec's gap: debug builds only.
pub fn test_gap_args(spec: &SandboxSpec) -> Vec<String> {
    #[cfg(debug_assertions)]
    if let Some(gap) = spec.test_gap {
        return vec!["--test-gap".into(), gap.name().into()];
    }
    let _ = spec;
    Vec::new()
}

#[derive(Debug, Clone)]
pub struct DockerSpec {
    pub image: String,
    /// Where the worktree appears in the container; `None` keeps the host path, so paths in
    /// tool output and in the model's context mean the same thing on both sides.
    pub mount_at: Option<PathBuf>,
    /// The worktree is a directory of an existing task container's image (an evaluation's
    /// Harbor task), opened with [`super::docker::open_over`] instead of a new container
    /// with the worktree mounted. The spec only says so (the prompt tells the model); the
    /// container itself is the session's.
    pub over_task_image: bool,
    /// The engine (`unix:///…`, `tcp://…`); `None`: DOCKER_HOST or the local socket.
    pub host: Option<String>,
    /// The OCI runtimes the container may run under, in order of preference: the first one
    /// the engine has is used (`runsc`, gVisor; `runc`; [`DEFAULT_RUNTIME`] for the engine's
    /// default). Empty: the engine's default. When the engine has none of them, the sandbox
    /// does not open and the error names the runtimes it has.
    pub runtime: Vec<String>,
}

/// In a runtime preference list: whatever the engine runs containers with by default.
pub const DEFAULT_RUNTIME: &str = "default";

impl Default for DockerSpec {
    fn default() -> Self {
        DockerSpec {
            image: DEFAULT_IMAGE.to_string(),
            mount_at: None,
            over_task_image: false,
            host: None,
            runtime: Vec::new(),
        }
    }
}

/// Set (by the runner image's Dockerfile, or by hand) when runner itself runs in a
/// container and drives the host's engine through its mounted socket. The engine resolves
/// every bind mount on its own host, so runner's own executable (`/usr/local/bin/runner` in
/// the image) is not what it would mount as the sandbox server: `runner eval` then copies
/// itself into the out folder, which must be mounted at the same path anyway (the attempts'
/// worktrees live there), and other commands refuse the docker backend with the reason.
pub const IN_CONTAINER_ENV: &str = "RUNNER_IN_CONTAINER";

/// Whether [`IN_CONTAINER_ENV`] is set to anything but empty or `0`.
pub fn in_container() -> bool {
    std::env::var_os(IN_CONTAINER_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

impl SandboxSpec {
    /// A spec with the defaults for `backend`, served by this very executable.
    pub fn new(backend: BackendKind, worktree: &Path) -> std::io::Result<SandboxSpec> {
        Ok(SandboxSpec {
            backend,
            worktree: worktree.to_path_buf(),
            read_only: Vec::new(),
            limits: Limits::default(),
            network: Network::None,
            host_loopback: Vec::new(),
            env_allow: Vec::new(),
            protected: DEFAULT_PROTECTED.iter().map(PathBuf::from).collect(),
            ca_bundle: None,
            sweep_repositories: true,
            server_exe: std::env::current_exe()?,
            docker: DockerSpec::default(),
            test_gap: test_gap_from_env(),
        })
    }
}
