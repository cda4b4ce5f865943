//! `runner eval run --json` and its exit statuses, end to end on the real engine with
//! `--agent oracle` (each Harbor task's `solution/solve.sh`): the event stream read back
//! whole, 0 for a run whose every attempt reached a verdict (an unresolved one included),
//! 8 for an `infra_error` or a task that cannot be loaded, 9 for a set with no task, 10
//! under `--fail-on unresolved`; and each load problem said on stderr with its file and
//! line as it is found.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

const DOCKERFILE: &str =
    "FROM runner-sandbox:bookworm\nWORKDIR /app\nRUN echo 'echo $(($1 - $2))' > /app/calc.sh\n";
/// A reward either way: 1 when calc.sh adds, 0 when it does not (a verdict, not a
/// failure of the verifier).
const TEST: &str = "#!/bin/bash\nif [ \"$(sh /app/calc.sh 2 3)\" = 5 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";
const TOML: &str = "version = \"1.0\"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n";

/// A trivial Harbor task at `dir` whose solution makes calc.sh compute `op`: `+` solves it.
fn task(dir: &Path, op: char) {
    for sub in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("instruction.md"), "calc.sh should add.\n").unwrap();
    std::fs::write(dir.join("task.toml"), TOML).unwrap();
    std::fs::write(dir.join("environment/Dockerfile"), DOCKERFILE).unwrap();
    std::fs::write(dir.join("tests/test.sh"), TEST).unwrap();
    std::fs::write(
        dir.join("solution/solve.sh"),
        format!("printf 'echo $(($1 {op} $2))\\n' > /app/calc.sh\n"),
    )
    .unwrap();
}

/// A fresh folder for one test's sets and outputs.
fn scratch() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    (tmp, dir)
}

/// `runner eval run SETS --out OUT --agent oracle ARGS`.
fn eval(sets: &[&Path], out: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["eval", "run"])
        .args(sets)
        .arg("--out")
        .arg(out)
        .args(["--agent", "oracle"])
        .args(args)
        .env("XDG_DATA_HOME", out.with_extension("data"))
        .env("XDG_CONFIG_HOME", out.with_extension("config"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn said(run: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        run.status.code(),
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    )
}

/// Every line of stdout as an event: each one JSON with a `type`, nothing else there, the
/// first `run_start` (schema 1) and the last `run_end` with the exit status.
fn stream(run: &Output) -> Vec<Value> {
    let text = String::from_utf8(run.stdout.clone()).unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}\n{}", said(run)))
        })
        .collect();
    assert!(
        events.iter().all(|e| e["type"].is_string()),
        "{}",
        said(run)
    );
    assert_eq!(
        events.first().unwrap()["type"],
        "run_start",
        "{}",
        said(run)
    );
    assert_eq!(events[0]["schema"], 1);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "run_end", "{}", said(run));
    assert_eq!(last["exit_code"], json!(run.status.code().unwrap()));
    assert_eq!(
        events.iter().filter(|e| e["type"] == "run_start").count()
            + events.iter().filter(|e| e["type"] == "run_end").count(),
        2,
        "{}",
        said(run)
    );
    events
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// One task's events, from its `attempt_start` to its `attempt_end`, in stream order
/// (other tasks' events may come between: two run at once).
fn attempt<'a>(events: &'a [Value], id: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["task"] == id).collect()
}

/// A resolved and an unresolved task, two at once: the stream has a start, each attempt's
/// start, phases (build, agent, verify, each with its seconds) and end with its status,
/// reward, reason and paths, and an end with the summary; exit 0, since both reached a
/// verdict.
/// The same folder again with `--fail-on unresolved` (nothing left to run) exits 10.
#[test]
fn a_whole_runs_event_stream_reads_back_and_a_verdict_exits_0() {
    common::engine::docker();
    let (_tmp, dir) = scratch();
    let set = dir.join("set");
    task(&set.join("adds"), '+');
    task(&set.join("multiplies"), '*');
    let out = dir.join("out");
    let run = eval(&[&set], &out, &["--json", "--jobs", "2"]);
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    let events = stream(&run);
    let start = &events[0];
    assert_eq!(start["tasks"], 2, "{start}");
    assert_eq!(start["to_run"], 2, "{start}");
    assert_eq!(start["attempts"], 1, "{start}");
    assert_eq!(start["jobs"], 2, "{start}");
    assert_eq!(start["agent"], "oracle", "{start}");
    assert_eq!(start["model"], "oracle", "{start}");
    assert_eq!(start["out"], out.display().to_string(), "{start}");
    assert!(of_type(&events, "load_problem").is_empty(), "{events:#?}");
    assert_eq!(of_type(&events, "attempt_start").len(), 2, "{events:#?}");
    assert_eq!(of_type(&events, "attempt_end").len(), 2, "{events:#?}");

    for (id, status, reward) in [("adds", "resolved", 1.0), ("multiplies", "unresolved", 0.0)] {
        let mine = attempt(&events, id);
        let kinds: Vec<&str> = mine.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["attempt_start", "phase", "phase", "phase", "attempt_end"],
            "{id}: {mine:#?}"
        );
        let phases: Vec<&str> = mine[1..4]
            .iter()
            .map(|e| e["phase"].as_str().unwrap())
            .collect();
        assert_eq!(phases, ["build", "agent", "verify"], "{id}");
        for p in &mine[1..4] {
            assert!(p["seconds"].as_f64().unwrap() >= 0.0, "{p}");
            assert_eq!(p["attempt"], 1, "{p}");
        }
        assert!(mine[2]["seconds"].as_f64().unwrap() > 0.0, "{}", mine[2]);
        let end = mine[4];
        assert_eq!(end["status"], status, "{end}");
        assert_eq!(end["reward"], reward, "{end}");
        assert_eq!(end["attempt"], 1, "{end}");
        assert_eq!(end["tokens"]["input"], 0, "{end}");
        let result = Path::new(end["result"].as_str().unwrap());
        assert_eq!(result, out.join("tasks").join(id).join("result.json"));
        let written: Value = serde_json::from_slice(&std::fs::read(result).unwrap()).unwrap();
        assert_eq!(written["status"], status);
        let logs = Path::new(end["logs"].as_str().unwrap());
        assert!(logs.join("verify.log").is_file(), "{end}");
        if status == "resolved" {
            assert!(end["reason"].is_null(), "{end}");
        } else {
            // Its verifier judged the work and said nothing else: the reason is the
            // reward it wrote, in its file, not a verifier that "printed nothing".
            assert_eq!(
                end["reason"],
                "the verifier wrote reward 0 to /logs/verifier/reward.txt; it exited 0 and printed nothing",
                "{end}"
            );
        }
    }
    let end = events.last().unwrap();
    assert_eq!(
        end["summary"]["counts"],
        json!({"agent_error": 0, "infra_error": 0, "resolved": 1, "timeout": 0, "unresolved": 1}),
        "{end}"
    );
    assert_eq!(end["unfinished"], 0);
    // The person's lines went to stderr, out of the stream's way.
    let told = String::from_utf8_lossy(&run.stderr);
    assert!(told.contains("2 tasks, 2 attempts"), "{told}");

    let strict = eval(&[&set], &out, &["--json", "--fail-on", "unresolved"]);
    assert_eq!(strict.status.code(), Some(10), "{}", said(&strict));
    let events = stream(&strict);
    assert_eq!(events[0]["to_run"], 0, "{events:#?}");
    assert_eq!(events.len(), 2, "nothing ran again: {events:#?}");
    assert!(
        String::from_utf8_lossy(&strict.stderr).contains("1 of 2 attempts were not resolved"),
        "{}",
        said(&strict)
    );
    // Without --json, the summary is on stdout as before.
    let plain = eval(&[&set], &out, &[]);
    assert_eq!(plain.status.code(), Some(0), "{}", said(&plain));
    assert!(
        String::from_utf8_lossy(&plain.stdout).starts_with("2 tasks, 2 attempts"),
        "{}",
        said(&plain)
    );
}

/// Load problems, each said on stderr with its file and line as the sets are read, and
/// each a `load_problem` event: a line that is not JSON, a line with a key no task has, a
/// set that holds no task, a Harbor task without its instruction.md (and a good line the
/// oracle has no solution for, said once), each with its `attempt_end`, so the stream ends
/// as many attempts as the summary counts. With a task whose
/// image does not build (an infra_error of the run itself) beside a good one: exit 8. The
/// build failure alone exits 8 too.
#[test]
fn load_problems_are_said_with_file_and_line_and_they_and_infra_errors_exit_8() {
    common::engine::docker();
    let (_tmp, dir) = scratch();
    let lines = dir.join("tasks.jsonl");
    std::fs::write(
        &lines,
        "{\"id\":\"typo\",\"instruction\":\"x\",\"repo\":\".\",\"verify\":\"true\",\"verfy\":1}\n\n{not json\n{\"id\":\"needs-a-model\",\"instruction\":\"x\",\"repo\":\".\",\"verify\":\"true\"}\n",
    )
    .unwrap();
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "\n\n").unwrap();
    let set = dir.join("set");
    task(&set.join("good"), '+');
    task(&set.join("no-instruction"), '+');
    std::fs::remove_file(set.join("no-instruction/instruction.md")).unwrap();
    let out = dir.join("out");
    let run = eval(&[&lines, &empty, &set], &out, &["--json", "--jobs", "2"]);
    assert_eq!(run.status.code(), Some(8), "{}", said(&run));
    let told = String::from_utf8_lossy(&run.stderr).into_owned();
    let file = lines.display().to_string();
    for needle in [
        format!("{file}:1: task typo cannot run (infra_error): unknown field `verfy`"),
        format!("{file}:3: task line-3 cannot run (infra_error): key must be a string (column 2)"),
        format!("{}: holds no task", empty.display()),
        format!(
            "{}: task no-instruction cannot run (infra_error): cannot read {}",
            set.join("no-instruction").display(),
            set.join("no-instruction/instruction.md").display()
        ),
    ] {
        assert!(told.contains(&needle), "no {needle:?} in:\n{told}");
    }
    let events = stream(&run);
    let problems: Vec<Value> = of_type(&events, "load_problem")
        .into_iter()
        .map(|p| json!([p["file"], p["line"], p["task"]]))
        .collect();
    assert_eq!(
        problems,
        [
            json!([file, 1, "typo"]),
            json!([file, 3, "line-3"]),
            json!([empty.display().to_string(), null, null]),
            json!([
                set.join("no-instruction").display().to_string(),
                null,
                "no-instruction"
            ]),
        ],
        "{events:#?}"
    );
    // Only the good task ran; the broken ones are in the summary as infra_error.
    let starts: Vec<&Value> = of_type(&events, "attempt_start");
    assert_eq!(starts.len(), 1, "{events:#?}");
    assert_eq!(starts[0]["task"], "good");
    let end = events.last().unwrap();
    assert_eq!(end["load_problems"], 4, "{end}");
    // The task with no solution for the oracle: said once, an infra_error, no problem.
    assert_eq!(end["summary"]["counts"]["infra_error"], 4, "{end}");
    assert!(
        told.contains("--agent oracle: 1 JSON-lines tasks have no solution to run"),
        "{told}"
    );
    assert_eq!(end["summary"]["counts"]["resolved"], 1, "{end}");
    // Every attempt the summary counts has exactly one end, those that could not load too
    // (with the result written for them): a harness counting ends counts the summary's.
    let ends = of_type(&events, "attempt_end");
    assert_eq!(json!(ends.len()), end["summary"]["attempts"], "{events:#?}");
    let mut ended: Vec<&str> = ends.iter().map(|e| e["task"].as_str().unwrap()).collect();
    ended.sort();
    assert_eq!(
        ended,
        ["good", "line-3", "needs-a-model", "no-instruction", "typo"],
        "{events:#?}"
    );
    for e in ends.iter().filter(|e| e["task"] != "good") {
        assert_eq!(
            (&e["status"], &e["phase"]),
            (&json!("infra_error"), &json!("load")),
            "{e}"
        );
        let written: Value =
            serde_json::from_slice(&std::fs::read(e["result"].as_str().unwrap()).unwrap()).unwrap();
        assert_eq!(written["error"], e["reason"], "{e}");
    }
    // They come right after the load problems, before any attempt starts.
    let first_start = events
        .iter()
        .position(|e| e["type"] == "attempt_start")
        .unwrap();
    let load_ends = events[..first_start]
        .iter()
        .filter(|e| e["type"] == "attempt_end")
        .count();
    assert_eq!(load_ends, 4, "{events:#?}");

    // An attempt the run itself fails (its image does not build): 8, with no load problem.
    let breaks = dir.join("breaks");
    task(&breaks.join("bad-image"), '+');
    std::fs::write(
        breaks.join("bad-image/environment/Dockerfile"),
        "FROM runner-sandbox:bookworm\nRUN exit 7\n",
    )
    .unwrap();
    let run = eval(&[&breaks], &dir.join("out-breaks"), &["--json"]);
    assert_eq!(run.status.code(), Some(8), "{}", said(&run));
    let events = stream(&run);
    let end = of_type(&events, "attempt_end");
    assert_eq!(end.len(), 1, "{events:#?}");
    assert_eq!(end[0]["status"], "infra_error", "{events:#?}");
    assert_eq!(end[0]["phase"], "build", "{events:#?}");
    let phases = of_type(&events, "phase");
    assert_eq!(phases.len(), 1, "only the build ran: {events:#?}");
    assert!(
        String::from_utf8_lossy(&run.stderr)
            .contains("(1 infra_error in the summary, 0 load problems said above)"),
        "{}",
        said(&run)
    );
}

/// A set with no task (an empty `.jsonl`, one of blank lines, a folder with no task in
/// it) exits 9 and writes nothing into the output folder; under `--json` its stream is a
/// start, the problem and the end. A run that cannot start says so in one `error` event.
#[test]
fn an_empty_task_set_exits_9_and_a_run_that_cannot_start_sends_one_error() {
    let (_tmp, dir) = scratch();
    let blank = dir.join("blank.jsonl");
    std::fs::write(&blank, "").unwrap();
    let spaces = dir.join("spaces.jsonl");
    std::fs::write(&spaces, "\n  \n").unwrap();
    let folder = dir.join("folder");
    std::fs::create_dir_all(folder.join("not-a-task")).unwrap();
    for set in [&blank, &spaces, &folder] {
        let out = dir.join("out");
        let run = eval(&[set], &out, &[]);
        assert_eq!(
            run.status.code(),
            Some(9),
            "{}: {}",
            set.display(),
            said(&run)
        );
        let told = String::from_utf8_lossy(&run.stderr);
        assert!(
            told.contains(&format!("{}: holds no task", set.display())),
            "{told}"
        );
        assert!(told.contains("nothing ran (exit 9)"), "{told}");
        assert!(!out.exists(), "an empty run wrote {}", out.display());
    }
    let run = eval(&[&blank], &dir.join("out"), &["--json"]);
    assert_eq!(run.status.code(), Some(9), "{}", said(&run));
    let events = stream(&run);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["run_start", "load_problem", "run_end"],
        "{events:#?}"
    );
    assert_eq!(events[0]["tasks"], 0);

    // No model and no oracle: usage (2), one event.
    let run = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["eval", "run", "--json", "--out"])
        .arg(dir.join("out"))
        .arg(&blank)
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2), "{}", said(&run));
    let text = String::from_utf8(run.stdout.clone()).unwrap();
    let event: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(event["type"], "error", "{text}");
    assert_eq!(event["code"], 2, "{text}");
    assert!(
        event["message"].as_str().unwrap().contains("no model"),
        "{text}"
    );
}

/// An engine that fails one call (a 500 on the container's create, from a proxy in front
/// of the real engine's socket): the attempt is tried again, and the stream says so once,
/// between its one `attempt_start` and its one `attempt_end`, which counts the retry.
#[test]
fn a_retried_attempt_says_why_in_the_stream_and_still_starts_and_ends_once() {
    use common::engine_faults::{EngineFaults, Fault};
    common::engine::docker();
    let (_tmp, dir) = scratch();
    let set = dir.join("set");
    task(&set.join("adds"), '+');
    let proxy = EngineFaults::start(
        Path::new("/var/run/docker.sock"),
        vec![Fault::status(500, "POST /containers/create")],
    );
    let host = proxy.host();
    let run = eval(
        &[&set],
        &dir.join("out"),
        &["--json", "--jobs", "1", "--docker-host", &host],
    );
    assert_eq!(proxy.fired().len(), 1, "{}", said(&run));
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    let events = stream(&run);
    let kinds: Vec<&str> = attempt(&events, "adds")
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "attempt_start",
            "attempt_retry",
            "phase",
            "phase",
            "phase",
            "attempt_end"
        ],
        "{events:#?}"
    );
    let retry = of_type(&events, "attempt_retry")[0];
    assert_eq!(
        (&retry["retry"], &retry["of"]),
        (&json!(1), &json!(2)),
        "{retry}"
    );
    assert!(retry["reason"].as_str().unwrap().contains("500"), "{retry}");
    let end = of_type(&events, "attempt_end")[0];
    assert_eq!(end["status"], "resolved", "{end}");
    assert_eq!(end["retries"], 1, "{end}");
}
