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
    // Written as it is made: a copy's patch can be larger than memory.
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let shown = if json {
        ws.changes().and_then(|c| {
            serde_json::to_writer(&mut out, &c)
                .map_err(|e| format!("cannot write the changes: {e}"))?;
            writeln!(out).map_err(|e| format!("cannot write the changes: {e}"))
        })
    } else {
        ws.write_review(&mut out)
    };
    let shown = shown.and_then(|()| {
        out.flush()
            .map_err(|e| format!("cannot write the changes: {e}"))
    });
    match shown {
        Ok(()) => exit::OK,
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
    // Ctrl-C, SIGTERM and SIGHUP wait until the apply is made or undone: while files are
    // staged one stops it (nothing applied), and the renames that make it are never cut.
    let held = HeldSignals::new();
    let applied = ws.apply(args.force, &|| held.pending());
    let code = match applied {
        Ok(applied) => {
            for note in &applied.notes {
                eprintln!("runner: {note}");
            }
            println!(
                "applied {} change(s) to {}",
                applied.changes.len(),
                target.display()
            );
            exit::OK
        }
        Err(e) => {
            eprintln!("runner: {e}");
            exit::FAILED
        }
    };
    // A signal held meanwhile now ends the process, as it would have.
    drop(held);
    code
}

/// The termination signals blocked on this (the only) thread while it lives, and put back
/// as they were when dropped.
struct HeldSignals {
    old: libc::sigset_t,
}

const HELD: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

impl HeldSignals {
    fn new() -> HeldSignals {
        // SAFETY: signal-set calls on local values; pthread_sigmask on this thread only.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in HELD {
                libc::sigaddset(&mut set, sig);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            HeldSignals { old }
        }
    }

    /// Whether one of them arrived.
    fn pending(&self) -> bool {
        // SAFETY: sigpending fills a local set; sigismember reads it.
        unsafe {
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut pending);
            HELD.iter().any(|s| libc::sigismember(&pending, *s) == 1)
        }
    }
}

impl Drop for HeldSignals {
    fn drop(&mut self) {
        // SAFETY: restores this thread's mask as it was.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
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
    eprintln!("workspace: {}", ws.meta.id);
}
