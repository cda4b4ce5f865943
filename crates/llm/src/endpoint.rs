//! Where a provider's requests go: base URL, key and extra headers, read on the host and
//! used by both wire formats (`openai`, `anthropic`) and their stream reader.
//!
//! It also words the two errors whose cure is on the user's side of the wire: a key the
//! provider refuses (401, 403), said with the variable the key came from, since that is
//! what to change; and a refused connection to a server on this machine or its private
//! network, said at once with the server's address, since waiting does not start it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::LlmError;

/// Where a provider's requests go. `Debug` leaves the key out, so no log can print it.
#[derive(Clone)]
pub struct Endpoint {
    pub name: String,
    pub base_url: String,
    pub api_key: Option<String>,
    /// The environment variable the key is read from (set or not): a refused key is
    /// reported with it.
    pub api_key_env: String,
    pub headers: Vec<(String, String)>,
    /// How long a stream may go without a byte before the turn is given up and retried.
    pub idle_timeout: Duration,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("api_key_env", &self.api_key_env)
            .finish()
    }
}

impl Endpoint {
    pub(crate) fn extra_headers(&self) -> Result<HeaderMap, LlmError> {
        let mut map = HeaderMap::new();
        for (k, v) in &self.headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                LlmError::Setup(format!(
                    "provider {}: {k:?} is not a header name",
                    self.name
                ))
            })?;
            let value = HeaderValue::from_str(v).map_err(|_| {
                LlmError::Setup(format!(
                    "provider {}: the value of header {k} is not valid",
                    self.name
                ))
            })?;
            map.insert(name, value);
        }
        Ok(map)
    }
}

impl Endpoint {
    /// The provider's error, with the remedy added where it is the key: a 401 or 403 names
    /// the variable the key came from and the server it was sent to. Other errors pass
    /// unchanged.
    pub(crate) fn explain(&self, e: LlmError) -> LlmError {
        match e {
            LlmError::Status {
                provider,
                status: status @ (401 | 403),
                message,
                retry_after,
            } => {
                let var = &self.api_key_env;
                let url = redact(&self.base_url);
                let remedy = match self.api_key {
                    Some(_) => format!(
                        "The key came from {var}; check that it is set to a valid key for {url}"
                    ),
                    None => format!(
                        "No key was sent: {var} is not set; set it to a valid key for {url}"
                    ),
                };
                let reason = if status == 401 {
                    "Unauthorized"
                } else {
                    "Forbidden"
                };
                LlmError::Status {
                    provider,
                    status,
                    message: format!("{reason}: {message}. {remedy}"),
                    retry_after,
                }
            }
            e => e,
        }
    }
}

/// The error for a connection `url` refused, when its host is this machine or a private
/// network ([`is_local`]); `None` for anything else, which is retried as a network fault.
/// A public address that refuses may be a load balancer between deploys; a local one that
/// refuses has no server.
pub(crate) fn local_refusal(provider: &str, url: &str, e: &reqwest::Error) -> Option<LlmError> {
    if !e.is_connect() || !refused(e) {
        return None;
    }
    let parsed = reqwest::Url::parse(url).ok()?;
    if !is_local(&parsed) {
        return None;
    }
    let server = match parsed.port_or_known_default() {
        Some(port) => format!("{}://{}:{port}", parsed.scheme(), parsed.host_str()?),
        None => format!("{}://{}", parsed.scheme(), parsed.host_str()?),
    };
    Some(LlmError::Refused {
        provider: provider.to_string(),
        url: redact(url),
        server,
    })
}

/// Whether the error's causes include the operating system's "connection refused".
fn refused(e: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// Loopback, private (RFC 1918), unique-local IPv6 (fc00::/7), or a `localhost` name.
pub fn is_local(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => local_v4(ip),
        Ok(IpAddr::V6(ip)) => local_v6(ip),
        Err(_) => {
            let name = bare.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
    }
}

fn local_v4(ip: Ipv4Addr) -> bool {
    ip.is_loopback() || ip.is_private()
}

fn local_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return local_v4(v4);
    }
    ip.is_loopback() || (ip.segments()[0] & 0xfe00) == 0xfc00
}

/// The URL without credentials or query: some gateways take a key as `user:pass@` or
/// `?key=`, and error messages end up in sessions and `--json` output.
fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.to_string()
        }
        Err(_) => "(the configured base_url)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_means_loopback_private_unique_local_and_localhost() {
        let local = |u: &str| is_local(&reqwest::Url::parse(u).unwrap());
        for u in [
            "http://127.0.0.1:9/v1",
            "http://127.8.9.10/",
            "http://[::1]:8080/",
            "http://10.1.2.3/",
            "http://172.16.0.1/",
            "http://172.31.255.255/",
            "http://192.168.1.1/",
            "http://[fc00::1]/",
            "http://[fd12:3456::1]/",
            "http://localhost:11434/v1",
            "http://LOCALHOST./",
            "http://api.localhost/",
            "http://[::ffff:192.168.0.1]/",
        ] {
            assert!(local(u), "{u} is local");
        }
        for u in [
            "https://api.openai.com/v1",
            "http://172.32.0.1/",
            "http://172.15.255.255/",
            "http://8.8.8.8/",
            "http://[2001:db8::1]/",
            "http://[fe00::1]/",
            "http://localhost.example.com/",
            "http://11.0.0.1/",
        ] {
            assert!(!local(u), "{u} is not local");
        }
    }

    fn endpoint(key: Option<&str>) -> Endpoint {
        Endpoint {
            name: "local".into(),
            base_url: "http://user:pw@127.0.0.1:8/v1?key=secret".into(),
            api_key: key.map(str::to_string),
            api_key_env: "LOCAL_KEY".into(),
            headers: Vec::new(),
            idle_timeout: Duration::from_secs(1),
        }
    }

    fn status(code: u16) -> LlmError {
        LlmError::Status {
            provider: "local".into(),
            status: code,
            message: "bad key".into(),
            retry_after: None,
        }
    }

    #[test]
    fn a_refused_key_names_its_variable_and_no_credentials() {
        let said = endpoint(Some("k")).explain(status(401)).to_string();
        assert!(
            said.contains("401")
                && said.contains("Unauthorized: bad key")
                && said.contains("LOCAL_KEY")
                && said.contains("http://127.0.0.1:8/v1"),
            "{said}"
        );
        assert!(!said.contains("secret") && !said.contains("pw"), "{said}");
        let said = endpoint(None).explain(status(403)).to_string();
        assert!(
            said.contains("Forbidden") && said.contains("LOCAL_KEY is not set"),
            "{said}"
        );
        // Anything else is the provider's own words only.
        let said = endpoint(Some("k")).explain(status(500)).to_string();
        assert!(!said.contains("LOCAL_KEY"), "{said}");
    }
}
