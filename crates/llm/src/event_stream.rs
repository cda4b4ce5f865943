//! Server-sent events, decoded with a bound per event.
//!
//! A provider's answer is a stream of events: lines ending in CR, LF or CRLF; `data:`
//! lines joined with `\n`; `event:` naming the type; `:` starting a comment; a blank line
//! ending the event. The body comes from a server runner does not control (a gateway, a
//! proxy, a hijacked endpoint), so nothing here trusts it: a byte-order mark at the start is
//! dropped once (a parser that slices text assuming it is not there panics), bytes that are
//! not UTF-8 are replaced rather than trusted, and one event (its data plus the line being
//! read) may not pass a limit, so a server that never ends a line cannot make runner hold
//! more than that.

#![deny(clippy::arithmetic_side_effects)]

/// The most one event may hold by default: far above any real chunk (a few KiB), far below
/// what hurts.
pub const MAX_EVENT: usize = 16 << 20;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field, or `message` when there was none.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// An event went past the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    pub limit: usize,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "an event larger than the limit of {} bytes (MiB: {})",
            self.limit,
            self.limit >> 20
        )
    }
}

impl std::error::Error for TooLarge {}

/// Turns bytes, as they arrive in pieces of any size, into events.
#[derive(Debug)]
pub struct Decoder {
    limit: usize,
    /// The line being read (no line ending).
    line: Vec<u8>,
    /// The last byte seen was a CR: an LF right after it belongs to the same ending.
    after_cr: bool,
    /// Still at the start, where a byte-order mark may be (the bytes seen so far).
    start: Option<Vec<u8>>,
    event: String,
    data: String,
    /// Whether any `data:` line came in this event (an empty one counts).
    has_data: bool,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl Decoder {
    pub fn new(limit: usize) -> Self {
        Decoder {
            limit,
            line: Vec::new(),
            after_cr: false,
            start: Some(Vec::new()),
            event: String::new(),
            data: String::new(),
            has_data: false,
        }
    }

    /// Feeds the next bytes; the events they complete, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Event>, TooLarge> {
        let mut events = Vec::new();
        let bytes = match self.skip_bom(bytes) {
            Some(rest) => rest,
            None => return Ok(events),
        };
        self.feed(&bytes, &mut events)?;
        Ok(events)
    }

    /// The stream ended: the event still open, if it has data. The providers' own clients
    /// dispatch a last event that no blank line closed, and so does this.
    pub fn finish(&mut self) -> Result<Option<Event>, TooLarge> {
        let mut events = Vec::new();
        if let Some(held) = self.start.take() {
            // Fewer than three bytes in all: a partial mark is just bytes.
            let held = if BOM.starts_with(&held) {
                Vec::new()
            } else {
                held
            };
            self.feed(&held, &mut events)?;
        }
        if !self.line.is_empty() {
            self.end_line(&mut events);
        }
        self.end_line(&mut events);
        Ok(events.pop())
    }

    /// Drops the byte-order mark once, at the very start, even when it arrives split.
    /// `None`: the bytes so far could still be the start of one.
    fn skip_bom(&mut self, bytes: &[u8]) -> Option<Vec<u8>> {
        let Some(held) = self.start.as_mut() else {
            return Some(bytes.to_vec());
        };
        held.extend_from_slice(bytes);
        if held.len() < BOM.len() && BOM.starts_with(held) {
            return None;
        }
        let held = self.start.take().unwrap_or_default();
        Some(match held.strip_prefix(BOM) {
            Some(rest) => rest.to_vec(),
            None => held,
        })
    }

    fn feed(&mut self, bytes: &[u8], events: &mut Vec<Event>) -> Result<(), TooLarge> {
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if rest[0] == b'\n' {
                    rest = &rest[1..];
                    continue;
                }
            }
            match rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
                Some(at) => {
                    self.grow(&rest[..at])?;
                    self.after_cr = rest[at] == b'\r';
                    self.end_line(events);
                    rest = &rest[at..][1..];
                }
                None => {
                    self.grow(rest)?;
                    rest = &[];
                }
            }
        }
        Ok(())
    }

    /// Adds to the current line, within the event's limit.
    fn grow(&mut self, piece: &[u8]) -> Result<(), TooLarge> {
        let held = self
            .data
            .len()
            .saturating_add(self.event.len())
            .saturating_add(self.line.len())
            .saturating_add(piece.len());
        if held > self.limit {
            return Err(TooLarge { limit: self.limit });
        }
        self.line.extend_from_slice(piece);
        Ok(())
    }

    /// One complete line: a field, a comment, or the blank line that dispatches.
    fn end_line(&mut self, events: &mut Vec<Event>) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            if self.has_data {
                let event = if self.event.is_empty() {
                    "message".to_string()
                } else {
                    std::mem::take(&mut self.event)
                };
                events.push(Event {
                    event,
                    data: std::mem::take(&mut self.data),
                });
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return;
        }
        if line.first() == Some(&b':') {
            return;
        }
        let text = String::from_utf8_lossy(&line);
        let (field, value) = match text.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (text.as_ref(), ""),
        };
        match field {
            "event" => self.event = value.to_string(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // `id` and `retry` matter to a browser reconnecting, not to one answer.
            _ => {}
        }
    }
}

/// Every event in `input`, the last one dispatched at the end as [`Decoder::finish`] does;
/// for fuzzing and tests, the same decoder the providers use.
pub fn decode(input: &[u8], limit: usize) -> Result<Vec<Event>, TooLarge> {
    let mut decoder = Decoder::new(limit);
    let mut events = decoder.push(input)?;
    events.extend(decoder.finish()?);
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str) -> Event {
        Event {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn fields_comments_and_every_line_ending() {
        let body = b": hi\r\nevent: a\r\ndata: 1\r\ndata:2\r\n\r\ndata: x\rdata: y\r\rdata: z\n\n";
        assert_eq!(
            decode(body, 1000).unwrap(),
            [ev("a", "1\n2"), ev("message", "x\ny"), ev("message", "z")]
        );
    }

    #[test]
    fn pieces_of_any_size_give_the_same_events() {
        let body = b"\xEF\xBB\xBFevent: e\r\ndata: {\"k\":1}\r\n\r\ndata: \xC3\xA9\n\n";
        let whole = decode(body, 1000).unwrap();
        assert_eq!(whole, [ev("e", "{\"k\":1}"), ev("message", "é")]);
        for size in 1..body.len() {
            let mut d = Decoder::new(1000);
            let mut got = Vec::new();
            for piece in body.chunks(size) {
                got.extend(d.push(piece).unwrap());
            }
            got.extend(d.finish().unwrap());
            assert_eq!(got, whole, "pieces of {size}");
        }
    }

    #[test]
    fn a_byte_order_mark_is_dropped_once_and_only_at_the_start() {
        assert_eq!(
            decode(b"\xEF\xBB\xBFdata: a\n\n", 100).unwrap(),
            [ev("message", "a")]
        );
        // A second mark is part of the first line: a field named "\u{feff}data".
        assert_eq!(
            decode(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n", 100).unwrap(),
            []
        );
        // A lone partial mark is not eaten.
        assert_eq!(decode(b"\xEF", 100).unwrap(), []);
    }

    #[test]
    fn the_last_event_is_dispatched_without_a_blank_line() {
        assert_eq!(decode(b"data: end", 100).unwrap(), [ev("message", "end")]);
        assert_eq!(decode(b"event: x\n", 100).unwrap(), []);
    }

    #[test]
    fn an_event_past_the_limit_fails_however_it_grows() {
        assert_eq!(
            decode(&[b'a'; 101], 100).unwrap_err(),
            TooLarge { limit: 100 }
        );
        let many = "data: 0123456789\n".repeat(20);
        assert!(decode(many.as_bytes(), 100).is_err());
        // The same lines, one event each, are fine.
        let apart = "data: 0123456789\n\n".repeat(20);
        assert_eq!(decode(apart.as_bytes(), 100).unwrap().len(), 20);
    }
}
