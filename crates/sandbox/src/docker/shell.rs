//! `runner sandbox shell --sandbox docker`: an interactive shell in a sandbox container,
//! through an exec with a terminal, the local terminal in raw mode for its duration.

use std::io::IsTerminal;

use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{DockerError, engine};
use crate::spec::SandboxSpec;

/// Puts the terminal in raw mode and restores it on drop.
struct RawMode(Option<libc::termios>);

impl RawMode {
    fn enter() -> RawMode {
        if !std::io::stdin().is_terminal() {
            return RawMode(None);
        }
        // SAFETY: tcgetattr/tcsetattr on stdin with a valid termios.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) != 0 {
                return RawMode(None);
            }
            let saved = t;
            libc::cfmakeraw(&mut t);
            libc::tcsetattr(0, libc::TCSANOW, &t);
            RawMode(Some(saved))
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            // SAFETY: restores the attributes saved above.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, t) };
        }
    }
}

/// Runs the shell in a fresh sandbox container. `with_sandbox` gets the sandbox before the
/// shell starts (the network proxy is started there) and what it returns is kept until the
/// shell ends, then handed back.
pub async fn shell<T, E, F, Fut>(spec: &SandboxSpec, with_sandbox: F) -> Result<(u8, T), E>
where
    F: FnOnce(&crate::Sandbox) -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: From<DockerError>,
{
    let engine = engine::Engine::open(spec.docker.host.as_deref())
        .await
        .map_err(DockerError::from)?;
    engine::warn_unenforced(&engine);
    let docker = engine.docker.clone();
    let sandbox = super::open_container(&engine, spec)
        .await
        .map_err(DockerError::from)?;
    let kept = with_sandbox(&sandbox).await?;
    let id = sandbox.container_id.clone().unwrap_or_default();
    let mut env: Vec<String> = sandbox
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.push(format!(
        "TERM={}",
        std::env::var("TERM").unwrap_or_else(|_| "xterm".into())
    ));
    let tty = std::io::stdin().is_terminal();
    let exec = docker
        .create_exec(
            &id,
            CreateExecOptions {
                cmd: Some(shell_command(
                    spec,
                    &sandbox.worktree,
                    &engine.command_user(),
                )),
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(tty),
                env: Some(env),
                working_dir: Some(sandbox.worktree.display().to_string()),
                ..Default::default()
            },
        )
        .await
        .map_err(DockerError::engine("docker: cannot create the shell"))?;
    let started = docker
        .start_exec(
            &exec.id,
            Some(StartExecOptions {
                detach: false,
                tty,
                output_capacity: None,
            }),
        )
        .await
        .map_err(DockerError::engine("docker: cannot start the shell"))?;
    let StartExecResults::Attached {
        mut output,
        mut input,
    } = started
    else {
        return Err(DockerError::Unexpected("docker: the shell started detached".into()).into());
    };
    let _raw = RawMode::enter();
    let pump_in = tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 1024];
        while let Ok(n) = stdin.read(&mut buf).await {
            if n == 0 || input.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    });
    let mut stdout = tokio::io::stdout();
    while let Some(Ok(chunk)) = output.next().await {
        let _ = stdout.write_all(&chunk.into_bytes()).await;
        let _ = stdout.flush().await;
    }
    pump_in.abort();
    let code = docker
        .inspect_exec(&exec.id)
        .await
        .ok()
        .and_then(|i| i.exit_code)
        .unwrap_or(0);
    drop(sandbox);
    Ok((code.clamp(0, 255) as u8, kept))
}

/// The shell through the server binary, as commands run: the exec starts as the
/// container's root with its four capabilities, so the server splits and drops them, puts
/// on its seccomp filter, and starts the shell as the command user (see
/// `confine::identity`). A plain exec of a shell would keep those capabilities.
fn shell_command(spec: &SandboxSpec, worktree: &std::path::Path, user: &str) -> Vec<String> {
    [
        super::SERVER_PATH,
        "sandbox-server",
        "--seccomp",
        "--network",
        spec.network.as_arg(),
        "--command-user",
        user,
        "--shell",
        "--root",
    ]
    .into_iter()
    .map(String::from)
    .chain([worktree.display().to_string()])
    .collect()
}
