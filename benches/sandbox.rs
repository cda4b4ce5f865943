//! Benchmark: the sandbox backends against their plain-Docker peers, measured side by side
//! in the same run.
//!
//! 1. Tool call round trip through the docker backend (the `read` tool on a small file, the
//!    `bash` tool running `true`: registry → permission gate → sandbox protocol over the
//!    attached container stdio → server → back) against `docker exec` of the same command
//!    (`cat FILE`, `true`) into the same running container. Targets: read at least 20×
//!    faster than `docker exec` with a median under 2 ms; bash no slower than `docker exec`.
//! 2. Sandbox start: landlock started, first request answered and closed (every process
//!    reaped, its cgroup removed) in under 10 ms more than the `none` backend doing the
//!    same, both in process and as a whole `runner tool call bash true` process (each run
//!    after a pause, so no run borrows the kernel state the one before left: a cgroup v1
//!    attach can wait for an RCU grace period when it comes cold); docker ready within
//!    1.5× of `docker run --rm IMAGE true`.
//!
//! Each pair alternates runner and peer so drift hits both alike. Run with
//! `cargo bench --bench sandbox` (needs a running engine and `runner image build`).
//! `SANDBOX_BENCH_RUNS` sets the number of timed runs (default 30).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use runner::permission::{AskPolicy, PolicyGate};
use runner::sandbox::spec::{DEFAULT_IMAGE, SandboxSpec};
use runner::sandbox::{BackendKind, Sandbox};
use runner::tool::truncate::Truncator;
use runner::tool::{Registry, Session, ToolContext};
use serde_json::json;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The runner binary beside this bench executable (target/<triple>/release/runner).
fn runner_exe() -> PathBuf {
    let me = std::env::current_exe().expect("bench path");
    let dir = me.parent().and_then(Path::parent).expect("target dir");
    let exe = dir.join("runner");
    assert!(
        exe.exists(),
        "{} is missing: `cargo build --release` first (cargo bench builds it)",
        exe.display()
    );
    exe
}

fn spec(kind: BackendKind, wt: &Path) -> SandboxSpec {
    let mut spec = SandboxSpec::new(kind, wt).expect("spec");
    spec.server_exe = runner_exe();
    spec
}

fn docker_cli(args: &[&str]) -> Duration {
    let start = Instant::now();
    let status = Command::new("docker")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run the docker CLI");
    let took = start.elapsed();
    assert!(status.success(), "docker {args:?} failed");
    took
}

struct Row {
    name: &'static str,
    runner: Duration,
    peer: Duration,
    peer_name: &'static str,
    pass: bool,
    target: String,
}

fn main() -> ExitCode {
    let runs: usize = std::env::var("SANDBOX_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tmp = tempfile::tempdir().expect("temp dir");
    let wt = std::fs::canonicalize(tmp.path()).expect("canonical");
    std::fs::write(wt.join("small.txt"), "one\ntwo\nthree\n").expect("fixture");
    let mut rows = Vec::new();

    // 1. Round trips into one running container.
    let sandbox: Sandbox = rt
        .block_on(runner::sandbox::open(&spec(BackendKind::Docker, &wt)))
        .expect("open the docker sandbox (is the engine running? `runner image build`?)");
    let id = sandbox.container_id.clone().expect("container id");
    let ctx = ToolContext::new(
        Arc::new(sandbox),
        Arc::new(Session::single_call("bench")),
        Arc::new(PolicyGate::new(AskPolicy::Allow)),
        Arc::new(Truncator::new(wt.join(".out"))),
    );
    let registry = Registry::builtin();
    let small = wt.join("small.txt").display().to_string();
    let read_args = json!({ "filePath": small });
    let bash_args = json!({ "command": "true", "description": "bench" });
    let (mut read_runner, mut read_peer, mut bash_runner, mut bash_peer) =
        (vec![], vec![], vec![], vec![]);
    for i in 0..runs + 3 {
        let t = Instant::now();
        let r = rt.block_on(registry.call("read", read_args.clone(), &ctx));
        let took = t.elapsed();
        assert!(
            r.error.is_none() && r.output.contains("three"),
            "read failed: {:?}",
            r.error
        );
        let peer = docker_cli(&["exec", &id, "cat", &small]);
        let t = Instant::now();
        let r = rt.block_on(registry.call("bash", bash_args.clone(), &ctx));
        let took_bash = t.elapsed();
        assert!(r.error.is_none(), "bash failed: {:?}", r.error);
        let peer_bash = docker_cli(&["exec", &id, "true"]);
        if i >= 3 {
            read_runner.push(took);
            read_peer.push(peer);
            bash_runner.push(took_bash);
            bash_peer.push(peer_bash);
        }
    }
    let (rr, rp) = (median(read_runner), median(read_peer));
    rows.push(Row {
        name: "read small file",
        runner: rr,
        peer: rp,
        peer_name: "docker exec cat",
        pass: rp.as_secs_f64() / rr.as_secs_f64() >= 20.0 && rr < Duration::from_millis(2),
        target: "≥ 20× faster, median < 2 ms".into(),
    });
    let (br, bp) = (median(bash_runner), median(bash_peer));
    rows.push(Row {
        name: "bash `true`",
        runner: br,
        peer: bp,
        peer_name: "docker exec true",
        pass: br <= bp,
        target: "no slower".into(),
    });
    drop(ctx);

    // 2. Start-up.
    let (mut ll, mut nn, mut dk, mut dr) = (vec![], vec![], vec![], vec![]);
    let start_runs = runs.min(15);
    let open_close = |kind: BackendKind| {
        let t = Instant::now();
        let sb = rt
            .block_on(runner::sandbox::open(&spec(kind, &wt)))
            .expect("open sandbox");
        drop(sb);
        t.elapsed()
    };
    for i in 0..start_runs + 2 {
        std::thread::sleep(Duration::from_millis(100));
        let took_ll = open_close(BackendKind::Landlock);
        std::thread::sleep(Duration::from_millis(100));
        let took_nn = open_close(BackendKind::None);
        let t = Instant::now();
        let sb = rt
            .block_on(runner::sandbox::open(&spec(BackendKind::Docker, &wt)))
            .expect("open docker");
        let took_dk = t.elapsed();
        drop(sb);
        let took_dr = docker_cli(&["run", "--rm", DEFAULT_IMAGE, "true"]);
        if i >= 2 {
            ll.push(took_ll);
            nn.push(took_nn);
            dk.push(took_dk);
            dr.push(took_dr);
        }
    }
    let (ll, nn) = (median(ll), median(nn));
    rows.push(Row {
        name: "landlock open+close",
        runner: ll,
        peer: nn,
        peer_name: "none open+close",
        pass: ll < nn + Duration::from_millis(10),
        target: "< peer + 10 ms".into(),
    });
    // The whole process, as a user meets it.
    let tool_call = |backend: &str| {
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        let status = Command::new(runner_exe())
            .args([
                "tool",
                "call",
                "bash",
                r#"{"command":"true","description":"b"}"#,
            ])
            .args(["--sandbox", backend, "--root"])
            .arg(&wt)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("runner tool call");
        assert!(
            status.success(),
            "runner tool call --sandbox {backend} failed"
        );
        t.elapsed()
    };
    let (mut pl, mut pn) = (vec![], vec![]);
    for i in 0..start_runs + 2 {
        let (l, n) = (tool_call("landlock"), tool_call("none"));
        if i >= 2 {
            pl.push(l);
            pn.push(n);
        }
    }
    let (pl, pn) = (median(pl), median(pn));
    rows.push(Row {
        name: "tool call bash, landlock",
        runner: pl,
        peer: pn,
        peer_name: "the same, --sandbox none",
        pass: pl < pn + Duration::from_millis(10),
        target: "< peer + 10 ms".into(),
    });
    let (dk, dr) = (median(dk), median(dr));
    rows.push(Row {
        name: "docker sandbox ready",
        runner: dk,
        peer: dr,
        peer_name: "docker run --rm IMAGE true",
        pass: dk.as_secs_f64() <= 1.5 * dr.as_secs_f64(),
        target: "≤ 1.5× peer".into(),
    });

    println!(
        "{:<24} {:>11} {:>11}  {:<28} {:>9}  {:<28} result",
        "case", "runner ms", "peer ms", "peer", "peer/run", "target"
    );
    let mut ok = true;
    for r in &rows {
        ok &= r.pass;
        println!(
            "{:<24} {:>11.3} {:>11.3}  {:<28} {:>9.2}  {:<28} {}",
            r.name,
            ms(r.runner),
            ms(r.peer),
            r.peer_name,
            r.peer.as_secs_f64() / r.runner.as_secs_f64(),
            r.target,
            if r.pass { "ok" } else { "MISSED" }
        );
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
