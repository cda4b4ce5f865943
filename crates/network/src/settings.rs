//! `[network]` of the user's own config: the authorities sandboxes trust, the secrets the
//! proxy puts into requests, and the programs a host is open to. The config loader only
//! reads the table; what it means for the proxy (the secrets' values, the session's
//! inspecting authority, the trust bundle that carries it) is made here, beside the proxy
//! that uses it, so a mistake in it is an error of this crate naming the secret, host or
//! file it is about.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::inspect::{InspectError, Inspection};
use runner_permission::rules::Rule;
use runner_sandbox::BackendKind;
use runner_sandbox::spec::{Network, SandboxSpec};

/// `[network]` in the user's own config or `--config`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSettings {
    /// PEM files of authorities sandboxes trust beside the host's own bundle (a company's
    /// TLS inspection CA, a private registry's); relative to the file that names them.
    #[serde(default)]
    pub ca_certificates: Vec<PathBuf>,
    /// `[network.secrets.NAME]`: tokens the sandbox sees only as a placeholder, which the
    /// inspecting proxy puts in on requests to the secret's own hosts. Never a project's:
    /// a repository that could name a secret's hosts could send it anywhere.
    #[serde(default)]
    pub secrets: BTreeMap<String, SecretSettings>,
    /// `[network.hosts."NAME"]`: what else a connection to that host must satisfy (only
    /// `programs` so far: the executables allowed to reach it).
    #[serde(default)]
    pub hosts: BTreeMap<String, HostSettings>,
}

/// One host of `[network.hosts."NAME"]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSettings {
    /// The programs that may reach the host: names (the executable's file name; `git`
    /// also covers git's transport helpers) or paths inside the sandbox.
    #[serde(default)]
    pub programs: Vec<String>,
}

/// One secret of `[network.secrets.NAME]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSettings {
    /// The hosts (wildcards as in rules) the real value may be sent to.
    pub hosts: Vec<String>,
    /// The host's environment variable holding the value; the secret's own name if unset.
    pub env: Option<String>,
}

/// Why `[network]` cannot be put in place for a sandbox: each names the secret, host or
/// file it is about and what to change, never a secret's value.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(
        "[network.secrets.{name}]: a secret's name is an environment variable's (letters, digits and _, not starting with a digit)"
    )]
    SecretName { name: String },
    #[error(
        "[network.secrets.{name}] names no hosts: say where its value may be sent (hosts = [\"api.example.org\"])"
    )]
    SecretHosts { name: String },
    #[error(
        "[network.secrets.{name}]: the environment variable {variable} is not set on the host (set it, or name another with env = \"…\")"
    )]
    SecretUnset { name: String, variable: String },
    #[error("cannot make the secrets' placeholders: {0}")]
    Placeholders(#[source] std::io::Error),
    #[error(transparent)]
    Inspect(#[from] InspectError),
    #[error("cannot make {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The sandbox's trust bundle could not be made with the session's authority in it.
    #[error(transparent)]
    Trust(#[from] runner_sandbox::trust::TrustError),
}

impl NetworkSettings {
    /// The `programs` entries, for the proxy ([`crate::programs`]).
    pub fn programs(&self) -> crate::programs::Programs {
        crate::programs::Programs::new(
            self.hosts
                .iter()
                .filter(|(_, h)| !h.programs.is_empty())
                .map(|(name, h)| (name.clone(), h.programs.clone())),
        )
    }

    /// Each secret as `(name, value, hosts)`, its value read from the host's environment
    /// (`var`). A missing value or a secret without hosts is an error naming the secret
    /// and the variable, never a value.
    pub fn secret_values(
        &self,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<(String, String, Vec<String>)>, SettingsError> {
        let mut out = Vec::new();
        for (name, secret) in &self.secrets {
            let valid_name = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !valid_name {
                return Err(SettingsError::SecretName { name: name.clone() });
            }
            if secret.hosts.is_empty() {
                return Err(SettingsError::SecretHosts { name: name.clone() });
            }
            let variable = secret.env.as_deref().unwrap_or(name);
            let value = var(variable).filter(|v| !v.is_empty()).ok_or_else(|| {
                SettingsError::SecretUnset {
                    name: name.clone(),
                    variable: variable.to_string(),
                }
            })?;
            out.push((name.clone(), value, secret.hosts.clone()));
        }
        Ok(out)
    }

    /// The certificate bundle a sandbox trusts, written in `dir`: the host's system
    /// bundle and the extra authorities configured.
    pub fn ca_bundle_in(
        &self,
        dir: &Path,
    ) -> Result<Option<PathBuf>, runner_sandbox::trust::TrustError> {
        let system = runner_sandbox::trust::system_bundle();
        runner_sandbox::trust::bundle(system.as_deref(), &self.ca_certificates, dir)
    }

    /// What the session's proxy inspects, for a walled sandbox on the allow-list whose
    /// `http` rules or secrets name hosts; `None` otherwise. The session's authority is
    /// added to the sandbox's trust bundle here (a new bundle: the spec's, then its
    /// certificate), so it must run before the sandbox starts. Secrets' values come from
    /// runner's own environment; the error names the secret or file, never a value.
    pub fn inspection(
        &self,
        rules: &[Rule],
        spec: &mut SandboxSpec,
    ) -> Result<Option<Arc<Inspection>>, SettingsError> {
        if spec.network != Network::Allowlist || spec.backend == BackendKind::None {
            return Ok(None);
        }
        let declared = self.secret_values(|k| std::env::var(k).ok())?;
        let secrets =
            crate::secrets::Secrets::new(declared).map_err(SettingsError::Placeholders)?;
        let trust: Vec<PathBuf> = runner_sandbox::trust::system_bundle()
            .into_iter()
            .chain(self.ca_certificates.iter().cloned())
            .collect();
        let Some(inspection) = Inspection::new(rules, secrets, &trust)? else {
            return Ok(None);
        };
        spec.ca_bundle = trust_session_ca(spec.ca_bundle.as_deref(), &inspection)?;
        Ok(Some(Arc::new(inspection)))
    }
}

/// A new trust bundle: `bundle`'s authorities (else none), then the session's own, written
/// beside `bundle` (else in the data folder's `runner/ca`).
fn trust_session_ca(
    bundle: Option<&Path>,
    inspection: &Inspection,
) -> Result<Option<PathBuf>, SettingsError> {
    let dir = match bundle.and_then(Path::parent) {
        Some(dir) => dir.to_path_buf(),
        None => runner_dirs::data_home()
            .unwrap_or_else(std::env::temp_dir)
            .join("runner")
            .join("ca"),
    };
    std::fs::create_dir_all(&dir).map_err(|source| SettingsError::CreateDir {
        path: dir.clone(),
        source,
    })?;
    // The bundle is made of files: the authority's certificate (public) goes through one
    // that lives only while the bundle is written.
    let ca_file = dir.join(format!("session-ca-{}.pem", std::process::id()));
    std::fs::write(&ca_file, inspection.ca_pem()).map_err(|source| SettingsError::Write {
        path: ca_file.clone(),
        source,
    })?;
    let made = runner_sandbox::trust::bundle(bundle, std::slice::from_ref(&ca_file), &dir);
    let _ = std::fs::remove_file(&ca_file);
    Ok(made?)
}

/// Puts each secret's placeholder in a sandbox's environment as `NAME`, in place of any
/// value the host's environment passed through (`env_allow` naming it must not carry the
/// real token past the wall).
pub fn put_placeholders(env: &mut Vec<(String, String)>, inspection: &Inspection) {
    for (name, placeholder) in inspection.secrets.environment() {
        env.retain(|(k, _)| *k != name);
        env.push((name, placeholder));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets(toml_text: &str) -> NetworkSettings {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn a_secrets_error_names_the_secret_and_its_variable_never_a_value() {
        let s = secrets(
            "[secrets.GITHUB_TOKEN]\nhosts = [\"github.com\"]\n[secrets.NPM]\nhosts = [\"registry.npmjs.org\"]\nenv = \"MY_NPM\"\n",
        );
        let values = s
            .secret_values(|k| match k {
                "GITHUB_TOKEN" => Some("ghp_x".into()),
                "MY_NPM" => Some("npm_y".into()),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            values[1],
            (
                "NPM".into(),
                "npm_y".into(),
                vec!["registry.npmjs.org".into()]
            )
        );
        let err = s
            .secret_values(|k| (k == "GITHUB_TOKEN").then(|| "ghp_x".into()))
            .unwrap_err();
        assert!(
            matches!(&err, SettingsError::SecretUnset { name, variable } if name == "NPM" && variable == "MY_NPM"),
            "{err}"
        );
        assert!(!err.to_string().contains("ghp_x"), "{err}");
        let err = secrets("[secrets.X]\nhosts = []\n")
            .secret_values(|_| None)
            .unwrap_err();
        assert!(
            matches!(&err, SettingsError::SecretHosts { name } if name == "X"),
            "{err}"
        );
        let err = secrets("[secrets.1X]\nhosts = [\"a\"]\n")
            .secret_values(|_| None)
            .unwrap_err();
        assert!(
            matches!(&err, SettingsError::SecretName { name } if name == "1X"),
            "{err}"
        );
    }
}
