//! `runner tool …`: the tools without a model. `list` shows them; `call` runs one call
//! through the whole pipeline (validation, permission gate, sandbox, truncation); `script`
//! runs a sequence of calls as one session.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::exit;
use super::permission::{RuleArgs, Scope, load_scope};
use runner_agent::config::profile::AskMode;
use runner_agent::session::SessionOptions;
use runner_permission::gate::{PolicyAsker, RuleGate};
use runner_sandbox::BackendKind;
use runner_sandbox::spec::{Network, SandboxSpec};
use runner_tool::registry::Outcome;
use runner_tool::{CallResult, Conversation, Registry, ToolContext};
use runner_workspace::Workspace;

#[derive(Debug, Subcommand)]
pub enum ToolCommand {
    /// The tools a model is offered under the profile's rules (a tool whose permission is
    /// `"*"` deny is hidden), with description and parameter schema.
    List {
        /// One JSON array of {id, description, parameters} instead of the names.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        scope: Scope,
    },
    /// One call, as its own session (files it touches count as read at its start).
    Call {
        /// The tool id, e.g. `read`.
        name: String,
        /// The arguments as a JSON object, e.g. '{"filePath": "src/main.rs"}'.
        args: String,
        #[command(flatten)]
        common: CommonArgs,
        /// Print one JSON object {tool, title, output, metadata, attachments, error}.
        #[arg(long)]
        json: bool,
    },
    /// A JSON-lines file of calls `{"tool": …, "args": {…}}` run as one session; prints one
    /// result object per line. `-` reads standard input.
    Script {
        /// The file of calls, or `-` for standard input.
        file: PathBuf,
        #[command(flatten)]
        common: CommonArgs,
    },
}

#[derive(Debug, Args)]
pub struct CommonArgs {
    /// The worktree the tools work in.
    #[arg(long, default_value = ".")]
    pub root: PathBuf,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    pub rules: RuleArgs,
    /// Who answers what the rules leave open: prompt (the terminal; refused at once without
    /// one), allow (approve each once), deny. Default: the profile's, else prompt.
    #[arg(long, value_parser = super::ask_arg())]
    pub ask: Option<AskMode>,
    /// Append every decision (permissions with their deciding rule, connections, the
    /// sandbox's start and end) to FILE as OCSF JSON lines, besides `[audit] file` in your
    /// config. See docs/AUDIT.md.
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
}

pub async fn run(cmd: ToolCommand) -> u8 {
    match cmd {
        ToolCommand::List { json, scope } => list(json, &scope).await,
        ToolCommand::Call {
            name,
            args,
            common,
            json,
        } => {
            let (ctx, workspace) = match start(&common, Conversation::single_call("cli")).await {
                Ok(x) => x,
                Err(code) => return code,
            };
            // A built-in needs no look for the user's tools, nor MCP servers started.
            let builtin = Registry::builtin();
            let registry = if builtin.get(&name).is_some() {
                builtin
            } else {
                let (registry, notes) = runner_tool::user::registry(&ctx).await;
                for note in notes {
                    eprintln!("runner: {}", runner_display::escape(&note));
                }
                registry
            };
            let result = registry.call_raw(&name, &args, &ctx).await;
            print_result(&result, json);
            report_network(ctx.services.network.as_deref()).await;
            // The sandbox closes (its processes die) before the copy is handed over.
            drop(ctx);
            super::changes::report(workspace);
            exit_code(&result)
        }
        ToolCommand::Script { file, common } => script(&file, &common).await,
    }
}

/// What `list` prints is what a session's lead agent (`build`) is offered: the registry
/// comes from the same function the agent's does ([`runner_agent::offered_to_lead`]), over
/// a context carrying the config's language servers and search service, so `lsp`,
/// `websearch` and `codesearch` appear exactly when a session would offer them, and
/// `skill`, `task` (naming the subagents) and `plan_enter` as the agent gets them. The
/// in-process server stands in for the sandbox: it reads the worktree's tool and skill
/// files and answers whether a language server's command exists, and nothing else runs.
/// MCP servers are not started for a listing: their tools are not shown, and a note says
/// which servers the config names.
async fn list(json: bool, scope: &Scope) -> u8 {
    let (_, rules, root) = match load_scope(scope) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let (ctx, mcp_servers) = match offering_context(&root, rules, scope).await {
        Ok(x) => x,
        Err(code) => return code,
    };
    let user_agents = runner_dirs::config_dir().join("agents");
    let (agents, mut notes) = runner_agent::agents::all(&ctx, &user_agents).await;
    let (registry, tool_notes) = runner_agent::offered_to_lead(&ctx, &agents, "build").await;
    notes.extend(tool_notes);
    if !mcp_servers.is_empty() {
        notes.push(format!(
            "the MCP servers {} are not started for a listing: a session also offers their tools",
            mcp_servers.join(", ")
        ));
    }
    for note in notes {
        eprintln!("runner: {}", runner_display::escape(&note));
    }
    let gate = ctx.gate.as_ref();
    if json {
        let tools: Vec<Value> = offered(&registry, gate)
            .map(|t| json!({ "id": t.id(), "description": t.description(), "parameters": t.parameters() }))
            .collect();
        println!("{}", runner_display::json_pretty(&tools));
    } else {
        // A project's own tools describe themselves.
        for t in offered(&registry, gate) {
            let first = t.description().lines().next().unwrap_or_default();
            println!(
                "{}",
                runner_display::escape(&format!("{:<12} {first}", t.id()))
            );
        }
    }
    exit::OK
}

/// The tools a model is shown: every visible one but `invalid`, which only takes calls
/// that could not be run (as the agent's own list leaves it out).
fn offered<'a>(
    registry: &'a runner_tool::Registry,
    gate: &'a dyn runner_permission::PermissionGate,
) -> impl Iterator<Item = &'a Arc<dyn runner_tool::DynTool>> + 'a {
    registry.visible(gate).filter(|t| t.id() != "invalid")
}

/// A tool context like a session's, for looking only: the rules' gate, the config's
/// language servers and search service, and the in-process server over `root`; with the
/// names of the MCP servers the config has, which a listing does not start.
async fn offering_context(
    root: &Path,
    rules: Vec<runner_permission::rules::Rule>,
    scope: &Scope,
) -> Result<(ToolContext, Vec<String>), u8> {
    let (settings, _) =
        match runner_agent::config::settings::Settings::load(root, scope.rules.config.as_deref()) {
            Ok(x) => x,
            Err(e) => {
                eprintln!("runner: {}", runner_display::escape(&e.to_string()));
                return Err(exit::USAGE);
            }
        };
    let search = match settings
        .websearch
        .as_ref()
        .map(runner_tool::search::Search::from_settings)
    {
        None => None,
        Some(Ok(s)) => Some(Arc::new(s)),
        Some(Err(e)) => {
            eprintln!("runner: {}", runner_display::escape(&e.to_string()));
            return Err(exit::USAGE);
        }
    };
    let sandbox = match runner_sandbox::local::in_process(root, &[]).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("runner: cannot open the worktree {}: {e}", root.display());
            return Err(exit::FAILED);
        }
    };
    let gate = RuleGate::new(sandbox.worktree(), rules, Arc::new(PolicyAsker::allow()));
    let mcp_servers = settings.mcp.keys().cloned().collect();
    let ctx = ToolContext::new(
        Arc::new(sandbox),
        Arc::new(Conversation::single_call("list")),
        Arc::new(gate),
        Arc::new(runner_tool::truncate::Truncator::new(
            runner_tool::truncate::Truncator::default_dir(),
        )),
    )
    .with_search(search)
    .with_lsp(Arc::new(runner_tool::lsp_client::LspServers::new(
        &settings.lsp,
    )));
    Ok((ctx, mcp_servers))
}

/// One line per connection the sandbox made through the proxy, on standard error: what a
/// person reviews, and what an allow-list is written from.
/// How long a report waits for connections that are still closing on the host's side.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

pub(super) async fn report_network(proxy: Option<&runner_network::NetworkProxy>) {
    if let Some(network) = proxy {
        network.settle(SETTLE).await;
        for record in network.records() {
            eprintln!("network: {}", runner_display::escape(&record.line()));
        }
        let past = network.past_limit();
        if past.allowed + past.denied > 0 {
            eprintln!(
                "network: and {} more connections, only counted: {} allowed, {} refused",
                past.allowed + past.denied,
                past.allowed,
                past.denied
            );
        }
    }
}

pub(super) async fn start(
    common: &CommonArgs,
    conversation: Conversation,
) -> Result<(ToolContext, Option<Workspace>), u8> {
    let mut options = common
        .sandbox
        .options(&common.root, &common.rules, common.ask);
    options.audit.file = common.audit.clone();
    match options.open(conversation).await {
        Ok(open) => {
            for note in &open.notes {
                eprintln!("runner: {}", runner_display::escape(note));
            }
            use std::io::IsTerminal;
            let ctx = open.ctx;
            // `question` asks the person at the terminal, when there is one.
            let ctx = if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
                ctx.with_user(Arc::new(runner_tool::TerminalUser))
            } else {
                ctx
            };
            Ok((ctx, open.workspace))
        }
        Err(e) => {
            eprintln!("runner: {}", runner_display::shown(&e));
            Err(exit::of_open(e.kind()))
        }
    }
}

/// The sandbox options every command that runs tools shares. The profile sets the
/// sandbox; each flag given overrides the profile's value.
#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// A profile name (built-in: default, readonly, untrusted, laptop, eval; or the user's
    /// own in $XDG_CONFIG_HOME/runner/profiles/) or a path to a profile TOML file.
    #[arg(long, default_value = "default")]
    pub profile: String,
    /// The isolation backend (default: the profile's).
    #[arg(long = "sandbox", value_parser = super::backend_arg())]
    pub backend: Option<BackendKind>,
    /// The image the docker backend runs (default: the profile's, else
    /// runner-sandbox:bookworm; see `runner image build`).
    #[arg(long)]
    pub image: Option<String>,
    /// The OCI runtime the docker backend's container runs under: `runsc` (gVisor, a
    /// kernel of its own between commands and the host's), `runc`, or `default` (the
    /// engine's). Default: the profile's (`untrusted`: runsc when the engine has it), else
    /// the engine's. `runner sandbox doctor` lists the engine's runtimes.
    #[arg(long, value_name = "NAME")]
    pub runtime: Option<String>,
    /// Whether commands may reach the network (default: the profile's, else none).
    #[arg(long, value_parser = super::network_arg())]
    pub network: Option<Network>,
    /// Where the sandbox works: direct (the checkout itself) or copy (a private copy;
    /// review it with `runner changes ID`, bring it over with `runner apply ID`). Default:
    /// the profile's, else direct.
    #[arg(long, value_parser = super::workspace_arg())]
    pub workspace: Option<runner_workspace::Mode>,
}

impl SandboxArgs {
    /// The library's session options from these flags.
    pub fn options(&self, root: &Path, rules: &RuleArgs, ask: Option<AskMode>) -> SessionOptions {
        SessionOptions {
            profile: Some(self.profile.clone()),
            backend: self.backend,
            image: self.image.clone(),
            runtime: self.runtime.clone(),
            network: self.network,
            workspace: self.workspace,
            config: rules.config.clone(),
            ask,
            ..SessionOptions::new(root)
        }
    }

    /// The workspace mode: the flag, else the profile's, else direct.
    pub fn workspace_mode(&self) -> Result<runner_workspace::Mode, String> {
        let profile =
            runner_agent::config::profile::load(&self.profile).map_err(|e| e.to_string())?;
        Ok(self
            .workspace
            .or(profile.sandbox.workspace)
            .unwrap_or_default())
    }

    /// The sandbox these flags and the config (`rules.config`) ask for around `root`.
    pub fn spec(&self, root: &Path, rules: &RuleArgs) -> Result<SandboxSpec, String> {
        let profile =
            runner_agent::config::profile::load(&self.profile).map_err(|e| e.to_string())?;
        self.options(root, rules, None)
            .spec(&profile)
            .map_err(|e| e.to_string())
    }
}

/// A call's result for a person (escaped: it is what a command printed or a file held;
/// `--json` has it exact) or as one line of JSON.
pub(super) fn print_result(result: &CallResult, json: bool) {
    if json {
        println!("{}", runner_display::json(result));
        return;
    }
    if let Some(error) = &result.error {
        eprintln!("{}", runner_display::escape(error));
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", runner_display::escape(&result.output));
    for a in &result.attachments {
        let _ = writeln!(
            out,
            "[attachment {} {} ({} bytes of data URL)]",
            runner_display::escape(&a.filename),
            runner_display::escape(&a.mime),
            a.url.len()
        );
    }
}

pub(super) fn exit_code(result: &CallResult) -> u8 {
    match result.outcome {
        Outcome::Ok => exit::OK,
        Outcome::Denied => exit::DENIED,
        Outcome::Failed | Outcome::Cancelled | Outcome::SandboxLost => exit::FAILED,
    }
}

async fn script(file: &Path, common: &CommonArgs) -> u8 {
    let lines: Vec<String> = {
        let reader: Box<dyn BufRead> = if file == Path::new("-") {
            Box::new(std::io::stdin().lock())
        } else {
            match std::fs::File::open(file) {
                Ok(f) => Box::new(std::io::BufReader::new(f)),
                Err(e) => {
                    eprintln!("runner: cannot open script {}: {e}", file.display());
                    return exit::USAGE;
                }
            }
        };
        match reader.lines().collect() {
            Ok(lines) => lines,
            Err(e) => {
                eprintln!("runner: cannot read script {}: {e}", file.display());
                return exit::USAGE;
            }
        }
    };
    let (ctx, workspace) = match start(common, Conversation::new("script")).await {
        Ok(x) => x,
        Err(code) => return code,
    };
    let (registry, notes) = runner_tool::user::registry(&ctx).await;
    for note in notes {
        eprintln!("runner: {}", runner_display::escape(&note));
    }
    let mut first_failure = exit::OK;
    for (n, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let result = match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(call)) => {
                let name = call.get("tool").and_then(Value::as_str).unwrap_or_default();
                match call.get("args") {
                    Some(Value::String(raw)) => registry.call_raw(name, raw, &ctx).await,
                    Some(args) => registry.call(name, args.clone(), &ctx).await,
                    None => registry.call(name, json!({}), &ctx).await,
                }
            }
            _ => {
                let error = format!(
                    "line {}: expected a JSON object {{\"tool\": …, \"args\": {{…}}}}",
                    n + 1
                );
                registry.call_invalid("", error, &ctx).await
            }
        };
        println!("{}", runner_display::json(&result));
        let code = exit_code(&result);
        if first_failure == exit::OK && code != exit::OK {
            first_failure = code;
        }
    }
    report_network(ctx.services.network.as_deref()).await;
    drop(ctx);
    super::changes::report(workspace);
    first_failure
}
