//! "The outside" for network tests: an HTTP server on the host's loopback that a sandbox
//! may reach only through the allow-list proxy. It counts every connection it accepts, so a
//! test can tell that an attack that should never leave the sandbox did not arrive here.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// The body of `/blob`: `len` bytes that are not all alike, so a corrupted relay shows.
pub fn blob(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

pub struct Outside {
    pub port: u16,
    pub accepted: Arc<AtomicUsize>,
    /// The `/slow` stream's client went away (it could not write any more).
    pub slow_closed: Arc<AtomicBool>,
}

impl Outside {
    /// Serves `/blob` (`blob_len` bytes), `/slow` (a byte every 100 ms, for a minute) and
    /// `/closed` (whether a `/slow` client has gone).
    pub fn start(blob_len: usize) -> Outside {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the outside server");
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let slow_closed = Arc::new(AtomicBool::new(false));
        let body = Arc::new(blob(blob_len));
        let (a, c) = (accepted.clone(), slow_closed.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                a.fetch_add(1, Ordering::SeqCst);
                let (body, c) = (body.clone(), c.clone());
                std::thread::spawn(move || serve(stream, &body, &c));
            }
        });
        Outside {
            port,
            accepted,
            slow_closed,
        }
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

fn serve(stream: TcpStream, body: &[u8], slow_closed: &AtomicBool) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).map_or(true, |n| n == 0) || h == "\r\n" {
            break;
        }
    }
    let path = line.split(' ').nth(1).unwrap_or("/").to_string();
    let mut out = stream;
    match path.as_str() {
        "/blob" => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = out.write_all(head.as_bytes());
            let _ = out.write_all(body);
        }
        "/slow" => {
            let _ = out.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
            for _ in 0..600 {
                if out.write_all(b".").and_then(|()| out.flush()).is_err() {
                    slow_closed.store(true, Ordering::SeqCst);
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        "/closed" => {
            let text = format!("closed={}", slow_closed.load(Ordering::SeqCst));
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
            let _ = out.write_all(head.as_bytes());
        }
        _ => {
            let _ = out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        }
    }
    let mut rest = Vec::new();
    let _ = out.shutdown(std::net::Shutdown::Write);
    let _ = out.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = out.read_to_end(&mut rest);
}

/// A Python client the tests copy into the worktree: each subcommand prints one line that
/// starts with what happened (`OK`, `FAIL`, `CONNECTED`, `BLOCKED`, `RESOLVED`, `NODNS`).
pub const CLIENT_PY: &str = r#"
import hashlib, socket, sys, urllib.request

def fetch(url):
    try:
        data = urllib.request.urlopen(url, timeout=20).read()
        print("OK", url, len(data), hashlib.sha256(data).hexdigest(), flush=True)
    except Exception as e:
        print("FAIL", url, str(e).replace("\n", " "), flush=True)

def direct(host, port):
    try:
        socket.create_connection((host, int(port)), timeout=3)
        print("CONNECTED", host, port, flush=True)
    except OSError as e:
        print("BLOCKED", host, port, e, flush=True)

def dns(name):
    try:
        print("RESOLVED", name, socket.getaddrinfo(name, 80)[0][4], flush=True)
    except OSError as e:
        print("NODNS", name, e, flush=True)

def connect(host, port, proxy_port):
    # A CONNECT by hand: the socket and the proxy's status line.
    s = socket.create_connection(("127.0.0.1", int(proxy_port)), timeout=10)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = s.recv(4096)
        if not chunk:
            break
        answer += chunk
    return s, answer.split(b"\r\n")[0].decode()

def tunnel(host, port, proxy_port, named=None):
    # CONNECT by hand, then plain HTTP through the tunnel, for `named` (the tunnel's host
    # unless given).
    named = named or f"{host}:{port}"
    s, status = connect(host, port, proxy_port)
    if " 200 " not in status:
        print("FAIL tunnel", status, flush=True)
        return
    s.sendall(f"GET /blob HTTP/1.0\r\nHost: {named}\r\n\r\n".encode())
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    if b"\r\n\r\n" not in data:
        print("FAIL tunnel cut", len(data), flush=True)
        return
    body = data.split(b"\r\n\r\n", 1)[1]
    print("OK tunnel", len(body), hashlib.sha256(body).hexdigest(), flush=True)

def halfclose(host, port, proxy_port):
    # The request, then the write half shut (an HTTP/1.0 client, `nc -N`): the whole
    # response must still arrive.
    s = socket.create_connection(("127.0.0.1", int(proxy_port)), timeout=20)
    s.sendall(f"GET http://{host}:{port}/blob HTTP/1.0\r\nHost: {host}:{port}\r\n\r\n".encode())
    s.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    body = data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""
    print("OK halfclose", len(body), hashlib.sha256(body).hexdigest(), flush=True)

def tls(host, port, proxy_port, name):
    # A TLS handshake through a CONNECT tunnel, asking for `name` (an IP sends none).
    import ssl
    s, status = connect(host, port, proxy_port)
    if " 200 " not in status:
        print("FAIL tls", status, flush=True)
        return
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        ctx.wrap_socket(s, server_hostname=name)
        print("TLS DONE", name, flush=True)
    except (OSError, ssl.SSLError) as e:
        print("TLS ENDED", name, type(e).__name__, flush=True)

def raw(proxy_port, payload):
    s = socket.create_connection(("127.0.0.1", int(proxy_port)), timeout=10)
    s.sendall(payload.encode().decode("unicode_escape").encode("latin-1"))
    print("ANSWER", s.recv(4096).split(b"\r\n")[0].decode(errors="replace"), flush=True)

def slow(url):
    # Reads a never-ending download; it is cut from outside or killed.
    try:
        r = urllib.request.urlopen(url, timeout=60)
        while r.read(1):
            pass
        print("SLOW ENDED", flush=True)
    except Exception as e:
        print("SLOW CUT", e, flush=True)

globals()[sys.argv[1]](*sys.argv[2:])
"#;
