//! Byte-level mutations, stacked a few at a time on a corpus input.
//!
//! The mutations are the ones that reach the bugs this crate looks for: lengths and counts
//! rewritten to extreme numbers, a chunk repeated until a line or a header is far past a
//! limit, a dictionary token (a header name, a frame marker) dropped where the decoder
//! branches, and two inputs spliced so that one's head meets another's tail.

/// A small fast generator (xorshift64*): reproducible from its seed, which the driver prints.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Numbers decoders mishandle, as the text a peer would send.
const NUMBERS: &[&[u8]] = &[
    b"0",
    b"-1",
    b"1e300",
    b"-1e300",
    b"inf",
    b"NaN",
    b"4294967295",
    b"4294967296",
    b"9223372036854775807",
    b"18446744073709551615",
    b"18446744073709551616",
    b"99999999999999999999999999",
    b"0.5",
    b"1.7976931348623157e308",
];

/// Single bytes decoders branch on.
const BYTES: &[u8] = b"\0\r\n \t:;,{}[]\"\\/?#%\x7f\x80\xbf\xc3\xef\xff";

/// A mutation of `base`, at most `max_len` bytes long.
pub fn mutate(
    rng: &mut Rng,
    base: &[u8],
    corpus: &[Vec<u8>],
    dictionary: &[&[u8]],
    max_len: usize,
) -> Vec<u8> {
    let mut out = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        one(rng, &mut out, corpus, dictionary);
    }
    out.truncate(max_len);
    out
}

fn one(rng: &mut Rng, out: &mut Vec<u8>, corpus: &[Vec<u8>], dictionary: &[&[u8]]) {
    let at = rng.below(out.len() + 1);
    match rng.below(11) {
        0 if !out.is_empty() => {
            let i = rng.below(out.len());
            out[i] ^= 1 << rng.below(8);
        }
        1 if !out.is_empty() => {
            let i = rng.below(out.len());
            out[i] = BYTES[rng.below(BYTES.len())];
        }
        2 => {
            let n = 1 + rng.below(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            out.splice(at..at, bytes);
        }
        3 if !out.is_empty() => {
            let end = (at + 1 + rng.below(32)).min(out.len());
            out.drain(at.min(end)..end);
        }
        4 if !out.is_empty() => {
            // A chunk repeated: a long line, a long method, a header past its limit.
            let start = rng.below(out.len());
            let end = (start + 1 + rng.below(16)).min(out.len());
            let chunk = out[start..end].to_vec();
            let most = if rng.below(8) == 0 { 4096 } else { 16 };
            let times = 1 + rng.below(most);
            let repeated: Vec<u8> = chunk
                .iter()
                .copied()
                .cycle()
                .take(chunk.len() * times)
                .collect();
            out.splice(end..end, repeated);
        }
        5 if !dictionary.is_empty() => {
            let token = dictionary[rng.below(dictionary.len())];
            out.splice(at..at, token.iter().copied());
        }
        6 => {
            let number = NUMBERS[rng.below(NUMBERS.len())];
            out.splice(at..at, number.iter().copied());
        }
        7 if !corpus.is_empty() => {
            let other = &corpus[rng.below(corpus.len())];
            let from = rng.below(other.len() + 1);
            out.truncate(at);
            out.extend_from_slice(&other[from..]);
        }
        8 => out.truncate(at),
        9 if !out.is_empty() => {
            // A big-endian length word rewritten: frames and TLS records start with them.
            let i = rng.below(out.len());
            let word = [0u8, 0x7f, 0x80, 0xff][rng.below(4)];
            for b in out.iter_mut().skip(i).take(1 + rng.below(4)) {
                *b = word;
            }
        }
        _ if !out.is_empty() && !dictionary.is_empty() => {
            let token = dictionary[rng.below(dictionary.len())];
            let end = (at + token.len()).min(out.len());
            out.splice(at.min(end)..end, token.iter().copied());
        }
        _ => out.push(rng.next() as u8),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_stay_under_the_length_and_change_the_input() {
        let mut rng = Rng::new(7);
        let base = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
        let mut changed = 0;
        for _ in 0..1000 {
            let m = mutate(
                &mut rng,
                &base,
                std::slice::from_ref(&base),
                &[b"Host: "],
                64,
            );
            assert!(m.len() <= 64);
            changed += usize::from(m != base);
        }
        assert!(
            changed > 900,
            "only {changed} of 1000 mutations changed the input"
        );
    }
}
