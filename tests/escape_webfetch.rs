//! `webfetch` is a way out of the sandbox by design: it runs on the host, where the
//! network is. These attacks use it to reach what a profile or a rule keeps closed, and
//! must fail; the controls next to them must succeed. Each is the real binary against a
//! real HTTP server on loopback, which counts the requests that reach it: an attack that
//! "fails" after the request was sent has already leaked.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

/// A server answering `/page` with HTML, `/away` with a redirect to `target`, counting hits.
struct Site {
    port: u16,
    hits: Arc<AtomicUsize>,
}

fn site(redirect_to: Option<String>) -> Site {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
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

fn fetch(url: &str, extra: &[&str]) -> (Output, Value) {
    let tmp = tempfile::tempdir().unwrap();
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
