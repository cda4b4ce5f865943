//! The wall's self-test at start, through `runner run` as a user runs it: on real landlock
//! and docker starts every check passes and the trail holds its one record (every check,
//! each with its time); with a layer left out (a debug build's `RUNNER_TEST_GAP`, which a
//! release build does not read) the session stops before the model is asked anything,
//! with an error naming the layer, and the trail says which check failed. `runner exec`
//! (whose landlock server answers on a socket of its own before its program) does the
//! same, and so does the sandbox over an evaluation's task container.

use std::path::{Path, PathBuf};
use std::process::Output;

use common::project::Project;
use common::provider::{Response, ScriptedModel, call, text};
use serde_json::{Value, json};

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

struct Run {
    project: Project,
    trail: PathBuf,
    out: Output,
    /// The model `runner run` asked (none for `runner exec`).
    model: Option<ScriptedModel>,
}

/// `runner run` on `backend` with a trail outside the worktree: one command writing a
/// file, then an answer. `gap`: the layer the debug build leaves out.
fn run(backend: &str, gap: Option<&str>) -> Run {
    let project = Project::new("wt");
    common::git(&project.root, &["init", "-q"]);
    let trail = project.outside.join("trail.jsonl");
    let model = ScriptedModel::start(vec![
        Response::Stream(call(
            "bash",
            json!({"command": "echo walled > out.txt", "description": "write"}),
        )),
        Response::Stream(text("done")),
    ]);
    if backend == "docker" {
        common::engine::docker();
        common::engine::hand_over(&project.root);
        common::engine::hand_over(&project.outside);
        common::engine::hand_over(&project.data);
    }
    let mut command = project.command();
    let trail_arg = trail.display().to_string();
    command
        .args(["run", "--sandbox", backend, "--audit", &trail_arg])
        .args(["--model", "openai/gpt-test", "--json", "write a file"])
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", model.openai_base());
    if let Some(gap) = gap {
        command.env(runner_sandbox::spec::TEST_GAP_ENV, gap);
    }
    if backend == "docker" {
        common::engine::cli(&mut command);
    }
    let out = command.output().unwrap();
    Run {
        project,
        trail,
        out,
        model: Some(model),
    }
}

/// `runner exec` on `backend` with a trail outside the worktree: a program writing a
/// file. `gap`: the layer the debug build leaves out.
fn exec(backend: &str, gap: Option<&str>) -> Run {
    let project = Project::new("wt");
    common::git(&project.root, &["init", "-q"]);
    let trail = project.outside.join("trail.jsonl");
    if backend == "docker" {
        common::engine::docker();
        common::engine::hand_over(&project.root);
        common::engine::hand_over(&project.outside);
        common::engine::hand_over(&project.data);
    }
    let mut command = project.command();
    command
        .args(["exec", "--sandbox", backend, "--audit"])
        .arg(&trail)
        .arg("--root")
        .arg(&project.root)
        .args(["--", "sh", "-c", "echo walled > out.txt"])
        .stdin(std::process::Stdio::null());
    if let Some(gap) = gap {
        command.env(runner_sandbox::spec::TEST_GAP_ENV, gap);
    }
    if backend == "docker" {
        common::engine::cli(&mut command);
    }
    let out = command.output().unwrap();
    Run {
        project,
        trail,
        out,
        model: None,
    }
}

fn self_tests(records: &[Value]) -> Vec<&Value> {
    records
        .iter()
        .filter(|r| r["class_uid"] == 6002 && r["activity_name"] == "Self-test")
        .collect()
}

fn passes_and_is_recorded(backend: &str) {
    is_recorded(&run(backend, None), backend);
}

fn is_recorded(r: &Run, backend: &str) {
    let all = describe(&r.out);
    assert_eq!(r.out.status.code(), Some(0), "{all}");
    assert_eq!(
        std::fs::read_to_string(r.project.root.join("out.txt")).unwrap(),
        "walled\n"
    );
    let records = lines(&r.trail);
    // One record, right after the start, before any decision.
    assert_eq!(records[0]["activity_name"], "Start", "{records:#?}");
    assert_eq!(records[1]["activity_name"], "Self-test", "{records:#?}");
    assert_eq!(self_tests(&records).len(), 1);
    let test = &records[1];
    assert_eq!(test["status"], "Success", "{test:#}");
    assert_eq!(test["app"]["feature"]["name"], backend);
    let checks = test["unmapped"]["checks"].as_array().unwrap();
    let layers: Vec<&str> = checks
        .iter()
        .map(|c| c["layer"].as_str().unwrap())
        .collect();
    assert_eq!(
        layers,
        ["worktree", "files", "seccomp", "network", "capabilities"],
        "{test:#}"
    );
    for check in checks {
        assert_eq!(check["passed"], true, "{check:#}");
        assert!(check["micros"].is_u64(), "{check:#}");
    }
    // What each wall must show, as it showed it.
    let saw = |layer: &str| {
        checks.iter().find(|c| c["layer"] == layer).unwrap()["saw"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let canary = if backend == "landlock" {
        "EACCES"
    } else {
        "ENOENT"
    };
    assert_eq!(saw("files"), canary);
    assert_eq!(saw("seccomp"), "mode 2, ptrace(self) EPERM");
    assert_eq!(saw("network"), "socket(AF_INET) EPERM");
    assert!(saw("capabilities").starts_with("effective 0x0, permitted 0x0, ambient 0x0"));
    let total = test["unmapped"]["total_micros"].as_u64().unwrap();
    assert!(total > 0 && total < 1_000_000, "{total} µs");
    // The probe's file is gone from the worktree.
    let left: Vec<_> = std::fs::read_dir(&r.project.root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".runner-self-test"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let schema = runner_audit::conformance::Schema::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ocsf/1.7.0"),
    )
    .unwrap();
    let problems = schema.check(test);
    assert!(problems.is_empty(), "{problems:#?}\nin {test:#}");
}

#[test]
fn the_self_test_passes_on_a_real_landlock_start_and_is_in_the_trail() {
    passes_and_is_recorded("landlock");
}

#[test]
fn the_self_test_passes_on_a_real_docker_start_and_is_in_the_trail() {
    passes_and_is_recorded("docker");
}

#[test]
fn runner_exec_on_landlock_runs_the_self_test_and_records_it() {
    is_recorded(&exec("landlock", None), "landlock");
}

#[test]
fn runner_exec_on_docker_runs_the_self_test_and_records_it() {
    is_recorded(&exec("docker", None), "docker");
}

/// The program of a `runner exec` whose wall lacks its seccomp filter never runs: the
/// typed error's message, the sandbox's status, the failed report in the trail.
#[test]
fn runner_exec_on_landlock_without_its_seccomp_filter_is_stopped_before_the_program() {
    let r = exec("landlock", Some("seccomp"));
    a_missing_layer_was_stopped(&r, "seccomp", "mode 0");
}

/// The attack the self-test exists for: a wall that started without one of its layers.
/// The session stops before the model is asked, with the layer named and what to do.
fn a_missing_layer_stops_the_session(backend: &str, gap: &str, layer: &str, saw: &str) {
    let r = run(backend, Some(gap));
    let asked = r.model.as_ref().map_or(0, |m| m.requests().len());
    assert_eq!(asked, 0, "the model was asked: {}", describe(&r.out));
    a_missing_layer_was_stopped(&r, layer, saw);
}

fn a_missing_layer_was_stopped(r: &Run, layer: &str, saw: &str) {
    let all = describe(&r.out);
    assert_eq!(
        r.out.status.code(),
        Some(6),
        "the sandbox's exit status\n{all}"
    );
    let stderr = String::from_utf8_lossy(&r.out.stderr);
    assert!(
        stderr.contains(&format!("in its {layer} layer")) && stderr.contains("No tool call ran"),
        "{all}"
    );
    assert!(stderr.contains("To do: "), "{all}");
    assert!(!r.project.root.join("out.txt").exists());
    let records = lines(&r.trail);
    let tests = self_tests(&records);
    assert_eq!(tests.len(), 1, "{records:#?}");
    let test = tests[0];
    assert_eq!(test["status"], "Failure", "{test:#}");
    assert_eq!(test["severity"], "High");
    let failed: Vec<&Value> = test["unmapped"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["passed"] == false)
        .collect();
    // The first failure is the one the error names; leaving seccomp out also lets AF_INET
    // sockets be made, which the network check finds too.
    assert_eq!(failed[0]["layer"], layer, "{test:#}");
    assert!(failed[0]["saw"].as_str().unwrap().contains(saw), "{test:#}");
}

#[test]
fn landlock_without_its_seccomp_filter_is_stopped_at_start() {
    a_missing_layer_stops_the_session("landlock", "seccomp", "seccomp", "mode 0");
}

#[test]
fn landlock_without_its_ruleset_is_stopped_at_start() {
    // The canary outside the worktree was read: nothing refused it.
    a_missing_layer_stops_the_session("landlock", "landlock", "files", "success");
}

#[test]
fn docker_without_runners_seccomp_filter_is_stopped_at_start() {
    // The engine's own profile is still on (mode 2), but it allows what runner's denies.
    a_missing_layer_stops_the_session("docker", "seccomp", "seccomp", "mode 2, ptrace(self) ESRCH");
}
