//! One connection from the sandbox: read its proxy request, judge it, connect, then hand
//! the two sockets to the pump ([`super::pump`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::cut::Cut;
use super::egress::{Egress, ProxyServer};
use super::inspect::Tunnel;
use super::pump::{self, Window};
use super::request::{self, Kind};
use super::{ConnectionRecord, Events, Shared};
use runner_protocol::{NET_CHUNK, NET_WINDOW as WINDOW, Request, Response};

/// The in-process pipe between a sandbox's connection and the inspector, each way.
const BRIDGE_BUFFER: usize = 256 * 1024;

/// The first byte of a TLS record carrying a handshake: a ClientHello starts with it.
const TLS_HANDSHAKE: u8 = 0x16;

/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a refused or finished connection waits for the process inside to read the
/// answer and hang up, before it is cut.
const LINGER: Duration = Duration::from_secs(10);

/// Routes the listener's events to one task per connection. The tasks live in a set the
/// dispatcher owns: when the sandbox goes (the listener's events end) or the proxy is
/// dropped, every connection still open is dropped with it, host sockets included.
pub(crate) async fn dispatch(shared: Arc<Shared>, mut rx: Events) {
    let mut conns: HashMap<u64, Route> = HashMap::new();
    let mut tasks: JoinSet<u64> = JoinSet::new();
    loop {
        let event = tokio::select! {
            event = rx.recv() => match event {
                Some(e) => e,
                None => break,
            },
            Some(Ok(done)) = tasks.join_next() => {
                conns.remove(&done);
                continue;
            }
        };
        let conn = match &event {
            Response::NetOpened { conn, holders } => {
                let (tx, events) = mpsc::unbounded_channel();
                let window = Arc::new(Window::default());
                let route = Route {
                    tx,
                    window: window.clone(),
                };
                conns.insert(*conn, route);
                let (open, shared, conn) = (conns.len(), shared.clone(), *conn);
                let holders = holders.clone();
                tasks.spawn(async move {
                    let mut c = Connection {
                        shared: &shared,
                        conn,
                        events,
                        window,
                        holders,
                    };
                    if open > shared.limits.connections {
                        let reason = format!(
                            "over the limit of {} connections open at once",
                            shared.limits.connections
                        );
                        c.refuse(503, &reason).await;
                    } else {
                        c.serve().await;
                    }
                    c.close().await;
                    conn
                });
                continue;
            }
            // Acknowledgements go straight to the window, not behind the connection's
            // queue: a write to the destination that waits must not hold up the reads from
            // it (both sides would wait on each other).
            Response::NetAck { conn, bytes } => {
                if let Some(route) = conns.get(conn) {
                    route.window.release(*bytes);
                }
                continue;
            }
            Response::NetData { conn, data } => {
                // A server that keeps to its window never queues more than that here; one
                // that does not is cut before it fills the host's memory.
                let over = conns.get(conn).is_some_and(|route| {
                    route.window.queue(data.len() as u64) > WINDOW + NET_CHUNK as u64
                });
                if over {
                    let (target, conn) = (shared.target, *conn);
                    conns.remove(&conn);
                    let _ = shared
                        .client
                        .notify(Request::NetClose { target, conn })
                        .await;
                    continue;
                }
                *conn
            }
            Response::NetEof { conn }
            | Response::NetClosed { conn, .. }
            | Response::NetHungUp { conn } => *conn,
            _ => continue,
        };
        if let Some(route) = conns.get(&conn) {
            let _ = route.tx.send(event);
        }
    }
}

/// Where the dispatcher sends one connection's events.
struct Route {
    tx: mpsc::UnboundedSender<Response>,
    window: Arc<Window>,
}

struct Connection<'a> {
    shared: &'a Shared,
    conn: u64,
    events: mpsc::UnboundedReceiver<Response>,
    window: Arc<Window>,
    /// The processes holding the connection's client end, when the sandbox was asked to
    /// name them ([`crate::programs`]).
    holders: Vec<runner_protocol::Holder>,
}

impl Connection<'_> {
    async fn notify(&self, request: Request) {
        let _ = self.shared.client.notify(request).await;
    }

    async fn ack(&self, bytes: usize) {
        let (target, conn) = (self.shared.target, self.conn);
        self.notify(Request::NetAck {
            target,
            conn,
            bytes: bytes as u64,
        })
        .await;
    }

    async fn send(&self, data: &[u8]) -> bool {
        let s = self.shared;
        s.client.send_data(s.target, self.conn, data).await.is_ok()
    }

    async fn close(&self) {
        let (target, conn) = (self.shared.target, self.conn);
        self.notify(Request::NetClose { target, conn }).await;
    }

    async fn serve(&mut self) {
        let Some((head, rest)) = self.read_head().await else {
            return;
        };
        let req = match request::parse(&head) {
            Ok(r) => r,
            Err(e) => return self.refuse(400, &format!("not a proxy request: {e}")).await,
        };
        let Some((via, addrs)) = self.judge(&req).await else {
            return;
        };
        if !self.judge_plain(&req, &head).await {
            return;
        }
        let s = self.shared;
        let id = s.record(ConnectionRecord::new(&req.host, req.port));
        let Some(stream) = self.reach(&req, via, &addrs, id).await else {
            return;
        };
        let inspection = s.inspection.clone().filter(|_| req.kind == Kind::Connect);
        let Some(inspection) = inspection else {
            return self.relay(req, via, stream, rest, false, id).await;
        };
        match inspection.tunnel(&req.host) {
            Tunnel::Inspected => {
                return self
                    .inspect(&inspection, &req, via, addrs, stream, rest, false, id)
                    .await;
            }
            Tunnel::Unread => return self.relay(req, via, stream, rest, false, id).await,
            Tunnel::InspectedIfTls => {}
        }
        if !self.established(id).await {
            return;
        }
        let Some(first) = self.first_bytes(rest).await else {
            s.finish(id);
            return;
        };
        if first.first() == Some(&TLS_HANDSHAKE) {
            self.inspect(&inspection, &req, via, addrs, stream, first, true, id)
                .await
        } else {
            self.relay(req, via, stream, first, true, id).await
        }
    }

    /// Answers a `CONNECT`: the tunnel is open. False when the sandbox is gone (the
    /// record is finished).
    async fn established(&mut self, id: u64) -> bool {
        let established = b"HTTP/1.1 200 Connection established\r\n\r\n";
        self.window.send(established.len() as u64);
        if !self.send(established).await {
            self.shared.finish(id);
            return false;
        }
        true
    }

    /// The client's first bytes in an answered tunnel (`rest` if it sent them with its
    /// `CONNECT`); `None` when it ends or says nothing in [`HEAD_TIMEOUT`].
    async fn first_bytes(&mut self, rest: Vec<u8>) -> Option<Vec<u8>> {
        if !rest.is_empty() {
            return Some(rest);
        }
        let read = async {
            loop {
                match self.events.recv().await? {
                    Response::NetData { data, .. } => {
                        self.window.dequeue(data.len() as u64);
                        self.ack(data.len()).await;
                        if !data.is_empty() {
                            return Some(data);
                        }
                    }
                    Response::NetEof { .. }
                    | Response::NetClosed { .. }
                    | Response::NetHungUp { .. } => return None,
                    _ => {}
                }
            }
        };
        tokio::time::timeout(HEAD_TIMEOUT, read)
            .await
            .ok()
            .flatten()
    }

    /// A plain request (`GET http://…`) where secrets or `http` rules are about: one that
    /// carries a placeholder is refused (secrets go only over TLS, to their hosts, where
    /// the proxy can put them in), and one to an inspected host is judged by method and
    /// path as inside TLS. False: refused, recorded and answered.
    async fn judge_plain(&mut self, req: &request::ProxyRequest, head: &[u8]) -> bool {
        let Some(inspection) = self.shared.inspection.clone() else {
            return true;
        };
        if req.kind == Kind::Connect {
            return true;
        }
        if let Err(misplaced) = inspection.secrets.check_absent(head) {
            let reason = format!("refused: {misplaced} (and only over https)");
            return self
                .deny_request(req, 403, None, &reason, vec![misplaced.name])
                .await;
        }
        if !inspection.inspects(&req.host) {
            return true;
        }
        let origin = crate::inspect::http1::Origin {
            host: &req.host,
            port: req.port,
            scheme: "http",
        };
        let parsed = match crate::inspect::http1::parse_request(head, origin) {
            Ok(p) => p,
            Err(e) => {
                let reason = format!("refused: {e}");
                return self
                    .deny_request(req, e.status(), None, &reason, Vec::new())
                    .await;
            }
        };
        let subject = crate::inspect::subject(&parsed.method, &req.host, &parsed.path);
        if let Err(reason) = crate::inspect::judge(self.shared, &subject).await {
            return self
                .deny_request(req, 403, Some(subject), &reason, Vec::new())
                .await;
        }
        let mut record = ConnectionRecord::new(&req.host, req.port);
        record.request = Some(subject);
        record.scheme = Some("http".into());
        let id = self.shared.record(record);
        self.shared.finish(id);
        true
    }

    /// A plain request refused by its content: recorded with the request and the secret
    /// named, and answered with `status` (`400` for one servers could read two ways, else
    /// `403`). Always false.
    async fn deny_request(
        &mut self,
        req: &request::ProxyRequest,
        status: u16,
        subject: Option<String>,
        reason: &str,
        secrets: Vec<String>,
    ) -> bool {
        let mut record = ConnectionRecord::new(&req.host, req.port);
        record.decision = "deny".into();
        record.reason = Some(reason.to_string());
        record.request = subject;
        record.scheme = Some("http".into());
        record.secrets = secrets;
        let id = self.shared.record(record);
        self.shared.finish(id);
        self.refuse(status, reason).await;
        false
    }

    /// A tunnel to an inspected host: answered `200`, then its TLS answered here and each
    /// request judged ([`crate::inspect`]). The sandbox's bytes reach the inspector through
    /// an in-process pipe, within the same window as a tunnel's.
    #[allow(clippy::too_many_arguments)]
    async fn inspect(
        &mut self,
        inspection: &crate::inspect::Inspection,
        req: &request::ProxyRequest,
        via: Option<&'static ProxyServer>,
        addrs: Vec<std::net::SocketAddr>,
        stream: TcpStream,
        rest: Vec<u8>,
        answered: bool,
        id: u64,
    ) {
        let s = self.shared;
        if !answered && !self.established(id).await {
            return;
        }
        let (ours, theirs) = tokio::io::duplex(BRIDGE_BUFFER);
        let upstream = crate::inspect::Upstream {
            host: &req.host,
            port: req.port,
            addrs,
            via,
            first: Some(stream),
            timeout: s.limits.connect_timeout,
        };
        let inspector = async {
            crate::inspect::serve(s, inspection, theirs, upstream).await;
        };
        let ((), bridged) = tokio::join!(inspector, self.bridge(ours, rest));
        s.update(id, |r| {
            r.bytes_sent += bridged.0;
            r.bytes_received += bridged.1;
            if let Some(cut) = &bridged.2 {
                r.reason = Some(cut.to_string());
            }
        });
        s.finish(id);
    }

    /// Moves bytes between the sandbox's connection and `io` (the inspector's end) until
    /// both are done: the sandbox's data into the pipe, acknowledged once written; the
    /// pipe's into data frames, within the window. Bytes count against the run's limit.
    /// The bytes each way, and why it was cut, if it was.
    async fn bridge(
        &mut self,
        io: tokio::io::DuplexStream,
        rest: Vec<u8>,
    ) -> (u64, u64, Option<Cut>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (shared, conn, window) = (self.shared, self.conn, self.window.clone());
        let target = shared.target;
        let events = &mut self.events;
        let (mut rd, mut wr) = tokio::io::split(io);
        let sent = std::sync::atomic::AtomicU64::new(rest.len() as u64);
        let received = std::sync::atomic::AtomicU64::new(0);
        let down_done = tokio::sync::Notify::new();
        let up = async {
            let from_sandbox = async {
                if wr.write_all(&rest).await.is_err() {
                    return None;
                }
                loop {
                    match events.recv().await {
                        Some(Response::NetData { data, .. }) => {
                            window.dequeue(data.len() as u64);
                            if !shared.spend(data.len() as u64) {
                                return Some(Cut::Spent(shared.limits.bytes));
                            }
                            let n = data.len() as u64;
                            if wr.write_all(&data).await.is_err() {
                                return None;
                            }
                            sent.fetch_add(n, Ordering::Relaxed);
                            let ack = Request::NetAck {
                                target,
                                conn,
                                bytes: n,
                            };
                            let _ = shared.client.notify(ack).await;
                        }
                        // The client has said all it will: the inspector reads the end and
                        // answers what it has; the client may still be reading.
                        Some(Response::NetEof { .. }) => {
                            let _ = wr.shutdown().await;
                        }
                        Some(Response::NetClosed { reason, .. }) => {
                            return Some(Cut::BySandbox(reason));
                        }
                        // Gone: what is still in flight will never be taken.
                        Some(Response::NetHungUp { .. }) => return None,
                        Some(_) => {}
                        None => return Some(Cut::SandboxGone),
                    }
                }
            };
            // Once the inspector is done, the sandbox takes the last bytes (closing
            // earlier could cut off the end of an answer) and hangs up, within [`LINGER`].
            let cut = tokio::select! {
                cut = from_sandbox => cut,
                () = async {
                    down_done.notified().await;
                    let _ = tokio::time::timeout(LINGER, window.below(1)).await;
                } => None,
            };
            // The inspector hears the end, wherever it waits.
            let _ = wr.shutdown().await;
            cut
        };
        let down = async {
            let mut buf = vec![0u8; NET_CHUNK];
            let cut = loop {
                window.below(WINDOW).await;
                let n = match rd.read(&mut buf).await {
                    Ok(0) | Err(_) => {
                        let _ = shared.client.notify(Request::NetEof { target, conn }).await;
                        break None;
                    }
                    Ok(n) => n,
                };
                if !shared.spend(n as u64) {
                    break Some(Cut::Spent(shared.limits.bytes));
                }
                window.send(n as u64);
                if let Err(e) = shared.client.send_data(target, conn, &buf[..n]).await {
                    break Some(Cut::SandboxSend(e));
                }
                received.fetch_add(n as u64, Ordering::Relaxed);
            };
            down_done.notify_one();
            cut
        };
        let (up, down) = tokio::join!(up, down);
        (sent.into_inner(), received.into_inner(), down.or(up))
    }

    /// Whether the connection may be made: the upstream proxy it goes through (if any) and
    /// the addresses the rules let it reach. `None`: refused, recorded and answered.
    async fn judge(
        &mut self,
        req: &request::ProxyRequest,
    ) -> Option<(Option<&'static ProxyServer>, Vec<std::net::SocketAddr>)> {
        let s = self.shared;
        // The host's own upstream proxy, if runner's environment names one for this host.
        let via = match Egress::from_env().for_host(&req.host, req.kind == Kind::Connect) {
            Ok(via) => via,
            Err(bad) => return self.deny(req, 502, &bad.to_string()).await,
        };
        // Before the host's own rule: a program that may not reach it is not asked about.
        if let Err(reason) = s.policy.programs.allows(&req.host, &self.holders) {
            return self.deny(req, 403, &format!("refused: {reason}")).await;
        }
        let addrs = match s
            .policy
            .decide(&req.host, req.port, &s.own, via.is_some())
            .await
        {
            Ok(a) => a,
            Err(refusal) => return self.deny(req, refusal.status, &refusal.reason).await,
        };
        if s.bytes.load(std::sync::atomic::Ordering::Relaxed) >= s.limits.bytes {
            let reason = format!(
                "the run's network allowance of {} bytes is spent",
                s.limits.bytes
            );
            return self.deny(req, 403, &reason).await;
        }
        Some((via, addrs))
    }

    /// A refusal: recorded as a `deny` with its reason, and answered.
    async fn deny<T>(
        &mut self,
        req: &request::ProxyRequest,
        status: u16,
        reason: &str,
    ) -> Option<T> {
        let s = self.shared;
        let mut record = ConnectionRecord::new(&req.host, req.port);
        record.decision = "deny".into();
        record.reason = Some(reason.to_string());
        let id = s.record(record);
        s.finish(id);
        self.refuse(status, reason).await;
        None
    }

    /// The connection to the destination, direct or through the upstream proxy. `None`:
    /// it failed, and the client was told why.
    async fn reach(
        &mut self,
        req: &request::ProxyRequest,
        via: Option<&ProxyServer>,
        addrs: &[std::net::SocketAddr],
        id: u64,
    ) -> Option<TcpStream> {
        let s = self.shared;
        let timeout = s.limits.connect_timeout;
        let connected = match via {
            Some(proxy) if req.kind == Kind::Connect => proxy
                .tunnel(&req.host, req.port, timeout)
                .await
                .map_err(|e| e.to_string()),
            Some(proxy) => proxy.connect(timeout).await.map_err(|e| e.to_string()),
            None => crate::egress::connect_direct(addrs, timeout)
                .await
                .map_err(|e| format!("cannot connect to {}:{}: {e}", req.host, req.port)),
        };
        let stream = match connected {
            Ok(st) => st,
            Err(reason) => {
                s.update(id, |r| r.reason = Some(reason.clone()));
                s.finish(id);
                self.refuse(502, &reason).await;
                return None;
            }
        };
        let _ = stream.set_nodelay(true);
        let address = match via {
            Some(proxy) => Some(format!("via {}", proxy.address())),
            None => stream.peer_addr().ok().map(|p| p.to_string()),
        };
        s.update(id, |r| r.address = address);
        Some(stream)
    }

    /// Bytes both ways once the destination is reached, and the record made final.
    async fn relay(
        &mut self,
        req: request::ProxyRequest,
        via: Option<&ProxyServer>,
        stream: TcpStream,
        rest: Vec<u8>,
        answered: bool,
        id: u64,
    ) {
        let s = self.shared;
        let (first, then) = match req.kind {
            Kind::Connect => {
                if !answered && !self.established(id).await {
                    return;
                }
                (Vec::new(), pump::Then::Tunnel(&req.host, req.port))
            }
            Kind::Forward { head, body } => {
                let head = match via {
                    // The upstream proxy gets the request for the origin, in absolute form.
                    Some(proxy) => {
                        request::for_upstream(&head, &req.host, req.port, proxy.authorization())
                    }
                    None => head,
                };
                (head, pump::Then::Request(body))
            }
        };
        if !s.spend((first.len() + rest.len()) as u64) {
            s.update(id, |r| {
                r.reason = Some(Cut::Spent(s.limits.bytes).to_string())
            });
            s.finish(id);
            return;
        }
        let ends = pump::Ends {
            shared: s,
            conn: self.conn,
            events: &mut self.events,
            window: &self.window,
            then,
        };
        let relayed = ends.run(stream, first, rest).await;
        s.update(id, |r| {
            r.bytes_sent += relayed.sent;
            r.bytes_received += relayed.received;
            if relayed.refused {
                r.decision = "deny".into();
            }
            r.reason = match (relayed.failed, relayed.note) {
                (Some(failed), Some(note)) => Some(format!("{failed}; {note}")),
                (failed, note) => failed.map(|f| f.to_string()).or(note),
            };
        });
        s.finish(id);
    }

    /// The request head, and whatever followed it in the same reads. A client that has not
    /// finished its head in [`HEAD_TIMEOUT`] is dropped.
    async fn read_head(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
        let mut buf: Vec<u8> = Vec::new();
        let (events, window) = (&mut self.events, &self.window);
        let (shared, conn) = (self.shared, self.conn);
        let read = async {
            loop {
                match events.recv().await? {
                    Response::NetData { data, .. } => {
                        window.dequeue(data.len() as u64);
                        let bytes = data.len() as u64;
                        let target = shared.target;
                        let _ = shared
                            .client
                            .notify(Request::NetAck {
                                target,
                                conn,
                                bytes,
                            })
                            .await;
                        // Only the new bytes (and the three before them) can end the head.
                        let from = buf.len().saturating_sub(3);
                        buf.extend(data);
                        if let Some(end) = request::head_end(&buf[from..]).map(|e| from + e) {
                            if end > request::MAX_HEAD {
                                return Some(Err(()));
                            }
                            let rest = buf.split_off(end);
                            return Some(Ok((std::mem::take(&mut buf), rest)));
                        }
                        if buf.len() > request::MAX_HEAD {
                            return Some(Err(()));
                        }
                    }
                    Response::NetEof { .. }
                    | Response::NetClosed { .. }
                    | Response::NetHungUp { .. } => return None,
                    _ => {}
                }
            }
        };
        match tokio::time::timeout(HEAD_TIMEOUT, read).await {
            Ok(Some(Ok(head))) => Some(head),
            Ok(Some(Err(()))) => {
                self.refuse(431, "the request head is over 64 KiB").await;
                None
            }
            Ok(None) | Err(_) => None,
        }
    }

    /// Answers with an error the client shows, then waits for it to hang up.
    async fn refuse(&mut self, status: u16, reason: &str) {
        let phrase = match status {
            400 => "Bad Request",
            403 => "Forbidden",
            431 => "Request Header Fields Too Large",
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            _ => "Gateway Timeout",
        };
        // The reason goes in the status line too: most clients print only that
        // (`Tunnel connection failed: 403 …`).
        let line: String = reason
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let body = format!("runner network proxy: {reason}\n");
        let answer = format!(
            "HTTP/1.1 {status} {phrase}: {line}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        if !self.send(answer.as_bytes()).await {
            return;
        }
        let (target, conn) = (self.shared.target, self.conn);
        self.notify(Request::NetEof { target, conn }).await;
        let _ = tokio::time::timeout(LINGER, async {
            while let Some(ev) = self.events.recv().await {
                match ev {
                    Response::NetData { data, .. } => {
                        self.window.dequeue(data.len() as u64);
                        self.ack(data.len()).await
                    }
                    Response::NetEof { .. }
                    | Response::NetClosed { .. }
                    | Response::NetHungUp { .. } => return,
                    _ => {}
                }
            }
        })
        .await;
    }
}
