//! A long-lived program inside the sandbox spoken to over its standard input and output:
//! how MCP servers and language servers run. Both execute code the repository controls
//! (its build files, its config), so they start behind the wall like any command, as
//! interactive commands of the sandbox protocol, and die with the sandbox.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio_util::sync::CancellationToken;

use super::ToolContext;
use runner_protocol::{ExecRequest, OutputStream};
use runner_sandbox::client::ExecEvent;

/// How long such a program may live: as long as its session, in practice.
const LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// How much of what the program wrote to its standard error is kept, for messages.
const STDERR_TAIL: usize = 2048;

/// A started program: `stream` carries its standard output one way and its standard input
/// the other; `stderr` holds the end of what it wrote there. Cancelling `stop` ends the
/// program: a reader that cut the program off for breaking its protocol (a message over
/// the limit) stops it this way, so it does not go on filling a pipe nobody reads.
pub struct Stdio {
    pub stream: DuplexStream,
    pub stderr: Arc<Mutex<String>>,
    pub stop: CancellationToken,
}

/// Starts `argv` inside the sandbox in the worktree, with the sandbox's environment plus
/// `env`, and pumps its standard streams to and from the returned [`Stdio`]. When the
/// program ends, the stream ends; when the stream is dropped, its input is closed.
pub async fn spawn(
    ctx: &ToolContext,
    argv: &[String],
    env: &[(String, String)],
) -> Result<Stdio, runner_sandbox::SandboxError> {
    let line = argv
        .iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ");
    let mut all = ctx.services.sandbox.env.clone();
    for (k, v) in env {
        all.retain(|(have, _)| have != k);
        all.push((k.clone(), v.clone()));
    }
    let mut execution = ctx
        .sandbox()
        .client
        .exec(ExecRequest {
            command: format!("exec {line}"),
            cwd: ctx.worktree().to_path_buf(),
            env: all,
            timeout_ms: LIFETIME.as_millis() as u64,
            stdin: None,
            output_limit: u64::MAX,
            interactive: true,
        })
        .await?;
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (mut from_client, mut to_client) = tokio::io::split(theirs);
    let input = execution.input();
    let stderr: Arc<Mutex<String>> = Arc::default();
    let tail = stderr.clone();
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        let ended = loop {
            let event = tokio::select! {
                event = execution.next() => event,
                () = stopped.cancelled() => break false,
            };
            match event {
                Ok(ExecEvent::Output(o)) if o.stream == OutputStream::Stdout => {
                    let written = tokio::select! {
                        written = to_client.write_all(&o.data) => written.is_ok(),
                        () = stopped.cancelled() => false,
                    };
                    if !written {
                        break false;
                    }
                }
                Ok(ExecEvent::Output(o)) => keep_tail(&tail, &o.data),
                Ok(ExecEvent::Exit(_)) | Err(_) => break true,
            }
        };
        // Nobody reads the program any more: it goes, rather than write into the void.
        if !ended {
            let _ = execution.cancel().await;
        }
        // The end of the output tells the client the program is gone.
        let _ = to_client.shutdown().await;
    });
    tokio::spawn(async move {
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = input.close().await;
                    break;
                }
                Ok(n) => {
                    if input.write(buf[..n].to_vec()).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    Ok(Stdio {
        stream: ours,
        stderr,
        stop,
    })
}

/// Appends `data` to the kept tail of standard error, cut to its last [`STDERR_TAIL`]
/// bytes at a character boundary.
fn keep_tail(tail: &Mutex<String>, data: &[u8]) {
    let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
    tail.push_str(&String::from_utf8_lossy(data));
    let cut = tail.len().saturating_sub(STDERR_TAIL);
    if cut > 0 {
        let at = (cut..=tail.len())
            .find(|&i| tail.is_char_boundary(i))
            .unwrap_or(tail.len());
        *tail = tail.split_off(at);
    }
}

/// `s` as one word for the shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
