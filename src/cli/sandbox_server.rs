//! `runner sandbox-server`: the in-sandbox end of the sandbox protocol. With `--confine
//! landlock` it first walls itself in (see `sandbox::confine`); with `--exec` it then runs
//! one program (the argv after `--`, or the sandbox's shell) instead of serving, for
//! `runner exec` and `runner sandbox shell`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use runner_sandbox::confine::{self, Confinement};
use runner_sandbox::spec::{Limits, Network};
use runner_sandbox_server::RootSpec;
use runner_sandbox_server::program;
use runner_sandbox_server::restore::ProtectedCopy;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ConfineKind {
    Landlock,
}

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// A directory the server may reach: `PATH` (read-write) or `PATH:ro`. The first is the worktree.
    #[arg(long = "root", required = true)]
    roots: Vec<RootSpec>,
    /// Confine this process (and so every command) before serving.
    #[arg(long, value_enum)]
    confine: Option<ConfineKind>,
    /// The private temp directory (read-write inside the confinement).
    #[arg(long, requires = "confine")]
    tmp: Option<PathBuf>,
    #[arg(long, value_parser = super::network_arg(), default_value = "none")]
    network: Network,
    #[arg(long)]
    memory: Option<u64>,
    #[arg(long)]
    pids: Option<u64>,
    #[arg(long = "tmp-size")]
    tmp_size: Option<u64>,
    /// A path beneath a root that stays read-only.
    #[arg(long = "protect")]
    protect: Vec<PathBuf>,
    /// A directory to pin as a mount point of its own (the worktree's `.git`), so that it
    /// cannot be renamed away.
    #[arg(long = "pin")]
    pin: Vec<PathBuf>,
    /// A path that must not exist after a command; removed if a command creates it.
    #[arg(long = "forbid")]
    forbid: Vec<PathBuf>,
    /// Disarm every repository a command makes in the worktree (the repositories there when
    /// the server starts are left alone): host git would run their config and hooks.
    #[arg(long = "sweep-repositories")]
    sweep_repositories: bool,
    /// A repository (directory or `.git` file) that was in the worktree before the server
    /// started: the sweep leaves it alone (mounts keep its config and hooks read-only).
    #[arg(long = "known-repository")]
    known_repositories: Vec<PathBuf>,
    /// Make no mount or PID namespace (the host found that this machine refuses them): the
    /// `--protect`ed paths are then copied now and put back after every command.
    #[arg(long = "no-namespaces", requires = "confine")]
    no_namespaces: bool,
    /// Without `--confine`: only install the seccomp filter (inside a container, on top of
    /// the engine's own profile).
    #[arg(long)]
    seccomp: bool,
    /// In a container started as root: run commands as `UID:GID`, and keep the server (and
    /// the container's init) under an id no command has (see `confine::identity`).
    #[arg(long = "command-user")]
    command_user: Option<confine::CommandUser>,
    /// With `--command-user`: the most processes the command user may have (RLIMIT_NPROC),
    /// for runtimes whose kernel counts them itself (gVisor).
    #[arg(long, requires = "command_user")]
    nproc: Option<u64>,
    /// With `--command-user`: the most address space one command may map, in bytes
    /// (RLIMIT_AS), for runtimes whose kernel would otherwise let one command's allocation
    /// end the whole sandbox (gVisor).
    #[arg(long = "address-space", requires = "command_user")]
    address_space: Option<u64>,
    /// A cgroup directory to join before confining.
    #[arg(long = "cgroup")]
    cgroups: Vec<PathBuf>,
    /// After confining, run one program in the worktree instead of serving: the argv after
    /// `--`, or without one the sandbox's interactive shell.
    #[arg(long)]
    exec: bool,
    /// With `--exec`: standard input is a terminal made for this sandbox (runner's
    /// pseudo-terminal, or the container's), which the program takes as its foreground.
    #[arg(long, requires = "exec")]
    terminal: bool,
    /// With `--exec`: also serve the protocol on these two inherited descriptors (input,
    /// output) while the program runs, for the network proxy (`--network allowlist`).
    #[arg(long = "protocol-fds", value_delimiter = ',', requires = "exec")]
    protocol_fds: Vec<i32>,
    /// With `--exec`: before the program starts, answer runner's self-test of the wall on
    /// this inherited socket, and run the program only when runner says every check passed.
    #[arg(long = "self-test-fd", requires = "exec")]
    self_test_fd: Option<i32>,
    /// With `--exec`: the program and its arguments, exactly as they reach `execve`.
    #[arg(last = true, requires = "exec", value_parser = clap::value_parser!(OsString))]
    argv: Vec<OsString>,
    /// How paths are resolved beneath the roots: `openat2` (the kernel's RESOLVE_BENEATH)
    /// or `walk` (a component at a time, for kernels and runtimes without openat2). Default:
    /// openat2 where the kernel has it. A switch for tests and diagnosis; the controller
    /// passes it on from its RUNNER_RESOLVE.
    #[arg(long, value_parser = ["openat2", "walk"])]
    resolve: Option<String>,
    /// Debug builds only: leave one layer of the wall out (`seccomp`, `landlock`), so the
    /// tests can see the start's self-test stop the session. A release build has no such
    /// flag.
    #[cfg(debug_assertions)]
    #[arg(long = "test-gap", hide = true)]
    test_gap: Option<confine::TestGap>,
}

impl ServerArgs {
    /// The layer to leave out: only a debug build has the flag.
    fn test_gap(&self) -> Option<confine::TestGap> {
        #[cfg(debug_assertions)]
        return self.test_gap;
        #[cfg(not(debug_assertions))]
        None
    }

    fn git_guard(&self, kept: Option<ProtectedCopy>) -> runner_sandbox_server::GitGuard {
        runner_sandbox_server::GitGuard {
            forbidden: self.forbid.clone(),
            sweep_repositories: self.sweep_repositories,
            known: self.known_repositories.clone(),
            kept,
        }
    }
}

/// Moves this (still single-threaded: it runs before any runtime or thread is started, and
/// must stay that way) process into a cgroup before it forks anything.
///
/// On a cgroup v1 hierarchy the calling thread moves itself by writing `0` to `tasks`: the
/// kernel then skips the global lock that a write to `cgroup.procs` takes, whose first use
/// waits for an RCU grace period (10 to 20 ms, the larger part of a landlock start). With
/// one thread, moving the thread is moving the process, and everything it forks follows.
/// A v2 directory has no `tasks` file and takes the pid in `cgroup.procs`.
fn join_cgroup(dir: &std::path::Path) -> std::io::Result<()> {
    let tasks = dir.join("tasks");
    if tasks.exists() {
        std::fs::write(tasks, "0")
    } else {
        std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string())
    }
}

/// The program as a child, and the server on the protocol descriptors beside it; this
/// process ends with the program's status. The server ignores the terminal's signals, which
/// are the program's (with a terminal the program is the foreground group anyway).
fn program_beside_server(
    args: &ServerArgs,
    kept: Option<ProtectedCopy>,
    input: i32,
    output: i32,
) -> u8 {
    use std::os::fd::FromRawFd;
    for fd in [input, output] {
        // SAFETY: fcntl on descriptors the caller handed us; the program must not inherit them.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGTSTP] {
        // SAFETY: plain syscall; the program's `pre_exec` puts the default back.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    let mut child = match program::command(&args.argv, &args.roots[0].path, args.terminal).spawn() {
        Ok(c) => c,
        Err(e) => return program::not_started(&args.argv, &e),
    };
    std::thread::spawn(move || {
        let code = child
            .wait()
            .map_or(super::exit::FAILED, program::status_code);
        std::process::exit(code.into());
    });
    // SAFETY: the two descriptors are ours alone from here on.
    let (input, output) = unsafe {
        (
            std::fs::File::from_raw_fd(input),
            std::fs::File::from_raw_fd(output),
        )
    };
    let _ =
        runner_sandbox_server::serve_beside_shell(&args.roots, args.git_guard(kept), input, output);
    // The controller went away before the program ended: it goes on without a network.
    std::thread::park();
    super::exit::OK
}

/// `--self-test-fd`: the wall tried from inside before the program runs; whether runner
/// found every check passed (it says why not itself).
fn self_test_passed(fd: i32) -> bool {
    use std::os::fd::FromRawFd;
    // SAFETY: the descriptor runner handed us, ours alone; it closes here, so the program
    // never inherits it.
    let socket = unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) };
    matches!(
        runner_sandbox_server::self_test::over_socket(socket),
        Ok(true)
    )
}

/// `--exec`: the program in place of this process, or beside the server when the proxy
/// needs one.
fn run_program(args: &ServerArgs, kept: Option<ProtectedCopy>) -> u8 {
    if let [input, output] = args.protocol_fds[..] {
        return program_beside_server(args, kept, input, output);
    }
    // The caller passes the sandbox's environment to this process for the program.
    let e = program::command(&args.argv, &args.roots[0].path, args.terminal).exec();
    program::not_started(&args.argv, &e)
}

/// Joins the cgroups and confines this process. Without namespaces, the protected paths
/// are copied first (nothing has run yet), to be put back after every command.
fn confine_landlock(args: &ServerArgs) -> Result<Option<ProtectedCopy>, u8> {
    let Some(tmp) = args.tmp.clone() else {
        eprintln!("runner sandbox-server: --confine landlock needs --tmp");
        return Err(super::exit::USAGE);
    };
    for dir in &args.cgroups {
        if let Err(e) = join_cgroup(dir) {
            eprintln!(
                "runner sandbox-server: cannot join cgroup {}: {e}",
                dir.display()
            );
            return Err(super::exit::FAILED);
        }
    }
    let kept = if args.no_namespaces {
        let copy = ProtectedCopy::take(&args.roots[0].path, &args.protect).map_err(|e| {
            eprintln!("runner sandbox-server: {e}");
            super::exit::FAILED
        })?;
        Some(copy).filter(|c| !c.is_empty())
    } else {
        None
    };
    let defaults = Limits::default();
    let confinement = Confinement {
        writable: args
            .roots
            .iter()
            .filter(|r| r.writable)
            .map(|r| r.path.clone())
            .chain([tmp.clone()])
            .collect(),
        readable: args
            .roots
            .iter()
            .filter(|r| !r.writable)
            .map(|r| r.path.clone())
            .collect(),
        tmp,
        protected: args.protect.clone(),
        pinned: args.pin.clone(),
        namespaces: !args.no_namespaces,
        network: args.network,
        memory_bytes: args.memory.unwrap_or(defaults.memory_bytes),
        pids: args.pids.unwrap_or(defaults.pids),
        tmp_bytes: args.tmp_size.unwrap_or(defaults.tmp_bytes),
        test_gap: args.test_gap(),
    };
    // Runner starts an `--exec` server in a session of its own (its pseudo-terminal as the
    // controlling terminal, or none), which must stay as it is.
    if let Err(e) = confine::apply(&confinement, args.exec) {
        eprintln!("runner sandbox-server: {e}");
        return Err(super::exit::FAILED);
    }
    Ok(kept)
}

pub fn run(args: ServerArgs) -> u8 {
    // Chosen once, at the start, before any wall goes up.
    runner_sandbox_server::roots::Resolver::choose(args.resolve.as_deref());
    let mut kept = None;
    if let Some(ConfineKind::Landlock) = args.confine {
        match confine_landlock(&args) {
            Ok(k) => kept = k,
            Err(code) => return code,
        }
    }
    // In a container (seccomp without landlock) the image may lack a shell; say so now
    // rather than fail every command later.
    if args.seccomp
        && args.confine.is_none()
        && !["/bin/bash", "/bin/sh"]
            .iter()
            .any(|p| std::path::Path::new(p).exists())
    {
        eprintln!("{}", runner_sandbox::start_error::NO_SHELL_MARK);
        return super::exit::FAILED;
    }
    if let Some(user) = args.command_user
        && let Err(e) = confine::split_identity(
            user,
            confine::CommandLimits {
                processes: args.nproc,
                address_space: args.address_space,
            },
        )
    {
        eprintln!("runner sandbox-server: {e}");
        return super::exit::FAILED;
    }
    if args.seccomp
        && args.confine.is_none()
        && let Err(e) = confine::seccomp_only(args.network, args.test_gap())
    {
        eprintln!("runner sandbox-server: {e}");
        return super::exit::FAILED;
    }
    if args.exec {
        if let Some(fd) = args.self_test_fd
            && !self_test_passed(fd)
        {
            return super::exit::SANDBOX;
        }
        return run_program(&args, kept);
    }
    match runner_sandbox_server::serve_stdio(&args.roots, args.git_guard(kept)) {
        Ok(()) => super::exit::OK,
        Err(e) => {
            eprintln!("runner sandbox-server: {e}");
            super::exit::FAILED
        }
    }
}
