//! The destination's side of a relayed connection: what of the client's bytes may go on.
//!
//! A forwarded request goes on as one request ([`super::body`]). A tunnel's first flight is
//! held until it shows which host it is for ([`super::tunnel`]); one for another host than
//! the tunnel's is cut before any of it is sent.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;

use super::body::Body;
use super::cut::Cut;
use super::tunnel::{self, First};

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
    held: Option<Held>,
    /// A request's body: what is left of it.
    body: Option<Body>,
    /// Bytes after the request's end, not sent.
    pub dropped: u64,
    /// Cut for what it carried.
    pub refused: bool,
}

impl<'a> To<'a> {
    pub fn new(wr: OwnedWriteHalf, sent: &'a AtomicU64, then: Then<'_>) -> To<'a> {
        let (held, body) = match then {
            Then::Tunnel(host, port) => (
                Some(Held {
                    host: host.to_string(),
                    port,
                    buf: Vec::new(),
                    need: 1,
                }),
                None,
            ),
            Then::Request(body) => (None, Some(body)),
        };
        To {
            wr,
            sent,
            held,
            body,
            dropped: 0,
            refused: false,
        }
    }

    /// Sends `data` on, as far as it may go; holds it while a tunnel's first flight is read.
    pub async fn send(&mut self, data: Vec<u8>) -> Result<(), Cut> {
        let data = match self.held.as_mut() {
            None => data,
            Some(held) => {
                held.buf.extend(data);
                match held.release(false) {
                    Ok(None) => return Ok(()),
                    Ok(Some(released)) => {
                        self.held = None;
                        self.released(released).await?
                    }
                    Err(why) => {
                        self.refused = true;
                        return Err(why);
                    }
                }
            }
        };
        self.send_body(data).await
    }

    /// What a decided first flight sends: a request's head goes now, and what followed it
    /// is its body.
    async fn released(&mut self, released: Released) -> Result<Vec<u8>, Cut> {
        Ok(match released {
            Released::Pass(all) => all,
            Released::Http { head, rest, body } => {
                self.write(&head).await?;
                self.body = Some(body);
                rest
            }
            Released::Nothing => Vec::new(),
        })
    }

    async fn send_body(&mut self, mut data: Vec<u8>) -> Result<(), Cut> {
        if let Some(body) = &mut self.body {
            let keep = body.take(&data);
            self.dropped += (data.len() - keep) as u64;
            data.truncate(keep);
        }
        self.write(&data).await
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
        if let Some(mut held) = self.held.take() {
            match held.release(true) {
                Ok(released) => {
                    let rest = self.released(released.unwrap_or(Released::Nothing)).await?;
                    self.send_body(rest).await?;
                }
                Err(why) => {
                    self.refused = true;
                    return Err(why);
                }
            }
        }
        let _ = self.wr.shutdown().await;
        Ok(())
    }
}

/// A tunnel's first bytes, held until they show which host they are for.
struct Held {
    host: String,
    port: u16,
    buf: Vec<u8>,
    /// How many bytes must be held before judging again: a client that sends its first
    /// flight a byte at a time is not re-read a byte at a time.
    need: usize,
}

enum Released {
    Pass(Vec<u8>),
    Http {
        head: Vec<u8>,
        rest: Vec<u8>,
        body: Body,
    },
    Nothing,
}

impl Held {
    /// What may go on, once that is known; `None` while more is needed.
    fn release(&mut self, at_end: bool) -> Result<Option<Released>, Cut> {
        if self.buf.len() < self.need && !at_end {
            return Ok(None);
        }
        match tunnel::judge(&self.buf, &self.host, self.port) {
            Ok(First::Need(_)) if at_end => Ok(Some(Released::Nothing)),
            Ok(First::Need(n)) => {
                self.need = n.max(self.buf.len() + 1);
                Ok(None)
            }
            Ok(First::Pass) => Ok(Some(Released::Pass(std::mem::take(&mut self.buf)))),
            Ok(First::Http {
                head,
                head_len,
                body,
            }) => Ok(Some(Released::Http {
                head,
                rest: self.buf.split_off(head_len),
                body,
            })),
            Err(why) => Err(Cut::Refused {
                host: self.host.clone(),
                port: self.port,
                why,
            }),
        }
    }
}
