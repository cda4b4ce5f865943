//! A company's proxy, for tests: an HTTP proxy on the host's loopback that wants a user
//! and password, tunnels `CONNECT`s and passes plain requests on, and writes down every
//! request head that reached it, so a test can tell which of runner's connections went
//! through it and whether they carried its credentials.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use base64::Engine as _;

/// One request head the proxy was sent.
#[derive(Debug, Clone)]
pub struct Passed {
    /// The request line: `CONNECT host:port HTTP/1.1`, `GET http://host:port/path HTTP/1.1`.
    pub line: String,
    /// The rest of the head, one header a line.
    pub headers: Vec<String>,
    /// It carried the proxy's own credentials.
    pub authorized: bool,
}

pub struct UpstreamProxy {
    pub port: u16,
    user: String,
    password: String,
    passed: Arc<Mutex<Vec<Passed>>>,
}

impl UpstreamProxy {
    pub fn start(user: &str, password: &str) -> UpstreamProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the upstream proxy");
        let port = listener.local_addr().unwrap().port();
        let passed = Arc::new(Mutex::new(Vec::new()));
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        let seen = passed.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (seen, expected) = (seen.clone(), expected.clone());
                std::thread::spawn(move || serve(stream, &seen, &expected));
            }
        });
        UpstreamProxy {
            port,
            user: user.into(),
            password: password.into(),
            passed,
        }
    }

    /// `http://user:password@127.0.0.1:PORT`, as a proxy variable holds it.
    pub fn url(&self) -> String {
        format!(
            "http://{}:{}@127.0.0.1:{}",
            self.user, self.password, self.port
        )
    }

    pub fn passed(&self) -> Vec<Passed> {
        self.passed.lock().unwrap().clone()
    }
}

fn serve(client: TcpStream, seen: &Mutex<Vec<Passed>>, expected: &str) {
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let line = line.trim_end().to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 {
            return;
        }
        let h = h.trim_end().to_string();
        if h.is_empty() {
            break;
        }
        headers.push(h);
    }
    let authorized = headers.iter().any(|h| {
        h.split_once(':').is_some_and(|(k, v)| {
            k.eq_ignore_ascii_case("proxy-authorization") && v.trim() == expected
        })
    });
    seen.lock().unwrap().push(Passed {
        line: line.clone(),
        headers: headers.clone(),
        authorized,
    });
    let mut client = client;
    if !authorized {
        let _ = client.write_all(
            b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, target, version) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or("HTTP/1.1"),
    );
    let bad = |mut c: &TcpStream| {
        let _ = c.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
    };
    if method == "CONNECT" {
        let Ok(origin) = TcpStream::connect(target) else {
            return bad(&client);
        };
        let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
        return pipe(reader, client, origin, Vec::new());
    }
    // A plain request: to the origin in origin form, without the proxy's headers.
    let Some(rest) = target.strip_prefix("http://") else {
        return bad(&client);
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let authority = if authority.contains(':') {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let Ok(origin) = TcpStream::connect(&authority) else {
        return bad(&client);
    };
    let mut head = format!("{method} {path} {version}\r\n");
    for h in headers
        .iter()
        .filter(|h| !h.to_ascii_lowercase().starts_with("proxy-"))
    {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    pipe(reader, client, origin, head.into_bytes());
}

/// Copies both ways until each side has finished: `first` to the origin, then what the
/// client's reader already holds, then the rest of the client's bytes.
fn pipe(reader: BufReader<TcpStream>, client: TcpStream, mut origin: TcpStream, first: Vec<u8>) {
    let held = reader.buffer().to_vec();
    let mut from_client = reader.into_inner();
    if origin.write_all(&first).is_err() || origin.write_all(&held).is_err() {
        return;
    }
    let mut to_origin = origin.try_clone().unwrap();
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_client, &mut to_origin);
        let _ = to_origin.shutdown(Shutdown::Write);
    });
    let mut to_client = client;
    let mut buf = [0u8; 16384];
    loop {
        match origin.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to_client.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to_client.shutdown(Shutdown::Write);
    let _ = up.join();
}
