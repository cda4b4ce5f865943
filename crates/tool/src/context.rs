//! What a tool call runs with: the session's shared services (the sandbox, hooks, MCP, the
//! ways out), the calling agent's conversation and gate, and the call's own progress and
//! cancellation.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::ToolError;
use super::filetime::FileTimes;
use super::question::UserChannel;
use super::registry::Registry;
use super::todo::Todo;
use super::truncate::Truncator;
use runner_permission::{PermissionGate, PermissionRequest};
use runner_protocol::{ErrorKind, FileKind, FileStamp, Stat, WritePrecondition};
use runner_sandbox::{Sandbox, SandboxError};
use runner_sandbox_server::roots::normalize;

/// State that lives as long as a conversation: which files were read (and in which
/// version), and a lock per file so that concurrent edits of one file are serialised.
pub struct Conversation {
    pub id: String,
    pub file_times: FileTimes,
    locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    /// The last calls, for the doom-loop guard.
    recent_calls: Mutex<Vec<(String, Value)>>,
    /// The model's plan, as `todowrite` last set it.
    todos: Mutex<Vec<Todo>>,
    /// Instruction files already shown to the model (see [`super::instructions`]).
    instructions: Mutex<std::collections::HashSet<PathBuf>>,
}

impl Conversation {
    /// A conversation in which a file must be read before it is overwritten.
    pub fn new(id: impl Into<String>) -> Self {
        Conversation {
            id: id.into(),
            file_times: FileTimes::new(false),
            locks: Mutex::new(HashMap::new()),
            recent_calls: Mutex::new(Vec::new()),
            todos: Mutex::new(Vec::new()),
            instructions: Mutex::new(Default::default()),
        }
    }

    /// A one-call conversation: every file counts as read at its start, since there was no
    /// earlier call in which to read it.
    pub fn single_call(id: impl Into<String>) -> Self {
        Conversation {
            file_times: FileTimes::new(true),
            ..Conversation::new(id)
        }
    }

    /// Records a call; true when it is the third identical one in a row (OpenCode's
    /// `DOOM_LOOP_THRESHOLD`), which is when a model repeating itself should be asked about.
    pub fn record_call(&self, tool: &str, args: &Value) -> bool {
        const THRESHOLD: usize = 3;
        let mut recent = self.recent_calls.lock().unwrap_or_else(|p| p.into_inner());
        recent.push((tool.to_string(), args.clone()));
        if recent.len() > THRESHOLD {
            recent.remove(0);
        }
        recent.len() == THRESHOLD && recent.iter().all(|(t, a)| t == tool && a == args)
    }

    /// The current todo list.
    pub fn todos(&self) -> Vec<Todo> {
        self.todos.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the todo list (`todowrite` always sends the whole list).
    pub fn set_todos(&self, todos: Vec<Todo>) {
        *self.todos.lock().unwrap_or_else(|p| p.into_inner()) = todos;
    }

    /// Records that the model has seen the instruction file `path`; false when it already
    /// had.
    pub fn first_sight_of_instructions(&self, path: &Path) -> bool {
        self.instructions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path.to_path_buf())
    }

    /// Holds the per-file lock for the duration of a read-modify-write.
    pub async fn lock_file(&self, path: &Path) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self
            .locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(path.to_path_buf())
            .or_default()
            .clone();
        lock.lock_owned().await
    }
}

/// Live progress of a running call (bash streams its output through this).
#[derive(Debug, Clone)]
pub struct Progress {
    pub tool: &'static str,
    pub metadata: Map<String, Value>,
}

pub type ProgressSink = Arc<dyn Fn(Progress) + Send + Sync>;

/// What every call of a session shares: the wall, how long output may be, who answers
/// questions, and the session's hooks, MCP servers and ways out. Built once as the session
/// opens; every context (each call, each subagent) holds the same one.
#[derive(Clone)]
pub struct Services {
    pub sandbox: Arc<Sandbox>,
    pub truncator: Arc<Truncator>,
    /// The worktree with its own symlinks resolved, found once: resolved paths are compared
    /// against it (a worktree under `/tmp -> /private/tmp` still contains its files).
    pub real_worktree: PathBuf,
    /// Who answers the `question` tool; `None` when nobody is there (the tool then tells
    /// the model to decide for itself).
    pub user: Option<Arc<dyn UserChannel>>,
    /// The session's hooks (run around every call the registry makes).
    pub hooks: Option<Arc<super::hooks::Hooks>>,
    /// The session's MCP servers, started on first use.
    pub mcp: Option<Arc<super::mcp::McpServers>>,
    /// The proxy that is the sandbox's way out (`--network allowlist`); it lives as long
    /// as a context of the session does, and its records are the session's connections.
    pub network: Option<Arc<runner_network::NetworkProxy>>,
    /// What requests made from the host for the agent (`webfetch`, remote MCP servers) may
    /// reach, and the client that keeps to it. Without a session's rules, no private
    /// address at all.
    pub outbound: Arc<runner_network::outbound::Outbound>,
    /// The search service `websearch` and `codesearch` use; `None`: not configured, and
    /// the two tools are not offered.
    pub search: Option<Arc<super::search::Search>>,
    /// The session's language servers (`lsp`), started inside the sandbox on first use.
    pub lsp: Option<Arc<super::lsp_client::LspServers>>,
}

/// What one tool call runs with: the session's [`Services`], what belongs to the agent
/// making the call (its conversation, its gate, the registry it offers), and what belongs
/// to the call alone (progress, cancellation, which tool asks).
#[derive(Clone)]
pub struct ToolContext {
    pub services: Arc<Services>,
    pub conversation: Arc<Conversation>,
    /// The agent's gate (a subagent's observes its parent's).
    pub gate: Arc<dyn PermissionGate>,
    /// The registry `batch` runs its calls through. The agent sets it to the registry it
    /// offers the model; without one, `batch` uses [`Registry::builtin`].
    pub registry: Option<Arc<Registry>>,
    pub progress: ProgressSink,
    pub cancel: CancellationToken,
    /// The tool this context is running, for the person an ask reaches.
    pub tool: Option<&'static str>,
}

impl ToolContext {
    pub fn new(
        sandbox: Arc<Sandbox>,
        conversation: Arc<Conversation>,
        gate: Arc<dyn PermissionGate>,
        truncator: Arc<Truncator>,
    ) -> Self {
        let real_worktree = runner_permission::paths::resolve_existing(sandbox.worktree());
        ToolContext {
            services: Arc::new(Services {
                sandbox,
                truncator,
                real_worktree,
                user: None,
                hooks: None,
                mcp: None,
                network: None,
                outbound: Arc::new(runner_network::outbound::Outbound::new(&[])),
                search: None,
                lsp: None,
            }),
            conversation,
            gate,
            registry: None,
            progress: Arc::new(|_| {}),
            cancel: CancellationToken::new(),
            tool: None,
        }
    }

    /// The services to change while the session is being put together (a copy when
    /// another context already shares them, so contexts made earlier keep theirs).
    pub fn services_mut(&mut self) -> &mut Services {
        Arc::make_mut(&mut self.services)
    }

    /// This context with the policy of its session's host-side requests.
    pub fn with_outbound(mut self, outbound: Arc<runner_network::outbound::Outbound>) -> Self {
        self.services_mut().outbound = outbound;
        self
    }

    /// This context with a search service, which offers `websearch` and `codesearch`.
    pub fn with_search(mut self, search: Option<Arc<super::search::Search>>) -> Self {
        self.services_mut().search = search;
        self
    }

    /// This context with language servers, which offer `lsp` where one can run.
    pub fn with_lsp(mut self, lsp: Arc<super::lsp_client::LspServers>) -> Self {
        self.services_mut().lsp = Some(lsp);
        self
    }

    /// This context with the sandbox's network proxy.
    pub fn with_network(mut self, network: Option<Arc<runner_network::NetworkProxy>>) -> Self {
        self.services_mut().network = network;
        self
    }

    /// This context with MCP servers whose tools join the built-ins.
    pub fn with_mcp(mut self, mcp: Arc<super::mcp::McpServers>) -> Self {
        self.services_mut().mcp = (!mcp.is_empty()).then_some(mcp);
        self
    }

    /// This context with hooks around its calls.
    pub fn with_hooks(mut self, hooks: Arc<super::hooks::Hooks>) -> Self {
        self.services_mut().hooks = (!hooks.is_empty()).then_some(hooks);
        self
    }

    /// This context with someone to answer the `question` tool.
    pub fn with_user(mut self, user: Arc<dyn UserChannel>) -> Self {
        self.services_mut().user = Some(user);
        self
    }

    /// This context with the registry `batch` dispatches through.
    pub fn with_registry(mut self, registry: Arc<Registry>) -> Self {
        self.registry = Some(registry);
        self
    }

    /// This context for one call of `tool`, so that its asks say who is asking.
    pub fn for_tool(&self, tool: &'static str) -> ToolContext {
        ToolContext {
            tool: Some(tool),
            ..self.clone()
        }
    }

    /// The sandbox the session's calls run in.
    pub fn sandbox(&self) -> &Sandbox {
        &self.services.sandbox
    }

    pub fn worktree(&self) -> &Path {
        self.services.sandbox.worktree()
    }

    /// The file's stat, or `None` when nothing exists at the path.
    pub async fn stat_if_exists(&self, path: &Path) -> Result<Option<Stat>, SandboxError> {
        match self.services.sandbox.client.stat(path).await {
            Ok(stat) => Ok(Some(stat)),
            Err(SandboxError::Api(e)) if e.kind == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The version of a file about to be overwritten (`None` if there is none yet). A
    /// directory is refused, and so is a file the model has not read in this version: that
    /// is what keeps write and edit from destroying changes the model never saw.
    pub async fn stat_for_overwrite(&self, path: &Path) -> Result<Option<Stat>, ToolError> {
        let Some(stat) = self.stat_if_exists(path).await? else {
            return Ok(None);
        };
        if stat.kind == FileKind::Dir {
            return Err(ToolError::Failed(format!(
                "Path is a directory, not a file: {}",
                path.display()
            )));
        }
        self.conversation.file_times.check(path, stat.stamp)?;
        Ok(Some(stat))
    }

    /// Writes over exactly the version `precondition` names; a file that changed in between
    /// (another process, a formatter) is refused with a message telling the model to re-read.
    pub async fn write_checked(
        &self,
        path: &Path,
        bytes: Vec<u8>,
        precondition: WritePrecondition,
    ) -> Result<FileStamp, ToolError> {
        match self
            .services
            .sandbox
            .client
            .write(path, bytes, Some(precondition))
            .await
        {
            Ok(written) => {
                self.conversation.file_times.record(path, written.stamp);
                Ok(written.stamp)
            }
            Err(SandboxError::Api(api))
                if matches!(api.kind, ErrorKind::Stale | ErrorKind::AlreadyExists) =>
            {
                Err(ToolError::Failed(format!(
                    "File {} changed while this call was running. Read it again, then retry.",
                    path.display()
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    pub async fn ask(&self, mut request: PermissionRequest) -> Result<(), ToolError> {
        if request.tool.is_none() {
            request.tool = self.tool.map(str::to_string);
        }
        Ok(self.gate.ask(&request).await?)
    }

    /// A path from the model, made absolute against the worktree and normalised.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        let joined = self.worktree().join(path);
        normalize(&joined)
            .ok_or_else(|| ToolError::Failed(format!("{path} climbs above the file system root")))
    }

    /// The worktree-relative form with forward slashes, as permission patterns and titles
    /// use it; paths outside the worktree stay absolute.
    pub fn relative(&self, path: &Path) -> String {
        match path.strip_prefix(self.worktree()) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.to_string_lossy().replace('\\', "/"),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }

    pub fn is_inside_worktree(&self, path: &Path) -> bool {
        path.starts_with(self.worktree())
    }

    /// Asks each request in order; the first refusal ends the call.
    pub async fn ask_all(&self, requests: Vec<PermissionRequest>) -> Result<(), ToolError> {
        for request in requests {
            self.ask(request).await?;
        }
        Ok(())
    }

    /// What a file tool asks for one path, resolving it once: `external_directory` for its
    /// directory when it is outside the worktree (see [`Self::external_request`]), then
    /// `permission` for the worktree-relative path and, when a symlink redirects it, for where
    /// it really leads (a committed `notes -> .env` must still ask like `.env`).
    pub fn file_asks(&self, path: &Path, is_dir: bool, permission: &str) -> Vec<PermissionRequest> {
        let real = runner_permission::paths::resolve_existing(path);
        let external = self.external_for(path, &real, is_dir);
        self.asks_for(path, &real, external, permission)
    }

    /// [`Self::file_asks`] when they are the same whatever `path` is: it, and where its
    /// links lead, stay in the worktree, so there is no `external_directory` ask (the only
    /// one that names a directory differently from a file). `None` when there would be one:
    /// then the caller must find out whether it is a directory first.
    pub fn file_asks_inside(
        &self,
        path: &Path,
        permission: &str,
    ) -> Option<Vec<PermissionRequest>> {
        let real = runner_permission::paths::resolve_existing(path);
        if self.external_for(path, &real, false).is_some() {
            return None;
        }
        Some(self.asks_for(path, &real, None, permission))
    }

    /// `external` (if any), then `permission` for `path` and for `real` where it differs.
    fn asks_for(
        &self,
        path: &Path,
        real: &Path,
        external: Option<PermissionRequest>,
        permission: &str,
    ) -> Vec<PermissionRequest> {
        let mut asks: Vec<PermissionRequest> = external.into_iter().collect();
        let mut subjects = vec![self.relative(path)];
        if real != path {
            let real = self.relative(real);
            if !subjects.contains(&real) {
                subjects.push(real);
            }
        }
        asks.push(PermissionRequest::new(
            permission,
            subjects,
            vec!["*".into()],
        ));
        asks
    }

    /// OpenCode's `assertExternalDirectory`, made to see through symlinks: a path outside
    /// the worktree, lexically or once the links that exist are followed, needs an
    /// `external_directory` ask for its directory (the path itself when it is one). OpenCode
    /// checks only lexically, so `link/secret` with `link -> /etc` looked inside.
    pub fn external_request(&self, path: &Path, is_dir: bool) -> Option<PermissionRequest> {
        self.external_for(
            path,
            &runner_permission::paths::resolve_existing(path),
            is_dir,
        )
    }

    /// [`Self::external_request`] for a path already resolved to `real`.
    fn external_for(&self, path: &Path, real: &Path, is_dir: bool) -> Option<PermissionRequest> {
        let outside = if !self.is_inside_worktree(path) {
            path
        } else if real.starts_with(self.worktree())
            || real.starts_with(self.services.real_worktree.as_path())
        {
            return None;
        } else {
            real
        };
        let dir = if is_dir {
            outside
        } else {
            outside.parent().unwrap_or(outside)
        };
        let pattern = runner_permission::paths::dir_pattern(dir);
        Some(
            PermissionRequest::new("external_directory", vec![pattern.clone()], vec![pattern])
                .with_metadata(serde_json::json!({
                    "filepath": path,
                    "parentDir": dir,
                })),
        )
    }
}
