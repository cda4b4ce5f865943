//! Bytes both ways between a sandboxed client and its destination, once the proxy has said
//! yes. Each direction is its own future, so a write that waits on one side never stops
//! the other from being read (two peers that both send a lot would otherwise wait on each
//! other for ever). Towards the sandbox, at most [`WINDOW`] bytes are unacknowledged; the
//! acknowledgements reach the [`Window`] straight from the dispatcher.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, Interest};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::cut::Cut;
pub(crate) use super::upstream::Then;
use super::upstream::To;
use runner_protocol::{DATA_FRAME_HEADER, NET_CHUNK, NET_WINDOW as WINDOW, Request, Response};

/// How long a finished connection waits for the sandbox to take what was sent to it.
const DRAIN: Duration = Duration::from_secs(30);

/// One connection's flow control, shared by its task and the dispatcher.
#[derive(Default)]
pub(crate) struct Window {
    /// Sent to the sandbox and not yet acknowledged.
    in_flight: AtomicU64,
    /// Received from the sandbox and not yet taken off the connection's queue.
    queued: AtomicU64,
    changed: Notify,
}

impl Window {
    pub fn send(&self, n: u64) {
        self.in_flight.fetch_add(n, Ordering::SeqCst);
    }

    pub fn release(&self, n: u64) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                Some(v.saturating_sub(n))
            });
        self.changed.notify_waiters();
    }

    /// Counts bytes put on the queue; the new total.
    pub fn queue(&self, n: u64) -> u64 {
        self.queued.fetch_add(n, Ordering::SeqCst) + n
    }

    pub fn dequeue(&self, n: u64) {
        let _ = self
            .queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                Some(v.saturating_sub(n))
            });
    }

    /// Waits until fewer than `below` bytes are in flight.
    pub(crate) async fn below(&self, below: u64) {
        loop {
            let changed = self.changed.notified();
            if self.in_flight.load(Ordering::SeqCst) < below {
                return;
            }
            changed.await;
        }
    }
}

/// The two ends of one allowed connection.
pub(crate) struct Ends<'a> {
    pub shared: &'a Shared,
    pub conn: u64,
    pub events: &'a mut mpsc::UnboundedReceiver<Response>,
    pub window: &'a Window,
    pub then: Then<'a>,
}

/// How a relayed connection went.
pub(crate) struct Relayed {
    pub sent: u64,
    pub received: u64,
    /// Why it ended early, if it did.
    pub failed: Option<Cut>,
    /// It was cut for what it carried, not for a failure.
    pub refused: bool,
    /// Something worth knowing that did not end it.
    pub note: Option<String>,
}

impl Ends<'_> {
    /// Relays until both directions are done, or one fails. `head` goes to the destination
    /// first as it is (a forwarded request's, rewritten), then `rest` and what follows from
    /// the client, as far as [`Then`] lets it.
    pub async fn run(self, stream: TcpStream, head: Vec<u8>, rest: Vec<u8>) -> Relayed {
        let (rd, wr) = stream.into_split();
        let sent = AtomicU64::new(0);
        let received = AtomicU64::new(0);
        let (shared, conn, window) = (self.shared, self.conn, self.window);
        let secrets = shared.inspection.as_deref().map(|i| &i.secrets);
        let mut to = To::new(wr, &sent, self.then, secrets);
        let started = async {
            to.write(&head).await?;
            to.send(rest).await
        };
        if let Err(why) = started.await {
            return Relayed {
                sent: sent.load(Ordering::Relaxed),
                received: 0,
                failed: Some(why),
                refused: to.refused,
                note: None,
            };
        }
        // Neither direction is dropped part-way: one stopped in the middle of a frame to
        // the sandbox would cut the protocol for every connection and command. A failure
        // on one side tells the other to stop where it waits.
        let stop = CancellationToken::new();
        let down_done = Notify::new();
        let link = Link {
            shared,
            conn,
            window,
            stop: &stop,
        };
        let up = async {
            let r = up(&link, self.events, &mut to, &down_done).await;
            stop.cancel();
            r
        };
        let down = async {
            let r = down(&link, rd, &received).await;
            if r.is_err() {
                stop.cancel();
            }
            down_done.notify_one();
            r
        };
        let (up, down) = tokio::join!(up, down);
        Relayed {
            sent: sent.load(Ordering::Relaxed),
            received: received.load(Ordering::Relaxed),
            failed: up.err().or(down.err()),
            refused: to.refused,
            note: (to.dropped() > 0).then(|| {
                format!(
                    "{} bytes the client sent after its request were not sent on: a connection through the proxy carries one request",
                    to.dropped()
                )
            }),
        }
    }
}

/// What both directions of one connection share.
#[derive(Clone, Copy)]
struct Link<'a> {
    shared: &'a Shared,
    conn: u64,
    window: &'a Window,
    /// Cancelled when one direction fails, so that the other stops where it waits.
    stop: &'a CancellationToken,
}

async fn notify(shared: &Shared, request: Request) {
    let _ = shared.client.notify(request).await;
}

/// Sandbox to destination. Ends once the sandbox has finished sending and everything sent
/// to it has been taken (so closing cannot cut off the end of a response).
async fn up(
    link: &Link<'_>,
    events: &mut mpsc::UnboundedReceiver<Response>,
    to: &mut To<'_>,
    down_done: &Notify,
) -> Result<(), Cut> {
    let Link {
        shared,
        conn,
        window,
        stop,
    } = *link;
    let target = shared.target;
    let mut open = true;
    let mut down_finished = false;
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        if !open && down_finished {
            if window.in_flight.load(Ordering::SeqCst) == 0 {
                return Ok(());
            }
            deadline.get_or_insert_with(|| tokio::time::Instant::now() + DRAIN);
        }
        let event = tokio::select! {
            // The other direction failed and says why.
            () = stop.cancelled() => return Ok(()),
            ev = events.recv() => ev,
            () = down_done.notified(), if !down_finished => {
                down_finished = true;
                continue;
            }
            () = window.below(1), if deadline.is_some() => continue,
            () = tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)),
                if deadline.is_some() => {
                return Err(Cut::Drain(DRAIN.as_secs()));
            }
        };
        match event {
            Some(Response::NetData { data, .. }) => {
                window.dequeue(data.len() as u64);
                if !shared.spend(data.len() as u64) {
                    return Err(Cut::Spent(shared.limits.bytes));
                }
                let bytes = data.len() as u64;
                // A destination that stops reading must not hold this side once the
                // other has failed (these are socket writes: stopping one cuts no frame).
                tokio::select! {
                    r = to.send(data) => r?,
                    () = stop.cancelled() => return Ok(()),
                }
                notify(
                    shared,
                    Request::NetAck {
                        target,
                        conn,
                        bytes,
                    },
                )
                .await;
            }
            Some(Response::NetEof { .. }) => {
                tokio::select! {
                    r = to.finish() => r?,
                    () = stop.cancelled() => return Ok(()),
                }
                open = false;
            }
            Some(Response::NetClosed { reason, .. }) => return Err(Cut::BySandbox(reason)),
            // The client is gone, as it may be: the exchange ends here, both ways.
            Some(Response::NetHungUp { .. }) => return Ok(()),
            Some(_) => {}
            None => return Err(Cut::SandboxGone),
        }
    }
}

/// Destination to sandbox, within the window: spliced where the client's channel is the
/// server's pipe, else read and copied.
async fn down(link: &Link<'_>, rd: OwnedReadHalf, received: &AtomicU64) -> Result<(), Cut> {
    if link.shared.client.splices() {
        return down_spliced(link, rd, received).await;
    }
    down_copied(link, rd, received).await
}

/// Room left in the window for one frame, at least `floor`.
fn frame_room(window: &Window, floor: usize) -> usize {
    let room = WINDOW.saturating_sub(window.in_flight.load(Ordering::SeqCst)) as usize;
    NET_CHUNK.min(room.max(floor))
}

async fn down_copied(
    link: &Link<'_>,
    mut rd: OwnedReadHalf,
    received: &AtomicU64,
) -> Result<(), Cut> {
    let Link {
        shared,
        conn,
        window,
        stop,
    } = *link;
    let target = shared.target;
    // Room for the data frame's header in front, so each chunk goes out as it was read.
    let mut buf = vec![0u8; DATA_FRAME_HEADER + NET_CHUNK];
    loop {
        let read = async {
            window.below(WINDOW).await;
            rd.read(&mut buf[DATA_FRAME_HEADER..]).await
        };
        let mut n = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            n = read => n.map_err(Cut::Read)?,
        };
        if n == 0 {
            notify(shared, Request::NetEof { target, conn }).await;
            return Ok(());
        }
        // Whatever else has arrived goes in the same frame: each frame costs wake-ups on
        // both sides, so fewer, fuller frames move data faster.
        let end = DATA_FRAME_HEADER + frame_room(window, n);
        while DATA_FRAME_HEADER + n < end {
            match rd.try_read(&mut buf[DATA_FRAME_HEADER + n..end]) {
                Ok(0) | Err(_) => break,
                Ok(more) => n += more,
            }
        }
        if !shared.spend(n as u64) {
            return Err(Cut::Spent(shared.limits.bytes));
        }
        window.send(n as u64);
        let frame = std::mem::take(&mut buf);
        buf = shared
            .client
            .send_data_in_place(target, conn, frame, DATA_FRAME_HEADER + n)
            .await
            .map_err(Cut::SandboxSend)?;
        received.fetch_add(n as u64, Ordering::Relaxed);
    }
}

async fn down_spliced(link: &Link<'_>, rd: OwnedReadHalf, received: &AtomicU64) -> Result<(), Cut> {
    let Link {
        shared,
        conn,
        window,
        stop,
    } = *link;
    let target = shared.target;
    let socket: &TcpStream = rd.as_ref();
    let mut deferred = None;
    let failed = Cut::Read;
    loop {
        let ready = async {
            window.below(WINDOW).await;
            socket.readable().await
        };
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            r = ready => r.map_err(failed)?,
        };
        // A pipe only while there is something to move: none is held while waiting.
        let pipe = shared.pipes.take(NET_CHUNK).map_err(Cut::Pipe)?;
        let max = frame_room(window, 1);
        let n = match socket.try_io(Interest::READABLE, || {
            pipe.fill_from(socket, max, &mut deferred)
        }) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                shared.pipes.give(pipe);
                continue;
            }
            Err(e) => return Err(failed(e)),
            Ok(n) => n,
        };
        if n == 0 {
            shared.pipes.give(pipe);
            notify(shared, Request::NetEof { target, conn }).await;
            return Ok(());
        }
        if !shared.spend(n as u64) {
            return Err(Cut::Spent(shared.limits.bytes));
        }
        window.send(n as u64);
        shared
            .client
            .send_spliced(target, conn, pipe.clone(), n)
            .await
            .map_err(Cut::SandboxSend)?;
        shared.pipes.give(pipe);
        received.fetch_add(n as u64, Ordering::Relaxed);
    }
}
