//! Proxied bytes from a host socket into the server's input pipe without passing through
//! this process's memory.
//!
//! A download through the allow-list proxy would otherwise be copied twice on the host
//! (socket to buffer, buffer to pipe) on top of the copies the sandbox side makes. With
//! `splice(2)` the kernel moves page references: socket to a per-connection pipe (so the
//! length is known before the frame's header is written), then, under the client's writer
//! lock, header and payload into the server's pipe. Only backends whose server is a local
//! child have such a pipe; docker's attach stream takes the copying path.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::AsyncWrite;
use tokio::io::unix::AsyncFd;

/// The write end of the server's input pipe, non-blocking and driven by the runtime.
pub(crate) struct PipeWriter {
    fd: AsyncFd<OwnedFd>,
}

impl PipeWriter {
    pub fn new(fd: OwnedFd) -> io::Result<Self> {
        set_nonblocking(fd.as_raw_fd())?;
        // SAFETY: an OwnedFd keeps its descriptor open, and always the same one, for as
        // long as the AsyncFd that owns it.
        let fd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::WRITABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(PipeWriter { fd })
    }

    /// Moves exactly `len` bytes from `from` (a pipe that holds at least that many) into
    /// this pipe, waiting for room.
    pub async fn splice_all(&self, from: &SplicePipe, mut len: usize) -> io::Result<()> {
        while len > 0 {
            let mut guard = self.fd.writable().await?;
            let moved = guard.try_io(|fd| splice(from.read.as_raw_fd(), fd.as_raw_fd(), len));
            match moved {
                Ok(Ok(0)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the relay pipe ran dry before the frame was complete",
                    ));
                }
                Ok(Ok(n)) => len -= n,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
        Ok(())
    }
}

impl AsyncWrite for PipeWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            match guard.try_io(|fd| write(fd.as_raw_fd(), buf)) {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A connection's holding pipe: what was spliced off its socket and not yet framed.
pub struct SplicePipe {
    read: OwnedFd,
    write: OwnedFd,
    /// How many bytes the pipe holds at most; a fill asks for no more, so that running out
    /// of room is never mistaken for the socket running dry.
    capacity: usize,
}

impl SplicePipe {
    pub fn new(want: usize) -> io::Result<Self> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fcntl on a descriptor we own, with an integer argument. Best effort: the
        // size actually given is read back.
        unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, want as libc::c_int) };
        // SAFETY: as above.
        let size = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ) };
        if size <= 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SplicePipe {
            read,
            write,
            capacity: size as usize,
        })
    }

    /// Splices what `socket` has ready, up to `max` bytes, into this (empty) pipe. `Ok(0)`
    /// is the end of the stream; `WouldBlock` means the socket had nothing, so that the
    /// runtime clears its readiness. A pipe that runs out of slots (each splice takes at
    /// least one, however few bytes) ends the fill early instead.
    ///
    /// An error met after some bytes are in the pipe goes in `deferred`: those bytes go
    /// first (the last of a response before a reset, say), the error after them.
    pub fn fill_from(
        &self,
        socket: impl AsFd,
        max: usize,
        deferred: &mut Option<io::Error>,
    ) -> io::Result<usize> {
        if let Some(e) = deferred.take() {
            return Err(e);
        }
        let fd = socket.as_fd().as_raw_fd();
        let want = max.min(self.capacity);
        let mut filled = 0;
        while filled < want {
            match splice(fd, self.write.as_raw_fd(), want - filled) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && filled > 0 => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Data that splice will not take (TCP stops it at an urgent mark) is
                    // read the ordinary way, or the download would stall there.
                    return match unread(fd) {
                        0 => Err(e),
                        n => self.copy_in(fd, n.min(want)),
                    };
                }
                Err(e) if filled > 0 => {
                    *deferred = Some(e);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(filled)
    }

    /// Reads up to `n` bytes from the socket and writes them into the (empty) pipe.
    fn copy_in(&self, fd: RawFd, n: usize) -> io::Result<usize> {
        let mut buf = vec![0u8; n];
        // SAFETY: a recv into a live buffer of `buf.len()` bytes.
        let got = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        let got = got as usize;
        let mut put = 0;
        while put < got {
            put += write(self.write.as_raw_fd(), &buf[put..got])?;
        }
        Ok(got)
    }
}

/// Holding pipes between fills, so that an idle connection holds none: each is a MiB of
/// pipe buffers, which count against the user's limit on pipe pages.
#[derive(Default)]
pub struct PipePool {
    idle: std::sync::Mutex<Vec<std::sync::Arc<SplicePipe>>>,
}

impl PipePool {
    /// Pipes kept idle at most.
    const KEEP: usize = 4;

    pub fn take(&self, size: usize) -> io::Result<std::sync::Arc<SplicePipe>> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match idle {
            Some(p) => Ok(p),
            None => SplicePipe::new(size).map(std::sync::Arc::new),
        }
    }

    /// Takes back an empty pipe.
    pub fn give(&self, pipe: std::sync::Arc<SplicePipe>) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < Self::KEEP {
            idle.push(pipe);
        }
    }
}

/// How many bytes a socket has waiting to be read.
fn unread(fd: RawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int to the pointer it is given.
    let ok = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) } == 0;
    if ok { n.max(0) as usize } else { 0 }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: splice between two descriptors the caller owns, with no offsets.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn write(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: a write from a live buffer of `data.len()` bytes to a descriptor we own.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller owns, with an integer argument.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
