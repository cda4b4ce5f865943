//! Which of a copy's changes its ignore rules leave out, so that `runner changes` and
//! `runner apply` show and bring over what the agent meant, not what running the tests
//! left behind (`__pycache__/`, `target/`, `.pytest_cache/`). `--include-ignored` shows
//! and applies them too, and the count of what was left out is always said.
//!
//! The rule: a change is left out only when its path did not exist in the checkout as it
//! was copied (an addition) and git would ignore it in the copy. A path the checkout had,
//! tracked or not, ignored or not, is never left out: its modification or deletion is
//! always shown and applied. So no rule can hide a change to a file the user has, and
//! a file tracked in spite of a rule that matches it (`git add -f`) is always seen.
//!
//! The rules are git's, in git's order of precedence: each `.gitignore` from the file's
//! own folder up to the copy's root (the deepest that matches decides), then
//! `.git/info/exclude`, then the user's global excludes file (`core.excludesFile`, else
//! `$XDG_CONFIG_HOME/git/ignore`). A folder that is ignored leaves out everything below it,
//! whatever a later `!` rule says, as git does. The `.gitignore` files are read from the
//! copy (a project the agent made there brings its own), the exclude file from the
//! checkout as it was copied (the agent's `.git` is never read). The copy's rules are the
//! agent's to write, and that is safe: leaving out only ever means not applying, so a rule
//! can keep the agent's own new files out of the checkout, never bring anything in.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::changes::Change;

/// A `.gitignore` longer than this is read only this far: the copy's files are the
/// agent's, and one of them must not make a review read without end.
const RULES_LIMIT: u64 = 1 << 20;

/// The ignore rules of one copy, each folder's `.gitignore` read once, when first needed.
pub struct Rules {
    work: PathBuf,
    exclude: Gitignore,
    global: Gitignore,
    folders: HashMap<PathBuf, Gitignore>,
}

impl Rules {
    /// The rules for the copy `work`, with the exclude file of the checkout as copied,
    /// `base`.
    pub fn new(work: &Path, base: &Path) -> Rules {
        let mut exclude = GitignoreBuilder::new(work);
        if let Some(file) = exclude_file(base) {
            // A missing or unreadable exclude file holds no rule, as for git.
            let _ = exclude.add(file);
        }
        let (global, _) = GitignoreBuilder::new(work).build_global();
        Rules {
            work: work.to_path_buf(),
            exclude: exclude.build().unwrap_or_else(|_| Gitignore::empty()),
            global,
            folders: HashMap::new(),
        }
    }

    /// Whether git ignores the path `rel` of the copy (a folder when `is_dir`): it, or one
    /// of the folders on the way to it.
    pub fn ignores(&mut self, rel: &Path, is_dir: bool) -> bool {
        let parts: Vec<_> = rel.components().collect();
        let mut path = PathBuf::new();
        for (i, part) in parts.iter().enumerate() {
            path.push(part);
            let last = i + 1 == parts.len();
            if self.decides(&path, is_dir || !last) {
                return true;
            }
        }
        false
    }

    /// Whether the rules ignore `rel` itself: the deepest `.gitignore` with a matching
    /// rule decides, then the exclude file, then the global one.
    fn decides(&mut self, rel: &Path, is_dir: bool) -> bool {
        let mut folder = rel.parent();
        while let Some(dir) = folder {
            let inside = rel.strip_prefix(dir).unwrap_or(rel);
            let m = self.folder(dir).matched(inside, is_dir);
            if !m.is_none() {
                return m.is_ignore();
            }
            folder = dir.parent();
        }
        for rules in [&self.exclude, &self.global] {
            let m = rules.matched(rel, is_dir);
            if !m.is_none() {
                return m.is_ignore();
            }
        }
        false
    }

    /// The `.gitignore` of the copy's folder `dir` (empty when it has none).
    fn folder(&mut self, dir: &Path) -> &Gitignore {
        let work = &self.work;
        self.folders
            .entry(dir.to_path_buf())
            .or_insert_with(|| read_gitignore(&work.join(dir)))
    }
}

/// The changes to show and apply, and how many were left out: with `include_ignored`,
/// all of them and none.
pub fn split(
    changes: Vec<Change>,
    work: &Path,
    base: &Path,
    include_ignored: bool,
) -> (Vec<Change>, usize) {
    if include_ignored || !changes.iter().any(|c| c.before.is_none()) {
        return (changes, 0);
    }
    let mut rules = Rules::new(work, base);
    let total = changes.len();
    let kept: Vec<Change> = changes
        .into_iter()
        .filter(|c| c.before.is_some() || !rules.ignores(&c.rel, false))
        .collect();
    let left_out = total - kept.len();
    (kept, left_out)
}

/// What a review tells the person about the files it left out (`None`: none were).
pub fn review_note(left_out: usize) -> Option<String> {
    Some(format!(
        "left out {} the worktree's ignore rules ignore (--include-ignored shows them)",
        files(left_out)?
    ))
}

/// What an apply tells the person about the files it left out (`None`: none were). They
/// go with the copy, which an apply removes.
pub fn note(left_out: usize) -> Option<String> {
    Some(format!(
        "left out {} the worktree's ignore rules ignore, discarded with the copy \
         (`runner apply --include-ignored` brings such files over)",
        files(left_out)?
    ))
}

/// `1 file`, `3 files`; `None` for none.
fn files(count: usize) -> Option<String> {
    match count {
        0 => None,
        1 => Some("1 file".into()),
        n => Some(format!("{n} files")),
    }
}

/// The folder's `.gitignore`, read without following a link and only while it is a
/// regular file (a pipe the agent put there would make the review wait for ever), up to
/// [`RULES_LIMIT`].
fn read_gitignore(dir: &Path) -> Gitignore {
    let path = dir.join(".gitignore");
    let mut builder = GitignoreBuilder::new(dir);
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path);
    let Ok(file) = opened else {
        return Gitignore::empty();
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Gitignore::empty();
    }
    let mut bytes = Vec::new();
    if file.take(RULES_LIMIT).read_to_end(&mut bytes).is_err() {
        return Gitignore::empty();
    }
    for line in String::from_utf8_lossy(&bytes).lines() {
        // A line git would not take (a broken glob) is skipped, as git skips it.
        let _ = builder.add_line(Some(path.clone()), line);
    }
    builder.build().unwrap_or_else(|_| Gitignore::empty())
}

/// `.git/info/exclude` of the checkout as copied: in its `.git` folder, or for a linked
/// worktree (a `.git` file) in the repository it names, whose common folder holds it.
fn exclude_file(base: &Path) -> Option<PathBuf> {
    let dot_git = base.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git).ok()?;
    let git_dir = if meta.is_dir() {
        dot_git
    } else if meta.is_file() {
        let text = std::fs::read_to_string(&dot_git).ok()?;
        let named = PathBuf::from(text.trim().strip_prefix("gitdir:")?.trim());
        let git_dir = if named.is_absolute() {
            named
        } else {
            base.join(named)
        };
        match std::fs::read_to_string(git_dir.join("commondir")) {
            Ok(common) => git_dir.join(common.trim()),
            Err(_) => git_dir,
        }
    } else {
        return None;
    };
    Some(git_dir.join("info").join("exclude"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// git's precedence: a deeper `.gitignore` over a shallower one, `.gitignore` over the
    /// exclude file; an ignored folder hides what is below it even against a `!` rule.
    #[test]
    fn rules_are_read_in_gits_order() {
        let tmp = tempfile::tempdir().unwrap();
        let (work, base) = (tmp.path().join("work"), tmp.path().join("base"));
        write(&work, ".gitignore", "*.log\n__pycache__/\nbuild\n");
        write(&work, "keep/.gitignore", "!*.log\n");
        write(&work, "build/.gitignore", "!*.o\n");
        write(&base, ".git/info/exclude", "secret.txt\n*.tmp\n");
        write(&work, "sub/.gitignore", "!x.tmp\n");
        let mut rules = Rules::new(&work, &base);
        let ignored = |rules: &mut Rules, p: &str| rules.ignores(Path::new(p), false);
        assert!(ignored(&mut rules, "a.log"));
        assert!(ignored(&mut rules, "deep/er/a.log"));
        assert!(!ignored(&mut rules, "keep/a.log"));
        assert!(ignored(&mut rules, "src/__pycache__/x.cpython-311.pyc"));
        assert!(!ignored(&mut rules, "__pycache__.py"));
        assert!(
            ignored(&mut rules, "build/a.o"),
            "an ignored folder's `!` is moot"
        );
        assert!(ignored(&mut rules, "secret.txt"));
        assert!(ignored(&mut rules, "sub/y.tmp"));
        assert!(!ignored(&mut rules, "sub/x.tmp"));
        assert!(!ignored(&mut rules, "x.py"));
    }

    /// A `.gitignore` that is a link or a pipe is not read: the review neither follows the
    /// agent's link out of the copy nor waits on its pipe.
    #[test]
    fn a_gitignore_that_is_a_link_or_a_pipe_holds_no_rule() {
        let tmp = tempfile::tempdir().unwrap();
        let (work, base) = (tmp.path().join("work"), tmp.path().join("base"));
        write(tmp.path(), "elsewhere", "*.py\n");
        std::fs::create_dir_all(work.join("fifo")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("elsewhere"), work.join(".gitignore")).unwrap();
        let fifo =
            std::ffi::CString::new(work.join("fifo/.gitignore").to_string_lossy().into_owned())
                .unwrap();
        // SAFETY: mkfifo on a path we own.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let mut rules = Rules::new(&work, &base);
        assert!(!rules.ignores(Path::new("x.py"), false));
        assert!(!rules.ignores(Path::new("fifo/x.py"), false));
    }

    /// Only additions are left out: a file the checkout had is shown whatever the rules say.
    #[test]
    fn only_new_files_are_left_out() {
        let tmp = tempfile::tempdir().unwrap();
        let (work, base) = (tmp.path().join("work"), tmp.path().join("base"));
        write(&base, ".gitignore", "*.pyc\n");
        write(&base, "old.pyc", "1");
        write(&base, "gone.pyc", "1");
        write(&work, ".gitignore", "*.pyc\n");
        write(&work, "old.pyc", "22");
        write(&work, "new.pyc", "1");
        write(&work, "x.py", "1");
        let all = crate::changes::between(&base, &work).unwrap();
        let names = |list: &[Change]| list.iter().map(|c| c.path.clone()).collect::<Vec<_>>();
        assert_eq!(names(&all), ["gone.pyc", "new.pyc", "old.pyc", "x.py"]);
        let (shown, left_out) = split(all.clone(), &work, &base, false);
        assert_eq!(names(&shown), ["gone.pyc", "old.pyc", "x.py"]);
        assert_eq!(left_out, 1);
        let (shown, left_out) = split(all, &work, &base, true);
        assert_eq!(shown.len(), 4);
        assert_eq!(left_out, 0);
    }
}
