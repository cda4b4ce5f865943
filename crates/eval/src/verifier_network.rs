//! The verifier's way out. Terminal-Bench 2's `tests/test.sh` scripts install their test
//! tools as they run (`curl … astral.sh/uv/… | sh`, `uvx -p 3.13 -w pytest …`, `pip
//! install pytest`), so a verifier with no network leaves every such task unresolved on a
//! faithful image. Yet the verifier runs in the file system the agent left, so its way
//! out is the allow-list proxy, never a network of the container's own: the container
//! keeps `network_mode=none`, and the verifier's connections go through runner's proxy on
//! the container's loopback, judged by rules, refused for the host's private addresses,
//! and recorded in the attempt.
//!
//! `allowlist` (the default) opens the package registries and tool downloads below, and
//! whatever the evaluation's `--config` adds under `[permission.network]`; `host` opens
//! every public host; `none` keeps the verifier offline.

use crate::permission::rules::{Action, Rule};

/// `--verifier-network`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VerifierNetwork {
    /// No network: the verifier's commands reach nothing.
    None,
    /// The package registries and tool downloads, and the hosts the config allows.
    #[default]
    Allowlist,
    /// Every public host, through the proxy (the host's own and private addresses stay
    /// refused).
    Host,
}

impl VerifierNetwork {
    pub const ALL: [VerifierNetwork; 3] = [
        VerifierNetwork::None,
        VerifierNetwork::Allowlist,
        VerifierNetwork::Host,
    ];

    pub fn name(self) -> &'static str {
        match self {
            VerifierNetwork::None => "none",
            VerifierNetwork::Allowlist => "allowlist",
            VerifierNetwork::Host => "host",
        }
    }

    /// What the value means, for `--help`.
    pub fn about(self) -> &'static str {
        match self {
            VerifierNetwork::None => "The verifier reaches no host",
            VerifierNetwork::Allowlist => {
                "Package registries and tool downloads (PyPI, astral.sh, GitHub releases, npm, crates.io, Debian and Ubuntu archives…), and the hosts --config allows, through runner's proxy"
            }
            VerifierNetwork::Host => {
                "Every public host, through runner's proxy (never the host's own or private addresses)"
            }
        }
    }
}

/// Where test tools come from: package registries, and the downloads their installers
/// fetch (uv's installer and the Pythons `uvx -p` fetches are GitHub release assets).
pub const REGISTRY_HOSTS: &[&str] = &[
    // Python
    "pypi.org",
    "files.pythonhosted.org",
    "astral.sh",
    // GitHub releases and raw files (uv, python-build-standalone, many installers)
    "github.com",
    "codeload.github.com",
    "*.githubusercontent.com",
    // JavaScript
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    // Rust
    "crates.io",
    "index.crates.io",
    "static.crates.io",
    "static.rust-lang.org",
    "sh.rustup.rs",
    // Go
    "proxy.golang.org",
    "sum.golang.org",
    // Ruby, Java
    "rubygems.org",
    "repo.maven.apache.org",
    "repo1.maven.org",
    // System packages
    "deb.debian.org",
    "security.debian.org",
    "archive.ubuntu.com",
    "security.ubuntu.com",
    "ports.ubuntu.com",
    "dl-cdn.alpinelinux.org",
];

const ORIGIN: &str = "runner eval --verifier-network";

/// The rules the verifier's proxy judges by: the built-in ones for `kind`, then `extra`
/// (the evaluation's own `network` rules), which win where they match.
pub fn rules(kind: VerifierNetwork, extra: &[Rule]) -> Vec<Rule> {
    let mut rules = vec![Rule::new("network", "*", Action::Deny, ORIGIN, 1)];
    match kind {
        VerifierNetwork::None => return rules,
        VerifierNetwork::Allowlist => rules.extend(
            REGISTRY_HOSTS
                .iter()
                .enumerate()
                .map(|(i, host)| Rule::new("network", host, Action::Allow, ORIGIN, i + 2)),
        ),
        VerifierNetwork::Host => rules.push(Rule::new("network", "*", Action::Allow, ORIGIN, 2)),
    }
    rules.extend(
        extra
            .iter()
            .filter(|r| crate::permission::wildcard::matches("network", &r.permission))
            .cloned(),
    );
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decides(rules: &[Rule], host: &str) -> Action {
        rules
            .iter()
            .rev()
            .find(|r| crate::permission::wildcard::matches(host, &r.pattern))
            .map(|r| r.action)
            .unwrap()
    }

    #[test]
    fn the_allowlist_opens_registries_and_what_the_config_adds() {
        let extra = [Rule::new(
            "network",
            "index.internal",
            Action::Allow,
            "c",
            1,
        )];
        let rules = rules(VerifierNetwork::Allowlist, &extra);
        for open in [
            "pypi.org",
            "objects.githubusercontent.com",
            "astral.sh",
            "index.internal",
        ] {
            assert_eq!(decides(&rules, open), Action::Allow, "{open}");
        }
        for shut in [
            "example.com",
            "evil.pypi.org.example",
            "githubusercontent.com.evil",
        ] {
            assert_eq!(decides(&rules, shut), Action::Deny, "{shut}");
        }
        let none = super::rules(VerifierNetwork::None, &extra);
        assert_eq!(decides(&none, "pypi.org"), Action::Deny);
        let host = super::rules(VerifierNetwork::Host, &[]);
        assert_eq!(decides(&host, "example.com"), Action::Allow);
    }
}
