//! `runner eval` end to end: a task set of small repositories with a failing test each,
//! run on the docker backend by a scripted model (a real SSE server) that fixes some tasks,
//! gives up on others, runs past its time on two, tries to cheat on one, leaves a process
//! behind on another and kills its own sandbox on one more. The counts must be exactly what the script deserves.

use common::git;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::provider::{Response, ScriptedModel, call, text};
use serde_json::{Value, json};

const BUGGY: &str = "echo $(($1 - $2))\n";
const FIXED: &str = "echo $(($1 + $2))\n";
const HIDDEN_TEST: &str =
    "if [ \"$(sh calc.sh 2 3)\" = 5 ]; then echo PASS; else echo FAIL; exit 1; fi\n";

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Fix,
    GiveUp,
    Slow,
    Cheat,
    Background,
    NeedsSetup,
    Crash,
}

fn kind(n: usize) -> Kind {
    match n {
        0..=9 => Kind::Fix,
        10..=13 => Kind::GiveUp,
        14 => Kind::Crash,
        15 | 16 => Kind::Slow,
        17 => Kind::Cheat,
        18 => Kind::Background,
        _ => Kind::NeedsSetup,
    }
}

fn expected(k: Kind) -> &'static str {
    match k {
        Kind::Fix | Kind::Background | Kind::NeedsSetup => "resolved",
        Kind::GiveUp | Kind::Cheat => "unresolved",
        Kind::Slow => "timeout",
        Kind::Crash => "agent_error",
    }
}

/// The model: which task it is on comes from the instruction, which step from the
/// number of answers it has already given.
fn answer(body: &Value) -> Response {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let task = messages
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .and_then(|t| t.strip_prefix("TASK t"))
        .and_then(|t| t.get(..2))
        .and_then(|n| n.parse::<usize>().ok())
        .expect("a task instruction");
    let step = messages.iter().filter(|m| m["role"] == "assistant").count();
    let look = || call("read", json!({"filePath": "calc.sh"}));
    let fix = || call("write", json!({"filePath": "calc.sh", "content": FIXED}));
    let answer = match (kind(task), step) {
        (Kind::Fix | Kind::NeedsSetup | Kind::Background, 0) => look(),
        (Kind::Fix | Kind::NeedsSetup, 1) => fix(),
        (Kind::Slow, 0) => call(
            "bash",
            json!({"command": "sleep 60", "description": "wait a long time"}),
        ),
        (Kind::Cheat, 0) => call(
            "bash",
            json!({"command": "cat test.sh; mkdir -p test.sh/in-the-way", "description": "look for the tests, block them"}),
        ),
        (Kind::Background, 1) => fix(),
        // A writer that outlives the call, in its own session: alive while the agent works,
        // it must be dead before the verdict.
        (Kind::Background, 2) => call(
            "bash",
            json!({"command": "setsid sh -c 'while true; do echo x >> beats; sleep 0.05; done' >/dev/null 2>&1 < /dev/null &", "description": "leave a writer behind"}),
        ),
        (Kind::Background, 3) => call(
            "bash",
            json!({"command": "sleep 0.5; wc -c < beats", "description": "is it alive"}),
        ),
        // The sandbox dies under the agent (an engine or OOM kill; a command cannot end its
        // own server: `kill -9 -1` only reaches the command user's processes): its
        // container is killed from outside before the model asks for a command.
        (Kind::Crash, 0) => {
            kill_sandbox_of(task);
            call(
                "bash",
                json!({"command": "kill -9 -1; echo still here", "description": "kill everything"}),
            )
        }
        (Kind::GiveUp, _) => text("I could not fix it."),
        _ => text("Done."),
    };
    Response::Stream(answer)
}

/// Kills the container whose worktree is task `tNN`'s.
fn kill_sandbox_of(task: usize) {
    let docker = |args: &[&str]| {
        let out = Command::new("docker").args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let needle = format!("/t{task:02}-");
    let ids = docker(&["ps", "-q", "--filter", "label=runner"]);
    let id = ids
        .split_whitespace()
        .find(|id| {
            docker(&["inspect", "-f", "{{range .Mounts}}{{.Source}} {{end}}", id]).contains(&needle)
        })
        .unwrap_or_else(|| panic!("no sandbox container for t{task:02}"));
    docker(&["kill", id]);
}

struct TaskSet {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    file: PathBuf,
}

/// Twenty tasks and one broken line. Task t00 is a git repository whose HEAD already
/// holds the fix: its task names the commit before, so the checkout has to be right.
fn task_set(count: usize, broken: bool) -> TaskSet {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::create_dir_all(dir.join("hidden")).unwrap();
    std::fs::write(dir.join("hidden/test.sh"), HIDDEN_TEST).unwrap();
    let mut lines = Vec::new();
    for n in 0..count {
        let id = format!("t{n:02}");
        let repo = dir.join("repos").join(&id);
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::write(repo.join("calc.sh"), BUGGY).unwrap();
        let mut task = json!({
            "id": id,
            "instruction": format!("TASK {id}: calc.sh should add its two arguments. Fix it."),
            "repo": format!("repos/{id}"),
            "verify": "sh test.sh",
            "tests_dir": "hidden",
        });
        match kind(n) {
            Kind::Slow => task["timeouts"] = json!({"agent": 3}),
            Kind::Background => {
                task["verify"] = json!(
                    "a=$(wc -c < beats); sleep 1; b=$(wc -c < beats); echo \"beats $a $b\"; [ \"$a\" = \"$b\" ] && sh test.sh"
                )
            }
            Kind::NeedsSetup => {
                task["setup"] = json!("echo ready > .setup-done");
                task["verify"] = json!("test -f .setup-done && sh test.sh");
            }
            _ => {}
        }
        if n == 0 {
            git(&repo, &["init", "-q"]);
            git(&repo, &["add", "-A"]);
            git(&repo, &["commit", "-qm", "buggy"]);
            let out = Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(["rev-parse", "HEAD"])
                .output()
                .unwrap();
            task["commit"] = json!(String::from_utf8_lossy(&out.stdout).trim());
            std::fs::write(repo.join("calc.sh"), FIXED).unwrap();
            git(&repo, &["commit", "-qam", "fixed upstream"]);
        }
        lines.push(task.to_string());
    }
    if broken {
        lines.push(
            json!({"id": "t20", "instruction": "TASK t20", "repo": "repos/nowhere", "verify": "true"})
                .to_string(),
        );
    }
    let file = dir.join("tasks.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    TaskSet {
        _tmp: tmp,
        dir,
        file,
    }
}

fn eval(model: &ScriptedModel, set: &TaskSet, out: &Path, extra: &[&str]) -> (Output, u32) {
    let child = start_eval(model, set, out, extra);
    let pid = child.id();
    (child.wait_with_output().unwrap(), pid)
}

fn start_eval(
    model: &ScriptedModel,
    set: &TaskSet,
    out: &Path,
    extra: &[&str],
) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["eval", "run"])
        .arg(&set.file)
        .arg("--out")
        .arg(out)
        .args(["--model", "openai/scripted"])
        .args(extra)
        .env("XDG_DATA_HOME", set.dir.join("data"))
        .env("XDG_CONFIG_HOME", set.dir.join("config"))
        .env("OPENAI_API_KEY", "sk-eval-test")
        .env("OPENAI_BASE_URL", model.openai_base())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
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

#[test]
fn twenty_tasks_in_docker_get_exactly_the_verdicts_the_script_deserves() {
    common::engine::docker();
    let set = task_set(20, true);
    let model = ScriptedModel::responding(answer);
    let out = set.dir.join("out");
    let (run, pid) = eval(&model, &set, &out, &["--jobs", "4"]);
    let said = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(
        run.status.code(),
        Some(8),
        "the broken line is an infra_error: {said}"
    );
    assert_eq!(containers_of(pid), "", "containers left behind");
    assert!(!out.join(".work").exists(), "worktrees left behind");

    for n in 0..20 {
        let id = format!("t{n:02}");
        let r = read_json(&out.join("tasks").join(&id).join("result.json"));
        let log = std::fs::read_to_string(out.join("tasks").join(&id).join("verify.log"))
            .unwrap_or_default();
        let session = std::fs::read_to_string(out.join("tasks").join(&id).join("session.jsonl"))
            .unwrap_or_default();
        assert_eq!(
            r["status"],
            expected(kind(n)),
            "{id}: {r:#}\nverify.log: {log}\nsession: {session}\n{said}"
        );
    }
    let broken = read_json(&out.join("tasks/t20/result.json"));
    assert_eq!(broken["status"], "infra_error");
    assert!(
        broken["error"]
            .as_str()
            .unwrap()
            .contains("not a directory"),
        "{broken}"
    );

    let summary = read_json(&out.join("summary.json"));
    assert_eq!(
        summary["counts"],
        json!({"agent_error": 1, "infra_error": 1, "resolved": 12, "timeout": 2, "unresolved": 5}),
        "{summary:#}"
    );
    assert_eq!(summary["tasks"], 21);
    assert_eq!(summary["model"], "openai/scripted");

    // The checkout was the task's commit, and the diff is the agent's change to it.
    let diff = std::fs::read_to_string(out.join("tasks/t00/diff.patch")).unwrap();
    assert!(diff.contains("+echo $(($1 + $2))"), "{diff}");
    assert!(diff.contains("-echo $(($1 - $2))"), "{diff}");
    // The cheat saw no tests, and the directory it put in their way was cleared.
    let cheat_log = std::fs::read_to_string(out.join("tasks/t17/verify.log")).unwrap();
    assert!(cheat_log.contains("FAIL"), "{cheat_log}");
    let cheat_seen = model
        .requests()
        .iter()
        .filter(|r| r.body.to_string().contains("TASK t17"))
        .map(|r| r.body.to_string())
        .next_back()
        .unwrap();
    assert!(cheat_seen.contains("No such file"), "{cheat_seen}");
    // The writer was alive in the agent's sandbox, and still when the verdict was taken.
    let alive = model
        .requests()
        .iter()
        .map(|r| r.body["messages"].as_array().unwrap().clone())
        .find(|m| {
            m.iter().any(|x| x.to_string().contains("TASK t18"))
                && m.iter().filter(|x| x["role"] == "assistant").count() == 4
        })
        .unwrap();
    let output = alive.last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    let beats: u64 = output
        .split(|c: char| !c.is_ascii_digit())
        .find(|w| !w.is_empty())
        .and_then(|w| w.parse().ok())
        .unwrap_or(0);
    assert!(beats > 0, "the writer never ran: {output}");
    let bg_log = std::fs::read_to_string(out.join("tasks/t18/verify.log")).unwrap();
    assert!(bg_log.contains("PASS"), "{bg_log}");
    // Sessions and logs are kept per task.
    assert!(out.join("tasks/t05/session.jsonl").exists());
    assert!(
        std::fs::read_to_string(out.join("tasks/t19/setup.log")).is_ok(),
        "setup log"
    );
    let predictions = std::fs::read_to_string(out.join("predictions.jsonl")).unwrap();
    let first: Value = serde_json::from_str(predictions.lines().next().unwrap()).unwrap();
    assert_eq!(first["instance_id"], "t00");
    assert!(
        first["model_patch"]
            .as_str()
            .unwrap()
            .contains("+echo $(($1 + $2))")
    );
    assert_eq!(predictions.lines().count(), 21);

    // Again into the same folder: nothing is run twice, and the summary is the same.
    let asked = model.requests().len();
    let (again, _) = eval(&model, &set, &out, &["--jobs", "4"]);
    assert_eq!(again.status.code(), Some(8), "the broken line again");
    assert_eq!(model.requests().len(), asked, "finished tasks ran again");
    assert_eq!(read_json(&out.join("summary.json")), summary);

    let shown = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["eval", "summary"])
        .arg(&out)
        .arg("--json")
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown, summary);
}

/// Results as an evaluation leaves them, written by hand: the report needs no engine.
fn results_dir(dir: &Path) {
    let statuses = [
        ("a1", "resolved"),
        ("a2", "resolved"),
        ("b1", "unresolved"),
        ("c1", "timeout"),
        ("d1", "infra_error"),
    ];
    for (i, (id, status)) in statuses.iter().enumerate() {
        let task = dir.join("tasks").join(id);
        std::fs::create_dir_all(&task).unwrap();
        let result = json!({
            "id": id, "attempt": 1, "status": status, "reward": null, "model": "m/x",
            "steps": i, "usage": {"input": 100 * i, "output": 10, "cache_read": 0, "cache_write": 0},
            "timings": {"setup_ms": 0, "agent_ms": 1000 * i, "verify_ms": 5, "total_ms": 1000 * i + 5},
            "infra_retries": 0
        });
        std::fs::write(task.join("result.json"), result.to_string()).unwrap();
        // What an agent might write to get its markup run in the reader's browser.
        std::fs::write(
            task.join("diff.patch"),
            "+</script><script>document.body.dataset.pwned = 1</script>\n+<img src=x onerror=\"document.body.dataset.pwned=1\">\n",
        )
        .unwrap();
        std::fs::write(task.join("verify.log"), format!("{id} log\n")).unwrap();
    }
}

fn chromium(args: &[&str]) -> Output {
    Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .args(args)
        .output()
        .expect("chromium")
}

fn visible_rows(dom: &str) -> usize {
    dom.split("<tr ")
        .skip(1)
        .filter(|tr| {
            tr.contains("data-status=") && !tr.split('>').next().unwrap().contains("hidden")
        })
        .count()
}

#[test]
fn the_report_loads_filters_and_sorts_in_a_real_browser_and_runs_nothing_a_task_wrote() {
    common::engine::ensure_package("chromium", "/usr/bin/chromium");
    let tmp = tempfile::tempdir().unwrap();
    let out = std::fs::canonicalize(tmp.path()).unwrap();
    results_dir(&out);
    let made = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["eval", "report"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(made.status.code(), Some(0), "{made:?}");
    let path = PathBuf::from(String::from_utf8_lossy(&made.stdout).trim());
    assert_eq!(path, out.join("report.html"));
    let html = std::fs::read_to_string(&path).unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no network"
    );

    let url = format!("file://{}", path.display());
    let all = chromium(&["--dump-dom", &url]);
    let dom = String::from_utf8_lossy(&all.stdout);
    let log = String::from_utf8_lossy(&all.stderr);
    assert!(
        dom.contains("data-ready=\"1\""),
        "the script ran to its end\n{log}"
    );
    assert!(!dom.contains("data-pwned"), "markup from a task ran");
    assert!(!log.contains("Uncaught"), "console errors:\n{log}");
    assert_eq!(visible_rows(&dom), 5, "{dom}");

    let filtered = chromium(&["--dump-dom", &format!("{url}#status=resolved")]);
    let dom = String::from_utf8_lossy(&filtered.stdout);
    assert_eq!(visible_rows(&dom), 2, "the filter hides the other rows");
    assert!(dom.contains("2 of 5 shown"));

    let sorted = chromium(&["--dump-dom", &format!("{url}#sort=agent_s&desc=1")]);
    let dom = String::from_utf8_lossy(&sorted.stdout);
    let order: Vec<&str> = dom
        .split("<tr ")
        .skip(1)
        .filter_map(|tr| tr.split("<td>").nth(1)?.split('<').next())
        .collect();
    assert_eq!(
        order,
        ["d1", "c1", "b1", "a2", "a1"],
        "sorted by agent time, longest first"
    );

    let shot = out.join("report.png");
    let _ = chromium(&[
        &format!("--screenshot={}", shot.display()),
        "--window-size=1280,900",
        &url,
    ]);
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    // Kept where a person can look at it after the run.
    let keep = std::env::temp_dir().join("runner-eval-report.png");
    std::fs::copy(&shot, &keep).unwrap();
}

fn finished(out: &Path) -> usize {
    std::fs::read_dir(out.join("tasks"))
        .map(|d| {
            d.flatten()
                .filter(|t| t.path().join("result.json").exists())
                .count()
        })
        .unwrap_or(0)
}

fn wait_for_finished(out: &Path, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while finished(out) < n {
        assert!(std::time::Instant::now() < deadline, "no task finished");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn stopped_and_killed_runs_resume_to_the_same_counts_and_leave_nothing() {
    common::engine::docker();
    let set = task_set(10, false);
    // Every answer takes a while, so that tasks are in flight when the run is stopped.
    let model = ScriptedModel::responding(|body| match answer(body) {
        Response::Stream(a) => Response::Slow(a, std::time::Duration::from_millis(700)),
        other => other,
    });
    let out = set.dir.join("out");

    // SIGTERM: running tasks are cancelled, their sandboxes closed, finished ones kept.
    let child = start_eval(&model, &set, &out, &["--jobs", "2"]);
    let first = child.id();
    wait_for_finished(&out, 1);
    unsafe { libc::kill(first as i32, libc::SIGTERM) };
    let stopped = child.wait_with_output().unwrap();
    assert_eq!(stopped.status.code(), Some(130), "{stopped:?}");
    assert!(
        String::from_utf8_lossy(&stopped.stderr).contains("unfinished"),
        "{stopped:?}"
    );
    assert_eq!(containers_of(first), "", "a stopped run left containers");
    let after_stop = finished(&out);
    assert!(after_stop < 10, "the run was stopped before the end");

    // SIGKILL: nothing gets to clean up; the next start does.
    let child = start_eval(&model, &set, &out, &["--jobs", "2"]);
    let second = child.id();
    wait_for_finished(&out, after_stop + 1);
    unsafe { libc::kill(second as i32, libc::SIGKILL) };
    let _ = child.wait_with_output();
    let after_kill = finished(&out);

    let (done, third) = eval(&model, &set, &out, &["--jobs", "2"]);
    assert_eq!(done.status.code(), Some(0), "{done:?}");
    assert!(after_kill < 10, "some work was left for the last run");
    assert_eq!(
        containers_of(second),
        "",
        "the killed run's containers were not reaped"
    );
    assert_eq!(containers_of(third), "");
    assert!(!out.join(".work").exists());
    let summary = read_json(&out.join("summary.json"));
    // As an uninterrupted run of these ten would count them.
    assert_eq!(
        summary["counts"],
        json!({"agent_error": 0, "infra_error": 0, "resolved": 10, "timeout": 0, "unresolved": 0}),
        "{summary:#}"
    );
    assert_eq!(summary["attempts"], 10);
    for n in 0..10 {
        let dir = out.join("tasks").join(format!("t{n:02}"));
        let stale: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| f.ends_with(".jsonl") && f != "session.jsonl")
            .collect();
        assert!(
            stale.is_empty(),
            "stale files from a killed attempt: {stale:?}"
        );
    }
}

#[test]
fn a_task_image_is_built_once_by_content_and_a_failed_build_says_why() {
    use runner_eval::images::{Builder, Built};
    common::engine::docker();
    let tmp = tempfile::tempdir().unwrap();
    let context = tmp.path().join("environment");
    std::fs::create_dir_all(&context).unwrap();
    // A fresh context each run, so no earlier run's image answers for it.
    let nonce = format!("{:?}", std::time::SystemTime::now());
    std::fs::write(context.join("nonce.txt"), &nonce).unwrap();
    std::fs::write(
        context.join("Dockerfile"),
        "FROM runner-sandbox:bookworm\nCOPY nonce.txt /nonce.txt\n",
    )
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let docker = runner_sandbox::docker::engine::connect().await.unwrap();
        let builder = Builder::new(docker, 2);
        let limit = std::time::Duration::from_secs(300);
        // Two tasks with the same environment at once: one build, one wait.
        let (a, b) = tokio::join!(
            builder.image_for(&context, limit),
            builder.image_for(&context, limit)
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        let fresh = [&a, &b]
            .iter()
            .filter(|x| matches!(x, Built::Fresh(_)))
            .count();
        assert_eq!(fresh, 1, "{a:?} {b:?}");
        assert_eq!(a.image(), b.image());
        let out = Command::new("docker")
            .args(["run", "--rm", a.image(), "cat", "/nonce.txt"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), nonce);

        // Another content is another image.
        std::fs::write(context.join("nonce.txt"), "changed").unwrap();
        let c = builder.image_for(&context, limit).await.unwrap();
        assert!(matches!(c, Built::Fresh(_)));
        assert_ne!(c.image(), a.image());

        std::fs::write(
            context.join("Dockerfile"),
            "FROM runner-sandbox:bookworm\nRUN echo about to fail && exit 3\n",
        )
        .unwrap();
        let e = builder
            .image_for(&context, limit)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("building runner-task:"), "{e}");
        assert!(
            e.contains("exit 3") || e.contains("returned a non-zero code: 3"),
            "{e}"
        );
        for image in [a.image(), c.image()] {
            let _ = Command::new("docker").args(["rmi", "-f", image]).output();
        }
    });
}

/// A task image is keyed by the images it starts from as well as by its files: the base
/// tagged anew (a rebuilt stand-in under the same name) makes a new build on the new base,
/// not a reuse of the image built on the old one. And `--rebuild` builds an image the
/// engine already has, once in a run.
#[test]
fn a_base_tagged_anew_makes_a_new_task_image() {
    use runner_eval::images::{Builder, Built};
    common::engine::docker();
    let docker = |args: &[&str]| {
        let out = Command::new("docker").args(args).output().unwrap();
        assert!(out.status.success(), "docker {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let base = format!("runner-test-base-{}:1", std::process::id());
    docker(&["tag", "runner-sandbox:bookworm", &base]);
    let tmp = tempfile::tempdir().unwrap();
    let context = tmp.path().join("environment");
    std::fs::create_dir_all(&context).unwrap();
    let nonce = format!("{:?}", std::time::SystemTime::now());
    std::fs::write(context.join("nonce.txt"), &nonce).unwrap();
    std::fs::write(
        context.join("Dockerfile"),
        format!("FROM {base}\nCOPY nonce.txt /nonce.txt\n"),
    )
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (a, b) = rt.block_on(async {
        let engine = runner_sandbox::docker::engine::connect().await.unwrap();
        let builder = Builder::new(engine, 2);
        let limit = std::time::Duration::from_secs(300);
        let a = builder.image_for(&context, limit).await.unwrap();
        assert!(matches!(a, Built::Fresh(_)), "{a:?}");
        let again = builder.image_for(&context, limit).await.unwrap();
        assert_eq!(again, Built::Cached(a.image().to_string()));

        // The same name, another image: a container of the old base, committed over it.
        let made = format!("runner-test-rebase-{}", std::process::id());
        docker(&[
            "run",
            "--name",
            &made,
            &base,
            "sh",
            "-c",
            "echo v2 > /base-version",
        ]);
        docker(&["commit", &made, &base]);
        docker(&["rm", &made]);
        let b = builder.image_for(&context, limit).await.unwrap();
        assert!(
            matches!(b, Built::Fresh(_)),
            "the stale image was reused: {b:?}"
        );
        assert_ne!(b.image(), a.image());

        // `--rebuild`: built again though the engine has it, then once is enough.
        let engine = runner_sandbox::docker::engine::connect().await.unwrap();
        let rebuilding = Builder::new(engine, 2).rebuilding(true);
        let again = rebuilding.image_for(&context, limit).await.unwrap();
        assert_eq!(again, Built::Fresh(b.image().to_string()));
        let once = rebuilding.image_for(&context, limit).await.unwrap();
        assert_eq!(once, Built::Cached(b.image().to_string()));
        (a, b)
    });
    let version = docker(&["run", "--rm", b.image(), "cat", "/base-version"]);
    assert_eq!(version, "v2");
    for image in [a.image(), b.image(), base.as_str()] {
        let _ = Command::new("docker").args(["rmi", "-f", image]).output();
    }
}

fn results(out: &Path) -> Vec<Value> {
    std::fs::read_dir(out.join("tasks"))
        .map(|d| {
            d.flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("result.json")).ok())
                .filter_map(|t| serde_json::from_str(&t).ok())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn two_engines_share_the_tasks_and_a_stopped_one_hands_its_tasks_over() {
    let mut second = common::engine::SecondEngine::start("evb");
    let first = "unix:///var/run/docker.sock".to_string();
    let set = task_set(12, false);
    // Every task is one the script fixes, slowly enough that tasks are in flight on both
    // engines when the second one stops.
    let model = ScriptedModel::responding(|body| {
        let step = body["messages"]
            .as_array()
            .map(|m| m.iter().filter(|x| x["role"] == "assistant").count())
            .unwrap_or(0);
        let answer = match step {
            0 => call("read", json!({"filePath": "calc.sh"})),
            1 => call("write", json!({"filePath": "calc.sh", "content": FIXED})),
            _ => text("Done."),
        };
        Response::Slow(answer, std::time::Duration::from_millis(400))
    });
    let out = set.dir.join("out");
    let child = start_eval(
        &model,
        &set,
        &out,
        &[
            "--jobs",
            "4",
            "--docker-host",
            &first,
            "--docker-host",
            &second.host,
        ],
    );
    let pid = child.id();
    // Once a task has finished on the second engine, it goes away mid-run.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !results(&out)
        .iter()
        .any(|r| r["engine"] == second.host.as_str())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no task finished on the second engine: {:?}",
            results(&out)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    second.stop();
    let run = child.wait_with_output().unwrap();
    let said = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(run.status.code(), Some(0), "{said}");
    let all = results(&out);
    assert_eq!(all.len(), 12, "every result is there: {all:#?}\n{said}");
    for r in &all {
        assert_eq!(r["status"], "resolved", "{r:#}\n{said}");
    }
    let on = |host: &str| all.iter().filter(|r| r["engine"] == host).count();
    assert!(on(&first) > 0 && on(&second.host) > 0, "{all:#?}");
    // What was running on the stopped engine ran again on the other, as an
    // infrastructure failure.
    let moved: Vec<&Value> = all
        .iter()
        .filter(|r| r["infra_retries"].as_u64() > Some(0))
        .collect();
    assert!(!moved.is_empty(), "no task moved over: {all:#?}\n{said}");
    assert!(
        moved.iter().all(|r| r["engine"] == first.as_str()),
        "{moved:#?}"
    );
    assert_eq!(
        containers_of(pid),
        "",
        "containers left on the first engine"
    );
}

/// A profile that works on a private copy (`untrusted`) must not make the session copy
/// the attempt's own workspace again: the agent would change a copy nobody diffs or
/// verifies, and the copies would pile up in the data directory.
#[test]
fn a_copy_workspace_profile_works_in_the_attempts_own_workspace() {
    common::engine::docker();
    let set = task_set(2, false);
    let model = ScriptedModel::responding(answer);
    let out = set.dir.join("out");
    let (run, _) = eval(&model, &set, &out, &["--profile", "untrusted"]);
    let said = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(run.status.code(), Some(0), "{said}");
    for id in ["t00", "t01"] {
        let r = read_json(&out.join("tasks").join(id).join("result.json"));
        assert_eq!(r["status"], "resolved", "{id}: {r:#}\n{said}");
    }
    let diff = std::fs::read_to_string(out.join("tasks/t00/diff.patch")).unwrap();
    assert!(diff.contains("+echo $(($1 + $2))"), "{diff}");
    let copies = set.dir.join("data/runner/workspaces");
    let left: Vec<_> = std::fs::read_dir(&copies)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "the session made copies of its own: {left:?}"
    );
    assert!(!out.join(".work").exists(), "workspaces left behind");
}

/// Attack: an attempt's agent writes 200 MiB into its worktree (from `yes`: the rules keep
/// `/dev/zero` outside) under a profile whose
/// `disk` budget is 64 MiB. The write gets ENOSPC (the attempt's `work/` is a file
/// system of its own), the verifier sees the failed write, and when the run ends nothing
/// of the attempt is mounted or left on disk. Control: 16 MiB within the budget is written.
#[test]
fn an_attempt_cannot_write_past_its_disk_budget() {
    let set = task_set(1, false);
    let profile = set.dir.join("budget.toml");
    std::fs::write(&profile, "[sandbox]\ndisk = \"64MiB\"\n").unwrap();
    let file = set.dir.join("fill.jsonl");
    std::fs::write(
        &file,
        json!({"id": "fill", "instruction": "TASK t00: fill the disk", "repo": "repos/t00",
               "verify": "test \"$(cat fits)\" = 0 && test \"$(cat past)\" != 0 && grep -q 'No space left' past.err"})
        .to_string()
            + "\n",
    )
    .unwrap();
    let model = ScriptedModel::responding(|body| {
        let step = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        Response::Stream(if step == 0 {
            call(
                "bash",
                json!({"command": "yes | head -c 16M > small; echo $? > fits; \
                                   err=$({ yes | head -c 25M > b1 && yes | head -c 25M > b2 && yes | head -c 25M > b3 && yes | head -c 25M > b4 \
                                     && yes | head -c 25M > b5 && yes | head -c 25M > b6 && yes | head -c 25M > b7 && yes | head -c 25M > b8; } 2>&1); \
                                   rc=$?; rm -f b1 b2 b3 b4 b5 b6 b7 b8; echo $rc > past; echo \"$err\" > past.err",
                       "description": "write past the budget"}),
            )
        } else {
            text("Done.")
        })
    });
    let out = set.dir.join("out");
    let set = TaskSet { file, ..set };
    let (run, _) = eval(
        &model,
        &set,
        &out,
        &[
            "--sandbox",
            "landlock",
            "--profile",
            profile.to_str().unwrap(),
        ],
    );
    let said = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let r = read_json(&out.join("tasks/fill/result.json"));
    let log = std::fs::read_dir(out.join("tasks/fill"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .map(|p| {
            format!(
                "{}:\n{}",
                p.display(),
                std::fs::read_to_string(&p).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(r["status"], "resolved", "{r:#}\n{said}\n{log}");
    assert_eq!(common::mounts_under(&out), Vec::<String>::new());
    assert_eq!(common::loops_under(&out), Vec::<String>::new());
    assert!(!out.join(".work").exists(), "workspaces left behind");
}

/// An attempt that is not resolved says why: its result keeps the verifier's exit status
/// and last lines, the summary lists it with a one-line reason, the progress says it as
/// the attempt ends, and the report shows it. A resolved attempt keeps no verifier tail.
#[test]
fn an_unresolved_attempt_says_why_everywhere() {
    common::engine::docker();
    let set = task_set(2, false);
    let text = std::fs::read_to_string(&set.file).unwrap();
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let mut task: Value = serde_json::from_str(l).unwrap();
            if task["id"] == "t01" {
                // Both on standard error: the order of lines across two pipes is not
                // the order they were written in.
                task["verify"] =
                    json!("sh test.sh >&2; echo 'pytest: command not found' >&2; exit 4");
            }
            task.to_string()
        })
        .collect();
    std::fs::write(&set.file, lines.join("\n") + "\n").unwrap();
    let model = ScriptedModel::responding(answer);
    let out = set.dir.join("out");
    let (run, _) = eval(&model, &set, &out, &[]);
    let said = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(0), "{said}");

    let r = read_json(&out.join("tasks/t01/result.json"));
    assert_eq!(r["status"], "unresolved", "{r:#}");
    assert_eq!(r["verifier"]["exit"], 4, "{r:#}");
    assert!(
        r["verifier"]["tail"]
            .as_str()
            .unwrap()
            .ends_with("pytest: command not found"),
        "{r:#}"
    );
    let resolved = read_json(&out.join("tasks/t00/result.json"));
    assert_eq!(resolved["status"], "resolved", "{resolved:#}");
    assert!(resolved.get("verifier").is_none(), "{resolved:#}");

    let why = "the verifier exited 4: pytest: command not found";
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(
        summary["not_resolved"],
        json!([{"id": "t01", "attempt": 1, "status": "unresolved", "reason": why}]),
        "{summary:#}"
    );
    assert!(
        said.contains(&format!("t01 attempt 1: unresolved: {why}")),
        "{said}"
    );
    let report = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["eval", "report"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(report.status.code(), Some(0), "{report:?}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains(why), "the report does not say why");
}

/// Runs `cmd` (its output into files beside `out`) and follows its peak resident memory
/// (`VmHWM`) every few milliseconds until it ends: the status and the peak in MiB.
fn peak_mib(mut cmd: Command, out: &Path, name: &str) -> (std::process::ExitStatus, u64, String) {
    let log = out.with_extension(format!("{name}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        let status = std::fs::read_to_string(&status_file).unwrap_or_default();
        if let Some(kib) = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak_kib = peak_kib.max(kib);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    (
        status,
        peak_kib >> 10,
        std::fs::read_to_string(&log).unwrap_or_default(),
    )
}

/// An agent that writes a gigabyte of text costs runner no gigabyte of memory: its
/// 1 GiB `diff.patch` goes from git to the disk, `predictions.jsonl` copies it in pieces,
/// and `eval report` shows a head and a tail and links the file. Both commands stay under
/// 256 MiB of resident memory (each read whole, as before, would take well over 1 GiB);
/// the patch and the predictions are still whole on disk.
#[test]
fn a_gigabyte_diff_costs_eval_run_and_report_no_gigabyte_of_memory() {
    let set = task_set(1, false);
    let file = set.dir.join("big.jsonl");
    std::fs::write(
        &file,
        json!({"id": "big", "instruction": "TASK t00: write a lot", "repo": "repos/t00",
               "verify": "test -s big1.txt"})
        .to_string()
            + "\n",
    )
    .unwrap();
    let model = ScriptedModel::responding(|body| {
        let step = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        Response::Stream(if step == 0 {
            // Four files of 256 MiB of text lines (git takes each as text: under its
            // big-file threshold), so the patch holds every line.
            call(
                "bash",
                json!({"command": "yes the agent wrote this line of text once more and again | head -c 268435456 > big1.txt && cp big1.txt big2.txt && cp big1.txt big3.txt && cp big1.txt big4.txt && echo written",
                       "description": "write a gigabyte"}),
            )
        } else {
            text("Done.")
        })
    });
    let out = set.dir.join("out");
    let set = TaskSet { file, ..set };
    let started = std::time::Instant::now();
    let mut run = Command::new(env!("CARGO_BIN_EXE_runner"));
    run.args(["eval", "run"])
        .arg(&set.file)
        .arg("--out")
        .arg(&out)
        .args(["--model", "openai/scripted", "--sandbox", "landlock"])
        .env("XDG_DATA_HOME", set.dir.join("data"))
        .env("XDG_CONFIG_HOME", set.dir.join("config"))
        .env("OPENAI_API_KEY", "sk-eval-test")
        .env("OPENAI_BASE_URL", model.openai_base());
    let (status, run_peak, said) = peak_mib(run, &out, "run");
    let run_s = started.elapsed().as_secs_f64();
    assert!(status.success(), "{said}");
    assert!(run_peak < 256, "eval run peaked at {run_peak} MiB");
    let r = read_json(&out.join("tasks/big/result.json"));
    let session = std::fs::read_to_string(out.join("tasks/big/session.jsonl")).unwrap_or_default();
    assert_eq!(r["status"], "resolved", "{r:#}\n{said}\n{session}");
    let patch = out.join("tasks/big/diff.patch");
    let patch_len = std::fs::metadata(&patch).unwrap().len();
    assert!(patch_len > 1 << 30, "the patch is whole: {patch_len} bytes");
    let predictions = std::fs::metadata(out.join("predictions.jsonl"))
        .unwrap()
        .len();
    assert!(
        predictions > 1 << 30,
        "the prediction is whole: {predictions} bytes"
    );
    let mut report = Command::new(env!("CARGO_BIN_EXE_runner"));
    report.args(["eval", "report"]).arg(&out);
    let (status, report_peak, said) = peak_mib(report, &out, "report");
    assert!(status.success(), "{said}");
    assert!(report_peak < 256, "eval report peaked at {report_peak} MiB");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.len() < 4 << 20, "the report is {} bytes", html.len());
    assert!(html.contains("bytes not shown here"));
    assert!(
        html.contains("tasks/big/diff.patch"),
        "the whole patch is linked"
    );
    eprintln!(
        "1 GiB diff ({patch_len} bytes): eval run peaked at {run_peak} MiB ({run_s:.1} s; {}), eval report at {report_peak} MiB, {:.1} s in all",
        r["timings"],
        started.elapsed().as_secs_f64()
    );
}
