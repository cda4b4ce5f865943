//! Reaching the container engine — Docker, or Podman through its Docker-compatible API —
//! with errors that say how to make it answer.
//!
//! With no host given and no DOCKER_HOST, runner looks for an engine by itself: Docker's
//! socket first, then rootful Podman's, then the calling user's rootless Podman. The first
//! that answers is used, so a machine with only Podman needs no setting.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::DockerError;
use crate::spec::DEFAULT_RUNTIME;
use crate::start_error::SandboxStartError;
use bollard::{API_DEFAULT_VERSION, Docker};

/// Docker's socket, the first place runner looks.
pub const DOCKER_SOCKET: &str = "/var/run/docker.sock";
/// Rootful Podman's socket (`podman system service` as root).
pub const PODMAN_SOCKET: &str = "/run/podman/podman.sock";

/// bollard's own request timeout, kept for sockets runner finds itself.
const TIMEOUT_SECS: u64 = 120;

/// Connects (the given host, else DOCKER_HOST, else the first local engine that answers)
/// and negotiates the API version down to what the engine speaks (20.10 and Podman 4
/// speak 1.41); the negotiation's request is the check that the engine answers.
pub async fn connect() -> Result<Docker, SandboxStartError> {
    connect_to(None).await
}

/// Connects to `host` (`unix:///path`, `tcp://host:port`; `None`: DOCKER_HOST or the first
/// local engine that answers), as [`connect`] does.
pub async fn connect_to(host: Option<&str>) -> Result<Docker, SandboxStartError> {
    Ok(reach(host).await?.0)
}

/// The engine and the address it was reached at.
async fn reach(host: Option<&str>) -> Result<(Docker, String), SandboxStartError> {
    let down = SandboxStartError::EngineDown;
    if let Some(h) = host {
        refused_to_us(h)?;
        let docker = Docker::connect_with_host(h)
            .map_err(|e| down(format!("cannot reach the engine at {h}: {e}")))?;
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| down(format!("the engine at {h} does not answer: {e}")))?;
        return Ok((docker, h.to_string()));
    }
    if let Ok(h) = std::env::var("DOCKER_HOST")
        && !h.is_empty()
    {
        refused_to_us(&h)?;
        // bollard reads DOCKER_HOST (and DOCKER_CERT_PATH for TLS) itself.
        let not_there = |e: String| {
            down(format!(
                "no engine answers at DOCKER_HOST={h} ({e}): start it there, or unset DOCKER_HOST to use a local one"
            ))
        };
        let docker = Docker::connect_with_defaults().map_err(|e| not_there(e.to_string()))?;
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| not_there(e.to_string()))?;
        return Ok((docker, h));
    }
    discover().await
}

/// A unix socket this user may not open (`EACCES`): the engine may be running, and the
/// fix is a group or another engine, not starting one.
fn refused_to_us(host: &str) -> Result<(), SandboxStartError> {
    let Some(path) = host.strip_prefix("unix://") else {
        return Ok(());
    };
    match std::os::unix::net::UnixStream::connect(path) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Err(SandboxStartError::EnginePermission {
                socket: path.to_string(),
            })
        }
        _ => Ok(()),
    }
}

/// The sockets runner tries, in order, when nothing names one: Docker's, rootful Podman's,
/// then this user's rootless Podman (`$XDG_RUNTIME_DIR/podman/podman.sock`).
pub fn local_sockets() -> Vec<PathBuf> {
    let runtime_dir = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        // SAFETY: plain syscall.
        .unwrap_or_else(|| PathBuf::from(format!("/run/user/{}", unsafe { libc::getuid() })));
    vec![
        PathBuf::from(DOCKER_SOCKET),
        PathBuf::from(PODMAN_SOCKET),
        runtime_dir.join("podman/podman.sock"),
    ]
}

/// The first local socket whose engine answers; an error that says what each one did.
async fn discover() -> Result<(Docker, String), SandboxStartError> {
    let mut tried = Vec::new();
    let mut refused = None;
    for socket in local_sockets() {
        if !socket.exists() {
            tried.push(format!("{} (no such socket)", socket.display()));
            continue;
        }
        let path = socket.display().to_string();
        if let Err(e) = refused_to_us(&format!("unix://{path}")) {
            refused.get_or_insert(e);
            tried.push(format!("{path} (permission denied)"));
            continue;
        }
        let answer = async {
            let docker = Docker::connect_with_unix(&path, TIMEOUT_SECS, API_DEFAULT_VERSION)
                .map_err(|e| e.to_string())?;
            // A socket nobody serves refuses at once; one whose engine hangs gets a while.
            tokio::time::timeout(Duration::from_secs(10), docker.negotiate_version())
                .await
                .map_err(|_| "no answer within 10 s".to_string())?
                .map_err(|e| e.to_string())
        };
        match answer.await {
            Ok(docker) => return Ok((docker, format!("unix://{path}"))),
            Err(e) => tried.push(format!("{path} ({e})")),
        }
    }
    // An engine that is there but closed to us is the more useful thing to say.
    if let Some(refused) = refused {
        return Err(refused);
    }
    Err(SandboxStartError::EngineDown(format!(
        "no container engine answers: tried {}. Start Docker (`dockerd &`; Debian: `apt-get \
         install docker.io`) or Podman (`podman system service --time=0 &`; Debian: `apt-get \
         install podman`), or point DOCKER_HOST at a running engine",
        tried.join(", ")
    )))
}

/// Which engine speaks the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Docker,
    Podman,
}

/// An engine reached and identified: what it is, where, and what it can enforce. A sandbox
/// container's configuration depends on it (see [`Engine::ulimits`]).
#[derive(Clone)]
pub struct Engine {
    pub docker: Docker,
    /// Where it was reached: `unix:///…`, `tcp://…`.
    pub host: String,
    pub kind: Kind,
    pub version: String,
    /// The Docker API version it speaks.
    pub api: String,
    /// A rootless Podman (an unprivileged user's own service).
    pub rootless: bool,
    /// The resource limits it cannot enforce ("memory", "CPU", "pids"): a rootless Podman
    /// on cgroup v1, or without delegated controllers, ignores them.
    pub unenforced: Vec<&'static str>,
    /// The uid and gid of the engine's own process, when it runs on this machine.
    pub owner: Option<(u32, u32)>,
    /// The pid of the process serving its unix socket, when it can be read: another one
    /// later is a restarted engine, to be identified again.
    pub served_by: Option<i32>,
    /// The hard RLIMIT_NOFILE and RLIMIT_NPROC of the engine's own process, when it runs on
    /// this machine and can be read; otherwise this process's.
    pub hard_limits: HardLimits,
    /// The runtimes it has that are gVisor (whose program is `runsc`), with its default
    /// runtime's name: a gVisor sandbox counts processes differently (see
    /// [`Engine::gvisor`]).
    pub gvisor_runtimes: Vec<String>,
    pub default_runtime: Option<String>,
}

/// Hard resource limits of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HardLimits {
    pub nofile: u64,
    pub nproc: u64,
}

impl Engine {
    /// Connects as [`connect_to`] does and asks the engine what it is, once per engine and
    /// process: an engine already identified here is only asked whether it still answers
    /// (`/_ping`). Podman answers `/version` (twice in a first open: the API version's
    /// negotiation, then what it is) and `/libpod/info` by asking dpkg or rpm which
    /// versions of conmon, its runtime and its network helpers are installed, about 1.2 s
    /// of CPU on this 2-core machine, which every sandbox an evaluation opens paid again.
    /// An engine that stops answering, or whose socket another process now serves (a
    /// restart, which may bring another configuration), is forgotten and identified
    /// afresh, so its error is the one a first open gives. Docker's `/info` is cheap and
    /// its runtimes can change without a restart (SIGHUP reloads `daemon.json`), so there
    /// the runtimes and limits are read again at every open: a sandbox never gets gVisor's
    /// looser pids cgroup under a runtime that is no longer gVisor.
    pub async fn open(host: Option<&str>) -> Result<Engine, SandboxStartError> {
        let asked = asked_for(host);
        if let Some(known) = known(&asked) {
            if let Some(current) = known.still_serving().await {
                return Ok(current);
            }
            forget(&asked);
        }
        let engine = Engine::identify(host).await?;
        remember(asked, &engine);
        Ok(engine)
    }

    /// This engine as it is now, if the same process still serves it: answers a ping,
    /// from the same peer process on a unix socket, with Docker's runtimes and limits read
    /// again.
    async fn still_serving(mut self) -> Option<Engine> {
        let ping = tokio::time::timeout(Duration::from_secs(10), self.docker.ping());
        if !matches!(ping.await, Ok(Ok(_))) {
            return None;
        }
        let socket = self.host.strip_prefix("unix://").map(PathBuf::from);
        let served_by = socket.as_deref().and_then(peer).map(|p| p.pid);
        if served_by != self.served_by {
            return None;
        }
        if self.kind == Kind::Docker {
            self.find_unenforced(socket.as_deref()).await;
        }
        Some(self)
    }

    /// Connects as [`connect_to`] does, then asks the engine what it is.
    async fn identify(host: Option<&str>) -> Result<Engine, SandboxStartError> {
        let (docker, host) = reach(host).await?;
        let version = docker.version().await.map_err(|e| {
            SandboxStartError::EngineDown(format!(
                "the engine at {host} does not say what it is: {e}"
            ))
        })?;
        let podman = version
            .components
            .iter()
            .flatten()
            .find(|c| c.name.contains("Podman"));
        let socket = host.strip_prefix("unix://").map(PathBuf::from);
        let peer = socket.as_deref().and_then(peer);
        let hard_limits = peer
            .as_ref()
            .and_then(|p| p.limits)
            .unwrap_or_else(own_hard_limits);
        let mut engine = Engine {
            kind: if podman.is_some() {
                Kind::Podman
            } else {
                Kind::Docker
            },
            version: podman
                .map(|c| c.version.clone())
                .or(version.version)
                .unwrap_or_default(),
            api: version.api_version.clone().unwrap_or_default(),
            rootless: false,
            unenforced: Vec::new(),
            hard_limits,
            owner: peer.as_ref().map(|p| (p.uid, p.gid)),
            served_by: peer.map(|p| p.pid),
            gvisor_runtimes: Vec::new(),
            default_runtime: None,
            docker,
            host,
        };
        engine.find_unenforced(socket.as_deref()).await;
        Ok(engine)
    }

    /// Fills `rootless`, `unenforced` and the runtimes, afresh each call. Podman's
    /// Docker-compatible `/info` claims every limit even where it ignores them, so its own
    /// `/libpod/info` is asked instead (it lists the cgroup controllers containers get);
    /// Docker's `/info` is truthful.
    async fn find_unenforced(&mut self, socket: Option<&Path>) {
        self.unenforced.clear();
        self.gvisor_runtimes.clear();
        self.default_runtime = None;
        let (memory, cpu, pids) = match self.kind {
            Kind::Podman => {
                let Some(info) = socket.and_then(libpod_info) else {
                    return;
                };
                let host = &info["host"];
                self.rootless = host["security"]["rootless"].as_bool().unwrap_or(false);
                let runtime = &host["ociRuntime"];
                if let (Some(name), Some(path)) =
                    (runtime["name"].as_str(), runtime["path"].as_str())
                {
                    self.default_runtime = Some(name.to_string());
                    if is_gvisor(name, path) {
                        self.gvisor_runtimes.push(name.to_string());
                    }
                }
                let has = |name: &str| {
                    host["cgroupControllers"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|v| v == name))
                };
                (has("memory"), has("cpu"), has("pids"))
            }
            Kind::Docker => match self.docker.info().await {
                Ok(info) => {
                    for (name, runtime) in info.runtimes.iter().flatten() {
                        if is_gvisor(name, runtime.path.as_deref().unwrap_or_default()) {
                            self.gvisor_runtimes.push(name.clone());
                        }
                    }
                    self.default_runtime = info.default_runtime.clone();
                    (
                        info.memory_limit.unwrap_or(true),
                        info.cpu_cfs_quota.unwrap_or(true),
                        info.pids_limit.unwrap_or(true),
                    )
                }
                Err(_) => return,
            },
        };
        for (enforced, name) in [(memory, "memory"), (cpu, "CPU"), (pids, "pids")] {
            if !enforced {
                self.unenforced.push(name);
            }
        }
    }

    /// Whether a container on `runtime` (`None`: the engine's default) runs under gVisor.
    /// There the host's pids cgroup holds gVisor's own kernel, whose threads and per-process
    /// helpers outnumber the sandbox's processes several times over (an idle sandbox is 44
    /// host tasks, each further process about 8, on this 2-core machine); a limit meant
    /// for the processes makes gVisor itself fail (it panics, and the sandbox ends) long
    /// before a command sees EAGAIN. So under gVisor the processes are counted by gVisor's
    /// kernel (RLIMIT_NPROC of the command user, see `sandbox-server --nproc`), and the
    /// cgroup is sized for gVisor's own tasks ([`pids_cgroup`]).
    pub fn gvisor(&self, runtime: Option<&str>) -> bool {
        runtime
            .or(self.default_runtime.as_deref())
            .is_some_and(|r| self.gvisor_runtimes.iter().any(|g| g == r))
    }

    /// "Docker 20.10.24" or "Podman 4.3.1 (rootless)", with where it was reached.
    pub fn describe(&self) -> String {
        let name = match self.kind {
            Kind::Docker => "Docker",
            Kind::Podman => "Podman",
        };
        let rootless = if self.rootless { " (rootless)" } else { "" };
        format!("{name} {}{rootless} at {}", self.version, self.host)
    }

    /// The rlimits a container asks for. Podman sets RLIMIT_NOFILE and RLIMIT_NPROC to the
    /// kernel's maximum when not told otherwise, and the OCI runtime then fails to start
    /// the container wherever the engine may not raise its own hard limits (no
    /// CAP_SYS_RESOURCE): "error setting rlimit type 7: operation not permitted". So on
    /// Podman the container asks for the engine's own hard limits, which are always
    /// allowed. Docker passes its own
    /// limits on by itself: nothing is asked there.
    pub fn ulimits(&self) -> Option<Vec<bollard::models::ResourcesUlimits>> {
        if self.kind != Kind::Podman {
            return None;
        }
        let limit = |name: &str, value: u64| bollard::models::ResourcesUlimits {
            name: Some(name.into()),
            soft: Some(value.min(i64::MAX as u64) as i64),
            hard: Some(value.min(i64::MAX as u64) as i64),
        };
        Some(vec![
            limit("nofile", self.hard_limits.nofile),
            limit("nproc", self.hard_limits.nproc),
        ])
    }
}

impl Engine {
    /// The user namespace a container asks for. A rootless Podman maps the user it runs as
    /// to root in the container and every other uid to a subordinate one that owns nothing
    /// here, so the sandbox could not write the worktree; `keep-id` maps that user's uid to
    /// itself, as on Docker, where the container's uid is the host's.
    pub fn userns_mode(&self) -> Option<String> {
        self.keeps_id().then(|| "keep-id".to_string())
    }

    /// The `uid:gid` commands run as. Docker and rootful Podman: ours, so files the sandbox
    /// makes are ours. Rootless Podman: the user the engine runs as, the only one whose
    /// files its containers can write (the same as ours when we started it).
    pub fn command_user(&self) -> String {
        // SAFETY: plain syscalls.
        let ours = unsafe { (libc::getuid(), libc::getgid()) };
        let (uid, gid) = match self.owner {
            Some(owner) if self.keeps_id() => owner,
            _ => ours,
        };
        format!("{uid}:{gid}")
    }

    fn keeps_id(&self) -> bool {
        self.kind == Kind::Podman && self.rootless
    }

    /// The runtime a container runs under, as [`choose_runtime`] chooses it, on this
    /// engine. Podman's Docker-compatible API takes a container's `Runtime` and runs it
    /// under Podman's default runtime all the same (Podman 4), so there a runtime other
    /// than the default is refused rather than silently not applied.
    pub async fn choose_runtime(&self, wanted: &[String]) -> Result<Option<String>, DockerError> {
        let chosen = choose_runtime(&self.docker, wanted).await?;
        let Some(runtime) = chosen else {
            return Ok(None);
        };
        if self.kind != Kind::Podman {
            return Ok(Some(runtime));
        }
        let (_, default) = runtimes(&self.docker).await?;
        if default.as_deref() == Some(runtime.as_str()) {
            // Podman's default: what it runs anyway.
            return Ok(None);
        }
        Err(
            SandboxStartError::MissingRuntime(podman_ignores_runtime(&runtime, default.as_deref()))
                .into(),
        )
    }
}

/// Why a runtime other than Podman's default is refused, and how to get it.
fn podman_ignores_runtime(runtime: &str, default: Option<&str>) -> String {
    format!(
        "Podman runs every container it is asked for through its Docker-compatible API under \
         its default runtime ({}), whatever runtime the request names, so the runtime \
         {runtime:?} would not be applied. Make it Podman's default (`runtime = \"{runtime}\"` \
         under [engine] in containers.conf, then restart `podman system service`), or use \
         Docker",
        default.unwrap_or("unknown")
    )
}

/// A runtime is gVisor when its program is `runsc` (or it is registered under that name).
fn is_gvisor(name: &str, path: &str) -> bool {
    name == "runsc"
        || Path::new(path)
            .file_name()
            .is_some_and(|f| f.to_string_lossy().starts_with("runsc"))
}

/// The pids cgroup limit of a container of `processes` processes. Under gVisor it holds
/// gVisor's own tasks for that many: its kernel's (44 measured idle) and about 8 per
/// process measured on 2 cores, with room for more cores' threads (16 per process, 256 for
/// the kernel).
pub fn pids_cgroup(gvisor: bool, processes: u64) -> i64 {
    let tasks = match gvisor {
        true => processes.saturating_mul(16).saturating_add(256),
        false => processes,
    };
    tasks.min(i64::MAX as u64) as i64
}

/// The address space one command may map under gVisor (`sandbox-server --address-space`):
/// seven eighths of the sandbox's memory. The host's memory cgroup sees gVisor's kernel and
/// all its processes as one, so a command that allocates past the container's memory ends
/// the whole sandbox (the session's next call finds "the sandbox server is gone"). With
/// RLIMIT_AS, which gVisor's kernel checks on every mapping, that allocation fails in the
/// command alone, and the eighth left over is room for gVisor's own kernel. It is a limit
/// per process: several commands can still together pass the cgroup's limit.
pub fn gvisor_address_space(memory_bytes: u64) -> u64 {
    memory_bytes.saturating_sub(memory_bytes / 8)
}

/// The engines this process has identified, by what was asked for: the host named, else
/// DOCKER_HOST, else "" for the first local engine that answers.
static KNOWN: std::sync::Mutex<Vec<(String, Engine)>> = std::sync::Mutex::new(Vec::new());

fn asked_for(host: Option<&str>) -> String {
    match host {
        Some(h) => h.to_string(),
        None => std::env::var("DOCKER_HOST").unwrap_or_default(),
    }
}

fn known(asked: &str) -> Option<Engine> {
    let known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    known
        .iter()
        .find(|(a, _)| a == asked)
        .map(|(_, e)| e.clone())
}

fn remember(asked: String, engine: &Engine) {
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    known.retain(|(a, _)| *a != asked);
    known.push((asked, engine.clone()));
}

fn forget(asked: &str) {
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    known.retain(|(a, _)| a != asked);
}

/// This process's hard limits, capped at what fits an i64.
fn own_hard_limits() -> HardLimits {
    let hard = |resource| {
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we own.
        let ok = unsafe { libc::getrlimit(resource, &mut rl) } == 0;
        if ok {
            rl.rlim_max.min(i64::MAX as u64)
        } else {
            1024
        }
    };
    HardLimits {
        nofile: hard(libc::RLIMIT_NOFILE),
        nproc: hard(libc::RLIMIT_NPROC),
    }
}

/// The process serving a unix socket: who it runs as, and its hard limits when /proc
/// shows them.
struct Peer {
    pid: i32,
    uid: u32,
    gid: u32,
    limits: Option<HardLimits>,
}

/// The process serving `socket`, from SO_PEERCRED (the process that listens); `None` when
/// the socket cannot be reached or says nothing.
fn peer(socket: &Path) -> Option<Peer> {
    use std::os::fd::AsRawFd;
    let stream = std::os::unix::net::UnixStream::connect(socket).ok()?;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the struct we own.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 || cred.pid <= 0 {
        return None;
    }
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", cred.pid)).ok();
    Some(Peer {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
        limits: limits.as_deref().and_then(parse_hard_limits),
    })
}

/// The hard "Max open files" and "Max processes" of a /proc/PID/limits text ("unlimited"
/// reads as i64::MAX).
fn parse_hard_limits(text: &str) -> Option<HardLimits> {
    let hard = |label: &str| -> Option<u64> {
        let rest = text.lines().find_map(|l| l.strip_prefix(label))?;
        match rest.split_whitespace().nth(1)? {
            "unlimited" => Some(i64::MAX as u64),
            n => n.parse().ok(),
        }
    };
    Some(HardLimits {
        nofile: hard("Max open files")?,
        nproc: hard("Max processes")?,
    })
}

/// Podman's own `GET /libpod/info` over its unix socket (bollard speaks only the Docker
/// API); `None` when it does not answer with JSON.
fn libpod_info(socket: &Path) -> Option<serde_json::Value> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET /v4.0.0/libpod/info HTTP/1.0\r\nHost: podman\r\n\r\n"
    )
    .ok()?;
    let mut response = Vec::new();
    s.read_to_end(&mut response).ok()?;
    let at = response.windows(4).position(|w| w == b"\r\n\r\n")?;
    serde_json::from_slice(&response[at + 4..]).ok()
}

/// Says once per engine and process which limits the engine cannot enforce, so that a
/// sandbox without them is never a surprise.
pub fn warn_unenforced(engine: &Engine) {
    static WARNED: std::sync::Mutex<Option<HashSet<String>>> = std::sync::Mutex::new(None);
    if engine.unenforced.is_empty() {
        return;
    }
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if !warned
        .get_or_insert_with(HashSet::new)
        .insert(engine.host.clone())
    {
        return;
    }
    eprintln!(
        "runner: {} cannot enforce the sandbox's {} limit(s) (no such cgroup controller for \
         its containers); commands run without them. `runner sandbox doctor` says more",
        engine.describe(),
        engine.unenforced.join(", ")
    );
}

/// The engine's OCI runtimes (sorted) and its default one, from `docker info`.
pub async fn runtimes(docker: &Docker) -> Result<(Vec<String>, Option<String>), DockerError> {
    let info = docker.info().await.map_err(DockerError::engine(
        "cannot ask the Docker engine for its runtimes",
    ))?;
    let mut names: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
    names.sort();
    Ok((names, info.default_runtime))
}

/// The runtime a container runs under: the first of `wanted` the engine has (`None`: the
/// engine's default, for an empty list or [`DEFAULT_RUNTIME`]). Asks the engine only when
/// a runtime is named. None of them there: an error naming the runtimes it has.
pub async fn choose_runtime(
    docker: &Docker,
    wanted: &[String],
) -> Result<Option<String>, DockerError> {
    if wanted.is_empty() || wanted[0] == DEFAULT_RUNTIME {
        return Ok(None);
    }
    let (have, default) = runtimes(docker).await?;
    for w in wanted {
        if w == DEFAULT_RUNTIME {
            return Ok(None);
        }
        if have.iter().any(|h| h == w) {
            return Ok(Some(w.clone()));
        }
    }
    Err(
        SandboxStartError::MissingRuntime(missing_runtime(wanted, &have, default.as_deref()))
            .into(),
    )
}

/// "The engine has no runtime X; it has: …", with how to add gVisor when that was asked.
pub fn missing_runtime(wanted: &[String], have: &[String], default: Option<&str>) -> String {
    let asked = if wanted.len() == 1 {
        format!("no runtime {:?}", wanted[0])
    } else {
        format!("none of the runtimes {}", wanted.join(", "))
    };
    let mut msg = format!(
        "the Docker engine has {asked}; it has: {}{}",
        if have.is_empty() {
            "(none listed)".to_string()
        } else {
            have.join(", ")
        },
        default
            .map(|d| format!(" (default {d})"))
            .unwrap_or_default()
    );
    if wanted.iter().any(|w| w == "runsc") {
        msg.push_str(
            ". To add gVisor: apt-get install runsc, then in /etc/docker/daemon.json \
             \"runtimes\": {\"runsc\": {\"path\": \"/usr/bin/runsc\"}} and restart dockerd; \
             or choose another runtime with --runtime (\"default\": the engine's own)",
        );
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_hard_limits_of_proc_limits() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max processes             32768                32768                processes \n\
                    Max open files            1024                 20000                files     \n";
        assert_eq!(
            parse_hard_limits(text),
            Some(HardLimits {
                nofile: 20000,
                nproc: 32768
            })
        );
        let unlimited = text.replace(
            "32768                processes",
            "unlimited            processes",
        );
        assert_eq!(
            parse_hard_limits(&unlimited).unwrap().nproc,
            i64::MAX as u64
        );
        assert_eq!(parse_hard_limits("Max open files 1 2 files\n"), None);
    }

    #[test]
    fn own_process_limits_match_proc_self() {
        let text = std::fs::read_to_string("/proc/self/limits").unwrap();
        assert_eq!(parse_hard_limits(&text), Some(own_hard_limits()));
    }
}
