//! The wall tried from inside, at start (see `runner_protocol::wall`).
//!
//! Each probe is one or two system calls, made by the server itself: it holds the same
//! landlock domain, seccomp filter, namespaces and capability sets that every command it
//! starts inherits (commands can only have less). Nothing here judges: a probe reports
//! what the kernel said, and the host decides whether that is what this backend must say.
//! So the probes are the calls whose answer differs between a wall that holds and one that
//! is missing, and cost microseconds: no process is started.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Instant;

use runner_protocol::wall::probes;
use runner_protocol::{Probe, SelfTestRequest, WallFacts};

/// The self-test of a server started with `--exec`, which serves no requests: on the
/// socket runner handed it, one [`SelfTestRequest`] frame in, the facts out, then runner's
/// verdict. `Ok(true)` only when runner answered `true`: the program may run. Anything else
/// (a failed check closes the socket) means it must not.
pub fn over_socket(socket: std::os::unix::net::UnixStream) -> std::io::Result<bool> {
    let mut socket = socket;
    let Some(req) = runner_protocol::read_frame::<SelfTestRequest>(&mut socket)? else {
        return Ok(false);
    };
    runner_protocol::write_frame(&mut socket, &run(&req))?;
    Ok(runner_protocol::read_frame::<bool>(&mut socket)? == Some(true))
}

/// Runs every probe, in order.
pub fn run(req: &SelfTestRequest) -> WallFacts {
    let mut facts = WallFacts::default();
    let mut time = |name: &str, probe: &dyn Fn() -> (Option<i32>, Option<u64>)| {
        let start = Instant::now();
        let (errno, value) = probe();
        facts.probes.push(Probe {
            name: name.to_string(),
            errno,
            value,
            micros: start.elapsed().as_micros() as u64,
        });
    };
    time(probes::WORKTREE_WRITE, &|| (write_in(&req.worktree), None));
    time(probes::CANARY_READ, &|| (read(&req.canary), None));
    time(probes::SECCOMP_MODE, &|| prctl_value(libc::PR_GET_SECCOMP));
    time(probes::SECCOMP_DENIES, &|| (peek_at_self(), None));
    time(probes::INET_SOCKET, &|| (socket_errno(libc::AF_INET), None));
    time(probes::ROUTE_V4, &|| (route(v4_documentation()), None));
    time(probes::ROUTE_V6, &|| (route(v6_documentation()), None));
    let caps = capability_sets();
    time(probes::CAP_EFFECTIVE, &|| {
        caps.map_or_else(err, |c| ok(c.0))
    });
    time(probes::CAP_PERMITTED, &|| {
        caps.map_or_else(err, |c| ok(c.1))
    });
    time(probes::CAP_BOUNDING, &|| ok(bounding_set()));
    time(probes::CAP_AMBIENT, &|| ok(ambient_set()));
    time(probes::NO_NEW_PRIVS, &|| {
        prctl_value(libc::PR_GET_NO_NEW_PRIVS)
    });
    facts
}

fn ok(value: u64) -> (Option<i32>, Option<u64>) {
    (None, Some(value))
}

fn err(errno: i32) -> (Option<i32>, Option<u64>) {
    (Some(errno), None)
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Asks to read a word of this process as its tracer would: nobody traces it, so the
/// kernel says ESRCH and nothing changes; a filter that denies `ptrace` says EPERM first.
fn peek_at_self() -> Option<i32> {
    // SAFETY: PTRACE_PEEKDATA on a process that is not being traced fails without effect.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_PEEKDATA,
            libc::getpid(),
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if rc == -1 { Some(last_errno()) } else { None }
}

fn io_errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// A fresh file in the worktree, written and removed. Its name cannot be an existing
/// file's (`O_EXCL`), and it is gone before the answer leaves.
fn write_in(worktree: &Path) -> Option<i32> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let path = worktree.join(format!(
        ".runner-self-test-{}-{nanos:08x}",
        std::process::id()
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .and_then(|mut f| f.write_all(b"runner self-test\n"));
    let removed = std::fs::remove_file(&path);
    match (written, removed) {
        (Err(e), _) | (Ok(()), Err(e)) => Some(io_errno(&e)),
        (Ok(()), Ok(())) => None,
    }
}

/// Opens the canary and reads a byte: `None` means the wall let it through.
fn read(canary: &Path) -> Option<i32> {
    use std::io::Read;
    match std::fs::File::open(canary).and_then(|mut f| f.read(&mut [0u8; 1])) {
        Ok(_) => None,
        Err(e) => Some(io_errno(&e)),
    }
}

fn prctl_value(option: libc::c_int) -> (Option<i32>, Option<u64>) {
    // SAFETY: a query prctl with no pointers.
    let rc = unsafe { libc::prctl(option, 0, 0, 0, 0) };
    if rc < 0 {
        err(last_errno())
    } else {
        ok(rc as u64)
    }
}

fn socket_errno(family: libc::c_int) -> Option<i32> {
    // SAFETY: plain syscall; the descriptor, if any, is closed at once.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Some(last_errno());
    }
    // SAFETY: the descriptor just opened.
    unsafe { libc::close(fd) };
    None
}

fn v4_documentation() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([192, 0, 2, 1], 9))
}

fn v6_documentation() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1], 9))
}

/// Whether a datagram socket can be pointed at `to`: `connect` on UDP only looks up a
/// route, so nothing leaves the machine either way. `None`: there is a route out.
fn route(to: std::net::SocketAddr) -> Option<i32> {
    let bind: std::net::SocketAddr = match to {
        std::net::SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
        std::net::SocketAddr::V6(_) => ([0u16; 8], 0).into(),
    };
    match std::net::UdpSocket::bind(bind).and_then(|s| s.connect(to)) {
        Ok(()) => None,
        Err(e) => Some(io_errno(&e)),
    }
}

/// The effective and permitted sets (`capget`, version 3: two 32-bit words each).
fn capability_sets() -> Result<(u64, u64), i32> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: a header and a two-element array, as capget(2) version 3 requires.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if rc != 0 {
        return Err(last_errno());
    }
    let word = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok((
        word(data[0].effective, data[1].effective),
        word(data[0].permitted, data[1].permitted),
    ))
}

/// The capabilities still in the bounding set, up to the last one the kernel knows.
fn bounding_set() -> u64 {
    each_capability(|cap| {
        // SAFETY: a query prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) }
    })
}

fn ambient_set() -> u64 {
    each_capability(|cap| {
        // SAFETY: a query prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_IS_SET, cap, 0, 0) }
    })
}

/// A mask of the capabilities `held` answers 1 for; an error (past the last one) ends it.
fn each_capability(held: impl Fn(libc::c_ulong) -> libc::c_int) -> u64 {
    let mut mask = 0u64;
    for cap in 0..64 {
        match held(cap) {
            1 => mask |= 1 << cap,
            0 => {}
            _ => break,
        }
    }
    mask
}
