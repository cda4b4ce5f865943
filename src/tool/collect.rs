//! A command run in the sandbox's worktree with input on its stdin, collected to its end:
//! what the user's own tools and a project's hooks both need. The server enforces the
//! timeout; the deadline here only covers a server that stopped answering, so no call can
//! hang for good. The tool call's cancel ends the command.

use std::time::Duration;

use super::{ToolContext, ToolError};
use crate::sandbox::api::{ExecRequest, ExecStatus, OutputStream};
use crate::sandbox::client::ExecEvent;

/// How long past its timeout a command may go unanswered before the call gives up on it.
const GRACE: Duration = Duration::from_secs(30);

pub struct Collected {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub status: ExecStatus,
}

pub async fn run(
    ctx: &ToolContext,
    command: &str,
    stdin: Vec<u8>,
    timeout: Duration,
    limit: u64,
) -> Result<Collected, ToolError> {
    let mut execution = ctx
        .sandbox
        .client
        .exec(ExecRequest {
            command: command.to_string(),
            cwd: ctx.worktree().to_path_buf(),
            env: ctx.sandbox.env.clone(),
            timeout_ms: timeout.as_millis() as u64,
            stdin: Some(stdin),
            output_limit: limit,
            interactive: false,
        })
        .await?;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let mut cancel_sent = false;
    let guard = tokio::time::sleep(timeout + GRACE);
    tokio::pin!(guard);
    loop {
        let event = tokio::select! {
            event = execution.next() => event?,
            _ = ctx.cancel.cancelled(), if !cancel_sent => {
                cancel_sent = true;
                execution.cancel().await?;
                continue;
            }
            _ = &mut guard => {
                let _ = execution.cancel().await;
                return Err(ToolError::Failed(format!(
                    "the sandbox did not end the command {} s after its timeout",
                    GRACE.as_secs()
                )));
            }
        };
        match event {
            ExecEvent::Output(chunk) => match chunk.stream {
                OutputStream::Stdout => stdout.extend_from_slice(&chunk.data),
                OutputStream::Stderr => stderr.extend_from_slice(&chunk.data),
            },
            ExecEvent::Exit(status) => {
                return Ok(Collected {
                    stdout,
                    stderr,
                    status,
                });
            }
        }
    }
}
