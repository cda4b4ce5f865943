//! Requests judged by method and path: the hosts an `http` rule names (or a secret needs)
//! are inspected rather than tunnelled.
//!
//! For such a host the proxy answers the sandbox's `CONNECT` and then its TLS handshake
//! itself, with a certificate for that name from the session's own authority ([`ca`]).
//! Each HTTP/1.1 request on the connection ([`http1`]) is judged by the `http` permission
//! as `METHOD host/path` through the session's gate (so rules, asks and "always" work as
//! for every other permission), gets its secrets put in ([`crate::secrets`]), and goes on
//! over a TLS connection of the proxy's own to the real host, verified against the
//! host's trust (never the session authority), direct or through the upstream proxy. A
//! refused request gets a `403` naming the rule, and the connection ends there.
//!
//! Every other host stays a tunnel the proxy cannot read, as before: inspection is for
//! the hosts a rule or a secret is about, not a way to read everything.

pub mod ca;
pub mod http1;
mod serve;

use std::path::PathBuf;
use std::sync::Arc;

use runner_permission::rules::Rule;
use runner_permission::wildcard;

use crate::secrets::Secrets;

pub(crate) use serve::{Upstream, judge, serve};

/// Why inspection could not be set up; each names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error(transparent)]
    Ca(#[from] ca::CaError),
    #[error(
        "cannot read the certificate file {} to verify inspected hosts: {error}",
        path.display()
    )]
    Trust {
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error(
        "no certificate authority to verify inspected hosts against: the host has no system bundle and [network] ca_certificates names none"
    )]
    NoTrust,
}

/// What the proxy needs to inspect: the session authority, the hosts, the secrets, and
/// the trust its own connections to those hosts are verified against.
pub struct Inspection {
    ca: ca::SessionCa,
    hosts: Vec<String>,
    pub secrets: Secrets,
    upstream: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for Inspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspection")
            .field("hosts", &self.hosts)
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

/// The host an `http` rule's pattern names: `METHOD host/path` gives `host`. A pattern
/// that names every host (`*`, `* *`, `* */x`) names none: inspecting everything would
/// break every client that pins its certificates, so the hosts must be said.
pub fn rule_host(pattern: &str) -> Option<String> {
    let (_, rest) = pattern.split_once(' ')?;
    let host = rest.split('/').next().unwrap_or_default().trim();
    (!host.is_empty() && host.chars().any(|c| c != '*')).then(|| host.to_ascii_lowercase())
}

/// The subject an `http` rule judges: `METHOD host/path` (the path decoded, no query).
pub fn subject(method: &str, host: &str, path: &str) -> String {
    format!("{method} {host}{path}")
}

impl Inspection {
    /// The hosts `rules` (their `http` ones) name.
    pub fn hosts_of(rules: &[Rule]) -> Vec<String> {
        let mut hosts: Vec<String> = rules
            .iter()
            .filter(|r| r.permission == "http")
            .filter_map(|r| rule_host(&r.pattern))
            .collect();
        hosts.sort();
        hosts.dedup();
        hosts
    }

    /// Inspection for `rules` and `secrets`, or `None` when no rule or secret names a host.
    /// `trust`: PEM files the proxy verifies inspected hosts against (the host's system
    /// bundle, then the configured authorities).
    pub fn new(
        rules: &[Rule],
        secrets: Secrets,
        trust: &[PathBuf],
    ) -> Result<Option<Inspection>, InspectError> {
        let mut hosts = Self::hosts_of(rules);
        hosts.extend(secrets.hosts().map(str::to_string));
        hosts.sort();
        hosts.dedup();
        if hosts.is_empty() {
            return Ok(None);
        }
        runner_http::install_tls();
        let upstream = client_config(trust)?;
        Ok(Some(Inspection {
            ca: ca::SessionCa::generate()?,
            hosts,
            secrets,
            upstream,
        }))
    }

    /// The session authority's certificate, for the sandbox's trust bundle.
    pub fn ca_pem(&self) -> String {
        self.ca.certificate_pem()
    }

    /// The host patterns inspected.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// Whether connections to `host` are inspected.
    pub fn inspects(&self, host: &str) -> bool {
        self.hosts.iter().any(|p| wildcard::matches(host, p))
    }

    /// What becomes of a `CONNECT` tunnel to `host`. One to an address carries TLS that
    /// names no host, so the server behind it picks the site by the `Host` inside, which
    /// could name an inspected host and reach a path its rules deny: its TLS is inspected
    /// too, where each request's `Host` must name the address.
    pub fn tunnel(&self, host: &str) -> Tunnel {
        if self.inspects(host) {
            Tunnel::Inspected
        } else if host.parse::<std::net::IpAddr>().is_ok() {
            Tunnel::InspectedIfTls
        } else {
            Tunnel::Unread
        }
    }
}

/// How a tunnel is carried ([`Inspection::tunnel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tunnel {
    /// Its TLS answered here, each request judged.
    Inspected,
    /// An address: inspected if the client's first bytes are a TLS handshake, else a
    /// tunnel (another protocol, judged by its first bytes as any tunnel's are).
    InspectedIfTls,
    /// Bytes both ways, unread past the first flight.
    Unread,
}

/// The client side of the proxy's own connections: the given authorities, HTTP/1.1.
fn client_config(trust: &[PathBuf]) -> Result<Arc<rustls::ClientConfig>, InspectError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for path in trust {
        let pem = std::fs::read(path).map_err(|error| InspectError::Trust {
            path: path.clone(),
            error,
        })?;
        // A bundle may hold entries rustls cannot use; the others still count.
        for cert in CertificateDer::pem_slice_iter(&pem).flatten() {
            let _ = roots.add(cert);
        }
    }
    if roots.is_empty() {
        return Err(InspectError::NoTrust);
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests;
