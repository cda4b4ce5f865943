//! One connection from the sandbox: read its proxy request, judge it, connect, and relay
//! bytes both ways within the sandbox's window until either side is done.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::request::{self, Kind};
use super::{ConnectionRecord, Events, Shared};
use crate::sandbox::api::{DATA_FRAME_HEADER, NET_CHUNK, NET_WINDOW as WINDOW, Request, Response};

/// How long a refused or finished connection waits for the process inside to read the
/// answer and hang up, before it is cut.
const LINGER: Duration = Duration::from_secs(10);

/// Routes the listener's events to one task per connection.
pub(crate) async fn dispatch(shared: Arc<Shared>, mut rx: Events) {
    let conns: Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Response>>>> = Arc::default();
    while let Some(event) = rx.recv().await {
        let conn = match &event {
            Response::NetOpened { conn } => {
                let (tx, events) = mpsc::unbounded_channel();
                let open = {
                    let mut map = conns.lock().unwrap_or_else(|p| p.into_inner());
                    map.insert(*conn, tx);
                    map.len()
                };
                let (shared, conns, conn) = (shared.clone(), conns.clone(), *conn);
                tokio::spawn(async move {
                    let mut c = Connection {
                        shared: &shared,
                        conn,
                        events,
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
                    conns
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&conn);
                });
                continue;
            }
            Response::NetData { conn, .. }
            | Response::NetAck { conn, .. }
            | Response::NetEof { conn }
            | Response::NetClosed { conn, .. } => *conn,
            _ => continue,
        };
        if let Some(tx) = conns.lock().unwrap_or_else(|p| p.into_inner()).get(&conn) {
            let _ = tx.send(event);
        }
    }
}

struct Connection<'a> {
    shared: &'a Shared,
    conn: u64,
    events: mpsc::UnboundedReceiver<Response>,
}

/// How a relay ended.
enum End {
    Done,
    Failed(String),
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
        let mut record = ConnectionRecord {
            host: req.host.clone(),
            port: req.port,
            decision: "allow".into(),
            reason: None,
            address: None,
            bytes_sent: 0,
            bytes_received: 0,
        };
        let s = self.shared;
        let addrs = match s.policy.decide(&req.host, req.port, &s.own).await {
            Ok(a) => a,
            Err(refusal) => {
                record.decision = "deny".into();
                record.reason = Some(refusal.reason.clone());
                let index = s.record(record);
                s.finish(index);
                return self.refuse(refusal.status, &refusal.reason).await;
            }
        };
        if s.bytes.load(std::sync::atomic::Ordering::Relaxed) >= s.limits.bytes {
            record.decision = "deny".into();
            let reason = format!(
                "the run's network allowance of {} bytes is spent",
                s.limits.bytes
            );
            record.reason = Some(reason.clone());
            let index = s.record(record);
            s.finish(index);
            return self.refuse(403, &reason).await;
        }
        let index = s.record(record);
        let stream = match connect(&addrs, s.limits.connect_timeout).await {
            Ok(st) => st,
            Err(e) => {
                let reason = format!("cannot connect to {}:{}: {e}", req.host, req.port);
                s.update(index, |r| r.reason = Some(reason.clone()));
                s.finish(index);
                return self.refuse(502, &reason).await;
            }
        };
        let _ = stream.set_nodelay(true);
        let peer = stream.peer_addr().ok();
        s.update(index, |r| r.address = peer.map(|p| p.to_string()));
        let mut first = Vec::new();
        match req.kind {
            Kind::Connect => {
                if !self
                    .send(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                {
                    return;
                }
                first.extend(rest);
            }
            Kind::Forward { head } => {
                first.extend(head);
                first.extend(rest);
            }
        }
        let end = self.relay(stream, first, index).await;
        if let End::Failed(reason) = end {
            s.update(index, |r| r.reason = Some(reason));
        }
        s.finish(index);
    }

    /// The request head, and whatever followed it in the same reads.
    async fn read_head(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
        let mut buf = Vec::new();
        loop {
            match self.events.recv().await? {
                Response::NetData { data, .. } => {
                    self.ack(data.len()).await;
                    buf.extend(data);
                    if let Some(end) = request::head_end(&buf) {
                        let rest = buf.split_off(end);
                        return Some((buf, rest));
                    }
                    if buf.len() > request::MAX_HEAD {
                        self.refuse(431, "the request head is over 64 KiB").await;
                        return None;
                    }
                }
                Response::NetEof { .. } | Response::NetClosed { .. } => return None,
                _ => {}
            }
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
                    Response::NetData { data, .. } => self.ack(data.len()).await,
                    Response::NetEof { .. } | Response::NetClosed { .. } => return,
                    _ => {}
                }
            }
        })
        .await;
    }

    async fn relay(&mut self, stream: TcpStream, first: Vec<u8>, index: usize) -> End {
        let s = self.shared;
        let (mut rd, mut wr) = stream.into_split();
        if !first.is_empty() {
            if let Err(e) = wr.write_all(&first).await {
                return End::Failed(format!("writing to the destination failed: {e}"));
            }
            s.update(index, |r| r.bytes_sent += first.len() as u64);
        }
        // Room for the data frame's header in front, so each chunk goes out as it was read.
        let mut buf = vec![0u8; DATA_FRAME_HEADER + NET_CHUNK];
        let (mut in_flight, mut up_open, mut down_open) = (0u64, true, true);
        let (mut sent, mut received) = (0u64, 0u64);
        let end = loop {
            if !up_open && !down_open {
                break End::Done;
            }
            tokio::select! {
                ev = self.events.recv() => match ev {
                    Some(Response::NetData { data, .. }) => {
                        if !s.spend(data.len() as u64) {
                            break End::Failed(spent(s.limits.bytes));
                        }
                        if let Err(e) = wr.write_all(&data).await {
                            break End::Failed(format!("writing to the destination failed: {e}"));
                        }
                        sent += data.len() as u64;
                        self.ack(data.len()).await;
                    }
                    Some(Response::NetAck { bytes, .. }) => in_flight = in_flight.saturating_sub(bytes),
                    Some(Response::NetEof { .. }) => {
                        let _ = wr.shutdown().await;
                        up_open = false;
                    }
                    Some(Response::NetClosed { reason, .. }) => break End::Failed(reason),
                    Some(_) => {}
                    None => break End::Failed("the sandbox closed".into()),
                },
                r = rd.read(&mut buf[DATA_FRAME_HEADER..]), if down_open && in_flight < WINDOW => match r {
                    Ok(0) => {
                        down_open = false;
                        let (target, conn) = (s.target, self.conn);
                        self.notify(Request::NetEof { target, conn }).await;
                    }
                    Ok(mut n) => {
                        // Whatever else has arrived goes in the same frame: each frame costs
                        // wake-ups on both sides, so fewer, fuller frames move data faster.
                        let room = (WINDOW - in_flight) as usize;
                        let end = DATA_FRAME_HEADER + NET_CHUNK.min(room.max(n));
                        while DATA_FRAME_HEADER + n < end {
                            match rd.try_read(&mut buf[DATA_FRAME_HEADER + n..end]) {
                                Ok(0) | Err(_) => break,
                                Ok(more) => n += more,
                            }
                        }
                        if !s.spend(n as u64) {
                            break End::Failed(spent(s.limits.bytes));
                        }
                        let frame = &mut buf[..DATA_FRAME_HEADER + n];
                        if s.client.send_data_in_place(s.target, self.conn, frame).await.is_err() {
                            break End::Failed("the sandbox closed".into());
                        }
                        in_flight += n as u64;
                        received += n as u64;
                    }
                    Err(e) => break End::Failed(format!("reading from the destination failed: {e}")),
                },
            }
        };
        s.update(index, |r| {
            r.bytes_sent += sent;
            r.bytes_received += received;
        });
        end
    }
}

fn spent(limit: u64) -> String {
    format!("cut: the run's network allowance of {limit} bytes is spent")
}

async fn connect(addrs: &[std::net::SocketAddr], timeout: Duration) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::other("no address to connect to");
    for addr in addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = e,
            Err(_) => {
                last = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{addr} did not answer in {timeout:?}"),
                )
            }
        }
    }
    Err(last)
}
