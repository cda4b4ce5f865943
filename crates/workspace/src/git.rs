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

/// The git work tree `path` lies in, if any: the nearest ancestor (itself included) with a
/// `.git` directory holding `HEAD`, or a `.git` file pointing at one (`gitdir: …`, as
/// worktrees and submodules have).
///
/// It looks rather than asks git: the question is put before anything runs, about a
/// folder that may be a stranger's, and git run there reads that folder's config. A
/// folder inside a repository's own `.git` is not in a work tree.
pub fn work_tree_of(path: &Path) -> Option<std::path::PathBuf> {
    let path = std::path::absolute(path).ok()?;
    if path.components().any(|c| c.as_os_str() == ".git") {
        return None;
    }
    path.ancestors()
        .find(|dir| {
            let dot_git = dir.join(".git");
            match std::fs::metadata(&dot_git) {
                Ok(m) if m.is_dir() => dot_git.join("HEAD").is_file(),
                Ok(m) if m.is_file() => {
                    std::fs::read(&dot_git).is_ok_and(|text| text.starts_with(b"gitdir:"))
                }
                _ => false,
            }
        })
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod work_tree_tests {
    use super::work_tree_of;

    #[test]
    fn a_folder_is_in_the_work_tree_of_its_nearest_repository() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("top");
        let deep = top.join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        assert_eq!(work_tree_of(&deep), None, "no repository anywhere above");
        std::fs::create_dir_all(top.join(".git")).unwrap();
        assert_eq!(
            work_tree_of(&deep),
            None,
            "an empty .git folder is no repository"
        );
        std::fs::write(top.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        assert_eq!(work_tree_of(&deep), Some(top.clone()));
        assert_eq!(work_tree_of(&top), Some(top.clone()));
        assert_eq!(
            work_tree_of(&top.join(".git")),
            None,
            "inside .git is no work tree"
        );
        // A linked work tree or submodule: `.git` is a file naming the real one.
        let linked = tmp.path().join("linked");
        std::fs::create_dir_all(&linked).unwrap();
        std::fs::write(linked.join(".git"), "gitdir: /elsewhere/.git/worktrees/x\n").unwrap();
        assert_eq!(work_tree_of(&linked), Some(linked.clone()));
        std::fs::write(linked.join(".git"), "not a pointer\n").unwrap();
        assert_eq!(work_tree_of(&linked), None);
    }
}
