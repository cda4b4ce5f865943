//! Bounded reading of what a peer sends.
//!
//! Language servers, MCP servers, hooks and user tools run code runner does not trust
//! (most of them behind the sandbox's wall), yet their messages are read on the host. A
//! reader that grows a buffer until a newline comes, or allocates the `Content-Length` a
//! header names, lets such a peer choose how much of the host's memory it takes: one
//! message, or one huge length, is enough to take runner down. Every read here has a limit
//! that is checked *before* the memory is taken, and a peer that passes it gets a
//! [`FrameError`] that names the limit, so the caller can cut it off and say why.
//!
//! The readers are async over tokio's `AsyncRead`/`AsyncBufRead`, which `&[u8]` also
//! implements; the `*_from_slice` functions drive them over a byte slice without a runtime,
//! which is how a fuzz harness feeds them.

#![deny(clippy::arithmetic_side_effects)]

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, ReadBuf};

/// The largest body of one message (an LSP message, a line of MCP's JSON-RPC). Far above
/// any real answer (a workspace's symbols, a file's diagnostics), far below what hurts.
pub const MAX_BODY: usize = 64 << 20;

/// The longest header line of an LSP message.
pub const MAX_HEADER_LINE: usize = 64 << 10;

/// The most header lines one LSP message may have (it needs one or two).
pub const MAX_HEADER_LINES: usize = 32;

/// What a peer may send in one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// One header line, its line ending included.
    pub header_line: usize,
    /// One body.
    pub body: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_line: MAX_HEADER_LINE,
            body: MAX_BODY,
        }
    }
}

/// Why a peer's message was not read.
#[derive(Debug)]
pub enum FrameError {
    /// Reading failed (the peer is gone, or the stream broke).
    Io(io::Error),
    /// A line went past `limit` bytes without its newline.
    LineTooLong { limit: usize },
    /// A header named a body longer than `limit` (the length as it was written).
    BodyTooLarge { length: String, limit: usize },
    /// More than [`MAX_HEADER_LINES`] header lines before the blank line.
    TooManyHeaders { limit: usize },
    /// The headers ended without a readable `Content-Length`.
    NoLength,
    /// The stream ended inside a message.
    Truncated,
    /// A whole output went past `limit` bytes.
    OutputTooLarge { limit: usize },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Io(e) => write!(f, "reading failed: {e}"),
            FrameError::LineTooLong { limit } => write!(
                f,
                "a line longer than the limit of {limit} bytes without a newline"
            ),
            FrameError::BodyTooLarge { length, limit } => write!(
                f,
                "a message of {length} bytes, over the limit of {limit} bytes"
            ),
            FrameError::TooManyHeaders { limit } => {
                write!(f, "more than {limit} header lines in one message")
            }
            FrameError::NoLength => write!(f, "a message without a readable Content-Length"),
            FrameError::Truncated => write!(f, "a message cut off by the end of the stream"),
            FrameError::OutputTooLarge { limit } => {
                write!(f, "more output than the limit of {limit} bytes")
            }
        }
    }
}

impl std::error::Error for FrameError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FrameError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// Reads one line into `line` (cleared first), its `\n` included when there is one.
/// `Ok(false)`: the stream ended before any byte. A line still without its newline after
/// `limit` bytes is an error, and at most `limit` bytes are ever held.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    limit: usize,
) -> Result<bool, FrameError> {
    line.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(!line.is_empty());
        }
        let (take, done) = match available.iter().position(|b| *b == b'\n') {
            Some(at) => (at.saturating_add(1), true),
            None => (available.len(), false),
        };
        if line.len().saturating_add(take) > limit {
            return Err(FrameError::LineTooLong { limit });
        }
        line.extend_from_slice(&available[..take]);
        reader.consume(take);
        if done {
            return Ok(true);
        }
    }
}

/// Reads one LSP message (`Content-Length: N`, other headers, a blank line, N bytes of
/// body) and returns its body. `Ok(None)`: the stream ended between messages. The length is
/// checked against [`Limits::body`] before anything is allocated for it.
pub async fn read_lsp_message<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    limits: Limits,
) -> Result<Option<Vec<u8>>, FrameError> {
    let Some(length) = read_lsp_headers(reader, limits).await? else {
        return Ok(None);
    };
    let mut body = vec![0u8; length];
    match reader.read_exact(&mut body).await {
        Ok(_) => Ok(Some(body)),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(FrameError::Truncated),
        Err(e) => Err(FrameError::Io(e)),
    }
}

/// The header block of one LSP message: the body's length, once it is known to be within
/// the limit.
async fn read_lsp_headers<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    limits: Limits,
) -> Result<Option<usize>, FrameError> {
    let mut length = None;
    let mut line = Vec::new();
    let mut lines = 0usize;
    loop {
        if !read_line(reader, &mut line, limits.header_line).await? {
            return if lines == 0 {
                Ok(None)
            } else {
                Err(FrameError::Truncated)
            };
        }
        if !line.ends_with(b"\n") {
            return Err(FrameError::Truncated);
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        if text.is_empty() {
            // A blank line before any header is noise between messages, not an end.
            if lines == 0 {
                continue;
            }
            break;
        }
        lines = lines.saturating_add(1);
        if lines > MAX_HEADER_LINES {
            return Err(FrameError::TooManyHeaders {
                limit: MAX_HEADER_LINES,
            });
        }
        if let Some((name, value)) = text.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            length = Some(body_length(value.trim(), limits.body)?);
        }
    }
    length.map(Some).ok_or(FrameError::NoLength)
}

/// A `Content-Length` value as a size within `limit`.
fn body_length(value: &str, limit: usize) -> Result<usize, FrameError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(FrameError::NoLength);
    }
    let too_large = || FrameError::BodyTooLarge {
        length: value.chars().take(40).collect(),
        limit,
    };
    // Any number of digits parses: one too long for a u64 is simply over the limit.
    let n: usize = value.parse().map_err(|_| too_large())?;
    if n > limit {
        return Err(too_large());
    }
    Ok(n)
}

/// Reads a stream to its end, failing once it passes `limit` bytes (no more than
/// `limit` plus one read's worth is ever held).
pub async fn read_to_end_capped<R: AsyncRead + Unpin>(
    reader: &mut R,
    limit: usize,
) -> Result<Vec<u8>, FrameError> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = reader.read(&mut chunk).await?;
        if n == 0 {
            return Ok(out);
        }
        if out.len().saturating_add(n) > limit {
            return Err(FrameError::OutputTooLarge { limit });
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Where a [`LineBound`] records why it cut its peer off, for whoever reports the peer's
/// end (the reader itself has usually been handed to a library by then).
pub type Tripwire = Arc<OnceLock<String>>;

/// A reader of newline-delimited messages (MCP's stdio transport) that passes bytes
/// through unchanged, and fails once a line runs past its limit without a newline. The
/// library reading from it buffers a line until its newline; this makes sure that buffer
/// cannot grow past the limit. The error, with `peer` named, also goes to the tripwire.
pub struct LineBound<R> {
    inner: R,
    limit: usize,
    /// Bytes since the last newline.
    run: usize,
    peer: String,
    tripwire: Tripwire,
}

impl<R> LineBound<R> {
    pub fn new(inner: R, limit: usize, peer: impl Into<String>) -> Self {
        LineBound {
            inner,
            limit,
            run: 0,
            peer: peer.into(),
            tripwire: Tripwire::default(),
        }
    }

    /// The message set when the peer is cut off (empty until then).
    pub fn tripwire(&self) -> Tripwire {
        self.tripwire.clone()
    }

    /// The cut-off error, recorded once.
    fn trip(&mut self) -> io::Error {
        let message = format!(
            "{} sent {}; runner cut it off",
            self.peer,
            FrameError::LineTooLong { limit: self.limit }
        );
        let _ = self.tripwire.set(message.clone());
        io::Error::new(io::ErrorKind::InvalidData, message)
    }

    /// Counts the bytes just read; false when the current line is over the limit.
    fn account(&mut self, fresh: &[u8]) -> bool {
        match fresh.iter().rposition(|b| *b == b'\n') {
            Some(at) => {
                // The last newline ends every line before it; check the ones it ended.
                let mut run = self.run;
                for piece in fresh[..at].split(|b| *b == b'\n') {
                    if run.saturating_add(piece.len()) > self.limit {
                        return false;
                    }
                    run = 0;
                }
                self.run = fresh.len().saturating_sub(at).saturating_sub(1);
            }
            None => self.run = self.run.saturating_add(fresh.len()),
        }
        self.run <= self.limit
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineBound<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.tripwire.get().is_some() {
            return Poll::Ready(Err(self.trip()));
        }
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let fresh = &buf.filled()[before..];
                if this.account(fresh) {
                    Poll::Ready(Ok(()))
                } else {
                    buf.set_filled(before);
                    Poll::Ready(Err(this.trip()))
                }
            }
            other => other,
        }
    }
}

/// Polls a future over in-memory input to its end. The readers here only wait when their
/// input does, and a byte slice never does.
fn run_now<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

/// Every LSP message in `input`, in order, until the end or the first error (which is
/// last). For fuzzing and tests: the same code [`read_lsp_message`] runs.
pub fn lsp_messages_from_slice(input: &[u8], limits: Limits) -> Vec<Result<Vec<u8>, FrameError>> {
    run_now(async {
        let mut reader = input;
        let mut out = Vec::new();
        loop {
            match read_lsp_message(&mut reader, limits).await {
                Ok(Some(body)) => out.push(Ok(body)),
                Ok(None) => return out,
                Err(e) => {
                    out.push(Err(e));
                    return out;
                }
            }
        }
    })
}

/// Every line of `input` by [`read_line`], until the end or the first error.
pub fn lines_from_slice(input: &[u8], limit: usize) -> Vec<Result<Vec<u8>, FrameError>> {
    run_now(async {
        let mut reader = input;
        let mut out = Vec::new();
        let mut line = Vec::new();
        loop {
            match read_line(&mut reader, &mut line, limit).await {
                Ok(true) => out.push(Ok(std::mem::take(&mut line))),
                Ok(false) => return out,
                Err(e) => {
                    out.push(Err(e));
                    return out;
                }
            }
        }
    })
}

/// `input` read through a [`LineBound`] in reads of `chunk` bytes (at least 1): the bytes
/// that came through, or the cut-off error. What passes is always a prefix of `input`.
pub fn line_bound_from_slice(input: &[u8], limit: usize, chunk: usize) -> Result<Vec<u8>, String> {
    run_now(async {
        let mut reader = LineBound::new(input, limit, "the peer");
        let mut out = Vec::new();
        let mut buf = vec![0u8; chunk.max(1)];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) => return Ok(out),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => return Err(e.to_string()),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Limits {
        Limits {
            header_line: 64,
            body: 100,
        }
    }

    #[test]
    fn lsp_messages_are_read_in_turn() {
        let input = b"Content-Length: 2\r\n\r\n{}Content-Type: x\r\ncontent-length:3\r\n\r\n[1]";
        let got = lsp_messages_from_slice(input, small());
        let bodies: Vec<Vec<u8>> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(bodies, [b"{}".to_vec(), b"[1]".to_vec()]);
    }

    #[test]
    fn a_length_over_the_limit_is_refused_before_any_allocation() {
        for length in ["101", "18446744073709551615", "99999999999999999999999999"] {
            let input = format!("Content-Length: {length}\r\n\r\n{{}}");
            let got = lsp_messages_from_slice(input.as_bytes(), small());
            match &got[..] {
                [Err(FrameError::BodyTooLarge { limit: 100, .. })] => {}
                other => panic!("{length}: {other:?}"),
            }
        }
        let ok = lsp_messages_from_slice(b"Content-Length: 100\r\n\r\n", small());
        assert!(matches!(&ok[..], [Err(FrameError::Truncated)]), "{ok:?}");
    }

    #[test]
    fn a_header_line_without_an_end_is_cut_at_its_limit() {
        let mut input = b"Content-Length: 2\r\nX-Long: ".to_vec();
        input.extend(std::iter::repeat_n(b'a', 1000));
        let got = lsp_messages_from_slice(&input, small());
        assert!(
            matches!(&got[..], [Err(FrameError::LineTooLong { limit: 64 })]),
            "{got:?}"
        );
        let many = "A: b\r\n".repeat(MAX_HEADER_LINES + 1);
        let got = lsp_messages_from_slice(many.as_bytes(), small());
        assert!(
            matches!(&got[..], [Err(FrameError::TooManyHeaders { .. })]),
            "{got:?}"
        );
    }

    #[test]
    fn headers_without_a_length_or_with_a_bad_one_are_errors() {
        for input in [
            &b"Content-Type: x\r\n\r\n"[..],
            b"Content-Length: -1\r\n\r\n",
            b"Content-Length: 1e3\r\n\r\n",
        ] {
            let got = lsp_messages_from_slice(input, small());
            assert!(matches!(&got[..], [Err(FrameError::NoLength)]), "{got:?}");
        }
    }

    #[test]
    fn lines_keep_their_ends_and_a_long_one_fails() {
        let got = lines_from_slice(b"ab\ncd", 8);
        let lines: Vec<Vec<u8>> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(lines, [b"ab\n".to_vec(), b"cd".to_vec()]);
        let got = lines_from_slice(b"123456789\n", 8);
        assert!(matches!(
            &got[..],
            [Err(FrameError::LineTooLong { limit: 8 })]
        ));
        // Exactly at the limit, newline included, is fine.
        assert_eq!(lines_from_slice(b"1234567\n", 8).len(), 1);
    }

    #[test]
    fn a_line_bound_passes_lines_and_cuts_a_run_without_newline() {
        let text = b"{\"a\":1}\n{\"b\":2}\n";
        for chunk in [1, 3, 64] {
            assert_eq!(
                line_bound_from_slice(text, 8, chunk).unwrap(),
                text.to_vec()
            );
        }
        let long = [b"ok\n".as_slice(), &[b'x'; 50]].concat();
        for chunk in [1, 7, 100] {
            let e = line_bound_from_slice(&long, 20, chunk).unwrap_err();
            assert!(e.contains("the peer") && e.contains("20 bytes"), "{e}");
        }
        // A long line inside one read, with a newline after it, is caught too.
        let inside = [&[b'x'; 50][..], b"\nshort\n"].concat();
        assert!(line_bound_from_slice(&inside, 20, 1000).is_err());
    }

    #[test]
    fn a_capped_read_stops_at_its_limit() {
        let data = vec![1u8; 1000];
        let got = run_now(read_to_end_capped(&mut &data[..], 1000)).unwrap();
        assert_eq!(got.len(), 1000);
        let e = run_now(read_to_end_capped(&mut &data[..], 999)).unwrap_err();
        assert!(matches!(e, FrameError::OutputTooLarge { limit: 999 }));
    }
}
