//! A command run in the sandbox's worktree with input on its stdin, collected to its end:
//! what the user's own tools and a project's hooks both need. The server enforces the
//! timeout; the deadline here only covers a server that stopped answering, so no call can
//! hang for good. The tool call's cancel ends the command.

use std::time::Duration;

use super::{ToolContext, ToolError};
use runner_protocol::{ExecRequest, ExecStatus, OutputStream};
use runner_sandbox::client::{ExecEvent, Execution};

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
    let execution = ctx
        .sandbox()
        .client
        .exec(ExecRequest {
            command: command.to_string(),
            cwd: ctx.worktree().to_path_buf(),
            env: ctx.services.sandbox.env.clone(),
            timeout_ms: timeout.as_millis() as u64,
            stdin: Some(stdin),
            output_limit: limit,
            interactive: false,
        })
        .await?;
    let mut following = Following::new(execution, ctx, timeout);
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    // The server keeps the head of the output and a tail window; what passes twice the
    // limit is a server that ignored it, and the host does not hold it.
    let most = limit.saturating_mul(2).saturating_add(1 << 20);
    loop {
        match following.next().await? {
            ExecEvent::Output(chunk)
                if (stdout.len() + stderr.len() + chunk.data.len()) as u64 > most =>
            {
                let _ = following.execution.cancel().await;
                return Err(ToolError::Failed(format!(
                    "the sandbox sent more than {most} bytes of output for a command whose limit is {limit} bytes; runner stopped reading it and cancelled the command"
                )));
            }
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

/// A running command followed for a tool call: the call's cancel is passed on to the
/// sandbox (once), and a server still silent [`GRACE`] past the command's own timeout ends
/// the wait, so no call can hang for good.
pub(super) struct Following<'a> {
    execution: Execution,
    ctx: &'a ToolContext,
    cancel_sent: bool,
    give_up_at: tokio::time::Instant,
}

impl<'a> Following<'a> {
    pub(super) fn new(execution: Execution, ctx: &'a ToolContext, timeout: Duration) -> Self {
        Following {
            execution,
            ctx,
            cancel_sent: false,
            give_up_at: tokio::time::Instant::now() + timeout + GRACE,
        }
    }

    /// The command's next event.
    pub(super) async fn next(&mut self) -> Result<ExecEvent, ToolError> {
        let Following {
            execution,
            ctx,
            cancel_sent,
            give_up_at,
        } = self;
        loop {
            tokio::select! {
                event = execution.next() => return Ok(event?),
                _ = ctx.cancel.cancelled(), if !*cancel_sent => {
                    *cancel_sent = true;
                    execution.cancel().await?;
                }
                _ = tokio::time::sleep_until(*give_up_at) => {
                    let _ = execution.cancel().await;
                    return Err(ToolError::Failed(format!(
                        "the sandbox did not end the command {} s after its timeout; it may still be running. Check the sandbox with `runner sandbox doctor`",
                        GRACE.as_secs()
                    )));
                }
            }
        }
    }
}
