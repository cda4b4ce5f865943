//! Why a workspace could not be made, read, applied or removed.
//!
//! One error for the crate, as ripgrep's `ignore::Error::WithPath` does it: each one names
//! the file, program or workspace it is about, and where the person can do something about
//! it (wait for a run, pass `--force`, give more of an id), the message says what.

use std::path::PathBuf;

use crate::apply::Refused;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or folder could not be read, made, written or removed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A program the work is handed to (`cp`, `git`, `mkfs.ext4`, `mount`) failed or did
    /// not start; `detail` is what it said.
    #[error("cannot {what}: {detail}")]
    Program { what: String, detail: String },
    /// The machine gives a copy no disk budget (not root, no `mkfs.ext4`).
    #[error("{0}")]
    NoBudget(&'static str),
    /// A budgeted copy's file system is not mounted and could not be mounted again.
    #[error("{source}; the copy is in that image, so it cannot be read until it is mounted (as root) on {}", work.display())]
    Unmounted {
        #[source]
        source: Box<Error>,
        work: PathBuf,
    },
    /// No workspace has this id (or prefix).
    #[error("no workspace {0}; `runner changes` lists the ones waiting for this worktree")]
    NotFound(String),
    /// More than one workspace starts with this prefix.
    #[error("{count} workspaces start with {prefix}; give more of the id")]
    Ambiguous { prefix: String, count: usize },
    /// What needs both trees on the host, asked of a workspace in a task container.
    #[error("workspace {0} lives in a task container: its changes are read from there")]
    InImage(String),
    /// A git patch of a base that has no repository of its own.
    #[error(
        "{} is not a git repository of its own, so there is no git patch of it",
        .0.display()
    )]
    NotARepository(PathBuf),
    /// An evaluation attempt's workspace, asked to be applied.
    #[error("workspace {0} belongs to one run (an evaluation attempt) and is not applied anywhere")]
    Owned(String),
    /// The run that made the copy still works in it.
    #[error("workspace {id} is still in use by runner process {pid}; wait for it to end")]
    InUse { id: String, pid: i32 },
    /// Files of the checkout changed since the copy was made.
    #[error(
        "not applied: these files changed in {} since the copy was made: {}; look at them, then `runner apply {id} --force` to overwrite them",
        checkout.display(),
        files.join(", ")
    )]
    Conflicts {
        checkout: PathBuf,
        files: Vec<String>,
        id: String,
    },
    /// An apply refused or undone; the message says what is where.
    #[error(transparent)]
    Apply(Refused),
    /// A snapshot of a task container's worktree could not be read.
    #[error("cannot read the snapshot: {0}")]
    SnapshotRead(#[source] std::io::Error),
    /// A file in a snapshot could not be read.
    #[error("cannot read {path} from the snapshot: {source}")]
    SnapshotEntry {
        path: String,
        source: std::io::Error,
    },
    /// No snapshot of a task container's worktree could be taken; the message says why.
    #[error("{0}")]
    NoSnapshot(String),
    /// The review patch could not be written out.
    #[error("cannot write the changes: {0}")]
    Output(#[source] std::io::Error),
    /// A worker thread (a copy, a snapshot being read) panicked.
    #[error("{0} panicked")]
    Panicked(&'static str),
}

impl Error {
    /// `map_err(Error::io("create", &dir))`: the action and the path, for an `io::Error`.
    pub fn io(
        action: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.to_path_buf();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    }

    /// What a program printed on its standard error, for [`Error::Program`].
    pub(crate) fn program(what: impl Into<String>, stderr: &[u8]) -> Error {
        Error::Program {
            what: what.into(),
            detail: String::from_utf8_lossy(stderr).trim().to_string(),
        }
    }
}
