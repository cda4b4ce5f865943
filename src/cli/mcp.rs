//! `runner mcp list|call`: the configured MCP servers, started in the sandbox the options
//! choose, and one of their tools called through the whole pipeline (gate, sandbox,
//! truncation). The work is in [`runner_tool::mcp`].

use clap::Subcommand;

use std::sync::Arc;

use super::exit;
use super::tool::CommonArgs;
use runner_tool::{Conversation, DynTool, mcp};

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Each configured server, its state and its tools (starting them).
    List {
        #[command(flatten)]
        common: CommonArgs,
        /// The servers as one JSON array of {name, state, tools}.
        #[arg(long)]
        json: bool,
    },
    /// Call one tool of one server: `runner mcp call NAME TOOL 'ARGS_JSON'`.
    Call {
        /// The server: a [mcp.NAME] of the config.
        name: String,
        /// The tool, as the server names it (see `mcp list`).
        tool: String,
        /// The arguments as a JSON object, e.g. '{"path": "README.md"}'.
        args: String,
        #[command(flatten)]
        common: CommonArgs,
        /// Print one JSON object {tool, title, output, metadata, attachments, error}.
        #[arg(long)]
        json: bool,
    },
    /// Serve runner's walled tools (bash, read, write, edit, multiedit, apply_patch, glob,
    /// grep, list) to another agent over MCP on standard input and output. One sandbox
    /// lives as long as the MCP session; every call goes through the permission rules.
    Serve(ServeArgs),
    /// A small MCP server on stdin/stdout, for runner's own tests.
    #[command(hide = true)]
    TestServer,
}

/// `runner mcp serve`'s options: the wall, as `runner run` takes it, and who answers asks.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The worktree the tools work in.
    #[arg(long, default_value = ".")]
    pub root: std::path::PathBuf,
    #[command(flatten)]
    pub sandbox: super::tool::SandboxArgs,
    #[command(flatten)]
    pub rules: super::permission::RuleArgs,
    /// Who answers what the rules leave open when the MCP client cannot be asked (the
    /// session's MCP revision or the client has no elicitation): deny (the default)
    /// refuses, allow approves each call once.
    #[arg(long, value_parser = ["allow", "deny"], default_value = "deny")]
    pub ask: String,
    /// Let the direct workspace edit a folder that is not inside a git work tree.
    #[arg(long)]
    pub no_git_check: bool,
    /// Append every decision of the session (each call's permission with its deciding
    /// rule, connections, the sandbox's start and end) to FILE as OCSF JSON lines, besides
    /// `[audit] file` in your config. See docs/AUDIT.md.
    #[arg(long, value_name = "FILE")]
    pub audit: Option<std::path::PathBuf>,
}

/// Serves until the client leaves; the copy workspace, if any, is named afterwards on
/// standard error (standard output is the MCP channel).
async fn serve(args: ServeArgs) -> u8 {
    let mut options = args.sandbox.options(&args.root, &args.rules, None);
    options.require_git_for_direct = !args.no_git_check;
    options.audit.file = args.audit.clone();
    let fallback = match args.ask.as_str() {
        "allow" => runner_mcp_serve::Fallback::Allow,
        _ => runner_mcp_serve::Fallback::Deny,
    };
    let stdio = (tokio::io::stdin(), tokio::io::stdout());
    match runner_mcp_serve::serve(options, fallback, stdio).await {
        Ok(served) => {
            super::tool::report_network(served.network.as_deref()).await;
            super::changes::report(served.workspace);
            exit::OK
        }
        Err(e) => {
            eprintln!("runner: {}", runner_display::escape(&e.to_string()));
            match e {
                runner_mcp_serve::ServeError::Open(e) => exit::of_open(e.kind()),
                _ => exit::FAILED,
            }
        }
    }
}

pub async fn run(cmd: McpCommand) -> u8 {
    match cmd {
        McpCommand::Serve(args) => serve(args).await,
        McpCommand::List { common, json } => {
            let (ctx, workspace) = match super::tool::start(&common, Conversation::new("mcp")).await
            {
                Ok(x) => x,
                Err(code) => return code,
            };
            let states = match &ctx.services.mcp {
                Some(m) => m.tools(&ctx).await.1,
                None => Vec::new(),
            };
            if json {
                println!("{}", runner_display::json_pretty(&states));
            } else if states.is_empty() {
                println!("no MCP servers are configured ([mcp.NAME] in a config file)");
            } else {
                // A server names its tools, and its state can quote what it said.
                for s in &states {
                    let line = format!("{}  {}  {}", s.name, s.state, s.tools.join(", "));
                    println!("{}", runner_display::escape(&line));
                }
            }
            drop(ctx);
            super::changes::report(workspace);
            // A server that did not start is a failure, whatever the others did.
            if states.iter().all(|s| s.state == "running") {
                exit::OK
            } else {
                exit::FAILED
            }
        }
        McpCommand::Call {
            name,
            tool,
            args,
            common,
            json,
        } => {
            let (ctx, workspace) =
                match super::tool::start(&common, Conversation::single_call("mcp")).await {
                    Ok(x) => x,
                    Err(code) => return code,
                };
            let found = mcp::find_tool(ctx.services.mcp.as_deref(), &name, &tool, &ctx).await;
            let tool = match found {
                Ok(tool) => Arc::new(tool),
                Err(e) => {
                    eprintln!("runner: {}", runner_display::escape(&e.to_string()));
                    drop(ctx);
                    super::changes::report(workspace);
                    return match e {
                        mcp::McpCallError::NotStarted { .. } => exit::FAILED,
                        _ => exit::USAGE,
                    };
                }
            };
            // The one tool, through the registry's pipeline (gate, hooks, truncation).
            let id = tool.id();
            let registry = runner_tool::Registry::builtin().with(tool);
            let result = registry.call_raw(id, &args, &ctx).await;
            super::tool::print_result(&result, json);
            drop(ctx);
            super::changes::report(workspace);
            super::tool::exit_code(&result)
        }
        McpCommand::TestServer => test_server::serve().await,
    }
}

mod test_server {
    //! Tools that let a test see where the server runs and what happens when it fails:
    //! `echo`, `read` (a file, by path), `crash` (exits mid-call).

    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    };
    use rmcp::service::RequestContext;
    use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
    use serde_json::json;

    struct TestServer;

    fn schema(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    impl ServerHandler for TestServer {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            let text = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
            let path = json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]});
            Ok(ListToolsResult::with_all_items(vec![
                Tool::new("echo", "Says the text back.", schema(text)),
                Tool::new("read", "Reads a file.", schema(path)),
                Tool::new(
                    "crash",
                    "Exits in the middle of the call.",
                    schema(json!({"type": "object"})),
                ),
            ]))
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            let arg = |k: &str| {
                request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get(k))
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            let result = match request.name.as_ref() {
                "echo" => CallToolResult::success(vec![ContentBlock::text(arg("text"))]),
                "read" => match std::fs::read_to_string(arg("path")) {
                    Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
                    Err(e) => CallToolResult::error(vec![ContentBlock::text(e.to_string())]),
                },
                "crash" => std::process::exit(3),
                other => {
                    return Err(ErrorData::invalid_params(format!("no tool {other}"), None));
                }
            };
            Ok(result.into())
        }
    }

    pub async fn serve() -> u8 {
        let Ok(running) = TestServer
            .serve((tokio::io::stdin(), tokio::io::stdout()))
            .await
        else {
            return 1;
        };
        let _ = running.waiting().await;
        0
    }
}
