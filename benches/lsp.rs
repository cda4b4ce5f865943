//! Diagnostics after an edit: `cargo bench --bench lsp` (needs Debian's `python3-pylsp` and
//! `python3-pyflakes`).
//!
//! The same `write` of a Python file, alternately clean and broken, on a warm `pylsp`:
//! with diagnostics (runner shows the server the file and waits for its errors) and
//! without (no language server). Side by side, the peer: `pylsp` driven directly over its
//! stdio by this benchmark, timing what the server itself takes from the change to its
//! diagnostics. What runner adds is (with − without − the server's own time); the issue's
//! target is under 50 ms.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark that cannot set up has nothing to measure: it stops there"
)]

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use runner_permission::{AskPolicy, PolicyGate};
use runner_tool::lsp_client::LspServers;
use runner_tool::truncate::Truncator;
use runner_tool::{Conversation, Registry, ToolContext};

const TARGET_MS: f64 = 50.0;

/// The file, clean (`bad` false) or with one undefined name, made different each time so
/// every write is a change.
fn source(i: usize, bad: bool) -> String {
    let mut text = String::new();
    for k in 0..200 {
        text.push_str(&format!("def f{k}(x):\n    return x + {k} + {i}\n\n"));
    }
    if bad {
        text.push_str("print(undefined_name)\n");
    }
    text
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

fn main() {
    if !std::path::Path::new("/usr/bin/pylsp").exists() {
        eprintln!(
            "lsp bench: /usr/bin/pylsp is missing: apt-get install python3-pylsp python3-pyflakes"
        );
        std::process::exit(2);
    }
    let runs: usize = std::env::var("LSP_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tmp = tempfile::tempdir().expect("temp dir");
    let wt = std::fs::canonicalize(tmp.path()).expect("canonical");
    let file = wt.join("m.py");
    std::fs::write(&file, source(0, false)).expect("fixture");

    let (with, without) = rt.block_on(through_runner(&wt, runs));
    let own = rt.block_on(server_alone(&wt, runs));
    let (w, wo, s) = (median(with), median(without), median(own));
    let added = w - wo - s;
    println!("write of a 600-line Python file, median of {runs}:");
    println!("  runner, with diagnostics       {w:8.2} ms");
    println!("  runner, without                {wo:8.2} ms");
    println!("  pylsp alone (peer), its answer {s:8.2} ms");
    println!(
        "  runner adds beyond the server's answer: {added:.2} ms (target < {TARGET_MS} ms): {}",
        if added < TARGET_MS { "PASS" } else { "FAIL" }
    );
}

/// Writes through runner's registry with and without language servers; the server is
/// warmed first.
async fn through_runner(wt: &std::path::Path, runs: usize) -> (Vec<Duration>, Vec<Duration>) {
    let sandbox = runner_sandbox::local::in_process(wt, &[])
        .await
        .expect("in-process sandbox");
    let base = ToolContext::new(
        Arc::new(sandbox),
        Arc::new(Conversation::single_call("bench")),
        Arc::new(PolicyGate::new(AskPolicy::Allow)),
        Arc::new(Truncator::new(wt.join(".out"))),
    );
    let with_lsp = base
        .clone()
        .with_lsp(Arc::new(LspServers::new(&BTreeMap::new())));
    let registry = Registry::builtin();
    let path = wt.join("m.py").display().to_string();
    let mut times = (Vec::new(), Vec::new());
    for (ctx, into, expect) in [
        (&with_lsp, &mut times.0, true),
        (&base, &mut times.1, false),
    ] {
        for i in 0..runs + 3 {
            let bad = i % 2 == 1;
            let args = json!({"filePath": path, "content": source(i, bad)});
            let t = Instant::now();
            let r = registry.call("write", args, ctx).await;
            let took = t.elapsed();
            assert!(r.error.is_none(), "write failed: {:?}", r.error);
            assert_eq!(
                r.output.contains("undefined name"),
                bad && expect,
                "{}",
                r.output
            );
            if i >= 3 {
                into.push(took);
            }
        }
    }
    times
}

/// pylsp over its own stdio, no runner: the time from a change (and save) to the
/// diagnostics it publishes for it.
async fn server_alone(wt: &std::path::Path, runs: usize) -> Vec<Duration> {
    let mut child = tokio::process::Command::new("pylsp")
        .current_dir(wt)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start pylsp");
    let mut to = child.stdin.take().expect("stdin");
    let mut from = BufReader::new(child.stdout.take().expect("stdout"));
    let uri = format!("file://{}", wt.join("m.py").display());
    let root = format!("file://{}", wt.display());
    send(
        &mut to,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "processId": null, "rootUri": root, "capabilities": {}}}),
    )
    .await;
    while receive(&mut from).await.get("id") != Some(&json!(1)) {}
    send(
        &mut to,
        &json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
    )
    .await;
    send(&mut to, &json!({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
        "textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": source(0, false)}}}))
    .await;
    let mut times = Vec::new();
    for i in 0..runs + 3 {
        let text = source(i + 1, i % 2 == 1);
        let t = Instant::now();
        send(
            &mut to,
            &json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
            "textDocument": {"uri": uri, "version": i + 2}, "contentChanges": [{"text": text}]}}),
        )
        .await;
        send(
            &mut to,
            &json!({"jsonrpc": "2.0", "method": "textDocument/didSave", "params": {
            "textDocument": {"uri": uri}, "text": text}}),
        )
        .await;
        // The first publication after the change is the answer runner waits for too.
        loop {
            let m = receive(&mut from).await;
            if m["method"] == "textDocument/publishDiagnostics" && m["params"]["uri"] == uri {
                break;
            }
        }
        if i >= 3 {
            times.push(t.elapsed());
        }
    }
    times
}

async fn send(to: &mut tokio::process::ChildStdin, message: &Value) {
    let body = serde_json::to_vec(message).unwrap();
    to.write_all(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes())
        .await
        .unwrap();
    to.write_all(&body).await.unwrap();
    to.flush().await.unwrap();
}

async fn receive(from: &mut BufReader<tokio::process::ChildStdout>) -> Value {
    let mut length = 0;
    loop {
        let mut line = String::new();
        assert!(from.read_line(&mut line).await.unwrap() > 0, "pylsp ended");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("Content-Length:") {
            length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0u8; length];
    from.read_exact(&mut body).await.unwrap();
    serde_json::from_slice(&body).unwrap()
}
