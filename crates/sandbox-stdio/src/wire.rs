//! The messages of `runner sandbox serve --stdio`: one JSON object per line each way.
//!
//! JSON lines rather than the sandbox protocol's length-prefixed frames, because the
//! other side is a harness written in Python (or anything else) that should need nothing
//! but a JSON parser and base64 to speak it. Every request carries an `id` chosen by the
//! caller; every line runner writes back names the `id` it answers, so several requests
//! may be in flight at once and their answers arrive in any order. docs/PYTHON.md is the
//! reference a client author reads; this module is that reference in types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The protocol's version, told in the first line ([`Ready`]). A client refuses a runner
/// whose version it does not know.
pub const PROTOCOL: u32 = 1;

/// The most bytes of file data one line carries (before base64). Larger files travel as
/// several lines, so neither side holds one enormous line.
pub const CHUNK: usize = 1 << 20;

/// One request line.
#[derive(Debug, Deserialize)]
pub struct Incoming {
    pub id: u64,
    #[serde(flatten)]
    pub request: Request,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Run a program (no shell reads `argv`).
    Exec(Exec),
    /// End a running `exec` (its whole process group); its answer still arrives, with
    /// `cancelled` set.
    Cancel { target: u64 },
    /// A file's bytes, sent as `chunk` lines before the answer.
    ReadFile(ReadFile),
    /// Start writing a file; with `more`, further `write_chunk` lines of the same id
    /// follow, the last one with `more: false`. The file is in place only once the last
    /// chunk is written (a temporary file beside it is renamed over it).
    WriteFile(WriteFile),
    /// The next piece of a `write_file` of the same id.
    WriteChunk(WriteChunk),
}

#[derive(Debug, Deserialize)]
pub struct Exec {
    pub argv: Vec<String>,
    /// The program's standard input, base64; absent: it reads end of file at once.
    #[serde(default, with = "b64_opt")]
    pub input: Option<Vec<u8>>,
    /// Set over the sandbox's own environment (which is an allow-list, never the host's).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Where the program starts: absolute, or relative to the sandbox's working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Run as this user (only where the wall has users to switch between).
    #[serde(default)]
    pub user: Option<String>,
    /// Seconds; past it the program and every process it started are killed and the
    /// answer has `timed_out` set.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// Bytes of stdout and stderr kept in all; past it the head and tail are kept and the
    /// answer's `dropped_bytes` counts the rest.
    #[serde(default)]
    pub output_limit: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub struct ReadFile {
    pub path: String,
    /// Refuse (`too_large`) a file larger than this.
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub struct WriteFile {
    pub path: String,
    #[serde(default, with = "b64_opt")]
    pub data: Option<Vec<u8>>,
    #[serde(default)]
    pub more: bool,
}

#[derive(Debug, Deserialize)]
pub struct WriteChunk {
    #[serde(default, with = "b64_opt")]
    pub data: Option<Vec<u8>>,
    #[serde(default)]
    pub more: bool,
}

/// The first line runner writes: the sandbox is up.
#[derive(Debug, Serialize)]
pub struct Ready {
    pub protocol: u32,
    /// `landlock`, `docker` or `none`.
    pub backend: &'static str,
    /// The working directory of commands that name none.
    pub workdir: String,
    /// Whether `exec` takes a `user` (a task image's container, whose root may switch).
    pub users: bool,
    /// The wall in one line, as `runner run` prints it first.
    pub wall: String,
}

/// What an `exec` ended with.
#[derive(Debug, Serialize, Default)]
pub struct ExecResult {
    /// The exit status; `None` when a signal ended it.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    #[serde(with = "b64")]
    pub stdout: Vec<u8>,
    #[serde(with = "b64")]
    pub stderr: Vec<u8>,
    pub timed_out: bool,
    pub cancelled: bool,
    pub dropped_bytes: u64,
}

/// The kinds of failure a client tells apart; each maps onto its language's own
/// (`FileNotFoundError`, `PermissionError`, `IsADirectoryError` in Python).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    NotFound,
    PermissionDenied,
    IsADirectory,
    NotADirectory,
    /// A file over the read's `max_bytes`.
    TooLarge,
    /// `user` where the wall has no users to switch between.
    UserUnsupported,
    /// A request runner cannot parse, or an operation it does not have.
    InvalidRequest,
    /// The sandbox failed (its server died, the engine went away): runner's failure.
    Sandbox,
    /// The operation failed for another reason; the message says which.
    Io,
}

/// A failed request: its kind, a sentence, and the path it is about.
#[derive(Debug, Clone, Serialize, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub kind: ErrorKind,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl Failure {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
            path: None,
        }
    }

    pub fn at(kind: ErrorKind, path: &str, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
            path: Some(path.to_string()),
        }
    }
}

/// One line runner writes, but for the first.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Outgoing {
    /// A piece of a file being read, ahead of the answer.
    Chunk {
        id: u64,
        #[serde(with = "b64")]
        chunk: Vec<u8>,
    },
    Ok {
        id: u64,
        ok: bool,
        result: serde_json::Value,
    },
    Err {
        id: u64,
        ok: bool,
        error: Failure,
    },
    /// An `exec`'s answer, kept typed until it is written ([`Outgoing::line`]).
    Exec {
        id: u64,
        result: ExecResult,
    },
}

impl Outgoing {
    /// The line as bytes, newline included. A file's chunk and a command's output are
    /// written by hand: base64 needs no escaping, and serde's check of every byte of a
    /// 50 MiB string for quotes is most of what a large transfer costs.
    pub fn line(&self) -> serde_json::Result<Vec<u8>> {
        use base64::Engine;
        use base64::engine::general_purpose::STANDARD;
        let mut out = match self {
            Outgoing::Chunk { id, chunk } => {
                let mut out = format!("{{\"id\":{id},\"chunk\":\"");
                STANDARD.encode_string(chunk, &mut out);
                out.push_str("\"}");
                out.into_bytes()
            }
            Outgoing::Exec { id, result: r } => {
                let mut out = format!(
                    "{{\"id\":{id},\"ok\":true,\"result\":{{\"code\":{},\"signal\":{},\"timed_out\":{},\"cancelled\":{},\"dropped_bytes\":{},\"stdout\":\"",
                    serde_json::to_string(&r.code)?,
                    serde_json::to_string(&r.signal)?,
                    r.timed_out,
                    r.cancelled,
                    r.dropped_bytes
                );
                STANDARD.encode_string(&r.stdout, &mut out);
                out.push_str("\",\"stderr\":\"");
                STANDARD.encode_string(&r.stderr, &mut out);
                out.push_str("\"}}");
                out.into_bytes()
            }
            other => serde_json::to_vec(other)?,
        };
        out.push(b'\n');
        Ok(out)
    }

    pub fn answer(id: u64, answer: Result<serde_json::Value, Failure>) -> Outgoing {
        match answer {
            Ok(result) => Outgoing::Ok {
                id,
                ok: true,
                result,
            },
            Err(error) => Outgoing::Err {
                id,
                ok: false,
                error,
            },
        }
    }
}

mod b64 {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::Serializer;

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }
}

mod b64_opt {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let text = Option::<std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.map(|t| STANDARD.decode(t.as_bytes()))
            .transpose()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_with_their_id_and_bytes() {
        let line = r#"{"id":4,"op":"exec","argv":["cat"],"input":"AP8=","timeout":1.5}"#;
        let parsed: Incoming = serde_json::from_str(line).unwrap();
        assert_eq!(parsed.id, 4);
        match parsed.request {
            Request::Exec(e) => {
                assert_eq!(e.argv, ["cat"]);
                assert_eq!(e.input.as_deref(), Some(&[0u8, 255][..]));
                assert_eq!(e.timeout, Some(1.5));
            }
            other => panic!("parsed as {other:?}"),
        }
        // An operation runner does not have is a parse error, not something else.
        assert!(serde_json::from_str::<Incoming>(r#"{"id":1,"op":"format_disk"}"#).is_err());
    }

    #[test]
    fn answers_name_their_id_and_the_path_of_a_failure() {
        let failed = Outgoing::answer(9, Err(Failure::at(ErrorKind::NotFound, "/w/x", "no /w/x")));
        let line = serde_json::to_value(&failed).unwrap();
        assert_eq!(line["id"], 9);
        assert_eq!(line["ok"], false);
        assert_eq!(line["error"]["kind"], "not_found");
        assert_eq!(line["error"]["path"], "/w/x");
        let chunk = serde_json::to_value(Outgoing::Chunk {
            id: 2,
            chunk: vec![0, 1],
        })
        .unwrap();
        assert_eq!(chunk, serde_json::json!({"id": 2, "chunk": "AAE="}));
    }

    #[test]
    fn hand_written_lines_are_the_json_serde_would_write() {
        let chunk = Outgoing::Chunk {
            id: 2,
            chunk: vec![0, 1, 255],
        };
        let line = chunk.line().unwrap();
        assert_eq!(line.last(), Some(&b'\n'));
        let parsed: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(parsed, serde_json::to_value(&chunk).unwrap());
        let result = ExecResult {
            code: None,
            signal: Some(9),
            stdout: b"out\"\n".to_vec(),
            stderr: vec![0xc3, 0x28],
            timed_out: true,
            cancelled: false,
            dropped_bytes: 7,
        };
        let line = Outgoing::Exec { id: 3, result }.line().unwrap();
        let parsed: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            parsed,
            serde_json::json!({"id": 3, "ok": true, "result": {"code": null, "signal": 9,
                "timed_out": true, "cancelled": false, "dropped_bytes": 7,
                "stdout": "b3V0Igo=", "stderr": "wyg="}})
        );
    }
}
