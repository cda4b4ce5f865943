//! Network attacks on `--network allowlist`, for both escape suites: the sandbox's only way
//! out is the proxy, the proxy lets through exactly what the `network` rules allow, and
//! every decision is recorded. A loopback server on the host stands for the outside; it
//! counts what reaches it, so an attack that got past the wall shows even if the command
//! inside lied about it.

use std::process::{Command, Output, Stdio};

use super::Backend;
use super::outside::{CLIENT_PY, Outside, blob};

/// More than twice the proxy's window each way, so a download runs through flow control
/// and many spliced frames, not one burst.
const BLOB_LEN: usize = 20_000_000;

fn backend_arg(backend: Backend) -> &'static str {
    match backend {
        Backend::Docker => {
            super::engine::docker();
            "docker"
        }
        _ => "landlock",
    }
}

pub struct Setup {
    _tmp: tempfile::TempDir,
    pub wt: std::path::PathBuf,
    pub data: std::path::PathBuf,
    pub config: std::path::PathBuf,
}

/// A worktree with the client script, and a config: every host denied but `127.0.0.1`
/// named exactly.
pub fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let wt = tmp.path().join("wt");
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&wt).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    // A checkout: a direct `runner run` outside git stops before the model is asked.
    super::git(&wt, &["init", "-q"]);
    std::fs::write(wt.join("net.py"), CLIENT_PY).unwrap();
    let config = tmp.path().join("network.toml");
    std::fs::write(
        &config,
        "[permission.network]\n\"*\" = \"deny\"\n\"127.0.0.1\" = \"allow\"\n",
    )
    .unwrap();
    super::engine::hand_over(tmp.path());
    Setup {
        _tmp: tmp,
        wt,
        data,
        config,
    }
}

/// `runner ARGS… --root WT` with the setup's data and config directories and no stdin.
pub fn runner(s: &Setup, args: &[&str]) -> Command {
    let mut c = Command::new(super::engine::runner_exe());
    c.args(args)
        .arg("--root")
        .arg(&s.wt)
        .env("XDG_DATA_HOME", &s.data)
        .env("XDG_CONFIG_HOME", s.data.join("config"))
        .stdin(Stdio::null());
    c
}

/// A docker call goes to the test engine, on its runtime.
fn on_engine(mut c: Command, backend: Backend) -> Command {
    if backend == Backend::Docker {
        super::engine::cli(&mut c);
    }
    c
}

/// The flags every allow-list call here shares: the backend, asks refused, the config.
fn allowlist_flags(s: &Setup, backend: Backend) -> Vec<String> {
    [
        "--network",
        "allowlist",
        "--sandbox",
        backend_arg(backend),
        "--ask",
        "deny",
        "--config",
    ]
    .iter()
    .map(|a| a.to_string())
    .chain([s.config.display().to_string()])
    .collect()
}

fn bash_args(command: &str) -> String {
    serde_json::json!({"command": command, "description": "network", "timeout": 60000}).to_string()
}

/// `runner tool call bash COMMAND --network allowlist`; the output.
pub fn call(s: &Setup, backend: Backend, command: &str) -> Output {
    let mut args = vec![
        "tool".to_string(),
        "call".into(),
        "bash".into(),
        bash_args(command),
    ];
    args.extend(allowlist_flags(s, backend));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    on_engine(runner(s, &args), backend).output().unwrap()
}

/// `runner tool script` of one bash call per command, in one session; the output.
pub fn script(s: &Setup, backend: Backend, commands: &[&str]) -> Output {
    let lines: Vec<String> = commands
        .iter()
        .map(|c| format!("{{\"tool\": \"bash\", \"args\": {}}}", bash_args(c)))
        .collect();
    let file = s.wt.join("..").join("calls.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let mut args = vec![
        "tool".to_string(),
        "script".into(),
        file.display().to_string(),
    ];
    args.extend(allowlist_flags(s, backend));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    on_engine(runner(s, &args), backend).output().unwrap()
}

/// The `network:` lines a command printed: (decision, host:port, rest).
pub fn records(out: &Output) -> Vec<(String, String, String)> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("network: "))
        .map(|l| {
            let mut parts = l.splitn(3, ' ');
            (
                parts.next().unwrap_or_default().to_string(),
                parts
                    .next()
                    .unwrap_or_default()
                    .trim_end_matches(':')
                    .to_string(),
                parts.next().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn sha(data: &[u8]) -> String {
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(data)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The attacks and the control, in one sandbox, then the records and the outside's count.
pub fn attacks(backend: Backend) {
    let s = setup();
    let outside = Outside::start(BLOB_LEN);
    let p = outside.port;
    let want = sha(&blob(BLOB_LEN));
    // The host's own address on the engine's bridge, where a container would look for the
    // host's services.
    let bridge = "172.17.0.1";
    let command = [
        // Control: the allowed host, through the proxy, by plain HTTP and by CONNECT.
        format!("no_proxy= NO_PROXY= python3 net.py fetch http://127.0.0.1:{p}/blob"),
        format!("python3 net.py tunnel 127.0.0.1 {p} 3128"),
        format!("python3 net.py halfclose 127.0.0.1 {p} 3128"),
        // A host no rule allows: refused before any lookup.
        format!("no_proxy= NO_PROXY= python3 net.py fetch http://blocked.example.invalid:{p}/blob"),
        // A raw IP no rule names, and the cloud metadata address.
        format!("no_proxy= NO_PROXY= python3 net.py fetch http://127.0.0.2:{p}/blob"),
        "no_proxy= NO_PROXY= python3 net.py fetch http://169.254.169.254/latest/meta-data/".into(),
        // A Host header that names another host than the one judged.
        format!("python3 net.py raw 3128 'GET http://127.0.0.1:{p}/blob HTTP/1.1\\r\\nHost: localhost:{p}\\r\\n\\r\\n'"),
        // Not a proxy request at all.
        "python3 net.py raw 3128 '\\x16\\x03\\x01 hello\\r\\n\\r\\n'".into(),
        // Around the proxy: straight to the outside's port, to the bridge, to the internet.
        format!("python3 net.py direct 127.0.0.1 {p}"),
        format!("python3 net.py direct {bridge} {p}"),
        "python3 net.py direct 1.1.1.1 80".into(),
        "python3 net.py dns example.com".into(),
        format!("(exec 3<>/dev/tcp/127.0.0.1/{p} && echo CONNECTED dev-tcp) 2>/dev/null || echo BLOCKED dev-tcp"),
    ]
    .join("; ");
    let out = call(&s, backend, &command);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let line = |prefix: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(prefix))
            .copied()
            .unwrap_or_else(|| panic!("no line starting {prefix:?}\n{ctx}"))
    };
    let mut problems = Vec::new();
    let mut expect = |ok: bool, what: &str| {
        if !ok {
            problems.push(what.to_string());
        }
    };
    // Controls.
    let fetched = line(&format!("OK http://127.0.0.1:{p}/blob"));
    expect(
        fetched.ends_with(&format!("{BLOB_LEN} {want}")),
        "the allowed download arrived whole",
    );
    let halfclosed = line("OK halfclose");
    expect(
        halfclosed.ends_with(&format!("{BLOB_LEN} {want}")),
        "a client that shut its write half still gets the whole response",
    );
    let tunneled = line("OK tunnel");
    expect(
        tunneled.ends_with(&format!("{BLOB_LEN} {want}")),
        "the CONNECT tunnel carried the download whole",
    );
    // Refusals, each with its reason.
    let refused = line("FAIL http://blocked.example.invalid");
    expect(
        refused.contains("403") && refused.contains("network \"*\" = \"deny\""),
        "a host no rule allows is refused naming the rule",
    );
    let raw_ip = line("FAIL http://127.0.0.2");
    expect(
        raw_ip.contains("403") && raw_ip.contains("127.0.0.2 is denied"),
        "a raw IP no rule names is refused",
    );
    let metadata = line("FAIL http://169.254.169.254");
    expect(metadata.contains("403"), "the metadata address is refused");
    let answers: Vec<&&str> = lines.iter().filter(|l| l.starts_with("ANSWER")).collect();
    expect(
        answers.len() == 2 && answers.iter().all(|a| a.contains(" 400 ")),
        "a Host header naming another host, and garbage, get 400",
    );
    for target in [
        format!("127.0.0.1 {p}"),
        format!("{bridge} {p}"),
        "1.1.1.1 80".to_string(),
    ] {
        expect(
            lines.iter().any(|l| {
                *l == format!("BLOCKED {target}") || l.starts_with(&format!("BLOCKED {target} "))
            }),
            &format!("a direct connection to {target} fails"),
        );
    }
    expect(
        line("NODNS example.com").starts_with("NODNS"),
        "DNS from inside fails",
    );
    expect(
        line("BLOCKED dev-tcp") == "BLOCKED dev-tcp",
        "bash's /dev/tcp fails",
    );
    expect(
        !stdout.contains("CONNECTED"),
        "no direct connection succeeded",
    );
    // The records: the allowed connections with their bytes, every refusal with its reason;
    // nothing for what never reached the proxy.
    let recs = records(&out);
    let of = |host: &str| -> Vec<&(String, String, String)> {
        recs.iter()
            .filter(|(_, h, _)| h.starts_with(host))
            .collect()
    };
    let allowed = of(&format!("127.0.0.1:{p}"));
    expect(
        allowed.len() == 3 && allowed.iter().all(|(d, _, _)| d == "allow"),
        "three allowed connections recorded",
    );
    let received = |rest: &str| -> u64 {
        rest.split(", ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    expect(
        allowed
            .iter()
            .all(|(_, _, rest)| received(rest) >= BLOB_LEN as u64),
        "allowed records carry the bytes received",
    );
    for (host, why) in [
        ("blocked.example.invalid", "\"*\""),
        ("127.0.0.2", "\"*\""),
        ("169.254.169.254", "\"*\""),
    ] {
        let r = of(host);
        expect(
            !r.is_empty()
                && r.iter()
                    .all(|(d, _, rest)| d == "deny" && rest.contains(why)),
            &format!("{host} recorded as denied ({why})"),
        );
    }
    expect(
        recs.iter().all(|(_, h, _)| {
            !h.starts_with(bridge) && !h.starts_with("1.1.1.1") && !h.starts_with("example.com")
        }),
        "nothing recorded for what never reached the proxy",
    );
    // The outside saw exactly the three allowed connections: no direct attempt arrived.
    expect(
        outside.accepted() == 3,
        &format!(
            "the outside accepted {} connections, not 3",
            outside.accepted()
        ),
    );
    assert!(
        problems.is_empty(),
        "network allow-list on {backend:?}:\n- {}\n{ctx}",
        problems.join("\n- ")
    );

    // Every host allowed by a wildcard: still no reserved address, whether named by a
    // name that resolves to loopback or by the address itself (DNS rebinding).
    std::fs::write(&s.config, "[permission.network]\n\"*\" = \"allow\"\n").unwrap();
    let command = [
        format!("no_proxy= NO_PROXY= python3 net.py fetch http://localhost:{p}/blob"),
        format!("python3 net.py tunnel localhost {p} 3128"),
        format!("no_proxy= NO_PROXY= python3 net.py fetch http://127.0.0.1:{p}/blob"),
        "no_proxy= NO_PROXY= python3 net.py fetch http://169.254.169.254/latest/meta-data/".into(),
    ]
    .join("; ");
    let out = call(&s, backend, &command);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let ctx = format!(
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fails: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(fails.len(), 4, "every reserved destination refused\n{ctx}");
    for (n, why) in [
        (0, "loopback"),
        (1, "403"),
        (2, "loopback"),
        (3, "link-local"),
    ] {
        assert!(
            fails[n].contains(why),
            "{} should say {why}\n{ctx}",
            fails[n]
        );
    }
    let recs = records(&out);
    assert_eq!(recs.len(), 4, "{ctx}");
    assert!(recs.iter().all(|(d, _, _)| d == "deny"), "{ctx}");
    assert_eq!(
        outside.accepted(),
        3,
        "a reserved destination was reached\n{ctx}"
    );

    // The repository's own config naming the host's loopback exactly: only the user's own
    // config opens a reserved address, so the repository cannot open it to its commands.
    std::fs::create_dir_all(s.wt.join(".runner")).unwrap();
    std::fs::write(
        s.wt.join(".runner/config.toml"),
        "[permission.network]\n\"127.0.0.1\" = \"allow\"\n\"localhost\" = \"allow\"\n",
    )
    .unwrap();
    let command = [
        format!("no_proxy= NO_PROXY= python3 net.py fetch http://127.0.0.1:{p}/blob"),
        format!("no_proxy= NO_PROXY= python3 net.py fetch http://localhost:{p}/blob"),
    ]
    .join("; ");
    let out = call(&s, backend, &command);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let ctx = format!(
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fails: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(fails.len(), 2, "a repository's rule opened loopback\n{ctx}");
    assert!(
        fails.iter().all(|f| f.contains("your own config")),
        "the refusal says whose rule opens it\n{ctx}"
    );
    assert_eq!(
        outside.accepted(),
        3,
        "a repository's rule reached the host's loopback\n{ctx}"
    );
}

/// A connection carries only the host it was judged for (one allowed address may serve
/// many sites: a CDN). A TLS handshake or an HTTP request in a tunnel that asks for
/// another name is cut before a byte of it reaches the destination; a second request
/// pipelined behind an allowed plain-HTTP one, naming another host, is not sent.
/// Controls: a handshake that names no host (to an IP), and a request for the tunnel's
/// own host, go through.
pub fn connection_carries_only_its_host(backend: Backend) {
    let s = setup();
    let outside = Outside::start(1000);
    let p = outside.port;
    let command = [
        format!("python3 net.py tls 127.0.0.1 {p} 3128 blocked.example.invalid"),
        format!("python3 net.py tls 127.0.0.1 {p} 3128 127.0.0.1"),
        format!("python3 net.py tunnel 127.0.0.1 {p} 3128"),
        format!("python3 net.py tunnel 127.0.0.1 {p} 3128 blocked.example.invalid"),
        format!(
            "python3 net.py raw 3128 'GET http://127.0.0.1:{p}/blob HTTP/1.1\\r\\nHost: 127.0.0.1:{p}\\r\\n\\r\\nGET http://127.0.0.1:{p}/closed HTTP/1.1\\r\\nHost: blocked.example.invalid\\r\\n\\r\\n'"
        ),
    ]
    .join("; ");
    let out = call(&s, backend, &command);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let ctx = format!(
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ANSWER HTTP/1.1 200 OK"), "{ctx}");
    // Neither handshake completes (the outside speaks no TLS); what matters is what
    // reached it, which the records say.
    assert!(
        stdout.contains("TLS ENDED blocked.example.invalid"),
        "{ctx}"
    );
    assert!(stdout.contains("TLS ENDED 127.0.0.1"), "{ctx}");
    assert!(stdout.contains("OK tunnel 1000 "), "{ctx}");
    assert!(stdout.contains("FAIL tunnel cut 0"), "{ctx}");
    let recs = records(&out);
    assert_eq!(recs.len(), 5, "{ctx}");
    let (decision, _, rest) = &recs[0];
    assert_eq!(decision, "deny", "{ctx}");
    assert!(
        rest.contains("(0 B sent,") && rest.contains("TLS handshake for blocked.example.invalid"),
        "the fronted handshake was cut before any of it was sent: {rest}\n{ctx}"
    );
    let sent = |rest: &str| -> u64 {
        rest.trim_start_matches('(')
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    assert_eq!(recs[1].0, "allow", "{ctx}");
    assert!(
        sent(&recs[1].2) > 100,
        "a handshake that names no host reached the outside: {}\n{ctx}",
        recs[1].2
    );
    assert_eq!(recs[2].0, "allow", "{ctx}");
    // Plain HTTP inside a tunnel, for another host: cut before any of it was sent.
    let (decision, _, rest) = &recs[3];
    assert_eq!(decision, "deny", "{ctx}");
    assert!(
        rest.contains("(0 B sent,") && rest.contains("an HTTP request for blocked.example.invalid"),
        "{rest}\n{ctx}"
    );
    // The pipelined request for another host went nowhere: exactly the first request's
    // rewritten head was sent, and the record says what was held back.
    let (decision, _, rest) = &recs[4];
    assert_eq!(decision, "allow", "{ctx}");
    let first_head =
        format!("GET /blob HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nConnection: close\r\n\r\n");
    assert_eq!(sent(rest), first_head.len() as u64, "{rest}\n{ctx}");
    assert!(rest.contains("carries one request"), "{rest}\n{ctx}");
}

/// A process that leaves its command's group (`setsid`) keeps its connection only until
/// the command ends; the next command sees the outside notice the cut.
pub fn leftover_connection_is_cut(backend: Backend) {
    let s = setup();
    let outside = Outside::start(10);
    let p = outside.port;
    let first = format!(
        "export no_proxy= NO_PROXY=; setsid python3 net.py slow http://127.0.0.1:{p}/slow > slow.log 2>&1 < /dev/null & sleep 1.5; echo started"
    );
    let second = format!(
        "sleep 1.5; cat slow.log; no_proxy= NO_PROXY= python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{p}/closed').read().decode())\""
    );
    let out = script(&s, backend, &[&first, &second]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let ctx = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("started"), "{ctx}");
    assert!(
        stdout.contains("closed=true"),
        "the leftover connection was not cut when its command ended:\n{ctx}"
    );
    assert!(
        stdout.contains("SLOW CUT") || stdout.contains("SLOW ENDED"),
        "{ctx}"
    );
}

/// The program behind each connection, as `[network.hosts."NAME"] programs` judges it.
/// The outside is `127.0.0.1`, which only `git` may reach; `localhost` reaches the same
/// server under a name no programs entry covers.
///
/// - Control: `git ls-remote` through the proxy reaches the outside (its transport helper,
///   `git-remote-http`, is what connects, and counts as git).
/// - Control: python3 reaches `localhost`, which no entry names.
/// - Attack: python3 to `127.0.0.1` is refused with a 403 naming the rule and its real
///   executable, and nothing arrives.
/// - Attack: python3 started as `argv[0] = git` that also renames itself `git` (its
///   `comm`, through `PR_SET_NAME`) is refused just the same: the executable is judged,
///   not what it calls itself.
pub fn only_named_programs_reach_a_host(backend: Backend) {
    let s = setup();
    std::fs::write(
        &s.config,
        "[permission.network]\n\"*\" = \"deny\"\n\"127.0.0.1\" = \"allow\"\n\"localhost\" = \"allow\"\n\n[network.hosts.\"127.0.0.1\"]\nprograms = [\"git\"]\n",
    )
    .unwrap();
    std::fs::write(
        s.wt.join("renamed.py"),
        "import ctypes, sys, urllib.request\nctypes.CDLL(None).prctl(15, b'git', 0, 0, 0)\nprint('COMM', open('/proc/self/comm').read().strip(), flush=True)\ntry:\n    urllib.request.urlopen(sys.argv[1], timeout=20).read()\n    print('RENAMED GOT THROUGH', flush=True)\nexcept Exception as e:\n    print('RENAMED REFUSED', str(e).replace('\\n', ' '), flush=True)\n",
    )
    .unwrap();
    let outside = Outside::start(1000);
    let p = outside.port;
    let command = [
        "export no_proxy= NO_PROXY=".to_string(),
        format!("git ls-remote http://127.0.0.1:{p}/repo.git >/dev/null 2>&1; echo GIT_DONE"),
        format!("python3 net.py fetch http://localhost:{p}/blob"),
        format!("python3 net.py fetch http://127.0.0.1:{p}/blob"),
        format!("bash -c 'exec -a git python3 renamed.py http://127.0.0.1:{p}/blob'"),
    ]
    .join("; ");
    let out = call(&s, backend, &command);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let ctx = format!(
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("GIT_DONE"), "{ctx}");
    assert!(
        stdout.contains(&format!("OK http://localhost:{p}/blob 1000")),
        "{ctx}"
    );
    assert!(
        stdout.contains(&format!("FAIL http://127.0.0.1:{p}/blob")),
        "{ctx}"
    );
    // The process really called itself git (PR_SET_NAME; `argv[0]` too) and was refused.
    assert!(stdout.contains("COMM git"), "{ctx}");
    assert!(
        stdout.contains("RENAMED REFUSED") && !stdout.contains("GOT THROUGH"),
        "{ctx}"
    );
    let recs = records(&out);
    let allowed: Vec<_> = recs.iter().filter(|r| r.0 == "allow").collect();
    let denied: Vec<_> = recs.iter().filter(|r| r.0 == "deny").collect();
    assert_eq!(denied.len(), 2, "{ctx}");
    for (_, host, rest) in &denied {
        assert!(host.starts_with("127.0.0.1"), "{ctx}");
        assert!(
            rest.contains("only git may reach 127.0.0.1"),
            "{rest}\n{ctx}"
        );
        // The real executable, a python, whatever the process called itself.
        assert!(
            rest.contains("came from /") && rest.contains("python3"),
            "{rest}\n{ctx}"
        );
    }
    assert!(
        allowed.iter().any(|r| r.1.starts_with("127.0.0.1")),
        "git reached the host only git may reach: {ctx}"
    );
    assert!(
        allowed.iter().any(|r| r.1.starts_with("localhost")),
        "{ctx}"
    );
    assert_eq!(
        outside.accepted(),
        allowed.len(),
        "only the allowed connections arrived: {ctx}"
    );
}
