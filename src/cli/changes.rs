//! `runner changes [ID]`, `runner apply ID`, `runner discard ID`: reviewing what an agent
//! did in a copy workspace, and bringing it over (or not). The work is in
//! [`crate::workspace`].

use std::path::PathBuf;

use clap::Args;

use super::exit;
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
        println!("{}", serde_json::Value::Array(rows));
    } else if rows.is_empty() {
        println!("no workspaces wait for {}", root.display());
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
            eprintln!("runner: {e}");
            return exit::USAGE;
        }
    };
    let shown = if json {
        ws.changes()
            .and_then(|c| serde_json::to_string(&c).map_err(|e| e.to_string()))
            .map(|text| format!("{text}\n").into_bytes())
    } else {
        ws.diff(crate::workspace::PatchFormat::Review)
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
            eprintln!("runner: {e}");
            exit::FAILED
        }
    }
}

pub fn apply(args: ApplyArgs) -> u8 {
    let ws = match Workspace::open(&args.id) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("runner: {e}");
            return exit::USAGE;
        }
    };
    let target = ws.meta.source.clone();
    match ws.apply(args.force) {
        Ok(list) => {
            println!("applied {} change(s) to {}", list.len(), target.display());
            exit::OK
        }
        Err(e) => {
            eprintln!("runner: {e}");
            exit::FAILED
        }
    }
}

pub fn discard(args: DiscardArgs) -> u8 {
    let discarded = Workspace::open(&args.id).and_then(|w| {
        w.not_in_use()?;
        w.discard()
    });
    match discarded {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("runner: {e}");
            exit::FAILED
        }
    }
}

/// After a command that worked in a copy: keep it for review and say where it is.
pub fn report(workspace: Option<Workspace>) {
    let Some(mut ws) = workspace else { return };
    if let Err(e) = ws.finish() {
        eprintln!("runner: {e}");
    }
    if let Some(note) = crate::workspace::disk::full_note(&ws.work()) {
        eprintln!("runner: workspace {}: {note}", ws.meta.id);
    }
    eprintln!("workspace: {}", ws.meta.id);
}
