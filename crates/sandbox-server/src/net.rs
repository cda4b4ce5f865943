//! The sandbox's end of the network proxy: a listener on the sandbox's own loopback that
//! relays each connection, byte for byte, over the server's stdio to the controller.
//!
//! Nothing here reads what the bytes say. The proxy request (`CONNECT host:port`, or a
//! plain HTTP request naming its host) is parsed, judged and connected on the host, so a
//! process that took over this server would gain nothing but the same relay (and the host
//! cuts a connection whose server sends past its window). The sandbox itself
//! has no route out (a container without a network, or a private network namespace with only
//! `lo`), which makes this listener the only way out.
//!
//! Flow control is a window per direction: the server reads from a socket only as much as
//! the host has acknowledged, so a fast download into a slow client, or the reverse, never
//! piles up in memory on either side.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};

use runner_protocol::{Holder, NET_CHUNK as CHUNK, NET_WINDOW as WINDOW, Response};

use crate::holders::Places;

/// Connections open at once in the server, whatever the host's own limit.
const MAX_CONNS: usize = 256;

/// What the socket writer of a connection is told.
enum ToSocket {
    Data(Vec<u8>),
    Eof,
}

struct Conn {
    socket: TcpStream,
    to_socket: mpsc::Sender<ToSocket>,
    /// Messages handed to the writer thread and not yet written.
    queued: Arc<AtomicUsize>,
    credit: Arc<Credit>,
    /// The process that connected; its process group ties the connection to the command
    /// it belongs to.
    owner: Owner,
}

/// Who holds the client end of a connection. Found through `/proc` off the accept path
/// (a walk of the socket table costs milliseconds that every connection would otherwise
/// wait before its first byte).
#[derive(Clone, Copy)]
enum Owner {
    /// Still being looked up: kept, whatever ends meanwhile.
    Pending,
    Known(i32),
    /// Not found (the process is gone, or `/proc` does not show it).
    Unknown,
}

/// How much the reader may still send, and whether it should stop.
#[derive(Default)]
struct Credit {
    state: Mutex<(u64, bool)>,
    changed: Condvar,
}

impl Credit {
    fn add(&self, bytes: u64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 = s.0.saturating_add(bytes);
        self.changed.notify_all();
    }

    fn stop(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.changed.notify_all();
    }

    /// Waits for credit; `None` once stopped.
    fn take(&self, most: u64) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if s.1 {
                return None;
            }
            if s.0 > 0 {
                let n = s.0.min(most);
                s.0 -= n;
                return Some(n);
            }
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn stopped(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1
    }
}

/// The connections of the server's one listener.
#[derive(Default)]
pub struct Proxy {
    conns: Mutex<HashMap<u64, Conn>>,
    next: AtomicU64,
    /// The listener's request id, once it listens.
    target: Mutex<Option<u64>>,
    /// Where the sandbox can write, for naming the code a connection's holders run.
    places: Places,
}

/// Sends one response or data frame for the listener.
pub trait Sink: Send + Sync {
    fn response(&self, id: u64, response: Response);
    fn data(&self, id: u64, conn: u64, data: &[u8]);
}

impl Proxy {
    /// A proxy that judges code mapped from `places` as the sandbox's own writing.
    pub fn new(places: Places) -> Proxy {
        Proxy {
            places,
            ..Proxy::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Conn>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Binds the listener and accepts until the server ends. Runs on a thread of its own.
    /// With `identify`, each connection is announced with the program that opened it.
    pub fn listen(
        self: &Arc<Self>,
        id: u64,
        port: u16,
        identify: bool,
        sink: Arc<dyn Sink>,
    ) -> Response {
        let listener = match TcpListener::bind(("127.0.0.1", port)) {
            Ok(l) => l,
            Err(e) => {
                return Response::Error(runner_protocol::ApiError::new(
                    runner_protocol::ErrorKind::Io,
                    format!(
                        "the network proxy cannot listen on 127.0.0.1:{port} in the sandbox: {e}"
                    ),
                ));
            }
        };
        *self.target.lock().unwrap_or_else(|p| p.into_inner()) = Some(id);
        sink.response(id, Response::Listening { port });
        for socket in listener.incoming() {
            let Ok(socket) = socket else { continue };
            self.accept(id, port, identify, socket, &sink);
        }
        Response::Done
    }

    fn accept(
        self: &Arc<Self>,
        id: u64,
        port: u16,
        identify: bool,
        socket: TcpStream,
        sink: &Arc<dyn Sink>,
    ) {
        // Three threads a connection: a flood must not use up the sandbox's processes (the
        // host refuses far fewer at once anyway).
        if self.lock().len() >= MAX_CONNS {
            return;
        }
        let _ = socket.set_nodelay(true);
        let peer_port = socket.peer_addr().ok().map(|peer| peer.port());
        let (Ok(reader), Ok(writer)) = (socket.try_clone(), socket.try_clone()) else {
            return;
        };
        let conn = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = mpsc::channel();
        let credit = Arc::new(Credit::default());
        credit.add(WINDOW);
        let queued = Arc::new(AtomicUsize::new(0));
        // A program rule is judged before the host connects, so the holders are found
        // here, on the accept path; otherwise the owner is found off it (see [`Owner`]).
        let (owner, holders) = match identify {
            true => self.holders(peer_port, port),
            false => (Owner::Pending, Vec::new()),
        };
        self.lock().insert(
            conn,
            Conn {
                socket,
                to_socket: tx,
                queued: queued.clone(),
                credit: credit.clone(),
                owner,
            },
        );
        sink.response(id, Response::NetOpened { conn, holders });
        if !identify {
            let proxy = self.clone();
            std::thread::spawn(move || {
                let found = peer_port.and_then(|p| owner_of(p, port));
                if let Some(c) = proxy.lock().get_mut(&conn) {
                    c.owner = found.map_or(Owner::Unknown, Owner::Known);
                }
            });
        }
        let s = sink.clone();
        std::thread::spawn(move || read_socket(id, conn, reader, &credit, &*s));
        let (s, proxy) = (sink.clone(), self.clone());
        std::thread::spawn(move || {
            if let Err(e) = write_socket(id, conn, writer, &rx, &queued, &*s) {
                let ending = match hung_up(&e) {
                    true => Ending::HungUp,
                    false => Ending::Failed(format!("writing to the connection failed: {e}")),
                };
                proxy.drop_conn(conn, &*s, Some(ending));
            }
        });
    }

    /// Every process holding the client end of the connection from `peer_port`, and the
    /// first of them as its owner.
    fn holders(&self, peer_port: Option<u16>, port: u16) -> (Owner, Vec<Holder>) {
        let holders = peer_port
            .and_then(|p| client_inode(p, port))
            .map(|inode| crate::holders::holders_of(inode, &self.places))
            .unwrap_or_default();
        let owner = holders
            .first()
            .map_or(Owner::Unknown, |h| Owner::Known(h.pid));
        (owner, holders)
    }

    /// A data frame's payload of `len` bytes, still in `input`, for a connection. Where the
    /// socket takes it at once, it goes there without passing through this process: what
    /// `input` already buffered is sent, the rest spliced from the pipe beneath
    /// (`raw_input`) into the socket, the kernel moving pages instead of two copies. What
    /// the socket cannot take now is read and handed on as [`Proxy::data`] does.
    pub fn data_from<R: Read>(
        &self,
        conn: u64,
        len: usize,
        input: &mut std::io::BufReader<R>,
        raw_input: Option<std::os::fd::RawFd>,
        sink: &dyn Sink,
    ) -> std::io::Result<()> {
        use std::io::BufRead;
        use std::os::fd::AsRawFd;
        let socket = self
            .lock()
            .get(&conn)
            .filter(|c| c.queued.load(Ordering::SeqCst) == 0)
            .and_then(|c| c.socket.try_clone().ok());
        let mut moved = 0;
        if let Some(socket) = &socket {
            let fd = socket.as_raw_fd();
            // What the reader already holds first, then the pipe.
            let buffered = input.buffer();
            let take = buffered.len().min(len);
            let sent = send_now(fd, &buffered[..take]);
            input.consume(sent);
            moved += sent;
            if sent == take
                && let Some(pipe) = raw_input
                && input.buffer().is_empty()
            {
                moved += splice_now(pipe, fd, len - moved);
            }
        }
        if moved > 0 {
            self.acknowledge(conn, moved, sink);
        }
        if moved < len {
            let rest = runner_protocol::read_payload(input, len - moved)?;
            self.data(conn, rest, sink);
        }
        Ok(())
    }

    fn acknowledge(&self, conn: u64, bytes: usize, sink: &dyn Sink) {
        let target = *self.target.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = target {
            let bytes = bytes as u64;
            sink.response(id, Response::NetAck { conn, bytes });
        }
    }

    /// Bytes from the host for a connection. A connection that is gone takes nothing: the
    /// host learns that from the [`Response::NetClosed`] already on its way.
    ///
    /// Written here, on the server's reading thread, when the socket takes it all at once
    /// (the process inside keeps up): handing every chunk to the writer thread would cost
    /// two thread switches a chunk. What the socket cannot take now goes to the writer,
    /// and so does everything after it, so the bytes stay in order.
    pub fn data(&self, conn: u64, data: Vec<u8>, sink: &dyn Sink) {
        let map = self.lock();
        let Some(c) = map.get(&conn) else { return };
        let mut written = 0;
        if c.queued.load(Ordering::SeqCst) == 0 {
            use std::os::fd::AsRawFd;
            written = send_now(c.socket.as_raw_fd(), &data);
        }
        if written > 0 {
            self.acknowledge(conn, written, sink);
        }
        if written < data.len() {
            let rest = if written == 0 {
                data
            } else {
                data[written..].to_vec()
            };
            c.queued.fetch_add(1, Ordering::SeqCst);
            let _ = c.to_socket.send(ToSocket::Data(rest));
        }
    }

    pub fn ack(&self, conn: u64, bytes: u64) {
        if let Some(c) = self.lock().get(&conn) {
            c.credit.add(bytes);
        }
    }

    pub fn eof(&self, conn: u64) {
        if let Some(c) = self.lock().get(&conn) {
            c.queued.fetch_add(1, Ordering::SeqCst);
            let _ = c.to_socket.send(ToSocket::Eof);
        }
    }

    /// The host is done with a connection.
    pub fn close(&self, conn: u64) {
        if let Some(c) = self.lock().remove(&conn) {
            c.credit.stop();
            let _ = c.socket.shutdown(Shutdown::Both);
        }
    }

    fn drop_conn(&self, conn: u64, sink: &dyn Sink, ending: Option<Ending>) {
        let Some(c) = self.lock().remove(&conn) else {
            return;
        };
        c.credit.stop();
        let _ = c.socket.shutdown(Shutdown::Both);
        let target = *self.target.lock().unwrap_or_else(|p| p.into_inner());
        let response = match ending {
            Some(Ending::HungUp) => Response::NetHungUp { conn },
            Some(Ending::Failed(reason)) => Response::NetClosed { conn, reason },
            None => return,
        };
        if let Some(id) = target {
            sink.response(id, response);
        }
    }

    /// A command ended: every connection whose process is not in the group of a command
    /// still running is cut. (The ended command's own group is already dead, so this is
    /// about what it left behind in another group: a `setsid` daemon, a double fork.)
    pub fn command_ended(&self, live_groups: &[i32], sink: &dyn Sink) {
        let orphans: Vec<u64> = self
            .lock()
            .iter()
            .filter(|(_, c)| match c.owner {
                Owner::Pending => false,
                Owner::Unknown => true,
                Owner::Known(pid) => {
                    // SAFETY: getpgid takes a pid and touches no memory.
                    let pgid = unsafe { libc::getpgid(pid) };
                    pgid <= 0 || !live_groups.contains(&pgid)
                }
            })
            .map(|(id, _)| *id)
            .collect();
        for conn in orphans {
            self.drop_conn(
                conn,
                sink,
                Some(Ending::Failed(
                    "cut: the command that opened it has ended".into(),
                )),
            );
        }
    }
}

/// Sends what the socket takes without waiting; how much that was.
fn send_now(fd: std::os::fd::RawFd, data: &[u8]) -> usize {
    let mut written = 0;
    while written < data.len() {
        let rest = &data[written..];
        // SAFETY: a send on a socket we own, from a live buffer of `rest.len()` bytes.
        let n = unsafe {
            libc::send(
                fd,
                rest.as_ptr().cast(),
                rest.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n <= 0 {
            break;
        }
        written += n as usize;
    }
    written
}

/// Moves up to `len` bytes from `pipe` to the socket `fd` while both are ready: it waits
/// for the pipe (the payload may still be on its way) but never for the socket. How many
/// bytes moved; the caller reads the rest.
fn splice_now(pipe: std::os::fd::RawFd, fd: std::os::fd::RawFd, len: usize) -> usize {
    let mut moved = 0;
    while moved < len {
        // SAFETY: splice between two descriptors we own, with no offsets.
        let n = unsafe {
            libc::splice(
                pipe,
                std::ptr::null_mut(),
                fd,
                std::ptr::null_mut(),
                len - moved,
                libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
            )
        };
        if n > 0 {
            moved += n as usize;
            continue;
        }
        let e = std::io::Error::last_os_error();
        if n < 0 && e.kind() == std::io::ErrorKind::WouldBlock && pipe_empty_socket_ready(pipe, fd)
        {
            continue;
        }
        // The socket is full, not a pipe, or gone: the rest goes the slow way.
        break;
    }
    moved
}

/// After a splice that would block: true once the pipe has data again, if the socket can
/// still take more (then it was the pipe that was empty, and waiting for it is right).
fn pipe_empty_socket_ready(pipe: std::os::fd::RawFd, fd: std::os::fd::RawFd) -> bool {
    let mut socket = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: poll on one pollfd we own.
    if unsafe { libc::poll(&mut socket, 1, 0) } != 1 || socket.revents & libc::POLLOUT == 0 {
        return false;
    }
    let mut input = libc::pollfd {
        fd: pipe,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: as above; the payload is on its way, so this wait is short.
    unsafe { libc::poll(&mut input, 1, -1) == 1 && input.revents & libc::POLLIN != 0 }
}

/// Whether a socket error is the client hanging up (a reset, or a write after it went)
/// rather than a failure: clients close with unread data in their socket all the time.
fn hung_up(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
    )
}

/// How a connection the server drops ended, for the host's record.
enum Ending {
    /// The client went; nothing failed.
    HungUp,
    /// Why it failed.
    Failed(String),
}

/// Socket to host, within the window.
fn read_socket(id: u64, conn: u64, mut socket: TcpStream, credit: &Credit, sink: &dyn Sink) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let Some(allowed) = credit.take(CHUNK as u64) else {
            return;
        };
        match socket.read(&mut buf[..allowed as usize]) {
            Ok(0) => {
                sink.response(id, Response::NetEof { conn });
                return;
            }
            Ok(n) => {
                credit.add(allowed - n as u64);
                sink.data(id, conn, &buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => credit.add(allowed),
            Err(e) => {
                // Stopped on purpose (closed or cut): the host already knows.
                if credit.stopped() {
                    return;
                }
                let response = match hung_up(&e) {
                    true => Response::NetHungUp { conn },
                    false => Response::NetClosed {
                        conn,
                        reason: format!("the connection failed in the sandbox: {e}"),
                    },
                };
                sink.response(id, response);
                return;
            }
        }
    }
}

/// Host to socket, acknowledging what was written.
fn write_socket(
    id: u64,
    conn: u64,
    mut socket: TcpStream,
    rx: &mpsc::Receiver<ToSocket>,
    queued: &AtomicUsize,
    sink: &dyn Sink,
) -> std::io::Result<()> {
    while let Ok(message) = rx.recv() {
        match message {
            ToSocket::Data(data) => {
                socket.write_all(&data)?;
                sink.response(
                    id,
                    Response::NetAck {
                        conn,
                        bytes: data.len() as u64,
                    },
                );
            }
            ToSocket::Eof => socket.shutdown(Shutdown::Write)?,
        }
        // Only now may the reading thread write on its own again.
        queued.fetch_sub(1, Ordering::SeqCst);
    }
    Ok(())
}

/// The inode of the client end of a loopback connection from `client_port` to
/// `proxy_port`, from `/proc/net/tcp`.
fn client_inode(client_port: u16, proxy_port: u16) -> Option<u64> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .find_map(|table| socket_inode(&table, client_port, proxy_port))
}

/// A process that holds the client end of a loopback connection from `client_port` to
/// `proxy_port`: the first with that socket among its descriptors. The sandbox's `/proc`
/// shows only the sandbox's processes, so the walk is short.
fn owner_of(client_port: u16, proxy_port: u16) -> Option<i32> {
    let inode = client_inode(client_port, proxy_port)?;
    let wanted = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str()) {
                return Some(pid);
            }
        }
    }
    None
}

/// The inode of the socket whose local port is `local` and remote port `remote`, from the
/// text of `/proc/net/tcp` (ports are hexadecimal after the address's colon).
fn socket_inode(table: &str, local: u16, remote: u16) -> Option<u64> {
    let port = |field: &str| {
        field
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.len() > 9 && port(fields[1]) == Some(local) && port(fields[2]) == Some(remote))
            .then(|| fields[9].parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_socket_is_found_by_both_ports() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:0C38 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0 100 0 0 10 0\n   1: 0100007F:9C40 0100007F:0C38 01 00000000:00000000 00:00000000 00000000     0        0 2222 1 0 20 4 30 10 -1\n   2: 0100007F:0C38 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 3333 1 0 20 4 30 10 -1\n";
        // 0x0C38 = 3128, 0x9C40 = 40000: the client's end, not the listener's or the server's.
        assert_eq!(socket_inode(table, 40000, 3128), Some(2222));
        assert_eq!(socket_inode(table, 3128, 40000), Some(3333));
        assert_eq!(socket_inode(table, 40001, 3128), None);
    }

    #[test]
    fn the_owner_of_a_real_loopback_connection_is_this_process() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        assert_eq!(peer.port(), client.local_addr().unwrap().port());
        assert_eq!(owner_of(peer.port(), port), Some(std::process::id() as i32));
    }
}
