//! A secret's value taken out of an answer again.
//!
//! The proxy puts a secret's real value into requests to the secret's hosts, and nowhere
//! else; but one of those hosts can send it straight back: a server that echoes a header
//! into its body, a query string in its answer, a `Location` carrying the query. The
//! sandbox would then hold the token after all. So every answer from a secret's host goes
//! through a [`Scrubber`], which writes the placeholder where the value was (also spelt
//! with `%` escapes or JSON's, and inside the Basic credentials the request carried), as the answer
//! streams: no body is held whole. A value split across two reads is found because the
//! end of each read that could begin one is held back until the next (at most the longest
//! value's length less one byte), and let go at the end of the body.

use std::collections::BTreeSet;

/// One spelling of a value, and the placeholder's in its place.
#[derive(Clone)]
pub struct Needle {
    /// The secret's name, for the record.
    pub name: String,
    pub real: Vec<u8>,
    pub placeholder: Vec<u8>,
}

/// Replaces the values of some secrets in a stream of bytes, piece by piece.
pub struct Scrubber {
    needles: Vec<Needle>,
    /// The end of the last piece that may begin a value.
    held: Vec<u8>,
    found: BTreeSet<String>,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values.
        let names: BTreeSet<&str> = self.needles.iter().map(|n| n.name.as_str()).collect();
        f.debug_struct("Scrubber")
            .field("secrets", &names)
            .finish_non_exhaustive()
    }
}

impl Scrubber {
    /// A scrubber of `needles`; the empty ones are left out.
    pub fn new(mut needles: Vec<Needle>) -> Scrubber {
        needles.retain(|n| !n.real.is_empty());
        // At one place, the longest spelling first (a value inside a longer one).
        needles.sort_by_key(|n| std::cmp::Reverse(n.real.len()));
        Scrubber {
            needles,
            held: Vec::new(),
            found: BTreeSet::new(),
        }
    }

    /// The next piece of the stream: what may go on now.
    pub fn push(&mut self, data: &[u8]) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(data);
        let (out, kept) = self.replace(&buf, false);
        self.held = buf[kept..].to_vec();
        out
    }

    /// The stream has ended: what was held back.
    pub fn finish(&mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        self.replace(&held, true).0
    }

    /// A whole text (a head) at once, apart from the stream.
    pub fn whole(&mut self, data: &[u8]) -> Vec<u8> {
        self.replace(data, true).0
    }

    /// The names of the secrets found so far.
    pub fn found(&self) -> Vec<String> {
        self.found.iter().cloned().collect()
    }

    /// `buf` with every whole value replaced, and where the bytes not yet sent begin (a
    /// tail that could begin a value, unless `at_end`).
    fn replace(&mut self, buf: &[u8], at_end: bool) -> (Vec<u8>, usize) {
        let mut out = Vec::with_capacity(buf.len());
        let mut i = 0;
        while let Some((at, k)) = self.next_match(&buf[i..]) {
            let needle = &self.needles[k];
            out.extend_from_slice(&buf[i..i + at]);
            out.extend_from_slice(&needle.placeholder);
            self.found.insert(needle.name.clone());
            i += at + needle.real.len();
        }
        let kept = if at_end {
            buf.len()
        } else {
            buf.len() - self.partial_tail(&buf[i..])
        };
        out.extend_from_slice(&buf[i..kept]);
        (out, kept)
    }

    /// The first place in `data` where a value starts, and which.
    fn next_match(&self, data: &[u8]) -> Option<(usize, usize)> {
        self.needles
            .iter()
            .enumerate()
            .filter_map(|(k, n)| find(data, &n.real).map(|at| (at, k)))
            .min()
    }

    /// How long the end of `tail` is that is the start of some value (not the whole).
    fn partial_tail(&self, tail: &[u8]) -> usize {
        let longest = self.needles.iter().map(|n| n.real.len()).max().unwrap_or(1);
        (1..longest.min(tail.len() + 1))
            .rev()
            .find(|&k| {
                let end = &tail[tail.len() - k..];
                self.needles
                    .iter()
                    .any(|n| n.real.len() > k && n.real.starts_with(end))
            })
            .unwrap_or(0)
    }
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let (first, rest) = needle.split_first()?;
    let mut from = 0;
    while from + needle.len() <= haystack.len() {
        let at = from
            + haystack[from..=haystack.len() - needle.len()]
                .iter()
                .position(|b| b == first)?;
        if haystack[at + 1..at + needle.len()] == *rest {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needle(real: &str, placeholder: &str) -> Needle {
        Needle {
            name: "TOKEN".into(),
            real: real.into(),
            placeholder: placeholder.into(),
        }
    }

    fn scrubber() -> Scrubber {
        Scrubber::new(vec![
            needle("tok3n", "PLACEHOLDER-LONGER"),
            needle("t%2Bk", "P"),
        ])
    }

    /// Whatever the pieces, the value never goes through and the rest goes unchanged.
    #[test]
    fn a_value_split_across_pieces_is_still_found() {
        let stream = b"a tok3n, tttok3ntok3 t%2Bk end tok3";
        let expected = b"a PLACEHOLDER-LONGER, ttPLACEHOLDER-LONGERtok3 P end tok3";
        for step in 1..=stream.len() {
            let mut s = scrubber();
            let mut out = Vec::new();
            for piece in stream.chunks(step) {
                out.extend(s.push(piece));
                assert!(!String::from_utf8_lossy(&out).contains("tok3n"));
            }
            out.extend(s.finish());
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(expected),
                "in pieces of {step}"
            );
            assert_eq!(s.found(), vec!["TOKEN".to_string()]);
        }
    }

    #[test]
    fn only_what_could_begin_a_value_is_held_back() {
        let mut s = scrubber();
        assert_eq!(s.push(b"hello wor"), b"hello wor");
        assert_eq!(s.push(b"ld, to"), b"ld, ");
        assert_eq!(s.push(b"day"), b"today");
        assert_eq!(s.finish(), b"");
        assert!(s.found().is_empty());
        assert!(!format!("{s:?}").contains("tok3n"));
    }

    #[test]
    fn a_head_is_scrubbed_whole() {
        let mut s = scrubber();
        let head = b"HTTP/1.1 302 Found\r\nLocation: /x?t=tok3n\r\n\r\n";
        assert_eq!(
            s.whole(head),
            b"HTTP/1.1 302 Found\r\nLocation: /x?t=PLACEHOLDER-LONGER\r\n\r\n"
        );
    }
}
