//! `runner eval` on Harbor task folders, end to end on the real engine: each task's image
//! built from its `environment/Dockerfile`, the agent working in the image's `WORKDIR`,
//! the hidden tests copied in only after every process of the agent's is dead, and the
//! reward read from `/logs/verifier`. Driven by a scripted model (a real SSE server) and by
//! `--agent oracle` (each task's `solution/solve.sh`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::provider::{Response, ScriptedModel, call, text};
use serde_json::{Value, json};

const BUGGY: &str = "echo $(($1 - $2))\n";
const FIXED: &str = "echo $(($1 + $2))\n";
/// Writes a reward only when the test passes: a reward the agent planted in
/// `/logs/verifier` would be the verdict if it were not cleared.
const TEST: &str = "#!/bin/bash
set -e
got=$(sh /app/calc.sh 2 3)
echo \"calc.sh 2 3 = $got\"
[ \"$got\" = 5 ]
echo 1 > /logs/verifier/reward.txt
";
const DOCKERFILE: &str = "FROM runner-sandbox:bookworm\nWORKDIR /app\nCOPY calc.sh /app/calc.sh\n";

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Fix,
    GiveUp,
    Crash,
    Slow,
    Cheat,
    Background,
    /// The fix is a program outside the worktree: the whole container is the agent's.
    System,
    /// The agent runs as a user of the image, the verifier as root.
    AsUser,
}

fn kind(n: usize) -> Kind {
    match n {
        0..=9 => Kind::Fix,
        10..=12 => Kind::GiveUp,
        13 => Kind::Crash,
        14 | 15 => Kind::Slow,
        16 => Kind::Cheat,
        17 => Kind::Background,
        18 => Kind::System,
        _ => Kind::AsUser,
    }
}

fn expected(k: Kind) -> &'static str {
    match k {
        Kind::Fix | Kind::Background | Kind::System | Kind::AsUser => "resolved",
        Kind::GiveUp | Kind::Cheat => "unresolved",
        Kind::Slow => "timeout",
        Kind::Crash => "agent_error",
    }
}

fn bash(command: &str) -> common::provider::Answer {
    call(
        "bash",
        json!({"command": command, "description": "run a command"}),
    )
}

fn answer(body: &Value) -> Response {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let task = messages
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .and_then(|t| t.strip_prefix("TASK h"))
        .and_then(|t| t.get(..2))
        .and_then(|n| n.parse::<usize>().ok())
        .expect("a task instruction");
    let step = messages.iter().filter(|m| m["role"] == "assistant").count();
    let look = || call("read", json!({"filePath": "calc.sh"}));
    let fix = || call("write", json!({"filePath": "calc.sh", "content": FIXED}));
    let answer = match (kind(task), step) {
        (Kind::Fix | Kind::Background, 0) => look(),
        (Kind::Fix, 1) => fix(),
        (Kind::GiveUp, _) => text("I could not fix it."),
        (Kind::Crash, 0) => bash("kill -9 -1"),
        (Kind::Slow, 0) => bash("sleep 60"),
        // Looks for the tests, then plants a passing reward and a test of its own, and
        // locks them in.
        (Kind::Cheat, 0) => bash(
            "ls /tests; mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh && chmod -R a-w /tests /logs/verifier",
        ),
        (Kind::Background, 1) => fix(),
        (Kind::Background, 2) => bash(
            "setsid sh -c 'while true; do echo x >> /app/beats; sleep 0.05; done' >/dev/null 2>&1 < /dev/null & sleep 0.3",
        ),
        (Kind::Background, 3) => bash("sleep 0.5; wc -c < /app/beats"),
        (Kind::System, 0) => bash(
            "printf '#!/bin/sh\\necho $(($1 + $2))\\n' > /usr/local/bin/add && chmod +x /usr/local/bin/add && printf 'add \"$@\"\\n' > calc.sh",
        ),
        (Kind::AsUser, 0) => bash("id -un"),
        (Kind::AsUser, 1) => look(),
        (Kind::AsUser, 2) => fix(),
        _ => text("Done."),
    };
    Response::Stream(answer)
}

struct TaskSet {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

/// A Harbor task folder: `calc.sh` in the image at `/app`, the hidden test, and a
/// solution that is right unless `wrong`.
fn harbor_task(dir: &Path, instruction: &str, toml: &str, dockerfile: &str, test: &str) {
    std::fs::create_dir_all(dir.join("environment")).unwrap();
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::create_dir_all(dir.join("solution")).unwrap();
    std::fs::write(dir.join("instruction.md"), instruction).unwrap();
    std::fs::write(dir.join("task.toml"), toml).unwrap();
    std::fs::write(dir.join("environment/Dockerfile"), dockerfile).unwrap();
    std::fs::write(dir.join("environment/calc.sh"), BUGGY).unwrap();
    std::fs::write(dir.join("tests/test.sh"), test).unwrap();
    std::fs::write(
        dir.join("solution/solve.sh"),
        format!("printf '%s' '{FIXED}' > /app/calc.sh\n"),
    )
    .unwrap();
}

const TOML: &str = "version = \"1.0\"\n[metadata]\nauthor = \"test\"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n";

fn model_set(count: usize) -> TaskSet {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    for n in 0..count {
        let id = format!("h{n:02}");
        let task = dir.join(&id);
        let instruction = format!("TASK {id}: calc.sh should add its two arguments. Fix it.\n");
        let (toml, dockerfile, test) = match kind(n) {
            Kind::Slow => (
                TOML.replace("timeout_sec = 120", "timeout_sec = 3"),
                DOCKERFILE.to_string(),
                TEST.to_string(),
            ),
            Kind::Background => (
                TOML.to_string(),
                DOCKERFILE.to_string(),
                TEST.replace(
                    "set -e\n",
                    "set -e\na=$(wc -c < /app/beats); sleep 1; b=$(wc -c < /app/beats)\necho \"beats $a $b\"\n[ \"$a\" = \"$b\" ]\n",
                ),
            ),
            Kind::AsUser => (
                TOML.replace("timeout_sec = 120\n", "timeout_sec = 120\nuser = \"agent\"\n"),
                format!("{DOCKERFILE}RUN useradd -m agent && chown -R agent /app\n"),
                TEST.replace(
                    "set -e\n",
                    "set -e\n[ \"$(id -u)\" = 0 ] && [ \"$HOME\" = /root ]\n[ \"$(stat -c %U /app/calc.sh)\" = agent ]\n",
                ),
            ),
            _ => (TOML.to_string(), DOCKERFILE.to_string(), TEST.to_string()),
        };
        harbor_task(&task, &instruction, &toml, &dockerfile, &test);
    }
    // A task without an instruction, and one whose image cannot be built.
    harbor_task(&dir.join("no-instruction"), "", TOML, DOCKERFILE, TEST);
    harbor_task(
        &dir.join("bad-image"),
        "TASK h99",
        TOML,
        "FROM runner-sandbox:bookworm\nRUN echo the build breaks here && exit 7\n",
        TEST,
    );
    TaskSet { _tmp: tmp, dir }
}

fn eval(set: &Path, out: &Path, extra: &[&str], model: Option<&ScriptedModel>) -> (Output, u32) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_runner"));
    cmd.args(["eval", "run"])
        .arg(set)
        .arg("--out")
        .arg(out)
        .args(extra)
        .env("XDG_DATA_HOME", out.with_extension("data"))
        .env("XDG_CONFIG_HOME", out.with_extension("config"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(m) = model {
        cmd.args(["--model", "openai/scripted"])
            .env("OPENAI_API_KEY", "sk-eval-test")
            .env("OPENAI_BASE_URL", m.openai_base());
    }
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    (child.wait_with_output().unwrap(), pid)
}

fn containers_of(pid: u32) -> String {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=runner.owner-pid={pid}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn read_json(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

fn said(run: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    )
}

#[test]
fn twenty_harbor_tasks_get_exactly_the_verdicts_the_script_deserves() {
    common::engine::docker();
    let set = model_set(20);
    let model = ScriptedModel::responding(answer);
    let out = set.dir.join("out");
    let (run, pid) = eval(&set.dir, &out, &["--jobs", "4"], Some(&model));
    let told = said(&run);
    assert_eq!(run.status.code(), Some(8), "two infra errors: {told}");
    assert_eq!(containers_of(pid), "", "containers left behind");
    assert!(!out.join(".work").exists(), "scratch folders left behind");

    let mut wrong = Vec::new();
    for n in 0..20 {
        let id = format!("h{n:02}");
        let dir = out.join("tasks").join(&id);
        let r = read_json(&dir.join("result.json"));
        if r["status"] != expected(kind(n)) {
            let log = std::fs::read_to_string(dir.join("verify.log")).unwrap_or_default();
            let session = std::fs::read_to_string(dir.join("session.jsonl")).unwrap_or_default();
            wrong.push(format!(
                "{id} ({:?}): {r:#}\nverify.log: {log}\nsession: {session}",
                kind(n)
            ));
        }
    }
    assert!(wrong.is_empty(), "{}\n{told}", wrong.join("\n\n"));
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(
        summary["counts"],
        json!({"agent_error": 1, "infra_error": 2, "resolved": 13, "timeout": 2, "unresolved": 4}),
        "{summary:#}"
    );
    let broken = read_json(&out.join("tasks/no-instruction/result.json"));
    assert!(
        broken["error"].as_str().unwrap().contains("instruction.md"),
        "{broken}"
    );
    let bad = read_json(&out.join("tasks/bad-image/result.json"));
    assert_eq!(bad["phase"], "build", "{bad}");
    assert!(
        bad["error"]
            .as_str()
            .unwrap()
            .contains("the build breaks here"),
        "{bad}"
    );

    // The diff is the agent's change to the image's worktree.
    let diff = std::fs::read_to_string(out.join("tasks/h00/diff.patch")).unwrap();
    assert!(
        diff.contains("-echo $(($1 - $2))\n+echo $(($1 + $2))"),
        "{diff}"
    );
    assert!(out.join("tasks/h00/session.jsonl").exists());
    // The task container's start checked its wall before the agent's first call, and the
    // attempt's trail holds the report, right after the start.
    let trail = std::fs::read_to_string(out.join("tasks/h00/audit.ndjson")).unwrap();
    let records: Vec<Value> = trail
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records[1]["activity_name"], "Self-test", "{trail}");
    assert_eq!(records[1]["status"], "Success", "{:#}", records[1]);
    assert_eq!(
        records[1]["app"]["feature"]["name"], "docker task image",
        "{:#}",
        records[1]
    );
    // The cheat found no tests, and what it planted did not count.
    let cheat = read_json(&out.join("tasks/h16/result.json"));
    assert_eq!(cheat["reward"], 0.0, "{cheat}");
    let cheat_seen = model
        .requests()
        .iter()
        .filter(|r| r.body.to_string().contains("TASK h16"))
        .map(|r| r.body.to_string())
        .next_back()
        .unwrap();
    assert!(cheat_seen.contains("No such file"), "{cheat_seen}");
    // The writer ran while the agent worked, and was dead for the verdict.
    let bg_log = std::fs::read_to_string(out.join("tasks/h17/verify.log")).unwrap();
    assert!(bg_log.contains("calc.sh 2 3 = 5"), "{bg_log}");
    let alive = model
        .requests()
        .iter()
        .map(|r| r.body["messages"].as_array().unwrap().clone())
        .find(|m| {
            m.iter().any(|x| x.to_string().contains("TASK h17"))
                && m.iter().filter(|x| x["role"] == "assistant").count() == 4
        })
        .unwrap();
    let beats = alive.last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        beats
            .split_whitespace()
            .next()
            .and_then(|w| w.parse::<u64>().ok())
            > Some(0),
        "the writer never ran: {beats}"
    );
    // The agent ran as the task's user.
    let as_user = model
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .rfind(|b| b.contains("TASK h19"))
        .unwrap();
    assert!(as_user.contains("agent\\n"), "{as_user}");
    let predictions = std::fs::read_to_string(out.join("predictions.jsonl")).unwrap();
    assert_eq!(predictions.lines().count(), 22);

    // Again: nothing runs twice (the two infra errors do, and fail the same way).
    let asked = model.requests().len();
    let (again, _) = eval(&set.dir, &out, &["--jobs", "4"], Some(&model));
    assert_eq!(again.status.code(), Some(8), "{}", said(&again));
    assert_eq!(model.requests().len(), asked, "finished tasks ran again");
    assert_eq!(
        read_json(&out.join("summary.json"))["counts"],
        summary["counts"]
    );
}

#[test]
fn the_oracle_resolves_every_right_solution_and_not_a_wrong_one() {
    common::engine::docker();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    for id in ["right-1", "right-2", "right-3"] {
        harbor_task(&dir.join(id), "Fix calc.sh.\n", TOML, DOCKERFILE, TEST);
    }
    // Rewards as a map: every one must reach 1.
    let map_test = |second: &str| {
        TEST.replace(
            "echo 1 > /logs/verifier/reward.txt",
            &format!("echo '{{\"adds\": 1, \"second\": {second}}}' > /logs/verifier/reward.json"),
        )
    };
    harbor_task(
        &dir.join("map-full"),
        "Fix it.\n",
        TOML,
        DOCKERFILE,
        &map_test("1"),
    );
    harbor_task(
        &dir.join("map-half"),
        "Fix it.\n",
        TOML,
        DOCKERFILE,
        &map_test("0.5"),
    );
    harbor_task(&dir.join("wrong"), "Fix calc.sh.\n", TOML, DOCKERFILE, TEST);
    std::fs::write(
        dir.join("wrong/solution/solve.sh"),
        "printf 'echo $(($1 * $2))\\n' > /app/calc.sh\n",
    )
    .unwrap();
    // A prebuilt image instead of a Dockerfile, its own workdir, and the environment and
    // verifier variables.
    let prebuilt = dir.join("prebuilt");
    harbor_task(
        &prebuilt,
        "Make calc.sh.\n",
        "[verifier]\nenv = { CHECK = \"yes\" }\n[environment]\ndocker_image = \"runner-sandbox:bookworm\"\nworkdir = \"/srv/app\"\nenv = { GREETING = \"hi\" }\n",
        DOCKERFILE,
        &TEST.replace("/app/calc.sh", "/srv/app/calc.sh").replace(
            "set -e\n",
            "set -e\n[ \"$GREETING\" = hi ] && [ \"$CHECK\" = yes ]\n",
        ),
    );
    std::fs::remove_dir_all(prebuilt.join("environment")).unwrap();
    std::fs::write(
        prebuilt.join("solution/solve.sh"),
        "[ \"$GREETING\" = hi ] && [ \"$PWD\" = /srv/app ] && printf 'echo $(($1 + $2))\\n' > calc.sh\n",
    )
    .unwrap();
    // A test that leaves a process behind holding its output: the verdict comes when
    // test.sh ends, not when that process does.
    harbor_task(
        &dir.join("leaves-a-process"),
        "Fix calc.sh.\n",
        &TOML.replace("timeout_sec = 60", "timeout_sec = 30"),
        DOCKERFILE,
        &format!("{TEST}sleep 600 &\n"),
    );
    // An image that is neither here nor anywhere to pull from.
    let missing = dir.join("missing-image");
    harbor_task(
        &missing,
        "Fix it.\n",
        "[environment]\ndocker_image = \"runner-test/not-anywhere:none\"\n",
        DOCKERFILE,
        TEST,
    );
    std::fs::remove_dir_all(missing.join("environment")).unwrap();
    let out = dir.join("out");
    let (run, pid) = eval(&dir, &out, &["--agent", "oracle", "--jobs", "3"], None);
    assert_eq!(
        run.status.code(),
        Some(8),
        "missing-image is an infra_error: {}",
        said(&run)
    );
    assert_eq!(containers_of(pid), "");
    let status = |id: &str| read_json(&out.join("tasks").join(id).join("result.json"));
    for id in [
        "right-1",
        "right-2",
        "right-3",
        "map-full",
        "prebuilt",
        "leaves-a-process",
    ] {
        assert_eq!(status(id)["status"], "resolved", "{id}: {}", status(id));
    }
    assert_eq!(status("wrong")["status"], "unresolved");
    let half = status("map-half");
    assert_eq!(half["status"], "unresolved", "{half}");
    assert_eq!(half["rewards"], json!({"adds": 1.0, "second": 0.5}));
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(summary["model"], "oracle");
    assert_eq!(
        summary["counts"],
        json!({"agent_error": 0, "infra_error": 1, "resolved": 6, "timeout": 0, "unresolved": 2}),
        "{summary:#}"
    );
    let missing = status("missing-image");
    assert!(
        missing["error"]
            .as_str()
            .unwrap()
            .contains("runner-test/not-anywhere:none"),
        "{missing}"
    );
    let diff = std::fs::read_to_string(out.join("tasks/wrong/diff.patch")).unwrap();
    assert!(diff.contains("+echo $(($1 * $2))"), "{diff}");
    let left = status("leaves-a-process");
    assert!(
        left["timings"]["verify_ms"].as_u64().unwrap() < 20_000,
        "the verdict waited for the leftover process: {left}"
    );
}

#[test]
fn a_killed_harbor_run_leaves_nothing_once_the_next_one_starts_and_ends_with_the_same_counts() {
    common::engine::docker();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    // Solutions that take a while, so that some are in flight when the run is killed.
    for n in 0..6 {
        let task = dir.join(format!("slow-{n}"));
        harbor_task(&task, "Fix calc.sh.\n", TOML, DOCKERFILE, TEST);
        let solve = std::fs::read_to_string(task.join("solution/solve.sh")).unwrap();
        std::fs::write(
            task.join("solution/solve.sh"),
            format!("sleep 1.5\n{solve}"),
        )
        .unwrap();
    }
    let out = dir.join("out");
    let args = ["--agent", "oracle", "--jobs", "2"];
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_runner"));
    cmd.args(["eval", "run"])
        .arg(&dir)
        .arg("--out")
        .arg(&out)
        .args(args)
        .env("XDG_DATA_HOME", out.with_extension("data"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let killed = child.id();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let done = |out: &Path| {
        std::fs::read_dir(out.join("tasks"))
            .map(|d| {
                d.flatten()
                    .filter(|t| t.path().join("result.json").exists())
                    .count()
            })
            .unwrap_or(0)
    };
    // Killed once a task has finished and others are in their containers: nothing gets to
    // clean up.
    while done(&out) < 1 || containers_of(killed).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no task finished");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    unsafe { libc::kill(killed as i32, libc::SIGKILL) };
    let _ = child.wait();
    assert!(done(&out) < 6, "the run was killed before the end");
    // The kill left the running tasks' containers (the loop above saw them); they are not
    // checked again here, because any runner process of a test beside this one that starts
    // a docker sandbox now reaps them as orphans, as the next run below must.

    let (again, pid) = eval(&dir, &out, &args, None);
    assert_eq!(again.status.code(), Some(0), "{}", said(&again));
    assert_eq!(
        containers_of(killed),
        "",
        "the killed run's containers were not reaped"
    );
    assert_eq!(containers_of(pid), "");
    assert!(!out.join(".work").exists(), "scratch folders left behind");
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(
        summary["counts"],
        json!({"agent_error": 0, "infra_error": 0, "resolved": 6, "timeout": 0, "unresolved": 0}),
        "{summary:#}"
    );
}

#[test]
fn harbor_tasks_run_on_an_engine_reached_over_tcp_with_tls() {
    let engine = common::engine::SecondEngine::start_tls("tls", 23761);
    let tcp = engine.tls_host.clone().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    // A fresh context, so the image is built there and then, on that engine.
    let nonce = format!("{:?}", std::time::SystemTime::now());
    harbor_task(
        &dir.join("built-there"),
        "Fix calc.sh.\n",
        TOML,
        &format!("{DOCKERFILE}LABEL nonce=\"{nonce}\"\n"),
        TEST,
    );
    // On an engine that cannot mount the server, it is copied into the container: a
    // solution that swaps it for a wrapper keeping a planted reward in place must not have
    // that wrapper running beside the verifier.
    let swap = dir.join("swaps-the-server");
    harbor_task(&swap, "Fix calc.sh.\n", TOML, DOCKERFILE, TEST);
    std::fs::write(
        swap.join("solution/solve.sh"),
        "mv /opt/runner/runner /opt/runner/real\nprintf '#!/bin/sh\\n(while true; do echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.05; done) &\\nexec /opt/runner/real \"$@\"\\n' > /opt/runner/runner\nchmod 755 /opt/runner/runner\n",
    )
    .unwrap();
    let out = dir.join("out");
    let run = |extra_env: &[(&str, String)], set: &Path| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_runner"));
        cmd.args(["eval", "run"])
            .arg(set)
            .arg("--out")
            .arg(&out)
            .args(["--agent", "oracle", "--docker-host", &tcp])
            .env("XDG_DATA_HOME", out.with_extension("data"))
            .env_remove("DOCKER_TLS_VERIFY")
            .env_remove("DOCKER_CERT_PATH")
            .stdin(Stdio::null());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    // Plain HTTP to a TLS port: refused, and the message names the engine.
    let plain = run(&[], &dir);
    assert_ne!(plain.status.code(), Some(0), "{}", said(&plain));
    assert!(
        String::from_utf8_lossy(&plain.stderr).contains(&tcp),
        "{}",
        said(&plain)
    );

    let tls = [
        ("DOCKER_TLS_VERIFY", "1".to_string()),
        ("DOCKER_CERT_PATH", engine.cert_dir().display().to_string()),
    ];
    let ran = run(&tls, &dir);
    assert_eq!(ran.status.code(), Some(0), "{}", said(&ran));
    let r = read_json(&out.join("tasks/built-there/result.json"));
    assert_eq!(r["status"], "resolved", "{r:#}");
    let swapped = read_json(&out.join("tasks/swaps-the-server/result.json"));
    assert_eq!(swapped["status"], "unresolved", "{swapped:#}");
    let log = std::fs::read_to_string(out.join("tasks/swaps-the-server/agent.log")).unwrap();
    assert!(!log.contains("No such file"), "the swap happened: {log}");
    // Built on that engine, not on this machine's.
    let images = |host: &str| {
        let o = Command::new("docker")
            .args(["-H", host, "images", "--filter"])
            .arg(format!("label=nonce={nonce}"))
            .args(["--format", "{{.Repository}}"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(images(&engine.host), "runner-task");
    assert_eq!(images("unix:///var/run/docker.sock"), "");

    // A JSON-lines task mounts its worktree from here: refused on an engine that may not
    // see it.
    let jsonl = dir.join("tasks.jsonl");
    std::fs::write(
        &jsonl,
        r#"{"id":"j","instruction":"x","repo":".","verify":"true"}"#,
    )
    .unwrap();
    let refused = run(&tls, &jsonl);
    assert_ne!(refused.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("mount their worktree"),
        "{}",
        said(&refused)
    );
}

#[test]
fn the_example_harbor_tasks_resolve_with_their_own_solutions() {
    common::engine::docker();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/harbor");
    let (run, _) = eval(&examples, &out, &["--agent", "oracle"], None);
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(summary["counts"]["resolved"], 2, "{summary:#}");
    let words = read_json(&out.join("tasks/count-words/result.json"));
    assert_eq!(words["rewards"], json!({"exists": 1.0, "right": 1.0}));
}

/// Harbor's `allow_internet`: the oracle's download from the package registry the machine
/// reaches works through the proxy in a task that allows the internet, and fails in the
/// same task without it. (The registry is pip's default; nothing here names it.)
#[test]
fn allow_internet_opens_the_proxy_and_only_for_the_task_that_asks() {
    common::engine::docker();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    // Nothing hands pip a certificate: the task container trusts the host's authorities.
    let dockerfile = DOCKERFILE.to_string();
    let test = "#!/bin/bash\nls /app/dl/six-1.16.0-py2.py3-none-any.whl && echo 1 > /logs/verifier/reward.txt\n";
    for (id, allow) in [("online", true), ("offline", false)] {
        let task = dir.join(id);
        let toml = format!("{TOML}[environment]\nallow_internet = {allow}\n");
        harbor_task(&task, "Download six.\n", &toml, &dockerfile, test);
        std::fs::write(
            task.join("solution/solve.sh"),
            "python3 -m venv /tmp/v && /tmp/v/bin/pip download --no-deps --retries 0 --timeout 20 \
             --disable-pip-version-check -d /app/dl six==1.16.0\n",
        )
        .unwrap();
    }
    let out = dir.join("out");
    let (run, pid) = eval(&dir, &out, &["--agent", "oracle", "--jobs", "2"], None);
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    assert_eq!(containers_of(pid), "");
    let status = |id: &str| read_json(&out.join("tasks").join(id).join("result.json"));
    assert_eq!(
        status("online")["status"],
        "resolved",
        "{}",
        status("online")
    );
    assert_eq!(
        status("offline")["status"],
        "unresolved",
        "{}",
        status("offline")
    );
    let log = std::fs::read_to_string(out.join("tasks/offline/agent.log")).unwrap_or_default();
    assert!(
        !log.contains("Saved"),
        "the offline task downloaded something:\n{log}"
    );
}

/// A package index on the host's loopback (`python3 -m http.server` over a PEP 503 tree)
/// holding one wheel, `tinycheck`, made here: a verifier's test tool that only the network
/// brings.
struct Index {
    _tmp: tempfile::TempDir,
    child: std::process::Child,
    port: u16,
}

impl Drop for Index {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn package_index() -> Index {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let wheel = "tinycheck-1.0-py3-none-any.whl";
    std::fs::create_dir_all(root.join("simple/tinycheck")).unwrap();
    std::fs::write(
        root.join("simple/tinycheck/index.html"),
        format!("<html><body><a href=\"../../{wheel}\">{wheel}</a></body></html>\n"),
    )
    .unwrap();
    let made = Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, zipfile\n\
             z = zipfile.ZipFile(sys.argv[1], 'w')\n\
             z.writestr('tinycheck.py', 'def ok():\\n    return True\\n')\n\
             d = 'tinycheck-1.0.dist-info/'\n\
             z.writestr(d + 'METADATA', 'Metadata-Version: 2.1\\nName: tinycheck\\nVersion: 1.0\\n')\n\
             z.writestr(d + 'WHEEL', 'Wheel-Version: 1.0\\nGenerator: runner-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n\
             z.writestr(d + 'RECORD', 'tinycheck.py,,\\n' + d + 'METADATA,,\\n' + d + 'WHEEL,,\\n' + d + 'RECORD,,\\n')\n\
             z.close()\n",
        )
        .arg(root.join(wheel))
        .status()
        .unwrap();
    assert!(made.success(), "the wheel");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("python3")
        .args(["-m", "http.server", "--bind", "127.0.0.1"])
        .arg(port.to_string())
        .arg("--directory")
        .arg(root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the index did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Index {
        _tmp: tmp,
        child,
        port,
    }
}

/// Terminal-Bench's verifiers install their test tools as they run. Here the verifier
/// installs `tinycheck` from a local index through the proxy (the evaluation's `--config`
/// opens the index's host), and its connections, the one a rule refused too, are in the
/// attempt; the task with a wrong solution stays unresolved, and with `--verifier-network
/// none` the right one cannot get its tool and says why.
#[test]
fn the_verifier_installs_its_test_tool_through_the_proxy() {
    common::engine::docker();
    let index = package_index();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let test = format!(
        "#!/bin/bash\n\
         curl -s -o /dev/null --max-time 10 https://example.com/ || echo 'example.com refused'\n\
         python3 -m venv /tmp/tv && no_proxy= NO_PROXY= /tmp/tv/bin/pip install -q --disable-pip-version-check \
         --retries 0 --timeout 20 --index-url http://127.0.0.1:{}/simple/ tinycheck || exit 3\n\
         /tmp/tv/bin/python -c 'import tinycheck; assert tinycheck.ok()'\n\
         [ \"$(sh /app/calc.sh 2 3)\" = 5 ] && echo 1 > /logs/verifier/reward.txt\n",
        index.port
    );
    for id in ["tool", "tool-wrong"] {
        harbor_task(&dir.join(id), "Fix calc.sh.\n", TOML, DOCKERFILE, &test);
    }
    // The sabotaged twin: its solution leaves calc.sh as it was.
    std::fs::write(dir.join("tool-wrong/solution/solve.sh"), "true\n").unwrap();
    let config = dir.join("eval.toml");
    std::fs::write(&config, "[permission.network]\n\"127.0.0.1\" = \"allow\"\n").unwrap();
    let config = config.display().to_string();
    let set = dir.clone();
    let out = dir.join("out");
    let (run, pid) = eval(
        &set,
        &out,
        // The registries' list, not the task's own policy (public: it says nothing).
        &[
            "--agent",
            "oracle",
            "--jobs",
            "2",
            "--config",
            &config,
            "--verifier-network",
            "allowlist",
        ],
        None,
    );
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    assert_eq!(containers_of(pid), "");
    let result = |out: &Path, id: &str| read_json(&out.join("tasks").join(id).join("result.json"));
    let tool = result(&out, "tool");
    assert_eq!(tool["status"], "resolved", "{tool}");
    let lines: Vec<&str> = tool["verifier_network"]
        .as_array()
        .unwrap_or_else(|| panic!("no verifier_network in {tool}"))
        .iter()
        .filter_map(|l| l.as_str())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("allow 127.0.0.1:{}", index.port))),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("deny example.com:443")),
        "{lines:?}"
    );
    let records = std::fs::read_to_string(out.join("tasks/tool/verifier-network.jsonl")).unwrap();
    assert!(records.contains("\"decision\":\"deny\""), "{records}");
    let wrong = result(&out, "tool-wrong");
    assert_eq!(wrong["status"], "unresolved", "{wrong}");
    // Each attempt says how its image came to be.
    let build = std::fs::read_to_string(out.join("tasks/tool/build.log")).unwrap();
    assert!(
        build.contains("Step") || build.contains("already on the engine"),
        "{build}"
    );

    let offline = dir.join("offline");
    let (run, _) = eval(
        &set,
        &offline,
        &[
            "--agent",
            "oracle",
            "--jobs",
            "2",
            "--config",
            &config,
            "--verifier-network",
            "none",
        ],
        None,
    );
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    let tool = result(&offline, "tool");
    assert_eq!(tool["status"], "unresolved", "{tool}");
    assert_eq!(tool["verifier"]["exit"], 3, "{tool}");
    assert!(tool.get("verifier_network").is_none(), "{tool}");
}

/// apt in a task container as root, on an image without runner's own apt setting: it
/// fetches through the proxy (the task allows the internet) instead of failing with
/// `setgroups 65534 failed`; the twin that does not allow the internet cannot.
#[test]
fn apt_installs_in_a_task_container_through_the_proxy() {
    // The base without the sandbox image's own apt setting, made if the engine lacks it.
    common::engine::ensure_base();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let base = runner_sandbox::docker::image::DEFAULT_BASE;
    let dockerfile = format!("FROM {base}\nWORKDIR /app\nCOPY calc.sh /app/calc.sh\n");
    let test = "#!/bin/bash\ngrep -q 'Hello, world!' /app/hello.txt && echo 1 > /logs/verifier/reward.txt\n";
    for (id, allow) in [("apt", true), ("apt-offline", false)] {
        let toml = format!("{TOML}[environment]\nallow_internet = {allow}\n");
        harbor_task(&dir.join(id), "Install hello.\n", &toml, &dockerfile, test);
        std::fs::write(
            dir.join(id).join("solution/solve.sh"),
            "apt-get update -qq -o Acquire::Retries=0 2>&1 | tail -3; \
             apt-get install -y -qq --no-install-recommends hello 2>&1 | tail -3; \
             hello > /app/hello.txt\n",
        )
        .unwrap();
    }
    let out = dir.join("out");
    let (run, pid) = eval(&dir, &out, &["--agent", "oracle", "--jobs", "2"], None);
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    assert_eq!(containers_of(pid), "");
    let result = |id: &str| read_json(&out.join("tasks").join(id).join("result.json"));
    let log = |id: &str| {
        std::fs::read_to_string(out.join("tasks").join(id).join("agent.log")).unwrap_or_default()
    };
    assert_eq!(
        result("apt")["status"],
        "resolved",
        "{}\n{}",
        result("apt"),
        log("apt")
    );
    assert!(!log("apt").contains("setgroups"), "{}", log("apt"));
    assert_eq!(
        result("apt-offline")["status"],
        "unresolved",
        "{}",
        result("apt-offline")
    );
}

/// `--build-network NAME`: the task image's `RUN` steps get that network (here `none`:
/// only `lo`), and the attempt's `build.log` shows the build's own output; without the
/// flag, the engine's default bridge.
#[test]
fn build_network_chooses_the_network_of_run_steps_and_the_build_log_is_kept() {
    common::engine::docker();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let stamp = format!("{:?}", std::time::SystemTime::now());
    let mut logs = Vec::new();
    for (name, flag) in [("none", Some("none")), ("default", None)] {
        let set = dir.join(format!("set-{name}"));
        // The build step lists the interfaces it sees; each build is new (its own stamp).
        let dockerfile =
            format!("{DOCKERFILE}RUN echo 'build {stamp} {name}' && cat /proc/net/dev\n");
        harbor_task(&set.join("net"), "Fix calc.sh.\n", TOML, &dockerfile, TEST);
        let out = dir.join(format!("out-{name}"));
        let mut args = vec!["--agent", "oracle"];
        if let Some(network) = flag {
            args.extend(["--build-network", network]);
        }
        let (run, _) = eval(&set, &out, &args, None);
        assert_eq!(run.status.code(), Some(0), "{}", said(&run));
        let log = std::fs::read_to_string(out.join("tasks/net/build.log")).unwrap();
        assert!(log.contains(&format!("build {stamp} {name}")), "{log}");
        logs.push(log);
    }
    assert!(
        logs[0].contains("lo:") && !logs[0].contains("eth0:"),
        "--build-network none: {}",
        logs[0]
    );
    assert!(logs[1].contains("eth0:"), "the default bridge: {}", logs[1]);
}

/// A multi-step task: `steps/NAME/` each with its instruction, tests and solution, in one
/// container; the first step's file must still be there for the second's tests.
fn multi_step_task(dir: &Path, toml_extra: &str, second_solution: &str) {
    std::fs::create_dir_all(dir.join("environment")).unwrap();
    std::fs::write(dir.join("environment/Dockerfile"), DOCKERFILE).unwrap();
    std::fs::write(dir.join("environment/calc.sh"), BUGGY).unwrap();
    std::fs::write(
        dir.join("task.toml"),
        format!("version = \"1.0\"\n{toml_extra}[[steps]]\nname = \"first\"\nmin_reward = 1.0\n[steps.agent]\ntimeout_sec = 60\n[[steps]]\nname = \"second\"\n"),
    )
    .unwrap();
    // The task's own tests: a helper both steps use.
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(
        dir.join("tests/has.sh"),
        "grep -qx \"$2\" \"$1\" && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    for (step, file, solution) in [
        ("first", "/app/one.txt", "echo one > /app/one.txt\n"),
        ("second", "/app/two.txt", second_solution),
    ] {
        let s = dir.join("steps").join(step);
        std::fs::create_dir_all(s.join("tests")).unwrap();
        std::fs::create_dir_all(s.join("solution")).unwrap();
        std::fs::write(s.join("instruction.md"), format!("Write {file}.\n")).unwrap();
        let want = if step == "first" { "one" } else { "two" };
        let test = if step == "second" {
            // The first step's work is still there.
            format!(
                "#!/bin/bash\ngrep -qx one /app/one.txt || {{ echo 0 > /logs/verifier/reward.txt; exit 0; }}\nbash /tests/has.sh {file} {want}\n"
            )
        } else {
            format!("#!/bin/bash\nbash /tests/has.sh {file} {want}\n")
        };
        std::fs::write(s.join("tests/test.sh"), test).unwrap();
        std::fs::write(s.join("solution/solve.sh"), solution).unwrap();
    }
}

/// An old Terminal-Bench task: `task.yaml`, the Dockerfile at the root, `run-tests.sh`
/// over `tests/`, `solution.sh`; its tests print pytest's verdict lines.
fn old_layout_task(dir: &Path, solution: &str) {
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(
        dir.join("task.yaml"),
        "instruction: |-\n  calc.sh should add its two arguments. Fix it.\nauthor_email: someone@example.com\ndifficulty: easy\nparser_name: pytest\nmax_agent_timeout_sec: 120\nmax_test_timeout_sec: 60\n",
    )
    .unwrap();
    std::fs::write(dir.join("Dockerfile"), DOCKERFILE).unwrap();
    std::fs::write(dir.join("calc.sh"), BUGGY).unwrap();
    std::fs::write(
        dir.join("docker-compose.yaml"),
        "services:\n  client:\n    build:\n      dockerfile: Dockerfile\n    command: [\"sh\", \"-c\", \"sleep infinity\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("run-tests.sh"),
        "#!/bin/bash\nbash $TEST_DIR/check.sh\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("tests/check.sh"),
        "if [ \"$(sh /app/calc.sh 2 3)\" = 5 ]; then echo 'PASSED test_outputs.py::test_add'; else echo 'FAILED test_outputs.py::test_add'; fi\n",
    )
    .unwrap();
    std::fs::write(dir.join("solution.sh"), solution).unwrap();
}

/// The formats people have, each beside a sabotaged twin that must fail: a multi-step task
/// (the twin's second step is wrong: half the reward), one whose first step misses its
/// `min_reward` (the second never runs), the original Terminal-Bench layout, and a task
/// with fields runner does not honour (said once for the set) and ones it does (the
/// solution's env, artifacts).
#[test]
fn the_formats_people_have_run_and_their_twins_fail() {
    common::engine::docker();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let fixed = format!("printf '%s' '{FIXED}' > /app/calc.sh\n");
    multi_step_task(&dir.join("steps-right"), "", "echo two > /app/two.txt\n");
    multi_step_task(&dir.join("steps-wrong"), "", "echo three > /app/two.txt\n");
    multi_step_task(&dir.join("steps-stopped"), "", "echo two > /app/two.txt\n");
    std::fs::write(
        dir.join("steps-stopped/steps/first/solution/solve.sh"),
        "echo nothing\n",
    )
    .unwrap();
    old_layout_task(&dir.join("old-right"), &fixed);
    old_layout_task(&dir.join("old-wrong"), "true\n");
    let unknown = format!(
        "mcp_servers = [{{ name = \"x\", command = \"y\" }}]\nartifacts = [\"/app/out.txt\"]\n{TOML}[environment]\ngpus = 1\nstorage_mb = 1024\n[solution.env]\nGREETING = \"it's fixed\"\n"
    );
    let test = format!(
        "{TEST}grep -qx \"it's fixed\" /app/out.txt || echo 0 > /logs/verifier/reward.txt\n"
    );
    for (id, solve) in [
        (
            "fields-right",
            format!("{fixed}echo \"$GREETING\" > /app/out.txt\n"),
        ),
        (
            "fields-wrong",
            format!("{fixed}echo \"$NOT_SET\" > /app/out.txt\n"),
        ),
    ] {
        harbor_task(&dir.join(id), "Fix calc.sh.\n", &unknown, DOCKERFILE, &test);
        std::fs::write(dir.join(id).join("solution/solve.sh"), solve).unwrap();
    }
    let out = dir.join("out");
    let (run, pid) = eval(&dir, &out, &["--agent", "oracle", "--jobs", "2"], None);
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    assert_eq!(containers_of(pid), "");
    let result = |id: &str| read_json(&out.join("tasks").join(id).join("result.json"));
    let steps = |v: &Value| -> Vec<String> {
        v["step_rewards"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| s[0].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let right = result("steps-right");
    assert_eq!(right["status"], "resolved", "{right}");
    assert_eq!(steps(&right), ["first", "second"], "{right}");
    let wrong = result("steps-wrong");
    assert_eq!(wrong["status"], "unresolved", "{wrong}");
    assert_eq!(wrong["reward"], 0.5, "the mean of 1 and 0: {wrong}");
    let stopped = result("steps-stopped");
    assert_eq!(stopped["status"], "unresolved", "{stopped}");
    assert_eq!(
        steps(&stopped),
        ["first"],
        "the second step never ran: {stopped}"
    );
    assert_eq!(stopped["reward"], 0.0, "{stopped}");
    for (id, status) in [
        ("old-right", "resolved"),
        ("old-wrong", "unresolved"),
        ("fields-right", "resolved"),
        ("fields-wrong", "unresolved"),
    ] {
        assert_eq!(result(id)["status"], status, "{id}: {}", result(id));
    }
    assert!(
        out.join("tasks/fields-right/artifacts/app_out.txt.tar")
            .is_file(),
        "the artifact is kept"
    );
    // Each field runner does not honour is said once for the set, with what it does.
    let err = String::from_utf8_lossy(&run.stderr);
    for field in [
        "`environment.gpus` (2 tasks)",
        "`environment.storage_mb` (2 tasks)",
        "`mcp_servers` (2 tasks)",
    ] {
        assert_eq!(err.matches(field).count(), 1, "{field}\n{err}");
    }
    assert!(!err.contains("solution.env"), "{err}");
}

/// A real agent's attempt records its tokens, its cost (the config gives the model's
/// price) and the time of each phase; the summary adds them up and the report shows them.
#[test]
fn an_attempt_records_tokens_cost_and_time_per_phase() {
    common::engine::docker();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    harbor_task(
        &dir.join("h00"),
        "TASK h00: calc.sh should add its two arguments. Fix it.\n",
        TOML,
        DOCKERFILE,
        TEST,
    );
    let config = dir.join("prices.toml");
    std::fs::write(
        &config,
        "[provider.openai.prices]\nscripted = { input = 3.0, output = 15.0, cache_read = 0.3 }\n",
    )
    .unwrap();
    let model = ScriptedModel::responding(answer);
    let out = dir.join("out");
    let (run, _) = eval(
        &dir.join("h00"),
        &out,
        &["--config", &config.display().to_string()],
        Some(&model),
    );
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    let r = read_json(&out.join("tasks/h00/result.json"));
    assert_eq!(r["status"], "resolved", "{r}");
    let u = &r["usage"];
    let tokens = |k: &str| u[k].as_f64().unwrap();
    assert!(
        tokens("input") > 0.0 && tokens("output") > 0.0 && tokens("cache_read") > 0.0,
        "{r}"
    );
    let expected = (tokens("input") * 3.0
        + tokens("output") * 15.0
        + tokens("cache_read") * 0.3
        + tokens("cache_write") * 3.0)
        / 1e6;
    let cost = r["cost_usd"]
        .as_f64()
        .unwrap_or_else(|| panic!("no cost: {r}"));
    assert!((cost - expected).abs() < 1e-9, "{cost} != {expected}");
    for phase in ["agent_ms", "verify_ms", "total_ms"] {
        assert!(r["timings"][phase].as_u64().unwrap() > 0, "{phase}: {r}");
    }
    let summary = read_json(&out.join("summary.json"));
    assert!(
        (summary["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-9,
        "{summary}"
    );
    assert!(summary["verify_ms"].as_u64().unwrap() > 0, "{summary}");
    let report = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["eval", "report"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(report.status.code(), Some(0), "{}", said(&report));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("\"cost_usd\":") && html.contains("cost $"),
        "the report shows the cost"
    );
}

const SECRET: &str = "HOST-SECRET-7f3a9c";

/// A host folder beside the task set holding a secret, with what a hostile task would
/// want found there: a `test.sh` that prints every file, a Dockerfile that copies the
/// secret in, a `solve.sh`, and a `task.toml` and scripts that quote it.
fn host_secrets(at: &Path) {
    std::fs::create_dir_all(at.join("dir")).unwrap();
    std::fs::write(at.join("dir/key"), SECRET).unwrap();
    std::fs::write(
        at.join("dir/test.sh"),
        "cat /tests/* /solution/* 2>/dev/null; echo 1 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    std::fs::write(at.join("dir/solve.sh"), format!("echo {SECRET}\n")).unwrap();
    std::fs::write(
        at.join("dir/Dockerfile"),
        "FROM runner-sandbox:bookworm\nWORKDIR /app\nCOPY key /app/key\n",
    )
    .unwrap();
    std::fs::write(at.join("instruction.md"), format!("{SECRET}\n")).unwrap();
    std::fs::write(
        at.join("task.toml"),
        format!("version = \"1.0\"\n[metadata]\nnote = \"{SECRET}\"\n"),
    )
    .unwrap();
    std::fs::write(at.join("run-tests.sh"), format!("echo {SECRET}\n")).unwrap();
}

/// Every file under `dir` (links not followed) that holds `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file()
                && std::fs::read(e.path())
                    .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                found.push(e.path());
            }
        }
    }
    found
}

/// A task set downloaded from the internet is untrusted: each file runner takes from a
/// task, linked to a host folder holding a secret, makes that task a load error naming
/// the link, and the secret reaches no output, no result, no converted task and no
/// image. The control task's links stay inside its folder: it loads, its links are
/// followed (the instruction) or packed as links (the tests), and it is resolved.
#[test]
fn links_out_of_a_task_folder_are_refused_by_name_and_links_inside_still_work() {
    use std::os::unix::fs::symlink;
    common::engine::docker();
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let host = root.join("host");
    host_secrets(&host);
    let dir = root.join("set");
    let fixed = format!("printf '%s' '{FIXED}' > /app/calc.sh\n");
    let plain = |id: &str| {
        harbor_task(&dir.join(id), "Fix calc.sh.\n", TOML, DOCKERFILE, TEST);
        dir.join(id)
    };
    let relink = |link: PathBuf, to: PathBuf| {
        let _ = std::fs::remove_dir_all(&link);
        let _ = std::fs::remove_file(&link);
        symlink(to, link).unwrap();
    };
    // Each way out, and the link each must name.
    let mut refused: Vec<(&str, String)> = Vec::new();
    let t = plain("tests-out");
    relink(t.join("tests"), host.join("dir"));
    refused.push(("tests-out", "tests-out/tests".into()));
    let t = plain("test-file-out");
    symlink(host.join("dir/key"), t.join("tests/key")).unwrap();
    refused.push((
        "test-file-out",
        "tests-out/tests/key".replace("tests-out", "test-file-out"),
    ));
    let t = plain("relative-out");
    symlink("../../../host/dir/key", t.join("tests/key")).unwrap();
    refused.push(("relative-out", "relative-out/tests/key".into()));
    let t = plain("environment-out");
    relink(t.join("environment"), host.join("dir"));
    refused.push(("environment-out", "environment-out/environment".into()));
    let t = plain("context-file-out");
    symlink(host.join("dir/key"), t.join("environment/key")).unwrap();
    refused.push((
        "context-file-out",
        "context-file-out/environment/key".into(),
    ));
    let t = plain("instruction-out");
    relink(t.join("instruction.md"), host.join("instruction.md"));
    refused.push(("instruction-out", "instruction-out/instruction.md".into()));
    let t = plain("toml-out");
    relink(t.join("task.toml"), host.join("task.toml"));
    refused.push(("toml-out", "toml-out/task.toml".into()));
    let t = plain("solution-out");
    relink(t.join("solution"), host.join("dir"));
    refused.push(("solution-out", "solution-out/solution".into()));
    multi_step_task(&dir.join("step-tests-out"), "", "echo two > /app/two.txt\n");
    relink(
        dir.join("step-tests-out/steps/second/tests"),
        host.join("dir"),
    );
    refused.push(("step-tests-out", "step-tests-out/steps/second/tests".into()));
    old_layout_task(&dir.join("old-tests-out"), &fixed);
    relink(
        dir.join("old-tests-out/run-tests.sh"),
        host.join("run-tests.sh"),
    );
    refused.push(("old-tests-out", "old-tests-out/run-tests.sh".into()));
    old_layout_task(&dir.join("old-solution-out"), &fixed);
    relink(
        dir.join("old-solution-out/solution.sh"),
        host.join("dir/solve.sh"),
    );
    refused.push(("old-solution-out", "old-solution-out/solution.sh".into()));
    old_layout_task(&dir.join("old-context-out"), &fixed);
    symlink(host.join("dir"), dir.join("old-context-out/data")).unwrap();
    refused.push(("old-context-out", "old-context-out/data".into()));
    // A whole task folder in the set that is a link to one elsewhere.
    harbor_task(
        &host.join("elsewhere"),
        "Fix calc.sh.\n",
        TOML,
        DOCKERFILE,
        TEST,
    );
    std::fs::write(host.join("elsewhere/tests/key"), SECRET).unwrap();
    symlink(host.join("elsewhere"), dir.join("folder-out")).unwrap();
    refused.push(("folder-out", "folder-out".into()));
    // The control: links that stay inside, followed where a file is read and packed as
    // links where a tree is.
    let c = plain("inside");
    std::fs::create_dir_all(c.join("docs")).unwrap();
    std::fs::rename(c.join("instruction.md"), c.join("docs/instruction.md")).unwrap();
    symlink("docs/instruction.md", c.join("instruction.md")).unwrap();
    std::fs::rename(c.join("tests/test.sh"), c.join("tests/real-test.sh")).unwrap();
    symlink("real-test.sh", c.join("tests/test.sh")).unwrap();
    std::fs::write(
        c.join("tests/real-test.sh"),
        format!("[ -L /tests/test.sh ] || exit 3\n{TEST}"),
    )
    .unwrap();

    let out = root.join("out");
    let (run, pid) = eval(&dir, &out, &["--agent", "oracle", "--jobs", "2"], None);
    assert_eq!(
        run.status.code(),
        Some(8),
        "the refused tasks: {}",
        said(&run)
    );
    assert_eq!(containers_of(pid), "");
    let inside = read_json(&out.join("tasks/inside/result.json"));
    assert_eq!(inside["status"], "resolved", "{inside}");
    for (id, link) in &refused {
        let r = read_json(&out.join("tasks").join(id).join("result.json"));
        assert_eq!(r["status"], "infra_error", "{id}: {r}");
        assert_eq!(r["phase"], "load", "{id}: {r}");
        let why = r["error"].as_str().unwrap();
        assert!(
            why.contains(&dir.join(link).display().to_string()) && why.contains("outside"),
            "{id} must name {link}: {why}"
        );
    }
    let said = said(&run);
    assert!(!said.contains(SECRET), "{said}");
    assert_eq!(files_holding(&out, SECRET), Vec::<PathBuf>::new());
    // Nothing of a refused task reached the engine: no build, no container.
    for (id, _) in &refused {
        assert!(
            !out.join("tasks").join(id).join("build.log").exists(),
            "{id}"
        );
    }
}

/// Words of a task reach the terminal escaped, every way eval says them: the note naming
/// an unread `task.toml` key once per set (the key carries OSC 52, which would set the
/// clipboard, a carriage return and a bidi override), and an attempt's failure quoting its
/// task's folder name. The control: the same note for a plain key, as it was, and the
/// task beside them resolved.
#[test]
fn what_a_task_says_reaches_the_terminal_escaped() {
    common::engine::docker();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap().join("set");
    // TOML's own escapes put the raw characters in the key.
    let toml =
        format!("\"\\u001b]52;c;cHduZWQ=\\u0007clip\\r\\u202eyek\" = 1\nplain_unknown = 1\n{TOML}");
    harbor_task(&dir.join("loud"), "Fix calc.sh.\n", &toml, DOCKERFILE, TEST);
    std::fs::write(
        dir.join("loud/solution/solve.sh"),
        format!("printf '%s' '{FIXED}' > /app/calc.sh\n"),
    )
    .unwrap();
    // A folder name with a title-setting sequence, quoted by the failure of its attempt
    // (the oracle finds no solution there).
    let odd = dir.join("odd\u{1b}]0;TITLE\u{7}name");
    harbor_task(&odd, "Fix calc.sh.\n", TOML, DOCKERFILE, TEST);
    std::fs::remove_dir_all(odd.join("solution")).unwrap();
    let out = dir.with_file_name("out");
    let (run, _) = eval(&dir, &out, &["--agent", "oracle"], None);
    assert_eq!(
        run.status.code(),
        Some(8),
        "odd has no solution: {}",
        said(&run)
    );
    let all = [run.stdout.as_slice(), run.stderr.as_slice()].concat();
    for raw in ["\u{1b}", "\u{7}", "\r", "\u{202e}"] {
        assert!(
            !String::from_utf8_lossy(&all).contains(raw),
            "{raw:?} reached the terminal raw: {}",
            said(&run)
        );
    }
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("`\\e]52;c;cHduZWQ=\\aclip\\r\\u{202e}yek` (1 task): ignored"),
        "{err}"
    );
    assert!(err.contains("`plain_unknown` (1 task): ignored"), "{err}");
    assert!(err.contains("odd\\e]0;TITLE\\aname"), "{err}");
    assert_eq!(
        read_json(&out.join("tasks/loud/result.json"))["status"],
        "resolved"
    );
}

/// A process left behind that waits for the hidden tests and, once they show, writes
/// `calc.sh` as `$1` says (`add` or `subtract`) and a reward of 1: alive at verify time, it
/// would decide the verdict. `$2` names the user it runs as (`setpriv` to another user
/// puts it where the agent's own user cannot kill it: the container must be stopped).
const LURKER: &str = r#"op=$1
as=$2
cat > /tmp/lurk.sh <<'END'
while :; do
  if [ -e /tests/test.sh ]; then
    if [ "$1" = add ]; then printf 'echo $(($1 + $2))\n' > /app/calc.sh; else printf 'echo $(($1 - $2))\n' > /app/calc.sh; fi
    echo 1 > /logs/verifier/reward.txt 2>/dev/null
  fi
  touch /tmp/lurking-$(id -u)
  sleep 0.02
done
END
chmod 666 /app/calc.sh
if [ "$as" = nobody ]; then
  setsid setpriv --reuid=65534 --regid=65534 --clear-groups sh /tmp/lurk.sh "$op" > /dev/null 2>&1 < /dev/null &
else
  setsid sh /tmp/lurk.sh "$op" > /dev/null 2>&1 < /dev/null &
fi
for i in $(seq 100); do ls /tmp/lurking-* > /dev/null 2>&1 && break; sleep 0.05; done
echo lurking as $(ls /tmp/lurking-*)
"#;

/// A process whose leader called `exit` while another of its threads runs on: `/proc`
/// shows it as a zombie, yet it waits for the hidden tests, flips the answer as `$1` says
/// and plants a reward. It says where it lurks once its leader is a zombie.
const ZOMBIE_LURKER: &str = r#"op=$1
cat > /tmp/lurk.py <<'END'
import ctypes, os, sys, threading, time
op = sys.argv[1]
def lurk():
    while True:
        try:
            if os.path.exists('/tests/test.sh'):
                with open('/app/calc.sh', 'w') as f:
                    f.write('echo $(($1 + $2))\n' if op == 'add' else 'echo $(($1 - $2))\n')
                with open('/logs/verifier/reward.txt', 'w') as f:
                    f.write('1\n')
        except OSError:
            pass
        with open('/proc/%d/status' % os.getpid()) as f:
            if 'State:\tZ' in f.read():
                open('/tmp/lurking-zombie', 'w').close()
        time.sleep(0.02)
threading.Thread(target=lurk).start()
time.sleep(0.1)
ctypes.CDLL(None).syscall(60, 0)
END
chmod 666 /app/calc.sh
setsid python3 /tmp/lurk.py "$op" > /dev/null 2>&1 < /dev/null &
for i in $(seq 100); do [ -e /tmp/lurking-zombie ] && break; sleep 0.05; done
echo lurking as $(ls /tmp/lurking-zombie)
"#;

/// A left-behind process whose leader exited (a zombie to `/proc`, with a thread still
/// running) is as alive as any: it is killed before the verifier runs, as root's and as
/// the agent's user's, and cannot flip a wrong answer right or a right one wrong.
#[test]
fn a_process_whose_leader_exited_is_killed_before_the_verifier() {
    common::engine::docker();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap().join("set");
    let right = format!("printf '%s' '{FIXED}' > /app/calc.sh\n");
    let wrong = "printf 'echo $(($1 * $2))\\n' > /app/calc.sh\n".to_string();
    let lurk = |op: &str| format!("set -- {op}\n{ZOMBIE_LURKER}");
    let as_agent = TOML.replace("[agent]\n", "[agent]\nuser = \"agent\"\n");
    let agents_image = format!("{DOCKERFILE}RUN useradd -m agent && chown -R agent /app\n");
    let tasks = [
        (
            "right-zombie",
            right + &lurk("subtract"),
            TOML.to_string(),
            DOCKERFILE.to_string(),
        ),
        (
            "wrong-zombie",
            wrong.clone() + &lurk("add"),
            TOML.to_string(),
            DOCKERFILE.to_string(),
        ),
        (
            "wrong-zombie-agent",
            wrong + &lurk("add"),
            as_agent,
            agents_image,
        ),
    ];
    for (id, solution, toml, dockerfile) in &tasks {
        let task = dir.join(id);
        harbor_task(&task, "Fix calc.sh.\n", toml, dockerfile, TEST);
        std::fs::write(task.join("solution/solve.sh"), solution).unwrap();
    }
    let out = dir.with_file_name("out");
    let (run, pid) = eval(&dir, &out, &["--agent", "oracle", "--jobs", "3"], None);
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    assert_eq!(containers_of(pid), "", "containers left behind");
    for (id, ..) in &tasks {
        let at = out.join("tasks").join(id);
        // The leftover was really running, its leader a zombie, when the agent's phase ended.
        let log = std::fs::read_to_string(at.join("agent.log")).unwrap_or_default();
        assert!(
            log.contains("lurking as /tmp/lurking-zombie"),
            "{id}: {log}"
        );
        let want = if id.starts_with("right") {
            "resolved"
        } else {
            "unresolved"
        };
        let r = read_json(&at.join("result.json"));
        let verify = std::fs::read_to_string(at.join("verify.log")).unwrap_or_default();
        assert_eq!(r["status"], want, "{id}: {r:#}\nverify.log: {verify}");
    }
}

/// The issue's bar for the engine's floor: 40 trivial Harbor tasks of one image at
/// `--jobs 8`, half with right solutions and half with wrong ones, and among both the
/// leftovers the verdict must not see: processes that wait for the hidden tests to flip
/// the answer and plant a reward (as the agent's user, killed in the running container;
/// as another user, which takes a stop of the container), a plain `sleep` left behind, and
/// a planted, locked reward and test. Every verdict is exact, no container is left, and
/// each container was started once, except those with the other user's process (twice).
#[test]
fn forty_oracle_tasks_at_jobs_8_get_exact_verdicts_and_leave_nothing() {
    common::engine::docker();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap().join("set");
    let right = format!("printf '%s' '{FIXED}' > /app/calc.sh\n");
    let wrong = "printf 'echo $(($1 * $2))\\n' > /app/calc.sh\n".to_string();
    let lurk = |op: &str, user: &str| format!("set -- {op} {user}\n{LURKER}");
    let planted = "mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh && chmod -R a-w /tests /logs/verifier\n";
    for i in 0..40 {
        let (kind, solution) = match (i % 2 == 0, (i / 2) % 4) {
            (true, 0) => ("right-plain", right.clone()),
            (true, 1) => ("right-lurker", right.clone() + &lurk("subtract", "root")),
            (true, 2) => ("right-sleep", right.clone() + "sleep 600 &\n"),
            (true, _) => ("right-nobody", right.clone() + &lurk("subtract", "nobody")),
            (false, 0) => ("wrong-plain", wrong.clone()),
            (false, 1) => ("wrong-lurker", wrong.clone() + &lurk("add", "root")),
            (false, 2) => ("wrong-planted", wrong.clone() + planted),
            (false, _) => ("wrong-nobody", wrong.clone() + &lurk("add", "nobody")),
        };
        let task = dir.join(format!("{kind}-{i:02}"));
        harbor_task(&task, "Fix calc.sh.\n", TOML, DOCKERFILE, TEST);
        std::fs::write(task.join("solution/solve.sh"), solution).unwrap();
    }
    let out = dir.with_file_name("out");
    // The engine's own record of container starts, watched as they happen (its history
    // keeps only the last few hundred events): each start with its owner's pid.
    let mut starts = Command::new("docker")
        .args([
            "events",
            "--filter",
            "event=start",
            "--filter",
            "label=runner",
        ])
        .args([
            "--format",
            "{{index .Actor.Attributes \"runner.owner-pid\"}}",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (run, pid) = eval(&dir, &out, &["--agent", "oracle", "--jobs", "8"], None);
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    assert_eq!(containers_of(pid), "", "containers left behind");

    let mut wrong_verdicts = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let id = entry.unwrap().file_name().to_string_lossy().into_owned();
        let at = out.join("tasks").join(&id);
        let r = read_json(&at.join("result.json"));
        let want = if id.starts_with("right") {
            "resolved"
        } else {
            "unresolved"
        };
        if r["status"] != want {
            let log = std::fs::read_to_string(at.join("verify.log")).unwrap_or_default();
            wrong_verdicts.push(format!("{id}: want {want}: {r:#}\nverify.log: {log}"));
        }
        // The leftovers were really running when the agent's phase ended.
        if id.contains("lurker") || id.contains("nobody") {
            let log = std::fs::read_to_string(at.join("agent.log")).unwrap_or_default();
            let uid = if id.contains("nobody") { "65534" } else { "0" };
            assert!(log.contains(&format!("/tmp/lurking-{uid}")), "{id}: {log}");
        }
    }
    assert!(wrong_verdicts.is_empty(), "{}", wrong_verdicts.join("\n\n"));
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(
        summary["counts"],
        json!({"agent_error": 0, "infra_error": 0, "resolved": 20, "timeout": 0, "unresolved": 20}),
        "{summary:#}"
    );

    // One start per container, and a second only where the agent's user could not kill
    // what was left (the ten tasks with a process of another user): 50, against 80 before
    // the server was kept for the verifier. A few more are the safe fallback, not a fault:
    // on a loaded machine a killed process can still be on its way out when the engine's
    // process list is read, and the container is then stopped and started as before (the
    // verdicts above are exact either way).
    std::thread::sleep(std::time::Duration::from_secs(1));
    starts.kill().unwrap();
    let watched = starts.wait_with_output().unwrap();
    let watched = String::from_utf8_lossy(&watched.stdout);
    let ours = watched
        .lines()
        .filter(|l| l.trim() == pid.to_string())
        .count();
    assert!(
        (50..=56).contains(&ours),
        "{ours} container starts by owner pid, not 50 to 56:\n{watched}"
    );
}
