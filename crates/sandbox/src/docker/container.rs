//! One hardened container per sandbox, with the server as its main process.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use super::SERVER_PATH;
use crate::local::{self, Keepalive};
use crate::spec::{Network, SandboxSpec};
use crate::start_error::{NO_SHELL_MARK, SandboxStartError};
use crate::worktree_guard::WorktreeGuard;
use crate::{BackendKind, Sandbox, SandboxError};

/// Every container runner makes carries these labels, so that leftovers can be found and
/// attributed: `runner=1`, the run id, the owning process and the creation time.
pub const LABEL: &str = "runner";
pub const LABEL_RUN: &str = "runner.run-id";
pub const LABEL_OWNER: &str = "runner.owner-pid";
pub const LABEL_CREATED: &str = "runner.created";
/// The boot of the machine whose process owns it ([`crate::owner::boot_id`]).
pub const LABEL_BOOT: &str = "runner.owner-boot";
/// The owning process's start time ([`crate::owner::started_at`]): with the pid, it names
/// that one process, so a later process that got the same pid does not keep it. Older
/// runners did not set it; theirs are judged by the pid alone.
pub const LABEL_OWNER_START: &str = "runner.owner-start";

/// Docker watches an attached stdin for a detach sequence and, on seeing it, cuts the
/// stream. Five ctrl-q bytes in a row cannot occur in our frames (JSON has no raw control
/// bytes; a length prefix has four bytes, followed by `{`), so this one never fires.
pub(super) const DETACH_KEYS: &str = "ctrl-q,ctrl-q,ctrl-q,ctrl-q,ctrl-q";

/// The engine's refusal of a step before any server ran (`what`: "cannot create the task
/// container"): a start error with the engine's reason, never "the sandbox server is gone".
pub(super) fn docker_error(what: &str, e: bollard::errors::Error) -> SandboxError {
    engine_refused(ENGINE, what.strip_prefix("cannot ").unwrap_or(what), e)
}

/// The environment of commands in the container: the image's system, nothing of the host
/// but the terminal type and what the profile allows.
fn container_env(spec: &SandboxSpec) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "PATH".to_string(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        ),
        ("HOME".into(), "/tmp".into()),
        ("TMPDIR".into(), "/tmp".into()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    for key in ["TERM", "TZ"]
        .iter()
        .map(|k| k.to_string())
        .chain(spec.env_allow.iter().cloned())
    {
        if let Ok(v) = std::env::var(&key)
            && !env.iter().any(|(k, _)| *k == key)
        {
            env.push((key, v));
        }
    }
    if spec.network == Network::Allowlist {
        crate::spec::set_proxy_env(&mut env, &spec.host_loopback);
    }
    if spec.ca_bundle.is_some() {
        crate::trust::set_env(&mut env, Path::new(crate::trust::INSIDE));
    }
    env
}

pub(super) fn unique_id() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{n}-{nanos:08x}", std::process::id())
}

/// Paths the engine mounts read-only: its own defaults, and all of `/proc`. Writing
/// `/proc/PID/mem` is `ptrace` by another door (seccomp refuses the call, not the file):
/// a command could patch the code of a program it started, say git's HTTP helper, and
/// connect as that program. Under landlock `/proc` is only readable too.
const READONLY_PATHS: [&str; 6] = [
    "/proc",
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// What the server needs to split its identity from the commands' (`confine::identity`):
/// set ids and groups, empty the bounding set, hand the protocol's pipes to its own id.
pub const SPLIT_CAPABILITIES: [&str; 4] = ["SETUID", "SETGID", "SETPCAP", "CHOWN"];

/// The OCI runtime a container runs under, and whether it is gVisor (whose processes the
/// host's pids cgroup cannot count: see `Engine::gvisor`).
#[derive(Debug, Clone, Copy)]
pub struct Runtime<'a> {
    /// `None`: the engine's default.
    pub name: Option<&'a str>,
    pub gvisor: bool,
}

/// The container's configuration. Every wall is here, in one place.
pub fn container_body(
    spec: &SandboxSpec,
    runtime: Runtime<'_>,
    worktree: &Path,
    inside: &Path,
    guard: &WorktreeGuard,
    run_id: &str,
    cmd: Vec<String>,
) -> ContainerCreateBody {
    // Mounts, not `-v` strings: a path with a `:` or `,` stays one path.
    let bind = |source: &Path, target: &Path, read_only: bool| Mount {
        source: Some(source.display().to_string()),
        target: Some(target.display().to_string()),
        typ: Some(MountType::BIND),
        read_only: Some(read_only),
        ..Default::default()
    };
    let mut mounts = vec![
        bind(worktree, inside, false),
        bind(&spec.server_exe, Path::new(SERVER_PATH), true),
    ];
    for dir in &spec.read_only {
        mounts.push(bind(dir, dir, true));
    }
    if let Some(bundle) = &spec.ca_bundle {
        mounts.push(bind(bundle, Path::new(crate::trust::INSIDE), true));
    }
    // `.git` as a mount point of its own cannot be renamed away and replaced.
    let seen = guard.moved(worktree, inside);
    for (host, target) in guard.pins.iter().zip(&seen.pins) {
        mounts.push(bind(host, target, false));
    }
    for (host, target) in guard.read_only.iter().zip(&seen.read_only) {
        mounts.push(bind(host, target, true));
    }
    let limits = &spec.limits;
    let host_config = HostConfig {
        mounts: Some(mounts),
        tmpfs: Some(HashMap::from([(
            "/tmp".to_string(),
            format!("rw,exec,nosuid,nodev,size={},mode=1777", limits.tmp_bytes),
        )])),
        network_mode: Some(spec.network.docker_mode().into()),
        cap_drop: Some(vec!["ALL".into()]),
        // For the server's first steps only (`sandbox-server --command-user`): it splits
        // its identity from the commands' and then drops all four, bounding set included.
        cap_add: Some(SPLIT_CAPABILITIES.map(String::from).to_vec()),
        security_opt: Some(vec!["no-new-privileges:true".into()]),
        readonly_rootfs: Some(true),
        readonly_paths: Some(READONLY_PATHS.map(String::from).to_vec()),
        memory: Some(limits.memory_bytes as i64),
        memory_swap: Some(limits.memory_bytes as i64),
        nano_cpus: Some((limits.cpus * 1e9) as i64),
        pids_limit: Some(super::engine::pids_cgroup(runtime.gvisor, limits.pids)),
        // No docker-init: the server is its own init (see `confine::process::container_init`).
        init: Some(false),
        auto_remove: Some(true),
        // `None`: the engine's default runtime (runc, usually); `runsc` for gVisor.
        runtime: runtime.name.map(str::to_string),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(spec.docker.image.clone()),
        entrypoint: Some(vec![SERVER_PATH.to_string()]),
        cmd: Some(cmd),
        // Root, to split: commands run as `--command-user`, the server's own id is another.
        user: Some("0:0".into()),
        working_dir: Some(inside.display().to_string()),
        env: Some(
            container_env(spec)
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect(),
        ),
        host_config: Some(host_config),
        ..served(run_id, spec.network)
    }
}

/// What every container whose main process is the server has: runner's labels (so
/// leftovers can be found and attributed) and a stdin attached and held open for the
/// protocol.
pub(super) fn served(run_id: &str, network: Network) -> ContainerCreateBody {
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    ContainerCreateBody {
        labels: Some(
            [
                (LABEL.to_string(), "1".to_string()),
                (LABEL_RUN.to_string(), run_id.to_string()),
                (LABEL_OWNER.to_string(), std::process::id().to_string()),
                (LABEL_CREATED.to_string(), created.to_string()),
                (LABEL_BOOT.to_string(), crate::owner::boot_id()),
            ]
            .into_iter()
            // Absent when /proc cannot tell: the pid alone judges it then.
            .chain(
                crate::owner::started_at(std::process::id() as i32)
                    .map(|start| (LABEL_OWNER_START.to_string(), start.to_string())),
            )
            .collect(),
        ),
        network_disabled: Some(network == Network::None),
        open_stdin: Some(true),
        stdin_once: Some(true),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        ..Default::default()
    }
}

/// Removes the container when the sandbox closes. The server also exits (and the engine
/// removes its container) as soon as our end of its stdin closes, which covers a controller
/// that is killed outright; this guard covers a server that does not exit.
pub(super) struct ContainerGuard {
    pub(super) docker: Docker,
    pub(super) id: String,
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        let (docker, id) = (self.docker.clone(), self.id.clone());
        wait_in_drop(async move { remove(&docker, &id).await });
    }
}

/// Runs an engine call to its end from a `Drop`, which cannot await: on a thread with its
/// own small runtime, waited for, so that "closed" means done (gone, or stopped).
pub(super) fn wait_in_drop(call: impl std::future::Future<Output = ()> + Send + 'static) {
    let handle = std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(call);
        }
    });
    let _ = handle.join();
}

pub async fn remove(docker: &Docker, id: &str) {
    let opts = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    let removing = matches!(
        docker.remove_container(id, Some(opts)).await,
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409,
            ..
        })
    );
    if removing {
        // Another runner starting at the same time is removing it (both found the same
        // orphan): "removed" must mean gone, so wait for its removal to end.
        wait_gone(docker, id, std::time::Duration::from_secs(10)).await;
    }
}

/// Waits until the engine no longer knows the container (true), or `within` passed.
pub async fn wait_gone(docker: &Docker, id: &str, within: std::time::Duration) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < within {
        let inspect = docker
            .inspect_container(
                id,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await;
        if matches!(
            inspect,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404,
                ..
            })
        ) {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    false
}

pub async fn open_container(
    engine: &super::engine::Engine,
    spec: &SandboxSpec,
) -> Result<Sandbox, SandboxError> {
    let docker = &engine.docker;
    let worktree = local::absolute(&spec.worktree)?;
    let worktree = std::fs::canonicalize(&worktree).unwrap_or(worktree);
    let inside: PathBuf = spec
        .docker
        .mount_at
        .clone()
        .unwrap_or_else(|| worktree.clone());
    if let Some(mount) = crate::start_error::own_mount_under(&inside) {
        return Err(SandboxStartError::WorktreeCollides {
            path: inside.display().to_string(),
            mount: mount.to_string(),
            engine: engine.describe(),
        }
        .into());
    }
    let guard = WorktreeGuard::new(&worktree, &spec.protected);
    let chosen = engine.choose_runtime(&spec.docker.runtime).await?;
    let runtime = Runtime {
        name: chosen.as_deref(),
        gvisor: engine.gvisor(chosen.as_deref()),
    };
    let cmd = server_command(
        engine,
        spec,
        &inside,
        &guard.moved(&worktree, &inside),
        runtime.gvisor,
    )?;
    let run_id = unique_id();
    let mut body = container_body(spec, runtime, &worktree, &inside, &guard, &run_id, cmd);
    if let Some(host) = body.host_config.as_mut() {
        host.ulimits = engine.ulimits();
        host.userns_mode = engine.userns_mode();
    }
    let id = create(engine, spec, &format!("runner-{run_id}"), body).await?;
    let container = ContainerGuard {
        docker: docker.clone(),
        id: id.clone(),
    };
    // Reverse order: the container goes first, then the sweep finds nothing can replant.
    let guards: Vec<Box<dyn Send + Sync>> = vec![
        Box::new(guard.sweep_on_close(&worktree, spec.sweep_repositories, None)),
        Box::new(container),
    ];
    let wall = crate::self_test::Wall::Container {
        podman: engine.kind == super::engine::Kind::Podman,
        gvisor: runtime.gvisor,
    };
    serve(docker, &id, inside, container_env(spec), guards)
        .await
        .map(|mut sandbox| {
            sandbox.wall = Some(wall);
            sandbox
        })
        .map_err(|e| match e {
            SandboxError::Disconnected(why) if why.contains(NO_SHELL_MARK) => {
                SandboxStartError::NoShell {
                    image: spec.docker.image.clone(),
                }
                .into()
            }
            SandboxError::Start(SandboxStartError::Engine {
                step,
                reason,
                fault,
                ..
            }) => SandboxStartError::Engine {
                engine: engine.describe(),
                step,
                reason,
                fault,
            }
            .into(),
            e => e,
        })
}

/// The server's command line in the container: its roots, network, the paths the guard
/// watches (as the container sees them), the command user and (gVisor) its process limit.
fn server_command(
    engine: &super::engine::Engine,
    spec: &SandboxSpec,
    inside: &Path,
    seen: &WorktreeGuard,
    gvisor: bool,
) -> Result<Vec<String>, SandboxError> {
    let mut cmd = vec!["sandbox-server".to_string(), "--seccomp".to_string()];
    cmd.extend(
        local::root_args(inside, &spec.read_only)?
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned()),
    );
    let mut flag = |name: &str, value: String| {
        cmd.push(name.to_string());
        cmd.push(value);
    };
    flag("--network", spec.network.as_arg().into());
    for path in &seen.forbid {
        flag("--forbid", path.display().to_string());
    }
    for path in seen
        .repositories
        .dirs
        .iter()
        .chain(&seen.repositories.pointers)
    {
        flag("--known-repository", path.display().to_string());
    }
    flag("--command-user", engine.command_user());
    if gvisor {
        flag("--nproc", spec.limits.pids.to_string());
        let address_space = super::engine::gvisor_address_space(spec.limits.memory_bytes);
        flag("--address-space", address_space.to_string());
    }
    if spec.sweep_repositories {
        cmd.push("--sweep-repositories".into());
    }
    cmd.extend(crate::spec::test_gap_args(spec));
    Ok(cmd)
}

/// The engine's refusal to `step` (create, attach to, start a container) before it ran:
/// a sandbox that did not start, not a server that was lost. `engine` names the engine
/// where the caller knows it.
pub(super) fn engine_refused(engine: &str, step: &str, e: bollard::errors::Error) -> SandboxError {
    let fault = super::EngineFault::of(&e);
    let reason = match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message,
        e => e.to_string(),
    };
    SandboxStartError::Engine {
        engine: engine.to_string(),
        step: step.to_string(),
        reason: reason.trim().to_string(),
        fault,
    }
    .into()
}

/// Creates the container; a missing image is said as such, any other refusal with the
/// engine's name and its reason.
async fn create(
    engine: &super::engine::Engine,
    spec: &SandboxSpec,
    name: &str,
    body: ContainerCreateBody,
) -> Result<String, SandboxError> {
    let created = engine
        .docker
        .create_container(
            Some(CreateContainerOptionsBuilder::new().name(name).build()),
            body,
        )
        .await
        .map_err(|e| match &e {
            bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            } => SandboxStartError::MissingImage {
                image: spec.docker.image.clone(),
                engine: engine.describe(),
            }
            .into(),
            _ => engine_refused(&engine.describe(), "create the sandbox container", e),
        })?;
    Ok(created.id)
}

/// How [`serve`] names the engine when it cannot attach or start (it has only the
/// connection); [`open_container`] puts the engine's own description in its place.
const ENGINE: &str = "the container engine";

/// Starts a created (or stopped) container whose main process is the server and connects
/// a client to it. `guards` end the sandbox when it closes.
pub(super) async fn serve(
    docker: &Docker,
    id: &str,
    inside: PathBuf,
    env: Vec<(String, String)>,
    guards: Vec<Box<dyn Send + Sync>>,
) -> Result<Sandbox, SandboxError> {
    // Owned from here on, so that a failed start still ends the container.
    let keepalive = Keepalive {
        child: None,
        guards,
    };
    // Attach before start, so not one byte of the server's output is missed.
    let attach = docker
        .attach_container(
            id,
            Some(
                AttachContainerOptionsBuilder::new()
                    .stdin(true)
                    .stdout(true)
                    .stderr(true)
                    .stream(true)
                    .detach_keys(DETACH_KEYS)
                    .build(),
            ),
        )
        .await
        .map_err(|e| engine_refused(ENGINE, "attach to the sandbox container", e))?;
    docker
        .start_container(id, None)
        .await
        .map_err(|e| engine_refused(ENGINE, "start the sandbox container", e))?;

    let (mut to_client, from_server) = tokio::io::duplex(1 << 20);
    let stderr_tail = Arc::new(Mutex::new(String::new()));
    let tail = stderr_tail.clone();
    let mut output = attach.output;
    tokio::spawn(async move {
        while let Some(item) = output.next().await {
            match item {
                Ok(LogOutput::StdOut { message }) => {
                    if to_client.write_all(&message).await.is_err() {
                        break;
                    }
                }
                Ok(LogOutput::StdErr { message }) => local::push_tail(&tail, &message),
                Ok(_) => {}
                Err(e) => {
                    local::push_tail(&tail, format!("(attach stream: {e})").as_bytes());
                    break;
                }
            }
        }
    });
    let client = crate::SandboxClient::new(
        from_server,
        attach.input,
        local::tail_diagnostics(stderr_tail),
    );
    let mut sandbox = local::finish(client, inside, BackendKind::Docker, env, keepalive).await?;
    sandbox.container_id = Some(id.to_string());
    Ok(sandbox)
}
