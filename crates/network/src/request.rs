//! The first thing a client says to an HTTP proxy: `CONNECT host:port` for a tunnel (HTTPS,
//! git over HTTPS, anything TLS), or a plain HTTP request whose target names the host. The
//! controller reads it on the host, so what is judged is what the sandbox asked for.

use super::body::{Body, Chunked};

/// The largest request head accepted; more is not a proxy request.
pub const MAX_HEAD: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRequest {
    /// The host as the client named it: a lower-case domain without a trailing dot, or an
    /// IP literal (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    pub kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A tunnel: answer `200`, then relay bytes both ways.
    Connect,
    /// A plain request: `head` is what to send the origin (origin-form target, the proxy's
    /// own headers gone, `Connection: close` so that one connection is one request and one
    /// host), and `body` where the request ends: nothing after it is sent.
    Forward { head: Vec<u8>, body: Body },
}

/// A header name as RFC 9110 §5.6.2 writes it. Anything else (`Transfer-Encoding\x0b`)
/// one parser may take for a known header and another not.
pub(crate) fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Why a request head is refused (the reason of its `400`). Each names what is wrong:
/// what two parsers could read two ways is refused rather than guessed at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRequest {
    #[error("both Content-Length and Transfer-Encoding")]
    LengthAndEncoding,
    #[error("the Transfer-Encoding {0:?} (only chunked goes through)")]
    Encoding(String),
    #[error("the Content-Length {0:?} is not a number")]
    Length(String),
    #[error("two different Content-Length headers")]
    TwoLengths,
    #[error("the request head is not UTF-8")]
    NotUtf8,
    #[error("not an HTTP request line: {0:?}")]
    RequestLine(String),
    #[error("unsupported protocol {0:?} (HTTP/1.0 and HTTP/1.1 go through)")]
    Protocol(String),
    #[error("the method {0:?} is not a token")]
    Method(String),
    #[error(
        "the method {0:?} is not all upper case (methods are case-sensitive, and servers that upper-case them would serve another method than the one judged): write it in capitals"
    )]
    MethodCase(String),
    #[error("whitespace or a control character in the request target {0:?}")]
    TargetBytes(String),
    #[error("a bare CR or LF in the request line {0:?}")]
    BareInRequestLine(String),
    #[error("credentials in a proxy URL are not passed on")]
    Credentials,
    #[error("the Host header ({header}) names another host than the request ({url})")]
    OtherHost { header: String, url: String },
    #[error("a request without a host: no absolute URL and no Host header")]
    NoHost,
    #[error(
        "only http:// URLs and CONNECT tunnels go through this proxy, not {0:?} (for https, the client must use CONNECT)"
    )]
    Target(String),
    #[error("a bare CR or LF in the header line {0:?}")]
    BareInHeader(String),
    #[error("malformed header line {0:?}")]
    Header(String),
    #[error("more than one Host header")]
    TwoHosts,
    #[error("not a host and port: {0:?}")]
    Authority(String),
}

/// Where a forwarded request's body ends, by its headers. Framing two parsers could read
/// two ways (both headers, lengths that differ, an encoding other than chunked) is
/// refused: the origin might find a second request where the proxy saw none.
pub(crate) fn framing(headers: &[(&str, &str)]) -> Result<Body, BadRequest> {
    let named = |name: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
            .collect()
    };
    let (lengths, encodings) = (named("content-length"), named("transfer-encoding"));
    if !encodings.is_empty() {
        if !lengths.is_empty() {
            return Err(BadRequest::LengthAndEncoding);
        }
        let codings: Vec<String> = encodings
            .iter()
            .flat_map(|v| v.split(','))
            .map(|c| c.trim().to_ascii_lowercase())
            .collect();
        if codings != ["chunked"] {
            return Err(BadRequest::Encoding(encodings.join(", ")));
        }
        return Ok(Body::Chunked(Chunked::default()));
    }
    let mut length = None;
    for v in lengths {
        let n: u64 = v
            .parse()
            .ok()
            .filter(|_| v.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| BadRequest::Length(v.to_string()))?;
        if length.is_some_and(|l| l != n) {
            return Err(BadRequest::TwoLengths);
        }
        length = Some(n);
    }
    Ok(Body::Length(length.unwrap_or(0)))
}

/// Where a request head ends (`\r\n\r\n`), counting the terminator.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Parses a complete head; the error is the reason for a `400`.
pub fn parse(head: &[u8]) -> Result<ProxyRequest, BadRequest> {
    let text = std::str::from_utf8(head).map_err(|_| BadRequest::NotUtf8)?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(BadRequest::RequestLine(line.to_string()));
    };
    if line.contains(['\r', '\n']) {
        return Err(BadRequest::BareInRequestLine(line.to_string()));
    }
    request_line(method, target, version)?;
    let headers = header_lines(lines)?;
    if method == "CONNECT" {
        let (host, port) = authority(target, None)?;
        return Ok(ProxyRequest {
            host,
            port,
            kind: Kind::Connect,
        });
    }
    let host_header = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("host"))
        .map(|(_, v)| *v);
    let mut missing_host = None;
    let (host, port, path) = if let Some(rest) = target.strip_prefix("http://") {
        // An origin-form target starts with `/`, also when the URL's path was empty.
        let (auth, path) = match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('?') => (&rest[..i], format!("/{}", &rest[i..])),
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        if auth.contains('@') {
            return Err(BadRequest::Credentials);
        }
        let (host, port) = authority(auth, Some(80))?;
        // The origin must see the host that was judged: a different Host header would let
        // an allowed address serve a name that was never asked about.
        if let Some(h) = host_header {
            let (named, named_port) = authority(h, Some(80))?;
            if named != host || named_port != port {
                return Err(BadRequest::OtherHost {
                    header: h.to_string(),
                    url: auth.to_string(),
                });
            }
        }
        // Without a Host header the origin would serve its default site, which on a
        // server of many need not be the one judged: it gets the judged host's.
        if host_header.is_none() {
            missing_host = Some(authority_text(&host, port));
        }
        (host, port, path)
    } else if target.starts_with('/') {
        let h = host_header.ok_or(BadRequest::NoHost)?;
        let (host, port) = authority(h, Some(80))?;
        (host, port, target.to_string())
    } else {
        return Err(BadRequest::Target(target.to_string()));
    };
    let body = framing(&headers)?;
    let out = forwarded_head(method, &path, version, missing_host, &headers);
    Ok(ProxyRequest {
        host,
        port,
        kind: Kind::Forward {
            head: out.into_bytes(),
            body,
        },
    })
}

/// A request line's parts, each one way only: a method of token characters (a lenient
/// origin could split `GET\thttp://other/` at the tab) and upper case (Werkzeug serves
/// `get` as `GET`, which a rule on `GET host/path` would never have seen), HTTP/1.0 or 1.1 (not `HTTP/2.0`,
/// whose frames can name any host), and a target without whitespace or control bytes.
pub(crate) fn request_line(method: &str, target: &str, version: &str) -> Result<(), BadRequest> {
    if !is_token(method) {
        return Err(BadRequest::Method(method.to_string()));
    }
    if method.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(BadRequest::MethodCase(method.to_string()));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(BadRequest::Protocol(version.to_string()));
    }
    if target.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(BadRequest::TargetBytes(target.to_string()));
    }
    Ok(())
}

/// `host[:port]` as a Host header names it: IPv6 in brackets, the port when not 80.
pub(crate) fn authority_text(host: &str, port: u16) -> String {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    if port == 80 {
        host
    } else {
        format!("{host}:{port}")
    }
}

/// The header lines up to the blank one. What the origin gets must parse the same way
/// there: no bare CR or LF, no space in a header name (`Host : x`), one Host only.
pub(crate) fn header_lines<'a>(
    lines: impl Iterator<Item = &'a str>,
) -> Result<Vec<(&'a str, &'a str)>, BadRequest> {
    let headers: Vec<(&str, &str)> = lines
        .take_while(|l| !l.is_empty())
        .map(|l| {
            if l.contains(['\r', '\n']) {
                return Err(BadRequest::BareInHeader(l.to_string()));
            }
            match l.split_once(':') {
                Some((k, v)) if is_token(k) && !v.chars().any(|c| c.is_control() && c != '\t') => {
                    Ok((k, v.trim()))
                }
                _ => Err(BadRequest::Header(l.to_string())),
            }
        })
        .collect::<Result<_, _>>()?;
    if headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("host"))
        .count()
        > 1
    {
        return Err(BadRequest::TwoHosts);
    }
    Ok(headers)
}

/// The head the origin gets: origin-form target, the client's headers but the proxy's
/// and the connection's own, and `Connection: close` (one request per connection).
/// `missing_host`: the Host to add, for a request that named its host only in its URL.
fn forwarded_head(
    method: &str,
    path: &str,
    version: &str,
    missing_host: Option<String>,
    headers: &[(&str, &str)],
) -> String {
    let mut out = format!("{method} {path} {version}\r\n");
    if let Some(host) = missing_host {
        out.push_str(&format!("Host: {host}\r\n"));
    }
    for (k, v) in headers {
        let drop = [
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|d| k.eq_ignore_ascii_case(d));
        if !drop {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    out
}

/// A forwarded head made for an upstream HTTP proxy: the target in absolute form, and the
/// proxy's own credentials (the client's were dropped with its proxy headers).
pub fn for_upstream(head: &[u8], host: &str, port: u16, authorization: Option<&str>) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let (line, rest) = text.split_once("\r\n").unwrap_or((&text, ""));
    let mut parts = line.splitn(3, ' ');
    let (method, path, version) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or("/"),
        parts.next().unwrap_or("HTTP/1.1"),
    );
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let mut out = format!("{method} http://{host}:{port}{path} {version}\r\n");
    if let Some(auth) = authorization {
        out.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    out.push_str(rest);
    out.into_bytes()
}

/// `host:port`, `[v6]:port`, or a bare host when a default port is given.
pub(crate) fn authority(
    text: &str,
    default_port: Option<u16>,
) -> Result<(String, u16), BadRequest> {
    let bad = || BadRequest::Authority(text.to_string());
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']').ok_or_else(bad)?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(bad()),
        };
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad());
        }
        (v6.to_string(), port)
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (text.to_string(), None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().map_err(|_| bad())?,
        None => default_port.ok_or_else(bad)?,
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let valid = !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':'));
    if !valid || port == 0 {
        return Err(bad());
    }
    // `0x7f000001` or `127.1` is where curl and the proxy's resolver connect: 127.0.0.1.
    // Rules, the inspection choice, programs and records see that address, as written.
    let host = match crate::address::ipv4_spelling(&host) {
        Some(ip) => ip.to_string(),
        None => host,
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_names_host_and_port() {
        let r =
            parse(b"CONNECT Example.ORG.:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n").unwrap();
        assert_eq!(
            (r.host.as_str(), r.port, r.kind),
            ("example.org", 443, Kind::Connect)
        );
        let r = parse(b"CONNECT [2001:db8::1]:8443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((r.host.as_str(), r.port), ("2001:db8::1", 8443));
        assert!(parse(b"CONNECT example.org HTTP/1.1\r\n\r\n").is_err());
        assert!(parse(b"CONNECT exa mple.org:443 HTTP/1.1\r\n\r\n").is_err());
    }

    #[test]
    fn plain_http_is_rewritten_for_the_origin() {
        let r = parse(
            b"GET http://files.test:8080/a/b?c=d HTTP/1.1\r\nHost: files.test:8080\r\nProxy-Connection: keep-alive\r\nUser-Agent: t\r\n\r\n",
        )
        .unwrap();
        assert_eq!((r.host.as_str(), r.port), ("files.test", 8080));
        let Kind::Forward { head, body } = r.kind else {
            panic!()
        };
        assert_eq!(body, Body::Length(0));
        assert_eq!(
            String::from_utf8(head.clone()).unwrap(),
            "GET /a/b?c=d HTTP/1.1\r\nHost: files.test:8080\r\nUser-Agent: t\r\nConnection: close\r\n\r\n"
        );
        // For an upstream proxy: the absolute target, and its own credentials.
        assert_eq!(
            String::from_utf8(for_upstream(&head, "files.test", 8080, Some("Basic eA=="))).unwrap(),
            "GET http://files.test:8080/a/b?c=d HTTP/1.1\r\nProxy-Authorization: Basic eA==\r\nHost: files.test:8080\r\nUser-Agent: t\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn the_host_judged_is_the_host_the_origin_sees() {
        let err =
            parse(b"GET http://allowed.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n").unwrap_err();
        assert!(matches!(err, BadRequest::OtherHost { .. }), "{err}");
        assert!(err.to_string().contains("another host"), "{err}");
        // A request sent straight to the proxy as if it were the server names its host.
        let r = parse(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n").unwrap();
        assert_eq!((r.host.as_str(), r.port), ("127.0.0.1", 9));
        assert!(parse(b"GET /x HTTP/1.1\r\n\r\n").is_err());
        assert!(parse(b"GET https://x.test/ HTTP/1.1\r\n\r\n").is_err());
        assert!(parse(b"GET http://u:p@x.test/ HTTP/1.1\r\n\r\n").is_err());
        assert!(parse(b"\x16\x03\x01 binary").is_err());
    }

    #[test]
    fn headers_the_origin_could_read_differently_are_refused() {
        for head in [
            &b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n"[..],
            b"GET /x HTTP/1.1\r\nHost : b.test\r\n\r\n",
            b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\nX: y\r\n\r\n",
            b"GET http://a.test/ HTTP/1.1\r\nX: y\rHost: b.test\r\n\r\n",
            b"POST http://a.test/ HTTP/1.1\r\nContent-Length: 40\r\nTransfer-Encoding\x0b: chunked\r\n\r\n",
            b"GET http://a.test/ HTTP/1.1\r\nX-A: b\x00c\r\n\r\n",
        ] {
            assert!(parse(head).is_err(), "{}", String::from_utf8_lossy(head));
        }
    }

    #[test]
    fn the_body_is_framed_one_way_or_refused() {
        let body = |extra: &str| {
            let head = format!("POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\n{extra}\r\n");
            parse(head.as_bytes()).map(|r| match r.kind {
                Kind::Forward { body, .. } => body,
                Kind::Connect => panic!(),
            })
        };
        assert_eq!(body("Content-Length: 12\r\n"), Ok(Body::Length(12)));
        assert_eq!(
            body("Content-Length: 12\r\ncontent-length: 12\r\n"),
            Ok(Body::Length(12))
        );
        assert_eq!(
            body("Transfer-Encoding: Chunked\r\n"),
            Ok(Body::Chunked(Chunked::default()))
        );
        for refused in [
            "Content-Length: 12\r\nContent-Length: 13\r\n",
            "Content-Length: +12\r\n",
            "Content-Length: 1 2\r\n",
            "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
            "Transfer-Encoding: gzip, chunked\r\n",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        ] {
            assert!(body(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn a_request_line_reads_one_way_only() {
        for (head, why) in [
            (
                &b"GET\thttp://b.test/ /x HTTP/1.1\r\nHost: a.test\r\n\r\n"[..],
                "method",
            ),
            (b"G(T /x HTTP/1.1\r\nHost: a.test\r\n\r\n", "method"),
            (
                b"GET /x\thttp://b.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
                "target",
            ),
            (b"GET /x\x00 HTTP/1.1\r\nHost: a.test\r\n\r\n", "target"),
            (b"GET /x HTTP/1.1\t\r\nHost: a.test\r\n\r\n", "protocol"),
            (b"GET /x HTTP/1.2\r\nHost: a.test\r\n\r\n", "protocol"),
            (b"GET /x HTTP/2.0\r\nHost: a.test\r\n\r\n", "protocol"),
            (b"GET /x http/1.1\r\nHost: a.test\r\n\r\n", "protocol"),
        ] {
            let err = parse(head).unwrap_err().to_string();
            assert!(
                err.contains(why),
                "{}: {err}",
                String::from_utf8_lossy(head)
            );
        }
        // Any token is a method; HTTP/1.0 goes through.
        assert!(parse(b"M-SEARCH /x HTTP/1.0\r\nHost: a.test\r\n\r\n").is_ok());
    }

    #[test]
    fn an_absolute_url_without_host_gives_the_origin_the_judged_host() {
        for (target, host) in [
            ("http://a.test/p", "a.test"),
            ("http://A.test:8080/p", "a.test:8080"),
            ("http://[::1]:81/p", "[::1]:81"),
        ] {
            let head = format!("GET {target} HTTP/1.0\r\nX: y\r\n\r\n");
            let Kind::Forward { head, .. } = parse(head.as_bytes()).unwrap().kind else {
                panic!()
            };
            assert_eq!(
                String::from_utf8(head).unwrap(),
                format!("GET /p HTTP/1.0\r\nHost: {host}\r\nX: y\r\nConnection: close\r\n\r\n")
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

        /// What goes to the origin reads, at the origin, as the request that was judged:
        /// the same host and port, and parsed again it is the same head.
        #[test]
        fn a_forwarded_head_parses_again_to_itself(
            method in proptest::sample::select(vec!["GET", "post", "M-SEARCH", "G\tT"]),
            target in proptest::sample::select(vec![
                "/", "/a?b", "http://a.test/x", "http://A.test:8080", "http://[::1]:81/",
                "http://a.test?q", "http://u@a.test/", "a.test:80", "/a b",
            ]),
            version in proptest::sample::select(vec!["HTTP/1.1", "HTTP/1.0", "HTTP/1.1 "]),
            headers in proptest::collection::vec(proptest::sample::select(vec![
                "Host: a.test", "Host: a.test:8080", "host: [::1]:81", "Host: b.test",
                "Content-Length: 3", "Transfer-Encoding: chunked", "Proxy-Connection: x",
                "Connection: keep-alive", "X:  v ", "X-Tab:\tv", "Keep-Alive: 5", "Y: \u{e9}",
            ]), 0..5),
        ) {
            let mut head = format!("{method} {target} {version}\r\n");
            for h in headers {
                head.push_str(h);
                head.push_str("\r\n");
            }
            head.push_str("\r\n");
            if let Ok(ProxyRequest { host, port, kind: Kind::Forward { head, body } }) =
                parse(head.as_bytes())
            {
                let again = parse(&head).unwrap();
                proptest::prop_assert_eq!((&again.host, again.port), (&host, port));
                proptest::prop_assert_eq!(again.kind, Kind::Forward { head, body });
            }
        }
    }

    /// Another spelling of an address is judged as the address, however it comes: a
    /// tunnel, an absolute URL, a Host header; a name or a dotted quad is as it was.
    #[test]
    fn other_spellings_of_an_address_are_judged_as_the_address() {
        for spelling in ["0x7f000001", "0177.0.0.1", "127.1", "127.0.1", "2130706433"] {
            for head in [
                format!("CONNECT {spelling}:18443 HTTP/1.1\r\n\r\n"),
                format!("GET http://{spelling}:18443/x HTTP/1.1\r\n\r\n"),
                format!("GET /x HTTP/1.1\r\nHost: {spelling}:18443\r\n\r\n"),
                format!("GET http://127.0.0.1:18443/x HTTP/1.1\r\nHost: {spelling}:18443\r\n\r\n"),
            ] {
                let r = parse(head.as_bytes()).unwrap();
                assert_eq!((r.host.as_str(), r.port), ("127.0.0.1", 18443), "{head}");
            }
        }
        // Controls: the plain address and names stay as they were.
        for (said, judged) in [
            ("127.0.0.1", "127.0.0.1"),
            ("localhost", "localhost"),
            ("0x7f.example", "0x7f.example"),
        ] {
            let r = parse(format!("CONNECT {said}:443 HTTP/1.1\r\n\r\n").as_bytes()).unwrap();
            assert_eq!(r.host, judged);
        }
    }

    /// `get` would be judged as `get` but served as `GET` by a server that upper-cases it.
    #[test]
    fn a_method_not_in_capitals_is_refused_by_name() {
        for method in ["get", "Get", "gET", "propfind", "connect"] {
            let err =
                parse(format!("{method} http://a.test/x HTTP/1.1\r\n\r\n").as_bytes()).unwrap_err();
            assert_eq!(err, BadRequest::MethodCase(method.to_string()));
            assert!(err.to_string().contains(&format!("{method:?}")), "{err}");
        }
        for method in ["GET", "PROPFIND", "M-SEARCH"] {
            let r = parse(format!("{method} http://a.test/x HTTP/1.1\r\n\r\n").as_bytes());
            assert!(r.is_ok(), "{method}: {r:?}");
        }
    }

    #[test]
    fn head_end_counts_the_terminator() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
    }
}
