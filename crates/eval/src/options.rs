//! What a run is asked to do: the task sets, where results go, the model or the oracle,
//! and the knobs `runner eval run` exposes. The command line fills an [`EvalOptions`];
//! [`crate::run`] checks it before anything is written.

use std::path::PathBuf;

use runner_sandbox::BackendKind;

use crate::{tasks, verifier_network};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentKind {
    /// runner's own loop with `--model`.
    Model,
    /// The task's reference solution instead of a model.
    Oracle,
}

#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// JSON-lines task files.
    pub task_sets: Vec<PathBuf>,
    pub out: PathBuf,
    pub model: Option<String>,
    pub agent: AgentKind,
    pub jobs: usize,
    /// Default: the profile's (docker for `eval`).
    pub backend: Option<BackendKind>,
    pub profile: String,
    pub image: Option<String>,
    /// `--runtime`: the sandbox containers' OCI runtime; default the profile's.
    pub runtime: Option<String>,
    pub config: Option<PathBuf>,
    pub attempts: u32,
    /// For tasks that do not set their own.
    pub timeouts: tasks::Timeouts,
    pub timeout_multiplier: f64,
    pub max_steps: u32,
    /// Further tries of an attempt that failed for the infrastructure's reasons.
    pub infra_retries: u32,
    /// A live progress line on standard error.
    pub progress: bool,
    /// Docker engines to spread tasks over (`--docker-host`); empty: the default one.
    pub docker_hosts: Vec<String>,
    /// Build every task image again (once in this run), whatever the engine has.
    pub rebuild: bool,
    /// `--build-network`: the engine network task images' `RUN` steps use (for engines
    /// without a default bridge); `None`: the engine's default.
    pub build_network: Option<String>,
    /// `--verifier-network`: where a Harbor task's verifier may connect (default: what
    /// the task says), through the proxy.
    pub verifier_network: verifier_network::VerifierNetwork,
    /// `--agent-network`: the same for the agent's phase.
    pub agent_network: verifier_network::NetworkChoice,
    /// The runner binary sandbox containers mount; `None`: this executable. Set by [`run`]
    /// to a copy in the out folder when runner runs in a container
    /// ([`runner_sandbox::spec::IN_CONTAINER_ENV`]).
    pub server_exe: Option<PathBuf>,
    /// `--shard K/N`: run only the tasks of this shard, into its folder under `out`
    /// ([`crate::shard`]).
    pub shard: Option<crate::shard::Shard>,
}

impl EvalOptions {
    pub fn new(task_sets: Vec<PathBuf>, out: PathBuf) -> EvalOptions {
        EvalOptions {
            task_sets,
            out,
            model: None,
            agent: AgentKind::Model,
            jobs: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            backend: None,
            profile: "eval".into(),
            image: None,
            runtime: None,
            config: None,
            attempts: 1,
            timeouts: tasks::Timeouts::default(),
            timeout_multiplier: 1.0,
            max_steps: 100,
            infra_retries: 2,
            progress: false,
            docker_hosts: Vec::new(),
            rebuild: false,
            build_network: None,
            verifier_network: Default::default(),
            agent_network: Default::default(),
            server_exe: None,
            shard: None,
        }
    }

    pub fn model_label(&self) -> String {
        match self.agent {
            AgentKind::Oracle => "oracle".into(),
            AgentKind::Model => self.model.clone().unwrap_or_default(),
        }
    }
}
