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
//! 2b. The wall's self-test at start (`SANDBOX_BENCH_ONLY=selftest`): what it costs, as
//!    the host waits for it (canary made, round trip, judging), beside the whole start it
//!    is part of, on landlock and docker. Targets: under 5 ms on landlock, under 20 ms on
//!    docker.
//!
//! 3. The allow-list proxy: one 100 MB download from a loopback server through
//!    `--network allowlist` against the same download with `--network host` (target at
//!    least 0.5× its speed), timed by the client inside the sandbox.
//! 4. A copy workspace for a 10,000-file, 200 MB worktree, against one `cp -a` of it
//!    (target under 1 s where the file system makes reflinks; reported either way).
//!    `SANDBOX_BENCH_COPY_DIR=DIR` puts the worktree and the copies on DIR's file system
//!    (an XFS or btrfs mount, for reflinks).
//! 5. Review and apply of a copy (`runner changes ID`, `runner apply ID`, each a whole
//!    process): one holding a new 100 GiB sparse file, one holding 100,000 new small files,
//!    and a 100,000-file copy with one file changed. Target: peak RSS under 100 MiB in
//!    every case; the time is reported next to `diff -rq` of the two trees and `cp -a` of
//!    the copy, which do the same reading and writing without review or staging.
//!
//! 6. Runtimes, side by side on one engine (`SANDBOX_BENCH_ENGINE=unix:///…`, default
//!    DOCKER_HOST or the local socket; skipped with a note when the engine has no runsc):
//!    the read and `bash true` round trips and the sandbox start of (1) and (2), under runc
//!    and under runsc (gVisor), each against `docker exec` / `docker run --runtime` under
//!    the same runtime. Reported, no target: gVisor's price is the figure.
//! 7. Engines side by side (`SANDBOX_BENCH_ONLY=engines`): on each engine host of
//!    `SANDBOX_BENCH_ENGINES` (comma-separated; default: the machine's Docker and rootful
//!    Podman), sandbox start (opened, first request answered), the `read` and `bash true`
//!    round trips, and `docker -H HOST run --rm IMAGE true`, the engines taking turns.
//!    Reported, with no target: it shows what an engine costs.
//!
//! 8. `runner exec -- true`, the whole process (`SANDBOX_BENCH_ONLY=exec`): under landlock
//!    against `bwrap … true` (bubblewrap, where installed: the namespaces-only wall other
//!    agents use) and `docker run --rm IMAGE true`, and under docker against the same
//!    `docker run` (target ≤ 1.5× peer: exec adds its server and seccomp, not a second
//!    container). The others are reported.
//!
//! Each pair alternates runner and peer so drift hits both alike. Run with
//! `cargo bench --bench sandbox` (needs a running engine and `runner image build`).
//! `SANDBOX_BENCH_RUNS` sets the number of timed runs (default 30).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark that cannot set up has nothing to measure: it stops there"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use runner_permission::{AskPolicy, PolicyGate};
use runner_sandbox::spec::{DEFAULT_IMAGE, SandboxSpec};
use runner_sandbox::{BackendKind, Sandbox};
use runner_tool::truncate::Truncator;
use runner_tool::{Conversation, Registry, ToolContext};
use serde_json::json;

/// `SANDBOX_BENCH_ONLY=proxy,copy` runs only those sections (`roundtrip`, `startup`,
/// `selftest`, `proxy`, `copy`, `review`, `runtimes`, `engines`, `exec`); unset, all of
/// them.
fn wants(section: &str) -> bool {
    std::env::var("SANDBOX_BENCH_ONLY")
        .map(|only| only.split(',').any(|s| s.trim() == section))
        .unwrap_or(true)
}

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
    name: String,
    runner: Duration,
    peer: Duration,
    peer_name: &'static str,
    pass: bool,
    target: String,
}

fn main() -> ExitCode {
    // A file system that makes reflinks (an XFS or btrfs mount), for the copy workspace:
    // its copies and the worktree it copies must both live there.
    if let Some(dir) = std::env::var_os("SANDBOX_BENCH_COPY_DIR") {
        // SAFETY: the first thing main does, before any thread exists.
        unsafe { std::env::set_var("XDG_DATA_HOME", Path::new(&dir).join("data")) };
    }
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

    if wants("roundtrip") {
        // 1. Round trips into one running container.
        let sandbox: Sandbox = rt
            .block_on(runner_sandbox::open(&spec(BackendKind::Docker, &wt)))
            .expect("open the docker sandbox (is the engine running? `runner image build`?)");
        let id = sandbox.container_id.clone().expect("container id");
        let ctx = ToolContext::new(
            Arc::new(sandbox),
            Arc::new(Conversation::single_call("bench")),
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
            name: "read small file".into(),
            runner: rr,
            peer: rp,
            peer_name: "docker exec cat",
            pass: rp.as_secs_f64() / rr.as_secs_f64() >= 20.0 && rr < Duration::from_millis(2),
            target: "≥ 20× faster, median < 2 ms".into(),
        });
        let (br, bp) = (median(bash_runner), median(bash_peer));
        rows.push(Row {
            name: "bash `true`".into(),
            runner: br,
            peer: bp,
            peer_name: "docker exec true",
            pass: br <= bp,
            target: "no slower".into(),
        });
        drop(ctx);
    }
    if wants("startup") {
        // 2. Start-up.
        let (mut ll, mut nn, mut dk, mut dr) = (vec![], vec![], vec![], vec![]);
        let start_runs = runs.min(15);
        let open_close = |kind: BackendKind| {
            let t = Instant::now();
            let sb = rt
                .block_on(runner_sandbox::open(&spec(kind, &wt)))
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
                .block_on(runner_sandbox::open(&spec(BackendKind::Docker, &wt)))
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
            name: "landlock open+close".into(),
            runner: ll,
            peer: nn,
            peer_name: "none open+close",
            pass: ll < nn + Duration::from_millis(10),
            target: "< peer + 10 ms".into(),
        });
        // The whole process, as a user meets it.
        let tool_call = |backend: &str, network: &str| {
            std::thread::sleep(Duration::from_millis(100));
            let t = Instant::now();
            let status = Command::new(runner_exe())
                .args([
                    "tool",
                    "call",
                    "bash",
                    r#"{"command":"true","description":"b"}"#,
                ])
                .args(["--sandbox", backend, "--network", network, "--root"])
                .arg(&wt)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("runner tool call");
            assert!(
                status.success(),
                "runner tool call --sandbox {backend} --network {network} failed"
            );
            t.elapsed()
        };
        let (mut pl, mut pn, mut pa) = (vec![], vec![], vec![]);
        for i in 0..start_runs + 2 {
            let (l, n, a) = (
                tool_call("landlock", "none"),
                tool_call("none", "none"),
                tool_call("landlock", "allowlist"),
            );
            if i >= 2 {
                pl.push(l);
                pn.push(n);
                pa.push(a);
            }
        }
        let (pl, pn, pa) = (median(pl), median(pn), median(pa));
        rows.push(Row {
            name: "tool call bash, landlock".into(),
            runner: pl,
            peer: pn,
            peer_name: "the same, --sandbox none",
            pass: pl < pn + Duration::from_millis(10),
            target: "< peer + 10 ms".into(),
        });
        rows.push(Row {
            name: "… landlock allowlist".into(),
            runner: pa,
            peer: pn,
            peer_name: "the same, --sandbox none",
            pass: pa < pn + Duration::from_millis(15),
            target: "< peer + 15 ms".into(),
        });
        match codex_sandbox_true() {
            Some((exe, codex)) => println!(
                "peer on this machine: `codex sandbox -- true` {:.3} ms (median of 15; {}), against {:.3} ms for the whole landlock tool call",
                ms(codex),
                exe.display(),
                ms(pl)
            ),
            None => {
                println!(
                    "peer not installed here: codex (its `codex sandbox -- true` is not measured)"
                )
            }
        }
        let (dk, dr) = (median(dk), median(dr));
        rows.push(Row {
            name: "docker sandbox ready".into(),
            runner: dk,
            peer: dr,
            peer_name: "docker run --rm IMAGE true",
            pass: dk.as_secs_f64() <= 1.5 * dr.as_secs_f64(),
            target: "≤ 1.5× peer".into(),
        });
    }
    if wants("selftest") {
        rows.extend(self_test_cost(&rt, &wt, runs.min(15)));
    }
    if wants("proxy") {
        // 3. The allow-list proxy's throughput against the host's own network.
        let (proxy, host) = proxy_throughput(&wt, runs.min(5));
        rows.push(Row {
            name: "100 MB through the proxy".into(),
            runner: proxy,
            peer: host,
            peer_name: "the same, --network host",
            pass: host.as_secs_f64() / proxy.as_secs_f64() >= 0.5,
            target: "≥ 0.5× peer".into(),
        });
    }
    if wants("copy") {
        // 4. A copy workspace's set-up.
        let (copy, cp) = copy_setup(runs.min(3));
        rows.push(Row {
            name: "copy workspace set-up".into(),
            runner: copy,
            peer: cp,
            peer_name: "cp -a of the worktree, once",
            pass: copy < Duration::from_secs(1) || !reflinks_work(),
            target: "< 1 s where reflinks work".into(),
        });
        println!(
            "reflinks on this file system: {}",
            if reflinks_work() {
                "yes"
            } else {
                "no (a plain copy: the 1 s target does not apply)"
            }
        );
    }

    if wants("review") {
        // 5. Review and apply in bounded memory.
        rows.extend(review_and_apply());
    }
    if wants("runtimes") {
        // 6. runc and runsc side by side on one engine.
        rows.extend(runtimes(&rt, &wt, runs));
    }
    if wants("engines") {
        // 7. The same sandbox on each engine.
        engines_side_by_side(&rt, &wt, runs.min(15));
    }
    if wants("exec") {
        // 8. One program in a new sandbox, as `runner exec` runs it.
        rows.extend(exec_true(&wt, runs.min(15)));
    }

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

/// 2b. The self-test's share of each start: the report's own time (the host waiting for
/// it) beside the open it is part of, median of `runs` starts per backend.
fn self_test_cost(rt: &tokio::runtime::Runtime, wt: &Path, runs: usize) -> Vec<Row> {
    let mut rows = Vec::new();
    for (kind, goal) in [
        (BackendKind::Landlock, Duration::from_millis(5)),
        (BackendKind::Docker, Duration::from_millis(20)),
    ] {
        let (mut tests, mut starts) = (vec![], vec![]);
        for i in 0..runs + 2 {
            std::thread::sleep(Duration::from_millis(50));
            let t = Instant::now();
            let sandbox = rt
                .block_on(runner_sandbox::open(&spec(kind, wt)))
                .expect("open sandbox");
            let start = t.elapsed();
            let report = sandbox
                .self_test
                .clone()
                .expect("a walled start has a report");
            drop(sandbox);
            if i >= 2 {
                tests.push(Duration::from_micros(report.total_micros));
                starts.push(start);
            }
        }
        let test = median(tests);
        rows.push(Row {
            name: format!("{} self-test at start", kind.name()),
            runner: test,
            peer: median(starts),
            peer_name: "the whole start (self-test included)",
            pass: test < goal,
            target: format!("< {} ms", goal.as_millis()),
        });
    }
    rows
}

/// Section 8: `runner exec --sandbox landlock|docker -- true` against `docker run --rm
/// IMAGE true` and, where bubblewrap is installed, `bwrap … true`; each run after a pause,
/// the four taking turns.
fn exec_true(wt: &Path, runs: usize) -> Vec<Row> {
    let timed = |program: &str, args: &[&str]| {
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        let status = Command::new(program)
            .args(args)
            .current_dir(wt)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(status.success(), "{program} {args:?} failed");
        t.elapsed()
    };
    let runner = runner_exe().display().to_string();
    let root = wt.display().to_string();
    let exec = |backend: &str| {
        timed(
            &runner,
            &["exec", "--sandbox", backend, "--root", &root, "--", "true"],
        )
    };
    const BWRAP: [&str; 12] = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
    ];
    let bwrap = Command::new("bwrap")
        .args(BWRAP)
        .arg("true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let (mut ll, mut dk, mut dr, mut bw) = (vec![], vec![], vec![], vec![]);
    for i in 0..runs + 2 {
        let (l, d, r) = (
            exec("landlock"),
            exec("docker"),
            timed(
                "docker",
                &["run", "--rm", "--network", "none", DEFAULT_IMAGE, "true"],
            ),
        );
        let b = bwrap.then(|| timed("bwrap", &[&BWRAP[..], &["true"]].concat()));
        if i >= 2 {
            ll.push(l);
            dk.push(d);
            dr.push(r);
            bw.extend(b);
        }
    }
    let (ll, dk, dr) = (median(ll), median(dk), median(dr));
    let mut rows = vec![
        Row {
            name: "exec landlock -- true".into(),
            runner: ll,
            peer: dr,
            peer_name: "docker run --rm IMAGE true",
            pass: true,
            target: "reported".into(),
        },
        Row {
            name: "exec docker -- true".into(),
            runner: dk,
            peer: dr,
            peer_name: "docker run --rm IMAGE true",
            pass: dk.as_secs_f64() <= 1.5 * dr.as_secs_f64(),
            target: "≤ 1.5× peer".into(),
        },
    ];
    if bw.is_empty() {
        println!("peer not installed here: bwrap (apt-get install bubblewrap)");
    } else {
        rows.push(Row {
            name: "exec landlock -- true".into(),
            runner: ll,
            peer: median(bw),
            peer_name: "bwrap … true",
            pass: true,
            target: "reported".into(),
        });
    }
    rows
}

/// Section 6: per runtime, the read and bash round trips and the sandbox start, each with
/// its `docker` peer under the same runtime; the runtimes alternate run by run.
fn runtimes(rt: &tokio::runtime::Runtime, wt: &Path, runs: usize) -> Vec<Row> {
    let host = std::env::var("SANDBOX_BENCH_ENGINE")
        .ok()
        .or_else(|| std::env::var("DOCKER_HOST").ok());
    let have = rt
        .block_on(async {
            let docker = runner_sandbox::docker::engine::connect_to(host.as_deref()).await?;
            runner_sandbox::docker::engine::runtimes(&docker).await
        })
        .map(|(names, _)| names)
        .unwrap_or_default();
    if !have.iter().any(|n| n == "runsc") {
        println!(
            "runtimes: the engine {} has no runsc ({}); set SANDBOX_BENCH_ENGINE to one that has (see docs/SANDBOXES.md, gVisor)",
            host.as_deref().unwrap_or("(default)"),
            have.join(", ")
        );
        return Vec::new();
    }
    let cli = |args: &[&str]| {
        let mut all: Vec<&str> = Vec::new();
        if let Some(h) = &host {
            all.extend(["-H", h.as_str()]);
        }
        all.extend(args);
        docker_cli(&all)
    };
    let names = ["runc", "runsc"];
    let open = |runtime: &str| {
        let mut s = spec(BackendKind::Docker, wt);
        s.docker.host = host.clone();
        s.docker.runtime = vec![runtime.to_string()];
        let t = Instant::now();
        let sb = rt
            .block_on(runner_sandbox::open(&s))
            .expect("open the docker sandbox");
        (sb, t.elapsed())
    };
    let registry = Registry::builtin();
    let small = wt.join("small.txt").display().to_string();
    let read_args = json!({ "filePath": small });
    let bash_args = json!({ "command": "true", "description": "bench" });
    // [runtime][read, read peer, bash, bash peer, start, start peer]
    let mut times: Vec<[Vec<Duration>; 6]> = names.iter().map(|_| Default::default()).collect();
    let ctxs: Vec<(ToolContext, String)> = names
        .iter()
        .map(|r| {
            let (sb, _) = open(r);
            let id = sb.container_id.clone().expect("container id");
            let ctx = ToolContext::new(
                Arc::new(sb),
                Arc::new(Conversation::single_call("bench")),
                Arc::new(PolicyGate::new(AskPolicy::Allow)),
                Arc::new(Truncator::new(wt.join(".out"))),
            );
            (ctx, id)
        })
        .collect();
    for i in 0..runs + 3 {
        for (k, (ctx, id)) in ctxs.iter().enumerate() {
            let t = Instant::now();
            let r = rt.block_on(registry.call("read", read_args.clone(), ctx));
            let read = t.elapsed();
            assert!(r.error.is_none(), "read under {}: {:?}", names[k], r.error);
            let read_peer = cli(&["exec", id, "cat", &small]);
            let t = Instant::now();
            let r = rt.block_on(registry.call("bash", bash_args.clone(), ctx));
            let bash = t.elapsed();
            assert!(r.error.is_none(), "bash under {}: {:?}", names[k], r.error);
            let bash_peer = cli(&["exec", id, "true"]);
            if i >= 3 {
                for (slot, d) in [read, read_peer, bash, bash_peer].into_iter().enumerate() {
                    times[k][slot].push(d);
                }
            }
        }
    }
    drop(ctxs);
    for i in 0..runs.min(10) + 1 {
        for (k, r) in names.iter().enumerate() {
            let (sb, took) = open(r);
            drop(sb);
            let peer = cli(&[
                "run",
                "--rm",
                "--network",
                "none",
                "--runtime",
                r,
                DEFAULT_IMAGE,
                "true",
            ]);
            if i >= 1 {
                times[k][4].push(took);
                times[k][5].push(peer);
            }
        }
    }
    let mut rows = Vec::new();
    for (k, r) in names.iter().enumerate() {
        let [read, read_peer, bash, bash_peer, start, start_peer] = std::mem::take(&mut times[k]);
        for (what, mine, peer, peer_name) in [
            ("read small file", read, read_peer, "docker exec cat"),
            ("bash `true`", bash, bash_peer, "docker exec true"),
            (
                "docker sandbox ready",
                start,
                start_peer,
                "docker run --rm IMAGE true",
            ),
        ] {
            rows.push(Row {
                name: format!("{r}: {what}"),
                runner: median(mine),
                peer: median(peer),
                peer_name,
                pass: true,
                target: "reported (same runtime)".into(),
            });
        }
    }
    rows
}

/// `codex sandbox -- true` where codex is installed: which binary ran, and its median over
/// 15 runs. npm installs `codex` as a Node script that starts the native binary it ships;
/// that binary is what is timed (Node's own start-up is not the sandbox's), found beside
/// the script or named by `SANDBOX_BENCH_CODEX`. Older releases named the platform
/// (`codex sandbox linux -- true`); whichever form runs.
fn codex_sandbox_true() -> Option<(PathBuf, Duration)> {
    let exe = codex_binary()?;
    let run = |args: &[&str]| {
        Command::new(&exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let args: &[&str] = [
        &["sandbox", "--", "true"][..],
        &["sandbox", "linux", "--", "true"][..],
    ]
    .into_iter()
    .find(|a| run(a))?;
    let mut times = Vec::new();
    for _ in 0..15 {
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        if !run(args) {
            return None;
        }
        times.push(t.elapsed());
    }
    Some((exe, median(times)))
}

fn codex_binary() -> Option<PathBuf> {
    if let Some(named) = std::env::var_os("SANDBOX_BENCH_CODEX") {
        return Some(PathBuf::from(named));
    }
    let on_path = std::env::var_os("PATH")?;
    let found = std::env::split_paths(&on_path)
        .map(|d| d.join("codex"))
        .find(|p| p.is_file())?;
    let real = std::fs::canonicalize(&found).ok()?;
    let head = std::fs::read(&real).ok()?;
    if !head.starts_with(b"#!") {
        return Some(real);
    }
    // The npm package: bin/codex.js, with the native binary in a platform package.
    let package = real.parent()?.parent()?;
    let arch = std::env::consts::ARCH;
    let native = package
        .join("node_modules/@openai")
        .join(format!(
            "codex-linux-{}",
            if arch == "x86_64" { "x64" } else { "arm64" }
        ))
        .join("vendor")
        .join(format!("{arch}-unknown-linux-musl/bin/codex"));
    native.is_file().then_some(native)
}

const DOWNLOAD_BYTES: usize = 100 << 20;

/// One download of 100 MB from a loopback server, timed inside the sandbox by the client
/// itself (so sandbox start-up is not part of it): through `--network allowlist` (the
/// proxy) and with `--network host`, alternating, on landlock. Medians.
fn proxy_throughput(wt: &Path, runs: usize) -> (Duration, Duration) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let body: Arc<Vec<u8>> = Arc::new((0..DOWNLOAD_BYTES).map(|i| i as u8).collect());
        for stream in listener.incoming().flatten() {
            let body = body.clone();
            std::thread::spawn(move || {
                use std::io::{BufRead, Write};
                let mut reader = std::io::BufReader::new(stream.try_clone().expect("clone"));
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let mut out = stream;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = out.write_all(head.as_bytes());
                let _ = out.write_all(&body);
            });
        }
    });
    let config = wt.join("network-bench.toml");
    std::fs::write(&config, "[permission.network]\n\"127.0.0.1\" = \"allow\"\n").expect("config");
    let client = format!(
        "import time, urllib.request\nt = time.time()\nr = urllib.request.urlopen('http://127.0.0.1:{port}/')\nn = 0\nwhile True:\n    b = r.read(1 << 20)\n    if not b:\n        break\n    n += len(b)\nprint(n, time.time() - t)\n"
    );
    std::fs::write(wt.join("download.py"), client).expect("client");
    let download = |network: &str| -> Duration {
        let args = json!({
            "command": "no_proxy= NO_PROXY= python3 download.py",
            "description": "download",
        })
        .to_string();
        let out = Command::new(runner_exe())
            .args(["tool", "call", "bash", &args, "--sandbox", "landlock"])
            .args(["--network", network, "--config"])
            .arg(&config)
            .arg("--root")
            .arg(wt)
            .stdin(Stdio::null())
            .output()
            .expect("runner tool call");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut fields = text.split_whitespace();
        let (n, secs) = (fields.next(), fields.next());
        assert_eq!(
            n.and_then(|n| n.parse::<usize>().ok()),
            Some(DOWNLOAD_BYTES),
            "the download through --network {network} failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Duration::from_secs_f64(secs.and_then(|s| s.parse().ok()).expect("seconds"))
    };
    let (mut proxied, mut direct) = (vec![], vec![]);
    for i in 0..runs + 1 {
        let (p, h) = (download("allowlist"), download("host"));
        if i >= 1 {
            proxied.push(p);
            direct.push(h);
        }
    }
    (median(proxied), median(direct))
}

/// Whether the data directory's file system can clone files (btrfs, XFS, bcachefs).
fn reflinks_work() -> bool {
    let dir = tempfile::tempdir_in(
        runner_workspace::root_dir()
            .parent()
            .unwrap_or(Path::new("/tmp")),
    )
    .or_else(|_| tempfile::tempdir());
    let Ok(dir) = dir else { return false };
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&a, b"x").is_ok()
        && Command::new("cp")
            .args(["--reflink=always"])
            .arg(&a)
            .arg(&b)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// A 10,000-file, 200 MB worktree: `Workspace::create` (the copy the sandbox works in and
/// the base it is compared with) against one `cp -a` of it. Medians.
fn copy_setup(runs: usize) -> (Duration, Duration) {
    let src = match std::env::var_os("SANDBOX_BENCH_COPY_DIR") {
        Some(dir) => tempfile::tempdir_in(dir),
        None => tempfile::tempdir(),
    }
    .expect("temp dir");
    let chunk: Vec<u8> = (0..20_000).map(|i| (i % 251) as u8).collect();
    for d in 0..100 {
        let dir = src.path().join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).expect("dir");
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f:03}.bin")), &chunk).expect("file");
        }
    }
    let (mut ours, mut peer) = (vec![], vec![]);
    for _ in 0..runs {
        let t = Instant::now();
        let ws = runner_workspace::Workspace::create(
            src.path(),
            runner_sandbox::spec::DEFAULT_DISK_BUDGET,
        )
        .expect("copy workspace");
        ours.push(t.elapsed());
        ws.discard().expect("discard");
        let dest = tempfile::tempdir_in(src.path().parent().unwrap_or(Path::new("/tmp")))
            .expect("temp dir");
        let t = Instant::now();
        let ok = Command::new("cp")
            .arg("-a")
            .arg(src.path())
            .arg(dest.path().join("copy"))
            .status()
            .expect("cp")
            .success();
        peer.push(t.elapsed());
        assert!(ok, "cp -a failed");
    }
    (median(ours), median(peer))
}

/// Peak RSS allowed to `runner changes` and `runner apply`, whatever the copy holds.
const REVIEW_RSS: u64 = 100 << 20;

/// Runs `command` to its end: how long it took and its own peak RSS (from `wait4`). It must
/// exit with one of `codes`.
// The child is reaped by `wait4`, which also gives its own peak RSS.
#[allow(clippy::zombie_processes)]
fn measured(command: &mut Command, codes: &[i32]) -> (Duration, u64) {
    let start = Instant::now();
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start");
    let mut status = 0;
    // SAFETY: wait4 on our own child, into local values; the Child is not waited again.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let took = start.elapsed();
    assert!(
        pid == child.id() as i32
            && libc::WIFEXITED(status)
            && codes.contains(&libc::WEXITSTATUS(status)),
        "{command:?} failed (status {status:#x})"
    );
    (took, usage.ru_maxrss as u64 * 1024)
}

/// A checkout and its data directory for copies, in one temporary folder.
struct ReviewLab {
    _tmp: tempfile::TempDir,
    checkout: PathBuf,
    data: PathBuf,
}

impl ReviewLab {
    fn new() -> ReviewLab {
        let tmp = tempfile::tempdir().expect("temp dir");
        let root = std::fs::canonicalize(tmp.path()).expect("canonical");
        let checkout = root.join("repo");
        std::fs::create_dir_all(&checkout).expect("checkout");
        std::fs::write(checkout.join("README"), "a checkout\n").expect("fixture");
        ReviewLab {
            _tmp: tmp,
            checkout,
            data: root.join("data"),
        }
    }

    fn runner(&self, args: &[&str]) -> Command {
        let mut c = Command::new(runner_exe());
        c.args(args)
            .env("XDG_DATA_HOME", &self.data)
            .env("XDG_CONFIG_HOME", self.data.join("config"))
            .current_dir(&self.checkout);
        c
    }

    /// A new copy workspace of the checkout (a landlock `tool call` that changes nothing):
    /// its id and the folders of its base and work.
    fn copy(&self) -> (String, PathBuf, PathBuf) {
        let out = self
            .runner(&[
                "tool",
                "call",
                "bash",
                r#"{"command":"true","description":"b"}"#,
            ])
            .args([
                "--workspace",
                "copy",
                "--sandbox",
                "landlock",
                "--ask",
                "allow",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("runner tool call");
        let err = String::from_utf8_lossy(&out.stderr);
        let id = err
            .lines()
            .find_map(|l| l.strip_prefix("workspace: "))
            .unwrap_or_else(|| panic!("no workspace made: {err}"))
            .to_string();
        let dir = self.data.join("runner/workspaces").join(&id);
        (id, dir.join("base"), dir.join("work"))
    }

    /// `runner changes ID` and `runner apply ID`, each against its peer (`diff -rq` of the
    /// two trees, `cp -a` of the copy into a scratch folder), as rows and a printed line.
    fn measure(
        &self,
        case: &str,
        (id, base, work): (String, PathBuf, PathBuf),
        rows: &mut Vec<Row>,
    ) {
        let (changes, changes_rss) = measured(&mut self.runner(&["changes", &id]), &[0]);
        let (diff, diff_rss) = measured(
            Command::new("diff")
                .arg("-rq")
                .arg(&base)
                .arg(&work)
                .env("LC_ALL", "C"),
            // 1: the trees differ.
            &[0, 1],
        );
        let scratch = tempfile::tempdir_in(&self.data).expect("scratch");
        let (cp, cp_rss) = measured(
            Command::new("cp")
                .args(["-a", "--reflink=auto"])
                .arg(format!("{}/.", work.display()))
                .arg(scratch.path()),
            &[0],
        );
        // An apply ends by removing the copy (its base and work): `rm -rf` of one tree as
        // big says how much of its time that is.
        let (rm, _) = measured(Command::new("rm").arg("-rf").arg(scratch.path()), &[0]);
        // Last: an apply removes the copy.
        let (apply, apply_rss) = measured(&mut self.runner(&["apply", &id]), &[0]);
        println!(
            "review: {case}: changes {:.0} ms, peak RSS {:.1} MiB (diff -rq {:.0} ms, {:.1} MiB); apply {:.0} ms, peak RSS {:.1} MiB (cp -a {:.0} ms, {:.1} MiB; rm -rf of that copy {:.0} ms)",
            ms(changes),
            mib(changes_rss),
            ms(diff),
            mib(diff_rss),
            ms(apply),
            mib(apply_rss),
            ms(cp),
            mib(cp_rss),
            ms(rm)
        );
        rows.push(Row {
            name: format!("changes, {case}"),
            runner: changes,
            peer: diff,
            peer_name: "diff -rq of the two trees",
            pass: changes_rss < REVIEW_RSS,
            target: format!("peak RSS {:.1} < 100 MiB", mib(changes_rss)),
        });
        rows.push(Row {
            name: format!("apply, {case}"),
            runner: apply,
            peer: cp,
            peer_name: "cp -a of the copy",
            pass: apply_rss < REVIEW_RSS,
            target: format!("peak RSS {:.1} < 100 MiB", mib(apply_rss)),
        });
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// The cases of section 5, each on a fresh copy.
fn review_and_apply() -> Vec<Row> {
    let mut rows = Vec::new();
    let lab = ReviewLab::new();
    let copy = lab.copy();
    std::fs::File::create(copy.2.join("big.img"))
        .and_then(|f| f.set_len(100 << 30))
        .expect("a sparse file");
    lab.measure("a new 100 GiB sparse file", copy, &mut rows);

    let lab = ReviewLab::new();
    let copy = lab.copy();
    for d in 0..100 {
        let dir = copy.2.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).expect("dir");
        for f in 0..1000 {
            let text = format!("file {f} of folder {d}\nsome text to diff\n");
            std::fs::write(dir.join(format!("f{f:04}.txt")), text).expect("file");
        }
    }
    lab.measure("100,000 new small files", copy, &mut rows);

    // The same lab's checkout now holds them: a copy of it where one file changed.
    let copy = lab.copy();
    std::fs::write(copy.2.join("d050/f0500.txt"), "changed\n").expect("file");
    lab.measure("100,000 files, one changed", copy, &mut rows);
    rows
}

/// The engine hosts section 6 compares: `SANDBOX_BENCH_ENGINES`, else Docker's and rootful
/// Podman's sockets.
fn bench_engines() -> Vec<String> {
    match std::env::var("SANDBOX_BENCH_ENGINES") {
        Ok(list) => list
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(String::from)
            .collect(),
        Err(_) => vec![
            format!("unix://{}", runner_sandbox::docker::engine::DOCKER_SOCKET),
            format!("unix://{}", runner_sandbox::docker::engine::PODMAN_SOCKET),
        ],
    }
}

/// One engine's medians: sandbox start, read, bash `true`, `run --rm IMAGE true`.
#[derive(Default)]
struct EngineTimes {
    start: Vec<Duration>,
    read: Vec<Duration>,
    bash: Vec<Duration>,
    run: Vec<Duration>,
}

/// Opens a sandbox on `host` and times its start and one `read` and one `bash true`.
fn time_engine(rt: &tokio::runtime::Runtime, wt: &Path, host: &str, into: &mut EngineTimes) {
    let mut spec = spec(BackendKind::Docker, wt);
    spec.docker.host = Some(host.to_string());
    let t = Instant::now();
    let sandbox = rt
        .block_on(runner_sandbox::open(&spec))
        .unwrap_or_else(|e| panic!("open a sandbox on {host}: {e}"));
    into.start.push(t.elapsed());
    let ctx = ToolContext::new(
        Arc::new(sandbox),
        Arc::new(Conversation::single_call("bench")),
        Arc::new(PolicyGate::new(AskPolicy::Allow)),
        Arc::new(Truncator::new(wt.join(".out"))),
    );
    let registry = Registry::builtin();
    let read = json!({ "filePath": wt.join("small.txt").display().to_string() });
    let bash = json!({ "command": "true", "description": "bench" });
    for (args, tool, into) in [
        (read, "read", &mut into.read),
        (bash, "bash", &mut into.bash),
    ] {
        // The first call of a fresh sandbox warms it; the second is timed.
        for timed in [false, true] {
            let t = Instant::now();
            let r = rt.block_on(registry.call(tool, args.clone(), &ctx));
            assert!(r.error.is_none(), "{tool} on {host}: {:?}", r.error);
            if timed {
                into.push(t.elapsed());
            }
        }
    }
}

/// `docker -H HOST run --rm IMAGE true`; on Podman with the engine's own nofile and nproc
/// limits, without which Podman's container does not start here (the same fix runner's
/// containers get).
fn run_rm_true(rt: &tokio::runtime::Runtime, host: &str) -> Duration {
    let engine = rt
        .block_on(runner_sandbox::docker::engine::Engine::open(Some(host)))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut args = vec![
        "-H".to_string(),
        host.to_string(),
        "run".into(),
        "--rm".into(),
    ];
    if engine.kind == runner_sandbox::docker::engine::Kind::Podman {
        let l = engine.hard_limits;
        args.push(format!("--ulimit=nofile={0}:{0}", l.nofile));
        args.push(format!("--ulimit=nproc={0}:{0}", l.nproc));
    }
    args.extend([DEFAULT_IMAGE.to_string(), "true".into()]);
    docker_cli(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Section 6: the engines take turns, `runs` times (after one warm-up round each).
fn engines_side_by_side(rt: &tokio::runtime::Runtime, wt: &Path, runs: usize) {
    let hosts = bench_engines();
    let mut times: Vec<EngineTimes> = hosts.iter().map(|_| EngineTimes::default()).collect();
    for i in 0..runs + 1 {
        for (host, into) in hosts.iter().zip(times.iter_mut()) {
            let mut round = EngineTimes::default();
            time_engine(rt, wt, host, &mut round);
            round.run.push(run_rm_true(rt, host));
            if i >= 1 {
                into.start.extend(round.start);
                into.read.extend(round.read);
                into.bash.extend(round.bash);
                into.run.extend(round.run);
            }
        }
    }
    println!(
        "{:<40} {:>12} {:>10} {:>10} {:>14}",
        format!("engine (medians of {runs})"),
        "sandbox ms",
        "read ms",
        "bash ms",
        "run --rm ms"
    );
    for (host, t) in hosts.iter().zip(times) {
        println!(
            "{:<40} {:>12.1} {:>10.2} {:>10.2} {:>14.1}",
            host,
            ms(median(t.start)),
            ms(median(t.read)),
            ms(median(t.bash)),
            ms(median(t.run))
        );
    }
}
