//! Requests judged by method and path, and secrets that never enter the sandbox, with
//! real parts: a git smart-HTTP server (`git http-backend` behind a TLS server this test
//! starts, with a certificate from a test authority named in `[network]
//! ca_certificates`, and Basic auth that wants the token) on the host's loopback, and
//! `git`, `curl` and Python inside landlock and docker, through the allow-list proxy.
//!
//! Each origin writes down every request head it gets, so a request that must never
//! reach it (a push the rules refuse, a placeholder sent to the wrong host, a smuggled
//! request) shows even if the command inside lied about it. Every attack sits next to a
//! control that goes through.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use base64::Engine;

use common::Backend;

/// The token the git server wants. Each run makes its own; it must never show inside.
fn real_token() -> String {
    let mut bytes = [0u8; 12];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .unwrap();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("realtoken{hex}")
}

/// A test authority's certificate (PEM) and a server configuration for `127.0.0.1` and
/// `localhost` signed by it.
fn authority() -> (String, Arc<rustls::ServerConfig>) {
    runner_http::install_tls();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(
        rcgen::DnType::CommonName,
        "runner inspection test authority",
    );
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    (ca.pem(), Arc::new(config))
}

/// What an origin does with a request.
#[derive(Clone)]
enum Serves {
    /// `git http-backend` over the bare repositories under this folder, behind Basic auth
    /// wanting this password.
    Git(PathBuf, String),
    /// `hello PATH`, and `/bytes/N`: N bytes.
    Plain,
}

/// An HTTPS origin on the host's loopback.
struct Origin {
    port: u16,
    /// Each request head's first line and its Authorization, in order.
    seen: Arc<Mutex<Vec<String>>>,
}

impl Origin {
    fn start(config: Arc<rustls::ServerConfig>, serves: Serves) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (config, serves, log) = (config.clone(), serves.clone(), log.clone());
                std::thread::spawn(move || {
                    // Nagle's wait would stand between a small answer and its client.
                    let _ = stream.set_nodelay(true);
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(conn, stream);
                    while serve_one(&mut tls, &serves, &log) {}
                });
            }
        });
        Origin { port, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// One request on a kept connection; false when the connection is over.
fn serve_one(tls: &mut impl ReadWrite, serves: &Serves, log: &Mutex<Vec<String>>) -> bool {
    let mut reader = BufReader::new(&mut *tls);
    let mut line = String::new();
    if reader.read_line(&mut line).map_or(true, |n| n == 0) {
        return false;
    }
    let mut headers: HashMap<String, String> = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).map_or(true, |n| n == 0) {
            return false;
        }
        if h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let body = match read_body(&mut reader, &headers) {
        Some(b) => b,
        None => return false,
    };
    drop(reader);
    let auth = headers.get("authorization").cloned().unwrap_or("-".into());
    log.lock()
        .unwrap()
        .push(format!("{} auth={auth}", line.trim_end()));
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
    if matches!(serves, Serves::Plain) && target.starts_with("/echo") {
        return echo(tls, target, &auth);
    }
    let (status, extra, out) = match serves {
        Serves::Plain => match target.strip_prefix("/bytes/") {
            Some(n) => (200, String::new(), vec![b'x'; n.parse().unwrap_or(0)]),
            None => (200, String::new(), format!("hello {target}\n").into_bytes()),
        },
        Serves::Git(root, password) => {
            let want = format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("git:{password}"))
            );
            if auth != want {
                let head = "WWW-Authenticate: Basic realm=\"git\"\r\n".to_string();
                (401, head, b"wrong or no credentials\n".to_vec())
            } else {
                http_backend(root, method, target, &headers, &body)
            }
        }
    };
    let mut answer = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n{extra}\r\n",
        out.len()
    )
    .into_bytes();
    answer.extend_from_slice(&out);
    tls.write_all(&answer).is_ok() && tls.flush().is_ok()
}

/// A server that sends back what it got: the `Authorization` header in a header of its
/// own and in its body, the query in its body and in a `Location`. `/echo/chunked` sends
/// the body in flushed chunks of 5 bytes (a value arrives split); `/echo/gzip` says its
/// body is compressed whatever was asked for.
fn echo(tls: &mut impl ReadWrite, target: &str, auth: &str) -> bool {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let body = format!("auth={auth}\nquery={query}\n");
    let head = format!("HTTP/1.1 200 X\r\nX-Echo: {auth}\r\nLocation: /there?{query}\r\n");
    let framed = match path {
        "/echo/chunked" => {
            let mut ok = tls
                .write_all(format!("{head}Transfer-Encoding: chunked\r\n\r\n").as_bytes())
                .is_ok();
            for piece in body.as_bytes().chunks(5) {
                let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
                chunk.extend_from_slice(piece);
                chunk.extend_from_slice(b"\r\n");
                ok &= tls.write_all(&chunk).is_ok() && tls.flush().is_ok();
            }
            return ok && tls.write_all(b"0\r\n\r\n").is_ok() && tls.flush().is_ok();
        }
        "/echo/gzip" => "Content-Encoding: gzip\r\n",
        _ => "",
    };
    let answer = format!("{head}{framed}Content-Length: {}\r\n\r\n{body}", body.len());
    tls.write_all(answer.as_bytes()).is_ok() && tls.flush().is_ok()
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// A request's body by its Content-Length or chunks.
fn read_body(reader: &mut impl BufRead, headers: &HashMap<String, String>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0u8; n + 2];
            reader.read_exact(&mut chunk).ok()?;
            if n == 0 {
                return Some(body);
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    let n: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    body.resize(n, 0);
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

/// `git http-backend` as a CGI program: the status, the headers it sent, the body.
fn http_backend(
    root: &Path,
    method: &str,
    target: &str,
    headers: &HashMap<String, String>,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut cmd = Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REMOTE_USER", "git")
        .env("REQUEST_METHOD", method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_LENGTH", body.len().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (k, v) in [
        ("content-type", "CONTENT_TYPE"),
        ("content-encoding", "HTTP_CONTENT_ENCODING"),
        ("git-protocol", "GIT_PROTOCOL"),
    ] {
        if let Some(value) = headers.get(k) {
            cmd.env(v, value);
        }
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let body = body.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let out = child.wait_with_output().unwrap();
    let _ = feeder.join();
    let text = out.stdout;
    let split = text
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| text.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((end, sep)) = split else {
        return (500, String::new(), text);
    };
    let head = String::from_utf8_lossy(&text[..end]).to_string();
    let mut status = 200;
    let mut extra = String::new();
    for l in head.lines() {
        match l.split_once(':') {
            Some((k, v)) if k.eq_ignore_ascii_case("status") => {
                status = v.trim()[..3].parse().unwrap_or(500);
            }
            Some(_) => extra.push_str(&format!("{}\r\n", l.trim_end())),
            None => {}
        }
    }
    (status, extra, text[end + sep..].to_vec())
}

/// Bare repositories `me/tool.git` (one commit on `main`) and `other/repo.git`, pushable.
fn repositories(root: &Path) {
    for repo in ["me/tool.git", "other/repo.git"] {
        let dir = root.join(repo);
        std::fs::create_dir_all(&dir).unwrap();
        common::git(&dir, &["init", "-q", "--bare", "-b", "main"]);
        common::git(&dir, &["config", "http.receivepack", "true"]);
    }
    let seed = root.join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    common::git(&seed, &["init", "-q", "-b", "main"]);
    std::fs::write(seed.join("README"), "tool\n").unwrap();
    common::git(&seed, &["add", "README"]);
    common::git(&seed, &["commit", "-q", "-m", "first"]);
    let tool = root.join("me/tool.git");
    common::git(&seed, &["push", "-q", tool.to_str().unwrap(), "main"]);
    common::git(&tool, &["update-server-info"]);
}

/// The test's world: the git origin, a second origin, a config naming the test authority,
/// the rules and the secret.
struct World {
    s: common::allowlist::Setup,
    git: Origin,
    other: Origin,
    token: String,
}

const RULES: &str = r#"[permission.network]
"*" = "deny"
"127.0.0.1" = "allow"
"localhost" = "allow"

[permission.http]
"* 127.0.0.1/*" = "deny"
"GET 127.0.0.1/*" = "allow"
"* 127.0.0.1/me/tool.git/*" = "allow"
"GET localhost/*" = "allow"

[network]
ca_certificates = ["test-ca.pem"]

[network.secrets.GIT_TOKEN]
hosts = ["127.0.0.1"]
"#;

fn world() -> World {
    let s = common::allowlist::setup();
    let (ca, config) = authority();
    let token = real_token();
    let repos = s.wt.parent().unwrap().join("repos");
    repositories(&repos);
    std::fs::write(s.config.with_file_name("test-ca.pem"), ca).unwrap();
    std::fs::write(&s.config, RULES).unwrap();
    std::fs::write(s.wt.join("attack.py"), ATTACK_PY).unwrap();
    common::engine::hand_over(s.wt.parent().unwrap());
    World {
        git: Origin::start(config.clone(), Serves::Git(repos, token.clone())),
        other: Origin::start(config, Serves::Plain),
        s,
        token,
    }
}

/// Raw requests down one tunnel the client opens itself: `CONNECT`, TLS to the host with
/// the sandbox's trust, then each request in turn, printing each answer's status line.
const ATTACK_PY: &str = r#"
import os, socket, ssl, sys
host, port = sys.argv[1], int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
t = ctx.wrap_socket(s, server_hostname=host)
def answer():
    data = b""
    while b"\r\n\r\n" not in data:
        more = t.recv(65536)
        if not more:
            return data
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length, chunked = 0, False
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
        if k.strip().lower() == b"transfer-encoding" and b"chunked" in v.lower():
            chunked = True
    while chunked and not body.endswith(b"0\r\n\r\n"):
        more = t.recv(65536)
        if not more:
            break
        body += more
    while len(body) < length:
        more = t.recv(65536)
        if not more:
            break
        body += more
    return head
for raw in sys.argv[3:]:
    raw = raw.encode().decode("unicode_escape").replace("TOKEN", os.environ.get("GIT_TOKEN", "")).encode()
    try:
        t.sendall(raw)
        got = answer()
    except OSError as e:
        got = str(e).encode()
    first = got.split(b"\r\n")[0].decode(errors="replace")
    print(f"ANSWER {first}")
    if not got:
        break
"#;

/// `runner tool script` of one bash call per command, in one session, with the token in
/// runner's environment: the output.
fn script(w: &World, backend: Backend, commands: &[String]) -> Output {
    script_with(w, backend, commands, &[])
}

/// [`script`], with more variables in runner's environment.
fn script_with(w: &World, backend: Backend, commands: &[String], env: &[(&str, String)]) -> Output {
    let lines: Vec<String> = commands
        .iter()
        .map(|c| {
            // The test's servers are on the host's loopback: through the proxy, not `no_proxy`.
            let c = format!("export no_proxy= NO_PROXY=; {c}");
            let args =
                serde_json::json!({"command": c, "description": "inspect", "timeout": 120000});
            format!("{{\"tool\": \"bash\", \"args\": {args}}}")
        })
        .collect();
    let file = w.s.wt.parent().unwrap().join("calls.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let sandbox = match backend {
        Backend::Docker => {
            common::engine::docker();
            "docker"
        }
        _ => "landlock",
    };
    let mut c = common::allowlist::runner(
        &w.s,
        &[
            "tool",
            "script",
            file.to_str().unwrap(),
            "--network",
            "allowlist",
            "--sandbox",
            sandbox,
            "--ask",
            "deny",
            "--config",
            w.s.config.to_str().unwrap(),
        ],
    );
    c.env("GIT_TOKEN", &w.token);
    for (k, v) in env {
        c.env(k, v);
    }
    if backend == Backend::Docker {
        common::engine::cli(&mut c);
    }
    c.output().unwrap()
}

/// What the commands printed (each call's `output`), then runner's standard error.
fn text(out: &Output) -> String {
    let outputs: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| match serde_json::from_str::<serde_json::Value>(l) {
            Ok(v) => v["output"].as_str().unwrap_or(l).to_string(),
            Err(_) => l.to_string(),
        })
        .collect();
    format!(
        "{}\n--- stderr ---\n{}",
        outputs.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Clone and push with the placeholder; a push to another repository refused by its rule;
/// the token nowhere inside; the placeholder refused on the way to another host.
fn git_and_secrets(backend: Backend) {
    let w = world();
    let (g, o) = (w.git.port, w.other.port);
    let url = format!("https://git:$GIT_TOKEN@127.0.0.1:{g}");
    let commands = vec![
        format!(
            "git clone -q {url}/me/tool.git tool 2>&1 && echo CLONED && cat tool/README"
        ),
        "cd tool && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m inside && git push -q origin HEAD:main 2>&1 && echo PUSHED".into(),
        format!("cd tool && git push -q {url}/other/repo.git HEAD:main 2>&1; echo PUSH-ELSEWHERE $?"),
        format!(
            "echo PLACEHOLDER $GIT_TOKEN; env | grep -c {t}; grep -c {t} /proc/self/environ /proc/$$/environ; grep -rlI {t} . $HOME /tmp 2>/dev/null | head -3; echo SEARCHED",
            t = w.token
        ),
        format!("curl -sS -H \"Authorization: Bearer $GIT_TOKEN\" https://localhost:{o}/bearer 2>&1; echo; echo CURL-BEARER $?"),
        format!("curl -sS https://localhost:{o}/plain 2>&1; echo CURL-PLAIN $?"),
    ];
    let out = script(&w, backend, &commands);
    let all = text(&out);
    assert!(
        all.contains("CLONED") && all.contains("tool\n"),
        "{backend:?}: clone\n{all}"
    );
    assert!(
        all.contains("PUSHED"),
        "{backend:?}: push to the allowed repository\n{all}"
    );
    assert!(
        all.contains("PUSH-ELSEWHERE 1") || all.contains("PUSH-ELSEWHERE 128"),
        "{backend:?}: push elsewhere fails\n{all}"
    );
    assert!(
        all.contains("http \\\"* 127.0.0.1/*\\\" = \\\"deny\\\"")
            || all.contains("http \"* 127.0.0.1/*\" = \"deny\""),
        "{backend:?}: the refusal names the rule\n{all}"
    );
    assert!(
        all.contains("PLACEHOLDER runner-secret-GIT_TOKEN-"),
        "{all}"
    );
    assert!(all.contains("SEARCHED"), "{all}");
    assert!(
        !all.contains(&w.token),
        "{backend:?}: the token never shows\n{all}"
    );
    assert!(
        all.contains("CURL-PLAIN 0") && all.contains("hello /plain"),
        "{all}"
    );
    assert!(
        all.contains("secret GIT_TOKEN"),
        "{backend:?}: the refusal names the secret\n{all}"
    );
    let seen = w.git.seen();
    let pushes: Vec<&String> = seen.iter().filter(|l| l.starts_with("POST")).collect();
    assert!(
        pushes
            .iter()
            .any(|l| l.contains("/me/tool.git/git-receive-pack")),
        "{seen:#?}"
    );
    assert!(
        !seen.iter().any(|l| l.starts_with("POST /other/repo.git")),
        "{backend:?}: the refused push never reached the server: {seen:#?}"
    );
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("git:{}", w.token));
    assert!(
        seen.iter()
            .any(|l| l.ends_with(&format!("auth=Basic {basic}"))),
        "{backend:?}: the server got the real token: {seen:#?}"
    );
    let other = w.other.seen();
    assert_eq!(other.len(), 1, "{backend:?}: only the control: {other:#?}");
    assert!(other[0].starts_with("GET /plain"), "{other:#?}");
    // The records name the request and the secret.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("network: deny POST 127.0.0.1/other/repo.git/git-receive-pack"),
        "{err}"
    );
    assert!(err.contains("[secrets: GIT_TOKEN]"), "{err}");
}

#[test]
fn git_through_an_inspected_host_with_a_secret_on_landlock() {
    git_and_secrets(Backend::Landlock);
}

#[test]
fn git_through_an_inspected_host_with_a_secret_on_docker() {
    git_and_secrets(Backend::Docker);
}

/// Behind a company proxy (`HTTPS_PROXY` with a password in runner's environment), the
/// proxy's own connections to an inspected host go through it too: a clone with the
/// placeholder token works, and every connection the upstream proxy saw was a `CONNECT`
/// to the git server with the proxy's credentials.
#[test]
fn an_inspected_host_is_reached_through_the_upstream_proxy() {
    let w = world();
    let upstream = common::upstream::UpstreamProxy::start("corp", "proxy-password");
    let g = w.git.port;
    let commands = vec![format!(
        "git clone -q https://git:$GIT_TOKEN@127.0.0.1:{g}/me/tool.git tool 2>&1 && echo CLONED"
    )];
    let env = [
        ("HTTPS_PROXY", upstream.url()),
        ("NO_PROXY", String::new()),
        ("no_proxy", String::new()),
    ];
    let out = script_with(&w, Backend::Landlock, &commands, &env);
    let all = text(&out);
    assert!(all.contains("CLONED"), "{all}");
    let passed = upstream.passed();
    assert!(
        !passed.is_empty(),
        "nothing went through the upstream proxy\n{all}"
    );
    for p in &passed {
        assert_eq!(
            p.line,
            format!("CONNECT 127.0.0.1:{g} HTTP/1.1"),
            "{passed:#?}"
        );
        assert!(p.authorized, "{passed:#?}");
    }
    assert!(
        w.git.seen().iter().any(|l| l.contains("git-upload-pack")),
        "{:#?}",
        w.git.seen()
    );
    assert!(
        !all.contains("proxy-password") && !all.contains(&w.token),
        "{all}"
    );
}

/// Attacks on one inspected connection from inside, each next to its control.
fn attacks(backend: Backend) {
    let w = world();
    let (g, o) = (w.git.port, w.other.port);
    let plain = common::outside::Outside::start(1000);
    let p = plain.port;
    let host = format!("Host: 127.0.0.1:{g}");
    let attack = |h: &str, p: u16, reqs: &[String]| {
        let quoted: Vec<String> = reqs.iter().map(|r| format!("'{r}'")).collect();
        format!("python3 attack.py {h} {p} {}", quoted.join(" "))
    };
    let commands = vec![
        // A second request with another Host down the same connection.
        attack(
            "127.0.0.1",
            g,
            &[
                format!("GET /me/tool.git/info/refs?a=1 HTTP/1.1\\r\\n{host}\\r\\n\\r\\n"),
                format!("GET /second-host HTTP/1.1\\r\\nHost: localhost:{o}\\r\\n\\r\\n"),
            ],
        ),
        // Conflicting framing hiding a push in the body; then the same without it.
        attack(
            "127.0.0.1",
            g,
            &[format!(
                "POST /me/tool.git/x HTTP/1.1\\r\\n{host}\\r\\nContent-Length: 60\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\nPOST /other/repo.git/git-receive-pack HTTP/1.1\\r\\n{host}\\r\\n\\r\\n"
            )],
        ),
        attack(
            "127.0.0.1",
            g,
            &[format!(
                "POST /me/tool.git/framed HTTP/1.1\\r\\n{host}\\r\\nContent-Length: 2\\r\\n\\r\\nok"
            )],
        ),
        // The placeholder hidden in a URL's query to another host; the control without.
        attack(
            "localhost",
            o,
            &[format!(
                "GET /q?token=TOKEN HTTP/1.1\\r\\nHost: localhost:{o}\\r\\n\\r\\n"
            )],
        ),
        attack(
            "localhost",
            o,
            &[format!(
                "GET /q?token=none HTTP/1.1\\r\\nHost: localhost:{o}\\r\\n\\r\\n"
            )],
        ),
        // Plain http:// to an inspected host: judged by method and path as inside TLS,
        // and a placeholder never goes over it (a secret goes only over TLS).
        format!("curl -sS -o /dev/null -w 'PLAIN-GET %{{http_code}}\\n' http://127.0.0.1:{p}/blob"),
        format!(
            "curl -sS -o /dev/null -w 'PLAIN-POST %{{http_code}}\\n' -d x http://127.0.0.1:{p}/blob"
        ),
        format!(
            "curl -sS -o /dev/null -w 'PLAIN-TOKEN %{{http_code}}\\n' -H \"Authorization: Bearer $GIT_TOKEN\" http://127.0.0.1:{p}/blob"
        ),
    ];
    let out = script(&w, backend, &commands);
    let all = text(&out);
    let answers: Vec<&str> = all.lines().filter(|l| l.starts_with("ANSWER")).collect();
    assert_eq!(answers.len(), 6, "{backend:?}\n{all}");
    assert!(
        answers[0].contains(" 401 "),
        "control: served ({answers:?})\n{all}"
    );
    assert!(
        answers[1].contains(" 403 "),
        "another Host: refused ({answers:?})"
    );
    assert!(
        answers[2].contains(" 400 "),
        "smuggling: refused ({answers:?})"
    );
    assert!(
        answers[3].contains(" 401 "),
        "control: framed POST served ({answers:?})"
    );
    assert!(
        answers[4].contains(" 403 "),
        "placeholder elsewhere: refused ({answers:?})"
    );
    assert!(
        answers[5].contains(" 200 "),
        "control: served ({answers:?})"
    );
    let seen = w.git.seen();
    assert_eq!(
        seen.len(),
        2,
        "{backend:?}: only the two controls: {seen:#?}"
    );
    assert!(
        !seen
            .iter()
            .any(|l| l.contains("other/repo") || l.contains("second-host"))
    );
    let other = w.other.seen();
    assert_eq!(other.len(), 1, "{backend:?}: only the control: {other:#?}");
    assert!(other[0].contains("token=none"), "{other:#?}");
    for (what, status) in [
        ("PLAIN-GET", 200),
        ("PLAIN-POST", 403),
        ("PLAIN-TOKEN", 403),
    ] {
        assert!(all.contains(&format!("{what} {status}")), "{what}\n{all}");
    }
    assert_eq!(
        plain.accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "{backend:?}: only the plain control reached the server\n{all}"
    );
    assert!(
        all.contains("network: deny POST 127.0.0.1/blob"),
        "{backend:?}: the refusal is recorded by request\n{all}"
    );
    assert!(!all.contains(&w.token), "{all}");
}

#[test]
fn attacks_on_an_inspected_connection_on_landlock() {
    attacks(Backend::Landlock);
}

#[test]
fn attacks_on_an_inspected_connection_on_docker() {
    attacks(Backend::Docker);
}

/// The rules of [`surfaces`]: `localhost` inspected (a rule denies its `/private/`, and the
/// secret goes there), `127.0.0.1` opened whole by a `network` rule and named by no `http`
/// rule, though it is the same server.
const SURFACE_RULES: &str = r#"[permission.network]
"*" = "deny"
"127.0.0.1" = "allow"
"localhost" = "allow"

[permission.http]
"* localhost/private/*" = "deny"
"GET localhost/hidden/*" = "deny"

[network]
ca_certificates = ["test-ca.pem"]

[network.secrets.GIT_TOKEN]
hosts = ["localhost"]
"#;

/// Raw bytes to the proxy, each answer's status lines printed on one line after a label.
const RAW_PY: &str = r#"
import socket, sys
label, raw = sys.argv[1], sys.argv[2].encode().decode("unicode_escape").encode()
s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
s.sendall(raw)
data = b""
try:
    while True:
        more = s.recv(65536)
        if not more:
            break
        data += more
except OSError:
    pass
lines = data.decode(errors="replace").split("\r\n")
statuses = [l for l in lines if l.startswith("HTTP/1.")]
print("RAW", label, " | ".join(statuses), "|", " ".join(l for l in lines if "upper case" in l))
"#;

/// Issue 38's surfaces, each attack beside a control that goes through: a path a server
/// reads as `/private/…` (an empty segment, `%2f`, `;`) over TLS and plain http; the
/// secret sent back by its host (in a header, a `Location`, a body, in chunks split
/// through the value, inside Basic credentials, and compressed); and a TLS tunnel to the
/// address of an inspected host whose `Host` names that host. Review 38: another spelling
/// of the address (`0x7f000001`, `127.1`, `2130706433`) is judged as the address (so
/// opened here, where the old code judged a name `"*"` denies), and a method not in
/// capitals is refused, inspected or plain, where `GET` and `PROPFIND` go on.
fn surfaces(backend: Backend) {
    let w = world();
    std::fs::write(&w.s.config, SURFACE_RULES).unwrap();
    std::fs::write(w.s.wt.join("raw.py"), RAW_PY).unwrap();
    let o = w.other.port;
    let plain = common::outside::Outside::start(1000);
    let p = plain.port;
    let code = |label: &str, args: &str| {
        format!("curl -sS --path-as-is -o /dev/null -w '{label} %{{http_code}}\\n' {args}")
    };
    let commands = vec![
        // §1: spellings a server serves as /private/secret.txt, and the plain ones.
        code(
            "SLASH",
            &format!("'https://localhost:{o}//private/secret.txt'"),
        ),
        code(
            "ENCODED",
            &format!("'https://localhost:{o}/%2fprivate/secret.txt'"),
        ),
        code(
            "SEMICOLON",
            &format!("'https://localhost:{o}/private;x=1/secret.txt'"),
        ),
        code(
            "PRIVATE",
            &format!("'https://localhost:{o}/private/secret.txt'"),
        ),
        code(
            "PUBLIC",
            &format!("'https://localhost:{o}/public/notes.txt'"),
        ),
        code(
            "PLAIN-SLASH",
            &format!("'http://localhost:{p}//private/blob'"),
        ),
        code("PLAIN-PUBLIC", &format!("'http://localhost:{p}/blob'")),
        // §2: the host the secret goes to sends it back.
        format!(
            "curl -sS -D - -H \"Authorization: Bearer $GIT_TOKEN\" \"https://localhost:{o}/echo?t=$GIT_TOKEN\"; echo ECHO $?"
        ),
        format!(
            "echo EXPECT $(printf 'git:%s' \"$GIT_TOKEN\" | base64 -w0); curl -sS -u \"git:$GIT_TOKEN\" https://localhost:{o}/echo/chunked; echo CHUNKED $?"
        ),
        code(
            "GZIP",
            &format!("-H \"Authorization: Bearer $GIT_TOKEN\" https://localhost:{o}/echo/gzip"),
        ),
        // §6d: TLS to the address (no SNI) naming the inspected host inside; the control
        // names the address.
        format!(
            "python3 attack.py 127.0.0.1 {o} 'GET /private/attack.txt HTTP/1.1\\r\\nHost: localhost:{o}\\r\\n\\r\\n'"
        ),
        format!(
            "python3 attack.py 127.0.0.1 {o} 'GET /private/control.txt HTTP/1.1\\r\\nHost: 127.0.0.1:{o}\\r\\n\\r\\n'"
        ),
        code(
            "ADDRESS",
            &format!("https://127.0.0.1:{o}/public/by-address"),
        ),
        // Another protocol than TLS to the address is still a tunnel (judged as before:
        // a plain request inside must name the address).
        code("TUNNEL-PLAIN", &format!("-p 'http://127.0.0.1:{p}/blob'")),
        // Review 38 hole 1: other spellings of 127.0.0.1, in a URL, a Host and a CONNECT.
        format!("python3 raw.py HEX 'GET http://0x7f000001:{p}/blob HTTP/1.1\\r\\n\\r\\n'"),
        format!("python3 raw.py SHORT 'GET http://127.1:{p}/blob HTTP/1.1\\r\\n\\r\\n'"),
        format!("python3 raw.py NUMBER 'GET /blob HTTP/1.1\\r\\nHost: 2130706433:{p}\\r\\n\\r\\n'"),
        format!(
            "python3 raw.py CONNECT-HEX 'CONNECT 0x7f000001:{p} HTTP/1.1\\r\\n\\r\\nGET /blob HTTP/1.1\\r\\nHost: 127.0.0.1:{p}\\r\\n\\r\\n'"
        ),
        // Hole 4: `get` plain and inspected; `GET` (PLAIN-PUBLIC, and below) and
        // `PROPFIND` are the controls, and `GET` on /hidden meets its rule.
        format!(
            "python3 raw.py LOWER 'get http://localhost:{p}/lower HTTP/1.1\\r\\nHost: localhost:{p}\\r\\n\\r\\n'"
        ),
        format!(
            "python3 attack.py localhost {o} 'get /hidden/lower.txt HTTP/1.1\\r\\nHost: localhost:{o}\\r\\n\\r\\n'"
        ),
        format!(
            "python3 attack.py localhost {o} 'PROPFIND /public/dav.txt HTTP/1.1\\r\\nHost: localhost:{o}\\r\\n\\r\\n' 'GET /hidden/upper.txt HTTP/1.1\\r\\nHost: localhost:{o}\\r\\n\\r\\n'"
        ),
    ];
    let out = script(&w, backend, &commands);
    let all = text(&out);
    for (what, status) in [
        ("SLASH", 400),
        ("ENCODED", 400),
        ("SEMICOLON", 400),
        ("PRIVATE", 403),
        ("PUBLIC", 200),
        ("PLAIN-SLASH", 400),
        ("PLAIN-PUBLIC", 200),
        ("GZIP", 502),
        ("ADDRESS", 200),
        ("TUNNEL-PLAIN", 200),
    ] {
        assert!(
            all.contains(&format!("{what} {status}")),
            "{backend:?}: {what} {status}\n{all}"
        );
    }
    assert!(
        all.contains("an empty segment"),
        "{backend:?}: the refusal says why\n{all}"
    );
    let answers: Vec<&str> = all.lines().filter(|l| l.starts_with("ANSWER")).collect();
    assert_eq!(answers.len(), 5, "{backend:?}\n{all}");
    assert!(
        answers[0].contains(" 403 "),
        "another Host over the address: {answers:?}"
    );
    assert!(answers[1].contains(" 200 "), "control: {answers:?}");
    assert!(answers[2].contains(" 400 "), "get, inspected: {answers:?}");
    assert!(answers[3].contains(" 200 "), "PROPFIND: {answers:?}");
    assert!(answers[4].contains(" 403 "), "GET /hidden: {answers:?}");
    let raw = |label: &str| {
        all.lines()
            .find_map(|l| l.strip_prefix(&format!("RAW {label} ")))
            .unwrap_or_else(|| panic!("{backend:?}: no {label}\n{all}"))
            .to_string()
    };
    for label in ["HEX", "SHORT", "NUMBER"] {
        let got = raw(label);
        assert!(
            got.starts_with("HTTP/1.1 200"),
            "{backend:?}: {label} {got}\n{all}"
        );
    }
    let tunnel = raw("CONNECT-HEX");
    assert_eq!(
        tunnel.matches(" 200").count(),
        2,
        "{backend:?}: {tunnel}\n{all}"
    );
    let lower = raw("LOWER");
    assert!(
        lower.starts_with("HTTP/1.1 400") && lower.contains("\"get\" is not all upper case"),
        "{backend:?}: {lower}\n{all}"
    );
    // The echo came back whole, with the placeholder where the value was.
    let placeholder = all
        .split("query=t=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{backend:?}: no echo\n{all}"));
    assert!(placeholder.starts_with("runner-secret-GIT_TOKEN-"), "{all}");
    for echoed in [
        format!("X-Echo: Bearer {placeholder}"),
        format!("Location: /there?t={placeholder}"),
        format!("auth=Bearer {placeholder}"),
        "ECHO 0".to_string(),
        "CHUNKED 0".to_string(),
    ] {
        assert!(all.contains(&echoed), "{backend:?}: {echoed}\n{all}");
    }
    let expected = all
        .lines()
        .find_map(|l| l.strip_prefix("EXPECT "))
        .unwrap_or_else(|| panic!("{all}"));
    assert!(
        all.contains(&format!("auth=Basic {expected}")),
        "{backend:?}: the Basic echo, split in chunks, as the sandbox sent it\n{all}"
    );
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("git:{}", w.token));
    assert!(
        !all.contains(&w.token) && !all.contains(&basic),
        "{backend:?}: the value never comes back\n{all}"
    );
    assert!(
        all.contains("[scrubbed from the answer: GIT_TOKEN]"),
        "{backend:?}: the record names the secret scrubbed\n{all}"
    );
    // What reached the server: the controls, the value in the echoes, none of the attacks.
    let seen = w.other.seen();
    let requested = |path: &str| seen.iter().filter(|l| l.starts_with(path)).count();
    assert_eq!(requested("GET /public/notes.txt "), 1, "{seen:#?}");
    assert_eq!(requested("GET /private/control.txt "), 1, "{seen:#?}");
    assert_eq!(requested("GET /public/by-address "), 1, "{seen:#?}");
    assert_eq!(requested("PROPFIND /public/dav.txt "), 1, "{seen:#?}");
    assert!(
        !seen.iter().any(|l| l.contains("/hidden/")),
        "{backend:?}: neither get nor GET reached /hidden: {seen:#?}"
    );
    assert!(
        !seen.iter().any(|l| l.contains("private/secret")
            || l.contains("private;")
            || l.contains("attack.txt")
            || l.starts_with("GET //")),
        "{backend:?}: no attack reached the server: {seen:#?}"
    );
    assert!(
        seen.iter()
            .any(|l| l.starts_with("GET /echo?t=")
                && l.ends_with(&format!("auth=Bearer {}", w.token))),
        "{backend:?}: the server got the real value: {seen:#?}"
    );
    assert_eq!(
        plain.accepted(),
        6,
        "{backend:?}: only the controls (two, and four spellings of the address) reached the plain server\n{all}"
    );
}

#[test]
fn surfaces_hold_on_landlock() {
    surfaces(Backend::Landlock);
}

#[test]
fn surfaces_hold_on_docker() {
    surfaces(Backend::Docker);
}

/// The added latency of an inspected request over a tunnelled one: 1 KiB and 10 MiB GETs
/// from inside landlock to a local TLS server, the same server named two ways
/// (`127.0.0.1` inspected by an `http` rule, `localhost` a tunnel), median of each.
/// `cargo test --release --test all network_inspect::latency -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: run it on its own, it prints the numbers"]
fn latency_of_an_inspected_request_over_a_tunnelled_one() {
    let w = world();
    let o = w.other.port;
    std::fs::write(
        &w.s.config,
        "[permission.network]\n\"127.0.0.1\" = \"allow\"\n\"localhost\" = \"allow\"\n[permission.http]\n\"GET 127.0.0.1/*\" = \"allow\"\n[network]\nca_certificates = [\"test-ca.pem\"]\n",
    )
    .unwrap();
    // Interleaved, so that the machine's load (other builds) falls on both alike; the
    // median of each.
    let runs = 31;
    let mut commands = Vec::new();
    for size in [1024, 10 << 20] {
        commands.push(format!(
            "for i in $(seq {runs}); do for host in 127.0.0.1 localhost; do echo \"$host $(curl -s -o /dev/null -w '%{{time_total}}' https://$host:{o}/bytes/{size})\"; done; done > times-{size}; for host in 127.0.0.1 localhost; do grep \"^$host \" times-{size} | cut -d' ' -f2 | sort -n | sed -n '{}p' | sed \"s/^/TIME $host {size} /\"; done",
            runs / 2 + 1
        ));
    }
    let out = script(&w, Backend::Landlock, &commands);
    let all = text(&out);
    let time = |host: &str, size: usize| -> f64 {
        all.lines()
            .find_map(|l| l.strip_prefix(&format!("TIME {host} {size} ")))
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or_else(|| panic!("no time for {host} {size}\n{all}"))
    };
    for size in [1024, 10 << 20] {
        let (inspected, tunnel) = (time("127.0.0.1", size), time("localhost", size));
        println!(
            "{size} B: inspected {:.2} ms, tunnelled {:.2} ms, added {:.2} ms, ratio {:.2}",
            inspected * 1e3,
            tunnel * 1e3,
            (inspected - tunnel) * 1e3,
            inspected / tunnel
        );
    }
    let requests = w.other.seen().len();
    assert_eq!(requests, 4 * runs, "{all}");
}
