//! Which wall a session gets when nobody chose one.
//!
//! runner is a sandboxed runner, so a plain `runner "fix the bug"` must not run the agent's
//! commands as the user. With no `--sandbox` and no backend in the profile, the wall is
//! picked here: landlock when the kernel enforces every right runner asks of it and a seccomp
//! filter applies (no daemon, nothing to install, the fastest start); else docker when an
//! engine answers (Docker, or Podman's Docker-compatible socket); else nothing runs, and the
//! error says how to get a wall or how to choose `--sandbox none` on purpose.
//!
//! The choice is made once per process: every session and tool call of a run gets the same
//! wall, and the probes (a throwaway thread restricted by landlock, one `_ping`) run once.

use std::io::{Read, Write};
use std::sync::OnceLock;
use std::time::Duration;

use super::BackendKind;

/// The wall picked for a session that named none, and why it was picked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub backend: BackendKind,
    /// What made it the choice ("kernel landlock ABI 7"), for the session's first line.
    pub reason: String,
}

/// No wall can be built here: what each backend lacked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no sandbox is available on this machine, so nothing runs: landlock: {landlock}; docker: {docker}. \
     Get a wall: a kernel with landlock ABI 6 or later (Linux 6.12+, with landlock in lsm=), or a running \
     Docker or Podman engine (`runner sandbox doctor` checks both). To run the agent's commands as you, \
     with your files and network, choose that on purpose: --sandbox none"
)]
pub struct NoWall {
    pub landlock: Unusable,
    pub docker: Unusable,
}

/// Why one wall cannot be put up here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    /// The kernel does not enforce everything runner asks of landlock (its own words).
    #[error("{0}")]
    Landlock(String),
    /// A seccomp filter cannot be applied.
    #[error("seccomp: {0}")]
    Seccomp(String),
    #[error("DOCKER_HOST={0} is neither unix:// nor tcp://")]
    DockerHost(String),
    #[error("{0} answered, but not as a Docker engine")]
    NotDocker(String),
    #[error("no engine answers at {at} ({error})")]
    NoEngine { at: String, error: String },
}

/// The wall for a session that named none: landlock, else docker, else an error. Probed
/// once per process.
pub fn default_wall() -> Result<Chosen, NoWall> {
    static CHOICE: OnceLock<Result<Chosen, NoWall>> = OnceLock::new();
    CHOICE.get_or_init(probe).clone()
}

fn probe() -> Result<Chosen, NoWall> {
    let landlock = match landlock_usable() {
        Ok(reason) => {
            return Ok(Chosen {
                backend: BackendKind::Landlock,
                reason,
            });
        }
        Err(why) => why,
    };
    let docker = match engine_answers(Duration::from_secs(3)) {
        Ok(at) => {
            return Ok(Chosen {
                backend: BackendKind::Docker,
                reason: format!(
                    "landlock is not usable here ({landlock}); the engine at {at} answers"
                ),
            });
        }
        Err(why) => why,
    };
    Err(NoWall { landlock, docker })
}

/// Whether landlock enforces everything runner asks of it and seccomp filters apply; the
/// reason it does (or why not).
fn landlock_usable() -> Result<String, Unusable> {
    let support = super::confine::probe_landlock();
    if !support.fully_enforced {
        return Err(Unusable::Landlock(support.detail));
    }
    super::confine::probe_seccomp().map_err(|e| Unusable::Seccomp(e.to_string()))?;
    Ok(support.detail)
}

/// Whether a Docker engine answers `_ping` within `limit`: at DOCKER_HOST when it is set
/// (`unix://` or `tcp://`), else at the local socket. `Ok` names where.
pub fn engine_answers(limit: Duration) -> Result<String, Unusable> {
    let host = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty());
    let at = host.unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    let answered = if let Some(path) = at.strip_prefix("unix://") {
        std::os::unix::net::UnixStream::connect(path).and_then(|s| {
            s.set_read_timeout(Some(limit))?;
            s.set_write_timeout(Some(limit))?;
            ping(s)
        })
    } else if let Some(addr) = at.strip_prefix("tcp://") {
        use std::net::ToSocketAddrs;
        addr.to_socket_addrs()
            .and_then(|mut a| a.next().ok_or_else(|| std::io::Error::other("no address")))
            .and_then(|a| std::net::TcpStream::connect_timeout(&a, limit))
            .and_then(|s| {
                s.set_read_timeout(Some(limit))?;
                ping(s)
            })
    } else {
        return Err(Unusable::DockerHost(at));
    };
    match answered {
        Ok(true) => Ok(at),
        Ok(false) => Err(Unusable::NotDocker(at)),
        Err(e) => Err(Unusable::NoEngine {
            at,
            error: e.to_string(),
        }),
    }
}

/// One `GET /_ping`; true when the answer is `200`.
fn ping(mut stream: impl Read + Write) -> std::io::Result<bool> {
    stream.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")?;
    let mut head = [0u8; 32];
    let n = stream.read(&mut head)?;
    let line = String::from_utf8_lossy(&head[..n]);
    Ok(line.split_whitespace().nth(1) == Some("200"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket that answers like an engine counts; one that answers otherwise, or nothing
    /// listening, does not, and the reason names the address.
    #[test]
    fn a_ping_needs_a_200_from_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let serve = |name: &str, answer: &'static [u8]| {
            let path = dir.path().join(name);
            let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
            std::thread::spawn(move || {
                let (mut s, _) = listener.accept().unwrap();
                let mut buf = [0u8; 128];
                let _ = s.read(&mut buf);
                let _ = s.write_all(answer);
            });
            path
        };
        let good = serve("good.sock", b"HTTP/1.0 200 OK\r\n\r\nOK");
        let bad = serve("bad.sock", b"HTTP/1.0 404 Not Found\r\n\r\n");
        let ping_at = |p: &std::path::Path| {
            let s = std::os::unix::net::UnixStream::connect(p).unwrap();
            ping(s).unwrap()
        };
        assert!(ping_at(&good));
        assert!(!ping_at(&bad));
    }
}
