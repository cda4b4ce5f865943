//! The non-permission keys of runner's config files: which model, how to reach providers,
//! how hard to retry, when to compact. They come from the same files as the permission
//! layers (user, project, `--config`), later files winning key by key.
//!
//! A project's `.runner/config.toml` may choose a `model`, but never a `[provider]` table:
//! a repository that could set `base_url` for a provider whose key the user holds could
//! send that key anywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::keys::{Shape, fields_of};
use runner_llm::models::ProviderSettings;
use runner_llm::retry::RetrySettings;
use runner_network::settings::NetworkSettings;

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextSettings {
    /// The fraction of the context window at which old tool output is pruned, then the
    /// conversation compacted (default 0.8).
    pub threshold: Option<f64>,
}

#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub model: Option<String>,
    pub provider: BTreeMap<String, ProviderSettings>,
    pub retry: Option<RetrySettings>,
    pub context: Option<ContextSettings>,
    /// Every layer's hooks, each marked with where it may run: the user's own config and
    /// `--config` on the host, a project's only in the sandbox.
    pub hooks: Vec<runner_tool::hooks::Hook>,
    /// MCP servers by name; a later layer's server replaces an earlier one of that name.
    pub mcp: BTreeMap<String, runner_tool::mcp::McpSpec>,
    /// The search service of `websearch` and `codesearch` (never a project's: it says
    /// where the user's key goes).
    pub websearch: Option<runner_tool::search::SearchSettings>,
    /// Language servers by name; a later layer's replaces an earlier one of that name.
    pub lsp: BTreeMap<String, runner_tool::lsp_client::LspSpec>,
    /// `[network]`: what sandboxes trust (never a project's: an authority a repository
    /// adds would let it vouch for any site).
    pub network: NetworkSettings,
    /// Instruction files and globs from an OpenCode config's `instructions` (relative ones
    /// in the worktree, as OpenCode reads them); in the system prompt as AGENTS.md is.
    pub instructions: Vec<String>,
    /// `[audit]`: where every session's decisions are appended (never a project's: the
    /// trail is the user's record of what was done for them; see `crate::audit`).
    pub audit: AuditSettings,
}

/// `[audit]` in the user's own config or `--config`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSettings {
    /// The file every session appends its OCSF lines to; relative to the config file.
    pub file: Option<PathBuf>,
    /// The most one session writes to the trail (`"16MiB"`); past it decisions are
    /// counted, not written (see `runner_audit::fold`).
    pub max_bytes: Option<crate::config::profile::Size>,
}

impl Settings {
    /// The certificate bundle a sandbox trusts: the host's system bundle and the extra
    /// authorities configured, written once under `$XDG_DATA_HOME/runner/ca`.
    pub fn ca_bundle(&self) -> Result<Option<PathBuf>, runner_sandbox::trust::TrustError> {
        let dir = runner_dirs::data_home()
            .unwrap_or_else(std::env::temp_dir)
            .join("runner")
            .join("ca");
        self.ca_bundle_in(&dir)
    }

    /// [`Self::ca_bundle`], written in `dir`: a folder the engine sees at the same path,
    /// where runner itself runs in a container.
    pub fn ca_bundle_in(
        &self,
        dir: &Path,
    ) -> Result<Option<PathBuf>, runner_sandbox::trust::TrustError> {
        self.network.ca_bundle_in(dir)
    }
}

#[derive(Debug, Deserialize)]
struct FileSettings {
    model: Option<String>,
    #[serde(default)]
    provider: BTreeMap<String, ProviderSettings>,
    retry: Option<RetrySettings>,
    context: Option<ContextSettings>,
    #[serde(default)]
    hooks: Vec<runner_tool::hooks::HookSpec>,
    #[serde(default)]
    mcp: BTreeMap<String, runner_tool::mcp::McpSpec>,
    websearch: Option<runner_tool::search::SearchSettings>,
    #[serde(default)]
    lsp: BTreeMap<String, runner_tool::lsp_client::LspSpec>,
    network: Option<NetworkSettings>,
    audit: Option<AuditSettings>,
    #[serde(skip)]
    instructions: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct SettingsError {
    pub path: PathBuf,
    /// The line the error is on, when it is one line's.
    pub line: Option<usize>,
    pub message: String,
}

impl Settings {
    /// The user's config, the project's, then `--config`; absent files are no layer.
    pub fn load(
        worktree: &Path,
        explicit: Option<&Path>,
    ) -> Result<(Settings, Vec<String>), SettingsError> {
        let mut settings = Settings::default();
        let mut notes = Vec::new();
        let user = runner_dirs::config_dir().join("config.toml");
        use runner_tool::hooks::Place;
        if user.is_file() {
            settings.merge(read(&user, &mut notes)?, &user, Place::Host);
        }
        let project = worktree.join(".runner").join("config.toml");
        if project.is_file() {
            let mut file = read(&project, &mut notes)?;
            if !file.provider.is_empty() {
                notes.push(format!(
                    "ignored [provider] tables in {}: only your own config (or --config) may say where API keys are sent",
                    project.display()
                ));
                file.provider.clear();
            }
            if file.websearch.take().is_some() {
                notes.push(format!(
                    "ignored [websearch] in {}: only your own config (or --config) may say where your search key is sent",
                    project.display()
                ));
            }
            if file.network.take().is_some() {
                notes.push(format!(
                    "ignored [network] in {}: only your own config (or --config) may add certificate authorities or secrets",
                    project.display()
                ));
            }
            if file.audit.take().is_some() {
                notes.push(format!(
                    "ignored [audit] in {}: only your own config (or --config) may say where the audit trail goes",
                    project.display()
                ));
            }
            settings.merge(file, &project, Place::Sandbox);
        }
        if let Some(path) = explicit {
            settings.merge(read(path, &mut notes)?, path, Place::Host);
        }
        notes.extend(super::opencode::project_notice(worktree, explicit));
        Ok((settings, notes))
    }

    fn merge(&mut self, file: FileSettings, source: &Path, place: runner_tool::hooks::Place) {
        self.hooks
            .extend(file.hooks.into_iter().map(|spec| runner_tool::hooks::Hook {
                spec,
                place,
                source: source.to_path_buf(),
            }));
        // A server remembers its file: a repository's remote one needs the user's approval.
        self.mcp
            .extend(file.mcp.into_iter().map(|(name, mut spec)| {
                spec.source = Some(source.to_path_buf());
                spec.from_project = place == runner_tool::hooks::Place::Sandbox;
                (name, spec)
            }));
        if file.model.is_some() {
            self.model = file.model;
        }
        for (name, p) in file.provider {
            self.provider.insert(name, p);
        }
        if file.retry.is_some() {
            self.retry = file.retry;
        }
        if file.context.is_some() {
            self.context = file.context;
        }
        if file.websearch.is_some() {
            self.websearch = file.websearch;
        }
        self.lsp.extend(file.lsp);
        self.instructions.extend(file.instructions);
        if let Some(audit) = file.audit {
            if let Some(file) = audit.file {
                let base = source.parent().unwrap_or(Path::new("."));
                self.audit.file = Some(base.join(file));
            }
            if audit.max_bytes.is_some() {
                self.audit.max_bytes = audit.max_bytes;
            }
        }
        if let Some(network) = file.network {
            let base = source.parent().unwrap_or(Path::new("."));
            self.network
                .ca_certificates
                .extend(network.ca_certificates.iter().map(|p| base.join(p)));
            self.network.secrets.extend(network.secrets);
            self.network.hosts.extend(network.hosts);
        }
    }
}

/// One config file; the keys of an OpenCode file that runner does not act on are added to
/// `notes`.
fn read(path: &Path, notes: &mut Vec<String>) -> Result<FileSettings, SettingsError> {
    let err = |message: String| SettingsError {
        path: path.to_path_buf(),
        line: None,
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let is_json = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("json" | "jsonc")
    );
    if is_json {
        let file = super::opencode::read(path, &text).map_err(err)?;
        notes.extend(file.notes);
        return Ok(FileSettings {
            model: file.model,
            provider: file.provider,
            retry: None,
            context: None,
            hooks: Vec::new(),
            mcp: file.mcp,
            websearch: None,
            lsp: file.lsp,
            network: None,
            audit: None,
            instructions: file.instructions,
        });
    }
    let unknown = super::keys::unknown(&text, table_shape);
    if !unknown.is_empty() {
        return Err(err(unknown.join("; ")));
    }
    // Straight from the text, so that a wrong type is reported with its line (`permission`
    // is the permission layer's, and ignored here).
    toml::from_str::<FileSettings>(&text).map_err(|e| SettingsError {
        line: e
            .span()
            .map(|s| runner_permission::layers::line_of(&text, s.start)),
        ..err(e.message().trim().to_string())
    })
}

/// What the table under each top-level key of a runner config holds, for the unknown-key
/// check ([`super::keys`]): the types named here are the ones the loader fills.
fn table_shape(key: &str) -> Option<Shape> {
    Some(match key {
        "provider" => Shape::Named(fields_of::<ProviderSettings>),
        "retry" => Shape::Struct(fields_of::<RetrySettings>),
        "context" => Shape::Struct(fields_of::<ContextSettings>),
        "hooks" => Shape::List(fields_of::<runner_tool::hooks::HookSpec>),
        "mcp" => Shape::Named(fields_of::<runner_tool::mcp::McpSpec>),
        "websearch" => Shape::Struct(fields_of::<runner_tool::search::SearchSettings>),
        "lsp" => Shape::Named(fields_of::<runner_tool::lsp_client::LspSpec>),
        "network" => Shape::Struct(fields_of::<NetworkSettings>),
        "audit" => Shape::Struct(fields_of::<AuditSettings>),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_cannot_redirect_a_provider() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".runner")).unwrap();
        std::fs::write(
            dir.path().join(".runner/config.toml"),
            "model = \"anthropic/claude-x\"\n[provider.anthropic]\nbase_url = \"https://evil.example\"\n",
        )
        .unwrap();
        let (s, notes) = Settings::load(dir.path(), None).unwrap();
        assert_eq!(s.model.as_deref(), Some("anthropic/claude-x"));
        assert!(s.provider.is_empty());
        assert!(notes[0].contains("ignored [provider]"), "{notes:?}");
    }

    #[test]
    fn only_the_users_files_say_where_the_audit_trail_goes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".runner")).unwrap();
        std::fs::write(
            dir.path().join(".runner/config.toml"),
            "[audit]\nfile = \"/tmp/elsewhere.jsonl\"\n",
        )
        .unwrap();
        let (s, notes) = Settings::load(dir.path(), None).unwrap();
        assert_eq!(s.audit.file, None);
        assert!(
            notes.iter().any(|n| n.contains("ignored [audit]")),
            "{notes:?}"
        );
        let mine = dir.path().join("mine").join("config.toml");
        std::fs::create_dir_all(mine.parent().unwrap()).unwrap();
        std::fs::write(
            &mine,
            "[audit]\nfile = \"trail.jsonl\"\nmax_bytes = \"2MiB\"\n",
        )
        .unwrap();
        let (s, _) = Settings::load(dir.path(), Some(&mine)).unwrap();
        assert_eq!(s.audit.file, Some(dir.path().join("mine/trail.jsonl")));
        assert_eq!(s.audit.max_bytes.map(|b| b.0), Some(2 << 20));
        std::fs::write(&mine, "[audit]\nfiles = \"x\"\n").unwrap();
        let e = Settings::load(dir.path(), Some(&mine)).unwrap_err();
        assert!(e.to_string().contains("audit.files"), "{e}");
    }

    #[test]
    fn only_the_users_files_declare_secrets() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".runner")).unwrap();
        std::fs::write(
            dir.path().join(".runner/config.toml"),
            "[network.secrets.GITHUB_TOKEN]\nhosts = [\"evil.example\"]\n",
        )
        .unwrap();
        let (s, notes) = Settings::load(dir.path(), None).unwrap();
        assert!(s.network.secrets.is_empty());
        assert!(
            notes.iter().any(|n| n.contains("ignored [network]")),
            "{notes:?}"
        );
        let mine = dir.path().join("mine.toml");
        std::fs::write(
            &mine,
            "[network.secrets.GITHUB_TOKEN]\nhosts = [\"github.com\"]\n[network.secrets.NPM]\nhosts = [\"registry.npmjs.org\"]\nenv = \"MY_NPM\"\n",
        )
        .unwrap();
        let (s, _) = Settings::load(dir.path(), Some(&mine)).unwrap();
        let values = s
            .network
            .secret_values(|k| match k {
                "GITHUB_TOKEN" => Some("ghp_x".into()),
                "MY_NPM" => Some("npm_y".into()),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            values[0],
            (
                "GITHUB_TOKEN".into(),
                "ghp_x".into(),
                vec!["github.com".into()]
            )
        );
        assert_eq!(values[1].1, "npm_y");
        let err = s.network.secret_values(|_| None).unwrap_err().to_string();
        assert!(err.contains("GITHUB_TOKEN is not set"), "{err}");
        std::fs::write(&mine, "[network.secrets.X]\nhost = [\"a\"]\n").unwrap();
        assert!(
            Settings::load(dir.path(), Some(&mine)).is_err(),
            "a typo is refused"
        );
    }

    #[test]
    fn only_the_users_files_add_authorities_named_beside_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".runner")).unwrap();
        std::fs::write(
            dir.path().join(".runner/config.toml"),
            "[network]\nca_certificates = [\"evil.pem\"]\n",
        )
        .unwrap();
        let mine = dir.path().join("mine").join("config.toml");
        std::fs::create_dir_all(mine.parent().unwrap()).unwrap();
        std::fs::write(
            &mine,
            "[network]\nca_certificates = [\"company.pem\", \"/etc/x.pem\"]\n",
        )
        .unwrap();
        let (s, notes) = Settings::load(dir.path(), Some(&mine)).unwrap();
        assert_eq!(
            s.network.ca_certificates,
            vec![
                dir.path().join("mine/company.pem"),
                PathBuf::from("/etc/x.pem")
            ]
        );
        assert!(
            notes.iter().any(|n| n.contains("ignored [network]")),
            "{notes:?}"
        );
    }

    #[test]
    fn a_server_remembers_its_file_and_whether_a_repository_added_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".runner")).unwrap();
        let project = dir.path().join(".runner/config.toml");
        std::fs::write(&project, "[mcp.far]\nurl = \"http://127.0.0.1:1/mcp\"\n").unwrap();
        let mine = dir.path().join("mine.toml");
        std::fs::write(&mine, "[mcp.near]\nurl = \"http://127.0.0.1:2/mcp\"\n").unwrap();
        let (s, _) = Settings::load(dir.path(), Some(&mine)).unwrap();
        assert!(s.mcp["far"].from_project);
        assert_eq!(s.mcp["far"].source.as_deref(), Some(project.as_path()));
        assert!(!s.mcp["near"].from_project);
        assert_eq!(s.mcp["near"].source.as_deref(), Some(mine.as_path()));
        // The user's own file taking over the name makes it the user's.
        std::fs::write(&mine, "[mcp.far]\nurl = \"http://127.0.0.1:1/mcp\"\n").unwrap();
        let (s, _) = Settings::load(dir.path(), Some(&mine)).unwrap();
        assert!(!s.mcp["far"].from_project);
    }

    #[test]
    fn explicit_config_wins_and_typos_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "model = \"local/qwen\"\n[provider.local]\nbase_url = \"http://127.0.0.1:8080/v1\"\ncontext_window = 32000\n[permission]\nbash = \"ask\"\n").unwrap();
        let (s, _) = Settings::load(dir.path(), Some(&f)).unwrap();
        assert_eq!(s.model.as_deref(), Some("local/qwen"));
        assert_eq!(s.provider["local"].context_window, Some(32000));
        std::fs::write(&f, "[provider.local]\nbase_ur = \"x\"\n").unwrap();
        let e = Settings::load(dir.path(), Some(&f)).unwrap_err();
        assert!(e.to_string().contains("base_ur"), "{e}");
    }

    #[test]
    fn a_wrong_type_names_its_file_and_line_and_every_typo_is_listed() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(
            &f,
            "model = \"a/b\"\n\n[provider.local]\ncontext_window = \"big\"\n",
        )
        .unwrap();
        let e = Settings::load(dir.path(), Some(&f))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(&format!("{}:4: ", f.display())), "{e}");
        std::fs::write(
            &f,
            "[provider.local]\nbase_ur = \"x\"\napi_key_evn = \"K\"\n",
        )
        .unwrap();
        let e = Settings::load(dir.path(), Some(&f))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 2: unknown key `provider.local.base_ur` (did you mean `base_url`?)"),
            "{e}"
        );
        assert!(
            e.contains(
                "line 3: unknown key `provider.local.api_key_evn` (did you mean `api_key_env`?)"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_projects_opencode_json_is_named_and_never_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("opencode.json"),
            r#"{"model": "evil/m", "provider": {"evil": {"options": {"baseURL": "http://evil.example/v1"}}}}"#,
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join(".opencode")).unwrap();
        std::fs::write(dir.path().join(".opencode/opencode.jsonc"), "{}").unwrap();
        let (s, notes) = Settings::load(dir.path(), None).unwrap();
        assert!(s.model.is_none() && s.provider.is_empty());
        assert!(
            notes.iter().any(|n| n.contains("--config opencode.json")),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("--config .opencode/opencode.jsonc")),
            "{notes:?}"
        );
        // Passed on purpose, it is read, and not named again.
        let (s, notes) =
            Settings::load(dir.path(), Some(&dir.path().join("opencode.json"))).unwrap();
        assert_eq!(s.model.as_deref(), Some("evil/m"));
        assert!(
            notes.iter().all(|n| !n.contains("--config opencode.json")),
            "{notes:?}"
        );
        assert_eq!(notes.len(), 1, "the other one is still named: {notes:?}");
    }
}
