//! Benchmark: what the evaluation harness itself costs per task. 100 trivial tasks (a
//! one-file repository, a `replay` model that answers "done" at once, `verify = true`) run
//! through the real `runner eval run` on the docker backend, with `--jobs 2` and one at a
//! time, next to a bare `docker run --rm IMAGE true` per task: the floor a
//! container-per-task harness cannot go below. runner starts two containers per task (the
//! agent's, and a fresh one for the verdict, so nothing the agent left running can touch
//! it). Target: under 0.5 s of wall time per task with `--jobs 2` on a 2-core machine.
//!
//! Then Harbor tasks, as Terminal-Bench sets are run: `EVAL_BENCH_HARBOR` tasks (default
//! 40) of one shared image, each solved by its `solution/solve.sh` (`--agent oracle`) and
//! judged by its `tests/test.sh` through the verifier's proxy, at `--jobs 2` and `--jobs 8`,
//! each next to two `docker run --rm IMAGE true` for every task at the same concurrency:
//! the engine's floor for an attempt (an agent phase and a verifier phase, two container
//! runs). It prints the ratio; the goal is at most 0.8 at both concurrencies: runner makes
//! one container per attempt, and makes the next attempts' containers (and starts the
//! oracle's) while the current ones run and are judged (the warm pool).
//!
//! `cargo bench --bench eval` (needs the engine and `runner image build`).
//! `EVAL_BENCH_TASKS` sets the number of tasks (default 100); `EVAL_BENCH_ONLY=harbor`
//! runs the Harbor figures alone.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark that cannot set up has nothing to measure: it stops there"
)]

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

const IMAGE: &str = "runner-sandbox:bookworm";

fn task_set(dir: &Path, n: usize) -> std::path::PathBuf {
    let mut lines = String::new();
    for i in 0..n {
        let repo = dir.join("repos").join(format!("r{i}"));
        std::fs::create_dir_all(&repo).expect("repo");
        std::fs::write(repo.join("a.txt"), format!("task {i}\n")).expect("file");
        let task = json!({
            "id": format!("t{i:03}"),
            "instruction": format!("Task {i}: nothing to do."),
            "repo": format!("repos/r{i}"),
            "verify": "true",
        });
        lines.push_str(&task.to_string());
        lines.push('\n');
    }
    let file = dir.join("tasks.jsonl");
    std::fs::write(&file, lines).expect("tasks");
    let turn = json!({"type": "turn", "session": "bench", "step": 1, "duration_ms": 0,
        "turn": {"text": "done", "tool_calls": [], "finish": "stop",
                 "usage": {"input": 10, "output": 1, "cache_read": 0, "cache_write": 0}}});
    std::fs::write(dir.join("replay.jsonl"), format!("{turn}\n")).expect("replay");
    file
}

fn eval(dir: &Path, tasks: &Path, jobs: usize, out: &str) -> Duration {
    let replay = format!("replay/{}", dir.join("replay.jsonl").display());
    run_eval(dir, tasks, &dir.join(out), &["--model", &replay], jobs)
}

/// `runner eval run SET --out OUT ARGS --jobs JOBS`: its wall time; every task must resolve.
fn run_eval(dir: &Path, set: &Path, out: &Path, args: &[&str], jobs: usize) -> Duration {
    let started = Instant::now();
    let status = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["eval", "run"])
        .arg(set)
        .arg("--out")
        .arg(out)
        .args(args)
        .args(["--jobs", &jobs.to_string()])
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("runner eval");
    let took = started.elapsed();
    assert!(status.success(), "runner eval run {} failed", set.display());
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).expect("summary"))
            .expect("summary json");
    assert_eq!(
        summary["counts"]["resolved"], summary["attempts"],
        "every task resolves: {summary}"
    );
    took
}

/// `n` Harbor tasks sharing one image: a solution that writes a file, a test that checks it.
fn harbor_set(dir: &Path, n: usize) -> std::path::PathBuf {
    let set = dir.join("harbor");
    for i in 0..n {
        let task = set.join(format!("h{i:03}"));
        for sub in ["environment", "tests", "solution"] {
            std::fs::create_dir_all(task.join(sub)).expect("task folder");
        }
        std::fs::write(
            task.join("instruction.md"),
            format!("Write done into /app/out ({i}).\n"),
        )
        .expect("instruction");
        std::fs::write(task.join("task.toml"), "version = \"1.0\"\n").expect("toml");
        std::fs::write(
            task.join("environment/Dockerfile"),
            format!("FROM {IMAGE}\nWORKDIR /app\n"),
        )
        .expect("dockerfile");
        std::fs::write(task.join("solution/solve.sh"), "echo done > /app/out\n").expect("solution");
        std::fs::write(
            task.join("tests/test.sh"),
            "grep -qx done /app/out && echo 1 > /logs/verifier/reward.txt\n",
        )
        .expect("test");
    }
    set
}

fn harbor_eval(dir: &Path, set: &Path, jobs: usize) -> Duration {
    let out = dir.join(format!("harbor-jobs{jobs}"));
    run_eval(dir, set, &out, &["--agent", "oracle"], jobs)
}

/// `docker run --rm IMAGE true` `n` times, `jobs` at once.
fn docker_run_floor_parallel(n: usize, jobs: usize) -> Duration {
    let started = Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < n {
                    let ok = Command::new("docker")
                        .args(["run", "--rm", "--network", "none", IMAGE, "true"])
                        .stdout(Stdio::null())
                        .status()
                        .expect("docker run")
                        .success();
                    assert!(ok, "docker run {IMAGE} true failed: is the image built?");
                }
            });
        }
    });
    started.elapsed()
}

/// The engine's floor for a Harbor attempt: an agent phase and a verifier phase, two
/// container runs. The goal is runner at most this many times that floor per task.
const HARBOR_GOAL: f64 = 0.8;

/// Harbor tasks at `--jobs 2` and `--jobs 8`, each next to two `docker run --rm` per task at
/// the same concurrency; true when both ratios are within [`HARBOR_GOAL`].
fn harbor_figures(dir: &Path) -> bool {
    let n: usize = std::env::var("EVAL_BENCH_HARBOR")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let set = harbor_set(dir, n);
    // The task image is built once, before anything is timed.
    harbor_eval(dir, &set.join("h000"), 1);
    let per = |d: Duration| d.as_secs_f64() / n as f64;
    println!("harbor tasks, {n} of one image, --agent oracle, the verifier behind the proxy");
    let mut met = true;
    for jobs in [2, 8] {
        let runner = harbor_eval(dir, &set, jobs);
        // Two runs per task: the floor of an agent phase and a verifier phase.
        let floor = docker_run_floor_parallel(2 * n, jobs);
        let ratio = per(runner) / per(floor);
        met &= ratio <= HARBOR_GOAL;
        println!(
            "  --jobs {jobs}: runner {:.3} s/task, two docker run --rm {:.3} s/task ({jobs} at once): overhead {:+.3} s/task, ratio {ratio:.2} (goal {HARBOR_GOAL})",
            per(runner),
            per(floor),
            per(runner) - per(floor),
        );
    }
    met
}

fn docker_run_floor(n: usize) -> Duration {
    docker_run_floor_parallel(n, 1)
}

fn main() -> ExitCode {
    let n: usize = std::env::var("EVAL_BENCH_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
    // Warm: the image's layers and the binary's pages.
    docker_run_floor(1);
    // `EVAL_BENCH_ONLY=harbor`: the Harbor figures alone.
    if std::env::var("EVAL_BENCH_ONLY").is_ok_and(|v| v == "harbor") {
        return if harbor_figures(&dir) {
            ExitCode::SUCCESS
        } else {
            println!("  HARBOR GOAL MISSED: over {HARBOR_GOAL}x two docker runs per task");
            ExitCode::FAILURE
        };
    }
    let tasks = task_set(&dir, n);

    let per = |d: Duration| d.as_secs_f64() / n as f64;
    let parallel = eval(&dir, &tasks, 2, "jobs2");
    let serial = eval(&dir, &tasks, 1, "jobs1");
    let floor = docker_run_floor(n);
    println!("eval harness, {n} trivial tasks on the docker backend (replay model)");
    println!(
        "  runner eval --jobs 2      {:>7.3} s/task  ({:.1} s total)",
        per(parallel),
        parallel.as_secs_f64()
    );
    println!(
        "  runner eval --jobs 1      {:>7.3} s/task  ({:.1} s total)",
        per(serial),
        serial.as_secs_f64()
    );
    println!(
        "  docker run --rm {IMAGE} true, one at a time {:>7.3} s/task",
        per(floor)
    );
    println!(
        "  ratios: --jobs 2 / docker run = {:.2}, --jobs 1 / docker run = {:.2} (runner starts two containers per task)",
        per(parallel) / per(floor),
        per(serial) / per(floor)
    );
    let harbor_met = harbor_figures(&dir);
    let target = 0.5;
    let mut code = ExitCode::SUCCESS;
    if per(parallel) < target {
        println!("  target met: under {target} s per task with --jobs 2");
    } else {
        println!(
            "  TARGET MISSED: {:.3} s per task (target {target})",
            per(parallel)
        );
        code = ExitCode::FAILURE;
    }
    if !harbor_met {
        println!("  HARBOR GOAL MISSED: over {HARBOR_GOAL}x two docker runs per task");
        code = ExitCode::FAILURE;
    }
    code
}
