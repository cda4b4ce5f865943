//! `runner permission …`: what the rules say, without running anything.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::json;

use super::exit;

mod learn;
mod prove;
use runner_agent::config::profile::{AskMode, Profile};
use runner_agent::config::trust::TrustMode;
use runner_agent::session::{SessionOptions, absolute_root};
use runner_permission::gate::{PolicyAsker, RuleGate};
use runner_permission::rules::{Action, Rule};
use runner_tool::truncate::Truncator;
use runner_tool::{Conversation, ToolContext};

/// The options that decide which rules apply.
#[derive(Debug, Args, Clone)]
pub struct RuleArgs {
    /// A runner TOML config or an OpenCode JSON config (opencode.json), merged after the
    /// user's config and the project's `.runner/config.toml`.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum PermissionCommand {
    /// A tool call's permission analysis, without running it: prints
    /// {decision, asks: [{permission, patterns, always, decision}]}.
    Check {
        /// The tool id, e.g. `bash`.
        tool: String,
        /// The arguments as a JSON object.
        args: String,
        #[command(flatten)]
        scope: Scope,
    },
    /// The action for one permission and subject, and the rule that decided it.
    Eval {
        /// A permission name: bash, edit, read, external_directory, network, http, …
        permission: String,
        /// The subject: a command, a path, a `<dir>/*` pattern, a host (network), a
        /// request as `METHOD host/path` (http, e.g. "PUT api.github.com/repos/x"), …
        pattern: String,
        #[command(flatten)]
        scope: Scope,
        /// Print {action, rule: {permission, pattern, action, source}} (rule null when no
        /// rule matched).
        #[arg(long)]
        json: bool,
    },
    /// Prove that the merged rules never decide more loosely than a boundary, for every
    /// permission and subject (exit 1 with a shortest counterexample per permission), or
    /// show the reach a config change adds (--diff OLD NEW).
    Prove(prove::ProveArgs),
    /// The narrowest rules that allow what audit trails show allowed and nothing they show
    /// denied, as a runner TOML config commented with the calls each rule covers; with
    /// --boundary, proved within it before anything is written.
    Learn(learn::LearnArgs),
}

/// Which rules apply: a profile, config files, and the worktree whose project config counts.
#[derive(Debug, Args)]
pub struct Scope {
    /// A profile name or a path to a profile TOML file.
    #[arg(long, default_value = "default")]
    profile: String,
    #[command(flatten)]
    pub(super) rules: RuleArgs,
    /// The worktree (its `.runner/config.toml` is the project config).
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// Trust the worktree's `.runner/config.toml` as it is now to loosen built-in defaults
    /// (remembered until the file changes). It never loosens your own rules or the
    /// profile's.
    #[arg(long)]
    trust_project: bool,
}

pub async fn run(cmd: PermissionCommand) -> u8 {
    match cmd {
        PermissionCommand::Check { tool, args, scope } => check(&tool, &args, &scope).await,
        PermissionCommand::Eval {
            permission,
            pattern,
            scope,
            json,
        } => eval(&permission, &pattern, &scope, json),
        PermissionCommand::Prove(args) => prove::run(&args),
        PermissionCommand::Learn(args) => learn::run(&args),
    }
}

/// A profile and the ruleset it gives for a worktree, through the library's session
/// builder. Problems are printed and come back as the usage exit status: a broken config
/// stops a command before anything starts. Notes (ignored project rules) go to stderr.
pub fn profile_and_rules(
    profile_name: &str,
    root: &Path,
    rules: &RuleArgs,
    output_dir: Option<&Path>,
) -> Result<(Profile, Vec<Rule>), u8> {
    rules_trusting(profile_name, root, rules, output_dir, TrustMode::Ask)
}

/// [`profile_and_rules`], with trust in the project's config settled by `trust`.
fn rules_trusting(
    profile_name: &str,
    root: &Path,
    rules: &RuleArgs,
    output_dir: Option<&Path>,
    trust: TrustMode,
) -> Result<(Profile, Vec<Rule>), u8> {
    let options = SessionOptions {
        profile: Some(profile_name.to_string()),
        config: rules.config.clone(),
        project_trust: trust,
        ..SessionOptions::new(root)
    };
    // A project's config (its errors quote it) and its rules are the repository's text.
    let loaded = options.rules(output_dir).map_err(|e| {
        eprintln!("runner: {}", runner_display::shown(&e));
        exit::USAGE
    })?;
    for note in loaded.notes {
        eprintln!("runner: {}", runner_display::escape(&note));
    }
    Ok((loaded.profile, loaded.rules))
}

/// The configured MCP server whose tool `tool` (`NAME_tool`) would be.
fn mcp_server_of(tool: &str, root: &std::path::Path, scope: &Scope) -> Option<String> {
    let (settings, _) =
        runner_agent::config::settings::Settings::load(root, scope.rules.config.as_deref()).ok()?;
    settings
        .mcp
        .keys()
        .find(|name| tool.starts_with(&format!("{name}_")))
        .cloned()
}

/// What an ask amounts to under a profile that answers asks itself.
fn effective(action: Action, profile: &Profile) -> Action {
    match (action, profile.ask) {
        (Action::Ask, Some(AskMode::Deny)) => Action::Deny,
        (other, _) => other,
    }
}

pub fn load_scope(scope: &Scope) -> Result<(Profile, Vec<Rule>, PathBuf), u8> {
    if !scope.root.is_dir() {
        eprintln!("runner: --root {} is not a directory", scope.root.display());
        return Err(exit::USAGE);
    }
    let trust = if scope.trust_project {
        TrustMode::Grant
    } else {
        TrustMode::Ask
    };
    let (profile, rules) = rules_trusting(
        &scope.profile,
        &scope.root,
        &scope.rules,
        Some(&Truncator::any_session_dir()),
        trust,
    )?;
    Ok((profile, rules, absolute_root(&scope.root)))
}

async fn check(tool: &str, args: &str, scope: &Scope) -> u8 {
    let (profile, rules, root) = match load_scope(scope) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let args: serde_json::Value = match serde_json::from_str(args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("runner: the arguments are not valid JSON: {e}");
            return exit::USAGE;
        }
    };
    // The analysis only locates targets (stat, symlinks), so the in-process server is
    // enough whatever sandbox the profile names: nothing runs.
    let sandbox = match runner_sandbox::local::in_process(&root, &[]).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("runner: cannot open the worktree {}: {e}", root.display());
            return exit::FAILED;
        }
    };
    let gate = Arc::new(RuleGate::new(
        sandbox.worktree(),
        rules,
        Arc::new(PolicyAsker::deny("permission check never asks")),
    ));
    // The search tools exist where a search service is configured (nothing is sent here).
    let search =
        runner_agent::config::settings::Settings::load(&root, scope.rules.config.as_deref())
            .ok()
            .and_then(|(s, _)| s.websearch)
            .and_then(|s| runner_tool::search::Search::from_settings(&s).ok())
            .map(Arc::new);
    let ctx = ToolContext::new(
        Arc::new(sandbox),
        Arc::new(Conversation::single_call("check")),
        gate.clone(),
        Arc::new(Truncator::new(Truncator::default_dir())),
    )
    .with_search(search);
    let builtin = runner_tool::Registry::builtin();
    let registry = if builtin.get(tool).is_some() {
        builtin
    } else {
        runner_tool::user::registry(&ctx).await.0
    };
    let asks = match registry.permissions(tool, args, &ctx).await {
        Ok(asks) => asks,
        // A configured MCP server's tool: its ask is its name, known without starting the
        // server (nothing runs here).
        Err(_) if mcp_server_of(tool, &root, scope).is_some() => {
            vec![runner_permission::PermissionRequest::new(
                tool,
                vec!["*".into()],
                vec!["*".into()],
            )]
        }
        Err(e) => {
            // It can quote the arguments.
            eprintln!("runner: {}", runner_display::shown(&e));
            return exit::USAGE;
        }
    };
    let mut overall = Action::Allow;
    let mut entries = Vec::new();
    for ask in &asks {
        let verdict = gate.verdict(ask);
        let decision = effective(verdict.action, &profile);
        overall = match (overall, decision) {
            (Action::Deny, _) | (_, Action::Deny) => Action::Deny,
            (Action::Ask, _) | (_, Action::Ask) => Action::Ask,
            _ => Action::Allow,
        };
        entries.push(json!({
            "permission": ask.permission,
            "patterns": ask.patterns,
            "always": ask.always,
            "decision": decision,
            "rule": verdict.rule,
        }));
    }
    let out = json!({ "decision": overall, "asks": entries });
    println!("{}", runner_display::json_pretty(&out));
    exit::OK
}

fn eval(permission: &str, pattern: &str, scope: &Scope, as_json: bool) -> u8 {
    let (profile, rules, root) = match load_scope(scope) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let gate = RuleGate::new(&root, rules, Arc::new(PolicyAsker::allow()));
    let request = runner_permission::PermissionRequest::new(
        permission,
        vec![pattern.to_string()],
        Vec::new(),
    );
    let verdict = gate.verdict(&request);
    let action = effective(verdict.action, &profile);
    // The layer that decided: `boundary` when a boundary file held the stack back.
    let layer = verdict
        .rule
        .as_ref()
        .map(|r| runner_permission::gate::audit_rule(r).layer);
    if as_json {
        let out = json!({ "action": action, "rule": verdict.rule, "layer": layer });
        println!("{}", runner_display::json_pretty(&out));
        return exit::OK;
    }
    match &verdict.rule {
        Some(r) => println!(
            "{}",
            runner_display::escape(&format!(
                "{}  by {}{} {:?} = {} ({} #{})",
                action,
                if layer.as_deref() == Some("boundary") {
                    "the boundary: "
                } else {
                    ""
                },
                r.permission,
                r.pattern,
                r.action,
                r.source.origin,
                r.source.position
            ))
        ),
        None => println!("{}  (no rule matched; the default is ask)", action),
    }
    if action != verdict.action {
        println!("      {} answers every ask with deny", profile.source);
    }
    exit::OK
}
