//! `--network allowlist` with a real package registry: the hosts a download needs are
//! learned from the session's records (nothing here names a registry), then allowed one by
//! one.

use std::process::{Output, Stdio};

use common::allowlist::records;

struct Pip {
    s: common::allowlist::Setup,
    runs: std::sync::atomic::AtomicU32,
}

impl Pip {
    fn new() -> Pip {
        common::engine::docker();
        // Nothing hands pip a certificate: where the machine reaches registries through a
        // TLS-inspecting gateway, the host's bundle the sandbox trusts holds its authority.
        let s = common::allowlist::setup();
        Pip {
            s,
            runs: Default::default(),
        }
    }

    /// `pip download` of one small package in the docker sandbox under `rules`.
    fn download(&self, rules: &str, ask: &str) -> Output {
        std::fs::write(&self.s.config, format!("[permission.network]\n{rules}")).unwrap();
        // Everything in the worktree (a path outside it would be a permission of its own),
        // and each run downloads into a folder of its own.
        let run = self.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let command = format!(
            "[ -d .venv ] || python3 -m venv .venv; \
             .venv/bin/pip download -vvv --no-deps --retries 0 --timeout 20 \
             --disable-pip-version-check -d dl{run} six==1.16.0 2>&1 | grep -E '403|Saved|ERROR'; ls dl{run}"
        );
        let args = serde_json::json!({"command": command, "description": "pip", "timeout": 240000})
            .to_string();
        let config = self.s.config.display().to_string();
        common::allowlist::runner(
            &self.s,
            &[
                "tool",
                "call",
                "bash",
                &args,
                "--sandbox",
                "docker",
                "--network",
                "allowlist",
                "--ask",
                ask,
                "--config",
                &config,
            ],
        )
        .output()
        .unwrap()
    }
}

fn text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn downloaded(out: &Output) -> bool {
    // The listing of the download folder, not a URL in an error message.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == "six-1.16.0-py2.py3-none-any.whl")
}

#[test]
fn pip_download_through_the_proxy_needs_exactly_the_hosts_it_was_seen_to_use() {
    let pip = Pip::new();
    // 1. Every host asked, every ask allowed: the download works, and the session records
    //    which hosts it took.
    let first = pip.download("\"*\" = \"ask\"\n", "allow");
    assert!(
        downloaded(&first),
        "the first download failed\n{}",
        text(&first)
    );
    let mut hosts: Vec<String> = records(&first)
        .into_iter()
        .filter(|(decision, _, _)| decision == "allow")
        .map(|(_, host_port, _)| host_port.rsplit_once(':').unwrap().0.to_string())
        .collect();
    hosts.sort();
    hosts.dedup();
    assert!(
        !hosts.is_empty(),
        "no connection recorded\n{}",
        text(&first)
    );

    // 2. Exactly those hosts, everything else denied and nobody asked: it works again.
    let exact: String = hosts
        .iter()
        .map(|h| format!("\"{h}\" = \"allow\"\n"))
        .collect();
    let second = pip.download(&format!("\"*\" = \"deny\"\n{exact}"), "deny");
    assert!(
        downloaded(&second),
        "with exactly {hosts:?} allowed\n{}",
        text(&second)
    );
    assert!(
        records(&second).iter().all(|(d, _, _)| d == "allow"),
        "{}",
        text(&second)
    );

    // 3. Without any one of them, it fails, and the refusal is the proxy's.
    for missing in &hosts {
        let fewer: String = hosts
            .iter()
            .filter(|h| *h != missing)
            .map(|h| format!("\"{h}\" = \"allow\"\n"))
            .collect();
        let third = pip.download(&format!("\"*\" = \"deny\"\n{fewer}"), "deny");
        let all = text(&third);
        assert!(!downloaded(&third), "it worked without {missing}\n{all}");
        assert!(
            records(&third).iter().any(|(d, hp, rest)| d == "deny"
                && hp.starts_with(missing.as_str())
                && rest.contains("\"*\"")),
            "no refusal of {missing} recorded\n{all}"
        );
        assert!(
            all.contains("403"),
            "pip did not report the proxy's 403\n{all}"
        );
    }
}

/// The limits of a profile: connections open at once, and bytes over the run.
#[test]
fn the_proxy_keeps_to_the_profiles_limits() {
    let s = common::allowlist::setup();
    let outside = common::outside::Outside::start(3_000_000);
    let p = outside.port;
    let profile = s.wt.join("..").join("limited.toml");
    std::fs::write(
        &profile,
        "description = \"two connections, 1 MiB\"\n[sandbox]\nbackend = \"landlock\"\nnetwork = \"allowlist\"\nnetwork_connections = 2\nnetwork_bytes = \"1MiB\"\n",
    )
    .unwrap();
    let command = format!(
        "export no_proxy= NO_PROXY=; \
         python3 net.py slow http://127.0.0.1:{p}/slow & a=$!; python3 net.py slow http://127.0.0.1:{p}/slow & b=$!; \
         sleep 1; python3 net.py fetch http://127.0.0.1:{p}/closed; kill $a $b; wait; sleep 0.5; \
         python3 net.py fetch http://127.0.0.1:{p}/blob; python3 net.py fetch http://127.0.0.1:{p}/closed"
    );
    let args = serde_json::json!({"command": command, "description": "limits"}).to_string();
    let (profile, config) = (
        profile.display().to_string(),
        s.config.display().to_string(),
    );
    let out = common::allowlist::runner(
        &s,
        &[
            "tool",
            "call",
            "bash",
            &args,
            "--profile",
            &profile,
            "--ask",
            "deny",
            "--config",
            &config,
        ],
    )
    .output()
    .unwrap();
    let all = text(&out);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let fails: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(fails.len(), 3, "{all}");
    assert!(
        fails[0].contains("503") && fails[0].contains("limit of 2 connections"),
        "a third connection beside two open ones is refused\n{all}"
    );
    assert!(
        !stdout.contains(&format!("OK http://127.0.0.1:{p}/blob")),
        "3 MB came through a 1 MiB allowance\n{all}"
    );
    assert!(
        fails[2].contains("403") && fails[2].contains("allowance"),
        "once the allowance is spent, new connections are refused\n{all}"
    );
    assert!(
        records(&out)
            .iter()
            .any(|(d, _, rest)| d == "allow" && rest.contains("allowance")),
        "the cut connection's record says why\n{all}"
    );
}

/// `sandbox shell --network allowlist`: the shell holds the terminal (here, a pipe), and the
/// proxy still carries its connections and records them; an ask is refused, since nobody
/// can answer one from inside a shell.
#[test]
fn sandbox_shell_carries_the_proxy_on_both_backends() {
    use std::io::Write;
    for backend in ["landlock", "docker"] {
        if backend == "docker" {
            common::engine::docker();
        }
        let s = common::allowlist::setup();
        // The user's own config: only it can open the host's loopback.
        std::fs::create_dir_all(s.data.join("config/runner")).unwrap();
        std::fs::write(
            s.data.join("config/runner/config.toml"),
            "[permission.network]\n\"127.0.0.1\" = \"allow\"\n",
        )
        .unwrap();
        let outside = common::outside::Outside::start(100_000);
        let p = outside.port;
        let mut child = common::allowlist::runner(
            &s,
            &[
                "sandbox",
                "shell",
                "--sandbox",
                backend,
                "--network",
                "allowlist",
            ],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let script = format!(
            "grep -E '^(CapBnd|CapEff|Seccomp):' /proc/self/status; id -u\nexport no_proxy= NO_PROXY=\npython3 net.py fetch http://127.0.0.1:{p}/blob\npython3 net.py fetch http://other.invalid:{p}/blob\nexit 7\n"
        );
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let all = text(&out);
        assert_eq!(
            out.status.code(),
            Some(7),
            "{backend}: the shell's status\n{all}"
        );
        assert!(
            all.contains(&format!("OK http://127.0.0.1:{p}/blob 100000")),
            "{backend}: the allowed fetch\n{all}"
        );
        // The shell is a command like any other: no capability left to regain, runner's
        // seccomp filter on, the host user's id (docker: not the container's root, which
        // starts the server with four capabilities).
        for line in [
            "CapBnd:\t0000000000000000",
            "CapEff:\t0000000000000000",
            "Seccomp:\t2",
        ] {
            assert!(all.contains(line), "{backend}: no {line:?} in\n{all}");
        }
        // SAFETY: plain syscall.
        let uid = unsafe { libc::getuid() };
        assert!(
            all.lines().any(|l| l.trim() == uid.to_string()),
            "{backend}: the shell's user is not {uid}\n{all}"
        );
        assert!(
            all.contains("FAIL http://other.invalid") && all.contains("nobody can answer"),
            "{backend}: the asked host is refused\n{all}"
        );
        let recs = records(&out);
        assert!(
            recs.iter()
                .any(|(d, h, _)| d == "allow" && h == &format!("127.0.0.1:{p}")),
            "{backend}\n{all}"
        );
        assert_eq!(outside.accepted(), 1, "{backend}\n{all}");
    }
}

/// `pip install` from the real index through the allow-list, behind each wall, on a machine
/// whose egress may inspect TLS (this one does): the sandbox trusts the host's authorities,
/// the two hosts the index needs are allowed, and a third host is refused by its rule.
#[test]
fn pip_installs_from_the_index_behind_both_walls() {
    // On the host (landlock): curl, and a python3 that can make a venv.
    common::engine::ensure_package("curl", "/usr/bin/curl");
    common::engine::ensure_package_for("python3-venv", "python3 -m venv", || {
        std::process::Command::new("/usr/bin/python3")
            .args(["-c", "import ensurepip"])
            .status()
            .is_ok_and(|s| s.success())
    });
    for backend in [common::Backend::Landlock, common::Backend::Docker] {
        let s = common::allowlist::setup();
        std::fs::write(
            &s.config,
            "[permission.network]\n\"*\" = \"deny\"\n\"pypi.org\" = \"allow\"\n\"files.pythonhosted.org\" = \"allow\"\n",
        )
        .unwrap();
        let out = common::allowlist::call(
            &s,
            backend,
            "python3 -m venv .venv && .venv/bin/pip install --disable-pip-version-check --no-deps \
             --retries 0 --timeout 30 six==1.16.0 2>&1 | tail -2; \
             .venv/bin/python -c 'import six; print(\"imported six\", six.__version__)'; \
             curl -sS -o /dev/null -w 'curl %{http_code}\\n' https://pypi.org/simple/six/; \
             python3 net.py fetch https://example.com/",
        );
        let all = text(&out);
        assert!(
            all.contains("imported six 1.16.0"),
            "{backend:?}: pip install failed\n{all}"
        );
        // curl (the image has it) trusts the host's authorities too.
        assert!(all.contains("curl 200"), "{backend:?}: curl\n{all}");
        let recs = records(&out);
        for host in ["pypi.org:443", "files.pythonhosted.org:443"] {
            assert!(
                recs.iter().any(|(d, h, _)| d == "allow" && h == host),
                "{backend:?}: no {host}\n{all}"
            );
        }
        assert!(
            recs.iter().any(|(d, h, why)| d == "deny"
                && h == "example.com:443"
                && why.contains("network \"*\" = \"deny\"")),
            "{backend:?}: the other host is refused by its rule\n{all}"
        );
    }
}

/// A TLS server signed by an authority that only the test's config knows: behind each wall
/// it verifies once `[network] ca_certificates` names that authority, and fails as any
/// unknown certificate does without it.
#[test]
fn a_configured_authority_is_trusted_behind_both_walls_and_only_then() {
    let tls = common::tls::TlsOutside::start();
    let fetch = format!(
        "no_proxy= NO_PROXY= python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())' https://127.0.0.1:{}/ 2>&1 | tail -1; echo \"trusting $SSL_CERT_FILE\"",
        tls.port
    );
    for backend in [common::Backend::Landlock, common::Backend::Docker] {
        let s = common::allowlist::setup();
        std::fs::write(s.config.with_file_name("company-ca.pem"), &tls.ca_pem).unwrap();
        let rules = "[permission.network]\n\"*\" = \"deny\"\n\"127.0.0.1\" = \"allow\"\n";
        std::fs::write(&s.config, rules).unwrap();
        let without = common::allowlist::call(&s, backend, &fetch);
        let all = text(&without);
        assert!(
            all.contains("CERTIFICATE_VERIFY_FAILED") && !all.contains(common::tls::BODY),
            "{backend:?}: an authority nobody configured is not trusted\n{all}"
        );
        std::fs::write(
            &s.config,
            format!("{rules}[network]\nca_certificates = [\"company-ca.pem\"]\n"),
        )
        .unwrap();
        let with = common::allowlist::call(&s, backend, &fetch);
        let all = text(&with);
        assert!(
            all.contains(common::tls::BODY),
            "{backend:?}: the configured authority is trusted\n{all}"
        );
        if backend == common::Backend::Docker {
            assert!(
                all.contains(&format!("trusting {}", runner_sandbox::trust::INSIDE)),
                "{all}"
            );
        }
    }
    assert_eq!(tls.handshakes(), 2, "one verified handshake per wall");
}

/// A machine that reaches the internet only through a company's proxy (`HTTPS_PROXY`,
/// `HTTP_PROXY` with a user and password in runner's environment): the model provider's
/// requests, the sandbox's connections through the allow-list (a tunnel and a plain
/// request) and `webfetch` all go through it with its credentials; a host the rules deny
/// never reaches it; the sandbox's commands never see its address or password.
#[test]
fn every_connection_from_the_host_goes_through_the_upstream_proxy() {
    use common::provider::{Response, ScriptedModel, calls, text};
    use serde_json::json;
    const PASSWORD: &str = "s3cret-proxy-pass";
    let upstream = common::upstream::UpstreamProxy::start("corp", PASSWORD);
    let outside = common::outside::Outside::start(100_000);
    let tls = common::tls::TlsOutside::start();
    let (p, t, up) = (outside.port, tls.port, upstream.port);
    let s = common::allowlist::setup();
    std::fs::write(s.config.with_file_name("ca.pem"), &tls.ca_pem).unwrap();
    std::fs::write(
        &s.config,
        "[permission]\nwebfetch = \"allow\"\n[permission.network]\n\"*\" = \"deny\"\n\"127.0.0.1\" = \"allow\"\n[network]\nca_certificates = [\"ca.pem\"]\n",
    )
    .unwrap();
    let command = format!(
        "export no_proxy= NO_PROXY=; python3 net.py fetch http://127.0.0.1:{p}/blob; \
         python3 -c 'import sys, urllib.request; print(\"TLS\", urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())' https://127.0.0.1:{t}/; \
         python3 net.py fetch http://denied.example:{p}/blob; \
         env | grep -i -e proxy -e {PASSWORD} -e 127.0.0.1:{up}; echo env-listed"
    );
    let model = ScriptedModel::start(vec![
        Response::Stream(calls(vec![
            ("bash", json!({"command": command, "description": "fetch"})),
            (
                "webfetch",
                json!({"url": format!("http://127.0.0.1:{p}/blob"), "format": "text"}),
            ),
        ])),
        Response::Stream(text("done")),
    ]);
    let config = s.config.display().to_string();
    let out = common::allowlist::runner(
        &s,
        &[
            "--sandbox",
            "landlock",
            "--network",
            "allowlist",
            "--model",
            "openai/gpt-test",
            "--ask",
            "deny",
            "--config",
            &config,
            "--json",
            "fetch things",
        ],
    )
    .env("OPENAI_API_KEY", "sk-test")
    .env("OPENAI_BASE_URL", model.openai_base())
    .env("HTTPS_PROXY", upstream.url())
    .env("http_proxy", upstream.url())
    .env_remove("NO_PROXY")
    .env_remove("no_proxy")
    .output()
    .unwrap();
    let all = text_of(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    // What the tools answered (not the calls, which name the proxy to look for it).
    let results = tool_outputs(&model);
    assert!(
        results.contains(&format!("OK http://127.0.0.1:{p}/blob 100000")),
        "{results}"
    );
    assert!(results.contains(common::tls::BODY), "{results}");
    assert!(results.contains("env-listed"), "{results}");
    assert!(
        !results.contains(PASSWORD) && !results.contains(&format!("127.0.0.1:{up}")),
        "the sandbox saw the upstream proxy\n{results}"
    );
    let passed = upstream.passed();
    let show: Vec<&str> = passed.iter().map(|x| x.line.as_str()).collect();
    assert!(passed.iter().all(|x| x.authorized), "{show:?}");
    let sent = |line: &str, agent: &str| {
        passed.iter().any(|x| {
            x.line.starts_with(line)
                && x.headers
                    .iter()
                    .any(|h| h.to_ascii_lowercase().contains(agent))
        })
    };
    assert!(
        sent(
            &format!(
                "POST http://127.0.0.1:{}/v1/chat/completions",
                model_port(&model)
            ),
            "authorization: bearer sk-test"
        ),
        "the model provider's requests: {show:?}"
    );
    assert!(
        sent(&format!("GET http://127.0.0.1:{p}/blob "), "python-urllib"),
        "the sandbox's plain request: {show:?}"
    );
    assert!(
        passed
            .iter()
            .any(|x| x.line == format!("CONNECT 127.0.0.1:{t} HTTP/1.1")),
        "the sandbox's tunnel: {show:?}"
    );
    assert!(
        sent(
            &format!("GET http://127.0.0.1:{p}/blob "),
            "user-agent: runner/"
        ),
        "webfetch: {show:?}"
    );
    assert!(
        !show.iter().any(|l| l.contains("denied.example")),
        "a denied host reached the proxy: {show:?}"
    );
    // The session's network records name the way out.
    let sessions = s.data.join("runner/sessions");
    let session: String = std::fs::read_dir(&sessions)
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert!(
        session.contains(&format!("\"address\":\"via 127.0.0.1:{up}\"")),
        "{session}"
    );

    no_proxy_sends_a_host_direct(&s, &upstream, p, &config);
}

/// `webfetch` with `NO_PROXY` naming the host: it arrives, and the upstream proxy sees
/// nothing more.
fn no_proxy_sends_a_host_direct(
    s: &common::allowlist::Setup,
    upstream: &common::upstream::UpstreamProxy,
    p: u16,
    config: &str,
) {
    use serde_json::json;
    let before = upstream.passed().len();
    let args = json!({"url": format!("http://127.0.0.1:{p}/blob"), "format": "text"}).to_string();
    let direct =
        common::allowlist::runner(s, &["tool", "call", "webfetch", &args, "--config", config])
            .env("HTTPS_PROXY", upstream.url())
            .env("http_proxy", upstream.url())
            .env("NO_PROXY", "localhost,127.0.0.1")
            .output()
            .unwrap();
    // It arrived: the blob has no content type, so webfetch says what it got.
    let said = text_of(&direct);
    assert!(said.contains("100000 bytes"), "{said}");
    assert_eq!(upstream.passed().len(), before, "no_proxy was not honoured");
}

/// What the tools answered in a scripted model's last request.
fn tool_outputs(model: &common::provider::ScriptedModel) -> String {
    let last = model.requests().last().unwrap().body.clone();
    last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

fn text_of(out: &Output) -> String {
    text(out)
}

fn model_port(model: &common::provider::ScriptedModel) -> String {
    model
        .openai_base()
        .rsplit_once(':')
        .unwrap()
        .1
        .trim_end_matches("/v1")
        .to_string()
}

/// A client that hangs up with a reset (it closes with unread data in its socket, as
/// clients that have what they wanted do) ends its connection: the record counts what
/// moved and says no failure. A real failure keeps its reason.
#[test]
fn a_client_hanging_up_is_recorded_as_a_close_not_a_failure() {
    let s = common::allowlist::setup();
    let outside = common::outside::Outside::start(2_000_000);
    let p = outside.port;
    let hang_up = format!(
        "import socket, struct\n\
         s = socket.create_connection(('127.0.0.1', 3128))\n\
         s.sendall(b'GET http://127.0.0.1:{p}/blob HTTP/1.1\\r\\nHost: 127.0.0.1:{p}\\r\\n\\r\\n')\n\
         got = s.recv(65536)\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))\n\
         s.close()\n\
         print('HUNG UP after', len(got), 'bytes')\n"
    );
    std::fs::write(s.wt.join("hang_up.py"), hang_up).unwrap();
    let out = common::allowlist::call(
        &s,
        common::Backend::Landlock,
        "python3 hang_up.py; sleep 1; no_proxy= python3 net.py fetch http://127.0.0.1:1/nothing",
    );
    let all = text(&out);
    assert!(all.contains("HUNG UP after"), "{all}");
    let recs = records(&out);
    let blob: Vec<_> = recs
        .iter()
        .filter(|(_, h, _)| h == &format!("127.0.0.1:{p}"))
        .collect();
    assert_eq!(blob.len(), 1, "{all}");
    let (decision, _, rest) = blob[0];
    assert_eq!(decision, "allow", "{all}");
    assert!(
        rest.contains("B received") && !rest.contains("):") && !rest.contains("reset"),
        "a hang-up is no failure: {rest}\n{all}"
    );
    assert!(
        recs.iter()
            .any(|(_, h, rest)| h == "127.0.0.1:1" && rest.contains("cannot connect")),
        "a failure keeps its reason\n{all}"
    );
}

/// A client that sends a tunnel's first bytes in pieces: a long method, a pause, then the
/// rest of a request for another host. Each piece is judged as it comes, and a request
/// for another host is cut before a byte of it is sent, wherever the client paused (24
/// capital letters used to pass as "not HTTP", and the rest went down the tunnel unread).
/// Control: a request for the tunnel's own host, paused after its method, arrives.
#[test]
fn a_request_sent_in_pieces_down_a_tunnel_is_judged_whole() {
    let s = common::allowlist::setup();
    let outside = common::outside::Outside::start(1000);
    let p = outside.port;
    let script = format!(
        "import socket, sys, time\n\
         def tunnel(name, first, rest):\n\
         \x20   s = socket.create_connection(('127.0.0.1', 3128))\n\
         \x20   s.sendall(b'CONNECT 127.0.0.1:{p} HTTP/1.1\\r\\nHost: 127.0.0.1:{p}\\r\\n\\r\\n')\n\
         \x20   head = b''\n\
         \x20   while not head.endswith(b'\\r\\n\\r\\n'):\n\
         \x20       head += s.recv(1)\n\
         \x20   s.sendall(first)\n\
         \x20   time.sleep(0.5)\n\
         \x20   s.sendall(rest)\n\
         \x20   s.settimeout(10)\n\
         \x20   try:\n\
         \x20       answer = s.recv(200).split(b'\\r\\n')[0].decode()\n\
         \x20   except Exception as e:\n\
         \x20       answer = repr(e)\n\
         \x20   print(name, 'ANSWER', answer or 'closed')\n\
         other = b' / HTTP/1.1\\r\\nHost: blocked.example.invalid\\r\\n\\r\\n'\n\
         tunnel('long', b'A' * 30, other)\n\
         tunnel('lower', b'get', other)\n\
         tunnel('tab', b'GET\\t/', other[2:])\n\
         tunnel('control', b'GET', b' /blob HTTP/1.1\\r\\nHost: 127.0.0.1:{p}\\r\\n\\r\\n')\n"
    );
    std::fs::write(s.wt.join("pieces.py"), script).unwrap();
    let out = common::allowlist::call(&s, common::Backend::Landlock, "python3 pieces.py");
    let all = text(&out);
    assert!(all.contains("control ANSWER HTTP/1.1 200 OK"), "{all}");
    let recs = records(&out);
    assert_eq!(recs.len(), 4, "{all}");
    for (i, name) in ["long", "lower", "tab"].iter().enumerate() {
        let (decision, _, rest) = &recs[i];
        assert_eq!(decision, "deny", "{name}: {rest}\n{all}");
        assert!(
            rest.contains("(0 B sent,"),
            "{name}: the request for another host was sent: {rest}\n{all}"
        );
    }
    assert!(
        recs[0]
            .2
            .contains("an HTTP request for blocked.example.invalid:80"),
        "{all}"
    );
    assert_eq!(recs[3].0, "allow", "{all}");
}
