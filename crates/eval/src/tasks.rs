//! Task sets in runner's own format: JSON lines, one task a line,
//! `{id, instruction, repo, commit?, setup?, verify, tests_dir?, image?, timeouts?}`.
//!
//! A line that does not describe a task is not fatal: it becomes a task that fails with
//! `infra_error` and the reason, so one typo costs one task, not the run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::EvalError;
use super::fields::{sanitize, seconds, valid_id};

/// One task, as the task set describes it.
#[derive(Debug, Clone)]
pub struct Task {
    /// Unique within the task set; names the task's folder in the output.
    pub id: String,
    pub instruction: String,
    /// A local directory (git or not) or a git URL; never changed.
    pub repo: String,
    /// What to check out; default the repository's HEAD.
    pub commit: Option<String>,
    /// Run in the sandbox before the agent (install dependencies, build).
    pub setup: Option<String>,
    /// Run in a fresh sandbox after the agent; exit 0 means resolved.
    pub verify: String,
    /// Files hidden from the agent and copied into the worktree only for `verify`.
    pub tests_dir: Option<PathBuf>,
    /// The sandbox image, instead of the profile's.
    pub image: Option<String>,
    pub timeouts: Timeouts,
}

/// Per-phase limits; the flags' multiplier applies on top.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeouts {
    pub setup: Duration,
    pub agent: Duration,
    pub verify: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            setup: Duration::from_secs(600),
            agent: Duration::from_secs(1800),
            verify: Duration::from_secs(600),
        }
    }
}

impl Timeouts {
    pub fn scaled(self, factor: f64) -> Timeouts {
        let f = if factor.is_finite() {
            factor.max(0.01)
        } else {
            1.0
        };
        let scale = |d: Duration| seconds(d.as_secs_f64() * f).unwrap_or(d);
        Timeouts {
            setup: scale(self.setup),
            agent: scale(self.agent),
            verify: scale(self.verify),
        }
    }
}

/// A task, or why its description could not be used.
#[derive(Debug, Clone)]
pub enum Loaded {
    Task(Box<Task>),
    /// A Harbor task folder.
    Harbor(Box<super::harbor::HarborTask>),
    Broken(Problem),
}

impl Loaded {
    pub fn id(&self) -> &str {
        match self {
            Loaded::Task(t) => &t.id,
            Loaded::Harbor(t) => &t.id,
            Loaded::Broken(p) => &p.id,
        }
    }
}

/// Why a task of a set cannot run, and where in the set the cause is: the person who
/// wrote the set fixes it there, so the file and line travel with the words to the
/// terminal, the `--json` events and the task's `result.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The task's id, or a stand-in (`line-3`) when its line names none.
    pub id: String,
    /// The task file (JSON lines), or the task's folder or file in it.
    pub file: PathBuf,
    /// 1-based, where the file has lines and the problem is on one.
    pub line: Option<usize>,
    pub message: String,
}

impl Problem {
    /// `file:line: message`, the form editors and terminals jump to.
    pub fn located(&self) -> String {
        match self.line {
            Some(n) => format!("{}:{n}: {}", self.file.display(), self.message),
            None => format!("{}: {}", self.file.display(), self.message),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: String,
    instruction: String,
    repo: String,
    commit: Option<String>,
    setup: Option<String>,
    verify: String,
    tests_dir: Option<PathBuf>,
    image: Option<String>,
    #[serde(default)]
    timeouts: LineTimeouts,
    /// Accepted for compatibility with task sets that carry it; resource limits come from
    /// the profile.
    #[serde(default)]
    #[allow(dead_code)]
    limits: serde_json::Value,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LineTimeouts {
    setup: Option<f64>,
    agent: Option<f64>,
    verify: Option<f64>,
}

/// Every task in a JSON-lines file, each with its 1-based line. Relative `repo` and
/// `tests_dir` paths are relative to the file, so a task set can be moved as a folder.
/// `defaults` are the timeouts of tasks that do not set their own.
pub fn load_jsonl(path: &Path, defaults: Timeouts) -> Result<Vec<(usize, Loaded)>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(EvalError::io("read the task set", path))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut tasks = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |id: String, message: String| {
            Loaded::Broken(Problem {
                id,
                file: path.to_path_buf(),
                line: Some(n + 1),
                message,
            })
        };
        let loaded = match serde_json::from_str::<Line>(line) {
            Ok(l) => check(l, base, defaults).unwrap_or_else(|(id, message)| at(id, message)),
            Err(e) => {
                // The id, if the line has one, still names the failure.
                let id = serde_json::from_str::<serde_json::Value>(line)
                    .ok()
                    .and_then(|v| v.get("id").and_then(|i| i.as_str()).map(str::to_string))
                    .map(|id| sanitize(&id))
                    .unwrap_or_else(|| format!("line-{}", n + 1));
                at(id, on_one_line(&e))
            }
        };
        tasks.push((n + 1, loaded));
    }
    Ok(tasks)
}

/// serde's words for a line of JSON, without its "at line 1" (the task's line is the
/// file's line, said beside it): the column stays.
fn on_one_line(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rsplit_once(" at line 1 column ") {
        Some((what, column)) => format!("{what} (column {column})"),
        None => text,
    }
}

/// The task a line describes, or its id and why it cannot run.
fn check(l: Line, base: &Path, defaults: Timeouts) -> Result<Loaded, (String, String)> {
    let broken = |reason: String| Err((l.id.clone(), reason));
    if !valid_id(&l.id) {
        return Err((
            sanitize(&l.id),
            format!(
                "task id {:?} must be letters, digits, '.', '_' or '-' (it names a folder)",
                l.id
            ),
        ));
    }
    if l.instruction.trim().is_empty() {
        return broken("the instruction is empty".into());
    }
    if l.verify.trim().is_empty() {
        return broken("the verify command is empty".into());
    }
    let repo = if looks_like_url(&l.repo) {
        l.repo.clone()
    } else {
        let p = base.join(&l.repo);
        if !p.is_dir() {
            return broken(format!("the repository {} is not a directory", p.display()));
        }
        p.display().to_string()
    };
    let tests_dir = match &l.tests_dir {
        Some(d) => {
            let p = base.join(d);
            if !p.is_dir() {
                return broken(format!("tests_dir {} is not a directory", p.display()));
            }
            Some(p)
        }
        None => None,
    };
    let secs = |v: Option<f64>, d: Duration| v.and_then(seconds).unwrap_or(d);
    Ok(Loaded::Task(Box::new(Task {
        id: l.id,
        instruction: l.instruction,
        repo,
        commit: l.commit,
        setup: l.setup.filter(|s| !s.trim().is_empty()),
        verify: l.verify,
        tests_dir,
        image: l.image,
        timeouts: Timeouts {
            setup: secs(l.timeouts.setup, defaults.setup),
            agent: secs(l.timeouts.agent, defaults.agent),
            verify: secs(l.timeouts.verify, defaults.verify),
        },
    })))
}

pub fn looks_like_url(repo: &str) -> bool {
    repo.contains("://") || repo.starts_with("git@")
}

/// The task set's identity: a hash over the task files, so two runs can tell whether they
/// ran the same tasks.
pub fn content_hash(paths: &[PathBuf]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for p in paths {
        h.update(p.display().to_string().as_bytes());
        if p.is_dir() {
            // A Harbor task set: every file of every task, by relative path; a link by
            // its words (never followed: it may lead anywhere, `/dev/zero` included).
            hash_folder(&mut h, p);
        } else {
            h.update(std::fs::read(p).unwrap_or_default());
        }
    }
    let digest: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{digest}")
}

/// Every file and link of the folder `p` into `h`, read beneath it.
fn hash_folder(h: &mut sha2::Sha256, p: &Path) {
    use super::folder::{Folder, Kind};
    use sha2::Digest;
    let Ok(folder) = Folder::open(p) else { return };
    for entry in folder.walk(Path::new("")).unwrap_or_default() {
        // Folders are in their files' paths (the hash is what it was before links were
        // read by their words).
        if entry.kind == Kind::Dir {
            continue;
        }
        h.update(entry.rel.display().to_string().as_bytes());
        match &entry.kind {
            Kind::Dir => {}
            Kind::Link { target, .. } => h.update(target.display().to_string().as_bytes()),
            Kind::File => {
                if let Ok(file) = folder.open_entry(Path::new(""), &entry) {
                    let _ = super::images::feed(h, file);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A set's hash reads a link by its words: a link to `/dev/zero` (which a read through
    /// it would never finish) or to a secret costs nothing and tells nothing of the target's
    /// content; another target is another hash.
    #[test]
    fn a_sets_hash_never_reads_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let set = tmp.path().join("set");
        std::fs::create_dir_all(set.join("t/tests")).unwrap();
        std::fs::write(set.join("t/tests/test.sh"), "true\n").unwrap();
        std::os::unix::fs::symlink("/dev/zero", set.join("t/tests/zero")).unwrap();
        let secret = tmp.path().join("secret");
        std::fs::write(&secret, "one").unwrap();
        std::os::unix::fs::symlink(&secret, set.join("t/key")).unwrap();
        let first = content_hash(std::slice::from_ref(&set));
        std::fs::write(&secret, "two").unwrap();
        assert_eq!(content_hash(std::slice::from_ref(&set)), first);
        std::fs::remove_file(set.join("t/tests/zero")).unwrap();
        std::os::unix::fs::symlink("/dev/null", set.join("t/tests/zero")).unwrap();
        assert_ne!(content_hash(std::slice::from_ref(&set)), first);
    }

    #[test]
    fn good_lines_are_tasks_and_bad_ones_say_why() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("repo")).unwrap();
        std::fs::create_dir(dir.path().join("hidden")).unwrap();
        let set = dir.path().join("tasks.jsonl");
        std::fs::write(
            &set,
            [
                r#"{"id":"ok","instruction":"fix","repo":"repo","verify":"true","tests_dir":"hidden","timeouts":{"agent":5}}"#,
                r#"{"id":"no-repo","instruction":"fix","repo":"missing","verify":"true"}"#,
                r#"{"id":"typo","instruction":"fix","repo":"repo","verfy":"true"}"#,
                r#"{"id":"../escape","instruction":"fix","repo":"repo","verify":"true"}"#,
                "not json",
            ]
            .join("\n"),
        )
        .unwrap();
        let tasks = load_jsonl(&set, Timeouts::default()).unwrap();
        let (1, Loaded::Task(t)) = &tasks[0] else {
            panic!("{tasks:?}")
        };
        assert_eq!(t.timeouts.agent, Duration::from_secs(5));
        assert_eq!(
            t.tests_dir.as_deref(),
            Some(dir.path().join("hidden").as_path())
        );
        let problems: Vec<&Problem> = tasks[1..]
            .iter()
            .map(|(n, l)| match l {
                Loaded::Broken(p) if p.line == Some(*n) && p.file == set => p,
                other => panic!("line {n}: {other:?}"),
            })
            .collect();
        let reasons: Vec<(String, String)> = problems
            .iter()
            .map(|p| (p.id.clone(), p.message.clone()))
            .collect();
        assert!(reasons[0].1.contains("is not a directory"), "{reasons:?}");
        assert_eq!(reasons[1].0, "typo");
        assert!(reasons[1].1.contains("verfy"), "{reasons:?}");
        assert_eq!(reasons[2].0, ".._escape");
        // A line that is not JSON: its place is the file's line, its column serde's.
        assert_eq!(
            problems[3].located(),
            format!("{}:5: expected ident (column 2)", set.display())
        );
        assert_eq!(reasons[3].0, "line-5");
    }
}
