//! Running commands: each in its own process group, with its output streamed and capped.
//!
//! The group matters because a shell command is rarely one process: `make` forks compilers,
//! `npm test` forks node. Killing only the shell on timeout would leave the rest running (and
//! holding the output pipes open, so the call would never return). So every command gets a
//! fresh group and timeouts, cancels and the end of a call kill the whole group, inside the
//! sandbox where the processes live.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runner_protocol::{ExecOutput, ExecRequest, ExecStatus, OutputStream, Response};

/// After the shell exits, how long its background children may keep the pipes open before
/// the group is killed. Long enough to collect output still in flight, short enough that a
/// forgotten `sleep 1000 &` does not hold the call.
const DRAIN_GRACE: Duration = Duration::from_millis(250);
/// How long, after that, output held by a process outside the command's group is read.
const LEFTOVER_GRACE: Duration = Duration::from_secs(2);

/// Running commands by request id, so that `cancel` can find their process group.
#[derive(Default)]
pub struct Running {
    groups: Mutex<HashMap<u64, (i32, Arc<AtomicBool>)>>,
    /// The standard input of interactive commands, by request id: a channel to the thread
    /// that writes it, so a command that does not read cannot stall the server.
    inputs: Mutex<HashMap<u64, mpsc::Sender<Vec<u8>>>>,
    /// The other ends, from when the request arrives until its command takes them.
    waiting_inputs: Mutex<HashMap<u64, mpsc::Receiver<Vec<u8>>>>,
    /// Paths that must not exist after a command (they did not when the sandbox started):
    /// `.git/commondir` would make host git take its config and hooks from a directory the
    /// sandbox controls, and no mount can stop a file from being created.
    forbidden: Vec<std::path::PathBuf>,
    /// Disarms repositories a command makes (see [`super::git_sweep`]).
    repositories: Option<super::git_sweep::RepositorySweep>,
    /// Clears special bits and removes device nodes a command makes (see
    /// [`super::special_files`]).
    special: Option<super::special_files::SpecialFiles>,
    /// Without a mount namespace: the protected paths, put back after every command (see
    /// [`super::restore`]).
    kept: Option<super::restore::ProtectedCopy>,
    /// Called when a command has ended, before its exit is reported, with the process
    /// groups of the commands still running (the network proxy cuts what the ended
    /// command left connected).
    after_command: Mutex<Option<AfterCommand>>,
}

type AfterCommand = Box<dyn Fn(&[i32]) + Send + Sync>;

impl Running {
    /// A server that keeps host git safe: `forbidden` paths are removed after every command,
    /// and with `repositories` every repository a command makes is disarmed; with `special`,
    /// special bits and device nodes too.
    pub fn guarded(
        forbidden: Vec<std::path::PathBuf>,
        repositories: Option<super::git_sweep::RepositorySweep>,
        kept: Option<super::restore::ProtectedCopy>,
        special: Option<super::special_files::SpecialFiles>,
    ) -> Running {
        Running {
            groups: Mutex::default(),
            inputs: Mutex::default(),
            waiting_inputs: Mutex::default(),
            forbidden,
            repositories,
            special,
            kept,
            after_command: Mutex::default(),
        }
    }

    pub fn set_after_command(&self, hook: AfterCommand) {
        *self.after_command.lock().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    fn command_ended(&self) {
        let live: Vec<i32> = self
            .groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|(pgid, _)| *pgid)
            .collect();
        if let Some(hook) = &*self.after_command.lock().unwrap_or_else(|p| p.into_inner()) {
            hook(&live);
        }
    }

    /// Removes whatever a command planted at a forbidden path and disarms what it left
    /// for plain git at the top of the checkout; says what it did.
    pub fn sweep(&self) -> Option<String> {
        let restored = self.restore();
        let mut done = self.remove_forbidden();
        if let Some(repositories) = &self.repositories {
            done.extend(repositories.after_command());
        }
        let mended = self
            .special
            .as_ref()
            .map(super::special_files::SpecialFiles::after_command)
            .unwrap_or_default();
        let notes: Vec<String> = [
            super::restore::note(&restored),
            super::git_sweep::note(&done),
            super::special_files::note(&mended),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!notes.is_empty()).then(|| notes.concat())
    }

    /// Puts the protected paths back, where no mount keeps them read-only.
    fn restore(&self) -> Vec<String> {
        self.kept
            .as_ref()
            .map(super::restore::ProtectedCopy::restore)
            .unwrap_or_default()
    }

    fn remove_forbidden(&self) -> Vec<String> {
        self.forbidden
            .iter()
            .filter(|p| super::remove_planted(p))
            .map(|p| format!("removed {}", p.display()))
            .collect()
    }

    /// After a write or rename through the file API: forbidden paths, and `path` and the
    /// folders above it (a repository needs a `HEAD` beside its `objects`; one file tool
    /// call at a time can make one).
    pub fn after_file_change(&self, path: &std::path::Path) {
        let _ = self.restore();
        let _ = self.remove_forbidden();
        if let Some(repositories) = &self.repositories {
            let path = repositories.worktree.join(path);
            let _ = repositories.after_file_change(&path);
            if let Some(special) = &self.special {
                let _ = special.after_file_change(&path);
            }
        }
    }

    /// Kills the group of a running command; false if it already ended.
    pub fn cancel(&self, id: u64) -> bool {
        let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        match groups.get(&id) {
            Some((pgid, cancelled)) => {
                cancelled.store(true, Ordering::SeqCst);
                kill_group(*pgid);
                true
            }
            None => false,
        }
    }

    /// Opens the input of interactive request `id` as soon as the request arrives, before its
    /// command starts on a thread of its own: `Input` frames right behind it then find it.
    pub fn open_input(&self, id: u64) {
        let (tx, rx) = mpsc::channel::<Vec<u8>>();
        self.inputs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        self.waiting_inputs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, rx);
    }

    /// Queues bytes for an interactive command's standard input; false if there is none.
    pub fn input(&self, id: u64, data: Vec<u8>) -> bool {
        let inputs = self.inputs.lock().unwrap_or_else(|p| p.into_inner());
        inputs.get(&id).is_some_and(|tx| tx.send(data).is_ok())
    }

    /// Closes an interactive command's standard input (once what is queued is written).
    pub fn close_input(&self, id: u64) -> bool {
        let mut inputs = self.inputs.lock().unwrap_or_else(|p| p.into_inner());
        inputs.remove(&id).is_some()
    }

    /// Drops both ends of a request's input (its command never started).
    pub fn forget_input(&self, id: u64) {
        self.close_input(id);
        self.waiting_inputs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// Kills every running group: the controller went away, nobody will read the results.
    /// Without a PID namespace, also every process the commands left behind (a `setsid`
    /// daemon), which would otherwise outlive the sandbox.
    pub fn kill_all(&self) {
        {
            let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            for (pgid, _) in groups.values() {
                kill_group(*pgid);
            }
        }
        crate::confine::kill_orphans();
    }
}

/// Kills the process group; whether it still had a process in it. An empty group is not
/// signalled again: its number may be handed to another group.
fn kill_group(pgid: i32) -> bool {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
    pgid > 0 && unsafe { libc::kill(-pgid, libc::SIGKILL) } == 0
}

/// Whether `file` has something to read (or has ended) within `timeout`.
fn readable_within(file: &std::fs::File, timeout: Duration) -> bool {
    use std::os::fd::AsRawFd;
    let mut fds = libc::pollfd {
        fd: file.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one pollfd we own, for at most `timeout`.
    let n = unsafe { libc::poll(&mut fds, 1, timeout.as_millis() as libc::c_int) };
    n > 0
}

/// Keeps the first half of the allowed output as it streams and a rolling window of the
/// last half, counting what falls in between.
struct Capture {
    head_left: u64,
    tail: std::collections::VecDeque<(OutputStream, u8)>,
    tail_cap: usize,
    dropped: u64,
}

impl Capture {
    fn new(limit: u64) -> Self {
        let head = limit / 2;
        Capture {
            head_left: head,
            tail: Default::default(),
            tail_cap: (limit - head) as usize,
            dropped: 0,
        }
    }

    /// Returns the part of `data` to stream now; the rest goes to the tail window. Only the
    /// last `tail_cap` bytes of a chunk can stay in the window, so the ones before them are
    /// counted as dropped without passing through it: a command that floods its output
    /// costs one count per chunk, not a push and a pop per byte.
    fn push<'a>(&mut self, stream: OutputStream, data: &'a [u8]) -> &'a [u8] {
        let now = (data.len() as u64).min(self.head_left) as usize;
        self.head_left -= now as u64;
        let rest = &data[now..];
        let skipped = rest.len().saturating_sub(self.tail_cap);
        let kept = &rest[skipped..];
        let pushed_out = (self.tail.len() + kept.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..pushed_out);
        self.tail.extend(kept.iter().map(|&b| (stream, b)));
        self.dropped += (skipped + pushed_out) as u64;
        &data[..now]
    }

    /// The kept tail as chunks per stream, in order.
    fn take_tail(&mut self) -> Vec<(OutputStream, Vec<u8>)> {
        let mut chunks: Vec<(OutputStream, Vec<u8>)> = Vec::new();
        for (stream, b) in self.tail.drain(..) {
            match chunks.last_mut() {
                Some((s, bytes)) if *s == stream => bytes.push(b),
                _ => chunks.push((stream, vec![b])),
            }
        }
        chunks
    }
}

/// Why a command could not be run or followed to its end.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cannot start {shell} in {cwd}: {source}")]
    Spawn {
        shell: &'static str,
        cwd: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("lost track of the command: {0}")]
    Lost(std::io::Error),
}

/// What the output readers and the waiter share while a command runs.
struct Pumps<'a> {
    capture: Mutex<Capture>,
    /// Set when the output is no longer wanted: a process that left the group may hold a
    /// pipe for ever.
    stop_reading: AtomicBool,
    send: &'a (dyn Fn(Response) + Sync),
}

/// Runs one command to completion, sending output chunks and then the exit status through
/// `send`. Never panics on the command's behaviour; spawn failures become an error response.
pub fn run(
    id: u64,
    req: &ExecRequest,
    cwd: &Path,
    running: &Running,
    send: &(dyn Fn(Response) + Sync),
) -> Result<(), ExecError> {
    let mut child = match spawn_shell(req, cwd) {
        Ok(c) => c,
        Err(e) => {
            running.forget_input(id);
            return Err(e);
        }
    };
    let pgid = child.id() as i32;
    let cancelled = Arc::new(AtomicBool::new(false));
    running
        .groups
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, (pgid, cancelled.clone()));
    feed_stdin(&mut child, id, req, running);

    let pumps = Pumps {
        capture: Mutex::new(Capture::new(req.output_limit)),
        stop_reading: AtomicBool::new(false),
        send,
    };
    let (wait, timed_out) = follow(child, pgid, req.timeout_ms, &pumps);

    running
        .groups
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
    running.close_input(id);
    running.command_ended();
    let mut cap = pumps
        .capture
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    for (stream, data) in cap.take_tail() {
        send(Response::Output(ExecOutput {
            stream,
            data,
            tail: true,
        }));
    }
    if let Some(note) = running.sweep() {
        send(Response::Output(ExecOutput {
            stream: OutputStream::Stderr,
            data: note.into_bytes(),
            tail: true,
        }));
    }
    let (code, signal) = match wait {
        Ended::Status(status) => {
            let status = status.map_err(ExecError::Lost)?;
            (status.code(), status.signal())
        }
        Ended::NotReaped => {
            send(Response::Output(ExecOutput {
                stream: OutputStream::Stderr,
                data: format!(
                    "\n[the command was killed at its timeout but had not ended {} s later \
                     (the kernel keeps it, often in memory reclaim at the sandbox's memory \
                     limit); its exit status is unknown. Later commands may run slowly until \
                     it is gone.]\n",
                    REAP_GRACE.as_secs()
                )
                .into_bytes(),
                tail: true,
            }));
            (None, Some(libc::SIGKILL))
        }
    };
    send(Response::Exit(ExecStatus {
        code,
        signal,
        timed_out,
        cancelled: cancelled.load(Ordering::SeqCst),
        dropped_bytes: cap.dropped,
    }));
    Ok(())
}

/// The command under bash (sh where the image has no bash), in a process group of its own
/// so that a timeout or a cancel ends everything it started, with exactly the environment
/// the request names.
fn spawn_shell(req: &ExecRequest, cwd: &Path) -> Result<std::process::Child, ExecError> {
    let shell = if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    let mut cmd = Command::new(shell);
    cmd.arg("-c")
        .arg(&req.command)
        .current_dir(cwd)
        .env_clear()
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .stdin(if req.stdin.is_some() || req.interactive {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // The server blocks SIGTERM, SIGINT and SIGHUP on every thread (it waits for them on
    // one), and a child inherits the mask: unblocked here, or `timeout`, a test runner's
    // Ctrl-C handling or a `kill` from the command itself would not work inside.
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            crate::confine::become_command_user()
        });
    }
    cmd.spawn().map_err(|source| ExecError::Spawn {
        shell,
        cwd: cwd.to_path_buf(),
        source,
    })
}

/// Standard input: the request's bytes, then (for an interactive command) whatever `Input`
/// requests bring, in order, until the input is closed or the command stops reading.
fn feed_stdin(child: &mut std::process::Child, id: u64, req: &ExecRequest, running: &Running) {
    let waiting = running
        .waiting_inputs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
    if let (true, Some(rx)) = (req.interactive, waiting) {
        if let Some(mut stdin) = child.stdin.take() {
            let first = req.stdin.clone();
            std::thread::spawn(move || {
                if let Some(data) = first
                    && stdin.write_all(&data).is_err()
                {
                    return;
                }
                while let Ok(data) = rx.recv() {
                    if stdin.write_all(&data).and_then(|()| stdin.flush()).is_err() {
                        break;
                    }
                }
            });
        }
    } else if let (Some(mut stdin), Some(data)) = (child.stdin.take(), req.stdin.clone()) {
        std::thread::spawn(move || {
            let _ = stdin.write_all(&data);
        });
    }
}

/// How the shell ended, as far as the server could learn it.
enum Ended {
    /// Reaped: its status.
    Status(std::io::Result<std::process::ExitStatus>),
    /// Killed at the timeout but not gone [`REAP_GRACE`] later: a process the
    /// kernel keeps from dying (stuck in memory reclaim under its cgroup's limit, frozen)
    /// must not hold the call for ever. A thread of its own still reaps it.
    NotReaped,
}

/// After the timeout's kill, how long the shell may take to die before the call ends
/// without its status.
const REAP_GRACE: Duration = Duration::from_secs(5);

/// Reads both output pipes while waiting for the shell (killing its group at the timeout),
/// then drains what its leftovers still write: (how the shell ended, whether it timed out).
fn follow(
    mut child: std::process::Child,
    pgid: i32,
    timeout_ms: u64,
    pumps: &Pumps<'_>,
) -> (Ended, bool) {
    let (eof_tx, eof_rx) = mpsc::channel::<()>();
    let (exit_tx, exit_rx) = mpsc::channel();
    let pipes = [
        (OutputStream::Stdout, child.stdout.take().map(OwnedFd::from)),
        (OutputStream::Stderr, child.stderr.take().map(OwnedFd::from)),
    ];
    // Outside the scope: the call must not wait for a shell the kernel does not let die.
    std::thread::spawn(move || {
        let _ = exit_tx.send(child.wait());
    });
    std::thread::scope(|scope| {
        for (stream, pipe) in pipes {
            let Some(pipe) = pipe else { continue };
            let eof_tx = eof_tx.clone();
            scope.spawn(move || {
                pump(std::fs::File::from(pipe), stream, pumps);
                let _ = eof_tx.send(());
            });
        }
        drop(eof_tx);

        let mut timed_out = false;
        let ended = match exit_rx.recv_timeout(Duration::from_millis(timeout_ms)) {
            Ok(status) => Ended::Status(status),
            Err(_) => {
                timed_out = true;
                kill_group(pgid);
                match exit_rx.recv_timeout(REAP_GRACE) {
                    Ok(status) => Ended::Status(status),
                    Err(mpsc::RecvTimeoutError::Timeout) => Ended::NotReaped,
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        Ended::Status(Err(std::io::Error::other("waiter lost")))
                    }
                }
            }
        };
        drain(pgid, &eof_rx, pumps);
        (ended, timed_out)
    })
}

/// One output pipe to its end: the head of the output streams out as it comes, the rest
/// goes to the tail window. Woken now and then to see whether the output is still wanted.
fn pump(mut pipe: std::fs::File, stream: OutputStream, pumps: &Pumps<'_>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if !readable_within(&pipe, Duration::from_millis(100)) {
            if pumps.stop_reading.load(Ordering::SeqCst) {
                break;
            }
            continue;
        }
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let mut cap = pumps.capture.lock().unwrap_or_else(|p| p.into_inner());
                let now = cap.push(stream, &buf[..n]);
                if !now.is_empty() {
                    (pumps.send)(Response::Output(ExecOutput {
                        stream,
                        data: now.to_vec(),
                        tail: false,
                    }));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

/// The shell is gone; give its leftovers a moment to flush, then end the group so the pipes
/// close and no stray process outlives the call. Killed again and again while it lasts (a
/// process forked as the group was killed, a fork bomb's, can miss one signal). A process
/// that left the group (`setsid`) and still holds the output is not waited for past
/// [`LEFTOVER_GRACE`]: the output stops being read, and its next write to it fails.
fn drain(pgid: i32, eof_rx: &mpsc::Receiver<()>, pumps: &Pumps<'_>) {
    let mut open = 2;
    let drained_by = std::time::Instant::now() + DRAIN_GRACE;
    let mut killing_since: Option<std::time::Instant> = None;
    let mut group_alive = true;
    while open > 0 {
        let now = std::time::Instant::now();
        let wait = if now < drained_by {
            drained_by - now
        } else {
            let since = *killing_since.get_or_insert(now);
            if group_alive {
                group_alive = kill_group(pgid);
            }
            if now.duration_since(since) > LEFTOVER_GRACE {
                pumps.stop_reading.store(true, Ordering::SeqCst);
            }
            Duration::from_millis(100)
        };
        match eof_rx.recv_timeout(wait) {
            Ok(()) => open -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if group_alive {
        kill_group(pgid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a capture keeps: the head, the tail window's chunks, the count dropped.
    type Kept = (Vec<u8>, Vec<(OutputStream, Vec<u8>)>, u64);

    /// The window, as it was written first: a push and a pop per byte.
    fn capture_byte_by_byte(limit: u64, chunks: &[(OutputStream, Vec<u8>)]) -> Kept {
        let mut head_left = limit / 2;
        let cap = (limit - limit / 2) as usize;
        let (mut head, mut tail, mut dropped) = (Vec::new(), std::collections::VecDeque::new(), 0);
        for (stream, data) in chunks {
            for &b in data {
                if head_left > 0 {
                    head_left -= 1;
                    head.push(b);
                    continue;
                }
                if tail.len() == cap {
                    dropped += 1;
                    if cap == 0 {
                        continue;
                    }
                    tail.pop_front();
                }
                tail.push_back((*stream, b));
            }
        }
        let mut chunks: Vec<(OutputStream, Vec<u8>)> = Vec::new();
        for (stream, b) in tail {
            match chunks.last_mut() {
                Some((s, bytes)) if *s == stream => bytes.push(b),
                _ => chunks.push((stream, vec![b])),
            }
        }
        (head, chunks, dropped)
    }

    #[test]
    fn the_capture_keeps_what_a_byte_by_byte_window_keeps() {
        use OutputStream::{Stderr, Stdout};
        // Chunks smaller than, equal to and larger than the window, both streams mixed.
        let sizes = [0usize, 1, 3, 7, 8, 9, 16, 40, 2, 100, 5];
        for limit in [0u64, 1, 2, 5, 16, 17, 64, 1000] {
            for start in 0..sizes.len() {
                let chunks: Vec<(OutputStream, Vec<u8>)> = sizes[start..]
                    .iter()
                    .chain(&sizes[..start])
                    .enumerate()
                    .map(|(i, &n)| {
                        let stream = if i % 3 == 1 { Stderr } else { Stdout };
                        (stream, (0..n).map(|b| (b + i * 31) as u8).collect())
                    })
                    .collect();
                let mut capture = Capture::new(limit);
                let mut head = Vec::new();
                for (stream, data) in &chunks {
                    head.extend_from_slice(capture.push(*stream, data));
                }
                let got = (head, capture.take_tail(), capture.dropped);
                assert_eq!(
                    got,
                    capture_byte_by_byte(limit, &chunks),
                    "limit {limit}, start {start}"
                );
            }
        }
    }

    fn run_collect(command: &str, timeout_ms: u64, limit: u64) -> (Vec<u8>, ExecStatus) {
        let req = ExecRequest {
            command: command.into(),
            cwd: "/".into(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            timeout_ms,
            stdin: None,
            output_limit: limit,
            interactive: false,
        };
        let out = Mutex::new((Vec::new(), None));
        run(1, &req, Path::new("/tmp"), &Running::default(), &|r| {
            let mut o = out.lock().unwrap();
            match r {
                Response::Output(c) => o.0.extend(c.data),
                Response::Exit(s) => o.1 = Some(s),
                other => panic!("unexpected {other:?}"),
            }
        })
        .unwrap();
        let (bytes, status) = out.into_inner().unwrap();
        (bytes, status.expect("no exit status"))
    }

    #[test]
    fn commands_start_with_no_signal_blocked() {
        // As the server's threads do: SIGTERM blocked, then a command started.
        let (out, _) = std::thread::spawn(|| {
            // SAFETY: signal-set calls on a local set, for this thread only.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGTERM);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
            run_collect("grep SigBlk /proc/self/status", 5000, 1 << 16)
        })
        .join()
        .unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("SigBlk:\t0000000000000000"), "{text}");
    }

    #[test]
    fn exit_code_and_both_streams_are_kept() {
        let (out, st) = run_collect("echo out; echo err >&2; exit 3", 10_000, 1 << 20);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("out\n") && text.contains("err\n"), "{text}");
        assert_eq!(st.code, Some(3));
        assert!(!st.timed_out);
    }

    #[test]
    fn timeout_kills_the_whole_group_including_children_that_ignore_term() {
        let start = std::time::Instant::now();
        let (_, st) = run_collect(
            "trap '' TERM; (trap '' TERM; sleep 30) & sleep 30",
            300,
            1024,
        );
        assert!(st.timed_out);
        assert_eq!(st.signal, Some(libc::SIGKILL));
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "took {:?}",
            start.elapsed()
        );
    }

    /// A shell the kernel does not let die (here frozen by the cgroup v1 freezer, which
    /// holds even SIGKILL; under a full memory cgroup, reclaim can hold it as long) ends the
    /// call soon after its timeout, saying so, instead of holding it until it is gone.
    #[test]
    fn a_shell_that_cannot_die_does_not_hold_the_call() {
        let freezer = Path::new("/sys/fs/cgroup/freezer");
        if !freezer.join("cgroup.procs").exists() {
            eprintln!("no cgroup v1 freezer here (cgroup v2 lets SIGKILL end frozen tasks)");
            return;
        }
        let dir = freezer.join(format!("runner-exec-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let start = std::time::Instant::now();
        let (out, st) = run_collect(
            &format!(
                "echo $$ > {d}/cgroup.procs && echo FROZEN > {d}/freezer.state; sleep 30",
                d = dir.display()
            ),
            500,
            1 << 16,
        );
        let took = start.elapsed();
        // Let it go, and wait until it has.
        std::fs::write(dir.join("freezer.state"), "THAWED").unwrap();
        for _ in 0..100 {
            if std::fs::remove_dir(&dir).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let text = String::from_utf8_lossy(&out);
        assert!(st.timed_out, "{st:?} {text}");
        assert!(
            took < REAP_GRACE + Duration::from_secs(3),
            "the call took {took:?}"
        );
        assert!(text.contains("had not ended"), "{text}");
        assert_eq!((st.code, st.signal), (None, Some(libc::SIGKILL)));
        assert!(!dir.exists(), "{} is left", dir.display());
    }

    #[test]
    fn background_children_do_not_hold_the_call() {
        let start = std::time::Instant::now();
        let (out, st) = run_collect("sleep 30 & echo started", 10_000, 1024);
        assert_eq!(String::from_utf8(out).unwrap(), "started\n");
        assert_eq!(st.code, Some(0));
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_process_that_left_the_group_does_not_hold_the_call_by_its_output() {
        let start = std::time::Instant::now();
        let (out, st) = run_collect(
            "setsid sh -c 'sleep 30; echo late' & echo started",
            10_000,
            1024,
        );
        assert_eq!(String::from_utf8(out).unwrap(), "started\n");
        assert_eq!(st.code, Some(0));
        let took = start.elapsed();
        assert!(took < Duration::from_secs(5), "took {took:?}");
    }

    #[test]
    fn huge_output_keeps_head_and_tail_and_counts_the_rest() {
        let (out, st) = run_collect("seq 1 100000", 10_000, 1000);
        assert_eq!(out.len(), 1000);
        assert!(out.starts_with(b"1\n2\n3\n"));
        assert!(out.ends_with(b"99999\n100000\n"));
        let full: usize = (1..=100000).map(|n: u32| n.to_string().len() + 1).sum();
        assert_eq!(st.dropped_bytes as usize, full - 1000);
    }

    #[test]
    fn environment_is_exactly_what_was_given() {
        // SAFETY: tests in this module do not read this variable concurrently.
        unsafe { std::env::set_var("RUNNER_TEST_SECRET", "sk-live") };
        let (out, _) = run_collect("env", 10_000, 1 << 16);
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("sk-live"), "{text}");
        assert!(text.contains("PATH=/usr/bin:/bin"));
    }
}
