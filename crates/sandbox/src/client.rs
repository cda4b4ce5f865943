//! The controller's side of the sandbox protocol.
//!
//! One client owns one connection to a server. Requests carry ids so that many can be in
//! flight at once; a reader task routes each response frame to the request that is waiting
//! for it. If the server dies, every waiting request fails with a message that says so
//! (and what the server last printed), instead of hanging.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::api::{
    ApiError, DATA_FRAME_HEADER, DirEntry, ExecRequest, ExecStatus, GlobOutcome, GlobRequest,
    GrepOutcome, GrepRequest, ReadRequest, ReadResponse, Request, RequestFrame, Response,
    ResponseFrame, Stat, TreeOutcome, TreeRequest, WritePrecondition, WriteRequest, WriteResponse,
    data_frame_header, data_frame_len, decode_len, encode_len, split_data_header,
};
use crate::splice::{PipeWriter, SplicePipe};

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

type Pending = Mutex<HashMap<u64, mpsc::UnboundedSender<Response>>>;

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
        Self::start_router(reader, Writer::Stream(Box::new(writer)), diagnostics)
    }

    /// A client whose frames go into the server's input pipe, so that proxied downloads
    /// can be spliced in ([`Self::send_spliced`]).
    pub(crate) fn over_pipe(
        reader: impl AsyncRead + Send + Unpin + 'static,
        pipe: OwnedFd,
        diagnostics: Arc<dyn Fn() -> String + Send + Sync>,
    ) -> std::io::Result<Self> {
        let writer = Writer::Pipe(PipeWriter::new(pipe)?);
        Ok(Self::start_router(reader, writer, diagnostics))
    }

    fn start_router(
        reader: impl AsyncRead + Send + Unpin + 'static,
        writer: Writer,
        diagnostics: Arc<dyn Fn() -> String + Send + Sync>,
    ) -> Self {
        let splices = matches!(writer, Writer::Pipe(_));
        let shared = Arc::new(Shared {
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
            splices,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed: Mutex::new(None),
            diagnostics,
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

    async fn start(
        &self,
        request: Request,
    ) -> Result<(u64, mpsc::UnboundedReceiver<Response>), SandboxError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
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

    /// Starts the proxy listener on the sandbox's loopback; its connections arrive on the
    /// returned receiver (see [`crate::api::Request::ProxyListen`]).
    pub async fn proxy_listen(
        &self,
        port: u16,
    ) -> Result<(u64, mpsc::UnboundedReceiver<Response>), SandboxError> {
        let (id, mut rx) = self.start(Request::ProxyListen { port }).await?;
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
            None => Err(self.disconnected()),
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
            None => Err(self.disconnected()),
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
                crate::api::ErrorKind::InvalidArgument,
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
    Output(crate::api::ExecOutput),
    Exit(ExecStatus),
}

pub struct Execution {
    id: u64,
    rx: mpsc::UnboundedReceiver<Response>,
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
            None => Err(self.client.disconnected()),
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

    /// Asks the server to kill the command's process group; its exit still arrives.
    pub async fn cancel(&self) -> Result<(), SandboxError> {
        self.client
            .call(Request::Cancel { target: self.id })
            .await
            .map(|_| ())
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
            Ok(Some(total)) if total > 16 + crate::api::NET_CHUNK => {
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
                let pending = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(tx) = pending.get(&target) {
                    let _ = tx.send(Response::NetData { conn, data });
                }
                continue;
            }
            Ok(None) => {}
            Err(e) => break e.to_string(),
        }
        let body_len = match decode_len(len) {
            Ok(n) => n,
            Err(e) => break e.to_string(),
        };
        let mut body = vec![0u8; body_len];
        if let Err(e) = reader.read_exact(&mut body).await {
            break format!("the server's answer was cut off: {e}");
        }
        let frame: ResponseFrame = match serde_json::from_slice(&body) {
            Ok(f) => f,
            Err(e) => break format!("the server sent an unreadable frame: {e}"),
        };
        let pending = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = pending.get(&frame.id) {
            let _ = tx.send(frame.response);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::FromRawFd;

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
