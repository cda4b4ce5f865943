//! The one program a server started with `--exec` runs instead of serving requests: what
//! `runner exec -- PROGRAM ARGS…` asked for, or (no argv) the sandbox's interactive shell,
//! which is all `runner sandbox shell` is.
//!
//! The argv arrives as the server's own trailing arguments and is handed to `execve` as
//! it is: no shell reads it, so spaces, quotes, `$`, newlines and bytes that are not UTF-8
//! reach the program exactly. The program is looked up on the sandbox's `PATH` (the
//! server's environment is the sandbox's), never the host's.
//!
//! With a terminal (a pseudo-terminal runner made for this sandbox, or the container's own
//! under docker) the program becomes the terminal's foreground process group, so Ctrl-C
//! and a window resize reach it and not the supervisors around it. Without one it has no
//! controlling terminal at all: runner started the server in a session of its own.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus};

/// The status of a program that could not be found, as shells give it.
pub const NOT_FOUND: u8 = 127;
/// The status of a program that was found and could not be started (not executable, a
/// directory, a bad interpreter line), as shells give it.
pub const NOT_EXECUTABLE: u8 = 126;

/// The command for `argv` in `worktree`, or the sandbox's interactive shell when `argv` is
/// empty. Between fork and exec it takes the terminal's foreground (with `terminal`), puts
/// back the default handling of the signals a supervisor ignores, and becomes the command
/// user where the server split its identity.
pub fn command(argv: &[OsString], worktree: &Path, terminal: bool) -> Command {
    let mut cmd = match argv.split_first() {
        Some((program, args)) => {
            let mut cmd = Command::new(program);
            cmd.args(args);
            cmd
        }
        None => {
            let mut cmd = Command::new(shell());
            cmd.arg("-i");
            cmd
        }
    };
    cmd.current_dir(worktree);
    // SAFETY: only async-signal-safe calls (setpgid, sigprocmask, tcsetpgrp, signal,
    // setres[ug]id, setrlimit) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if terminal {
                take_foreground()?;
            }
            for sig in [
                libc::SIGINT,
                libc::SIGQUIT,
                libc::SIGTSTP,
                libc::SIGTTIN,
                libc::SIGTTOU,
                libc::SIGHUP,
            ] {
                libc::signal(sig, libc::SIG_DFL);
            }
            crate::confine::become_command_user()
        });
    }
    cmd
}

/// The sandbox's shell: bash where the image or host has it, else sh.
fn shell() -> &'static str {
    if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

/// The program's name for messages: the argv's first word, or the shell.
pub fn name(argv: &[OsString]) -> &OsStr {
    argv.first()
        .map_or(OsStr::new(shell()), OsString::as_os_str)
}

/// Makes the calling process (between fork and exec) a process group of its own and the
/// foreground group of its controlling terminal (standard input). SIGTTOU is blocked
/// around `tcsetpgrp`, which a background group would otherwise be stopped by.
fn take_foreground() -> std::io::Result<()> {
    // SAFETY: plain syscalls on this process and local signal sets.
    unsafe {
        let me = libc::getpid();
        // A session leader already leads its own group (and may not leave it).
        if libc::getpgrp() != me && libc::setpgid(0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::sigprocmask(libc::SIG_BLOCK, &block, &mut old);
        let rc = libc::tcsetpgrp(0, me);
        let e = std::io::Error::last_os_error();
        libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if rc != 0 {
            return Err(e);
        }
    }
    Ok(())
}

/// Says on standard error why the program did not start, and returns the status a shell
/// would: 127 when there is no such program on the sandbox's `PATH`, 126 otherwise.
pub fn not_started(argv: &[OsString], e: &std::io::Error) -> u8 {
    let program = name(argv);
    if e.kind() == std::io::ErrorKind::NotFound {
        let path = std::env::var("PATH").unwrap_or_default();
        let where_ = if program.as_encoded_bytes().contains(&b'/') {
            "there is no such file inside the sandbox".to_string()
        } else {
            format!("it is not on the sandbox's PATH ({path})")
        };
        eprintln!(
            "runner: cannot run {program:?}: {where_}. The sandbox sees its own files (the \
             host's system directories under landlock, the image under docker), not the \
             host's home; name a program it has, or its path"
        );
        NOT_FOUND
    } else {
        eprintln!("runner: cannot run {program:?} in the sandbox: {e}");
        NOT_EXECUTABLE
    }
}

/// A program's exit status as one byte, the way shells report it: its exit code, or 128
/// plus the signal that ended it.
pub fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code.clamp(0, 255) as u8,
        (None, Some(sig)) => (128 + sig).clamp(0, 255) as u8,
        (None, None) => 1,
    }
}
