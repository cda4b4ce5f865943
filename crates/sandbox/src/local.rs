//! The `none` backend: the server as a plain child process (or, for tests and embedding, a
//! thread in this process speaking the same wire protocol over a socket pair).

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;

use super::{BackendKind, Sandbox, SandboxClient, SandboxError};
use runner_sandbox_server::RootSpec;

/// Owns what keeps a server alive; dropping it ends the server (the child is killed, the
/// thread sees its input close), then drops the backend's guards (temp directories,
/// cgroups, containers) in order.
pub struct Keepalive {
    pub(super) child: Option<tokio::process::Child>,
    pub(super) guards: Vec<Box<dyn Send + Sync>>,
}

impl Drop for Keepalive {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            stop_server(child);
        }
        // Guards go after the server, most recent first.
        while let Some(g) = self.guards.pop() {
            drop(g);
        }
    }
}

/// Asks the server to stop (SIGTERM: it kills its commands' process groups, then exits),
/// SIGKILLs it if it has not gone within a second, and reaps it. A pidfd names the
/// process, so the late kill can never hit a recycled pid. Waiting here (instead of
/// leaving the exit to a background thread) is what makes "closed" mean "gone": no zombie
/// is left behind when runner exits right after, and the landlock backend's cgroup is
/// empty the moment its guard removes it, with no polling.
fn stop_server(child: &mut tokio::process::Child) {
    let Some(pid) = child.id() else {
        return; // already reaped
    };
    // SAFETY: pidfd_open/pidfd_send_signal/poll/close on a descriptor we own; no memory
    // shared.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) as libc::c_int;
        if pidfd < 0 {
            let _ = child.start_kill();
            let _ = child.try_wait();
            return;
        }
        let signal = |sig: libc::c_int| {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd,
                sig,
                std::ptr::null::<u8>(),
                0,
            )
        };
        // A signal arriving meanwhile (another child's SIGCHLD) interrupts the poll; that
        // is not the server ending, so the wait goes on until its deadline.
        let exited = |ms: u64| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_millis(ms);
            loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let mut pfd = libc::pollfd {
                    fd: pidfd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                match libc::poll(&mut pfd, 1, left.as_millis() as libc::c_int) {
                    n if n > 0 => return true,
                    0 => return false,
                    _ if std::io::Error::last_os_error().kind()
                        == std::io::ErrorKind::Interrupted =>
                    {
                        continue;
                    }
                    _ => return false,
                }
            }
        };
        signal(libc::SIGTERM);
        if !exited(1000) {
            signal(libc::SIGKILL);
            exited(1000);
        }
        libc::close(pidfd);
    }
    // Reaped through tokio's handle, so that tokio knows and never waits on the pid again.
    let _ = child.try_wait();
}

/// Starts `server_exe sandbox-server --root WORKTREE [--root EXTRA:ro …]` as a child and
/// checks that it answers. `read_only` are further directories the tools may read, such as
/// the saved full outputs of truncated calls.
pub async fn spawn_child(
    server_exe: &Path,
    worktree: &Path,
    read_only: &[PathBuf],
) -> Result<Sandbox, SandboxError> {
    let worktree = absolute(worktree)?;
    let mut command = tokio::process::Command::new(server_exe);
    command
        .arg("sandbox-server")
        .args(root_args(&worktree, read_only)?);
    spawn_server(
        command,
        server_exe,
        worktree,
        BackendKind::None,
        super::allowed_env(),
        Vec::new(),
    )
    .await
}

/// `--root WORKTREE --root EXTRA:ro …`, and `--resolve` when RUNNER_RESOLVE forces a
/// resolver (every backend's server gets its roots here).
pub(super) fn root_args(
    worktree: &Path,
    read_only: &[PathBuf],
) -> Result<Vec<std::ffi::OsString>, SandboxError> {
    let mut args = vec!["--root".into(), worktree.as_os_str().to_owned()];
    args.extend(runner_sandbox_server::roots::Resolver::forward_args());
    for dir in read_only {
        let mut spec = absolute(dir)?.into_os_string();
        spec.push(":ro");
        args.push("--root".into());
        args.push(spec);
    }
    Ok(args)
}

/// Runs a prepared server command as a child speaking the protocol on its stdio; shared by
/// the backends that start the server as a host process.
pub(super) async fn spawn_server(
    mut command: tokio::process::Command,
    server_exe: &Path,
    worktree: PathBuf,
    backend: BackendKind,
    env: Vec<(String, String)>,
    guards: Vec<Box<dyn Send + Sync>>,
) -> Result<Sandbox, SandboxError> {
    let mut child = command
        // The server needs nothing from the host environment, so it gets none of it.
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Keepalive stops the server gracefully; an outright kill would orphan its commands.
        .kill_on_drop(false)
        .spawn()
        .map_err(|e| {
            SandboxError::Disconnected(format!(
                "cannot start {} sandbox-server: {e}",
                server_exe.display()
            ))
        })?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(SandboxError::Protocol(
            "the server's stdio was not captured".into(),
        ));
    };
    // Larger pipes: proxied downloads move in 256 KiB chunks, which a 64 KiB pipe would
    // split into four wake-ups each. Best effort (the size may exceed pipe-max-size).
    for fd in [stdin.as_raw_fd(), stdout.as_raw_fd()] {
        // SAFETY: fcntl on a descriptor we own, with an integer argument.
        unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, 1 << 20) };
    }
    let diagnostics = stderr_tail(stderr);
    // The bare pipe, so that proxied downloads can be spliced into it.
    let stdin = stdin.into_owned_fd().map_err(|e| {
        SandboxError::Disconnected(format!("cannot take the server's input pipe: {e}"))
    })?;
    let client = SandboxClient::over_pipe(stdout, stdin, diagnostics).map_err(|e| {
        SandboxError::Disconnected(format!("cannot drive the server's input pipe: {e}"))
    })?;
    let keepalive = Keepalive {
        child: Some(child),
        guards,
    };
    finish(client, worktree, backend, env, keepalive).await
}

/// Keeps the last 4 KiB of what the server writes to stderr, to explain a failure.
pub(super) fn stderr_tail(
    mut stderr: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> Arc<dyn Fn() -> String + Send + Sync> {
    let stderr_tail = Arc::new(Mutex::new(String::new()));
    let tail = stderr_tail.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            push_tail(&tail, &buf[..n]);
        }
    });
    tail_diagnostics(stderr_tail)
}

/// What the client adds to a disconnection error: the last words of the server.
pub(super) fn tail_diagnostics(tail: Arc<Mutex<String>>) -> Arc<dyn Fn() -> String + Send + Sync> {
    Arc::new(move || {
        let t = tail.lock().unwrap_or_else(|p| p.into_inner());
        if t.trim().is_empty() {
            String::new()
        } else {
            format!("server said: {}", t.trim())
        }
    })
}

pub(super) fn push_tail(tail: &Mutex<String>, bytes: &[u8]) {
    let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
    t.push_str(&String::from_utf8_lossy(bytes));
    if t.len() > 4096 {
        let cut = t.len() - 4096;
        let cut = (cut..t.len())
            .find(|&i| t.is_char_boundary(i))
            .unwrap_or(t.len());
        t.drain(..cut);
    }
}

/// Serves from a thread of this process over a Unix socket pair: the same frames, no exec.
pub async fn in_process(worktree: &Path, read_only: &[PathBuf]) -> Result<Sandbox, SandboxError> {
    let worktree = absolute(worktree)?;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| SandboxError::Disconnected(format!("cannot create a socket pair: {e}")))?;
    let their_writer = theirs
        .try_clone()
        .map_err(|e| SandboxError::Disconnected(format!("cannot clone a socket: {e}")))?;
    let mut roots = vec![RootSpec {
        path: worktree.clone(),
        writable: true,
    }];
    for dir in read_only {
        roots.push(RootSpec {
            path: absolute(dir)?,
            writable: false,
        });
    }
    let error = Arc::new(Mutex::new(String::new()));
    let error_slot = error.clone();
    std::thread::spawn(move || {
        if let Err(e) = runner_sandbox_server::serve(&roots, theirs, their_writer) {
            *error_slot.lock().unwrap_or_else(|p| p.into_inner()) = e.to_string();
        }
    });
    ours.set_nonblocking(true)
        .map_err(|e| SandboxError::Disconnected(format!("cannot configure a socket: {e}")))?;
    let stream = tokio::net::UnixStream::from_std(ours)
        .map_err(|e| SandboxError::Disconnected(format!("cannot register a socket: {e}")))?;
    let (reader, writer) = stream.into_split();
    let diagnostics = Arc::new(move || error.lock().unwrap_or_else(|p| p.into_inner()).clone());
    let client = SandboxClient::new(reader, writer, diagnostics);
    let keepalive = Keepalive {
        child: None,
        guards: Vec::new(),
    };
    finish(
        client,
        worktree,
        BackendKind::None,
        super::allowed_env(),
        keepalive,
    )
    .await
}

pub(super) async fn finish(
    client: SandboxClient,
    worktree: PathBuf,
    backend: BackendKind,
    env: Vec<(String, String)>,
    keepalive: Keepalive,
) -> Result<Sandbox, SandboxError> {
    // The first round trip proves the server is up and can see the worktree.
    client.stat(&worktree).await?;
    Ok(Sandbox {
        client,
        worktree,
        backend,
        env,
        container_id: None,
        notes: Vec::new(),
        wall: None,
        self_test: None,
        _keepalive: keepalive,
    })
}

pub fn absolute(path: &Path) -> Result<PathBuf, SandboxError> {
    std::path::absolute(path)
        .ok()
        .and_then(|p| runner_sandbox_server::roots::normalize(&p))
        .ok_or_else(|| {
            SandboxError::Api(runner_protocol::ApiError::at(
                runner_protocol::ErrorKind::InvalidArgument,
                path,
                format!("cannot make {} absolute", path.display()),
            ))
        })
}
