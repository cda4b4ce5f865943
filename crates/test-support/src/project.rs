//! A project on disk and the real `runner` binary pointed at it: what the command-line
//! suites (agent, cli, hooks, lsp, mcp, user_tools) each used to write for themselves, in
//! one place, as ripgrep's `tests/util.rs` gives every test its `Dir` and `TestCommand`.
//!
//! Every folder lives under one temporary directory, canonicalized so that paths runner
//! prints compare equal to the test's. The data and config folders stand in for the user's
//! (`XDG_DATA_HOME`, `XDG_CONFIG_HOME`), so nothing of the machine's own configuration,
//! sessions or profiles leaks into what a test sees.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A worktree with, beside it, a folder the sandbox must not see and the user's data and
/// config folders; all removed when it is dropped.
pub struct Project {
    _tmp: tempfile::TempDir,
    /// The worktree runner is pointed at.
    pub root: PathBuf,
    /// Outside the worktree: stands for the host's home, or anything a wall must keep out.
    pub outside: PathBuf,
    /// `XDG_DATA_HOME` for every command of this project.
    pub data: PathBuf,
    /// `XDG_CONFIG_HOME`: the user's `runner/config.toml` goes in here.
    pub config: PathBuf,
}

impl Project {
    /// Empty folders: the worktree (named `worktree`), `outside`, `data` and `config`.
    pub fn new(worktree: &str) -> Project {
        let tmp = tempfile::tempdir().expect("a temporary folder");
        let base = std::fs::canonicalize(tmp.path()).expect("the temporary folder's path");
        let project = Project {
            root: base.join(worktree),
            outside: base.join("outside"),
            data: base.join("data"),
            config: base.join("config"),
            _tmp: tmp,
        };
        for dir in [
            &project.root,
            &project.outside,
            &project.data,
            &project.config,
        ] {
            std::fs::create_dir_all(dir).expect("a project folder");
        }
        project
    }

    /// Writes `text` to `rel` under the worktree, making its folders.
    pub fn file(&self, rel: &str, text: &str) -> PathBuf {
        write(&self.root.join(rel), text)
    }

    /// Writes the user's own `runner/config.toml` (in the config folder).
    pub fn user_config(&self, text: &str) -> PathBuf {
        write(&self.config.join("runner/config.toml"), text)
    }

    /// `runner`, run from the worktree with this project's data and config folders and no
    /// input; the caller adds arguments (and whatever else it needs) before running it.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(crate::runner_exe());
        cmd.current_dir(&self.root)
            .env("XDG_DATA_HOME", &self.data)
            .env("XDG_CONFIG_HOME", &self.config)
            .stdin(Stdio::null());
        cmd
    }

    /// `runner ARGS --root WORKTREE`, run to its end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command()
            .args(args)
            .arg("--root")
            .arg(&self.root)
            .output()
            .expect("runner runs")
    }
}

fn write(path: &Path, text: &str) -> PathBuf {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("the file's folder");
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path.to_path_buf()
}
