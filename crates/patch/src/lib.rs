//! `runner-patch`: the `apply_patch` tool's patch language, the Codex
//! `*** Begin Patch` format as OpenCode accepts it, and a pure planner that
//! turns parsed hunks into file changes.
//!
//! ```text
//! *** Begin Patch
//! *** Add File: <path>          following lines start with '+'
//! *** Delete File: <path>
//! *** Update File: <path>
//! *** Move to: <new path>       optional; must be the line right after Update
//! @@ [context line]             opens a chunk
//!  context line                 ' ': in both the old and new text
//! -removed line
//! +added line
//! *** End of File               optional; the chunk must match at end of file
//! *** End Patch
//! ```
//!
//! Why a crate of its own: this is pure text. It imports nothing of runner
//! (no sandbox, no permission gate, no async runtime, no dependency at all
//! beyond std), so the fuzzer links it alone rather than all of runner-tool
//! with its MCP and HTTP clients, and its scenario tests
//! (`tests/fixtures/scenarios/NNN_*`) run in a second without a sandbox. The
//! `apply_patch` tool in runner-tool resolves the paths, reads the files
//! through the wall, asks for permission and writes what this crate planned.
//!
//! Nothing here touches the file system:
//!
//! * [`parse_patch`] turns text into [`Hunk`]s ([`parser`]).
//! * [`plan`] reads the files it needs through a caller-supplied callback and
//!   returns every [`FileChange`] ([`apply`]). The caller writes them.
//!
//! Keeping the planner pure lets the tool verify the *whole* patch, show one
//! diff and ask for one permission before a single byte is written: a patch
//! whose third hunk is wrong leaves the tree exactly as it was, unlike
//! Codex's hunk-by-hunk application.

pub mod apply;
pub mod parser;
mod seek;

use std::fmt;

pub use apply::{derive_new_contents, plan};
pub use parser::parse_patch;

/// One file operation from the patch, in patch order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hunk {
    /// Create (or overwrite) a file. `contents` is the `+` lines joined with
    /// `\n`, without a final newline; [`plan`] adds it.
    Add { path: String, contents: String },
    /// Remove an existing file.
    Delete { path: String },
    /// Edit an existing file, optionally renaming it. An Update with a
    /// `move_path` and no chunks is a plain rename.
    Update {
        path: String,
        move_path: Option<String>,
        chunks: Vec<UpdateChunk>,
    },
}

impl Hunk {
    /// The path the hunk reads or creates (the source for a move).
    pub fn path(&self) -> &str {
        match self {
            Hunk::Add { path, .. } | Hunk::Delete { path } | Hunk::Update { path, .. } => path,
        }
    }
}

/// One `@@` section of an Update hunk.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpdateChunk {
    /// Text after `@@`, trimmed: a line (usually a `fn`/`class` header) that
    /// must be found before `old_lines`, to pick the right occurrence.
    pub change_context: Option<String>,
    /// Lines to find (context and `-` lines), without prefixes.
    pub old_lines: Vec<String>,
    /// Lines that replace them (context and `+` lines), without prefixes.
    pub new_lines: Vec<String>,
    /// The context lines, as `(index in old_lines, index in new_lines)`
    /// pairs in order. The planner writes a context line as the *file* spells
    /// it: the match may have been fuzzy (trailing whitespace, indentation,
    /// typographic punctuation), and only `-` and `+` lines are meant to
    /// change. A new line not listed here is written as the patch has it.
    pub context: Vec<(usize, usize)>,
    /// Set by `*** End of File`: `old_lines` should be the last lines of the
    /// file, so the end of the file is tried before scanning forward.
    pub is_end_of_file: bool,
}

/// A verified change, with the content needed both to write it and to show
/// a diff. [`plan`] returns them in patch order and the caller must apply
/// them in that order, because a later change may build on an earlier one
/// (two Update hunks for the same file, or an Add followed by an Update).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileChange {
    /// Write `content`, creating parent directories; overwrites an existing
    /// file (as Codex and OpenCode do).
    Add { path: String, content: String },
    /// Remove the file; `old_content` is for the diff.
    Delete { path: String, old_content: String },
    /// Write `new_content` to `move_path` if set (creating parent
    /// directories, overwriting it if it exists), then remove `path`;
    /// otherwise write `new_content` to `path`. `move_path` is never equal
    /// to `path`: a "move" onto itself is reported as a plain update, since
    /// write-then-remove would delete the file.
    Update {
        path: String,
        move_path: Option<String>,
        old_content: String,
        new_content: String,
    },
}

impl FileChange {
    /// The path whose content the change replaces or removes.
    pub fn path(&self) -> &str {
        match self {
            FileChange::Add { path, .. }
            | FileChange::Delete { path, .. }
            | FileChange::Update { path, .. } => path,
        }
    }
}

/// Why the planner's read callback could not return a file's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadFailure {
    /// Nothing exists at the path.
    Missing,
    /// The path is a directory.
    IsDirectory,
    /// Anything else (permissions, not UTF-8, ...), as a message.
    Other(String),
}

impl From<&std::io::Error> for ReadFailure {
    fn from(err: &std::io::Error) -> Self {
        match err.kind() {
            std::io::ErrorKind::NotFound => ReadFailure::Missing,
            std::io::ErrorKind::IsADirectory => ReadFailure::IsDirectory,
            _ => ReadFailure::Other(err.to_string()),
        }
    }
}

impl From<std::io::Error> for ReadFailure {
    fn from(err: std::io::Error) -> Self {
        ReadFailure::from(&err)
    }
}

/// Everything that can make a patch fail. The messages follow OpenCode's
/// wording where it has one, because models have been trained on them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchError {
    /// No line trims to `*** Begin Patch`, or none after it to `*** End Patch`.
    MissingMarkers,
    /// The markers enclose nothing but blank lines. OpenCode reports this
    /// without the "verification failed" prefix; see [`PatchError::tool_message`].
    EmptyPatch,
    /// The markers enclose text but no recognised hunk header.
    NoHunks,
    /// A header (`*** Add File:` and friends) has no path after it.
    EmptyPath { header: String },
    /// An `*** Update File:` without `*** Move to:` has no change lines; it
    /// would do nothing, which almost always means the model's lines lacked
    /// their ' ', '-' or '+' prefixes.
    EmptyUpdate { path: String },
    /// The file to update is missing, a directory, or unreadable.
    UpdateReadFailed {
        path: String,
        reason: Option<String>,
    },
    /// A chunk's `@@ context` line is not in the file (after the previous
    /// chunk).
    ContextNotFound { path: String, context: String },
    /// A chunk's old lines are not in the file (after the previous chunk).
    /// `lines` holds them joined with `\n`.
    ExpectedLinesNotFound { path: String, lines: String },
    /// The file to delete does not exist.
    DeleteMissing { path: String },
    /// The path to delete is a directory; only files are deleted.
    DeleteIsDirectory { path: String },
    /// The file to delete could not be read for another reason.
    DeleteReadFailed { path: String, reason: String },
    /// The path to add is an existing directory.
    AddIsDirectory { path: String },
    /// The destination of a `*** Move to:` is an existing directory.
    MoveDestinationIsDirectory { path: String, move_path: String },
}

impl PatchError {
    /// The full message the tool returns to the model. OpenCode rejects an
    /// empty patch with a bare "patch rejected: empty patch" and prefixes
    /// every other failure with "apply_patch verification failed: ".
    pub fn tool_message(&self) -> String {
        match self {
            PatchError::EmptyPatch => self.to_string(),
            _ => format!("apply_patch verification failed: {self}"),
        }
    }
}

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PatchError::MissingMarkers => {
                f.write_str("Invalid patch format: missing Begin/End markers")
            }
            PatchError::EmptyPatch => f.write_str("patch rejected: empty patch"),
            PatchError::NoHunks => f.write_str("no hunks found"),
            PatchError::EmptyPath { header } => {
                write!(f, "Invalid patch: missing file path after '{header}'")
            }
            PatchError::EmptyUpdate { path } => {
                write!(f, "Update file hunk for path '{path}' is empty")
            }
            PatchError::UpdateReadFailed { path, reason } => {
                write!(f, "Failed to read file to update: {path}")?;
                match reason {
                    Some(reason) => write!(f, " ({reason})"),
                    None => Ok(()),
                }
            }
            PatchError::ContextNotFound { path, context } => {
                write!(f, "Failed to find context '{context}' in {path}")
            }
            PatchError::ExpectedLinesNotFound { path, lines } => {
                write!(f, "Failed to find expected lines in {path}:\n{lines}")
            }
            PatchError::DeleteMissing { path } => {
                write!(f, "Failed to delete file {path}: file does not exist")
            }
            PatchError::DeleteIsDirectory { path } => {
                write!(f, "Failed to delete file {path}: path is a directory")
            }
            PatchError::DeleteReadFailed { path, reason } => {
                write!(f, "Failed to delete file {path}: {reason}")
            }
            PatchError::AddIsDirectory { path } => {
                write!(f, "Failed to add file {path}: path is a directory")
            }
            PatchError::MoveDestinationIsDirectory { path, move_path } => {
                write!(
                    f,
                    "Failed to move {path} to {move_path}: destination is a directory"
                )
            }
        }
    }
}

impl std::error::Error for PatchError {}
