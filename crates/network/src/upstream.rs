//! The destination's side of a relayed connection: what of the client's bytes may go on.
//!
//! A forwarded request goes on as one request ([`super::body`]). A tunnel's first flight is
//! held until it shows which host it is for ([`super::tunnel`]); one for another host than
//! the tunnel's is cut before any of it is sent. What goes is decided by
//! [`tunnel::Gate`], which does no I/O; this side writes what it lets through.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;

use super::body::Body;
use super::cut::Cut;
use super::secrets::Secrets;
use super::tunnel::{self, Gate};

/// What the client's bytes after its request head may be.
pub(crate) enum Then<'a> {
    /// A tunnel's: what its first flight shows is for `host:port`, and what follows.
    Tunnel(&'a str, u16),
    /// A forwarded request's body, and nothing after it.
    Request(Body),
}

/// Where the client's bytes go, once they may.
pub(crate) struct To<'a> {
    wr: OwnedWriteHalf,
    sent: &'a AtomicU64,
    gate: Gate,
    /// The tunnel's `host:port`, for a refusal's message.
    target: (String, u16),
    /// Cut for what it carried.
    pub refused: bool,
    /// The session's secrets, whose placeholders a tunnel's first bytes may not carry.
    secrets: Option<&'a Secrets>,
    /// The first bytes seen so far (up to [`SCANNED`]), for a placeholder cut in two.
    seen: Vec<u8>,
}

/// How much of a tunnel's start is searched for a secret's placeholder: a plain protocol
/// (HTTP inside the tunnel, SMTP) says its credentials there; TLS shows nothing to find.
const SCANNED: usize = 64 * 1024;

impl<'a> To<'a> {
    pub fn new(
        wr: OwnedWriteHalf,
        sent: &'a AtomicU64,
        then: Then<'_>,
        secrets: Option<&'a Secrets>,
    ) -> To<'a> {
        let (gate, target, secrets) = match then {
            Then::Tunnel(host, port) => (
                Gate::tunnel(host, port),
                (host.to_string(), port),
                secrets.filter(|s| !s.is_empty()),
            ),
            Then::Request(body) => (Gate::request(body), (String::new(), 0), None),
        };
        To {
            wr,
            sent,
            gate,
            target,
            refused: false,
            secrets,
            seen: Vec::new(),
        }
    }

    /// Refuses a tunnel whose first bytes carry a secret's placeholder: it goes to a host
    /// the proxy does not read, so the secret could only be meant for somewhere else.
    fn scan(&mut self, out: &[u8]) -> Result<(), Cut> {
        let Some(secrets) = self.secrets else {
            return Ok(());
        };
        if self.seen.len() >= SCANNED || out.is_empty() {
            return Ok(());
        }
        let room = SCANNED - self.seen.len();
        self.seen.extend_from_slice(&out[..out.len().min(room)]);
        match secrets.check_absent(&self.seen) {
            Ok(()) => Ok(()),
            Err(misplaced) => {
                self.refused = true;
                Err(Cut::Secret {
                    host: self.target.0.clone(),
                    port: self.target.1,
                    name: misplaced.name,
                })
            }
        }
    }

    /// Bytes after the request's end, not sent.
    pub fn dropped(&self) -> u64 {
        self.gate.dropped()
    }

    /// Sends `data` on, as far as it may go; holds it while a tunnel's first flight is read.
    pub async fn send(&mut self, data: Vec<u8>) -> Result<(), Cut> {
        let out = self.gate.push(data);
        let out = self.judged(out)?;
        self.scan(&out)?;
        self.write(&out).await
    }

    pub async fn write(&mut self, data: &[u8]) -> Result<(), Cut> {
        if data.is_empty() {
            return Ok(());
        }
        self.wr.write_all(data).await.map_err(Cut::Write)?;
        self.sent.fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The client has finished sending. A first flight still undecided is not sent (a
    /// handshake or request cut short is none a server should act on); then the
    /// destination is told.
    pub async fn finish(&mut self) -> Result<(), Cut> {
        let out = self.gate.finish();
        let out = self.judged(out)?;
        self.scan(&out)?;
        self.write(&out).await?;
        let _ = self.wr.shutdown().await;
        Ok(())
    }

    /// A refusal of the gate's, as the cut that ends the connection.
    fn judged(&mut self, out: Result<Vec<u8>, tunnel::Refused>) -> Result<Vec<u8>, Cut> {
        out.map_err(|why| {
            self.refused = true;
            Cut::Refused {
                host: self.target.0.clone(),
                port: self.target.1,
                why,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A `To` for a tunnel to `h:80` over a real loopback socket, and the far end.
    async fn tunnel<'a>(
        sent: &'a AtomicU64,
        secrets: &'a Secrets,
    ) -> (To<'a>, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        let (_, wr) = client.unwrap().into_split();
        let to = To::new(wr, sent, Then::Tunnel("h", 80), Some(secrets));
        (to, accepted.unwrap().0)
    }

    #[tokio::test]
    async fn a_placeholder_in_a_tunnels_first_bytes_is_cut_before_it_is_sent() {
        let secrets = Secrets::new(vec![(
            "TOKEN".into(),
            "v4lue".into(),
            vec!["api.test".into()],
        )])
        .unwrap();
        let placeholder = secrets.environment()[0].1.clone();
        let sent = AtomicU64::new(0);
        // Split across two sends, the second completing the head.
        let (mut to, mut far) = tunnel(&sent, &secrets).await;
        let head =
            format!("GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer {placeholder}\r\n\r\n");
        let (a, b) = head.as_bytes().split_at(40);
        let first = to.send(a.to_vec()).await;
        let second = match first {
            Ok(()) => to.send(b.to_vec()).await,
            e => e,
        };
        match second {
            Err(Cut::Secret { name, .. }) => assert_eq!(name, "TOKEN"),
            other => panic!("not refused: {other:?}"),
        }
        assert!(to.refused);
        drop(to);
        let mut got = Vec::new();
        far.read_to_end(&mut got).await.unwrap();
        assert!(
            !String::from_utf8_lossy(&got).contains(&placeholder),
            "the placeholder reached the far end"
        );
        // Control: the same request without it goes through.
        let (mut to, mut far) = tunnel(&sent, &secrets).await;
        let fine = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n".to_vec();
        to.send(fine.clone()).await.unwrap();
        to.finish().await.unwrap();
        drop(to);
        let mut got = Vec::new();
        far.read_to_end(&mut got).await.unwrap();
        // (A request inside a tunnel goes on as one request: `Connection: close` added.)
        assert!(got.starts_with(&fine[..fine.len() - 2]), "{got:?}");
    }
}
