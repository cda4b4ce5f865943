//! Hooks: commands run around tool calls and at the end of a session.
//!
//! `[[hooks]]` in a config file: `event` (`before_tool`, `after_tool`, `session_end`), an
//! optional `tool` pattern (OpenCode's wildcard; default every tool), a `command` and a
//! `timeout` in seconds (default 30). The command reads a JSON description of the event on
//! standard input: `{event, session, tool, args}`, and for `after_tool` also `result`
//! (`output`, `error`, `outcome`).
//!
//! Where a hook runs depends on who wrote it. The user's own config (and `--config`) is the
//! user's code: it runs on the host, in the worktree. A project's `.runner/config.toml` is
//! the repository's code: it runs inside the sandbox, behind the same wall as the agent's
//! commands, and can never run on the host.
//!
//! A `before_tool` hook that exits non-zero (or cannot run, or runs past its time) blocks
//! the call, and what it printed is the message the model reads. An `after_tool` or
//! `session_end` hook that fails is reported and otherwise ignored. No hook can hang a run:
//! each has its timeout, after which it is killed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::{ToolContext, ToolError};
use runner_permission::PermissionRequest;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Output kept from a hook (what a blocking hook says is cut by the registry like any tool
/// output).
const OUTPUT_LIMIT: u64 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    BeforeTool,
    AfterTool,
    SessionEnd,
}

/// `[[hooks]]` as a config file writes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookSpec {
    pub event: Event,
    /// Which tools (a wildcard over the tool's id); default all.
    pub tool: Option<String>,
    pub command: String,
    pub timeout: Option<f64>,
}

/// Where a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The user's own: on the host.
    Host,
    /// A project's: in the sandbox.
    Sandbox,
}

#[derive(Debug, Clone)]
pub struct Hook {
    pub spec: HookSpec,
    pub place: Place,
    /// The file it came from, for messages.
    pub source: PathBuf,
}

/// The hooks of a session, and where host hooks run.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    pub hooks: Vec<Hook>,
    /// The worktree on the host (the checkout, even when the sandbox works on a copy).
    pub host_root: PathBuf,
}

/// What a hook run came to.
struct Ran {
    ok: bool,
    output: String,
}

impl Hooks {
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    fn matching(&self, event: Event, tool: Option<&str>) -> impl Iterator<Item = &Hook> {
        self.hooks.iter().filter(move |h| {
            h.spec.event == event
                && match (&h.spec.tool, tool) {
                    (Some(pattern), Some(id)) => runner_permission::wildcard::matches(id, pattern),
                    _ => true,
                }
        })
    }

    /// Runs the `before_tool` hooks of `tool`; `Err` when one blocks the call.
    pub async fn before(
        &self,
        tool: &str,
        args: &Value,
        ctx: &ToolContext,
    ) -> Result<(), HookError> {
        let input = serde_json::json!({
            "event": "before_tool", "session": ctx.conversation.id, "tool": tool, "args": args,
        });
        for hook in self.matching(Event::BeforeTool, Some(tool)) {
            let ran = self.run(hook, &input, ctx).await;
            if !ran.ok {
                let said = ran.output.trim();
                return Err(if said.is_empty() {
                    HookError::BlockedSilently(hook.source.clone())
                } else {
                    HookError::Blocked(said.to_string())
                });
            }
        }
        Ok(())
    }

    /// Runs the `after_tool` hooks of `tool` with the call's result.
    pub async fn after(&self, tool: &str, args: &Value, result: Value, ctx: &ToolContext) {
        let input = serde_json::json!({
            "event": "after_tool", "session": ctx.conversation.id, "tool": tool, "args": args,
            "result": result,
        });
        for hook in self.matching(Event::AfterTool, Some(tool)) {
            let ran = self.run(hook, &input, ctx).await;
            if !ran.ok {
                eprintln!(
                    "runner: the after_tool hook from {} failed: {}",
                    hook.source.display(),
                    runner_display::escape(ran.output.trim())
                );
            }
        }
    }

    /// Runs the `session_end` hooks.
    pub async fn session_end(&self, reason: &str, ctx: &ToolContext) {
        let input = serde_json::json!({
            "event": "session_end", "session": ctx.conversation.id, "reason": reason,
        });
        for hook in self.matching(Event::SessionEnd, None) {
            let ran = self.run(hook, &input, ctx).await;
            if !ran.ok {
                eprintln!(
                    "runner: the session_end hook from {} failed: {}",
                    hook.source.display(),
                    runner_display::escape(ran.output.trim())
                );
            }
        }
    }

    async fn run(&self, hook: &Hook, input: &Value, ctx: &ToolContext) -> Ran {
        let timeout = hook
            .spec
            .timeout
            .filter(|t| t.is_finite() && *t > 0.0)
            .map(|t| Duration::from_secs_f64(t.min(3600.0)))
            .unwrap_or(DEFAULT_TIMEOUT);
        let stdin = input.to_string().into_bytes();
        let ran = match hook.place {
            Place::Host => on_host(&hook.spec.command, &self.host_root, stdin, timeout).await,
            Place::Sandbox => {
                // A project's hook is the repository's command: the bash rules judge it like
                // any other (a profile that denies or asks about bash does so here too).
                let command = &hook.spec.command;
                let ask =
                    PermissionRequest::new("bash", vec![command.clone()], vec![command.clone()]);
                match ctx.ask_all(vec![ask]).await {
                    Ok(()) => in_sandbox(command, ctx, stdin, timeout).await,
                    Err(e) => Err(HookError::NotAllowed {
                        hook: hook.source.clone(),
                        why: e,
                    }),
                }
            }
        };
        ran.unwrap_or_else(|e| Ran {
            ok: false,
            output: e.to_string(),
        })
    }
}

/// Why a hook blocked a call, or did not run (which counts as failing).
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("A before_tool hook blocked this call: {0}")]
    Blocked(String),
    #[error("A before_tool hook ({}) blocked this call without saying why.", .0.display())]
    BlockedSilently(PathBuf),
    #[error("the project's hook from {} was not allowed to run: {why}", hook.display())]
    NotAllowed { hook: PathBuf, why: ToolError },
    #[error("cannot start the hook: {0}")]
    Start(#[source] std::io::Error),
    #[error("the hook failed: {0}")]
    Wait(#[source] std::io::Error),
    #[error("the hook ran past its {0} s timeout and was killed")]
    Timeout(u64),
    #[error(
        "the hook wrote more than its output limit of {limit} bytes; runner cut it off and killed it"
    )]
    TooMuch { limit: u64 },
    #[error("the hook could not run: {0}")]
    InSandbox(#[source] ToolError),
}

async fn on_host(
    command: &str,
    root: &Path,
    stdin: Vec<u8>,
    timeout: Duration,
) -> Result<Ran, HookError> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(root)
        // The worktree is the agent's: a `.git/config` it wrote must not make a git run by
        // the user's hook start a program (fsmonitor) or a hook of the agent's.
        .env("GIT_CONFIG_COUNT", "2")
        .env("GIT_CONFIG_KEY_0", "core.fsmonitor")
        .env("GIT_CONFIG_VALUE_0", "")
        .env("GIT_CONFIG_KEY_1", "core.hooksPath")
        .env("GIT_CONFIG_VALUE_1", "/dev/null")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .process_group(0)
        .spawn()
        .map_err(HookError::Start)?;
    if let Some(mut input) = child.stdin.take() {
        // A hook that does not read its input must not block on a full pipe.
        tokio::spawn(async move {
            let _ = input.write_all(&stdin).await;
        });
    }
    let pid = child.id();
    // Everything the hook started goes with it.
    let kill = || {
        if let Some(pid) = pid {
            // SAFETY: a signal to the process group we made.
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        }
    };
    match tokio::time::timeout(timeout, bounded_output(&mut child)).await {
        Ok(Ok((ok, text))) => Ok(Ran { ok, output: text }),
        Ok(Err(e)) => {
            kill();
            Err(e)
        }
        Err(_) => {
            kill();
            Err(HookError::Timeout(timeout.as_secs()))
        }
    }
}

/// The hook's exit and its output (standard output, then error), each stream read only up
/// to [`OUTPUT_LIMIT`]: a hook that prints more is cut off, not buffered whole.
async fn bounded_output(child: &mut tokio::process::Child) -> Result<(bool, String), HookError> {
    let limit = OUTPUT_LIMIT as usize;
    let read = |stream: Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>| async move {
        let Some(mut stream) = stream else {
            return Ok(Vec::new());
        };
        runner_framing::read_to_end_capped(&mut stream, limit)
            .await
            .map_err(|e| match e {
                runner_framing::FrameError::Io(e) => HookError::Wait(e),
                _ => HookError::TooMuch {
                    limit: OUTPUT_LIMIT,
                },
            })
    };
    let stdout = child.stdout.take().map(|s| Box::new(s) as _);
    let stderr = child.stderr.take().map(|s| Box::new(s) as _);
    let (out, err) = tokio::try_join!(read(stdout), read(stderr))?;
    let status = child.wait().await.map_err(HookError::Wait)?;
    let mut text = String::from_utf8_lossy(&out).into_owned();
    text.push_str(&String::from_utf8_lossy(&err));
    Ok((status.success(), text))
}

async fn in_sandbox(
    command: &str,
    ctx: &ToolContext,
    stdin: Vec<u8>,
    timeout: Duration,
) -> Result<Ran, HookError> {
    let ran = super::collect::run(ctx, command, stdin, timeout, OUTPUT_LIMIT)
        .await
        .map_err(HookError::InSandbox)?;
    let mut text = String::from_utf8_lossy(&ran.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&ran.stderr));
    if ran.status.timed_out {
        text.push_str(&format!(
            "\n(the hook ran past its {} s timeout and was killed)",
            timeout.as_secs()
        ));
    }
    Ok(Ran {
        ok: ran.status.code == Some(0) && !ran.status.timed_out,
        output: text,
    })
}
