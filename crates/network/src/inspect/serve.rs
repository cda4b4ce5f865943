//! One inspected connection: the sandbox's TLS answered with the session's certificate,
//! then request after request read, judged, and sent on over the proxy's own TLS
//! connection to the host. The answers of a host a secret goes to come back scrubbed
//! ([`crate::scrub`]): the value replaced by the placeholder, the body re-framed.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::Inspection;
use super::http1::{self, Origin, ResponseBody};
use crate::body::Body;
use crate::egress::ProxyServer;
use crate::scrub::Scrubber;
use crate::{ConnectionRecord, Shared};
use runner_permission::{PermissionError, PermissionRequest};

/// The longest request or response head read.
const MAX_HEAD: usize = crate::request::MAX_HEAD;

/// How long a client may sit between requests, or take over one head.
const IDLE: Duration = Duration::from_secs(120);

/// Where the inspected connection's requests go.
pub(crate) struct Upstream<'a> {
    pub host: &'a str,
    pub port: u16,
    pub addrs: Vec<SocketAddr>,
    pub via: Option<&'static ProxyServer>,
    /// The connection already made when the tunnel was judged, used first.
    pub first: Option<TcpStream>,
    pub timeout: Duration,
}

/// A stream and what has been read from it and not yet used.
struct Buffered<S> {
    io: S,
    buf: Vec<u8>,
    /// Where reads land: made once, as a body of megabytes passes through it.
    chunk: Box<[u8]>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Buffered<S> {
    fn new(io: S) -> Self {
        Buffered {
            io,
            buf: Vec::new(),
            chunk: vec![0u8; 64 * 1024].into_boxed_slice(),
        }
    }

    /// Reads more; 0 at the end.
    async fn fill(&mut self) -> std::io::Result<usize> {
        let n = self.io.read(&mut self.chunk).await?;
        self.buf.extend_from_slice(&self.chunk[..n]);
        Ok(n)
    }

    /// The next head through its blank line; `None` once the stream ends or fails (a head
    /// cut short is none anyone acts on). `Err`: a head too long, to be answered.
    async fn head(&mut self) -> Result<Option<Vec<u8>>, String> {
        loop {
            if let Some(end) = crate::request::head_end(&self.buf) {
                if end > MAX_HEAD {
                    return Err("a head over 64 KiB".into());
                }
                let rest = self.buf.split_off(end);
                return Ok(Some(std::mem::replace(&mut self.buf, rest)));
            }
            if self.buf.len() > MAX_HEAD {
                return Err("a head over 64 KiB".into());
            }
            // The end, or a failed read (a client gone without closing its TLS): nobody
            // is left to answer.
            match self.fill().await {
                Ok(0) | Err(_) => return Ok(None),
                Ok(_) => {}
            }
        }
    }

    /// Copies the body `body` frames from here to `to`; the bytes copied.
    async fn body_to<W: AsyncWrite + Unpin>(
        &mut self,
        to: &mut W,
        mut body: Body,
    ) -> std::io::Result<u64> {
        let mut copied = 0u64;
        while !body.done() {
            // What was read before, then straight from the stream: no copy on the way
            // unless a read runs past the body.
            let n = if !self.buf.is_empty() {
                let n = body.take(&self.buf);
                to.write_all(&self.buf[..n]).await?;
                self.buf.drain(..n);
                n
            } else {
                let read = self.io.read(&mut self.chunk).await?;
                if read == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                let n = body.take(&self.chunk[..read]);
                to.write_all(&self.chunk[..n]).await?;
                self.buf.extend_from_slice(&self.chunk[n..read]);
                n
            };
            copied += n as u64;
            if n == 0 && !body.done() {
                return Err(std::io::Error::other("broken chunked framing"));
            }
        }
        Ok(copied)
    }

    /// The content of `body` (its chunks' framing gone) through `scrub` to `to`: in
    /// chunks of its own when `chunked`, else as it comes. The bytes read from here.
    async fn scrubbed_to<W: AsyncWrite + Unpin>(
        &mut self,
        to: &mut W,
        body: ResponseBody,
        scrub: &mut Scrubber,
        chunked: bool,
    ) -> std::io::Result<u64> {
        let mut body = match body {
            ResponseBody::Framed(body) => Some(body),
            ResponseBody::UntilClose => None,
        };
        let mut read = 0u64;
        let mut content = Vec::new();
        while !body.as_ref().is_some_and(Body::done) {
            if self.buf.is_empty() && self.fill().await? == 0 {
                if body.is_none() {
                    break;
                }
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let n = match body.as_mut() {
                Some(body) => body.take_content(&self.buf, &mut content),
                None => {
                    content.extend_from_slice(&self.buf);
                    self.buf.len()
                }
            };
            if n == 0 {
                return Err(std::io::Error::other("broken chunked framing"));
            }
            self.buf.drain(..n);
            read += n as u64;
            write_piece(to, &scrub.push(&content), chunked).await?;
            content.clear();
        }
        write_piece(to, &scrub.finish(), chunked).await?;
        if chunked {
            to.write_all(b"0\r\n\r\n").await?;
        }
        Ok(read)
    }

    /// Copies everything until the end of the stream.
    async fn rest_to<W: AsyncWrite + Unpin>(&mut self, to: &mut W) -> std::io::Result<u64> {
        let mut copied = self.buf.len() as u64;
        to.write_all(&self.buf).await?;
        self.buf.clear();
        copied += tokio::io::copy(&mut self.io, to).await?;
        Ok(copied)
    }
}

/// One piece of a scrubbed body: a chunk of its own, or as it is.
async fn write_piece<W: AsyncWrite + Unpin>(
    to: &mut W,
    piece: &[u8],
    chunked: bool,
) -> std::io::Result<()> {
    if piece.is_empty() {
        return Ok(());
    }
    if chunked {
        to.write_all(format!("{:x}\r\n", piece.len()).as_bytes())
            .await?;
        to.write_all(piece).await?;
        return to.write_all(b"\r\n").await;
    }
    to.write_all(piece).await
}

/// How one request went.
enum Next {
    /// Answered; the connection may carry another.
    Again,
    /// The connection ends here.
    End,
}

/// Serves one inspected connection from the sandbox (`client`, whose TLS is not yet
/// answered) until either side ends it or a request is refused.
pub(crate) async fn serve<C>(
    shared: &Shared,
    inspection: &Inspection,
    client: C,
    mut upstream: Upstream<'_>,
) where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let Some(tls) = accept(shared, inspection, client, &upstream).await else {
        return;
    };
    let mut client = Buffered::new(tls);
    let mut origin: Option<Buffered<TlsStream<TcpStream>>> = None;
    loop {
        let head = match tokio::time::timeout(IDLE, client.head()).await {
            Ok(Ok(Some(head))) => head,
            Ok(Ok(None)) | Err(_) => break,
            Ok(Err(e)) => {
                refuse(&mut client.io, 400, &e).await;
                break;
            }
        };
        let next = one_request(
            shared,
            inspection,
            &mut client,
            &mut origin,
            &mut upstream,
            &head,
        )
        .await;
        if matches!(next, Next::End) {
            break;
        }
    }
    let _ = client.io.shutdown().await;
}

/// The sandbox's handshake, answered for the tunnel's host. A handshake naming another
/// host (SNI) is cut: the certificate would not fit it, and a client that ignored that
/// would be asking the wrong host.
async fn accept<C>(
    shared: &Shared,
    inspection: &Inspection,
    client: C,
    upstream: &Upstream<'_>,
) -> Option<tokio_rustls::server::TlsStream<C>>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let acceptor = tokio_rustls::LazyConfigAcceptor::new(Default::default(), client);
    let start = tokio::time::timeout(IDLE, acceptor).await.ok()?.ok()?;
    let named = start
        .client_hello()
        .server_name()
        .map(|n| n.trim_end_matches('.').to_ascii_lowercase());
    if let Some(named) = named.filter(|n| n != upstream.host) {
        let mut record = ConnectionRecord::new(upstream.host, upstream.port);
        record.decision = "deny".into();
        record.reason = Some(format!(
            "refused: a TLS handshake for {named} in the tunnel to {}",
            upstream.host
        ));
        let id = shared.record(record);
        shared.finish(id);
        return None;
    }
    let failed = |why: String| {
        let mut record = ConnectionRecord::new(upstream.host, upstream.port);
        record.decision = "deny".into();
        record.reason = Some(why);
        let id = shared.record(record);
        shared.finish(id);
        None
    };
    let config = match inspection.ca.server_config(upstream.host) {
        Ok(c) => c,
        Err(e) => return failed(e.to_string()),
    };
    match tokio::time::timeout(IDLE, start.into_stream(config)).await {
        Ok(Ok(tls)) => Some(tls),
        // Most often a client that trusts its own bundle, not the sandbox's: the record
        // says what to do.
        Ok(Err(e)) => failed(format!(
            "the client's TLS handshake with the inspecting proxy failed ({e}); a client must trust the sandbox's bundle ($SSL_CERT_FILE), which holds the session's authority"
        )),
        Err(_) => None,
    }
}

/// Reads, judges and relays one request whose head is `head`.
async fn one_request<C>(
    shared: &Shared,
    inspection: &Inspection,
    client: &mut Buffered<C>,
    origin: &mut Option<Buffered<TlsStream<TcpStream>>>,
    upstream: &mut Upstream<'_>,
    head: &[u8],
) -> Next
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let (host, port) = (upstream.host.to_string(), upstream.port);
    let at = Origin {
        host: &host,
        port,
        scheme: "https",
    };
    let mut req = match http1::parse_request(head, at) {
        Ok(r) => r,
        Err(e) => {
            let (said, why) = (as_said(head, &host), format!("refused: {e}"));
            return deny(shared, at, client, said.as_deref(), (e.status(), &why), &[]).await;
        }
    };
    let subject = super::subject(&req.method, &host, &req.path);
    if let Err(reason) = judge(shared, &subject).await {
        return deny(shared, at, client, Some(&subject), (403, &reason), &[]).await;
    }
    let scrubbing = inspection.secrets.any_go_to(&host);
    if scrubbing {
        plain_answers(&mut req.headers);
    }
    let used = match inspection
        .secrets
        .put_in(&host, &mut req.target, &mut req.headers)
    {
        Ok(used) => used,
        Err(misplaced) => {
            let reason = format!("refused: {misplaced}");
            let names = [misplaced.name.clone()];
            return deny(shared, at, client, Some(&subject), (403, &reason), &names).await;
        }
    };
    let id = record_request(shared, &host, port, Some(&subject), "allow", None, &used);
    let mut scrub = inspection.secrets.scrubber(&host, &req.headers);
    let relayed = relay(inspection, client, origin, upstream, &req, scrub.as_mut()).await;
    let scrubbed = scrub.as_ref().map(|s| s.found()).unwrap_or_default();
    settle(shared, id, &relayed, scrubbed);
    if let (Some(failed), None) = (&relayed.failed, relayed.status) {
        refuse(&mut client.io, 502, failed).await;
        return Next::End;
    }
    if relayed.again && req.keep_alive {
        Next::Again
    } else {
        Next::End
    }
}

/// Records a refused request (as `said`, or unreadable) with the secrets it named, and
/// answers the client with `status` and the reason; the connection ends there.
async fn deny<C>(
    shared: &Shared,
    at: Origin<'_>,
    client: &mut Buffered<C>,
    said: Option<&str>,
    (status, reason): (u16, &str),
    secrets: &[String],
) -> Next
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    record_request(
        shared,
        at.host,
        at.port,
        said,
        "deny",
        Some(reason),
        secrets,
    );
    refuse(&mut client.io, status, reason).await;
    Next::End
}

/// An allowed request's record completed with what relaying it did, and closed.
fn settle(shared: &Shared, id: u64, relayed: &Relayed, scrubbed: Vec<String>) {
    shared.update(id, |r| {
        r.bytes_sent = relayed.sent;
        r.bytes_received = relayed.received;
        r.scrubbed = scrubbed;
        if let Some(status) = relayed.status {
            r.status = Some(status);
        }
        if let Some(failed) = &relayed.failed {
            r.reason = Some(failed.clone());
        }
        if relayed.cut {
            r.decision = "deny".into();
        }
    });
    shared.finish(id);
}

/// A request refused before it could be read whole, as its first line names it (`METHOD
/// host/path`, the path of an absolute-form target), for the record; `None` when even
/// that is unreadable.
pub(super) fn as_said(head: &[u8], host: &str) -> Option<String> {
    let line = head.split(|b| *b == b'\r' || *b == b'\n').next()?;
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next()?, parts.next()?);
    let printable =
        |s: &str| !s.is_empty() && s.len() <= 2048 && s.chars().all(|c| c.is_ascii_graphic());
    (printable(method) && printable(target)).then(|| {
        // `https://host:port/path`: the path only, as a rule would see it.
        let path = match target.split_once("://") {
            Some((_, rest)) => rest.find(['/', '?']).map_or("", |i| &rest[i..]),
            None => target,
        };
        let path = match path.split('?').next().unwrap_or_default() {
            "" => "/",
            path => path,
        };
        super::subject(method, host, path)
    })
}

/// Asks the `http` permission about `subject`; the refusal's reason names the rule.
pub(crate) async fn judge(shared: &Shared, subject: &str) -> Result<(), String> {
    let mut request =
        PermissionRequest::new("http", vec![subject.to_string()], vec![subject.to_string()]);
    request.tool = Some("a command in the sandbox (an inspected HTTPS request)".into());
    match shared.policy.gate.ask(&request).await {
        Ok(()) => Ok(()),
        Err(e) => Err(reason_of(subject, &e)),
    }
}

/// A short reason for a refused request: the rule, or who refused.
pub(crate) fn reason_of(subject: &str, e: &PermissionError) -> String {
    match e {
        PermissionError::Denied(d) => match &d.rule {
            Some(r) => format!(
                "{subject} is denied by the rule http {:?} = \"deny\" ({} #{})",
                r.pattern, r.source.origin, r.source.position
            ),
            None => format!("{subject} is denied"),
        },
        PermissionError::Rejected { .. } => format!("the user refused {subject}"),
        PermissionError::Unanswered { reason, .. } => {
            format!("{subject} needs permission and was refused because {reason}")
        }
    }
}

/// One request's record, through the same log (and observer) as every connection.
fn record_request(
    shared: &Shared,
    host: &str,
    port: u16,
    subject: Option<&str>,
    decision: &str,
    reason: Option<&str>,
    secrets: &[String],
) -> u64 {
    let mut record = ConnectionRecord::new(host, port);
    record.decision = decision.to_string();
    record.reason = reason.map(str::to_string);
    record.request = Some(subject.unwrap_or("(unreadable request)").to_string());
    record.scheme = Some("https".into());
    record.secrets = secrets.to_vec();
    let id = shared.record(record);
    if decision != "allow" {
        shared.finish(id);
    }
    id
}

/// What relaying one allowed request did.
#[derive(Default)]
struct Relayed {
    sent: u64,
    received: u64,
    /// The origin's final status.
    status: Option<u16>,
    /// Both sides may go on to another request.
    again: bool,
    failed: Option<String>,
    /// The answer was refused, not passed: it could not be scrubbed.
    cut: bool,
}

/// Sends `req` on and its answer back. The origin connection is made as needed; a kept
/// one the origin has closed meanwhile is made again, once, for a request without a body
/// (nothing of it can have been acted on).
async fn relay<C>(
    inspection: &Inspection,
    client: &mut Buffered<C>,
    origin: &mut Option<Buffered<TlsStream<TcpStream>>>,
    upstream: &mut Upstream<'_>,
    req: &http1::Request,
    mut scrub: Option<&mut Scrubber>,
) -> Relayed
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let head = http1::request_head(req);
    let retry_safe = req.body == Body::Length(0);
    let mut continued = false;
    for attempt in 0..2 {
        let mut out = Relayed::default();
        let reused = origin.is_some();
        if origin.is_none() {
            match connect(inspection, upstream).await {
                Ok(c) => *origin = Some(Buffered::new(c)),
                Err(e) => {
                    out.failed = Some(e);
                    return out;
                }
            }
        }
        let Some(to) = origin.as_mut() else {
            return out;
        };
        let stale = |out: &Relayed| reused && retry_safe && attempt == 0 && out.received == 0;
        if let Err(e) = to.io.write_all(&head).await {
            out.failed = Some(format!("writing to {} failed: {e}", upstream.host));
            *origin = None;
            if stale(&out) {
                continue;
            }
            return out;
        }
        out.sent = head.len() as u64;
        if req.expects_continue && !continued {
            continued = true;
            if client
                .io
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .is_err()
            {
                *origin = None;
                return out;
            }
        }
        match client.body_to(&mut to.io, req.body.clone()).await {
            Ok(n) => out.sent += n,
            Err(e) => {
                out.failed = Some(format!("the request's body did not arrive whole: {e}"));
                *origin = None;
                return out;
            }
        }
        let _ = to.io.flush().await;
        let answered = answer(client, to, req, scrub.as_deref_mut(), &mut out).await;
        if !answered || !out.again {
            *origin = None;
        }
        if !answered && out.status.is_none() && stale(&out) {
            continue;
        }
        return out;
    }
    Relayed {
        failed: Some(format!(
            "{} closed the connection twice without answering",
            upstream.host
        )),
        ..Relayed::default()
    }
}

/// The origin's answer back to the client: interim ones (`100`, `103`) as they come, then
/// the final one with exactly the body its framing announces; from a secret's host
/// (`scrub`), with the value replaced by the placeholder. False when it failed.
async fn answer<C>(
    client: &mut Buffered<C>,
    to: &mut Buffered<TlsStream<TcpStream>>,
    req: &http1::Request,
    mut scrub: Option<&mut Scrubber>,
    out: &mut Relayed,
) -> bool
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        let (head, response) = match response_head(to, &req.method).await {
            Ok(read) => read,
            Err(why) => {
                out.failed = Some(why);
                return false;
            }
        };
        let (head, reframed) = match scrub.as_deref_mut() {
            None => (head, Reframed::As),
            Some(s) => match scrubbed_head(s, &head, &response, &req.version) {
                Ok(scrubbed) => scrubbed,
                Err(why) => {
                    out.failed = Some(why);
                    out.cut = true;
                    return false;
                }
            },
        };
        if client.io.write_all(&head).await.is_err() {
            return false;
        }
        out.received += head.len() as u64;
        if response.status == 101 {
            switched(client, to, out).await;
            return true;
        }
        if (100..200).contains(&response.status) {
            continue;
        }
        out.status = Some(response.status);
        let copied = match (response.body, scrub) {
            (body, Some(s)) if reframed != Reframed::As => {
                let chunked = reframed == Reframed::Chunked;
                to.scrubbed_to(&mut client.io, body, s, chunked).await
            }
            (ResponseBody::Framed(body), _) => to.body_to(&mut client.io, body).await,
            (ResponseBody::UntilClose, _) => to.rest_to(&mut client.io).await,
        };
        match copied {
            Ok(n) => out.received += n,
            Err(e) => {
                out.failed = Some(format!("the origin's answer was cut: {e}"));
                return false;
            }
        }
        let _ = client.io.flush().await;
        // Bytes after the answer that nobody asked for: the origin is not trusted with
        // another request.
        out.again = response.keep_alive && to.buf.is_empty() && reframed != Reframed::ToClose;
        return true;
    }
}

/// The origin's next answer head, read and parsed; `Err`: why there is none.
async fn response_head(
    to: &mut Buffered<TlsStream<TcpStream>>,
    method: &str,
) -> Result<(Vec<u8>, http1::Response), String> {
    let head = match to.head().await {
        Ok(Some(h)) => h,
        Ok(None) => return Err("the origin closed without answering".into()),
        Err(e) => return Err(format!("the origin's answer: {e}")),
    };
    match http1::parse_response(&head, method) {
        Ok(response) => Ok((head, response)),
        Err(e) => Err(format!("the origin's answer is not HTTP/1.1: {e}")),
    }
}

/// Switched protocols (a WebSocket): from here on the bytes are not HTTP; both ways as
/// they come, until either side ends.
async fn switched<C>(
    client: &mut Buffered<C>,
    to: &mut Buffered<TlsStream<TcpStream>>,
    out: &mut Relayed,
) where
    C: AsyncRead + AsyncWrite + Unpin,
{
    out.status = Some(101);
    let _ = client.io.write_all(&to.buf).await;
    let _ = to.io.write_all(&client.buf).await;
    to.buf.clear();
    client.buf.clear();
    if let Ok((up, down)) = tokio::io::copy_bidirectional(&mut client.io, &mut to.io).await {
        out.sent += up;
        out.received += down;
    }
}

/// How an answer's body goes to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reframed {
    /// As the origin framed it (no body, or nothing scrubbed).
    As,
    /// Scrubbed, in chunks: its length may have changed.
    Chunked,
    /// Scrubbed, to an HTTP/1.0 client: ended by closing the connection.
    ToClose,
}

/// The head of an answer from a secret's host, scrubbed, and how its body goes on: the
/// placeholder and the value may differ in length, so a body is sent in chunks (to an
/// HTTP/1.1 client) or until the connection closes (HTTP/1.0), never under the origin's
/// `Content-Length`. `Err`: an answer that cannot be searched (a compressed body, a
/// WebSocket), which is cut rather than passed.
fn scrubbed_head(
    scrub: &mut Scrubber,
    head: &[u8],
    response: &http1::Response,
    version: &str,
) -> Result<(Vec<u8>, Reframed), String> {
    if response.status == 101 {
        return Err(
            "refused: a WebSocket from a host a secret goes to, which cannot be searched for the secret's value".into(),
        );
    }
    if response.body == ResponseBody::Framed(Body::Length(0)) {
        return Ok((scrub.whole(head), Reframed::As));
    }
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n").take_while(|l| !l.is_empty());
    let mut out = format!("{}\r\n", lines.next().unwrap_or_default());
    let reframed = if version == "HTTP/1.1" {
        Reframed::Chunked
    } else {
        Reframed::ToClose
    };
    for line in lines {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim();
        let coded = name == "content-encoding"
            && value
                .split(',')
                .any(|c| !c.trim().eq_ignore_ascii_case("identity"));
        let other_coding = name == "transfer-encoding" && !value.eq_ignore_ascii_case("chunked");
        if coded || other_coding {
            return Err(format!(
                "refused: the answer is encoded ({line}), so it cannot be searched for the value of a secret that goes to this host; the proxy asked for an unencoded answer (Accept-Encoding: identity)"
            ));
        }
        let framing = ["content-length", "transfer-encoding"].contains(&name.as_str());
        let connection =
            reframed == Reframed::ToClose && ["connection", "keep-alive"].contains(&name.as_str());
        if !framing && !connection {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str(match reframed {
        Reframed::Chunked => "Transfer-Encoding: chunked\r\n\r\n",
        _ => "Connection: close\r\n\r\n",
    });
    Ok((scrub.whole(out.as_bytes()), reframed))
}

/// A request to a host a secret goes to asks for its answer whole and unencoded: a
/// compressed body could not be searched for the value, and a range of one could carry
/// the value in pieces, none of them whole.
fn plain_answers(headers: &mut Vec<(String, String)>) {
    headers.retain(|(k, _)| {
        !["accept-encoding", "range", "if-range"]
            .iter()
            .any(|d| k.eq_ignore_ascii_case(d))
    });
    headers.push(("Accept-Encoding".into(), "identity".into()));
}

/// The proxy's own TLS connection to the inspected host, verified against the host's
/// trust: the connection made when the tunnel was judged, else a new one.
async fn connect(
    inspection: &Inspection,
    upstream: &mut Upstream<'_>,
) -> Result<TlsStream<TcpStream>, String> {
    let tcp = match upstream.first.take() {
        Some(tcp) => tcp,
        None => match upstream.via {
            Some(proxy) => proxy
                .tunnel(upstream.host, upstream.port, upstream.timeout)
                .await
                .map_err(|e| e.to_string())?,
            None => crate::egress::connect_direct(&upstream.addrs, upstream.timeout)
                .await
                .map_err(|e| {
                    format!("cannot connect to {}:{}: {e}", upstream.host, upstream.port)
                })?,
        },
    };
    let _ = tcp.set_nodelay(true);
    let name = rustls::pki_types::ServerName::try_from(upstream.host.to_string())
        .map_err(|e| format!("{} is not a name TLS can verify: {e}", upstream.host))?;
    let connector = tokio_rustls::TlsConnector::from(inspection.upstream.clone());
    tokio::time::timeout(upstream.timeout, connector.connect(name, tcp))
        .await
        .map_err(|_| format!("the TLS handshake with {} took too long", upstream.host))?
        .map_err(|e| format!("the TLS handshake with {} failed: {e}", upstream.host))
}

/// Answers a refusal inside the inspected connection, then ends it: the status line and
/// the body both say why (the rule that decided).
pub(crate) async fn refuse<W: AsyncWrite + Unpin>(to: &mut W, status: u16, reason: &str) {
    let _ = to.write_all(&refusal(status, reason)).await;
    let _ = to.flush().await;
    let _ = to.shutdown().await;
}

/// An HTTP answer for a refusal.
pub(crate) fn refusal(status: u16, reason: &str) -> Vec<u8> {
    let phrase = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Bad Gateway",
    };
    let line: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let body = format!("runner network proxy: {reason}\n");
    format!(
        "HTTP/1.1 {status} {phrase}: {line}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
