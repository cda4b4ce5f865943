//! The session's own certificate authority, made when the proxy starts.
//!
//! Inspecting a host means the proxy answers the sandbox's TLS handshake itself, so it
//! needs a certificate for that host that the sandbox's clients accept. Each session makes
//! a fresh authority for this: its certificate joins the sandbox's trust bundle, its
//! private key exists only in this process's memory (never written, never sent), and it
//! signs leaf certificates only for the hosts being inspected, as they are first met. A
//! key that dies with the session cannot be used to vouch for anything after it, and one
//! session's authority means nothing to another's sandbox.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Why the authority or one of its certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("cannot make the session's certificate authority: {0}")]
    Authority(String),
    #[error("cannot make a certificate for {host}: {why}")]
    Leaf { host: String, why: String },
}

/// A per-session authority and the server configurations it has signed, one per host.
pub struct SessionCa {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    /// One key for every leaf: making a key pair per host would cost a handshake's worth
    /// of time for nothing, as they all live and die in this process.
    leaf_key: rcgen::KeyPair,
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

impl std::fmt::Debug for SessionCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("SessionCa").finish_non_exhaustive()
    }
}

impl SessionCa {
    /// A new authority, named for runner's session so a person who meets its certificate
    /// knows where it came from.
    pub fn generate() -> Result<SessionCa, CaError> {
        let fail = |e: rcgen::Error| CaError::Authority(e.to_string());
        let key = rcgen::KeyPair::generate().map_err(fail)?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            "runner session authority (TLS inspection of this session's sandbox)",
        );
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let issuer = rcgen::CertifiedIssuer::self_signed(params, key).map_err(fail)?;
        let leaf_key = rcgen::KeyPair::generate().map_err(fail)?;
        Ok(SessionCa {
            issuer,
            leaf_key,
            leaves: Mutex::default(),
        })
    }

    /// The authority's certificate, PEM: what the sandbox's trust bundle gets. Public.
    pub fn certificate_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The server side of a handshake for `host` (a name, or an address for which the
    /// certificate carries an IP entry), offering HTTP/1.1 only: what the proxy reads is
    /// HTTP/1.1, and a client told `h2` would speak frames it cannot judge.
    pub fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, CaError> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(config) = leaves.get(host) {
            return Ok(config.clone());
        }
        let leaf = |why: String| CaError::Leaf {
            host: host.to_string(),
            why,
        };
        let mut params = rcgen::CertificateParams::new(vec![host.to_string()])
            .map_err(|e| leaf(e.to_string()))?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, host);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params
            .signed_by(&self.leaf_key, &self.issuer)
            .map_err(|e| leaf(e.to_string()))?;
        let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.serialize_der()));
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| leaf(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        leaves.insert(host.to_string(), config.clone());
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaf_is_signed_for_its_host_and_kept() {
        runner_http::install_tls();
        let ca = SessionCa::generate().unwrap();
        let pem = ca.certificate_pem();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        assert!(!pem.contains("PRIVATE KEY"));
        assert!(!format!("{ca:?}").contains("PRIVATE"));
        let a = ca.server_config("api.example.org").unwrap();
        let again = ca.server_config("api.example.org").unwrap();
        assert!(Arc::ptr_eq(&a, &again), "made once per host");
        assert_eq!(a.alpn_protocols, vec![b"http/1.1".to_vec()]);
        // An address gets a certificate too (an IP entry).
        ca.server_config("127.0.0.1").unwrap();
        // Two sessions, two authorities.
        assert_ne!(SessionCa::generate().unwrap().certificate_pem(), pem);
    }
}
