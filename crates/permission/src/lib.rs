//! The permission hook every tool call goes through.
//!
//! Tools describe what they are about to do as a [`PermissionRequest`] (OpenCode's
//! permission name, concrete patterns, and the patterns an "always" reply would remember)
//! and await the gate's answer. The real gate is [`gate::RuleGate`]: OpenCode's allow / ask /
//! deny rules ([`rules`], [`wildcard`]) stacked from defaults, profile and config files
//! ([`layers`]), with approvals and an [`gate::Asker`] for what the rules leave open. Bash
//! commands are turned into asks by [`bash_scan`]. [`PolicyGate`] answers every ask with one
//! fixed policy and records what it was asked: tests and benchmarks use it to pin the asks
//! themselves.

pub mod arity;
pub mod bash_scan;
pub mod boundary;
pub mod files;
pub mod gate;
pub mod layers;
pub mod paths;
pub mod project;
pub mod rules;
pub mod terminal;
pub mod wildcard;

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use serde::Serialize;

/// One ask, as OpenCode's `ctx.ask` carries it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PermissionRequest {
    /// The tool that asks, for the person deciding (set by the registry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    pub permission: String,
    pub patterns: Vec<String>,
    pub always: Vec<String>,
    /// Context for a human deciding (e.g. the diff of an edit).
    pub metadata: serde_json::Value,
    /// Other forms of a pattern (`\\rm -rf x` is also `rm -rf x`; `sudo rm x` also runs
    /// `rm x`) that a deny rule must catch too. They never allow anything: an allow for
    /// `rm *` must not let `sudo rm` through.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny_spellings: Vec<(String, Vec<String>)>,
}

impl PermissionRequest {
    pub fn new(permission: &str, patterns: Vec<String>, always: Vec<String>) -> Self {
        PermissionRequest {
            tool: None,
            permission: permission.to_string(),
            patterns,
            always,
            metadata: serde_json::Value::Null,
            deny_spellings: Vec::new(),
        }
    }

    pub fn with_metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = metadata;
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PermissionError {
    /// A rule says no. `rule` is the one that decided; `relevant` every configured rule for
    /// the permission, so the model (and the person reading the log) can see why.
    #[error("{}", denied_message(.0))]
    Denied(Box<Denial>),
    /// The asked party said no, optionally telling the model what to do instead.
    #[error("{}", rejected_message(feedback))]
    Rejected { feedback: Option<String> },
    /// The call needed approval and nobody could give it (no terminal, `--ask deny`, a
    /// profile that answers every ask with deny).
    #[error(
        "This call needs permission ({permission}: {}) and it was refused because {reason}. Do not retry the same call: do the task another way, or tell the user which permission it needs.",
        patterns.join(", ")
    )]
    Unanswered {
        permission: String,
        patterns: Vec<String>,
        reason: String,
    },
}

/// What a denial carries: the subject, the deciding rule, and every configured rule for the
/// permission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub permission: String,
    pub pattern: String,
    pub rule: Option<rules::Rule>,
    pub relevant: Vec<rules::Rule>,
}

fn denied_message(denial: &Denial) -> String {
    let Denial {
        permission,
        pattern,
        rule,
        relevant,
    } = denial;
    let show = |r: &rules::Rule| {
        format!(
            "{} {:?} = {} ({} #{})",
            r.permission, r.pattern, r.action, r.source.origin, r.source.position
        )
    };
    let mut text = format!(
        "The user has specified a rule which prevents you from using this specific tool call: {permission} {pattern:?} is denied"
    );
    if let Some(rule) = rule {
        text.push_str(&format!(" by {}", show(rule)));
        // A catch-all deny ("everything but this list") is only useful with the list.
        if rule.pattern == "*" {
            let allowed: Vec<&str> = relevant
                .iter()
                .filter(|r| r.action == rules::Action::Allow && r.pattern != "*")
                .map(|r| r.pattern.as_str())
                .collect();
            if !allowed.is_empty() {
                text.push_str(&format!(
                    ". Allowed {permission} patterns (unless a later rule denies them): {}",
                    allowed.join(", ")
                ));
                return text;
            }
        }
    }
    // The last rules are the ones that win; a long config shows its tail.
    const SHOWN: usize = 12;
    let skip = relevant.len().saturating_sub(SHOWN);
    text.push_str(". Relevant rules, later ones win: ");
    if skip > 0 {
        text.push_str(&format!("({skip} earlier not shown) "));
    }
    let shown: Vec<String> = relevant[skip..].iter().map(show).collect();
    text.push_str(&shown.join("; "));
    text
}

fn rejected_message(feedback: &Option<String>) -> String {
    match feedback {
        Some(f) => format!(
            "The user rejected permission to use this specific tool call with the following feedback: {f}"
        ),
        None => "The user rejected permission to use this specific tool call.".to_string(),
    }
}

pub type AskFuture<'a> = Pin<Box<dyn Future<Output = Result<(), PermissionError>> + Send + 'a>>;

pub trait PermissionGate: Send + Sync {
    fn ask<'a>(&'a self, request: &'a PermissionRequest) -> AskFuture<'a>;

    /// Asks the person even where the configured rules allow: for what a repository's
    /// config would have this machine do (connect to a server it names), which neither the
    /// repository's own rules nor a blanket allow may wave through. A configured deny still
    /// refuses at once; with nobody to ask (no terminal, `--ask deny`) it is refused. A gate
    /// without rules asks as it always does.
    fn confirm<'a>(&'a self, request: &'a PermissionRequest) -> AskFuture<'a> {
        self.ask(request)
    }

    /// The rule that hides a tool of this permission from the model (its last rule is a
    /// `"*"` deny), if any.
    fn disabled(&self, _permission: &str) -> Option<rules::Rule> {
        None
    }
}

/// How [`PolicyGate`] answers every ask (tests and benchmarks; the CLI uses
/// [`gate::PolicyAsker`] behind the rule gate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskPolicy {
    Allow,
    Deny,
}

/// Answers every ask with one policy and keeps a record of the asks.
pub struct PolicyGate {
    policy: AskPolicy,
    asked: Mutex<Vec<PermissionRequest>>,
}

impl PolicyGate {
    pub fn new(policy: AskPolicy) -> Self {
        PolicyGate {
            policy,
            asked: Mutex::new(Vec::new()),
        }
    }

    pub fn asked(&self) -> Vec<PermissionRequest> {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl PermissionGate for PolicyGate {
    fn ask<'a>(&'a self, request: &'a PermissionRequest) -> AskFuture<'a> {
        self.asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(request.clone());
        let answer = match self.policy {
            AskPolicy::Allow => Ok(()),
            AskPolicy::Deny => Err(PermissionError::Rejected { feedback: None }),
        };
        Box::pin(std::future::ready(answer))
    }
}
