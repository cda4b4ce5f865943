//! `runner sessions …`: the recorded sessions. `list` (newest first), `show` (a readable
//! transcript), `export` (the replay file `--model replay/FILE` plays back), `audit` (the
//! session's decisions as OCSF JSON lines, as `--audit FILE` has them).

use clap::Subcommand;
use serde_json::json;

use super::exit;
use runner_agent::record::{self, Loaded, Record};
use runner_llm::Message;

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Every recorded session, newest first.
    List {
        /// One JSON array of the sessions instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// A session as a readable transcript.
    Show {
        /// The session's id, or a unique prefix of it (see `sessions list`).
        id: String,
    },
    /// A session's model turns as a replay file (to stdout).
    Export {
        /// The session's id, or a unique prefix of it (see `sessions list`).
        id: String,
    },
    /// A session's audit trail: every decision it made (permissions with their deciding
    /// rule, connections, inspected requests, secrets, the sandbox's start and end), one
    /// OCSF JSON line each, as `--audit FILE` has them. See docs/AUDIT.md.
    Audit {
        /// The session's id, or a unique prefix of it (see `sessions list`).
        id: String,
    },
}

pub fn run(cmd: SessionsCommand) -> u8 {
    let dir = record::sessions_dir();
    match cmd {
        SessionsCommand::List { json } => {
            let mut rows = Vec::new();
            for path in record::list(&dir) {
                let Ok(l) = Loaded::read(&path) else { continue };
                let (root, model, agent, created) = match l.header() {
                    Some(Record::Session {
                        root,
                        model,
                        agent,
                        created_ms,
                        ..
                    }) => (root.clone(), model.clone(), agent.clone(), *created_ms),
                    _ => continue,
                };
                let id = l.id();
                let end = l.records.iter().rev().find_map(|r| match r {
                    Record::End {
                        reason,
                        session,
                        steps,
                        ..
                    } if *session == id => Some((reason.clone(), *steps)),
                    _ => None,
                });
                let prompt = l.records.iter().find_map(|r| match r {
                    Record::Message {
                        message: Message::User { text },
                        session,
                    } if *session == id => Some(text.clone()),
                    _ => None,
                });
                rows.push(json!({
                    "id": id, "root": root, "model": model, "agent": agent, "created_ms": created,
                    "end": end.as_ref().map(|e| e.0.clone()), "steps": end.map(|e| e.1),
                    "prompt": prompt,
                }));
            }
            if json {
                println!("{}", runner_display::json_pretty(&rows));
            } else if rows.is_empty() {
                println!("no sessions in {}", runner_display::shown(dir.display()));
            } else {
                for r in rows {
                    let prompt: String = r["prompt"]
                        .as_str()
                        .unwrap_or("")
                        .chars()
                        .take(60)
                        .collect();
                    // Every field was read from a session file, the prompt the model's
                    // task, so the line is escaped whole.
                    let line = format!(
                        "{}  {:<10} {:<28} {}  {}",
                        r["id"].as_str().unwrap_or(""),
                        r["end"].as_str().unwrap_or("(running or killed)"),
                        r["model"].as_str().unwrap_or(""),
                        r["root"].as_str().unwrap_or(""),
                        prompt.replace('\n', " ")
                    );
                    println!("{}", runner_display::escape(&line));
                }
            }
            exit::OK
        }
        SessionsCommand::Show { id } => match load(&dir, &id) {
            Ok(l) => {
                // What the model said and every tool's output, escaped for the terminal
                // (`export` is the exact record).
                let text = runner_agent::transcript::transcript(&l);
                print!("{}", runner_display::escape(&text));
                exit::OK
            }
            Err(code) => code,
        },
        SessionsCommand::Export { id } => match load(&dir, &id) {
            Ok(l) => {
                print!("{}", l.export());
                exit::OK
            }
            Err(code) => code,
        },
        SessionsCommand::Audit { id } => audit(&dir, &id),
    }
}

/// Prints the trail the session kept ([`runner_agent::audit::trail_of`]). Each line is parsed and written again
/// as compact JSON, so what reaches the terminal has every control character escaped
/// whatever the file holds; a line that does not parse (cut by a kill) is skipped and
/// counted on stderr.
fn audit(dir: &std::path::Path, id: &str) -> u8 {
    let session = match record::find(dir, id) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("runner: {}", runner_display::escape(&e.to_string()));
            return exit::USAGE;
        }
    };
    let stem = session
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let trail = runner_agent::audit::trail_of(dir, &stem);
    let text = match std::fs::read_to_string(&trail) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "runner: session {} has no audit trail ({} is not there: sessions recorded before the trail existed have none)",
                runner_display::escape(id),
                runner_display::shown(trail.display())
            );
            return exit::FAILED;
        }
        Err(e) => {
            eprintln!(
                "runner: cannot read {}: {e}",
                runner_display::shown(trail.display())
            );
            return exit::FAILED;
        }
    };
    let mut skipped = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(v) => println!("{v}"),
            Err(_) => skipped += 1,
        }
    }
    if skipped > 0 {
        eprintln!(
            "runner: skipped {skipped} lines of {} that are not JSON (cut by a kill?)",
            runner_display::shown(trail.display())
        );
    }
    exit::OK
}

fn load(dir: &std::path::Path, id: &str) -> Result<Loaded, u8> {
    let path = record::find(dir, id).map_err(|e| {
        eprintln!("runner: {}", runner_display::escape(&e.to_string()));
        exit::USAGE
    })?;
    Loaded::read(&path).map_err(|e| {
        eprintln!("runner: cannot read {}: {e}", path.display());
        exit::FAILED
    })
}
