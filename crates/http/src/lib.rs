//! The one HTTP client setup the host side shares (model providers; `webfetch` and remote
//! MCP servers through `network::outbound`, which adds the address rules on top).
//!
//! TLS is rustls with the `ring` provider: no OpenSSL and no aws-lc build, so the static
//! binary stays buildable with only a C compiler. rustls needs its provider installed once
//! per process before any client exists.

use std::sync::Once;
use std::time::Duration;

static PROVIDER: Once = Once::new();

/// A client builder with TLS ready and sane connect timeouts. Callers add their own
/// per-request timeouts: a streaming model answer can legitimately last minutes.
pub fn client_builder() -> reqwest::ClientBuilder {
    install_tls();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .user_agent(concat!("runner/", env!("CARGO_PKG_VERSION")))
}

/// Installs rustls's provider once per process (every HTTP client needs it first).
pub fn install_tls() {
    PROVIDER.call_once(|| {
        // Err only means another provider was installed first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
