//! `webfetch` is a way out of the sandbox by design: it runs on the host, where the
//! network is. These attacks use it to reach what a profile or a rule keeps closed, and
//! must fail; the controls next to them must succeed. Each is the real binary against a
//! real HTTP server on loopback, which counts the connections that reach it: an attack that
//! "fails" after the request was sent has already leaked.
//!
//! The host's own addresses are closed to it unless the user's own config names them (as
//! for the allow-list proxy): loopback in every spelling, a name that leads there, a
//! redirect there, and a repository's config trying to open it are refused before anything
//! connects. The servers here are on loopback, so the controls (and the attacks on the
//! permission rules) run with a user config that names `127.0.0.1`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

/// A server answering `/page` with HTML, `/away` with a redirect to `target`, counting the
/// connections it accepts.
struct Site {
    port: u16,
    hits: Arc<AtomicUsize>,
}

fn site(redirect_to: Option<String>) -> Site {
    site_on("127.0.0.1", redirect_to)
}

fn site_on(ip: &str, redirect_to: Option<String>) -> Site {
    let listener = TcpListener::bind((ip, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            counter.fetch_add(1, Ordering::SeqCst);
            let mut line = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let _ = reader.read_line(&mut line);
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                    break;
                }
            }
            let response = match (&redirect_to, line.contains("/away")) {
                (Some(to), true) => format!(
                    "HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                ),
                _ => {
                    let body =
                        "<html><body><h1>Secret plans</h1><p>kept on the host</p></body></html>";
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                }
            };
            let _ = stream.write_all(response.as_bytes());
        }
    });
    Site { port, hits }
}

/// The user's own config opening the loopback address the servers listen on.
const USER_OPENS_LOOPBACK: &str = "[permission.network]\n\"127.0.0.1\" = \"allow\"\n";

/// Where a fetch runs: the user's own config (`$XDG_CONFIG_HOME/runner/config.toml`) and
/// the repository's (`.runner/config.toml` in the worktree), each if given.
#[derive(Default)]
struct Configs<'a> {
    user: Option<&'a str>,
    project: Option<&'a str>,
    /// The project's config recorded as trusted (as `--trust-project` or a yes would), so
    /// that its rules get past the loader and meet the network layer's own check.
    trusted: bool,
}

fn fetch(url: &str, extra: &[&str]) -> (Output, Value) {
    fetch_in(
        url,
        extra,
        Configs {
            user: Some(USER_OPENS_LOOPBACK),
            ..Configs::default()
        },
    )
}

fn fetch_in(url: &str, extra: &[&str], configs: Configs) -> (Output, Value) {
    fetch_env(url, extra, configs, &[])
}

/// The proxy variables runner reads; a fetch sees only those it is given.
const PROXY_VARS: [&str; 8] = [
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
];

fn fetch_env(url: &str, extra: &[&str], configs: Configs, env: &[(&str, &str)]) -> (Output, Value) {
    let tmp = tempfile::tempdir().unwrap();
    if let Some(text) = configs.user {
        let dir = tmp.path().join("config/runner");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.toml"), text).unwrap();
    }
    if let Some(text) = configs.project {
        std::fs::create_dir_all(tmp.path().join(".runner")).unwrap();
        std::fs::write(tmp.path().join(".runner/config.toml"), text).unwrap();
        if configs.trusted {
            let repo = std::fs::canonicalize(tmp.path()).unwrap();
            runner_agent::config::trust::remember(
                &tmp.path().join("data/runner/trusted-projects.jsonl"),
                &repo.to_string_lossy(),
                &runner_agent::config::trust::digest(text),
            )
            .unwrap();
        }
    }
    // A profile with a copy workspace (`untrusted`) leaves its copy mounted.
    let _mounts = common::CopyMounts(tmp.path().join("data"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_runner"));
    for var in PROXY_VARS {
        command.env_remove(var);
    }
    let out = command
        .envs(env.iter().copied())
        .current_dir(tmp.path())
        .env("XDG_DATA_HOME", tmp.path().join("data"))
        .env("XDG_CONFIG_HOME", tmp.path().join("config"))
        .args([
            "tool",
            "call",
            "webfetch",
            &json!({"url": url, "format": "markdown"}).to_string(),
            "--json",
        ])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, v)
}

/// The error of a refused fetch, checked to say what was refused and how to open it.
fn refusal(out: &Output, v: &Value, what: &str) -> String {
    assert_eq!(out.status.code(), Some(1), "{what}: {v} {out:?}");
    let err = v["error"].as_str().unwrap_or_default().to_string();
    assert!(err.contains("webfetch refused"), "{what}: {err}");
    assert!(
        err.contains("add `\"") && err.contains("under [permission.network]"),
        "{what}: the refusal says how to open it: {err}"
    );
    err
}

fn config(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::fs::write(f.path(), text).unwrap();
    f
}

#[test]
fn control_webfetch_reads_a_page_under_the_default_profile() {
    let s = site(None);
    let (out, v) = fetch(&format!("http://127.0.0.1:{}/page", s.port), &[]);
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert!(
        v["output"].as_str().unwrap().contains("# Secret plans"),
        "{v}"
    );
    assert_eq!(s.hits.load(Ordering::SeqCst), 1);
}

// The permission rules: the user's config opens loopback here, so only the rules stand
// between the fetch and the server.

#[test]
fn attack_untrusted_profile_cannot_fetch_without_approval() {
    let s = site(None);
    let (out, v) = fetch(
        &format!("http://127.0.0.1:{}/page?leak=source-code", s.port),
        &["--profile", "untrusted", "--ask", "deny"],
    );
    assert_eq!(out.status.code(), Some(3), "{v}");
    assert_eq!(
        s.hits.load(Ordering::SeqCst),
        0,
        "the request left the host before the gate said no"
    );
}

#[test]
fn attack_eval_profile_cannot_fetch_at_all() {
    let s = site(None);
    let (out, _) = fetch(
        &format!("http://127.0.0.1:{}/page", s.port),
        &["--profile", "eval"],
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(s.hits.load(Ordering::SeqCst), 0);
}

#[test]
fn attack_a_redirect_cannot_carry_an_allowed_fetch_to_a_denied_host() {
    let inner = site(None);
    let outer = site(Some(format!("http://localhost:{}/page", inner.port)));
    let cfg = config(&format!(
        "[permission.webfetch]\n\"*\" = \"deny\"\n\"http://127.0.0.1:{}/*\" = \"allow\"\n",
        outer.port
    ));
    let (out, v) = fetch(
        &format!("http://127.0.0.1:{}/away", outer.port),
        &["--config", cfg.path().to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(3), "{v}");
    assert_eq!(
        outer.hits.load(Ordering::SeqCst),
        1,
        "control: the allowed host was asked"
    );
    assert_eq!(
        inner.hits.load(Ordering::SeqCst),
        0,
        "the redirect reached a denied host"
    );
}

#[test]
fn attack_file_and_other_schemes_are_refused() {
    for url in [
        "file:///etc/passwd",
        "ftp://127.0.0.1/x",
        "gopher://127.0.0.1:70/x",
    ] {
        let (out, v) = fetch(url, &["--ask", "allow"]);
        assert_ne!(out.status.code(), Some(0), "{url}: {v}");
        assert!(
            !v["output"].as_str().unwrap_or("").contains("root:"),
            "{url}: {v}"
        );
    }
}

// The host's own addresses. Each attack runs without a terminal and without `--ask`, the
// way a model's fetch runs headless, and the server counts what reached it.

#[test]
fn attack_the_metadata_path_on_loopback_under_the_default_and_laptop_profiles() {
    for profile in ["default", "laptop"] {
        let s = site(None);
        let url = format!("http://127.0.0.1:{}/latest/meta-data", s.port);
        let (out, v) = fetch_in(&url, &["--profile", profile], Configs::default());
        let err = refusal(&out, &v, profile);
        assert!(err.contains("127.0.0.1 (loopback)"), "{profile}: {err}");
        assert_eq!(
            s.hits.load(Ordering::SeqCst),
            0,
            "{profile}: the loopback server was reached"
        );
    }
}

#[test]
fn control_the_users_own_exact_rule_opens_loopback_under_both_profiles() {
    for profile in ["default", "laptop"] {
        let s = site(None);
        let url = format!("http://127.0.0.1:{}/latest/meta-data", s.port);
        let (out, v) = fetch(&url, &["--profile", profile]);
        assert_eq!(out.status.code(), Some(0), "{profile}: {v}");
        assert!(
            v["output"].as_str().unwrap().contains("Secret plans"),
            "{v}"
        );
        assert_eq!(s.hits.load(Ordering::SeqCst), 1, "{profile}");
    }
    // The same rule in a file given with --config.
    let s = site(None);
    let cfg = config(USER_OPENS_LOOPBACK);
    let (out, v) = fetch_in(
        &format!("http://127.0.0.1:{}/page", s.port),
        &["--config", cfg.path().to_str().unwrap()],
        Configs::default(),
    );
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(s.hits.load(Ordering::SeqCst), 1);
}

#[test]
fn attack_every_spelling_and_name_of_loopback_is_refused() {
    let s = site(None);
    let s6 = site_on("::1", None);
    let p = s.port;
    let urls = [
        format!("http://localhost:{p}/latest/meta-data"),
        format!("http://LocalHost:{p}/latest/meta-data"),
        format!("http://localhost.:{p}/latest/meta-data"),
        format!("http://0x7f000001:{p}/latest/meta-data"),
        format!("http://2130706433:{p}/latest/meta-data"),
        format!("http://0177.0.0.1:{p}/latest/meta-data"),
        format!("http://127.1:{p}/latest/meta-data"),
        format!("http://[::ffff:127.0.0.1]:{p}/latest/meta-data"),
        format!("http://[::ffff:7f00:1]:{p}/latest/meta-data"),
        format!("http://0.0.0.0:{p}/latest/meta-data"),
        format!("http://[::1]:{}/latest/meta-data", s6.port),
        format!("http://[0:0:0:0:0:0:0:1]:{}/latest/meta-data", s6.port),
    ];
    for url in &urls {
        let (out, v) = fetch_in(url, &[], Configs::default());
        assert_eq!(out.status.code(), Some(1), "{url}: {v}");
        let err = v["error"].as_str().unwrap_or_default();
        // `localhost.` may not resolve at all where the hosts file has no such name;
        // either way nothing connects.
        assert!(
            err.contains("webfetch refused") || err.contains("does not resolve"),
            "{url}: {err}"
        );
    }
    assert_eq!(s.hits.load(Ordering::SeqCst), 0, "127.0.0.1 was reached");
    assert_eq!(s6.hits.load(Ordering::SeqCst), 0, "::1 was reached");
}

#[test]
fn attack_a_redirect_from_an_allowed_server_to_loopback_is_refused() {
    // The user opened 127.0.0.1; 127.0.0.2 and ::1 are loopback too, and not opened.
    let inner = site_on("127.0.0.2", None);
    let inner6 = site_on("::1", None);
    for to in [
        format!("http://127.0.0.2:{}/latest/meta-data", inner.port),
        format!("http://[::1]:{}/latest/meta-data", inner6.port),
        format!("http://[::ffff:127.0.0.2]:{}/latest/meta-data", inner.port),
        "http://169.254.169.254/latest/meta-data".to_string(),
    ] {
        let outer = site(Some(to.clone()));
        let (out, v) = fetch(&format!("http://127.0.0.1:{}/away", outer.port), &[]);
        refusal(&out, &v, &to);
        assert_eq!(
            outer.hits.load(Ordering::SeqCst),
            1,
            "control: the allowed server was reached"
        );
    }
    assert_eq!(
        inner.hits.load(Ordering::SeqCst),
        0,
        "127.0.0.2 was reached"
    );
    assert_eq!(inner6.hits.load(Ordering::SeqCst), 0, "::1 was reached");
}

#[test]
fn attack_a_repositorys_config_cannot_open_loopback() {
    let s = site(None);
    let url = format!("http://127.0.0.1:{}/latest/meta-data", s.port);
    let project = "[permission.network]\n\"127.0.0.1\" = \"allow\"\n\"localhost\" = \"allow\"\n";
    for u in [url.clone(), url.replace("127.0.0.1", "localhost")] {
        // Untrusted, its allow loosens the built-in `network` ask and is left out at once,
        // by name.
        let (out, v) = fetch_in(
            &u,
            &[],
            Configs {
                project: Some(project),
                ..Configs::default()
            },
        );
        refusal(&out, &v, &u);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains("ignored network \"127.0.0.1\" = \"allow\""),
            "{u}: {said}"
        );
        // Trusted, it still cannot open this machine's private addresses.
        let (out, v) = fetch_in(
            &u,
            &[],
            Configs {
                project: Some(project),
                trusted: true,
                ..Configs::default()
            },
        );
        let err = refusal(&out, &v, &u);
        assert!(
            err.contains(".runner/config.toml does not count"),
            "{u}: the refusal says why the repository's rule did not open it: {err}"
        );
    }
    assert_eq!(s.hits.load(Ordering::SeqCst), 0);
}

/// A company proxy on loopback, named by `localhost` as `HTTP_PROXY` names it, and a
/// loopback-only service beside it. The proxy's own address is open only as the proxy,
/// at its port: its name does not open every port on it.
struct ProxyNamedLocalhost {
    proxy: common::upstream::UpstreamProxy,
    url: String,
}

fn proxy_named_localhost() -> ProxyNamedLocalhost {
    let proxy = common::upstream::UpstreamProxy::start("corp", "proxy-pass");
    let url = format!("http://corp:proxy-pass@localhost:{}", proxy.port);
    ProxyNamedLocalhost { proxy, url }
}

#[test]
fn attack_the_upstream_proxys_name_does_not_open_other_ports_on_its_host() {
    let p = proxy_named_localhost();
    let service = site(None);
    let target = format!("http://localhost:{}/latest/meta-data", service.port);
    // Direct, as no_proxy says: the name is the proxy's, the port is not.
    let (out, v) = fetch_env(
        &target,
        &[],
        Configs::default(),
        &[("HTTP_PROXY", &p.url), ("NO_PROXY", "localhost")],
    );
    let err = refusal(&out, &v, "direct to the proxy's host");
    assert!(err.contains("localhost leads to"), "{err}");
    // Through the proxy, which would fetch it from its own loopback.
    let (out, v) = fetch_env(&target, &[], Configs::default(), &[("HTTP_PROXY", &p.url)]);
    let err = refusal(&out, &v, "through the proxy to its own host");
    assert!(err.contains("localhost leads to"), "{err}");
    // The proxy's own port, as a site rather than as the proxy.
    let at_proxy = format!("http://localhost:{}/", p.proxy.port);
    let (out, v) = fetch_env(
        &at_proxy,
        &[],
        Configs::default(),
        &[("HTTP_PROXY", &p.url), ("NO_PROXY", "localhost")],
    );
    refusal(&out, &v, "the proxy's port as a site");
    assert_eq!(
        service.hits.load(Ordering::SeqCst),
        0,
        "the loopback service was reached"
    );
    assert!(p.proxy.passed().is_empty(), "{:?}", p.proxy.passed());
}

#[test]
fn control_requests_through_the_proxy_named_localhost_still_work() {
    let p = proxy_named_localhost();
    // A server the user's own config opens, reached through the proxy.
    let opened = site_on("127.0.0.2", None);
    let user = "[permission.network]\n\"127.0.0.2\" = \"allow\"\n";
    let (out, v) = fetch_env(
        &format!("http://127.0.0.2:{}/page", opened.port),
        &[],
        Configs {
            user: Some(user),
            ..Configs::default()
        },
        &[("HTTP_PROXY", &p.url), ("NO_PROXY", "localhost")],
    );
    assert_eq!(out.status.code(), Some(0), "{v} {out:?}");
    assert!(
        v["output"].as_str().unwrap().contains("Secret plans"),
        "{v}"
    );
    assert_eq!(opened.hits.load(Ordering::SeqCst), 1);
    let passed = p.proxy.passed();
    assert!(
        passed.len() == 1
            && passed[0].authorized
            && passed[0].line == format!("GET http://127.0.0.2:{}/page HTTP/1.1", opened.port),
        "{passed:?}"
    );
}
