//! From options to a running session: the sandbox and rules ([`SessionOptions`]), the
//! model, the agent, the session file, and (for `--resume`/`--continue`) the conversation
//! so far. `runner run` is this plus a terminal; tests and the eval harness call it
//! directly.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::events::{Event, EventSink};
use super::record::{self, Loaded, Record, Recorder};
use super::{Agent, End, LoopOptions, Outcome, Runtime, agents};
use crate::session::{OpenError, OpenKind, OpenSession, SessionOptions};
use runner_llm::models::resolve;
use runner_llm::retry::Retry;
use runner_tool::{Conversation, UserChannel};

/// Which earlier session to continue.
#[derive(Debug, Clone)]
pub enum Resume {
    Id(String),
    /// The newest session of this worktree (`--continue`).
    Last,
}

pub struct RunOptions {
    pub session: SessionOptions,
    /// `provider/model`; else the config's `model`, else the agent's.
    pub model: Option<String>,
    /// The lead agent; `None`: the one a resumed session had become, else `build`.
    pub agent: Option<String>,
    pub loop_options: LoopOptions,
    pub resume: Option<Resume>,
    pub events: Arc<dyn EventSink>,
    pub sessions_dir: PathBuf,
    /// Who answers the `question` tool (the terminal); `None`: nobody is there.
    pub user: Option<Arc<dyn UserChannel>>,
}

impl RunOptions {
    pub fn new(root: impl Into<PathBuf>, events: Arc<dyn EventSink>) -> Self {
        RunOptions {
            session: SessionOptions::new(root),
            model: None,
            agent: None,
            loop_options: LoopOptions::default(),
            resume: None,
            events,
            sessions_dir: record::sessions_dir(),
            user: None,
        }
    }
}

/// Why a run could not start. The session's own error ([`OpenError`]), the provider's and
/// the session file's travel as sources; [`StartError::kind`] says whose it is to fix.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A flag the caller has to change (no model, no such agent), said here.
    #[error("{0}")]
    Usage(String),
    /// The session (rules, config, sandbox, proxy) could not open.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The provider could not be made from the model and the config (a misnamed provider,
    /// no key, a spec that is not provider/model).
    #[error(transparent)]
    Provider(#[from] runner_llm::LlmError),
    /// `--resume ID` names no one session.
    #[error(transparent)]
    NoSession(#[from] record::NotFound),
    /// The session to continue cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot create the session file in {}: {source}; set XDG_DATA_HOME to a writable directory",
        dir.display()
    )]
    SessionFile {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Whose a [`StartError`] is to fix: the caller's (flags, config), the provider's config,
/// the wall's, or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartKind {
    Usage,
    Provider,
    Sandbox,
    Failed,
}

impl StartError {
    /// A session that could not open keeps its kind: a usage error, a wall that would not
    /// start, or anything else.
    pub fn kind(&self) -> StartKind {
        match self {
            StartError::Usage(_) | StartError::NoSession(_) | StartError::Unreadable { .. } => {
                StartKind::Usage
            }
            StartError::Open(e) => match e.kind() {
                OpenKind::Usage => StartKind::Usage,
                OpenKind::Sandbox => StartKind::Sandbox,
                OpenKind::Failed => StartKind::Failed,
            },
            StartError::Provider(_) => StartKind::Provider,
            StartError::SessionFile { .. } => StartKind::Failed,
        }
    }

    /// The engine's own failure of a call, when that is what stopped the session's sandbox
    /// or proxy ([`OpenError::engine_fault`]).
    pub fn engine_fault(&self) -> Option<runner_sandbox::docker::EngineFault> {
        match self {
            StartError::Open(e) => e.engine_fault(),
            _ => None,
        }
    }
}

/// A started run: the root agent, its runtime, and the open session that owns the sandbox
/// (dropping the run closes it).
pub struct Run {
    pub rt: Arc<Runtime>,
    pub agent: Agent,
    pub open: OpenSession,
    pub notes: Vec<String>,
    /// The task a replay recording was made with, for a run started without a prompt.
    pub recorded_prompt: Option<String>,
}

pub async fn start(options: RunOptions) -> Result<Run, StartError> {
    let RunOptions {
        session,
        model,
        agent,
        loop_options,
        resume,
        events,
        sessions_dir,
        user,
    } = options;
    let root = crate::session::absolute_root(&session.root);
    // The conversation to continue, found before anything starts.
    let resumed = match &resume {
        None => None,
        Some(r) => Some(find_resume(r, &sessions_dir, &root)?),
    };
    let id = match &resumed {
        Some(l) => l.id(),
        None => record::new_id(),
    };
    let on_retry = retry_notice(&events, &id);
    let open = open_as(session, &id, &sessions_dir).await?;
    let mut notes = open.notes.clone();
    let settings = open.settings.clone();
    let model_spec = model.or(settings.model.clone());
    let base = observed_context(&open, user, &events);
    let user_agents = runner_dirs::config_dir().join("agents");
    let (all, agent_notes) = agents::all(&open.ctx, &user_agents).await;
    notes.extend(agent_notes);
    // Named, or the one a resumed session had become, or `build`.
    let agent = agent
        .or_else(|| resumed.as_ref().and_then(record::Loaded::lead_agent))
        .unwrap_or_else(|| "build".into());
    let def = lead_agent(&all, &agent)?;
    let model_spec = model_spec.or(def.model.clone()).ok_or_else(|| {
        StartError::Usage(
            "no model: pass --model provider/model (e.g. anthropic/claude-sonnet-4-5, openai/gpt-5, replay/FILE) or set model = \"…\" in the config".into(),
        )
    })?;
    let (provider, info) = resolve(
        &model_spec,
        &settings.provider,
        settings.retry,
        on_retry.clone(),
    )?;
    let recorded_prompt = recorded_prompt(&model_spec);
    let mut loop_options = loop_options;
    if let Some(t) = settings.context.and_then(|c| c.threshold) {
        loop_options.context_threshold = t.clamp(0.1, 1.0);
    }
    let recorder = recorder(
        &sessions_dir,
        &id,
        open.network.as_deref(),
        open.audit.sink(),
    )?;
    let rt = Runtime::new(
        provider,
        info,
        events.clone(),
        recorder,
        all,
        loop_options,
        open.spec.clone(),
        open.rules.clone(),
        open.asker.clone(),
        base,
    );
    settle_runtime(&rt, &settings, on_retry, &open);
    let history = resumed
        .as_ref()
        .map(Loaded::conversation)
        .unwrap_or_default();
    let agent = Agent::root(&rt, id.clone(), def, history).await;
    events.emit(&Event::SessionStart {
        session: id.clone(),
        model: model_spec,
        agent: agent.def.name.clone(),
        sandbox: rt.spec.backend.name().to_string(),
        root: root.display().to_string(),
        resumed_from: resumed.map(|_| id),
    });
    Ok(Run {
        rt,
        agent,
        open,
        notes,
        recorded_prompt,
    })
}

/// Opens the session as conversation `id`: its saved outputs live in a folder named by the
/// id (subagents share it, as they share the sandbox), and it keeps its own audit trail,
/// found again by the id.
async fn open_as(
    mut session: SessionOptions,
    id: &str,
    sessions_dir: &Path,
) -> Result<OpenSession, StartError> {
    session.outputs_of = Some(id.to_string());
    session.audit.trail = Some(crate::audit::trail_of(sessions_dir, id));
    session.audit.session = Some(id.to_string());
    Ok(session.open(Conversation::new(id.to_string())).await?)
}

/// The session's tool context with the user's channel observed: every ask and its answer
/// becomes an event.
fn observed_context(
    open: &OpenSession,
    user: Option<Arc<dyn UserChannel>>,
    events: &Arc<dyn EventSink>,
) -> runner_tool::ToolContext {
    let mut base = open.ctx.clone();
    base.services_mut().user = user.map(|inner| {
        Arc::new(super::observe::ObservedUser {
            inner,
            events: events.clone(),
        }) as Arc<dyn UserChannel>
    });
    base
}

/// What the runtime takes from the settings once it exists: how subagents' models are
/// resolved (with the same retry notices), the instructions, and the audit sink.
fn settle_runtime(
    rt: &Runtime,
    settings: &crate::config::settings::Settings,
    on_retry: runner_llm::retry::RetryNotice,
    open: &OpenSession,
) {
    let subagent_settings = settings.clone();
    rt.set_model_resolver(Box::new(move |spec| {
        resolve(
            spec,
            &subagent_settings.provider,
            subagent_settings.retry,
            on_retry.clone(),
        )
    }));
    rt.set_instructions(settings.instructions.clone());
    rt.set_audit(open.audit.sink().clone());
}

/// The system prompt a replayed session was recorded with, so a replay can say when this
/// run's prompt differs.
fn recorded_prompt(model_spec: &str) -> Option<String> {
    match model_spec.split_once('/') {
        Some(("replay", path)) => runner_llm::replay::Replay::open(Path::new(path))
            .ok()
            .and_then(|r| r.prompt().map(str::to_string)),
        _ => None,
    }
}

/// Tells the run's observers of every retry of a model request, naming the conversation
/// that asked (a subagent's, when one was asking).
fn retry_notice(events: &Arc<dyn EventSink>, id: &str) -> runner_llm::retry::RetryNotice {
    let (events, session) = (events.clone(), id.to_string());
    Arc::new(move |r: Retry| {
        events.emit(&Event::Retry {
            session: super::events::ASKING
                .try_with(String::clone)
                .unwrap_or_else(|_| session.clone()),
            attempt: r.attempt,
            of: r.of,
            delay_ms: r.delay.as_millis() as u64,
            error: r.error,
            discard_text: r.discard_text,
        })
    })
}

/// The agent named to lead the session (a subagent cannot), or a usage error listing the
/// ones that can.
fn lead_agent(all: &[agents::AgentDef], name: &str) -> Result<agents::AgentDef, StartError> {
    let leads = || all.iter().filter(|a| a.mode != agents::Mode::Subagent);
    leads().find(|a| a.name == name).cloned().ok_or_else(|| {
        let names: Vec<&str> = leads().map(|a| a.name.as_str()).collect();
        StartError::Usage(format!(
            "no agent {name:?}; agents that can lead a session: {}",
            names.join(", ")
        ))
    })
}

/// The session file `ID.jsonl`, which also records every connection through the
/// allow-list's proxy (and tells the audit trail of it).
fn recorder(
    sessions_dir: &Path,
    id: &str,
    network: Option<&runner_network::NetworkProxy>,
    audit: &Arc<runner_audit::Audit>,
) -> Result<Arc<Recorder>, StartError> {
    let recorder = Arc::new(
        Recorder::create(sessions_dir.join(format!("{id}.jsonl"))).map_err(|source| {
            StartError::SessionFile {
                dir: sessions_dir.to_path_buf(),
                source,
            }
        })?,
    );
    if let Some(network) = network {
        let (recorder, session) = (recorder.clone(), id.to_string());
        let audit = audit.clone();
        network.observe(Arc::new(move |c| {
            recorder.write(&Record::Network {
                session: session.clone(),
                connection: c.clone(),
            });
            crate::audit::connection(&audit, c);
        }));
    }
    Ok(recorder)
}

fn find_resume(resume: &Resume, dir: &Path, root: &Path) -> Result<Loaded, StartError> {
    let path = match resume {
        Resume::Id(id) => record::find(dir, id)?,
        Resume::Last => record::list(dir)
            .into_iter()
            .find(|p| {
                Loaded::read(p).ok().is_some_and(|l| {
                    matches!(l.header(), Some(Record::Session { root: r, .. }) if Path::new(r) == root)
                })
            })
            .ok_or_else(|| {
                StartError::Usage(format!(
                    "no earlier session of {} in {} to continue",
                    root.display(),
                    dir.display()
                ))
            })?,
    };
    Loaded::read(&path).map_err(|source| StartError::Unreadable { path, source })
}

impl Run {
    /// One user message, run to its end.
    pub async fn turn(&mut self, prompt: &str, cancel: CancellationToken) -> Outcome {
        self.agent.run(prompt, cancel).await
    }

    /// Records the end and reports it; the sandbox closes when the run is dropped.
    pub fn finish(&self, end: &End) {
        let a = &self.agent;
        let elapsed = a.elapsed();
        let duration_ms = elapsed.as_millis() as u64;
        self.open.audit.ended(end.reason());
        self.rt.recorder.write(&Record::End {
            session: a.id.clone(),
            reason: end.reason().into(),
            message: end.message().map(str::to_string),
            steps: a.steps,
            usage: a.usage,
            duration_ms,
        });
        self.rt.events.emit(&Event::SessionEnd {
            session: a.id.clone(),
            reason: end.reason().into(),
            message: end.message().map(str::to_string),
            steps: a.steps,
            usage: a.usage,
            duration_ms: super::events::millis(elapsed),
            files_changed: a.files_changed().to_vec(),
        });
    }

    /// What to do on an exit that cannot wait for the turn to wind down: record the end
    /// with the progress made so far, so the session does not look like it is still
    /// running. The sandbox is left to its backend's reaping.
    pub fn on_forced_exit(&self) -> impl Fn() + Send + Sync + 'static {
        let rt = self.rt.clone();
        let session = self.agent.id.clone();
        move || {
            let (steps, usage) = *rt.root_progress.lock().unwrap_or_else(|p| p.into_inner());
            let elapsed = rt.started.elapsed();
            let end = End::Interrupted;
            let message = Some("stopped at once by a second interrupt".to_string());
            rt.recorder.write(&Record::End {
                session: session.clone(),
                reason: end.reason().into(),
                message: message.clone(),
                steps,
                usage,
                duration_ms: elapsed.as_millis() as u64,
            });
            rt.events.emit(&Event::SessionEnd {
                session: session.clone(),
                reason: end.reason().into(),
                message,
                steps,
                usage,
                duration_ms: super::events::millis(elapsed),
                files_changed: Vec::new(),
            });
        }
    }

    pub fn session_file(&self) -> &Path {
        self.rt.recorder.path()
    }
}
