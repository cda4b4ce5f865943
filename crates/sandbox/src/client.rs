//! The controller's side of the sandbox protocol.
//!
//! One client owns one connection to a server. Requests carry ids so that many can be in
//! flight at once; a reader task routes each response frame to the request that is waiting
//! for it. If the server dies, every waiting request fails with a message that says so
//! (and what the server last printed), instead of hanging.
//!
//! # Bounded queues
//!
//! The server is on the far side of the wall, and what it sends is read on the host. Each
//! request's answers wait in a queue of at most [`QUEUE_BYTES`] until their reader takes
//! them. When a queue is full, the router stops reading the server's pipe: the pipe fills,
//! the server's writes block, and a command that floods its output is slowed to the pace
//! its reader keeps. That is the back-pressure; the host's memory stays flat.
//!
//! One pipe carries every request's answers, so a reader that never takes its answers
//! would stop everyone else's too, and a reader that waits for another request's answer
//! before it takes its own (a cancel's acknowledgement, an input's) would wait for ever.
//! The router therefore waits on one full queue for at most [`STALL`]. A queue still full
//! then is cut off: its reader gets an error that says so, the sandbox is asked to cancel
//! the request, and the router reads on, dropping whatever else comes for it. A reader that
//! keeps up never sees this; a stuck one costs the others at most [`STALL`], never a hang.
//! [`Execution::cancel`] does not wait for its acknowledgement, so the common case, a
//! reader that cancels its own command, does not even pay that.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::splice::{PipeWriter, SplicePipe};
use runner_protocol::{
    ApiError, DATA_FRAME_HEADER, DirEntry, ExecRequest, ExecStatus, GlobOutcome, GlobRequest,
    GrepOutcome, GrepRequest, ReadRequest, ReadResponse, Request, RequestFrame, Response,
    ResponseFrame, SelfTestRequest, Stat, TreeOutcome, TreeRequest, WallFacts, WritePrecondition,
    WriteRequest, WriteResponse, data_frame_header, data_frame_len, decode_len, encode_len,
    split_data_header,
};

#[derive(Debug, Clone, thiserror::Error)]
pub enum SandboxError {
    /// The server answered with an error about the request (missing file, escape, …).
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The connection to the server is gone.
    #[error(
        "the sandbox server is gone ({0}); the tool call did not complete. Start a new session; if this repeats, run `runner sandbox doctor`"
    )]
    Disconnected(String),
    #[error("sandbox protocol error: {0}")]
    Protocol(String),
    /// The sandbox never started (no session was lost).
    #[error(transparent)]
    Start(#[from] crate::start_error::SandboxStartError),
}

/// The most bytes of answers that may wait for one request (a frame counts its encoded
/// size; a frame larger than this waits for an empty queue).
pub const QUEUE_BYTES: usize = 8 << 20;

/// How long the router waits for room in one request's full queue before it cuts that
/// request off, so that the other requests' answers flow again (see the module's docs).
pub const STALL: Duration = Duration::from_secs(10);

/// Where the router puts one request's answers.
#[derive(Clone)]
struct Route {
    tx: mpsc::UnboundedSender<Queued>,
    /// Bytes of room left in the queue: the router takes some for each frame, and the
    /// reader gives them back as it takes the frame.
    room: Arc<Semaphore>,
    /// Why the router stopped routing answers here, if it did.
    cut: Arc<OnceLock<String>>,
}

/// One answer in a queue, holding its room until it is taken.
struct Queued {
    response: Response,
    _room: OwnedSemaphorePermit,
}

/// The answers to one request, in order, as the router delivers them.
pub struct Responses {
    rx: mpsc::UnboundedReceiver<Queued>,
    cut: Arc<OnceLock<String>>,
}

impl Responses {
    /// The next answer; `None` when no more will come (the request is done, the server is
    /// gone, or this queue was cut off: [`Self::cut_off`] says which).
    pub async fn recv(&mut self) -> Option<Response> {
        self.rx.recv().await.map(|q| q.response)
    }

    /// Why the router stopped delivering answers here, when it cut this queue off.
    pub fn cut_off(&self) -> Option<&str> {
        self.cut.get().map(String::as_str)
    }
}

fn route() -> (Route, Responses) {
    let (tx, rx) = mpsc::unbounded_channel();
    let cut = Arc::new(OnceLock::new());
    let route = Route {
        tx,
        room: Arc::new(Semaphore::new(QUEUE_BYTES)),
        cut: cut.clone(),
    };
    (route, Responses { rx, cut })
}

type Pending = Mutex<HashMap<u64, Route>>;

/// Where frames to the server go.
enum Writer {
    /// The server's input pipe, which proxied bytes can be spliced into.
    Pipe(PipeWriter),
    /// Any other stream (docker's attach stream, a shell's channel).
    Stream(Box<dyn AsyncWrite + Send + Unpin>),
}

/// One frame on its way to the server.
enum Outgoing {
    /// The first so many bytes of a buffer.
    Bytes(Vec<u8>, usize),
    /// A data frame's header, then so many bytes spliced from a holding pipe.
    Spliced([u8; DATA_FRAME_HEADER], Arc<SplicePipe>, usize),
}

impl Writer {
    async fn put(&mut self, out: &Outgoing) -> std::io::Result<()> {
        match (self, out) {
            (Writer::Pipe(pipe), Outgoing::Bytes(frame, len)) => {
                pipe.write_all(&frame[..*len]).await
            }
            (Writer::Stream(stream), Outgoing::Bytes(frame, len)) => {
                stream.write_all(&frame[..*len]).await?;
                stream.flush().await
            }
            // Header and payload under one hold of the lock, so no other frame comes
            // between.
            (Writer::Pipe(pipe), Outgoing::Spliced(header, from, len)) => {
                pipe.write_all(header).await?;
                pipe.splice_all(from, *len).await
            }
            (Writer::Stream(_), Outgoing::Spliced(..)) => Err(std::io::Error::other(
                "this sandbox's channel cannot take spliced data",
            )),
        }
    }
}

struct Shared {
    writer: Arc<tokio::sync::Mutex<Writer>>,
    /// Whether [`SandboxClient::send_spliced`] can be used.
    splices: bool,
    pending: Pending,
    next_id: AtomicU64,
    /// Why the connection ended, once it has.
    closed: Mutex<Option<String>>,
    /// Extra context for disconnect messages (e.g. the server's stderr tail).
    diagnostics: Arc<dyn Fn() -> String + Send + Sync>,
    /// How long the router waits on one full queue ([`STALL`]; shorter in tests).
    stall: Duration,
}

#[derive(Clone)]
pub struct SandboxClient {
    shared: Arc<Shared>,
}

impl SandboxClient {
    /// Starts the response router on the current tokio runtime.
    pub fn new(
        reader: impl AsyncRead + Send + Unpin + 'static,
        writer: impl AsyncWrite + Send + Unpin + 'static,
        diagnostics: Arc<dyn Fn() -> String + Send + Sync>,
    ) -> Self {
        Self::start_router(reader, Writer::Stream(Box::new(writer)), diagnostics, STALL)
    }

    /// A client whose frames go into the server's input pipe, so that proxied downloads
    /// can be spliced in ([`Self::send_spliced`]).
    pub(crate) fn over_pipe(
        reader: impl AsyncRead + Send + Unpin + 'static,
        pipe: OwnedFd,
        diagnostics: Arc<dyn Fn() -> String + Send + Sync>,
    ) -> std::io::Result<Self> {
        let writer = Writer::Pipe(PipeWriter::new(pipe)?);
        Ok(Self::start_router(reader, writer, diagnostics, STALL))
    }

    fn start_router(
        reader: impl AsyncRead + Send + Unpin + 'static,
        writer: Writer,
        diagnostics: Arc<dyn Fn() -> String + Send + Sync>,
        stall: Duration,
    ) -> Self {
        let splices = matches!(writer, Writer::Pipe(_));
        let shared = Arc::new(Shared {
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
            splices,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed: Mutex::new(None),
            diagnostics,
            stall,
        });
        // Buffered: a frame's length, header and body would otherwise be three reads.
        let reader = tokio::io::BufReader::with_capacity(512 * 1024, reader);
        tokio::spawn(route_responses(reader, shared.clone()));
        SandboxClient { shared }
    }

    fn closed_reason(&self) -> Option<String> {
        self.shared
            .closed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    async fn start(&self, request: Request) -> Result<(u64, Responses), SandboxError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = route();
        {
            let mut pending = self
                .shared
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            // Checked under the lock the router takes to fail everyone, so no request can
            // slip in after the last one was failed and then wait forever.
            if let Some(reason) = self.closed_reason() {
                return Err(SandboxError::Disconnected(reason));
            }
            pending.insert(id, tx);
        }
        let json = serde_json::to_vec(&RequestFrame { id, request })
            .map_err(|e| SandboxError::Protocol(e.to_string()))?;
        let len = encode_len(json.len()).map_err(|e| SandboxError::Protocol(e.to_string()))?;
        if let Err(e) = self.send_raw(&[&len, &json]).await {
            self.forget(id);
            return Err(e);
        }
        Ok((id, rx))
    }

    /// Sends a request that gets no response (the proxy's stream messages).
    pub async fn notify(&self, request: Request) -> Result<(), SandboxError> {
        let json = serde_json::to_vec(&RequestFrame { id: 0, request })
            .map_err(|e| SandboxError::Protocol(e.to_string()))?;
        let len = encode_len(json.len()).map_err(|e| SandboxError::Protocol(e.to_string()))?;
        self.send_raw(&[&len, &json]).await
    }

    /// Sends a data frame built in place: the first `len` bytes of `frame`, which start
    /// with [`DATA_FRAME_HEADER`] bytes of room that this fills. The buffer comes back, to
    /// be filled again.
    pub async fn send_data_in_place(
        &self,
        target: u64,
        conn: u64,
        mut frame: Vec<u8>,
        len: usize,
    ) -> Result<Vec<u8>, SandboxError> {
        let header = data_frame_header(target, conn, len - DATA_FRAME_HEADER)
            .map_err(|e| SandboxError::Protocol(e.to_string()))?;
        frame[..DATA_FRAME_HEADER].copy_from_slice(&header);
        self.send_frame(frame, len).await
    }

    /// Sends bytes for connection `conn` of listener `target` as one data frame.
    pub async fn send_data(&self, target: u64, conn: u64, data: &[u8]) -> Result<(), SandboxError> {
        let header = data_frame_header(target, conn, data.len())
            .map_err(|e| SandboxError::Protocol(e.to_string()))?;
        self.send_raw(&[&header, data]).await
    }

    /// One buffer, one write: a proxied chunk is not worth two system calls.
    async fn send_raw(&self, parts: &[&[u8]]) -> Result<(), SandboxError> {
        let frame = parts.concat();
        let len = frame.len();
        self.send_frame(frame, len).await.map(drop)
    }

    /// Writes the first `len` bytes of `frame`; the buffer comes back.
    async fn send_frame(&self, frame: Vec<u8>, len: usize) -> Result<Vec<u8>, SandboxError> {
        match self.write_whole(Outgoing::Bytes(frame, len)).await? {
            Outgoing::Bytes(frame, _) => Ok(frame),
            Outgoing::Spliced(..) => unreachable!("write_whole gives back what it was given"),
        }
    }

    /// Writes one frame in a task of its own that holds the writer's lock: a caller
    /// dropped half-way (a cancelled tool call, a proxied connection ended with its proxy)
    /// cannot cut a frame, which would garble the protocol for everything after it. The
    /// lock is taken here first, so frames still go in the order they were sent. What was
    /// written comes back (a buffer to fill again).
    async fn write_whole(&self, out: Outgoing) -> Result<Outgoing, SandboxError> {
        if let Some(reason) = self.closed_reason() {
            return Err(SandboxError::Disconnected(reason));
        }
        let mut writer = self.shared.writer.clone().lock_owned().await;
        let task = tokio::spawn(async move {
            let written = writer.put(&out).await;
            written.map(|()| out)
        });
        match task.await {
            Ok(written) => written.map_err(|e| self.send_failed(e)),
            Err(e) => Err(self.send_failed(std::io::Error::other(e))),
        }
    }

    fn send_failed(&self, e: std::io::Error) -> SandboxError {
        SandboxError::Disconnected(
            self.closed_reason()
                .unwrap_or_else(|| format!("cannot send to the sandbox: {e}")),
        )
    }

    /// Whether this client can take proxied bytes by [`Self::send_spliced`].
    pub fn splices(&self) -> bool {
        self.shared.splices
    }

    /// Sends the `len` bytes `from` holds as one data frame for connection `conn` of
    /// listener `target`, spliced from pipe to pipe. On a client that does not splice,
    /// a protocol error.
    pub async fn send_spliced(
        &self,
        target: u64,
        conn: u64,
        from: Arc<SplicePipe>,
        len: usize,
    ) -> Result<(), SandboxError> {
        if !self.splices() {
            return Err(SandboxError::Protocol(
                "this sandbox's channel cannot take spliced data".into(),
            ));
        }
        let header = data_frame_header(target, conn, len)
            .map_err(|e| SandboxError::Protocol(e.to_string()))?;
        self.write_whole(Outgoing::Spliced(header, from, len))
            .await
            .map(drop)
    }

    /// Asks the server to try the wall from inside ([`runner_protocol::wall`]).
    pub async fn self_test(&self, request: SelfTestRequest) -> Result<WallFacts, SandboxError> {
        match self.call(Request::SelfTest(request)).await? {
            Response::SelfTest(facts) => Ok(facts),
            other => Err(unexpected("self-test", &other)),
        }
    }

    /// Starts the proxy listener on the sandbox's loopback; its connections arrive on the
    /// returned receiver (see [`runner_protocol::Request::ProxyListen`]), each naming the
    /// program that opened it when `identify`.
    pub async fn proxy_listen(
        &self,
        port: u16,
        identify: bool,
    ) -> Result<(u64, Responses), SandboxError> {
        let (id, mut rx) = self.start(Request::ProxyListen { port, identify }).await?;
        match rx.recv().await {
            Some(Response::Listening { .. }) => Ok((id, rx)),
            Some(Response::Error(e)) => {
                self.forget(id);
                Err(SandboxError::Api(e))
            }
            Some(other) => {
                self.forget(id);
                Err(unexpected("proxy_listen", &other))
            }
            None => Err(self.ended(&rx)),
        }
    }

    fn forget(&self, id: u64) {
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// Sends a request that has exactly one response.
    pub async fn call(&self, request: Request) -> Result<Response, SandboxError> {
        let (id, mut rx) = self.start(request).await?;
        let response = rx.recv().await;
        self.forget(id);
        match response {
            Some(Response::Error(e)) => Err(SandboxError::Api(e)),
            Some(r) => Ok(r),
            None => Err(self.ended(&rx)),
        }
    }

    /// Why no more answers come to `rx`: its queue was cut off, or the server is gone.
    fn ended(&self, rx: &Responses) -> SandboxError {
        match rx.cut_off() {
            Some(why) => SandboxError::Protocol(why.to_string()),
            None => self.disconnected(),
        }
    }

    fn disconnected(&self) -> SandboxError {
        SandboxError::Disconnected(
            self.closed_reason()
                .unwrap_or_else(|| "the connection closed".to_string()),
        )
    }

    pub async fn read(
        &self,
        path: &Path,
        offset: u64,
        max_bytes: u64,
    ) -> Result<ReadResponse, SandboxError> {
        let req = Request::Read(ReadRequest {
            path: path.to_path_buf(),
            offset,
            max_bytes,
        });
        match self.call(req).await? {
            Response::Read(r) => Ok(r),
            other => Err(unexpected("read", &other)),
        }
    }

    /// Reads a whole file, refusing files over `limit` bytes with a message that says so.
    pub async fn read_all(&self, path: &Path, limit: u64) -> Result<ReadResponse, SandboxError> {
        let mut first = self.read(path, 0, limit.saturating_add(1)).await?;
        if first.data.len() as u64 > limit || first.size > limit {
            return Err(SandboxError::Api(ApiError::at(
                runner_protocol::ErrorKind::InvalidArgument,
                path,
                format!(
                    "{} is {} bytes, over the {limit}-byte limit for this operation; use bash (sed, head, split) to work on it in parts",
                    path.display(),
                    first.size
                ),
            )));
        }
        first.data.truncate(first.size as usize);
        Ok(first)
    }

    pub async fn write(
        &self,
        path: &Path,
        data: Vec<u8>,
        precondition: Option<WritePrecondition>,
    ) -> Result<WriteResponse, SandboxError> {
        let req = Request::Write(WriteRequest {
            path: path.to_path_buf(),
            data,
            precondition,
        });
        match self.call(req).await? {
            Response::Written(r) => Ok(r),
            other => Err(unexpected("write", &other)),
        }
    }

    pub async fn stat(&self, path: &Path) -> Result<Stat, SandboxError> {
        match self
            .call(Request::Stat {
                path: path.to_path_buf(),
            })
            .await?
        {
            Response::Stat(s) => Ok(s),
            other => Err(unexpected("stat", &other)),
        }
    }

    pub async fn list(&self, path: &Path) -> Result<Vec<DirEntry>, SandboxError> {
        match self
            .call(Request::List {
                path: path.to_path_buf(),
            })
            .await?
        {
            Response::List { entries } => Ok(entries),
            other => Err(unexpected("list", &other)),
        }
    }

    pub async fn remove(&self, path: &Path) -> Result<(), SandboxError> {
        match self
            .call(Request::Remove {
                path: path.to_path_buf(),
            })
            .await?
        {
            Response::Done => Ok(()),
            other => Err(unexpected("remove", &other)),
        }
    }

    pub async fn rename(&self, from: &Path, to: &Path) -> Result<(), SandboxError> {
        let req = Request::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        };
        match self.call(req).await? {
            Response::Done => Ok(()),
            other => Err(unexpected("rename", &other)),
        }
    }

    pub async fn glob(
        &self,
        root: PathBuf,
        pattern: &str,
        limit: usize,
    ) -> Result<GlobOutcome, SandboxError> {
        let req = Request::Glob(GlobRequest {
            root,
            pattern: pattern.to_string(),
            limit,
        });
        match self.call(req).await? {
            Response::Glob(g) => Ok(g),
            other => Err(unexpected("glob", &other)),
        }
    }

    pub async fn grep(
        &self,
        root: PathBuf,
        pattern: &str,
        include: Option<&str>,
        limit: usize,
    ) -> Result<GrepOutcome, SandboxError> {
        let req = Request::Grep(GrepRequest {
            root,
            pattern: pattern.to_string(),
            include: include.map(str::to_string),
            limit,
        });
        match self.call(req).await? {
            Response::Grep(g) => Ok(g),
            other => Err(unexpected("grep", &other)),
        }
    }

    pub async fn tree(
        &self,
        root: PathBuf,
        ignore: Vec<String>,
        limit: usize,
    ) -> Result<TreeOutcome, SandboxError> {
        match self
            .call(Request::Tree(TreeRequest {
                root,
                ignore,
                limit,
            }))
            .await?
        {
            Response::Tree(t) => Ok(t),
            other => Err(unexpected("tree", &other)),
        }
    }

    /// Starts a command; its output and exit arrive through the returned [`Execution`].
    pub async fn exec(&self, request: ExecRequest) -> Result<Execution, SandboxError> {
        let (id, rx) = self.start(Request::Exec(request)).await?;
        Ok(Execution {
            id,
            rx,
            client: self.clone(),
        })
    }
}

fn unexpected(op: &str, response: &Response) -> SandboxError {
    SandboxError::Protocol(format!("unexpected response to {op}: {response:?}"))
}

/// What a running command reports.
#[derive(Debug)]
pub enum ExecEvent {
    Output(runner_protocol::ExecOutput),
    Exit(ExecStatus),
}

pub struct Execution {
    id: u64,
    rx: Responses,
    client: SandboxClient,
}

impl Execution {
    /// The next event; an error if the server died or refused the command.
    pub async fn next(&mut self) -> Result<ExecEvent, SandboxError> {
        match self.rx.recv().await {
            Some(Response::Output(o)) => Ok(ExecEvent::Output(o)),
            Some(Response::Exit(s)) => {
                self.client.forget(self.id);
                Ok(ExecEvent::Exit(s))
            }
            Some(Response::Error(e)) => {
                self.client.forget(self.id);
                Err(SandboxError::Api(e))
            }
            Some(other) => Err(unexpected("exec", &other)),
            None => Err(self.client.ended(&self.rx)),
        }
    }

    /// Writes to the standard input of an interactive command (`ExecRequest::interactive`).
    pub async fn write(&self, data: Vec<u8>) -> Result<(), SandboxError> {
        self.input().write(data).await
    }

    /// Closes the standard input of an interactive command.
    pub async fn close_input(&self) -> Result<(), SandboxError> {
        self.input().close().await
    }

    /// The command's standard input on its own, for a writer that runs beside the reader
    /// of its output.
    pub fn input(&self) -> ExecInput {
        ExecInput {
            id: self.id,
            client: self.client.clone(),
        }
    }

    /// Asks the server to kill the command's process group; its exit still arrives. The
    /// acknowledgement is not waited for: it would queue behind this command's own output,
    /// which the caller is not reading while it waits here.
    pub async fn cancel(&self) -> Result<(), SandboxError> {
        self.client
            .notify(Request::Cancel { target: self.id })
            .await
    }
}

/// Where an interactive command's standard input is written.
#[derive(Clone)]
pub struct ExecInput {
    id: u64,
    client: SandboxClient,
}

impl ExecInput {
    pub async fn write(&self, data: Vec<u8>) -> Result<(), SandboxError> {
        self.client
            .call(Request::Input {
                target: self.id,
                data,
            })
            .await
            .map(|_| ())
    }

    pub async fn close(&self) -> Result<(), SandboxError> {
        self.client
            .call(Request::CloseInput { target: self.id })
            .await
            .map(|_| ())
    }
}

async fn route_responses(mut reader: impl AsyncRead + Unpin, shared: Arc<Shared>) {
    let reason = loop {
        let mut len = [0u8; 4];
        if let Err(e) = reader.read_exact(&mut len).await {
            break if e.kind() == std::io::ErrorKind::UnexpectedEof {
                "the server closed the connection".to_string()
            } else {
                format!("reading from the server failed: {e}")
            };
        }
        match data_frame_len(len) {
            Ok(Some(total)) if total > 16 + runner_protocol::NET_CHUNK => {
                break format!(
                    "the server sent a data frame of {total} bytes, over the chunk size"
                );
            }
            Ok(Some(total)) => {
                let mut header = [0u8; 16];
                let mut data = vec![0u8; total - header.len()];
                if let Err(e) = async {
                    reader.read_exact(&mut header).await?;
                    reader.read_exact(&mut data).await
                }
                .await
                {
                    break format!("the server's data was cut off: {e}");
                }
                let (target, conn) = split_data_header(&header);
                deliver(&shared, target, Response::NetData { conn, data }, total).await;
                continue;
            }
            Ok(None) => {}
            Err(e) => break e.to_string(),
        }
        let body_len = match decode_len(len) {
            Ok(n) => n,
            Err(e) => break e.to_string(),
        };
        // The length word is the server's claim: reserve at most one chunk ahead of the
        // bytes that really arrive (see `RESERVE_AHEAD`).
        let mut body = Vec::with_capacity(body_len.min(runner_protocol::RESERVE_AHEAD));
        match (&mut reader)
            .take(body_len as u64)
            .read_to_end(&mut body)
            .await
        {
            Ok(n) if n == body_len => {}
            Ok(_) => break "the server's answer was cut off: early end of file".to_string(),
            Err(e) => break format!("the server's answer was cut off: {e}"),
        }
        let frame: ResponseFrame = match serde_json::from_slice(&body) {
            Ok(f) => f,
            Err(e) => break format!("the server sent an unreadable frame: {e}"),
        };
        deliver(&shared, frame.id, frame.response, body_len).await;
    };
    let detail = (shared.diagnostics)();
    let reason = if detail.is_empty() {
        reason
    } else {
        format!("{reason}; {detail}")
    };
    let mut pending = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
    *shared.closed.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
    // Dropping the senders wakes every waiter with `None`, which reports the reason.
    pending.clear();
}

/// Puts one answer (`cost` bytes as it came) in the queue of request `id`, waiting for room
/// (the back-pressure) at most [`Shared::stall`]; a queue that stays full is cut off.
async fn deliver(shared: &Arc<Shared>, id: u64, response: Response, cost: usize) {
    let route = {
        let pending = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
        match pending.get(&id) {
            Some(route) => route.clone(),
            None => return,
        }
    };
    let permits = u32::try_from(cost.clamp(1, QUEUE_BYTES)).unwrap_or(u32::MAX);
    let waited = tokio::select! {
        room = tokio::time::timeout(shared.stall, route.room.clone().acquire_many_owned(permits)) => room,
        // Nobody reads this queue any more: the answer has nowhere to go.
        () = route.tx.closed() => return,
    };
    match waited {
        Ok(Ok(room)) => {
            let _ = route.tx.send(Queued {
                response,
                _room: room,
            });
        }
        // The semaphore is never closed.
        Ok(Err(_)) => {}
        Err(_) => cut_off(shared, id, &route),
    }
}

/// Stops routing answers to request `id`, whose reader has not taken any for
/// [`Shared::stall`]: the reader learns why, and the sandbox is asked to cancel it.
fn cut_off(shared: &Arc<Shared>, id: u64, route: &Route) {
    let _ = route.cut.set(format!(
        "the sandbox's answers to this call filled their {} MiB queue and were not taken for {} s; runner stopped reading them (and asked the sandbox to stop the call) so that other calls could go on",
        QUEUE_BYTES >> 20,
        shared.stall.as_secs_f64()
    ));
    shared
        .pending
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
    let client = SandboxClient {
        shared: shared.clone(),
    };
    // In a task: the server may not be reading its input until its output drains.
    tokio::spawn(async move {
        let _ = client.notify(Request::Cancel { target: id }).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::FromRawFd;

    use runner_protocol::{ExecOutput, OutputStream};
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;
    use tokio::io::{DuplexStream, ReadHalf, WriteHalf};

    /// A server over in-memory pipes that floods one command's output: what it has
    /// managed to write so far, and the client talking to it.
    struct Flood {
        client: SandboxClient,
        written: Arc<AtomicUsize>,
        /// Requests the server saw after the exec, as JSON.
        seen: tokio::sync::mpsc::UnboundedReceiver<serde_json::Value>,
    }

    const CHUNK: usize = 256 << 10;

    fn frame(id: u64, response: Response) -> Vec<u8> {
        let json = serde_json::to_vec(&ResponseFrame { id, response }).unwrap();
        [&encode_len(json.len()).unwrap()[..], &json].concat()
    }

    async fn read_request(from: &mut ReadHalf<DuplexStream>) -> Option<RequestFrame> {
        let mut len = [0u8; 4];
        from.read_exact(&mut len).await.ok()?;
        let mut body = vec![0u8; decode_len(len).ok()?];
        from.read_exact(&mut body).await.ok()?;
        serde_json::from_slice(&body).ok()
    }

    /// Starts a server that answers the first request (an exec) with `total` bytes of
    /// output in [`CHUNK`]s (chunk `i` filled with `i as u8`), then its exit; it stops
    /// early when asked to cancel. Other requests get `Done` (or an `Exit` for a second
    /// exec), sent as soon as the output lets them through.
    fn flood(total: usize, stall: Duration) -> Flood {
        let (client_side, server_side) = tokio::io::duplex(64 << 10);
        let (client_read, client_write) = tokio::io::split(client_side);
        let client = SandboxClient::start_router(
            client_read,
            Writer::Stream(Box::new(client_write)),
            Arc::new(String::new),
            stall,
        );
        let (mut from, to) = tokio::io::split(server_side);
        let to: Arc<tokio::sync::Mutex<WriteHalf<DuplexStream>>> = Arc::new(to.into());
        let written = Arc::new(AtomicUsize::new(0));
        let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (seen_tx, seen) = tokio::sync::mpsc::unbounded_channel();
        let (out, count, stop) = (to.clone(), written.clone(), cancelled.clone());
        tokio::spawn(async move {
            let Some(first) = read_request(&mut from).await else {
                return;
            };
            let id = first.id;
            tokio::spawn(async move {
                let mut i = 0usize;
                while i * CHUNK < total && !stop.load(Ordering::SeqCst) {
                    let output = Response::Output(ExecOutput {
                        stream: OutputStream::Stdout,
                        data: vec![i as u8; CHUNK],
                        tail: false,
                    });
                    let bytes = frame(id, output);
                    if out.lock().await.write_all(&bytes).await.is_err() {
                        return;
                    }
                    count.fetch_add(CHUNK, Ordering::SeqCst);
                    i += 1;
                }
                let exit = Response::Exit(ExecStatus {
                    code: Some(0),
                    signal: None,
                    timed_out: false,
                    cancelled: stop.load(Ordering::SeqCst),
                    dropped_bytes: 0,
                });
                let _ = out.lock().await.write_all(&frame(id, exit)).await;
            });
            while let Some(request) = read_request(&mut from).await {
                let _ = seen_tx.send(serde_json::to_value(&request.request).unwrap());
                if matches!(request.request, Request::Cancel { target } if target == id) {
                    cancelled.store(true, Ordering::SeqCst);
                }
                let answer = frame(request.id, Response::Done);
                let _ = to.lock().await.write_all(&answer).await;
            }
        });
        Flood {
            client,
            written,
            seen,
        }
    }

    fn exec_request() -> ExecRequest {
        ExecRequest {
            command: "flood".into(),
            cwd: "/".into(),
            env: Vec::new(),
            timeout_ms: 60_000,
            stdin: None,
            output_limit: u64::MAX,
            interactive: false,
        }
    }

    /// How much the server has written once it stops making progress (or after `limit`).
    async fn settled(written: &AtomicUsize, limit: Duration) -> usize {
        let until = tokio::time::Instant::now() + limit;
        let mut last = written.load(Ordering::SeqCst);
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = written.load(Ordering::SeqCst);
            if now == last {
                return now;
            }
            last = now;
        }
        last
    }

    fn rss_kib() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// A server that floods a command's output while the host does not read it: the
    /// client's queue fills, the router stops reading, and the server's writes block. The
    /// host's memory stays flat. Once the host reads, every byte arrives, in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flood_of_answers_nobody_reads_blocks_the_server_not_the_host() {
        // Sixteen times the queue, twice the growth allowed below: a host that queued it
        // all would fail both checks.
        let total = 128 << 20;
        let before = rss_kib();
        let f = flood(total, Duration::from_secs(60));
        let mut execution = f.client.exec(exec_request()).await.unwrap();
        let sent = settled(&f.written, Duration::from_secs(20)).await;
        let grown = rss_kib().saturating_sub(before);
        // The queue, the router's buffer and frame in hand, and the pipe.
        assert!(
            sent <= QUEUE_BYTES + (4 << 20),
            "the server wrote {sent} bytes that nobody read: the host queued them"
        );
        assert!(grown < 64 << 10, "the host grew by {grown} KiB");
        // The control: reading takes everything, in order.
        let mut got = 0usize;
        loop {
            match execution.next().await.unwrap() {
                ExecEvent::Output(o) => {
                    assert!(
                        o.data == vec![(got / CHUNK) as u8; CHUNK],
                        "chunk {}",
                        got / CHUNK
                    );
                    got += o.data.len();
                }
                ExecEvent::Exit(status) => {
                    assert_eq!(status.code, Some(0));
                    break;
                }
            }
        }
        assert_eq!(got, total);
    }

    /// A reader that never takes its answers costs the other calls one stall, not a hang:
    /// its queue is cut off with a message that says why, the sandbox is asked to cancel
    /// the command, and the next call's answer comes through.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queue_nobody_reads_is_cut_off_after_the_stall_and_others_go_on() {
        let mut f = flood(1 << 30, Duration::from_millis(500));
        let mut execution = f.client.exec(exec_request()).await.unwrap();
        settled(&f.written, Duration::from_secs(5)).await;
        let other = tokio::time::timeout(
            Duration::from_secs(20),
            f.client.call(Request::Stat { path: "/x".into() }),
        )
        .await
        .expect("another call hung behind a queue nobody read");
        assert!(matches!(other, Ok(Response::Done)), "{other:?}");
        // The server is asked to stop the command (by a task of its own: it may come after
        // the other call's answer).
        let asked = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(request) = f.seen.recv().await {
                if request["op"] == "cancel" {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(
            asked,
            Ok(true),
            "the sandbox was not asked to cancel the cut-off command"
        );
        // What was queued is still there; then the reason.
        let e = loop {
            match execution.next().await {
                Ok(ExecEvent::Output(_)) => {}
                Ok(ExecEvent::Exit(s)) => panic!("the cut-off command exited: {s:?}"),
                Err(e) => break e.to_string(),
            }
        };
        assert!(e.contains("8 MiB queue") && e.contains("not taken"), "{e}");
    }

    /// Cancelling a command whose queue is full does not wait for an acknowledgement that
    /// sits behind that very queue.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_with_a_full_queue_returns_at_once_and_the_exit_follows() {
        let f = flood(1 << 30, Duration::from_secs(60));
        let mut execution = f.client.exec(exec_request()).await.unwrap();
        settled(&f.written, Duration::from_secs(5)).await;
        tokio::time::timeout(Duration::from_secs(5), execution.cancel())
            .await
            .expect("cancel waited behind its own full queue")
            .unwrap();
        let status = loop {
            match execution.next().await.unwrap() {
                ExecEvent::Output(_) => {}
                ExecEvent::Exit(s) => break s,
            }
        };
        assert!(status.cancelled);
        assert!(f.written.load(Ordering::SeqCst) < 1 << 30);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sender_dropped_half_way_still_writes_its_frame_whole() {
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into the array it is given.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both were just made, and are owned by nobody else.
        let (read, write) = unsafe {
            (
                std::fs::File::from_raw_fd(fds[0]),
                OwnedFd::from_raw_fd(fds[1]),
            )
        };
        // A server that says nothing and does not hang up.
        let (quiet, _kept) = tokio::io::duplex(64);
        let client = SandboxClient::over_pipe(quiet, write, Arc::new(String::new)).unwrap();
        // Far more than the pipe holds: the send waits for a reader, and is given up on.
        let data = vec![7u8; 4 << 20];
        let given_up = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            client.send_data(1, 2, &data),
        )
        .await;
        assert!(given_up.is_err(), "the pipe should have been full");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut read = read;
            let mut frame = vec![0u8; DATA_FRAME_HEADER + data.len()];
            // The read end goes back with the frame: dropped here, it would close the pipe
            // under the next send.
            let _ = tx.send(read.read_exact(&mut frame).map(|()| (frame, read)));
        });
        // The next frame goes after the whole of the first.
        client.send_data(1, 2, b"next").await.unwrap();
        let frame = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the first frame was cut: its reader still waits for the rest")
            .unwrap()
            .0;
        let (target, conn) = split_data_header(&frame[4..DATA_FRAME_HEADER].try_into().unwrap());
        assert_eq!((target, conn), (1, 2));
        assert_eq!(
            data_frame_len(frame[..4].try_into().unwrap()).unwrap(),
            Some(16 + (4 << 20))
        );
        assert!(frame[DATA_FRAME_HEADER..].iter().all(|b| *b == 7));
    }
}
