//! Profiles: named bundles of settings, built in (compiled from `profiles/*.toml`) or the
//! user's own (`$XDG_CONFIG_HOME/runner/profiles/NAME.toml`), or any file by path.
//! Unknown keys are errors, so a typo never silently loosens a sandbox.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use runner_sandbox::BackendKind;
use runner_sandbox::spec::{Network, SandboxSpec};

pub const BUILT_IN: &[(&str, &str)] = &[
    ("default", include_str!("../../../../profiles/default.toml")),
    (
        "readonly",
        include_str!("../../../../profiles/readonly.toml"),
    ),
    (
        "untrusted",
        include_str!("../../../../profiles/untrusted.toml"),
    ),
    ("laptop", include_str!("../../../../profiles/laptop.toml")),
    ("eval", include_str!("../../../../profiles/eval.toml")),
];

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub sandbox: SandboxSection,
    /// Permission rules in OpenCode's shape (see `permission::layers`), merged after the
    /// built-in defaults and before the user's config. Kept as a value so that the file's
    /// key order, which is precedence, survives.
    pub permission: Option<serde_json::Value>,
    /// How asks are answered under this profile when no `--ask` flag is given.
    pub ask: Option<AskMode>,
    /// Whether the project's `.runner/config.toml` may add allows and asks at all. A profile
    /// for code you do not trust says no: the repository's denies still apply, its allows
    /// and asks don't. Even when it may, a project rule never loosens the profile's or the
    /// user's rules, and loosens a built-in default only once its config is trusted (see
    /// `permission::project` and [`super::trust`]).
    pub project_allows: Option<bool>,
    /// Where it came from, for messages.
    #[serde(skip)]
    pub source: String,
}

impl Profile {
    /// What this profile says about permissions, for the permission layers.
    pub fn permission_rules(&self) -> runner_permission::layers::ProfileRules<'_> {
        runner_permission::layers::ProfileRules {
            rules: self.permission.as_ref(),
            project_allows: self.project_allows,
            source: &self.source,
        }
    }
}

/// Who answers an ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AskMode {
    /// The person at the terminal; without one, the ask is refused at once.
    Prompt,
    /// Every ask is approved once (nothing is remembered).
    Allow,
    /// Every ask is refused: for runs where nobody is watching, such as evaluations.
    Deny,
}

impl AskMode {
    pub const ALL: [AskMode; 3] = [AskMode::Prompt, AskMode::Allow, AskMode::Deny];

    /// The name the command line and profiles use.
    pub fn name(self) -> &'static str {
        match self {
            AskMode::Prompt => "prompt",
            AskMode::Allow => "allow",
            AskMode::Deny => "deny",
        }
    }

    /// What the mode does, in a sentence (for `--help`).
    pub fn about(self) -> &'static str {
        match self {
            AskMode::Prompt => {
                "The person at the terminal; without one, the ask is refused at once"
            }
            AskMode::Allow => "Every ask is approved once (nothing is remembered)",
            AskMode::Deny => "Every ask is refused: for runs where nobody is watching",
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSection {
    pub backend: Option<BackendKind>,
    pub image: Option<String>,
    /// The docker backend's OCI runtime: a name (`"runsc"`, gVisor), or a list in order of
    /// preference, the first the engine has being used (`["runsc", "default"]`: gVisor when
    /// the engine has it, else the engine's default).
    pub runtime: Option<Runtimes>,
    pub network: Option<Network>,
    pub memory: Option<Size>,
    pub cpus: Option<f64>,
    pub pids: Option<u64>,
    pub tmp: Option<Size>,
    /// `--workspace copy`: how much commands may write in the copy beyond the copy itself.
    pub disk: Option<Size>,
    pub env: Option<Vec<String>>,
    pub protected: Option<Vec<PathBuf>>,
    /// `direct` (the checkout) or `copy` (a private copy, applied after review).
    pub workspace: Option<runner_workspace::Mode>,
    /// `--network allowlist`: connections through the proxy open at once.
    pub network_connections: Option<u64>,
    /// `--network allowlist`: bytes through the proxy over a run, both ways.
    pub network_bytes: Option<Size>,
}

/// `runtime = "NAME"` or `runtime = ["NAME", …]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Runtimes {
    One(String),
    Preference(Vec<String>),
}

impl Runtimes {
    pub fn names(&self) -> Vec<String> {
        match self {
            Runtimes::One(n) => vec![n.clone()],
            Runtimes::Preference(v) => v.clone(),
        }
    }
}

/// A byte size: a number of bytes or a string such as `"512MiB"`, `"4GiB"`, `"1G"`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bytes(b) => Ok(Size(b)),
            Raw::Text(t) => parse_size(&t).map(Size).map_err(serde::de::Error::custom),
        }
    }
}

/// Why a size is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadSize {
    #[error("{0:?} is not a size (try \"512MiB\" or \"4GiB\")")]
    NotANumber(String),
    #[error("unknown size unit {unit:?} in {text:?}")]
    Unit { unit: String, text: String },
}

pub fn parse_size(text: &str) -> Result<u64, BadSize> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| BadSize::NotANumber(text.to_string()))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(BadSize::Unit {
                unit: other.to_string(),
                text: text.to_string(),
            });
        }
    };
    Ok((n * mult as f64) as u64)
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("no profile named {name:?}; built in: {}, or a file in {}", BUILT_IN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "), user_dir().display())]
    NotFound { name: String },
    #[error("cannot read profile {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("profile {source_name} is invalid: {message}")]
    Invalid {
        source_name: String,
        message: String,
    },
}

/// `$XDG_CONFIG_HOME/runner/profiles` (default `~/.config/runner/profiles`).
pub fn user_dir() -> PathBuf {
    runner_dirs::config_dir().join("profiles")
}

pub fn parse(text: &str, source: &str) -> Result<Profile, ProfileError> {
    let mut p: Profile = toml::from_str(text).map_err(|e| ProfileError::Invalid {
        source_name: source.to_string(),
        message: e.to_string(),
    })?;
    p.source = source.to_string();
    Ok(p)
}

/// A name (the user's profile of that name, else the built-in) or a path to a TOML file.
pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
    let read = |path: &Path| {
        std::fs::read_to_string(path)
            .map_err(|source| ProfileError::Read {
                path: path.to_path_buf(),
                source,
            })
            .and_then(|text| parse(&text, &path.display().to_string()))
    };
    if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
        return read(Path::new(name_or_path));
    }
    let user = user_dir().join(format!("{name_or_path}.toml"));
    if user.is_file() {
        return read(&user);
    }
    BUILT_IN
        .iter()
        .find(|(n, _)| *n == name_or_path)
        .ok_or_else(|| ProfileError::NotFound {
            name: name_or_path.to_string(),
        })
        .and_then(|(n, text)| parse(text, &format!("built-in profile {n}")))
}

impl SandboxSection {
    /// Applies the profile's sandbox part to a spec (unset keys keep the spec's values).
    pub fn apply(&self, spec: &mut SandboxSpec) {
        if let Some(b) = self.backend {
            spec.backend = b;
        }
        if let Some(i) = &self.image {
            spec.docker.image = i.clone();
        }
        if let Some(r) = &self.runtime {
            spec.docker.runtime = r.names();
        }
        if let Some(n) = self.network {
            spec.network = n;
        }
        if let Some(Size(m)) = self.memory {
            spec.limits.memory_bytes = m;
        }
        if let Some(c) = self.cpus {
            spec.limits.cpus = c;
        }
        if let Some(p) = self.pids {
            spec.limits.pids = p;
        }
        if let Some(Size(t)) = self.tmp {
            spec.limits.tmp_bytes = t;
        }
        if let Some(Size(d)) = self.disk {
            spec.limits.disk_bytes = d;
        }
        if let Some(c) = self.network_connections {
            spec.limits.net_connections = c;
        }
        if let Some(Size(b)) = self.network_bytes {
            spec.limits.net_bytes = b;
        }
        if let Some(e) = &self.env {
            spec.env_allow = e.clone();
        }
        if let Some(p) = &self.protected {
            spec.protected = p.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_parses_and_says_its_backend() {
        // `default` names none: the session picks a wall (`sandbox::choose`).
        assert_eq!(load("default").unwrap().sandbox.backend, None);
        let want = [
            ("readonly", BackendKind::Landlock),
            ("untrusted", BackendKind::Docker),
            ("laptop", BackendKind::Landlock),
            ("eval", BackendKind::Docker),
        ];
        for (name, backend) in want {
            let p = load(name).unwrap();
            assert_eq!(p.sandbox.backend, Some(backend), "{name}");
            assert_ne!(p.sandbox.network, Some(Network::Host), "{name}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4GiB").unwrap(), 4 << 30);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert!(parse_size("4 parsecs").is_err());
        assert!(parse_size("lots").is_err());
    }

    #[test]
    fn unknown_keys_and_values_are_errors() {
        let e = parse("[sandbox]\nbackend = \"docker\"\nnetwrok = \"host\"\n", "t").unwrap_err();
        assert!(e.to_string().contains("netwrok"), "{e}");
        let e = parse("[sandbox]\nbackend = \"chroot\"\n", "t").unwrap_err();
        assert!(e.to_string().contains("chroot"), "{e}");
        let e = parse("[sandbox]\nmemory = \"4 parsecs\"\n", "t").unwrap_err();
        assert!(e.to_string().contains("parsecs"), "{e}");
    }

    #[test]
    fn apply_overrides_only_what_is_set() {
        let p = parse(
            "[sandbox]\nbackend = \"landlock\"\nmemory = \"256MiB\"\npids = 64\nenv = [\"CARGO_HOME\"]\n",
            "t",
        )
        .unwrap();
        let mut spec = SandboxSpec::new(BackendKind::None, Path::new("/w")).unwrap();
        let before = spec.clone();
        p.sandbox.apply(&mut spec);
        assert_eq!(spec.backend, BackendKind::Landlock);
        assert_eq!(spec.limits.memory_bytes, 256 << 20);
        assert_eq!(spec.limits.pids, 64);
        assert_eq!(spec.limits.cpus, before.limits.cpus);
        assert_eq!(spec.limits.tmp_bytes, before.limits.tmp_bytes);
        assert_eq!(spec.network, Network::None);
        assert_eq!(spec.env_allow, vec!["CARGO_HOME".to_string()]);
        assert_eq!(spec.protected, before.protected);
    }

    #[test]
    fn a_path_loads_a_file_and_a_missing_name_lists_the_built_ins() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("mine.toml");
        std::fs::write(
            &f,
            "description = \"x\"\n[sandbox]\nbackend = \"docker\"\nimage = \"my:img\"\n",
        )
        .unwrap();
        let p = load(f.to_str().unwrap()).unwrap();
        assert_eq!(p.sandbox.image.as_deref(), Some("my:img"));
        let e = load("no-such-profile").unwrap_err().to_string();
        assert!(e.contains("untrusted") && e.contains("laptop"), "{e}");
    }
}
