//! `runner exec --sandbox docker` (and `runner sandbox shell`, its shell): one program in
//! a fresh sandbox container, through an exec of runner's server in `--exec` mode, so the
//! program runs as any command does (capabilities dropped, seccomp on, the command user).
//!
//! With a terminal the exec gets the container's own pseudo-terminal, sized as the
//! person's and resized on SIGWINCH, the person's terminal in raw mode meanwhile. Without
//! one the exec's streams are multiplexed by the engine, which keeps standard output and
//! standard error apart; standard input is passed on and closed (half-closed on the
//! engine's connection) when runner's ends.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use bollard::container::LogOutput;
use bollard::exec::{ResizeExecOptions, StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use super::{DockerError, engine};
use crate::exec::ExecError;
use crate::spec::SandboxSpec;
use crate::{SandboxClient, terminal};

/// Runs `argv` (empty: the sandbox's shell) in a fresh sandbox container and returns its
/// status; `env` goes over the sandbox's environment. `proxy`, when given, gets the sandbox's client and worktree before the program
/// starts (the network proxy is started there); what it returns is kept until the program
/// ends, then handed back. On a termination signal runner stops waiting: the container is
/// removed, the program with it, and the status is 128 + the signal.
pub async fn exec<T, F, Fut>(
    spec: &SandboxSpec,
    argv: &[OsString],
    env: &[(String, String)],
    proxy: Option<F>,
    checked: crate::exec::OnCheck<'_>,
) -> Result<(u8, Option<T>), ExecError>
where
    F: FnOnce(SandboxClient, PathBuf) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let argv = text_argv(argv)?;
    let engine = engine::Engine::open(spec.docker.host.as_deref())
        .await
        .map_err(DockerError::from)?;
    engine::warn_unenforced(&engine);
    let docker = engine.docker.clone();
    let sandbox = super::open_container(&engine, spec)
        .await
        .map_err(DockerError::from)?;
    // The container's main server answers the self-test; the program's exec of the server
    // confines itself with the same flags.
    if let Some(wall) = sandbox.wall {
        checked(&crate::self_test::run(&sandbox, wall, spec.network).await?);
    }
    let kept = match proxy {
        Some(start) => Some(
            start(sandbox.client.clone(), sandbox.worktree.clone())
                .await
                .map_err(ExecError::Proxy)?,
        ),
        None => None,
    };
    let on_terminal = terminal::attached();
    let id = sandbox.container_id.clone().unwrap_or_default();
    let exec = docker
        .create_exec(
            &id,
            exec_config(
                spec,
                &sandbox,
                &engine.command_user(),
                &argv,
                env,
                on_terminal,
            ),
        )
        .await
        .map_err(DockerError::engine("docker: cannot create the exec"))?;
    let mut signals = crate::exec::forwarded_signals()
        .map_err(|e| ExecError::Start(format!("cannot listen for signals: {e}")))?;
    let started = docker
        .start_exec(
            &exec.id,
            Some(StartExecOptions {
                detach: false,
                tty: on_terminal,
                output_capacity: None,
            }),
        )
        .await
        .map_err(DockerError::engine("docker: cannot start the exec"))?;
    let StartExecResults::Attached { output, input } = started else {
        return Err(DockerError::Unexpected("docker: the exec started detached".into()).into());
    };
    if on_terminal {
        // Not every engine takes the size at creation: set it again now it runs.
        resize(&docker, &exec.id).await;
    }
    let raw = on_terminal.then(terminal::RawMode::enter);
    let pump_in = tokio::spawn(pump_input(input, on_terminal));
    let resizes =
        on_terminal.then(|| tokio::spawn(follow_resizes(docker.clone(), exec.id.clone())));
    let ended = tokio::select! {
        ended = pump_output(output) => ended.map(|()| None),
        Some(sig) = signals.recv() => Ok(Some(sig)),
    };
    pump_in.abort();
    if let Some(r) = resizes {
        r.abort();
    }
    drop(raw);
    let code = match ended.map_err(ExecError::Start)? {
        Some(sig) => {
            eprintln!("runner: signal {sig}: the sandbox is closed, and the program with it");
            (128 + sig) as u8
        }
        None => docker
            .inspect_exec(&exec.id)
            .await
            .ok()
            .and_then(|i| i.exit_code)
            .map_or(1, |c| c.clamp(0, 255) as u8),
    };
    drop(sandbox);
    Ok((code, kept))
}

/// The engine takes a command line as JSON text: an argument that is not UTF-8 cannot be
/// sent, and is refused rather than changed.
fn text_argv(argv: &[OsString]) -> Result<Vec<String>, ExecError> {
    argv.iter()
        .enumerate()
        .map(|(i, a)| {
            a.clone().into_string().map_err(|a| {
                ExecError::Start(format!(
                    "argument {} ({a:?}) is not UTF-8, and the docker engine takes a command \
                     line as JSON text; pass it another way (a file in the worktree), or use \
                     --sandbox landlock, which passes bytes as they are",
                    i + 1
                ))
            })
        })
        .collect()
}

/// The exec: runner's server in `--exec` mode, as the container's root with its four
/// capabilities, so the server splits and drops them, puts on its seccomp filter, and
/// starts the program as the command user (see `confine::identity`). A plain exec of the
/// program would keep those capabilities.
fn exec_config(
    spec: &SandboxSpec,
    sandbox: &crate::Sandbox,
    user: &str,
    argv: &[String],
    extra_env: &[(String, String)],
    on_terminal: bool,
) -> ExecConfig {
    // A name set twice would leave which value a program sees to its libc: the extra
    // value replaces the sandbox's.
    let mut env: Vec<String> = sandbox
        .env
        .iter()
        .filter(|(k, _)| !extra_env.iter().any(|(e, _)| e == k))
        .chain(extra_env)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if on_terminal {
        env.push(format!(
            "TERM={}",
            std::env::var("TERM").unwrap_or_else(|_| "xterm".into())
        ));
    }
    let mut cmd: Vec<String> = [
        super::SERVER_PATH,
        "sandbox-server",
        "--seccomp",
        "--network",
        spec.network.as_arg(),
        "--command-user",
        user,
        "--root",
    ]
    .into_iter()
    .map(String::from)
    .chain([sandbox.worktree.display().to_string()])
    .collect();
    let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
    cmd.extend(
        crate::exec::server_args(&argv, on_terminal)
            .into_iter()
            .filter_map(|a| a.into_string().ok()),
    );
    ExecConfig {
        cmd: Some(cmd),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(on_terminal),
        console_size: terminal::window_size()
            .filter(|_| on_terminal)
            .map(|(rows, cols)| vec![rows.into(), cols.into()]),
        env: Some(env),
        working_dir: Some(sandbox.worktree.display().to_string()),
        ..Default::default()
    }
}

/// Runner's standard input to the exec. Without a terminal its end is passed on as the
/// end of the exec's input.
async fn pump_input(
    mut input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    on_terminal: bool,
) {
    let mut chunks = terminal::stdin_chunks();
    while let Some(chunk) = chunks.recv().await {
        if input.write_all(&chunk).await.is_err() {
            return;
        }
    }
    if !on_terminal {
        let _ = input.shutdown().await;
    }
}

/// The exec's output to runner's standard output and error, byte for byte, until it ends.
async fn pump_output(
    mut output: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
    >,
) -> Result<(), String> {
    let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
    while let Some(chunk) = output.next().await {
        let chunk = chunk.map_err(|e| format!("docker: the exec's output broke off: {e}"))?;
        let _ = match chunk {
            LogOutput::StdErr { message } => stderr.write_all(&message).and(stderr.flush()),
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                stdout.write_all(&message).and(stdout.flush())
            }
            LogOutput::StdIn { .. } => Ok(()),
        };
    }
    Ok(())
}

/// Each SIGWINCH, the person's window size to the exec's terminal.
async fn follow_resizes(docker: bollard::Docker, exec_id: String) {
    let Ok(mut winch) =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
    else {
        return;
    };
    while winch.recv().await.is_some() {
        resize(&docker, &exec_id).await;
    }
}

/// The person's window size to the exec's terminal.
async fn resize(docker: &bollard::Docker, exec_id: &str) {
    if let Some((rows, cols)) = terminal::window_size() {
        let size = ResizeExecOptions {
            height: rows,
            width: cols,
        };
        let _ = docker.resize_exec(exec_id, size).await;
    }
}
