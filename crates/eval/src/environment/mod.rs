//! A Harbor task's environment for a harness that drives the trial itself: Harbor's
//! `BaseEnvironment` (`harbor run --env runner_sandbox.harbor:RunnerEnvironment`) asks,
//! runner does.
//!
//! `runner eval run` owns a whole attempt; here Harbor owns it (its agent, its verifier, its
//! uploads and downloads, its phases) and runner owns only the wall, so that every guarantee
//! stays on this side of the pipe and the Python plug-in holds none:
//! - the image is built from the task's `environment/Dockerfile` by eval's [`Builder`]
//!   (named by content, once per engine), or its `docker_image` found or pulled;
//! - the container is eval's task container ([`TaskContainer`]): no capabilities beyond
//!   the six a system's own files need, no new privileges, `network_mode=none`, the task's
//!   CPUs and memory as hard limits, the profile's runtime (gVisor under `untrusted`) on
//!   the engine `DOCKER_HOST` names (Podman's socket too);
//! - whatever the phase, the only way out is runner's allow-list proxy on the container's
//!   loopback, whose rules are switched when Harbor switches the phase's `network_mode`
//!   ([`PhaseGate`]), so `no-network` refuses every host and `allowlist` opens the listed
//!   ones alone; every connection goes to the trial's audit trail;
//! - commands run through runner's server in the container (its seccomp filter, its process
//!   group killed at the timeout) when they run as the server's user; a command as another
//!   user (Harbor's bookkeeping as `root`, a task's `[verifier] user`) runs through the
//!   engine as that user, bounded by `timeout(1)`, as `runner eval`'s verifier does;
//! - dropping the environment kills and removes the container: nothing is left running.
//!
//! A task with `environment/docker-compose.yaml` is refused: runner runs one container.
//! The wire between the plug-in and this module is in [`serve`].

pub mod serve;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::StreamExt;
use runner_network::{ConnectionRecord, NetworkProxy};
use runner_protocol::{ExecRequest, OutputStream};
use runner_sandbox::Sandbox;
use runner_sandbox::client::ExecEvent;
use runner_sandbox::docker::in_image::{TaskContainer, TaskImage};
use runner_sandbox::spec::{Limits, Network};
use serde::{Deserialize, Serialize};

use crate::EvalError;
use crate::engines::{Engines, Lease};
use crate::images::Built;
use crate::verifier_network::{PhaseGate, PhasePlan, Reach};

/// How long a build may take when the task does not say (Harbor's default).
const BUILD_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a command may run when the harness gives no timeout.
const NO_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// The most of one command's output kept, each stream: a harness reads it whole.
const OUTPUT_LIMIT: u64 = 64 << 20;
/// The largest tree one download copies out.
pub const DOWNLOAD_LIMIT: u64 = 1 << 30;

/// Harbor's network policy of one phase: `public`, `no-network`, or `allowlist` with
/// `allowed_hosts`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct NetworkPolicy {
    #[serde(default = "public")]
    pub network_mode: String,
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
}

fn public() -> String {
    "public".into()
}

impl NetworkPolicy {
    /// The rules of the proxy in this phase: Harbor's mode as `runner eval` gives it, under
    /// the installed boundaries.
    pub fn rules(&self) -> Result<Vec<runner_permission::rules::Rule>, EvalError> {
        let reach = match self.network_mode.as_str() {
            "public" | "" => Reach::Public,
            "no-network" => Reach::NoNetwork,
            "allowlist" => Reach::Allowlist,
            other => {
                return Err(EvalError::Task(format!(
                    "network_mode {other:?} is none of public, no-network, allowlist"
                )));
            }
        };
        if reach != Reach::Allowlist && !self.allowed_hosts.is_empty() {
            return Err(EvalError::Task(format!(
                "allowed_hosts is only for network_mode \"allowlist\", not {:?}",
                self.network_mode
            )));
        }
        let allowed_hosts = crate::harbor::normalized_hosts("the phase's", &self.allowed_hosts)
            .map_err(EvalError::Task)?;
        let plan = PhasePlan {
            reach,
            allowed_hosts,
            from: format!("harbor network_mode {}", self.network_mode),
        };
        let mut rules = match reach {
            Reach::NoNetwork => PhasePlan::offline_rules(),
            _ => plan.rules(&[]),
        };
        rules.extend(PhasePlan::boundary_rules()?);
        Ok(rules)
    }
}

/// What the environment is made from: the task's `[environment]` as Harbor resolved it,
/// and runner's own settings.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StartRequest {
    /// The task's `environment/` folder (its Dockerfile and build context).
    pub environment_dir: PathBuf,
    #[serde(default)]
    pub docker_image: Option<String>,
    /// Build `environment/` even when `docker_image` names an image.
    #[serde(default)]
    pub force_build: bool,
    #[serde(default)]
    pub build_timeout_sec: Option<f64>,
    #[serde(default)]
    pub workdir: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Hard limits; `None`: the profile's.
    #[serde(default)]
    pub cpus: Option<f64>,
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// The policy the environment starts with.
    #[serde(default)]
    pub network: NetworkPolicy,
    /// The trial's audit trail (OCSF JSON lines); it may not be where the sandbox writes.
    #[serde(default)]
    pub audit: Option<PathBuf>,
    /// runner's profile for the wall (default `eval`): its limits and runtime.
    #[serde(default)]
    pub profile: Option<String>,
    /// The OCI runtime (`runsc` for gVisor), over the profile's.
    #[serde(default)]
    pub runtime: Option<String>,
    /// The engine (`unix:///run/podman/podman.sock`…); default `DOCKER_HOST` or the local
    /// socket.
    #[serde(default)]
    pub docker_host: Option<String>,
    /// runner's config file (its `[network]` rules are not read here; its CA bundle is).
    #[serde(default)]
    pub config: Option<PathBuf>,
}

/// What [`TaskEnvironment::start`] made.
#[derive(Debug, Clone, Serialize)]
pub struct Started {
    pub image: String,
    /// Whether the image was built now (not found from an earlier build).
    pub built: bool,
    pub build_log: String,
    pub workdir: String,
    pub container: String,
    /// Who runner's server (and so a command that names no user) runs as.
    pub user: String,
    /// The engine, as it described itself.
    pub engine: String,
}

/// One command, as a harness asks for it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Exec {
    /// Shell source, run with `bash -c`.
    pub command: String,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub timeout_sec: Option<f64>,
    /// A user name or uid; `None`: the server's.
    #[serde(default)]
    pub user: Option<String>,
}

/// How a command ended, its two streams apart.
#[derive(Debug, Clone, Default)]
pub struct Ran {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub code: Option<i32>,
    pub timed_out: bool,
}

/// A started task environment; dropping it kills and removes the container.
pub struct TaskEnvironment {
    proxy: Option<NetworkProxy>,
    gate: Arc<PhaseGate>,
    sandbox: Option<Sandbox>,
    container: Option<TaskContainer>,
    trail: Option<runner_agent::audit::SessionAudit>,
    workdir: PathBuf,
    user: String,
    _engine: Lease,
    _engines: Engines,
    /// The empty folder the spec names as its worktree on the host.
    _scratch: tempfile::TempDir,
}

impl TaskEnvironment {
    /// Builds (or finds) the image, makes the container, starts runner's server in it and
    /// the proxy with the starting policy's rules.
    pub async fn start(request: &StartRequest) -> Result<(TaskEnvironment, Started), EvalError> {
        let rules = request.network.rules()?;
        refuse_compose(&request.environment_dir)?;
        let hosts: Vec<String> = request.docker_host.iter().cloned().collect();
        let engines = Engines::connect(&hosts, false, None).await?;
        let engine = engines.lease();
        let (built, build_log) = image(request, &engine).await?;
        let scratch = tempfile::Builder::new()
            .prefix("runner-harbor-")
            .tempdir()
            .map_err(EvalError::io("make a folder in", &std::env::temp_dir()))?;
        let spec = task_image(request, built.image(), &engine, scratch.path())?;
        let container = TaskContainer::create(&engine.described, &spec).await?;
        let trail = open_trail(request, &spec, container.workdir(), scratch.path())?;
        // The start's self-test (passed or failed) goes to the trial's trail.
        let served = container.serve().await;
        if let Some(trail) = &trail {
            match &served {
                Ok(sandbox) => {
                    if let Some(report) = &sandbox.self_test {
                        runner_agent::audit::self_test(trail.sink(), report);
                    }
                }
                Err(e) => runner_agent::audit::start_failed(trail.sink(), e),
            }
        }
        let sandbox =
            served.map_err(|e| EvalError::from(e).during("cannot start the task container"))?;
        let gate = Arc::new(PhaseGate::new(
            sandbox.worktree(),
            rules,
            "a harness's trial answers every ask with deny",
        ));
        let proxy = start_proxy(&sandbox, gate.clone(), trail.as_ref()).await?;
        let started = Started {
            image: built.image().to_string(),
            built: matches!(built, Built::Fresh(_)),
            build_log,
            workdir: container.workdir().display().to_string(),
            container: sandbox.container_id.clone().unwrap_or_default(),
            user: spec.user.clone().unwrap_or_default(),
            engine: engine.described.describe(),
        };
        let user = started.user.clone();
        Ok((
            TaskEnvironment {
                workdir: container.workdir().to_path_buf(),
                proxy: Some(proxy),
                gate,
                sandbox: Some(sandbox),
                container: Some(container),
                trail,
                user,
                _engine: engine,
                _engines: engines,
                _scratch: scratch,
            },
            started,
        ))
    }

    /// From now on the proxy judges by `policy` (Harbor's phase switch).
    pub fn set_network(&self, policy: &NetworkPolicy) -> Result<(), EvalError> {
        self.gate.switch(policy.rules()?);
        Ok(())
    }

    /// Runs one command: through runner's server when it runs as the server's user, else
    /// through the engine as `user`.
    pub async fn exec(&self, exec: &Exec) -> Result<Ran, EvalError> {
        let as_server = match exec.user.as_deref() {
            None | Some("") => true,
            Some(user) => same_user(user, &self.user),
        };
        if as_server {
            self.exec_in_server(exec).await
        } else {
            self.exec_through_engine(exec).await
        }
    }

    async fn exec_in_server(&self, exec: &Exec) -> Result<Ran, EvalError> {
        let sandbox = self.sandbox()?;
        let mut env = sandbox.env.clone();
        for (k, v) in &exec.env {
            env.retain(|(have, _)| have != k);
            env.push((k.clone(), v.clone()));
        }
        // The server's exec starts in a folder beneath its roots (the workdir); another
        // folder is the command's own first step.
        let command = match &exec.cwd {
            Some(cwd) => format!(
                "cd -- {} || exit 1\n{}",
                runner_tool::stdio::shell_quote(cwd),
                exec.command
            ),
            None => exec.command.clone(),
        };
        let request = ExecRequest {
            command,
            cwd: self.workdir.clone(),
            env,
            timeout_ms: timeout_of(exec).as_millis() as u64,
            stdin: None,
            output_limit: OUTPUT_LIMIT,
            interactive: false,
        };
        let mut execution = sandbox.client.exec(request).await?;
        let mut ran = Ran::default();
        loop {
            match execution.next().await? {
                ExecEvent::Output(o) => match o.stream {
                    OutputStream::Stdout => ran.stdout.extend_from_slice(&o.data),
                    OutputStream::Stderr => ran.stderr.extend_from_slice(&o.data),
                },
                ExecEvent::Exit(status) => {
                    ran.code = status.code.or(status.signal.map(|s| 128 + s));
                    ran.timed_out = status.timed_out;
                    return Ok(ran);
                }
            }
        }
    }

    /// As another user: an engine exec in the running container (its walls, not the
    /// server's seccomp filter), the proxy's variables set as for the server's commands,
    /// the whole process group killed by `timeout(1)` at the deadline.
    async fn exec_through_engine(&self, exec: &Exec) -> Result<Ran, EvalError> {
        let sandbox = self.sandbox()?;
        let id = sandbox.container_id.clone().unwrap_or_default();
        let docker = self.container()?.engine().clone();
        let mut env: Vec<(String, String)> = Vec::new();
        runner_sandbox::spec::set_proxy_env(&mut env, &[]);
        for (k, v) in &exec.env {
            env.retain(|(have, _)| have != k);
            env.push((k.clone(), v.clone()));
        }
        let limit = timeout_of(exec);
        let seconds = format!("{}", limit.as_secs().max(1));
        let argv = [
            "timeout",
            "-s",
            "KILL",
            &seconds,
            "bash",
            "-c",
            &exec.command,
        ];
        let cwd = exec
            .cwd
            .clone()
            .unwrap_or_else(|| self.workdir.display().to_string());
        let fail = |e| {
            EvalError::from(runner_sandbox::docker::DockerError::engine(
                "cannot run a command in the task container".to_string(),
            )(e))
        };
        let created = docker
            .create_exec(
                &id,
                CreateExecOptions {
                    cmd: Some(argv.iter().map(|a| a.to_string()).collect()),
                    user: exec.user.clone(),
                    env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
                    working_dir: Some(cwd),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await
            .map_err(fail)?;
        let started = docker.start_exec(&created.id, None).await.map_err(fail)?;
        let StartExecResults::Attached { mut output, .. } = started else {
            return Err(EvalError::Task(
                "the engine ran the command detached".into(),
            ));
        };
        let mut ran = Ran::default();
        let began = std::time::Instant::now();
        let read = async {
            while let Some(item) = output.next().await {
                match item {
                    Ok(LogOutput::StdOut { message }) => ran.stdout.extend_from_slice(&message),
                    Ok(LogOutput::StdErr { message }) => ran.stderr.extend_from_slice(&message),
                    Ok(_) => {}
                    Err(e) => return Err(fail(e)),
                }
            }
            Ok(())
        };
        // `timeout(1)` ends it; the host's own bound is a backstop for an engine that
        // keeps the stream open.
        match tokio::time::timeout(limit + Duration::from_secs(10), read).await {
            Ok(r) => r?,
            Err(_) => ran.timed_out = true,
        }
        let inspected = docker.inspect_exec(&created.id).await.map_err(fail)?;
        ran.code = inspected.exit_code.map(|c| c as i32);
        ran.timed_out |= ran.code == Some(137) && began.elapsed() >= limit;
        Ok(ran)
    }

    /// Unpacks `tar` into `dir` of the container, made first (as root) when missing.
    pub async fn upload(&self, dir: &str, tar: Vec<u8>) -> Result<(), EvalError> {
        let made = self
            .exec_through_engine(&Exec {
                command: format!("mkdir -p -- {}", runner_tool::stdio::shell_quote(dir)),
                user: Some("0".into()),
                timeout_sec: Some(60.0),
                ..Default::default()
            })
            .await?;
        if made.code != Some(0) {
            return Err(EvalError::Task(format!(
                "cannot make {dir} in the task container: {}",
                String::from_utf8_lossy(&made.stderr).trim()
            )));
        }
        self.container()?.upload(Path::new(dir), tar).await?;
        Ok(())
    }

    /// A tar of `path` (its last name the tar's top entry); `None` when it is not there.
    pub async fn download(&self, path: &str) -> Result<Option<Vec<u8>>, EvalError> {
        Ok(self
            .container()?
            .download(Path::new(path), DOWNLOAD_LIMIT)
            .await?)
    }

    /// Every connection the proxy judged so far, one line each.
    pub async fn connections(&self) -> Vec<ConnectionRecord> {
        match &self.proxy {
            Some(proxy) => {
                proxy.settle(Duration::from_secs(1)).await;
                proxy.records()
            }
            None => Vec::new(),
        }
    }

    /// Ends everything: the proxy, the server and every process in the container, then
    /// the container itself. Returns once the engine has removed it.
    pub async fn stop(mut self) -> Vec<ConnectionRecord> {
        let connections = self.connections().await;
        if let Some(trail) = &self.trail {
            trail.ended("the harness stopped the environment");
        }
        let parts = (
            self.proxy.take(),
            self.sandbox.take(),
            self.container.take(),
            self.trail.take(),
        );
        let _ = tokio::task::spawn_blocking(move || drop(parts)).await;
        connections
    }

    fn sandbox(&self) -> Result<&Sandbox, EvalError> {
        self.sandbox
            .as_ref()
            .ok_or_else(|| EvalError::Task("the environment was stopped".into()))
    }

    fn container(&self) -> Result<&TaskContainer, EvalError> {
        self.container
            .as_ref()
            .ok_or_else(|| EvalError::Task("the environment was stopped".into()))
    }
}

impl Drop for TaskEnvironment {
    fn drop(&mut self) {
        // The container's own guard removes it (waiting on a thread of its own).
        drop(self.proxy.take());
        drop(self.sandbox.take());
        drop(self.container.take());
    }
}

/// A compose file means services beside the task's: runner runs one container.
fn refuse_compose(dir: &Path) -> Result<(), EvalError> {
    for name in ["docker-compose.yaml", "docker-compose.yml", "compose.yaml"] {
        if dir.join(name).exists() {
            return Err(EvalError::Task(format!(
                "{} is a docker compose environment: runner runs a task's one container \
                 and does not run docker compose services; use Harbor's docker or podman \
                 environment for this task",
                dir.join(name).display()
            )));
        }
    }
    Ok(())
}

/// The image: `environment/` built (when asked, or when no `docker_image` is given), else
/// the prebuilt one found or pulled. With what the build printed.
async fn image(request: &StartRequest, engine: &Lease) -> Result<(Built, String), EvalError> {
    let limit = request
        .build_timeout_sec
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(BUILD_TIMEOUT);
    let mut log = String::new();
    let built = match (&request.docker_image, request.force_build) {
        (Some(image), false) => engine.builder.prebuilt(image, limit).await?,
        _ => {
            let dockerfile = request.environment_dir.join("Dockerfile");
            if !dockerfile.is_file() {
                return Err(EvalError::Task(format!(
                    "{} is not there: the task names no docker_image to run instead",
                    dockerfile.display()
                )));
            }
            let folder = crate::folder::Folder::open(&request.environment_dir)
                .map_err(|e| EvalError::Task(e.to_string()))?;
            engine
                .builder
                .image_logged(&folder, limit, &mut log)
                .await?
        }
    };
    if let Built::Cached(image) = &built {
        log = format!("{image} was already on the engine; nothing was built\n");
    }
    Ok((built, log))
}

/// The container's recipe: the profile's wall with the task's limits over it, always the
/// proxy (a later phase may open what this one does not).
fn task_image(
    request: &StartRequest,
    image: &str,
    engine: &Lease,
    scratch: &Path,
) -> Result<TaskImage, EvalError> {
    let profile =
        runner_agent::config::profile::load(request.profile.as_deref().unwrap_or("eval"))?;
    let mut spec =
        runner_sandbox::spec::SandboxSpec::new(runner_sandbox::BackendKind::Docker, scratch)
            .map_err(EvalError::io(
                "find the runner executable at",
                Path::new("/proc/self/exe"),
            ))?;
    profile.sandbox.apply(&mut spec);
    if let Some(r) = &request.runtime {
        spec.docker.runtime = vec![r.clone()];
    }
    let (settings, _) =
        runner_agent::config::settings::Settings::load(scratch, request.config.as_deref())?;
    let limits = Limits {
        memory_bytes: request
            .memory_mb
            .map(|m| m << 20)
            .unwrap_or(spec.limits.memory_bytes),
        cpus: request.cpus.unwrap_or(spec.limits.cpus),
        ..spec.limits
    };
    Ok(TaskImage {
        image: image.to_string(),
        workdir: request.workdir.clone(),
        user: None,
        env: request
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        limits,
        network: Network::Allowlist,
        read_only: Vec::new(),
        server_exe: spec.server_exe,
        engine_is_local: engine.local,
        runtime: spec.docker.runtime,
        ca_bundle: settings.ca_bundle()?,
        verifier_proxy: true,
    })
}

/// The trial's trail, when the harness names one: refused where the sandbox could write
/// (nowhere on the host but the scratch folder; the task's files live in its container).
fn open_trail(
    request: &StartRequest,
    spec: &TaskImage,
    workdir: &Path,
    scratch: &Path,
) -> Result<Option<runner_agent::audit::SessionAudit>, EvalError> {
    let Some(file) = &request.audit else {
        return Ok(None);
    };
    let (settings, _) =
        runner_agent::config::settings::Settings::load(scratch, request.config.as_deref())?;
    let options = runner_agent::audit::AuditOptions {
        file: Some(file.clone()),
        ..Default::default()
    };
    let writable = [runner_audit::Writable::new(
        scratch,
        "the environment's scratch folder",
    )];
    let audit = runner_agent::audit::open(&options, &settings, &writable)
        .map_err(|e| EvalError::Options(e.to_string()))?;
    let mut wall =
        runner_sandbox::spec::SandboxSpec::new(runner_sandbox::BackendKind::Docker, scratch)
            .map_err(EvalError::io(
                "find the runner executable at",
                Path::new("/proc/self/exe"),
            ))?;
    wall.network = Network::Allowlist;
    wall.worktree = workdir.to_path_buf();
    let line = format!(
        "a Harbor trial in {} (docker task container, network through runner's proxy)",
        spec.image
    );
    Ok(Some(runner_agent::audit::SessionAudit::started(
        audit, &wall, line, None,
    )))
}

/// The proxy in the container, judged by `gate`; its connections go to the trail.
async fn start_proxy(
    sandbox: &Sandbox,
    gate: Arc<PhaseGate>,
    trail: Option<&runner_agent::audit::SessionAudit>,
) -> Result<NetworkProxy, EvalError> {
    let policy = runner_network::Policy {
        gate,
        rules: Vec::new(),
        programs: Default::default(),
        inspection: None,
    };
    let proxy = NetworkProxy::start(
        sandbox.client.clone(),
        policy,
        runner_network::NetworkLimits::default(),
    )
    .await
    .map_err(|e| {
        EvalError::from(e).during("cannot start the network proxy in the task container")
    })?;
    if let Some(trail) = trail {
        runner_agent::audit::observe(trail.sink(), Some(&proxy));
    }
    Ok(proxy)
}

fn timeout_of(exec: &Exec) -> Duration {
    exec.timeout_sec
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(NO_TIMEOUT)
}

/// Whether two spellings name the same user: root is `root`, `0` or the image's unnamed
/// default.
fn same_user(a: &str, b: &str) -> bool {
    let root = |u: &str| matches!(u.split(':').next().unwrap_or(u), "" | "0" | "root");
    a == b || (root(a) && root(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_becomes_the_proxy_rules() {
        let decides = |policy: &NetworkPolicy, host: &str| {
            policy
                .rules()
                .unwrap()
                .iter()
                .rev()
                .find(|r| runner_permission::wildcard::matches(host, &r.pattern))
                .map(|r| r.action)
        };
        use runner_permission::rules::Action;
        let public = NetworkPolicy::default();
        assert_eq!(decides(&public, "pypi.org"), Some(Action::Allow));
        let none = NetworkPolicy {
            network_mode: "no-network".into(),
            allowed_hosts: vec![],
        };
        assert_eq!(decides(&none, "pypi.org"), Some(Action::Deny));
        let listed = NetworkPolicy {
            network_mode: "allowlist".into(),
            allowed_hosts: vec!["pypi.org".into()],
        };
        assert_eq!(decides(&listed, "pypi.org"), Some(Action::Allow));
        assert_eq!(decides(&listed, "example.com"), Some(Action::Deny));
        let wrong = NetworkPolicy {
            network_mode: "offline".into(),
            allowed_hosts: vec![],
        };
        assert!(wrong.rules().unwrap_err().to_string().contains("offline"));
        let mixed = NetworkPolicy {
            network_mode: "public".into(),
            allowed_hosts: vec!["pypi.org".into()],
        };
        assert!(mixed.rules().is_err());
    }

    #[test]
    fn root_has_three_spellings() {
        assert!(same_user("root", ""));
        assert!(same_user("0", "root"));
        assert!(same_user("agent", "agent"));
        assert!(!same_user("agent", "root"));
        assert!(!same_user("nobody", ""));
    }

    #[test]
    fn a_compose_task_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Dockerfile"), "FROM x\n").unwrap();
        assert!(refuse_compose(dir.path()).is_ok());
        std::fs::write(dir.path().join("docker-compose.yaml"), "services: {}\n").unwrap();
        let e = refuse_compose(dir.path()).unwrap_err().to_string();
        assert!(e.contains("docker compose"), "{e}");
        assert!(e.contains("docker-compose.yaml"), "{e}");
    }
}
