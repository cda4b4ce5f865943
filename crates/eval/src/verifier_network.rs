//! The network of a Harbor attempt's two phases, the agent's and the verifier's.
//!
//! A task says what each phase may reach (`network_mode`, `allowed_hosts`; Harbor's
//! precedence is in [`super::harbor`]), and `--agent-network` / `--verifier-network`
//! override it for a whole run. Whatever the mode, the task container itself keeps
//! `network_mode=none`: a phase that may reach anything does so through runner's allow-list
//! proxy on the container's loopback, where every connection is judged by rules, refused
//! for the host's own and private addresses (only an exact rule in the user's own config
//! opens one), and recorded in the attempt. The verifier runs in the file system the agent
//! left, so that wall matters for it as much as for the agent.
//!
//! - `public` (Harbor's): every public host, through the proxy. Harbor's "public" is the
//!   internet; on this machine it must not also mean the host's private network, which
//!   the proxy keeps closed.
//! - `allowlist` (Harbor's): the task's `allowed_hosts` alone. A task naming a private
//!   address does not open it (runner connects from the host, where 10.0.0.5 or
//!   127.0.0.1 is the host's network, not the container's): the user's config must.
//! - `no-network`: no proxy at all; the phase's commands reach nothing.
//! - `registries` (runner's, by flag only): the package registries and tool downloads
//!   below. Terminal-Bench 2's `tests/test.sh` scripts install their test tools as they
//!   run (`curl … astral.sh/uv/… | sh`, `uvx -p 3.13 -w pytest …`, `pip install pytest`).
//!
//! In every mode but `no-network`, the `network` rules of the evaluation's `--config` are
//! laid over the mode's (they win where they match), as Harbor lets a run add hosts to a
//! task's allow-list: an index of your own, or a private address opened on purpose.

use runner_network::ConnectionRecord;
use serde::{Deserialize, Serialize};

use super::harbor::{NetworkMode, NetworkPolicy};
use runner_permission::rules::{Action, Rule};
use runner_permission::{AskFuture, PermissionGate, PermissionRequest};

/// `--agent-network` and `--verifier-network`: the task's policy, or one for the whole
/// run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetworkChoice {
    /// What the task says, by Harbor's precedence.
    #[default]
    Task,
    /// Every public host, through the proxy.
    Public,
    /// The package registries and tool downloads, and the hosts the config allows.
    Registries,
    /// No network.
    None,
}

/// The older name of [`NetworkChoice`], when only the verifier had a flag.
pub type VerifierNetwork = NetworkChoice;

impl NetworkChoice {
    pub const ALL: [NetworkChoice; 4] = [
        NetworkChoice::Task,
        NetworkChoice::Public,
        NetworkChoice::Registries,
        NetworkChoice::None,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NetworkChoice::Task => "task",
            NetworkChoice::Public => "public",
            NetworkChoice::Registries => "registries",
            NetworkChoice::None => "none",
        }
    }

    /// Other spellings a flag takes: Harbor's `no-network`, and the values
    /// `--verifier-network` had before it followed the task (`host`, `allowlist`).
    pub fn aliases(self) -> &'static [&'static str] {
        match self {
            NetworkChoice::Task => &[],
            NetworkChoice::Public => &["host"],
            NetworkChoice::Registries => &["allowlist"],
            NetworkChoice::None => &["no-network"],
        }
    }

    /// The choice a flag's value (its name or an alias) names.
    pub fn parse(text: &str) -> Option<NetworkChoice> {
        NetworkChoice::ALL
            .into_iter()
            .find(|c| c.name() == text || c.aliases().contains(&text))
    }

    /// What the value means, for `--help`.
    pub fn about(self) -> &'static str {
        match self {
            NetworkChoice::Task => {
                "What the task's network_mode and allowed_hosts say, by Harbor's precedence (public when it says nothing)"
            }
            NetworkChoice::Public => {
                "Every public host, through runner's proxy (never the host's own or private addresses)"
            }
            NetworkChoice::Registries => {
                "Package registries and tool downloads (PyPI, astral.sh, GitHub releases, npm, crates.io, Debian and Ubuntu archives…), and the hosts --config allows, through runner's proxy"
            }
            NetworkChoice::None => "No network at all",
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

/// What a phase may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reach {
    NoNetwork,
    Allowlist,
    Registries,
    Public,
}

/// What runner gives one phase, and what decided it.
#[derive(Debug, Clone, PartialEq)]
pub struct PhasePlan {
    pub reach: Reach,
    /// The task's hosts, for [`Reach::Allowlist`].
    pub allowed_hosts: Vec<String>,
    /// The task's field, Harbor's default, or the flag.
    pub from: String,
}

impl PhasePlan {
    /// The phase's plan: the flag's `choice` (named `flag`) when it is not `task`, else
    /// the task's `policy`.
    pub fn of(choice: NetworkChoice, flag: &str, policy: &NetworkPolicy) -> PhasePlan {
        let by_flag = |reach| PhasePlan {
            reach,
            allowed_hosts: Vec::new(),
            from: format!("{flag} {}", choice.name()),
        };
        match choice {
            NetworkChoice::Public => by_flag(Reach::Public),
            NetworkChoice::Registries => by_flag(Reach::Registries),
            NetworkChoice::None => by_flag(Reach::NoNetwork),
            NetworkChoice::Task => PhasePlan {
                reach: match policy.mode {
                    NetworkMode::Public => Reach::Public,
                    NetworkMode::NoNetwork => Reach::NoNetwork,
                    NetworkMode::Allowlist => Reach::Allowlist,
                },
                allowed_hosts: policy.allowed_hosts.clone(),
                from: policy.from.clone(),
            },
        }
    }

    /// The rules of a proxy that must let nothing through (one kept between phases).
    pub fn offline_rules() -> Vec<Rule> {
        vec![Rule::new(
            "network",
            "*",
            Action::Deny,
            "runner eval: between phases",
            1,
        )]
    }

    /// The installed boundaries' rules (`/etc/runner/boundary.toml`, `RUNNER_BOUNDARY`'s
    /// file; see `runner_permission::boundary`), laid after a phase's own: they cap what
    /// the phase's proxy decides, as they cap every session's. A boundary that cannot be
    /// used stops the attempt, as it stops `runner exec`.
    pub fn boundary_rules() -> Result<Vec<Rule>, crate::EvalError> {
        let home = std::env::var("HOME").unwrap_or_default();
        runner_permission::boundary::load_installed(&home)
            .map_err(|e| crate::EvalError::Options(e.to_string()))
    }

    /// Whether the phase gets runner's proxy.
    pub fn proxied(&self) -> bool {
        self.reach != Reach::NoNetwork
    }

    /// The rules the phase's proxy judges by: everything refused, then what the mode
    /// opens, then `extra` (the evaluation's own `network` rules), which win where they
    /// match. `no-network` takes no extra rules: nothing opens it.
    pub fn rules(&self, extra: &[Rule]) -> Vec<Rule> {
        let origin = format!("runner eval: {}", self.from);
        let allow =
            |(i, host): (usize, &str)| Rule::new("network", host, Action::Allow, &origin, i + 2);
        let mut rules = vec![Rule::new("network", "*", Action::Deny, &origin, 1)];
        match self.reach {
            Reach::NoNetwork => return rules,
            Reach::Public => rules.push(allow((0, "*"))),
            Reach::Registries => {
                rules.extend(REGISTRY_HOSTS.iter().copied().enumerate().map(allow))
            }
            Reach::Allowlist => rules.extend(
                self.allowed_hosts
                    .iter()
                    .map(String::as_str)
                    .enumerate()
                    .map(allow),
            ),
        }
        rules.extend(
            extra
                .iter()
                .filter(|r| runner_permission::wildcard::matches("network", &r.permission))
                .cloned(),
        );
        rules
    }

    /// The phase as `result.json` keeps it, with its connections.
    pub fn noted(
        &self,
        phase: &str,
        step: Option<&str>,
        connections: &[ConnectionRecord],
    ) -> PhaseNetwork {
        PhaseNetwork {
            phase: phase.to_string(),
            step: step.map(str::to_string),
            mode: self.reach,
            allowed_hosts: self.allowed_hosts.clone(),
            from: self.from.clone(),
            connections: connections.iter().map(|c| c.line()).collect(),
        }
    }
}

/// The gate of a proxy that serves both phases, its rules switched between them. The
/// sandbox server listens for the proxy once: when the oracle's server is kept for the
/// verifier (nothing of the agent's left running), the agent's proxy is still the one
/// listening, so it is handed over with the verifier's rules (or none open, for a
/// no-network verifier) rather than started again.
pub struct PhaseGate {
    worktree: std::path::PathBuf,
    why_no_ask: String,
    current: std::sync::RwLock<std::sync::Arc<dyn PermissionGate>>,
}

impl PhaseGate {
    /// A gate where `rules` alone decide (what they leave open is refused, `why_no_ask`).
    pub fn new(worktree: &std::path::Path, rules: Vec<Rule>, why_no_ask: &str) -> PhaseGate {
        PhaseGate {
            worktree: worktree.to_path_buf(),
            why_no_ask: why_no_ask.to_string(),
            current: std::sync::RwLock::new(rule_gate(worktree, rules, why_no_ask)),
        }
    }

    /// From now on, `rules` decide.
    pub fn switch(&self, rules: Vec<Rule>) {
        let gate = rule_gate(&self.worktree, rules, &self.why_no_ask);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = gate;
    }
}

fn rule_gate(
    worktree: &std::path::Path,
    rules: Vec<Rule>,
    why_no_ask: &str,
) -> std::sync::Arc<dyn PermissionGate> {
    let asker = runner_permission::gate::PolicyAsker::deny(why_no_ask);
    std::sync::Arc::new(runner_permission::gate::RuleGate::new(
        worktree,
        rules,
        std::sync::Arc::new(asker),
    ))
}

impl PermissionGate for PhaseGate {
    fn ask<'a>(&'a self, request: &'a PermissionRequest) -> AskFuture<'a> {
        let gate = self
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Box::pin(async move { gate.ask(request).await })
    }
}

/// One phase's network in `result.json`'s `network`: what runner did, why, and every
/// connection (one line each: `allow pypi.org:443 (…)`, `deny example.com:443: …`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseNetwork {
    /// `agent` or `verifier`.
    pub phase: String,
    /// The step, in a multi-step task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    pub mode: Reach,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// What decided: `task [agent] network_mode`, `Harbor's default (…)`,
    /// `--agent-network none`…
    pub from: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decides(rules: &[Rule], host: &str) -> Action {
        rules
            .iter()
            .rev()
            .find(|r| runner_permission::wildcard::matches(host, &r.pattern))
            .map(|r| r.action)
            .unwrap()
    }

    fn plan(choice: NetworkChoice, mode: NetworkMode, hosts: &[&str]) -> PhasePlan {
        let policy = NetworkPolicy {
            mode,
            allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            from: "task [agent] network_mode".into(),
        };
        PhasePlan::of(choice, "--agent-network", &policy)
    }

    #[test]
    fn each_mode_opens_what_it_says_and_the_config_adds() {
        let extra = [Rule::new(
            "network",
            "index.internal",
            Action::Allow,
            "c",
            1,
        )];
        let registries = plan(NetworkChoice::Registries, NetworkMode::NoNetwork, &[]);
        assert_eq!(registries.from, "--agent-network registries");
        let rules = registries.rules(&extra);
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
        // The task's allow-list: its hosts and the config's, nothing else.
        let hosts = plan(NetworkChoice::Task, NetworkMode::Allowlist, &["a.test"]);
        assert_eq!(hosts.reach, Reach::Allowlist);
        let rules = hosts.rules(&extra);
        assert_eq!(decides(&rules, "a.test"), Action::Allow);
        assert_eq!(decides(&rules, "index.internal"), Action::Allow);
        assert_eq!(decides(&rules, "b.test"), Action::Deny);
        assert_eq!(decides(&rules, "pypi.org"), Action::Deny);
        // Public opens every host; no-network nothing, not even what the config adds.
        let public = plan(NetworkChoice::Task, NetworkMode::Public, &[]);
        assert_eq!(decides(&public.rules(&[]), "example.com"), Action::Allow);
        let none = plan(NetworkChoice::Task, NetworkMode::NoNetwork, &[]);
        assert!(!none.proxied());
        assert_eq!(decides(&none.rules(&extra), "index.internal"), Action::Deny);
        // A flag wins over the task.
        let forced = plan(NetworkChoice::None, NetworkMode::Public, &[]);
        assert_eq!(forced.reach, Reach::NoNetwork);
        assert_eq!(forced.from, "--agent-network none");
    }

    #[test]
    fn a_handed_over_gate_judges_by_the_rules_of_the_phase_it_serves() {
        let tmp = tempfile::tempdir().unwrap();
        let agent = plan(NetworkChoice::Task, NetworkMode::Allowlist, &["a.test"]);
        let gate = PhaseGate::new(tmp.path(), agent.rules(&[]), "nobody asks");
        let asks = |host: &str| {
            let request =
                PermissionRequest::new("network", vec![host.to_string()], vec![host.to_string()]);
            let gate = &gate;
            async move { gate.ask(&request).await.is_ok() }
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(rt.block_on(asks("a.test")));
        assert!(!rt.block_on(asks("b.test")));
        // The verifier's phase: no network; nothing the agent had stays open.
        let none = plan(NetworkChoice::Task, NetworkMode::NoNetwork, &[]);
        gate.switch(none.rules(&[]));
        assert!(!rt.block_on(asks("a.test")));
        let public = plan(NetworkChoice::Task, NetworkMode::Public, &[]);
        gate.switch(public.rules(&[]));
        assert!(rt.block_on(asks("b.test")));
    }

    #[test]
    fn flags_take_harbors_and_the_older_spellings() {
        assert_eq!(
            NetworkChoice::parse("no-network"),
            Some(NetworkChoice::None)
        );
        assert_eq!(NetworkChoice::parse("host"), Some(NetworkChoice::Public));
        assert_eq!(
            NetworkChoice::parse("allowlist"),
            Some(NetworkChoice::Registries)
        );
        assert_eq!(NetworkChoice::parse("task"), Some(NetworkChoice::Task));
        assert_eq!(NetworkChoice::parse("everything"), None);
        assert_eq!(NetworkChoice::default(), NetworkChoice::Task);
    }
}
