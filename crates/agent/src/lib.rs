//! The agent loop, on the host: ask the model, run the tool calls it makes through the
//! registry (the same path `runner tool call` takes: validation, permission gate, sandbox,
//! truncation), feed the results back, until the model answers without tool calls.
//!
//! A [`Runtime`] is what a run and its subagents share (the model, the sandbox, the
//! session file, the event sink); an [`Agent`] is one conversation in it. Subagents are
//! child conversations over the same sandbox with a gate of their own that keeps the
//! parent's denies.

pub mod agents;
pub mod audit;
pub mod compact;
pub mod config;
pub mod events;
mod observe;
mod plan_mode;
pub mod prompt;
pub mod record;
mod run;
pub mod session;
pub mod start;
mod task;
pub mod transcript;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

use runner_llm::models::ModelInfo;
use runner_llm::{LlmError, Message, Provider, Usage};
use runner_permission::gate::{Asker, RuleGate};
use runner_permission::rules::Rule;
use runner_sandbox::spec::SandboxSpec;
use runner_tool::{Conversation, Registry, ToolContext};

pub use agents::AgentDef;
pub use events::{Event, EventSink};
pub use record::Recorder;
pub use run::offered_to_lead;

/// How a run ended. Each has its own exit status (docs/GUIDE.md: "Exit status").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", content = "message", rename_all = "snake_case")]
pub enum End {
    /// The model answered without tool calls.
    Finished,
    MaxSteps,
    ProviderError(String),
    /// A person said no to an ask, or nobody could answer it.
    Refused(String),
    /// The model declined to answer (its provider says so: a refusal stop reason or
    /// refusal text); what it said is its last message.
    ModelRefused(String),
    Interrupted,
    SandboxError(String),
}

impl End {
    pub fn reason(&self) -> &'static str {
        match self {
            End::Finished => "finished",
            End::MaxSteps => "max_steps",
            End::ProviderError(_) => "provider_error",
            End::Refused(_) => "refused",
            End::ModelRefused(_) => "model_refused",
            End::Interrupted => "interrupted",
            End::SandboxError(_) => "sandbox_error",
        }
    }

    pub fn message(&self) -> Option<&str> {
        match self {
            End::ProviderError(m)
            | End::Refused(m)
            | End::ModelRefused(m)
            | End::SandboxError(m) => Some(m),
            _ => None,
        }
    }
}

/// Knobs of the loop.
#[derive(Debug, Clone)]
pub struct LoopOptions {
    pub max_steps: u32,
    pub continue_on_deny: bool,
    /// Fraction of the context window at which pruning, then compaction, starts.
    pub context_threshold: f64,
    /// Tool calls of one step that run at once.
    pub parallel: usize,
}

impl Default for LoopOptions {
    fn default() -> Self {
        LoopOptions {
            max_steps: 100,
            continue_on_deny: false,
            context_threshold: 0.8,
            parallel: 8,
        }
    }
}

/// Turns a subagent's `model:` into a provider, with the run's settings and retries.
/// A subagent's own `model:` that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("agent {agent} ({file}) names model {model}, which cannot be used: {why}")]
pub struct UnusableModel {
    agent: String,
    file: String,
    model: String,
    #[source]
    why: Box<LlmError>,
}

pub type ModelResolver =
    Box<dyn Fn(&str) -> Result<(Arc<dyn Provider>, ModelInfo), LlmError> + Send + Sync>;

/// What a run and its subagents share.
pub struct Runtime {
    pub provider: Arc<dyn Provider>,
    pub model: ModelInfo,
    pub events: Arc<dyn EventSink>,
    pub recorder: Arc<Recorder>,
    pub agents: Vec<AgentDef>,
    pub options: LoopOptions,
    pub spec: SandboxSpec,
    /// The configured rules, before any agent's own.
    pub rules: Vec<Rule>,
    pub asker: Arc<dyn Asker>,
    /// The context every agent's is derived from (sandbox, truncator, user channel).
    pub base: ToolContext,
    pub user_config: PathBuf,
    refused: Arc<Mutex<Option<String>>>,
    /// Subagents between their tasks, by task id.
    children: tokio::sync::Mutex<HashMap<String, Agent>>,
    /// Every session's rules and depth, so a child can be built from its parent's.
    lineage: Mutex<HashMap<String, (Vec<Rule>, u32)>>,
    /// Models other than the run's, for subagents that name their own.
    models: std::sync::OnceLock<ModelResolver>,
    /// The `instructions` entries of an OpenCode config, for every agent's system prompt.
    instructions: std::sync::OnceLock<Vec<String>>,
    /// The root agent's steps and usage so far, for an end written from outside the loop
    /// (a forced exit).
    root_progress: Mutex<(u32, Usage)>,
    /// A session's approved switch to another agent (plan mode), made between its steps.
    handoff: Mutex<Option<(String, String)>>,
    started: Instant,
    /// Where every agent's gate tells its decisions (`--audit`, the session's trail).
    audit: std::sync::OnceLock<Arc<runner_audit::Audit>>,
}

impl Runtime {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        provider: Arc<dyn Provider>,
        model: ModelInfo,
        events: Arc<dyn EventSink>,
        recorder: Arc<Recorder>,
        agents: Vec<AgentDef>,
        options: LoopOptions,
        spec: SandboxSpec,
        rules: Vec<Rule>,
        asker: Arc<dyn Asker>,
        base: ToolContext,
    ) -> Arc<Runtime> {
        Arc::new(Runtime {
            provider,
            model,
            events,
            recorder,
            agents,
            options,
            spec,
            rules,
            asker,
            base,
            user_config: runner_dirs::config_dir(),
            refused: Arc::new(Mutex::new(None)),
            children: tokio::sync::Mutex::new(HashMap::new()),
            lineage: Mutex::new(HashMap::new()),
            models: std::sync::OnceLock::new(),
            instructions: std::sync::OnceLock::new(),
            root_progress: Mutex::new((0, Usage::default())),
            handoff: Mutex::new(None),
            started: Instant::now(),
            audit: std::sync::OnceLock::new(),
        })
    }

    /// Leaves `session`'s switch to `agent` for its step loop.
    fn request_handoff(&self, session: &str, agent: &str) {
        *self.handoff.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((session.to_string(), agent.to_string()));
    }

    /// The agent `session` was handed to, if it was.
    fn take_handoff(&self, session: &str) -> Option<String> {
        let mut handoff = self.handoff.lock().unwrap_or_else(|p| p.into_inner());
        match handoff.as_ref() {
            Some((s, _)) if s == session => handoff.take().map(|(_, agent)| agent),
            _ => None,
        }
    }

    /// Lets subagents with a `model:` of their own use it. Without this, they use the
    /// run's model.
    pub fn set_model_resolver(&self, resolver: ModelResolver) {
        let _ = self.models.set(resolver);
    }

    /// Puts the files an OpenCode config's `instructions` name in every system prompt built
    /// from now on (set once, before the first agent).
    pub fn set_instructions(&self, entries: Vec<String>) {
        let _ = self.instructions.set(entries);
    }

    /// Gives every agent's gate built from now on this audit trail (set once, before the
    /// first agent): each agent judges its calls with a gate of its own.
    pub fn set_audit(&self, audit: Arc<runner_audit::Audit>) {
        let _ = self.audit.set(audit);
    }

    /// The provider and model for an agent: its own `model:` if it names one, else the
    /// run's. A replay serves every agent from the one recording.
    fn model_for(&self, def: &AgentDef) -> Result<(Arc<dyn Provider>, ModelInfo), UnusableModel> {
        let run_model = || (self.provider.clone(), self.model.clone());
        let Some(spec) = def.model.as_deref() else {
            return Ok(run_model());
        };
        if spec == self.model.spec || self.model.provider == "replay" {
            return Ok(run_model());
        }
        match self.models.get() {
            None => Ok(run_model()),
            Some(resolve) => resolve(spec).map_err(|e| UnusableModel {
                agent: def.name.clone(),
                file: def.source.clone(),
                model: spec.to_string(),
                why: Box::new(e),
            }),
        }
    }

    fn note_root_progress(&self, steps: u32, usage: Usage) {
        *self.root_progress.lock().unwrap_or_else(|p| p.into_inner()) = (steps, usage);
    }

    pub fn agent(&self, name: &str) -> Option<&AgentDef> {
        self.agents.iter().find(|a| a.name == name)
    }

    fn remember(&self, session: &str, rules: Vec<Rule>, depth: u32) {
        self.lineage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session.to_string(), (rules, depth));
    }

    fn rules_of(&self, session: &str) -> Vec<Rule> {
        let lineage = self.lineage.lock().unwrap_or_else(|p| p.into_inner());
        // An unknown session gets the configured rules: never more than those.
        lineage
            .get(session)
            .map(|l| l.0.clone())
            .unwrap_or_else(|| self.rules.clone())
    }

    fn depth_of(&self, session: &str) -> u32 {
        let lineage = self.lineage.lock().unwrap_or_else(|p| p.into_inner());
        lineage.get(session).map(|l| l.1).unwrap_or(0)
    }

    fn take_refusal(&self) -> Option<String> {
        self.refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

/// One conversation: the root session or a subagent's.
pub struct Agent {
    rt: Arc<Runtime>,
    pub id: String,
    pub parent: Option<String>,
    pub def: AgentDef,
    ctx: ToolContext,
    registry: Arc<Registry>,
    system: String,
    /// The agent's own model, or the run's.
    provider: Arc<dyn Provider>,
    model: ModelInfo,
    pub messages: Vec<Message>,
    pub steps: u32,
    pub usage: Usage,
    /// What the last turn filled of the context window.
    last_context: u64,
    /// The conversation's size in characters right after that turn: what came after it
    /// is estimated.
    chars_at_turn: usize,
    files_changed: Vec<String>,
}

/// What a turn of the conversation came to.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub end: End,
    /// The model's last text.
    pub answer: String,
}

impl Agent {
    /// The root agent of a run. `id` names its session; `resume` is an earlier
    /// conversation to continue.
    pub async fn root(rt: &Arc<Runtime>, id: String, def: AgentDef, resume: Vec<Message>) -> Agent {
        let mut rules = rt.rules.clone();
        rules.extend(def.rules.iter().cloned());
        rt.remember(&id, rules.clone(), 0);
        let llm = (rt.provider.clone(), rt.model.clone());
        let mut agent = Agent::new(rt, id, None, def, rules, 0, llm).await;
        agent.messages = resume;
        agent
    }

    async fn new(
        rt: &Arc<Runtime>,
        id: String,
        parent: Option<String>,
        def: AgentDef,
        rules: Vec<Rule>,
        depth: u32,
        (provider, model): (Arc<dyn Provider>, ModelInfo),
    ) -> Agent {
        let conversation = Arc::new(Conversation::new(id.clone()));
        let lead = parent.is_none();
        let (ctx, registry, system) =
            Self::equip(rt, &id, &def, rules, depth, lead, conversation).await;
        rt.recorder.write(&record::Record::Session {
            session: id.clone(),
            parent: parent.clone(),
            created_ms: record::now_ms(),
            root: rt.base.worktree().display().to_string(),
            model: model.spec.clone(),
            agent: def.name.clone(),
            sandbox: rt.spec.backend.name().to_string(),
            prompt: None,
            context_window: Some(model.context_window),
        });
        Agent {
            rt: rt.clone(),
            id,
            parent,
            def,
            ctx,
            registry,
            system,
            provider,
            model,
            messages: Vec::new(),
            steps: 0,
            usage: Usage::default(),
            last_context: 0,
            chars_at_turn: 0,
            files_changed: Vec::new(),
        }
    }

    /// What an agent works with: its gate (the rules given, observed), its tools and its
    /// system prompt, over `conversation`.
    async fn equip(
        rt: &Arc<Runtime>,
        id: &str,
        def: &AgentDef,
        rules: Vec<Rule>,
        depth: u32,
        lead: bool,
        conversation: Arc<Conversation>,
    ) -> (ToolContext, Arc<Registry>, String) {
        let base = &rt.base;
        let mut gate = RuleGate::new(base.worktree(), rules, rt.asker.clone());
        if let Some(audit) = rt.audit.get() {
            gate = gate.with_audit(audit.clone());
        }
        let gate = Arc::new(gate);
        let observed = Arc::new(observe::ObservedGate {
            inner: gate,
            session: id.to_string(),
            events: rt.events.clone(),
            recorder: rt.recorder.clone(),
            refused: rt.refused.clone(),
        });
        let mut ctx = base.clone();
        ctx.gate = observed;
        ctx.conversation = conversation;
        let lead = lead.then_some((id, def.name.as_str()));
        let registry = Arc::new(run::registry_for(rt, &ctx, depth, lead).await);
        // batch reaches the agent's tools (task, skill) through the context.
        ctx.registry = Some(registry.clone());
        let env = prompt::Environment {
            worktree: base.worktree(),
            spec: &rt.spec,
            date: prompt::today(),
        };
        let configured = rt.instructions.get().map(Vec::as_slice).unwrap_or_default();
        let system = prompt::build(&ctx, &env, def, &rt.user_config, configured).await;
        (ctx, registry, system)
    }

    /// Hands this session to the agent `name` (plan mode): its rules, tools and system
    /// prompt from the next step on; the conversation and its state stay. Recorded, so a
    /// resumed session goes on as the agent it had become. Only `plan` and `build` are
    /// handed to, and both are built in: another name leaves the session as it is.
    async fn switch_to(&mut self, name: &str) {
        let Some(def) = self.rt.agents.iter().find(|a| a.name == name).cloned() else {
            return;
        };
        let mut rules = self.rt.rules.clone();
        rules.extend(def.rules.iter().cloned());
        self.rt.remember(&self.id, rules.clone(), 0);
        let conversation = self.ctx.conversation.clone();
        let (ctx, registry, system) =
            Self::equip(&self.rt, &self.id, &def, rules, 0, true, conversation).await;
        (self.ctx, self.registry, self.system, self.def) = (ctx, registry, system, def);
        self.rt.recorder.write(&record::Record::Agent {
            session: self.id.clone(),
            agent: name.to_string(),
        });
    }

    pub fn system_prompt(&self) -> &str {
        &self.system
    }

    pub fn context(&self) -> &ToolContext {
        &self.ctx
    }

    pub fn files_changed(&self) -> &[String] {
        &self.files_changed
    }

    pub fn elapsed(&self) -> std::time::Duration {
        self.rt.started.elapsed()
    }
}
