//! What a `CONNECT` tunnel may carry, judged from the client's first bytes.
//!
//! A tunnel is judged by the host it names, but the server at the other end may serve many
//! hosts (a CDN) and pick one by what the client says inside: the TLS server name, or an
//! HTTP request's `Host`. So the first flight is held until it shows which host it is for:
//! a TLS handshake must name the tunnel's host ([`super::sni`]), and a plain HTTP request
//! (clients such as Node's fetch tunnel `http://` too) must name it in its `Host` and goes
//! on as one request, like a forwarded one ([`super::body`]). Anything else (SSH, say)
//! passes: no web server takes it for a request.

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
    #[error("over 64 KiB without a request head")]
    NoHead,
    #[error("an HTTP request head over 64 KiB")]
    HeadTooLong,
    #[error("an HTTP request that {0}")]
    BadHttp(#[source] BadRequest),
    #[error("a CONNECT inside a tunnel")]
    Connect,
    #[error("an HTTP request for {host}:{port}")]
    OtherTarget { host: String, port: u16 },
}

/// Judges the first bytes of a tunnel to `host:port`. `Err` refuses the tunnel, and says
/// why.
pub fn judge(buf: &[u8], host: &str, port: u16) -> Result<First, Refused> {
    match sni::inspect(buf) {
        Ok(Hello::Incomplete(need)) => return Ok(First::Need(need)),
        Ok(Hello::Name(Some(name))) => {
            return if sni::same_host(&name, host) {
                Ok(First::Pass)
            } else {
                Err(Refused::OtherName(name))
            };
        }
        // A client that names a host always sends it; one that does not may be asking the
        // server for its default site, which need not be this one.
        Ok(Hello::Name(None)) if host.parse::<std::net::IpAddr>().is_err() => {
            return Err(Refused::NoName);
        }
        Ok(Hello::Name(None)) => return Ok(First::Pass),
        Err(e) => return Err(Refused::Unreadable(e)),
        Ok(Hello::NotTls) => {}
    }
    if buf.len() > MAX_HEAD + 2 * 1024 {
        return Err(Refused::NoHead);
    }
    // Servers skip empty lines before a request line.
    let start = buf
        .iter()
        .position(|b| *b != b'\r' && *b != b'\n')
        .unwrap_or(buf.len());
    let text = &buf[start..];
    let method_len = text.iter().take_while(|b| b.is_ascii_uppercase()).count();
    match text.get(method_len) {
        None if method_len < 24 => return Ok(First::Need(buf.len() + 1)),
        Some(b' ') if method_len > 0 => {}
        _ => return Ok(First::Pass),
    }
    let Some(end) = request::head_end(text) else {
        if text.len() > MAX_HEAD {
            return Err(Refused::HeadTooLong);
        }
        return Ok(First::Need(buf.len() + 1));
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_in_a_tunnel_must_name_its_host_and_is_one_request() {
        let req = b"\r\nGET /simple/six/ HTTP/1.1\r\nHost: pypi.org\r\n\r\nGET / HTTP/1.1\r\nHost: evil.example\r\n\r\n";
        for cut in [0, 3, 10, 30] {
            assert!(
                matches!(judge(&req[..cut], "pypi.org", 80), Ok(First::Need(n)) if n > cut),
                "cut at {cut}"
            );
        }
        let Ok(First::Http {
            head,
            head_len,
            body,
        }) = judge(req, "pypi.org", 80)
        else {
            panic!("{:?}", judge(req, "pypi.org", 80));
        };
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /simple/six/ HTTP/1.1\r\nHost: pypi.org\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(&req[head_len..head_len + 3], b"GET");
        assert_eq!(body, Body::Length(0));
        let other = judge(
            b"GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
            "pypi.org",
            80,
        );
        assert!(other.unwrap_err().to_string().contains("evil.example:80"));
        let port = judge(
            b"GET / HTTP/1.1\r\nHost: pypi.org:8080\r\n\r\n",
            "pypi.org",
            80,
        );
        assert!(port.is_err());
        let nested = judge(b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n", "pypi.org", 80);
        assert!(nested.is_err());
    }

    #[test]
    fn other_protocols_pass_and_tls_must_name_a_named_host() {
        assert_eq!(
            judge(b"SSH-2.0-OpenSSH_9.2\r\n", "git.example", 22),
            Ok(First::Pass)
        );
        assert_eq!(judge(b"\x00\x01binary", "a.example", 9), Ok(First::Pass));
        assert_eq!(
            judge(b"get / HTTP/1.1\r\n", "a.example", 80),
            Ok(First::Pass)
        );
        // A ClientHello with no server name: fine to an address, not to a name.
        let mut bare = vec![0x16, 3, 1, 0, 0];
        let mut body = vec![1, 0, 0, 0, 3, 3];
        body.extend([0u8; 32]);
        body.extend([0, 0, 2, 0x13, 0x01, 1, 0]);
        let n = (body.len() - 4) as u32;
        body[1..4].copy_from_slice(&n.to_be_bytes()[1..]);
        bare[3..5].copy_from_slice(&(body.len() as u16).to_be_bytes());
        bare.extend(body);
        assert_eq!(judge(&bare, "127.0.0.1", 443), Ok(First::Pass));
        assert!(judge(&bare, "pypi.org", 443).is_err());
    }
}
