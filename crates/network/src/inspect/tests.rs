//! The inspector end to end in one process: a client speaking TLS to it over an
//! in-process pipe, as the sandbox's bytes arrive, and a real TLS origin on loopback whose
//! certificate comes from a test authority the inspector is told to trust. The origin
//! writes down every request head it gets, so a request that should never reach it shows.

use std::sync::{Arc, Mutex};

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::Policy;
use runner_permission::rules::{Action, Layer, Rule};

struct Origin {
    port: u16,
    ca_file: tempfile::NamedTempFile,
    seen: Arc<Mutex<Vec<String>>>,
}

/// An HTTPS origin for `127.0.0.1` and `localhost` that answers each request with what
/// it saw (method, path, Authorization), keeping connections open.
async fn origin() -> Origin {
    runner_http::install_tls();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
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
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            // As servers do: without it, Nagle's wait for the ack of TLS 1.3's session
            // tickets holds a small answer back 40 ms.
            let _ = tcp.set_nodelay(true);
            let (acceptor, seen) = (acceptor.clone(), kept.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                // Each answer is flushed: TLS records a write could not send at once stay
                // in the session's buffer until the next write or flush, and the next
                // thing this server does is read.
                let mut buf = Vec::new();
                loop {
                    let Some(end) = read_head(&mut tls, &mut buf).await else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    buf.drain(..end);
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while buf.len() < length {
                        let mut chunk = [0u8; 4096];
                        match tls.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..length);
                    seen.lock().unwrap().push(head.clone());
                    let line = head.lines().next().unwrap_or_default().to_string();
                    let auth = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Authorization: "))
                        .unwrap_or("-")
                        .to_string();
                    // `/bytes/N`: N bytes, for the measurement.
                    let sized = line
                        .split(' ')
                        .nth(1)
                        .and_then(|t| t.strip_prefix("/bytes/"))
                        .and_then(|n| n.parse::<usize>().ok());
                    if let Some(n) = sized {
                        let mut answer =
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").into_bytes();
                        answer.resize(answer.len() + n, b'x');
                        if tls.write_all(&answer).await.is_err() || tls.flush().await.is_err() {
                            return;
                        }
                        continue;
                    }
                    let body = format!("seen {line} auth={auth}");
                    // `/back?Q`: a redirect carrying the query, and the body with a length.
                    let target = line.split(' ').nth(1).unwrap_or_default();
                    if let Some(query) = target.strip_prefix("/back?") {
                        let answer = format!(
                            "HTTP/1.1 302 Found\r\nLocation: /there?{query}\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if tls.write_all(answer.as_bytes()).await.is_err()
                            || tls.flush().await.is_err()
                        {
                            return;
                        }
                        continue;
                    }
                    // `/gzip`: compressed whatever was asked for.
                    if target == "/gzip" {
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if tls.write_all(answer.as_bytes()).await.is_err()
                            || tls.flush().await.is_err()
                        {
                            return;
                        }
                        continue;
                    }
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
                        body.len()
                    );
                    if tls.write_all(answer.as_bytes()).await.is_err() || tls.flush().await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    let mut ca_file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut ca_file, ca.pem().as_bytes()).unwrap();
    Origin {
        port,
        ca_file,
        seen,
    }
}

async fn read_head<S: tokio::io::AsyncRead + Unpin>(s: &mut S, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(end) = crate::request::head_end(buf) {
            return Some(end);
        }
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The proxy's shared state with `rules` (all `http` and `network`, the user's own), where
/// an ask is refused, and a sandbox client that goes nowhere (the inspector never uses it).
fn shared(rules: &[(&str, &str, Action)], inspection: Inspection) -> crate::Shared {
    let rules: Vec<Rule> = rules
        .iter()
        .enumerate()
        .map(|(i, (p, pat, a))| Rule::new(p, pat, *a, "test", i + 1).in_layer(Layer::User))
        .collect();
    let (a, _b) = tokio::io::duplex(64);
    let (r, w) = tokio::io::split(a);
    let client = runner_sandbox::SandboxClient::new(r, w, Arc::new(String::new));
    crate::Shared {
        client,
        target: 0,
        policy: Policy::without_asks(std::path::Path::new("/w"), rules, "nobody is there"),
        limits: Default::default(),
        own: Vec::new(),
        records: Mutex::new(crate::record::Log::new(100)),
        bytes: Default::default(),
        observer: Mutex::default(),
        pipes: Default::default(),
        inspection: None,
    }
    .with_inspection(inspection)
}

impl crate::Shared {
    fn with_inspection(mut self, inspection: Inspection) -> Self {
        self.inspection = Some(Arc::new(inspection));
        self
    }
}

/// A TLS client trusting the session authority, over a pipe to the inspector for `host`.
async fn client(
    shared: &Arc<crate::Shared>,
    host: &'static str,
    port: u16,
) -> tokio_rustls::client::TlsStream<tokio::io::DuplexStream> {
    let inspection = shared.inspection.clone().unwrap();
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    roots
        .add(
            rustls::pki_types::CertificateDer::from_pem_slice(inspection.ca_pem().as_bytes())
                .unwrap(),
        )
        .unwrap();
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Offered h2 first, it gets HTTP/1.1: the only protocol the inspector reads.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let s = shared.clone();
    tokio::spawn(async move {
        let upstream = Upstream {
            host,
            port,
            addrs: vec![([127, 0, 0, 1], port).into()],
            via: None,
            first: None,
            timeout: std::time::Duration::from_secs(5),
        };
        serve(&s, &inspection, theirs, upstream).await;
    });
    let name = rustls::pki_types::ServerName::try_from(host).unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, ours)
        .await
        .expect("the session authority's certificate verifies")
}

/// Sends `request` and reads until the connection ends or `responses` answers arrived.
async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    request: &str,
) -> String {
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(std::time::Duration::from_millis(1500), s.read(&mut chunk));
        match read.await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&chunk[..n]),
            _ => break,
        }
        if out.ends_with(b"0\r\n\r\n") {
            break;
        }
    }
    String::from_utf8_lossy(&out).to_string()
}

fn inspection(rules: &[(&str, &str, Action)], origin: &Origin, secrets: Secrets) -> Inspection {
    let rules: Vec<Rule> = rules
        .iter()
        .map(|(p, pat, a)| Rule::new(p, pat, *a, "test", 1))
        .collect();
    Inspection::new(&rules, secrets, &[origin.ca_file.path().to_path_buf()])
        .unwrap()
        .unwrap()
}

const RULES: &[(&str, &str, Action)] = &[
    ("http", "* 127.0.0.1/*", Action::Deny),
    ("http", "GET 127.0.0.1/*", Action::Allow),
    ("http", "* 127.0.0.1/me/tool.git/*", Action::Allow),
];

#[test]
fn rules_name_the_hosts_they_inspect() {
    let rules: Vec<Rule> = [
        "* api.github.com/*",
        "GET *.example.org/x",
        "*",
        "* *",
        "* */admin",
    ]
    .iter()
    .map(|p| Rule::new("http", p, Action::Allow, "t", 1))
    .chain([Rule::new("network", "pypi.org", Action::Allow, "t", 2)])
    .collect();
    assert_eq!(
        Inspection::hosts_of(&rules),
        vec!["*.example.org".to_string(), "api.github.com".to_string()]
    );
}

#[tokio::test]
async fn requests_are_judged_one_by_one_on_a_kept_connection() {
    let o = origin().await;
    let sh = Arc::new(shared(RULES, inspection(RULES, &o, Secrets::default())));
    let mut c = client(&sh, "127.0.0.1", o.port).await;
    assert_eq!(c.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let host = format!("Host: 127.0.0.1:{}\r\n", o.port);
    let a = exchange(&mut c, &format!("GET /a HTTP/1.1\r\n{host}\r\n")).await;
    assert!(a.contains("seen GET /a HTTP/1.1"), "{a}");
    let b = exchange(
        &mut c,
        &format!(
            "POST /me/tool.git/git-receive-pack HTTP/1.1\r\n{host}Content-Length: 3\r\n\r\nabc"
        ),
    )
    .await;
    assert!(b.contains("seen POST /me/tool.git/git-receive-pack"), "{b}");
    // A push elsewhere: refused with the rule named, and the origin never sees it.
    let denied = exchange(
        &mut c,
        &format!("POST /other.git/git-receive-pack HTTP/1.1\r\n{host}Content-Length: 3\r\n\r\nabc"),
    )
    .await;
    assert!(denied.starts_with("HTTP/1.1 403"), "{denied}");
    assert!(
        denied.contains("http \"* 127.0.0.1/*\" = \"deny\" (test #1)"),
        "{denied}"
    );
    let seen = o.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(!seen.iter().any(|h| h.contains("other.git")));
    let records = sh.log().records();
    let requests: Vec<_> = records.iter().filter_map(|r| r.request.clone()).collect();
    assert_eq!(
        requests,
        vec![
            "GET 127.0.0.1/a".to_string(),
            "POST 127.0.0.1/me/tool.git/git-receive-pack".into(),
            "POST 127.0.0.1/other.git/git-receive-pack".into()
        ]
    );
    assert_eq!(records.last().unwrap().decision, "deny");
}

#[tokio::test]
async fn another_host_or_smuggled_framing_never_reaches_the_origin() {
    let o = origin().await;
    let sh = Arc::new(shared(RULES, inspection(RULES, &o, Secrets::default())));
    let host = format!("Host: 127.0.0.1:{}\r\n", o.port);
    // Control: one good request on the connection goes through.
    let mut c = client(&sh, "127.0.0.1", o.port).await;
    let ok = exchange(&mut c, &format!("GET /ok HTTP/1.1\r\n{host}\r\n")).await;
    assert!(ok.contains("seen GET /ok"), "{ok}");
    // Then one for another host down the same connection.
    let other = exchange(&mut c, "GET /x HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    assert!(other.starts_with("HTTP/1.1 403"), "{other}");
    // Conflicting framing, with a request hidden in the body.
    let mut c = client(&sh, "127.0.0.1", o.port).await;
    let smuggled = exchange(
        &mut c,
        &format!(
            "GET /a HTTP/1.1\r\n{host}Content-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nPOST /other.git/x HTTP/1.1\r\n{host}\r\n"
        ),
    )
    .await;
    assert!(smuggled.starts_with("HTTP/1.1 400"), "{smuggled}");
    let seen = o.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "only the control: {seen:?}");
}

/// `get` is refused by name (Werkzeug would serve it as the `GET` no rule judged); `GET`
/// and `PROPFIND` go on to be judged. A refused absolute-form target is recorded as host
/// and path, not run together.
#[tokio::test]
async fn a_method_not_in_capitals_is_refused_and_records_name_host_and_path() {
    let o = origin().await;
    let sh = Arc::new(shared(RULES, inspection(RULES, &o, Secrets::default())));
    let host = format!("Host: 127.0.0.1:{}\r\n", o.port);
    let mut c = client(&sh, "127.0.0.1", o.port).await;
    let lower = exchange(&mut c, &format!("get /a HTTP/1.1\r\n{host}\r\n")).await;
    assert!(lower.starts_with("HTTP/1.1 400"), "{lower}");
    assert!(lower.contains("\"get\" is not all upper case"), "{lower}");
    let mut c = client(&sh, "127.0.0.1", o.port).await;
    let ok = exchange(&mut c, &format!("GET /a HTTP/1.1\r\n{host}\r\n")).await;
    assert!(ok.contains("seen GET /a"), "{ok}");
    let dav = exchange(
        &mut c,
        &format!("PROPFIND /me/tool.git/x HTTP/1.1\r\n{host}\r\n"),
    )
    .await;
    assert!(dav.contains("seen PROPFIND /me/tool.git/x"), "{dav}");
    let seen = o.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "only the controls: {seen:?}");
    let mut c = client(&sh, "127.0.0.1", o.port).await;
    let absolute = format!(
        "GET https://127.0.0.1:{}//private/x?q HTTP/1.1\r\n{host}\r\n",
        o.port
    );
    let refused = exchange(&mut c, &absolute).await;
    assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
    let records = sh.log().records();
    let requests: Vec<_> = records.iter().filter_map(|r| r.request.clone()).collect();
    assert!(
        requests.contains(&"get 127.0.0.1/a".to_string()),
        "{requests:?}"
    );
    assert_eq!(
        requests.last().unwrap(),
        "GET 127.0.0.1//private/x",
        "{requests:?}"
    );
}

#[tokio::test]
async fn a_secret_goes_in_only_for_its_host() {
    let o = origin().await;
    let secrets = Secrets::new(vec![(
        "TOKEN".into(),
        "s3cr3t-value".into(),
        vec!["127.0.0.1".into()],
    )])
    .unwrap();
    let placeholder = secrets.environment()[0].1.clone();
    // What no `http` rule names is allowed, as the built-in defaults say.
    let rules = [
        ("http", "*", Action::Allow),
        ("http", "* localhost/*", Action::Allow),
    ];
    let sh = Arc::new(shared(&rules, inspection(&rules, &o, secrets)));
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("git:{placeholder}"));
    let mut c = client(&sh, "127.0.0.1", o.port).await;
    let ok = exchange(
        &mut c,
        &format!(
            "GET /repo HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Basic {basic}\r\n\r\n",
            o.port
        ),
    )
    .await;
    let real = base64::engine::general_purpose::STANDARD.encode("git:s3cr3t-value");
    let seen = o.seen.lock().unwrap().clone();
    assert!(
        seen[0].contains(&format!("Authorization: Basic {real}")),
        "{seen:?}"
    );
    // The origin's echo of it comes back as the placeholder was sent.
    assert!(ok.contains(&format!("auth=Basic {basic}")), "{ok}");
    // The same placeholder to another host, in a header or hidden in the query: refused
    // by the secret's name, and that host hears nothing.
    for request in [
        format!(
            "GET / HTTP/1.1\r\nHost: localhost:{}\r\nAuthorization: Bearer {placeholder}\r\n\r\n",
            o.port
        ),
        format!(
            "GET /?q={placeholder} HTTP/1.1\r\nHost: localhost:{}\r\n\r\n",
            o.port
        ),
    ] {
        let mut c = client(&sh, "localhost", o.port).await;
        let refused = exchange(&mut c, &request).await;
        assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
        assert!(
            refused.contains("secret TOKEN") && !refused.contains("s3cr3t"),
            "{refused}"
        );
    }
    // Control: the other host without the placeholder is served.
    let mut c = client(&sh, "localhost", o.port).await;
    let fine = exchange(
        &mut c,
        &format!("GET /fine HTTP/1.1\r\nHost: localhost:{}\r\n\r\n", o.port),
    )
    .await;
    assert!(fine.contains("seen GET /fine"), "{fine}");
    let seen = o.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let records = sh.log().records();
    assert!(
        records
            .iter()
            .any(|r| r.secrets == vec!["TOKEN".to_string()] && r.decision == "allow")
    );
    assert!(
        records
            .iter()
            .any(|r| r.secrets == vec!["TOKEN".to_string()] && r.decision == "deny")
    );
    assert!(!format!("{records:?}").contains("s3cr3t"));
}

/// The inspector's own cost, without the sandbox's relay (which a tunnel and an inspected
/// connection share): a GET of 1 KiB and of 10 MiB on a new connection each time, straight
/// to the origin's TLS and through the inspector, interleaved, the median of each.
/// `cargo test -p runner-network --release inspector_cost -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it on its own, it prints the numbers"]
async fn inspector_cost() {
    let o = origin().await;
    let rules = [("http", "GET 127.0.0.1/*", Action::Allow)];
    let sh = Arc::new(shared(&rules, inspection(&rules, &o, Secrets::default())));
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    let origin_ca = std::fs::read(o.ca_file.path()).unwrap();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(&origin_ca).unwrap())
        .unwrap();
    let direct_config = Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    for size in [1024usize, 10 << 20] {
        let request = format!(
            "GET /bytes/{size} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            o.port
        );
        let (mut direct, mut inspected) = (Vec::new(), Vec::new());
        for _ in 0..21 {
            let start = std::time::Instant::now();
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", o.port))
                .await
                .unwrap();
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let mut c = tokio_rustls::TlsConnector::from(direct_config.clone())
                .connect(name, tcp)
                .await
                .unwrap();
            assert!(read_all(&mut c, &request).await >= size);
            direct.push(start.elapsed().as_secs_f64());
            let start = std::time::Instant::now();
            let mut c = client(&sh, "127.0.0.1", o.port).await;
            assert!(read_all(&mut c, &request).await >= size);
            inspected.push(start.elapsed().as_secs_f64());
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (d, i) = (median(&mut direct), median(&mut inspected));
        println!(
            "{size} B: direct {:.2} ms, through the inspector {:.2} ms, added {:.2} ms",
            d * 1e3,
            i * 1e3,
            (i - d) * 1e3
        );
    }
}

/// Sends `request` and reads the answer to its end; its length.
async fn read_all<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    request: &str,
) -> usize {
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut head_len = None;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = s.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        out.extend_from_slice(&chunk[..n]);
        if head_len.is_none() {
            head_len = crate::request::head_end(&out);
        }
        if let Some(h) = head_len {
            let text = String::from_utf8_lossy(&out[..h]).to_string();
            let length: usize = text
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if out.len() >= h + length {
                return length;
            }
        }
    }
    out.len()
}

/// A client that does not trust the session authority (its own bundle) fails its
/// handshake; the record says why and what to do, and the origin hears nothing.
#[tokio::test]
async fn a_client_that_refuses_the_session_authority_is_recorded_with_what_to_do() {
    let o = origin().await;
    let sh = Arc::new(shared(RULES, inspection(RULES, &o, Secrets::default())));
    // It trusts the origin's authority, as a client with a bundle of its own would.
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    let origin_ca = std::fs::read(o.ca_file.path()).unwrap();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(&origin_ca).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let s = sh.clone();
    let inspection = sh.inspection.clone().unwrap();
    let port = o.port;
    let served = tokio::spawn(async move {
        let upstream = Upstream {
            host: "127.0.0.1",
            port,
            addrs: vec![([127, 0, 0, 1], port).into()],
            via: None,
            first: None,
            timeout: std::time::Duration::from_secs(5),
        };
        serve(&s, &inspection, theirs, upstream).await;
    });
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let handshake = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, ours)
        .await;
    assert!(
        handshake.is_err(),
        "the session's certificate is not the origin's"
    );
    served.await.unwrap();
    let records = sh.log().records();
    assert_eq!(records.len(), 1, "{records:?}");
    let reason = records[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("$SSL_CERT_FILE"), "{reason}");
    assert!(o.seen.lock().unwrap().is_empty());
}

/// A secret's host that sends the value back (its echo of the header in a chunked body,
/// the query in a `Location` and a body with a length) gives the sandbox the placeholder
/// instead, re-framed so the lengths add up, and the record names the secret; a body the
/// proxy cannot read (compressed) is cut, not passed. Another host's answers are as sent.
#[tokio::test]
async fn a_secret_sent_back_is_scrubbed_from_the_answer() {
    let o = origin().await;
    let secrets = Secrets::new(vec![(
        "TOKEN".into(),
        "s3cr3t-value".into(),
        vec!["127.0.0.1".into()],
    )])
    .unwrap();
    let p = secrets.environment()[0].1.clone();
    let rules = [("http", "*", Action::Allow)];
    let sh = Arc::new(shared(&rules, inspection(&rules, &o, secrets)));
    let host = format!("Host: 127.0.0.1:{}\r\n", o.port);
    let mut c = client(&sh, "127.0.0.1", o.port).await;
    let echoed = exchange(
        &mut c,
        &format!("GET /echo HTTP/1.1\r\n{host}Authorization: Bearer {p}\r\nAccept-Encoding: gzip\r\nRange: bytes=0-3\r\n\r\n"),
    )
    .await;
    assert!(echoed.contains(&format!("auth=Bearer {p}")), "{echoed}");
    assert!(!echoed.contains("s3cr3t"), "{echoed}");
    let body = format!("seen GET /echo HTTP/1.1 auth=Bearer {p}");
    assert!(
        echoed.ends_with(&format!("\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n", body.len())),
        "re-chunked with the placeholder's length: {echoed}"
    );
    // The same connection goes on: a redirect carrying the query, its length re-framed.
    let back = exchange(&mut c, &format!("GET /back?t={p} HTTP/1.1\r\n{host}\r\n")).await;
    assert!(back.starts_with("HTTP/1.1 302"), "{back}");
    assert!(
        back.contains(&format!("Location: /there?t={p}\r\n")),
        "{back}"
    );
    assert!(back.contains("Transfer-Encoding: chunked") && !back.contains("Content-Length"));
    assert!(!back.contains("s3cr3t"), "{back}");
    let seen = o.seen.lock().unwrap().clone();
    assert!(
        seen[0].contains("Authorization: Bearer s3cr3t-value"),
        "{seen:?}"
    );
    assert!(seen[0].contains("Accept-Encoding: identity"), "{seen:?}");
    assert!(
        !seen[0].contains("Range") && !seen[0].contains("gzip"),
        "{seen:?}"
    );
    assert!(seen[1].starts_with("GET /back?t=s3cr3t-value "), "{seen:?}");
    // An HTTP/1.0 client cannot read chunks: its answer ends when the connection does.
    let mut c = client(&sh, "127.0.0.1", o.port).await;
    let old = exchange(&mut c, &format!("GET /back?t={p} HTTP/1.0\r\n{host}\r\n")).await;
    assert!(
        old.contains(&format!("Location: /there?t={p}\r\n")),
        "{old}"
    );
    assert!(
        old.contains("Connection: close\r\n\r\nseen GET /back"),
        "{old}"
    );
    assert!(
        !old.contains("Content-Length") && !old.contains("chunked"),
        "{old}"
    );
    assert!(!old.contains("s3cr3t"), "{old}");
    // Compressed anyway: cut with why, the value never sent.
    let mut c = client(&sh, "127.0.0.1", o.port).await;
    let gz = exchange(
        &mut c,
        &format!("GET /gzip HTTP/1.1\r\n{host}Authorization: Bearer {p}\r\n\r\n"),
    )
    .await;
    assert!(gz.starts_with("HTTP/1.1 502"), "{gz}");
    assert!(
        gz.contains("Content-Encoding: gzip") && !gz.contains("s3cr3t"),
        "{gz}"
    );
    let records = sh.log().records();
    let scrubbed: Vec<_> = records.iter().filter(|r| !r.scrubbed.is_empty()).collect();
    assert_eq!(scrubbed.len(), 3, "{records:?}");
    assert!(
        scrubbed[0]
            .line()
            .contains("[scrubbed from the answer: TOKEN]")
    );
    let cut = records
        .iter()
        .find(|r| r.request.as_deref() == Some("GET 127.0.0.1/gzip"))
        .unwrap();
    assert_eq!(cut.decision, "deny", "{cut:?}");
    // Control: a host no secret goes to gets its answers as sent.
    let mut c = client(&sh, "localhost", o.port).await;
    let plain = exchange(
        &mut c,
        &format!(
            "GET /back?t=s3cr3t-value HTTP/1.1\r\nHost: localhost:{}\r\n\r\n",
            o.port
        ),
    )
    .await;
    assert!(plain.contains("Location: /there?t=s3cr3t-value"), "{plain}");
    assert!(plain.contains("Content-Length:"), "{plain}");
}

/// What scrubbing costs: a GET of 10 MiB through the inspector from a host a secret goes
/// to (its body searched and re-chunked) and from the same origin with no secret, on a new
/// connection each time, interleaved, the median of each.
/// `cargo test -p runner-network --release scrubbing_cost -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it on its own, it prints the numbers"]
async fn scrubbing_cost() {
    let o = origin().await;
    let rules = [("http", "GET 127.0.0.1/*", Action::Allow)];
    let secret = || {
        Secrets::new(vec![(
            "TOKEN".into(),
            "s3cr3t-value".into(),
            vec!["127.0.0.1".into()],
        )])
        .unwrap()
    };
    let plain = Arc::new(shared(&rules, inspection(&rules, &o, Secrets::default())));
    let scrubbed = Arc::new(shared(&rules, inspection(&rules, &o, secret())));
    let size = 10usize << 20;
    let request = format!(
        "GET /bytes/{size} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
        o.port
    );
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..11 {
        for (sh, times) in [(&plain, &mut without), (&scrubbed, &mut with)] {
            let start = std::time::Instant::now();
            let mut c = client(sh, "127.0.0.1", o.port).await;
            c.write_all(request.as_bytes()).await.unwrap();
            let mut all = Vec::new();
            let read = c.read_to_end(&mut all);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(60), read)
                .await
                .expect("the answer ends within a minute");
            assert!(all.len() >= size, "{}", all.len());
            times.push(start.elapsed().as_secs_f64());
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, b) = (median(&mut without), median(&mut with));
    println!(
        "10 MiB: no secret {:.2} ms, scrubbed {:.2} ms, ratio {:.2}",
        a * 1e3,
        b * 1e3,
        b / a
    );
}

/// A tunnel to an address is inspected when it carries TLS (which names no host there), to
/// a name only when a rule or a secret names it.
#[tokio::test]
async fn a_tunnel_to_an_address_is_inspected_when_any_host_is() {
    let o = origin().await;
    let rules = [("http", "* localhost/private/*", Action::Deny)];
    let i = inspection(&rules, &o, Secrets::default());
    assert_eq!(i.tunnel("localhost"), Tunnel::Inspected);
    assert_eq!(i.tunnel("127.0.0.1"), Tunnel::InspectedIfTls);
    assert_eq!(i.tunnel("::1"), Tunnel::InspectedIfTls);
    assert_eq!(i.tunnel("example.org"), Tunnel::Unread);
}

/// Over a tunnel to the origin's address, a TLS handshake naming no host gets the session's
/// certificate for the address; a request whose `Host` names the inspected name (and its
/// denied path) is refused and never arrives, the same path with the address as `Host` is
/// served.
#[tokio::test]
async fn over_an_address_a_host_naming_an_inspected_name_is_refused() {
    let o = origin().await;
    let rules = [
        ("http", "* localhost/private/*", Action::Deny),
        ("http", "*", Action::Allow),
    ];
    let sh = Arc::new(shared(&rules, inspection(&rules, &o, Secrets::default())));
    assert_eq!(
        sh.inspection.as_ref().unwrap().tunnel("127.0.0.1"),
        Tunnel::InspectedIfTls
    );
    let mut c = client(&sh, "127.0.0.1", o.port).await;
    let named = exchange(
        &mut c,
        &format!(
            "GET /private/x HTTP/1.1\r\nHost: localhost:{}\r\n\r\n",
            o.port
        ),
    )
    .await;
    assert!(named.starts_with("HTTP/1.1 403"), "{named}");
    let mut c = client(&sh, "127.0.0.1", o.port).await;
    let address = exchange(
        &mut c,
        &format!(
            "GET /private/y HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
            o.port
        ),
    )
    .await;
    assert!(address.contains("seen GET /private/y"), "{address}");
    let seen = o.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "only the control: {seen:?}");
}
