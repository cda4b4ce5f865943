//! Benchmark: the agent loop's own cost. A local scripted model (a real HTTP server
//! speaking OpenAI's streaming format, answering at once) drives a 100-step session, one
//! `read` or one `bash true` per step, through the real `runner` binary on each backend.
//!
//! Per step, the controller's overhead is the session's wall time (from the session file's
//! point of view: after the sandbox is up, until the end) minus the tools' own time (each
//! call as the loop timed it), divided by the steps: the HTTP round trip, SSE parsing,
//! dispatch, events, the session file. Peak RSS is the runner process's own (its VmHWM, read while it runs).
//! Targets: under 2 ms per step and under 40 MB on none and landlock; docker adds no more
//! per step than a docker tool call costs (its `bash true` figure, measured here too, as
//! `cargo bench --bench sandbox` measures it against `docker exec`).
//!
//! `cargo bench --bench agent` (docker needs the engine and `runner image build`).
//! `AGENT_BENCH_STEPS` sets the steps (default 100).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark that cannot set up has nothing to measure: it stops there"
)]

use std::process::{Command, ExitCode, Stdio};

use common::provider::{Response, ScriptedModel, call, text};
use serde_json::{Value, json};

struct Figures {
    steps: u64,
    overhead_per_step_ms: f64,
    tool_mean_ms: f64,
    peak_rss_mb: f64,
}

fn session(backend: &str, kind: &str, steps: u64) -> Figures {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(tmp.path()).expect("canonical");
    let wt = base.join("wt");
    std::fs::create_dir_all(&wt).expect("wt");
    // A checkout, as a user's is: a direct run outside git stops before the model.
    common::git(&wt, &["init", "-q"]);
    let lines: String = (1..=50).map(|n| format!("line {n}\n")).collect();
    std::fs::write(wt.join("notes.txt"), lines).expect("file");
    let mut script: Vec<Response> = (0..steps)
        .map(|n| {
            // Arguments differ per step so the doom-loop guard stays out of it.
            let args = match kind {
                "read" => (
                    "read",
                    json!({"filePath": "notes.txt", "limit": 10 + n % 40}),
                ),
                _ => (
                    "bash",
                    json!({"command": format!("true {n}"), "description": "nothing"}),
                ),
            };
            Response::Stream(call(args.0, args.1))
        })
        .collect();
    script.push(Response::Stream(text("done")));
    let model = ScriptedModel::start(script).fast();
    let mut child = Command::new(env!("CARGO_BIN_EXE_runner"))
        .current_dir(&wt)
        .env("XDG_DATA_HOME", base.join("data"))
        .env("XDG_CONFIG_HOME", base.join("config"))
        .env("OPENAI_BASE_URL", model.openai_base())
        .env("OPENAI_API_KEY", "bench")
        .args(["--sandbox", backend, "--model", "openai/bench", "--json"])
        .args(["--max-steps", &(steps + 1).to_string(), "go"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start runner");
    let pid = child.id() as i32;
    // The runner's own peak (VmHWM), not its children's: wait4's figure would include the
    // sandbox server and the commands.
    let hwm = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watcher = {
        let hwm = hwm.clone();
        std::thread::spawn(move || {
            while let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                if status.contains("State:\tZ") {
                    break;
                }
                if let Some(kb) = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                {
                    hwm.fetch_max(kb, std::sync::atomic::Ordering::Relaxed);
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    let output = {
        use std::io::Read;
        let mut out = String::new();
        child
            .stdout
            .take()
            .expect("stdout")
            .read_to_string(&mut out)
            .expect("read events");
        out
    };
    let _ = watcher.join();
    let status = child.wait().expect("wait for runner");
    assert!(
        status.success(),
        "{backend} {kind}: runner failed ({status}):\n{output}"
    );
    let events: Vec<Value> = output
        .lines()
        .map(|l| serde_json::from_str(l).expect("event"))
        .collect();
    let tool_ms: f64 = events
        .iter()
        .filter(|e| e["type"] == "tool_end")
        .map(|e| e["duration_ms"].as_f64().unwrap_or(0.0))
        .sum();
    let end = events
        .iter()
        .find(|e| e["type"] == "session_end")
        .expect("session_end");
    let total_ms = end["duration_ms"].as_f64().expect("duration");
    let done = end["steps"].as_u64().expect("steps");
    assert_eq!(done, steps + 1, "{backend} {kind}: every step ran");
    Figures {
        steps: done,
        overhead_per_step_ms: (total_ms - tool_ms) / done as f64,
        tool_mean_ms: tool_ms / steps as f64,
        peak_rss_mb: hwm.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1024.0,
    }
}

fn main() -> ExitCode {
    let steps: u64 = std::env::var("AGENT_BENCH_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let mut ok = true;
    println!("agent loop, {steps} steps per session, scripted model on loopback\n");
    println!(
        "{:<9} {:<5} {:>16} {:>14} {:>12}",
        "backend", "tool", "overhead/step", "tool mean", "peak RSS"
    );
    let mut none_overhead = 0.0_f64;
    for backend in ["none", "landlock", "docker"] {
        for kind in ["read", "bash"] {
            let f = session(backend, kind, steps);
            let _ = f.steps;
            println!(
                "{backend:<9} {kind:<5} {:>13.3} ms {:>11.3} ms {:>9.1} MB",
                f.overhead_per_step_ms, f.tool_mean_ms, f.peak_rss_mb
            );
            match backend {
                "none" | "landlock" => {
                    if backend == "none" {
                        none_overhead = none_overhead.max(f.overhead_per_step_ms);
                    }
                    if f.overhead_per_step_ms >= 2.0 || f.peak_rss_mb >= 40.0 {
                        println!("          ^ misses the target (< 2 ms per step, < 40 MB)");
                        ok = false;
                    }
                }
                _ => {
                    // What docker adds to the loop, against what one docker tool call costs.
                    let added = f.overhead_per_step_ms - none_overhead;
                    let ratio = added / f.tool_mean_ms.max(1e-9);
                    println!(
                        "          docker adds {added:.3} ms per step = {ratio:.2}× its own {kind} call ({:.3} ms)",
                        f.tool_mean_ms
                    );
                    if ratio > 1.0 {
                        println!("          ^ misses the target (≤ 1× the per-call figure)");
                        ok = false;
                    }
                }
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
