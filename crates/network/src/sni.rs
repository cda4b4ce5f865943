//! The name a TLS client asks for, read from its first flight through a `CONNECT` tunnel.
//!
//! The proxy judges the host a tunnel was opened for, but a server that hosts many names
//! (a CDN) picks the site by the TLS server name (SNI) the client sends inside it. A tunnel
//! opened to an allowed host could then carry a request for any other host behind the same
//! addresses ("domain fronting"). So the relay holds the client's first bytes until they
//! show the name, and compares it with the judged host.
//!
//! What starts with a TLS record must be a handshake that parses, or the tunnel is
//! refused: a server may accept what a lax parser gave up on, and may skip records (an
//! alert) in front of the real ClientHello. An encrypted ClientHello (ECH) is judged by its
//! outer name; the inner one is hidden by design. Other protocols are [`super::tunnel`]'s.

/// The largest first flight read before giving up: a ClientHello is a few KiB, and may
/// span records, but not this many.
pub const MAX_HELLO: usize = 64 * 1024;

const HANDSHAKE: u8 = 0x16;
const CLIENT_HELLO: u8 = 0x01;
const SERVER_NAME: u16 = 0x0000;
const HOST_NAME: u8 = 0x00;

#[derive(Debug, PartialEq, Eq)]
pub enum Hello {
    /// Nothing can be decided before this many bytes in all have arrived.
    Incomplete(usize),
    /// Not a TLS handshake: nothing to check.
    NotTls,
    /// A ClientHello, and the name it asks for, if any.
    Name(Option<String>),
}

/// Why a handshake cannot be trusted: what the server ends up reading could differ from
/// what is read here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadHello {
    #[error("an SSLv2-style hello")]
    SslV2,
    #[error("a TLS record of type {0:#04x} before the ClientHello")]
    RecordBefore(u8),
    #[error("the TLS handshake is interleaved with other records")]
    Interleaved,
    #[error("a TLS record of {0} bytes")]
    RecordSize(usize),
    #[error("the first TLS handshake message is not a ClientHello")]
    NotClientHello,
    #[error("a ClientHello of {0} bytes")]
    HelloSize(usize),
    #[error("no complete ClientHello in the first {MAX_HELLO} bytes")]
    NoHelloYet,
    #[error("a truncated ClientHello")]
    Truncated,
    #[error("a ClientHello with two server_name extensions")]
    TwoServerNames,
    #[error("a ClientHello that names two hosts")]
    TwoHosts,
    #[error("a server name that is not text")]
    NameNotText,
}

/// Reads the client's first bytes. `Err` is a handshake that cannot be trusted.
pub fn inspect(data: &[u8]) -> Result<Hello, BadHello> {
    let Some(&first) = data.first() else {
        return Ok(Hello::Incomplete(1));
    };
    // An SSLv2-style hello, or a TLS record of another kind first (an alert, which some
    // servers skip before the real ClientHello): what the server ends up reading cannot
    // be told from here.
    if first & 0x80 != 0 {
        return Err(BadHello::SslV2);
    }
    if (0x14..=0x17).contains(&first) && first != HANDSHAKE {
        return Err(BadHello::RecordBefore(first));
    }
    if first != HANDSHAKE {
        return Ok(Hello::NotTls);
    }
    // The handshake message, put back together from as many records as it spans.
    let mut message = Vec::new();
    let mut at = 0;
    loop {
        let Some(header) = data.get(at..at + 5) else {
            return incomplete(data, at + 5);
        };
        if header[0] != HANDSHAKE {
            return Err(BadHello::Interleaved);
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > 16384 {
            return Err(BadHello::RecordSize(len));
        }
        let Some(body) = data.get(at + 5..at + 5 + len) else {
            return incomplete(data, at + 5 + len);
        };
        message.extend_from_slice(body);
        at += 5 + len;
        if message.len() >= 4 {
            if message[0] != CLIENT_HELLO {
                return Err(BadHello::NotClientHello);
            }
            let len = u32::from_be_bytes([0, message[1], message[2], message[3]]) as usize;
            if len > MAX_HELLO {
                return Err(BadHello::HelloSize(len));
            }
            let want = 4 + len;
            if message.len() >= want {
                return client_hello(&message[4..want]).map(Hello::Name);
            }
        }
    }
}

fn incomplete(data: &[u8], need: usize) -> Result<Hello, BadHello> {
    if data.len() >= MAX_HELLO || need > MAX_HELLO + 5 {
        return Err(BadHello::NoHelloYet);
    }
    Ok(Hello::Incomplete(need))
}

/// A cursor that fails, instead of panicking, where the message is short.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BadHello> {
        if self.0.len() < n {
            return Err(BadHello::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<usize, BadHello> {
        Ok(usize::from(self.take(1)?[0]))
    }

    fn u16(&mut self) -> Result<usize, BadHello> {
        let b = self.take(2)?;
        Ok(usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    /// A length-prefixed vector.
    fn vec8(&mut self) -> Result<&'a [u8], BadHello> {
        let n = self.u8()?;
        self.take(n)
    }

    fn vec16(&mut self) -> Result<&'a [u8], BadHello> {
        let n = self.u16()?;
        self.take(n)
    }
}

/// The server name of a ClientHello body (RFC 8446 §4.1.2, RFC 6066 §3).
fn client_hello(body: &[u8]) -> Result<Option<String>, BadHello> {
    let mut r = Reader(body);
    r.take(2 + 32)?; // version, random
    r.vec8()?; // session id
    r.vec16()?; // cipher suites
    r.vec8()?; // compression methods
    if r.0.is_empty() {
        return Ok(None);
    }
    let mut extensions = Reader(r.vec16()?);
    let mut name = None;
    let mut seen = false;
    while !extensions.0.is_empty() {
        let kind = extensions.u16()? as u16;
        let data = extensions.vec16()?;
        if kind != SERVER_NAME {
            continue;
        }
        if seen {
            return Err(BadHello::TwoServerNames);
        }
        seen = true;
        let mut list = Reader(Reader(data).vec16()?);
        while !list.0.is_empty() {
            let name_type = list.u8()?;
            let value = list.vec16()?;
            if name_type != usize::from(HOST_NAME) {
                continue;
            }
            if name.is_some() {
                return Err(BadHello::TwoHosts);
            }
            let text = std::str::from_utf8(value).map_err(|_| BadHello::NameNotText)?;
            name = Some(text.to_string());
        }
    }
    Ok(name)
}

/// Whether the name a ClientHello asks for is the host the tunnel was judged for.
pub fn same_host(sni: &str, host: &str) -> bool {
    let norm = |s: &str| s.trim_end_matches('.').to_ascii_lowercase();
    norm(sni) == norm(host.trim_start_matches('[').trim_end_matches(']'))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn vec16(data: &[u8]) -> Vec<u8> {
        let mut v = (data.len() as u16).to_be_bytes().to_vec();
        v.extend_from_slice(data);
        v
    }

    pub(crate) fn sni_ext(names: &[&str]) -> Vec<u8> {
        let mut list = Vec::new();
        for n in names {
            list.push(HOST_NAME);
            list.extend(vec16(n.as_bytes()));
        }
        let mut ext = 0u16.to_be_bytes().to_vec();
        ext.extend(vec16(&vec16(&list)));
        ext
    }

    /// A ClientHello with `extensions`, cut into records of at most `record` bytes.
    pub(crate) fn hello(extensions: &[Vec<u8>], record: usize) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(0); // session id
        body.extend(vec16(&[0x13, 0x01]));
        body.extend([1, 0]); // compression: null
        let mut ext = Vec::new();
        // Another extension first, so the name is not simply at the front.
        ext.extend([0x00, 0x2b]);
        ext.extend(vec16(&[2, 3, 4]));
        for e in extensions {
            ext.extend(e);
        }
        body.extend(vec16(&ext));
        let mut message = vec![CLIENT_HELLO];
        message.extend(&(body.len() as u32).to_be_bytes()[1..]);
        message.extend(body);
        let mut out = Vec::new();
        for chunk in message.chunks(record) {
            out.extend([HANDSHAKE, 3, 1]);
            out.extend(vec16(chunk));
        }
        out
    }

    #[test]
    fn the_name_is_read_whole_and_only_once_the_hello_is_complete() {
        let bytes = hello(&[sni_ext(&["pypi.org"])], 16384);
        for cut in [0, 1, 4] {
            assert!(matches!(inspect(&bytes[..cut]), Ok(Hello::Incomplete(n)) if n > cut));
        }
        // Once a record's header is in, its whole length is what is needed.
        for cut in [5, 20, bytes.len() - 1] {
            assert_eq!(
                inspect(&bytes[..cut]),
                Ok(Hello::Incomplete(bytes.len())),
                "cut at {cut}"
            );
        }
        assert_eq!(inspect(&bytes), Ok(Hello::Name(Some("pypi.org".into()))));
        // Data after the hello does not matter.
        let mut more = bytes.clone();
        more.extend(b"\x17\x03\x03 application data");
        assert_eq!(inspect(&more), Ok(Hello::Name(Some("pypi.org".into()))));
    }

    #[test]
    fn a_hello_split_over_records_is_put_back_together() {
        let bytes = hello(&[sni_ext(&["files.pythonhosted.org"])], 16);
        assert!(bytes.len() > 100);
        assert_eq!(
            inspect(&bytes),
            Ok(Hello::Name(Some("files.pythonhosted.org".into())))
        );
        assert!(matches!(
            inspect(&bytes[..bytes.len() - 3]),
            Ok(Hello::Incomplete(_))
        ));
    }

    #[test]
    fn no_name_other_protocols_and_broken_hellos() {
        assert_eq!(inspect(&hello(&[], 16384)), Ok(Hello::Name(None)));
        assert_eq!(inspect(b"SSH-2.0-OpenSSH_9.2\r\n"), Ok(Hello::NotTls));
        assert_eq!(inspect(b"GET / HTTP/1.1\r\n"), Ok(Hello::NotTls));
        // An alert (or any record but a handshake) first, and SSLv2-style hellos.
        let mut alerted = vec![0x15, 3, 1, 0, 2, 1, 0x5a];
        alerted.extend(hello(&[sni_ext(&["evil.example"])], 16384));
        assert!(inspect(&alerted).is_err());
        assert!(inspect(&[0x17, 3, 3, 0, 1, 0]).is_err());
        assert!(inspect(&[0x80, 0x2e, 0x01]).is_err());
        // Two names, or two extensions: which one the server takes is its choice.
        assert!(inspect(&hello(&[sni_ext(&["a.org", "b.org"])], 16384)).is_err());
        let twice = [sni_ext(&["a.org"]), sni_ext(&["a.org"])];
        assert!(inspect(&hello(&twice, 16384)).is_err());
        // A handshake record that is not a ClientHello, or lies about its lengths.
        assert!(inspect(&[HANDSHAKE, 3, 1, 0, 4, 2, 0, 0, 0]).is_err());
        let mut short = hello(&[sni_ext(&["a.org"])], 16384);
        let n = short.len();
        short[n - 6] = 0xff; // the name's length, past the end
        assert!(inspect(&short).is_err());
        assert!(inspect(&[HANDSHAKE, 3, 1, 0, 0]).is_err());
        // A record of another kind in the middle of the handshake.
        let mut mixed = hello(&[sni_ext(&["a.org"])], 16);
        mixed[21] = 0x17;
        assert!(inspect(&mixed).is_err());
        // An endless handshake is given up on.
        let endless: Vec<u8> =
            std::iter::repeat_n([HANDSHAKE, 3, 1, 0, 1, CLIENT_HELLO], MAX_HELLO / 6 + 1)
                .flatten()
                .collect();
        assert!(inspect(&endless).is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

        /// A hello cut into records of any size, and then at any byte: until it is whole
        /// it is incomplete, asking for more than it has; whole, it names its host.
        #[test]
        fn a_hello_is_read_the_same_however_it_is_cut(
            record in 1usize..400,
            name in "[a-z0-9-]{1,30}(\\.[a-z0-9-]{1,20}){0,3}",
        ) {
            let bytes = hello(&[sni_ext(&[name.as_str()])], record);
            for k in 0..bytes.len() {
                match inspect(&bytes[..k]) {
                    Ok(Hello::Incomplete(n)) => proptest::prop_assert!(n > k && n <= bytes.len()),
                    other => proptest::prop_assert!(false, "{other:?} at {k}"),
                }
            }
            proptest::prop_assert_eq!(inspect(&bytes), Ok(Hello::Name(Some(name))));
        }

        /// Whatever the bytes, a prefix is incomplete, refused, or read as the whole is.
        #[test]
        fn a_prefix_is_never_read_otherwise_than_the_whole(
            mut data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            lengths in proptest::collection::vec(0u16..320, 1..4),
        ) {
            // Mostly handshake records with plausible lengths, so the parser gets deep.
            for (i, len) in lengths.iter().enumerate() {
                let at = (i * 97) % (data.len() + 1);
                let header = [HANDSHAKE, 3, 1, (len >> 8) as u8, *len as u8];
                data.splice(at..at, header);
            }
            let whole = inspect(&data);
            for k in 0..=data.len() {
                match inspect(&data[..k]) {
                    Ok(Hello::Incomplete(n)) => proptest::prop_assert!(n > k),
                    Err(_) => {}
                    decided => proptest::prop_assert_eq!(&decided, &whole, "at {}", k),
                }
            }
        }
    }

    #[test]
    fn names_compare_without_case_or_a_final_dot() {
        assert!(same_host("PyPI.org.", "pypi.org"));
        assert!(!same_host("evil.example", "pypi.org"));
        assert!(!same_host("pypi.org.evil.example", "pypi.org"));
        assert!(same_host("::1", "[::1]"));
    }
}
