//! The `runner tool …` command line, run as the real binary: what harnesses and humans
//! script against. Exit codes, the `--json` shape, the tool schemas, sessions in scripts
//! (read-before-write), and that the bash tool does not inherit the runner's secrets.
//!
//! `XDG_DATA_HOME` points into the test's temp dir so saved outputs never land in the
//! real home directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use common::project::Project;

/// A worktree (`wt`) and the user's folders of its own: the user's own config and
/// profiles must not leak into what the tests see.
struct Cli {
    project: Project,
    wt: PathBuf,
    data: PathBuf,
}

impl Cli {
    fn new() -> Cli {
        let project = Project::new("wt");
        Cli {
            wt: project.root.clone(),
            data: project.data.clone(),
            project,
        }
    }

    fn command(&self) -> Command {
        self.project.command()
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("runner runs")
    }

    /// `tool call NAME ARGS --root WT [extra…]`.
    fn call(&self, name: &str, args: Value, extra: &[&str]) -> Output {
        let args = args.to_string();
        let root = self.wt.to_string_lossy().into_owned();
        let mut argv = vec!["tool", "call", name, &args, "--root", &root];
        argv.extend_from_slice(extra);
        self.run(&argv)
    }

    /// `tool call … --json`, parsed.
    fn call_json(&self, name: &str, args: Value, extra: &[&str]) -> (i32, Value) {
        let mut extra = extra.to_vec();
        extra.push("--json");
        let out = self.call(name, args, &extra);
        (code(&out), single_json(&out))
    }

    /// `tool script FILE --root WT` with the given calls, one JSON object per line.
    fn script(&self, calls: &[Value]) -> (i32, Vec<Value>) {
        let file = self.wt.parent().unwrap().join("script.jsonl");
        let text: String = calls.iter().map(|c| format!("{c}\n")).collect();
        std::fs::write(&file, text).unwrap();
        let root = self.wt.to_string_lossy().into_owned();
        let out = self.run(&["tool", "script", &file.to_string_lossy(), "--root", &root]);
        let results = stdout(&out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        (code(&out), results)
    }

    fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.wt.join(rel);
        std::fs::write(&p, content).unwrap();
        p
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.wt.join(rel)).unwrap()
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited normally")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn single_json(out: &Output) -> Value {
    let text = stdout(out);
    let mut lines = text.lines();
    let v = serde_json::from_str(lines.next().expect("one line of JSON"))
        .unwrap_or_else(|e| panic!("{e}: {text} / {}", stderr(out)));
    assert_eq!(lines.next(), None, "exactly one line: {text}");
    v
}

fn call(tool: &str, args: Value) -> Value {
    json!({ "tool": tool, "args": args })
}

// ---------------------------------------------------------------------------------------
// tool list
// ---------------------------------------------------------------------------------------

/// Every tool the lead agent is offered is listed with an object JSON Schema whose
/// `required` matches OpenCode's parameters (e.g. read: `filePath` required,
/// `offset`/`limit` optional), the agent-level ones (`skill`, `task`, `plan_enter`)
/// included and `invalid`, which a model is never shown, left out.
#[test]
fn tool_list_json_has_a_schema_per_tool() {
    let cli = Cli::new();
    let out = cli.run(&["tool", "list", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let tools: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    let ids: Vec<&str> = tools.iter().map(|t| t["id"].as_str().unwrap()).collect();
    for id in [
        "bash",
        "read",
        "write",
        "apply_patch",
        "glob",
        "grep",
        "list",
        "todowrite",
        "todoread",
        "webfetch",
        "batch",
        "skill",
        "task",
        "plan_enter",
    ] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    // OpenCode's defaults deny `question`, which hides it; `plan_exit` is the plan agent's,
    // not the default lead's.
    for absent in ["question", "invalid", "plan_exit"] {
        assert!(!ids.contains(&absent), "{absent} in {ids:?}");
    }
    let task = tools.iter().find(|t| t["id"] == "task").unwrap();
    let described = task["description"].as_str().unwrap();
    assert!(
        described.contains("- explore:"),
        "task names its subagents: {described}"
    );
    for t in &tools {
        let p = &t["parameters"];
        assert_eq!(p["type"], "object", "{}: {p}", t["id"]);
        assert!(p["properties"].is_object(), "{}: {p}", t["id"]);
        assert!(
            !t["description"].as_str().unwrap().trim().is_empty(),
            "{} has no description",
            t["id"]
        );
        // A schema only the runner understands is useless to a model API.
        assert!(p.get("$schema").is_none() && p.get("title").is_none());
    }
    let schema = |id: &str| {
        tools
            .iter()
            .find(|t| t["id"] == id)
            .map(|t| t["parameters"].clone())
            .unwrap()
    };
    let required = |id: &str| -> Vec<String> {
        let mut r: Vec<String> = schema(id)["required"]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
            .unwrap_or_default();
        r.sort();
        r
    };

    let read = schema("read");
    assert_eq!(required("read"), ["filePath"]);
    for optional in ["offset", "limit"] {
        let prop = &read["properties"][optional];
        assert!(prop.is_object(), "read.{optional} missing: {read}");
        assert!(
            prop.to_string().contains("integer"),
            "read.{optional} is not an integer: {prop}"
        );
    }
    assert_eq!(required("write"), ["content", "filePath"]);
    assert_eq!(required("bash"), ["command", "description"]);
    assert!(schema("bash")["properties"]["timeout"].is_object());
    assert!(schema("bash")["properties"]["workdir"].is_object());
    assert_eq!(required("apply_patch"), ["patchText"]);
    assert_eq!(required("glob"), ["pattern"]);
    assert_eq!(required("grep"), ["pattern"]);
    assert!(required("list").is_empty());
    assert_eq!(required("todowrite"), ["todos"]);
    assert!(required("todoread").is_empty());
    assert_eq!(required("webfetch"), ["url"]);
    assert_eq!(required("batch"), ["tool_calls"]);
    // Nested types are written out in place: not every model API resolves `$ref`.
    for id in ["todowrite", "batch"] {
        let text = schema(id).to_string();
        assert!(
            !text.contains("$ref") && !text.contains("$defs"),
            "{id}: {text}"
        );
    }

    let plain = cli.run(&["tool", "list"]);
    assert_eq!(code(&plain), 0);
    let lines: Vec<String> = stdout(&plain).lines().map(String::from).collect();
    assert_eq!(lines.len(), tools.len());
    for (line, id) in lines.iter().zip(&ids) {
        assert!(line.starts_with(id), "{line} does not start with {id}");
    }
}

// ---------------------------------------------------------------------------------------
// tool call: exit codes and --json
// ---------------------------------------------------------------------------------------

/// 0 when the tool succeeded: the output is printed as is.
#[test]
fn call_exit_0_prints_the_output() {
    let cli = Cli::new();
    cli.write("a.txt", "hello\n");
    let out = cli.call("read", json!({ "filePath": "a.txt" }), &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("1: hello"), "{}", stdout(&out));
}

/// 1 when the tool ran and failed (the error goes to stderr), or the call was malformed.
#[test]
fn call_exit_1_when_the_tool_fails() {
    let cli = Cli::new();
    let out = cli.call("read", json!({ "filePath": "missing.txt" }), &[]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("File not found"), "{}", stderr(&out));
    assert!(stdout(&out).is_empty());

    let out = cli.call("no_such_tool", json!({}), &[]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("Unknown tool 'no_such_tool'"));

    let root = cli.wt.to_string_lossy().into_owned();
    let out = cli.run(&["tool", "call", "read", "{not json", "--root", &root]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("not valid JSON"), "{}", stderr(&out));
}

/// 2 for usage errors: missing arguments, an unknown flag value, a root that is not a
/// directory.
#[test]
fn call_exit_2_on_usage_errors() {
    let cli = Cli::new();
    assert_eq!(code(&cli.run(&["tool", "call", "read"])), 2);
    let out = cli.call("read", json!({ "filePath": "a" }), &["--ask", "maybe"]);
    assert_eq!(code(&out), 2);
    let missing = cli.wt.join("nope");
    let out = cli.run(&[
        "tool",
        "call",
        "read",
        "{}",
        "--root",
        &missing.to_string_lossy(),
    ]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("is not a directory"),
        "{}",
        stderr(&out)
    );
}

/// 3 when a rule asks and the ask is refused; nothing is written.
#[test]
fn call_exit_3_when_denied() {
    let cli = Cli::new();
    let config = cli.wt.parent().unwrap().join("asks.toml");
    std::fs::write(&config, "[permission]\nedit = \"ask\"\nbash = \"ask\"\n").unwrap();
    let config = config.to_string_lossy().into_owned();
    let out = cli.call(
        "write",
        json!({ "filePath": "new.txt", "content": "x" }),
        &["--ask", "deny", "--config", &config],
    );
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refused because --ask deny refuses every ask"),
        "{}",
        stderr(&out)
    );
    assert!(!cli.wt.join("new.txt").exists());

    let (code, v) = cli.call_json(
        "bash",
        json!({ "command": "touch made", "description": "d" }),
        &["--ask", "deny", "--config", &config],
    );
    assert_eq!(code, 3);
    assert!(
        v["error"].as_str().unwrap().contains("bash: touch made"),
        "{v}"
    );
    assert!(!cli.wt.join("made").exists());
}

/// `--json` prints one object with exactly these keys, on success and on failure.
#[test]
fn call_json_shape() {
    let cli = Cli::new();
    cli.write("a.txt", "hello\n");
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let expected = [
        "attachments",
        "error",
        "metadata",
        "output",
        "title",
        "tool",
    ];

    let (code, v) = cli.call_json("read", json!({ "filePath": "a.txt" }), &[]);
    assert_eq!(code, 0);
    assert_eq!(keys(&v), expected);
    assert_eq!(v["tool"], "read");
    assert_eq!(v["title"], "a.txt");
    assert_eq!(v["error"], Value::Null);
    assert_eq!(v["attachments"], json!([]));
    assert!(v["output"].as_str().unwrap().contains("1: hello"));
    assert_eq!(v["metadata"]["truncated"], false);

    let (code, v) = cli.call_json("read", json!({ "filePath": "nope.txt" }), &[]);
    assert_eq!(code, 1);
    assert_eq!(keys(&v), expected);
    assert_eq!(v["output"], "");
    assert!(v["error"].as_str().unwrap().starts_with("File not found"));

    // An image comes back as OpenCode's file part.
    let png: &[u8] =
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
    std::fs::write(cli.wt.join("dot.png"), png).unwrap();
    let (code, v) = cli.call_json("read", json!({ "filePath": "dot.png" }), &[]);
    assert_eq!(code, 0, "{v}");
    let a = &v["attachments"][0];
    assert_eq!(a["type"], "file", "{v}");
    assert_eq!(a["mime"], "image/png", "{v}");
    assert_eq!(a["filename"], "dot.png", "{v}");
    assert!(
        a["url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,"),
        "{v}"
    );
}

/// The command's exit status is data (`metadata.exit`); the call itself succeeded.
#[test]
fn bash_exit_status_is_in_metadata() {
    let cli = Cli::new();
    let (code, v) = cli.call_json(
        "bash",
        json!({ "command": "echo hi; exit 5", "description": "Exit five" }),
        &[],
    );
    assert_eq!(code, 0);
    assert_eq!(v["metadata"]["exit"], 5);
    assert_eq!(v["output"], "hi\n");
    assert_eq!(v["title"], "Exit five");
}

/// A truncated output is saved under `XDG_DATA_HOME`, in a folder of the call's own session
/// (the one its sandbox mounts read-only). A later call is another session: its rules do
/// not allow the folder, and nobody is there to approve it. Reading back within a session
/// is attacked on both walls in the escape suites (`common/saved_outputs.rs`).
#[test]
fn truncated_output_is_saved_in_a_folder_of_its_session() {
    let cli = Cli::new();
    let (code, v) = cli.call_json(
        "bash",
        json!({ "command": "seq 1 3000", "description": "Count" }),
        &[],
    );
    assert_eq!(code, 0);
    assert_eq!(v["metadata"]["truncated"], true);
    let saved = Path::new(v["metadata"]["outputPath"].as_str().unwrap());
    let root = cli.data.join("runner/tool-output");
    assert!(
        saved.starts_with(&root) && saved.parent() != Some(root.as_path()),
        "{}",
        saved.display()
    );
    let full: String = (1..=3000).map(|i| format!("{i}\n")).collect();
    assert_eq!(std::fs::read_to_string(saved).unwrap(), full);
    assert!(
        v["output"]
            .as_str()
            .unwrap()
            .contains(&format!("Full output saved to: {}", saved.display())),
        "{v}"
    );

    let (code, v) = cli.call_json("read", json!({ "filePath": saved, "offset": 3000 }), &[]);
    assert_eq!(code, 3, "{v}");
    assert!(!v["output"].as_str().unwrap_or("").contains("3000: 3000"));
    // A call that saved nothing leaves no folder behind.
    let folders = std::fs::read_dir(&root).unwrap().count();
    assert_eq!(folders, 1, "only the first call's folder");
}

// ---------------------------------------------------------------------------------------
// sessions: read before write
// ---------------------------------------------------------------------------------------

/// A single `tool call` is its own session: the file on disk counts as read.
#[test]
fn single_call_write_to_an_existing_file_succeeds() {
    let cli = Cli::new();
    cli.write("f.txt", "old\n");
    let (code, v) = cli.call_json(
        "write",
        json!({ "filePath": "f.txt", "content": "new\n" }),
        &[],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["metadata"]["exists"], true);
    assert_eq!(cli.read("f.txt"), "new\n");
}

/// In a script (one session) a write to an existing file needs a read first, and a file
/// changed on disk after the read must be read again.
#[test]
fn script_enforces_read_before_write() {
    let cli = Cli::new();
    cli.write("f.txt", "v1\n");
    let write = |content: &str| call("write", json!({ "filePath": "f.txt", "content": content }));
    let (code, results) = cli.script(&[
        write("blind\n"),
        call("read", json!({ "filePath": "f.txt" })),
        write("v2\n"),
        call(
            "bash",
            json!({ "command": "echo x >> f.txt", "description": "Append" }),
        ),
        write("v3\n"),
        call("read", json!({ "filePath": "f.txt" })),
        write("v4\n"),
    ]);
    assert_eq!(results.len(), 7, "{results:?}");
    let err = |i: usize| results[i]["error"].as_str().unwrap_or_default().to_string();
    assert!(err(0).contains("You must read file"), "{}", err(0));
    assert_eq!(results[1]["error"], Value::Null);
    assert_eq!(results[2]["error"], Value::Null, "{}", err(2));
    assert_eq!(results[3]["metadata"]["exit"], 0);
    assert!(
        err(4).contains("modified since it was last read"),
        "{}",
        err(4)
    );
    assert!(results[5]["output"].as_str().unwrap().contains("2: x"));
    assert_eq!(results[6]["error"], Value::Null, "{}", err(6));
    assert_eq!(cli.read("f.txt"), "v4\n");
    // The script's status is its first failure's.
    assert_eq!(code, 1);
}

/// Runs a script whose first line is not a call and whose second writes `n.txt`.
fn script_with_a_bad_line(cli: &Cli) -> (i32, Vec<Value>) {
    let file = cli.wt.parent().unwrap().join("bad.jsonl");
    std::fs::write(
        &file,
        "not json\n\n{\"tool\":\"write\",\"args\":{\"filePath\":\"n.txt\",\"content\":\"ok\"}}\n",
    )
    .unwrap();
    let root = cli.wt.to_string_lossy().into_owned();
    let out = cli.run(&["tool", "script", &file.to_string_lossy(), "--root", &root]);
    let results = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (code(&out), results)
}

/// A script line that is not a call becomes an `invalid` result naming the line, and the
/// other lines still run.
#[test]
fn script_reports_bad_lines_and_continues() {
    let cli = Cli::new();
    let (_, results) = script_with_a_bad_line(&cli);
    assert_eq!(results.len(), 2, "the blank line is skipped");
    assert_eq!(results[0]["tool"], "invalid");
    assert!(
        results[0]["output"]
            .as_str()
            .unwrap()
            .contains("line 1: expected a JSON object")
    );
    assert_eq!(results[1]["error"], Value::Null);
    assert_eq!(cli.read("n.txt"), "ok");
}

/// A malformed line is a failed call: its result carries an error and the script exits 1,
/// like an unknown tool or non-JSON arguments do.
#[test]
fn script_bad_line_counts_as_a_failure() {
    let cli = Cli::new();
    let (code, results) = script_with_a_bad_line(&cli);
    assert!(
        results[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("line 1")),
        "{}",
        results[0]
    );
    assert_eq!(code, 1);
}

// ---------------------------------------------------------------------------------------
// environment
// ---------------------------------------------------------------------------------------

/// The runner's own environment (API keys, tokens) does not reach commands; the
/// allow-listed variables do.
#[test]
fn bash_does_not_see_the_runners_secrets() {
    let cli = Cli::new();
    let out = cli
        .command()
        .env("OPENAI_API_KEY", "sk-test-secret")
        .env("AWS_SECRET_ACCESS_KEY", "aws-test-secret")
        .env("LANG", "C.UTF-8")
        .args([
            "tool",
            "call",
            "bash",
            &json!({ "command": "env; echo \"key=${OPENAI_API_KEY:-unset}\"", "description": "Env" })
                .to_string(),
            "--root",
            &cli.wt.to_string_lossy(),
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = single_json(&out);
    let output = v["output"].as_str().unwrap();
    assert!(output.contains("key=unset"), "{output}");
    for secret in [
        "sk-test-secret",
        "OPENAI_API_KEY",
        "aws-test-secret",
        "XDG_DATA_HOME",
    ] {
        assert!(!output.contains(secret), "{secret} leaked:\n{output}");
    }
    assert!(output.contains("LANG=C.UTF-8"), "{output}");
}

/// A profile picks the wall; a flag overrides the profile; a bad profile is a clear error.
#[test]
fn profiles_choose_the_sandbox_and_flags_override_them() {
    let cli = Cli::new();
    let probe = json!({
        "command": "grep -E '^(NoNewPrivs|CapEff)' /proc/self/status; ls /root >/dev/null 2>&1 && echo home-visible || echo home-hidden",
        "description": "probe"
    });
    let laptop = cli.call("bash", probe.clone(), &["--profile", "laptop"]);
    assert!(laptop.status.success(), "{laptop:?}");
    let out = stdout(&laptop);
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("home-hidden"), "{out}");

    let none = cli.call(
        "bash",
        probe.clone(),
        &["--profile", "laptop", "--sandbox", "none"],
    );
    let out = stdout(&none);
    assert!(out.contains("NoNewPrivs:\t0"), "{out}");

    let mine = cli.wt.join("mine.toml");
    std::fs::write(&mine, "[sandbox]\nbackend = \"landlock\"\n").unwrap();
    let own = cli.call(
        "bash",
        probe.clone(),
        &["--profile", mine.to_str().unwrap()],
    );
    assert!(stdout(&own).contains("NoNewPrivs:\t1"), "{own:?}");

    // A profile's environment additions reach commands on every backend; others never do.
    let echo = json!({ "command": "echo \"[$RUNNER_PROFILE_VAR]\"", "description": "env" });
    for backend in ["none", "landlock"] {
        std::fs::write(
            &mine,
            format!("[sandbox]\nbackend = \"{backend}\"\nenv = [\"RUNNER_PROFILE_VAR\"]\n"),
        )
        .unwrap();
        let with = cli
            .command()
            .args(["tool", "call", "bash", &echo.to_string(), "--root"])
            .arg(&cli.wt)
            .args(["--profile", mine.to_str().unwrap()])
            .env("RUNNER_PROFILE_VAR", "passed")
            .output()
            .unwrap();
        assert_eq!(stdout(&with).trim(), "[passed]", "{backend}: {with:?}");
        let without = cli
            .command()
            .args(["tool", "call", "bash", &echo.to_string(), "--root"])
            .arg(&cli.wt)
            .args(["--sandbox", backend])
            .env("RUNNER_PROFILE_VAR", "passed")
            .output()
            .unwrap();
        assert_eq!(stdout(&without).trim(), "[]", "{backend}: {without:?}");
    }

    let bad = cli.call("bash", probe.clone(), &["--profile", "no-such"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("no profile named \"no-such\"") && err.contains("laptop"),
        "{err}"
    );

    std::fs::write(
        &mine,
        "[sandbox]\nbackend = \"landlock\"\nnetwrok = \"host\"\n",
    )
    .unwrap();
    let typo = cli.call("bash", probe, &["--profile", mine.to_str().unwrap()]);
    assert_eq!(typo.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&typo.stderr).contains("netwrok"),
        "{typo:?}"
    );
}

/// `permission check` and `permission eval` against a worktree with config files.
impl Cli {
    fn config_home(&self) -> PathBuf {
        self.project.config.clone()
    }

    fn check(&self, tool: &str, args: Value, extra: &[&str]) -> Value {
        let args = args.to_string();
        let root = self.wt.to_string_lossy().into_owned();
        let mut argv = vec!["permission", "check", tool, &args, "--root", &root];
        argv.extend_from_slice(extra);
        let out = self.run(&argv);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
    }

    fn eval(&self, permission: &str, pattern: &str, extra: &[&str]) -> Value {
        let root = self.wt.to_string_lossy().into_owned();
        let mut argv = vec![
            "permission",
            "eval",
            permission,
            pattern,
            "--root",
            &root,
            "--json",
        ];
        argv.extend_from_slice(extra);
        let out = self.run(&argv);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        serde_json::from_str(&stdout(&out)).unwrap()
    }
}

/// (permission, decision) per ask, and the overall decision.
fn decisions(v: &Value) -> (String, Vec<(String, String)>) {
    let asks = v["asks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["permission"].as_str().unwrap().to_string(),
                a["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (v["decision"].as_str().unwrap().to_string(), asks)
}

fn pair(p: &str, d: &str) -> (String, String) {
    (p.to_string(), d.to_string())
}

#[test]
fn permission_check_lists_each_ask_and_runs_nothing() {
    let cli = Cli::new();
    let bash = |command: &str| json!({ "command": command, "description": "d" });
    let v = cli.check(
        "bash",
        bash("cat .env && rm -rf /tmp/runner-zz/x && touch made"),
        &[],
    );
    assert_eq!(
        decisions(&v),
        (
            "ask".into(),
            vec![
                pair("external_directory", "ask"),
                pair("read", "ask"),
                pair("bash", "allow"),
            ]
        )
    );
    assert_eq!(v["asks"][0]["patterns"], json!(["/tmp/runner-zz/*"]));
    assert_eq!(v["asks"][1]["patterns"], json!([".env"]));
    assert_eq!(
        v["asks"][2]["patterns"],
        json!(["cat .env", "rm -rf /tmp/runner-zz/x", "touch made"])
    );
    assert_eq!(v["asks"][2]["always"], json!(["cat *", "rm *", "touch *"]));
    assert!(
        !cli.wt.join("made").exists(),
        "check must not run the command"
    );

    let config = cli.wt.parent().unwrap().join("deny.toml");
    std::fs::write(&config, "[permission.bash]\n\"rm *\" = \"deny\"\n").unwrap();
    let v = cli.check(
        "bash",
        bash("ls && rm x"),
        &["--config", config.to_str().unwrap()],
    );
    assert_eq!(decisions(&v), ("deny".into(), vec![pair("bash", "deny")]));
    assert_eq!(v["asks"][0]["rule"]["pattern"], "rm *");

    let v = cli.check("read", json!({ "filePath": ".env.example" }), &[]);
    assert_eq!(decisions(&v), ("allow".into(), vec![pair("read", "allow")]));
    let v = cli.check("read", json!({ "filePath": ".env.production" }), &[]);
    assert_eq!(decisions(&v), ("ask".into(), vec![pair("read", "ask")]));
    // eval: nobody watches, so an ask is a deny.
    let v = cli.check(
        "read",
        json!({ "filePath": ".env" }),
        &["--profile", "eval"],
    );
    assert_eq!(decisions(&v), ("deny".into(), vec![pair("read", "deny")]));
    let v = cli.check(
        "write",
        json!({ "filePath": "/etc/x", "content": "" }),
        &["--profile", "untrusted"],
    );
    assert_eq!(
        decisions(&v),
        (
            "deny".into(),
            vec![pair("external_directory", "deny"), pair("edit", "allow")]
        )
    );

    let bad = cli.run(&["permission", "check", "bash", "{\"command\": 1}"]);
    assert_eq!(code(&bad), 2);
    assert!(
        stderr(&bad).contains("invalid arguments"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn the_readonly_profile_allows_reading_commands_only() {
    let cli = Cli::new();
    let cases: &[(&str, &str)] = &[
        ("ls -la", "allow"),
        ("cat README.md | grep x | wc -l", "allow"),
        ("git status", "allow"),
        ("git log --oneline -5", "allow"),
        ("rg TODO src", "allow"),
        ("find . -name '*.rs'", "allow"),
        ("ls > listing.txt", "deny"),
        ("cat a >> b", "deny"),
        ("echo x | tee out", "deny"),
        ("rm -rf build", "deny"),
        ("git commit -m x", "deny"),
        ("git push", "deny"),
        ("find . -name x -delete", "deny"),
        ("find . -exec rm {} ;", "deny"),
        ("sort -o out.txt in.txt", "deny"),
        ("sort -uo out.txt in.txt", "deny"),
        ("uniq in.txt out.txt", "deny"),
        ("xxd in out", "deny"),
        ("tree -o out", "deny"),
        ("printf -v x %s 1", "deny"),
        ("git grep -Ovim -e x", "deny"),
        ("rg --pre sh x", "deny"),
        ("git log --output=f", "deny"),
        ("\\rm x", "deny"),
        ("FOO=1 ls", "deny"),
        ("export X=1", "deny"),
        ("x=1; echo $((x))", "deny"),
        ("find . -type f -e''xec rm {} +", "deny"),
        ("find . -dele\\te", "deny"),
        ("sudo ls", "deny"),
        ("{ echo pwned; } > src/main.rs", "deny"),
        ("[[ 1 -eq 'a[$(rm -rf src)]' ]]", "deny"),
        ("cat 'a b.txt'", "allow"),
        ("ls $(rm -rf x)", "deny"),
        ("python3 -c 'print(1)'", "deny"),
        ("sed -i s/a/b/ f", "deny"),
    ];
    for (command, want) in cases {
        let v = cli.check(
            "bash",
            json!({ "command": command, "description": "d" }),
            &["--profile", "readonly"],
        );
        assert_eq!(v["decision"], *want, "{command}: {v}");
    }
    for (tool, args) in [
        ("write", json!({ "filePath": "a.txt", "content": "" })),
        (
            "edit",
            json!({ "filePath": "a.txt", "oldString": "a", "newString": "b" }),
        ),
        (
            "apply_patch",
            json!({ "patchText": "*** Begin Patch\n*** Add File: n.txt\n+n\n*** End Patch" }),
        ),
    ] {
        let v = cli.check(tool, args, &["--profile", "readonly"]);
        assert_eq!(v["decision"], "deny", "{tool}: {v}");
    }
    let v = cli.check(
        "read",
        json!({ "filePath": "a.txt" }),
        &["--profile", "readonly"],
    );
    assert_eq!(v["decision"], "allow");
}

/// permission, subject, extra flags, expected action, deciding rule's (origin, position).
type EvalCase<'a> = (
    &'a str,
    &'a str,
    &'a [&'a str],
    &'a str,
    Option<(&'a str, usize)>,
);

/// User config, project config and `--config` stack in that order; each decision names the
/// file and position of the rule that made it.
#[test]
fn config_layers_stack_and_eval_names_the_deciding_rule() {
    let cli = Cli::new();
    let user = cli.config_home().join("runner/config.toml");
    std::fs::create_dir_all(user.parent().unwrap()).unwrap();
    std::fs::write(
        &user,
        "[permission.bash]\n\"git *\" = \"allow\"\n\"git push *\" = \"deny\"\n\"npm *\" = \"deny\"\n",
    )
    .unwrap();
    let project = cli.wt.join(".runner/config.toml");
    std::fs::create_dir_all(project.parent().unwrap()).unwrap();
    // A repository may tighten the user's rules, never loosen them: its allow under the
    // user's `npm *` deny is ignored, its ask under the user's `git *` allow counts.
    std::fs::write(
        &project,
        "[permission.bash]\n\"npm test *\" = \"allow\"\n\"git log *\" = \"ask\"\n",
    )
    .unwrap();
    let opencode = cli.wt.parent().unwrap().join("opencode.json");
    std::fs::write(
        &opencode,
        "{\n  // an OpenCode config, read as it is\n  \"permission\": { \"bash\": { \"git push --dry-run*\": \"ask\" }, \"edit\": \"ask\" }\n}\n",
    )
    .unwrap();
    let oc = ["--config", opencode.to_str().unwrap()];
    let user_s = user.to_string_lossy().into_owned();
    let project_s = project.to_string_lossy().into_owned();
    let opencode_s = opencode.to_string_lossy().into_owned();
    let cases: &[EvalCase] = &[
        ("bash", "git status", &[], "allow", Some((&user_s, 1))),
        (
            "bash",
            "git push origin main",
            &[],
            "deny",
            Some((&user_s, 2)),
        ),
        ("bash", "npm install", &[], "deny", Some((&user_s, 3))),
        ("bash", "npm test --watch", &[], "deny", Some((&user_s, 3))),
        ("bash", "git log -1", &[], "ask", Some((&project_s, 2))),
        (
            "bash",
            "git push --dry-run",
            &oc,
            "ask",
            Some((&opencode_s, 1)),
        ),
        ("edit", "src/a.rs", &oc, "ask", Some((&opencode_s, 2))),
        (
            "edit",
            "src/a.rs",
            &[],
            "allow",
            Some(("built-in defaults", 1)),
        ),
        ("read", ".env", &[], "ask", Some(("built-in defaults", 6))),
        (
            "webfetch",
            "https://example.com",
            &["--profile", "eval"],
            "deny",
            Some(("built-in profile eval", 2)),
        ),
        (
            "webfetch",
            "https://example.com",
            &[],
            "allow",
            Some(("built-in defaults", 1)),
        ),
        (
            "external_directory",
            "/srv/*",
            &["--profile", "eval"],
            "deny",
            Some(("built-in profile eval", 1)),
        ),
    ];
    for (permission, pattern, extra, action, rule) in cases {
        let v = cli.eval(permission, pattern, extra);
        assert_eq!(v["action"], *action, "{permission} {pattern}: {v}");
        match rule {
            Some((origin, position)) => {
                assert_eq!(v["rule"]["source"]["origin"], *origin, "{pattern}: {v}");
                assert_eq!(v["rule"]["source"]["position"], *position, "{pattern}: {v}");
            }
            None => assert!(v["rule"].is_null()),
        }
    }
    // Nothing matched: the default is ask, and no rule is named.
    let bare = cli.wt.parent().unwrap().join("bare.toml");
    std::fs::write(&bare, "[permission]\n\"*\" = \"ask\"\n").unwrap();
    let v = cli.eval("bash", "ls", &["--config", bare.to_str().unwrap()]);
    assert_eq!(v["action"], "ask");

    // A broken config stops the command and names the file.
    std::fs::write(&project, "[permission.bash]\n\"npm *\" = \"sure\"\n").unwrap();
    let out = cli.call("read", json!({ "filePath": "x" }), &[]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains(&project_s) && stderr(&out).contains("sure"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_untrusted_repository_cannot_loosen_its_own_rules() {
    let cli = Cli::new();
    let project = cli.wt.join(".runner/config.toml");
    std::fs::create_dir_all(project.parent().unwrap()).unwrap();
    std::fs::write(
        &project,
        "[permission]\nexternal_directory = \"allow\"\nedit = \"ask\"\n[permission.bash]\n\"*\" = \"ask\"\n\"curl *\" = \"deny\"\n",
    )
    .unwrap();
    // Under the default profile its allow loosens a built-in default: it counts only once
    // this config is trusted.
    assert_eq!(
        cli.eval("external_directory", "/home/*", &[])["action"],
        "ask"
    );
    assert_eq!(
        cli.eval("external_directory", "/home/*", &["--trust-project"])["action"],
        "allow"
    );
    let root = cli.wt.to_string_lossy().into_owned();
    for profile in ["untrusted", "eval", "readonly"] {
        let out = cli.run(&[
            "permission",
            "eval",
            "external_directory",
            "/home/*",
            "--root",
            &root,
            "--profile",
            profile,
            "--json",
        ]);
        let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_ne!(v["action"], "allow", "{profile}: {v}");
        assert!(
            stderr(&out).contains("ignored 3 rule(s) that are not denies"),
            "{profile}: {}",
            stderr(&out)
        );
        // Its denies still count; its asks cannot reopen what the profile closed.
        assert_eq!(
            cli.eval("bash", "curl x", &["--profile", profile])["action"],
            "deny"
        );
        if profile == "readonly" {
            assert_eq!(
                cli.eval("edit", "a.txt", &["--profile", profile])["action"],
                "deny"
            );
            assert_eq!(
                cli.eval("bash", "rm x", &["--profile", profile])["action"],
                "deny"
            );
        }
    }
}

#[test]
fn without_a_terminal_an_ask_is_refused_at_once() {
    let cli = Cli::new();
    let config = cli.wt.parent().unwrap().join("asks.toml");
    std::fs::write(&config, "[permission]\nbash = \"ask\"\n").unwrap();
    let started = std::time::Instant::now();
    let out = cli
        .command()
        .args([
            "tool",
            "call",
            "bash",
            "{\"command\": \"touch made\", \"description\": \"d\"}",
            "--root",
        ])
        .arg(&cli.wt)
        .args(["--config", config.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no terminal to ask on"),
        "{}",
        stderr(&out)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert!(!cli.wt.join("made").exists());
    // --ask allow approves it, once.
    let out = cli.call(
        "bash",
        json!({ "command": "touch made", "description": "d" }),
        &["--config", config.to_str().unwrap(), "--ask", "allow"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(cli.wt.join("made").exists());
}

#[test]
fn profiles_list_and_show_their_merged_rules() {
    let cli = Cli::new();
    let mine = cli.config_home().join("runner/profiles/mine.toml");
    std::fs::create_dir_all(mine.parent().unwrap()).unwrap();
    std::fs::write(
        &mine,
        "description = \"my own\"\n[permission]\nwebfetch = \"deny\"\n",
    )
    .unwrap();
    let list = stdout(&cli.run(&["profile", "list"]));
    for name in ["default", "readonly", "untrusted", "laptop", "eval", "mine"] {
        assert!(
            list.lines().any(|l| l.starts_with(name)),
            "{name} in {list}"
        );
    }
    assert!(list.contains("my own"), "{list}");

    let out = cli.run(&["profile", "show", "mine", "--json"]);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let rules: Vec<(String, String, String)> = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["permission"].as_str().unwrap().to_string(),
                r["pattern"].as_str().unwrap().to_string(),
                r["action"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // OpenCode's defaults first, then runner's network ask and http allow, the profile's
    // rule after them, saved output last.
    assert_eq!(rules[0], ("*".into(), "*".into(), "allow".into()));
    assert_eq!(rules[8], ("network".into(), "*".into(), "ask".into()));
    assert_eq!(rules[9], ("http".into(), "*".into(), "allow".into()));
    assert_eq!(rules[10], ("webfetch".into(), "*".into(), "deny".into()));
    assert_eq!(rules.len(), 12, "{rules:?}");
    let text = stdout(&cli.run(&["profile", "show", "eval"]));
    assert!(text.contains("refused: an ask is a deny"), "{text}");
    let out = cli.run(&["profile", "show", "nope"]);
    assert_eq!(code(&out), 2);

    // The tool list hides what a profile turns off.
    let listed = stdout(&cli.run(&["tool", "list", "--profile", "readonly"]));
    let ids: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        !ids.contains(&"write") && !ids.contains(&"apply_patch"),
        "{listed}"
    );
    assert!(
        ids.contains(&"bash") && ids.contains(&"read") && ids.contains(&"todowrite"),
        "{listed}"
    );
}

/// The prompt on a real terminal (a pty from util-linux's `script`): `a` approves the
/// command's prefix for the rest of the session, so the second `echo` is not asked; `r`
/// rejects; `f` and a line of text go back to the model as feedback. Each answer is typed
/// only once its prompt is on the screen, as a person would (keys typed earlier are thrown
/// away).
#[test]
fn the_terminal_prompt_answers_with_single_keys_or_feedback() {
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    let cli = Cli::new();
    let config = cli.wt.parent().unwrap().join("asks.toml");
    std::fs::write(&config, "[permission]\nbash = \"ask\"\n").unwrap();
    let script = cli.wt.parent().unwrap().join("calls.jsonl");
    let on_a_terminal = |calls: &[&str], answers: &[&str]| -> (i32, String) {
        let lines: String = calls
            .iter()
            .map(|c| {
                format!(
                    "{}\n",
                    json!({ "tool": "bash", "args": { "command": c, "description": "d" } })
                )
            })
            .collect();
        std::fs::write(&script, lines).unwrap();
        let inner = format!(
            "{} tool script {} --root {} --config {}",
            env!("CARGO_BIN_EXE_runner"),
            script.display(),
            cli.wt.display(),
            config.display()
        );
        let mut child = Command::new("script")
            .args(["-qec", &inner, "/dev/null"])
            .current_dir(&cli.wt)
            .env("XDG_DATA_HOME", &cli.data)
            .env("XDG_CONFIG_HOME", cli.config_home())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("util-linux script: {e}"));
        let screen = Arc::new(Mutex::new(Vec::<u8>::new()));
        let mut stdout = child.stdout.take().unwrap();
        let sink = screen.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let mut stdin = child.stdin.take().unwrap();
        for (i, answer) in answers.iter().enumerate() {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let shown = String::from_utf8_lossy(&screen.lock().unwrap())
                    .matches("[f]eedback")
                    .count();
                if shown > i {
                    break;
                }
                assert!(Instant::now() < deadline, "prompt {} never appeared", i + 1);
                std::thread::sleep(Duration::from_millis(20));
            }
            stdin.write_all(answer.as_bytes()).unwrap();
            stdin.flush().unwrap();
        }
        let status = child.wait().unwrap();
        drop(stdin);
        reader.join().unwrap();
        let text = String::from_utf8_lossy(&screen.lock().unwrap()).replace('\r', "");
        (status.code().unwrap_or(-1), text)
    };
    let (status, screen) = on_a_terminal(&["echo one", "echo two", "ls"], &["a", "r"]);
    assert_eq!(status, 3, "{screen}");
    assert_eq!(screen.matches("Permission needed").count(), 2, "{screen}");
    assert!(
        screen.contains("would allow from now on: echo *"),
        "{screen}"
    );
    let results: Vec<Value> = screen
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 3, "{screen}");
    assert_eq!(results[0]["output"], "one\n");
    assert_eq!(results[1]["output"], "two\n");
    assert!(
        results[2]["error"].as_str().unwrap().contains("rejected"),
        "{screen}"
    );

    let (status, screen) = on_a_terminal(&["touch made"], &["fuse the build script instead\n"]);
    assert_eq!(status, 3, "{screen}");
    assert!(
        screen.contains("with the following feedback: use the build script instead"),
        "{screen}"
    );
    assert!(!cli.wt.join("made").exists());
}

/// `write` over a file that starts with a UTF-8 byte order mark keeps the mark (as `edit`
/// does, and OpenCode); a file without one gets none.
#[test]
fn write_keeps_a_byte_order_mark() {
    let cli = Cli::new();
    std::fs::write(cli.wt.join("bom.txt"), "\u{feff}old\n").unwrap();
    cli.write("plain.txt", "old\n");
    for (file, expected) in [("bom.txt", "\u{feff}new\n"), ("plain.txt", "new\n")] {
        let (code, v) = cli.call_json(
            "write",
            json!({ "filePath": file, "content": "new\n" }),
            &[],
        );
        assert_eq!(code, 0, "{v}");
        assert_eq!(
            std::fs::read_to_string(cli.wt.join(file)).unwrap(),
            expected,
            "{file}"
        );
    }
    // A mark the model wrote itself is not doubled.
    let (code, v) = cli.call_json(
        "write",
        json!({ "filePath": "bom.txt", "content": "\u{feff}again\n" }),
        &[],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        std::fs::read_to_string(cli.wt.join("bom.txt")).unwrap(),
        "\u{feff}again\n"
    );
}

/// `read` brings the instruction files of the folders above the file (the root's is the
/// system prompt's), outermost first, as a system reminder listed in `metadata.loaded`.
#[test]
fn read_brings_the_folders_instructions() {
    let cli = Cli::new();
    std::fs::create_dir_all(cli.wt.join("sub/deeper")).unwrap();
    cli.write("AGENTS.md", "ROOT RULE\n");
    cli.write("sub/CLAUDE.md", "SUB RULE\n");
    cli.write("sub/deeper/AGENTS.md", "DEEPER RULE\n");
    cli.write("sub/deeper/x.rs", "fn x() {}\n");
    let (code, v) = cli.call_json("read", json!({ "filePath": "sub/deeper/x.rs" }), &[]);
    assert_eq!(code, 0, "{v}");
    let out = v["output"].as_str().unwrap();
    let reminder = &out[out.find("<system-reminder>").expect("a reminder")..];
    assert!(!reminder.contains("ROOT RULE"), "{out}");
    let (sub, deeper) = (
        reminder.find("SUB RULE").expect("sub's"),
        reminder.find("DEEPER RULE").expect("deeper's"),
    );
    assert!(sub < deeper, "outermost first: {out}");
    assert!(reminder.ends_with("</system-reminder>"), "{out}");
    let loaded: Vec<&str> = v["metadata"]["loaded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(loaded.len(), 2, "{v}");
    assert!(loaded[0].ends_with("sub/CLAUDE.md") && loaded[1].ends_with("sub/deeper/AGENTS.md"));

    // A file at the root brings nothing.
    cli.write("top.rs", "fn t() {}\n");
    let (code, v) = cli.call_json("read", json!({ "filePath": "top.rs" }), &[]);
    assert_eq!(code, 0, "{v}");
    assert!(
        !v["output"].as_str().unwrap().contains("<system-reminder>"),
        "{v}"
    );
    // An instruction file read is not brought along as well; the folders above it are.
    let (code, v) = cli.call_json("read", json!({ "filePath": "sub/deeper/AGENTS.md" }), &[]);
    assert_eq!(code, 0, "{v}");
    let out = v["output"].as_str().unwrap();
    assert!(out.contains("Instructions from sub/CLAUDE.md"), "{out}");
    assert!(
        !out.contains("Instructions from sub/deeper/AGENTS.md"),
        "{out}"
    );
}

// ---------------------------------------------------------------------------------------
// First contact: typos, completions, the manual, help texts, the version.

use common::provider::{Response, ScriptedModel, text};

/// A home whose config names a model (`openai/m`); [`run_with_model`] points that provider
/// at a scripted one on loopback, so any run that starts asks it and the test sees it.
fn home_with_a_model() -> Cli {
    let cli = Cli::new();
    // A git work tree, so a direct-workspace run has nothing to object to.
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&cli.wt)
        .status()
        .unwrap();
    assert!(git.success());
    let config = cli.project.config.join("runner");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("config.toml"), "model = \"openai/m\"\n").unwrap();
    cli
}

fn run_with_model(cli: &Cli, model: &ScriptedModel, args: &[&str]) -> Output {
    cli.command()
        .args(args)
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", model.openai_base())
        .env_remove("NO_COLOR")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("runner runs")
}

/// A mistyped subcommand, or a common command runner lacks, is clap's "unrecognized
/// subcommand" with a did-you-mean and exit 2, and no session starts: the provider the
/// config names is never asked. Options before the word do not hide it, and no config
/// is read first. `runner run WORD`, `runner -- WORD` and sentences still run.
#[test]
fn a_typo_is_an_error_and_never_asks_the_model() {
    let model = ScriptedModel::start(vec![
        Response::Stream(text("done")),
        Response::Stream(text("done")),
        Response::Stream(text("done")),
    ]);
    let cli = home_with_a_model();
    let cases: &[(&[&str], &str, &str)] = &[
        (&["doctr"], "doctr", "'sandbox doctor'"),
        (&["sesions"], "sesions", "'sessions'"),
        (&["evl", "run", "x"], "evl", "'eval'"),
        (&["status"], "status", "'changes'"),
        (&["doctor"], "doctor", "'sandbox doctor'"),
        (&["version"], "version", "'--version'"),
        (&["completion"], "completion", "'completions'"),
        (
            &["--sandbox", "landlock", "-m", "openai/m", "proflie"],
            "proflie",
            "'profile'",
        ),
    ];
    for (args, word, suggested) in cases {
        let out = run_with_model(&cli, &model, args);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{args:?}: {err}");
        assert!(
            err.starts_with(&format!("error: unrecognized subcommand '{word}'")),
            "{args:?}: {err}"
        );
        assert!(err.contains("similar subcommand"), "{args:?}: {err}");
        assert!(
            err.contains(suggested),
            "{args:?} should suggest {suggested}: {err}"
        );
        assert!(
            err.contains(&format!("'runner run {word}'")),
            "{args:?} should say how to run it as a task: {err}"
        );
        assert!(err.contains("Usage: runner"), "{args:?}: {err}");
        assert!(stdout(&out).is_empty(), "{args:?}: {}", stdout(&out));
    }
    assert_eq!(model.requests().len(), 0, "a typo reached the model");
    let sessions = cli.data.join("runner/sessions");
    assert!(
        !sessions.exists() || std::fs::read_dir(&sessions).unwrap().next().is_none(),
        "a typo recorded a session in {}",
        sessions.display()
    );

    // Before any config is read: a broken config does not change the answer.
    std::fs::write(cli.project.config.join("runner/config.toml"), "model = [\n").unwrap();
    let out = run_with_model(&cli, &model, &["sesions"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unrecognized subcommand 'sesions'"),
        "{}",
        stderr(&out)
    );
    std::fs::write(
        cli.project.config.join("runner/config.toml"),
        "model = \"openai/m\"\n",
    )
    .unwrap();

    // Control: the ways to give a one-word task reach the model, one request each
    // (`runner run WORD`, `runner -- WORD`), and a sentence is never taken for a typo.
    let runs: &[&[&str]] = &[
        &["run", "--sandbox", "landlock", "doctr"],
        &["--sandbox", "landlock", "--", "status"],
        &["--sandbox", "landlock", "doctor the flaky test"],
    ];
    for (i, args) in runs.iter().enumerate() {
        let out = run_with_model(&cli, &model, args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert_eq!(model.requests().len(), i + 1, "{args:?}: {}", stderr(&out));
    }
    let asked: Vec<String> = model
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(asked[0].contains("doctr"), "{}", asked[0]);
    assert!(asked[1].contains("status"), "{}", asked[1]);
}

/// Every argument of every command, hidden ones aside, says what it is for in `--help`.
#[test]
fn every_argument_has_help_text() {
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") || arg.is_hide_set() {
                continue;
            }
            let has_help = arg
                .get_help()
                .or(arg.get_long_help())
                .is_some_and(|h| !h.to_string().trim().is_empty());
            if !has_help {
                missing.push(format!("{path} {id}"));
            }
        }
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }
    let mut missing = Vec::new();
    let mut cmd = runner::cli::command();
    cmd.build();
    walk(&cmd, "runner", &mut missing);
    assert!(
        missing.is_empty(),
        "arguments without help text: {missing:#?}"
    );
}

/// `--help` ends with examples; `-h` points at them.
#[test]
fn help_ends_with_examples() {
    let cli = Cli::new();
    let out = cli.run(&["--help"]);
    assert_eq!(code(&out), 0);
    let help = stdout(&out);
    let last_section = &help[help.rfind("\n\n").unwrap()..];
    assert!(
        last_section.trim_start().starts_with("Examples:"),
        "Examples is not the last section: {help}"
    );
    assert!(help.contains("runner run status"), "{help}");
    assert!(help.contains("runner completions bash"), "{help}");
    let short = stdout(&cli.run(&["-h"]));
    assert!(short.trim_end().ends_with("for the manual."), "{short}");
}

/// `--version`: the version, a commit (a short hash, or `unknown` outside git) and a date.
#[test]
fn version_names_the_commit_and_the_build_date() {
    let cli = Cli::new();
    let re = regex::Regex::new(
        r"^runner \d+\.\d+\.\d+ \(commit ([0-9a-f]{7,40}|unknown), built \d{4}-\d{2}-\d{2}\)\n$",
    )
    .unwrap();
    for flag in ["--version", "-V"] {
        let out = cli.run(&[flag]);
        assert_eq!(code(&out), 0);
        let line = stdout(&out);
        assert!(re.is_match(&line), "{flag}: {line:?}");
    }
}

/// Completion scripts for bash, zsh and fish (and the other two clap knows); the bash
/// one, sourced into a real bash, registers a function for `runner` that completes the
/// subcommands and a subcommand's flags.
#[test]
fn completions_are_generated_and_bash_completes_with_them() {
    let cli = Cli::new();
    let shapes = [
        ("bash", "complete -F"),
        ("zsh", "#compdef runner"),
        ("fish", "complete -c runner"),
        ("elvish", "edit:completion:arg-completer[runner]"),
        ("powershell", "Register-ArgumentCompleter"),
    ];
    for (shell, shape) in shapes {
        let out = cli.run(&["completions", shell]);
        assert_eq!(code(&out), 0, "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains(shape), "{shell}: {script}");
        for sub in ["sessions", "sandbox", "completions", "man"] {
            assert!(script.contains(sub), "{shell} lacks {sub}");
        }
    }
    let bin = env!("CARGO_BIN_EXE_runner");
    let probe = format!(
        "source <('{bin}' completions bash) || exit 9
         complete -p runner || exit 8
         complete_with() {{
             COMP_WORDS=(\"$@\"); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
             COMP_LINE=\"$*\"; COMP_POINT=${{#COMP_LINE}}; COMPREPLY=()
             fn=$(complete -p runner | sed -E 's/.*-F ([^ ]+) .*/\\1/')
             \"$fn\" runner \"${{COMP_WORDS[$COMP_CWORD]}}\" \"${{COMP_WORDS[$COMP_CWORD-1]}}\"
             echo \"${{COMPREPLY[*]}}\"
         }}
         echo \"top: $(complete_with runner se)\"
         echo \"sandbox: $(complete_with runner sandbox d)\"
         echo \"flags: $(complete_with runner sessions list --j)\""
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &probe])
        .output()
        .unwrap();
    let said = stdout(&out);
    assert!(out.status.success(), "{said}{}", stderr(&out));
    assert!(
        said.contains(" -F _runner runner"),
        "no completion function: {said}"
    );
    let line = |p: &str| {
        said.lines()
            .find_map(|l| l.strip_prefix(p))
            .unwrap_or_else(|| panic!("{said}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(line("top: "), ["sessions"], "{said}");
    assert_eq!(line("sandbox: "), ["doctor"], "{said}");
    assert_eq!(line("flags: "), ["--json"], "{said}");
}

/// `runner man` is one page that man renders, with every visible subcommand (nested ones
/// too), the EXAMPLES, the ENVIRONMENT runner reads and its EXIT STATUS table.
#[test]
fn the_manual_renders_with_every_subcommand_environment_and_exit_status() {
    common::engine::ensure_package("man-db", "/usr/bin/man");
    let cli = Cli::new();
    let page = cli.run(&["man"]);
    assert_eq!(code(&page), 0, "{}", stderr(&page));
    let mut man = Command::new("man")
        .args(["-l", "-"])
        .env("MANWIDTH", "100")
        .env_remove("MAN_KEEP_FORMATTING")
        .env_remove("MANPAGER")
        .env("PAGER", "cat")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    man.stdin.take().unwrap().write_all(&page.stdout).unwrap();
    let shown = man.wait_with_output().unwrap();
    assert!(shown.status.success(), "{}", stderr(&shown));
    // Should man still embolden by overstrike (`X\bX`), the letter before each
    // backspace goes.
    let raw = String::from_utf8_lossy(&shown.stdout);
    let plain = regex::Regex::new(".\x08").unwrap().replace_all(&raw, "");
    for section in [
        "NAME",
        "SYNOPSIS",
        "EXAMPLES",
        "ENVIRONMENT",
        "EXIT STATUS",
        "VERSION",
    ] {
        assert!(
            plain.lines().any(|l| l.trim_end() == section),
            "no {section} section: {plain}"
        );
    }
    for var in [
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "DOCKER_HOST",
        "NO_COLOR",
        "XDG_CONFIG_HOME",
        "HTTPS_PROXY",
    ] {
        assert!(plain.contains(var), "ENVIRONMENT lacks {var}");
    }
    let exit_status = &plain[plain.find("\nEXIT STATUS").unwrap()..];
    for code in [
        "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "130",
    ] {
        assert!(
            exit_status
                .lines()
                .any(|l| l.split_whitespace().next() == Some(code)),
            "EXIT STATUS lacks {code}: {exit_status}"
        );
    }
    let mut cmd = runner::cli::command();
    cmd.build();
    fn names(cmd: &clap::Command, prefix: &str, out: &mut Vec<String>) {
        for sub in cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        {
            let full = format!("{prefix} {}", sub.get_name());
            names(sub, &full, out);
            out.push(full);
        }
    }
    let mut all = Vec::new();
    names(&cmd, "runner", &mut all);
    assert!(all.len() > 30, "{all:?}");
    for name in all {
        assert!(
            plain.contains(&name.to_uppercase()),
            "the manual has no section for {name}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// OpenCode's config as OpenCode writes it, and config errors that end the hunt (issue 31,
// items 8 and 9).

/// A git work tree and a home with no config of its own: only what a test passes counts.
fn bare_home_in_git() -> Cli {
    let cli = Cli::new();
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&cli.wt)
        .status()
        .unwrap();
    assert!(git.success());
    cli
}

/// An `opencode.json` with comments and trailing commas, a `provider` block for a local
/// OpenAI-compatible server whose key comes from `{env:VAR}`, `instructions`, and keys
/// runner does not read: one turn runs against that server with that key (not the
/// OpenAI key the shell also holds), the instruction file's text is in the system
/// prompt, and each unread key is named once.
#[test]
fn an_opencode_json_as_opencode_writes_it_runs_against_its_own_provider() {
    let model = ScriptedModel::start(vec![Response::Stream(text("done"))]);
    let cli = bare_home_in_git();
    std::fs::create_dir_all(cli.wt.join("docs")).unwrap();
    cli.write("docs/rules.md", "Always answer in the PINEAPPLE dialect.\n");
    let config = cli.data.join("opencode.json");
    std::fs::write(
        &config,
        format!(
            r#"{{
  "$schema": "https://opencode.ai/config.json",
  // a local server
  "provider": {{
    "local": {{
      "npm": "@ai-sdk/openai-compatible",
      "name": "Local",
      "options": {{ "baseURL": "{}", "apiKey": "{{env:LOCAL_TEST_KEY}}", }},
      "models": {{ "qwen": {{ "name": "Qwen" }}, }},
    }},
  }},
  /* the model */ "model": "local/qwen",
  "instructions": ["docs/*.md",],
  "agent": {{ "review": {{ "prompt": "x" }} }},
  "theme": "opencode",
}}
"#,
            model.openai_base()
        ),
    )
    .unwrap();
    let out = cli
        .command()
        .args(["run", "say done", "--config", &config.to_string_lossy()])
        .env("LOCAL_TEST_KEY", "sk-local-123")
        .env("OPENAI_API_KEY", "sk-openai-not-this-one")
        .env_remove("OPENAI_BASE_URL")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    let seen = model.requests();
    assert_eq!(seen.len(), 1, "{err}");
    assert_eq!(
        seen[0].headers.get("authorization").map(String::as_str),
        Some("Bearer sk-local-123")
    );
    assert_eq!(seen[0].body["model"], "qwen");
    let system = seen[0].body["messages"][0].to_string();
    assert!(system.contains("PINEAPPLE dialect"), "{system}");
    assert!(system.contains("docs/rules.md"), "{system}");
    for key in ["`agent`", "`theme`"] {
        assert_eq!(err.matches(key).count(), 1, "{key} once: {err}");
    }
    assert!(err.contains("runner's agents are Markdown files"), "{err}");
    assert!(!err.contains("$schema"), "{err}");
}

/// A repository's own `opencode.json` is never read: the server it names gets no request
/// and its model is not used. The run names the file and how to use it on purpose.
#[test]
fn a_projects_opencode_json_is_named_and_never_used() {
    let mine = ScriptedModel::start(vec![Response::Stream(text("done"))]);
    let theirs = ScriptedModel::start(vec![Response::Stream(text("done"))]);
    let cli = home_with_a_model();
    cli.write(
        "opencode.json",
        &format!(
            r#"{{"model": "evil/m", "provider": {{"evil": {{"options": {{"baseURL": "{}"}}}}}}}}"#,
            theirs.openai_base()
        ),
    );
    let out = run_with_model(&cli, &mine, &["run", "say done"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert_eq!(mine.requests().len(), 1, "{err}");
    assert!(theirs.requests().is_empty(), "{err}");
    assert!(err.contains("opencode.json is not read"), "{err}");
    assert!(err.contains("--config opencode.json"), "{err}");
}

/// Every unknown key is listed, top level and nested, each with its line and the key it
/// is closest to; a wrong type names file:line. Nothing reaches a model.
#[test]
fn every_unknown_config_key_is_listed_and_a_wrong_type_has_its_line() {
    let model = ScriptedModel::start(Vec::new());
    let cli = bare_home_in_git();
    let config = cli.data.join("c.toml");
    let path = config.to_string_lossy().into_owned();
    let run = |text: &str| {
        std::fs::write(&config, text).unwrap();
        let out = run_with_model(&cli, &model, &["run", "x", "--config", &path]);
        (code(&out), stderr(&out))
    };
    let (status, err) = run("modle = \"openai/m\"\n\n[provder.local]\nbase_url = \"x\"\n");
    assert_eq!(status, 2, "{err}");
    assert!(err.contains(&path), "{err}");
    assert!(
        err.contains("line 1: unknown key \"modle\" (did you mean `model`?)"),
        "{err}"
    );
    assert!(
        err.contains("line 3: unknown key \"provder\" (did you mean `provider`?)"),
        "{err}"
    );
    let (status, err) =
        run("model = \"openai/m\"\n[provider.openai]\nbase_ur = \"x\"\napi_key_evn = \"K\"\n");
    assert_eq!(status, 2, "{err}");
    assert!(
        err.contains("line 3: unknown key `provider.openai.base_ur` (did you mean `base_url`?)"),
        "{err}"
    );
    assert!(
        err.contains(
            "line 4: unknown key `provider.openai.api_key_evn` (did you mean `api_key_env`?)"
        ),
        "{err}"
    );
    let (status, err) = run("model = \"openai/m\"\n\n[retry]\nattempts = \"three\"\n");
    assert_eq!(status, 2, "{err}");
    assert!(err.contains(&format!("{path}:4: ")), "{err}");
    assert!(model.requests().is_empty());
}

/// `tool list` offers what a session would: with a `[websearch]` service and an
/// `[lsp.NAME]` server in the config, `websearch`, `codesearch` and `lsp` are listed (text
/// and `--json`); without them they are not. The built-in language servers are turned off
/// in both configs so the answer does not hang on what this host has installed.
#[test]
fn tool_list_includes_the_agent_level_tools_the_config_sets_up() {
    let cli = Cli::new();
    let mut base = String::new();
    for name in [
        "pylsp",
        "pyright",
        "rust-analyzer",
        "gopls",
        "typescript",
        "clangd",
    ] {
        base.push_str(&format!("[lsp.{name}]\ndisabled = true\n\n"));
    }
    let with = format!(
        "{base}[websearch]\nprovider = \"exa\"\n\n[lsp.mine]\ncommand = [\"mine-ls\"]\nextensions = [\".mine\"]\n"
    );
    let listed = |config: &str| {
        let path = cli.data.join("list.toml");
        std::fs::write(&path, config).unwrap();
        let path = path.to_string_lossy().into_owned();
        let json = cli.run(&["tool", "list", "--json", "--config", &path]);
        assert_eq!(code(&json), 0, "{}", stderr(&json));
        let tools: Vec<Value> = serde_json::from_str(&stdout(&json)).unwrap();
        let ids: Vec<String> = tools
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect();
        let plain = cli.run(&["tool", "list", "--config", &path]);
        assert_eq!(code(&plain), 0, "{}", stderr(&plain));
        let names: Vec<String> = stdout(&plain)
            .lines()
            .map(|l| l.split_whitespace().next().unwrap_or_default().to_string())
            .collect();
        assert_eq!(names, ids);
        ids
    };
    let on = listed(&with);
    for id in ["websearch", "codesearch", "lsp", "bash", "read"] {
        assert!(on.iter().any(|t| t == id), "{id} missing from {on:?}");
    }
    let off = listed(&base);
    for id in ["websearch", "codesearch", "lsp"] {
        assert!(!off.iter().any(|t| t == id), "{id} listed in {off:?}");
    }
    assert!(off.iter().any(|t| t == "bash"), "{off:?}");
}

/// `sandbox doctor --json` is one JSON object: every check named, with whether it passed,
/// and `ok` and the exit status agreeing with them; the text report's checks are the same
/// ones, in the same order.
#[test]
fn sandbox_doctor_json_names_each_check_and_whether_it_passed() {
    common::engine::docker();
    let cli = Cli::new();
    let out = cli.run(&["sandbox", "doctor", "--json"]);
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("one JSON document");
    let checks = doc["checks"].as_array().unwrap();
    let names: Vec<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for name in ["landlock", "seccomp", "engine", "temp disk"] {
        assert!(names.contains(&name), "{name} not in {names:?}");
    }
    let failed = checks
        .iter()
        .filter(|c| !c["passed"].as_bool().unwrap())
        .count();
    assert_eq!(doc["failures"], failed);
    assert_eq!(doc["ok"], failed == 0);
    assert_eq!(code(&out), if failed == 0 { 0 } else { 1 });
    let text = stdout(&cli.run(&["sandbox", "doctor"]));
    let text_names: Vec<&str> = text
        .lines()
        .filter(|l| ["ok ", "warn ", "FAIL "].iter().any(|p| l.starts_with(p)))
        .map(|l| l[6..].split(':').next().unwrap())
        .collect();
    assert_eq!(text_names, names);
}

/// `profile list --json`: every built-in profile with its source and backend, the backend
/// being what `profile show` says (null for a profile that takes the wall chosen here, which
/// `backend_here` names).
#[test]
fn profile_list_json_gives_each_profile_and_its_backend() {
    let cli = Cli::new();
    let out = cli.run(&["profile", "list", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let list: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    let names: Vec<&str> = list.iter().map(|p| p["name"].as_str().unwrap()).collect();
    for name in ["default", "readonly", "untrusted", "laptop", "eval"] {
        assert!(names.contains(&name), "{name} not in {names:?}");
    }
    for p in &list {
        let name = p["name"].as_str().unwrap();
        assert_eq!(p["source"], "built-in", "{p}");
        let shown = cli.run(&["profile", "show", name, "--json"]);
        let shown: Value = serde_json::from_str(&stdout(&shown)).unwrap();
        assert_eq!(p["backend"], shown["sandbox"]["backend"], "{name}");
    }
    let eval = list.iter().find(|p| p["name"] == "eval").unwrap();
    assert_eq!(eval["backend"], "docker");
    let default = list.iter().find(|p| p["name"] == "default").unwrap();
    assert!(default["backend"].is_null());
}

/// `image build --json` on an image the engine has (`--if-missing`, so nothing is rebuilt):
/// one object with the tag and the id the engine gives that tag.
#[test]
fn image_build_json_gives_the_tag_and_the_engines_id() {
    common::engine::docker();
    let cli = Cli::new();
    let mut cmd = cli.command();
    common::engine::cli(&mut cmd);
    let out = cmd
        .args(["image", "build", "--if-missing", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("one JSON document");
    assert_eq!(doc["tag"], "runner-sandbox:bookworm");
    assert_eq!(doc["built"], false);
    let inspected = Command::new("docker")
        .args([
            "image",
            "inspect",
            "--format",
            "{{.Id}}",
            "runner-sandbox:bookworm",
        ])
        .output()
        .unwrap();
    let id = String::from_utf8_lossy(&inspected.stdout)
        .trim()
        .to_string();
    assert!(id.starts_with("sha256:"), "{id}");
    assert_eq!(doc["id"], id.as_str());
}

/// One table of exit codes, reached through the real binary: 0 done, 1 failed, 2 usage or
/// config (the same 2 for no model in `run` and in `eval run`, an unknown workspace in
/// `apply` and in `discard`, a misnamed provider and a missing key), 3 denied, 4 the
/// provider failed once asked, 6 the sandbox could not start. No case of 2 asks the model.
#[test]
fn each_kind_of_failure_has_its_exit_code_in_every_command() {
    common::engine::docker();
    let model = ScriptedModel::start(vec![
        Response::Stream(text("done")),
        Response::Status(401, Vec::new(), r#"{"error":{"message":"bad key"}}"#.into()),
    ]);
    let cli = home_with_a_model();
    let status = |out: Output| (code(&out), stderr(&out));
    let (c, err) = status(run_with_model(&cli, &model, &["run", "say done"]));
    assert_eq!(c, 0, "{err}");
    let (c, err) = status(run_with_model(&cli, &model, &["run", "say it again"]));
    assert_eq!(c, 4, "a provider refusing the key once asked: {err}");
    assert_eq!(model.requests().len(), 2);

    let (c, err) = status(cli.call("read", json!({ "filePath": "missing.txt" }), &[]));
    assert_eq!(c, 1, "{err}");
    let asks = cli.data.join("asks.toml");
    std::fs::write(&asks, "[permission]\nedit = \"ask\"\n").unwrap();
    let asks = asks.to_string_lossy().into_owned();
    let (c, err) = status(cli.call(
        "write",
        json!({ "filePath": "new.txt", "content": "x" }),
        &["--ask", "deny", "--config", &asks],
    ));
    assert_eq!(c, 3, "{err}");

    let bare = bare_home_in_git();
    let tasks = bare.data.join("tasks.jsonl");
    std::fs::write(&tasks, "{}\n").unwrap();
    let tasks = tasks.to_string_lossy().into_owned();
    let out_dir = bare.data.join("out").to_string_lossy().into_owned();
    let usage: &[(&Cli, &[&str], &str)] = &[
        (&cli, &["run", "--no-such-flag", "x"], "--no-such-flag"),
        (&bare, &["run", "x"], "no model"),
        (
            &bare,
            &["eval", "run", &tasks, "--out", &out_dir],
            "no model",
        ),
        (&cli, &["apply", "nosuch"], "no workspace nosuch"),
        (&cli, &["discard", "nosuch"], "no workspace nosuch"),
        (
            &cli,
            &["run", "--model", "nosuch/m", "x"],
            "unknown provider",
        ),
    ];
    for (who, args, says) in usage {
        let (c, err) = status(run_with_model(who, &model, args));
        assert_eq!(c, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let (c, err) = status(
        bare.command()
            .args(["run", "--model", "openai/m", "x"])
            .env_remove("OPENAI_API_KEY")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap(),
    );
    assert_eq!(c, 2, "no key: {err}");
    assert!(err.contains("OPENAI_API_KEY"), "{err}");

    let (c, err) = status(run_with_model(
        &cli,
        &model,
        &[
            "run",
            "--sandbox",
            "docker",
            "--image",
            "runner-no-such-image:0",
            "x",
        ],
    ));
    assert_eq!(c, 6, "{err}");
    assert_eq!(
        model.requests().len(),
        2,
        "no failure at start-up asks the model"
    );
}

/// Under `--json`, a run that cannot start prints one JSON error event on stdout, its code
/// the exit status: no key (2), no model (2), an image the engine lacks (6).
#[test]
fn a_json_run_that_cannot_start_prints_one_error_event() {
    common::engine::docker();
    let cli = bare_home_in_git();
    let cases: &[(&[&str], u8, &str)] = &[
        (&["--model", "openai/m"], 2, "OPENAI_API_KEY"),
        (&[], 2, "no model"),
        (
            &[
                "--model",
                "openai/m",
                "--sandbox",
                "docker",
                "--image",
                "runner-no-such-image:0",
            ],
            6,
            "runner-no-such-image:0",
        ),
    ];
    for (extra, want, says) in cases {
        let mut args = vec!["run", "--json"];
        args.extend_from_slice(extra);
        args.push("x");
        let mut cmd = cli.command();
        cmd.args(&args).stdin(std::process::Stdio::null());
        if *want == 2 {
            cmd.env_remove("OPENAI_API_KEY");
        } else {
            cmd.env("OPENAI_API_KEY", "sk-test");
        }
        let out = cmd.output().unwrap();
        assert_eq!(code(&out), i32::from(*want), "{args:?}: {}", stderr(&out));
        let text = stdout(&out);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {text}");
        let event: Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(event["type"], "error", "{event}");
        assert_eq!(event["code"], *want, "{event}");
        let message = event["message"].as_str().unwrap();
        assert!(message.contains(says), "{args:?}: {message}");
    }
}

/// A direct-workspace run in a folder outside any git work tree stops before the model is
/// asked (exit 2, the file it would have written absent), saying why and naming the three
/// ways on. Controls: `--no-git-check`, `--workspace copy` and the same folder after
/// `git init` each run the turn, and a folder below a repository's top counts as inside.
#[test]
fn a_direct_run_outside_git_stops_before_the_model_and_names_the_ways_on() {
    use common::provider::call;
    let writes = || {
        ScriptedModel::start(vec![
            Response::Stream(call(
                "write",
                json!({ "filePath": "made.txt", "content": "edited\n" }),
            )),
            Response::Stream(text("done")),
        ])
    };
    let cli = Cli::new();
    let config = cli.project.config.join("runner");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("config.toml"), "model = \"openai/m\"\n").unwrap();
    fn with<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        let base = ["run", "--sandbox", "landlock", "--ask", "allow"];
        [&base[..], extra, &["make the file"]].concat()
    }

    let model = writes();
    for json in [false, true] {
        let mut args = with(&[]);
        if json {
            args.insert(1, "--json");
        }
        let out = run_with_model(&cli, &model, &args);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{err}");
        assert!(err.contains("is not inside a git work tree"), "{err}");
        for way in ["--workspace copy", "git init", "--no-git-check"] {
            assert!(err.contains(way), "names {way}: {err}");
        }
        if json {
            let event: Value = serde_json::from_slice(&out.stdout).expect("one JSON event");
            assert_eq!(
                (event["type"].as_str(), event["code"].as_u64()),
                (Some("error"), Some(2))
            );
        }
    }
    assert_eq!(model.requests().len(), 0, "the model is never asked");
    assert!(!cli.wt.join("made.txt").exists());

    // The ways on, each of which runs the turn.
    let model = writes();
    let out = run_with_model(&cli, &model, &with(&["--no-git-check"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(cli.wt.join("made.txt")).unwrap(),
        "edited\n"
    );
    std::fs::remove_file(cli.wt.join("made.txt")).unwrap();

    let model = writes();
    let out = run_with_model(&cli, &model, &with(&["--workspace", "copy"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        !cli.wt.join("made.txt").exists(),
        "a copy leaves the folder alone"
    );
    assert_eq!(model.requests().len(), 2);

    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&cli.wt)
        .status();
    assert!(git.unwrap().success());
    std::fs::create_dir_all(cli.wt.join("sub")).unwrap();
    let model = writes();
    let root = cli.wt.join("sub").to_string_lossy().into_owned();
    let out = run_with_model(&cli, &model, &with(&["--root", &root]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(cli.wt.join("sub/made.txt").exists());
}
