//! Where a forwarded request's body ends.
//!
//! A plain-HTTP connection through the proxy is judged by its first request. Whatever a
//! client sends after that request's body (a second, pipelined request, naming any host)
//! would reach the same origin, and an origin that serves many sites (a CDN) would route
//! it by its own `Host`. So the relay sends the origin one request per connection: the
//! head, then exactly the body its framing announces, and nothing after it.

/// How much of the client's stream after the head belongs to the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// `Content-Length` bytes (none without a body).
    Length(u64),
    /// `Transfer-Encoding: chunked`, read as it comes.
    Chunked(Chunked),
}

impl Body {
    /// How many of `data` (the next bytes from the client) still belong to the request;
    /// the rest go nowhere.
    pub fn take(&mut self, data: &[u8]) -> usize {
        match self {
            Body::Length(left) => {
                let n = (*left).min(data.len() as u64);
                *left -= n;
                n as usize
            }
            Body::Chunked(c) => c.take(data),
        }
    }

    /// [`Body::take`], also appending what of `data` is the body's content (without the
    /// chunks' framing) to `content`.
    pub fn take_content(&mut self, data: &[u8], content: &mut Vec<u8>) -> usize {
        match self {
            Body::Length(_) => {
                let n = self.take(data);
                content.extend_from_slice(&data[..n]);
                n
            }
            Body::Chunked(c) => c.take_into(data, Some(content)),
        }
    }

    /// Whether the whole request has been seen.
    pub fn done(&self) -> bool {
        match self {
            Body::Length(left) => *left == 0,
            Body::Chunked(c) => c.state == State::Done,
        }
    }
}

/// An incremental reader of chunked framing (RFC 9112 §7.1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chunked {
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    /// A chunk's size, in hex: the value so far and how many digits.
    #[default]
    Start,
    Size(u64, u8),
    Extension(u64),
    SizeLf(u64),
    Data(u64),
    DataCr,
    DataLf,
    /// After the last chunk: the empty line that ends the body.
    LineStart,
    EndLf,
    /// The body is complete, or its framing broke: nothing more belongs to it.
    Done,
}

impl Chunked {
    fn take(&mut self, data: &[u8]) -> usize {
        self.take_into(data, None)
    }

    /// How many of `data` belong to the body; the chunks' content goes to `content`.
    fn take_into(&mut self, data: &[u8], mut content: Option<&mut Vec<u8>>) -> usize {
        let mut i = 0;
        while i < data.len() {
            if self.state == State::Done {
                break;
            }
            if let State::Data(left) = self.state {
                let n = left.min((data.len() - i) as u64);
                if let Some(content) = content.as_deref_mut() {
                    content.extend_from_slice(&data[i..i + n as usize]);
                }
                i += n as usize;
                self.state = if n == left {
                    State::DataCr
                } else {
                    State::Data(left - n)
                };
                continue;
            }
            let b = data[i];
            i += 1;
            self.state = match (self.state, b) {
                (State::Start, b) if hex(b).is_some() => {
                    State::Size(u64::from(hex(b).unwrap_or(0)), 1)
                }
                (State::Size(v, n), _) if hex(b).is_some() && n < 15 => {
                    State::Size(v * 16 + u64::from(hex(b).unwrap_or(0)), n + 1)
                }
                (State::Size(v, _), b';') => State::Extension(v),
                (State::Size(v, _) | State::Extension(v), b'\r') => State::SizeLf(v),
                (State::Extension(v), b) if b != b'\n' => State::Extension(v),
                (State::SizeLf(0), b'\n') => State::LineStart,
                (State::SizeLf(v), b'\n') => State::Data(v),
                (State::DataCr, b'\r') => State::DataLf,
                (State::DataLf, b'\n') => State::Start,
                // No trailer fields: an origin that does not read them would take them for
                // the next request.
                (State::LineStart, b'\r') => State::EndLf,
                (State::EndLf, b'\n') => {
                    self.state = State::Done;
                    return i;
                }
                // Broken framing: the origin would refuse it too; nothing more is sent.
                _ => {
                    self.state = State::Done;
                    return i - 1;
                }
            };
        }
        i
    }
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `data` in pieces of `step`; how many bytes were taken in all.
    fn feed(body: &mut Body, data: &[u8], step: usize) -> usize {
        data.chunks(step).map(|c| body.take(c)).sum()
    }

    #[test]
    fn a_length_takes_exactly_that_many_bytes() {
        let mut b = Body::Length(5);
        assert_eq!(b.take(b"abc"), 3);
        assert!(!b.done());
        assert_eq!(b.take(b"deGET http://other/ HTTP/1.1\r\n"), 2);
        assert!(b.done());
        assert_eq!(b.take(b"more"), 0);
        assert_eq!(Body::Length(0).take(b"GET"), 0);
    }

    #[test]
    fn chunked_ends_after_the_last_chunk_whatever_the_pieces() {
        let body = b"5;name=v\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n";
        let next = b"GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n";
        let mut all = body.to_vec();
        all.extend_from_slice(next);
        for step in [1, 2, 3, 7, all.len()] {
            let mut b = Body::Chunked(Chunked::default());
            assert_eq!(feed(&mut b, &all, step), body.len(), "in pieces of {step}");
            assert!(b.done());
        }
        let mut plain = Body::Chunked(Chunked::default());
        assert_eq!(plain.take(b"0\r\n\r\nGET"), 5);
    }

    #[test]
    fn chunked_content_is_the_chunks_without_their_framing() {
        let body = b"5;x=y\r\nhello\r\n3\r\n wo\r\n2\r\nrl\r\n1\r\nd\r\n0\r\n\r\nGET";
        for step in [1, 2, 5, body.len()] {
            let mut b = Body::Chunked(Chunked::default());
            let mut content = Vec::new();
            let taken: usize = body
                .chunks(step)
                .map(|c| b.take_content(c, &mut content))
                .sum();
            assert_eq!(taken, body.len() - 3, "in pieces of {step}");
            assert_eq!(content, b"hello world", "in pieces of {step}");
        }
        let mut b = Body::Length(3);
        let mut content = Vec::new();
        assert_eq!(b.take_content(b"abcd", &mut content), 3);
        assert_eq!(content, b"abc");
    }

    #[test]
    fn broken_chunked_framing_sends_nothing_after_the_break() {
        for (data, good) in [
            (&b"zz\r\n"[..], 0),
            (b"3\r\nabcX\r\n", 6),
            (b"3\nabc", 1),
            (b"ffffffffffffffffff\r\n", 15),
            // Trailers: a line after the last chunk that is not the end.
            (b"0\r\nGET http://evil/ HTTP/1.1\r\n\r\n", 3),
        ] {
            let mut b = Body::Chunked(Chunked::default());
            assert_eq!(b.take(data), good, "{:?}", String::from_utf8_lossy(data));
            assert!(b.done());
            assert_eq!(b.take(b"0\r\n\r\n"), 0);
        }
    }
}
