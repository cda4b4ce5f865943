//! One Harbor trial through runner's environment, side by side with one through Harbor's
//! own `--env podman`: `cargo bench --bench harbor_env`.
//!
//! The trial is `python/tests/fixtures/harbor/right` with Harbor's oracle (build the
//! image, start the container, upload the solution, run it, upload the tests, run them,
//! download the logs, remove everything). Each side runs once to build its image, then
//! `HARBOR_BENCH_ROUNDS` times (default 2) in turn; the median of each is printed with
//! its ratio to runner's. The sides:
//! - `runner` — `--env runner_sandbox.harbor:RunnerEnvironment` on the machine's Docker;
//! - `runner on podman` — the same, runner's engine being rootful Podman's socket
//!   (`--ek docker_host=…`), the engine Harbor's podman side uses;
//! - `harbor podman` — Harbor's `--env podman` (podman-compose from the venv, and a
//!   containers.conf of this bench's whose default ulimits this machine allows: Podman's
//!   own ask for more processes than the hard limit, and runc refuses).
//!
//! A trial whose reward is not 1 stops the bench: a fast wrong answer measures nothing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench's panic is its report"
)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use common::harbor;

const ENV: &str = "runner_sandbox.harbor:RunnerEnvironment";

struct Side {
    name: &'static str,
    args: Vec<String>,
}

fn main() {
    common::engine::docker();
    // Rootful Podman's service, holding the sandbox image the task builds FROM (its
    // storage is the podman command's too).
    common::podman::rootful();
    let python = harbor::venv();
    let work = tempfile::tempdir().unwrap();
    let conf = work.path().join("containers.conf");
    std::fs::write(&conf, containers_conf()).unwrap();
    let task = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/tests/fixtures/harbor/right");
    let sides = [
        Side {
            name: "runner",
            args: vec!["--env".into(), ENV.into()],
        },
        Side {
            name: "runner on podman",
            args: vec![
                "--env".into(),
                ENV.into(),
                "--ek".into(),
                format!("docker_host=unix://{}", common::podman::ROOTFUL_SOCKET),
            ],
        },
        Side {
            name: "harbor podman",
            args: vec!["--env".into(), "podman".into()],
        },
    ];
    let rounds: usize = std::env::var("HARBOR_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2);
    let trial = |side: &Side, n: usize| -> (f64, f64) {
        let jobs = work
            .path()
            .join(format!("{}-{n}", side.name.replace(' ', "-")));
        let started = Instant::now();
        let out = harbor::cli(&python)
            .args(["run", "-p"])
            .arg(&task)
            .args(["--agent", "oracle", "-o"])
            .arg(&jobs)
            .args(["-y", "-q"])
            .args(&side.args)
            .env("RUNNER_BIN", env!("CARGO_BIN_EXE_runner"))
            .env("CONTAINERS_CONF", &conf)
            .current_dir(work.path())
            .output()
            .unwrap();
        let wall = started.elapsed().as_secs_f64();
        let result = trial_result(&jobs);
        let reward = result["verifier_result"]["rewards"]["reward"].as_f64();
        assert_eq!(
            reward,
            Some(1.0),
            "{}: the trial did not resolve: {}\n{}",
            side.name,
            result["exception_info"],
            String::from_utf8_lossy(&out.stderr)
        );
        (seconds(&result), wall)
    };
    println!("warming up (each side builds its image once)…");
    for side in &sides {
        let (t, w) = trial(side, 0);
        println!(
            "  {:<17} first trial {t:6.2} s (harbor run {w:6.2} s)",
            side.name
        );
    }
    let mut timed: Vec<Vec<(f64, f64)>> = vec![Vec::new(); sides.len()];
    for round in 1..=rounds {
        for (i, side) in sides.iter().enumerate() {
            timed[i].push(trial(side, round));
        }
    }
    println!("one trial of `right` with Harbor's oracle, median of {rounds}:");
    let base = median(timed[0].iter().map(|t| t.0).collect());
    for (side, times) in sides.iter().zip(&timed) {
        let t = median(times.iter().map(|t| t.0).collect());
        let w = median(times.iter().map(|t| t.1).collect());
        println!(
            "  {:<17} trial {t:6.2} s   harbor run {w:6.2} s   {:5.2}x runner's trial",
            side.name,
            t / base
        );
    }
}

/// What the bench's Podman side lets containers have: the machine's own open-file limit,
/// and a process limit under its hard one.
fn containers_conf() -> String {
    let hard = |resource| {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct it is given.
        unsafe { libc::getrlimit(resource, &mut limit) };
        limit.rlim_max
    };
    let files = hard(libc::RLIMIT_NOFILE).min(1 << 20);
    format!("[containers]\ndefault_ulimits = [\"nofile={files}:{files}\", \"nproc=4096:4096\"]\n")
}

/// The one trial's `result.json` in a job folder.
fn trial_result(jobs: &Path) -> serde_json::Value {
    let job = only_dir(jobs);
    let trial = only_dir(&job);
    serde_json::from_str(&std::fs::read_to_string(trial.join("result.json")).unwrap()).unwrap()
}

fn only_dir(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("nothing in {}", dir.display()))
}

/// The trial's own time, from Harbor's `started_at` to `finished_at`.
fn seconds(result: &serde_json::Value) -> f64 {
    let at = |key: &str| {
        let text = result[key].as_str().unwrap_or_default();
        chrono_seconds(text)
    };
    at("finished_at") - at("started_at")
}

/// Seconds since midnight of an ISO 8601 time (`2026-12-07T02:36:05.739209Z`): enough
/// for a difference within a day.
fn chrono_seconds(text: &str) -> f64 {
    let time = text
        .split('T')
        .nth(1)
        .unwrap_or_default()
        .trim_end_matches('Z');
    let time = time.split('+').next().unwrap_or_default();
    let mut parts = time.split(':').map(|p| p.parse::<f64>().unwrap_or(0.0));
    let (h, m, s) = (
        parts.next().unwrap_or(0.0),
        parts.next().unwrap_or(0.0),
        parts.next().unwrap_or(0.0),
    );
    h * 3600.0 + m * 60.0 + s
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
