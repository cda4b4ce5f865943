//! How an attempt's workspace is filled: the task's repository at its commit.
//!
//! The copy is a full clone without hard links and without `--shared`: the worktree is
//! mounted writable into the sandbox, so a hard-linked object would let the agent change
//! the source repository, and an alternates file would point at a host path the sandbox
//! cannot see (git inside would then fail). A directory that is not a repository is copied
//! and committed once, so that every attempt has a base to diff against.
//!
//! The rest is [`Workspace`]'s: `base/` is copied from the filled `work/` before the agent
//! starts, and the patch is taken against that base's repository, not the agent's.

use std::path::Path;

use super::EvalError;
use super::tasks::looks_like_url;
use runner_workspace::Workspace;
use runner_workspace::git::{RunGit, git};

/// The attempt's own workspace under `parent`, with `repo` at `commit` (HEAD if none), and
/// the commit it starts from. `budget`: what commands may write beyond the clone
/// ([`runner_workspace::disk`]).
pub fn create(
    repo: &str,
    commit: Option<&str>,
    parent: &Path,
    name: &str,
    budget: Option<u64>,
) -> Result<(Workspace, String), EvalError> {
    Workspace::prepare(parent, name, repo, budget, |dest| {
        fill(repo, commit, dest)?;
        head_commit(dest)
    })
}

fn fill(repo: &str, commit: Option<&str>, dest: &Path) -> Result<(), EvalError> {
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
        // A commit from the task file must not read as an option. Refused here rather than
        // with `--end-of-options`, which the `git checkout` of Debian bookworm (2.39, in
        // runner's own image) takes for the commit and then fails.
        if target.starts_with('-') {
            return Err(EvalError::Task(format!("{target:?} is not a commit")));
        }
        Ok(
            git(Some(dest), &["checkout", "--quiet", "--detach", target])
                .run(&format!("check out {target} of {repo}"))?,
        )
    } else {
        if commit.is_some() {
            return Err(EvalError::Task(format!(
                "{repo} is not a git repository, so it has no commit to check out"
            )));
        }
        runner_workspace::copy_tree(Path::new(repo), dest, None)?;
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
        Ok(())
    }
}

/// The commit HEAD names, read from the files a fresh clone or commit leaves (a detached
/// HEAD holds it, a branch points at a loose ref); git itself only if they do not say.
fn head_commit(dest: &Path) -> Result<String, EvalError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use runner_workspace::{Kind, PatchFormat};

    #[test]
    fn a_plain_directory_becomes_a_repository_and_the_source_is_untouched() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a.txt"), "one\n").unwrap();
        std::os::unix::fs::symlink("a.txt", src.path().join("link")).unwrap();
        let out = tempfile::tempdir().unwrap();
        let (ws, base) = create(
            &src.path().display().to_string(),
            None,
            out.path(),
            "t",
            None,
        )
        .unwrap();
        let work = ws.work();
        assert_eq!(base.len(), 40);
        assert_eq!(ws.kind(), Kind::Owned);
        assert!(work.join("link").is_symlink());
        assert!(!src.path().join(".git").exists());
        std::fs::write(work.join("a.txt"), "two\n").unwrap();
        std::fs::write(work.join("new.txt"), "new\n").unwrap();
        let patch = String::from_utf8(ws.diff(PatchFormat::Git).unwrap()).unwrap();
        assert!(patch.contains("-one") && patch.contains("+two"), "{patch}");
        assert!(patch.contains("+new"), "{patch}");
        assert!(patch.contains("index "), "git's own format: {patch}");
        let review = String::from_utf8(ws.diff(PatchFormat::Review).unwrap()).unwrap();
        assert!(
            review.contains("+two") && !review.contains("index "),
            "{review}"
        );
        let changed: Vec<String> = ws.changes().unwrap().into_iter().map(|c| c.path).collect();
        assert_eq!(changed, ["a.txt", "new.txt"]);
        let folder = work.parent().unwrap().to_path_buf();
        ws.discard().unwrap();
        assert!(!folder.exists(), "the workspace goes with its attempt");
        assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
    }

    #[test]
    fn the_agents_own_git_cannot_hide_a_change() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a.txt"), "one\n").unwrap();
        let out = tempfile::tempdir().unwrap();
        let (ws, _) = create(
            &src.path().display().to_string(),
            None,
            out.path(),
            "t",
            None,
        )
        .unwrap();
        let work = ws.work();
        std::fs::write(work.join("a.txt"), "two\n").unwrap();
        // The agent commits its change and throws its history away.
        git(Some(&work), &["commit", "--quiet", "-am", "mine"])
            .run("commit")
            .unwrap();
        std::fs::remove_dir_all(work.join(".git")).unwrap();
        let patch = String::from_utf8(ws.diff(PatchFormat::Git).unwrap()).unwrap();
        assert!(patch.contains("-one") && patch.contains("+two"), "{patch}");
    }

    #[test]
    fn an_attempts_workspace_is_never_applied_and_a_failed_fill_leaves_nothing() {
        let out = tempfile::tempdir().unwrap();
        let (ws, ()) = Workspace::prepare(out.path(), "t", "/nowhere", None, |w| {
            std::fs::create_dir(w).map_err(EvalError::io("create", w))?;
            std::fs::write(w.join("a"), "1").map_err(EvalError::io("write", w))
        })
        .unwrap();
        std::fs::write(ws.work().join("a"), "2").unwrap();
        assert_eq!(ws.changes().unwrap().len(), 1);
        let no_git = ws.diff(PatchFormat::Git).unwrap_err();
        assert!(
            matches!(no_git, runner_workspace::Error::NotARepository(_)),
            "{no_git}"
        );
        let refused = ws.clone().apply(true, false, &|| false).unwrap_err();
        assert!(
            refused.to_string().contains("not applied anywhere"),
            "{refused}"
        );
        assert!(!Path::new("/nowhere").exists());
        ws.discard().unwrap();
        let failed = Workspace::prepare(out.path(), "t", "x", None, |_| {
            Err::<(), _>(EvalError::Task("no".to_string()))
        });
        assert!(matches!(failed, Err(EvalError::Task(m)) if m == "no"));
        assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
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
        let (ws, base) = create(
            &s.display().to_string(),
            Some(first.trim()),
            out.path(),
            "t",
            None,
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.work().join("f")).unwrap(),
            "v1\n"
        );
        assert_eq!(base, first.trim());
        assert!(!ws.work().join(".git/objects/info/alternates").exists());

        // A "commit" that would read as an option of `git checkout` is refused, not run.
        let refused = create(
            &s.display().to_string(),
            Some("--orphan=x"),
            out.path(),
            "u",
            None,
        );
        let Err(e) = refused else {
            panic!("an option taken for a commit")
        };
        assert!(
            matches!(&e, EvalError::Task(m) if m.contains("is not a commit")),
            "{e}"
        );
    }
}
