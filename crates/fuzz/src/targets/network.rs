//! The allow-list proxy's parsers: the request a sandboxed client sends to the proxy, the
//! first bytes inside a tunnel, a TLS ClientHello's server name, and each request on an
//! inspected connection.

use std::time::Duration;

use runner_network::inspect::http1;
use runner_network::{request, sni, tunnel};

use super::{MIB, Target};

pub const REQUEST: Target = Target {
    name: "proxy_request",
    about: "the proxy's reading of a request head (CONNECT or forwarded)",
    run: proxy_request,
    seeds: request_seeds,
    dictionary: HTTP_WORDS,
    max_len: 96 * 1024,
    memory: 4 * MIB,
    time: Duration::from_secs(2),
};

pub const TUNNEL: Target = Target {
    name: "tunnel_first_bytes",
    about: "the judgement of a tunnel's first bytes; a verdict reached on a prefix is the verdict on every longer input (no split changes it)",
    run: tunnel_first_bytes,
    seeds: tunnel_seeds,
    dictionary: HTTP_WORDS,
    max_len: 8 * 1024,
    memory: 4 * MIB,
    time: Duration::from_secs(4),
};

pub const SNI: Target = Target {
    name: "sni",
    about: "the TLS ClientHello reader that finds the server name",
    run: sni_name,
    seeds: hello_seeds,
    dictionary: &[b"\x16\x03\x01", b"\x00\x00", b"\xff\xff", b"\x00\x10"],
    max_len: 32 * 1024,
    memory: 4 * MIB,
    time: Duration::from_secs(2),
};

pub const INSPECTED: Target = Target {
    name: "inspected_request",
    about: "an inspected connection's request parser: what it accepts names the tunnel's host, a path without dot segments, and one framing; what it writes on parses again to the same request",
    run: inspected_request,
    seeds: inspected_seeds,
    dictionary: HTTP_WORDS,
    max_len: 96 * 1024,
    memory: 4 * MIB,
    time: Duration::from_secs(2),
};

const HTTP_WORDS: &[&[u8]] = &[
    b"GET ",
    b"CONNECT ",
    b"POST ",
    b" HTTP/1.1\r\n",
    b" HTTP/1.0\r\n",
    b"Host: ",
    b"host:",
    b"Content-Length: ",
    b"Transfer-Encoding: chunked\r\n",
    b"\r\n\r\n",
    b"\r\n",
    b"\n",
    b"http://",
    b"allowed.example",
    b"evil.example",
    b":443",
    b"[::1]",
    b"\x16\x03\x01",
];

/// The host the tunnel was opened to.
const HOST: &str = "allowed.example";
const PORT: u16 = 80;

fn proxy_request(data: &[u8]) {
    if let Some(end) = request::head_end(data) {
        assert!(end <= data.len(), "a head that ends past its buffer");
        let _ = request::parse(&data[..end]);
    }
    let _ = request::parse(data);
}

/// A request the inspector accepts is one the origin reads the same way: the head it
/// writes on parses again to the same method, target, path and framing.
fn inspected_request(data: &[u8]) {
    let origin = http1::Origin {
        host: HOST,
        port: 443,
        scheme: "https",
    };
    let end = request::head_end(data).unwrap_or(data.len());
    let Ok(req) = http1::parse_request(&data[..end], origin) else {
        return;
    };
    assert!(
        !req.path.split('/').any(|s| s == ".." || s == "."),
        "a dot segment passed: {:?}",
        req.path
    );
    let again = http1::parse_request(&http1::request_head(&req), origin)
        .expect("the head written on parses again");
    assert_eq!(
        (&again.method, &again.target, &again.path, &again.body),
        (&req.method, &req.target, &req.path, &req.body),
        "the origin would read another request"
    );
}

fn inspected_seeds() -> Vec<Vec<u8>> {
    [
        &b"GET /me/tool.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: allowed.example\r\n\r\n"[..],
        b"POST /me/tool.git/git-receive-pack HTTP/1.1\r\nHost: allowed.example:443\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
        b"POST /x HTTP/1.1\r\nHost: allowed.example\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET https://allowed.example/a/%2e%2e/b HTTP/1.1\r\nHost: allowed.example\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
    ]
    .iter()
    .map(|s| s.to_vec())
    .collect()
}

/// The relay judges whatever has arrived: a verdict it reaches on a prefix must be the one
/// the whole input gets, or a client could choose its verdict by pausing.
fn tunnel_first_bytes(data: &[u8]) {
    let whole = verdict(data);
    for cut in cuts(data.len()) {
        let early = verdict(&data[..cut]);
        if early != Verdict::Undecided {
            assert_eq!(
                early,
                whole,
                "the first {cut} bytes decided differently from all {} ({:?})",
                data.len(),
                String::from_utf8_lossy(&data[..cut.min(80)])
            );
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Undecided,
    Pass,
    Http(Vec<u8>),
    Refused,
}

fn verdict(data: &[u8]) -> Verdict {
    match tunnel::judge(data, HOST, PORT) {
        Ok(tunnel::First::Need(n)) => {
            assert!(
                n > data.len(),
                "asked for {n} bytes, but it has {}",
                data.len()
            );
            Verdict::Undecided
        }
        Ok(tunnel::First::Pass) => Verdict::Pass,
        Ok(tunnel::First::Http { head, head_len, .. }) => {
            assert!(head_len <= data.len());
            Verdict::Http(head)
        }
        Err(_) => Verdict::Refused,
    }
}

/// Every cut of a short input, and a spread of them across a long one.
fn cuts(len: usize) -> Vec<usize> {
    if len <= 300 {
        return (0..len).collect();
    }
    let step = len / 128;
    (0..300).chain((300..len).step_by(step.max(1))).collect()
}

fn sni_name(data: &[u8]) {
    if let Ok(sni::Hello::Name(Some(name))) = sni::inspect(data) {
        let _ = sni::same_host(&name, HOST);
    }
}

fn request_seeds() -> Vec<Vec<u8>> {
    [
        &b"CONNECT allowed.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\n\r\n"[..],
        b"GET http://allowed.example/simple/ HTTP/1.1\r\nHost: allowed.example\r\nUser-Agent: pip\r\n\r\n",
        b"POST http://allowed.example/upload HTTP/1.1\r\nHost: allowed.example\r\nContent-Length: 5\r\n\r\nhello",
        b"GET http://[::1]:8080/ HTTP/1.0\r\n\r\n",
    ]
    .iter()
    .map(|s| s.to_vec())
    .collect()
}

fn tunnel_seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = [
        &b"GET / HTTP/1.1\r\nHost: allowed.example\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
        b"\r\nGET http://evil.example/ HTTP/1.1\r\nHost: allowed.example\r\n\r\n",
        b"PROPFINDXXXXXXXXXXXXXXXXXXXXXXXXXXXXX / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
        b"SSH-2.0-OpenSSH_9.2\r\n",
        b"\x00\x01binary",
    ]
    .iter()
    .map(|s| s.to_vec())
    .collect();
    seeds.extend(hello_seeds());
    seeds
}

/// ClientHellos built field by field: one naming the tunnel's host, one another host.
fn hello_seeds() -> Vec<Vec<u8>> {
    [HOST, "evil.example"]
        .iter()
        .map(|name| client_hello(name))
        .collect()
}

fn client_hello(name: &str) -> Vec<u8> {
    let name = name.as_bytes();
    let mut sni = Vec::new();
    sni.extend(((name.len() + 3) as u16).to_be_bytes());
    sni.push(0);
    sni.extend((name.len() as u16).to_be_bytes());
    sni.extend(name);
    let mut extensions = vec![0, 0];
    extensions.extend((sni.len() as u16).to_be_bytes());
    extensions.extend(sni);
    let mut body = vec![3, 3];
    body.extend([0u8; 32]);
    body.push(0);
    body.extend([0, 2, 0x13, 0x01, 1, 0]);
    body.extend((extensions.len() as u16).to_be_bytes());
    body.extend(extensions);
    let mut handshake = vec![1];
    handshake.extend(&(body.len() as u32).to_be_bytes()[1..]);
    handshake.extend(body);
    let mut record = vec![0x16, 3, 1];
    record.extend((handshake.len() as u16).to_be_bytes());
    record.extend(handshake);
    record
}
