//! `runner changes [ID]`, `runner apply ID`, `runner discard ID`: reviewing what an agent
//! did in a copy workspace, and bringing it over (or not). The work is in
//! [`crate::workspace`].

use std::path::PathBuf;

use std::io::IsTerminal;

use clap::Args;

use super::exit;
use crate::display;
use crate::workspace::{self, Workspace};

#[derive(Debug, Args)]
pub struct ChangesArgs {
    /// The workspace (an id, or a unique prefix of one). Without it: the copies waiting
    /// for this worktree.
    id: Option<String>,
    /// The worktree whose copies are listed (default: the current directory).
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// JSON: the list `[{id, root, created, changed_files}]`, or one copy's changes
    /// `[{path, change}]`.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    id: String,
    /// Overwrite files that changed in the worktree since the copy was made.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
pub struct DiscardArgs {
    id: String,
}

pub fn changes(args: ChangesArgs) -> u8 {
    match &args.id {
        Some(id) => show(id, args.json),
        None => list(&args.root, args.json),
    }
}

fn list(root: &std::path::Path, json: bool) -> u8 {
    let root = match std::fs::canonicalize(root) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("runner: --root {}: {e}", root.display());
            return exit::USAGE;
        }
    };
    let waiting: Vec<Workspace> = workspace::list_all()
        .into_iter()
        .filter(|w| w.meta.source == root)
        .collect();
    let mut rows = Vec::new();
    for w in &waiting {
        let changed = w.changes().map(|c| c.len()).unwrap_or(0);
        rows.push(serde_json::json!({
            "id": w.meta.id,
            "root": w.meta.source,
            "created": w.meta.created,
            "changed_files": changed,
        }));
    }
    if json {
        println!("{}", display::json(&serde_json::Value::Array(rows)));
    } else if rows.is_empty() {
        println!("no workspaces wait for {}", display::shown(root.display()));
    } else {
        for r in rows {
            println!(
                "{}  {} file(s) changed  (runner changes {})",
                r["id"].as_str().unwrap_or_default(),
                r["changed_files"],
                r["id"].as_str().unwrap_or_default()
            );
        }
    }
    exit::OK
}

fn show(id: &str, json: bool) -> u8 {
    let ws = match Workspace::open(id) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("runner: {}", display::escape(&e));
            return exit::USAGE;
        }
    };
    let shown = if json {
        ws.changes()
            .map(|c| format!("{}\n", display::json(&c)).into_bytes())
    } else {
        ws.diff(crate::workspace::PatchFormat::Review)
            .map(|patch| for_a_terminal(patch, std::io::stdout().is_terminal()))
    };
    match shown {
        Ok(bytes) => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            if let Err(e) = out.write_all(&bytes).and_then(|()| out.flush()) {
                eprintln!("runner: cannot write the changes: {e}");
                return exit::FAILED;
            }
            exit::OK
        }
        Err(e) => {
            eprintln!("runner: {}", display::escape(&e));
            exit::FAILED
        }
    }
}

pub fn apply(args: ApplyArgs) -> u8 {
    let ws = match Workspace::open(&args.id) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("runner: {}", display::escape(&e));
            return exit::USAGE;
        }
    };
    let target = ws.meta.source.clone();
    match ws.apply(args.force) {
        Ok(list) => {
            println!(
                "applied {} change(s) to {}",
                list.len(),
                display::shown(target.display())
            );
            exit::OK
        }
        Err(e) => {
            // It names the files that conflict: the copy's names, which the agent chose.
            eprintln!("runner: {}", display::escape(&e));
            exit::FAILED
        }
    }
}

/// The review patch as it is written: on a terminal, every line with what could act on it
/// shown visibly (an added line's cursor-up and erase-line could otherwise hide it, or the
/// lines above it); piped, as it is, as `git diff` leaves a patch, so that it still applies.
/// The names in its headers are quoted either way ([`crate::workspace::diff`]).
fn for_a_terminal(patch: Vec<u8>, terminal: bool) -> Vec<u8> {
    if !terminal {
        return patch;
    }
    let text = String::from_utf8_lossy(&patch);
    display::escape(&text).into_owned().into_bytes()
}

pub fn discard(args: DiscardArgs) -> u8 {
    let discarded = Workspace::open(&args.id).and_then(|w| {
        w.not_in_use()?;
        w.discard()
    });
    match discarded {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("runner: {}", display::escape(&e));
            exit::FAILED
        }
    }
}

/// After a command that worked in a copy: keep it for review and say where it is.
pub fn report(workspace: Option<Workspace>) {
    let Some(mut ws) = workspace else { return };
    if let Err(e) = ws.finish() {
        eprintln!("runner: {}", display::escape(&e));
    }
    eprintln!("workspace: {}", ws.meta.id);
}
