//! `runner eval`'s warm pool on the real engine: the next attempts' containers are made
//! (and the oracle's started) while others run, each belongs to one attempt only, and none
//! is left behind by a run that ends, one stopped with SIGINT, or one killed outright.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// `--jobs` plus this many attempts are made ready at once (`scheduler::POOL_MARGIN`).
const MARGIN: usize = 2;

/// A task whose solution and test each print the container they ran in (its hostname: the
/// engine's short id for it), after `delay` seconds of the solution's.
fn task(dir: &Path, delay: &str) {
    for sub in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("instruction.md"), "Write done into /app/out.\n").unwrap();
    std::fs::write(dir.join("task.toml"), "version = \"1.0\"\n").unwrap();
    std::fs::write(
        dir.join("environment/Dockerfile"),
        "FROM runner-sandbox:bookworm\nWORKDIR /app\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("solution/solve.sh"),
        format!("sleep {delay}\necho \"served-by=$(cat /etc/hostname)\"\necho done > /app/out\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("tests/test.sh"),
        "echo \"judged-in=$(cat /etc/hostname)\"\ngrep -qx done /app/out && echo 1 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
}

fn set(n: usize, delay: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    for i in 0..n {
        task(&dir.join("set").join(format!("p{i}")), delay);
    }
    (tmp, dir)
}

fn start(dir: &Path, out: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["eval", "run"])
        .arg(dir.join("set"))
        .arg("--out")
        .arg(out)
        .args(["--agent", "oracle"])
        .args(extra)
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn containers_of(pid: u32) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=runner.owner-pid={pid}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The engine's container events (`create`, `die`, `destroy`) as they happen: action, id,
/// owner pid.
struct Watch {
    child: Child,
    seen: Arc<Mutex<Vec<(String, String, String)>>>,
}

impl Watch {
    fn start() -> Watch {
        let mut child = Command::new("docker")
            .args(["events", "--filter", "type=container", "--filter"])
            .args(["label=runner", "--format"])
            .arg("{{.Action}} {{.Actor.ID}} {{index .Actor.Attributes \"runner.owner-pid\"}}")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let lines = BufReader::new(child.stdout.take().unwrap());
        let into = seen.clone();
        std::thread::spawn(move || {
            for line in lines.lines().map_while(Result::ok) {
                let parts: Vec<&str> = line.split_whitespace().collect();
                if let [action, id, pid] = parts[..] {
                    let entry = (action.to_string(), id.to_string(), pid.to_string());
                    into.lock().unwrap().push(entry);
                }
            }
        });
        // `docker events` reports from when it is connected.
        std::thread::sleep(Duration::from_millis(500));
        Watch { child, seen }
    }

    /// The events of `pid`'s containers so far.
    fn of(&self, pid: u32) -> Vec<(String, String)> {
        let pid = pid.to_string();
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(_, _, p)| *p == pid)
            .map(|(a, id, _)| (a.clone(), id.clone()))
            .collect()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// The line `key=VALUE` in a log, its value.
fn said(log: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{}: no {key}= line in:\n{text}", log.display()))
        .to_string()
}

/// Six tasks, two attempts each, two at a time: every attempt's solution and test ran in
/// one container, that container served no other attempt, it is one the engine created
/// for this run, and every one of them is gone at the end. The pool was used (more
/// containers alive at once than `--jobs`) and stayed within `--jobs` plus its margin.
#[test]
fn each_pooled_container_serves_one_attempt_and_none_is_left() {
    common::engine::docker();
    let (_tmp, dir) = set(6, "0.3");
    let out = dir.join("out");
    let watch = Watch::start();
    let run = start(&dir, &out, &["--jobs", "2", "--attempts", "2"]);
    let pid = run.id();
    let ran = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(0), "{stderr}");
    assert!(containers_of(pid).is_empty(), "containers left behind");
    std::thread::sleep(Duration::from_secs(1));
    let events = watch.of(pid);

    let summary = read_json(&out.join("summary.json"));
    assert_eq!(summary["counts"]["resolved"], json!(12), "{summary:#}");
    let mut served_by: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..6 {
        for attempt in 1..=2 {
            let at = out
                .join("tasks")
                .join(format!("p{i}"))
                .join(attempt.to_string());
            let agent = said(&at.join("agent.log"), "served-by");
            let judge = said(&at.join("verify.log"), "judged-in");
            assert_eq!(
                agent, judge,
                "p{i}/{attempt}: agent and verifier in one container"
            );
            if let Some(other) = served_by.insert(agent.clone(), format!("p{i}/{attempt}")) {
                panic!("container {agent} served both {other} and p{i}/{attempt}");
            }
        }
    }
    let created: BTreeSet<String> = events
        .iter()
        .filter(|(a, _)| a == "create")
        .map(|(_, id)| id[..12].to_string())
        .collect();
    let used: BTreeSet<String> = served_by.keys().cloned().collect();
    assert_eq!(
        created, used,
        "every container created served exactly one attempt"
    );
    let destroyed = events.iter().filter(|(a, _)| a == "destroy").count();
    assert_eq!(
        destroyed,
        created.len(),
        "every container was removed: {events:?}"
    );

    // Alive: created and not yet died (each container here starts once and dies once).
    let (mut alive, mut most) = (0i64, 0i64);
    for (action, _) in &events {
        match action.as_str() {
            "create" => alive += 1,
            "die" => alive -= 1,
            _ => {}
        }
        most = most.max(alive);
    }
    assert!(
        most > 2 && most <= (2 + MARGIN) as i64,
        "at most {most} containers alive at once, not between 3 and {}: {events:?}",
        2 + MARGIN
    );
    // Six tasks of one content: one image, built (and said) at most once.
    let builds = stderr.matches(": built in ").count();
    assert!(builds <= 1, "{builds} builds said for one image: {stderr}");
}

/// Waits until `pid` has more containers than `jobs`: attempts waiting in the pool.
fn wait_for_pool(pid: u32, jobs: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while containers_of(pid).len() <= jobs {
        assert!(Instant::now() < deadline, "no pool of containers appeared");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A run stopped with SIGINT while attempts wait in the pool removes their containers
/// before it exits (130); one killed outright leaves them to the next run, which removes
/// them as it starts and ends with every verdict.
#[test]
fn pooled_containers_go_with_a_stopped_run_and_after_a_killed_one() {
    common::engine::docker();
    let (_tmp, dir) = set(8, "2");
    let out = dir.join("out");
    let args = ["--jobs", "2"];

    let stopped = start(&dir, &out, &args);
    let first = stopped.id();
    wait_for_pool(first, 2);
    unsafe { libc::kill(first as i32, libc::SIGINT) };
    let ended = stopped.wait_with_output().unwrap();
    assert_eq!(ended.status.code(), Some(130), "{ended:?}");
    assert!(
        containers_of(first).is_empty(),
        "a stopped run left containers"
    );
    assert!(
        !out.join(".work").exists(),
        "a stopped run left scratch folders"
    );

    let mut killed = start(&dir, &out, &args);
    let second = killed.id();
    wait_for_pool(second, 2);
    unsafe { libc::kill(second as i32, libc::SIGKILL) };
    let _ = killed.wait();

    let last = start(&dir, &out, &args);
    let third = last.id();
    let ended = last.wait_with_output().unwrap();
    assert_eq!(ended.status.code(), Some(0), "{ended:?}");
    assert!(
        containers_of(second).is_empty(),
        "the killed run's pool was not reaped"
    );
    assert!(containers_of(third).is_empty());
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(
        summary["counts"],
        json!({"agent_error": 0, "infra_error": 0, "resolved": 8, "timeout": 0, "unresolved": 0}),
        "{summary:#}"
    );
}
