//! A real third-party agent's loop driving runner's hands: Codex CLI (the npm release
//! pinned in `common::third_party`) with `runner mcp serve --sandbox docker` as its MCP
//! server and its own shell turned off, its model a local scripted server speaking the
//! Responses API over real HTTP.
//!
//! The model asks for runner's `bash` (which Codex offers as `bash` in the namespace
//! `mcp__runner`) to run `id; cat /etc/hostname; touch made-by-mcp`, then answers with
//! text. What Codex sent back to the model in its second request is the evidence: the
//! command's output as the tool result, with the container's hostname in it, not the
//! host's. The same run under a runner rule that denies `touch` gets the refusal, naming
//! the rule, as its tool result, and nothing runs.
//!
//! OpenCode (also pinned) gets the same first turn over Chat Completions, with its own
//! shell, file and fetch tools off: runner's bash reaches its model as `runner_bash`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::provider::{self, Response, ScriptedModel, Seen};
use common::third_party;
use serde_json::{Value, json};

/// What the scripted model asks runner's shell to run.
const COMMAND: &str = "id; cat /etc/hostname; touch made-by-mcp";

/// runner's bash as Codex names it to the model: tool `bash` in namespace `mcp__runner`.
const RUNNER_BASH: &str = "mcp__runner/bash";

/// The tools Codex brings of its own that run commands or change files on the host. With
/// its shell turned off none of them may reach the model.
const CODEX_HANDS: [&str; 6] = [
    "exec_command",
    "write_stdin",
    "shell",
    "shell_command",
    "local_shell",
    "apply_patch",
];

/// How long one `codex exec` may take before the test calls it hung.
const PATIENCE: Duration = Duration::from_secs(90);

/// One finished `codex exec` turn: what it printed, what the model was sent, the worktree.
struct Run {
    _tmp: tempfile::TempDir,
    wt: PathBuf,
    stdout: String,
    stderr: String,
    requests: Vec<Seen>,
}

/// A fresh git worktree under `base`, and `runner mcp serve --sandbox docker` for it with
/// runner's rules `rules` (a TOML config) and its data beside the worktree.
fn worktree_and_server(base: &Path, rules: &str) -> (PathBuf, Command) {
    assert!(
        common::engine::owner().is_none(),
        "this test runs the sandbox as the test's own user; an engine of another user needs \
         the agent run as that user too"
    );
    let (wt, data) = (base.join("wt"), base.join("data"));
    for d in [&wt, &data] {
        std::fs::create_dir_all(d).unwrap();
    }
    common::git(&wt, &["init", "-q"]);
    let config = data.join("rules.toml");
    std::fs::write(&config, rules).unwrap();
    let mut mcp = Command::new(common::engine::runner_exe());
    mcp.args(["mcp", "serve", "--sandbox", "docker", "--root"])
        .arg(&wt)
        .arg("--config")
        .arg(&config)
        .env("XDG_DATA_HOME", &data)
        .env("XDG_CONFIG_HOME", data.join("config"));
    common::engine::cli(&mut mcp);
    (wt, mcp)
}

/// Codex in a fresh git worktree, runner's rules in `rules` (a TOML config), the model
/// scripted to call runner's bash with [`COMMAND`] and then say "all done".
fn codex_turn(rules: &str) -> Run {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (wt, mcp) = worktree_and_server(&base, rules);
    let model = ScriptedModel::start(vec![
        Response::Stream(provider::call(
            RUNNER_BASH,
            json!({ "command": COMMAND, "description": "who and where am I" }),
        )),
        Response::Stream(provider::text("all done")),
    ]);
    let home = third_party::codex_home(&base.join("codex"), &model.openai_base(), &mcp);

    let mut codex = third_party::codex_exec(&home, &wt, "Show who and where you are.");
    let (stdout, stderr) = run_within(&mut codex, &base, PATIENCE);
    Run {
        _tmp: tmp,
        wt,
        stdout,
        stderr,
        requests: model.requests(),
    }
}

/// Runs `cmd` to its end, its output kept in files under `dir`; past `limit` it is killed
/// and the test fails with what it printed so far. Panics when it exits unsuccessfully.
fn run_within(cmd: &mut Command, dir: &Path, limit: Duration) -> (String, String) {
    let (out, err) = (dir.join("agent.out"), dir.join("agent.err"));
    cmd.stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err).unwrap()));
    let mut child = cmd.spawn().expect("the agent starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cmd:?} did not finish within {limit:?}:\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(
        status.success(),
        "{cmd:?} failed ({status}):\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}

/// The text Codex sent the model as the result of the call with `call_id`, from the
/// `function_call_output` item of a later request.
fn tool_result(requests: &[Seen], call_id: &str) -> String {
    let outputs: Vec<&Value> = requests
        .iter()
        .flat_map(|r| r.body["input"].as_array().into_iter().flatten())
        .filter(|item| item["type"] == "function_call_output" && item["call_id"] == call_id)
        .map(|item| &item["output"])
        .collect();
    assert_eq!(
        outputs.len(),
        1,
        "one result for {call_id} in the model's requests: {outputs:?}"
    );
    match outputs[0] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => panic!("a tool result of an unknown shape: {other}"),
    }
}

/// Checks what Codex offered the model in its first request: runner's bash in the
/// `mcp__runner` namespace, and none of Codex's own hands.
fn assert_only_runner_hands(first: &Seen) {
    assert!(
        first.path.ends_with("/v1/responses"),
        "Codex asked {} (the Responses API was expected)",
        first.path
    );
    let tools = first.body["tools"].as_array().cloned().unwrap_or_default();
    let runner: Vec<&str> = tools
        .iter()
        .filter(|t| t["type"] == "namespace" && t["name"] == "mcp__runner")
        .flat_map(|t| t["tools"].as_array().into_iter().flatten())
        .filter_map(|t| t["name"].as_str())
        .collect();
    for offered in ["bash", "read", "write", "edit", "grep"] {
        assert!(
            runner.contains(&offered),
            "runner's {offered} is not among the tools Codex offered: {runner:?}"
        );
    }
    let own: Vec<&Value> = tools
        .iter()
        .filter(|t| {
            t["type"] == "local_shell"
                || t["name"]
                    .as_str()
                    .is_some_and(|name| CODEX_HANDS.contains(&name))
        })
        .collect();
    assert!(own.is_empty(), "Codex's own hands were offered: {own:?}");
}

/// runner's rules for both turns: commands allowed, and `cat /etc/hostname` (a path
/// outside the worktree, which runner asks about by default) allowed too, so that only
/// the rule under test decides.
const ALLOW: &str = "[permission.bash]\n\"*\" = \"allow\"\n\"touch *\" = \"allow\"\n\n\
                     [permission.external_directory]\n\"/etc/*\" = \"allow\"\n";

#[test]
fn codex_runs_its_commands_in_runners_container() {
    common::engine::docker();
    let run = codex_turn(ALLOW);
    assert_only_runner_hands(&run.requests[0]);
    assert_eq!(
        run.requests.len(),
        2,
        "the call, then the answer: {:?}",
        run.requests.iter().map(|r| &r.path).collect::<Vec<_>>()
    );

    assert!(
        run.wt.join("made-by-mcp").is_file(),
        "the command's file is not in the worktree:\n{}",
        run.stderr
    );
    let result = tool_result(&run.requests, "call_0_bash");
    container_hostname(&result);
    assert!(run.stdout.contains("all done"), "{}", run.stdout);
}

#[test]
fn a_command_runners_rules_deny_is_refused_through_the_mcp_result() {
    common::engine::docker();
    let run = codex_turn(&ALLOW.replace("\"touch *\" = \"allow\"", "\"touch *\" = \"deny\""));
    assert!(
        !run.wt.join("made-by-mcp").exists(),
        "a denied command made its file"
    );
    let result = tool_result(&run.requests, "call_0_bash");
    assert!(
        result.contains("denied") && result.contains("\"touch *\" = deny"),
        "the refusal does not name the rule: {result}"
    );
    assert!(
        !result.contains("uid="),
        "part of a refused command ran: {result}"
    );
    assert!(run.stdout.contains("all done"), "{}", run.stdout);
}

/// The hostname line after `id`'s line in a command's output, checked to be a docker
/// container's (not the host's, and the start of a container id).
fn container_hostname(result: &str) -> String {
    let mut lines = result.lines().skip_while(|l| !l.starts_with("uid="));
    assert!(
        lines.next().is_some(),
        "no `id` line in the result: {result}"
    );
    let hostname = lines.next().unwrap_or_default().trim().to_string();
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    assert_ne!(
        hostname,
        host.trim(),
        "the command printed the host's hostname: it ran outside the container"
    );
    // Docker names a container's host after the start of its id.
    assert!(
        hostname.len() == 12 && hostname.bytes().all(|b| b.is_ascii_hexdigit()),
        "{hostname:?} is not a container's hostname; the result was: {result}"
    );
    hostname
}

/// OpenCode's loop with runner's hands: its model asks for `runner_bash` (a request with
/// tools and no tool result yet) and then answers; OpenCode's own title request, which
/// carries no tools, gets text.
#[test]
fn opencode_runs_its_commands_in_runners_container() {
    common::engine::docker();
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (wt, mcp) = worktree_and_server(&base, ALLOW);
    let model = ScriptedModel::responding(|body| {
        let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
        let answered = body["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        Response::Stream(if has_tools && !answered {
            provider::call(
                "runner_bash",
                json!({ "command": COMMAND, "description": "who and where am I" }),
            )
        } else {
            provider::text("all done")
        })
    });
    let config =
        third_party::opencode_config(&base.join("opencode"), &model.openai_base(), Some(&mcp));
    let mut opencode = third_party::opencode_run(&config, &wt, "Show who and where you are.");
    let (stdout, stderr) = run_within(&mut opencode, &base, PATIENCE);

    assert!(
        wt.join("made-by-mcp").is_file(),
        "the command's file is not in the worktree:\n{stdout}\n{stderr}"
    );
    let requests = model.requests();
    let with_tools: Vec<&Seen> = requests
        .iter()
        .filter(|r| r.body["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .collect();
    let offered: Vec<&str> = with_tools[0].body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(offered.contains(&"runner_bash"), "{offered:?}");
    for own in [
        "bash", "read", "write", "edit", "glob", "grep", "list", "webfetch",
    ] {
        assert!(
            !offered.contains(&own),
            "OpenCode's own {own} was offered: {offered:?}"
        );
    }
    let result: Vec<&str> = with_tools
        .iter()
        .flat_map(|r| r.body["messages"].as_array().into_iter().flatten())
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(result.len(), 1, "one tool result: {result:?}");
    container_hostname(result[0]);
}

/// What the scripted model has OpenCode's own shell do: read a key in the user's home
/// folder, outside the worktree, by its absolute path (inside the wall `$HOME` is the
/// sandbox's own). The path goes through a variable, as a model that wants it would write
/// it: OpenCode's own check for folders outside the project reads paths in a command's
/// words, and would refuse a literal one before the wall was ever tried.
fn read_key(home: &Path) -> String {
    format!(
        "key={}; cat \"$key\"; echo READ-DONE",
        home.join(".ssh/id_ed25519").display()
    )
}
const KEY_TEXT: &str = "OPENSSH-PRIVATE-KEY-never-inside-the-wall";

/// The model address docs/EXEC.md's recipe names; the test puts its scripted model's there.
const DOC_MODEL: &str = "http://127.0.0.1:8080/v1";

/// docs/EXEC.md's "OpenCode inside the wall", as the page writes it: OpenCode's config, the
/// runner config and profile (each named by its first line), and the command line.
struct Recipe {
    opencode_json: String,
    config: String,
    profile: String,
    command: String,
}

impl Recipe {
    fn from_the_doc() -> Recipe {
        let doc =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/EXEC.md"))
                .expect("docs/EXEC.md");
        let section = doc
            .split_once("\n## OpenCode inside the wall\n")
            .map(|(_, rest)| rest.split("\n## ").next().unwrap_or(rest))
            .expect("docs/EXEC.md has a section \"OpenCode inside the wall\"");
        let blocks = fenced_blocks(section);
        let block = |what: &str, pick: &dyn Fn(&(String, String)) -> bool| -> String {
            let found: Vec<&(String, String)> = blocks.iter().filter(|b| pick(b)).collect();
            assert_eq!(found.len(), 1, "one {what} in the recipe: {blocks:#?}");
            found[0].1.clone()
        };
        let first_line = |line: &'static str| move |b: &(String, String)| b.1.starts_with(line);
        Recipe {
            opencode_json: block("opencode.json", &|b| b.0 == "json"),
            config: block(
                "runner config",
                &first_line("# ~/.config/runner/config.toml\n"),
            ),
            profile: block(
                "profile",
                &first_line("# ~/.config/runner/profiles/opencode.toml\n"),
            ),
            command: block("command line", &|b| b.0 == "sh").trim().to_string(),
        }
    }
}

/// The fenced code blocks of Markdown `text`: each one's info string and its lines, with the
/// fence's own indentation (a block inside a list item) taken off.
fn fenced_blocks(text: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String, String)> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim_start();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some((indent, info.trim().to_string(), String::new()));
                }
            }
            Some((_, _, _)) if trimmed.starts_with("```") => {
                let (_, info, body) = open.take().unwrap();
                blocks.push((info, body));
            }
            Some((at, _, body)) => {
                body.push_str(line.get(*at..).unwrap_or(trimmed));
                body.push('\n');
            }
        }
    }
    blocks
}

/// Whether anything under `dir` was disarmed by runner's git guard.
fn disarmed_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().contains(".disarmed"))
            {
                found.push(path.clone());
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    found
}

/// The whole of OpenCode inside the wall, by docs/EXEC.md's recipe as written: its
/// `opencode.json` (the scripted model's port in place of the page's), the runner config
/// and profile at the paths it names in a home folder of the test's, and its command line
/// run by a shell in the worktree. OpenCode's own tools are on; the model reaches the host's
/// loopback through the proxy because the config opens `127.0.0.1` by name. Its `bash`
/// runs inside runner's wall, and its read of the key in the home folder fails, with
/// nothing left for the git guard to disarm. The same turn without runner reads the key
/// (the control). The model sees each result in its second request.
#[test]
fn opencode_inside_runner_exec_cannot_read_the_home_folder() {
    let recipe = Recipe::from_the_doc();
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let home = base.join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), KEY_TEXT).unwrap();

    // The control: OpenCode on the host, in a folder of its own, reads the key.
    let control = base.join("control");
    std::fs::create_dir_all(&control).unwrap();
    common::git(&control, &["init", "-q"]);
    let model = key_reading_model(read_key(&home));
    let config = third_party::opencode_config(&base.join("oc"), &model.openai_base(), None);
    let mut direct = third_party::opencode_run(&config, &control, "Read my key.");
    let (stdout, stderr) = run_within(&mut direct, &base, PATIENCE);
    let seen = shell_result(&model);
    assert!(
        seen.contains(KEY_TEXT),
        "the control read nothing:\n{seen}\n{stdout}\n{stderr}"
    );

    // Inside the wall, set up as the recipe says.
    let wt = base.join("wt");
    std::fs::create_dir_all(&wt).unwrap();
    common::git(&wt, &["init", "-q"]);
    let model = key_reading_model(read_key(&home));
    assert_eq!(
        recipe.opencode_json.matches(DOC_MODEL).count(),
        1,
        "the recipe's opencode.json names {DOC_MODEL} once:\n{}",
        recipe.opencode_json
    );
    let opencode_json = recipe
        .opencode_json
        .replace(DOC_MODEL, &model.openai_base());
    std::fs::write(wt.join("opencode.json"), opencode_json).unwrap();
    let tools = wt.join(".tools");
    std::fs::create_dir_all(&tools).unwrap();
    let native = third_party::opencode_native();
    if std::fs::hard_link(&native, tools.join("opencode")).is_err() {
        std::fs::copy(&native, tools.join("opencode")).unwrap();
    }
    let runner_config = home.join(".config/runner");
    std::fs::create_dir_all(runner_config.join("profiles")).unwrap();
    std::fs::write(runner_config.join("config.toml"), &recipe.config).unwrap();
    std::fs::write(
        runner_config.join("profiles/opencode.toml"),
        &recipe.profile,
    )
    .unwrap();
    let runner_dir = common::engine::runner_exe()
        .parent()
        .expect("the runner executable is in a folder")
        .to_path_buf();
    let path = format!(
        "{}:{}",
        runner_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut exec = Command::new("sh");
    exec.args(["-c", &recipe.command])
        .current_dir(&wt)
        .env("PATH", path)
        .env("HOME", &home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_CACHE_HOME")
        .stdin(Stdio::null());
    let (stdout, stderr) = run_within(&mut exec, &base, PATIENCE);
    let seen = shell_result(&model);
    assert!(
        seen.contains("READ-DONE"),
        "OpenCode's shell did not run (did its model calls reach the host?):\n{seen}\n{stdout}\n{stderr}"
    );
    assert!(
        !seen.contains(KEY_TEXT),
        "the key was read inside the wall:\n{seen}"
    );
    assert!(
        stderr.contains("network: allow 127.0.0.1"),
        "the model's connections are not among the proxy's:\n{stderr}"
    );
    let disarmed = disarmed_under(&wt);
    assert!(
        disarmed.is_empty() && !stderr.contains("disarmed"),
        "OpenCode left a repository in the worktree for the git guard: {disarmed:?}\n{stderr}"
    );
}

/// A model that asks OpenCode's own `bash` to run `command`, then answers.
fn key_reading_model(command: String) -> ScriptedModel {
    ScriptedModel::responding(move |body| {
        let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
        let answered = body["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        Response::Stream(if has_tools && !answered {
            provider::call(
                "bash",
                json!({ "command": command, "description": "read the key" }),
            )
        } else {
            provider::text("done")
        })
    })
}

/// The tool results the model was sent, joined.
fn shell_result(model: &ScriptedModel) -> String {
    model
        .requests()
        .iter()
        .flat_map(|r| r.body["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect::<Vec<_>>()
        .join("\n")
}
