//! Opening a session: from a worktree, a profile, config files and the command line's
//! overrides to everything a tool call runs with (rules, gate, sandbox, registry). Every
//! command that runs tools (`runner tool call`, `runner run`, `runner eval`) opens its
//! sessions here, so they judge and confine calls the same way and the CLI only parses
//! flags.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::profile::{self, AskMode, Profile};
use crate::config::trust::{self, TrustMode};
use runner_permission::gate::{Asker, PolicyAsker, RuleGate};
use runner_permission::layers::{self as rule_layers, Sources};
use runner_permission::rules::Rule;
use runner_permission::terminal::TerminalAsker;
use runner_sandbox::spec::{Network, SandboxSpec};
use runner_sandbox::{BackendKind, Sandbox};
use runner_tool::truncate::Truncator;
use runner_tool::{Conversation, ToolContext};

/// What a session is asked to be. Every `Option` left `None` means "the profile's".
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    pub root: PathBuf,
    /// A profile name or a path to a profile TOML file (default `default`).
    pub profile: Option<String>,
    pub backend: Option<BackendKind>,
    pub image: Option<String>,
    /// `--runtime NAME`: the docker backend's OCI runtime (`runsc`, `runc`, `default`),
    /// instead of the profile's preference.
    pub runtime: Option<String>,
    pub network: Option<Network>,
    /// `--config FILE`.
    pub config: Option<PathBuf>,
    pub ask: Option<AskMode>,
    /// Rules after every config layer (an agent's own restrictions).
    pub session_rules: Vec<Rule>,
    /// Where full tool outputs are saved (default: the user's data directory), each session
    /// in a folder of its own below it; only that folder is mounted into the sandbox.
    pub output_dir: Option<PathBuf>,
    /// The session whose folder of saved outputs this one uses: a conversation's id, so that
    /// a resumed one still reads the outputs its history points at. `None`: a new folder.
    pub outputs_of: Option<String>,
    /// Open the sandbox over this task container (its image holds the worktree; docker
    /// only). `root` then only names where config files are looked for.
    pub in_image: Option<Arc<runner_sandbox::docker::in_image::TaskContainer>>,
    /// The Docker engine to use (docker backend); `None`: DOCKER_HOST or the local socket.
    pub docker_host: Option<String>,
    /// Where the sandbox works: the checkout, or a private copy of it (default: the
    /// profile's, else the checkout).
    pub workspace: Option<runner_workspace::Mode>,
    /// The root is a private worktree of runner's own (an evaluation attempt's), not a
    /// checkout the user runs git in: repositories made there are left as they are.
    pub private_worktree: bool,
    /// The runner binary sandbox containers mount as their server, where this executable
    /// is not at that path on the engine's host (runner in a container, see
    /// [`runner_sandbox::spec::IN_CONTAINER_ENV`]); `None`: this executable.
    pub server_exe: Option<PathBuf>,
    /// How trust is settled when the project's config loosens a built-in default
    /// (`--trust-project` is [`TrustMode::Grant`]; see [`crate::config::trust`]).
    pub project_trust: TrustMode,
    /// Refuse the direct workspace in a folder outside any git work tree (`runner run`
    /// without `--no-git-check`): there the agent's edits would land with nothing to review
    /// them by or undo them with. Off for callers whose worktree is their own (an
    /// evaluation's) or who asked for one tool call.
    pub require_git_for_direct: bool,
    /// Where the session's audit trail goes besides the user's `[audit] file`.
    pub audit: crate::audit::AuditOptions,
    /// Who answers asks instead of `--ask`, the profile or the terminal: a front end with a
    /// person of its own (an MCP client, through elicitation).
    pub asker: Option<SessionAsker>,
}

/// An [`Asker`] a caller hands to [`SessionOptions`].
#[derive(Clone)]
pub struct SessionAsker(pub Arc<dyn Asker>);

impl std::fmt::Debug for SessionAsker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionAsker")
    }
}

/// Why a session could not open. Each error keeps what stopped it (the profile's, the
/// config's, the engine's own error) as its source, so a caller decides by kind, never by
/// reading the message: [`OpenError::kind`] says whose it is to fix, and
/// [`OpenError::engine_fault`] whether the engine itself failed a call.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A flag or root the caller has to change, said here.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Profile(#[from] profile::ProfileError),
    #[error(transparent)]
    Rules(#[from] rule_layers::ConfigError),
    #[error(transparent)]
    Settings(#[from] crate::config::settings::SettingsError),
    /// The trust bundle the sandbox gets could not be made from the config's authorities.
    #[error(transparent)]
    Trust(#[from] runner_sandbox::trust::TrustError),
    #[error(transparent)]
    Audit(#[from] runner_audit::AuditError),
    /// The config's `[websearch]` names a service that cannot be used.
    #[error(transparent)]
    Search(#[from] runner_tool::server_error::ServerError),
    /// Hosts read request by request, or secrets, that cannot be set up as the config's
    /// `[network]` says.
    #[error(transparent)]
    Network(#[from] runner_network::settings::SettingsError),
    /// No wall was named and none works here.
    #[error(transparent)]
    NoWall(#[from] runner_sandbox::choose::NoWall),
    /// A wall that cannot work where runner is (a container of its own), said here.
    #[error("{0}")]
    Sandbox(String),
    /// The sandbox did not start.
    #[error("cannot start the {backend} sandbox: {source}")]
    SandboxStart {
        backend: &'static str,
        #[source]
        source: runner_sandbox::SandboxError,
    },
    /// The allow-list's proxy did not start in the sandbox.
    #[error("cannot start the network proxy in the sandbox: {0}")]
    Proxy(#[source] runner_sandbox::SandboxError),
    #[error("cannot find the runner executable: {0}")]
    Executable(#[source] std::io::Error),
    #[error(
        "cannot prepare {} for saved tool output: {source}; set XDG_DATA_HOME to a writable directory",
        dir.display()
    )]
    Outputs {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The copy workspace could not be made.
    #[error(transparent)]
    Workspace(#[from] runner_workspace::Error),
}

/// Whose an [`OpenError`] is to fix: the caller's (flags, config), the wall's, or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenKind {
    Usage,
    Sandbox,
    Failed,
}

impl OpenError {
    pub fn kind(&self) -> OpenKind {
        match self {
            OpenError::Usage(_)
            | OpenError::Profile(_)
            | OpenError::Rules(_)
            | OpenError::Settings(_)
            | OpenError::Trust(_)
            | OpenError::Audit(_)
            | OpenError::Search(_)
            | OpenError::Network(_) => OpenKind::Usage,
            OpenError::NoWall(_)
            | OpenError::Sandbox(_)
            | OpenError::SandboxStart { .. }
            | OpenError::Proxy(_) => OpenKind::Sandbox,
            OpenError::Executable(_) | OpenError::Outputs { .. } | OpenError::Workspace(_) => {
                OpenKind::Failed
            }
        }
    }

    /// The engine's own failure of a call (a 5xx, a cut connection, no answer in time),
    /// when that is what stopped the sandbox or its proxy from starting.
    pub fn engine_fault(&self) -> Option<runner_sandbox::docker::EngineFault> {
        match self {
            OpenError::SandboxStart { source, .. } | OpenError::Proxy(source) => {
                source.engine_fault()
            }
            _ => None,
        }
    }
}

/// The rules half of a session: enough to judge calls without running anything.
pub struct Rules {
    pub profile: Profile,
    pub rules: Vec<Rule>,
    /// The worktree as the sandbox names it (absolute, normalised).
    pub root: PathBuf,
    /// Things the person running runner should know (project rules a profile ignored).
    pub notes: Vec<String>,
}

impl SessionOptions {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SessionOptions {
            root: root.into(),
            ..Default::default()
        }
    }

    fn profile_name(&self) -> &str {
        self.profile.as_deref().unwrap_or("default")
    }

    /// The profile and the merged ruleset (defaults, profile, user, project, `--config`,
    /// session). A broken file stops here, before any sandbox starts.
    pub fn rules(&self, output_dir: Option<&Path>) -> Result<Rules, OpenError> {
        if !self.root.is_dir() {
            return Err(OpenError::Usage(format!(
                "--root {} is not a directory",
                self.root.display()
            )));
        }
        let profile = profile::load(self.profile_name())?;
        let root = absolute_root(&self.root);
        // A private worktree (an evaluation's) has nobody to ask, whatever the terminal.
        let mode = match self.project_trust {
            TrustMode::Ask if self.private_worktree => TrustMode::NoQuestion,
            mode => mode,
        };
        let (layers, notes) = rule_layers::load(Sources {
            profile: profile.permission_rules(),
            worktree: &root,
            user_config: &runner_dirs::user_config(),
            explicit: self.config.as_deref(),
            output_dir,
            session: self.session_rules.clone(),
            trust: &mut |review| trust::decide(review, mode),
        })?;
        Ok(Rules {
            profile,
            rules: rule_layers::merge(layers),
            root,
            notes,
        })
    }

    /// The wall picked for this session when neither `--sandbox` nor the profile names
    /// one ([`runner_sandbox::choose`]); `None` when one was named.
    pub fn default_wall(
        &self,
        profile: &Profile,
    ) -> Option<Result<runner_sandbox::choose::Chosen, runner_sandbox::choose::NoWall>> {
        let named =
            self.backend.is_some() || profile.sandbox.backend.is_some() || self.in_image.is_some();
        (!named).then(runner_sandbox::choose::default_wall)
    }

    /// The sandbox spec: the profile's, then each override given; with no backend named
    /// anywhere, the default wall.
    pub fn spec(&self, profile: &Profile) -> Result<SandboxSpec, OpenError> {
        let (settings, _) =
            crate::config::settings::Settings::load(&self.root, self.config.as_deref())?;
        self.spec_with(profile, &settings)
    }

    /// [`Self::spec`] with the config's settings already read.
    fn spec_with(
        &self,
        profile: &Profile,
        settings: &crate::config::settings::Settings,
    ) -> Result<SandboxSpec, OpenError> {
        let mut spec =
            SandboxSpec::new(BackendKind::None, &self.root).map_err(OpenError::Executable)?;
        profile.sandbox.apply(&mut spec);
        match self.default_wall(profile) {
            Some(Ok(chosen)) => spec.backend = chosen.backend,
            Some(Err(none)) => return Err(none.into()),
            None => {}
        }
        if let Some(b) = self.backend {
            spec.backend = b;
        }
        if let Some(n) = self.network {
            spec.network = n;
        }
        if let Some(i) = &self.image {
            spec.docker.image = i.clone();
        }
        if let Some(r) = &self.runtime {
            spec.docker.runtime = vec![r.clone()];
        }
        if let Some(host) = &self.docker_host {
            spec.docker.host = Some(host.clone());
        }
        // Behind a wall, commands trust what the host trusts (a company's inspection CA)
        // and the authorities the user's config adds; with no wall they see the host as is.
        if spec.backend != BackendKind::None {
            // In a container, the engine mounts from its own host: the bundle goes beside
            // the server copy eval made where the engine sees it.
            let beside_server = self
                .server_exe
                .as_deref()
                .and_then(Path::parent)
                .filter(|_| runner_sandbox::spec::in_container());
            let bundle = match beside_server {
                Some(dir) => settings.ca_bundle_in(dir),
                None => settings.ca_bundle(),
            };
            spec.ca_bundle = bundle?;
        }
        if let Some(task) = &self.in_image {
            spec.backend = BackendKind::Docker;
            spec.network = task.network();
            spec.worktree = task.workdir().to_path_buf();
            spec.docker.over_task_image = true;
        }
        match &self.server_exe {
            Some(exe) => spec.server_exe = exe.clone(),
            None if spec.backend == BackendKind::Docker
                && !spec.docker.over_task_image
                && runner_sandbox::spec::in_container() =>
            {
                return Err(OpenError::Sandbox(format!(
                    "runner runs in a container ({} is set): the engine would mount {} and the worktree from its own host, not from here; in this image use `runner eval` (its out folder mounted at the same path), or run runner on the host",
                    runner_sandbox::spec::IN_CONTAINER_ENV,
                    spec.server_exe.display()
                )));
            }
            None => {}
        }
        Ok(spec)
    }

    /// Opens the session: rules, sandbox, gate, context. `session` carries the state that
    /// lives as long as the conversation (files read, locks).
    pub async fn open(&self, conversation: Conversation) -> Result<OpenSession, OpenError> {
        let truncator = self.truncator()?;
        let mut rules = self.rules(Some(truncator.dir()))?;
        // The rest of the config (model, providers, hooks, MCP servers), read once here for
        // everything that runs in the session; a broken file stops it before any sandbox.
        let (settings, notes) =
            crate::config::settings::Settings::load(&rules.root, self.config.as_deref())?;
        rules.notes.extend(notes);
        let mut spec = self.spec_with(&rules.profile, &settings)?;
        // The trail opens before anything runs, and never where the sandbox can write.
        let host_root = self.in_image.is_none().then_some(rules.root.as_path());
        let writable = crate::audit::writable_by(&spec, host_root);
        let audit = crate::audit::open(&self.audit, &settings, &writable)?;
        // Hosts read request by request, and secrets: the session's authority joins the
        // sandbox's trust bundle before the sandbox starts.
        let inspection = settings.network.inspection(&rules.rules, &mut spec)?;
        // A loopback address the user opened is the host's: its commands reach it through
        // the proxy, not on the sandbox's own loopback.
        spec.host_loopback = runner_network::outbound::host_loopback(&rules.rules);
        let mut workspace = self.workspace_for(&rules.profile, &mut spec)?;
        // Only a checkout the user runs git in needs repositories the sandbox makes
        // disarmed: a copy's `.git`s never reach it (`apply` leaves them out).
        spec.sweep_repositories = workspace.is_none() && !self.private_worktree;
        // The model is told where full outputs are saved; the sandbox must let it read them,
        // and only them: the session's own folder, never the folders of other sessions.
        spec.read_only.push(truncator.dir().to_path_buf());
        let mut sandbox = self.open_sandbox(&spec, &mut workspace, &audit).await?;
        rules.notes.extend(sandbox.notes.iter().cloned());
        // Commands see each secret's placeholder, never its value.
        if let Some(inspection) = &inspection {
            runner_network::settings::put_placeholders(&mut sandbox.env, inspection);
        }
        let audit = Arc::new(crate::audit::SessionAudit::started(
            audit,
            &spec,
            wall_line(&spec, None),
            None,
        ));
        if let Some(report) = &sandbox.self_test {
            crate::audit::self_test(audit.sink(), report);
        }
        let hooks = self.host_hooks(workspace.as_ref(), &rules.root, &settings);
        let asker = match &self.asker {
            Some(given) => given.0.clone(),
            None => asker(self.ask, &rules.profile),
        };
        let gate = RuleGate::new(sandbox.worktree(), rules.rules.clone(), asker.clone());
        let gate = crate::audit::SessionGate {
            inner: gate.with_audit(audit.sink().clone()),
            trail: audit.clone(),
        };
        let ctx = ToolContext::new(
            Arc::new(sandbox),
            Arc::new(conversation),
            Arc::new(gate),
            Arc::new(truncator),
        )
        .with_hooks(Arc::new(hooks));
        let ctx = with_services(ctx, &rules.rules, &settings)?;
        let policy = runner_network::Policy {
            gate: ctx.gate.clone(),
            rules: rules.rules.clone(),
            programs: settings.network.programs(),
            inspection,
        };
        let network = start_proxy(&ctx, policy, &spec).await?;
        crate::audit::observe(audit.sink(), network.as_deref());
        let ctx = ctx.with_network(network.clone());
        let chosen = self.default_wall(&rules.profile).and_then(Result::ok);
        Ok(OpenSession {
            wall: wall_line(&spec, chosen.as_ref()),
            ctx,
            profile: rules.profile,
            rules: rules.rules,
            notes: rules.notes,
            spec,
            asker,
            workspace,
            settings,
            network,
            audit,
        })
    }

    /// The sandbox `spec` asks for, or the task container's when the session runs in one.
    /// A copy nothing ran in is not worth a review: it is discarded when the wall does not
    /// start.
    async fn open_sandbox(
        &self,
        spec: &SandboxSpec,
        workspace: &mut Option<runner_workspace::Workspace>,
        audit: &runner_audit::Audit,
    ) -> Result<Sandbox, OpenError> {
        let opened = match &self.in_image {
            Some(task) => runner_sandbox::docker::open_over(task).await,
            None => runner_sandbox::open(spec).await,
        };
        opened.map_err(|e| {
            crate::audit::start_failed(audit, &e);
            if let Some(ws) = workspace.take() {
                let _ = ws.discard();
            }
            OpenError::SandboxStart {
                backend: spec.backend.name(),
                source: e,
            }
        })
    }

    /// The configured hooks, run where the agent's files are on the host: the checkout, or
    /// its copy.
    fn host_hooks(
        &self,
        workspace: Option<&runner_workspace::Workspace>,
        checkout: &Path,
        settings: &crate::config::settings::Settings,
    ) -> runner_tool::hooks::Hooks {
        let host_root = match (workspace, &self.in_image) {
            (Some(ws), _) => ws.work(),
            (None, None) => checkout.to_path_buf(),
            (None, Some(_)) => self.root.clone(),
        };
        runner_tool::hooks::Hooks {
            hooks: settings.hooks.clone(),
            host_root,
        }
    }

    /// Where the session's full tool outputs are saved, made ready.
    fn truncator(&self) -> Result<Truncator, OpenError> {
        let truncator = Truncator::for_session(
            self.output_dir
                .clone()
                .unwrap_or_else(Truncator::default_dir),
            self.outputs_of.as_deref(),
        );
        truncator.prepare().map_err(|source| OpenError::Outputs {
            dir: truncator.dir().to_path_buf(),
            source,
        })?;
        Ok(truncator)
    }

    /// A copy workspace when one is asked for: the sandbox works in a private copy, and the
    /// checkout is not touched until the changes are applied. A copy or an allow-list
    /// without a wall is refused: nothing would hold the agent to it.
    fn workspace_for(
        &self,
        profile: &Profile,
        spec: &mut SandboxSpec,
    ) -> Result<Option<runner_workspace::Workspace>, OpenError> {
        let mode = self
            .workspace
            .or(profile.sandbox.workspace)
            .unwrap_or_default();
        if spec.network == Network::Allowlist && spec.backend == BackendKind::None {
            return Err(OpenError::Usage(
                "--network allowlist needs a wall: with --sandbox none commands reach the network directly and the proxy would be only a suggestion. Use --sandbox landlock or docker".into(),
            ));
        }
        if mode == runner_workspace::Mode::Copy && spec.backend == BackendKind::None {
            return Err(OpenError::Usage(
                "--workspace copy needs a wall around the copy: with --sandbox none the agent's commands can still reach the checkout. Use --sandbox landlock or docker".into(),
            ));
        }
        if mode == runner_workspace::Mode::Direct && self.in_image.is_none() {
            self.check_git(mode)?;
        }
        if mode != runner_workspace::Mode::Copy || self.in_image.is_some() {
            return Ok(None);
        }
        let ws = runner_workspace::Workspace::create(&self.root, spec.limits.disk_bytes)?;
        spec.worktree = ws.work();
        Ok(Some(ws))
    }
}

impl SessionOptions {
    /// The direct workspace outside git stops here, before any sandbox or model: the run
    /// would change files that nothing records, so the person chooses how to go on.
    fn check_git(&self, mode: runner_workspace::Mode) -> Result<(), OpenError> {
        if !self.require_git_for_direct
            || self.private_worktree
            || runner_workspace::git::work_tree_of(&self.root).is_some()
        {
            return Ok(());
        }
        Err(OpenError::Usage(format!(
            "{} is not inside a git work tree, so the {} workspace would change its files with nothing to review or undo the changes by. Go on with one of: `--workspace copy` (the agent works on a copy; review it with `runner changes` and bring it over with `runner apply`), `git init` in that folder first, or `--no-git-check` to let the agent edit the files as they are",
            runner_display::escape(&absolute_root(&self.root).display().to_string()),
            mode.name()
        )))
    }
}

/// The allow-list's proxy, for a sandbox whose network is `allowlist`. It judges with the
/// same gate as every tool call, so an ask about a host reaches the same person (or
/// policy) as an ask about a command.
async fn start_proxy(
    ctx: &ToolContext,
    policy: runner_network::Policy,
    spec: &SandboxSpec,
) -> Result<Option<Arc<runner_network::NetworkProxy>>, OpenError> {
    if spec.network != Network::Allowlist {
        return Ok(None);
    }
    let proxy = runner_network::NetworkProxy::start(
        ctx.services.sandbox.client.clone(),
        policy,
        runner_network::NetworkLimits::of(&spec.limits),
    )
    .await
    .map_err(OpenError::Proxy)?;
    Ok(Some(Arc::new(proxy)))
}

/// The session's first line: the wall its tools run behind, and why when runner picked it.
/// Without a wall it is a warning.
pub fn wall_line(spec: &SandboxSpec, chosen: Option<&runner_sandbox::choose::Chosen>) -> String {
    let network = match spec.network {
        Network::None => "no network",
        Network::Allowlist => "network through the allow-list proxy",
        Network::Host => "the host's network",
    };
    let wall = match spec.backend {
        BackendKind::None => {
            return "warning: no sandbox (--sandbox none): the agent's commands run as you, with your files and network; only the permission rules stand in the way".into();
        }
        BackendKind::Landlock => format!("sandbox: landlock + seccomp, {network}"),
        BackendKind::Docker => format!("sandbox: docker ({}), {network}", spec.docker.image),
    };
    match chosen {
        Some(c) => format!("{wall} (the default here: {})", c.reason),
        None => wall,
    }
}

/// An open session: the context every tool call gets, and what it was built from.
pub struct OpenSession {
    /// What the first line of the session says: the wall in use ([`wall_line`]).
    pub wall: String,
    pub ctx: ToolContext,
    pub profile: Profile,
    /// The configured rules (the gate also holds approvals made since).
    pub rules: Vec<Rule>,
    pub notes: Vec<String>,
    pub spec: SandboxSpec,
    /// Who answers asks, for child sessions that need a gate of their own.
    pub asker: Arc<dyn Asker>,
    /// The private copy the sandbox works in (`--workspace copy`). The caller reports it
    /// once the sandbox is closed.
    pub workspace: Option<runner_workspace::Workspace>,
    /// The config's other keys (model, providers, retry, context), as every layer set them.
    pub settings: crate::config::settings::Settings,
    /// The proxy that is the sandbox's only way out (`--network allowlist`).
    pub network: Option<Arc<runner_network::NetworkProxy>>,
    /// The audit trail; the sandbox's end is recorded once every context of the session
    /// is gone.
    pub audit: Arc<crate::audit::SessionAudit>,
}

impl OpenSession {
    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.ctx.services.sandbox
    }
}

/// Who answers asks: `--ask`, else the profile's `ask`, else the terminal. Without a
/// terminal an ask is refused at once with a message that says how to allow it.
/// The services tools reach beyond the sandbox: the checked outbound client, MCP servers,
/// search and language servers, each from the session's rules and settings.
fn with_services(
    ctx: ToolContext,
    rules: &[Rule],
    settings: &crate::config::settings::Settings,
) -> Result<ToolContext, OpenError> {
    Ok(ctx
        .with_outbound(Arc::new(runner_network::outbound::Outbound::new(rules)))
        .with_mcp(Arc::new(runner_tool::mcp::McpServers::new(
            settings.mcp.clone(),
        )))
        .with_search(search_service(settings)?)
        .with_lsp(Arc::new(runner_tool::lsp_client::LspServers::new(
            &settings.lsp,
        ))))
}

pub fn asker(flag: Option<AskMode>, profile: &Profile) -> Arc<dyn Asker> {
    let (mode, from) = match (flag, profile.ask) {
        (Some(m), _) => (m, "--ask deny refuses every ask".to_string()),
        (None, Some(m)) => (m, format!("{} answers every ask with deny", profile.source)),
        (None, None) => (AskMode::Prompt, String::new()),
    };
    match mode {
        AskMode::Allow => Arc::new(PolicyAsker::allow()),
        AskMode::Deny => Arc::new(PolicyAsker::deny(from)),
        AskMode::Prompt if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() => {
            Arc::new(TerminalAsker::new())
        }
        AskMode::Prompt => Arc::new(PolicyAsker::deny(
            "there is no terminal to ask on and no --ask policy (the user can rerun with --ask allow, or add an allow rule to the config)",
        )),
    }
}

/// The worktree as the sandbox names it (absolute, normalised), so rules and asks agree on
/// spellings.
pub fn absolute_root(root: &Path) -> PathBuf {
    runner_sandbox::local::absolute(root).unwrap_or_else(|_| root.to_path_buf())
}

/// The search service the settings name (`[websearch]`), with the key from the host's
/// environment; `None` when there is none.
fn search_service(
    settings: &crate::config::settings::Settings,
) -> Result<Option<Arc<runner_tool::search::Search>>, OpenError> {
    settings
        .websearch
        .as_ref()
        .map(|s| runner_tool::search::Search::from_settings(s).map(Arc::new))
        .transpose()
        .map_err(OpenError::from)
}
