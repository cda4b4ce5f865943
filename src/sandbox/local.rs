//! The `none` backend: the server as a plain child process (or, for tests and embedding, a
//! thread in this process speaking the same wire protocol over a socket pair).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;

use super::server::RootSpec;
use super::{BackendKind, Sandbox, SandboxClient, SandboxError};

/// Owns what keeps a server alive; dropping it ends the server (the child is killed, the
/// thread sees its input close).
pub enum Keepalive {
    Child(#[allow(dead_code)] tokio::process::Child),
    Thread,
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
    command.arg("sandbox-server").arg("--root").arg(&worktree);
    for dir in read_only {
        let mut spec = absolute(dir)?.into_os_string();
        spec.push(":ro");
        command.arg("--root").arg(spec);
    }
    let mut child = command
        // The server needs nothing from the host environment, so it gets none of it.
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            SandboxError::Disconnected(format!(
                "cannot start {} sandbox-server: {e}",
                server_exe.display()
            ))
        })?;
    let (Some(stdin), Some(stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(SandboxError::Protocol(
            "the server's stdio was not captured".into(),
        ));
    };
    let stderr_tail = Arc::new(Mutex::new(String::new()));
    let tail = stderr_tail.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
            t.push_str(&String::from_utf8_lossy(&buf[..n]));
            if t.len() > 4096 {
                let cut = t.len() - 4096;
                let cut = (cut..t.len())
                    .find(|&i| t.is_char_boundary(i))
                    .unwrap_or(t.len());
                t.drain(..cut);
            }
        }
    });
    let diagnostics = Arc::new(move || {
        let t = stderr_tail.lock().unwrap_or_else(|p| p.into_inner());
        if t.trim().is_empty() {
            String::new()
        } else {
            format!("server said: {}", t.trim())
        }
    });
    let client = SandboxClient::new(stdout, stdin, diagnostics);
    finish(client, worktree, Keepalive::Child(child)).await
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
        if let Err(e) = super::server::serve(&roots, theirs, their_writer) {
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
    finish(client, worktree, Keepalive::Thread).await
}

async fn finish(
    client: SandboxClient,
    worktree: PathBuf,
    keepalive: Keepalive,
) -> Result<Sandbox, SandboxError> {
    // The first round trip proves the server is up and can see the worktree.
    client.stat(&worktree).await?;
    Ok(Sandbox {
        client,
        worktree,
        backend: BackendKind::None,
        env: super::allowed_env(),
        _keepalive: keepalive,
    })
}

fn absolute(path: &Path) -> Result<PathBuf, SandboxError> {
    std::path::absolute(path)
        .ok()
        .and_then(|p| super::server::roots::normalize(&p))
        .ok_or_else(|| {
            SandboxError::Api(crate::sandbox::api::ApiError::at(
                crate::sandbox::api::ErrorKind::InvalidArgument,
                path,
                format!("cannot make {} absolute", path.display()),
            ))
        })
}
