//! What each phase of an attempt may reach, and what it did reach.
//!
//! The agent's phase and the verifier's each have a plan ([`PhasePlan`]): `--agent-network`
//! and `--verifier-network`, else what the task says. A phase that may reach anything gets
//! the allow-list proxy, whose gate is that phase's rules alone (nobody is asked in an
//! evaluation), with the user's own `--config` network rules laid over them; the container
//! is made with the proxy when any phase needs it. The oracle's proxy outlives its phase in
//! the server kept for the verifier, refusing everything until the verifier's rules are
//! switched in ([`HandedOver`]). Each phase's connections are kept in the attempt's result
//! and whole in `agent-network.jsonl` and `verifier-network.jsonl`.

use std::path::Path;
use std::sync::Arc;

use runner_workspace::write_file;

use crate::harbor::{self, HarborTask};
use crate::results::TaskResult;
use crate::verifier_network::{PhaseGate, PhasePlan};
use crate::{EvalError, EvalOptions};

/// The oracle's proxy after its phase: refusing everything until the verifier's phase
/// switches its rules, with the number of its records that are the agent's.
pub(super) struct HandedOver {
    pub(super) proxy: runner_network::NetworkProxy,
    pub(super) gate: Arc<PhaseGate>,
    pub(super) agent_records: usize,
}

/// The plan of the agent's phase in `step`: `--agent-network`, else the task's policy.
pub(super) fn agent_plan(
    task: &HarborTask,
    step: Option<&harbor::HarborStep>,
    options: &EvalOptions,
) -> PhasePlan {
    PhasePlan::of(
        options.agent_network,
        "--agent-network",
        task.agent_network(step),
    )
}

/// The plan of the verifier's phase in `step`: `--verifier-network`, else the task's.
pub(super) fn verifier_plan(
    task: &HarborTask,
    step: Option<&harbor::HarborStep>,
    options: &EvalOptions,
) -> PhasePlan {
    PhasePlan::of(
        options.verifier_network,
        "--verifier-network",
        task.verifier_network(step),
    )
}

/// Whether any agent phase, and any verifier phase, of the task gets the proxy: the
/// container is made for it (the agent's commands see the proxy's variables; the server
/// may listen on the container's loopback).
pub(super) fn proxied_phases(task: &HarborTask, options: &EvalOptions) -> (bool, bool) {
    let steps: Vec<Option<&harbor::HarborStep>> = if task.steps.is_empty() {
        vec![None]
    } else {
        task.steps.iter().map(Some).collect()
    };
    let agent = steps
        .iter()
        .any(|s| agent_plan(task, *s, options).proxied());
    let verifier = steps
        .iter()
        .any(|s| verifier_plan(task, *s, options).proxied());
    (agent, verifier)
}

/// A proxy in `sandbox` where `rules` alone decide (`why_no_ask` for what they leave open).
async fn rules_proxy(
    sandbox: &runner_sandbox::Sandbox,
    rules: Vec<runner_permission::rules::Rule>,
    why_no_ask: &str,
    failed: &str,
) -> Result<runner_network::NetworkProxy, EvalError> {
    let policy = runner_network::Policy::without_asks(sandbox.worktree(), rules, why_no_ask);
    runner_network::NetworkProxy::start(
        sandbox.client.clone(),
        policy,
        runner_network::NetworkLimits::default(),
    )
    .await
    .map_err(|e| EvalError::from(e).during(failed))
}

/// The `network` rules of the evaluation's `--config`, the user's own: laid over each
/// phase's rules (an exact one there may open a private address); then the installed
/// boundaries', which cap them all.
pub(super) fn user_network_rules(
    options: &EvalOptions,
) -> Result<Vec<runner_permission::rules::Rule>, EvalError> {
    let boundary = crate::verifier_network::PhasePlan::boundary_rules()?;
    let Some(path) = &options.config else {
        return Ok(boundary);
    };
    let home = std::env::var("HOME").unwrap_or_default();
    let mut rules: Vec<_> = runner_permission::layers::load_file(path, &home)
        .map_err(|e| EvalError::Options(e.to_string()))?
        .into_iter()
        // `--config` is the user's own: its exact rules may open a private address.
        .map(|r| r.in_layer(runner_permission::rules::Layer::Explicit))
        .filter(|r| runner_permission::wildcard::matches("network", &r.permission))
        .collect();
    rules.extend(boundary);
    Ok(rules)
}

/// The verifier's connections in the attempt: one line each in `result.json`, every
/// record whole in `verifier-network.jsonl`.
pub(super) fn record_connections(
    result: &mut TaskResult,
    out: &Path,
    connections: &[runner_network::ConnectionRecord],
) {
    if connections.is_empty() {
        return;
    }
    // A multi-step task's steps add theirs in turn.
    result
        .verifier_network
        .extend(connections.iter().map(|c| c.line()));
    let lines: String = connections
        .iter()
        .filter_map(|c| serde_json::to_string(c).ok())
        .map(|l| l + "\n")
        .collect();
    let _ = write_file(&out.join("verifier-network.jsonl"), lines.as_bytes());
}

/// The verifier's proxy: `rules` decide, nobody is asked.
pub(super) async fn verifier_proxy(
    sandbox: &runner_sandbox::Sandbox,
    rules: &[runner_permission::rules::Rule],
) -> Result<runner_network::NetworkProxy, EvalError> {
    rules_proxy(
        sandbox,
        rules.to_vec(),
        "the verifier's network is its phase's rules alone (the task's, or --verifier-network's)",
        "cannot start the verifier's network proxy",
    )
    .await
}
