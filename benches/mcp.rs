//! Benchmark: what one tool call costs another agent through `runner mcp serve`, against
//! the same call made as `runner tool call` (a whole runner process per call, as a client
//! that shelled out to runner for each call would pay).
//!
//! The MCP side is one long-lived `runner mcp serve` session driven by rmcp's client over
//! the child's standard input and output; a call's round trip is the client's `tools/call`
//! from request to result: JSON-RPC on a pipe, the permission gate, the sandbox server's
//! round trip, the result's truncation. The sandbox is already up, as it is for every call
//! after the first in a real session. The other side times `runner tool call` processes
//! from spawn to exit, each opening and closing its own sandbox. The calls are a `read`
//! of a 50-line file and `bash true`, with arguments that differ per call so the
//! doom-loop guard stays out of it. Both on landlock and docker; the ratio is how many MCP
//! calls fit in one whole-process call.
//!
//! `cargo bench --bench mcp` (docker needs the engine and `runner image build`).
//! `MCP_BENCH_CALLS` sets the MCP calls per kind (default 200); a tenth as many whole
//! processes are timed (at least 5).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark that cannot set up has nothing to measure: it stops there"
)]

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

const RUNNER: &str = env!("CARGO_BIN_EXE_runner");

/// The arguments of call `n` of `kind`.
fn arguments(kind: &str, n: usize) -> Value {
    match kind {
        "read" => json!({ "filePath": "notes.txt", "limit": 10 + n % 40 }),
        _ => json!({ "command": format!("true {n}"), "description": "nothing" }),
    }
}

/// A git worktree with the file the `read` calls read, and a data folder beside it.
fn worktree(base: &Path) {
    let wt = base.join("wt");
    std::fs::create_dir_all(&wt).expect("worktree");
    let lines: String = (1..=50).map(|n| format!("line {n}\n")).collect();
    std::fs::write(wt.join("notes.txt"), lines).expect("file");
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&wt)
        .status()
        .expect("git runs");
    assert!(git.success(), "git init in {}", wt.display());
}

/// Milliseconds per call over `calls` MCP calls of `kind` in one `runner mcp serve`
/// session on `backend`, after a few calls to warm it.
async fn mcp_calls(base: &Path, backend: &str, kind: &str, calls: usize) -> f64 {
    let mut cmd = tokio::process::Command::new(RUNNER);
    cmd.args([
        "mcp",
        "serve",
        "--ask",
        "allow",
        "--sandbox",
        backend,
        "--root",
    ])
    .arg(base.join("wt"))
    .env("XDG_DATA_HOME", base.join("data"))
    .env("XDG_CONFIG_HOME", base.join("config"))
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .kill_on_drop(true);
    let mut child = cmd.spawn().expect("runner mcp serve starts");
    let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    let service = ().serve((stdout, stdin)).await.expect("the MCP session starts");
    let call = |n: usize| {
        let mut params = CallToolRequestParams::new(if kind == "read" { "read" } else { "bash" });
        params.arguments = arguments(kind, n).as_object().cloned();
        service.call_tool(params)
    };
    for n in 0..5 {
        let result = call(calls + n).await.expect("a warm-up call");
        assert_ne!(result.is_error, Some(true), "{backend} {kind}: {result:?}");
    }
    let started = Instant::now();
    for n in 0..calls {
        let result = call(n).await.expect("the call answers");
        assert_ne!(result.is_error, Some(true), "{backend} {kind}: {result:?}");
    }
    let per_call = started.elapsed().as_secs_f64() * 1000.0 / calls as f64;
    service.cancel().await.expect("the session closes");
    let _ = child.wait().await;
    per_call
}

/// Milliseconds per `runner tool call` process of `kind` on `backend`, spawn to exit.
fn process_calls(base: &Path, backend: &str, kind: &str, calls: usize) -> f64 {
    let tool = if kind == "read" { "read" } else { "bash" };
    let mut total = Duration::ZERO;
    for n in 0..calls {
        let mut cmd = Command::new(RUNNER);
        cmd.args(["tool", "call", "--sandbox", backend, "--root"])
            .arg(base.join("wt"))
            .arg(tool)
            .arg(arguments(kind, n).to_string())
            .env("XDG_DATA_HOME", base.join("data"))
            .env("XDG_CONFIG_HOME", base.join("config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let out = cmd.output().expect("runner tool call starts");
        total += started.elapsed();
        assert!(
            out.status.success(),
            "runner tool call --sandbox {backend} {tool} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    total.as_secs_f64() * 1000.0 / calls as f64
}

fn main() -> ExitCode {
    let calls: usize = std::env::var("MCP_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let processes = (calls / 10).max(5);
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(tmp.path()).expect("canonical");
    worktree(&base);
    let runtime = tokio::runtime::Runtime::new().expect("tokio");
    println!(
        "one tool call: runner mcp serve ({calls} calls in one session) against runner tool \
         call ({processes} processes)\n"
    );
    println!(
        "{:<9} {:<5} {:>14} {:>18} {:>8}",
        "backend", "tool", "MCP per call", "process per call", "ratio"
    );
    for backend in ["landlock", "docker"] {
        for kind in ["read", "bash"] {
            let mcp = runtime.block_on(mcp_calls(&base, backend, kind, calls));
            let process = process_calls(&base, backend, kind, processes);
            println!(
                "{backend:<9} {kind:<5} {mcp:>11.3} ms {process:>15.1} ms {:>7.0}×",
                process / mcp
            );
        }
    }
    ExitCode::SUCCESS
}
