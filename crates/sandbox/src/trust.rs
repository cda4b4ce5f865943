//! The certificate authorities the host trusts, carried behind the wall.
//!
//! Where a machine reaches the internet through a TLS-inspecting gateway (a company's
//! proxy, a CI farm's egress), every certificate it sees is signed by an authority the
//! machine added to its own store (`/usr/local/share/ca-certificates/`), not by one an
//! image ships. Landlock reads the host's `/etc/ssl` and so trusts it; a container has the
//! image's bundle and fails with `CERTIFICATE_VERIFY_FAILED`. So a sandbox gets one bundle
//! file: the host's system bundle (or the file runner's own `SSL_CERT_FILE` names), then
//! each extra PEM file of the user's `[network] ca_certificates`. Docker mounts it
//! read-only at [`INSIDE`]; landlock reads it where it is. Either way the usual variables
//! point at it, since no one library reads them all.
//!
//! The bundle is written once per content, under a name made of its hash, and never
//! changed after: a container started again later (an evaluation's verifier) mounts the
//! same file, and two runs never write the file the other reads.

use std::path::{Path, PathBuf};

use sha2::Digest;

/// Where a container sees the bundle.
pub const INSIDE: &str = "/etc/runner/ca-certificates.crt";

/// The variables that tell TLS clients which authorities to trust: OpenSSL (and so
/// Python's `ssl`, Ruby, wget), requests, pip, Node (added to its own list), curl, git.
pub const VARIABLES: [&str; 6] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
];

/// Where distributions keep the system bundle, the first one found is the host's.
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Alpine, Arch
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // Fedora, RHEL
    "/etc/pki/tls/certs/ca-bundle.crt",   // older RHEL
    "/etc/ssl/ca-bundle.pem",             // openSUSE
    "/etc/ssl/cert.pem",                  // others
];

/// Why the bundle could not be made: the path it is about, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error(
        "cannot read the certificate file {}: {error} (fix or remove it under [network] ca_certificates)",
        path.display()
    )]
    Read {
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error(
        "{} holds no PEM certificate (a line `-----BEGIN CERTIFICATE-----`); name PEM files under [network] ca_certificates",
        .0.display()
    )]
    NotPem(PathBuf),
    #[error("cannot write the sandbox's certificate bundle in {}: {error}", dir.display())]
    Write {
        dir: PathBuf,
        #[source]
        error: std::io::Error,
    },
}

/// The host's system bundle: the file runner's own `SSL_CERT_FILE` names, else the first of
/// the distributions' places that exists.
pub fn system_bundle() -> Option<PathBuf> {
    let named = std::env::var_os("SSL_CERT_FILE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    named
        .into_iter()
        .chain(SYSTEM_BUNDLES.iter().map(PathBuf::from))
        .find(|p| p.is_file())
}

/// Writes the bundle of `system` (the host's, when there is one) and `extra` into `dir`
/// and returns its path; `None` when there is nothing to carry. An extra file that cannot
/// be read or holds no certificate is an error: a silently missing authority would show
/// only as a failed handshake deep inside a command.
pub fn bundle(
    system: Option<&Path>,
    extra: &[PathBuf],
    dir: &Path,
) -> Result<Option<PathBuf>, TrustError> {
    let mut text = Vec::new();
    if let Some(system) = system {
        text = std::fs::read(system).map_err(|error| TrustError::Read {
            path: system.to_path_buf(),
            error,
        })?;
    }
    for path in extra {
        let pem = std::fs::read(path).map_err(|error| TrustError::Read {
            path: path.clone(),
            error,
        })?;
        if !contains(&pem, b"-----BEGIN CERTIFICATE-----") {
            return Err(TrustError::NotPem(path.clone()));
        }
        if !text.is_empty() && !text.ends_with(b"\n") {
            text.push(b'\n');
        }
        text.extend_from_slice(&pem);
    }
    if text.is_empty() {
        return Ok(None);
    }
    let hash = sha2::Sha256::digest(&text);
    let name: String = hash[..12].iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(format!("ca-{name}.pem"));
    if path.is_file() {
        return Ok(Some(path));
    }
    let write = |error: std::io::Error| TrustError::Write {
        dir: dir.to_path_buf(),
        error,
    };
    std::fs::create_dir_all(dir).map_err(write)?;
    // Whole or not at all: a reader never sees half a bundle.
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(write)?;
    std::io::Write::write_all(&mut file, &text).map_err(write)?;
    // Readable by the sandbox's user, who may not be the file's owner (a task image's).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(0o644)).map_err(write)?;
    file.persist(&path).map_err(|e| write(e.error))?;
    Ok(Some(path))
}

/// The variables pointing at the bundle, seen at `at`, replacing any of the same name.
pub fn set_env(env: &mut Vec<(String, String)>, at: &Path) {
    env.retain(|(k, _)| !VARIABLES.contains(&k.as_str()));
    let at = at.display().to_string();
    env.extend(VARIABLES.iter().map(|k| (k.to_string(), at.clone())));
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";

    #[test]
    fn the_bundle_is_the_system_one_then_each_extra_and_is_named_by_its_content() {
        let tmp = tempfile::tempdir().unwrap();
        let system = tmp.path().join("system.crt");
        std::fs::write(&system, "SYSTEM").unwrap();
        let extra = tmp.path().join("company.pem");
        std::fs::write(&extra, PEM).unwrap();
        let dir = tmp.path().join("out");
        let path = bundle(Some(&system), std::slice::from_ref(&extra), &dir)
            .unwrap()
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("SYSTEM\n{PEM}")
        );
        // The same content is the same file; another content another one.
        let again = bundle(Some(&system), std::slice::from_ref(&extra), &dir).unwrap();
        assert_eq!(again.as_deref(), Some(path.as_path()));
        let alone = bundle(Some(&system), &[], &dir).unwrap().unwrap();
        assert_ne!(alone, path);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    }

    #[test]
    fn an_extra_file_that_is_not_a_certificate_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let key = tmp.path().join("key.pem");
        std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\n").unwrap();
        let err = bundle(None, std::slice::from_ref(&key), tmp.path()).unwrap_err();
        assert!(matches!(err, TrustError::NotPem(_)), "{err}");
        assert!(err.to_string().contains("key.pem"), "{err}");
        let missing = tmp.path().join("missing.pem");
        let err = bundle(None, &[missing], tmp.path()).unwrap_err();
        assert!(err.to_string().contains("missing.pem"), "{err}");
        assert!(bundle(None, &[], tmp.path()).unwrap().is_none());
    }

    #[test]
    fn the_variables_replace_what_was_there() {
        let mut env = vec![
            ("SSL_CERT_FILE".to_string(), "/old".to_string()),
            ("PATH".to_string(), "/bin".to_string()),
        ];
        set_env(&mut env, Path::new(INSIDE));
        assert_eq!(env.len(), 1 + VARIABLES.len());
        assert!(env.iter().all(|(k, v)| k == "PATH" || v == INSIDE));
    }
}
