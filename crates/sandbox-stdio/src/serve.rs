//! The loop: request lines in, one task per request, answer lines out through one writer.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use runner_protocol::{ExecRequest, OutputStream};
use runner_sandbox::SandboxClient;
use runner_sandbox::client::{ExecEvent, Execution};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;

use crate::command::{self, Users};
use crate::open::Opened;
use crate::wire::{self, ErrorKind, ExecResult, Failure, Incoming, Outgoing, Request};

/// What the caller reports once the sandbox is closed: the copy workspace (when the
/// profile asked for one) and the proxy whose connections it lists.
pub struct Served {
    pub workspace: Option<runner_workspace::Workspace>,
    pub network: Option<Arc<runner_network::NetworkProxy>>,
}

/// What every request's task needs of the sandbox.
#[derive(Clone)]
struct Wall {
    client: SandboxClient,
    workdir: PathBuf,
    env: Arc<Vec<(String, String)>>,
    users: Users,
    out: mpsc::Sender<Outgoing>,
}

/// Requests still in their task that a later line may reach.
#[derive(Default)]
struct InFlight {
    cancels: HashMap<u64, Arc<Notify>>,
    writes: HashMap<u64, mpsc::Sender<wire::WriteChunk>>,
}

/// The lines of `input`, read on a thread of its own. Not tokio's stdin: its reads run on
/// the runtime's blocking pool, which the runtime waits for when it shuts down, and a
/// read of a pipe nobody closes never returns; a plain thread ends with the process.
pub fn lines_of<R: std::io::Read + Send + 'static>(
    input: R,
) -> mpsc::Receiver<std::io::Result<String>> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        let mut input = std::io::BufReader::with_capacity(1 << 20, input);
        loop {
            let mut line = String::new();
            let read = std::io::BufRead::read_line(&mut input, &mut line);
            let end = matches!(read, Ok(0) | Err(_));
            let sent = match read {
                Ok(0) => break,
                Ok(_) => tx.blocking_send(Ok(line)),
                Err(e) => tx.blocking_send(Err(e)),
            };
            if end || sent.is_err() {
                break;
            }
        }
    });
    rx
}

/// Serves `opened` on the lines of `input` ([`lines_of`]) and `output` until `input`
/// ends or a termination signal arrives; then closes the sandbox (every process in it
/// ends) and returns.
pub async fn serve<W>(
    opened: Opened,
    input: mpsc::Receiver<std::io::Result<String>>,
    output: W,
) -> std::io::Result<Served>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let Opened {
        mut session,
        users,
        container,
    } = opened;
    let sandbox = session.sandbox().clone();
    let (out, answers) = mpsc::channel(64);
    let writer = tokio::spawn(write_lines(output, answers));
    let ready = wire::Ready {
        protocol: wire::PROTOCOL,
        backend: sandbox.backend.name(),
        workdir: sandbox.worktree().display().to_string(),
        users: users == Users::Switch,
        wall: session.wall.clone(),
    };
    let first = serde_json::json!({ "ready": ready });
    let wall = Wall {
        client: sandbox.client.clone(),
        workdir: sandbox.worktree().to_path_buf(),
        env: Arc::new(sandbox.env.clone()),
        users,
        out: out.clone(),
    };
    drop(sandbox);
    let mut tasks = JoinSet::new();
    let read = async {
        // The first line goes through the writer like every other, so no answer can
        // come before it.
        out.send(Outgoing::Ok {
            id: 0,
            ok: true,
            result: first,
        })
        .await
        .map_err(|_| std::io::Error::other("the output closed"))?;
        read_requests(input, &wall, &mut tasks).await
    };
    let ended = tokio::select! {
        ended = read => ended,
        () = terminated() => Ok(()),
    };
    // Whatever still runs is cut off: the sandbox is about to go.
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    drop(wall);
    drop(out);
    let _ = writer.await;
    let served = Served {
        workspace: session.workspace.take(),
        network: session.network.clone(),
    };
    drop(session);
    if let Some(container) = container {
        container.stop().await;
    }
    ended.map(|()| served)
}

/// SIGTERM or SIGINT (a harness stopping its sandbox, or a person's Ctrl-C).
async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(mut output: W, mut answers: mpsc::Receiver<Outgoing>) {
    while let Some(line) = answers.recv().await {
        let Ok(bytes) = line.line() else {
            continue;
        };
        if output.write_all(&bytes).await.is_err() || output.flush().await.is_err() {
            break;
        }
    }
}

async fn read_requests(
    mut input: mpsc::Receiver<std::io::Result<String>>,
    wall: &Wall,
    tasks: &mut JoinSet<()>,
) -> std::io::Result<()> {
    let mut in_flight = InFlight::default();
    loop {
        let Some(line) = input.recv().await else {
            return Ok(());
        };
        let line = line?;
        // Finished tasks' handles go, so the maps hold only what still runs.
        while tasks.try_join_next().is_some() {}
        in_flight.cancels.retain(|_, n| Arc::strong_count(n) > 1);
        in_flight.writes.retain(|_, s| !s.is_closed());
        if line.trim().is_empty() {
            continue;
        }
        match parse(&line) {
            Ok(incoming) => dispatch(incoming, wall, tasks, &mut in_flight).await,
            Err((id, failure)) => {
                let _ = wall.out.send(Outgoing::answer(id, Err(failure))).await;
            }
        }
    }
}

/// A request line, or the failure to answer it with (id 0 when even the id is unreadable).
/// Parsed straight into a request: a line can carry 50 MiB of base64, which must not be
/// copied into a JSON value first. Only a line that fails is read again for its id.
fn parse(line: &str) -> Result<Incoming, (u64, Failure)> {
    serde_json::from_str(line).map_err(|e| {
        let id = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("id").and_then(serde_json::Value::as_u64))
            .unwrap_or(0);
        let message = match e.classify() {
            serde_json::error::Category::Data => {
                format!("not a request runner knows: {e} (see docs/PYTHON.md)")
            }
            _ => format!("not a JSON line: {e}"),
        };
        (id, Failure::new(ErrorKind::InvalidRequest, message))
    })
}

async fn dispatch(
    Incoming { id, request }: Incoming,
    wall: &Wall,
    tasks: &mut JoinSet<()>,
    in_flight: &mut InFlight,
) {
    let w = wall.clone();
    match request {
        Request::Exec(req) => {
            let cancel = Arc::new(Notify::new());
            in_flight.cancels.insert(id, cancel.clone());
            tasks.spawn(async move {
                let answer = match command::exec(&req, &w.workdir, &w.env, w.users) {
                    Ok(request) => run_exec(&w.client, request, &cancel).await,
                    Err(f) => Err(f),
                };
                let line = match answer {
                    Ok(result) => Outgoing::Exec { id, result },
                    Err(failure) => Outgoing::answer(id, Err(failure)),
                };
                let _ = w.out.send(line).await;
            });
        }
        Request::Cancel { target } => {
            if let Some(cancel) = in_flight.cancels.get(&target) {
                cancel.notify_one();
            }
            let _ = wall
                .out
                .send(Outgoing::answer(id, Ok(serde_json::json!({}))))
                .await;
        }
        Request::ReadFile(req) => {
            tasks.spawn(async move {
                let answer = read_file(&w, id, &req).await;
                let _ = w.out.send(Outgoing::answer(id, answer)).await;
            });
        }
        Request::WriteFile(req) => {
            let (more, chunks) = mpsc::channel(4);
            if req.more {
                in_flight.writes.insert(id, more);
            }
            tasks.spawn(async move {
                let answer = write_file(&w, req, chunks).await;
                let _ = w.out.send(Outgoing::answer(id, answer)).await;
            });
        }
        Request::WriteChunk(chunk) => match in_flight.writes.get(&id) {
            Some(more) => {
                let last = !chunk.more;
                let _ = more.send(chunk).await;
                if last {
                    in_flight.writes.remove(&id);
                }
            }
            None => {
                let failure = Failure::new(
                    ErrorKind::InvalidRequest,
                    format!("write_chunk {id}: no write_file {id} is waiting for more"),
                );
                let _ = wall.out.send(Outgoing::answer(id, Err(failure))).await;
            }
        },
    }
}

fn sandbox_failure(e: runner_sandbox::SandboxError) -> Failure {
    Failure::new(ErrorKind::Sandbox, format!("the sandbox failed: {e}"))
}

/// Runs one program to its end (or `cancel`'s), keeping its two streams apart.
async fn run_exec(
    client: &SandboxClient,
    request: ExecRequest,
    cancel: &Notify,
) -> Result<ExecResult, Failure> {
    let mut execution = client.exec(request).await.map_err(sandbox_failure)?;
    let mut result = ExecResult::default();
    let mut cancelling = false;
    loop {
        let event = tokio::select! {
            event = execution.next() => event.map_err(sandbox_failure)?,
            () = cancel.notified(), if !cancelling => {
                cancelling = true;
                let _ = execution.cancel().await;
                continue;
            }
        };
        match event {
            ExecEvent::Output(o) => match o.stream {
                OutputStream::Stdout => result.stdout.extend_from_slice(&o.data),
                OutputStream::Stderr => result.stderr.extend_from_slice(&o.data),
            },
            ExecEvent::Exit(status) => {
                result.code = status.code;
                result.signal = status.signal;
                result.timed_out = status.timed_out;
                result.cancelled = status.cancelled || cancelling;
                result.dropped_bytes = status.dropped_bytes;
                return Ok(result);
            }
        }
    }
}

/// Streams a file as `chunk` lines of [`wire::CHUNK`] bytes; answers with its size.
async fn read_file(w: &Wall, id: u64, req: &wire::ReadFile) -> Result<serde_json::Value, Failure> {
    let max = req.max_bytes.unwrap_or(u64::MAX >> 2);
    let request = command::read(&req.path, max, &w.workdir, &w.env);
    let mut execution = w.client.exec(request).await.map_err(sandbox_failure)?;
    let (mut pending, mut stderr, mut size) = (Vec::new(), Vec::new(), 0u64);
    let status = loop {
        match execution.next().await.map_err(sandbox_failure)? {
            ExecEvent::Output(o) if o.stream == OutputStream::Stdout => {
                size += o.data.len() as u64;
                pending.extend_from_slice(&o.data);
                if pending.len() >= wire::CHUNK {
                    let chunk = std::mem::take(&mut pending);
                    let _ = w.out.send(Outgoing::Chunk { id, chunk }).await;
                }
            }
            ExecEvent::Output(o) => stderr.extend_from_slice(&o.data),
            ExecEvent::Exit(status) => break status,
        }
    };
    if let Some(failure) = command::file_failure(&req.path, status.code, &stderr) {
        return Err(failure);
    }
    if !pending.is_empty() {
        let _ = w.out.send(Outgoing::Chunk { id, chunk: pending }).await;
    }
    Ok(serde_json::json!({ "size": size }))
}

/// Writes the first piece and every `write_chunk` after it to the file's script.
async fn write_file(
    w: &Wall,
    first: wire::WriteFile,
    mut chunks: mpsc::Receiver<wire::WriteChunk>,
) -> Result<serde_json::Value, Failure> {
    let request = command::write(&first.path, &w.workdir, &w.env);
    let mut execution = w.client.exec(request).await.map_err(sandbox_failure)?;
    let (mut data, mut more) = (first.data, first.more);
    let mut written = 0u64;
    loop {
        if let Some(bytes) = data.take().filter(|b| !b.is_empty()) {
            written += bytes.len() as u64;
            // A script that already failed (a directory, no permission) reads no more;
            // its status says why below.
            let _ = execution.write(bytes).await;
        }
        if !more {
            break;
        }
        match chunks.recv().await {
            Some(chunk) => (data, more) = (chunk.data, chunk.more),
            None => break,
        }
    }
    let _ = execution.close_input().await;
    let (code, stderr) = finish(&mut execution).await?;
    match command::file_failure(&first.path, code, &stderr) {
        Some(failure) => Err(failure),
        None => Ok(serde_json::json!({ "size": written })),
    }
}

/// A file script's exit status and standard error.
async fn finish(execution: &mut Execution) -> Result<(Option<i32>, Vec<u8>), Failure> {
    let mut stderr = Vec::new();
    loop {
        match execution.next().await.map_err(sandbox_failure)? {
            ExecEvent::Output(o) => stderr.extend_from_slice(&o.data),
            ExecEvent::Exit(status) => return Ok((status.code, stderr)),
        }
    }
}
