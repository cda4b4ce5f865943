//! Podman as the engine under test: rootful `podman system service` on its usual socket,
//! started by the first test binary that needs it and left running for the next ones (as
//! dockerd is).

use std::time::{Duration, Instant};

use super::engine::{TestEngine, ensure_package};

/// Rootful Podman's socket, where runner looks for it.
pub const ROOTFUL_SOCKET: &str = "/run/podman/podman.sock";

/// Rootful Podman through its Docker-compatible API, answering and holding the sandbox
/// image (copied from the machine's Docker): a test binary's engine
/// (`escape_suite!(…, engine: common::podman::rootful)`).
/// Made ready once per process; the tests that choose it afterwards get what was found.
pub fn rootful() -> TestEngine {
    static READY: std::sync::OnceLock<TestEngine> = std::sync::OnceLock::new();
    READY
        .get_or_init(|| {
            let host = format!("unix://{ROOTFUL_SOCKET}");
            {
                let _l = super::engine::lock("runner-test-podman-start.lock");
                if !super::engine::engine_answers_at(ROOTFUL_SOCKET) {
                    start_rootful();
                }
            }
            super::engine::docker();
            super::engine::copy_image_to(&host);
            TestEngine {
                host: Some(host),
                ..TestEngine::default()
            }
        })
        .clone()
}

/// [`ROOTLESS_USER`]'s own Podman as a test binary's engine
/// (`escape_suite!(…, engine: common::podman::rootless_engine)`): runner, as root, reaches
/// it through its socket and runs the sandbox as that user (keep-id); the tests hand their
/// folders to the user ([`TestEngine::owner`]), since the engine can mount and the sandbox
/// write only what the user may. The limits the engine says it cannot enforce (a rootless
/// engine on cgroup v1 has no cgroup controllers) are not judged: see
/// [`unenforced_limits`]. Made ready once per process, like [`rootful`].
pub fn rootless_engine() -> TestEngine {
    static READY: std::sync::OnceLock<TestEngine> = std::sync::OnceLock::new();
    READY
        .get_or_init(|| {
            let r = rootless();
            let host = format!("unix://{}", r.socket);
            TestEngine {
                not_applicable: unenforced_limits(&host),
                host: Some(host),
                runtime: None,
                owner: Some(super::engine::Owner {
                    uid: r.uid,
                    gid: r.gid,
                    env: r.env.clone(),
                }),
            }
        })
        .clone()
}

/// The limit procedures of the escape suite that judge a limit the engine at `host` says
/// it cannot enforce (runner's own `Engine::unenforced`, which it warns about when a
/// sandbox starts: `sandbox_serves_the_user_on_its_own_engine` checks that warning). Such
/// a limit is not there to attack; an engine that enforces them gets them all judged.
fn unenforced_limits(host: &str) -> &'static [(&'static str, &'static str)] {
    let host = host.to_string();
    // Its own thread and runtime: the tests that choose the engine may already run in one.
    let engine = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(runner_sandbox::docker::engine::Engine::open(Some(&host)))
    })
    .join()
    .expect("engine thread")
    .unwrap_or_else(|e| panic!("the rootless engine does not answer: {e}"));
    const MEMORY: &str = "NOT ENFORCED: this rootless Podman has no memory cgroup controller for its containers (cgroup v1, or v2 without delegation); runner warns at start";
    const PIDS: &str = "NOT ENFORCED: this rootless Podman has no pids cgroup controller for its containers (cgroup v1, or v2 without delegation); runner warns at start; the bomb is not run";
    let mut list = Vec::new();
    if engine.unenforced.contains(&"memory") {
        list.push(("limit.memory_bomb_one_process", MEMORY));
        list.push(("limit.memory_bomb_many_processes", MEMORY));
    }
    if engine.unenforced.contains(&"pids") {
        list.push(("limit.fork_bomb", PIDS));
    }
    Box::leak(list.into_boxed_slice())
}

/// Installs Podman if need be and starts `podman system service --time=0` on
/// [`ROOTFUL_SOCKET`], in a session of its own so that it outlives this test process.
// It serves the next test binaries too, so it is never waited for.
#[allow(clippy::zombie_processes)]
fn start_rootful() {
    ensure_package("podman", "/usr/bin/podman");
    std::fs::create_dir_all("/run/podman").expect("make /run/podman");
    let log_path = std::env::temp_dir().join("runner-test-podman.log");
    let log = std::fs::File::create(&log_path).expect("podman log");
    let mut cmd = std::process::Command::new("/usr/bin/podman");
    cmd.args(["system", "service", "--time=0"])
        .arg(format!("unix://{ROOTFUL_SOCKET}"))
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    super::engine::as_daemon(&mut cmd);
    cmd.spawn().expect("start podman system service");
    let start = Instant::now();
    while std::os::unix::net::UnixStream::connect(ROOTFUL_SOCKET).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "podman system service did not listen on {ROOTFUL_SOCKET} within 60 s; see {}",
            log_path.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The unprivileged user whose own rootless Podman the rootless tests use.
pub const ROOTLESS_USER: &str = "runner-podman";

/// A rootless Podman: `podman system service` run by [`ROOTLESS_USER`], on
/// `/run/user/UID/podman/podman.sock`, with the sandbox image in that user's storage.
pub struct Rootless {
    pub uid: u32,
    pub gid: u32,
    pub socket: String,
    /// HOME and XDG_RUNTIME_DIR for running things as the user.
    pub env: Vec<(String, String)>,
}

/// Runs `cmd` with `sh -c`. What it starts in the background must not keep the test
/// process's descriptors (a lock cargo runs under would be held as long as it runs).
fn sh(cmd: &str) -> bool {
    use std::os::unix::process::CommandExt;
    let mut c = std::process::Command::new("sh");
    c.args(["-c", cmd]);
    // SAFETY: close_range only, between fork and exec.
    unsafe {
        c.pre_exec(|| {
            super::engine::close_inherited();
            Ok(())
        });
    }
    c.status().is_ok_and(|s| s.success())
}

fn id_of(flag: &str) -> Option<u32> {
    let out = std::process::Command::new("id")
        .args([flag, ROOTLESS_USER])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// Makes the user (with subordinate id ranges, a runtime folder and overlay storage),
/// starts its service unless it answers, and copies the machine's sandbox image into its
/// storage through the service (when missing there or different). Once per
/// binary, under a lock shared by the binaries.
pub fn rootless() -> &'static Rootless {
    static READY: std::sync::OnceLock<Rootless> = std::sync::OnceLock::new();
    READY.get_or_init(|| {
        ensure_package("podman", "/usr/bin/podman");
        ensure_package("uidmap", "/usr/bin/newuidmap");
        let f = std::fs::File::create(std::env::temp_dir().join("runner-test-rootless.lock"))
            .expect("lock file");
        f.lock().expect("lock");
        let home = "/var/lib/runner-podman";
        if id_of("-u").is_none() {
            assert!(
                sh(&format!(
                    "useradd --system --create-home --home-dir {home} --shell /usr/sbin/nologin {ROOTLESS_USER}"
                )),
                "cannot create the user {ROOTLESS_USER}"
            );
        }
        if !sh(&format!("grep -q '^{ROOTLESS_USER}:' /etc/subuid")) {
            assert!(
                sh(&format!(
                    "usermod --add-subuids 200000-265535 --add-subgids 200000-265535 {ROOTLESS_USER}"
                )),
                "cannot give {ROOTLESS_USER} subordinate ids"
            );
        }
        let (uid, gid) = (id_of("-u").unwrap(), id_of("-g").unwrap());
        let runtime = format!("/run/user/{uid}");
        let made = sh(&format!(
            "mkdir -p {runtime} {home}/.config/containers && chown {uid}:{gid} {runtime} && chmod 700 {runtime} \
             && printf '[storage]\\ndriver = \"overlay\"\\n' > {home}/.config/containers/storage.conf \
             && chown -R {uid}:{gid} {home}/.config"
        ));
        assert!(made, "cannot prepare {ROOTLESS_USER}'s runtime folder and storage");
        let socket = format!("{runtime}/podman/podman.sock");
        let env = vec![
            ("HOME".to_string(), home.to_string()),
            ("XDG_RUNTIME_DIR".to_string(), runtime),
        ];
        let answers = || {
            sh(&format!(
                "curl -sf --unix-socket {socket} http://podman/_ping >/dev/null"
            ))
        };
        ensure_package("curl", "/usr/bin/curl");
        if !answers() {
            let log = std::env::temp_dir().join("runner-test-podman-rootless.log");
            assert!(
                sh(&format!(
                    "cd / && setsid runuser -u {ROOTLESS_USER} -- env HOME={home} XDG_RUNTIME_DIR={} \
                     podman system service --time=0 > {} 2>&1 < /dev/null &",
                    env[1].1,
                    log.display()
                )),
                "cannot start {ROOTLESS_USER}'s podman service"
            );
            let start = Instant::now();
            while !answers() {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "{ROOTLESS_USER}'s podman service did not answer within 60 s; see {}",
                    log.display()
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        // The machine's image, copied again when it differs: a rebuilt image is the one
        // tested, not the one loaded first.
        super::engine::docker();
        super::engine::copy_image_to(&format!("unix://{socket}"));
        Rootless {
            uid,
            gid,
            socket,
            env,
        }
    })
}
