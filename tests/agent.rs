//! The agent end to end: the real `runner` binary against a scripted model behind a real
//! HTTP server speaking each provider's streaming format, with tools running in the real
//! sandboxes. Each test checks what a broken loop would get wrong: the files afterwards,
//! the session file, the events, the exit status, and what the model was sent.

use common::project::Project;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::provider::{Answer, Response, ScriptedModel, call, calls, text};
use serde_json::{Value, json};

const KEY: &str = "sk-test-4f9a1c-never-in-the-sandbox";

/// A worktree with a failing test, and the user's folders of its own.
struct Harness {
    project: Project,
    wt: PathBuf,
    data: PathBuf,
    config: PathBuf,
}

impl Harness {
    /// A worktree with a failing test: add.sh subtracts.
    fn new() -> Harness {
        let project = Project::new("wt");
        let wt = project.root.clone();
        // A checkout, as users run runner in: a direct run outside git stops first.
        common::git(&wt, &["init", "-q"]);
        std::fs::write(wt.join("add.sh"), "echo $(($1 - $2))\n").unwrap();
        std::fs::write(
            wt.join("test.sh"),
            "if [ \"$(sh add.sh 2 3)\" = 5 ]; then echo PASS; else echo FAIL; exit 1; fi\n",
        )
        .unwrap();
        Harness {
            wt,
            data: project.data.clone(),
            config: project.config.clone(),
            project,
        }
    }

    fn command(&self, model: &ScriptedModel) -> Command {
        let mut c = self.project.command();
        c.env("OPENAI_API_KEY", KEY)
            .env("OPENAI_BASE_URL", model.openai_base())
            .env("ANTHROPIC_API_KEY", KEY)
            .env("ANTHROPIC_BASE_URL", model.anthropic_base())
            .env("NO_COLOR", "1");
        c
    }

    fn run(&self, model: &ScriptedModel, args: &[&str]) -> Output {
        self.command(model).args(args).output().unwrap()
    }

    fn config_file(&self, text: &str) -> String {
        let p = self.config.join("test.toml");
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    fn sessions(&self) -> Vec<PathBuf> {
        let dir = self.data.join("runner/sessions");
        let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    fn session_records(&self) -> Vec<Value> {
        let s = self.sessions();
        assert_eq!(s.len(), 1, "one session file: {s:?}");
        std::fs::read_to_string(&s[0])
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.wt.join(rel)).unwrap()
    }
}

fn events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

fn end_of(events: &[Value]) -> &Value {
    events
        .iter()
        .rev()
        .find(|e| e["type"] == "session_end")
        .expect("a session_end event")
}

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The tool results the model was sent in request `n` (OpenAI format).
fn tool_results(model: &ScriptedModel, n: usize) -> Vec<String> {
    let reqs = model.requests();
    reqs[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The script of a model fixing the failing test: read, edit, run the test, answer.
fn fixing_script() -> Vec<Response> {
    vec![
        Response::Stream(Answer {
            text: "Let me look at the code and the test.".into(),
            calls: vec![
                ("read".into(), json!({"filePath": "add.sh"}).to_string()),
                ("read".into(), json!({"filePath": "test.sh"}).to_string()),
            ],
            ..Default::default()
        }),
        Response::Stream(call(
            "edit",
            json!({"filePath": "add.sh", "oldString": "$1 - $2", "newString": "$1 + $2"}),
        )),
        Response::Stream(call(
            "bash",
            json!({"command": "sh test.sh", "description": "Run the test"}),
        )),
        Response::Stream(text(
            "Fixed: add.sh subtracted instead of adding; the test passes now.",
        )),
    ]
}

fn fixes_the_test(backend: &str, anthropic: bool) {
    let h = Harness::new();
    let model = ScriptedModel::start(fixing_script());
    let spec = if anthropic {
        "anthropic/claude-test"
    } else {
        "openai/gpt-test"
    };
    let out = h.run(
        &model,
        &[
            "--sandbox",
            backend,
            "--model",
            spec,
            "--json",
            "fix the failing test",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(h.read("add.sh"), "echo $(($1 + $2))\n");
    let ev = events(&out);
    let end = end_of(&ev);
    assert_eq!(end["reason"], "finished");
    assert_eq!(end["steps"], 4);
    assert_eq!(end["files_changed"], json!(["add.sh"]));
    let ends = of_type(&ev, "tool_end");
    assert_eq!(ends.len(), 4, "{ends:?}");
    assert!(ends.iter().all(|e| e["outcome"] == "ok"), "{ends:?}");
    // Text streamed in pieces and adds up to the model's words.
    let streamed: String = of_type(&ev, "text")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(streamed.contains("Fixed: add.sh subtracted"), "{streamed}");
    // The model was sent the test's output, from inside the sandbox.
    let reqs = model.requests();
    assert_eq!(reqs.len(), 4);
    let last = reqs[3].body.to_string();
    assert!(
        last.contains("PASS"),
        "the bash result reached the model: {last}"
    );
    if anthropic {
        assert_eq!(reqs[0].path, "/v1/messages");
        assert_eq!(reqs[0].headers["x-api-key"], KEY);
        assert_eq!(reqs[0].headers["anthropic-version"], "2023-06-01");
        assert_eq!(
            reqs[1].body["system"][0]["cache_control"]["type"],
            "ephemeral"
        );
        // Two reads answered in one user turn, each a tool_result.
        let results = &reqs[1].body["messages"][2]["content"];
        assert_eq!(results.as_array().unwrap().len(), 2, "{results}");
        assert_eq!(results[0]["type"], "tool_result");
        // Usage counts cache reads separately.
        let usage = &end["usage"];
        assert!(usage["cache_read"].as_u64().unwrap() > 0, "{usage}");
    } else {
        assert_eq!(reqs[0].path, "/v1/chat/completions");
        assert_eq!(reqs[0].headers["authorization"], format!("Bearer {KEY}"));
        assert_eq!(reqs[0].body["stream_options"]["include_usage"], true);
        assert_eq!(tool_results(&model, 1).len(), 2);
        assert!(tool_results(&model, 1)[0].contains("echo $(($1 - $2))"));
        assert_eq!(end["usage"]["cache_read"], 800);
    }
    // The session file holds the whole run.
    let records = h.session_records();
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.iter().filter(|k| **k == "turn").count(), 4);
    assert_eq!(kinds.iter().filter(|k| **k == "tool").count(), 4);
    assert_eq!(kinds.last(), Some(&"end"));
    let file = std::fs::read_to_string(&h.sessions()[0]).unwrap();
    assert!(!file.contains(KEY), "the key never enters the session file");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(KEY));
}

#[test]
fn openai_fixes_the_test_without_a_sandbox() {
    fixes_the_test("none", false);
}

#[test]
fn anthropic_fixes_the_test_without_a_sandbox() {
    fixes_the_test("none", true);
}

#[test]
fn openai_fixes_the_test_behind_landlock() {
    fixes_the_test("landlock", false);
}

#[test]
fn anthropic_fixes_the_test_in_docker() {
    common::engine::docker();
    fixes_the_test("docker", true);
}

#[test]
fn openai_fixes_the_test_in_docker() {
    common::engine::docker();
    fixes_the_test("docker", false);
}

/// The key is in runner's environment; no command in any backend sees it, and nothing the
/// model is sent holds it.
fn key_stays_on_the_host(backend: &str) {
    let h = Harness::new();
    let model = ScriptedModel::start(vec![
        Response::Stream(call(
            "bash",
            json!({"command": "env; cat /proc/self/environ | tr '\\0' '\\n'; echo done-$$", "description": "Show the environment"}),
        )),
        Response::Stream(text("done")),
    ]);
    // Reading /proc asks external_directory; allow it so the command runs in full.
    let out = h.run(
        &model,
        &[
            "--sandbox",
            backend,
            "--model",
            "openai/gpt-test",
            "--ask",
            "allow",
            "--json",
            "show env",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let result = tool_results(&model, 1).join("\n");
    assert!(result.contains("done-"), "the command ran: {result}");
    assert!(
        !result.contains(KEY),
        "the key leaked into the sandbox: {result}"
    );
    assert!(!result.contains("OPENAI_API_KEY"), "{result}");
    let file = std::fs::read_to_string(&h.sessions()[0]).unwrap();
    assert!(!file.contains(KEY));
}

#[test]
fn key_is_invisible_without_a_sandbox() {
    key_stays_on_the_host("none");
}

#[test]
fn key_is_invisible_behind_landlock() {
    key_stays_on_the_host("landlock");
}

#[test]
fn key_is_invisible_in_docker() {
    common::engine::docker();
    key_stays_on_the_host("docker");
}

#[test]
fn a_429_is_retried_after_the_time_it_asks_for() {
    let h = Harness::new();
    let model = ScriptedModel::start(vec![
        Response::Status(
            429,
            vec![("retry-after".into(), "1".into())],
            r#"{"error":{"message":"Rate limit reached","type":"rate_limit"}}"#.into(),
        ),
        Response::Stream(text("hello")),
    ]);
    let started = Instant::now();
    let out = h.run(&model, &["--model", "openai/gpt-test", "--json", "hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After was honoured"
    );
    let ev = events(&out);
    let retries = of_type(&ev, "retry");
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0]["delay_ms"], 1000);
    assert!(
        retries[0]["error"]
            .as_str()
            .unwrap()
            .contains("Rate limit reached")
    );
    assert_eq!(model.requests().len(), 2);
}

#[test]
fn a_500_storm_gives_up_with_a_clear_message() {
    let h = Harness::new();
    let storm: Vec<Response> = (0..4)
        .map(|_| {
            Response::Status(
                500,
                vec![],
                r#"{"error":{"message":"upstream exploded"}}"#.into(),
            )
        })
        .collect();
    let model = ScriptedModel::start(storm);
    let cfg = h.config_file("[retry]\nattempts = 3\nbase_ms = 10\n");
    let out = h.run(
        &model,
        &[
            "--model",
            "openai/gpt-test",
            "--config",
            &cfg,
            "--json",
            "hi",
        ],
    );
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    assert_eq!(model.requests().len(), 4, "one try and three retries");
    let ev = events(&out);
    assert_eq!(of_type(&ev, "retry").len(), 3);
    let end = end_of(&ev);
    assert_eq!(end["reason"], "provider_error");
    let msg = end["message"].as_str().unwrap();
    assert!(
        msg.contains("500")
            && msg.contains("upstream exploded")
            && msg.contains("gave up after 3 retries"),
        "{msg}"
    );
}

#[test]
fn a_401_stops_at_once_with_the_providers_words() {
    let h = Harness::new();
    let model = ScriptedModel::start(vec![Response::Status(
        401,
        vec![],
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#
            .into(),
    )]);
    let out = h.run(&model, &["--model", "anthropic/claude-test", "hi"]);
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    assert_eq!(model.requests().len(), 1, "no retry of a bad key");
    let err =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid x-api-key") && err.contains("check the API key"),
        "{err}"
    );
}

#[test]
fn a_stream_cut_mid_tool_call_is_retried_as_a_whole_turn() {
    for anthropic in [false, true] {
        let h = Harness::new();
        let args = json!({"filePath": "add.sh"});
        let model = ScriptedModel::start(vec![
            Response::Cut(call("read", args.clone()), 4),
            Response::Stream(call("read", args)),
            Response::Stream(text("read it")),
        ]);
        let spec = if anthropic { "anthropic/c" } else { "openai/g" };
        let out = h.run(&model, &["--model", spec, "--json", "read add.sh"]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let ev = events(&out);
        assert_eq!(of_type(&ev, "retry").len(), 1, "{ev:?}");
        assert_eq!(of_type(&ev, "tool_end").len(), 1, "the cut call never ran");
        assert_eq!(end_of(&ev)["steps"], 2);
    }
}

#[test]
fn malformed_arguments_and_unknown_tools_go_back_to_the_model() {
    let h = Harness::new();
    let model = ScriptedModel::start(vec![
        Response::Stream(Answer {
            calls: vec![
                ("read".into(), "{\"filePath\": \"add.sh\"".into()),
                ("teleport".into(), "{}".into()),
                ("read".into(), json!({"path": "add.sh"}).to_string()),
            ],
            ..Default::default()
        }),
        Response::Stream(call("read", json!({"filePath": "add.sh"}))),
        Response::Stream(text("recovered")),
    ]);
    let out = h.run(&model, &["--model", "openai/g", "--json", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let results = tool_results(&model, 1);
    assert_eq!(results.len(), 3);
    assert!(results[0].contains("not valid JSON"), "{}", results[0]);
    assert!(
        results[1].contains("Unknown tool 'teleport'") && results[1].contains("read"),
        "{}",
        results[1]
    );
    assert!(results[2].contains("invalid arguments"), "{}", results[2]);
    let last = tool_results(&model, 2);
    assert!(
        last[3].contains("echo $(($1 - $2))"),
        "the model recovered: {last:?}"
    );
}

#[test]
fn the_step_limit_stops_the_run() {
    let h = Harness::new();
    let script = (0..5)
        .map(|n| {
            Response::Stream(call(
                "bash",
                json!({"command": format!("true {n}"), "description": "d"}),
            ))
        })
        .collect();
    let model = ScriptedModel::start(script);
    let out = h.run(
        &model,
        &["--model", "openai/g", "--max-steps", "3", "--json", "loop"],
    );
    assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
    assert_eq!(end_of(&events(&out))["reason"], "max_steps");
    assert_eq!(model.requests().len(), 3);
}

#[test]
fn a_rule_denial_lets_the_model_go_on_but_a_refused_ask_stops_the_run() {
    let h = Harness::new();
    let cfg = h.config_file("[permission.bash]\n\"rm *\" = \"deny\"\n\"curl *\" = \"ask\"\n");
    let model = ScriptedModel::start(vec![
        Response::Stream(call(
            "bash",
            json!({"command": "rm add.sh", "description": "d"}),
        )),
        Response::Stream(call(
            "bash",
            json!({"command": "curl example.com", "description": "d"}),
        )),
        Response::Stream(text("never reached")),
    ]);
    let out = h.run(
        &model,
        &["--model", "openai/g", "--config", &cfg, "--json", "go"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(h.wt.join("add.sh").exists());
    assert!(tool_results(&model, 1)[0].contains("\"rm *\" = deny"));
    let ev = events(&out);
    let decisions: Vec<&str> = of_type(&ev, "permission")
        .iter()
        .map(|e| e["decision"].as_str().unwrap())
        .collect();
    assert_eq!(decisions, vec!["deny", "refused"]);
    assert_eq!(end_of(&ev)["reason"], "refused");
    assert_eq!(model.requests().len(), 2);

    // With --continue-on-deny the model reads the refusal and goes on.
    let model = ScriptedModel::start(vec![
        Response::Stream(call(
            "bash",
            json!({"command": "curl example.com", "description": "d"}),
        )),
        Response::Stream(text("ok, no network")),
    ]);
    let out = h.run(
        &model,
        &[
            "--model",
            "openai/g",
            "--config",
            &cfg,
            "--continue-on-deny",
            "--json",
            "go",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(tool_results(&model, 1)[0].contains("needs permission"));
}

#[test]
fn ctrl_c_during_a_long_command_kills_it_and_keeps_the_session() {
    common::engine::docker();
    for backend in ["none", "landlock", "docker"] {
        let h = Harness::new();
        let marker = format!("sleep-marker-{}-{backend}", std::process::id());
        let model = ScriptedModel::start(vec![
            Response::Stream(call(
                "bash",
                json!({"command": format!("sh -c 'echo started; exec sleep 300' {marker}"), "description": "wait"}),
            )),
            Response::Stream(text("never")),
        ]);
        let mut child = h
            .command(&model)
            .args([
                "--sandbox",
                backend,
                "--model",
                "openai/g",
                "--json",
                "wait",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
        let mut seen = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            let started = line.contains("\"tool_start\"");
            seen.push(line);
            if started {
                break;
            }
        }
        // Give the command time to start inside the sandbox.
        std::thread::sleep(Duration::from_millis(800));
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let status = child.wait().unwrap();
        seen.extend(lines.map_while(Result::ok));
        assert_eq!(status.code(), Some(130), "{backend}: {seen:?}");
        let ev: Vec<Value> = seen
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(end_of(&ev)["reason"], "interrupted");
        let tool_end = of_type(&ev, "tool_end");
        assert_eq!(tool_end.len(), 1);
        let left = Command::new("pgrep")
            .args(["-f", &marker])
            .output()
            .unwrap();
        assert!(
            left.stdout.is_empty(),
            "{backend}: the command was left running: {}",
            String::from_utf8_lossy(&left.stdout)
        );
        let records = h.session_records();
        assert_eq!(records.last().unwrap()["type"], "end");
        assert_eq!(records.last().unwrap()["reason"], "interrupted");
        assert!(records.iter().any(|r| r["type"] == "turn"));
    }
}

/// Strips what differs between two runs of the same session (ids, timings, paths), and
/// joins consecutive text deltas: a replay streams each recorded text in one piece.
fn normalise(events: &[Value], wt: &Path) -> Vec<Value> {
    let mut joined: Vec<Value> = Vec::new();
    for e in events {
        if let (Some(last), true) = (joined.last_mut(), e["type"] == "text")
            && last["type"] == "text"
        {
            let text = format!(
                "{}{}",
                last["delta"].as_str().unwrap(),
                e["delta"].as_str().unwrap()
            );
            last["delta"] = json!(text);
            continue;
        }
        joined.push(e.clone());
    }
    // Calls of one step run at once: one call may end before the next starts, or after, and
    // their ends arrive in any order. What holds is each call's start before its end; once
    // that is checked, a run of starts and ends is put in one order: the starts, then the
    // ends, each by call.
    let is_call = |e: &Value| e["type"] == "tool_start" || e["type"] == "tool_end";
    let mut i = 0;
    while i < joined.len() {
        let mut j = i;
        while j < joined.len() && is_call(&joined[j]) {
            j += 1;
        }
        for (k, end) in joined[i..j].iter().enumerate() {
            if end["type"] == "tool_end" {
                assert!(
                    joined[i..i + k]
                        .iter()
                        .any(|s| s["type"] == "tool_start" && s["id"] == end["id"]),
                    "call {} ended before it started: {events:?}",
                    end["id"]
                );
            }
        }
        joined[i..j].sort_by_key(|e| (e["type"] == "tool_end", e["id"].as_str().map(String::from)));
        i = j.max(i + 1);
    }
    joined
        .iter()
        .map(|e| {
            let mut e = e.clone();
            let o = e.as_object_mut().unwrap();
            for k in ["session", "duration_ms", "delay_ms"] {
                o.remove(k);
            }
            if let Some(Value::String(r)) = o.get_mut("root") {
                *r = r.replace(&wt.display().to_string(), "WT");
            }
            if o.get("type") == Some(&json!("session_start")) {
                o.remove("model");
            }
            e
        })
        .collect()
}

#[test]
fn a_recorded_session_replays_to_the_same_files_and_events() {
    let h = Harness::new();
    let model = ScriptedModel::start(fixing_script());
    let out = h.run(
        &model,
        &["--model", "openai/g", "--json", "fix the failing test"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let first = events(&out);
    let id = first[0]["session"].as_str().unwrap().to_string();
    let export = h.run(&model, &["sessions", "export", &id]);
    assert_eq!(export.status.code(), Some(0), "{}", describe(&export));
    let replay_file = h.config.join("fix.replay.jsonl");
    std::fs::write(&replay_file, &export.stdout).unwrap();

    // A fresh copy of the original worktree, replayed with no server at all.
    let h2 = Harness::new();
    let spec = format!("replay/{}", replay_file.display());
    let out2 = h2.run(&model, &["--model", &spec, "--json"]);
    assert_eq!(out2.status.code(), Some(0), "{}", describe(&out2));
    assert_eq!(h2.read("add.sh"), h.read("add.sh"));
    assert_eq!(normalise(&events(&out2), &h2.wt), normalise(&first, &h.wt));
    assert_eq!(model.requests().len(), 4, "the replay sent nothing");
}

#[test]
fn sessions_list_show_and_resume() {
    let h = Harness::new();
    let model = ScriptedModel::start(vec![
        Response::Stream(call("read", json!({"filePath": "add.sh"}))),
        Response::Stream(text("It subtracts.")),
        Response::Stream(text("Still subtracts.")),
    ]);
    let out = h.run(
        &model,
        &["--model", "openai/g", "--json", "what does add.sh do"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let id = events(&out)[0]["session"].as_str().unwrap().to_string();
    let list = h.run(&model, &["sessions", "list", "--json"]);
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list[0]["id"], id.as_str());
    assert_eq!(list[0]["end"], "finished");
    let show = h.run(&model, &["sessions", "show", &id[..8]]);
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.contains("what does add.sh do")
            && show.contains("It subtracts.")
            && show.contains("→ read"),
        "{show}"
    );
    // --continue picks this worktree's last session and sends the model the history.
    let out = h.run(
        &model,
        &["--model", "openai/g", "--continue", "--json", "and now?"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let msgs = model.requests()[2].body["messages"]
        .as_array()
        .unwrap()
        .clone();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        vec!["system", "user", "assistant", "tool", "assistant", "user"]
    );
    assert_eq!(
        h.sessions().len(),
        1,
        "the resumed session appends to its file"
    );
}

/// A request's tool names (OpenAI format).
fn offered(model: &ScriptedModel, n: usize) -> Vec<String> {
    model.requests()[n].body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_subagent_never_does_what_its_parent_may_not() {
    let h = Harness::new();
    std::fs::create_dir_all(h.wt.join(".runner/agents")).unwrap();
    std::fs::write(
        h.wt.join(".runner/agents/wrecker.md"),
        "---\ndescription: Deletes things\npermission:\n  bash:\n    \"rm *\": allow\n---\nDelete what you are told to.\n",
    )
    .unwrap();
    let cfg = h.config_file("[permission.bash]\n\"rm *\" = \"deny\"\n");
    let model = ScriptedModel::start(vec![
        Response::Stream(call(
            "task",
            json!({"description": "Delete add.sh", "prompt": "rm add.sh", "subagent_type": "wrecker"}),
        )),
        Response::Stream(call(
            "bash",
            json!({"command": "rm add.sh", "description": "delete"}),
        )),
        Response::Stream(text("The rm was denied.")),
        Response::Stream(text("The subagent could not delete it.")),
    ]);
    let out = h.run(
        &model,
        &[
            "--model",
            "openai/g",
            "--config",
            &cfg,
            "--json",
            "delete add.sh with a subagent",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        h.wt.join("add.sh").exists(),
        "the child widened the parent's deny"
    );
    assert!(offered(&model, 0).contains(&"task".to_string()));
    let child_result = tool_results(&model, 2);
    assert!(
        child_result[0].contains("\"rm *\" = deny"),
        "{child_result:?}"
    );
    let parent_result = tool_results(&model, 3);
    assert!(
        parent_result[0].contains("task_id: ") && parent_result[0].contains("The rm was denied."),
        "{parent_result:?}"
    );
    // The child's turns are in the same session file, under its own id.
    let records = h.session_records();
    let sessions: std::collections::HashSet<&str> = records
        .iter()
        .filter_map(|r| r["session"].as_str())
        .collect();
    assert_eq!(sessions.len(), 2);
}

#[test]
fn a_subagent_with_its_own_model_talks_to_it() {
    let h = Harness::new();
    std::fs::create_dir_all(h.wt.join(".runner/agents")).unwrap();
    std::fs::write(
        h.wt.join(".runner/agents/reviewer.md"),
        "---\ndescription: Reviews\nmodel: anthropic/claude-reviewer\n---\nReview.\n",
    )
    .unwrap();
    std::fs::write(
        h.wt.join(".runner/agents/lost.md"),
        "---\ndescription: Uses a provider nobody described\nmodel: nowhere/m\n---\nGo.\n",
    )
    .unwrap();
    let task = |agent: &str| {
        call(
            "task",
            json!({"description": "Review", "prompt": "review add.sh", "subagent_type": agent}),
        )
    };
    let model = ScriptedModel::start(vec![
        Response::Stream(task("reviewer")),
        Response::Stream(text("Looks wrong: it subtracts.")),
        Response::Stream(task("lost")),
        Response::Stream(text("done")),
    ]);
    let out = h.run(&model, &["--model", "openai/g", "--json", "review"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let reqs = model.requests();
    let paths: Vec<&str> = reqs.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/v1/chat/completions",
            "/v1/messages",
            "/v1/chat/completions",
            "/v1/chat/completions"
        ]
    );
    assert_eq!(reqs[1].body["model"], "claude-reviewer");
    let last = reqs[3].body.to_string();
    assert!(
        last.contains("names model nowhere/m, which cannot be used"),
        "{last}"
    );
}

#[test]
fn a_subagents_retry_is_reported_under_its_own_session() {
    let h = Harness::new();
    let model = ScriptedModel::start(vec![
        Response::Stream(call(
            "task",
            json!({"description": "Look", "prompt": "look at add.sh", "subagent_type": "general"}),
        )),
        Response::Status(
            429,
            vec![("retry-after-ms".into(), "10".into())],
            r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#.into(),
        ),
        Response::Stream(text("It subtracts.")),
        Response::Stream(text("done")),
    ]);
    let cfg = h.config_file("[retry]\nbase_ms = 10\n");
    let out = h.run(
        &model,
        &[
            "--model", "openai/g", "--config", &cfg, "--json", "delegate",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let ev = events(&out);
    let root = ev[0]["session"].as_str().unwrap();
    let retries = of_type(&ev, "retry");
    assert_eq!(retries.len(), 1, "{ev:?}");
    let child = retries[0]["session"].as_str().unwrap();
    assert_ne!(child, root, "the retry belongs to the subagent");
    assert!(
        of_type(&ev, "step_end")
            .iter()
            .any(|e| e["session"] == child),
        "{ev:?}"
    );
}

#[test]
fn explore_cannot_edit() {
    let h = Harness::new();
    let model = ScriptedModel::start(vec![
        Response::Stream(call(
            "task",
            json!({"description": "Look", "prompt": "fix add.sh", "subagent_type": "explore"}),
        )),
        Response::Stream(calls(vec![
            (
                "edit",
                json!({"filePath": "add.sh", "oldString": "-", "newString": "+"}),
            ),
            (
                "bash",
                json!({"command": "sed -i s/-/+/ add.sh", "description": "edit"}),
            ),
            ("read", json!({"filePath": "add.sh"})),
        ])),
        Response::Stream(text("I can only look.")),
        Response::Stream(text("done")),
    ]);
    let out = h.run(&model, &["--model", "openai/g", "--json", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(h.read("add.sh"), "echo $(($1 - $2))\n");
    let tools = offered(&model, 1);
    for hidden in ["edit", "write", "apply_patch", "task"] {
        assert!(
            !tools.contains(&hidden.to_string()),
            "explore is offered {hidden}: {tools:?}"
        );
    }
    assert!(tools.contains(&"read".to_string()) && tools.contains(&"bash".to_string()));
    let results = tool_results(&model, 2);
    assert!(results[0].contains("not available"), "{}", results[0]);
    assert!(results[1].contains("denied"), "{}", results[1]);
    assert!(results[2].contains("echo"), "{}", results[2]);
}

#[test]
fn plan_edits_only_its_plan_file() {
    let h = Harness::new();
    let model = ScriptedModel::start(vec![
        Response::Stream(calls(vec![
            (
                "write",
                json!({"filePath": ".runner/plans/fix.md", "content": "1. make add.sh add\n"}),
            ),
            ("write", json!({"filePath": "notes.md", "content": "x"})),
            (
                "bash",
                json!({"command": "echo 'echo 5' > add.sh", "description": "overwrite"}),
            ),
        ])),
        Response::Stream(text("Plan saved.")),
    ]);
    let out = h.run(
        &model,
        &[
            "--model",
            "openai/g",
            "--agent",
            "plan",
            "--json",
            "plan the fix",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(h.read(".runner/plans/fix.md"), "1. make add.sh add\n");
    assert!(!h.wt.join("notes.md").exists());
    assert_eq!(h.read("add.sh"), "echo $(($1 - $2))\n");
    let results = tool_results(&model, 1);
    assert!(results[1].contains("denied"), "{}", results[1]);
    assert!(results[2].contains("denied"), "{}", results[2]);
    assert!(
        model.requests()[0].body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("plan mode")
    );
}

#[test]
fn a_full_context_is_compacted_into_a_summary() {
    let h = Harness::new();
    let cfg = h.config_file("[provider.openai]\ncontext_window = 2000\n");
    let model = ScriptedModel::start(vec![
        Response::Stream(Answer {
            calls: vec![("read".into(), json!({"filePath": "add.sh"}).to_string())],
            prompt_tokens: 1900,
            ..Default::default()
        }),
        Response::Stream(text("SUMMARY: add.sh subtracts; nothing changed yet.")),
        Response::Stream(text("done")),
    ]);
    let out = h.run(
        &model,
        &["--model", "openai/g", "--config", &cfg, "--json", "look"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let reqs = model.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(
        reqs[1].body["tools"], reqs[0].body["tools"],
        "the summary request declares the same tools (the history holds tool calls)"
    );
    assert_eq!(reqs[1].body["max_completion_tokens"], 8192);
    let last_ask = reqs[1].body["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(last_ask.contains("summary"), "{last_ask}");
    let msgs = reqs[2].body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2, "system + the summary: {msgs:?}");
    assert!(
        msgs[1]["content"]
            .as_str()
            .unwrap()
            .contains("SUMMARY: add.sh subtracts")
    );
    let ev = events(&out);
    assert_eq!(of_type(&ev, "context")[0]["action"], "compact");
    let records = h.session_records();
    assert!(records.iter().any(|r| r["type"] == "compaction"));
    // The summary is a recorded turn, so that a replay hands it to the same compaction.
    assert!(
        records
            .iter()
            .any(|r| r["type"] == "turn" && r["summary"] == true),
        "{records:?}"
    );
    // Replayed without the config: the recorded window brings compaction back at the
    // same step, and the recorded summary answers it.
    let id = ev[0]["session"].as_str().unwrap().to_string();
    let export = h.run(&model, &["sessions", "export", &id]);
    assert_eq!(export.status.code(), Some(0), "{}", describe(&export));
    let replay_file = h.config.join("compacted.replay.jsonl");
    std::fs::write(&replay_file, &export.stdout).unwrap();
    let h2 = Harness::new();
    let spec = format!("replay/{}", replay_file.display());
    let out2 = h2.run(&model, &["--model", &spec, "--json"]);
    assert_eq!(out2.status.code(), Some(0), "{}", describe(&out2));
    let ev2 = events(&out2);
    assert_eq!(of_type(&ev2, "context")[0]["action"], "compact", "{ev2:?}");
    assert_eq!(end_of(&ev2)["steps"], end_of(&ev)["steps"]);
    assert_eq!(model.requests().len(), 3, "the replay sent nothing");
}

#[test]
fn a_conversation_the_provider_finds_too_long_is_compacted_and_tried_again() {
    let h = Harness::new();
    let too_long = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 212000 tokens > 200000 maximum"}}"#;
    let model = ScriptedModel::start(vec![
        Response::Stream(call("read", json!({"filePath": "add.sh"}))),
        Response::Status(400, vec![], too_long.into()),
        Response::Stream(text("SUMMARY: add.sh was read; it subtracts.")),
        Response::Stream(text("add.sh subtracts.")),
    ]);
    let out = h.run(
        &model,
        &["--model", "anthropic/c", "--json", "look at add.sh"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let ev = events(&out);
    assert_eq!(of_type(&ev, "context")[0]["action"], "compact", "{ev:?}");
    let reqs = model.requests();
    assert_eq!(reqs.len(), 4);
    assert!(
        reqs[3]
            .body
            .to_string()
            .contains("SUMMARY: add.sh was read")
    );
    // A refusal that compaction cannot help is final, with the provider's words.
    let h = Harness::new();
    let model = ScriptedModel::start(vec![
        Response::Status(400, vec![], too_long.into()),
        Response::Stream(text("SUMMARY: nothing yet.")),
        Response::Status(400, vec![], too_long.into()),
    ]);
    let out = h.run(&model, &["--model", "anthropic/c", "--json", "look"]);
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    assert!(
        end_of(&events(&out))["message"]
            .as_str()
            .unwrap()
            .contains("prompt is too long")
    );
}

#[test]
fn a_silent_stream_is_given_up_and_tried_again() {
    let h = Harness::new();
    let cfg = h.config_file("[provider.openai]\nidle_timeout_secs = 1\n");
    let model = ScriptedModel::start(vec![
        Response::Slow(text("too late"), Duration::from_secs(3)),
        Response::Stream(text("on time")),
    ]);
    let started = Instant::now();
    let out = h.run(
        &model,
        &["--model", "openai/g", "--config", &cfg, "--json", "hi"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let ev = events(&out);
    let retries = of_type(&ev, "retry");
    assert_eq!(retries.len(), 1, "{ev:?}");
    assert!(
        retries[0]["error"]
            .as_str()
            .unwrap()
            .contains("no answer for 1 s"),
        "{retries:?}"
    );
    let text: String = of_type(&ev, "text")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "on time");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn an_answer_cut_at_the_output_limit_does_not_run_its_last_call() {
    for anthropic in [false, true] {
        let h = Harness::new();
        let model = ScriptedModel::start(vec![
            Response::Stream(Answer {
                calls: vec![
                    ("read".into(), json!({"filePath": "add.sh"}).to_string()),
                    (
                        "write".into(),
                        json!({"filePath": "big.txt", "content": "x"}).to_string(),
                    ),
                ],
                cut_at_limit: true,
                ..Default::default()
            }),
            Response::Stream(Answer {
                text: "half an ans".into(),
                cut_at_limit: true,
                ..Default::default()
            }),
            Response::Stream(text("wer")),
        ]);
        let spec = if anthropic { "anthropic/c" } else { "openai/g" };
        let out = h.run(&model, &["--model", spec, "--json", "write big.txt"]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let ev = events(&out);
        let ends = of_type(&ev, "tool_end");
        assert_eq!(ends.len(), 1, "only the whole call ran: {ends:?}");
        assert_eq!(ends[0]["tool"], "read");
        assert!(!h.wt.join("big.txt").exists(), "the cut call never ran");
        let reqs = model.requests();
        assert_eq!(reqs.len(), 3);
        let second = reqs[1].body.to_string();
        assert!(
            second.contains("cut off at the output token limit"),
            "{second}"
        );
        // A text answer cut at the limit is asked to go on, not taken as the end.
        let last = reqs[2].body.to_string();
        assert!(last.contains("Continue exactly where it stopped"), "{last}");
        assert_eq!(end_of(&ev)["steps"], 3);
    }
}

#[test]
fn an_exhausted_quota_is_not_retried() {
    let h = Harness::new();
    let model = ScriptedModel::start(vec![Response::Status(
        429,
        vec![],
        r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#.into(),
    )]);
    let out = h.run(&model, &["--model", "openai/g", "--json", "hi"]);
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    let ev = events(&out);
    assert!(of_type(&ev, "retry").is_empty(), "{ev:?}");
    assert!(end_of(&ev)["message"].as_str().unwrap().contains("quota"));
    assert_eq!(model.requests().len(), 1);
}

#[test]
fn instructions_from_agents_md_reach_the_model_once() {
    let h = Harness::new();
    std::fs::write(
        h.wt.join("AGENTS.md"),
        "ROOT-RULE: run sh test.sh after every change.\n",
    )
    .unwrap();
    std::fs::create_dir_all(h.wt.join("lib")).unwrap();
    std::fs::write(h.wt.join("lib/AGENTS.md"), "LIB-RULE: keep lib POSIX.\n").unwrap();
    std::fs::write(h.wt.join("lib/a.sh"), "a\n").unwrap();
    std::fs::write(h.wt.join("lib/b.sh"), "b\n").unwrap();
    let model = ScriptedModel::start(vec![
        Response::Stream(call("read", json!({"filePath": "lib/a.sh"}))),
        Response::Stream(call("read", json!({"filePath": "lib/b.sh"}))),
        Response::Stream(text("ok")),
    ]);
    let out = h.run(&model, &["--model", "openai/g", "--json", "look"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let system = model.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        system.contains("ROOT-RULE") && system.contains("# Environment"),
        "{system}"
    );
    let first = tool_results(&model, 1);
    assert!(first[0].contains("LIB-RULE"), "{first:?}");
    let second = tool_results(&model, 2);
    assert!(!second[1].contains("LIB-RULE"), "given once: {second:?}");
}

#[test]
fn agent_level_tools_in_a_run() {
    let h = Harness::new();
    let model = ScriptedModel::start(vec![
        Response::Stream(calls(vec![
            (
                "todowrite",
                json!({"todos": [{"content": "fix add", "status": "in_progress", "priority": "high"}]}),
            ),
            (
                "batch",
                json!({"tool_calls": [
                    {"tool": "read", "parameters": {"filePath": "add.sh"}},
                    {"tool": "read", "parameters": {"filePath": "missing.sh"}}
                ]}),
            ),
            (
                "question",
                json!({"questions": [{"question": "Which?", "header": "Pick", "options": [{"label": "a", "description": "A"}]}]}),
            ),
        ])),
        Response::Stream(call("todoread", json!({}))),
        Response::Stream(text("done")),
    ]);
    let out = h.run(&model, &["--model", "openai/g", "--json", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let tools = offered(&model, 0);
    for t in [
        "todowrite",
        "todoread",
        "task",
        "batch",
        "question",
        "webfetch",
        "skill",
    ] {
        assert!(tools.contains(&t.to_string()), "{t} not offered: {tools:?}");
    }
    let r = tool_results(&model, 1);
    assert!(
        r[1].contains("echo $(($1 - $2))") && r[1].contains("missing.sh"),
        "{}",
        r[1]
    );
    assert!(r[2].contains("Nobody is available"), "{}", r[2]);
    let r = tool_results(&model, 2);
    assert!(
        r[3].contains("fix add") && r[3].contains("in_progress"),
        "{}",
        r[3]
    );
}

#[test]
fn json_events_keep_their_shape() {
    let h = Harness::new();
    let model = ScriptedModel::start(fixing_script());
    let out = h.run(
        &model,
        &[
            "--model",
            "openai/g",
            "--json",
            "--sandbox",
            "landlock",
            "fix the failing test",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    // Values that differ per run are replaced, keys kept: the snapshot pins the shape.
    let mut ev = normalise(&events(&out), &h.wt);
    for e in ev.iter_mut() {
        let o = e.as_object_mut().unwrap();
        o.insert("session".into(), json!("SESSION"));
        if ["tool_end", "step_end", "session_end"].contains(&o["type"].as_str().unwrap()) {
            o.insert("duration_ms".into(), json!(0));
        }
    }
    insta::assert_json_snapshot!("json_events", ev);
}

/// The README's keyless demo: the shipped recording fixes the shipped example inside the
/// docker sandbox, and the tests pass at the end.
#[test]
fn the_shipped_example_replays_to_passing_tests_in_docker() {
    common::engine::docker();
    let h = Harness::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    for f in ["stats.py", "test_stats.py"] {
        std::fs::copy(example.join("fix-failing-test").join(f), h.wt.join(f)).unwrap();
    }
    let replay = format!(
        "replay/{}",
        example.join("fix-failing-test.replay.jsonl").display()
    );
    let model = ScriptedModel::start(vec![]);
    let out = h.run(
        &model,
        &["--sandbox", "docker", "--model", &replay, "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        h.read("stats.py")
            .contains("return sum(values) / len(values)\n")
    );
    let results: Vec<String> = h
        .session_records()
        .iter()
        .filter(|r| r["type"] == "message" && r["message"]["role"] == "tool")
        .map(|r| r["message"]["content"].as_str().unwrap().to_string())
        .collect();
    assert!(results[0].contains("FAILED (failures=2)"), "{}", results[0]);
    assert!(
        results.last().unwrap().contains("Ran 4 tests") && results.last().unwrap().contains("\nOK"),
        "{results:?}"
    );
    assert!(model.requests().is_empty());
}

/// No prompt on a terminal: a conversation, one line per turn in one session, until Ctrl-D.
#[test]
fn a_conversation_on_a_terminal_keeps_one_session() {
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};
    common::engine::ensure_package("bsdutils", "/usr/bin/script");
    let h = Harness::new();
    let model = ScriptedModel::start(vec![
        Response::Stream(call("read", json!({"filePath": "add.sh"}))),
        Response::Stream(text("ANSWER-ONE: it subtracts.")),
        Response::Stream(text("ANSWER-TWO: still here.")),
    ]);
    let inner = format!(
        "{} --model openai/g --sandbox landlock",
        env!("CARGO_BIN_EXE_runner")
    );
    let cmd = h.command(&model);
    let mut child = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .current_dir(&h.wt)
        .envs(
            cmd.get_envs()
                .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("util-linux script");
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
    let wait_for = |what: &str, count: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while String::from_utf8_lossy(&screen.lock().unwrap())
            .matches(what)
            .count()
            < count
        {
            assert!(
                Instant::now() < deadline,
                "{what:?} never appeared: {}",
                String::from_utf8_lossy(&screen.lock().unwrap())
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut stdin = child.stdin.take().unwrap();
    wait_for("›", 1);
    stdin.write_all(b"what does add.sh do?\n").unwrap();
    wait_for("ANSWER-ONE", 1);
    wait_for("›", 2);
    stdin.write_all(b"and now?\n").unwrap();
    wait_for("ANSWER-TWO", 1);
    wait_for("›", 3);
    stdin.write_all(b"\x04").unwrap();
    let status = child.wait().unwrap();
    drop(stdin);
    reader.join().unwrap();
    let text = String::from_utf8_lossy(&screen.lock().unwrap()).replace('\r', "");
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("✓ read add.sh"), "{text}");
    let users: Vec<String> = h
        .session_records()
        .iter()
        .filter(|r| r["type"] == "message" && r["message"]["role"] == "user")
        .map(|r| r["message"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(users, vec!["what does add.sh do?", "and now?"]);
    // The second turn was sent the first exchange.
    let msgs = model.requests()[2].body["messages"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        msgs, 6,
        "system, user, assistant+call, tool, assistant, user"
    );
}

#[test]
fn a_named_provider_gets_its_own_url_key_and_headers() {
    let h = Harness::new();
    let model = ScriptedModel::start(vec![Response::Stream(text("hi from local"))]);
    let cfg = h.config_file(&format!(
        "model = \"local/qwen-coder\"\n[provider.local]\nbase_url = \"{}\"\napi_key_env = \"LOCAL_KEY\"\nheaders = {{ \"X-Title\" = \"runner-test\" }}\n",
        model.openai_base()
    ));
    let out = h
        .command(&model)
        .env("LOCAL_KEY", "local-secret")
        .args(["--config", &cfg, "--json", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let req = &model.requests()[0];
    assert_eq!(req.body["model"], "qwen-coder");
    assert_eq!(req.headers["authorization"], "Bearer local-secret");
    assert_eq!(req.headers["x-title"], "runner-test");
    // Without a model anywhere the run says how to choose one.
    let out = h.run(&model, &["hi"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--model provider/model"));
}

#[test]
fn the_projects_own_tools_are_offered_to_the_model_and_run_in_the_sandbox() {
    let h = Harness::new();
    std::fs::create_dir_all(h.wt.join(".runner/tools")).unwrap();
    std::fs::write(
        h.wt.join(".runner/tools/run_tests.toml"),
        "description = \"Runs the project's tests.\"\ncommand = \"sh test.sh; cat\"\n[parameters.properties.verbose]\ntype = \"boolean\"\n",
    )
    .unwrap();
    let model = ScriptedModel::start(vec![
        Response::Stream(call("run_tests", json!({"verbose": true}))),
        Response::Stream(text("The test fails.")),
    ]);
    let out = h.run(
        &model,
        &[
            "--model",
            "openai/g",
            "--sandbox",
            "landlock",
            "--json",
            "test it",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(offered(&model, 0).contains(&"run_tests".to_string()));
    let spec = model.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "run_tests")
        .cloned()
        .unwrap();
    assert_eq!(
        spec["function"]["parameters"]["properties"]["verbose"]["type"],
        "boolean"
    );
    // The model reads what the command printed: the test's verdict, then its arguments.
    let results = tool_results(&model, 1);
    let content = results.last().unwrap();
    assert!(content.contains("FAIL"), "{content}");
    assert!(content.contains(r#"{"verbose":true}"#), "{content}");
}

#[test]
fn an_mcp_servers_tools_are_offered_to_the_model_and_run_in_the_sandbox() {
    let h = Harness::new();
    std::fs::create_dir_all(h.wt.join(".runner")).unwrap();
    std::fs::create_dir_all(h.wt.join(".bin")).unwrap();
    let server = h.wt.join(".bin/runner");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_runner"), &server).is_err() {
        common::copy_runner_to(&server);
    }
    std::fs::write(
        h.wt.join(".runner/config.toml"),
        format!(
            "[mcp.t]\ncommand = \"{}\"\nargs = [\"mcp\", \"test-server\"]\n",
            server.display()
        ),
    )
    .unwrap();
    let model = ScriptedModel::start(vec![
        Response::Stream(call("t_read", json!({"path": "add.sh"}))),
        Response::Stream(text("It subtracts.")),
    ]);
    let out = h.run(
        &model,
        &[
            "--model",
            "openai/g",
            "--sandbox",
            "landlock",
            "--json",
            "look",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let offered = offered(&model, 0);
    for t in ["t_echo", "t_read", "t_crash"] {
        assert!(offered.contains(&t.to_string()), "{offered:?}");
    }
    let results = tool_results(&model, 1);
    let result = results.last().unwrap();
    assert!(result.contains("echo $(($1 - $2))"), "{result}");
}

#[test]
fn a_session_end_hook_runs_when_the_run_ends() {
    let h = Harness::new();
    let record = h.config.join("ended.json");
    std::fs::create_dir_all(h.config.join("runner")).unwrap();
    std::fs::write(
        h.config.join("runner/config.toml"),
        format!(
            "[[hooks]]\nevent = \"session_end\"\ncommand = \"cat > {}\"\n",
            record.display()
        ),
    )
    .unwrap();
    let model = ScriptedModel::start(vec![Response::Stream(text("Nothing to do."))]);
    let out = h.run(&model, &["--model", "openai/g", "--json", "hi"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ended: Value = serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    assert_eq!(ended["event"], "session_end");
    assert_eq!(ended["reason"], "finished");
}

/// A run with `--network allowlist`: the model's command downloads through the proxy, and
/// the session file records each connection (allowed with its bytes, refused with the rule).
#[test]
fn a_run_records_its_network_connections_in_the_session_file() {
    let h = Harness::new();
    let outside = common::outside::Outside::start(50_000);
    let p = outside.port;
    std::fs::write(h.wt.join("net.py"), common::outside::CLIENT_PY).unwrap();
    let command = format!(
        "export no_proxy= NO_PROXY=; python3 net.py fetch http://127.0.0.1:{p}/blob; python3 net.py fetch http://refused.invalid:{p}/blob"
    );
    let model = ScriptedModel::start(vec![
        Response::Stream(call(
            "bash",
            json!({"command": command, "description": "Download"}),
        )),
        Response::Stream(text("done")),
    ]);
    let config =
        h.config_file("[permission.network]\n\"*\" = \"deny\"\n\"127.0.0.1\" = \"allow\"\n");
    let out = h.run(
        &model,
        &[
            "--sandbox",
            "landlock",
            "--network",
            "allowlist",
            "--config",
            &config,
            "--model",
            "openai/gpt-test",
            "--json",
            "download",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let result = tool_results(&model, 1).join("\n");
    assert!(
        result.contains(&format!("OK http://127.0.0.1:{p}/blob 50000")),
        "{result}"
    );
    let network: Vec<Value> = h
        .session_records()
        .into_iter()
        .filter(|r| r["type"] == "network")
        .collect();
    assert_eq!(network.len(), 2, "{network:?}");
    assert_eq!(network[0]["host"], "127.0.0.1");
    assert_eq!(network[0]["decision"], "allow");
    assert!(network[0]["bytes_received"].as_u64().unwrap() >= 50_000);
    assert_eq!(network[1]["host"], "refused.invalid");
    assert_eq!(network[1]["decision"], "deny");
    assert!(
        network[1]["reason"].as_str().unwrap().contains("\"*\""),
        "{network:?}"
    );
}

/// A script whose one command reports its process's seccomp mode: `2` (a filter) behind
/// every wall, `0` as a plain child of runner.
fn seccomp_script() -> Vec<Response> {
    vec![
        Response::Stream(call(
            "bash",
            json!({"command": "grep Seccomp: /proc/self/status", "description": "seccomp mode"}),
        )),
        Response::Stream(text("Done.")),
    ]
}

/// The first line runner printed on stderr.
fn first_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// What the one bash call of [`seccomp_script`] printed, from the saved session.
fn seccomp_mode(h: &Harness) -> String {
    let session = std::fs::read_to_string(&h.sessions()[0]).unwrap();
    // In the JSON the output's tab is `\t`; the command itself has none.
    let at = session
        .find("Seccomp:\\t")
        .expect("the command's output is in the session");
    session[at..at + "Seccomp:\\tN".len()].to_string()
}

/// A plain run, no `--sandbox`, no profile: the default wall here is landlock (this
/// kernel enforces it). The first line names it and says why, and the command really runs
/// under a seccomp filter. Control: `--sandbox none` says it runs without a wall, and the
/// same command there has no filter.
#[test]
fn a_plain_run_is_walled_and_its_first_line_names_the_wall() {
    let h = Harness::new();
    let model = ScriptedModel::start(seccomp_script());
    let out = h.run(
        &model,
        &["--model", "openai/g", "what is the seccomp mode?"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let line = first_line(&out);
    assert!(
        line.starts_with(
            "runner: sandbox: landlock + seccomp, no network (the default here: kernel landlock ABI"
        ),
        "{line}"
    );
    assert_eq!(seccomp_mode(&h), "Seccomp:\\t2");

    let h = Harness::new();
    let model = ScriptedModel::start(seccomp_script());
    let out = h.run(
        &model,
        &[
            "--model",
            "openai/g",
            "--sandbox",
            "none",
            "what is the seccomp mode?",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        first_line(&out).starts_with("runner: warning: no sandbox (--sandbox none)"),
        "{}",
        first_line(&out)
    );
    assert_eq!(seccomp_mode(&h), "Seccomp:\\t0");
}

/// runner started where the kernel refuses landlock (a seccomp filter in the test makes
/// `landlock_create_ruleset` fail with ENOSYS, as on a kernel without it) and `docker`
/// names `DOCKER_HOST`.
fn without_landlock(
    h: &Harness,
    model: &ScriptedModel,
    docker_host: &str,
    args: &[&str],
) -> Output {
    use seccompiler::{SeccompAction, SeccompFilter, SeccompRule};
    use std::os::unix::process::CommandExt;
    let filter = SeccompFilter::new(
        [(libc::SYS_landlock_create_ruleset, Vec::<SeccompRule>::new())].into(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        std::env::consts::ARCH.try_into().unwrap(),
    )
    .unwrap();
    let program: seccompiler::BpfProgram = filter.try_into().unwrap();
    let mut c = h.command(model);
    c.env("DOCKER_HOST", docker_host).args(args);
    // SAFETY: between fork and exec only async-signal-safe calls (prctl, seccomp).
    unsafe {
        c.pre_exec(move || seccompiler::apply_filter(&program).map_err(std::io::Error::other));
    }
    c.output().unwrap()
}

/// Without landlock the default wall is docker when an engine answers; with no engine
/// either, runner refuses to start, says what each wall lacked and how to get one or how
/// to run without a wall on purpose, and the model is never asked. Control: `--sandbox
/// none` still runs there, on purpose.
#[test]
fn without_landlock_the_default_is_docker_and_without_docker_runner_refuses() {
    common::engine::docker();
    let h = Harness::new();
    let model = ScriptedModel::start(seccomp_script());
    let args = ["--model", "openai/g", "what is the seccomp mode?"];
    let out = without_landlock(&h, &model, "unix:///var/run/docker.sock", &args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let line = first_line(&out);
    assert!(
        line.starts_with("runner: sandbox: docker (runner-sandbox:bookworm), no network (the default here: landlock is not usable here")
            && line.contains("the engine at unix:///var/run/docker.sock answers"),
        "{line}"
    );
    assert_eq!(seccomp_mode(&h), "Seccomp:\\t2");

    let h = Harness::new();
    let model = ScriptedModel::start(seccomp_script());
    let nowhere = format!("unix://{}/no-engine.sock", h.data.display());
    let out = without_landlock(&h, &model, &nowhere, &args);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{}", describe(&out));
    for part in [
        "no sandbox is available on this machine, so nothing runs: landlock: ",
        &format!("docker: no engine answers at {nowhere}"),
        "a running Docker or Podman engine",
        "choose that on purpose: --sandbox none",
    ] {
        assert!(said.contains(part), "{part:?} not in {said}");
    }
    assert!(model.requests().is_empty(), "the model was asked");
    let out = without_landlock(
        &h,
        &model,
        &nowhere,
        &[
            "--sandbox",
            "none",
            "--model",
            "openai/g",
            "what is the seccomp mode?",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
}

/// Anthropic's events for an answer of `text` that stops for `stop_reason`, each closed by
/// a blank line.
fn anthropic_events(text: &str, stop_reason: &str) -> Vec<String> {
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "m", "type": "message",
                "role": "assistant", "content": [], "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 5}}),
        ),
        event("message_stop", json!({"type": "message_stop"})),
    ]
}

/// The official SDKs dispatch a body's last event even when no blank line follows it; a
/// complete answer must not be taken for a cut stream (and asked for again).
#[test]
fn a_last_event_without_a_blank_line_still_ends_the_answer() {
    for (anthropic, ending) in [(true, "\n"), (true, ""), (false, "\n"), (false, "")] {
        let h = Harness::new();
        let mut pieces = if anthropic {
            anthropic_events("all done", "end_turn")
        } else {
            common::provider::render(&text("all done"), false)
        };
        let last = pieces.pop().unwrap();
        pieces.push(format!("{}{ending}", last.trim_end_matches('\n')));
        let model = ScriptedModel::start(vec![Response::Raw(pieces)]);
        let spec = if anthropic { "anthropic/c" } else { "openai/g" };
        let out = h.run(&model, &["--model", spec, "--json", "finish"]);
        let case = format!("anthropic {anthropic}, ending {ending:?}");
        assert_eq!(out.status.code(), Some(0), "{case}: {}", describe(&out));
        let ev = events(&out);
        assert!(of_type(&ev, "retry").is_empty(), "{case}: {ev:?}");
        assert_eq!(model.requests().len(), 1, "{case}: asked twice");
        assert_eq!(end_of(&ev)["reason"], "finished", "{case}");
    }
}

/// A body that ends inside an event (half its JSON) is a cut stream: tried again, never
/// a malformed answer.
#[test]
fn a_stream_cut_inside_an_event_is_tried_again() {
    for anthropic in [false, true] {
        let h = Harness::new();
        let mut pieces = if anthropic {
            anthropic_events("almost", "end_turn")
        } else {
            common::provider::render(&text("almost"), false)
        };
        pieces.truncate(3);
        let half = pieces.pop().unwrap();
        pieces.push(half[..half.len() / 2].to_string());
        let model = ScriptedModel::start(vec![
            Response::Raw(pieces),
            Response::Stream(text("whole now")),
        ]);
        let cfg = h.config_file("[retry]\nbase_ms = 10\n");
        let spec = if anthropic { "anthropic/c" } else { "openai/g" };
        let out = h.run(&model, &["--model", spec, "--config", &cfg, "--json", "go"]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let ev = events(&out);
        let retries = of_type(&ev, "retry");
        assert_eq!(retries.len(), 1, "{ev:?}");
        assert!(
            retries[0]
                .to_string()
                .contains("broke off in the middle of an event"),
            "{:?}",
            retries[0]
        );
    }
}

/// A model that declines says so in its own words, and the run ends with its own reason
/// and exit status (7), not as a finished answer.
#[test]
fn a_refusal_is_shown_and_ends_the_run_with_its_own_status() {
    let words = "I can't help with that request.";
    let openai = {
        let chunk = |delta: Value, finish: Value| {
            format!(
                "data: {}\n\n",
                json!({"id": "c", "object": "chat.completion.chunk", "model": "g",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            )
        };
        vec![
            chunk(json!({"role": "assistant", "refusal": ""}), Value::Null),
            chunk(json!({"refusal": &words[..10]}), Value::Null),
            chunk(json!({"refusal": &words[10..]}), Value::Null),
            chunk(json!({}), json!("stop")),
            "data: [DONE]\n\n".to_string(),
        ]
    };
    for (spec, pieces) in [
        ("openai/g", openai),
        ("anthropic/c", anthropic_events(words, "refusal")),
    ] {
        let h = Harness::new();
        let model = ScriptedModel::start(vec![Response::Raw(pieces.clone())]);
        let out = h.run(&model, &["--model", spec, "--json", "do it"]);
        assert_eq!(out.status.code(), Some(7), "{spec}: {}", describe(&out));
        let ev = events(&out);
        let end = end_of(&ev);
        assert_eq!(end["reason"], "model_refused", "{spec}: {end}");
        let shown: String = of_type(&ev, "text")
            .iter()
            .filter_map(|e| e["delta"].as_str())
            .collect();
        assert!(
            shown.contains(words),
            "{spec}: the refusal was not shown: {ev:?}"
        );

        // Without --json, the words reach the terminal and the end says why.
        let model = ScriptedModel::start(vec![Response::Raw(pieces)]);
        let out = h.run(&model, &["--model", spec, "do it"]);
        assert_eq!(out.status.code(), Some(7), "{spec}: {}", describe(&out));
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(all.contains(words), "{spec}: {all}");
        assert!(all.contains("declined"), "{spec}: {all}");
    }
}

/// An error event inside a 200 answer is reported as the event says (its type and message),
/// not as an HTTP status nobody sent; whether it is tried again follows its type.
#[test]
fn an_error_event_in_an_answer_is_reported_as_that_event() {
    let anthropic_error = |kind: &str, message: &str| {
        let mut pieces = anthropic_events("", "end_turn");
        pieces.truncate(1);
        pieces.push(format!(
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "error": {"type": kind, "message": message}})
        ));
        pieces
    };
    let openai_error = |kind: &str, message: &str| {
        vec![format!(
            "data: {}\n\n",
            json!({"error": {"message": message, "type": kind, "code": kind}})
        )]
    };
    for (spec, refused, passing) in [
        (
            "anthropic/c",
            anthropic_error("invalid_request_error", "the tools list is malformed"),
            anthropic_error("overloaded_error", "Overloaded"),
        ),
        (
            "openai/g",
            openai_error("invalid_request_error", "the tools list is malformed"),
            openai_error("rate_limit_exceeded", "Rate limit reached"),
        ),
    ] {
        let h = Harness::new();
        let cfg = h.config_file("[retry]\nattempts = 2\nbase_ms = 10\n");
        let model = ScriptedModel::start(vec![Response::Raw(refused)]);
        let out = h.run(&model, &["--model", spec, "--config", &cfg, "go"]);
        assert_eq!(out.status.code(), Some(4), "{spec}: {}", describe(&out));
        let err = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            err.contains("reported an error in its answer: the tools list is malformed (invalid_request_error)"),
            "{spec}: {err}"
        );
        assert!(
            !err.contains("answered 400"),
            "{spec}: an invented status: {err}"
        );
        assert_eq!(
            model.requests().len(),
            1,
            "{spec}: a rejected request was retried"
        );

        let model = ScriptedModel::start(vec![
            Response::Raw(passing),
            Response::Stream(text("fine now")),
        ]);
        let out = h.run(&model, &["--model", spec, "--config", &cfg, "--json", "go"]);
        assert_eq!(out.status.code(), Some(0), "{spec}: {}", describe(&out));
        let ev = events(&out);
        let retries = of_type(&ev, "retry");
        assert_eq!(retries.len(), 1, "{spec}: {ev:?}");
        assert!(
            !retries[0].to_string().contains("answered 5"),
            "{spec}: {:?}",
            retries[0]
        );
    }
}

/// `--json` lines stay one line each for readers that also split at U+2028 and U+2029
/// (JavaScript's line terminators).
#[test]
fn json_events_escape_the_unicode_line_separators() {
    let h = Harness::new();
    let model = ScriptedModel::start(vec![Response::Stream(text("one\u{2028}two\u{2029}three"))]);
    let out = h.run(&model, &["--model", "openai/g", "--json", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains('\u{2028}') && !stdout.contains('\u{2029}'),
        "a raw separator in --json: {stdout:?}"
    );
    assert!(stdout.contains("\\u2028"), "{stdout}");
    let shown: String = of_type(&events(&out), "text")
        .iter()
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(
        shown, "one\u{2028}two\u{2029}three",
        "the text itself is unchanged"
    );
}

/// Plan mode: `plan` writes its plan and calls `plan_exit`; once the person approves (here
/// `--ask allow`), the same conversation goes on as `build`, which may edit, and a resumed
/// session stays `build`. Refused (`--ask deny`), it stays `plan` and cannot edit.
#[test]
fn plan_exit_hands_the_session_to_build_once_approved() {
    let script = || {
        vec![
            Response::Stream(calls(vec![
                (
                    "write",
                    json!({"filePath": ".runner/plans/fix.md", "content": "1. make add.sh add\n"}),
                ),
                ("plan_exit", json!({})),
            ])),
            Response::Stream(call("read", json!({"filePath": "add.sh"}))),
            Response::Stream(call(
                "write",
                json!({"filePath": "add.sh", "content": "echo $(($1 + $2))\n"}),
            )),
            Response::Stream(text("Done.")),
        ]
    };
    let system = |model: &ScriptedModel, n: usize| {
        model.requests()[n].body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };

    let h = Harness::new();
    let model = ScriptedModel::start(script());
    let args = [
        "--model", "openai/g", "--agent", "plan", "--ask", "allow", "--json", "fix it",
    ];
    let out = h.run(&model, &args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        h.read("add.sh"),
        "echo $(($1 + $2))\n",
        "build could not edit"
    );
    assert!(offered(&model, 0).contains(&"plan_exit".to_string()));
    assert!(!offered(&model, 0).contains(&"plan_enter".to_string()));
    assert!(system(&model, 0).contains("plan mode"));
    // From the step after the approval: build's prompt and tools.
    assert!(
        !system(&model, 1).contains("plan mode"),
        "{}",
        system(&model, 1)
    );
    assert!(offered(&model, 1).contains(&"plan_enter".to_string()));
    assert!(!offered(&model, 1).contains(&"plan_exit".to_string()));
    let results = tool_results(&model, 1);
    assert!(
        results[1].contains("you are the build agent"),
        "{results:?}"
    );

    // Resumed, it is still build.
    let model = ScriptedModel::start(vec![Response::Stream(text("still here"))]);
    let out = h.run(
        &model,
        &["--model", "openai/g", "--continue", "--json", "and now?"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        !system(&model, 0).contains("plan mode"),
        "{}",
        system(&model, 0)
    );
    assert!(offered(&model, 0).contains(&"plan_enter".to_string()));

    // Not approved: still plan, and the edit is refused.
    let h = Harness::new();
    let model = ScriptedModel::start(script());
    let deny = [
        "--model",
        "openai/g",
        "--agent",
        "plan",
        "--ask",
        "deny",
        "--continue-on-deny",
        "--json",
        "fix it",
    ];
    let out = h.run(&model, &deny);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        h.read("add.sh"),
        "echo $(($1 - $2))\n",
        "plan edited after a refusal"
    );
    let results = tool_results(&model, 1);
    assert!(
        results[1].contains("did not approve leaving plan mode"),
        "{results:?}"
    );
    assert!(system(&model, 1).contains("plan mode"));
}

/// A loopback port nothing listens on: bound, then let go.
fn dead_loopback_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn said_all(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

/// A provider on loopback that is not running is said at once, with its address: the
/// default retry policy would otherwise wait about 23 s before saying anything useful.
#[test]
fn a_provider_on_a_loopback_port_nobody_serves_fails_within_two_seconds() {
    let h = Harness::new();
    let unused = ScriptedModel::start(Vec::new());
    let port = dead_loopback_port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let started = Instant::now();
    let out = h
        .command(&unused)
        .env("OPENAI_BASE_URL", &base)
        .args([
            "--model",
            "openai/gpt-test",
            "--sandbox",
            "none",
            "--json",
            "hi",
        ])
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    assert!(
        took < Duration::from_secs(2),
        "took {took:?}: {}",
        describe(&out)
    );
    let ev = events(&out);
    assert!(of_type(&ev, "retry").is_empty(), "{}", describe(&out));
    let end = end_of(&ev);
    assert_eq!(end["reason"], "provider_error");
    let msg = end["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("{base}/chat/completions"))
            && msg.contains(&format!(
                "is the server at http://127.0.0.1:{port} running?"
            )),
        "{msg}"
    );
}

/// A refused key names the variable it came from, the built-in one and a
/// `[provider.NAME]` table's own, and the address the key was sent to.
#[test]
fn a_401_names_the_variable_the_key_came_from() {
    let refusal = || {
        Response::Status(
            401,
            vec![],
            r#"{"error":{"message":"Incorrect API key provided: sk-test***","type":"invalid_request_error","code":"invalid_api_key"}}"#.into(),
        )
    };
    let h = Harness::new();
    let model = ScriptedModel::start(vec![refusal()]);
    let out = h.run(
        &model,
        &["--model", "openai/gpt-test", "--sandbox", "none", "hi"],
    );
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    assert_eq!(model.requests().len(), 1, "no retry of a bad key");
    let err = said_all(&out);
    assert!(
        err.contains("openai answered 401")
            && err.contains("Incorrect API key provided")
            && err.contains("The key came from OPENAI_API_KEY")
            && err.contains(&model.openai_base()),
        "{err}"
    );

    let model = ScriptedModel::start(vec![refusal()]);
    let cfg = h.config_file(&format!(
        "model = \"local/qwen\"\n[provider.local]\nbase_url = \"{}\"\napi_key_env = \"LOCAL_KEY\"\n",
        model.openai_base()
    ));
    let out = h
        .command(&model)
        .env("LOCAL_KEY", "local-secret")
        .args(["--config", &cfg, "--sandbox", "none", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    let err = said_all(&out);
    assert!(
        err.contains("The key came from LOCAL_KEY") && !err.contains("local-secret"),
        "{err}"
    );
}

/// `runner tool call bash` on the docker sandbox with `--root ROOT` and extra arguments.
fn docker_call(h: &Harness, root: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runner"))
        .current_dir(&h.wt)
        .env("XDG_DATA_HOME", &h.data)
        .env("XDG_CONFIG_HOME", &h.config)
        .env("NO_COLOR", "1")
        .args(["tool", "call", "bash"])
        .arg(r#"{"command":"cat add.sh && pwd","description":"look"}"#)
        .arg("--root")
        .arg(root)
        .args(["--sandbox", "docker"])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A worktree exactly where the sandbox mounts its own `/tmp`, `/proc` or `/dev`, or
/// above them all (`/`), is refused by name before anything is created (Docker used to
/// hide a worktree at /tmp under its tmpfs without a word, and fail on /proc or / with
/// "the sandbox server is gone"). Control: a worktree in a folder under /tmp, as every
/// test has, works.
#[test]
fn a_worktree_at_a_sandbox_mount_point_is_refused_by_name() {
    common::engine::docker();
    let h = Harness::new();
    for (root, own) in [("/tmp", "/tmp"), ("/proc", "/proc"), ("/", "/tmp")] {
        let out = docker_call(&h, Path::new(root), &[]);
        let err = said_all(&out);
        assert_ne!(out.status.code(), Some(0), "{root}: {err}");
        assert!(
            err.contains(&format!(
                "a worktree at {root} collides with the sandbox's own {own}"
            )) && err.contains("--workspace copy")
                && err.contains("Docker"),
            "{root}: {err}"
        );
        assert!(!err.contains("server is gone"), "{root}: {err}");
    }
    let out = docker_call(&h, &h.wt, &[]);
    let said = said_all(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("echo $(($1 - $2))") && said.contains(&h.wt.display().to_string()),
        "{said}"
    );
}

/// A container the engine will not create is said with the engine and its reason, as a
/// sandbox that did not start, never as a server that was lost.
#[test]
fn a_container_the_engine_will_not_create_names_the_engine_and_its_reason() {
    common::engine::docker();
    let h = Harness::new();
    let out = docker_call(&h, &h.wt, &["--image", "Not-A:Valid::Reference"]);
    let err = said_all(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("Docker")
            && err.contains("could not create the sandbox container")
            && err.contains("invalid reference format")
            && !err.contains("server is gone"),
        "{err}"
    );
}
