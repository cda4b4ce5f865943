//! inspect_ai's `exec` round trip through runner's plug-in, side by side with inspect's
//! own `local` sandbox and with `runner exec`: `cargo bench --bench inspect_exec`.
//!
//! `python/bench/exec_roundtrip.py` times `exec(["true"])` in one open sample sandbox
//! (median of `INSPECT_BENCH_ROUNDS`, default 200): through inspect's `local` provider
//! (a plain subprocess, no wall), through `sandbox="runner"` on landlock, and through the
//! `runner_sandbox` client alone (what the plug-in adds on top of the protocol), and one
//! whole sample through the plug-in (`sample_init`, one exec, `sample_cleanup`; a tenth of
//! the rounds, at least 10). Beside them, `runner exec --sandbox landlock -- true` (median
//! of 20): the wall's own cost for one program, start and end of the sandbox included. The
//! goal is that runner's environment adds under 50 ms per exec over that cost; the last
//! line says whether it does, taking the larger of the two differences (an exec in an open
//! sample, a sample of one exec).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench's panic is its report"
)]

use std::path::Path;
use std::process::Command;
use std::time::Instant;

const RUNNER: &str = env!("CARGO_BIN_EXE_runner");

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = common::inspect::venv();
    let package = common::inspect::install_package(&python, root);
    let rounds = std::env::var("INSPECT_BENCH_ROUNDS").unwrap_or_else(|_| "200".into());
    let out = Command::new(&python)
        .arg("-P")
        .arg(package.join("bench/exec_roundtrip.py"))
        .arg(&rounds)
        .env("RUNNER_BIN", RUNNER)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Python side failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let figures: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ms = |name: &str| figures[name].as_f64().unwrap();
    let exec = runner_exec_ms();
    report(
        &rounds,
        Figures {
            local: ms("inspect local"),
            plugin: ms("inspect runner"),
            client: ms("runner client"),
            sample: ms("inspect runner sample"),
            exec,
        },
    );
}

/// Medians in milliseconds.
struct Figures {
    /// One exec through inspect's `local` sandbox (the peer without a wall).
    local: f64,
    /// One exec through `sandbox="runner"`, in an open sample.
    plugin: f64,
    /// One exec through the `runner_sandbox` client alone.
    client: f64,
    /// A whole sample through the plug-in: wall started, one exec, wall ended.
    sample: f64,
    /// `runner exec -- true`: the wall started, the program, the wall ended (the peer).
    exec: f64,
}

fn report(rounds: &str, f: Figures) {
    println!("inspect exec([\"true\"]) round trip, median ms ({rounds} rounds each):");
    println!(
        "  inspect local sandbox (peer, no wall)      {:8.2}",
        f.local
    );
    println!(
        "  inspect sandbox=\"runner\", per exec        {:8.2}   {:.1}x local, {:+.2} ms",
        f.plugin,
        f.plugin / f.local,
        f.plugin - f.local
    );
    println!(
        "  runner_sandbox client alone, per exec      {:8.2}   the plug-in adds {:+.2} ms",
        f.client,
        f.plugin - f.client
    );
    println!(
        "  runner exec -- true (peer, whole wall)     {:8.2}",
        f.exec
    );
    println!(
        "  inspect sandbox=\"runner\", whole sample    {:8.2}   {:.2}x runner exec, {:+.2} ms",
        f.sample,
        f.sample / f.exec,
        f.sample - f.exec
    );
    // The goal: runner's environment adds under 50 ms per exec over `runner exec`, both
    // for an exec in an open sample and for a sample of one exec (start and end included).
    let added = (f.plugin - f.exec).max(f.sample - f.exec);
    println!(
        "runner's inspect environment adds at most {added:+.2} ms per exec over runner exec \
         (goal < 50 ms): {}",
        if added < 50.0 { "met" } else { "NOT met" }
    );
}

/// `runner exec --sandbox landlock -- true`, start to end, median of 20 after 2 warm runs.
fn runner_exec_ms() -> f64 {
    let work = tempfile::tempdir().unwrap();
    let once = || {
        let started = Instant::now();
        let status = Command::new(RUNNER)
            .args(["exec", "--sandbox", "landlock", "--root"])
            .arg(work.path())
            .args(["--", "true"])
            .status()
            .unwrap();
        assert!(status.success(), "runner exec failed ({status})");
        started.elapsed().as_secs_f64() * 1000.0
    };
    once();
    once();
    let mut times: Vec<f64> = (0..20).map(|_| once()).collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
