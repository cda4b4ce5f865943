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
//! it in a message, a record or a `Debug` output.

use base64::Engine;

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
}
