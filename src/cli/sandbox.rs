//! `runner sandbox doctor | shell | cleanup | serve`: what this machine can enforce, a look inside
//! the sandbox the way the agent sees it, and the removal of leftovers.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Subcommand;

mod cleanup;
mod serve;

use super::exit;
use super::permission::RuleArgs;
use super::tool::SandboxArgs;
use runner_sandbox::BackendKind;
use runner_sandbox::docker::{engine, image};
use runner_sandbox::landlock::cgroup;
use runner_sandbox::spec::SandboxSpec;

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Check landlock, seccomp, namespaces, cgroups, the Docker engine, the image and the
    /// disk; say how to fix each problem.
    Doctor {
        /// The sandbox image the Docker check looks for on the engine.
        #[arg(long, default_value = runner_sandbox::spec::DEFAULT_IMAGE)]
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
        #[command(flatten)]
        rules: RuleArgs,
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
    /// One sandbox served to a harness over standard input and output (JSON lines: exec,
    /// read_file, write_file; see docs/PYTHON.md) until the input closes or SIGTERM.
    Serve(serve::ServeArgs),
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
        SandboxCommand::Shell {
            root,
            sandbox,
            rules,
        } => exec_in_wall(&root, &sandbox, &rules, &[], None).await,
        SandboxCommand::Cleanup(args) => cleanup::run(&args).await,
        SandboxCommand::Serve(args) => serve::run(args).await,
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
                runner_display::json(&serde_json::json!({
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
    let limits = runner_sandbox::spec::Limits::default();
    match runner_sandbox::confine::namespaces_refused() {
        None => r.ok(
            "namespaces",
            "mount and PID namespaces: .git/hooks and .git/config read-only, a size-limited \
             tmpfs as $TMPDIR, a /tmp and a /proc of the sandbox's own, --network allowlist",
        ),
        Some(why) => r.warn(
            "namespaces",
            format!(
                "none ({why}). Landlock still starts, without them: .git/hooks, .git/config \
                 and the other files host git runs are put back after every command and at \
                 close instead of being read-only; $TMPDIR is a folder on disk (each file up \
                 to {} MiB, the total not bounded); no /tmp of its own (the host's stays \
                 closed to it); /proc shows the host's processes; --network allowlist is \
                 refused. To get them: allow unprivileged user \
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
    let limits = runner_sandbox::spec::Limits::default();
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
    let ll = runner_sandbox::confine::probe_landlock();
    if ll.fully_enforced {
        r.ok("landlock", &ll.detail);
    } else {
        r.fail(
            "landlock",
            &ll.detail,
            "boot a kernel with landlock ABI 6 or later (Linux 6.12+, lsm=...,landlock), or use --sandbox docker",
        );
    }
    match runner_sandbox::confine::probe_seccomp() {
        Ok(()) => r.ok("seccomp", "filters apply; an AF_INET socket is refused"),
        Err(e) => r.fail(
            "seccomp",
            e,
            "use a kernel built with CONFIG_SECCOMP_FILTER",
        ),
    }
    namespaces(&mut r);
    limits(&mut r);
    self_test(&mut r, BackendKind::Landlock, None).await;

    r.section("docker");
    match engine::Engine::open(None).await {
        Err(e) => r.fail(
            "engine",
            e,
            "apt-get install docker.io && (dockerd > /var/log/dockerd.log 2>&1 &), or apt-get \
             install podman && (podman system service --time=0 &)",
        ),
        Ok(engine) => {
            docker_engine(&mut r, &engine, image_name).await;
            if image::exists(&engine.docker, image_name).await {
                self_test(&mut r, BackendKind::Docker, Some(image_name)).await;
            }
        }
    }
    disk(&mut r, "temp disk", &std::env::temp_dir());
    r.finish()
}

/// The self-test every start runs ([`runner_sandbox::self_test`]), on a sandbox started
/// here around an empty folder: each check with what it saw and its time, then the start's
/// and the test's time side by side.
async fn self_test(r: &mut Report, backend: BackendKind, image: Option<&str>) {
    let started = async {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut spec = SandboxSpec::new(backend, dir.path()).map_err(|e| e.to_string())?;
        if let Some(image) = image {
            spec.docker.image = image.to_string();
        }
        let clock = std::time::Instant::now();
        let opened = runner_sandbox::open(&spec).await;
        Ok::<_, String>((opened, clock.elapsed(), dir))
    };
    let (opened, took, _dir) = match started.await {
        Ok(done) => done,
        Err(e) => return r.fail("self-test", e, "free the temp directory"),
    };
    let report = match opened {
        Ok(sandbox) => sandbox.self_test.clone(),
        Err(runner_sandbox::SandboxError::Start(
            runner_sandbox::start_error::SandboxStartError::WallCheck(failed),
        )) => Some(failed.report),
        Err(e) => return r.fail("self-test", e, "fix what the checks above say first"),
    };
    let Some(report) = report else { return };
    for (check, line) in report.checks.iter().zip(report.lines()) {
        match check.passed {
            true => r.ok("self-test", line),
            false => r.fail("self-test", line, check.fix),
        }
    }
    r.ok(
        "self-test time",
        format!(
            "{} µs of a {} ms start",
            report.total_micros,
            took.as_millis()
        ),
    );
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

/// Runs `argv` (empty: the sandbox's interactive shell) in the wall `args` ask for around
/// `root`: `runner exec`, and `runner sandbox shell`, which is exec of the sandbox's shell. A copy workspace is made first and
/// named at the end; the allow-list's proxy runs beside the program, and its connections
/// are listed when it ends. Returns the program's status, or runner's own for a failure
/// of its own.
pub(super) async fn exec_in_wall(
    root: &Path,
    args: &SandboxArgs,
    rules: &RuleArgs,
    argv: &[OsString],
    audit: Option<&Path>,
) -> u8 {
    let (spec, mode) = match args
        .spec(root, rules)
        .and_then(|s| Ok((s, args.workspace_mode()?)))
    {
        Ok(x) => x,
        Err(e) => {
            eprintln!("runner: {}", runner_display::escape(&e));
            return exit::USAGE;
        }
    };
    if let Err(e) = needs_a_wall(&spec, mode) {
        eprintln!("runner: {e}");
        return exit::USAGE;
    }
    // The trail opens before anything is made or run, and never where the program can
    // write.
    let trail = match open_trail(root, &spec, rules, audit) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("runner: {}", runner_display::escape(&e));
            return exit::USAGE;
        }
    };
    // With a copy workspace the program works in the copy, kept for review when it holds
    // changes.
    let workspace = match mode {
        runner_workspace::Mode::Copy => {
            match runner_workspace::Workspace::create(root, spec.limits.disk_bytes) {
                Ok(ws) => Some(ws),
                Err(e) => {
                    eprintln!("runner: {}", runner_display::escape(&e.to_string()));
                    return exit::FAILED;
                }
            }
        }
        _ => None,
    };
    let work = workspace.as_ref().map(|w| w.work());
    let code = exec_in(
        work.as_deref().unwrap_or(root),
        root,
        args,
        rules,
        argv,
        trail,
    )
    .await;
    super::changes::report(workspace);
    code
}

/// What the flags ask for that means nothing without a wall around the program.
fn needs_a_wall(spec: &SandboxSpec, mode: runner_workspace::Mode) -> Result<(), &'static str> {
    if spec.backend != BackendKind::None {
        return Ok(());
    }
    if spec.network == runner_sandbox::spec::Network::Allowlist {
        return Err(
            "--network allowlist needs a wall: with --sandbox none the program reaches the network directly. Use --sandbox landlock or docker",
        );
    }
    if mode == runner_workspace::Mode::Copy {
        return Err(
            "--workspace copy needs a wall around the copy: with --sandbox none the program can still reach the checkout. Use --sandbox landlock or docker",
        );
    }
    Ok(())
}

/// The audit trail of an exec: `--audit FILE` and the user's `[audit] file`, as every
/// session has it, refused where the sandbox of `spec` can write.
fn open_trail(
    root: &Path,
    spec: &SandboxSpec,
    rules: &RuleArgs,
    file: Option<&Path>,
) -> Result<Arc<runner_audit::Audit>, String> {
    let (settings, _) =
        runner_agent::config::settings::Settings::load(root, rules.config.as_deref())
            .map_err(|e| e.to_string())?;
    let options = runner_agent::audit::AuditOptions {
        file: file.map(Path::to_path_buf),
        ..Default::default()
    };
    let root = runner_agent::session::absolute_root(root);
    let writable = runner_agent::audit::writable_by(spec, Some(&root));
    runner_agent::audit::open(&options, &settings, &writable).map_err(|e| e.to_string())
}

/// The program in `work` (the worktree, or its copy), the rules read for `root`; its start,
/// each connection decision and its end go to `trail`.
async fn exec_in(
    work: &Path,
    root: &Path,
    args: &SandboxArgs,
    rule_args: &RuleArgs,
    argv: &[OsString],
    trail: Arc<runner_audit::Audit>,
) -> u8 {
    let wall = match Wall::of(work, root, args, rule_args) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("runner: {}", runner_display::escape(&e));
            return exit::USAGE;
        }
    };
    // Commands see each secret's placeholder, never its value (as in a session).
    let mut env = Vec::new();
    if let Some(inspection) = &wall.inspection {
        runner_network::settings::put_placeholders(&mut env, inspection);
    }
    // The shell of `sandbox shell` is no command anybody named.
    let command = (!argv.is_empty()).then(|| {
        argv.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    });
    let wall_line = runner_agent::session::wall_line(&wall.spec, None);
    let session = runner_agent::audit::SessionAudit::started(trail, &wall.spec, wall_line, command);
    let proxy = exec_proxy(&wall, session.sink().clone());
    let checked = |report: &runner_sandbox::self_test::SelfTestReport| {
        runner_agent::audit::self_test(session.sink(), report);
    };
    let code = match runner_sandbox::exec::run(&wall.spec, argv, &env, proxy, &checked).await {
        Ok((code, proxy)) => {
            super::tool::report_network(proxy.as_ref()).await;
            // Its connections still open are written before the stop.
            drop(proxy);
            session.ended(&format!("the program ended with status {code}"));
            code
        }
        Err(runner_sandbox::exec::ExecError::Sandbox(e)) => {
            // The wall failed its self-test (or could not be put to it): the report goes
            // to the trail, and the status is the sandbox's, as for `runner run`.
            runner_agent::audit::start_failed(session.sink(), &e);
            eprintln!("runner: {}", runner_display::escape(&e.to_string()));
            session.ended(&format!("runner could not run the program: {e}"));
            exit::SANDBOX
        }
        Err(e) => {
            eprintln!("runner: {}", runner_display::escape(&e.to_string()));
            session.ended(&format!("runner could not run the program: {e}"));
            exit::FAILED
        }
    };
    drop(session);
    code
}

/// An exec's allow-list proxy on its way up, or why it could not start.
type ProxyStarting = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<runner_network::NetworkProxy, String>> + Send>,
>;

/// What starts an exec's allow-list proxy from the sandbox's client: the rules decide
/// alone (nobody can answer an ask while the program holds the terminal), and every
/// decision and connection goes to `trail`.
fn exec_proxy(
    wall: &Wall,
    trail: Arc<runner_audit::Audit>,
) -> impl FnOnce(runner_sandbox::SandboxClient, PathBuf) -> ProxyStarting {
    let limits = runner_network::NetworkLimits::of(&wall.spec.limits);
    let (rules, inspection, programs) = (
        wall.rules.clone(),
        wall.inspection.clone(),
        wall.programs.clone(),
    );
    move |client, worktree: PathBuf| {
        Box::pin(async move {
            use runner_permission::gate::{PolicyAsker, RuleGate};
            let asker = PolicyAsker::deny(
                "the program holds the terminal, so nobody can answer; allow the host under [permission.network] in your config",
            );
            let gate =
                RuleGate::new(&worktree, rules.clone(), Arc::new(asker)).with_audit(trail.clone());
            let policy = runner_network::Policy {
                gate: Arc::new(gate),
                rules,
                programs,
                inspection,
            };
            let proxy = runner_network::NetworkProxy::start(client, policy, limits)
                .await
                .map_err(|e| format!("cannot start the network proxy in the sandbox: {e}"))?;
            runner_agent::audit::observe(&trail, Some(&proxy));
            Ok(proxy)
        })
    }
}

/// What an exec's sandbox is made from: its spec, the network rules its proxy judges by,
/// and the config's secrets and inspected hosts (whose authority joins the spec's trust).
struct Wall {
    spec: SandboxSpec,
    rules: Vec<runner_permission::rules::Rule>,
    inspection: Option<std::sync::Arc<runner_network::inspect::Inspection>>,
    programs: runner_network::programs::Programs,
}

impl Wall {
    fn of(
        work: &Path,
        root: &Path,
        args: &SandboxArgs,
        rule_args: &RuleArgs,
    ) -> Result<Wall, String> {
        let mut spec = args.spec(work, rule_args)?;
        let rules = args
            .options(root, rule_args, None)
            .rules(None)
            .map_err(|e| e.to_string())?
            .rules;
        // A loopback address the user opened is the host's (a model server there).
        spec.host_loopback = runner_network::outbound::host_loopback(&rules);
        let (settings, _) =
            runner_agent::config::settings::Settings::load(root, rule_args.config.as_deref())
                .map_err(|e| e.to_string())?;
        let inspection = settings
            .network
            .inspection(&rules, &mut spec)
            .map_err(|e| e.to_string())?;
        Ok(Wall {
            spec,
            rules,
            inspection,
            programs: settings.network.programs(),
        })
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
