//! The agent is blamed only for the agent: an engine that fails a call (a 5xx, a cut
//! connection) in any phase of a Harbor attempt makes it `infra_error`, tried again under
//! the run's retry rule, never `agent_error`.
//!
//! Each run goes through [`EngineFaults`], a proxy in front of the real engine's socket
//! that fails the one call a test names; everything else reaches the engine, so the
//! attempt builds, copies and runs for real. A fault that fires once must leave a
//! resolved task that says it was tried again; one that keeps firing must leave
//! `infra_error` naming the engine and the call. The controls: a wrong solution, and one
//! that breaks what the verifier needs, are still the agent's.
//!
//! An oracle attempt spares the engine what it can: a solution and hidden tests that fit
//! in one command are written by a command in the container, and the rewards come back in
//! the verifier's own output. The engine's archive calls are what is left when they do
//! not: a solution or tests padded past that limit are copied in through the engine (a
//! `PUT` of an archive, in the agent's and the verifier's phase), and a `test.sh` that
//! leaves a process printing after the rewards makes them read through the engine (a
//! `GET` of `/logs/verifier`). So the faults here aim at calls the attempt really makes.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::engine_faults::{EngineFaults, Fault};
use serde_json::Value;

const BUGGY: &str = "echo $(($1 - $2))\n";
const FIXED: &str = "printf 'echo $(($1 + $2))\\n' > /app/calc.sh\n";
const TEST: &str = "#!/bin/bash
set -e
got=$(sh /app/calc.sh 2 3)
echo \"calc.sh 2 3 = $got\"
[ \"$got\" = 5 ]
echo 1 > /logs/verifier/reward.txt
";
const DOCKERFILE: &str = "FROM runner-sandbox:bookworm\nWORKDIR /app\nCOPY calc.sh /app/calc.sh\n";
const TOML: &str = "version = \"1.0\"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n";

/// A `test.sh` that passes and leaves a process behind that prints once the verifier's
/// command has ended: the rewards printed after `test.sh` are then not the last of the
/// output, so runner reads them from `/logs/verifier` through the engine.
const LINGERING_TEST: &str = "#!/bin/bash
set -e
got=$(sh /app/calc.sh 2 3)
[ \"$got\" = 5 ]
echo 1 > /logs/verifier/reward.txt
( while kill -0 $PPID 2>/dev/null; do sleep 0.05; done; echo 'a late line' ) &
";

/// The machine's engine, which the proxy forwards to.
const ENGINE: &str = "/var/run/docker.sock";

/// A folder holding one Harbor task, `calc`, whose oracle runs `solution`.
fn task_set(solution: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("calc");
    for sub in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("instruction.md"), "Make calc.sh add.\n").unwrap();
    std::fs::write(dir.join("task.toml"), TOML).unwrap();
    std::fs::write(dir.join("environment/Dockerfile"), DOCKERFILE).unwrap();
    std::fs::write(dir.join("environment/calc.sh"), BUGGY).unwrap();
    std::fs::write(dir.join("tests/test.sh"), TEST).unwrap();
    std::fs::write(dir.join("solution/solve.sh"), solution).unwrap();
    tmp
}

/// A file in `calc/{sub}` too large for the command that would write the folder in the
/// container (runner's limit is 96 KiB), so that the engine copies the folder in.
fn pad(set: &tempfile::TempDir, sub: &str) {
    let padding = "x".repeat(127) + "\n";
    let path = set.path().join("calc").join(sub).join("padding.txt");
    std::fs::write(path, padding.repeat(1024)).unwrap();
}

/// What a run through the proxy left: the task's result, what runner printed, and its pid.
struct Ran {
    result: Value,
    told: String,
    pid: u32,
}

/// `runner eval run --agent oracle` on the set, through the proxy's socket.
fn eval_through(proxy: &EngineFaults, set: &tempfile::TempDir) -> Ran {
    common::engine::docker();
    let out = set.path().join("out");
    let child = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["eval", "run"])
        .arg(set.path())
        .arg("--out")
        .arg(&out)
        .args(["--agent", "oracle", "--jobs", "1", "--docker-host"])
        .arg(proxy.host())
        .env("XDG_DATA_HOME", out.with_extension("data"))
        .env("XDG_CONFIG_HOME", out.with_extension("config"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let run: Output = child.wait_with_output().unwrap();
    let told = format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}\nfaults fired: {:?}",
        run.status.code(),
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
        proxy.fired(),
    );
    let path = out.join("tasks/calc/result.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}\n{told}", path.display()));
    Ran {
        result: serde_json::from_str(&text).unwrap(),
        told,
        pid,
    }
}

/// runner's containers that `pid` left on the machine's engine.
fn containers_of(pid: u32) -> String {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=runner.owner-pid={pid}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// One fault, fired once: the attempt ends as the engine's failure, is tried again, and
/// the second try resolves the task.
fn fires_once_then_resolves(set: tempfile::TempDir, fault: Fault, call: &str) {
    let proxy = EngineFaults::start(Path::new(ENGINE), vec![fault]);
    let ran = eval_through(&proxy, &set);
    let (r, told) = (&ran.result, &ran.told);
    assert_eq!(proxy.fired().len(), 1, "the fault fired once: {told}");
    assert!(proxy.fired()[0].starts_with(call), "{told}");
    assert_eq!(r["status"], "resolved", "{r:#}\n{told}");
    assert_eq!(r["infra_retries"], 1, "{r:#}\n{told}");
    assert!(
        told.contains("infrastructure failure, trying again (1/"),
        "{told}"
    );
    assert!(!told.contains("agent_error"), "{told}");
    assert_eq!(containers_of(ran.pid), "", "containers left behind");
}

#[test]
fn a_500_on_copying_oversized_hidden_tests_in_is_the_engines_failure_and_is_tried_again() {
    // The solution is small and written through runner's server; the tests are too large
    // for the verifier's command, so theirs is the one archive put into the container.
    let set = task_set(FIXED);
    pad(&set, "tests");
    fires_once_then_resolves(
        set,
        Fault::status(500, "PUT /containers/*/archive"),
        "PUT /containers/",
    );
}

#[test]
fn a_cut_connection_in_the_verifier_phase_is_the_engines_failure_and_is_tried_again() {
    // Only the verifier runs commands through the engine's exec (the oracle runs through
    // runner's server), so the first exec is the verifier's.
    fires_once_then_resolves(
        task_set(FIXED),
        Fault::cut("POST /containers/*/exec"),
        "POST /containers/",
    );
}

#[test]
fn a_500_while_setting_up_the_task_container_is_the_engines_failure_and_is_tried_again() {
    fires_once_then_resolves(
        task_set(FIXED),
        Fault::status(500, "POST /containers/create"),
        "POST /containers/create",
    );
}

/// A fault that fires on every try: `infra_error` after the run's retries, the phase it
/// hit, and a reason naming the engine (its socket) and the call.
fn keeps_failing(set: tempfile::TempDir, fault: Fault, phase: &str, call: &str) {
    let proxy = EngineFaults::start(Path::new(ENGINE), vec![fault.always()]);
    let ran = eval_through(&proxy, &set);
    let (r, told) = (&ran.result, &ran.told);
    assert_eq!(r["status"], "infra_error", "{r:#}\n{told}");
    assert_eq!(r["phase"], phase, "{r:#}\n{told}");
    // The default retry rule: two more tries, each failed the same way (a try may meet
    // the fault more than once: the reward is read as a folder, then file by file).
    assert_eq!(r["infra_retries"], 2, "{r:#}\n{told}");
    assert!(proxy.fired().len() >= 3, "{told}");
    let error = r["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&proxy.host()),
        "the engine is named: {error}"
    );
    assert!(error.contains(call), "the call is named: {error}");
    assert!(error.contains("not the agent"), "{error}");
    assert!(!told.contains("agent_error"), "{told}");
    assert_eq!(containers_of(ran.pid), "", "containers left behind");
}

#[test]
fn an_engine_that_keeps_failing_to_copy_an_oversized_solution_in_ends_in_infra_error_naming_it() {
    // Too large for a command through runner's server: the solution is put into the
    // container through the engine, in the agent's phase (before the tests, which fit).
    let set = task_set(FIXED);
    pad(&set, "solution");
    keeps_failing(
        set,
        Fault::status(500, "PUT /containers/*/archive"),
        "agent",
        "cannot copy files into /",
    );
}

#[test]
fn an_engine_that_keeps_cutting_the_verifier_off_ends_in_infra_error_naming_it() {
    keeps_failing(
        task_set(FIXED),
        Fault::cut("POST /containers/*/exec"),
        "verify",
        "cannot run",
    );
}

#[test]
fn an_engine_that_keeps_failing_the_reward_read_after_a_lingering_test_ends_in_infra_error_naming_it()
 {
    // A process test.sh left prints after the rewards, so they are read through the
    // engine, in the verifier's phase: every read of /logs/verifier fails.
    let set = task_set(FIXED);
    std::fs::write(set.path().join("calc/tests/test.sh"), LINGERING_TEST).unwrap();
    keeps_failing(
        set,
        Fault::status(502, "GET /containers/*/archive").query("path=/logs/verifier"),
        "verify",
        "cannot read /logs/verifier",
    );
}

#[test]
fn the_agents_own_failures_stay_the_agents_through_the_same_proxy() {
    // A wrong answer from a solution that also exits non-zero: unresolved, not retried.
    let wrong = task_set("printf 'echo $(($1 * $2))\\n' > /app/calc.sh\nexit 3\n");
    let proxy = EngineFaults::start(Path::new(ENGINE), vec![]);
    let ran = eval_through(&proxy, &wrong);
    let (r, told) = (&ran.result, &ran.told);
    assert_eq!(r["status"], "unresolved", "{r:#}\n{told}");
    assert_eq!(r["infra_retries"], 0, "{r:#}\n{told}");
    assert!(proxy.fired().is_empty());
    // The hijacked streams (the server's attach, the verifier's exec) went through it.
    let calls = proxy.calls();
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("POST /exec/") && c.ends_with("/start")),
        "{calls:?}"
    );

    // A solution that takes away what the verifier needs to set itself up (`mv`): the
    // verifier cannot run on what the agent left, while the engine answers every call.
    let sabotage = task_set(&format!(
        "{FIXED}mkdir -p /tests\nrm -f /usr/bin/mv /bin/mv\n"
    ));
    let proxy = EngineFaults::start(Path::new(ENGINE), vec![]);
    let ran = eval_through(&proxy, &sabotage);
    let (r, told) = (&ran.result, &ran.told);
    assert_eq!(r["status"], "agent_error", "{r:#}\n{told}");
    assert_eq!(r["phase"], "verify", "{r:#}\n{told}");
    assert_eq!(r["infra_retries"], 0, "{r:#}\n{told}");
    assert_eq!(containers_of(ran.pid), "", "containers left behind");
}
