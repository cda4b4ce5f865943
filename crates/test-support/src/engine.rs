//! Makes sure the real Docker engine answers and the sandbox image exists before a docker
//! test runs: starts `dockerd` if it is installed but not running, builds the image with
//! `runner image build` if it is missing. Never skips: without an engine the test fails
//! and says how to get one.
//!
//! A test may instead run against another engine (a dockerd with gVisor, rootful Podman, a
//! user's rootless Podman): [`use_engine`] starts it (once per process) and copies the image
//! over; the test then points specs ([`apply`]) and `runner` command lines ([`cli`]) at it.
//! The choice belongs to the test's thread, not the process, so the suites of several
//! engines run side by side in one test binary. An engine of another user also names that
//! user ([`TestEngine::owner`]), to whom the tests hand their folders.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const SOCKET: &str = "/var/run/docker.sock";
pub const IMAGE: &str = runner_sandbox::spec::DEFAULT_IMAGE;

/// Status code of a GET on the engine's socket, `None` when nothing answers.
fn get(path: &str) -> Option<u16> {
    get_at(SOCKET, path)
}

fn get_at(socket: &str, path: &str) -> Option<u16> {
    let mut s = UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n").ok()?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    let head = String::from_utf8_lossy(&buf[..n]);
    head.split_whitespace().nth(1)?.parse().ok()
}

/// Makes `cmd` start a daemon that outlives this test process for the next ones: a session
/// of its own, and none of this process's descriptors ([`close_inherited`]).
pub fn as_daemon(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // Not the test's working directory: a checkout removed later (a CI clone) would leave
    // the daemon in a deleted folder, and Podman's conmon refuses to start containers
    // there ("Failed to get working directory").
    cmd.current_dir("/");
    // SAFETY: setsid and close_range are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            close_inherited();
            Ok(())
        });
    }
}

/// In a child about to exec a daemon that outlives the tests: closes every descriptor but
/// stdio. Whatever the test process inherited stays with it, not with the daemon: a lock
/// that `cargo` runs under (`flock FILE cargo …`) would otherwise be held by dockerd for
/// as long as it runs, and every later cargo would wait on it.
pub fn close_inherited() {
    // SAFETY: close_range on descriptors of this (forked, about to exec) child only.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
}

fn engine_answers() -> bool {
    engine_answers_at(SOCKET)
}

pub fn engine_answers_at(socket: &str) -> bool {
    get_at(socket, "/_ping") == Some(200)
}

pub fn lock(name: &str) -> std::fs::File {
    let f = std::fs::File::create(std::env::temp_dir().join(name)).expect("lock file");
    f.lock().expect("lock");
    f
}

/// Installs a Debian package when `file` is missing (the tests set up what they need on a
/// fresh machine, as root; elsewhere they say what to install).
pub fn ensure_package(package: &str, file: &str) {
    ensure_package_for(package, file, || Path::new(file).exists());
}

/// Installs a Debian package unless `ready` says what the test needs is there; `what` names
/// that thing in the messages. As root, `apt-get install` (after `apt-get update` if the
/// first try fails); otherwise, or if `ready` is still false afterwards, panics saying what
/// to install: the tests never skip.
pub fn ensure_package_for(package: &str, what: &str, ready: impl Fn() -> bool) {
    if ready() {
        return;
    }
    let _l = lock("runner-test-apt.lock");
    if ready() {
        return;
    }
    // SAFETY: plain syscall.
    assert!(
        unsafe { libc::geteuid() } == 0,
        "{what} is missing and only root can install it: apt-get install -y {package} \
         (the tests need it and never skip)"
    );
    let apt = |args: &[&str]| {
        std::process::Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    let installed = apt(&["install", "-y", "-qq", package])
        || (apt(&["update", "-qq"]) && apt(&["install", "-y", "-qq", package]));
    assert!(
        installed,
        "apt-get install -y {package} failed (needed for {what}); install it by hand"
    );
    assert!(
        ready(),
        "{what} is still missing after apt-get install -y {package}"
    );
}

// dockerd must outlive this test process (it serves the next ones), so it is never waited for.
#[allow(clippy::zombie_processes)]
fn start_engine() {
    let _l = lock("runner-test-dockerd.lock");
    if engine_answers() {
        return;
    }
    ensure_package("docker.io", "/usr/sbin/dockerd");
    let dockerd = "/usr/sbin/dockerd";
    let log = std::fs::File::create(std::env::temp_dir().join("runner-test-dockerd.log"))
        .expect("dockerd log");
    let mut cmd = std::process::Command::new(dockerd);
    cmd.stdout(log.try_clone().expect("log"))
        .stderr(log)
        .stdin(std::process::Stdio::null());
    as_daemon(&mut cmd);
    cmd.spawn().expect("start dockerd");
    let start = Instant::now();
    while !engine_answers() {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "dockerd did not answer within 90 s; see {}",
            std::env::temp_dir()
                .join("runner-test-dockerd.log")
                .display()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn ensure_image_at(socket: &str) {
    let _l = lock("runner-test-image.lock");
    if get_at(socket, &format!("/images/{IMAGE}/json")) == Some(200) {
        return;
    }
    ensure_package("mmdebstrap", "/usr/bin/mmdebstrap");
    let status = std::process::Command::new(crate::runner_exe())
        .args(["image", "build"])
        .env("DOCKER_HOST", format!("unix://{socket}"))
        .status()
        .expect("run runner image build");
    assert!(status.success(), "runner image build failed ({status})");
}

/// The Debian base `runner image build` makes offline (mmdebstrap + `docker import`): the
/// default base of the top-level Dockerfile. Made with `runner image build` when missing
/// (it makes the base only when the engine lacks it), after the sandbox image is there.
pub fn ensure_base() {
    docker();
    let base = runner_sandbox::docker::image::DEFAULT_BASE;
    let _l = lock("runner-test-image.lock");
    if get(&format!("/images/{base}/json")) == Some(200) {
        return;
    }
    ensure_package("mmdebstrap", "/usr/bin/mmdebstrap");
    let status = std::process::Command::new(crate::runner_exe())
        .args(["image", "build"])
        .status()
        .expect("run runner image build");
    assert!(status.success(), "runner image build failed ({status})");
    assert_eq!(
        get(&format!("/images/{base}/json")),
        Some(200),
        "runner image build left no {base}"
    );
}

/// The `dev` image (the default one plus language servers and Node.js) on the machine's
/// engine, built with `runner image build dev` when missing (its base made offline with
/// mmdebstrap, as the default's is). Its tag.
pub fn dev_image() -> &'static str {
    let image = runner_sandbox::docker::image::DEV_IMAGE;
    docker();
    let _l = lock("runner-test-image.lock");
    if get(&format!("/images/{image}/json")) == Some(200) {
        return image;
    }
    ensure_package("mmdebstrap", "/usr/bin/mmdebstrap");
    let status = std::process::Command::new(crate::runner_exe())
        .args(["image", "build", "dev"])
        .status()
        .expect("run runner image build dev");
    assert!(status.success(), "runner image build dev failed ({status})");
    assert_eq!(
        get(&format!("/images/{image}/json")),
        Some(200),
        "runner image build dev left no {image}"
    );
    image
}

// ---------------------------------------------------------------------------------------
// Test engines: which engine, and which OCI runtime, a test's docker sandboxes run on
// ---------------------------------------------------------------------------------------

/// The engine docker tests run on, and the runtime of their sandbox containers: the
/// machine's engine with its default runtime unless the test chose another with
/// [`use_engine`] (a dockerd of its own with gVisor registered, [`runsc`]; a Podman
/// socket). Everything the tests open goes through it: [`apply`] on a spec, [`cli`] on a
/// `runner` command line, [`client`] for looking at containers, [`label`] in reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TestEngine {
    /// `unix:///…`; `None`: the machine's engine (DOCKER_HOST or the local socket).
    pub host: Option<String>,
    /// The OCI runtime sandbox containers run under (`--runtime`); `None`: the engine's
    /// default.
    pub runtime: Option<String>,
    /// Attacks and controls of the escape suites that mean nothing on this engine or
    /// runtime, each with the reason: not run (or, for the limits' procedures, not judged),
    /// and listed as such in the report. Known holes are not listed here but in the
    /// suite's `holes`.
    pub not_applicable: &'static [(&'static str, &'static str)],
    /// The user the sandbox runs as and works for, when it is not this process's: a
    /// rootless engine runs its containers as the user it runs as (keep-id), and can mount
    /// and write only what that user may. The tests then hand their folders to that user
    /// ([`hand_over`]), run host git and `runner` as that user ([`as_owner`], [`cli`]), and
    /// mount the runner copy any user can read ([`runner_exe`]), as a user running runner
    /// on their own project would. `None`: this process's user (root, in the tests).
    pub owner: Option<Owner>,
}

/// An unprivileged user who owns the test folders ([`TestEngine::owner`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    /// HOME and XDG_RUNTIME_DIR (where its own engine's socket is) for running as the user.
    pub env: Vec<(String, String)>,
}

/// Why `name` means nothing on the test engine, if it does not.
pub fn not_applicable(name: &str) -> Option<&'static str> {
    engine()
        .not_applicable
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, why)| *why)
}

thread_local! {
    /// The engine the test on this thread chose with [`use_engine`]; none: the machine's.
    /// libtest runs every test on a thread of its own, so a choice never outlives its test
    /// or reaches the tests beside it.
    static CHOSEN: std::cell::RefCell<Option<TestEngine>> = const { std::cell::RefCell::new(None) };
}

/// Makes `start`'s engine the one the calling test's docker sandboxes and `runner` command
/// lines use. Each test on another engine calls it first (`escape_suite!(…, engine: start)`
/// does). `start` makes sure the engine answers and holds the sandbox image; every `start`
/// here does that once per process and then hands back what it found. Only the test's own
/// thread sees the choice: work a test hands to another thread must take the engine along.
pub fn use_engine(start: fn() -> TestEngine) -> TestEngine {
    let chosen = start();
    CHOSEN.with(|c| *c.borrow_mut() = Some(chosen.clone()));
    chosen
}

/// The machine's engine, its default runtime: what a test that chose none runs on
/// ([`docker`] still makes it ready, in the tests that use it).
pub fn machine() -> TestEngine {
    TestEngine::default()
}

/// The engine the calling test's docker sandboxes run on.
pub fn engine() -> TestEngine {
    CHOSEN.with(|c| c.borrow().clone()).unwrap_or_default()
}

/// Points a docker spec at the test engine and runtime (and, for an engine of another
/// user, at a server that user can read).
pub fn apply(spec: &mut runner_sandbox::spec::SandboxSpec) {
    let e = engine();
    if e.host.is_some() {
        spec.docker.host = e.host;
    }
    if let Some(r) = e.runtime {
        spec.docker.runtime = vec![r];
    }
    if e.owner.is_some() {
        spec.server_exe = runner_exe();
    }
}

/// Points a `runner` command line at the test engine and runtime (`DOCKER_HOST`,
/// `--runtime`), run as the engine's user when it has one of its own ([`as_owner`]); call
/// it after the subcommand's own arguments, on a command made with [`runner_exe`].
pub fn cli(cmd: &mut std::process::Command) -> &mut std::process::Command {
    let e = engine();
    if let Some(h) = &e.host {
        cmd.env("DOCKER_HOST", h);
    }
    if let Some(r) = &e.runtime {
        cmd.args(["--runtime", r]);
    }
    as_owner(cmd)
}

/// The owner of the test folders when it is not this process's user
/// ([`TestEngine::owner`]).
pub fn owner() -> Option<Owner> {
    CHOSEN.with(|c| c.borrow().as_ref().and_then(|e| e.owner.clone()))
}

/// The `runner` binary to run or mount: the build's own, or, when the sandbox runs as
/// another user, the copy every user can read (the build may sit under a home that user
/// cannot enter).
pub fn runner_exe() -> std::path::PathBuf {
    match owner() {
        Some(_) => super::runner_for_any_user(),
        None => crate::runner_exe().to_path_buf(),
    }
}

/// Makes `cmd` run as the folders' owner, with its own HOME and XDG_RUNTIME_DIR, when it is
/// another user; otherwise leaves it as it is.
pub fn as_owner(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    if let Some(o) = owner() {
        cmd.uid(o.uid).gid(o.gid);
        for (k, v) in &o.env {
            cmd.env(k, v);
        }
    }
    cmd
}

/// Gives `path` and everything under it (links themselves, not what they point at) to the
/// folders' owner, when it is another user; otherwise does nothing. Call it after the host
/// side of a test writes there, so that the sandbox (running as that user) may write what
/// a user may write in their own project.
pub fn hand_over(path: &Path) {
    if let Some(o) = owner() {
        super::chown_tree(path, o.uid, o.gid);
    }
}

/// `docker`, or `docker/RUNTIME` on another runtime, for reports.
pub fn label() -> String {
    match engine().runtime {
        Some(r) => format!("docker/{r}"),
        None => "docker".into(),
    }
}

/// Call at the start of every docker test: the machine's engine answers and holds the
/// sandbox image (an engine chosen with [`use_engine`] was made ready when chosen).
pub fn docker() {
    if engine().host.is_some() {
        return;
    }
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        if !engine_answers() {
            start_engine();
        }
        ensure_image_at(SOCKET);
    });
}

/// A client of the test engine, for tests that look at containers directly.
pub async fn client() -> bollard::Docker {
    docker();
    match engine().host {
        Some(h) => bollard::Docker::connect_with_host(&h),
        None => bollard::Docker::connect_with_defaults(),
    }
    .expect("connect")
    .negotiate_version()
    .await
    .expect("engine answers")
}

/// Imports `tar` (a root file system) into the test engine as `NAME:latest`, as `docker
/// import -` does: tests make small images of exactly the files they need.
pub async fn import_image(name: &str, tar: Vec<u8>) {
    use futures_util::StreamExt;
    let docker = client().await;
    let options = bollard::query_parameters::CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(name)
        .tag("latest")
        .build();
    let mut stream = docker.create_image(Some(options), Some(bollard::body_full(tar.into())), None);
    while let Some(item) = stream.next().await {
        item.unwrap_or_else(|e| panic!("docker import of {name}: {e}"));
    }
}

/// Ids of runner's containers whose owner label is `pid`.
pub async fn containers_of(docker: &bollard::Docker, pid: u32) -> Vec<String> {
    runner_sandbox::docker::cleanup::list(docker)
        .await
        .expect("list runner's containers")
        .into_iter()
        .filter(|c| c.pid == i32::try_from(pid).ok())
        .map(|c| c.id)
        .collect()
}

/// A second Docker engine on this machine, with its own socket, data root, exec root and
/// bridge, for tests that spread work over several engines. It holds a copy of the sandbox
/// image. Stopped (and its folders and bridge removed) when dropped.
pub struct SecondEngine {
    pub host: String,
    /// With [`SecondEngine::start_tls`]: `tcp://127.0.0.1:PORT`, TLS with client
    /// certificates from [`SecondEngine::cert_dir`].
    pub tls_host: Option<String>,
    dir: std::path::PathBuf,
    bridge: String,
    child: Option<std::process::Child>,
}

impl SecondEngine {
    /// `name` keeps the engines of different tests apart (a few letters: it names the
    /// bridge, and socket paths are short).
    pub fn start(name: &str) -> SecondEngine {
        Self::start_with(name, None)
    }

    /// Also listening on TCP at `port` on loopback, with TLS both ways (a CA, a server
    /// certificate for 127.0.0.1 and a client certificate, made with openssl).
    pub fn start_tls(name: &str, port: u16) -> SecondEngine {
        Self::start_with(name, Some(port))
    }

    /// `DOCKER_CERT_PATH` for the TLS listener: `ca.pem`, `cert.pem`, `key.pem`.
    pub fn cert_dir(&self) -> std::path::PathBuf {
        self.dir.join("certs")
    }

    fn start_with(name: &str, tls_port: Option<u16>) -> SecondEngine {
        docker();
        ensure_package("iproute2", "/sbin/ip");
        let dir = std::path::PathBuf::from(format!("/tmp/rt-{name}"));
        let bridge = format!("rt{name}0");
        stop_leftover(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("engine folder");
        make_bridge(name, &bridge);
        let tls_args = match tls_port {
            Some(port) => tls_listener(&dir.join("certs"), port),
            None => Vec::new(),
        };
        let socket = dir.join("docker.sock");
        let log = std::fs::File::create(dir.join("dockerd.log")).expect("log");
        let child = std::process::Command::new("/usr/sbin/dockerd")
            .args(&tls_args)
            .arg("--host")
            .arg(format!("unix://{}", socket.display()))
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("docker.pid"))
            .args(["--bridge", &bridge, "--iptables=false", "--ip6tables=false"])
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start a second dockerd");
        let engine = SecondEngine {
            host: format!("unix://{}", socket.display()),
            tls_host: tls_port.map(|p| format!("tcp://127.0.0.1:{p}")),
            dir,
            bridge,
            child: Some(child),
        };
        let start = Instant::now();
        while !engine.answers() {
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "the second dockerd did not answer within 90 s; see {}",
                engine.dir.join("dockerd.log").display()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        // The sandbox image, copied over from the first engine.
        copy_image_to(&engine.host);
        engine
    }

    pub fn answers(&self) -> bool {
        std::process::Command::new("docker")
            .args(["-H", &self.host, "info"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    }

    /// Stops the engine the way an outage would look to its clients: dockerd ends (and
    /// its containers with it).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }
}

impl Drop for SecondEngine {
    fn drop(&mut self) {
        self.stop();
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.bridge])
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------------------
// gVisor: a dockerd of the tests' own with runsc registered
// ---------------------------------------------------------------------------------------

/// The runsc test engine's folder (socket, exec root, pid file, config, log); its data root
/// is [`RUNSC_DATA`]. Never the machine's engine, which is not restarted or reconfigured.
pub const RUNSC_DIR: &str = "/run/runner-test-runsc";
const RUNSC_DATA: &str = "/var/lib/runner-test-runsc";
const RUNSC_BRIDGE: &str = "rtrunsc0";
/// The bridge's address: a range of its own (the second engines use 172.31.200–249).
const RUNSC_BRIDGE_ADDR: &str = "172.31.199.1/24";

fn runsc_socket() -> String {
    format!("{RUNSC_DIR}/docker.sock")
}

/// The engine tests run docker sandboxes under gVisor on: a dockerd of the tests'
/// own, on its own socket, data root, exec root and bridge, with `runsc` registered beside
/// runc (runc stays its default, so the same engine runs both for a side-by-side
/// comparison). Started once and left running for the next test binaries (a lock file
/// keeps two from starting it; one that answers with runsc is reused); its copy of the
/// sandbox image is refreshed when the machine's differs. Installs Debian's `runsc` when
/// it is missing.
pub fn runsc() -> TestEngine {
    TestEngine {
        host: Some(runsc_engine()),
        runtime: Some("runsc".into()),
        not_applicable: RUNSC_NOT_APPLICABLE,
        owner: None,
    }
}

/// What the escape suites check that gVisor (Debian's runsc 0.0~20221219) does otherwise,
/// with nothing of the host at stake. See docs/SANDBOXES.md, "gVisor".
pub const RUNSC_NOT_APPLICABLE: &[(&str, &str)] = &[
    (
        "fs.write_sys",
        "gVisor's /sys has no /sys/module/printk (its kernel is its own, not the host's)",
    ),
    (
        "fs.list_root_home",
        "this runsc's statx refuses AT_NO_AUTOMOUNT (EINVAL), which coreutils 9 ls passes: ls of a directory fails whatever its permissions",
    ),
    (
        "ok.ls_usr_bin",
        "this runsc's statx refuses AT_NO_AUTOMOUNT (EINVAL), which coreutils 9 ls passes",
    ),
    (
        "ok.tmpdir_read_write",
        "this runsc's statx refuses AT_NO_AUTOMOUNT (EINVAL), which coreutils 9 ls passes",
    ),
    (
        "priv.capabilities_all_dropped",
        "gVisor's /proc/PID/status has no CapAmb line (the other capability sets are all zero)",
    ),
    (
        "priv.capabilities_after_exec",
        "gVisor's /proc/PID/status has no CapAmb line (the other capability sets are all zero)",
    ),
    (
        "priv.mount_tmpfs_cli",
        "gVisor answers util-linux's new mount API differently (ENOTDIR, not EPERM); mount(2) itself is refused (priv.mount_syscall)",
    ),
    (
        "proc.dmesg",
        "dmesg under gVisor prints gVisor's own boot lines, not the host kernel's log",
    ),
    (
        "proc.helper_fds",
        "this runsc's statx refuses AT_NO_AUTOMOUNT (EINVAL), which coreutils 9 ls passes (the helper is not in the sandbox's /proc either)",
    ),
    (
        "limit.fill_tmp",
        "under gVisor /tmp is a tmpfs in the sandbox's own memory: filling it ends the whole sandbox (the host is untouched)",
    ),
    (
        "limit.memory_bomb_one_process",
        "under gVisor the memory limit holds for the sandbox as a whole: the host's OOM killer ends the sandbox, not the one process",
    ),
    (
        "limit.memory_bomb_many_processes",
        "under gVisor the memory limit holds for the sandbox as a whole: the host's OOM killer ends the sandbox, not the one process",
    ),
];

/// [`runsc`]'s engine, on its default runtime (runc): the other side of the comparison.
pub fn runsc_engine() -> String {
    static READY: OnceLock<String> = OnceLock::new();
    READY
        .get_or_init(|| {
            ensure_package("runsc", "/usr/bin/runsc");
            ensure_package("iproute2", "/sbin/ip");
            docker();
            let _l = lock("runner-test-runsc.lock");
            let socket = runsc_socket();
            if !runsc_answers(&socket) {
                start_runsc_engine(&socket);
            }
            copy_image_to(&format!("unix://{socket}"));
            format!("unix://{socket}")
        })
        .clone()
}

/// Answers, and has runsc registered.
fn runsc_answers(socket: &str) -> bool {
    get_at(socket, "/_ping") == Some(200)
        && std::process::Command::new("docker")
            .args([
                "-H",
                &format!("unix://{socket}"),
                "info",
                "--format",
                "{{json .Runtimes}}",
            ])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("\"runsc\""))
}

// dockerd must outlive this test process (it serves the next ones), so it is never waited for.
#[allow(clippy::zombie_processes)]
fn start_runsc_engine(socket: &str) {
    // One that answers without runsc, or a stale pid file: stop it first.
    let pidfile = format!("{RUNSC_DIR}/docker.pid");
    if let Some(pid) = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
    {
        // SAFETY: a signal to the dockerd this helper started (its pid file).
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let start = Instant::now();
        while Path::new(&format!("/proc/{pid}")).exists()
            && start.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    std::fs::create_dir_all(RUNSC_DIR).expect("runsc engine folder");
    // runsc with its own network stack would want one to set up; the sandbox containers
    // have none (network_mode none), and the allow-list proxy goes over the protocol.
    let config = format!("{RUNSC_DIR}/daemon.json");
    std::fs::write(
        &config,
        r#"{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}}, "default-runtime": "runc"}"#,
    )
    .expect("daemon.json");
    if !sh(&format!("ip link show {RUNSC_BRIDGE} >/dev/null 2>&1")) {
        assert!(
            sh(&format!(
                "ip link add name {RUNSC_BRIDGE} type bridge && ip addr add {RUNSC_BRIDGE_ADDR} dev {RUNSC_BRIDGE} && ip link set {RUNSC_BRIDGE} up"
            )),
            "cannot make the bridge {RUNSC_BRIDGE} (needs root and iproute2)"
        );
    }
    let log_path = format!("{RUNSC_DIR}/dockerd.log");
    let log = std::fs::File::create(&log_path).expect("dockerd log");
    let mut cmd = std::process::Command::new("/usr/sbin/dockerd");
    cmd.arg("--config-file")
        .arg(&config)
        .arg("--host")
        .arg(format!("unix://{socket}"))
        .args(["--data-root", RUNSC_DATA])
        .args(["--exec-root", &format!("{RUNSC_DIR}/exec")])
        .args(["--pidfile", &pidfile])
        .args([
            "--bridge",
            RUNSC_BRIDGE,
            "--iptables=false",
            "--ip6tables=false",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    as_daemon(&mut cmd);
    cmd.spawn().expect("start the runsc test dockerd");
    let start = Instant::now();
    while !runsc_answers(socket) {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "the runsc test dockerd did not answer within 90 s; see {log_path}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Kills the dockerd a test binary killed mid-run left behind in `dir` (it holds the pid
/// file), if the pid file still names a dockerd of that folder.
fn stop_leftover(dir: &Path) {
    if let Ok(pid) = std::fs::read_to_string(dir.join("docker.pid"))
        && let Ok(pid) = pid.trim().parse::<i32>()
        && std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&*dir.to_string_lossy()))
    {
        // SAFETY: a signal to the dockerd that names this engine's folder.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn sh(cmd: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", cmd])
        .status()
        .is_ok_and(|s| s.success())
}

/// A bridge of its own for a second engine, on an address range the first does not use.
fn make_bridge(name: &str, bridge: &str) {
    let _ = sh(&format!("ip link del {bridge} 2>/dev/null"));
    let octet = 200 + name.bytes().map(u32::from).sum::<u32>() % 50;
    assert!(
        sh(&format!(
            "ip link add name {bridge} type bridge && ip addr add 172.31.{octet}.1/24 dev {bridge} && ip link set {bridge} up"
        )),
        "cannot make the bridge {bridge} (needs root and iproute2)"
    );
}

/// Makes a CA, a server certificate for 127.0.0.1 and a client certificate in `certs`
/// (with openssl); dockerd's arguments for a TLS listener on loopback at `port` with them.
fn tls_listener(certs: &Path, port: u16) -> Vec<String> {
    ensure_package("openssl", "/usr/bin/openssl");
    std::fs::create_dir_all(certs).expect("certs folder");
    let made = sh(&format!(
        "cd {} && set -e
         openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=runner-test-ca -keyout ca-key.pem -out ca.pem 2>/dev/null
         openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server-key.pem -out server.csr 2>/dev/null
         printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
         openssl x509 -req -days 1 -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -extfile server.ext -out server-cert.pem 2>/dev/null
         openssl req -newkey rsa:2048 -nodes -subj /CN=client -keyout key.pem -out client.csr 2>/dev/null
         printf 'extendedKeyUsage=clientAuth\n' > client.ext
         openssl x509 -req -days 1 -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -extfile client.ext -out cert.pem 2>/dev/null",
        certs.display()
    ));
    assert!(made, "openssl could not make the test certificates");
    let c = |f: &str| certs.join(f).display().to_string();
    vec![
        "--tlsverify".into(),
        format!("--tlscacert={}", c("ca.pem")),
        format!("--tlscert={}", c("server-cert.pem")),
        format!("--tlskey={}", c("server-key.pem")),
        format!("--host=tcp://127.0.0.1:{port}"),
    ]
}

/// The machine engine's sandbox image, on the engine at `host` too (copied when it is
/// missing there or differs).
pub fn copy_image_to(host: &str) {
    let id = |h: Option<&str>| {
        let mut c = std::process::Command::new("docker");
        if let Some(h) = h {
            c.args(["-H", h]);
        }
        c.args(["image", "inspect", "--format", "{{.Id}}", IMAGE])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let want = id(None).expect("the sandbox image on the machine's engine");
    if id(Some(host)).as_deref() == Some(want.as_str()) {
        return;
    }
    let ok = std::process::Command::new("sh")
        .args([
            "-c",
            &format!("docker save {IMAGE} | docker -H {host} load -q >/dev/null"),
        ])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cannot copy {IMAGE} to the engine at {host}");
}

/// The reference MCP servers from PyPI, `mcp-server-time` and `mcp-server-git` (pinned),
/// installed once per machine with pip into a folder of their own (`pip install --target`:
/// plain files, which a test copies into its worktree, since inside the wall a server runs
/// from what it can see, on the system's `/usr/bin/python3` with `PYTHONPATH` at the copy).
pub fn pypi_mcp_servers() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join("runner-test-mcp-pypi-2026.10.19");
        let ready = |d: &Path| d.join("mcp_server_git/__init__.py").is_file();
        let _l = lock("runner-test-mcp-pypi.lock");
        if ready(&dir) {
            return dir;
        }
        let part = dir.with_extension("part");
        let _ = std::fs::remove_dir_all(&part);
        // Whichever python on this machine has pip (the wheels are for CPython 3.11, the
        // version of Debian bookworm's python3 on the host and in the images).
        let installed = ["python3", "/usr/bin/python3", "python3.11"]
            .iter()
            .any(|py| {
                std::process::Command::new(py)
                    .args([
                        "-m",
                        "pip",
                        "install",
                        "--quiet",
                        "--disable-pip-version-check",
                    ])
                    .args([
                        "--python-version",
                        "3.11",
                        "--only-binary=:all:",
                        "--target",
                    ])
                    .arg(&part)
                    .args([
                        "mcp-server-time==2026.10.19",
                        "mcp-server-git==2026.10.19",
                        "tzdata",
                    ])
                    .stdin(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            });
        assert!(
            installed && ready(&part),
            "cannot install mcp-server-time and mcp-server-git from PyPI with pip (the tests \
             need them and never skip): is pip installed, and does PyPI answer?"
        );
        std::fs::rename(&part, &dir).expect("move the servers in place");
        dir
    })
}
