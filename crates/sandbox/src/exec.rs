//! One program as the whole life of a sandbox, on the host's side: `runner exec -- PROGRAM
//! ARGS…`, and `runner sandbox shell`, which is the same with the sandbox's shell as the
//! program.
//!
//! The sandbox is the one the agent's commands get (landlock's confinement, or a docker
//! container with runner's server in it); the server is started with `--exec` and runs the
//! program instead of serving requests (see [`runner_sandbox_server::program`]). The argv travels
//! as the server's own trailing arguments, never through a shell.
//!
//! With a terminal on standard input and output the program gets a terminal of the
//! sandbox's own (see [`crate::terminal`]); otherwise its standard streams are runner's,
//! passed through untouched. Runner's own termination signals go on to the program, and
//! runner ends with the program's status.
//!
//! With `--network allowlist` the allow-list's proxy needs the protocol, which under
//! landlock the server serves on two extra descriptors beside the program, and under docker
//! the container's main server serves as usual. The caller starts the proxy (it knows the
//! rules) from the client it is handed.
//!
//! Before the program runs, the wall checks itself as every start does
//! ([`crate::self_test`]). Under docker the container's main server answers the request.
//! Under landlock the server runs the probes itself on a socket of its own
//! (`--self-test-fd`), before the program, and starts it only when runner found every
//! check passed: the one round trip, and no protocol served beside the program for it.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::landlock::cgroup;
use crate::spec::{Network, SandboxSpec};
use crate::{BackendKind, SandboxClient, terminal};
use runner_sandbox_server::program;

/// Why the program could not be run: runner's failure, not the program's.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The docker sandbox, or the exec in it.
    #[error(transparent)]
    Docker(#[from] crate::docker::DockerError),
    /// The landlock sandbox could not be prepared or its server started.
    #[error("{0}")]
    Start(String),
    /// The allow-list's proxy could not be started beside the program.
    #[error("{0}")]
    Proxy(String),
    /// The wall failed its self-test at start, or could not be put to it: the program did
    /// not run.
    #[error(transparent)]
    Sandbox(Box<crate::SandboxError>),
}

impl From<crate::SandboxError> for ExecError {
    fn from(e: crate::SandboxError) -> Self {
        ExecError::Sandbox(Box::new(e))
    }
}

/// What is told of the wall's self-test once it passed (for the audit trail).
pub type OnCheck<'a> = &'a (dyn Fn(&crate::self_test::SelfTestReport) + Sync);

/// Runs `argv` (empty: the sandbox's interactive shell) in a new sandbox made from `spec`,
/// and returns its status (128 + N for a death by signal N, 127 when it does not exist).
/// `env` is set in the program's environment over the sandbox's own (the secrets'
/// placeholders).
/// `proxy` is called with the sandbox's client and worktree when the network is the
/// allow-list, before the program can use it; what it returns is kept until the program
/// ends, then handed back. `checked` gets the wall's self-test report before the program
/// starts; a failed check is [`ExecError::Sandbox`] and the program never runs.
pub async fn run<T, F, Fut>(
    spec: &SandboxSpec,
    argv: &[OsString],
    env: &[(String, String)],
    proxy: F,
    checked: OnCheck<'_>,
) -> Result<(u8, Option<T>), ExecError>
where
    F: FnOnce(SandboxClient, PathBuf) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let proxy = (spec.network == Network::Allowlist).then_some(proxy);
    match spec.backend {
        BackendKind::None | BackendKind::Landlock => on_host(spec, argv, env, proxy, checked).await,
        BackendKind::Docker => crate::docker::exec(spec, argv, env, proxy, checked).await,
    }
}

/// The server's flags that make it run `argv` (`--terminal` when standard input is the
/// sandbox's own terminal), last on its command line.
pub fn server_args(argv: &[OsString], terminal: bool) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--exec".into()];
    if terminal {
        args.push("--terminal".into());
    }
    args.push("--".into());
    args.extend(argv.iter().cloned());
    args
}

/// The termination signals runner passes on to the program rather than acting on.
pub const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Listens for [`FORWARDED`] signals from now on (so none of them ends runner), and hands
/// each one's number on.
pub fn forwarded_signals() -> std::io::Result<tokio::sync::mpsc::UnboundedReceiver<i32>> {
    use tokio::signal::unix::{SignalKind, signal};
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for sig in FORWARDED {
        let mut stream = signal(SignalKind::from_raw(sig))?;
        let tx = tx.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                if tx.send(sig).is_err() {
                    break;
                }
            }
        });
    }
    Ok(rx)
}

/// What a host sandbox's wall needs kept alive while the program runs: the private `/tmp`,
/// the cgroup, the sweep of the worktree's repositories.
type HostGuards = (
    Option<tempfile::TempDir>,
    Option<cgroup::SandboxCgroup>,
    Option<crate::worktree_guard::SweepOnClose>,
);

/// The server started in exec mode on the host (landlock, or no wall): on a pty of its
/// own, or on runner's standard streams.
async fn on_host<T, F, Fut>(
    spec: &SandboxSpec,
    argv: &[OsString],
    env: &[(String, String)],
    proxy: Option<F>,
    checked: OnCheck<'_>,
) -> Result<(u8, Option<T>), ExecError>
where
    F: FnOnce(SandboxClient, PathBuf) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let worktree = std::fs::canonicalize(&spec.worktree)
        .map_err(|e| ExecError::Start(format!("--root {}: {e}", spec.worktree.display())))?;
    let on_terminal = terminal::attached();
    let signals = forwarded_signals()
        .map_err(|e| ExecError::Start(format!("cannot listen for signals: {e}")))?;
    let (mut command, guards, check) =
        host_command(spec, &worktree, argv, on_terminal, proxy.is_some())?;
    command.envs(env.iter().map(|(k, v)| (k, v)));
    let mut started = start_on_host(command, guards, on_terminal, proxy.is_some())?;
    if let Some((socket, wall)) = check {
        let ours = socket.spawned();
        match crate::self_test::over_socket(ours, &worktree, wall, spec.network) {
            Ok(report) => checked(&report),
            Err(e) => {
                // The server ends on its own when the socket closes unanswered.
                let _ = started.child.wait();
                return Err(e.into());
            }
        }
    }
    let kept = match (started.channel, proxy) {
        (Some(mut channel), Some(proxy)) => {
            channel.spawned();
            start_proxy(channel, proxy, worktree).await
        }
        _ => None,
    };
    let code = wait_on_host(started.child, started.master, signals).await;
    drop(started.raw);
    drop(started.guards);
    Ok((code?, kept))
}

/// A host sandbox's server, running the program.
struct OnHost {
    child: std::process::Child,
    /// Runner's side of the program's terminal (with a terminal).
    master: Option<OwnedFd>,
    /// The protocol's pipes (with the allow-list).
    channel: Option<ProtocolChannel>,
    /// The person's terminal, raw until the program ends.
    raw: Option<terminal::RawMode>,
    guards: HostGuards,
}

/// Makes the program's terminal (or not) and the protocol's pipes (or not), and starts the
/// server.
fn start_on_host(
    mut command: std::process::Command,
    guards: HostGuards,
    on_terminal: bool,
    with_protocol: bool,
) -> Result<OnHost, ExecError> {
    let pty = match on_terminal {
        true => Some(terminal::Pty::open().map_err(|e| {
            ExecError::Start(format!("cannot make a terminal for the sandbox: {e}"))
        })?),
        false => None,
    };
    if let Some(pty) = &pty {
        give_terminal(&mut command, &pty.slave)?;
    }
    let channel = match with_protocol {
        true => Some(ProtocolChannel::attach(&mut command).map_err(|e| {
            ExecError::Start(format!("cannot make the sandbox's protocol pipes: {e}"))
        })?),
        false => None,
    };
    new_session(&mut command, on_terminal);
    let raw = on_terminal.then(terminal::RawMode::enter);
    let child = command
        .spawn()
        .map_err(|e| ExecError::Start(format!("cannot start the sandbox's server: {e}")))?;
    // Our copies of the pty's far side go (the command's and the pair's), so that reading
    // the terminal ends when the program lets go of it.
    drop(command);
    Ok(OnHost {
        child,
        master: pty.map(|pty| pty.master),
        channel,
        raw,
        guards,
    })
}

/// Passes the terminal, its resizes and runner's termination signals on until the server
/// (and so the program) ends; its status.
async fn wait_on_host(
    mut child: std::process::Child,
    master: Option<OwnedFd>,
    mut signals: tokio::sync::mpsc::UnboundedReceiver<i32>,
) -> Result<u8, ExecError> {
    let pumped = master.as_ref().map(pump_terminal).transpose()?;
    let pid = child.id() as libc::pid_t;
    let mut waited = tokio::task::spawn_blocking(move || child.wait());
    let mut winch =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
            .map_err(|e| ExecError::Start(format!("cannot listen for window resizes: {e}")))?;
    let status = loop {
        tokio::select! {
            status = &mut waited => break status,
            Some(sig) = signals.recv() => {
                // SAFETY: a signal to our own child (its supervisor passes it on).
                unsafe { libc::kill(pid, sig) };
            }
            Some(()) = winch.recv() => {
                if let Some(master) = &master {
                    terminal::resize_master(master.as_raw_fd());
                }
            }
        }
    };
    if let Some(output) = pumped {
        // What the program wrote last is on its way; a process it left holding the
        // terminal must not keep runner waiting.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), output).await;
    }
    match status {
        Ok(Ok(status)) => Ok(program::status_code(status)),
        Ok(Err(e)) => Err(ExecError::Start(format!(
            "cannot wait for the sandbox: {e}"
        ))),
        Err(e) => Err(ExecError::Start(format!(
            "cannot wait for the sandbox: {e}"
        ))),
    }
}

/// The proxy on the server's protocol pipes. The program already runs: if the proxy cannot
/// start, it goes on without a network (its namespace has none of its own), and runner says
/// so.
async fn start_proxy<T, F, Fut>(channel: ProtocolChannel, proxy: F, worktree: PathBuf) -> Option<T>
where
    F: FnOnce(SandboxClient, PathBuf) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let started = match channel.client() {
        Ok(client) => proxy(client, worktree).await,
        Err(e) => Err(e),
    };
    match started {
        Ok(kept) => Some(kept),
        Err(e) => {
            eprintln!("runner: {e}; the program has no network");
            None
        }
    }
}

/// The sandbox's terminal as the server's three standard streams.
fn give_terminal(command: &mut std::process::Command, slave: &OwnedFd) -> Result<(), ExecError> {
    let copy = || {
        slave
            .try_clone()
            .map_err(|e| ExecError::Start(format!("cannot hand over the sandbox's terminal: {e}")))
    };
    command.stdin(copy()?).stdout(copy()?).stderr(copy()?);
    Ok(())
}

/// The server starts a session of its own, away from the person's terminal: a program
/// there cannot open it through `/dev/tty` or type into it (TIOCSTI). With a pty, that pty
/// (its standard input by now) becomes the session's controlling terminal.
fn new_session(command: &mut std::process::Command, on_terminal: bool) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid and ioctl only, between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if on_terminal && libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Copies keys to the sandbox's terminal and its output to runner's standard output, each
/// on a thread of its own (blocking reads). Returns when the output has ended: the program
/// and everything it started have let go of the terminal.
fn pump_terminal(master: &OwnedFd) -> Result<tokio::sync::oneshot::Receiver<()>, ExecError> {
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    let fail = |e: std::io::Error| ExecError::Start(format!("cannot pass the terminal on: {e}"));
    let mut to_program = std::fs::File::from(master.try_clone().map_err(fail)?);
    let mut from_program = std::fs::File::from(master.try_clone().map_err(fail)?);
    // A descriptor of our own: std's stdout would buffer until a newline.
    let mut stdout = std::fs::File::from(
        std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map_err(fail)?,
    );
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdin.read(&mut buf) {
            if n == 0 || to_program.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let (done, ended) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        // EIO once no process holds the far side any more.
        while let Ok(n) = from_program.read(&mut buf) {
            if n == 0 || stdout.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = done.send(());
    });
    Ok(ended)
}

/// The server's command line for the program: confined by landlock as the backend prepares
/// it, or (no wall) just serving the worktree.
/// The server's command line; under landlock also the self-test's socket, and the wall
/// it is judged as.
type HostCommand = (
    std::process::Command,
    HostGuards,
    Option<(SelfTestSocket, crate::self_test::Wall)>,
);

fn host_command(
    spec: &SandboxSpec,
    worktree: &Path,
    argv: &[OsString],
    on_terminal: bool,
    with_protocol: bool,
) -> Result<HostCommand, ExecError> {
    let mut command = std::process::Command::new(&spec.server_exe);
    let mut check = None;
    let guards = if spec.backend == BackendKind::Landlock {
        let prepared = crate::landlock::prepare(spec, worktree)
            .map_err(|e| ExecError::Start(e.to_string()))?;
        if let Some(line) = &prepared.given_up {
            eprintln!("runner: {line}");
        }
        let namespaces = !prepared.args.iter().any(|a| a == "--no-namespaces");
        command.args(&prepared.args).env_clear().envs(prepared.env);
        let socket = SelfTestSocket::attach(&mut command).map_err(|e| {
            ExecError::Start(format!("cannot make the sandbox's self-test socket: {e}"))
        })?;
        check = Some((socket, crate::self_test::Wall::Landlock { namespaces }));
        (Some(prepared.tmp), prepared.cgroup, Some(prepared.sweep))
    } else {
        command
            .args(["sandbox-server", "--root"])
            .arg(worktree)
            .env_clear()
            .envs(crate::allowed_env());
        (None, None, None)
    };
    if with_protocol {
        command.args(["--protocol-fds", "3,4"]);
    }
    command.args(server_args(argv, on_terminal));
    Ok((command, guards, check))
}

/// The socket of an `--exec` server's self-test: the server's end is inherited at its own
/// number (moved to 10 or above first, clear of the 3 and 4 the protocol's pipes are put
/// at), and named by `--self-test-fd`.
struct SelfTestSocket {
    ours: std::os::unix::net::UnixStream,
    /// The server's end, open until it is spawned.
    theirs: OwnedFd,
}

impl SelfTestSocket {
    fn attach(command: &mut std::process::Command) -> std::io::Result<SelfTestSocket> {
        use std::os::unix::process::CommandExt;
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        use std::os::fd::FromRawFd;
        // SAFETY: fcntl on a descriptor we own; the copy is ours alone from here on.
        let fd = unsafe { libc::fcntl(theirs.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        drop(theirs);
        // SAFETY: the new descriptor just made, owned by nothing else.
        let theirs = unsafe { OwnedFd::from_raw_fd(fd) };
        command.arg("--self-test-fd").arg(fd.to_string());
        // SAFETY: fcntl only between fork and exec: the server keeps this one descriptor.
        unsafe {
            command.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(SelfTestSocket { ours, theirs })
    }

    /// The server has its copy: ours of its end closes, so its going away reads as the end.
    fn spawned(self) -> std::os::unix::net::UnixStream {
        drop(self.theirs);
        self.ours
    }
}

/// The pipes of a host sandbox's protocol beside its program: the server reads requests
/// on its descriptor 3 and answers on 4 (`--protocol-fds 3,4`), while the program has the
/// standard streams.
struct ProtocolChannel {
    requests: std::io::PipeWriter,
    responses: std::io::PipeReader,
    /// The server's ends, open until it is spawned (the command's `pre_exec` names them).
    child_ends: Option<(OwnedFd, OwnedFd)>,
}

impl ProtocolChannel {
    fn attach(command: &mut std::process::Command) -> std::io::Result<ProtocolChannel> {
        use std::os::unix::process::CommandExt;
        let (their_in, requests) = std::io::pipe()?;
        let (responses, their_out) = std::io::pipe()?;
        let (their_in, their_out) = (OwnedFd::from(their_in), OwnedFd::from(their_out));
        let (a, b) = (their_in.as_raw_fd(), their_out.as_raw_fd());
        // SAFETY: only dup, dup2 and close between fork and exec. Both are first moved above
        // 4, so neither overwrites the other on its way to 3 and 4.
        unsafe {
            command.pre_exec(move || {
                let high_a = libc::fcntl(a, libc::F_DUPFD, 10);
                let high_b = libc::fcntl(b, libc::F_DUPFD, 10);
                if high_a < 0
                    || high_b < 0
                    || libc::dup2(high_a, 3) < 0
                    || libc::dup2(high_b, 4) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(high_a);
                libc::close(high_b);
                Ok(())
            });
        }
        Ok(ProtocolChannel {
            requests,
            responses,
            child_ends: Some((their_in, their_out)),
        })
    }

    /// The child has its copies: ours must close, or the server's end of the responses
    /// would never read as closed here.
    fn spawned(&mut self) {
        self.child_ends = None;
    }

    fn client(self) -> Result<SandboxClient, String> {
        let fail = |e: std::io::Error| format!("cannot use the sandbox's protocol pipes: {e}");
        let writer = tokio::net::unix::pipe::Sender::from_owned_fd(OwnedFd::from(self.requests))
            .map_err(fail)?;
        let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(self.responses))
            .map_err(fail)?;
        Ok(SandboxClient::new(reader, writer, Arc::new(String::new)))
    }
}
