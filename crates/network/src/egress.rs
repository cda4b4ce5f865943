//! The host's own way out, where it has one: an upstream proxy named in runner's
//! environment (`https_proxy`, `http_proxy`, `all_proxy`, either case; `no_proxy` for the
//! hosts that go direct), as on machines that reach the internet only through a company's
//! proxy.
//!
//! Every connection runner makes from the host then goes through it: the allow-list's
//! (a `CONNECT` for a tunnel, an absolute-form request for plain HTTP), and the host's own
//! requests (`webfetch`, remote MCP servers, web search, which hand the proxy to their
//! HTTP client; the model providers' client reads the same variables itself). The
//! sandbox never learns of it: its commands see only runner's proxy on their own loopback,
//! and the upstream proxy's address and credentials stay in runner's environment.
//!
//! Only `http://` proxies are spoken to (a TLS or SOCKS proxy is refused by name, not
//! bypassed): a connection that should have gone through the proxy never goes direct.

use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::Duration;

use base64::Engine as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The longest proxy answer head read.
const MAX_ANSWER: usize = 16 * 1024;

/// An upstream proxy variable runner cannot use; the connections it names are refused
/// with this, never made direct.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{variable}={shown} cannot be used: {why}. Set it to http://[user:password@]host:port, or unset it"
)]
pub struct BadProxy {
    pub variable: String,
    /// The value with any password hidden.
    pub shown: String,
    pub why: String,
}

/// Why a connection through the upstream proxy was not made.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot reach the upstream proxy {proxy}: {error}")]
    Reach {
        proxy: String,
        #[source]
        error: std::io::Error,
    },
    #[error("the upstream proxy {proxy} answered {status:?}")]
    Refused { proxy: String, status: String },
    #[error("the upstream proxy {proxy} did not answer in {secs} s")]
    Timeout { proxy: String, secs: u64 },
}

/// One `http://` proxy: where it is and the `Proxy-Authorization` its URL carries.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyServer {
    pub host: String,
    pub port: u16,
    /// `Basic …`, from the URL's user and password.
    authorization: Option<String>,
    /// The URL as given, for HTTP clients that speak to the proxy themselves.
    url: String,
}

impl std::fmt::Debug for ProxyServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the credentials.
        write!(f, "ProxyServer({})", self.address())
    }
}

impl ProxyServer {
    /// `host:port`, as messages and records name it.
    pub fn address(&self) -> String {
        authority(&self.host, self.port)
    }

    /// The URL as configured, credentials included: for an HTTP client's proxy setting.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `Basic …` when the URL carries a user.
    pub fn authorization(&self) -> Option<&str> {
        self.authorization.as_deref()
    }

    /// A connection to the proxy.
    pub async fn connect(&self, timeout: Duration) -> Result<TcpStream, ProxyError> {
        let reach = |error| ProxyError::Reach {
            proxy: self.address(),
            error,
        };
        match tokio::time::timeout(timeout, TcpStream::connect((self.host.as_str(), self.port)))
            .await
        {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(reach(e)),
            Err(_) => Err(ProxyError::Timeout {
                proxy: self.address(),
                secs: timeout.as_secs(),
            }),
        }
    }

    /// A tunnel to `host:port` through the proxy: `CONNECT`, and its answer read to the
    /// end of its head and no further (the destination may speak first, as SSH does).
    pub async fn tunnel(
        &self,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<TcpStream, ProxyError> {
        let mut stream = self.connect(timeout).await?;
        let target = authority(host, port);
        let mut ask = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
        if let Some(auth) = &self.authorization {
            ask.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
        }
        ask.push_str("\r\n");
        let answer = async {
            stream.write_all(ask.as_bytes()).await?;
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && head.len() < MAX_ANSWER {
                if stream.read(&mut byte).await? == 0 {
                    break;
                }
                head.push(byte[0]);
            }
            Ok::<_, std::io::Error>(head)
        };
        let head = match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(h)) => h,
            Ok(Err(e)) => {
                return Err(ProxyError::Reach {
                    proxy: self.address(),
                    error: e,
                });
            }
            Err(_) => {
                return Err(ProxyError::Timeout {
                    proxy: self.address(),
                    secs: timeout.as_secs(),
                });
            }
        };
        let text = String::from_utf8_lossy(&head);
        let status = text.lines().next().unwrap_or_default().trim().to_string();
        let code = status.split_whitespace().nth(1).unwrap_or_default();
        if head.ends_with(b"\r\n\r\n") && code.len() == 3 && code.starts_with('2') {
            Ok(stream)
        } else {
            Err(ProxyError::Refused {
                proxy: self.address(),
                status: if status.is_empty() {
                    "nothing".into()
                } else {
                    status
                },
            })
        }
    }
}

/// The upstream proxies of runner's environment.
#[derive(Debug, Clone, Default)]
pub struct Egress {
    /// For `https://` and every tunnel.
    https: Option<Result<ProxyServer, BadProxy>>,
    /// For plain `http://` requests.
    http: Option<Result<ProxyServer, BadProxy>>,
    no_proxy: Vec<String>,
}

impl Egress {
    /// The proxies of this process's environment, read once.
    pub fn from_env() -> &'static Egress {
        static EGRESS: OnceLock<Egress> = OnceLock::new();
        EGRESS.get_or_init(|| Egress::from_vars(|k| std::env::var(k).ok()))
    }

    /// The proxies `var` names (the lower-case spelling first, as curl reads them).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Egress {
        let first = |names: &[&str]| {
            names.iter().find_map(|n| {
                var(n)
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| (n.to_string(), v))
            })
        };
        let all = first(&["all_proxy", "ALL_PROXY"]);
        let https = first(&["https_proxy", "HTTPS_PROXY"]).or_else(|| all.clone());
        let http = first(&["http_proxy", "HTTP_PROXY"]).or(all);
        let no_proxy = first(&["no_proxy", "NO_PROXY"])
            .map(|(_, v)| {
                v.split(',')
                    .map(|e| e.trim().to_ascii_lowercase())
                    .filter(|e| !e.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Egress {
            https: https.map(|(k, v)| parse(&k, &v)),
            http: http.map(|(k, v)| parse(&k, &v)),
            no_proxy,
        }
    }

    /// Whether any proxy is configured at all.
    pub fn is_set(&self) -> bool {
        self.https.is_some() || self.http.is_some()
    }

    /// The proxy a connection to `host` goes through (`tunnel`: a `CONNECT` or an
    /// `https://` URL; else a plain `http://` request); `Ok(None)` when it goes direct.
    pub fn for_host(&self, host: &str, tunnel: bool) -> Result<Option<&ProxyServer>, BadProxy> {
        let chosen = if tunnel { &self.https } else { &self.http };
        match chosen {
            None => Ok(None),
            Some(_) if self.bypasses(host) => Ok(None),
            Some(Ok(p)) => Ok(Some(p)),
            Some(Err(e)) => Err(e.clone()),
        }
    }

    /// The proxy of a URL's scheme, unless `no_proxy` sends its host direct.
    pub fn for_url(&self, url: &reqwest::Url) -> Result<Option<&ProxyServer>, BadProxy> {
        let host = url
            .host_str()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']');
        self.for_host(host, url.scheme() != "http")
    }

    /// The proxies that can be used, in a fixed order (the one for tunnels, then the one
    /// for plain requests), each once.
    pub fn proxies(&self) -> Vec<&ProxyServer> {
        let mut all: Vec<&ProxyServer> = Vec::new();
        for p in [&self.https, &self.http].into_iter().flatten().flatten() {
            if !all.contains(&p) {
                all.push(p);
            }
        }
        all
    }

    /// `no_proxy` as curl reads it: `*` for every host; a name for itself and the names
    /// under it (a leading dot or `*.` changes nothing); an address, or a CIDR range of
    /// them; a `:port` after an entry is ignored.
    fn bypasses(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let ip = host.parse::<IpAddr>().ok();
        self.no_proxy.iter().any(|entry| {
            if entry == "*" {
                return true;
            }
            let entry = entry.trim_start_matches("*.").trim_start_matches('.');
            if let (Some(ip), Some((net, bits))) = (ip, entry.split_once('/')) {
                return in_range(ip, net, bits);
            }
            let bare = strip_port(entry);
            match (ip, bare.parse::<IpAddr>()) {
                (Some(ip), Ok(e)) => ip == e,
                (None, Err(_)) => host == bare || host.ends_with(&format!(".{bare}")),
                _ => false,
            }
        })
    }
}

/// `host` without a trailing `:port` (an IPv6 address in brackets loses them).
fn strip_port(entry: &str) -> &str {
    if let Some(rest) = entry.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match entry.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => entry,
    }
}

fn in_range(ip: IpAddr, net: &str, bits: &str) -> bool {
    let (Ok(net), Ok(bits)) = (net.parse::<IpAddr>(), bits.parse::<u32>()) else {
        return false;
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// One variable's proxy URL.
fn parse(variable: &str, value: &str) -> Result<ProxyServer, BadProxy> {
    let bad = |why: &str| BadProxy {
        variable: variable.to_string(),
        shown: hide_password(value),
        why: why.to_string(),
    };
    // `host:port` alone means an HTTP proxy, as curl takes it.
    let text = if value.contains("://") {
        value.trim().to_string()
    } else {
        format!("http://{}", value.trim())
    };
    let url = reqwest::Url::parse(&text).map_err(|e| bad(&format!("not a URL ({e})")))?;
    if url.scheme() != "http" {
        return Err(bad(&format!(
            "runner speaks to http:// proxies only, not {}://",
            url.scheme()
        )));
    }
    let host = url
        .host_str()
        .ok_or_else(|| bad("no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let authorization = (!url.username().is_empty()).then(|| {
        let pair = format!(
            "{}:{}",
            decode(url.username()),
            decode(url.password().unwrap_or(""))
        );
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        )
    });
    Ok(ProxyServer {
        host,
        port: url.port().unwrap_or(80),
        authorization,
        url: text,
    })
}

/// The value for a message: its password replaced.
fn hide_password(value: &str) -> String {
    match (value.find("://"), value.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let user = &value[s + 3..at];
            let user = user.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &value[..s + 3], &value[at..])
        }
        _ => value.to_string(),
    }
}

/// A direct connection to the first of `addrs` that answers within `timeout` each (the
/// way out when no upstream proxy is set), with the last failure when none does.
pub(crate) async fn connect_direct(
    addrs: &[std::net::SocketAddr],
    timeout: Duration,
) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::other("no address to connect to");
    for addr in addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = e,
            Err(_) => {
                last = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{addr} did not answer in {timeout:?}"),
                )
            }
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn egress(vars: &[(&str, &str)]) -> Egress {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Egress::from_vars(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn each_kind_of_connection_takes_its_variable() {
        let e = egress(&[
            ("HTTPS_PROXY", "http://user:p%40ss@proxy.corp:3128"),
            ("http_proxy", "plain.corp:8080"),
        ]);
        let tls = e.for_host("pypi.org", true).unwrap().unwrap();
        assert_eq!(tls.address(), "proxy.corp:3128");
        // "user:p@ss", base64.
        assert_eq!(tls.authorization(), Some("Basic dXNlcjpwQHNz"));
        let plain = e.for_host("deb.debian.org", false).unwrap().unwrap();
        assert_eq!(plain.address(), "plain.corp:8080");
        assert_eq!(plain.authorization(), None);
        // all_proxy stands in for a missing one; nothing set, nothing used.
        let e = egress(&[("all_proxy", "http://all:1")]);
        assert_eq!(e.for_host("x", false).unwrap().unwrap().address(), "all:1");
        assert!(egress(&[]).for_host("x", true).unwrap().is_none());
        assert!(!egress(&[]).is_set());
    }

    #[test]
    fn no_proxy_sends_names_addresses_and_ranges_direct() {
        let e = egress(&[
            ("https_proxy", "http://p:1"),
            (
                "NO_PROXY",
                "internal.corp, .svc.local,10.0.0.0/8, 192.168.1.5,localhost:8080,[::1]",
            ),
        ]);
        for direct in [
            "internal.corp",
            "git.internal.corp",
            "a.svc.local",
            "10.2.3.4",
            "192.168.1.5",
            "localhost",
            "::1",
            "INTERNAL.CORP.",
        ] {
            assert!(e.for_host(direct, true).unwrap().is_none(), "{direct}");
        }
        for proxied in [
            "pypi.org",
            "notinternal.corp",
            "11.0.0.1",
            "192.168.1.6",
            "corp",
        ] {
            assert!(e.for_host(proxied, true).unwrap().is_some(), "{proxied}");
        }
        let all = egress(&[("https_proxy", "http://p:1"), ("no_proxy", "*")]);
        assert!(all.for_host("pypi.org", true).unwrap().is_none());
    }

    #[test]
    fn a_proxy_runner_cannot_speak_to_is_an_error_that_hides_the_password() {
        let e = egress(&[("HTTPS_PROXY", "socks5://me:secret@p:1080")]);
        let err = e.for_host("pypi.org", true).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("http:// proxies only"), "{text}");
        assert!(
            text.contains("me:***@p:1080") && !text.contains("secret"),
            "{text}"
        );
        // A host no_proxy names still goes direct; the other kind is not affected.
        assert!(e.for_host("x", false).unwrap().is_none());
        let shown = format!("{:?}", parse("h", "http://u:secret@p:1").unwrap());
        assert!(!shown.contains("secret"), "{shown}");
    }
}
