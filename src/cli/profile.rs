//! `runner profile …`: which profiles exist and what one of them amounts to.

use std::path::PathBuf;

use clap::Subcommand;
use serde_json::json;

use super::exit;
use super::permission::{RuleArgs, profile_and_rules};
use crate::config::profile::{self, AskMode};
use crate::tool::truncate::Truncator;

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// The built-in profiles and the user's own ($XDG_CONFIG_HOME/runner/profiles/).
    List,
    /// A profile's sandbox settings and the merged permission rules, in precedence order
    /// (later rules win): built-in defaults, the profile, the user's config, the project's
    /// config, `--config`.
    Show {
        /// A profile name or a path to a profile TOML file.
        name: String,
        #[command(flatten)]
        rules: RuleArgs,
        /// The worktree whose `.runner/config.toml` counts as the project config.
        #[arg(long, default_value = ".")]
        root: PathBuf,
        /// The profile and its rules as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: ProfileCommand) -> u8 {
    match cmd {
        ProfileCommand::List => list(),
        ProfileCommand::Show {
            name,
            rules,
            root,
            json,
        } => show(&name, &rules, &root, json),
    }
}

fn list() -> u8 {
    let mut names: Vec<(String, String)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(profile::user_dir()) {
        let mut user: Vec<String> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".toml").map(str::to_string)
            })
            .collect();
        user.sort();
        for name in user {
            names.push((name, "user".into()));
        }
    }
    for (name, _) in profile::BUILT_IN {
        if !names.iter().any(|(n, _)| n == name) {
            names.push((name.to_string(), "built-in".into()));
        }
    }
    for (name, kind) in names {
        match profile::load(&name) {
            Ok(p) if p.sandbox.backend.is_none() => {
                let here = match crate::sandbox::choose::default_wall() {
                    Ok(c) => format!("here: {}", c.backend.name()),
                    Err(_) => "here: no wall available, so sessions refuse to start".into(),
                };
                println!("{name:<12} {kind:<9} {} ({here})", p.description)
            }
            Ok(p) => println!("{name:<12} {kind:<9} {}", p.description),
            Err(e) => println!("{name:<12} {kind:<9} (broken: {e})"),
        }
    }
    exit::OK
}

fn show(name: &str, rule_args: &RuleArgs, root: &std::path::Path, as_json: bool) -> u8 {
    let (p, rules) =
        match profile_and_rules(name, root, rule_args, Some(&Truncator::any_session_dir())) {
            Ok(x) => x,
            Err(code) => return code,
        };
    let ask = p.ask.unwrap_or(AskMode::Prompt);
    if as_json {
        let out = json!({
            "name": name,
            "source": p.source,
            "description": p.description,
            "sandbox": {
                "backend": p.sandbox.backend.map(|b| b.name()),
                "image": p.sandbox.image,
                "runtime": p.sandbox.runtime.as_ref().map(|r| r.names()),
                "network": p.sandbox.network.map(|n| n.as_arg()),
                "workspace": p.sandbox.workspace.unwrap_or_default(),
            },
            "ask": ask,
            "project_allows": p.project_allows.unwrap_or(true),
            "rules": rules,
        });
        println!("{}", crate::display::json_pretty(&out));
        return exit::OK;
    }
    println!("{name}: {}", p.description);
    println!("  from     {}", p.source);
    if let Some(b) = p.sandbox.backend {
        println!("  sandbox  {}", b.name());
    }
    if let Some(r) = &p.sandbox.runtime {
        println!(
            "  runtime  {} (the first the engine has)",
            r.names().join(", then ")
        );
    }
    println!(
        "  asks     {}",
        match ask {
            AskMode::Prompt => "asked at the terminal (refused without one)",
            AskMode::Allow => "approved once each",
            AskMode::Deny => "refused: an ask is a deny",
        }
    );
    if p.project_allows == Some(false) {
        println!("  project  .runner/config.toml may add denies only");
    }
    println!("rules (later wins):");
    for r in &rules {
        let action = r.action;
        // The project's config adds rules of its own choosing.
        let line = format!(
            "  {:<20} {:<32} {:<5}  {} #{}",
            r.permission,
            format!("{:?}", r.pattern),
            action,
            r.source.origin,
            r.source.position
        );
        println!("{}", crate::display::escape(&line));
    }
    exit::OK
}
