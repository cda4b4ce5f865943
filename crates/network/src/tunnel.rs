//! What a `CONNECT` tunnel may carry, judged from the client's first bytes.
//!
//! A tunnel is judged by the host it names, but the server at the other end may serve many
//! hosts (a CDN) and pick one by what the client says inside: the TLS server name, or an
//! HTTP request's `Host`. So the first flight is held until it shows which host it is for:
//! a TLS handshake must name the tunnel's host ([`super::sni`]), and a plain HTTP request
//! (clients such as Node's fetch tunnel `http://` too) must name it in its `Host` and goes
//! on as one request, like a forwarded one ([`super::body`]). Anything else (SSH, say)
//! passes: no web server takes it for a request.
//!
//! The verdict must not depend on where the client pauses. A client may send one byte,
//! wait, and send the rest; whatever it has sent so far is judged as if nothing more
//! would come, and "not HTTP" is said only of bytes that no continuation can turn into a
//! request line. So the rule is read off the first line, and only once that line has ended:
//!
//! - leading whitespace and empty lines are skipped (servers skip empty lines; skipping
//!   spaces too costs nothing);
//! - a first word of token characters (any case and any length: some servers take
//!   `get` or a 40-letter method as a method) followed by whitespace (a space, a tab, a
//!   bare CR: lenient servers split on any of them) starts what may be a request line.
//!   Its line is held to its end; if any later word begins `HTTP/`, or the method is
//!   `GET` (an HTTP/0.9 request, which may carry an absolute URL), it is a request,
//!   held to the end of its head (at most [`MAX_HEAD`]) and parsed strictly;
//! - a first byte that no method has, a method followed by a byte that neither continues
//!   it nor is whitespace, and a line with no version word (an SSH banner with its
//!   comment, `EHLO mail.example`) are not HTTP, and pass;
//! - a PROXY protocol header (`PROXY …`, or version 2's binary signature) is refused: a
//!   server that accepts it reads an HTTP request for any host after it.
//!
//! [`Gate`] applies the verdict to a connection's stream the way the relay does, without
//! any I/O, so it can be driven byte by byte in tests and fuzzing.

use super::body::Body;
use super::request::{self, BadRequest, Kind, MAX_HEAD};
use super::sni::{self, BadHello, Hello};

/// What the first flight showed.
#[derive(Debug, PartialEq, Eq)]
pub enum First {
    /// Nothing can be decided before this many bytes in all have arrived.
    Need(usize),
    /// Send it on, and everything after it.
    Pass,
    /// An HTTP request: `head` (rewritten) goes on, then the `head_len` bytes of the buffer
    /// it came from are done with, and what follows is `body` and nothing more.
    Http {
        head: Vec<u8>,
        head_len: usize,
        body: Body,
    },
}

/// What in a tunnel's first bytes refuses it (the message goes after "refused: ").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("a TLS handshake for {0}")]
    OtherName(String),
    #[error("a TLS handshake that names no host")]
    NoName,
    #[error("a TLS handshake that cannot be read ({0})")]
    Unreadable(#[source] BadHello),
    #[error("over 64 KiB without deciding what protocol it is")]
    NoHead,
    #[error("an HTTP request head over 64 KiB")]
    HeadTooLong,
    #[error("an HTTP request that {0}")]
    BadHttp(#[source] BadRequest),
    #[error("a CONNECT inside a tunnel")]
    Connect,
    #[error("an HTTP request for {host}:{port}")]
    OtherTarget { host: String, port: u16 },
    #[error(
        "a PROXY protocol header (a server that accepts one reads a request for any host after it)"
    )]
    ProxyProtocol,
}

/// The binary signature that starts a version 2 PROXY protocol header.
const PROXY_V2: &[u8] = b"\r\n\r\n\x00\r\nQUIT\n";

/// Judges the first bytes of a tunnel to `host:port`. `Err` refuses the tunnel, and says
/// why. Given any prefix of what a client sends, the answer is `Need`, a refusal, or the
/// answer the whole would get: a request for another host is never passed, wherever the
/// client stops.
pub fn judge(buf: &[u8], host: &str, port: u16) -> Result<First, Refused> {
    judge_from(buf, host, port, &mut Scanned::default())
}

/// How far earlier judgements of the same, shorter, first flight read without finding
/// what they looked for. A client that sends its first flight a byte at a time would
/// otherwise have the whole of it read again for every byte (seconds of the host's time
/// for 64 KiB). Only valid for a buffer that extends the one it was found in.
#[derive(Debug, Default)]
struct Scanned {
    /// Leading whitespace: the request line cannot start before this.
    start: usize,
    /// The method's characters so far (after `start`).
    method: usize,
    /// Bytes after the method without a line end.
    line: usize,
    /// Bytes from `start` without the end of a head.
    head: usize,
}

fn judge_from(buf: &[u8], host: &str, port: u16, seen: &mut Scanned) -> Result<First, Refused> {
    if let Some(decided) = tls(buf, host)? {
        return Ok(decided);
    }
    if buf.starts_with(PROXY_V2) {
        return Err(Refused::ProxyProtocol);
    }
    if PROXY_V2.starts_with(buf) {
        return Ok(First::Need(buf.len() + 1));
    }
    let start = seen.start
        + buf[seen.start..]
            .iter()
            .position(|b| !is_space(*b) && *b != b'\n')
            .unwrap_or(buf.len() - seen.start);
    seen.start = start;
    match first_line(&buf[start..], seen) {
        Line::Unfinished if buf.len() > MAX_HEAD => Err(Refused::NoHead),
        Line::Unfinished => Ok(First::Need(buf.len() + 1)),
        Line::Other => Ok(First::Pass),
        Line::Proxy => Err(Refused::ProxyProtocol),
        Line::Request => request_head(buf, start, host, port, seen),
    }
}

/// A TLS handshake's verdict, or `None` when the bytes are not TLS.
fn tls(buf: &[u8], host: &str) -> Result<Option<First>, Refused> {
    match sni::inspect(buf) {
        Ok(Hello::NotTls) => Ok(None),
        Ok(Hello::Incomplete(need)) => Ok(Some(First::Need(need))),
        Ok(Hello::Name(Some(name))) if sni::same_host(&name, host) => Ok(Some(First::Pass)),
        Ok(Hello::Name(Some(name))) => Err(Refused::OtherName(name)),
        // A client that names a host always sends it; one that does not may be asking the
        // server for its default site, which need not be this one.
        Ok(Hello::Name(None)) if host.parse::<std::net::IpAddr>().is_err() => Err(Refused::NoName),
        Ok(Hello::Name(None)) => Ok(Some(First::Pass)),
        Err(e) => Err(Refused::Unreadable(e)),
    }
}

/// What the first line (after leading whitespace) is, as far as it has arrived.
enum Line {
    /// It may still become a request line.
    Unfinished,
    /// No server reads it as a request.
    Other,
    /// A PROXY protocol header.
    Proxy,
    /// A request line (perhaps a malformed one): judged by its head.
    Request,
}

fn first_line(text: &[u8], seen: &mut Scanned) -> Line {
    let method_len = seen.method
        + text[seen.method..]
            .iter()
            .take_while(|b| is_tchar(**b))
            .count();
    seen.method = method_len;
    let method = &text[..method_len];
    match text.get(method_len) {
        None => return Line::Unfinished,
        Some(b) if method_len > 0 && is_space(*b) => {}
        // A byte no method starts with, a method ending in a byte that is neither token
        // nor whitespace, or a line of one word (`SSH-2.0-OpenSSH_9.2`).
        Some(_) => return Line::Other,
    }
    if method.eq_ignore_ascii_case(b"PROXY") {
        return Line::Proxy;
    }
    let rest = &text[method_len..];
    let Some(end) = rest[seen.line..].iter().position(|b| *b == b'\n') else {
        seen.line = rest.len();
        return Line::Unfinished;
    };
    let end = seen.line + end;
    let versioned = rest[..end]
        .split(|b| is_space(*b))
        .any(|word| word.len() >= 5 && word[..5].eq_ignore_ascii_case(b"HTTP/"));
    if versioned || method.eq_ignore_ascii_case(b"GET") {
        Line::Request
    } else {
        Line::Other
    }
}

/// A request whose line starts at `start`: held to the end of its head, which must be
/// for the tunnel's host.
fn request_head(
    buf: &[u8],
    start: usize,
    host: &str,
    port: u16,
    seen: &mut Scanned,
) -> Result<First, Refused> {
    let text = &buf[start..];
    let from = seen.head.saturating_sub(3);
    let Some(end) = request::head_end(&text[from..]).map(|e| from + e) else {
        seen.head = text.len();
        if buf.len() > MAX_HEAD {
            return Err(Refused::HeadTooLong);
        }
        return Ok(First::Need(buf.len() + 1));
    };
    if start + end > MAX_HEAD {
        return Err(Refused::HeadTooLong);
    }
    let req = request::parse(&text[..end]).map_err(Refused::BadHttp)?;
    let Kind::Forward { head, body } = req.kind else {
        return Err(Refused::Connect);
    };
    if req.host != host.trim_start_matches('[').trim_end_matches(']') || req.port != port {
        return Err(Refused::OtherTarget {
            host: req.host,
            port: req.port,
        });
    }
    Ok(First::Http {
        head,
        head_len: start + end,
        body,
    })
}

/// A token character (RFC 9110 §5.6.2): what a method is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whitespace inside a request line, as the most lenient servers split it (RFC 9112
/// §3 lets them take a tab, a vertical tab, a form feed or a bare CR for a space).
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | 0x0b | 0x0c | b'\r')
}

/// A connection's client bytes as the relay sends them on: a tunnel's first flight held
/// until [`judge`] decides, then all of it (another protocol, or TLS for this host) or
/// one request (its rewritten head and exactly the body its framing announces). Pure:
/// what [`Gate::push`] returns is what goes to the destination.
pub struct Gate {
    host: String,
    port: u16,
    state: State,
    /// How many bytes must be held before judging again: a client that sends its first
    /// flight a byte at a time is not re-read a byte at a time.
    need: usize,
    /// What earlier judgements of the held bytes read without deciding.
    scanned: Scanned,
    dropped: u64,
}

enum State {
    /// A tunnel's first bytes, not yet decided.
    Held(Vec<u8>),
    /// A request's body: what is left of it. Nothing after it goes.
    Body(Body),
    /// Everything goes.
    Open,
}

impl Gate {
    /// The client side of a tunnel to `host:port`.
    pub fn tunnel(host: &str, port: u16) -> Gate {
        Gate {
            host: host.to_string(),
            port,
            state: State::Held(Vec::new()),
            need: 1,
            scanned: Scanned::default(),
            dropped: 0,
        }
    }

    /// What follows a forwarded request's head: its body, and nothing more.
    pub fn request(body: Body) -> Gate {
        Gate {
            host: String::new(),
            port: 0,
            state: State::Body(body),
            need: 0,
            scanned: Scanned::default(),
            dropped: 0,
        }
    }

    /// The next bytes from the client; what of them (and of those held before) may be sent
    /// now. `Err`: the tunnel carries what it may not, and nothing of it is sent.
    pub fn push(&mut self, mut data: Vec<u8>) -> Result<Vec<u8>, Refused> {
        match &mut self.state {
            State::Open => Ok(data),
            State::Body(body) => {
                let keep = body.take(&data);
                self.dropped += (data.len() - keep) as u64;
                data.truncate(keep);
                Ok(data)
            }
            State::Held(buf) => {
                buf.append(&mut data);
                if buf.len() < self.need {
                    return Ok(Vec::new());
                }
                self.decide(false)
            }
        }
    }

    /// The client has finished sending: what may still go. A first flight still undecided
    /// is not sent (a handshake or request cut short is none a server should act on).
    pub fn finish(&mut self) -> Result<Vec<u8>, Refused> {
        match self.state {
            State::Held(_) => self.decide(true),
            _ => Ok(Vec::new()),
        }
    }

    /// Bytes the client sent after its request's end, which went nowhere.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    fn decide(&mut self, at_end: bool) -> Result<Vec<u8>, Refused> {
        let State::Held(buf) = &mut self.state else {
            return Ok(Vec::new());
        };
        let verdict = judge_from(buf, &self.host, self.port, &mut self.scanned);
        let buf = std::mem::take(buf);
        match verdict {
            Ok(First::Need(n)) if !at_end => {
                self.need = n.max(buf.len() + 1);
                self.state = State::Held(buf);
                Ok(Vec::new())
            }
            Ok(First::Pass) => {
                self.state = State::Open;
                Ok(buf)
            }
            Ok(First::Http {
                head,
                head_len,
                body,
            }) => {
                self.state = State::Body(body);
                let mut buf = buf;
                let rest = buf.split_off(head_len);
                let mut out = head;
                out.append(&mut self.push(rest)?);
                Ok(out)
            }
            // Cut short, or refused: nothing of it goes, nor anything after.
            Ok(First::Need(_)) => {
                self.state = State::Body(Body::Length(0));
                Ok(Vec::new())
            }
            Err(why) => {
                self.state = State::Body(Body::Length(0));
                Err(why)
            }
        }
    }
}

#[cfg(test)]
mod tests;
