//! Podman as the engine under test: rootful `podman system service` on its usual socket,
//! started by the first test binary that needs it and left running for the next ones (as
//! dockerd is).

use std::time::{Duration, Instant};

use super::engine::{Target, ensure_package};

/// Rootful Podman's socket, where runner looks for it.
pub const ROOTFUL_SOCKET: &str = "/run/podman/podman.sock";

/// Rootful Podman through its Docker-compatible API.
pub static ROOTFUL: Target = Target {
    socket: ROOTFUL_SOCKET,
    start: start_rootful,
};

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
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
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
