//! `runner profile …`: which profiles exist and what one of them amounts to.

use std::path::PathBuf;

use clap::Subcommand;
use serde_json::json;

use super::exit;
use super::permission::{RuleArgs, profile_and_rules};
use runner_agent::config::profile::{self, AskMode};
use runner_tool::truncate::Truncator;

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// The built-in profiles and the user's own ($XDG_CONFIG_HOME/runner/profiles/).
    List {
        /// One JSON array of {name, source (built-in or user), description, backend (the
        /// profile's, or null when it takes the wall chosen here), backend_here, broken}.
        #[arg(long)]
        json: bool,
    },
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
        ProfileCommand::List { json } => list(json),
        ProfileCommand::Show {
            name,
            rules,
            root,
            json,
        } => show(&name, &rules, &root, json),
    }
}

fn list(as_json: bool) -> u8 {
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
    let rows: Vec<ListRow> = names
        .into_iter()
        .map(|(name, kind)| list_row(name, kind))
        .collect();
    if as_json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                json!({
                    "name": r.name,
                    "source": r.kind,
                    "description": r.description,
                    "backend": r.backend,
                    "backend_here": r.here,
                    "broken": r.broken,
                })
            })
            .collect();
        println!("{}", runner_display::json_pretty(&out));
        return exit::OK;
    }
    for r in rows {
        let (name, kind) = (&r.name, &r.kind);
        match (&r.broken, &r.backend) {
            (Some(e), _) => println!("{name:<12} {kind:<9} (broken: {e})"),
            (None, Some(_)) => println!("{name:<12} {kind:<9} {}", r.description),
            (None, None) => {
                let here = match &r.here {
                    Some(b) => format!("here: {b}"),
                    None => "here: no wall available, so sessions refuse to start".into(),
                };
                println!("{name:<12} {kind:<9} {} ({here})", r.description)
            }
        }
    }
    exit::OK
}

/// One profile as `list` shows it, worked out once for the text and the JSON.
struct ListRow {
    name: String,
    kind: String,
    description: String,
    /// The profile's own backend; `None` when it takes the default wall.
    backend: Option<&'static str>,
    /// The wall a profile without a backend gets on this machine, if any.
    here: Option<&'static str>,
    broken: Option<String>,
}

fn list_row(name: String, kind: String) -> ListRow {
    match profile::load(&name) {
        Ok(p) => {
            let backend = p.sandbox.backend.map(|b| b.name());
            let here = match backend {
                Some(_) => None,
                None => runner_sandbox::choose::default_wall()
                    .ok()
                    .map(|c| c.backend.name()),
            };
            ListRow {
                name,
                kind,
                description: p.description,
                backend,
                here,
                broken: None,
            }
        }
        Err(e) => ListRow {
            name,
            kind,
            description: String::new(),
            backend: None,
            here: None,
            broken: Some(e.to_string()),
        },
    }
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
        println!("{}", runner_display::json_pretty(&out));
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
        println!("{}", runner_display::escape(&line));
    }
    exit::OK
}
