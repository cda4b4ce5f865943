//! Makes sure the real Docker engine answers and the sandbox image exists before a docker
//! test runs: starts `dockerd` if it is installed but not running, builds the image with
//! `runner image build` if it is missing. Never skips: without an engine the test fails
//! and says how to get one.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const SOCKET: &str = "/var/run/docker.sock";
pub const IMAGE: &str = runner::sandbox::spec::DEFAULT_IMAGE;

/// Status code of a GET on the engine's socket, `None` when nothing answers.
fn get(path: &str) -> Option<u16> {
    let mut s = UnixStream::connect(SOCKET).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n").ok()?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    let head = String::from_utf8_lossy(&buf[..n]);
    head.split_whitespace().nth(1)?.parse().ok()
}

fn engine_answers() -> bool {
    get("/_ping") == Some(200)
}

fn lock(name: &str) -> std::fs::File {
    let f = std::fs::File::create(std::env::temp_dir().join(name)).expect("lock file");
    f.lock().expect("lock");
    f
}

fn start_engine() {
    let _l = lock("runner-test-dockerd.lock");
    if engine_answers() {
        return;
    }
    let dockerd = ["/usr/sbin/dockerd", "/usr/bin/dockerd"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or_else(|| {
            panic!(
                "no Docker engine answers on {SOCKET} and dockerd is not installed: \
                 apt-get install -y docker.io (the docker tests never skip)"
            )
        });
    let log = std::fs::File::create(std::env::temp_dir().join("runner-test-dockerd.log"))
        .expect("dockerd log");
    let mut cmd = std::process::Command::new(dockerd);
    cmd.stdout(log.try_clone().expect("log"))
        .stderr(log)
        .stdin(std::process::Stdio::null());
    // Its own session, so it outlives this test process for the next ones.
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
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

fn ensure_image() {
    let _l = lock("runner-test-image.lock");
    if get(&format!("/images/{IMAGE}/json")) == Some(200) {
        return;
    }
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["image", "build"])
        .status()
        .expect("run runner image build");
    assert!(status.success(), "runner image build failed ({status})");
}

/// Call at the start of every docker test.
pub fn docker() {
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        if !engine_answers() {
            start_engine();
        }
        ensure_image();
    });
}
