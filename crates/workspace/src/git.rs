//! Host git, for the workspaces that start from a repository of their own (an evaluation
//! attempt's clone): making that base, and taking the patch a harness can `git apply`.
//!
//! Git here reads the work tree only as data. Its configuration is none of the machine's
//! and none of the agent's, hooks are off, and the repository and index are the base's
//! copy, which the sandbox never sees: the agent's own `.git` (replace refs, index bits, a
//! deleted base object) cannot hide a change.

use std::path::Path;
use std::process::Command;

use crate::Error;

/// Host git with nothing from the machine's configuration and an identity for the
/// commits it makes.
pub fn git(cwd: Option<&Path>, args: &[&str]) -> Command {
    let mut c = Command::new("git");
    if let Some(d) = cwd {
        c.arg("-C").arg(d);
    }
    c.args([
        "-c",
        "user.name=runner",
        "-c",
        "user.email=runner@localhost",
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "advice.detachedHead=false",
        // Read even with no global config file: the user's own ignore and attributes
        // files would leave files out of a patch on one machine and not another.
        "-c",
        "core.excludesFile=/dev/null",
        "-c",
        "core.attributesFile=/dev/null",
    ])
    .args(args)
    .env("GIT_CONFIG_NOSYSTEM", "1")
    .env("GIT_CONFIG_GLOBAL", "/dev/null")
    .env("GIT_TERMINAL_PROMPT", "0")
    .stdin(std::process::Stdio::null());
    c
}

/// Runs a git command; `what` says what it is for (after "cannot ", in an error).
pub trait RunGit {
    fn run(&mut self, what: &str) -> Result<(), Error>;
    fn output_text(&mut self, what: &str) -> Result<String, Error>;
}

impl RunGit for Command {
    fn run(&mut self, what: &str) -> Result<(), Error> {
        self.output_text(what).map(drop)
    }

    fn output_text(&mut self, what: &str) -> Result<String, Error> {
        let out = self.output().map_err(|e| Error::Program {
            what: what.to_string(),
            detail: format!("git did not start ({e}); is git installed?"),
        })?;
        if !out.status.success() {
            return Err(Error::program(what, &out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// `work`'s changes since `base_git`'s HEAD, as a binary-safe patch: every file git does
/// not ignore, staged into `index` (a file of ours, removed before and after). No diff
/// driver or text conversion runs.
pub(crate) fn patch(base_git: &Path, work: &Path, index: &Path) -> Result<Vec<u8>, Error> {
    staged_diff(base_git, work, index, std::process::Stdio::piped()).map(|o| o.stdout)
}

/// [`patch`], written into `out` as git makes it: the patch of an agent that wrote a
/// gigabyte is never held in runner's memory (git's own output goes straight to the file).
pub(crate) fn patch_into(
    base_git: &Path,
    work: &Path,
    index: &Path,
    out: std::fs::File,
) -> Result<(), Error> {
    staged_diff(base_git, work, index, out.into()).map(drop)
}

/// Stages `work` into `index` and diffs it against HEAD, git's output going to `stdout`.
fn staged_diff(
    base_git: &Path,
    work: &Path,
    index: &Path,
    stdout: std::process::Stdio,
) -> Result<std::process::Output, Error> {
    let _ = std::fs::remove_file(index);
    let tree = |args: &[&str]| {
        let mut c = git(None, &[]);
        c.arg("--git-dir")
            .arg(base_git)
            .arg("--work-tree")
            .arg(work)
            .args(args)
            .env("GIT_INDEX_FILE", index)
            .env("GIT_NO_REPLACE_OBJECTS", "1");
        c
    };
    let staged = tree(&["add", "-A", "--", "."]).run("stage the agent's changes");
    let diffed = staged.and_then(|()| {
        tree(&[
            "diff",
            "--cached",
            "--binary",
            "--no-textconv",
            "--no-ext-diff",
            "--no-color",
            "HEAD",
        ])
        .stdout(stdout)
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| Error::Program {
            what: "diff the worktree".into(),
            detail: e.to_string(),
        })
    });
    let _ = std::fs::remove_file(index);
    let diffed = diffed?;
    if !diffed.status.success() {
        return Err(Error::program("diff the worktree", &diffed.stderr));
    }
    Ok(diffed)
}

impl crate::Workspace {
    /// The changes as git's patch ([`crate::PatchFormat::Git`]), written into `out` as it
    /// is made: an evaluation keeps a patch of any size on disk, not in memory.
    pub fn write_git_patch(&self, out: std::fs::File) -> Result<(), Error> {
        self.on_host()?;
        let base_git = self.base().join(".git");
        // The base's own repository only, as for `diff`.
        if !std::fs::symlink_metadata(&base_git).is_ok_and(|m| m.is_dir()) {
            return Err(Error::NotARepository(self.base()));
        }
        patch_into(&base_git, &self.work(), &self.dir.join("git-index"), out)
    }
}
