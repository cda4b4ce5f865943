//! `runner changes [ID]`, `runner apply ID`, `runner discard ID`: reviewing what an agent
//! did in a copy workspace, and bringing it over (or not). The work is in
//! [`runner_workspace`].

use std::path::PathBuf;

use std::io::IsTerminal;

use clap::Args;

use super::exit;
use runner_workspace::Workspace;

#[derive(Debug, Args)]
pub struct ChangesArgs {
    /// The workspace (an id, or a unique prefix of one). Without it: the copies waiting
    /// for this worktree.
    id: Option<String>,
    /// The worktree whose copies are listed (default: the current directory).
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// JSON: the list `[{id, root, created, changed_files, left_out}]`, or one copy's
    /// `{id, changes: [{path, change}], left_out}` (`left_out`: how many files the ignore
    /// rules kept out).
    #[arg(long)]
    json: bool,
    /// Show the new files the worktree's ignore rules ignore too (`__pycache__/`,
    /// `target/`); without it they are left out and counted.
    #[arg(long)]
    include_ignored: bool,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The copy workspace: its id, or a unique prefix of it (see `runner changes`).
    id: String,
    /// Overwrite files that changed in the worktree since the copy was made.
    #[arg(long)]
    force: bool,
    /// Apply the new files the worktree's ignore rules ignore too; without it they stay
    /// out of the worktree (and go with the copy).
    #[arg(long)]
    include_ignored: bool,
}

#[derive(Debug, Args)]
pub struct DiscardArgs {
    /// The copy workspace: its id, or a unique prefix of it (see `runner changes`).
    id: String,
}

pub fn changes(args: ChangesArgs) -> u8 {
    match &args.id {
        Some(id) => show(id, args.json, args.include_ignored),
        None => list(&args.root, args.json, args.include_ignored),
    }
}

fn list(root: &std::path::Path, json: bool, include_ignored: bool) -> u8 {
    let root = match std::fs::canonicalize(root) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("runner: --root {}: {e}", root.display());
            return exit::USAGE;
        }
    };
    let waiting: Vec<Workspace> = runner_workspace::list_all()
        .into_iter()
        .filter(|w| w.meta.source == root)
        .collect();
    let mut rows = Vec::new();
    for w in &waiting {
        let (changed, left_out) = w
            .review(include_ignored)
            .map(|(c, left_out)| (c.len(), left_out))
            .unwrap_or((0, 0));
        rows.push(serde_json::json!({
            "id": w.meta.id,
            "root": w.meta.source,
            "created": w.meta.created,
            "changed_files": changed,
            "left_out": left_out,
        }));
    }
    if json {
        println!("{}", runner_display::json(&serde_json::Value::Array(rows)));
    } else if rows.is_empty() {
        println!(
            "no workspaces wait for {}",
            runner_display::shown(root.display())
        );
    } else {
        for r in rows {
            let left_out = match r["left_out"].as_u64().unwrap_or(0) {
                0 => String::new(),
                n => format!(", {n} left out by the ignore rules"),
            };
            println!(
                "{}  {} file(s) changed{left_out}  (runner changes {})",
                r["id"].as_str().unwrap_or_default(),
                r["changed_files"],
                r["id"].as_str().unwrap_or_default()
            );
        }
    }
    exit::OK
}

fn show(id: &str, json: bool, include_ignored: bool) -> u8 {
    let ws = match Workspace::open(id) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("runner: {}", runner_display::escape(&e.to_string()));
            return exit::USAGE;
        }
    };
    // Written as it is made: a copy's patch can be larger than memory.
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let shown = if json {
        ws.review(include_ignored).and_then(|(changes, left_out)| {
            let shown = serde_json::json!({
                "id": ws.meta.id,
                "changes": changes,
                "left_out": left_out,
            });
            writeln!(out, "{}", runner_display::json(&shown))
                .map_err(runner_workspace::Error::Output)?;
            Ok(left_out)
        })
    } else if std::io::stdout().is_terminal() {
        // On a terminal every line is shown escaped: a content line could otherwise move
        // the cursor over the lines above it. Piped, the patch is git's, raw.
        let mut escaped = EscapedLines::new(&mut out);
        ws.write_review(&mut escaped, include_ignored)
            .and_then(|left_out| {
                escaped.flush().map_err(runner_workspace::Error::Output)?;
                Ok(left_out)
            })
    } else {
        ws.write_review(&mut out, include_ignored)
    };
    let shown = shown.and_then(|left_out| {
        out.flush().map_err(runner_workspace::Error::Output)?;
        Ok(left_out)
    });
    match shown {
        Ok(left_out) => {
            // On stderr: the patch on stdout stays one `git apply` takes.
            if let Some(note) = runner_workspace::ignored::review_note(left_out) {
                eprintln!("runner: {note}");
            }
            exit::OK
        }
        Err(e) => {
            eprintln!("runner: {}", runner_display::escape(&e.to_string()));
            exit::FAILED
        }
    }
}

pub fn apply(args: ApplyArgs) -> u8 {
    let ws = match Workspace::open(&args.id) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("runner: {}", runner_display::escape(&e.to_string()));
            return exit::USAGE;
        }
    };
    let target = ws.meta.source.clone();
    // Ctrl-C, SIGTERM and SIGHUP wait until the apply is made or undone: while files are
    // staged one stops it (nothing applied), and the renames that make it are never cut.
    let held = HeldSignals::new();
    let applied = ws.apply(args.force, args.include_ignored, &|| held.pending());
    let code = match applied {
        Ok(applied) => {
            for note in &applied.notes {
                eprintln!("runner: {}", runner_display::escape(note));
            }
            if let Some(note) = runner_workspace::ignored::note(applied.left_out) {
                eprintln!("runner: {note}");
            }
            println!(
                "applied {} change(s) to {}",
                applied.changes.len(),
                runner_display::shown(target.display())
            );
            exit::OK
        }
        Err(e) => {
            // It names the files that conflict: the copy's names, which the agent chose.
            eprintln!("runner: {}", runner_display::escape(&e.to_string()));
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

/// The review patch as it is written: on a terminal, every line with what could act on it
/// shown visibly (an added line's cursor-up and erase-line could otherwise hide it, or the
/// lines above it); piped, as it is, as `git diff` leaves a patch, so that it still applies.
/// The names in its headers are quoted either way ([`runner_workspace::diff`]).
/// A writer that shows what passes through it escaped for a terminal, a line at a time
/// (a line is whole before it is escaped, so a character split across writes is kept).
struct EscapedLines<'a> {
    out: &'a mut dyn std::io::Write,
    line: Vec<u8>,
}

impl<'a> EscapedLines<'a> {
    fn new(out: &'a mut dyn std::io::Write) -> EscapedLines<'a> {
        EscapedLines {
            out,
            line: Vec::new(),
        }
    }

    fn emit(&mut self) -> std::io::Result<()> {
        let text = String::from_utf8_lossy(&self.line);
        self.out
            .write_all(runner_display::escape(&text).as_bytes())?;
        self.line.clear();
        Ok(())
    }
}

impl std::io::Write for EscapedLines<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for chunk in buf.split_inclusive(|b| *b == b'\n') {
            self.line.extend_from_slice(chunk);
            if chunk.ends_with(b"\n") {
                self.emit()?;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.line.is_empty() {
            self.emit()?;
        }
        self.out.flush()
    }
}

pub fn discard(args: DiscardArgs) -> u8 {
    // An id that names no workspace is a usage error (2), as for `changes` and `apply`; a
    // workspace that exists but cannot go is a failure (1).
    let ws = match Workspace::open(&args.id) {
        Ok(ws) => ws,
        Err(e) => {
            eprintln!("runner: {}", runner_display::escape(&e.to_string()));
            return exit::USAGE;
        }
    };
    match ws.not_in_use().and_then(|()| ws.discard()) {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("runner: {}", runner_display::escape(&e.to_string()));
            exit::FAILED
        }
    }
}

/// After a command that worked in a copy: keep it for review and say where it is, or,
/// when nothing in it changed, discard it and say so. Returns the id of the copy kept.
pub fn report(workspace: Option<Workspace>) -> Option<String> {
    let mut ws = workspace?;
    if ws.changed_nothing() {
        match ws.clone().discard() {
            Ok(()) => {
                eprintln!("runner: the copy has no changes; discarded it");
                return None;
            }
            // What is left of it is reported below, as a copy that waits.
            Err(e) => eprintln!("runner: {}", runner_display::escape(&e.to_string())),
        }
    }
    if let Err(e) = ws.finish() {
        eprintln!("runner: {}", runner_display::escape(&e.to_string()));
    }
    if let Some(note) = runner_workspace::disk::full_note(&ws.work()) {
        eprintln!("runner: workspace {}: {note}", ws.meta.id);
    }
    eprintln!("workspace: {}", ws.meta.id);
    Some(ws.meta.id)
}
