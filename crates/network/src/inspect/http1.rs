//! HTTP/1.1 as the inspecting proxy reads it: each request's head (to judge it and put
//! secrets in), where its body ends, and where the answer's body ends (so that one
//! connection can carry many requests, each judged on its own).
//!
//! Strictness is the point. Whatever two parsers could read two ways is refused with a
//! `400` rather than guessed at: both `Content-Length` and `Transfer-Encoding`, two
//! lengths, a coding other than chunked, a bare CR or LF, folded or nameless headers, two
//! `Host`s. A request whose `Host` (or absolute URL) names another host than the tunnel's
//! is refused: the upstream connection was judged and opened for that host alone.
//! The path a rule sees is percent-decoded and must be one every server reads the same
//! way: no `.` or `..` segment, no empty one, no `\`, `;` or `#` ([`judged_path`]).

use crate::body::Body;
use crate::request::{self, BadRequest};

/// One request read from an inspected connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The target as it goes on: origin-form (`/path?query`).
    pub target: String,
    /// The path a rule judges: percent-decoded, without the query.
    pub path: String,
    pub version: String,
    /// The headers as they go on, in order (the proxy's own and `Expect` gone).
    pub headers: Vec<(String, String)>,
    pub body: Body,
    /// The client asked to wait for `100 Continue` (the proxy answers it itself).
    pub expects_continue: bool,
    /// The client keeps the connection open after this request.
    pub keep_alive: bool,
}

/// Why an inspected request is refused without being judged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("{0}")]
    Bad(#[from] BadRequest),
    #[error("the request is for {named}, but this connection was opened for {tunnel}")]
    OtherHost { named: String, tunnel: String },
    #[error("an HTTP/1.1 request without a Host header")]
    NoHost,
    #[error("the path {0:?} has a `.` or `..` segment, which a server would resolve elsewhere")]
    DotSegment(String),
    #[error("the target {0:?} is neither a path nor a URL of this host")]
    Target(String),
    #[error("the path {path:?} has {why}")]
    Path { path: String, why: PathRefusal },
}

/// What in a path servers read two ways ([`judged_path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathRefusal {
    #[error(
        "an empty segment (`//`, or `%2f` next to a `/`), which servers merge into one `/`: send the path with single slashes"
    )]
    EmptySegment,
    #[error("a backslash, which some servers read as `/`")]
    Backslash,
    #[error(
        "a `;`, whose parameters Java servers drop from the path and others keep: spell it %3B"
    )]
    Parameters,
    #[error("a `#`, a fragment, which clients never send and servers read two ways")]
    Fragment,
    #[error("a control character, where some servers cut the path")]
    Control,
}

impl Malformed {
    /// The status the client gets: another host is a refusal, the rest bad requests.
    pub fn status(&self) -> u16 {
        match self {
            Malformed::OtherHost { .. } => 403,
            _ => 400,
        }
    }
}

/// Where a tunnel leads, for checking a request's own idea of its host.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    pub host: &'a str,
    pub port: u16,
    /// `https` inside a tunnel, `http` for a plain proxy request.
    pub scheme: &'a str,
}

impl Origin<'_> {
    fn default_port(&self) -> u16 {
        if self.scheme == "https" { 443 } else { 80 }
    }

    fn shown(&self) -> String {
        request::authority_text(self.host, self.port)
    }
}

/// Parses a complete request head (through its blank line) for `origin`.
pub fn parse_request(head: &[u8], origin: Origin<'_>) -> Result<Request, Malformed> {
    let text = std::str::from_utf8(head).map_err(|_| BadRequest::NotUtf8)?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(BadRequest::RequestLine(line.to_string()).into());
    };
    if line.contains(['\r', '\n']) {
        return Err(BadRequest::BareInRequestLine(line.to_string()).into());
    }
    request::request_line(method, target, version)?;
    let headers = request::header_lines(lines)?;
    let body = request::framing(&headers)?;
    let target = origin_form(target, origin)?;
    check_host(&headers, version, origin)?;
    let path = judged_path(&target)?;
    let has = |name: &str, token: &str| {
        headers.iter().any(|(k, v)| {
            k.eq_ignore_ascii_case(name)
                && v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token))
        })
    };
    let keep_alive = match version {
        "HTTP/1.1" => !has("connection", "close"),
        _ => has("connection", "keep-alive"),
    };
    let expects_continue = has("expect", "100-continue");
    let headers = headers
        .iter()
        .filter(|(k, v)| !dropped(k, v))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Ok(Request {
        method: method.to_string(),
        target,
        path,
        version: version.to_string(),
        headers,
        body,
        expects_continue,
        keep_alive,
    })
}

/// Headers that do not go on: the proxy's own, `Expect` (answered here), and an
/// `Upgrade` to anything but WebSocket (`h2c` would turn the connection into frames this
/// proxy does not read, each naming its own path).
fn dropped(name: &str, value: &str) -> bool {
    let proxy = ["proxy-connection", "proxy-authorization", "expect"]
        .iter()
        .any(|d| name.eq_ignore_ascii_case(d));
    let upgrade = name.eq_ignore_ascii_case("upgrade") && !value.eq_ignore_ascii_case("websocket");
    let h2 = name.eq_ignore_ascii_case("http2-settings");
    proxy || upgrade || h2
}

/// The target in origin-form: a path as it is, or an absolute URL of this very origin.
fn origin_form(target: &str, origin: Origin<'_>) -> Result<String, Malformed> {
    if target.starts_with('/') {
        return Ok(target.to_string());
    }
    let scheme = format!("{}://", origin.scheme);
    let Some(rest) = target
        .get(..scheme.len())
        .filter(|s| s.eq_ignore_ascii_case(&scheme))
        .map(|_| &target[scheme.len()..])
    else {
        return Err(Malformed::Target(target.to_string()));
    };
    let (auth, path) = match rest.find(['/', '?']) {
        Some(i) if rest[i..].starts_with('?') => (&rest[..i], format!("/{}", &rest[i..])),
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, "/".to_string()),
    };
    if auth.contains('@') {
        return Err(BadRequest::Credentials.into());
    }
    let (host, port) = request::authority(auth, Some(origin.default_port()))?;
    if host != origin.host || port != origin.port {
        return Err(Malformed::OtherHost {
            named: request::authority_text(&host, port),
            tunnel: origin.shown(),
        });
    }
    Ok(path)
}

/// The `Host` header must name the tunnel's host and port (HTTP/1.0 may leave it out).
fn check_host(
    headers: &[(&str, &str)],
    version: &str,
    origin: Origin<'_>,
) -> Result<(), Malformed> {
    let host = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("host"))
        .map(|(_, v)| *v);
    let Some(h) = host else {
        return match version {
            "HTTP/1.1" => Err(Malformed::NoHost),
            _ => Ok(()),
        };
    };
    let (named, port) = request::authority(h, Some(origin.default_port()))?;
    if named != origin.host || port != origin.port {
        return Err(Malformed::OtherHost {
            named: h.to_string(),
            tunnel: origin.shown(),
        });
    }
    Ok(())
}

/// The path of an origin-form target as rules see it: percent-decoded, no query. Only a
/// path every server reads as this same path is judged; the rest is refused:
///
/// - an empty segment (`//private`, or `/%2fprivate` once decoded): Python's http.server,
///   nginx (`merge_slashes`) and most frameworks merge it away, so `//private/x` is served
///   as `/private/x`, which a rule on `host/private/*` never saw (a trailing `/` is fine);
/// - a `.` or `..` segment, which a server resolves to a path the rule never saw;
/// - a `\`, raw or `%5c`: some servers take it for a `/`, others for a name's letter;
/// - a raw `;`: Java servers drop a segment's `;parameters` (`/private;x/secret` is served
///   as `/private/secret`), others keep them (`%3b` is a letter to all, and is judged so);
/// - a `#`: clients never send the fragment, and servers differ on where the path ends;
/// - a control character once decoded (`%00`), where C servers cut a name.
///
/// An encoded `/` inside a segment (npm's `@scope%2fname`) is judged decoded
/// (`@scope/name`), as the servers above read it.
fn judged_path(target: &str) -> Result<String, Malformed> {
    let raw = target.split('?').next().unwrap_or("/");
    let refused = |why: PathRefusal| Malformed::Path {
        path: raw.to_string(),
        why,
    };
    if raw.contains('#') {
        return Err(refused(PathRefusal::Fragment));
    }
    if raw.contains(';') {
        return Err(refused(PathRefusal::Parameters));
    }
    let path = percent_encoding::percent_decode_str(raw)
        .decode_utf8_lossy()
        .into_owned();
    if path.contains('\\') {
        return Err(refused(PathRefusal::Backslash));
    }
    if path.chars().any(char::is_control) {
        return Err(refused(PathRefusal::Control));
    }
    let segments: Vec<&str> = path.split('/').collect();
    if segments.iter().any(|s| *s == "." || *s == "..") {
        return Err(Malformed::DotSegment(raw.to_string()));
    }
    // The first segment is before the leading `/`, the last after a trailing one.
    let inner = segments.len().saturating_sub(1);
    if segments.iter().take(inner).skip(1).any(|s| s.is_empty()) {
        return Err(refused(PathRefusal::EmptySegment));
    }
    Ok(path)
}

/// The head as it goes on to the origin.
pub fn request_head(r: &Request) -> Vec<u8> {
    let mut out = format!("{} {} {}\r\n", r.method, r.target, r.version);
    for (k, v) in &r.headers {
        out.push_str(k);
        out.push_str(": ");
        out.push_str(v);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    out.into_bytes()
}

/// An origin's answer, as far as the proxy needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Where its body ends.
    pub body: ResponseBody,
    /// The origin keeps the connection open after it.
    pub keep_alive: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseBody {
    /// Framed: a length, or chunks.
    Framed(Body),
    /// Until the origin closes (HTTP/1.0 style): the connection ends with it.
    UntilClose,
}

/// Parses an origin's response head. `method` is the request's: the answer to `HEAD` has
/// no body whatever it announces.
pub fn parse_response(head: &[u8], method: &str) -> Result<Response, String> {
    let text = std::str::from_utf8(head).map_err(|_| "a response head that is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.splitn(3, ' ');
    let (version, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(format!("not an HTTP/1.x status line: {line:?}"));
    }
    let status: u16 = code
        .parse()
        .ok()
        .filter(|s| (100..1000).contains(s))
        .ok_or_else(|| format!("no status code in {line:?}"))?;
    let headers = request::header_lines(lines).map_err(|e| e.to_string())?;
    let named = |name: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
            .collect()
    };
    let has_token = |name: &str, token: &str| {
        named(name)
            .iter()
            .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    let mut keep_alive = match version {
        "HTTP/1.1" => !has_token("connection", "close"),
        _ => has_token("connection", "keep-alive"),
    };
    let body = if method.eq_ignore_ascii_case("HEAD")
        || (100..200).contains(&status)
        || status == 204
        || status == 304
    {
        ResponseBody::Framed(Body::Length(0))
    } else {
        let encodings = named("transfer-encoding");
        let lengths = named("content-length");
        let last = encodings
            .iter()
            .flat_map(|v| v.split(','))
            .map(|c| c.trim().to_ascii_lowercase())
            .next_back();
        match (last.as_deref(), lengths.as_slice()) {
            // Chunked comes last: its framing decides (RFC 9112 §6.3), and a length beside
            // it is ignored; the connection is not trusted with another answer after.
            (Some("chunked"), l) => {
                keep_alive &= l.is_empty();
                ResponseBody::Framed(Body::Chunked(Default::default()))
            }
            (Some(_), _) => ResponseBody::UntilClose,
            (None, []) => ResponseBody::UntilClose,
            (None, l) => {
                let first = l[0];
                let n: u64 = first
                    .parse()
                    .ok()
                    .filter(|_| l.iter().all(|x| *x == first))
                    .ok_or_else(|| format!("a response with Content-Length {l:?}"))?;
                ResponseBody::Framed(Body::Length(n))
            }
        }
    };
    if body == ResponseBody::UntilClose {
        keep_alive = false;
    }
    Ok(Response {
        status,
        body,
        keep_alive,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TLS: Origin<'static> = Origin {
        host: "git.test",
        port: 443,
        scheme: "https",
    };

    fn parse(head: &str) -> Result<Request, Malformed> {
        parse_request(head.as_bytes(), TLS)
    }

    #[test]
    fn a_request_is_read_for_its_method_path_and_framing() {
        let r = parse(
            "POST /me/tool.git/git-receive-pack?x=1 HTTP/1.1\r\nHost: git.test\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/me/tool.git/git-receive-pack");
        assert_eq!(r.target, "/me/tool.git/git-receive-pack?x=1");
        assert!(r.expects_continue && r.keep_alive);
        assert!(matches!(r.body, Body::Chunked(_)));
        let head = String::from_utf8(request_head(&r)).unwrap();
        assert!(!head.to_ascii_lowercase().contains("expect"), "{head}");
        // An absolute URL of the same origin is made origin-form; the port may be spelt.
        let r = parse("GET https://git.test:443/a HTTP/1.1\r\nHost: git.test:443\r\n\r\n").unwrap();
        assert_eq!(r.target, "/a");
        let r = parse("GET /a HTTP/1.0\r\n\r\n").unwrap();
        assert!(!r.keep_alive);
    }

    #[test]
    fn conflicting_framing_is_refused() {
        for head in [
            "POST / HTTP/1.1\r\nHost: git.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: git.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: git.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: git.test\r\nContent-Length: +3\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: git.test\r\nTransfer-Encoding : chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: git.test\r\n folded: x\r\n\r\n",
        ] {
            let err = parse(head).unwrap_err();
            assert_eq!(err.status(), 400, "{head:?}: {err}");
        }
    }

    #[test]
    fn another_host_on_the_connection_is_refused() {
        for head in [
            "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: git.test:8443\r\n\r\n",
            "GET https://evil.test/ HTTP/1.1\r\nHost: git.test\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: git.test\r\nHost: evil.test\r\n\r\n",
        ] {
            assert!(parse(head).is_err(), "{head:?}");
        }
        assert_eq!(
            parse("GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
                .unwrap_err()
                .status(),
            403
        );
        assert_eq!(
            parse("GET / HTTP/1.1\r\n\r\n").unwrap_err(),
            Malformed::NoHost
        );
        assert!(parse("GET http://git.test/ HTTP/1.1\r\nHost: git.test\r\n\r\n").is_err());
    }

    #[test]
    fn dot_segments_are_refused_even_encoded() {
        for target in [
            "/me/tool.git/../other.git/git-receive-pack",
            "/me/tool.git/%2e%2e/other.git/x",
            "/me/tool.git/%2E%2e%2Fother.git/x",
            "/./x",
            "/me/tool.git/..",
        ] {
            let head = format!("GET {target} HTTP/1.1\r\nHost: git.test\r\n\r\n");
            assert!(
                matches!(parse(&head), Err(Malformed::DotSegment(_))),
                "{target}"
            );
        }
        let r =
            parse("GET /api/projects/me%2Ftool/x..y HTTP/1.1\r\nHost: git.test\r\n\r\n").unwrap();
        assert_eq!(r.path, "/api/projects/me/tool/x..y");
    }

    /// `"* host/private/*" = "deny"` must not be passed by a spelling a server serves as
    /// `/private/secret.txt`; the same request spelt plainly is judged (and denied by the
    /// rule), and spellings every server reads one way go through.
    #[test]
    fn paths_a_server_reads_otherwise_are_refused() {
        for (target, why) in [
            ("//private/secret.txt", PathRefusal::EmptySegment),
            ("/%2fprivate/secret.txt", PathRefusal::EmptySegment),
            ("/%2Fprivate/secret.txt", PathRefusal::EmptySegment),
            ("/private//secret.txt", PathRefusal::EmptySegment),
            ("/private%2f/secret.txt", PathRefusal::EmptySegment),
            ("/\\private/secret.txt", PathRefusal::Backslash),
            ("/private%5csecret.txt", PathRefusal::Backslash),
            ("/private;x=1/secret.txt", PathRefusal::Parameters),
            ("/private;/secret.txt", PathRefusal::Parameters),
            ("/public#/../private/secret.txt", PathRefusal::Fragment),
            ("/public%00/secret.txt", PathRefusal::Control),
        ] {
            let head = format!("GET {target} HTTP/1.1\r\nHost: git.test\r\n\r\n");
            match parse(&head) {
                Err(Malformed::Path { why: got, .. }) => assert_eq!(got, why, "{target}"),
                other => panic!("{target}: {other:?}"),
            }
            assert_eq!(parse(&head).unwrap_err().status(), 400);
        }
        for (target, path) in [
            ("/private/secret.txt", "/private/secret.txt"),
            ("/private%2fsecret.txt", "/private/secret.txt"),
            ("/@types%2fnode", "/@types/node"),
            ("/repos/", "/repos/"),
            ("/", "/"),
            ("/a%3bb?x=//y;z", "/a;b"),
        ] {
            let head = format!("GET {target} HTTP/1.1\r\nHost: git.test\r\n\r\n");
            assert_eq!(parse(&head).unwrap().path, path, "{target}");
        }
        // A plain request's absolute URL is read the same way.
        let plain = Origin {
            scheme: "http",
            port: 80,
            ..TLS
        };
        let head = "GET http://git.test//private/x HTTP/1.1\r\nHost: git.test\r\n\r\n";
        assert!(matches!(
            parse_request(head.as_bytes(), plain),
            Err(Malformed::Path { .. })
        ));
    }

    #[test]
    fn a_response_says_where_its_body_ends() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "GET").unwrap();
        assert_eq!(r.body, ResponseBody::Framed(Body::Length(5)));
        assert!(r.keep_alive);
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "HEAD").unwrap();
        assert_eq!(r.body, ResponseBody::Framed(Body::Length(0)));
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET",
        )
        .unwrap();
        assert!(matches!(r.body, ResponseBody::Framed(Body::Chunked(_))));
        let r = parse_response(b"HTTP/1.0 200 OK\r\n\r\n", "GET").unwrap();
        assert_eq!(r.body, ResponseBody::UntilClose);
        assert!(!r.keep_alive);
        let r = parse_response(b"HTTP/1.1 204 No Content\r\n\r\n", "GET").unwrap();
        assert_eq!(r.body, ResponseBody::Framed(Body::Length(0)));
        assert!(
            parse_response(
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                "GET"
            )
            .is_err()
        );
        assert!(parse_response(b"SSH-2.0-x\r\n\r\n", "GET").is_err());
    }
}
