//! An HTTPS server on the host's loopback whose certificate is signed by an authority made
//! for the test alone: no trust store anywhere holds it, so a client verifies the server
//! only when the test's config hands that authority over. It stands for a company's
//! TLS-inspecting gateway, or a private registry with its own CA.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What the server answers every request with.
pub const BODY: &str = "hello over tls from the test's own authority";

pub struct TlsOutside {
    pub port: u16,
    /// The authority's certificate, PEM.
    pub ca_pem: String,
    /// TLS handshakes completed.
    pub handshakes: Arc<AtomicUsize>,
}

impl TlsOutside {
    /// Serves [`BODY`] at every path of `https://127.0.0.1:PORT/` (the certificate names
    /// `127.0.0.1` and `localhost`).
    pub fn start() -> TlsOutside {
        runner_http::install_tls();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "runner test authority");
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "127.0.0.1");
        let cert = params.signed_by(&key, &ca).unwrap();
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the TLS server");
        let port = listener.local_addr().unwrap().port();
        let handshakes = Arc::new(AtomicUsize::new(0));
        let counted = handshakes.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (config, counted) = (config.clone(), counted.clone());
                std::thread::spawn(move || {
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(conn, stream);
                    let mut reader = BufReader::new(&mut tls);
                    let mut line = String::new();
                    // Reading the request completes the handshake; a client that refused
                    // the certificate ends here.
                    if reader.read_line(&mut line).map_or(true, |n| n == 0) {
                        return;
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).map_or(true, |n| n == 0) || h == "\r\n" {
                            break;
                        }
                    }
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{BODY}",
                        BODY.len()
                    );
                    let _ = tls.write_all(answer.as_bytes());
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                });
            }
        });
        TlsOutside {
            port,
            ca_pem: ca.pem(),
            handshakes,
        }
    }

    pub fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::SeqCst)
    }
}
