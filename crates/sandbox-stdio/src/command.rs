//! The sandbox commands behind each request: a program from its argv, a file read, a file
//! written.
//!
//! The sandbox's server runs shell source (`bash -c`), and a harness hands over an argv.
//! Quoting the argv into the source would put every argument through one command-line
//! argument of the shell, which the kernel caps at 128 KiB, and through a quoting
//! function that must never be wrong. Instead each argument travels in an environment
//! variable of its own, and a fixed script gathers them with `set --`, unsets them and
//! `exec`s the program: the shell never parses a byte the caller sent. The same goes for
//! the working directory, the user and the paths of file operations.
//!
//! Files are read and written by commands too (`cat`, behind checks that give each
//! failure its kind), so they see exactly what the programs see: the same wall, the same
//! user, the same private temporary directory, on every backend. One check goes further
//! than the kernel's: a file whose owner may not read it (or write it) is refused even to
//! root, as inspect_ai's own docker sandbox refuses it, so a harness gets the same answer
//! from a task image running as root as from a wall running as a plain user.

use std::path::Path;

use runner_protocol::ExecRequest;

use crate::wire::{ErrorKind, Exec, Failure};

/// The prefix of the variables that carry a request's values to its script.
const VAR: &str = "__RUNNER_STDIO_";

/// A timeout long enough to mean none (a week).
const NO_TIMEOUT_MS: u64 = 7 * 24 * 3600 * 1000;

/// What a command keeps of its output when the request names no limit.
pub const DEFAULT_OUTPUT_LIMIT: u64 = 64 << 20;

/// Exit statuses of the file scripts, each a failure of its own kind.
const NOT_FOUND: i32 = 200;
const IS_DIR: i32 = 201;
const DENIED: i32 = 202;
const NOT_DIR: i32 = 203;
const TOO_LARGE: i32 = 204;

/// How a wall runs commands as a user a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Users {
    /// One user only (landlock, the sandbox image): a request naming a user is refused.
    One,
    /// A task image's container, whose root keeps SETUID and SETGID: `runuser` switches.
    Switch,
}

/// The shell-free start of a program: `cd`, then the arguments gathered and the
/// variables that carried them gone before `exec`.
pub fn exec(
    req: &Exec,
    workdir: &Path,
    base_env: &[(String, String)],
    users: Users,
) -> Result<ExecRequest, Failure> {
    if req.argv.is_empty() {
        return Err(Failure::new(
            ErrorKind::InvalidRequest,
            "exec needs a program: argv is empty",
        ));
    }
    let mut env: Vec<(String, String)> = base_env.to_vec();
    for (k, v) in &req.env {
        env.retain(|(have, _)| have != k);
        env.push((k.clone(), v.clone()));
    }
    let mut names = Vec::with_capacity(req.argv.len());
    for (i, arg) in req.argv.iter().enumerate() {
        let name = format!("{VAR}A{i}");
        env.push((name.clone(), arg.clone()));
        names.push(name);
    }
    let cwd = req.cwd.as_deref().unwrap_or(".");
    env.push((format!("{VAR}CWD"), cwd.to_string()));
    let gather: Vec<String> = names.iter().map(|n| format!("\"${n}\"")).collect();
    let run = match (&req.user, users) {
        (None, _) => "exec \"$@\"".to_string(),
        (Some(user), Users::Switch) => {
            env.push((format!("{VAR}USER"), user.clone()));
            // Root switching to root is a plain exec; another user goes through runuser
            // (util-linux), or su where the image has no runuser (busybox).
            format!(
                "u=\"${VAR}USER\"; unset {VAR}USER; \
                 if [ \"$u\" = \"$(id -un)\" ]; then exec \"$@\"; fi; \
                 if command -v runuser >/dev/null 2>&1; then exec runuser -u \"$u\" -- \"$@\"; fi; \
                 exec su -s /bin/sh \"$u\" -c 'exec \"$0\" \"$@\"' \"$@\""
            )
        }
        (Some(user), Users::One) => {
            return Err(Failure::new(
                ErrorKind::UserUnsupported,
                format!(
                    "this wall runs every command as one user, so it cannot run as {user:?}: \
                     landlock confines the caller's own processes, and the sandbox image's \
                     commands have no capabilities to switch with. A task image \
                     (--task-image) lets its root switch users"
                ),
            ));
        }
    };
    let command = format!(
        "cd -- \"${VAR}CWD\" || exit 1; set -- {}; unset {} {VAR}CWD; {run}",
        gather.join(" "),
        names.join(" ")
    );
    Ok(ExecRequest {
        command,
        cwd: workdir.to_path_buf(),
        env,
        timeout_ms: timeout_ms(req.timeout),
        stdin: req.input.clone(),
        output_limit: req.output_limit.unwrap_or(DEFAULT_OUTPUT_LIMIT),
        interactive: false,
    })
}

fn timeout_ms(seconds: Option<f64>) -> u64 {
    match seconds {
        Some(s) if s.is_finite() && s > 0.0 => ((s * 1000.0).ceil() as u64).max(1),
        _ => NO_TIMEOUT_MS,
    }
}

/// A file's bytes on standard output, after checks that give each failure its kind (by
/// exit status; see [`file_failure`]).
pub fn read(
    path: &str,
    max_bytes: u64,
    workdir: &Path,
    base_env: &[(String, String)],
) -> ExecRequest {
    let script = format!(
        "f=\"${VAR}PATH\"; m=\"${VAR}MAX\"; unset {VAR}PATH {VAR}MAX; \
         if [ -d \"$f\" ]; then exit {IS_DIR}; fi; \
         if [ ! -e \"$f\" ]; then exit {NOT_FOUND}; fi; \
         if [ ! -r \"$f\" ]; then exit {DENIED}; fi; \
         case $(stat -c %A -- \"$f\") in ?r*) ;; *) exit {DENIED};; esac; \
         s=$(wc -c < \"$f\") || exit {DENIED}; \
         if [ \"$s\" -gt \"$m\" ]; then echo \"$s\" >&2; exit {TOO_LARGE}; fi; \
         exec cat -- \"$f\""
    );
    let mut env = base_env.to_vec();
    env.push((format!("{VAR}PATH"), path.to_string()));
    env.push((format!("{VAR}MAX"), max_bytes.to_string()));
    ExecRequest {
        command: script,
        cwd: workdir.to_path_buf(),
        env,
        timeout_ms: NO_TIMEOUT_MS,
        stdin: None,
        // The server streams the first half of its limit as it comes and keeps the rest
        // as a tail window: twice the largest file, so all of it streams.
        output_limit: max_bytes.saturating_mul(2).saturating_add(64 << 10),
        interactive: false,
    }
}

/// Writes standard input to a temporary file beside `path` (its folders made first) and
/// renames it over `path` once all of it is there: a write cut short leaves the old file.
pub fn write(path: &str, workdir: &Path, base_env: &[(String, String)]) -> ExecRequest {
    let script = format!(
        "f=\"${VAR}PATH\"; unset {VAR}PATH; \
         if [ -d \"$f\" ]; then exit {IS_DIR}; fi; \
         d=$(dirname -- \"$f\"); \
         if [ -e \"$d\" ] && [ ! -d \"$d\" ]; then exit {NOT_DIR}; fi; \
         mkdir -p -- \"$d\" 2>/dev/null || exit {DENIED}; \
         if [ -e \"$f\" ] && [ ! -w \"$f\" ]; then exit {DENIED}; fi; \
         if [ -e \"$f\" ]; then case $(stat -c %A -- \"$f\") in ??w*) ;; *) exit {DENIED};; esac; fi; \
         if [ ! -w \"$d\" ]; then exit {DENIED}; fi; \
         t=\"$d/.$(basename -- \"$f\").runner-$$\"; \
         if ! cat > \"$t\"; then rm -f -- \"$t\"; exit 1; fi; \
         if ! mv -f -- \"$t\" \"$f\"; then rm -f -- \"$t\"; exit 1; fi"
    );
    let mut env = base_env.to_vec();
    env.push((format!("{VAR}PATH"), path.to_string()));
    ExecRequest {
        command: script,
        cwd: workdir.to_path_buf(),
        env,
        timeout_ms: NO_TIMEOUT_MS,
        stdin: None,
        output_limit: 64 << 10,
        interactive: true,
    }
}

/// The failure a file script's exit status stands for (`None`: it succeeded), with what
/// it wrote on standard error for the ones without a kind of their own.
pub fn file_failure(path: &str, code: Option<i32>, stderr: &[u8]) -> Option<Failure> {
    let said = String::from_utf8_lossy(stderr).trim().to_string();
    let (kind, message) = match code {
        Some(0) => return None,
        Some(NOT_FOUND) => (ErrorKind::NotFound, format!("no such file: {path}")),
        Some(IS_DIR) => (ErrorKind::IsADirectory, format!("{path} is a directory")),
        Some(DENIED) => (
            ErrorKind::PermissionDenied,
            format!("permission denied: {path}"),
        ),
        Some(NOT_DIR) => (
            ErrorKind::NotADirectory,
            format!("a parent of {path} is not a directory"),
        ),
        Some(TOO_LARGE) => (
            ErrorKind::TooLarge,
            format!("{path} holds {said} bytes, more than the read allows"),
        ),
        Some(other) => (
            ErrorKind::Io,
            format!("cannot use {path} (status {other}): {said}"),
        ),
        None => (
            ErrorKind::Io,
            format!("the command using {path} was killed by a signal"),
        ),
    };
    Some(Failure::at(kind, path, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec_of(argv: &[&str], user: Option<&str>) -> Exec {
        Exec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            input: None,
            env: Default::default(),
            cwd: None,
            user: user.map(str::to_string),
            timeout: None,
            output_limit: None,
        }
    }

    #[test]
    fn no_argument_reaches_the_shell_source() {
        let nasty = "$(touch /tmp/pwned) `id` ' \" ; rm -rf /";
        let req = exec(
            &exec_of(&["printf", nasty], None),
            Path::new("/w"),
            &[],
            Users::One,
        )
        .unwrap();
        assert!(!req.command.contains("pwned"), "{}", req.command);
        assert!(
            req.env
                .iter()
                .any(|(k, v)| k == "__RUNNER_STDIO_A1" && v == nasty)
        );
        // The real shell runs it and prints the argument as it was.
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&req.command)
            .env_clear()
            .envs(req.env.iter().map(|(k, v)| (k, v)))
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), nasty);
        let env = std::process::Command::new("bash")
            .arg("-c")
            .arg(
                &exec(&exec_of(&["env"], None), Path::new("/"), &[], Users::One)
                    .unwrap()
                    .command,
            )
            .env_clear()
            .env("__RUNNER_STDIO_A0", "env")
            .env("__RUNNER_STDIO_CWD", ".")
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&env.stdout).contains("__RUNNER_STDIO_"),
            "the carrying variables are gone before the program starts"
        );
    }

    #[test]
    fn a_user_is_refused_where_the_wall_has_one() {
        let err = exec(
            &exec_of(&["id"], Some("nobody")),
            Path::new("/w"),
            &[],
            Users::One,
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::UserUnsupported);
        assert!(err.message.contains("nobody"));
        assert!(exec(&exec_of(&[], None), Path::new("/w"), &[], Users::One).is_err());
    }

    #[test]
    fn file_statuses_map_to_kinds_naming_the_path() {
        let f = file_failure("a b", Some(NOT_FOUND), b"").unwrap();
        assert_eq!(
            (f.kind, f.path.as_deref()),
            (ErrorKind::NotFound, Some("a b"))
        );
        assert_eq!(
            file_failure("x", Some(IS_DIR), b"").unwrap().kind,
            ErrorKind::IsADirectory
        );
        assert_eq!(
            file_failure("x", Some(DENIED), b"").unwrap().kind,
            ErrorKind::PermissionDenied
        );
        assert!(file_failure("x", Some(0), b"").is_none());
        assert!(
            file_failure("x", Some(1), b"disk full")
                .unwrap()
                .message
                .contains("disk full")
        );
    }
}
