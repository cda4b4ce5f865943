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

use crate::common;

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
    let tmp = tempfile::tempdir().unwrap();
    if let Some(text) = configs.user {
        let dir = tmp.path().join("config/runner");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.toml"), text).unwrap();
    }
    if let Some(text) = configs.project {
        std::fs::create_dir_all(tmp.path().join(".runner")).unwrap();
        std::fs::write(tmp.path().join(".runner/config.toml"), text).unwrap();
    }
    // A profile with a copy workspace (`untrusted`) leaves its copy mounted.
    let _mounts = common::CopyMounts(tmp.path().join("data"));
    let out = Command::new(env!("CARGO_BIN_EXE_runner"))
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
        let (out, v) = fetch_in(
            &u,
            &[],
            Configs {
                project: Some(project),
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
