//! A Docker engine that fails on cue: a proxy on a Unix socket of its own that forwards
//! HTTP/1.1 to the real engine's socket, and fails the calls a test names (by method and
//! path, the Nth time, once or for good) with a server error or a cut connection.
//!
//! Why a proxy and not a stub: every call but the chosen one reaches the real engine, so
//! an evaluation pointed at it (`--docker-host unix://…`) builds, creates, copies and runs
//! for real, and the one failure it meets is the kind an engine under load or restarting
//! gives. The calls are matched on the request line alone (the API version prefix and the
//! query left out), so a test names them as the API documents them:
//! `PUT /containers/*/archive`, `POST /exec/*/start`.
//!
//! Only requests are parsed, to find where each one ends (`Content-Length`, or chunks);
//! answers are copied through as bytes. A client sends its next request on a connection
//! only once the last answer is whole (no pipelining), so a fault's own answer never
//! interleaves with the engine's. A request that upgrades the connection (`exec` start,
//! `attach`: `Connection: Upgrade`) turns it into a plain byte stream both ways once the
//! request is forwarded; nothing after it on that connection is matched.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What a fault does to the call it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Answers with this status (a 5xx) and a JSON message, as the engine does, and closes
    /// the connection; the engine never sees the call.
    Status(u16),
    /// Closes the connection once the request's head is read: no answer at all.
    Cut,
}

/// One call to fail: `METHOD /path/with/*/segments`, from its `nth` match on (1-based),
/// `times` times (`None`: every match from then on).
#[derive(Debug, Clone)]
pub struct Fault {
    method: String,
    pattern: Vec<String>,
    /// Text the call's query must hold, percent-decoded (`path=/logs/verifier`).
    query: Option<String>,
    nth: usize,
    times: Option<usize>,
    action: Action,
}

impl Fault {
    /// Answers `status` to the first call matching `call` (`"PUT /containers/*/archive"`).
    pub fn status(status: u16, call: &str) -> Fault {
        Fault::new(call, Action::Status(status))
    }

    /// Cuts the connection of the first call matching `call`.
    pub fn cut(call: &str) -> Fault {
        Fault::new(call, Action::Cut)
    }

    fn new(call: &str, action: Action) -> Fault {
        let (method, path) = call
            .split_once(' ')
            .unwrap_or_else(|| panic!("a fault's call is `METHOD /path`, not {call:?}"));
        Fault {
            method: method.to_string(),
            pattern: segments(path),
            query: None,
            nth: 1,
            times: Some(1),
            action,
        }
    }

    /// Fails the `n`th matching call (1-based) instead of the first.
    pub fn nth(mut self, n: usize) -> Fault {
        self.nth = n.max(1);
        self
    }

    /// Matches only calls whose query, percent-decoded, holds `text`: the same call on
    /// different paths (`GET /containers/*/archive` with `path=/logs/verifier`).
    pub fn query(mut self, text: &str) -> Fault {
        self.query = Some(text.to_string());
        self
    }

    /// Fails every matching call from the `nth` on, not just one.
    pub fn always(mut self) -> Fault {
        self.times = None;
        self
    }

    fn matches(&self, method: &str, path: &[String], query: &str) -> bool {
        method.eq_ignore_ascii_case(&self.method)
            && self
                .query
                .as_ref()
                .is_none_or(|q| query.contains(q.as_str()))
            && path.len() == self.pattern.len()
            && self
                .pattern
                .iter()
                .zip(path)
                .all(|(want, have)| want == "*" || want == have)
    }
}

/// The request target's query, percent-decoded (`path=%2Fapp` reads `path=/app`).
fn query(target: &str) -> String {
    let raw = target.split_once('?').map_or("", |(_, q)| q).as_bytes();
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = raw
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (raw[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The path's segments, without the query and without the API version prefix (`/v1.47`).
fn segments(target: &str) -> Vec<String> {
    let path = target.split('?').next().unwrap_or("");
    let mut parts: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let versioned = parts.first().is_some_and(|p| {
        p.strip_prefix('v')
            .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
    });
    if versioned {
        parts.remove(0);
    }
    parts
}

/// What the proxy saw and did, shared by its connections.
#[derive(Default)]
struct State {
    /// Each fault with how many calls matched it so far and how often it fired.
    faults: Mutex<Vec<(Fault, usize, usize)>>,
    /// Every request line, in order (`METHOD /path` without version or query).
    calls: Mutex<Vec<String>>,
    /// Each fault that fired: the call and what was done.
    fired: Mutex<Vec<String>>,
}

impl State {
    /// The action for this call, if a fault takes it (counting it either way).
    fn decide(&self, method: &str, path: &[String], query: &str) -> Option<Action> {
        let call = format!("{method} /{}", path.join("/"));
        self.calls.lock().unwrap().push(call.clone());
        let mut faults = self.faults.lock().unwrap();
        for (fault, seen, fired) in faults.iter_mut() {
            if !fault.matches(method, path, query) {
                continue;
            }
            *seen += 1;
            let due = *seen >= fault.nth && fault.times.is_none_or(|t| *fired < t);
            if due {
                *fired += 1;
                let what = match fault.action {
                    Action::Status(code) => format!("{call} -> {code}"),
                    Action::Cut => format!("{call} -> cut"),
                };
                self.fired.lock().unwrap().push(what);
                return Some(fault.action);
            }
        }
        None
    }
}

/// The proxy: listening until dropped.
pub struct EngineFaults {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    state: Arc<State>,
    stop: Arc<AtomicBool>,
}

impl EngineFaults {
    /// A proxy in front of the engine at `upstream` (a Unix socket's path) that fails the
    /// calls `faults` name.
    pub fn start(upstream: &Path, faults: Vec<Fault>) -> EngineFaults {
        let dir = tempfile::tempdir().expect("a folder for the proxy's socket");
        let socket = dir.path().join("engine.sock");
        let listener = UnixListener::bind(&socket)
            .unwrap_or_else(|e| panic!("cannot listen on {}: {e}", socket.display()));
        let state = Arc::new(State {
            faults: Mutex::new(faults.into_iter().map(|f| (f, 0, 0)).collect()),
            ..Default::default()
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (serving, stopping, upstream) = (state.clone(), stop.clone(), upstream.to_path_buf());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopping.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = client else { continue };
                let (state, upstream) = (serving.clone(), upstream.clone());
                std::thread::spawn(move || {
                    // A connection the engine will not take is cut for the client too.
                    if let Ok(engine) = UnixStream::connect(&upstream) {
                        let _ = relay(client, engine, &state);
                    }
                });
            }
        });
        EngineFaults {
            _dir: dir,
            socket,
            state,
            stop,
        }
    }

    /// The proxy's address, as `DOCKER_HOST` or `--docker-host` takes it.
    pub fn host(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Each fault that fired, in order: `PUT /containers/ID/archive -> 500`.
    pub fn fired(&self) -> Vec<String> {
        self.state.fired.lock().unwrap().clone()
    }

    /// Every call that came through, in order, as `METHOD /path`.
    pub fn calls(&self) -> Vec<String> {
        self.state.calls.lock().unwrap().clone()
    }
}

impl Drop for EngineFaults {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The listener waits in accept: one more connection lets it see the stop.
        let _ = UnixStream::connect(&self.socket);
    }
}

/// One client connection: answers copied back as they come, requests read one by one and
/// forwarded, failed, or (an upgrade) turned into a plain stream.
fn relay(client: UnixStream, engine: UnixStream, state: &State) -> std::io::Result<()> {
    let (mut to_client, mut from_engine) = (client.try_clone()?, engine.try_clone()?);
    let answers = std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_engine, &mut to_client);
        let _ = to_client.shutdown(std::net::Shutdown::Write);
    });
    let mut requests = BufReader::new(client.try_clone()?);
    let mut to_engine = engine.try_clone()?;
    let result = loop {
        let Some(head) = read_head(&mut requests)? else {
            break Ok(());
        };
        let (method, path, query) = request_line(&head);
        match state.decide(&method, &path, &query) {
            Some(Action::Cut) => break Ok(()),
            Some(Action::Status(code)) => {
                // The body is read, so the client sees the answer rather than a write
                // into a closed socket.
                forward_body(&head, &mut requests, &mut std::io::sink())?;
                let body = format!(
                    "{{\"message\":\"the engine failed this call on purpose (a test's fault, status {code})\"}}"
                );
                let answer = format!(
                    "HTTP/1.1 {code} Injected Fault\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = (&client).write_all(answer.as_bytes());
                break Ok(());
            }
            None => {
                to_engine.write_all(head.raw.as_bytes())?;
                forward_body(&head, &mut requests, &mut to_engine)?;
                if head.upgrade {
                    // From here the connection is the hijacked stream: bytes both ways.
                    let _ = std::io::copy(&mut requests, &mut to_engine);
                    let _ = to_engine.shutdown(std::net::Shutdown::Write);
                    let _ = answers.join();
                    return Ok(());
                }
            }
        }
    };
    // A fault, or the client is done: both sides go, and the answers' copy ends with them.
    let _ = client.shutdown(std::net::Shutdown::Both);
    let _ = engine.shutdown(std::net::Shutdown::Both);
    let _ = answers.join();
    result
}

/// A request's head as it came, and what it says of its body and connection.
struct Head {
    raw: String,
    length: Option<u64>,
    chunked: bool,
    upgrade: bool,
}

/// The next request's head; `None` at the end of the connection.
fn read_head(reader: &mut impl BufRead) -> std::io::Result<Option<Head>> {
    let mut raw = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        raw.push_str(&line);
        if line == "\r\n" || line == "\n" {
            break;
        }
    }
    let mut head = Head {
        raw,
        length: None,
        chunked: false,
        upgrade: false,
    };
    for line in head.raw.lines().skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (
            name.trim().to_ascii_lowercase(),
            value.trim().to_ascii_lowercase(),
        );
        match name.as_str() {
            "content-length" => head.length = value.parse().ok(),
            "transfer-encoding" => head.chunked = value.contains("chunked"),
            "connection" if value.contains("upgrade") => head.upgrade = true,
            "upgrade" => head.upgrade = true,
            _ => {}
        }
    }
    Ok(Some(head))
}

/// The request's method, its path's segments and its decoded query.
fn request_line(head: &Head) -> (String, Vec<String>, String) {
    let mut words = head.raw.split_whitespace();
    let method = words.next().unwrap_or("").to_string();
    let target = words.next().unwrap_or("");
    (method, segments(target), query(target))
}

/// Copies the request's body (by its length, or chunk by chunk to the last) to `to`.
fn forward_body(head: &Head, from: &mut impl BufRead, to: &mut impl Write) -> std::io::Result<()> {
    if head.chunked {
        loop {
            let mut size_line = String::new();
            if from.read_line(&mut size_line)? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            to.write_all(size_line.as_bytes())?;
            let hex = size_line.split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(hex, 16)
                .map_err(|_| std::io::Error::other(format!("bad chunk size {hex:?}")))?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    let mut line = String::new();
                    if from.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
                        to.write_all(line.as_bytes())?;
                        return Ok(());
                    }
                    to.write_all(line.as_bytes())?;
                }
            }
            // The chunk and the line end after it.
            copy_exactly(from, to, size + 2)?;
        }
    }
    if let Some(n) = head.length {
        copy_exactly(from, to, n)?;
    }
    Ok(())
}

fn copy_exactly(from: &mut impl Read, to: &mut impl Write, n: u64) -> std::io::Result<()> {
    let copied = std::io::copy(&mut from.take(n), to)?;
    if copied < n {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_match_without_version_or_query() {
        let fault = Fault::status(500, "PUT /containers/*/archive");
        let target = "/v1.47/containers/abc/archive?path=%2F";
        assert!(fault.matches("PUT", &segments(target), &query(target)));
        assert!(fault.matches("put", &segments("/containers/abc/archive"), ""));
        assert!(!fault.matches("GET", &segments("/v1.47/containers/abc/archive"), ""));
        assert!(!fault.matches("PUT", &segments("/v1.47/containers/abc/archive/x"), ""));
        assert!(!fault.matches("PUT", &segments("/v1.47/images/abc/archive"), ""));
        let reward = Fault::cut("GET /containers/*/archive").query("path=/logs/verifier/");
        let read = "/v1.47/containers/abc/archive?path=%2Flogs%2Fverifier%2Freward.txt";
        assert!(reward.matches("GET", &segments(read), &query(read)));
        let snapshot = "/v1.47/containers/abc/archive?path=%2Fapp";
        assert!(!reward.matches("GET", &segments(snapshot), &query(snapshot)));
    }

    #[test]
    fn a_fault_fires_from_its_nth_match_as_often_as_it_is_told() {
        let state = State {
            faults: Mutex::new(vec![
                (Fault::cut("POST /exec/*/start").nth(2), 0, 0),
                (Fault::status(503, "GET /_ping").always(), 0, 0),
            ]),
            ..Default::default()
        };
        let exec = segments("/v1.47/exec/e1/start");
        assert_eq!(state.decide("POST", &exec, ""), None);
        assert_eq!(state.decide("POST", &exec, ""), Some(Action::Cut));
        assert_eq!(state.decide("POST", &exec, ""), None);
        for _ in 0..3 {
            let ping = segments("/_ping");
            assert_eq!(state.decide("GET", &ping, ""), Some(Action::Status(503)));
        }
        assert_eq!(state.fired.lock().unwrap().len(), 4);
        assert_eq!(state.calls.lock().unwrap().len(), 6);
    }
}
