//! The audit trail end to end: a real `runner run` under landlock with the allow-list's
//! proxy, a scripted model making one call the rules allow and one they deny, a command
//! inside reaching a loopback server the rules open and a host they refuse. The trail
//! written with `--audit FILE` must hold exactly those decisions, each with the rule that
//! made it, between the sandbox's start and end; every record must conform to the OCSF
//! schema files kept in `tests/fixtures/ocsf`; the user's `[audit] file` and `runner
//! sessions audit ID` must have the same records; a repository's `[audit]` is ignored.

use std::path::{Path, PathBuf};
use std::process::Output;

use common::provider::{Response, ScriptedModel, call, text};
use serde_json::{Value, json};

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn schema() -> runner_audit::conformance::Schema {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ocsf/1.7.0");
    runner_audit::conformance::Schema::load(&root).unwrap()
}

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What identifies a record here: its class, its disposition (0 where it has none), and
/// what it is about (the first resource, the destination host, or the lifecycle step).
fn key(r: &Value) -> (u64, u64, String) {
    let class = r["class_uid"].as_u64().unwrap();
    let disposition = r["disposition_id"].as_u64().unwrap_or(0);
    let about = match class {
        6003 => format!(
            "{} {}",
            r["api"]["operation"].as_str().unwrap(),
            r["resources"][0]["name"].as_str().unwrap()
        ),
        4002 => format!(
            "{} {}",
            r["activity_name"].as_str().unwrap(),
            r["http_request"]["url"]["path"].as_str().unwrap()
        ),
        4001 => {
            let dst = &r["dst_endpoint"];
            let host = dst["hostname"].as_str().or(dst["ip"].as_str()).unwrap();
            format!("{} {host}", r["activity_name"].as_str().unwrap())
        }
        _ => r["activity_name"].as_str().unwrap().to_string(),
    };
    (class, disposition, about)
}

struct Trail {
    _tmp: tempfile::TempDir,
    audit: PathBuf,
    user_audit: PathBuf,
    repo_audit: PathBuf,
    config: PathBuf,
    out: Output,
    s: common::allowlist::Setup,
    model: ScriptedModel,
}

/// The run: a command fetching from the loopback server (allowed) and from a host the
/// rules refuse, then `rm -rf build`, which a rule denies.
fn run_with_audit(outside_port: u16, backend: common::Backend) -> Trail {
    let s = common::allowlist::setup();
    let tmp = tempfile::tempdir().unwrap();
    let audit = tmp.path().join("trail/audit.jsonl");
    let repo_audit = tmp.path().join("repository-audit.jsonl");
    let config = tmp.path().join("rules.toml");
    std::fs::write(
        &config,
        "[permission.network]\n\"*\" = \"deny\"\n\"127.0.0.1\" = \"allow\"\n[permission.bash]\n\"rm *\" = \"deny\"\n",
    )
    .unwrap();
    // The user's own config names a trail too; the repository's tries to.
    let user_dir = s.data.join("config/runner");
    std::fs::create_dir_all(&user_dir).unwrap();
    std::fs::write(
        user_dir.join("config.toml"),
        "[audit]\nfile = \"user-audit.jsonl\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(s.wt.join(".runner")).unwrap();
    std::fs::write(
        s.wt.join(".runner/config.toml"),
        format!("[audit]\nfile = {:?}\n", repo_audit.display().to_string()),
    )
    .unwrap();
    let p = outside_port;
    let fetches = format!(
        "export no_proxy= NO_PROXY=; python3 net.py fetch http://127.0.0.1:{p}/blob; python3 net.py fetch http://refused.example/x"
    );
    let model = ScriptedModel::start(vec![
        Response::Stream(call(
            "bash",
            json!({"command": fetches, "description": "fetch", "timeout": 60000}),
        )),
        Response::Stream(call(
            "bash",
            json!({"command": "rm -rf build", "description": "clean"}),
        )),
        Response::Stream(text("done")),
    ]);
    let (audit_arg, config_arg) = (audit.display().to_string(), config.display().to_string());
    let sandbox = match backend {
        common::Backend::Docker => {
            common::engine::docker();
            "docker"
        }
        _ => "landlock",
    };
    // Where the sandbox runs as another user, what the test wrote becomes theirs.
    common::engine::hand_over(tmp.path());
    common::engine::hand_over(&s.data);
    common::engine::hand_over(&s.wt);
    let mut command = common::allowlist::runner(
        &s,
        &[
            "run",
            "--sandbox",
            sandbox,
            "--network",
            "allowlist",
            "--ask",
            "deny",
            "--continue-on-deny",
            "--config",
            &config_arg,
            "--audit",
            &audit_arg,
            "--model",
            "openai/gpt-test",
            "--json",
            "fetch, then clean",
        ],
    );
    command
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", model.openai_base());
    if backend == common::Backend::Docker {
        common::engine::cli(&mut command);
    }
    let out = command.output().unwrap();
    Trail {
        user_audit: user_dir.join("user-audit.jsonl"),
        _tmp: tmp,
        audit,
        repo_audit,
        config,
        out,
        s,
        model,
    }
}

#[test]
fn a_runs_trail_holds_each_decision_with_its_rule_and_conforms_to_ocsf_on_landlock() {
    a_runs_trail_holds_each_decision(common::Backend::Landlock);
}

#[test]
fn a_runs_trail_holds_each_decision_with_its_rule_and_conforms_to_ocsf_on_docker() {
    a_runs_trail_holds_each_decision(common::Backend::Docker);
}

fn a_runs_trail_holds_each_decision(backend: common::Backend) {
    let outside = common::outside::Outside::start(1000);
    let t = run_with_audit(outside.port, backend);
    let all = describe(&t.out);
    // What the command inside said, as the model was sent it.
    let told = t.model.requests()[1].body["messages"].to_string();
    assert!(
        told.contains("OK http://127.0.0.1") && told.contains("FAIL http://refused.example"),
        "one fetch went through and one was refused\n{told}\n{all}"
    );
    let records = lines(&t.audit);

    // Exactly these decisions: start first, end last, the rest in the order of the run
    // (a connection's record comes when it closes, so only the set is compared).
    let keys: Vec<(u64, u64, String)> = records.iter().map(key).collect();
    assert_eq!(
        keys.first().map(|k| k.2.as_str()),
        Some("Start"),
        "{keys:#?}"
    );
    assert_eq!(keys.last().map(|k| k.2.as_str()), Some("Stop"), "{keys:#?}");
    let wall = match backend {
        common::Backend::Docker => "docker",
        _ => "landlock",
    };
    assert_eq!(records[0]["app"]["feature"]["name"], wall);
    // The wall's self-test comes right after the start, and passed.
    assert_eq!(keys[1].2, "Self-test", "{keys:#?}");
    assert_eq!(records[1]["status"], "Success", "{:#}", records[1]);
    let mut middle: Vec<(u64, u64, String)> = keys[2..keys.len() - 1].to_vec();
    middle.sort();
    let mut want = vec![
        (6003, 1, "bash export no_proxy= NO_PROXY=".to_string()),
        (6003, 1, "network 127.0.0.1".into()),
        (6003, 2, "network refused.example".into()),
        (6003, 2, "bash rm -rf build".into()),
        (4001, 1, "Close 127.0.0.1".into()),
        (4001, 2, "Refuse refused.example".into()),
    ];
    want.sort();
    assert_eq!(middle, want, "{all}");

    // Each decision names the rule that made it, with its file and place.
    let by = |about: &str| {
        records
            .iter()
            .find(|r| key(r).2 == about)
            .unwrap_or_else(|| panic!("no record of {about}"))
    };
    let config = t.config.display().to_string();
    let rm = &by("bash rm -rf build")["policy"];
    assert_eq!(rm["name"], "bash \"rm *\" = deny");
    assert_eq!(rm["uid"], format!("{config}#3"));
    assert_eq!(rm["data"]["layer"], "explicit");
    let refused = &by("network refused.example")["policy"];
    assert_eq!(refused["data"]["pattern"], "*");
    assert_eq!(refused["data"]["action"], "deny");
    assert_eq!(refused["uid"], format!("{config}#1"));
    assert_eq!(
        by("network 127.0.0.1")["policy"]["uid"],
        format!("{config}#2")
    );
    // The allowed command was allowed by the built-in defaults' `"*" = "allow"`.
    let bash = &by("bash export no_proxy= NO_PROXY=")["policy"]["data"];
    assert_eq!(bash["origin"], "built-in defaults");
    let close = by("Close 127.0.0.1");
    assert_eq!(close["dst_endpoint"]["port"], outside.port);
    assert!(
        close["traffic"]["bytes_in"].as_u64().unwrap() >= 1000,
        "{close}"
    );
    let refuse = by("Refuse refused.example");
    assert!(
        refuse["status_detail"]
            .as_str()
            .unwrap()
            .contains("denied by the rule"),
        "{refuse}"
    );

    // A SIEM takes every line as it is.
    let schema = schema();
    for r in &records {
        let problems = schema.check(r);
        assert!(problems.is_empty(), "{problems:#?}\nin {r:#}");
    }

    // One session: every line carries its id, and `sessions audit ID` prints the same.
    let session = records[0]["metadata"]["correlation_uid"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        records
            .iter()
            .all(|r| r["metadata"]["correlation_uid"] == session)
    );
    let shown = std::process::Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["sessions", "audit", &session[..8]])
        .env("XDG_DATA_HOME", &t.s.data)
        .env("XDG_CONFIG_HOME", t.s.data.join("config"))
        .output()
        .unwrap();
    assert_eq!(shown.status.code(), Some(0), "{}", describe(&shown));
    let printed: Vec<Value> = String::from_utf8_lossy(&shown.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(printed, records);
    // The session's folder holds its session file alone: what lists sessions there does
    // not take the trail for one.
    let kept: Vec<_> = std::fs::read_dir(t.s.data.join("runner/sessions"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    // The user's `[audit] file` has them too; the repository's was never written.
    assert_eq!(lines(&t.user_audit), records);
    assert!(
        !t.repo_audit.exists(),
        "a repository chose where the trail goes"
    );
    assert!(
        String::from_utf8_lossy(&t.out.stderr).contains("ignored [audit]"),
        "{all}"
    );
}

/// A trail is appended to, never replaced: a second run adds its own lines after the
/// first's, each run's lines carrying its own session id.
#[test]
fn a_second_session_appends_to_the_same_file() {
    let s = common::allowlist::setup();
    let file = s.data.join("shared-audit.jsonl");
    let file_arg = file.display().to_string();
    for n in 0..2 {
        let model = ScriptedModel::start(vec![Response::Stream(text("nothing to do"))]);
        let out = common::allowlist::runner(
            &s,
            &[
                "run",
                "--sandbox",
                "landlock",
                "--audit",
                &file_arg,
                "--model",
                "openai/gpt-test",
                "--json",
                "hello",
            ],
        )
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", model.openai_base())
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(0), "run {n}: {}", describe(&out));
    }
    let records = lines(&file);
    let steps: Vec<String> = records.iter().map(|r| key(r).2).collect();
    assert_eq!(
        steps,
        ["Start", "Self-test", "Stop", "Start", "Self-test", "Stop"]
    );
    assert_ne!(
        records[0]["metadata"]["correlation_uid"],
        records[3]["metadata"]["correlation_uid"]
    );
}

/// Requests on an inspected host (here plain HTTP, which the proxy judges by the same
/// `http` rules as a request inside TLS) and a secret's placeholder where it may not go:
/// HTTP Activity for each request, allowed or refused, and the secret's refusal by name,
/// its value nowhere in the trail.
#[test]
fn inspected_requests_and_a_refused_secret_are_in_the_trail() {
    let s = common::allowlist::setup();
    let outside = common::outside::Outside::start(1000);
    let p = outside.port;
    let token = "audit-real-token-6d1f0c3b";
    std::fs::write(
        &s.config,
        "[permission.network]\n\"*\" = \"deny\"\n\"127.0.0.1\" = \"allow\"\n\
         [permission.http]\n\"* 127.0.0.1/*\" = \"deny\"\n\"GET 127.0.0.1/blob\" = \"allow\"\n\
         [network.secrets.AUDIT_TOKEN]\nhosts = [\"127.0.0.1\"]\n",
    )
    .unwrap();
    let audit = s.data.join("audit.jsonl");
    let command = format!(
        "export no_proxy= NO_PROXY=; python3 net.py fetch http://127.0.0.1:{p}/blob; \
         python3 net.py fetch http://127.0.0.1:{p}/closed; \
         curl -s -o /dev/null -w 'CURL %{{http_code}}\\n' -H \"Authorization: Bearer $AUDIT_TOKEN\" http://127.0.0.1:{p}/blob"
    );
    let args = json!({"command": command, "description": "inspected", "timeout": 60000});
    let (args, config, audit_arg) = (
        args.to_string(),
        s.config.display().to_string(),
        audit.display().to_string(),
    );
    let out = common::allowlist::runner(
        &s,
        &[
            "tool",
            "call",
            "bash",
            &args,
            "--sandbox",
            "landlock",
            "--network",
            "allowlist",
            "--ask",
            "deny",
            "--config",
            &config,
            "--audit",
            &audit_arg,
        ],
    )
    .env("AUDIT_TOKEN", token)
    .output()
    .unwrap();
    let all = describe(&out);
    let records = lines(&audit);
    assert!(
        all.contains("OK http://127.0.0.1") && all.contains("CURL 403"),
        "{all}"
    );
    let keys: Vec<(u64, u64, String)> = records.iter().map(key).collect();
    assert_eq!(
        keys.first().map(|k| k.2.as_str()),
        Some("Start"),
        "{keys:#?}"
    );
    assert_eq!(keys.last().map(|k| k.2.as_str()), Some("Stop"), "{keys:#?}");
    assert_eq!(keys[1].2, "Self-test", "{keys:#?}");
    let mut middle = keys[2..keys.len() - 1].to_vec();
    middle.sort();
    // Three connections the network rules allow; on the first the request's method and
    // path are allowed, on the second refused (which ends that connection), and the third
    // carries the secret's placeholder in plain HTTP, refused before any rule is asked.
    let mut want: Vec<(u64, u64, String)> = [
        (6003, 1, "bash export no_proxy= NO_PROXY="),
        (6003, 1, "network 127.0.0.1"),
        (6003, 1, "network 127.0.0.1"),
        (6003, 1, "network 127.0.0.1"),
        (6003, 1, "http GET 127.0.0.1/blob"),
        (4002, 1, "Get /blob"),
        (4001, 1, "Close 127.0.0.1"),
        (6003, 2, "http GET 127.0.0.1/closed"),
        (4002, 2, "Get /closed"),
        (4001, 2, "Refuse 127.0.0.1"),
        (6003, 2, "secret AUDIT_TOKEN"),
    ]
    .iter()
    .map(|(c, d, a)| (*c, *d, a.to_string()))
    .collect();
    want.sort();
    assert_eq!(middle, want, "{all}");
    let by = |about: &str| records.iter().find(|r| key(r).2 == about).unwrap();
    let config = s.config.display().to_string();
    assert_eq!(
        by("http GET 127.0.0.1/closed")["policy"]["uid"],
        format!("{config}#3")
    );
    assert_eq!(
        by("http GET 127.0.0.1/blob")["policy"]["uid"],
        format!("{config}#4")
    );
    // Plain HTTP is written as such, whatever the port.
    let allowed = by("Get /blob");
    assert_eq!(allowed["http_request"]["url"]["scheme"], "http");
    assert_eq!(
        allowed["http_request"]["url"]["url_string"],
        format!("http://127.0.0.1:{p}/blob")
    );
    let refused = by("Get /closed");
    assert_eq!(refused["http_request"]["url"]["scheme"], "http");
    assert_eq!(refused["http_status"], 403);
    assert_eq!(refused["http_request"]["http_method"], "GET");
    assert!(
        refused["status_detail"]
            .as_str()
            .unwrap()
            .contains("http \"* 127.0.0.1/*\" = \"deny\""),
        "{refused}"
    );
    let secret = by("secret AUDIT_TOKEN");
    assert_eq!(secret["resources"][0]["type"], "secret");
    assert_eq!(secret["dst_endpoint"]["ip"], "127.0.0.1");
    let schema = schema();
    for r in &records {
        let problems = schema.check(r);
        assert!(problems.is_empty(), "{problems:#?}\nin {r:#}");
    }
    let text = std::fs::read_to_string(&audit).unwrap();
    assert!(!text.contains(token), "the secret's value is in the trail");
}

/// `runner eval run` keeps each attempt's trail in the attempt's folder, beside its
/// `session.jsonl`: the agent's call and its deciding rule, between its sandbox's start and
/// stop.
#[test]
fn an_evaluation_keeps_each_attempts_trail_in_its_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let repo = dir.join("repos/t00");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("calc.sh"), "echo $(($1 - $2))\n").unwrap();
    let tasks = dir.join("tasks.jsonl");
    let task =
        json!({"id": "t00", "instruction": "fix calc.sh", "repo": "repos/t00", "verify": "true"});
    std::fs::write(&tasks, format!("{task}\n")).unwrap();
    let model = ScriptedModel::responding(|body| {
        let asked = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        Response::Stream(if asked == 0 {
            call(
                "bash",
                json!({"command": "sh calc.sh 2 3", "description": "try"}),
            )
        } else {
            text("Done.")
        })
    });
    let out = dir.join("out");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["eval", "run"])
        .arg(&tasks)
        .arg("--out")
        .arg(&out)
        .args(["--model", "openai/scripted", "--sandbox", "landlock"])
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("OPENAI_API_KEY", "sk-eval-test")
        .env("OPENAI_BASE_URL", model.openai_base())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let all = describe(&run);
    let attempt = out.join("tasks/t00");
    let trail = attempt.join("audit.ndjson");
    assert!(trail.is_file(), "no trail in {}\n{all}", attempt.display());
    let records = lines(&trail);
    let keys: Vec<(u64, u64, String)> = records.iter().map(key).collect();
    assert_eq!(
        keys,
        [
            (6002, 0, "Start".to_string()),
            (6002, 0, "Self-test".into()),
            (6003, 1, "bash sh calc.sh 2 3".into()),
            (6002, 0, "Stop".into()),
        ],
        "{all}"
    );
    let schema = schema();
    for r in &records {
        assert!(schema.check(r).is_empty(), "{:#?}", schema.check(r));
    }
}

/// What every line must carry whatever wrote it: its session, the host user, the machine,
/// and a place in the OCSF schema.
fn check_every_line(records: &[Value]) {
    let schema = schema();
    for r in records {
        let problems = schema.check(r);
        assert!(problems.is_empty(), "{problems:#?}\nin {r:#}");
        let session = r["metadata"]["correlation_uid"]
            .as_str()
            .unwrap_or_default();
        assert!(!session.is_empty(), "no session in {r}");
        assert!(r["metadata"]["sequence"].is_u64(), "{r}");
        assert!(r["actor"]["user"]["uid"].is_string(), "no user in {r}");
        assert!(r["device"]["hostname"].is_string(), "no host in {r}");
    }
}

/// What a walled command does to a trail it can name: cut it short and add a line that
/// looks like runner's. It says whether each write went through.
fn forge(trail: &str) -> String {
    let forged = r#"{"class_uid":6003,"message":"forged: nothing was refused"}"#;
    format!(
        "(: > {trail} && echo TRUNCATED) 2>&1; (echo '{forged}' >> {trail} && echo FORGED) 2>&1; touch ran-marker; echo DONE"
    )
}

fn tool_call(
    s: &common::allowlist::Setup,
    backend: common::Backend,
    command: &str,
    extra: &[&str],
) -> std::process::Command {
    let args = json!({"command": command, "description": "forge", "timeout": 60000}).to_string();
    let sandbox = match backend {
        common::Backend::Docker => {
            common::engine::docker();
            "docker"
        }
        _ => "landlock",
    };
    let mut all = vec!["tool", "call", "bash", &args, "--sandbox", sandbox];
    all.extend_from_slice(extra);
    let mut c = common::allowlist::runner(s, &all);
    if backend == common::Backend::Docker {
        common::engine::cli(&mut c);
    }
    c
}

/// `runner exec FLAGS --root WT -- ARGV` with the setup's data and config directories (the
/// setup's `runner` puts `--root` last, which here would be the program's).
fn exec(s: &common::allowlist::Setup, flags: &[&str], argv: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(common::engine::runner_exe());
    c.arg("exec")
        .args(flags)
        .arg("--root")
        .arg(&s.wt)
        .arg("--")
        .args(argv)
        .env("XDG_DATA_HOME", &s.data)
        .env("XDG_CONFIG_HOME", s.data.join("config"))
        .stdin(std::process::Stdio::null());
    c
}

#[test]
fn a_trail_the_sandbox_could_write_is_refused_and_one_outside_holds_on_landlock() {
    a_trail_the_sandbox_could_write_is_refused(common::Backend::Landlock);
}

#[test]
fn a_trail_the_sandbox_could_write_is_refused_and_one_outside_holds_on_docker() {
    a_trail_the_sandbox_could_write_is_refused(common::Backend::Docker);
}

/// A bind mount of a folder at another, taken down when dropped (a failing test too).
struct Bound(PathBuf);

impl Bound {
    fn new(from: &Path, at: &Path) -> Bound {
        std::fs::create_dir_all(at).unwrap();
        let out = std::process::Command::new("mount")
            .arg("--bind")
            .args([from, at])
            .output()
            .unwrap();
        assert!(out.status.success(), "mount --bind: {}", describe(&out));
        Bound(at.to_path_buf())
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        let out = std::process::Command::new("umount").arg(&self.0).output();
        if !out.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("umount {}: {out:?}", self.0.display());
        }
    }
}

/// The attack: docs/AUDIT.md's own example, `--audit runner.jsonl` given in the checkout,
/// and the other spellings of a place in it (`..`, a link to the worktree, a link file
/// pointing in, the user's `[audit] file`, the worktree bind-mounted elsewhere), each with a command that truncates and forges
/// the trail. Each is refused with exit 2 before any sandbox starts (the command never ran).
/// The control: a trail outside the worktree is written, and the same command cannot
/// touch it.
fn a_trail_the_sandbox_could_write_is_refused(backend: common::Backend) {
    let s = common::allowlist::setup();
    let beside = s.wt.parent().unwrap().to_path_buf();
    let logs = beside.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    std::os::unix::fs::symlink(&s.wt, logs.join("to-worktree")).unwrap();
    std::fs::write(s.wt.join("kept.jsonl"), "").unwrap();
    std::os::unix::fs::symlink(s.wt.join("kept.jsonl"), logs.join("points-in.jsonl")).unwrap();
    let config = beside.join("audit-config.toml");
    std::fs::write(
        &config,
        format!(
            "[audit]\nfile = {:?}\n",
            s.wt.join("mine.jsonl").display().to_string()
        ),
    )
    .unwrap();
    common::engine::hand_over(&beside);
    let _bound = Bound::new(&s.wt, &beside.join("bm"));
    let config_arg = config.display().to_string();
    let attacks: Vec<(&str, Vec<String>, &Path)> = vec![
        (
            "the documented example",
            vec!["--audit".into(), "runner.jsonl".into()],
            &s.wt,
        ),
        (
            "through ..",
            vec!["--audit".into(), "../wt/sub/../runner.jsonl".into()],
            &logs,
        ),
        (
            "a link to the worktree",
            vec!["--audit".into(), "logs/to-worktree/runner.jsonl".into()],
            &beside,
        ),
        (
            "a link file pointing in",
            vec![
                "--audit".into(),
                logs.join("points-in.jsonl").display().to_string(),
            ],
            &beside,
        ),
        (
            "[audit] file",
            vec!["--config".into(), config_arg.clone()],
            &beside,
        ),
        (
            "the worktree bind-mounted elsewhere",
            vec!["--audit".into(), "bm/runner.jsonl".into()],
            &beside,
        ),
    ];
    for (what, extra, cwd) in &attacks {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let out = tool_call(&s, backend, &forge("runner.jsonl"), &extra)
            .current_dir(cwd)
            .output()
            .unwrap();
        let all = describe(&out);
        assert_eq!(out.status.code(), Some(2), "{what}: {all}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("the sandbox can write") || stderr.contains("symbolic link"),
            "{what}: {all}"
        );
        assert!(
            stderr.contains("--audit FILE"),
            "{what}: says what to do\n{all}"
        );
        assert!(!s.wt.join("ran-marker").exists(), "{what}: the command ran");
        assert!(
            !s.wt.join("runner.jsonl").exists() && !s.wt.join("mine.jsonl").exists(),
            "{what}"
        );
    }

    // The control: outside the worktree, written, and out of the command's reach. Asks
    // are approved: the wall, not a rule, is what must stop the command.
    let trail = logs.join("trail/runner.jsonl");
    let trail_arg = trail.display().to_string();
    let extra = ["--audit", &trail_arg, "--ask", "allow"];
    let out = tool_call(&s, backend, &forge(&trail_arg), &extra)
        .output()
        .unwrap();
    let all = describe(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(
        all.contains("DONE") && s.wt.join("ran-marker").exists(),
        "the command ran\n{all}"
    );
    assert!(
        !all.contains("TRUNCATED") && !all.contains("FORGED"),
        "{all}"
    );
    // Every line is runner's (the command's text is in the trail, as the bash call's
    // subject; its forged line is not).
    let records = lines(&trail);
    assert!(
        records
            .iter()
            .all(|r| r["message"] != "forged: nothing was refused"),
        "{records:#?}"
    );
    let steps: Vec<String> = records.iter().map(|r| key(r).2).collect();
    assert_eq!(
        steps.first().map(String::as_str),
        Some("Start"),
        "{steps:?}"
    );
    assert_eq!(steps.last().map(String::as_str), Some("Stop"), "{steps:?}");
    check_every_line(&records);
}

/// `runner exec` keeps the trail every session keeps, in `--audit FILE` and the user's
/// `[audit] file` alike: the start naming the program run, each connection the rules
/// judged (the decision and the proxy's record of it), the stop with the program's status.
#[test]
fn runner_exec_keeps_the_same_trail_as_every_session() {
    let s = common::allowlist::setup();
    let outside = common::outside::Outside::start(1000);
    let p = outside.port;
    let user_dir = s.data.join("config/runner");
    std::fs::create_dir_all(&user_dir).unwrap();
    std::fs::write(
        user_dir.join("config.toml"),
        "[audit]\nfile = \"user-audit.jsonl\"\n",
    )
    .unwrap();
    let audit = s.data.join("exec-audit.jsonl");
    let (config, audit_arg) = (s.config.display().to_string(), audit.display().to_string());
    let script = format!(
        "export no_proxy= NO_PROXY=; python3 net.py fetch http://127.0.0.1:{p}/blob; python3 net.py fetch http://refused.example/x; exit 3"
    );
    let flags = [
        "--sandbox",
        "landlock",
        "--network",
        "allowlist",
        "--config",
        &config,
        "--audit",
        &audit_arg,
    ];
    let out = exec(&s, &flags, &["sh", "-c", &script]).output().unwrap();
    let all = describe(&out);
    assert_eq!(out.status.code(), Some(3), "{all}");
    assert!(
        all.contains("OK http://127.0.0.1") && all.contains("FAIL http://refused.example"),
        "{all}"
    );
    let records = lines(&audit);
    let keys: Vec<(u64, u64, String)> = records.iter().map(key).collect();
    assert_eq!(
        keys.first().map(|k| k.2.as_str()),
        Some("Start"),
        "{keys:#?}"
    );
    assert_eq!(keys.last().map(|k| k.2.as_str()), Some("Stop"), "{keys:#?}");
    let mut middle = keys[1..keys.len() - 1].to_vec();
    middle.sort();
    let mut want = vec![
        // The wall's self-test at start, as in every session.
        (6002, 0, "Self-test".to_string()),
        (6003, 1, "network 127.0.0.1".into()),
        (6003, 2, "network refused.example".into()),
        (4001, 1, "Close 127.0.0.1".into()),
        (4001, 2, "Refuse refused.example".into()),
    ];
    want.sort();
    assert_eq!(middle, want, "{all}");
    assert_eq!(
        records[0]["unmapped"]["command"],
        json!(["sh", "-c", script])
    );
    assert!(
        records[0]["message"]
            .as_str()
            .unwrap()
            .contains("net.py fetch"),
        "{}",
        records[0]
    );
    let stop = records.last().unwrap()["message"].as_str().unwrap();
    assert!(stop.contains("status 3"), "{stop}");
    let refused = records
        .iter()
        .find(|r| key(r).2 == "network refused.example")
        .unwrap();
    assert_eq!(refused["policy"]["uid"], format!("{config}#1"));
    check_every_line(&records);
    assert_eq!(lines(&user_dir.join("user-audit.jsonl")), records);
}

/// Two sessions appending to one file, from `tool call` (whose lines named no session
/// before): every line carries its session, the two differ, each numbers its own lines,
/// and each names the host user and machine.
#[test]
fn two_sessions_in_one_file_are_told_apart_and_name_who_and_where() {
    let s = common::allowlist::setup();
    let file = s.data.join("shared.jsonl");
    let file_arg = file.display().to_string();
    for n in 0..2 {
        let out = tool_call(
            &s,
            common::Backend::Landlock,
            "echo hi",
            &["--audit", &file_arg],
        )
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(0), "run {n}: {}", describe(&out));
    }
    let records = lines(&file);
    check_every_line(&records);
    let mut sessions: Vec<&str> = Vec::new();
    for r in &records {
        let id = r["metadata"]["correlation_uid"].as_str().unwrap();
        if sessions.last() != Some(&id) {
            sessions.push(id);
        }
        let mine: Vec<u64> = records
            .iter()
            .filter(|o| o["metadata"]["correlation_uid"] == id)
            .map(|o| o["metadata"]["sequence"].as_u64().unwrap())
            .collect();
        assert_eq!(mine, (1..=mine.len() as u64).collect::<Vec<_>>(), "{id}");
    }
    assert_eq!(sessions.len(), 2, "{records:#?}");
    assert_ne!(sessions[0], sessions[1]);
    let uid = std::process::Command::new("id").arg("-u").output().unwrap();
    let uid = String::from_utf8_lossy(&uid.stdout).trim().to_string();
    let user = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    let user = String::from_utf8_lossy(&user.stdout).trim().to_string();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for r in &records {
        assert_eq!(r["actor"]["user"]["uid"], uid, "{r}");
        assert_eq!(r["actor"]["user"]["name"], user, "{r}");
        assert_eq!(r["device"]["hostname"], host.trim(), "{r}");
    }
}

/// A loop of 1,500 refused connections from inside the wall: the trail stays small, and
/// the refusals it holds (one by one, then folded) add up to 1,500, for the rule's
/// decisions and the proxy's records alike.
#[test]
fn a_loop_of_refused_connections_is_folded_into_a_bounded_trail() {
    let s = common::allowlist::setup();
    let audit = s.data.join("loop.jsonl");
    let (config, audit_arg) = (s.config.display().to_string(), audit.display().to_string());
    let looped = r#"
import os, urllib.request
refused = 0
for _ in range(1500):
    try:
        urllib.request.urlopen("http://refused.example/x", timeout=20).read()
    except urllib.error.HTTPError as e:
        refused += e.code == 403
print("REFUSED", refused, flush=True)
"#;
    let flags = [
        "--sandbox",
        "landlock",
        "--network",
        "allowlist",
        "--config",
        &config,
        "--audit",
        &audit_arg,
    ];
    let out = exec(&s, &flags, &["python3", "-c", looped])
        .output()
        .unwrap();
    let all = describe(&out);
    assert!(all.contains("REFUSED 1500"), "{all}");
    let size = std::fs::metadata(&audit).unwrap().len();
    let records = lines(&audit);
    check_every_line(&records);
    let counted = |about: &str| -> u64 {
        records
            .iter()
            .filter(|r| key(r).2 == about)
            .map(|r| r["count"].as_u64().unwrap_or(1))
            .sum()
    };
    assert_eq!(counted("network refused.example"), 1500, "{records:#?}");
    assert_eq!(counted("Refuse refused.example"), 1500, "{records:#?}");
    let folded: Vec<&Value> = records.iter().filter(|r| r["count"].is_u64()).collect();
    assert!(!folded.is_empty());
    for f in &folded {
        assert!(f["start_time"].as_u64() <= f["end_time"].as_u64(), "{f}");
    }
    // Unfolded, 1,500 refusals wrote 3,000 lines (3.3 MB before lines named who and where).
    assert!(records.len() < 100, "{} lines", records.len());
    assert!(size < 100_000, "{size} bytes");
}
