//! The person's terminal, as `runner exec` passes it through to a program in a sandbox.
//!
//! The program never gets the terminal itself: under landlock it gets a pseudo-terminal
//! made for it ([`Pty`]), under docker the container's own. With the real terminal it could
//! push keystrokes into the person's shell (TIOCSTI) once runner is gone, or read what
//! other programs left on it. Runner puts the real terminal in raw mode ([`RawMode`]), so
//! every key (Ctrl-C, Ctrl-Z, Ctrl-\) arrives as a byte and the sandbox's terminal turns it
//! into the program's signal, and copies the window size over at the start and on each
//! SIGWINCH.

use std::io::IsTerminal;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Whether `runner exec` runs the program on a terminal: standard input and output both
/// are one. Otherwise the three streams are passed through as they are (pipes, files),
/// byte for byte, with standard error kept apart.
pub fn attached() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// Puts the terminal on standard input in raw mode and restores it on drop.
pub struct RawMode(Option<libc::termios>);

impl RawMode {
    pub fn enter() -> RawMode {
        if !std::io::stdin().is_terminal() {
            return RawMode(None);
        }
        // SAFETY: tcgetattr/tcsetattr on stdin with a valid termios.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) != 0 {
                return RawMode(None);
            }
            let saved = t;
            libc::cfmakeraw(&mut t);
            libc::tcsetattr(0, libc::TCSANOW, &t);
            RawMode(Some(saved))
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            // SAFETY: restores the attributes saved above.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, t) };
        }
    }
}

/// The window size of the terminal on standard output (else standard input): rows and
/// columns.
pub fn window_size() -> Option<(u16, u16)> {
    [1, 0].into_iter().find_map(|fd| {
        // SAFETY: TIOCGWINSZ fills a zeroed winsize.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        let ok = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0;
        (ok && ws.ws_row > 0 && ws.ws_col > 0).then_some((ws.ws_row, ws.ws_col))
    })
}

/// A pseudo-terminal for a program in a landlock sandbox: runner keeps the master side and
/// hands the other side to the sandbox's server as its standard streams and controlling
/// terminal.
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

impl Pty {
    /// A new pair, the size of the person's terminal.
    pub fn open() -> std::io::Result<Pty> {
        let err = std::io::Error::last_os_error;
        // SAFETY: the POSIX pty calls on a descriptor we own; ptsname_r writes into a
        // buffer of the given length.
        unsafe {
            let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(err());
            }
            let master = OwnedFd::from_raw_fd(fd);
            if libc::grantpt(fd) != 0 || libc::unlockpt(fd) != 0 {
                return Err(err());
            }
            let mut name = [0 as libc::c_char; 128];
            if libc::ptsname_r(fd, name.as_mut_ptr(), name.len()) != 0 {
                return Err(err());
            }
            let slave = libc::open(
                name.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            if slave < 0 {
                return Err(err());
            }
            let pty = Pty {
                master,
                slave: OwnedFd::from_raw_fd(slave),
            };
            pty.resize();
            Ok(pty)
        }
    }

    /// Copies the person's window size to the sandbox's terminal; the kernel then sends
    /// SIGWINCH to the program's foreground group.
    pub fn resize(&self) {
        resize_master(self.master.as_raw_fd());
    }
}

/// [`Pty::resize`] on a raw master descriptor.
pub fn resize_master(master: RawFd) {
    if let Some((rows, cols)) = window_size() {
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads the winsize given.
        unsafe { libc::ioctl(master, libc::TIOCSWINSZ, &ws) };
    }
}

/// Reads standard input on a thread of its own (a blocking read: a terminal or pipe
/// cannot be waited on by the async runtime without taking it over) and hands each chunk
/// on; `None` once input ends. The thread is left blocked in its read when the program
/// ends first, and goes with the process.
pub fn stdin_chunks() -> tokio::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    std::thread::spawn(move || {
        use std::io::Read;
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    });
    rx
}
