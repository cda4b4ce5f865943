//! The permission hook every tool call goes through.
//!
//! Tools describe what they are about to do as a [`PermissionRequest`] (OpenCode's
//! permission name, concrete patterns, and the patterns an "always" reply would remember)
//! and await the gate's answer. The rule engine (allow / ask / deny rules, approvals,
//! profiles) plugs in behind [`PermissionGate`]; until it lands, [`PolicyGate`] answers every
//! ask with one fixed policy and records what it was asked, so the asks themselves are
//! already exact and testable.

pub mod arity;
pub mod rules;
pub mod wildcard;

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use serde::Serialize;

/// One ask, as OpenCode's `ctx.ask` carries it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PermissionRequest {
    pub permission: String,
    pub patterns: Vec<String>,
    pub always: Vec<String>,
    /// Context for a human deciding (e.g. the diff of an edit).
    pub metadata: serde_json::Value,
}

impl PermissionRequest {
    pub fn new(permission: &str, patterns: Vec<String>, always: Vec<String>) -> Self {
        PermissionRequest {
            permission: permission.to_string(),
            patterns,
            always,
            metadata: serde_json::Value::Null,
        }
    }

    pub fn with_metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = metadata;
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PermissionError {
    /// A rule says no.
    #[error("permission denied by a rule: {permission} {patterns:?}")]
    Denied {
        permission: String,
        patterns: Vec<String>,
    },
    /// The asked party said no, optionally telling the model what to do instead.
    #[error("{}", rejected_message(feedback))]
    Rejected { feedback: Option<String> },
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
}

/// How to answer asks when nobody can be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
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
