//! `bash`: run a shell command inside the sandbox, streaming its output as it arrives.

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::collect::Following;
use super::{Progress, Tool, ToolContext, ToolError, ToolOutput, ToolResult, lenient, truncate};
use runner_permission::PermissionRequest;
use runner_permission::bash_scan::{self, ScanContext};
use runner_protocol::{ExecRequest, ExecStatus};
use runner_sandbox::client::ExecEvent;

pub const DEFAULT_TIMEOUT_MS: u64 = 2 * 60 * 1000;
/// What the server keeps of one command's output (head and tail); the model sees far less
/// after truncation, but the saved full output keeps this much.
const CAPTURE_LIMIT: u64 = 16 * 1024 * 1024;
/// How much of the live output a progress report carries.
const PROGRESS_PREVIEW: usize = 30 * 1024;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct BashParams {
    /// The command to execute
    pub command: String,
    /// Optional timeout in milliseconds
    #[serde(default, deserialize_with = "lenient::opt_i64")]
    #[schemars(with = "Option<u64>")]
    pub timeout: Option<i64>,
    /// The working directory to run the command in. Defaults to the worktree. Use this instead of 'cd' commands.
    #[serde(default)]
    pub workdir: Option<String>,
    /// Clear, concise description of what this command does in 5-10 words.
    pub description: String,
}

pub struct BashTool;

/// The read subjects, plus `<dir>/.env` beside each glob that may match an env file: the
/// rules are wildcards over names, and `.env*` or `.e{n,}v` would slip past a `*.env` rule
/// that the files they expand to do not.
fn with_env_stand_ins(reads: &[String]) -> Vec<String> {
    let mut out = reads.to_vec();
    for read in reads {
        if read.contains(['*', '?', '[', '{']) {
            let stand_in = match read.rsplit_once('/') {
                Some((dir, _)) => format!("{dir}/.env"),
                None => ".env".to_string(),
            };
            if !out.contains(&stand_in) {
                out.push(stand_in);
            }
        }
    }
    out
}

/// Where the command runs: `workdir` against the worktree, else the worktree.
fn workdir(params: &BashParams, ctx: &ToolContext) -> Result<PathBuf, ToolError> {
    match params.workdir.as_deref() {
        Some(dir) if !dir.trim().is_empty() => ctx.resolve(dir),
        _ => Ok(ctx.worktree().to_path_buf()),
    }
}

impl Tool for BashTool {
    type Params = BashParams;

    fn id(&self) -> &'static str {
        "bash"
    }

    fn description(&self) -> &'static str {
        include_str!("bash.txt")
    }

    /// Errors and summaries come last in command output, so keep the end.
    fn truncation(&self) -> truncate::Direction {
        truncate::Direction::Tail
    }

    /// From the command's syntax tree ([`bash_scan`]): first the directories outside the
    /// worktree it may touch (the workdir included), then the `.env` files it reads (the
    /// same `read` rules the read tool answers to), then one `bash` pattern per command.
    async fn permissions(
        &self,
        params: &BashParams,
        ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        let cwd = workdir(params, ctx)?;
        let home = ctx
            .sandbox()
            .env
            .iter()
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| PathBuf::from(v))
            .or_else(|| std::env::var_os("HOME").map(PathBuf::from));
        let scan = bash_scan::scan(
            params.command.trim(),
            &ScanContext {
                cwd: &cwd,
                worktree: ctx.worktree(),
                home: home.as_deref(),
            },
        );
        let mut asks = Vec::new();
        let mut external: Vec<String> = ctx
            .external_request(&cwd, true)
            .map(|r| r.patterns)
            .unwrap_or_default();
        for dir in scan.external {
            if !external.contains(&dir) {
                external.push(dir);
            }
        }
        if !external.is_empty() {
            // "Anywhere" is never remembered: approving one unknown place is not approving all.
            let always = external.iter().filter(|p| *p != "*").cloned().collect();
            asks.push(PermissionRequest::new(
                "external_directory",
                external,
                always,
            ));
        }
        if !scan.reads.is_empty() {
            asks.push(PermissionRequest::new(
                "read",
                with_env_stand_ins(&scan.reads),
                scan.reads,
            ));
        }
        if !scan.patterns.is_empty() {
            let mut ask = PermissionRequest::new("bash", scan.patterns, scan.always);
            ask.deny_spellings = scan.deny_spellings;
            asks.push(ask);
        }
        // The rules judge the parts; a person deciding sees the whole command as it runs.
        for ask in &mut asks {
            ask.metadata = serde_json::json!({ "command": params.command });
        }
        Ok(asks)
    }

    async fn execute(&self, params: BashParams, ctx: &ToolContext) -> ToolResult {
        let timeout_ms = match params.timeout {
            None => DEFAULT_TIMEOUT_MS,
            Some(t) if t > 0 => t as u64,
            Some(t) => {
                return Err(ToolError::Failed(format!(
                    "Invalid timeout value: {t}. Timeout must be a positive number."
                )));
            }
        };
        if params.command.trim().is_empty() {
            return Err(ToolError::Failed("command is required".into()));
        }
        ctx.ask_all(self.permissions(&params, ctx).await?).await?;
        let cwd = workdir(&params, ctx)?;

        let execution = ctx
            .sandbox()
            .client
            .exec(ExecRequest {
                command: params.command.clone(),
                cwd: cwd.clone(),
                env: ctx.services.sandbox.env.clone(),
                timeout_ms,
                stdin: None,
                output_limit: CAPTURE_LIMIT,
                interactive: false,
            })
            .await?;

        let (output, status) = follow(execution, timeout_ms, &params.description, ctx).await?;
        let text = with_notes(&output, &status, timeout_ms, ctx);
        let preview = tail_preview(text.as_bytes(), PROGRESS_PREVIEW);
        let mut metadata = crate::meta! {
            "output" => preview,
            "exit" => status.code,
            "description" => params.description,
        };
        if let Some(signal) = status.signal {
            metadata.insert("signal".into(), signal.into());
        }
        if status.timed_out {
            metadata.insert("timedOut".into(), true.into());
        }
        if status.cancelled {
            metadata.insert("cancelled".into(), true.into());
        }
        Ok(ToolOutput {
            title: params.description.clone(),
            output: text,
            metadata,
            attachments: Vec::new(),
        })
    }
}

/// The command's output as it streams (each chunk shown as progress), until its exit
/// status.
async fn follow(
    execution: runner_sandbox::client::Execution,
    timeout_ms: u64,
    description: &str,
    ctx: &ToolContext,
) -> Result<(Vec<u8>, ExecStatus), ToolError> {
    let mut following = Following::new(execution, ctx, Duration::from_millis(timeout_ms));
    let mut output: Vec<u8> = Vec::new();
    let mut tail_started = false;
    loop {
        match following.next().await? {
            ExecEvent::Output(chunk) => {
                if chunk.tail && !tail_started {
                    tail_started = true;
                    output.extend_from_slice(b"\n...[output dropped here]...\n");
                }
                output.extend_from_slice(&chunk.data);
                // Only the end is decoded: decoding all output on every chunk would be
                // quadratic in the output size.
                let preview = tail_preview(&output, PROGRESS_PREVIEW);
                (ctx.progress)(Progress {
                    tool: "bash",
                    metadata: crate::meta! { "output" => preview, "description" => description },
                });
            }
            ExecEvent::Exit(status) => return Ok((output, status)),
        }
    }
}

/// The output as text for the model, with how much was dropped in the middle and what
/// ended the command when it did not end by itself (a timeout, a cancel, a full disk
/// budget) in a `<bash_metadata>` block.
fn with_notes(output: &[u8], status: &ExecStatus, timeout_ms: u64, ctx: &ToolContext) -> String {
    let mut text = String::from_utf8_lossy(output).into_owned();
    if status.dropped_bytes > 0 {
        text = text.replacen(
            "...[output dropped here]...",
            &format!("...[{} bytes of output dropped]...", status.dropped_bytes),
            1,
        );
    }
    let mut notes = Vec::new();
    if status.timed_out {
        notes.push(format!(
            "bash tool terminated command after exceeding timeout {timeout_ms} ms"
        ));
    }
    if status.cancelled {
        notes.push("User aborted the command".to_string());
    }
    // A copy's disk budget is its file system's size: a command that failed on a full one
    // is told which budget it hit and what raises it.
    if status.code != Some(0)
        && let Some(note) = runner_workspace::disk::full_note(ctx.worktree())
    {
        notes.push(note);
    }
    if !notes.is_empty() {
        text.push_str(&format!(
            "\n\n<bash_metadata>\n{}\n</bash_metadata>",
            notes.join("\n")
        ));
    }
    text
}

/// The last `max_bytes` of output as text, starting on a character boundary, marked with
/// `…` when something before it was left out.
fn tail_preview(bytes: &[u8], max_bytes: usize) -> String {
    if bytes.len() <= max_bytes {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let mut start = bytes.len() - max_bytes;
    // Skip at most three continuation bytes: the rest of a character cut in half.
    for _ in 0..3 {
        if bytes.get(start).is_some_and(|b| b & 0xC0 == 0x80) {
            start += 1;
        }
    }
    format!("…{}", String::from_utf8_lossy(&bytes[start..]))
}

#[cfg(test)]
mod tests {
    use super::tail_preview;

    #[test]
    fn preview_keeps_the_end_and_never_splits_a_character() {
        assert_eq!(tail_preview(b"short", 10), "short");
        // "é" is two bytes; cutting 3 bytes from the end lands inside it.
        let text = "aé!!".as_bytes();
        assert_eq!(tail_preview(text, 3), "…!!");
        assert_eq!(tail_preview("日本".as_bytes(), 4), "…本");
    }
}
