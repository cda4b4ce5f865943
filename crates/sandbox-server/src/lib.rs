//! The in-sandbox server: `runner` itself, serving the sandbox API over a pair of byte
//! streams (its stdin/stdout when started as a child).
//!
//! It runs inside the isolation boundary, so it is deliberately small and imports nothing of
//! the agent, the LLM code or the tools: only the API types (`runner-protocol`). Being a
//! crate of its own makes that a build fact: this crate cannot name the Docker client, the
//! HTTP client, the MCP SDK or tree-sitter, because it does not depend on them.
//! [`confine`] is the other half of the wall's inside: what the server does to its own
//! process (landlock, seccomp, namespaces) before it serves. Plain threads, no async runtime:
//! each request gets a thread, which is what lets a long `exec` run beside quick reads.

pub mod confine;
mod exec;
mod files;
pub mod git_sweep;
pub mod holders;
pub mod net;
pub mod program;
pub mod restore;
pub mod roots;
pub mod search;
pub mod self_test;
pub mod special_files;
mod workers;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use rustix::fs::OFlags;

pub use roots::RootSpec;
use roots::Roots;
use runner_protocol::{
    ApiError, ErrorKind, MessageHead, Request, RequestFrame, Response, ResponseFrame, parse_frame,
    read_message_head, write_data_frame, write_frame,
};

/// Serves requests until the input ends, then kills whatever is still running: if the
/// controller is gone, nobody is left to see those commands' results.
pub fn serve(
    roots: &[RootSpec],
    input: impl Read,
    output: impl Write + Send + 'static,
) -> std::io::Result<()> {
    let input = std::io::BufReader::with_capacity(FRAME_BUFFER, input);
    serve_with(
        roots,
        input,
        None,
        output,
        Arc::new(exec::Running::default()),
    )
}

/// What the server keeps host git safe from (see [`git_sweep`]): paths that must not exist
/// after a command, and whether to disarm repositories commands make in the worktree (the
/// first root). The repositories there when the server starts are the known ones.
#[derive(Debug, Clone, Default)]
pub struct GitGuard {
    pub forbidden: Vec<std::path::PathBuf>,
    pub sweep_repositories: bool,
    /// The repositories (directories and `.git` pointers) the host found before the
    /// sandbox started; the sweep leaves them to the mounts.
    pub known: Vec<std::path::PathBuf>,
    /// Where no mount namespace keeps the protected paths read-only: their contents at the
    /// start, put back after every command and write.
    pub kept: Option<restore::ProtectedCopy>,
}

impl GitGuard {
    fn running(self, roots: &[RootSpec]) -> exec::Running {
        let repositories = roots
            .first()
            .filter(|_| self.sweep_repositories)
            .map(|worktree| git_sweep::RepositorySweep::new(&worktree.path, self.known));
        // The same checkout the user runs git in is the one whose files they run: special
        // bits and device nodes the sandbox makes there go too (see [`special_files`]).
        let special = repositories
            .as_ref()
            .map(|r| special_files::SpecialFiles::scan(&r.worktree));
        exec::Running::guarded(self.forbidden, repositories, self.kept, special)
    }
}

/// The server on two descriptors of its own, beside a shell that holds the terminal.
pub fn serve_beside_shell(
    roots: &[RootSpec],
    guard: GitGuard,
    input: std::fs::File,
    output: std::fs::File,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let running = Arc::new(guard.running(roots));
    let raw = input.as_raw_fd();
    let input = std::io::BufReader::with_capacity(FRAME_BUFFER, input);
    serve_with(roots, input, Some(raw), output, running)
}

/// The server as a process of its own (`runner sandbox-server`): stdin/stdout, and the
/// termination signals handled.
pub fn serve_stdio(roots: &[RootSpec], guard: GitGuard) -> std::io::Result<()> {
    use std::os::fd::AsFd;
    let running = Arc::new(guard.running(roots));
    exit_on_signal(running.clone());
    // Plain descriptors rather than std's stdio: stdout is line-buffered, which would split
    // every binary frame at its newlines, and stdin's buffer is small for proxied bulk data.
    use std::os::fd::AsRawFd;
    let input = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let output = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    let raw = input.as_raw_fd();
    serve_with(
        roots,
        std::io::BufReader::with_capacity(FRAME_BUFFER, input),
        Some(raw),
        output,
        running,
    )
}

/// The server's input buffer: small frames are read in batches, and a proxied chunk,
/// being larger, is read straight into its own buffer.
const FRAME_BUFFER: usize = 64 * 1024;

/// `raw_input` is the descriptor under `input`, when the server may splice proxied bytes
/// from it straight into a socket (it must then be a pipe; anything else falls back).
fn serve_with<R: Read>(
    roots: &[RootSpec],
    mut input: std::io::BufReader<R>,
    raw_input: Option<std::os::fd::RawFd>,
    output: impl Write + Send + 'static,
    running: Arc<exec::Running>,
) -> std::io::Result<()> {
    let writable: Vec<_> = roots
        .iter()
        .filter(|r| r.writable)
        .map(|r| r.path.clone())
        .collect();
    let roots = Arc::new(Roots::new(roots)?);
    keep_large_buffers();
    let output: Arc<Output> = Arc::new(Output(Mutex::new(Box::new(output))));
    let proxy = Arc::new(net::Proxy::new(holders::Places::new(writable)));
    let workers = Arc::new(workers::Workers::default());
    {
        let (proxy, output) = (proxy.clone(), output.clone());
        running.set_after_command(Box::new(move |live| proxy.command_ended(live, &*output)));
    }
    let result = loop {
        let frame: RequestFrame = match read_message_head(&mut input) {
            Ok(Some(MessageHead::Json(body))) => match parse_frame(&body) {
                Ok(frame) => frame,
                Err(e) => break Err(e),
            },
            Ok(Some(MessageHead::Data { conn, len, .. })) => {
                if let Err(e) = proxy.data_from(conn, len, &mut input, raw_input, &*output) {
                    break Err(e);
                }
                continue;
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        let Some(frame) = in_order(frame, &proxy, &output, &running) else {
            continue;
        };
        let id = frame.id;
        let no_thread = {
            let output = output.clone();
            move |e: std::io::Error| send(&output, id, Response::Error(failed_call(&e)))
        };
        let (roots, output, running) = (roots.clone(), output.clone(), running.clone());
        let job = move || {
            let reply = |r: Response| send(&output, id, r);
            // A call that fails inside (a thread it needs cannot start) is answered, not
            // left waiting for ever.
            let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                handle(&roots, &running, id, frame.request, &reply)
            }));
            match handled {
                Ok(Some(response)) => reply(response),
                Ok(None) => {}
                Err(panic) => reply(Response::Error(failed_call(panic_text(&panic)))),
            }
        };
        workers.run(Box::new(job), no_thread);
    };
    running.kill_all();
    result
}

/// The requests that are quick and ordered, handled on the reading thread rather than on a
/// thread of their own, so that the pieces of one command's input, and of one connection's
/// bytes, arrive in the order they were sent. Gives back the frame when it is not one of
/// them (an interactive command's input is opened here first, before any of it arrives).
fn in_order(
    frame: RequestFrame,
    proxy: &Arc<net::Proxy>,
    output: &Arc<Output>,
    running: &exec::Running,
) -> Option<RequestFrame> {
    match frame.request {
        Request::NetData { conn, data, .. } => {
            proxy.data(conn, data, &**output);
            return None;
        }
        Request::NetAck { conn, bytes, .. } => {
            proxy.ack(conn, bytes);
            return None;
        }
        Request::NetEof { conn, .. } => {
            proxy.eof(conn);
            return None;
        }
        Request::NetClose { conn, .. } => {
            proxy.close(conn);
            return None;
        }
        Request::ProxyListen { port, identify } => {
            let (proxy, output) = (proxy.clone(), output.clone());
            std::thread::spawn(move || {
                let sink: Arc<dyn net::Sink> = output.clone();
                let end = proxy.listen(frame.id, port, identify, sink);
                send(&output, frame.id, end);
            });
            return None;
        }
        Request::Cancel { target } => {
            running.cancel(target);
            send(output, frame.id, Response::Done);
            return None;
        }
        Request::Input { target, data } => {
            let reply = if running.input(target, data) {
                Response::Done
            } else {
                Response::Error(not_interactive(target))
            };
            send(output, frame.id, reply);
            return None;
        }
        Request::CloseInput { target } => {
            let reply = if running.close_input(target) {
                Response::Done
            } else {
                Response::Error(not_interactive(target))
            };
            send(output, frame.id, reply);
            return None;
        }
        Request::Exec(ref req) if req.interactive => running.open_input(frame.id),
        _ => {}
    }
    Some(frame)
}

/// Proxied data arrives in chunks of up to a MiB, each in a buffer of its own. Above
/// glibc's default threshold every one would be a fresh mapping, faulted in page by page
/// and unmapped after its write: a tenth of a download's CPU. Served from the heap, freed
/// chunks are reused instead.
fn keep_large_buffers() {
    // SAFETY: mallopt only sets allocator parameters; called before the server's threads.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 16 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}

/// SIGTERM, SIGINT and SIGHUP end the server the way the end of its input does: by killing
/// every command's process group first. Otherwise a Ctrl-C (which reaches the server too,
/// being in the terminal's process group) or the controller's close would leave commands
/// running, reparented and unowned. The signals are blocked and waited for on one thread,
/// so no handler runs in the middle of another thread's work.
fn exit_on_signal(running: Arc<exec::Running>) {
    // SAFETY: signal-set manipulation on local values; pthread_sigmask on this thread, which
    // every thread spawned from now on inherits (commands get a clean mask from std).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return;
        }
        std::thread::spawn(move || {
            let mut sig = 0;
            if libc::sigwait(&set, &mut sig) == 0 {
                running.kill_all();
                std::process::exit(128 + sig);
            }
        });
    }
}

/// Removes whatever is at `path` (file, link or directory tree) without following links;
/// true if something was removed.
pub fn remove_planted(path: &std::path::Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if meta.is_dir() {
        std::fs::remove_dir_all(path).is_ok()
    } else {
        std::fs::remove_file(path).is_ok()
    }
}

fn not_interactive(target: u64) -> ApiError {
    ApiError::new(
        ErrorKind::InvalidArgument,
        format!("request {target} is not a running command with an open input"),
    )
}

/// Opens a file grep's walk found, beneath its root: a folder on its path swapped for a
/// link out of the root after the walk saw it (a command racing the search) is refused,
/// not followed, as is the file itself swapped for any link.
fn open_for_search(roots: &Roots, path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK;
    roots
        .open(path, flags)
        .map(|(fd, _)| std::fs::File::from(fd))
        .map_err(|e| std::io::Error::other(e.message))
}

/// A call the server could not carry out for want of resources (most often a thread it
/// could not start because the sandbox's commands hold all its processes or memory).
fn failed_call(why: &dyn std::fmt::Display) -> ApiError {
    ApiError::new(
        ErrorKind::Io,
        format!(
            "the sandbox could not carry out this call ({why}); its commands may hold all \
             the processes or memory it is allowed: end them (or wait for them) and try again"
        ),
    )
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> &dyn std::fmt::Display {
    if let Some(s) = panic.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        &"it failed inside the server"
    }
}

/// The server's output, shared by every thread that answers.
struct Output(Mutex<Box<dyn Write + Send>>);

fn send(output: &Output, id: u64, response: Response) {
    let mut out = output.0.lock().unwrap_or_else(|p| p.into_inner());
    // A failed write means the controller is gone; the input side will see EOF and stop.
    let _ = write_frame(&mut *out, &ResponseFrame { id, response });
}

impl net::Sink for Output {
    fn response(&self, id: u64, response: Response) {
        send(self, id, response);
    }

    fn data(&self, id: u64, conn: u64, data: &[u8]) {
        // Header and payload in one write: one system call per chunk.
        let mut frame = Vec::with_capacity(data.len() + 20);
        if write_data_frame(&mut frame, id, conn, data).is_err() {
            return;
        }
        let mut out = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let _ = out.write_all(&frame).and_then(|()| out.flush());
    }
}

/// Handles one request; `None` when the handler already sent its responses itself (exec).
fn handle(
    roots: &Roots,
    running: &exec::Running,
    id: u64,
    request: Request,
    reply: &(dyn Fn(Response) + Sync),
) -> Option<Response> {
    let result = match request {
        Request::Exec(req) => {
            let cwd = match roots
                .open(&req.cwd, OFlags::PATH | OFlags::DIRECTORY)
                .and_then(|(fd, _)| roots.path_of(&fd))
            {
                Ok(cwd) => cwd,
                Err(e) => {
                    running.forget_input(id);
                    return Some(Response::Error(e));
                }
            };
            return match exec::run(id, &req, &cwd, running, reply) {
                Ok(()) => None,
                Err(e) => Some(Response::Error(ApiError::new(ErrorKind::Io, e.to_string()))),
            };
        }
        Request::Cancel { .. }
        | Request::Input { .. }
        | Request::CloseInput { .. }
        | Request::ProxyListen { .. }
        | Request::NetData { .. }
        | Request::NetAck { .. }
        | Request::NetEof { .. }
        | Request::NetClose { .. } => Ok(Response::Done),
        Request::SelfTest(req) => Ok(Response::SelfTest(self_test::run(&req))),
        Request::Read(req) => files::read(roots, &req).map(Response::Read),
        Request::Write(req) => {
            let written = files::write(roots, &req).map(Response::Written);
            running.after_file_change(&req.path);
            written
        }
        Request::Stat { path } => files::stat(roots, &path).map(Response::Stat),
        Request::List { path } => {
            files::list(roots, &path).map(|entries| Response::List { entries })
        }
        Request::Remove { path } => files::remove(roots, &path).map(|()| Response::Done),
        Request::Rename { from, to } => {
            let renamed = files::rename(roots, &from, &to).map(|()| Response::Done);
            // A directory moved elsewhere takes its repositories along, to paths not known.
            running.after_file_change(&to);
            renamed
        }
        Request::Glob(req) => search_root(roots, &req.root, true)
            .and_then(|root| search::glob(&root, &req.pattern, req.limit).map_err(search_error))
            .map(Response::Glob),
        Request::Grep(req) => search_root(roots, &req.root, false)
            .and_then(|root| {
                let beneath = |path: &std::path::Path| open_for_search(roots, path);
                search::grep(
                    &root,
                    &req.pattern,
                    req.include.as_deref(),
                    req.limit,
                    &beneath,
                )
                .map_err(search_error)
            })
            .map(Response::Grep),
        Request::Tree(req) => search_root(roots, &req.root, true)
            .and_then(|root| search::list(&root, &req.ignore, req.limit).map_err(search_error))
            .map(Response::Tree),
    };
    Some(result.unwrap_or_else(Response::Error))
}

/// Searches start from the real path of their start: the walker never follows links, so
/// once the start is known to be beneath a root, everything it visits is too. grep may
/// start at a single file.
fn search_root(
    roots: &Roots,
    path: &std::path::Path,
    dir_only: bool,
) -> Result<std::path::PathBuf, ApiError> {
    let flags = if dir_only {
        OFlags::PATH | OFlags::DIRECTORY
    } else {
        OFlags::PATH
    };
    let (fd, _) = roots.open(path, flags)?;
    roots.path_of(&fd)
}

fn search_error(e: search::SearchError) -> ApiError {
    use search::SearchError as S;
    let kind = match &e {
        S::InvalidRegex { .. } | S::InvalidGlob { .. } => ErrorKind::InvalidPattern,
        S::NotADirectory(_) => ErrorKind::NotADirectory,
        S::NotFound(_) => ErrorKind::NotFound,
        S::Io { .. } => ErrorKind::Io,
    };
    ApiError::new(kind, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use roots::{Resolver, RootSpec};

    /// grep's files are opened beneath their root: a folder on the way that is (or was
    /// swapped for) a link out of the root is refused with either resolver, as is the file
    /// itself as a link; a plain file opens.
    #[test]
    fn grep_opens_nothing_through_a_link_out_of_the_root() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "needle\n").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("src/plain"), "needle\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("swapped")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("src/link")).unwrap();
        let spec = [RootSpec {
            path: root.clone(),
            writable: true,
        }];
        for resolver in [Resolver::Openat2, Resolver::Walk] {
            let roots = Roots::with_resolver(&spec, resolver).unwrap();
            let mut read = String::new();
            open_for_search(&roots, &root.join("src/plain"))
                .unwrap()
                .read_to_string(&mut read)
                .unwrap();
            assert_eq!(read, "needle\n", "{}", resolver.name());
            for refused in ["swapped/secret", "src/link"] {
                assert!(
                    open_for_search(&roots, &root.join(refused)).is_err(),
                    "{} opened {refused}",
                    resolver.name()
                );
            }
        }
    }
}
