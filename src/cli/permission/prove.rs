//! `runner permission prove`: whether the rules a session would see stay within a boundary
//! for every permission and subject, or what reach a config change adds. The proof is
//! `runner_prove`'s; this file loads the rules as `permission eval` does and prints.

use std::path::PathBuf;

use clap::Args;
use serde_json::{Value, json};

use super::super::exit;
use super::{RuleArgs, Scope, load_scope};
use runner_agent::config::profile::AskMode;
use runner_permission::rules::{Action, Rule};
use runner_prove::{Counterexample, Proof, Side};

#[derive(Debug, Args)]
pub struct ProveArgs {
    /// The boundary to prove the rules within: a runner TOML config whose `[permission]`
    /// table is the limit (read as it is, whoever owns it).
    #[arg(long, value_name = "FILE", required_unless_present = "diff")]
    boundary: Option<PathBuf>,
    /// Instead: the reach NEW adds over OLD, each merged as `--config` would be.
    #[arg(long, num_args = 2, value_names = ["OLD", "NEW"], conflicts_with_all = ["boundary", "config"])]
    diff: Option<Vec<PathBuf>>,
    #[command(flatten)]
    scope: Scope,
    /// Print {holds, counterexamples: [{permission, subject, decision, rule, boundary}]}
    /// (`old` in place of `boundary` with --diff).
    #[arg(long)]
    json: bool,
}

pub fn run(args: &ProveArgs) -> u8 {
    let result = match &args.diff {
        Some(files) => diff(&args.scope, &files[0], &files[1]),
        None => within(&args.scope, args.boundary.as_ref()),
    };
    let (proof, limit_name) = match result {
        Ok(x) => x,
        Err(code) => return code,
    };
    if args.json {
        let found: Vec<Value> = proof
            .counterexamples
            .iter()
            .map(|c| as_json(c, limit_name))
            .collect();
        let out = json!({ "holds": proof.holds(), "counterexamples": found });
        println!("{}", runner_display::json_pretty(&out));
    } else {
        print_text(&proof, limit_name);
    }
    if proof.holds() {
        exit::OK
    } else {
        exit::FAILED
    }
}

/// The session's rules against a boundary file.
fn within(scope: &Scope, boundary: Option<&PathBuf>) -> Result<(Proof, &'static str), u8> {
    let Some(path) = boundary else {
        eprintln!("runner: give --boundary FILE, or --diff OLD NEW");
        return Err(exit::USAGE);
    };
    let home = std::env::var("HOME").unwrap_or_default();
    let limit = runner_permission::boundary::load_unchecked(path, &home).map_err(|e| {
        eprintln!("runner: {}", runner_display::shown(&e));
        exit::USAGE
    })?;
    let (profile, rules, root) = load_scope(scope)?;
    let side = Side {
        rules: &rules,
        asks_denied: profile.ask == Some(AskMode::Deny),
    };
    let proof = runner_prove::prove_within(side, &limit, &root).map_err(failed)?;
    Ok((proof, "boundary"))
}

/// The session's rules with `--config NEW` against those with `--config OLD`.
fn diff(
    scope: &Scope,
    old: &std::path::Path,
    new: &std::path::Path,
) -> Result<(Proof, &'static str), u8> {
    let with = |config: &std::path::Path| {
        let scope = Scope {
            profile: scope.profile.clone(),
            rules: RuleArgs {
                config: Some(config.to_path_buf()),
            },
            root: scope.root.clone(),
            trust_project: scope.trust_project,
        };
        load_scope(&scope)
    };
    let (profile, old_rules, root) = with(old)?;
    let (_, new_rules, _) = with(new)?;
    let asks_denied = profile.ask == Some(AskMode::Deny);
    let side = |rules| Side { rules, asks_denied };
    let proof = runner_prove::compare(side(&new_rules), side(&old_rules), &root).map_err(failed)?;
    Ok((proof, "old"))
}

fn failed(e: runner_prove::ProveError) -> u8 {
    eprintln!("runner: {e}");
    exit::FAILED
}

fn as_json(c: &Counterexample, limit_name: &str) -> Value {
    json!({
        "permission": c.permission,
        "subject": c.subject,
        "decision": c.action,
        "rule": c.rule,
        limit_name: { "action": c.limit, "rule": c.limit_rule },
    })
}

fn show(action: Action, rule: Option<&Rule>) -> String {
    match rule {
        Some(r) => format!(
            "{action} by {} {:?} = {} ({} #{})",
            r.permission, r.pattern, r.action, r.source.origin, r.source.position
        ),
        None => format!("{action} (no rule matched)"),
    }
}

fn print_text(proof: &Proof, limit_name: &str) {
    if proof.holds() {
        println!(
            "{}",
            if limit_name == "old" {
                "No added reach: the new rules decide no subject of any permission more loosely than the old."
            } else {
                "Holds: for every permission and every subject, the rules decide no more loosely than the boundary."
            }
        );
        return;
    }
    for c in &proof.counterexamples {
        let line = format!(
            "{} {:?}: {}; the {} {}",
            c.permission,
            c.subject,
            show(c.action, c.rule.as_ref()),
            if limit_name == "old" {
                "old rules"
            } else {
                "boundary"
            },
            show(c.limit, c.limit_rule.as_ref()),
        );
        println!("{}", runner_display::escape(&line));
    }
}
