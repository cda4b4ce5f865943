//! The sandbox protocol: the requests the controller sends and the responses the in-sandbox
//! server returns.
//!
//! These types are the one seam between the host and whatever isolation boundary runs the
//! server, so both sides import them from here and nothing is duplicated. Everything is plain
//! data (serde), framed as length-prefixed JSON (see [`write_frame`]). Byte payloads travel as
//! base64 so that binary files and non-UTF-8 command output survive the trip unchanged.
//!
//! Paths are absolute paths *as seen inside the sandbox*. The server resolves each of them
//! beneath its allowed roots itself; the client never assumes a path is safe.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub mod network;
pub mod wall;
pub use network::Network;
pub use wall::{Probe, SelfTestRequest, WallFacts};

/// Bytes of one proxied connection that may be in flight, each way, before the receiver
/// acknowledges them ([`Request::NetAck`], [`Response::NetAck`]).
pub const NET_WINDOW: u64 = 8 << 20;

/// The largest piece of a proxied connection in one data frame.
pub const NET_CHUNK: usize = 1024 * 1024;

/// Upper bound for one frame. A frame this large is a bug or an attack, not a message.
pub const MAX_FRAME_BYTES: usize = 256 * 1024 * 1024;

/// A request with the id its responses will carry. Ids let several requests be in flight at
/// once over one pipe (a long `exec` must not block a `read`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestFrame {
    pub id: u64,
    pub request: Request,
}

/// A response to the request with the same id. Most requests get exactly one response;
/// `exec` gets any number of [`Response::Output`] chunks followed by one [`Response::Exit`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResponseFrame {
    pub id: u64,
    pub response: Response,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Exec(ExecRequest),
    /// Kill the process group of a running `exec` (the request with id `target`).
    Cancel {
        target: u64,
    },
    /// Bytes for the standard input of a running interactive `exec`, in order.
    Input {
        target: u64,
        #[serde(with = "bytes_b64")]
        data: Vec<u8>,
    },
    /// Close the standard input of a running interactive `exec` (it reads end of file).
    CloseInput {
        target: u64,
    },
    Read(ReadRequest),
    Write(WriteRequest),
    Stat {
        path: PathBuf,
    },
    /// The entries of one directory.
    List {
        path: PathBuf,
    },
    Glob(GlobRequest),
    Grep(GrepRequest),
    /// All files beneath a directory, for the `list` tool's tree.
    Tree(TreeRequest),
    Remove {
        path: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    /// Listen on the sandbox's own loopback at `port` for the network proxy: each accepted
    /// connection is announced with [`Response::NetOpened`] and its bytes travel as
    /// [`Request::NetData`] / [`Response::NetData`]. The server does not interpret them;
    /// the controller on the host reads the proxy request and decides.
    ProxyListen {
        port: u16,
        /// Name the processes that hold each connection in [`Response::NetOpened`], for
        /// rules that let only some programs reach a host. Off unless such a rule exists:
        /// finding them walks `/proc` before the connection is announced.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        identify: bool,
    },
    /// Bytes for connection `conn` of the listener `target` (sent as a data frame, see
    /// [`write_data_frame`]). No response: ordering and flow control are the streams' own.
    NetData {
        target: u64,
        conn: u64,
        #[serde(with = "bytes_b64")]
        data: Vec<u8>,
    },
    /// The host read `bytes` of the connection's data: the server may read that much more
    /// from the socket. No response.
    NetAck {
        target: u64,
        conn: u64,
        bytes: u64,
    },
    /// The far end finished sending: shut the socket's write half once what is queued is
    /// written. No response.
    NetEof {
        target: u64,
        conn: u64,
    },
    /// Drop the connection now (refused, failed, over a limit). No response.
    NetClose {
        target: u64,
        conn: u64,
    },
    /// Try the wall from inside before the first tool call (see [`wall`]); answered with
    /// [`Response::SelfTest`].
    SelfTest(SelfTestRequest),
}

/// A process holding the client end of a proxied connection, as the sandbox's server saw
/// it through `/proc`: what a rule on the programs that may reach a host judges.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: i32,
    /// Its executable (`/proc/PID/exe`): the file it was started from. `None` when the
    /// process hides it (not dumpable) or is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// The loader variables it was started with (`LD_PRELOAD=…`), as `NAME=value`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loader: Vec<String>,
    /// Files it runs code from (executable mappings) that lie where the sandbox can write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable_code: Vec<String>,
    /// What of the above could not be read, and why: then it cannot be vouched for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unread: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecRequest {
    /// Shell source, run with `bash -c` (or `sh -c` where the image has no bash).
    pub command: String,
    pub cwd: PathBuf,
    /// The complete environment of the command: nothing of the server's own is inherited.
    pub env: Vec<(String, String)>,
    pub timeout_ms: u64,
    #[serde(default, with = "bytes_b64_opt")]
    pub stdin: Option<Vec<u8>>,
    /// Bytes of output kept in total; beyond it the head and tail are kept and the middle is
    /// counted in [`ExecStatus::dropped_bytes`].
    pub output_limit: u64,
    /// Keep the command's standard input open for [`Request::Input`] (a long-lived process
    /// spoken to over its stdio, such as an MCP server) instead of closing it after
    /// `stdin`.
    #[serde(default)]
    pub interactive: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadRequest {
    pub path: PathBuf,
    /// Byte offset to start at, so that big files can be read in pieces.
    #[serde(default)]
    pub offset: u64,
    pub max_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WriteRequest {
    pub path: PathBuf,
    #[serde(with = "bytes_b64")]
    pub data: Vec<u8>,
    /// Refuse with [`ErrorKind::Stale`] unless the file still has this stamp; `Some(None)`
    /// (serialised as `"absent"`) demands that the file does not exist yet.
    #[serde(default)]
    pub precondition: Option<WritePrecondition>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WritePrecondition {
    Unchanged(FileStamp),
    Absent,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GlobRequest {
    pub root: PathBuf,
    pub pattern: String,
    pub limit: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GrepRequest {
    pub root: PathBuf,
    pub pattern: String,
    pub include: Option<String>,
    pub limit: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TreeRequest {
    pub root: PathBuf,
    pub ignore: Vec<String>,
    pub limit: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    Output(ExecOutput),
    Exit(ExecStatus),
    Read(ReadResponse),
    Written(WriteResponse),
    Stat(Stat),
    List {
        entries: Vec<DirEntry>,
    },
    Glob(GlobOutcome),
    Grep(GrepOutcome),
    Tree(TreeOutcome),
    Done,
    Error(ApiError),
    /// The proxy listener is bound; connections follow.
    Listening {
        port: u16,
    },
    /// A process in the sandbox connected to the proxy listener.
    NetOpened {
        conn: u64,
        /// Every process that holds the client end, when the listener was asked to
        /// identify programs (empty: none could be found).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        holders: Vec<Holder>,
    },
    /// Bytes the process sent on the connection (a data frame on the wire).
    NetData {
        conn: u64,
        #[serde(with = "bytes_b64")]
        data: Vec<u8>,
    },
    /// The server wrote `bytes` of the host's data to the socket.
    NetAck {
        conn: u64,
        bytes: u64,
    },
    /// The process finished sending (it shut down its write half).
    NetEof {
        conn: u64,
    },
    /// The connection is gone for a reason worth recording: a failure on the sandbox's
    /// side, or cut because the command that opened it ended.
    NetClosed {
        conn: u64,
        reason: String,
    },
    /// The process hung up without a clean close (a reset, as a client that closes with
    /// unread data in its socket sends): its end of the exchange, not a failure.
    NetHungUp {
        conn: u64,
    },
    /// What the self-test's probes saw.
    SelfTest(WallFacts),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecOutput {
    pub stream: OutputStream,
    #[serde(with = "bytes_b64")]
    pub data: Vec<u8>,
    /// True for the chunk that carries the kept tail after output was dropped.
    #[serde(default)]
    pub tail: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecStatus {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    pub dropped_bytes: u64,
}

/// Identifies one version of a file. The inode is part of it because atomic writes replace
/// the inode, which catches a rewrite that kept the size and landed in the same mtime tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileStamp {
    pub mtime_ns: i64,
    pub size: u64,
    pub ino: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadResponse {
    #[serde(with = "bytes_b64")]
    pub data: Vec<u8>,
    /// The whole file's size, so a caller reading in pieces knows when it is done.
    pub size: u64,
    pub stamp: FileStamp,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WriteResponse {
    pub stamp: FileStamp,
    pub created: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    File,
    Dir,
    /// A symlink whose target could not be resolved beneath the roots (dangling or escaping).
    Symlink,
    Other,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stat {
    /// The path after resolving symlinks beneath the roots.
    pub real_path: PathBuf,
    pub kind: FileKind,
    pub stamp: FileStamp,
    pub mode: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    /// The kind after following a symlink beneath the roots.
    pub kind: FileKind,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileHit {
    pub path: PathBuf,
    pub mtime_ns: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GlobOutcome {
    /// Newest first.
    pub files: Vec<FileHit>,
    pub truncated: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GrepMatch {
    pub path: PathBuf,
    pub line_number: u64,
    pub text: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GrepOutcome {
    /// Grouped by file, files newest first, lines ascending within a file.
    pub matches: Vec<GrepMatch>,
    pub total_matches: usize,
    pub truncated: bool,
    /// Some paths could not be read and were skipped.
    pub partial: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TreeOutcome {
    /// Relative to the requested root, sorted.
    pub files: Vec<PathBuf>,
    pub truncated: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    NotFound,
    IsDirectory,
    NotADirectory,
    /// A read of something that is neither a file nor a directory (a device, socket or
    /// pipe): refused before it is opened for reading.
    NotAFile,
    /// The path is not beneath any root the sandbox was given.
    OutsideRoots,
    /// The path lies beneath a root, but a symlink on the way points out of it.
    SymlinkEscape,
    /// A write precondition failed: the file changed since it was read.
    Stale,
    /// The file exists although the write demanded that it did not.
    AlreadyExists,
    ReadOnly,
    PermissionDenied,
    InvalidArgument,
    InvalidPattern,
    Io,
}

/// An error with the path it is about and a message meant for a human or a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    pub path: Option<PathBuf>,
}

// Written out rather than derived: this crate stays plain data with serde alone.
impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError {
            kind,
            message: message.into(),
            path: None,
        }
    }

    pub fn at(kind: ErrorKind, path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        ApiError {
            kind,
            message: message.into(),
            path: Some(path.into()),
        }
    }
}

/// Writes one frame: a 4-byte big-endian length, then that many bytes of JSON.
pub fn write_frame<T: Serialize>(out: &mut impl Write, message: &T) -> io::Result<()> {
    let json = serde_json::to_vec(message).map_err(io::Error::other)?;
    let len = encode_len(json.len())?;
    // One buffer, so an unbuffered writer makes one system call per frame.
    out.write_all(&[&len[..], &json].concat())
        .and_then(|()| out.flush())
}

/// Reads one frame; `Ok(None)` at a clean end of stream (the peer closed between frames).
pub fn read_frame<T: for<'de> Deserialize<'de>>(input: &mut impl Read) -> io::Result<Option<T>> {
    match read_message(input)? {
        None => Ok(None),
        Some(Message::Json(body)) => parse_frame(&body).map(Some),
        Some(Message::Data { .. }) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bad frame: a data frame where a message was expected",
        )),
    }
}

/// The flag in a frame's length word that marks a data frame. JSON frames never set it:
/// their length is capped far below.
const DATA_FLAG: u32 = 0x8000_0000;
/// A data frame's header after the length: the listener's request id and the connection.
const DATA_HEADER: usize = 16;
/// A data frame's bytes before its payload: the length word and the header.
pub const DATA_FRAME_HEADER: usize = 4 + DATA_HEADER;

/// One frame as it arrives: JSON, or the raw bytes of a proxied connection. Data frames
/// exist because a download through the proxy is bulk data: base64 inside JSON would cost
/// a third more bytes and two passes over each.
pub enum Message {
    Json(Vec<u8>),
    Data {
        target: u64,
        conn: u64,
        data: Vec<u8>,
    },
}

/// Reads one frame of either kind; `Ok(None)` at a clean end of stream.
pub fn read_message(input: &mut impl Read) -> io::Result<Option<Message>> {
    match read_message_head(input)? {
        None => Ok(None),
        Some(MessageHead::Json(body)) => Ok(Some(Message::Json(body))),
        Some(MessageHead::Data { target, conn, len }) => {
            let data = read_payload(input, len)?;
            Ok(Some(Message::Data { target, conn, data }))
        }
    }
}

/// A frame up to a data frame's payload, which the caller then moves as it likes (the
/// server hands it to a socket without copying it where it can).
pub enum MessageHead {
    Json(Vec<u8>),
    Data { target: u64, conn: u64, len: usize },
}

pub fn read_message_head(input: &mut impl Read) -> io::Result<Option<MessageHead>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    if let Some(total) = data_frame_len(len)? {
        let mut header = [0u8; DATA_HEADER];
        input.read_exact(&mut header)?;
        let (target, conn) = split_data_header(&header);
        let len = total - DATA_HEADER;
        return Ok(Some(MessageHead::Data { target, conn, len }));
    }
    let body = read_payload(input, decode_len(len)?)?;
    Ok(Some(MessageHead::Json(body)))
}

/// What a frame's length word alone may make a reader reserve. The word comes from the
/// other side of the wall: a peer that announces 256 MiB and sends nothing must not cost
/// 256 MiB. Past this, the buffer grows with the bytes that really arrive. One proxied
/// chunk and its header fit, so bulk data is still read into one allocation.
pub const RESERVE_AHEAD: usize = NET_CHUNK + 64 * 1024;

/// A frame's body of `len` bytes, read into spare capacity (no zeroing of a buffer the read
/// overwrites anyway), reserving ahead at most [`RESERVE_AHEAD`].
pub fn read_payload(input: &mut impl Read, len: usize) -> io::Result<Vec<u8>> {
    let mut data = Vec::with_capacity(len.min(RESERVE_AHEAD));
    if input.take(len as u64).read_to_end(&mut data)? < len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(data)
}

pub fn parse_frame<T: for<'de> Deserialize<'de>>(body: &[u8]) -> io::Result<T> {
    serde_json::from_slice(body)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad frame: {e}")))
}

/// The bytes of a data frame up to its payload: length word (flagged), target, connection.
pub fn data_frame_header(target: u64, conn: u64, len: usize) -> io::Result<[u8; 4 + DATA_HEADER]> {
    let total = encode_len(len + DATA_HEADER)?;
    let mut out = [0u8; 4 + DATA_HEADER];
    out[..4].copy_from_slice(&(u32::from_be_bytes(total) | DATA_FLAG).to_be_bytes());
    out[4..12].copy_from_slice(&target.to_be_bytes());
    out[12..].copy_from_slice(&conn.to_be_bytes());
    Ok(out)
}

/// Splits a data frame's header, read after its length word, into target and connection.
pub fn split_data_header(header: &[u8; DATA_HEADER]) -> (u64, u64) {
    let (t, c) = header.split_at(8);
    (
        u64::from_be_bytes(t.try_into().unwrap_or_default()),
        u64::from_be_bytes(c.try_into().unwrap_or_default()),
    )
}

/// Whether a length word announces a data frame, and the frame's length after the word.
pub fn data_frame_len(word: [u8; 4]) -> io::Result<Option<usize>> {
    let word = u32::from_be_bytes(word);
    if word & DATA_FLAG == 0 {
        return Ok(None);
    }
    let total = decode_len((word & !DATA_FLAG).to_be_bytes())?;
    if total < DATA_HEADER {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bad frame: a data frame shorter than its header",
        ));
    }
    Ok(Some(total))
}

/// Writes one data frame.
pub fn write_data_frame(
    out: &mut impl Write,
    target: u64,
    conn: u64,
    data: &[u8],
) -> io::Result<()> {
    out.write_all(&data_frame_header(target, conn, data.len())?)
        .and_then(|()| out.write_all(data))
        .and_then(|()| out.flush())
}

pub fn encode_len(len: usize) -> io::Result<[u8; 4]> {
    if len > MAX_FRAME_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("frame of {len} bytes exceeds the {MAX_FRAME_BYTES}-byte limit"),
        ));
    }
    Ok((len as u32).to_be_bytes())
}

pub fn decode_len(len: [u8; 4]) -> io::Result<usize> {
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame header announces {len} bytes, over the {MAX_FRAME_BYTES}-byte limit"),
        ));
    }
    Ok(len)
}

mod bytes_b64 {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

mod bytes_b64_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => super::bytes_b64::serialize(b, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        #[derive(Deserialize)]
        struct Wrapper(#[serde(with = "super::bytes_b64")] Vec<u8>);
        Ok(Option::<Wrapper>::deserialize(d)?.map(|Wrapper(b)| b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_binary_payloads() {
        let frame = RequestFrame {
            id: 7,
            request: Request::Write(WriteRequest {
                path: "/w/a.bin".into(),
                data: vec![0, 159, 255, b'\n'],
                precondition: Some(WritePrecondition::Absent),
            }),
        };
        let mut buf = Vec::new();
        write_frame(&mut buf, &frame).unwrap();
        let back: RequestFrame = read_frame(&mut buf.as_slice()).unwrap().unwrap();
        assert_eq!(back.id, 7);
        match back.request {
            Request::Write(w) => {
                assert_eq!(w.data, vec![0, 159, 255, b'\n']);
                assert_eq!(w.precondition, Some(WritePrecondition::Absent));
            }
            other => panic!("wrong request: {other:?}"),
        }
    }

    #[test]
    fn clean_eof_between_frames_is_none_but_a_cut_frame_is_an_error() {
        let mut empty: &[u8] = &[];
        assert!(read_frame::<RequestFrame>(&mut empty).unwrap().is_none());

        let mut buf = Vec::new();
        write_frame(
            &mut buf,
            &ResponseFrame {
                id: 1,
                response: Response::Done,
            },
        )
        .unwrap();
        buf.truncate(buf.len() - 2);
        assert!(read_frame::<ResponseFrame>(&mut buf.as_slice()).is_err());
    }

    #[test]
    fn data_frames_carry_raw_bytes_between_json_frames() {
        let mut buf = Vec::new();
        let payload: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        write_data_frame(&mut buf, 9, 4, &payload).unwrap();
        write_frame(
            &mut buf,
            &ResponseFrame {
                id: 9,
                response: Response::NetOpened {
                    conn: 5,
                    holders: vec![Holder {
                        pid: 7,
                        program: Some("/usr/bin/git".into()),
                        ..Holder::default()
                    }],
                },
            },
        )
        .unwrap();
        // No base64: the frame is the payload plus a fixed header (and the small JSON frame).
        assert!(buf.len() < payload.len() + 150);
        let mut input = buf.as_slice();
        match read_message(&mut input).unwrap() {
            Some(Message::Data { target, conn, data }) => {
                assert_eq!((target, conn), (9, 4));
                assert_eq!(data, payload);
            }
            _ => panic!("expected a data frame"),
        }
        let next: ResponseFrame = read_frame(&mut input).unwrap().unwrap();
        assert!(
            matches!(&next.response, Response::NetOpened { conn: 5, holders } if holders[0].program.as_deref() == Some("/usr/bin/git"))
        );
        // A data frame is never mistaken for a message.
        let mut again = Vec::new();
        write_data_frame(&mut again, 1, 1, b"x").unwrap();
        assert!(read_frame::<RequestFrame>(&mut again.as_slice()).is_err());
        // Nor can a data frame claim less than its own header.
        let short = (DATA_FLAG | 3).to_be_bytes();
        assert!(read_message(&mut short.as_slice()).is_err());
    }

    #[test]
    fn oversized_frame_header_is_refused_before_allocating() {
        let mut input: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        let err = read_frame::<RequestFrame>(&mut input).unwrap_err();
        assert!(err.to_string().contains("over the"), "{err}");
    }
}
