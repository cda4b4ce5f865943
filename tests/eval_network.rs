//! Harbor's network policy as runner carries it out, end to end on the real engine with
//! `--agent oracle`: `network_mode` and `allowed_hosts` per phase, the older
//! `allow_internet`, and `--agent-network` / `--verifier-network` over them.
//!
//! The hosts are served by the test. A task's `public` is the internet, and runner's proxy
//! never lets a task reach the host's own or private addresses (the test's servers are on
//! the host's loopback), so the test stands in for the internet the way a company's
//! network does: runner is given an upstream proxy (`http_proxy` in its environment), which
//! is the test's [`Internet`]. It answers for any host name itself. The names are under
//! `.test`, which resolves nowhere (RFC 6761): a request the test's server saw for one came
//! through runner's proxy, past its rules, and nothing else.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use common::provider::{Response, ScriptedModel, call, text};
use serde_json::{Value, json};

const DOCKERFILE: &str = "FROM runner-sandbox:bookworm\nWORKDIR /app\n";

/// The internet, for these tests: an HTTP proxy on the host's loopback that answers every
/// plain request itself, `served HOST PATH`, and writes down the host and path of each
/// request it got (an empty host for one that was not a proxy request).
struct Internet {
    port: u16,
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl Internet {
    fn start() -> Internet {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || answer(stream, &log));
            }
        });
        Internet { port, seen }
    }

    /// The paths requested of `host`.
    fn paths(&self, host: &str) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(h, _)| h == host)
            .map(|(_, p)| p.clone())
            .collect()
    }

    fn all(&self) -> Vec<(String, String)> {
        self.seen.lock().unwrap().clone()
    }
}

fn answer(stream: std::net::TcpStream, seen: &Mutex<Vec<(String, String)>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    // The rest of the head.
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
    }
    let target = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let (host, path) = match target.strip_prefix("http://") {
        Some(rest) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority.split(':').next().unwrap_or_default();
            (host.to_string(), path.to_string())
        }
        None => (String::new(), target),
    };
    seen.lock().unwrap().push((host.clone(), path.clone()));
    let body = format!("served {host} {path}\n");
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// A Harbor task folder: `toml`, a solution and a test of the given scripts.
fn task(dir: &Path, toml: &str, solve: &str, test: &str) {
    for sub in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("instruction.md"), "Fetch the page.\n").unwrap();
    std::fs::write(
        dir.join("task.toml"),
        format!("version = \"1.0\"\n[metadata]\nauthor = \"test\"\n{toml}"),
    )
    .unwrap();
    std::fs::write(dir.join("environment/Dockerfile"), DOCKERFILE).unwrap();
    std::fs::write(dir.join("solution/solve.sh"), solve).unwrap();
    std::fs::write(dir.join("tests/test.sh"), test).unwrap();
}

/// `curl` of `url` into `file`, the answer's status into `file.code` (000: not reached).
fn fetch(url: &str, file: &str) -> String {
    format!("curl -s --max-time 20 -o {file} -w '%{{http_code}}' {url} > {file}.code || true\n")
}

/// A test that passes when the page the agent fetched is there, and writes what the
/// verifier itself reached of `url` into its log.
fn test_sh(agent_file: &str, want: &str, url: &str) -> String {
    format!(
        "#!/bin/bash\n\
         echo \"verifier got: $(curl -s --max-time 10 -o /dev/null -w '%{{http_code}}' {url})\"\n\
         grep -qx '{want}' {agent_file} && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
}

/// `runner eval run SET --agent oracle --jobs 2 EXTRA…` with `internet` as runner's upstream proxy
/// (and no other proxy variable of this process's).
fn eval(set: &Path, out: &Path, internet: &Internet, extra: &[&str]) -> (Output, u32) {
    eval_by(set, out, internet, extra, None)
}

/// The same, by `model` (a scripted one, reached directly: `no_proxy` names the loopback)
/// when one is given.
fn eval_by(
    set: &Path,
    out: &Path,
    internet: &Internet,
    extra: &[&str],
    model: Option<&ScriptedModel>,
) -> (Output, u32) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_runner"));
    cmd.args(["eval", "run"])
        .arg(set)
        .arg("--out")
        .arg(out)
        .args(["--jobs", "2"])
        .args(extra)
        .env("XDG_DATA_HOME", out.with_extension("data"))
        .env("XDG_CONFIG_HOME", out.with_extension("config"));
    for var in ["http_proxy", "https_proxy", "all_proxy", "no_proxy"] {
        cmd.env_remove(var).env_remove(var.to_uppercase());
    }
    cmd.env("http_proxy", format!("http://127.0.0.1:{}", internet.port))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match model {
        Some(m) => cmd
            .args(["--model", "openai/scripted"])
            .env("no_proxy", "127.0.0.1,localhost")
            .env("OPENAI_API_KEY", "sk-eval-test")
            .env("OPENAI_BASE_URL", m.openai_base()),
        None => cmd.args(["--agent", "oracle"]),
    };
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

fn said(run: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    )
}

fn result(out: &Path, id: &str) -> Value {
    let p = out.join("tasks").join(id).join("result.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

fn read(out: &Path, id: &str, file: &str) -> String {
    std::fs::read_to_string(out.join("tasks").join(id).join(file)).unwrap_or_default()
}

/// `result.json`'s entry for `phase`: its mode, what decided it, its connections.
fn phase<'a>(r: &'a Value, phase: &str) -> &'a Value {
    r["network"]
        .as_array()
        .unwrap_or_else(|| panic!("no network in {r:#}"))
        .iter()
        .find(|p| p["phase"] == phase)
        .unwrap_or_else(|| panic!("no {phase} phase in {r:#}"))
}

fn lines(v: &Value) -> Vec<String> {
    v["connections"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| l.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Runs `set` and checks it ended cleanly: exit 0, no container left.
fn run_clean(set: &Path, out: &Path, internet: &Internet, extra: &[&str]) {
    let (run, pid) = eval(set, out, internet, extra);
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    assert_eq!(containers_of(pid), "", "containers left behind");
}

fn tmp_set() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    (tmp, dir)
}

/// The task of the issue: the environment offline, `public` for the agent, `no-network`
/// for the verifier. The solution's fetch reaches the host; the verifier's does not. And
/// a task that says nothing gets Harbor's default, `public`, in both phases (Terminal-Bench
/// 2's tasks, whose solutions `pip install` as they run).
#[test]
fn a_public_agent_reaches_the_host_and_a_no_network_verifier_does_not() {
    common::engine::docker();
    let internet = Internet::start();
    let (_tmp, dir) = tmp_set();
    let set = dir.join("set");
    task(
        &set.join("split"),
        "[environment]\nnetwork_mode = \"no-network\"\n[agent]\nnetwork_mode = \"public\"\n[verifier]\nnetwork_mode = \"no-network\"\n",
        &fetch("http://allowed.test/split-agent", "/app/got.txt"),
        // Also straight at the proxy's port: whatever listens there for the agent's
        // phase lets nothing through for a no-network verifier.
        &(test_sh(
            "/app/got.txt",
            "served allowed.test /split-agent",
            "http://allowed.test/split-verifier",
        ) + "curl -s --max-time 10 --proxy http://127.0.0.1:3128 http://allowed.test/split-verifier-proxy\n"),
    );
    task(
        &set.join("silent"),
        "",
        &fetch("http://allowed.test/silent-agent", "/app/got.txt"),
        &test_sh(
            "/app/got.txt",
            "served allowed.test /silent-agent",
            "http://allowed.test/silent-verifier",
        ),
    );
    let out = dir.join("out");
    run_clean(&set, &out, &internet, &[]);

    let split = result(&out, "split");
    assert_eq!(split["status"], "resolved", "{split:#}");
    let paths = internet.paths("allowed.test");
    assert!(paths.contains(&"/split-agent".into()), "{paths:?}");
    for reached in ["/split-verifier", "/split-verifier-proxy"] {
        assert!(
            !paths.contains(&reached.into()),
            "the no-network verifier reached the host: {paths:?}"
        );
    }
    assert!(
        read(&out, "split", "verify.log").contains("verifier got: 000"),
        "{}",
        read(&out, "split", "verify.log")
    );
    let agent = phase(&split, "agent");
    assert_eq!(agent["mode"], "public", "{split:#}");
    assert_eq!(agent["from"], "task [agent] network_mode");
    assert!(
        lines(agent)
            .iter()
            .any(|l| l.starts_with("allow allowed.test:80")),
        "{split:#}"
    );
    assert!(read(&out, "split", "agent-network.jsonl").contains("allowed.test"));
    let verifier = phase(&split, "verifier");
    assert_eq!(verifier["mode"], "no-network", "{split:#}");
    assert_eq!(verifier["from"], "task [verifier] network_mode");

    let silent = result(&out, "silent");
    assert_eq!(silent["status"], "resolved", "{silent:#}");
    assert!(paths.contains(&"/silent-verifier".into()), "{paths:?}");
    for p in ["agent", "verifier"] {
        assert_eq!(phase(&silent, p)["mode"], "public", "{silent:#}");
        assert!(
            phase(&silent, p)["from"]
                .as_str()
                .unwrap()
                .contains("default"),
            "{silent:#}"
        );
    }
}

/// `allowlist`: the listed host is reached, another is refused by runner's proxy and
/// never reaches the host, in the agent's phase and in the verifier's (which inherits the
/// environment's policy). A task that lists a loopback address does not open the host's
/// loopback: only the user's own config can.
#[test]
fn an_allowlist_opens_the_listed_hosts_and_nothing_else() {
    common::engine::docker();
    let internet = Internet::start();
    let (_tmp, dir) = tmp_set();
    let set = dir.join("set");
    // Straight to the proxy: in the container, 127.0.0.1 would be its own loopback.
    let private = format!(
        "curl -s --max-time 20 --noproxy '' -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{}/private > /app/private.code || true\n",
        internet.port
    );
    let solve = [
        fetch("http://allowed.test/listed", "/app/got.txt"),
        fetch("http://other.test/listed", "/app/other.txt"),
        private,
    ]
    .concat();
    let test = "#!/bin/bash\n\
         echo \"verifier allowed: $(curl -s --max-time 10 -o /dev/null -w '%{http_code}' http://allowed.test/listed-verifier)\"\n\
         echo \"verifier other: $(curl -s --max-time 10 -o /dev/null -w '%{http_code}' http://other.test/listed-verifier)\"\n\
         grep -qx 'served allowed.test /listed' /app/got.txt && [ \"$(cat /app/other.txt.code)\" = 403 ] \
         && [ \"$(cat /app/private.code)\" = 403 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n";
    task(
        &set.join("listed"),
        "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"Allowed.test.\", \"127.0.0.1\"]\n",
        &solve,
        test,
    );
    let out = dir.join("out");
    run_clean(&set, &out, &internet, &[]);

    let listed = result(&out, "listed");
    let log = read(&out, "listed", "verify.log");
    assert_eq!(listed["status"], "resolved", "{listed:#}\n{log}");
    assert!(log.contains("verifier allowed: 200"), "{log}");
    assert!(log.contains("verifier other: 403"), "{log}");
    assert_eq!(internet.paths("other.test"), Vec::<String>::new());
    assert_eq!(
        internet.paths("allowed.test"),
        ["/listed", "/listed-verifier"]
    );
    assert!(
        !internet.all().iter().any(|(_, p)| p == "/private"),
        "a task's allowed_hosts opened the host's loopback: {:?}",
        internet.all()
    );
    let agent = phase(&listed, "agent");
    assert_eq!(agent["mode"], "allowlist");
    assert_eq!(
        agent["allowed_hosts"],
        serde_json::json!(["allowed.test", "127.0.0.1"])
    );
    let agent_lines = lines(agent);
    for refused in ["deny other.test:80", "deny 127.0.0.1:"] {
        assert!(
            agent_lines.iter().any(|l| l.starts_with(refused)),
            "{refused}: {agent_lines:?}"
        );
    }
    assert_eq!(phase(&listed, "verifier")["mode"], "allowlist");
    assert!(
        lines(phase(&listed, "verifier"))
            .iter()
            .any(|l| l.starts_with("deny other.test:80")),
        "{listed:#}"
    );
}

/// The older `allow_internet` keeps its meaning: `true` is every public host for the
/// agent, `false` no network for either phase, and `result.json` says which field decided.
#[test]
fn allow_internet_keeps_its_meaning() {
    common::engine::docker();
    let internet = Internet::start();
    let (_tmp, dir) = tmp_set();
    let set = dir.join("set");
    for (id, allow) in [("online", true), ("offline", false)] {
        task(
            &set.join(id),
            &format!("[environment]\nallow_internet = {allow}\n"),
            &fetch(&format!("http://allowed.test/{id}"), "/app/got.txt"),
            &test_sh(
                "/app/got.txt",
                &format!("served allowed.test /{id}"),
                &format!("http://allowed.test/{id}-verifier"),
            ),
        );
    }
    let out = dir.join("out");
    run_clean(&set, &out, &internet, &[]);

    let online = result(&out, "online");
    assert_eq!(online["status"], "resolved", "{online:#}");
    assert_eq!(phase(&online, "agent")["mode"], "public");
    assert_eq!(
        phase(&online, "agent")["from"],
        "task [environment] allow_internet = true"
    );
    let offline = result(&out, "offline");
    assert_eq!(offline["status"], "unresolved", "{offline:#}");
    for p in ["agent", "verifier"] {
        assert_eq!(phase(&offline, p)["mode"], "no-network", "{offline:#}");
        assert_eq!(
            phase(&offline, p)["from"],
            "task [environment] allow_internet = false"
        );
    }
    assert_eq!(
        internet.paths("allowed.test"),
        ["/online", "/online-verifier"]
    );
}

/// `--agent-network` and `--verifier-network` override every task of the run: the agent
/// of the public task is kept offline while its no-network verifier reaches the host, and
/// `--agent-network public` lets the allow-list task's agent reach the host it does not
/// list. Harbor's spelling `no-network` is taken too.
#[test]
fn the_flags_override_the_task_for_the_whole_run() {
    common::engine::docker();
    let (_tmp, dir) = tmp_set();
    let set = dir.join("set");
    task(
        &set.join("split"),
        "[agent]\nnetwork_mode = \"public\"\n[verifier]\nnetwork_mode = \"no-network\"\n",
        &fetch("http://allowed.test/split-agent", "/app/got.txt"),
        &test_sh(
            "/app/got.txt",
            "served allowed.test /split-agent",
            "http://allowed.test/split-verifier",
        ),
    );
    task(
        &set.join("listed"),
        "[environment]\nallowed_hosts = [\"allowed.test\"]\n",
        &fetch("http://other.test/listed-agent", "/app/got.txt"),
        &test_sh(
            "/app/got.txt",
            "served other.test /listed-agent",
            "http://other.test/listed-verifier",
        ),
    );
    let internet = Internet::start();
    let out = dir.join("out-flipped");
    run_clean(
        &set,
        &out,
        &internet,
        &[
            "--agent-network",
            "no-network",
            "--verifier-network",
            "public",
        ],
    );
    let split = result(&out, "split");
    assert_eq!(split["status"], "unresolved", "{split:#}");
    assert_eq!(phase(&split, "agent")["mode"], "no-network");
    assert_eq!(phase(&split, "agent")["from"], "--agent-network none");
    assert_eq!(phase(&split, "verifier")["mode"], "public");
    assert_eq!(
        phase(&split, "verifier")["from"],
        "--verifier-network public"
    );
    assert_eq!(internet.paths("allowed.test"), ["/split-verifier"]);
    // The verifier of the allow-list task, public by the flag, reaches the unlisted host.
    assert_eq!(internet.paths("other.test"), ["/listed-verifier"]);

    let internet = Internet::start();
    let out = dir.join("out-public");
    run_clean(&set, &out, &internet, &["--agent-network", "public"]);
    let listed = result(&out, "listed");
    assert_eq!(listed["status"], "resolved", "{listed:#}");
    assert_eq!(phase(&listed, "verifier")["mode"], "allowlist");
    assert_eq!(
        internet.paths("other.test"),
        ["/listed-agent"],
        "the agent reached the unlisted host by the flag, the verifier kept the task's list"
    );
}

/// A model's run gets its phase's network the same way: in an allow-list task its bash
/// reaches the listed host through the proxy and is refused the other, and both
/// connections are in `result.json` beside the phase's mode.
#[test]
fn a_models_run_gets_the_tasks_allowlist_and_its_connections_are_kept() {
    common::engine::docker();
    let internet = Internet::start();
    let (_tmp, dir) = tmp_set();
    let set = dir.join("set");
    task(
        &set.join("model"),
        "[agent]\ntimeout_sec = 120\nallowed_hosts = [\"allowed.test\"]\n[verifier]\nnetwork_mode = \"no-network\"\n",
        "true\n",
        &test_sh(
            "/app/got.txt",
            "served allowed.test /model-agent",
            "http://allowed.test/model-verifier",
        ),
    );
    let model = ScriptedModel::responding(|body: &Value| {
        let steps = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        Response::Stream(match steps {
            0 => call(
                "bash",
                json!({
                    "command": format!("{}{}", fetch("http://allowed.test/model-agent", "/app/got.txt"), fetch("http://other.test/model-agent", "/app/other.txt")),
                    "description": "fetch the pages",
                }),
            ),
            _ => text("Done."),
        })
    });
    let out = dir.join("out");
    let (run, pid) = eval_by(&set, &out, &internet, &[], Some(&model));
    assert_eq!(run.status.code(), Some(0), "{}", said(&run));
    assert_eq!(containers_of(pid), "", "containers left behind");
    let r = result(&out, "model");
    assert_eq!(
        r["status"],
        "resolved",
        "{r:#}\n{}",
        read(&out, "model", "session.jsonl")
    );
    assert_eq!(internet.paths("allowed.test"), ["/model-agent"]);
    assert_eq!(internet.paths("other.test"), Vec::<String>::new());
    let agent = phase(&r, "agent");
    assert_eq!(agent["mode"], "allowlist");
    assert_eq!(agent["from"], "task [agent] allowed_hosts");
    let agent_lines = lines(agent);
    for seen in ["allow allowed.test:80", "deny other.test:80"] {
        assert!(
            agent_lines.iter().any(|l| l.starts_with(seen)),
            "{seen}: {agent_lines:?}"
        );
    }
    assert_eq!(phase(&r, "verifier")["mode"], "no-network");
}
