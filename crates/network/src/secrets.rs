//! Secrets that never enter the sandbox.
//!
//! A token the agent's commands need (a git push, an API call) would, inside the sandbox,
//! be readable by the agent and sendable to any host the allow-list opens. So the sandbox
//! gets a placeholder instead, unique to the session (`runner-secret-NAME-<random>`), and
//! the inspecting proxy puts the real value in only on a request to one of the hosts the
//! user's config names for that secret: in the request line and headers, including inside
//! HTTP Basic credentials (decoded, replaced, encoded again), which is how git sends a
//! token. A placeholder on a request to any other host is refused, and the refusal names
//! the secret, never its value. The value lives in this process alone; nothing here puts
//! it in a message, a record or a `Debug` output. A host the value goes to could send it
//! back; its answers are scrubbed ([`Secrets::scrubber`], [`crate::scrub`]).

use base64::Engine;

use crate::scrub::{Needle, Scrubber};

/// One secret: its name, the placeholder the sandbox sees, the hosts it may go to.
pub struct Secret {
    pub name: String,
    pub placeholder: String,
    /// Host patterns (wildcards as in rules) where the value may be sent.
    pub hosts: Vec<String>,
    value: String,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

/// A placeholder where it may not go: the name of its secret (never the value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the request carries the placeholder of the secret {name}, which may be sent only to {hosts}"
)]
pub struct Misplaced {
    pub name: String,
    pub hosts: String,
}

/// The session's secrets.
#[derive(Debug, Default)]
pub struct Secrets {
    list: Vec<Secret>,
}

impl Secrets {
    /// Secrets of `(name, value, hosts)`, each given a fresh placeholder.
    pub fn new(declared: Vec<(String, String, Vec<String>)>) -> std::io::Result<Secrets> {
        let mut list = Vec::new();
        for (name, value, hosts) in declared {
            let placeholder = format!("runner-secret-{name}-{}", random_hex(16)?);
            let hosts = hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
            list.push(Secret {
                name,
                placeholder,
                hosts,
                value,
            });
        }
        Ok(Secrets { list })
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// `NAME=placeholder` for the sandbox's environment.
    pub fn environment(&self) -> Vec<(String, String)> {
        self.list
            .iter()
            .map(|s| (s.name.clone(), s.placeholder.clone()))
            .collect()
    }

    /// The host patterns some secret may go to: each is inspected.
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.list
            .iter()
            .flat_map(|s| s.hosts.iter().map(String::as_str))
    }

    /// The first secret whose placeholder `data` holds, as sent or percent-decoded, or
    /// inside Basic credentials.
    pub fn found_in(&self, data: &[u8]) -> Option<&Secret> {
        let decoded: Vec<u8> = percent_encoding::percent_decode(data).collect();
        self.list.iter().find(|s| {
            let p = s.placeholder.as_bytes();
            contains(data, p) || contains(&decoded, p)
        })
    }

    /// The request line and headers of a request to `host`, with each placeholder whose
    /// secret may go there replaced by its value; the names of the secrets put in. Any
    /// other placeholder (in the target, a header, or Basic credentials) refuses it.
    pub fn put_in(
        &self,
        host: &str,
        target: &mut String,
        headers: &mut [(String, String)],
    ) -> Result<Vec<String>, Misplaced> {
        let mut used = Vec::new();
        *target = self.replace(host, target, &mut used)?;
        for (name, value) in headers.iter_mut() {
            let credentials = name.eq_ignore_ascii_case("authorization")
                || name.eq_ignore_ascii_case("proxy-authorization");
            if credentials && let Some(replaced) = self.in_basic(host, value, &mut used)? {
                *value = replaced;
                continue;
            }
            *value = self.replace(host, value, &mut used)?;
        }
        used.sort();
        used.dedup();
        Ok(used)
    }

    /// `text` with the placeholders allowed at `host` replaced; a misplaced one refuses.
    fn replace(&self, host: &str, text: &str, used: &mut Vec<String>) -> Result<String, Misplaced> {
        let mut out = text.to_string();
        let decoded = percent_encoding::percent_decode_str(text)
            .decode_utf8_lossy()
            .into_owned();
        for s in &self.list {
            if !out.contains(&s.placeholder) && !decoded.contains(&s.placeholder) {
                continue;
            }
            if !s.goes_to(host) {
                return Err(s.misplaced());
            }
            if !out.contains(&s.placeholder) {
                // Only spelt with escapes: put in where it is, decoded.
                out = decoded.clone();
            }
            out = out.replace(&s.placeholder, &s.value);
            used.push(s.name.clone());
        }
        Ok(out)
    }

    /// `Basic base64(user:password)` with placeholders inside replaced; `None` when the
    /// value is not Basic credentials or holds none.
    fn in_basic(
        &self,
        host: &str,
        value: &str,
        used: &mut Vec<String>,
    ) -> Result<Option<String>, Misplaced> {
        let Some((scheme, encoded)) = value.split_once(' ') else {
            return Ok(None);
        };
        if !scheme.eq_ignore_ascii_case("basic") {
            return Ok(None);
        }
        let engine = base64::engine::general_purpose::STANDARD;
        let Ok(pair) = engine.decode(encoded.trim()) else {
            return Ok(None);
        };
        let Ok(pair) = String::from_utf8(pair) else {
            return Ok(None);
        };
        let replaced = self.replace(host, &pair, used)?;
        if replaced == pair {
            return Ok(None);
        }
        Ok(Some(format!("{scheme} {}", engine.encode(replaced))))
    }

    /// Whether some secret's value may go to `host`: its answers are scrubbed.
    pub fn any_go_to(&self, host: &str) -> bool {
        self.list.iter().any(|s| s.goes_to(host))
    }

    /// What takes the values of the secrets that go to `host` out of its answers again
    /// ([`crate::scrub`]): each value in each of its [`spellings`], and the Basic
    /// credentials among `sent` (the request's headers as they went) that hold one, as
    /// they went in base64. `None` when no secret goes there.
    pub fn scrubber(&self, host: &str, sent: &[(String, String)]) -> Option<Scrubber> {
        let mine: Vec<&Secret> = self.list.iter().filter(|s| s.goes_to(host)).collect();
        if mine.is_empty() {
            return None;
        }
        let mut needles = Vec::new();
        for s in &mine {
            let needle = |real: String| Needle {
                name: s.name.clone(),
                real: real.into_bytes(),
                placeholder: s.placeholder.clone().into_bytes(),
            };
            for spelling in spellings(&s.value) {
                needles.push(needle(spelling));
            }
        }
        let engine = base64::engine::general_purpose::STANDARD;
        for (name, value) in sent {
            if !name.to_ascii_lowercase().ends_with("authorization") {
                continue;
            }
            let Some((scheme, encoded)) = value.split_once(' ') else {
                continue;
            };
            let pair = engine
                .decode(encoded.trim())
                .ok()
                .filter(|_| scheme.eq_ignore_ascii_case("basic"))
                .and_then(|p| String::from_utf8(p).ok());
            let Some(pair) = pair else {
                continue;
            };
            for s in mine.iter().filter(|s| pair.contains(&s.value)) {
                needles.push(Needle {
                    name: s.name.clone(),
                    real: encoded.trim().as_bytes().to_vec(),
                    placeholder: engine
                        .encode(pair.replace(&s.value, &s.placeholder))
                        .into_bytes(),
                });
            }
        }
        Some(Scrubber::new(needles))
    }

    /// Refuses any placeholder in a request to `host` where it is not put in (a plain
    /// request, a tunnel's first bytes): the name of the first found.
    pub fn check_absent(&self, data: &[u8]) -> Result<(), Misplaced> {
        match self.found_in(data).or_else(|| self.in_any_basic(data)) {
            Some(s) => Err(s.misplaced()),
            None => Ok(()),
        }
    }

    /// A secret whose placeholder is inside Basic credentials anywhere in `data`.
    fn in_any_basic(&self, data: &[u8]) -> Option<&Secret> {
        let text = String::from_utf8_lossy(data);
        let engine = base64::engine::general_purpose::STANDARD;
        text.split("\r\n")
            .filter_map(|l| l.split_once(':'))
            .filter(|(k, _)| k.trim().to_ascii_lowercase().ends_with("authorization"))
            .filter_map(|(_, v)| v.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
            .filter_map(|(_, b)| engine.decode(b.trim()).ok())
            .find_map(|pair| self.found_in(&pair))
    }
}

impl Secret {
    fn goes_to(&self, host: &str) -> bool {
        self.hosts
            .iter()
            .any(|p| runner_permission::wildcard::matches(host, p))
    }

    fn misplaced(&self) -> Misplaced {
        Misplaced {
            name: self.name.clone(),
            hosts: self.hosts.join(", "),
        }
    }
}

/// A byte a URL never escapes (RFC 3986's unreserved).
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~".contains(&b)
}

/// The ways an answer may spell `value`, each once: as it is; with `%` escapes in upper
/// or lower case hex, of every byte but the unreserved (a query string) or also keeping
/// `/` (Python's `urllib.parse.quote`); and in a JSON string, with `/` as it is or as
/// `\/` (PHP's `json_encode`). A search cannot find it base64-encoded or compressed
/// without a `Content-Encoding` (docs/NETWORK.md says so).
fn spellings(value: &str) -> Vec<String> {
    let mut out = vec![value.to_string()];
    for lower in [false, true] {
        out.push(escaped(value, lower, b""));
        out.push(escaped(value, lower, b"/"));
    }
    out.push(json(value, false));
    out.push(json(value, true));
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|s| seen.insert(s.clone()));
    out
}

/// `value` with every byte but the unreserved and `keep` as `%XX` (or `%xx`).
fn escaped(value: &str, lower: bool, keep: &[u8]) -> String {
    value
        .bytes()
        .map(|b| match b {
            b if unreserved(b) || keep.contains(&b) => (b as char).to_string(),
            b if lower => format!("%{b:02x}"),
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// `value` inside a JSON string: `"` and `\` escaped, `/` too when `slash`.
fn json(value: &str, slash: bool) -> String {
    value
        .chars()
        .map(|c| match c {
            '"' => "\\\"".to_string(),
            '\\' => "\\\\".to_string(),
            '/' if slash => "\\/".to_string(),
            c => c.to_string(),
        })
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// `n` random bytes from the kernel, in hex.
fn random_hex(n: usize) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> Secrets {
        Secrets::new(vec![(
            "GITHUB_TOKEN".into(),
            "ghp_realvalue".into(),
            vec!["github.com".into(), "*.github.com".into()],
        )])
        .unwrap()
    }

    #[test]
    fn a_placeholder_is_unique_and_never_shows_the_value() {
        let s = secrets();
        let (name, p) = s.environment().remove(0);
        assert_eq!(name, "GITHUB_TOKEN");
        assert!(
            p.starts_with("runner-secret-GITHUB_TOKEN-") && p.len() > 40,
            "{p}"
        );
        assert_ne!(p, secrets().environment()[0].1, "one per session");
        assert!(!format!("{s:?}").contains("ghp_"), "{s:?}");
    }

    #[test]
    fn the_value_goes_in_only_for_its_hosts_even_inside_basic() {
        let s = secrets();
        let p = s.environment()[0].1.clone();
        let engine = base64::engine::general_purpose::STANDARD;
        let basic = format!("Basic {}", engine.encode(format!("x-access-token:{p}")));
        let mut headers = vec![
            ("Authorization".to_string(), basic.clone()),
            ("X-Token".to_string(), format!("token {p}")),
        ];
        let mut target = format!("/repos?access_token={p}");
        let used = s
            .put_in("api.github.com", &mut target, &mut headers)
            .unwrap();
        assert_eq!(used, vec!["GITHUB_TOKEN".to_string()]);
        assert_eq!(target, "/repos?access_token=ghp_realvalue");
        assert_eq!(headers[1].1, "token ghp_realvalue");
        assert_eq!(
            headers[0].1,
            format!("Basic {}", engine.encode("x-access-token:ghp_realvalue"))
        );
        // Another host: refused by name, the value nowhere in the refusal.
        for (mut target, mut headers) in [
            (format!("/?q={p}"), vec![]),
            (
                "/".to_string(),
                vec![("Authorization".to_string(), basic.clone())],
            ),
            (
                "/".to_string(),
                vec![("Authorization".to_string(), format!("Bearer {p}"))],
            ),
        ] {
            let err = s
                .put_in("evil.test", &mut target, &mut headers)
                .unwrap_err();
            assert_eq!(err.name, "GITHUB_TOKEN");
            assert!(!err.to_string().contains("ghp_"), "{err}");
        }
        // Spelt with escapes, it is still seen.
        let escaped: String = p.bytes().map(|b| format!("%{b:02X}")).collect();
        let mut target = format!("/?q={escaped}");
        assert!(s.put_in("evil.test", &mut target, &mut []).is_err());
        assert!(
            s.check_absent(format!("GET /?q={escaped} HTTP/1.1\r\n").as_bytes())
                .is_err()
        );
        let head = format!("GET / HTTP/1.1\r\nAuthorization: {basic}\r\n\r\n");
        assert!(s.check_absent(head.as_bytes()).is_err());
        assert!(s.check_absent(b"GET / HTTP/1.1\r\n\r\n").is_ok());
    }

    /// What a secret's host sends back holds the placeholder where the value was: as it
    /// is, escaped, and inside the Basic credentials the request carried.
    #[test]
    fn answers_from_a_secrets_host_get_the_placeholder_back() {
        let s = Secrets::new(vec![(
            "T".into(),
            "ghp_real/value+1".into(),
            vec!["github.com".into()],
        )])
        .unwrap();
        let p = s.environment()[0].1.clone();
        let engine = base64::engine::general_purpose::STANDARD;
        let mut target = "/".to_string();
        let mut headers = vec![(
            "Authorization".to_string(),
            format!("Basic {}", engine.encode(format!("git:{p}"))),
        )];
        s.put_in("github.com", &mut target, &mut headers).unwrap();
        assert!(s.scrubber("example.org", &headers).is_none());
        let mut scrub = s.scrubber("github.com", &headers).unwrap();
        let sent = headers[0].1.clone();
        let answer = format!(
            "auth={sent} raw=ghp_real/value+1 escaped=ghp_real%2Fvalue%2B1 lower=ghp_real%2fvalue%2b1"
        );
        let mut out = Vec::new();
        for piece in answer.as_bytes().chunks(3) {
            out.extend(scrub.push(piece));
        }
        out.extend(scrub.finish());
        let out = String::from_utf8(out).unwrap();
        let basic = format!("Basic {}", engine.encode(format!("git:{p}")));
        assert_eq!(
            out,
            format!("auth={basic} raw={p} escaped={p} lower={p}"),
            "{out}"
        );
        assert_eq!(scrub.found(), vec!["T".to_string()]);
        assert!(!format!("{scrub:?}").contains("ghp_"));
    }

    /// Python's `quote` keeps `/`, PHP's `json_encode` writes `\/`: both are found, in
    /// either case of hex, also split across reads; a value that only looks alike is not.
    #[test]
    fn answers_spelling_the_value_as_quote_or_json_do_are_scrubbed() {
        let s = Secrets::new(vec![(
            "T".into(),
            "realAKIA/tok+en9Zq".into(),
            vec!["localhost".into()],
        )])
        .unwrap();
        let p = s.environment()[0].1.clone();
        let mut scrub = s.scrubber("localhost", &[]).unwrap();
        let answer = concat!(
            "quote=realAKIA/tok%2Ben9Zq lower=realAKIA/tok%2ben9Zq ",
            r#"json={"t":"realAKIA\/tok+en9Zq"} "#,
            "other=realAKIA/tok%2Ben9Zz"
        );
        let mut out = Vec::new();
        for piece in answer.as_bytes().chunks(5) {
            out.extend(scrub.push(piece));
        }
        out.extend(scrub.finish());
        let out = String::from_utf8(out).unwrap();
        assert_eq!(
            out,
            format!("quote={p} lower={p} json={{\"t\":\"{p}\"}} other=realAKIA/tok%2Ben9Zz")
        );
        assert!(!out.contains("realAKIA/tok+"), "{out}");
    }
}
