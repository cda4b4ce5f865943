//! A sandbox whose worktree is a directory of its image (a Harbor task's `WORKDIR`), not a
//! host folder mounted in.
//!
//! The task's files live in the container's own writable layer, so the container outlives
//! each sandbox opened on it: closing a sandbox kills the container (every process in it
//! dies with its PID namespace) but keeps its files, and the next [`TaskContainer::serve`]
//! starts it again with a fresh server. That is how an evaluation ends the agent's
//! processes before the verifier runs, in the very file system the agent left. The
//! container is removed when the [`TaskContainer`] is dropped.
//!
//! The walls are the docker backend's (no new privileges, no network, the limits, runner's
//! seccomp filter in the server) except two: the image's file system is the task's, and
//! all of it is writable; and root keeps the capabilities a system's own files need
//! ([`TASK_CAPABILITIES`]: apt, chown), none that reach past the container.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder,
    KillContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use futures_util::StreamExt;

use super::container::{ContainerGuard, docker_error, serve, served, unique_id, wait_in_drop};
use super::engine::Engine;
use super::{DockerError, SERVER_PATH};
use crate::spec::{Limits, Network};
use crate::{Sandbox, SandboxError, local};

/// What the task container is made from.
#[derive(Debug, Clone)]
pub struct TaskImage {
    pub image: String,
    /// Where the agent works; default the image's `WORKDIR`, else `/`.
    pub workdir: Option<String>,
    /// Who the server (and so every command of the agent) runs as; default the image's
    /// `USER`.
    pub user: Option<String>,
    /// Added to the image's own environment.
    pub env: Vec<(String, String)>,
    pub limits: Limits,
    pub network: Network,
    /// Host directories the tools may read (saved tool output), mounted read-only at the
    /// same path.
    pub read_only: Vec<PathBuf>,
    /// The static `runner` that serves inside.
    pub server_exe: PathBuf,
    /// The certificate bundle commands and the verifier trust ([`crate::trust`]), mounted
    /// read-only at [`crate::trust::INSIDE`] when the engine is local.
    pub ca_bundle: Option<PathBuf>,
    /// The verifier gets runner's proxy in this container (its server may then listen on
    /// the container's loopback, which has no other interface whatever `network` is).
    pub verifier_proxy: bool,
    /// Whether the engine sees this machine's files (a local socket). If not (an engine
    /// on another machine, over TCP or SSH), the server is copied into the container
    /// instead of mounted, and `read_only` is left out: there is nothing to mount from.
    pub engine_is_local: bool,
    /// The OCI runtimes the container may run under, in order of preference, as the
    /// sandbox container's (`SandboxSpec::docker.runtime`): the first the engine has;
    /// empty, the engine's default. None of them there: the container is not made.
    pub runtime: Vec<String>,
}

/// What root may still do in a task container: work with the files of the task's own
/// system as Docker's default set lets it (apt writes its lists as `_apt` and switches to
/// that user; a setup step chowns what it made). Nothing here reaches past the container:
/// no network administration, no mounts, no ptrace, no raw sockets, no new privileges;
/// and a task user other than root has none of them.
const TASK_CAPABILITIES: [&str; 6] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "SETGID",
    "SETUID",
];

/// What a task container mounts read-only from this machine (nothing from an engine on
/// another one): the server, the folders the tools may read, the certificate bundle.
fn task_mounts(task: &TaskImage, read_only: &[PathBuf], bundle: Option<&Path>) -> Vec<Mount> {
    let bind = |source: &Path, target: &Path| Mount {
        source: Some(source.display().to_string()),
        target: Some(target.display().to_string()),
        typ: Some(MountType::BIND),
        read_only: Some(true),
        ..Default::default()
    };
    let mut mounts = Vec::new();
    if task.engine_is_local {
        mounts.push(bind(&task.server_exe, Path::new(SERVER_PATH)));
    }
    for dir in read_only {
        mounts.push(bind(dir, dir));
    }
    if let Some(bundle) = bundle {
        mounts.push(bind(bundle, Path::new(crate::trust::INSIDE)));
    }
    mounts
}

/// The task container's walls: the sandbox container's (no capabilities, no new
/// privileges, the network, the limits, the runtime and rlimits the engine gets for it)
/// but a writable root.
fn host_config(
    task: &TaskImage,
    mounts: Vec<Mount>,
    runtime: Option<String>,
    engine: &Engine,
) -> HostConfig {
    let limits = &task.limits;
    // Under gVisor the pids cgroup holds gVisor's own tasks (see `Engine::gvisor`): it is
    // sized for them, and the processes are counted by RLIMIT_NPROC, which gVisor's kernel
    // enforces (for a task user other than root, which no process limit binds but the
    // cgroup's).
    let gvisor = engine.gvisor(runtime.as_deref());
    let mut ulimits = engine.ulimits();
    if gvisor {
        let list = ulimits.get_or_insert_with(Vec::new);
        list.retain(|u| u.name.as_deref() != Some("nproc"));
        list.push(bollard::models::ResourcesUlimits {
            name: Some("nproc".into()),
            soft: Some(limits.pids as i64),
            hard: Some(limits.pids as i64),
        });
    }
    HostConfig {
        mounts: Some(mounts),
        network_mode: Some(task.network.docker_mode().into()),
        cap_drop: Some(vec!["ALL".into()]),
        cap_add: Some(TASK_CAPABILITIES.map(String::from).to_vec()),
        security_opt: Some(vec!["no-new-privileges:true".into()]),
        memory: Some(limits.memory_bytes as i64),
        memory_swap: Some(limits.memory_bytes as i64),
        nano_cpus: Some((limits.cpus * 1e9) as i64),
        pids_limit: Some(super::engine::pids_cgroup(gvisor, limits.pids)),
        ulimits,
        // `None`: the engine's default runtime.
        runtime,
        // No docker-init: the server is its own init (see
        // `confine::process::container_init`).
        init: Some(false),
        // Kept when its main process ends: its files are the task's state.
        auto_remove: Some(false),
        ..Default::default()
    }
}

/// Where and as whom a task container runs, and with what environment: the task's
/// choices over its image's own.
struct Setting {
    workdir: PathBuf,
    /// The image's own user, for commands that name none.
    image_user: String,
    /// The agent's user: the task's, else the image's.
    user: String,
    /// The image's environment plus the task's (the container's own).
    base_env: Vec<(String, String)>,
    /// `base_env` with a `HOME` for the agent's user (and the proxy's variables where the
    /// task may reach out): what the sandbox's commands run with.
    env: Vec<(String, String)>,
    /// The certificate bundle to mount, where the engine is local.
    bundle: Option<PathBuf>,
}

impl Setting {
    /// Reads the image's `WORKDIR`, `USER` and environment from the engine and lays the
    /// task's over them. An engine that fails the call is named as failing it; any other
    /// failure says the image is not there.
    async fn of(docker: &Docker, task: &TaskImage) -> Result<Setting, SandboxError> {
        let inspected = docker.inspect_image(&task.image).await.map_err(|e| {
            match super::EngineFault::of(&e) {
                // The engine failed the call: that says nothing of the image.
                Some(_) => {
                    docker_error(&format!("cannot inspect the task image {}", task.image), e)
                }
                None => SandboxError::Disconnected(format!(
                    "docker: the task image {} is not on the engine: {e}",
                    task.image
                )),
            }
        })?;
        let config = inspected.config.unwrap_or_default();
        let workdir = task
            .workdir
            .clone()
            .or(config.working_dir.filter(|w| !w.is_empty()))
            .unwrap_or_else(|| "/".into());
        if !Path::new(&workdir).is_absolute() {
            return Err(SandboxError::Disconnected(format!(
                "the task's workdir {workdir:?} is not an absolute path"
            )));
        }
        let image_user = config.user.unwrap_or_default();
        let user = task.user.clone().unwrap_or_else(|| image_user.clone());
        let mut base_env = merged_env(config.env.unwrap_or_default(), &task.env);
        let bundle = task.ca_bundle.clone().filter(|_| task.engine_is_local);
        if bundle.is_some() {
            crate::trust::set_env(&mut base_env, Path::new(crate::trust::INSIDE));
        }
        let mut env = with_home(base_env.clone(), &user);
        // A task's loopback is its own: the services its tests start listen there.
        if task.network == Network::Allowlist {
            crate::spec::set_proxy_env(&mut env, &[]);
        }
        Ok(Setting {
            workdir: PathBuf::from(workdir),
            image_user,
            user,
            base_env,
            env,
            bundle,
        })
    }
}

/// The host folders the tools may read, mounted where the engine sees this machine's files
/// (an engine elsewhere has nothing to mount from).
fn read_only(task: &TaskImage) -> &[PathBuf] {
    if task.engine_is_local {
        &task.read_only
    } else {
        &[]
    }
}

/// The server's command line in the container, and the network it serves: the proxy's
/// (`allowlist`) where the agent or the verifier gets one.
fn server_command(
    task: &TaskImage,
    workdir: &Path,
    read_only: &[PathBuf],
) -> Result<(Vec<String>, Network), SandboxError> {
    let mut cmd = vec!["sandbox-server".to_string(), "--seccomp".to_string()];
    cmd.extend(
        local::root_args(workdir, read_only)?
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned()),
    );
    // The server listens for the proxy where the agent or the verifier gets one.
    let served_network = match task.verifier_proxy {
        true => Network::Allowlist,
        false => task.network,
    };
    cmd.extend(["--network".into(), served_network.as_arg().into()]);
    Ok((cmd, served_network))
}

/// Whether the container's cgroup is this machine's to read
/// ([`TaskContainer::live_processes`]): a local Docker, runner not itself in a container,
/// and a runtime that puts the container's processes in its cgroup itself (runc and crun;
/// gVisor and VM runtimes put their own there).
fn cgroups_here(task: &TaskImage, engine: &Engine, runtime: Option<&str>) -> bool {
    task.engine_is_local
        && engine.kind == super::engine::Kind::Docker
        && !crate::spec::in_container()
        && runtime
            .or(engine.default_runtime.as_deref())
            .is_some_and(|r| matches!(r, "runc" | "crun"))
}

/// What a command run through the engine produced.
#[derive(Debug)]
pub struct ExecOutput {
    /// Standard output and error, interleaved, head and tail kept past the limit.
    pub output: Vec<u8>,
    pub code: Option<i64>,
    pub timed_out: bool,
}

/// One task's container, alive (running or stopped) until dropped.
pub struct TaskContainer {
    docker: Docker,
    id: String,
    /// Where and as whom it runs, and with what environment. `base_env` (without a `HOME`
    /// worked out for the agent) is what an engine exec as another user starts from, so
    /// that user gets its own home.
    setting: Setting,
    /// Set when the engine cannot mount the server: it is copied in before every start.
    copy_server: Option<PathBuf>,
    /// Whether it was ever started: a container never started needs no stop before its
    /// first start (two engine calls saved on every attempt).
    started: std::sync::atomic::AtomicBool,
    /// `none`, or `allowlist` when the task may reach the internet through the proxy.
    network: Network,
    /// What every start's self-test judges: the wall, and the network its server was
    /// started with (`allowlist` too when the verifier gets a proxy).
    wall: (crate::self_test::Wall, Network),
    /// Whether the engine runs on this machine with its cgroups under this machine's
    /// `/sys/fs/cgroup`, so that [`TaskContainer::live_processes`] may read them.
    cgroups_here: bool,
    _remove: ContainerGuard,
}

impl std::fmt::Debug for TaskContainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskContainer")
            .field("id", &self.id)
            .field("workdir", &self.setting.workdir)
            .finish()
    }
}

impl TaskContainer {
    /// Creates the container (not started) on `engine`, as the sandbox container is made
    /// there: under the runtime it chooses from `task.runtime`
    /// ([`Engine::choose_runtime`]), with the rlimits it asks for ([`Engine::ulimits`]:
    /// Podman's own hard limits, without which its OCI runtime may refuse to start the
    /// container). The image must be on the engine.
    pub async fn create(engine: &Engine, task: &TaskImage) -> Result<TaskContainer, SandboxError> {
        let docker = &engine.docker;
        let setting = Setting::of(docker, task).await?;
        let read_only = read_only(task);
        let (cmd, served_network) = server_command(task, &setting.workdir, read_only)?;
        let mounts = task_mounts(task, read_only, setting.bundle.as_deref());
        let runtime = engine.choose_runtime(&task.runtime).await?;
        let runtime_name = runtime.clone();
        let run_id = unique_id();
        let body = ContainerCreateBody {
            image: Some(task.image.clone()),
            entrypoint: Some(vec![SERVER_PATH.to_string()]),
            cmd: Some(cmd),
            user: (!setting.user.is_empty()).then(|| setting.user.clone()),
            working_dir: Some(setting.workdir.display().to_string()),
            env: Some(
                setting
                    .base_env
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect(),
            ),
            host_config: Some(host_config(task, mounts, runtime, engine)),
            ..served(&run_id, served_network)
        };
        let name = format!("runner-task-{run_id}");
        let created = docker
            .create_container(
                Some(CreateContainerOptionsBuilder::new().name(&name).build()),
                body,
            )
            .await
            .map_err(|e| docker_error("cannot create the task container", e))?;
        let container = TaskContainer {
            docker: docker.clone(),
            id: created.id.clone(),
            setting,
            copy_server: (!task.engine_is_local).then(|| task.server_exe.clone()),
            started: std::sync::atomic::AtomicBool::new(false),
            network: task.network,
            wall: (
                crate::self_test::Wall::Task {
                    podman: engine.kind == super::engine::Kind::Podman,
                    gvisor: engine.gvisor(runtime_name.as_deref()),
                },
                served_network,
            ),
            cgroups_here: cgroups_here(task, engine, runtime_name.as_deref()),
            _remove: ContainerGuard {
                docker: docker.clone(),
                id: created.id,
            },
        };
        Ok(container)
    }

    /// Puts the server at [`SERVER_PATH`] in the (created, not started) container, streamed
    /// from disk: the binary can be large, and an engine elsewhere cannot mount it.
    async fn copy_server(&self, exe: &Path) -> Result<(), SandboxError> {
        use tokio::io::AsyncReadExt;
        let fail = |e: &dyn std::fmt::Display| {
            SandboxError::Disconnected(format!(
                "cannot copy the runner server into the task container: {e}"
            ))
        };
        let file = tokio::fs::File::open(exe).await.map_err(|e| fail(&e))?;
        let size = file.metadata().await.map_err(|e| fail(&e))?.len();
        let mut header = tar::Header::new_gnu();
        header
            .set_path(SERVER_PATH.trim_start_matches('/'))
            .map_err(|e| fail(&e))?;
        header.set_size(size);
        header.set_mode(0o755);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        let padding = (512 - (size % 512) as usize) % 512;
        // The header, the file, the padding to a block, and the two empty blocks that end
        // an archive.
        let reader = std::io::Cursor::new(header.as_bytes().to_vec())
            .chain(file)
            .chain(std::io::Cursor::new(vec![0u8; padding + 1024]));
        let stream = tokio_util::io::ReaderStream::with_capacity(reader, 1 << 20);
        let opts = UploadToContainerOptionsBuilder::new().path("/").build();
        self.docker
            .upload_to_container(&self.id, Some(opts), bollard::body_try_stream(stream))
            .await
            // The engine's answer keeps its kind: a failed engine is not a lost server.
            .map_err(|e| docker_error("cannot copy the runner server into the task container", e))
    }

    /// Who an engine exec with `user` runs as: that user, else the image's own, root if it
    /// names none (never the agent's, which is the container's).
    pub fn exec_user(&self, user: Option<&str>) -> String {
        user.map(str::to_string)
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| match self.setting.image_user.as_str() {
                "" => "0".to_string(),
                u => u.to_string(),
            })
    }

    /// The engine the container lives on.
    pub fn engine(&self) -> &Docker {
        &self.docker
    }

    pub fn workdir(&self) -> &Path {
        &self.setting.workdir
    }

    /// What the agent's commands may reach: the proxy's allow-list, or nothing.
    pub fn network(&self) -> Network {
        self.network
    }

    /// Starts the container with a fresh server and connects to it. Closing the sandbox
    /// kills the container, and with it every process the sandbox's commands started.
    pub async fn serve(&self) -> Result<Sandbox, SandboxError> {
        // A container still running (a sandbox dropped a moment ago) is stopped first.
        if self.started.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.stop().await;
        }
        // Copied afresh each time: the container's files are the agent's, and a server it
        // replaced would be the one process running beside the verifier.
        if let Some(exe) = &self.copy_server {
            self.copy_server(exe).await?;
        }
        let stop = StopOnClose {
            docker: self.docker.clone(),
            id: self.id.clone(),
        };
        let mut sandbox = serve(
            &self.docker,
            &self.id,
            self.setting.workdir.clone(),
            self.setting.env.clone(),
            vec![Box::new(stop)],
        )
        .await?;
        // Every start checks its wall before the first tool call, as any sandbox's does.
        let (wall, network) = self.wall;
        sandbox.wall = Some(wall);
        sandbox.self_test = Some(crate::self_test::run(&sandbox, wall, network).await?);
        Ok(sandbox)
    }

    /// How many live processes (a process with a live thread counts, whatever its leader's
    /// state) the container's cgroup holds, read
    /// from this machine's cgroup file system as the kernel keeps it, which nothing in the
    /// container can change (the engine's `top` lists the same cgroup). `None` where that
    /// cannot be read for sure: an engine elsewhere or other than Docker, runner in a
    /// container, a cgroup layout not known here, a process this PID namespace cannot see.
    /// The caller then asks the engine.
    pub fn live_processes(&self) -> Option<usize> {
        if !self.cgroups_here {
            return None;
        }
        cgroup_live(&self.id)
    }

    /// Kills every process in the container and waits until it has stopped.
    pub async fn stop(&self) {
        stop(&self.docker, &self.id).await
    }

    /// A tar of `path` in the container (running or not); `None` when it does not exist.
    /// More than `limit` bytes is an error: nothing this large is read into memory.
    pub async fn download(&self, path: &Path, limit: u64) -> Result<Option<Vec<u8>>, DockerError> {
        let opts = DownloadFromContainerOptionsBuilder::new()
            .path(&path.display().to_string())
            .build();
        let mut stream = self.docker.download_from_container(&self.id, Some(opts));
        let mut tar = Vec::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(bytes) => {
                    tar.extend_from_slice(&bytes);
                    if tar.len() as u64 > limit {
                        return Err(DockerError::Unexpected(format!(
                            "{} in the task container is larger than {} MiB",
                            path.display(),
                            limit >> 20
                        )));
                    }
                }
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => return Ok(None),
                Err(e) => {
                    return Err(DockerError::engine(format!(
                        "cannot read {}",
                        path.display()
                    ))(e));
                }
            }
        }
        Ok(Some(tar))
    }

    /// Unpacks a tar into `dir` of the container (running or not).
    pub async fn upload(&self, dir: &Path, tar: Vec<u8>) -> Result<(), DockerError> {
        let opts = UploadToContainerOptionsBuilder::new()
            .path(&dir.display().to_string())
            .build();
        self.docker
            .upload_to_container(&self.id, Some(opts), bollard::body_full(tar.into()))
            .await
            .map_err(DockerError::engine(format!(
                "cannot copy files into {}",
                dir.display()
            )))
    }

    /// Runs `argv` in the running container through the engine, as `user` (default the
    /// image's), in the workdir, with the container's environment plus `env`. Past
    /// `timeout` the container is killed: a command cut off from the host side alone would
    /// go on inside.
    /// `argv` started in the container through the engine, as `user` (else the image's own
    /// user, root if it names none: not the agent's), with the image's environment and
    /// `env` over it: the exec's id and its attached output.
    async fn start_exec(
        &self,
        argv: &[&str],
        user: Option<&str>,
        env: &[(String, String)],
    ) -> Result<(String, ExecStream), DockerError> {
        let mut all = self.setting.base_env.clone();
        for (k, v) in env {
            all.retain(|(have, _)| have != k);
            all.push((k.clone(), v.clone()));
        }
        // Not the container's user (that is the agent's): the image's own, root if it
        // names none.
        let user = self.exec_user(user);
        let created = self
            .docker
            .create_exec(
                &self.id,
                CreateExecOptions {
                    cmd: Some(argv.iter().map(|a| a.to_string()).collect()),
                    user: Some(user),
                    env: Some(all.iter().map(|(k, v)| format!("{k}={v}")).collect()),
                    working_dir: Some(self.setting.workdir.display().to_string()),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await
            .map_err(DockerError::engine(format!(
                "cannot run {argv:?} in the task container"
            )))?;
        let started = self
            .docker
            .start_exec(&created.id, None::<StartExecOptions>)
            .await
            .map_err(DockerError::engine(format!(
                "cannot run {argv:?} in the task container"
            )))?;
        let StartExecResults::Attached { output, .. } = started else {
            return Err(DockerError::Unexpected(
                "the engine ran the command detached".into(),
            ));
        };
        Ok((created.id, output))
    }

    pub async fn exec(
        &self,
        argv: &[&str],
        user: Option<&str>,
        env: &[(String, String)],
        timeout: Duration,
        limit: usize,
    ) -> Result<ExecOutput, DockerError> {
        let (exec_id, mut output) = self.start_exec(argv, user, env).await?;
        let mut kept = Capped::new(limit);
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        // The output stays open while anything the command left in the background holds
        // it; the command's own end is what counts, so the engine is asked about it too.
        // Asked first a moment after the start (the command has only just begun), or as
        // soon as the output ends.
        let every = Duration::from_millis(250);
        let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let mut exited_at: Option<tokio::time::Instant> = None;
        let mut exit_code = None;
        // The attached stream can also end before the command does (the engine closes it
        // under load): the exit status is waited for all the same, or a verifier still
        // running would be read as one that left no reward.
        let mut open = true;
        let mut closed_at: Option<tokio::time::Instant> = None;
        loop {
            if exited_at.is_some_and(|t| !open || t.elapsed() > Duration::from_millis(200)) {
                break;
            }
            // An engine that closed the stream and never reports the end (the container
            // died): what it says now is the answer, not a timeout much later.
            if closed_at.is_some_and(|t| t.elapsed() > EXIT_GRACE) {
                break;
            }
            tokio::select! {
                item = output.next(), if open => match item {
                    Some(Ok(LogOutput::StdOut { message } | LogOutput::StdErr { message })) => kept.push(&message),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(DockerError::engine("the engine cut the command's output")(e)),
                    None => {
                        open = false;
                        closed_at = Some(tokio::time::Instant::now());
                        // The command has most likely ended: asked now, not a poll later.
                        poll.reset_immediately();
                    }
                },
                _ = poll.tick(), if exited_at.is_none() => {
                    let ended = self
                        .docker
                        .inspect_exec(&exec_id)
                        .await
                        .ok()
                        .filter(|i| i.running == Some(false))
                        .and_then(|i| i.exit_code);
                    if ended.is_some() {
                        exited_at = Some(tokio::time::Instant::now());
                        exit_code = ended;
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(50)), if exited_at.is_some() => {}
                _ = &mut deadline => {
                    self.stop().await;
                    return Ok(ExecOutput { output: kept.finish(), code: None, timed_out: true });
                }
            }
        }
        // The status the engine gave when the command ended, else asked now.
        let code = match exit_code {
            Some(code) => Some(code),
            None => {
                self.docker
                    .inspect_exec(&exec_id)
                    .await
                    .map_err(DockerError::engine("cannot read the command's exit status"))?
                    .exit_code
            }
        };
        Ok(ExecOutput {
            output: kept.finish(),
            code,
            timed_out: false,
        })
    }
}

/// An exec's attached output, as the engine streams it.
type ExecStream = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
>;

/// How long an exec's exit status is waited for once its output stream has ended.
const EXIT_GRACE: Duration = Duration::from_secs(30);

/// The image's environment with the task's on top, and a `PATH` if neither gives one.
fn merged_env(image: Vec<String>, task: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = image
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (k, v) in task {
        env.retain(|(have, _)| have != k);
        env.push((k.clone(), v.clone()));
    }
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push((
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ));
    }
    env
}

/// A `HOME` for `user` where the environment gives none: the server's commands get their
/// environment from runner, not from the user's passwd entry.
fn with_home(mut env: Vec<(String, String)>, user: &str) -> Vec<(String, String)> {
    if !env.iter().any(|(k, _)| k == "HOME") {
        let root = matches!(user, "" | "root" | "0") || user.starts_with("0:");
        env.push(("HOME".into(), if root { "/root" } else { "/tmp" }.into()));
    }
    env
}

/// Where Docker's cgroup drivers put a container's cgroup: cgroup v2 and v1 (its `pids`
/// hierarchy), under the `cgroupfs` and the `systemd` driver.
const CGROUP_DIRS: [&str; 4] = [
    "/sys/fs/cgroup/docker/{id}",
    "/sys/fs/cgroup/system.slice/docker-{id}.scope",
    "/sys/fs/cgroup/pids/docker/{id}",
    "/sys/fs/cgroup/pids/system.slice/docker-{id}.scope",
];

/// The live processes of container `id`'s cgroup (and any below it): see
/// [`TaskContainer::live_processes`].
fn cgroup_live(id: &str) -> Option<usize> {
    // A full id only: a prefix could name another container's folder.
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let dir = CGROUP_DIRS
        .iter()
        .map(|d| PathBuf::from(d.replace("{id}", id)))
        .find(|d| d.join("cgroup.procs").is_file())?;
    let mut pids = Vec::new();
    procs_under(&dir, &mut pids, 0)?;
    let mut live = 0;
    for pid in pids {
        // 0: a process of a PID namespace this one cannot see.
        if pid == 0 {
            return None;
        }
        if process_lives(pid)? {
            live += 1;
        }
    }
    // The server answered a moment ago: a count without it is not this container's.
    (live > 0).then_some(live)
}

/// Whether process `pid` still runs: whether any of its threads does, since a leader that
/// called `exit` is a zombie while its other threads go on. `None` when that cannot be read.
fn process_lives(pid: u32) -> Option<bool> {
    let tasks = match std::fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(tasks) => tasks,
        // Gone since the list was read: dead.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(false),
        Err(_) => return None,
    };
    for task in tasks {
        let Ok(task) = task else { continue };
        match std::fs::read_to_string(task.path().join("stat")) {
            // The state follows the command's closing parenthesis.
            Ok(stat) => {
                let state = stat.rsplit_once(')')?.1.split_whitespace().next()?;
                if !matches!(state, "Z" | "X" | "x") {
                    return Some(true);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return None,
        }
    }
    Some(false)
}

/// The processes of cgroup `dir` and of every cgroup below it.
fn procs_under(dir: &Path, pids: &mut Vec<u32>, depth: usize) -> Option<()> {
    if depth > 16 {
        return None;
    }
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    for line in procs.lines() {
        pids.push(line.trim().parse().ok()?);
    }
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        if entry.file_type().ok()?.is_dir() {
            procs_under(&entry.path(), pids, depth + 1)?;
        }
    }
    Some(())
}

/// Kills the container (not removes it) when the sandbox over it closes.
struct StopOnClose {
    docker: Docker,
    id: String,
}

impl Drop for StopOnClose {
    fn drop(&mut self) {
        let (docker, id) = (self.docker.clone(), self.id.clone());
        wait_in_drop(async move { stop(&docker, &id).await });
    }
}

async fn stop(docker: &Docker, id: &str) {
    let opts = KillContainerOptionsBuilder::new().signal("SIGKILL").build();
    let _ = docker.kill_container(id, Some(opts)).await;
    // The kill returns before the container has stopped; its state says when it has.
    for _ in 0..200 {
        match docker.inspect_container(id, None).await {
            Ok(c) if c.state.as_ref().and_then(|s| s.running) == Some(true) => {
                tokio::time::sleep(Duration::from_millis(25)).await
            }
            _ => return,
        }
    }
}

/// Output kept up to a limit: the head and the tail, with a note of what was cut between.
struct Capped {
    limit: usize,
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    dropped: u64,
}

impl Capped {
    fn new(limit: usize) -> Capped {
        Capped {
            limit: limit.max(2),
            head: Vec::new(),
            tail: Default::default(),
            dropped: 0,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        let half = self.limit / 2;
        let room = half.saturating_sub(self.head.len()).min(bytes.len());
        self.head.extend_from_slice(&bytes[..room]);
        for &b in &bytes[room..] {
            self.tail.push_back(b);
            if self.tail.len() > half {
                self.tail.pop_front();
                self.dropped += 1;
            }
        }
    }

    fn finish(self) -> Vec<u8> {
        let mut out = self.head;
        if self.dropped > 0 {
            out.extend_from_slice(format!("\n[… {} bytes cut …]\n", self.dropped).as_bytes());
        }
        out.extend(self.tail);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_env_wins_and_home_follows_the_user() {
        let base = merged_env(
            vec!["PATH=/opt/bin:/usr/bin".into(), "MODE=image".into()],
            &[("MODE".into(), "task".into())],
        );
        assert!(base.contains(&("PATH".into(), "/opt/bin:/usr/bin".into())));
        assert!(base.contains(&("MODE".into(), "task".into())));
        assert!(!base.contains(&("MODE".into(), "image".into())));
        // The container's own environment names no home: an exec as another user gets
        // that user's.
        assert!(!base.iter().any(|(k, _)| k == "HOME"));
        assert!(with_home(base.clone(), "").contains(&("HOME".into(), "/root".into())));
        let agent = with_home(merged_env(vec![], &[]), "agent");
        assert!(agent.contains(&("HOME".into(), "/tmp".into())));
        assert!(agent.iter().any(|(k, _)| k == "PATH"));
    }

    #[test]
    fn capped_output_keeps_head_and_tail() {
        let mut c = Capped::new(10);
        c.push(b"0123456789abcdefghij");
        let out = String::from_utf8(c.finish()).unwrap();
        assert!(out.starts_with("01234"), "{out}");
        assert!(out.ends_with("fghij"), "{out}");
        assert!(out.contains("10 bytes cut"), "{out}");
    }
}
