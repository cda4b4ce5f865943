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
    ensure_package("mmdebstrap", "/usr/bin/mmdebstrap");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["image", "build"])
        .status()
        .expect("run runner image build");
    assert!(status.success(), "runner image build failed ({status})");
}

/// The Debian base `runner image build` makes offline (mmdebstrap + `docker import`): the
/// default base of the top-level Dockerfile. Made with `runner image build` when missing
/// (it makes the base only when the engine lacks it), after the sandbox image is there.
pub fn ensure_base() {
    docker();
    let base = runner::sandbox::docker::image::DEFAULT_BASE;
    let _l = lock("runner-test-image.lock");
    if get(&format!("/images/{base}/json")) == Some(200) {
        return;
    }
    ensure_package("mmdebstrap", "/usr/bin/mmdebstrap");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_runner"))
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

/// A client of the engine, for tests that look at containers directly.
pub async fn client() -> bollard::Docker {
    docker();
    bollard::Docker::connect_with_defaults()
        .expect("connect")
        .negotiate_version()
        .await
        .expect("engine answers")
}

/// Ids of runner's containers whose owner label is `pid`.
pub async fn containers_of(docker: &bollard::Docker, pid: u32) -> Vec<String> {
    use runner::sandbox::docker::{LABEL, LABEL_OWNER};
    let filters = std::collections::HashMap::from([("label", vec![LABEL])]);
    let opts = bollard::query_parameters::ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    docker
        .list_containers(Some(opts))
        .await
        .expect("list")
        .into_iter()
        .filter(|c| c.labels.as_ref().and_then(|l| l.get(LABEL_OWNER)) == Some(&pid.to_string()))
        .filter_map(|c| c.id)
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
        if tls_port.is_some() {
            ensure_package("openssl", "/usr/bin/openssl");
        }
        let dir = std::path::PathBuf::from(format!("/tmp/rt-{name}"));
        let bridge = format!("rt{name}0");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("engine folder");
        let sh = |cmd: &str| {
            std::process::Command::new("sh")
                .args(["-c", cmd])
                .status()
                .map(|s| s.success())
                .unwrap_or(false)
        };
        // A bridge of its own, on an address range the first engine does not use.
        let _ = sh(&format!("ip link del {bridge} 2>/dev/null"));
        let octet = 200 + name.bytes().map(u32::from).sum::<u32>() % 50;
        assert!(
            sh(&format!(
                "ip link add name {bridge} type bridge && ip addr add 172.31.{octet}.1/24 dev {bridge} && ip link set {bridge} up"
            )),
            "cannot make the bridge {bridge} (needs root and iproute2)"
        );
        let socket = dir.join("docker.sock");
        let log = std::fs::File::create(dir.join("dockerd.log")).expect("log");
        let mut tls_args: Vec<String> = Vec::new();
        if let Some(port) = tls_port {
            let certs = dir.join("certs");
            std::fs::create_dir_all(&certs).expect("certs folder");
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
            tls_args = vec![
                "--tlsverify".into(),
                format!("--tlscacert={}", c("ca.pem")),
                format!("--tlscert={}", c("server-cert.pem")),
                format!("--tlskey={}", c("server-key.pem")),
                format!("--host=tcp://127.0.0.1:{port}"),
            ];
        }
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
        assert!(
            sh(&format!(
                "docker save {IMAGE} | docker -H {} load -q >/dev/null",
                engine.host
            )),
            "cannot copy {IMAGE} to the second engine"
        );
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
