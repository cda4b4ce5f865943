//! `runner permission learn`: the narrowest rules for what audit trails show, written to
//! stdout or, whole or not at all, to a file. The learning is `runner_learn`'s; this reads
//! the arguments, proves a boundary when one is named, and writes.

use std::path::PathBuf;

use clap::Args;

use super::super::exit;

#[derive(Debug, Args)]
pub struct LearnArgs {
    /// Audit trails (`--audit FILE`'s OCSF JSON lines), one or more.
    #[arg(required = true, value_name = "TRAIL")]
    trails: Vec<PathBuf>,
    /// Prove the learned rules within this boundary (a runner TOML config) before writing;
    /// refuse, with a counterexample per permission, when they reach beyond it.
    #[arg(long, value_name = "FILE")]
    boundary: Option<PathBuf>,
    /// Write the rules here (atomically) instead of to stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// The worktree file rules are taken against; default: the one the first trail's
    /// sandbox start names, else the current folder.
    #[arg(long)]
    root: Option<PathBuf>,
}

pub fn run(args: &LearnArgs) -> u8 {
    match learn(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("runner: {}", runner_display::shown(&e));
            match e {
                runner_learn::LearnError::OutsideBoundary { .. } => exit::FAILED,
                _ => exit::USAGE,
            }
        }
    }
}

fn learn(args: &LearnArgs) -> Result<u8, runner_learn::LearnError> {
    let observed = runner_learn::trail::read_all(&args.trails)?;
    let worktree = args
        .root
        .clone()
        .or_else(|| observed.worktree.clone())
        .unwrap_or_else(|| PathBuf::from("."));
    let worktree = std::path::absolute(&worktree).unwrap_or(worktree);
    let home = std::env::var("HOME").unwrap_or_default();
    let options = runner_learn::Options { worktree, home };
    let learned = runner_learn::learn(&observed, &options)?;
    if let Some(path) = &args.boundary {
        let boundary = runner_permission::boundary::load_unchecked(path, &options.home)
            .map_err(runner_learn::LearnError::Boundary)?;
        runner_learn::within(&learned, path, &boundary, &options.worktree)?;
    }
    for conflict in &learned.conflicts {
        eprintln!(
            "runner: not reproduced: {}",
            runner_display::escape(conflict)
        );
    }
    for (permission, subject, calls) in &learned.unsayable {
        eprintln!(
            "runner: not learned: {permission} {} ({calls} call{}): the rule language cannot say it literally, so the learned rules deny it",
            runner_display::escape(&format!("{subject:?}")),
            if *calls == 1 { "" } else { "s" }
        );
    }
    match &args.out {
        Some(path) => runner_learn::write_atomic(path, &learned.text)?,
        None => print!("{}", learned.text),
    }
    Ok(exit::OK)
}
