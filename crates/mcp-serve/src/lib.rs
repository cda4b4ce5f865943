//! `runner mcp serve`: runner's walled tools offered to another agent over MCP.
//!
//! People already live in other agents (Claude Code, Codex, OpenCode) whose shells run on
//! the host or behind a thinner wall. Here their loop stays where it is and only their
//! hands change: the shell and file tools they call are runner's, running in one runner
//! sandbox that lives as long as the MCP session, each call judged by the same permission
//! gate as a `runner run` call, with the same registry, truncation and wall.
//!
//! What crosses the MCP boundary is decided here:
//! - **Which tools.** [`OFFERED`]: the shell and file tools. runner's agent-level tools
//!   (`task`, plan mode, `question`, `todowrite`) belong to runner's own loop; the client
//!   has its own.
//! - **Which revision.** The newest MCP revision both sides speak, 2024-11-05 to
//!   2025-11-25; a method runner does not know (`server/discover` among them) is "Method
//!   not found" and the session goes on ([`handshake`]).
//! - **Who answers an ask.** The client's user, through an MCP elicitation, when the
//!   revision and the client both have it; otherwise the `--ask` policy, which refuses by
//!   default, and the refusal says why and how to allow it ([`ask`]).
//! - **Long calls.** A call whose request carries a progress token gets a progress
//!   notification at most once a second while the tool reports output ([`progress_sink`]).
//!   A `notifications/cancelled` for a call cancels its context, which ends the command's
//!   process group inside the sandbox.

pub mod ask;
pub mod handshake;

use std::borrow::Cow;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rmcp::ErrorData as McpError;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
    CustomResult, Implementation, InitializeRequestParams, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext, RoleServer, ServiceExt};
use runner_agent::session::{OpenError, OpenSession, SessionAsker, SessionOptions};
use runner_network::NetworkProxy;
use runner_tool::registry::{CallResult, Outcome};
use runner_tool::{Conversation, Progress, Registry, ToolContext};
use runner_workspace::Workspace;
use serde_json::Value;

pub use ask::{ClientAsker, Fallback};
use handshake::Handshake;

/// The tools a client is offered: the ones that act on the worktree and run commands.
pub const OFFERED: [&str; 9] = [
    "bash",
    "read",
    "write",
    "edit",
    "multiedit",
    "apply_patch",
    "glob",
    "grep",
    "list",
];

/// What the server tells a client about itself when the session starts.
const INSTRUCTIONS: &str = "These tools run inside runner's sandbox, which sees only the worktree it was started for: commands cannot read or write files outside it, and reach the network only as runner's rules allow. Each call is checked against the user's permission rules; a refused call says which rule refused it and what to do instead. Paths are relative to the worktree or absolute inside it.";

/// How often a long call's progress reaches the client, at most.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Why serving stopped before or instead of a clean end.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The session could not open (bad root, broken config, no wall).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The MCP conversation could not start or broke off.
    #[error("the MCP session failed: {0}")]
    Protocol(String),
}

/// How `serve` ends, for the caller to report once the sandbox is closed: the session's
/// copy workspace (kept for `runner changes` and `runner apply`) and its network proxy.
#[derive(Default)]
pub struct Served {
    pub workspace: Option<Workspace>,
    pub network: Option<Arc<NetworkProxy>>,
}

/// Serves runner's walled tools on `transport` (standard input and output for `runner mcp
/// serve`) until the client goes away. The sandbox opens when the client's `initialize`
/// arrives, so that the session's audit trail names the client from its first record; a
/// broken config or a missing wall fails that `initialize` with the reason and ends the
/// server with it (once, instead of as a failure of every call). When the client is gone
/// the sandbox closes (every process in it ends) before this returns.
pub async fn serve<T, E, A>(
    mut options: SessionOptions,
    fallback: Fallback,
    transport: T,
) -> Result<Served, ServeError>
where
    T: rmcp::transport::IntoTransport<RoleServer, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let asker = Arc::new(ClientAsker::new(fallback));
    options.asker = Some(SessionAsker(asker.clone()));
    let opening = Arc::new(Opening::default());
    *lock(&opening.options) = Some(options);
    let tools = WalledTools {
        opening: opening.clone(),
        open: OnceLock::new(),
        registry: Registry::builtin(),
        asker,
    };
    let started = Handshake(tools).serve(transport).await;
    let ended = match started {
        Ok(running) => running.waiting().await.map(drop).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    // The server (and with it the session) is gone: what it left is here alone.
    if let Some(failed) = lock(&opening.failed).take() {
        return Err(ServeError::Open(failed));
    }
    ended.map_err(ServeError::Protocol)?;
    let mut served = lock(&opening.served);
    Ok(Served {
        workspace: served.workspace.take(),
        network: served.network.take(),
    })
}

/// What the session's opening takes and leaves, shared by [`serve`] and the server.
#[derive(Default)]
struct Opening {
    /// The session's options until the client's `initialize` opens it.
    options: Mutex<Option<SessionOptions>>,
    /// Why it could not open.
    failed: Mutex<Option<OpenError>>,
    /// The copy workspace and the network proxy, for the caller's report at the end.
    served: Mutex<Served>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An id for the session's records and saved outputs, unique enough per process.
fn session_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("mcp-{}-{nanos:08x}", std::process::id())
}

/// The server: one session, opened by the client's `initialize`, and the tools it offers.
struct WalledTools {
    opening: Arc<Opening>,
    open: OnceLock<OpenSession>,
    registry: Registry,
    asker: Arc<ClientAsker>,
}

impl WalledTools {
    /// Opens the session for the client `client` names itself as (on the audit trail's
    /// start record). An error is kept for [`serve`] to end with, and told to the client.
    async fn open(&self, client: &Implementation) -> Result<(), McpError> {
        let Some(mut options) = lock(&self.opening.options).take() else {
            return Err(McpError::invalid_request(
                "the session is already initialized",
                None,
            ));
        };
        options.audit.client = Some(runner_audit::Client {
            name: client.name.clone(),
            version: Some(client.version.clone()).filter(|v| !v.is_empty()),
        });
        match options.open(Conversation::new(session_id())).await {
            Ok(mut open) => {
                let mut served = lock(&self.opening.served);
                served.workspace = open.workspace.take();
                served.network = open.network.clone();
                let _ = self.open.set(open);
                Ok(())
            }
            Err(e) => {
                let told = McpError::internal_error(
                    format!("runner could not open its sandbox: {e}"),
                    None,
                );
                *lock(&self.opening.failed) = Some(e);
                Err(told)
            }
        }
    }

    /// The open session's tool context, once `initialize` has opened it.
    fn ctx(&self) -> Result<&ToolContext, McpError> {
        self.open.get().map(|o| &o.ctx).ok_or_else(|| {
            McpError::invalid_request(
                "no session is open: the client must send initialize first",
                None,
            )
        })
    }

    /// The offered tools the rules leave visible (a tool turned off by a `"*" = "deny"`
    /// rule is not offered at all).
    fn offered<'a>(
        &'a self,
        ctx: &'a ToolContext,
    ) -> impl Iterator<Item = &'a Arc<dyn runner_tool::DynTool>> {
        self.registry
            .visible(ctx.gate.as_ref())
            .filter(|t| OFFERED.contains(&t.id()))
    }
}

impl ServerHandler for WalledTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("runner", env!("CARGO_PKG_VERSION"))
                    .with_title("runner: tools behind a wall"),
            )
            .with_instructions(INSTRUCTIONS)
            .with_protocol_version(handshake::NEWEST)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        handshake::supported()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let result = self.negotiate_initialize(&request)?;
        self.open(&request.client_info).await?;
        self.asker.reach(context.peer.clone());
        Ok(result)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        Err(handshake::not_found(
            &request.method,
            "runner mcp serve offers tools only: tools/list and tools/call",
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self
            .offered(self.ctx()?)
            .map(|t| {
                let schema = match t.parameters() {
                    Value::Object(o) => o,
                    _ => serde_json::Map::new(),
                };
                Tool::new(t.id(), t.description().to_string(), Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.as_ref();
        let open = self.ctx()?;
        if !self.offered(open).any(|t| t.id() == name) {
            return Err(McpError::invalid_params(
                format!(
                    "runner offers no tool {name:?} here; the tools are {}",
                    self.offered(open)
                        .map(|t| t.id())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None,
            ));
        }
        let mut ctx = open.clone();
        // rmcp cancels this token on the client's `notifications/cancelled` for the call.
        ctx.cancel = context.ct.clone();
        if let Some(token) = context.meta.get_progress_token() {
            ctx.progress = progress_sink(context.peer.clone(), token);
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        let result = self.registry.call(name, args, &ctx).await;
        Ok(to_mcp(result).into())
    }
}

/// A tool's result as the client reads it: the text the model would read, marked as an
/// error when the call failed, was refused or was cancelled.
fn to_mcp(result: CallResult) -> CallToolResult {
    let text = match &result.error {
        Some(error) => error.clone(),
        None => result.output.clone(),
    };
    let mut content = vec![ContentBlock::text(text)];
    for a in &result.attachments {
        content.push(ContentBlock::text(format!(
            "[attachment {} {} ({} bytes as a data URL)]",
            a.filename,
            a.mime,
            a.url.len()
        )));
    }
    if result.outcome == Outcome::Ok {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    }
}

/// Progress for a call whose client asked for it: the tool's latest output line, at most
/// once every [`PROGRESS_EVERY`], with the seconds it has run as the progress value (it
/// only grows, as MCP wants).
fn progress_sink(peer: Peer<RoleServer>, token: ProgressToken) -> runner_tool::ProgressSink {
    let started = Instant::now();
    let last = Mutex::new(None::<Instant>);
    Arc::new(move |progress: Progress| {
        let now = Instant::now();
        {
            let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|at| now.duration_since(at) < PROGRESS_EVERY) {
                return;
            }
            *last = Some(now);
        }
        let message = progress
            .metadata
            .get("output")
            .and_then(Value::as_str)
            .and_then(|o| o.lines().rev().find(|l| !l.trim().is_empty()))
            .map(str::to_string);
        let mut params =
            ProgressNotificationParam::new(token.clone(), started.elapsed().as_secs_f64());
        params.message = message;
        let peer = peer.clone();
        tokio::spawn(async move {
            let _ = peer.notify_progress(params).await;
        });
    })
}
