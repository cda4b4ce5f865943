//! Benchmark: the agent controller's own time per step. A local scripted model (a real HTTP
//! server speaking OpenAI's streaming format, answering at once on a kept-alive connection)
//! drives sessions of `read` steps through the real `runner` binary on each backend.
//!
//! The figure is the gap the model sees: from its answer fully written to the next request
//! fully read, after a `read` step. In that gap the controller parses the stream, records
//! the turn, runs the call (its permission asks, the audit trail, the tool's round trips to
//! the sandbox server), records the result, builds the next request and sends it. The
//! `read` call's own time (as the loop timed it) is shown beside it.
//!
//! The named peer, run in the same process between the sessions: the bare HTTP round trip.
//! A plain client sends the same number of requests, each the size runner sent at that
//! step, to the same kind of scripted model and reads each answer to its end before sending
//! the next: what a step costs with no controller at all, measured by the same clock.
//!
//! Peak RSS is the runner process's own (its VmHWM, read while it runs), not the sandbox
//! server's. Targets: a median gap under 1 ms on none and landlock and under 1.5 ms on
//! docker, peak RSS under 40 MiB; the bench exits with failure when one is missed.
//!
//! `cargo bench --bench agent` (docker needs the engine and `runner image build`).
//! `AGENT_BENCH_STEPS` sets the steps per session (default 20), `AGENT_BENCH_RUNS` the
//! sessions per backend (default 5; the figures are medians over them, with their range),
//! and `AGENT_BENCH_BASELINE=PATH` adds another build of runner (an older commit's release
//! binary), run in turn with this one so that both see the same machine.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark that cannot set up has nothing to measure: it stops there"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::provider::{Exchange, Response, ScriptedModel, call, text};
use serde_json::{Value, json};

const BACKENDS: [&str; 3] = ["none", "landlock", "docker"];

/// One session's figures.
struct Session {
    /// Per step: the model's answer out to the next request in, in ms.
    gaps: Vec<f64>,
    /// Per step: the `read` call's own time, as the loop timed it.
    tool: Vec<f64>,
    /// Per request: the body's size, for the peer to send the same.
    request_bytes: Vec<usize>,
    peak_rss_mib: f64,
}

fn script(steps: u64) -> Vec<Response> {
    let mut script: Vec<Response> = (0..steps)
        .map(|n| {
            // Arguments differ per step so the doom-loop guard stays out of it.
            let args = json!({"filePath": "notes.txt", "limit": 10 + n % 40});
            Response::Stream(call("read", args))
        })
        .collect();
    script.push(Response::Stream(text("done")));
    script
}

/// Between each answer and the request after it, in ms.
fn gaps(exchanges: &[Exchange]) -> Vec<f64> {
    exchanges
        .windows(2)
        .map(|w| (w[1].received - w[0].answered).as_secs_f64() * 1e3)
        .collect()
}

/// One session of `steps` reads through `runner` on `backend`.
fn runner_session(runner: &Path, backend: &str, steps: u64) -> Session {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(tmp.path()).expect("canonical");
    let wt = base.join("wt");
    std::fs::create_dir_all(&wt).expect("wt");
    // A checkout, as a user's is: a direct run outside git stops before the model.
    common::git(&wt, &["init", "-q"]);
    let lines: String = (1..=50).map(|n| format!("line {n}\n")).collect();
    std::fs::write(wt.join("notes.txt"), lines).expect("file");
    let model = ScriptedModel::start(script(steps)).fast();
    let mut child = Command::new(runner)
        .current_dir(&wt)
        .env("XDG_DATA_HOME", base.join("data"))
        .env("XDG_CONFIG_HOME", base.join("config"))
        .env("OPENAI_BASE_URL", model.openai_base())
        .env("OPENAI_API_KEY", "bench")
        .args(["--sandbox", backend, "--model", "openai/bench", "--json"])
        .args(["--max-steps", &(steps + 1).to_string(), "go"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start runner");
    let hwm = watch_peak(child.id());
    let mut output = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut output)
        .expect("read events");
    let mut errors = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut errors);
    let status = child.wait().expect("wait for runner");
    assert!(
        status.success(),
        "{} on {backend}: runner failed ({status}):\n{output}\n{errors}",
        runner.display()
    );
    let events: Vec<Value> = output
        .lines()
        .map(|l| serde_json::from_str(l).expect("event"))
        .collect();
    let tool: Vec<f64> = events
        .iter()
        .filter(|e| e["type"] == "tool_end")
        .map(|e| e["duration_ms"].as_f64().unwrap_or(0.0))
        .collect();
    assert_eq!(tool.len() as u64, steps, "{backend}: every step read");
    let exchanges = model.exchanges();
    assert_eq!(
        exchanges.len() as u64,
        steps + 1,
        "{backend}: every turn asked"
    );
    Session {
        gaps: gaps(&exchanges),
        tool,
        request_bytes: exchanges.iter().map(|e| e.request_bytes).collect(),
        peak_rss_mib: hwm.join().unwrap_or(0) as f64 / 1024.0,
    }
}

/// The process's VmHWM in KiB, sampled until it exits: its own peak, not its children's
/// (wait4's figure would include the sandbox server).
fn watch_peak(pid: u32) -> std::thread::JoinHandle<u64> {
    let peak = Arc::new(AtomicU64::new(0));
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
                peak.fetch_max(kb, Ordering::Relaxed);
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        peak.load(Ordering::Relaxed)
    })
}

/// The peer: the same exchanges with no controller. Each request carries a body of the
/// size runner sent at that step; each answer is read to its last byte before the next
/// request goes.
fn bare_session(request_bytes: &[usize]) -> Vec<f64> {
    let steps = request_bytes.len() as u64 - 1;
    let model = ScriptedModel::start(script(steps)).fast();
    let stream = std::net::TcpStream::connect(("127.0.0.1", model.port)).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = stream;
    for &size in request_bytes {
        let body = filler(size);
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{}\r\ncontent-type: application/json\r\naccept: text/event-stream\r\ncontent-length: {}\r\n\r\n",
            model.port,
            body.len()
        );
        let mut request = head.into_bytes();
        request.extend_from_slice(&body);
        writer.write_all(&request).expect("send");
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("answer head");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().expect("length");
            }
        }
        let mut answer = vec![0; length];
        reader.read_exact(&mut answer).expect("answer");
    }
    gaps(&model.exchanges())
}

/// A JSON object of exactly `size` bytes (at least 10).
fn filler(size: usize) -> Vec<u8> {
    let pad = size.saturating_sub(10);
    format!("{{\"pad\":\"{}\"}}", "x".repeat(pad)).into_bytes()
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// A build's runs on one backend.
#[derive(Default)]
struct Runs {
    /// Per session: the median gap, the mean gap, the median tool time.
    gap: Vec<f64>,
    gap_mean: Vec<f64>,
    tool: Vec<f64>,
    peak_rss_mib: f64,
}

impl Runs {
    fn add(&mut self, s: &Session) {
        self.gap.push(median(&s.gaps));
        self.gap_mean.push(mean(&s.gaps));
        self.tool.push(median(&s.tool));
        self.peak_rss_mib = self.peak_rss_mib.max(s.peak_rss_mib);
    }

    fn range(&self) -> (f64, f64) {
        let min = self.gap.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.gap.iter().copied().fold(0.0, f64::max);
        (min, max)
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> ExitCode {
    let steps = env_u64("AGENT_BENCH_STEPS", 20).max(2);
    let runs = env_u64("AGENT_BENCH_RUNS", 5).max(1);
    let this = PathBuf::from(env!("CARGO_BIN_EXE_runner"));
    let baseline = std::env::var_os("AGENT_BENCH_BASELINE").map(PathBuf::from);
    let mut builds: Vec<(String, PathBuf)> = vec![("runner".into(), this)];
    if let Some(path) = baseline {
        builds.push((format!("baseline {}", path.display()), path));
    }
    println!(
        "agent loop: {runs} sessions of {steps} `read` steps per backend, scripted model on loopback\n"
    );
    // [backend][build], and the bare peer per backend.
    let mut figures: Vec<Vec<Runs>> = BACKENDS
        .iter()
        .map(|_| builds.iter().map(|_| Runs::default()).collect())
        .collect();
    let mut bare: Vec<Vec<f64>> = vec![Vec::new(); BACKENDS.len()];
    // Runs take turns (each backend, each build, the peer) so drift hits them alike.
    for _ in 0..runs {
        for (b, backend) in BACKENDS.iter().enumerate() {
            let mut sizes = Vec::new();
            for (k, (_, path)) in builds.iter().enumerate() {
                let s = runner_session(path, backend, steps);
                figures[b][k].add(&s);
                if k == 0 {
                    sizes = s.request_bytes;
                }
            }
            bare[b].push(median(&bare_session(&sizes)));
        }
    }
    println!(
        "{:<9} {:<8} {:>10} {:>17} {:>10} {:>10} {:>11} {:>9} {:>10}",
        "backend",
        "build",
        "gap/step",
        "range of runs",
        "mean",
        "read call",
        "bare HTTP",
        "×bare",
        "peak RSS"
    );
    let mut ok = true;
    for (b, backend) in BACKENDS.iter().enumerate() {
        let peer = median(&bare[b]);
        for (k, r) in figures[b].iter().enumerate() {
            let gap = median(&r.gap);
            let (lo, hi) = r.range();
            let label = if k == 0 { "runner" } else { "baseline" };
            println!(
                "{backend:<9} {label:<8} {gap:>7.3} ms {lo:>7.3}–{hi:>6.3} ms {:>7.3} ms {:>7.3} ms {peer:>8.3} ms {:>8.1}× {:>6.1} MiB",
                median(&r.gap_mean),
                median(&r.tool),
                gap / peer,
                r.peak_rss_mib
            );
            if k > 0 {
                continue;
            }
            let target = if *backend == "docker" { 1.5 } else { 1.0 };
            if gap >= target || r.peak_rss_mib >= 40.0 {
                println!("          ^ misses the target (gap < {target} ms, peak RSS < 40 MiB)");
                ok = false;
            }
        }
    }
    if builds.len() > 1 {
        println!("\nbaseline: {}", builds[1].0);
    }
    println!(
        "\ngap: the model's answer written to the next request read (median per session, then over sessions);\nbare HTTP: the same exchanges by a plain client, no controller."
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
