//! A fresh, private copy of a task's repository for one attempt.
//!
//! The copy is a full clone without hard links and without `--shared`: the worktree is
//! mounted writable into the sandbox, so a hard-linked object would let the agent change
//! the source repository, and an alternates file would point at a host path the sandbox
//! cannot see (git inside would then fail). A directory that is not a repository is copied
//! and committed once, so that every attempt has a base to diff against.
//!
//! Once the agent has worked in the copy, its `.git` is the agent's: the diff is then taken
//! with a bare copy made before (our config, our objects, our index) and the worktree
//! read as plain files.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::tasks::looks_like_url;

pub struct Worktree {
    path: PathBuf,
    /// A bare copy of the untouched worktree's repository, outside the sandbox's reach:
    /// the diff is taken against it, not against the `.git` the agent could rewrite
    /// (replace refs, index bits, a deleted base object).
    base_git: PathBuf,
    /// The commit the attempt started from.
    pub base: String,
}

impl Worktree {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where this attempt's full tool outputs are saved: beside the worktree, readable by
    /// its sandbox, and gone with it, so no other attempt sees them.
    pub fn outputs(&self) -> PathBuf {
        sibling(&self.path, "outputs")
    }

    /// What taking the diff needs, to take it off the async threads.
    pub fn differ(&self) -> Differ {
        Differ {
            path: self.path.clone(),
            base_git: self.base_git.clone(),
            base: self.base.clone(),
        }
    }
}

pub struct Differ {
    path: PathBuf,
    base_git: PathBuf,
    base: String,
}

impl Differ {
    /// The agent's changes since the base commit, as a binary-safe patch. Host git reads
    /// the worktree only as data: the repository, its config and its index are ours, and
    /// no diff driver or text conversion runs.
    pub fn diff(&self) -> Result<Vec<u8>, String> {
        let index = self.base_git.with_extension("index");
        let _ = std::fs::remove_file(&index);
        let tree = |args: &[&str]| {
            let mut c = git(None, &[]);
            c.arg("--git-dir")
                .arg(&self.base_git)
                .arg("--work-tree")
                .arg(&self.path)
                .args(args)
                .env("GIT_INDEX_FILE", &index)
                .env("GIT_NO_REPLACE_OBJECTS", "1");
            c
        };
        tree(&["add", "-A", "--", "."]).run("stage the agent's changes")?;
        let patch = tree(&[
            "diff",
            "--cached",
            "--binary",
            "--no-textconv",
            "--no-ext-diff",
            "--no-color",
            &self.base,
        ])
        .output()
        .map_err(|e| format!("cannot diff the worktree: {e}"))?;
        let _ = std::fs::remove_file(&index);
        if !patch.status.success() {
            return Err(format!(
                "cannot diff the worktree: {}",
                String::from_utf8_lossy(&patch.stderr).trim()
            ));
        }
        Ok(patch.stdout)
    }
}

impl Drop for Worktree {
    fn drop(&mut self) {
        remove_tree(&self.path);
        remove_tree(&self.base_git);
        remove_tree(&self.outputs());
    }
}

/// `NAME.SUFFIX` beside `path`. Not `with_extension`: a task id may hold dots, and
/// `t.v2-1` and `t.v2-2` must not share a sibling.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{name}.{suffix}"))
}

pub use crate::workspace::remove_tree;

/// Clones (or copies) `repo` at `commit` into a new directory under `parent`.
pub fn create(
    repo: &str,
    commit: Option<&str>,
    parent: &Path,
    name: &str,
) -> Result<Worktree, String> {
    std::fs::create_dir_all(parent)
        .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    let dir = tempfile::Builder::new()
        .prefix(&format!("{name}-"))
        .tempdir_in(parent)
        .map_err(|e| format!("cannot create a worktree in {}: {e}", parent.display()))?;
    let dest = dir.path();
    let is_git = looks_like_url(repo) || Path::new(repo).join(".git").exists();
    if is_git {
        git(
            None,
            &[
                "clone",
                "--quiet",
                "--no-hardlinks",
                "--no-checkout",
                "--",
                repo,
            ],
        )
        .arg(dest)
        .run(&format!("clone {repo}"))?;
        let target = commit.unwrap_or("HEAD");
        git(
            Some(dest),
            &[
                "checkout",
                "--quiet",
                "--detach",
                "--end-of-options",
                target,
            ],
        )
        .run(&format!("check out {target} of {repo}"))?;
    } else {
        if commit.is_some() {
            return Err(format!(
                "{repo} is not a git repository, so it has no commit to check out"
            ));
        }
        crate::workspace::copy_tree(Path::new(repo), dest, None)?;
        git(Some(dest), &["init", "--quiet"]).run("git init")?;
        git(Some(dest), &["add", "-A"]).run("git add")?;
        git(
            Some(dest),
            &[
                "commit",
                "--quiet",
                "--no-verify",
                "--allow-empty",
                "-m",
                "task base",
            ],
        )
        .run("commit the task's files")?;
    }
    let base = head_commit(dest)?;
    // A plain copy of the fresh `.git` (no git process: this runs for every attempt).
    let base_git = sibling(dest, "base.git");
    std::fs::create_dir(&base_git)
        .map_err(|e| format!("cannot create {}: {e}", base_git.display()))?;
    crate::workspace::copy_tree(&dest.join(".git"), &base_git, None)?;
    Ok(Worktree {
        path: dir.keep(),
        base_git,
        base,
    })
}

/// The commit HEAD names, read from the files a fresh clone or commit leaves (a detached
/// HEAD holds it, a branch points at a loose ref); git itself only if they do not say.
fn head_commit(dest: &Path) -> Result<String, String> {
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .ok()
            .map(|t| t.trim().to_string())
    };
    let is_commit = |t: &String| t.len() == 40 && t.bytes().all(|b| b.is_ascii_hexdigit());
    let git_dir = dest.join(".git");
    let from_files =
        read(&git_dir.join("HEAD")).and_then(|head| match head.strip_prefix("ref: ") {
            Some(r) => read(&git_dir.join(r)),
            None => Some(head),
        });
    match from_files.filter(is_commit) {
        Some(commit) => Ok(commit),
        None => Ok(git(Some(dest), &["rev-parse", "HEAD"])
            .output_text("read HEAD")?
            .trim()
            .to_string()),
    }
}

/// Host git with nothing from the machine's configuration and an identity for the base
/// commit.
fn git(cwd: Option<&Path>, args: &[&str]) -> Command {
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
    ])
    .args(args)
    .env("GIT_CONFIG_NOSYSTEM", "1")
    .env("GIT_CONFIG_GLOBAL", "/dev/null")
    .env("GIT_TERMINAL_PROMPT", "0")
    .stdin(std::process::Stdio::null());
    c
}

trait RunGit {
    fn run(&mut self, what: &str) -> Result<(), String>;
    fn output_text(&mut self, what: &str) -> Result<String, String>;
}

impl RunGit for Command {
    fn run(&mut self, what: &str) -> Result<(), String> {
        self.output_text(what).map(drop)
    }

    fn output_text(&mut self, what: &str) -> Result<String, String> {
        let out = self
            .output()
            .map_err(|e| format!("cannot {what}: git did not start ({e}); is git installed?"))?;
        if !out.status.success() {
            return Err(format!(
                "cannot {what}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_directory_becomes_a_repository_and_the_source_is_untouched() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a.txt"), "one\n").unwrap();
        std::os::unix::fs::symlink("a.txt", src.path().join("link")).unwrap();
        let out = tempfile::tempdir().unwrap();
        let wt = create(&src.path().display().to_string(), None, out.path(), "t").unwrap();
        assert_eq!(wt.base.len(), 40);
        assert!(wt.path().join("link").is_symlink());
        assert!(!src.path().join(".git").exists());
        std::fs::write(wt.path().join("a.txt"), "two\n").unwrap();
        std::fs::write(wt.path().join("new.txt"), "new\n").unwrap();
        let patch = String::from_utf8(wt.differ().diff().unwrap()).unwrap();
        assert!(patch.contains("-one") && patch.contains("+two"), "{patch}");
        assert!(patch.contains("+new"), "{patch}");
        let path = wt.path().to_path_buf();
        drop(wt);
        assert!(!path.exists(), "the worktree goes with its attempt");
    }

    #[test]
    fn a_repository_is_cloned_at_the_commit_without_links_to_the_source() {
        let src = tempfile::tempdir().unwrap();
        let s = src.path();
        git(Some(s), &["init", "--quiet"]).run("init").unwrap();
        std::fs::write(s.join("f"), "v1\n").unwrap();
        git(Some(s), &["add", "-A"]).run("add").unwrap();
        git(Some(s), &["commit", "--quiet", "-m", "1"])
            .run("c1")
            .unwrap();
        let first = git(Some(s), &["rev-parse", "HEAD"])
            .output_text("head")
            .unwrap();
        std::fs::write(s.join("f"), "v2\n").unwrap();
        git(Some(s), &["commit", "--quiet", "-am", "2"])
            .run("c2")
            .unwrap();
        let out = tempfile::tempdir().unwrap();
        let wt = create(
            &s.display().to_string(),
            Some(first.trim()),
            out.path(),
            "t",
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(wt.path().join("f")).unwrap(),
            "v1\n"
        );
        assert_eq!(wt.base, first.trim());
        assert!(!wt.path().join(".git/objects/info/alternates").exists());
    }
}
