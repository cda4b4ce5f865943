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
//! - **Who answers an ask.** The client's user, through an MCP elicitation, when the client
//!   says it can take one; otherwise the `--ask` policy, which refuses by default, and the
//!   refusal says so and how to allow it ([`ClientAsker`]).
//! - **Long calls.** A call whose request carries a progress token gets a progress
//!   notification at most once a second while the tool reports output ([`progress_sink`]).
//!   A `notifications/cancelled` for a call cancels its context, which ends the command's
//!   process group inside the sandbox.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rmcp::ErrorData as McpError;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParam, CallToolResult, Content, CreateElicitationRequestParam,
    ElicitationAction, ElicitationSchema, Implementation, InitializeRequestParam, InitializeResult,
    ListToolsResult, PaginatedRequestParam, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerInfo, Tool,
};
use rmcp::service::{Peer, RequestContext, RoleServer, ServiceExt};
use runner_agent::session::{OpenError, OpenSession, SessionAsker, SessionOptions};
use runner_network::NetworkProxy;
use runner_permission::gate::{Ask, Asker, Reply, ReplyFuture, Unanswerable};
use runner_tool::registry::{CallResult, Outcome};
use runner_tool::{Conversation, Progress, Registry, ToolContext};
use runner_workspace::Workspace;
use serde_json::{Value, json};

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
pub struct Served {
    pub workspace: Option<Workspace>,
    pub network: Option<Arc<NetworkProxy>>,
}

/// Who answers when the client cannot: `--ask allow` approves each ask once; anything
/// else refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    Allow,
    Deny,
}

/// Serves runner's walled tools on `transport` (standard input and output for `runner mcp
/// serve`) until the client goes away. The sandbox opens before the first message is
/// read, so a broken config or a missing wall is reported once, where runner was started,
/// instead of as a failure of every call. When the client is gone the sandbox closes
/// (every process in it ends) before this returns.
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
    let mut open = options.open(Conversation::new(session_id())).await?;
    let workspace = open.workspace.take();
    let network = open.network.clone();
    let tools = WalledTools {
        open: Arc::new(open),
        registry: Registry::builtin(),
        asker,
    };
    let running = tools
        .serve(transport)
        .await
        .map_err(|e| ServeError::Protocol(e.to_string()))?;
    let ended = running.waiting().await;
    ended.map_err(|e| ServeError::Protocol(e.to_string()))?;
    Ok(Served { workspace, network })
}

/// An id for the session's records and saved outputs, unique enough per process.
fn session_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("mcp-{}-{nanos:08x}", std::process::id())
}

/// The server: one open session and the tools it offers.
struct WalledTools {
    open: Arc<OpenSession>,
    registry: Registry,
    asker: Arc<ClientAsker>,
}

impl WalledTools {
    fn ctx(&self) -> &ToolContext {
        &self.open.ctx
    }

    /// The offered tools the rules leave visible (a tool turned off by a `"*" = "deny"`
    /// rule is not offered at all).
    fn offered(&self) -> impl Iterator<Item = &Arc<dyn runner_tool::DynTool>> {
        self.registry
            .visible(self.ctx().gate.as_ref())
            .filter(|t| OFFERED.contains(&t.id()))
    }
}

impl ServerHandler for WalledTools {
    fn get_info(&self) -> ServerInfo {
        ServerInfo {
            capabilities: ServerCapabilities::builder().enable_tools().build(),
            server_info: Implementation {
                name: "runner".into(),
                title: Some("runner: tools behind a wall".into()),
                version: env!("CARGO_PKG_VERSION").into(),
                icons: None,
                website_url: None,
            },
            instructions: Some(INSTRUCTIONS.into()),
            ..ServerInfo::default()
        }
    }

    async fn initialize(
        &self,
        request: InitializeRequestParam,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        if context.peer.peer_info().is_none() {
            context.peer.set_peer_info(request);
        }
        self.asker.reach(context.peer.clone());
        Ok(self.get_info())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParam>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self
            .offered()
            .map(|t| {
                let schema = match t.parameters() {
                    Value::Object(o) => o,
                    _ => serde_json::Map::new(),
                };
                Tool::new(t.id(), t.description().to_string(), Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult {
            tools,
            next_cursor: None,
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParam,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let name = request.name.as_ref();
        if !self.offered().any(|t| t.id() == name) {
            return Err(McpError::invalid_params(
                format!(
                    "runner offers no tool {name:?} here; the tools are {}",
                    self.offered()
                        .map(|t| t.id())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None,
            ));
        }
        let mut ctx = self.ctx().clone();
        // rmcp cancels this token on the client's `notifications/cancelled` for the call.
        ctx.cancel = context.ct.clone();
        if let Some(token) = context.meta.get_progress_token() {
            ctx.progress = progress_sink(context.peer.clone(), token);
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        let result = self.registry.call(name, args, &ctx).await;
        Ok(to_mcp(result))
    }
}

/// A tool's result as the client reads it: the text the model would read, marked as an
/// error when the call failed, was refused or was cancelled.
fn to_mcp(result: CallResult) -> CallToolResult {
    let text = match &result.error {
        Some(error) => error.clone(),
        None => result.output.clone(),
    };
    let mut content = vec![Content::text(text)];
    for a in &result.attachments {
        content.push(Content::text(format!(
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
        let params = ProgressNotificationParam {
            progress_token: token.clone(),
            progress: started.elapsed().as_secs_f64(),
            total: None,
            message,
        };
        let peer = peer.clone();
        tokio::spawn(async move {
            let _ = peer.notify_progress(params).await;
        });
    })
}

/// Answers asks through the client: an MCP elicitation naming the tool, the permission and
/// what it would do, when the client can take one; otherwise the `--ask` fallback.
pub struct ClientAsker {
    peer: OnceLock<Peer<RoleServer>>,
    fallback: Fallback,
}

impl ClientAsker {
    fn new(fallback: Fallback) -> Self {
        ClientAsker {
            peer: OnceLock::new(),
            fallback,
        }
    }

    /// The client, once it has said hello (and what it can do).
    fn reach(&self, peer: Peer<RoleServer>) {
        let _ = self.peer.set(peer);
    }

    /// The peer when it declared it can answer elicitations.
    fn elicits(&self) -> Option<&Peer<RoleServer>> {
        self.peer.get().filter(|p| {
            p.peer_info()
                .is_some_and(|i| i.capabilities.elicitation.is_some())
        })
    }
}

impl Asker for ClientAsker {
    fn ask<'a>(&'a self, ask: &'a Ask) -> ReplyFuture<'a> {
        Box::pin(async move {
            match self.elicits() {
                Some(peer) => elicit(peer, ask).await,
                None => self.fall_back(),
            }
        })
    }
}

impl ClientAsker {
    fn fall_back(&self) -> Result<Reply, Unanswerable> {
        match self.fallback {
            Fallback::Allow => Ok(Reply::Once),
            Fallback::Deny => Err(Unanswerable(
                "the rules ask before this, and the MCP client cannot be asked (it does not take elicitations), so runner mcp serve refuses it (--ask deny, the default). The user can allow it with a rule in their runner config, or start the server with --ask allow".into(),
            )),
        }
    }
}

/// One ask as an elicitation: accept with `once` or `always`, or decline.
async fn elicit(peer: &Peer<RoleServer>, ask: &Ask) -> Result<Reply, Unanswerable> {
    let request = &ask.request;
    let tool = request.tool.as_deref().unwrap_or(&request.permission);
    let message = format!(
        "runner: allow {tool} to {} {}?",
        request.permission,
        request.patterns.join(", ")
    );
    let schema = json!({
        "type": "object",
        "properties": {
            "answer": {
                "type": "string",
                "title": "Answer",
                "description": "once: allow this call; always: allow calls like it for this session; reject: refuse it",
                "enum": ["once", "always", "reject"]
            }
        },
        "required": ["answer"]
    });
    let Value::Object(schema) = schema else {
        unreachable!("a JSON object literal")
    };
    let requested_schema = ElicitationSchema::from_json_schema(schema)
        .map_err(|e| Unanswerable(format!("runner could not build its question: {e}")))?;
    let answer = peer
        .create_elicitation(CreateElicitationRequestParam {
            message,
            requested_schema,
        })
        .await
        .map_err(|e| Unanswerable(format!("the MCP client did not answer the ask: {e}")))?;
    let chosen = answer
        .content
        .as_ref()
        .and_then(|c| c.get("answer"))
        .and_then(Value::as_str);
    Ok(match (answer.action, chosen) {
        (ElicitationAction::Accept, Some("always")) => Reply::Always,
        (ElicitationAction::Accept, Some("once")) => Reply::Once,
        (ElicitationAction::Accept, _) => Reply::Reject { feedback: None },
        (ElicitationAction::Decline | ElicitationAction::Cancel, _) => Reply::Reject {
            feedback: Some("the user declined it in the MCP client".into()),
        },
    })
}
