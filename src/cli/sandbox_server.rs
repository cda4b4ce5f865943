//! `runner sandbox-server`: the in-sandbox end of the sandbox protocol.

use clap::Args;

use crate::sandbox::server::{self, RootSpec};

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// A directory the server may reach: `PATH` (read-write) or `PATH:ro`. The first is the worktree.
    #[arg(long = "root", required = true)]
    roots: Vec<RootSpec>,
}

pub fn run(args: ServerArgs) -> u8 {
    match server::serve(&args.roots, std::io::stdin().lock(), std::io::stdout()) {
        Ok(()) => super::exit::OK,
        Err(e) => {
            eprintln!("runner sandbox-server: {e}");
            super::exit::FAILED
        }
    }
}
