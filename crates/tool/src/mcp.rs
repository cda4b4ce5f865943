//! MCP servers as tools, with the official SDK (`rmcp`) on our side of the wire.
//!
//! `[mcp.NAME]` in a config file: `command` and `args` (and `env`, added to the sandbox's
//! own environment), `enabled`, `timeout` (seconds a call may take, default 60). A stdio
//! server is a program like any the agent runs, often from the repository or a package
//! nobody reviewed, so it starts **inside the sandbox**, as an interactive command of the
//! sandbox server whose standard input and output carry the protocol: it sees what the
//! sandbox sees and nothing else. Its tools are offered as `NAME_tool`, with the server's
//! description and schema; the permission key is that name, so `"NAME_*" = "deny"` works.
//!
//! A server that fails to start, crashes mid-call or stops answering fails that call with a
//! message saying so; the next call starts it again, at most [`MAX_RESTARTS`] times. Its
//! processes die with the sandbox.
//!
//! OpenCode's `mcp` section (`{"type": "local", "command": [...], "environment": {...}}`)
//! is read as it is. A server with a `url` (OpenCode's `"type": "remote"`) is reached over
//! streamable HTTP from the host, with its `headers`, behind the `webfetch` rules and the
//! host's address rules ([`runner_network::outbound`]: no loopback, private or metadata
//! address unless the user's own config names it). A repository's `.runner/config.toml`
//! cannot add one without the user's approval: connecting is something this machine does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::service::{RoleClient, RunningService};
use serde::Deserialize;
use serde_json::Value;

use super::server_error::ServerError;
use super::{
    Attachment, DynTool, PermissionsFuture, ToolContext, ToolError, ToolFuture, ToolOutput,
};
use runner_permission::PermissionRequest;

/// Starts of one server after the first, per session.
pub const MAX_RESTARTS: u32 = 3;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server may take to start and answer `initialize`.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// `[mcp.NAME]` as a config file writes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSpec {
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub enabled: Option<bool>,
    pub timeout: Option<f64>,
    /// The file that configured it (set by the loader, never read from a file).
    #[serde(skip)]
    pub source: Option<std::path::PathBuf>,
    /// Whether that file is a repository's `.runner/config.toml`: its remote server is
    /// connected to only once the user approves (see [`Server::connect_remote`]).
    #[serde(skip)]
    pub from_project: bool,
}

type Client = RunningService<RoleClient, ()>;

/// OpenCode's `mcp` object: `{NAME: {"type": "local", "command": [PROGRAM, ARGS…],
/// "environment": {…}, "enabled": bool, "timeout": ms} | {"type": "remote", "url": …,
/// "headers": {…}}}`.
pub fn from_opencode(servers: &Value) -> Result<BTreeMap<String, McpSpec>, ServerError> {
    let Some(servers) = servers.as_object() else {
        return Err(ServerError::Config(
            "mcp must be an object of servers".into(),
        ));
    };
    let mut out = BTreeMap::new();
    for (name, s) in servers {
        let strings = |key: &str| -> BTreeMap<String, String> {
            s.get(key)
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut words = s
            .get("command")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
            .into_iter();
        let spec =
            match s.get("type").and_then(Value::as_str) {
                Some("remote") => McpSpec {
                    command: None,
                    args: Vec::new(),
                    env: BTreeMap::new(),
                    url: s.get("url").and_then(Value::as_str).map(str::to_string),
                    headers: strings("headers"),
                    enabled: s.get("enabled").and_then(Value::as_bool),
                    timeout: s
                        .get("timeout")
                        .and_then(Value::as_f64)
                        .map(|ms| ms / 1000.0),
                    source: None,
                    from_project: false,
                },
                _ => McpSpec {
                    command: Some(words.next().ok_or_else(|| {
                        ServerError::Config(format!("mcp.{name}: command is empty"))
                    })?),
                    args: words.collect(),
                    env: strings("environment"),
                    url: None,
                    headers: BTreeMap::new(),
                    enabled: s.get("enabled").and_then(Value::as_bool),
                    timeout: s
                        .get("timeout")
                        .and_then(Value::as_f64)
                        .map(|ms| ms / 1000.0),
                    source: None,
                    from_project: false,
                },
            };
        out.insert(name.clone(), spec);
    }
    Ok(out)
}

/// One configured server and its connection, started on first use.
pub struct Server {
    pub name: String,
    spec: McpSpec,
    conn: tokio::sync::Mutex<Option<Arc<Client>>>,
    starts: AtomicU32,
    /// What the server's latest process last wrote to stderr, to explain a failure.
    stderr: std::sync::Mutex<Arc<std::sync::Mutex<String>>>,
    /// Set when runner cut the latest process off for a line over the limit.
    cut: std::sync::Mutex<runner_framing::Tripwire>,
}

/// A session's MCP servers.
#[derive(Default)]
pub struct McpServers {
    pub servers: Vec<Arc<Server>>,
}

/// One server's state, for `runner mcp list`.
#[derive(Debug, serde::Serialize)]
pub struct ServerState {
    pub name: String,
    pub state: String,
    pub tools: Vec<String>,
}

impl McpServers {
    pub fn new(specs: BTreeMap<String, McpSpec>) -> McpServers {
        McpServers {
            servers: specs
                .into_iter()
                .filter(|(_, s)| s.enabled != Some(false))
                .map(|(name, spec)| {
                    Arc::new(Server {
                        name,
                        spec,
                        conn: tokio::sync::Mutex::new(None),
                        starts: AtomicU32::new(0),
                        stderr: Default::default(),
                        cut: Default::default(),
                    })
                })
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The server configured under `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Server>> {
        self.servers.iter().find(|s| s.name == name)
    }

    /// The configured servers' names.
    pub fn names(&self) -> Vec<&str> {
        self.servers.iter().map(|s| s.name.as_str()).collect()
    }

    /// Every server's tools, starting the servers; a server that cannot start is a note.
    pub async fn tools(&self, ctx: &ToolContext) -> (Vec<McpTool>, Vec<ServerState>) {
        let mut tools = Vec::new();
        let mut states = Vec::new();
        for server in &self.servers {
            match tools_of(server, ctx).await {
                Ok(list) => {
                    states.push(ServerState {
                        name: server.name.clone(),
                        state: "running".into(),
                        tools: list.iter().map(|t| t.tool.clone()).collect(),
                    });
                    tools.extend(list);
                }
                Err(e) => states.push(ServerState {
                    name: server.name.clone(),
                    state: format!("failed: {e}"),
                    tools: Vec::new(),
                }),
            }
        }
        (tools, states)
    }
}

/// Why `runner mcp call SERVER TOOL` cannot reach the tool it names.
#[derive(Debug, thiserror::Error)]
pub enum McpCallError {
    #[error("no MCP server {name} is configured{}", listed(configured))]
    NoServer {
        name: String,
        configured: Vec<String>,
    },
    /// The server is configured but did not start (or could not list its tools).
    #[error(transparent)]
    NotStarted(#[from] ServerError),
    #[error("the MCP server {server} has no tool {tool}{}", listed(tools))]
    NoTool {
        server: String,
        tool: String,
        tools: Vec<String>,
    },
}

fn listed(names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!(" (there are: {})", names.join(", "))
    }
}

/// The tool `tool` of the server `server`, starting that server alone. `tool` is the
/// server's own name for it or its id in the registry.
pub async fn find_tool(
    servers: Option<&McpServers>,
    server: &str,
    tool: &str,
    ctx: &ToolContext,
) -> Result<McpTool, McpCallError> {
    let Some(found) = servers.and_then(|s| s.get(server)) else {
        return Err(McpCallError::NoServer {
            name: server.to_string(),
            configured: servers
                .map(|s| s.names().into_iter().map(str::to_string).collect())
                .unwrap_or_default(),
        });
    };
    let tools = tools_of(found, ctx)
        .await
        .map_err(McpCallError::NotStarted)?;
    let names = tools.iter().map(|t| t.tool.clone()).collect();
    tools
        .into_iter()
        .find(|t| t.tool == tool || t.id == tool)
        .ok_or_else(|| McpCallError::NoTool {
            server: server.to_string(),
            tool: tool.to_string(),
            tools: names,
        })
}

/// One server's tools, starting it (and no other) if it is not running; why it could not
/// start or list them otherwise.
pub async fn tools_of(
    server: &Arc<Server>,
    ctx: &ToolContext,
) -> Result<Vec<McpTool>, ServerError> {
    let client = server.client(ctx).await?;
    let list = client
        .list_all_tools()
        .await
        .map_err(|e| server.failure(&format!("cannot list its tools: {e}")))?;
    Ok(list
        .into_iter()
        .map(|t| McpTool::new(server.clone(), t))
        .collect())
}

impl Server {
    fn timeout(&self) -> Duration {
        self.spec
            .timeout
            .filter(|t| t.is_finite() && *t > 0.0)
            .map(|t| Duration::from_secs_f64(t.min(3600.0)))
            .unwrap_or(DEFAULT_TIMEOUT)
    }

    fn failure(&self, what: &str) -> ServerError {
        let cut = self.cut.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(why) = cut.get() {
            return ServerError::Failed(format!("the MCP server {} {what}: {why}", self.name));
        }
        let process = self
            .stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let tail = process.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let tail = tail.trim();
        ServerError::Failed(if tail.is_empty() {
            format!("the MCP server {} {what}", self.name)
        } else {
            format!("the MCP server {} {what} (it said: {tail})", self.name)
        })
    }

    /// The running connection, started (or started again) as needed.
    async fn client(&self, ctx: &ToolContext) -> Result<Arc<Client>, ServerError> {
        let mut conn = self.conn.lock().await;
        if let Some(c) = conn.as_ref()
            && !c.is_transport_closed()
        {
            return Ok(c.clone());
        }
        *conn = None;
        let n = self.starts.fetch_add(1, Ordering::SeqCst);
        if n > MAX_RESTARTS {
            return Err(ServerError::Failed(format!(
                "the MCP server {} stopped {} times; it is not started again in this session",
                self.name, n
            )));
        }
        let client = tokio::time::timeout(START_TIMEOUT, self.start(ctx))
            .await
            .map_err(|_| {
                self.failure(&format!(
                    "did not answer within {} s of starting",
                    START_TIMEOUT.as_secs()
                ))
            })??;
        let client = Arc::new(client);
        *conn = Some(client.clone());
        Ok(client)
    }

    /// Starts the server inside the sandbox and speaks MCP over its stdio.
    async fn start(&self, ctx: &ToolContext) -> Result<Client, ServerError> {
        if let Some(url) = &self.spec.url {
            return self.connect_remote(url, ctx).await;
        }
        let Some(command) = &self.spec.command else {
            return Err(ServerError::Config(format!(
                "the MCP server {} has neither command nor url",
                self.name
            )));
        };
        let argv: Vec<String> = std::iter::once(command)
            .chain(&self.spec.args)
            .cloned()
            .collect();
        let env: Vec<(String, String)> = self
            .spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let started = super::stdio::spawn(ctx, &argv, &env).await.map_err(|e| {
            ServerError::Failed(format!("cannot start the MCP server {}: {e}", self.name))
        })?;
        *self.stderr.lock().unwrap_or_else(|p| p.into_inner()) = started.stderr.clone();
        let ours = started.stream;
        let (read, write) = tokio::io::split(ours);
        // rmcp buffers a line until its newline: the bound keeps that buffer within the
        // limit, and a server past it is cut off (its transport closes, its program ends).
        let read = runner_framing::LineBound::new(
            read,
            runner_framing::MAX_BODY,
            format!("the MCP server {}", self.name),
        );
        *self.cut.lock().unwrap_or_else(|p| p.into_inner()) = read.tripwire();
        ().serve((read, write))
            .await
            .map_err(|e| self.failure(&format!("did not start: {e}")))
    }

    /// A remote server over streamable HTTP, reached from the host: the sandbox has no
    /// network. The connection is judged by the `webfetch` rules, as every request the host
    /// makes for the agent is, and by the host's address rules
    /// ([`runner_network::outbound`]) when it is made; one a repository's config added
    /// needs the user's approval first.
    async fn connect_remote(&self, url: &str, ctx: &ToolContext) -> Result<Client, ServerError> {
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        if self.spec.from_project {
            self.confirm_project_server(url, ctx).await?;
        }
        let ask = PermissionRequest::new("webfetch", vec![url.to_string()], vec!["*".into()]);
        ctx.ask_all(vec![ask]).await.map_err(|e| {
            ServerError::NotContacted(format!(
                "the MCP server {} at {url} was not allowed: {e}",
                self.name
            ))
        })?;
        let parsed = reqwest::Url::parse(url).map_err(|e| {
            ServerError::Config(format!(
                "mcp.{}: url {url:?} is not a valid URL: {e}",
                self.name
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ServerError::Config(format!(
                "mcp.{}: url {url:?} must start with http:// or https://",
                self.name
            )));
        }
        let not_contacted = |e: &dyn std::fmt::Display| {
            ServerError::NotContacted(format!(
                "the MCP server {} at {url} was not contacted: {e}",
                self.name
            ))
        };
        ctx.services
            .outbound
            .check(&parsed)
            .await
            .map_err(|e| not_contacted(&e))?;
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in &self.spec.headers {
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|e| {
                ServerError::Config(format!("mcp.{}: header {k:?}: {e}", self.name))
            })?;
            let value = reqwest::header::HeaderValue::from_str(v).map_err(|e| {
                ServerError::Config(format!("mcp.{}: header {k:?}: {e}", self.name))
            })?;
            headers.insert(name, value);
        }
        let client = ctx
            .services
            .outbound
            .client_with_headers(headers)
            .map_err(|e| ServerError::Failed(e.to_string()))?;
        let transport = StreamableHttpClientTransport::with_client(
            client,
            StreamableHttpClientTransportConfig::with_uri(url.to_string()),
        );
        ().serve(transport)
            .await
            .map_err(
                |e| match runner_network::outbound::Outbound::refusal_in(&e) {
                    Some(refused) => not_contacted(refused),
                    None => ServerError::Failed(format!(
                        "the MCP server {} at {url} did not start: {e}",
                        self.name
                    )),
                },
            )
    }

    /// A repository's config naming a remote server would have this machine connect where
    /// the repository chose, with the headers it chose: the person decides, whatever the
    /// rules allow (no rule, not even the repository's own, waves it through). Without
    /// anybody to ask it is refused, naming the file and the entry.
    async fn confirm_project_server(
        &self,
        url: &str,
        ctx: &ToolContext,
    ) -> Result<(), ServerError> {
        let source = self
            .spec
            .source
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| ".runner/config.toml".into());
        let entry = format!("[mcp.{}]", self.name);
        let mut request =
            PermissionRequest::new("remote_mcp", vec![url.to_string()], vec![url.to_string()])
                .with_metadata(serde_json::json!({
                    "server": self.name,
                    "source": source,
                    "headers": self.spec.headers.keys().collect::<Vec<_>>(),
                }));
        request.tool = Some(format!("{source} ({entry}, a repository's config)"));
        let why = match ctx.gate.confirm(&request).await {
            Ok(()) => return Ok(()),
            Err(runner_permission::PermissionError::Unanswered { reason, .. }) => {
                // The asker's own advice (an allow rule) does not apply here: no rule can.
                let reason = reason.split(" (").next().unwrap_or(&reason);
                format!("it was refused because {reason}")
            }
            Err(runner_permission::PermissionError::Rejected { .. }) => {
                "you refused it".to_string()
            }
            Err(e) => e.to_string(),
        };
        Err(ServerError::NotContacted(format!(
            "the MCP server {} was not contacted: {source} adds it as {entry} (url = {url}), a remote server this machine would connect to with the headers that file chose, and a repository's config needs your approval for that: {why}. Approve it when asked (at a terminal, or with --ask allow), or move {entry} into your own config ({})",
            self.name,
            runner_dirs::user_config().display()
        )))
    }

    async fn call(
        &self,
        tool: &str,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let client = self.client(ctx).await?;
        let arguments = match args {
            Value::Object(map) => Some(map),
            _ => None,
        };
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = arguments;
        let call = client.call_tool(params);
        let result = tokio::select! {
            r = tokio::time::timeout(self.timeout(), call) => match r {
                Ok(Ok(result)) => result,
                Ok(Err(e)) => {
                    let gone = client.is_transport_closed();
                    return Err(if gone {
                        self.failure(&format!("stopped during the call ({e}); it is started again on the next call"))
                    } else {
                        self.failure(&format!("failed the call: {e}"))
                    }.into());
                }
                Err(_) => {
                    // A server that stops answering is not trusted with the next call.
                    *self.conn.lock().await = None;
                    return Err(self.failure(&format!(
                        "did not answer within {} s; it is started again on the next call",
                        self.timeout().as_secs()
                    )).into());
                }
            },
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        let mut text = String::new();
        let mut attachments = Vec::new();
        for content in result.content {
            match content {
                ContentBlock::Text(t) => text.push_str(&t.text),
                ContentBlock::Image(i) => attachments.push(Attachment {
                    mime: i.mime_type.clone(),
                    url: format!("data:{};base64,{}", i.mime_type, i.data),
                    filename: format!("{}-{tool}", self.name),
                }),
                ContentBlock::Resource(r) => {
                    text.push_str(&serde_json::to_string(&r.resource).unwrap_or_default())
                }
                other => text.push_str(&serde_json::to_string(&other).unwrap_or_default()),
            }
        }
        if result.is_error == Some(true) {
            return Err(ToolError::Failed(text));
        }
        Ok(ToolOutput {
            title: format!("{}: {tool}", self.name),
            output: text,
            metadata: crate::meta! { "server" => self.name.clone() },
            attachments,
        })
    }
}

/// The id a server's tool has in the registry: OpenCode's `SERVER_TOOL`, in the characters
/// tool ids take, except that a tool already named for its server keeps its own name
/// (`mcp-server-git`'s `git_status` under `[mcp.git]` is `git_status`, not
/// `git_git_status`).
pub fn tool_id(server: &str, tool: &str) -> String {
    let prefixed = tool
        .strip_prefix(server)
        .is_some_and(|rest| rest.starts_with('_'));
    let id = if prefixed {
        tool.to_string()
    } else {
        format!("{server}_{tool}")
    };
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// One tool of one server, as the registry sees it.
pub struct McpTool {
    id: &'static str,
    tool: String,
    description: String,
    schema: Value,
    server: Arc<Server>,
}

impl McpTool {
    fn new(server: Arc<Server>, t: rmcp::model::Tool) -> McpTool {
        let id = tool_id(&server.name, &t.name);
        let mut schema = Value::Object((*t.input_schema).clone());
        if let Some(obj) = schema.as_object_mut() {
            obj.entry("type")
                .or_insert_with(|| Value::String("object".into()));
            obj.entry("properties")
                .or_insert_with(|| Value::Object(Default::default()));
        }
        McpTool {
            id: Box::leak(id.into_boxed_str()),
            tool: t.name.to_string(),
            description: t.description.map(|d| d.to_string()).unwrap_or_else(|| {
                format!("The {} tool of the MCP server {}.", t.name, server.name)
            }),
            schema,
            server,
        }
    }

    fn asks(&self) -> Vec<PermissionRequest> {
        vec![PermissionRequest::new(
            self.id,
            vec!["*".into()],
            vec!["*".into()],
        )]
    }
}

impl McpTool {
    /// The name the server gives the tool.
    pub fn name(&self) -> &str {
        &self.tool
    }
}

impl DynTool for McpTool {
    fn id(&self) -> &'static str {
        self.id
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    fn truncation(&self) -> super::truncate::Direction {
        super::truncate::Direction::Head
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            ctx.ask_all(self.asks()).await?;
            self.server.call(&self.tool, args, ctx).await
        })
    }

    fn permissions<'a>(&'a self, _args: Value, _ctx: &'a ToolContext) -> PermissionsFuture<'a> {
        Box::pin(async move { Ok(self.asks()) })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_tool_named_for_its_server_keeps_its_own_name() {
        assert_eq!(tool_id("git", "git_status"), "git_status");
        assert_eq!(tool_id("git", "status"), "git_status");
        // Only the whole server name, then `_`, counts as the prefix.
        assert_eq!(tool_id("git", "github_search"), "git_github_search");
        assert_eq!(tool_id("my.server", "do it"), "my_server_do_it");
    }
    use super::*;

    #[test]
    fn opencodes_mcp_section_reads_as_it_is() {
        let servers = from_opencode(&serde_json::json!({
            "docs": {"type": "local", "command": ["npx", "-y", "docs-mcp"], "environment": {"K": "v"}, "timeout": 5000},
            "off": {"type": "local", "command": ["x"], "enabled": false},
            "far": {"type": "remote", "url": "https://mcp.example/x", "headers": {"A": "b"}}
        }))
        .unwrap();
        let docs = &servers["docs"];
        assert_eq!(docs.command.as_deref(), Some("npx"));
        assert_eq!(docs.args, ["-y", "docs-mcp"]);
        assert_eq!(docs.env["K"], "v");
        assert_eq!(docs.timeout, Some(5.0));
        assert_eq!(servers["off"].enabled, Some(false));
        assert_eq!(servers["far"].url.as_deref(), Some("https://mcp.example/x"));
        assert_eq!(servers["far"].headers["A"], "b");
        assert!(from_opencode(&serde_json::json!({"bad": {"type": "local"}})).is_err());
        // Disabled servers are not started at all.
        assert_eq!(McpServers::new(servers).servers.len(), 2);
    }
}
