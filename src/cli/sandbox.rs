//! `runner sandbox doctor | shell | cleanup`: what this machine can enforce, a look inside
//! the sandbox the way the agent sees it, and the removal of leftovers.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Subcommand;

mod cleanup;

use super::exit;
use super::tool::SandboxArgs;
use crate::sandbox::BackendKind;
use crate::sandbox::docker::{engine, image};
use crate::sandbox::landlock::cgroup;
use crate::sandbox::spec::SandboxSpec;

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Check landlock, seccomp, namespaces, cgroups, the Docker engine, the image and the
    /// disk; say how to fix each problem.
    Doctor {
        /// The sandbox image the Docker check looks for on the engine.
        #[arg(long, default_value = crate::sandbox::spec::DEFAULT_IMAGE)]
        image: String,
        /// One JSON object on stdout: {"ok", "failures", "checks": [{"backend", "name",
        /// "status" (ok, warn, fail), "passed", "detail", "fix"}]} instead of the text.
        #[arg(long)]
        json: bool,
    },
    /// An interactive shell inside the sandbox, seeing what the agent's commands see.
    Shell {
        /// The worktree the shell's sandbox is made for, as `runner run --root`.
        #[arg(long, default_value = ".")]
        root: PathBuf,
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// Remove what runner left behind and nobody owns any more; live sandboxes stay.
    ///
    /// Removed: containers, cgroups and temp directories whose runner process is gone,
    /// copy workspaces of killed runs that hold no changes, and disk images that killed
    /// evals left mounted. This is the rule every docker start already applies to orphans.
    ///
    /// Kept: whatever a live runner process owns (a session in another terminal, a running
    /// `runner eval`), copy workspaces waiting for review or holding changes, and
    /// containers another machine made on a shared engine. `--all` ends the live
    /// containers too.
    Cleanup(CleanupArgs),
}

/// How far `runner sandbox cleanup` goes.
#[derive(Debug, clap::Args)]
pub struct CleanupArgs {
    /// List what would be removed and what would stay, each with its reason; remove
    /// nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also remove live containers, whose runner process still runs: those sessions and
    /// evals fail with "the sandbox server is gone". Asks first on a terminal; without a
    /// terminal it refuses unless --yes is given. Copy workspaces and disk images of live
    /// runs stay even so.
    #[arg(long)]
    pub all: bool,
    /// With --all: end the live containers without asking (what a script must say).
    #[arg(long, requires = "all")]
    pub yes: bool,
}

pub async fn run(cmd: SandboxCommand) -> u8 {
    match cmd {
        SandboxCommand::Doctor { image, json } => doctor(&image, json).await,
        SandboxCommand::Shell { root, sandbox } => shell(&root, &sandbox).await,
        SandboxCommand::Cleanup(args) => cleanup::run(&args).await,
    }
}

/// The doctor's findings: printed as they come as text, or kept for one JSON document at
/// the end (`--json`), so a script reads the same checks a person does.
struct Report {
    failures: usize,
    json: bool,
    backend: &'static str,
    checks: Vec<serde_json::Value>,
}

impl Report {
    fn section(&mut self, backend: &'static str) {
        self.backend = backend;
        if !self.json {
            println!("{backend} backend");
        }
    }
    fn record(&mut self, status: &str, what: &str, detail: String, fix: Option<&str>) {
        self.checks.push(serde_json::json!({
            "backend": self.backend,
            "name": what,
            "status": status,
            "passed": status != "fail",
            "detail": detail,
            "fix": fix,
        }));
    }
    fn ok(&mut self, what: &str, detail: impl std::fmt::Display) {
        if !self.json {
            println!("ok    {what}: {detail}");
        }
        self.record("ok", what, detail.to_string(), None);
    }
    fn warn(&mut self, what: &str, detail: impl std::fmt::Display) {
        if !self.json {
            println!("warn  {what}: {detail}");
        }
        self.record("warn", what, detail.to_string(), None);
    }
    fn fail(&mut self, what: &str, detail: impl std::fmt::Display, fix: &str) {
        self.failures += 1;
        if !self.json {
            println!("FAIL  {what}: {detail}\n      fix: {fix}");
        }
        self.record("fail", what, detail.to_string(), Some(fix));
    }
    /// The JSON document, under `--json`; the exit status either way.
    fn finish(self) -> u8 {
        if self.json {
            println!(
                "{}",
                crate::display::json(&serde_json::json!({
                    "ok": self.failures == 0,
                    "failures": self.failures,
                    "checks": self.checks,
                }))
            );
        }
        if self.failures == 0 {
            exit::OK
        } else {
            exit::FAILED
        }
    }
}

/// The mount and PID namespaces, tried the way the server makes them. Without them
/// landlock still starts, and this says what it goes without.
fn namespaces(r: &mut Report) {
    let limits = crate::sandbox::spec::Limits::default();
    match crate::sandbox::confine::namespaces_refused() {
        None => r.ok(
            "namespaces",
            "mount and PID namespaces: .git/hooks and .git/config read-only, a size-limited \
             tmpfs as $TMPDIR, a /proc of the sandbox's own, --network allowlist",
        ),
        Some(why) => r.warn(
            "namespaces",
            format!(
                "none ({why}). Landlock still starts, without them: .git/hooks, .git/config \
                 and the other files host git runs are put back after every command and at \
                 close instead of being read-only; $TMPDIR is a folder on disk (each file up \
                 to {} MiB, the total not bounded); /proc shows the host's processes; \
                 --network allowlist is refused. To get them: allow unprivileged user \
                 namespaces (sysctl kernel.apparmor_restrict_unprivileged_userns=0 or an \
                 AppArmor profile for runner with `userns,`; user.max_user_namespaces > 0), \
                 or use --sandbox docker",
                limits.tmp_bytes >> 20
            ),
        ),
    }
}

/// The cgroup limits a landlock sandbox would get here.
fn limits(r: &mut Report) {
    let limits = crate::sandbox::spec::Limits::default();
    let cg = cgroup::create(&limits);
    match cgroup::missing_limits(cg.as_ref()) {
        None => r.ok("limits", "a cgroup per sandbox: memory, processes and CPU"),
        Some(missing) => r.warn(
            "limits",
            format!(
                "{missing}. To get them: run as root, or start runner in a cgroup v2 scope \
                 delegated to you (systemd-run --user --scope -p Delegate=yes runner …), \
                 where it passes memory, pids and cpu on to each sandbox"
            ),
        ),
    }
    if let Some(cg) = cg {
        let dirs = cg.dirs.clone();
        drop(cg);
        cgroup::destroy(&dirs);
    }
}

async fn doctor(image_name: &str, json: bool) -> u8 {
    let mut r = Report {
        failures: 0,
        json,
        backend: "landlock",
        checks: Vec::new(),
    };
    r.section("landlock");
    let ll = crate::sandbox::confine::probe_landlock();
    if ll.fully_enforced {
        r.ok("landlock", &ll.detail);
    } else {
        r.fail(
            "landlock",
            &ll.detail,
            "boot a kernel with landlock ABI 6 or later (Linux 6.12+, lsm=...,landlock), or use --sandbox docker",
        );
    }
    match crate::sandbox::confine::probe_seccomp() {
        Ok(()) => r.ok("seccomp", "filters apply; an AF_INET socket is refused"),
        Err(e) => r.fail(
            "seccomp",
            e,
            "use a kernel built with CONFIG_SECCOMP_FILTER",
        ),
    }
    namespaces(&mut r);
    limits(&mut r);

    r.section("docker");
    match engine::Engine::open(None).await {
        Err(e) => r.fail(
            "engine",
            e,
            "apt-get install docker.io && (dockerd > /var/log/dockerd.log 2>&1 &), or apt-get \
             install podman && (podman system service --time=0 &)",
        ),
        Ok(engine) => docker_engine(&mut r, &engine, image_name).await,
    }
    disk(&mut r, "temp disk", &std::env::temp_dir());
    r.finish()
}

fn disk(r: &mut Report, what: &str, dir: &Path) {
    let Ok(st) = rustix::fs::statvfs(dir) else {
        r.warn(what, format!("cannot stat {}", dir.display()));
        return;
    };
    let free = st.f_bavail * st.f_frsize;
    let gib = free as f64 / (1u64 << 30) as f64;
    if free < 2 << 30 {
        r.fail(
            what,
            format!("{gib:.1} GiB free in {}", dir.display()),
            "free disk space (docker system prune; runner sandbox cleanup)",
        );
    } else {
        r.ok(what, format!("{gib:.1} GiB free in {}", dir.display()));
    }
}

/// Applies the filter on a throwaway thread and checks that it bites.
async fn shell(root: &Path, args: &SandboxArgs) -> u8 {
    // The shell owns the terminal where the protocol would run, so there is no channel
    // for the proxy's connections yet.
    if args.spec(root).is_ok_and(|s| {
        s.network == crate::sandbox::spec::Network::Allowlist && s.backend == BackendKind::None
    }) {
        eprintln!(
            "runner: --network allowlist needs a wall: with --sandbox none the shell reaches the network directly. Use --sandbox landlock or docker"
        );
        return exit::USAGE;
    }
    // With a copy workspace the shell works in the copy, kept for review when it holds changes.
    let copy_without_wall = args.workspace_mode() == Ok(crate::workspace::Mode::Copy)
        && args
            .spec(root)
            .is_ok_and(|s| s.backend == BackendKind::None);
    if copy_without_wall {
        eprintln!(
            "runner: --workspace copy needs a wall around the copy: with --sandbox none the shell can still reach the checkout. Use --sandbox landlock or docker"
        );
        return exit::USAGE;
    }
    let workspace = match args.workspace_mode() {
        Ok(crate::workspace::Mode::Copy) => match args.spec(root).and_then(|s| {
            crate::workspace::Workspace::create(root, s.limits.disk_bytes)
                .map_err(|e| e.to_string())
        }) {
            Ok(ws) => Some(ws),
            Err(e) => {
                eprintln!("runner: {e}");
                return exit::FAILED;
            }
        },
        Ok(_) => None,
        Err(e) => {
            eprintln!("runner: {e}");
            return exit::FAILED;
        }
    };
    let work = workspace.as_ref().map(|w| w.work());
    let code = shell_in(work.as_deref().unwrap_or(root), args).await;
    super::changes::report(workspace);
    code
}

/// The allow-list proxy of a shell's sandbox. The shell holds the terminal, so nobody can
/// answer an ask: what the rules leave open is refused, with a message that says where to
/// allow the host.
fn shell_proxy(
    root: &Path,
    args: &SandboxArgs,
    client: crate::sandbox::SandboxClient,
    worktree: PathBuf,
    spec: &SandboxSpec,
) -> impl std::future::Future<Output = Result<crate::network::NetworkProxy, String>> + use<> {
    let rules = args
        .options(root, &super::permission::RuleArgs { config: None }, None)
        .rules(None)
        .map(|r| r.rules)
        .map_err(|e| e.to_string());
    let limits = crate::network::NetworkLimits::of(&spec.limits);
    async move {
        let policy = crate::network::Policy::without_asks(
            &worktree,
            rules?,
            "the shell holds the terminal, so nobody can answer; allow the host under [permission.network] in your config",
        );
        crate::network::NetworkProxy::start(client, policy, limits)
            .await
            .map_err(|e| format!("cannot start the network proxy in the sandbox: {e}"))
    }
}

/// The pipes of a landlock shell's protocol: the server reads requests on its descriptor
/// 3 and answers on 4, beside the terminal the shell holds.
struct ShellChannel {
    requests: std::io::PipeWriter,
    responses: std::io::PipeReader,
    /// The server's ends, open until it is spawned (the command's `pre_exec` names them).
    child_ends: Option<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>,
}

impl ShellChannel {
    fn attach(command: &mut std::process::Command) -> std::io::Result<ShellChannel> {
        use std::os::fd::{AsRawFd, OwnedFd};
        use std::os::unix::process::CommandExt;
        let (their_in, requests) = std::io::pipe()?;
        let (responses, their_out) = std::io::pipe()?;
        let (their_in, their_out) = (OwnedFd::from(their_in), OwnedFd::from(their_out));
        let (a, b) = (their_in.as_raw_fd(), their_out.as_raw_fd());
        command.args(["--protocol-fds", "3,4"]);
        // SAFETY: only dup, dup2 and close between fork and exec. Both are first moved above
        // 4, so neither overwrites the other on its way to 3 and 4.
        unsafe {
            command.pre_exec(move || {
                let high_a = libc::fcntl(a, libc::F_DUPFD, 10);
                let high_b = libc::fcntl(b, libc::F_DUPFD, 10);
                if high_a < 0
                    || high_b < 0
                    || libc::dup2(high_a, 3) < 0
                    || libc::dup2(high_b, 4) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(high_a);
                libc::close(high_b);
                Ok(())
            });
        }
        Ok(ShellChannel {
            requests,
            responses,
            child_ends: Some((their_in, their_out)),
        })
    }

    /// The child has its copies: ours must close, or the server's end of the responses
    /// would never read as closed here.
    fn spawned(&mut self) {
        self.child_ends = None;
    }

    fn client(self) -> Result<crate::sandbox::SandboxClient, String> {
        use std::os::fd::OwnedFd;
        let fail = |e: std::io::Error| format!("cannot use the shell's protocol pipes: {e}");
        let writer = tokio::net::unix::pipe::Sender::from_owned_fd(OwnedFd::from(self.requests))
            .map_err(fail)?;
        let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(self.responses))
            .map_err(fail)?;
        Ok(crate::sandbox::SandboxClient::new(
            reader,
            writer,
            Arc::new(String::new),
        ))
    }
}

async fn shell_in(root: &Path, args: &SandboxArgs) -> u8 {
    let spec = match args.spec(root) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("runner: {e}");
            return exit::FAILED;
        }
    };
    match spec.backend {
        BackendKind::None | BackendKind::Landlock => shell_on_host(root, args, &spec).await,
        BackendKind::Docker => shell_in_docker(root, args, &spec).await,
    }
}

/// What a host shell's wall needs kept alive while it runs: the private `/tmp`, the
/// cgroup, the sweep of the worktree's repositories.
type HostGuards = (
    Option<tempfile::TempDir>,
    Option<cgroup::SandboxCgroup>,
    Option<crate::sandbox::worktree_guard::SweepOnClose>,
);

/// The server started in shell mode on the host (landlock, or no wall), the terminal
/// handed to its shell.
async fn shell_on_host(root: &Path, args: &SandboxArgs, spec: &SandboxSpec) -> u8 {
    let worktree = match std::fs::canonicalize(root) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("runner: --root {}: {e}", root.display());
            return exit::USAGE;
        }
    };
    let (mut command, _guards) = match host_shell_command(spec, &worktree) {
        Ok(made) => made,
        Err(e) => {
            eprintln!("runner: {e}");
            return exit::FAILED;
        }
    };
    // With the allow-list, the server serves the proxy on two more descriptors while the
    // shell has the terminal.
    let channel = if spec.network == crate::sandbox::spec::Network::Allowlist {
        match ShellChannel::attach(&mut command) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("runner: cannot make the shell's protocol pipes: {e}");
                return exit::FAILED;
            }
        }
    } else {
        None
    };
    // Ctrl-C goes to the shell; runner waits it out.
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("runner: cannot start the shell: {e}");
            return exit::FAILED;
        }
    };
    let proxy = match channel.map(|mut c| {
        c.spawned();
        c.client()
    }) {
        Some(Ok(client)) => match shell_proxy(root, args, client, worktree.clone(), spec).await {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("runner: {e}; the shell has no network");
                None
            }
        },
        Some(Err(e)) => {
            eprintln!("runner: {e}; the shell has no network");
            None
        }
        None => None,
    };
    let status = tokio::task::spawn_blocking(move || child.wait()).await;
    super::tool::report_network(proxy.as_ref()).await;
    match status {
        Ok(Ok(status)) => status.code().map_or(exit::FAILED, |c| c as u8),
        _ => exit::FAILED,
    }
}

/// The server's command line for a shell: confined by landlock as the backend prepares
/// it, or (no wall) just serving the worktree.
fn host_shell_command(
    spec: &SandboxSpec,
    worktree: &Path,
) -> Result<(std::process::Command, HostGuards), String> {
    let mut command = std::process::Command::new(&spec.server_exe);
    let guards = if spec.backend == BackendKind::Landlock {
        let prepared =
            crate::sandbox::landlock::prepare(spec, worktree).map_err(|e| e.to_string())?;
        if let Some(line) = &prepared.given_up {
            eprintln!("runner: {line}");
        }
        command.args(&prepared.args).env_clear().envs(prepared.env);
        (Some(prepared.tmp), prepared.cgroup, Some(prepared.sweep))
    } else {
        command
            .args(["sandbox-server", "--root"])
            .arg(worktree)
            .env_clear()
            .envs(crate::sandbox::allowed_env());
        (None, None, None)
    };
    command.arg("--shell");
    Ok((command, guards))
}

/// Why a docker shell could not be opened: its sandbox, or the proxy beside it.
#[derive(Debug, thiserror::Error)]
enum ShellError {
    #[error(transparent)]
    Docker(#[from] crate::sandbox::docker::DockerError),
    #[error("{0}")]
    Proxy(String),
}

/// A shell in a new docker sandbox, the allow-list's proxy beside it when asked for.
async fn shell_in_docker(root: &Path, args: &SandboxArgs, spec: &SandboxSpec) -> u8 {
    let network = spec.network == crate::sandbox::spec::Network::Allowlist;
    let opened = crate::sandbox::docker::shell(spec, |sandbox| {
        let started = network.then(|| {
            let worktree = sandbox.worktree().to_path_buf();
            shell_proxy(root, args, sandbox.client.clone(), worktree, spec)
        });
        async move {
            match started {
                Some(s) => s.await.map(Some).map_err(ShellError::Proxy),
                None => Ok(None),
            }
        }
    })
    .await;
    match opened {
        Ok((code, proxy)) => {
            super::tool::report_network(proxy.as_ref()).await;
            code
        }
        Err(e) => {
            eprintln!("runner: {e}");
            exit::FAILED
        }
    }
}

/// The engine's part of `doctor`: which engine, what it enforces, its storage, the image.
/// The engine's OCI runtimes, and whether gVisor is among them (the `untrusted` profile
/// uses it when it is).
fn runtimes(r: &mut Report, info: bollard::models::SystemInfo) {
    let mut runtimes: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
    runtimes.sort();
    let default = info.default_runtime.unwrap_or_default();
    let listed = format!(
        "{} (default {default}; choose with --runtime)",
        runtimes.join(", ")
    );
    if runtimes.iter().any(|n| n == "runsc") {
        r.ok(
            "runtimes",
            format!("{listed}; runsc (gVisor) is there, and the untrusted profile uses it"),
        );
    } else {
        r.ok("runtimes", listed);
        r.warn(
            "gVisor",
            "no runsc runtime: the untrusted profile runs on the engine's default; to add it: apt-get install runsc, \"runtimes\": {\"runsc\": {\"path\": \"/usr/bin/runsc\"}} in /etc/docker/daemon.json, restart dockerd",
        );
    }
}

async fn docker_engine(r: &mut Report, engine: &engine::Engine, image_name: &str) {
    r.ok(
        "engine",
        format!("{} (API {})", engine.describe(), engine.api),
    );
    if let Ok(info) = engine.docker.info().await {
        let cgroups = format!(
            "cgroup {} with the {} driver",
            info.cgroup_version
                .map(|v| v.to_string())
                .unwrap_or_default(),
            info.cgroup_driver
                .map(|v| v.to_string())
                .unwrap_or_default()
        );
        if engine.unenforced.is_empty() {
            r.ok(
                "cgroups",
                format!("{cgroups}; memory, CPU and pids limits enforced"),
            );
        } else {
            r.warn(
                "cgroups",
                format!(
                    "{cgroups}; the engine cannot enforce the {} limit(s) (a rootless Podman \
                     gets no cgroup controllers on cgroup v1 or without systemd delegation): \
                     run rootful, or on cgroup v2 with delegated controllers",
                    engine.unenforced.join(", ")
                ),
            );
        }
        r.ok(
            "storage",
            format!(
                "{} in {}",
                info.driver.clone().unwrap_or_default(),
                info.docker_root_dir.clone().unwrap_or_default()
            ),
        );
        if let Some(dir) = info.docker_root_dir.clone() {
            disk(r, "engine disk", Path::new(&dir));
        }
        runtimes(r, info);
    }
    if let Some(limits) = engine.ulimits() {
        let shown: Vec<String> = limits
            .iter()
            .map(|l| {
                format!(
                    "{} {}",
                    l.name.as_deref().unwrap_or_default(),
                    l.hard.unwrap_or_default()
                )
            })
            .collect();
        r.ok(
            "rlimits",
            format!(
                "containers ask for the engine's own hard limits: {}",
                shown.join(", ")
            ),
        );
    }
    if image::exists(&engine.docker, image_name).await {
        r.ok("image", image_name);
    } else {
        r.fail(
            "image",
            format!("{image_name} is missing"),
            "runner image build",
        );
    }
}
