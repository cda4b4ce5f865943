//! Cutting long tool output down to what fits in a model's context, as OpenCode does.
//!
//! The model gets the head (or tail) of the output and a hint; the full text is saved to a
//! file under the runner's data directory, which the sandbox mounts read-only so the model
//! can page through it with `read` or search it with `grep`. Saved outputs older than seven
//! days are removed.
//!
//! Each session saves into a folder of its own (`tool-output/<session>/`), and only that
//! folder is mounted into its sandbox: a saved output can hold anything a command printed
//! (a test's secrets), and a session on an untrusted repository must not read another
//! project's. Subagents share their parent's sandbox, so they share its folder too. A folder
//! left empty is removed when its session ends; the seven-day sweep takes old outputs (in
//! session folders, and the flat files of earlier versions) and folders nothing was saved to
//! for that long.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub const MAX_LINES: usize = 2000;
pub const MAX_BYTES: usize = 50 * 1024;
pub const RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Keep the beginning (listings, file contents).
    Head,
    /// Keep the end (command output, where errors and summaries come last).
    Tail,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncated {
    pub content: String,
    /// Where the full text was saved; `None` when nothing was cut.
    pub output_path: Option<PathBuf>,
}

/// Truncation settings plus the directory full outputs go to.
#[derive(Debug, Clone)]
pub struct Truncator {
    /// Where every session's folder is (swept for old outputs).
    root: PathBuf,
    /// Where this truncator saves: `root` itself, or a session's folder below it.
    dir: PathBuf,
    /// A session's folder, removed if still empty when the last clone goes.
    _folder: Option<Arc<SessionFolder>>,
    pub max_lines: usize,
    pub max_bytes: usize,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A session's folder of saved outputs; removed (only if empty) when the session ends, so
/// sessions that saved nothing leave nothing behind.
#[derive(Debug)]
struct SessionFolder(PathBuf);

impl Drop for SessionFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

impl Truncator {
    /// Saves into `dir` itself (and sweeps it).
    pub fn new(dir: PathBuf) -> Self {
        Truncator {
            root: dir.clone(),
            dir,
            _folder: None,
            max_lines: MAX_LINES,
            max_bytes: MAX_BYTES,
        }
    }

    /// Saves into a folder of `root` for one session: `session` names it when it is a plain
    /// name (a resumed conversation finds the outputs its history points at), else the
    /// folder gets a fresh name, so no two sessions share one.
    pub fn for_session(root: PathBuf, session: Option<&str>) -> Self {
        let name = session
            .filter(|s| is_folder_name(s))
            .map(str::to_string)
            .unwrap_or_else(fresh_name);
        let dir = root.join(name);
        Truncator {
            root,
            _folder: Some(Arc::new(SessionFolder(dir.clone()))),
            dir,
            max_lines: MAX_LINES,
            max_bytes: MAX_BYTES,
        }
    }

    /// `$XDG_DATA_HOME/runner/tool-output`, falling back to `~/.local/share`.
    pub fn default_dir() -> PathBuf {
        let data_home = std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .unwrap_or_else(|| std::env::temp_dir().join("runner-data"));
        data_home.join("runner").join("tool-output")
    }

    /// A session's folder as rules are shown and checked outside any session (`profile
    /// show`, `permission check`): no real session's, so a check of another session's
    /// output says what a session would (ask), not allow.
    pub fn any_session_dir() -> PathBuf {
        Self::default_dir().join("SESSION")
    }

    /// The folder this truncator saves into (the one its sandbox mounts).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes saved outputs past the retention period, then creates the folder and marks
    /// it as in use now (so no sweep takes it while the session runs).
    pub fn prepare(&self) -> std::io::Result<()> {
        self.cleanup(SystemTime::now());
        std::fs::create_dir_all(&self.dir)?;
        touch(&self.dir);
        Ok(())
    }

    /// Removes saved outputs whose name says they are older than [`RETENTION`] at `now`,
    /// flat in the root (as earlier versions saved them) or in a session's folder, and the
    /// session folders that were left empty that long.
    pub fn cleanup(&self, now: SystemTime) {
        let Some(cutoff) = now.checked_sub(RETENTION) else {
            return;
        };
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                sweep_folder(&entry.path(), cutoff);
            } else if kind.is_file() {
                remove_if_old(&entry.path(), cutoff);
            }
        }
    }

    /// Returns the text unchanged when it fits; otherwise saves it in full and returns the
    /// kept part with a marker and a hint. Cuts fall on line boundaries.
    pub fn truncate(&self, text: &str, direction: Direction) -> std::io::Result<Truncated> {
        let lines: Vec<&str> = text.split('\n').collect();
        if lines.len() <= self.max_lines && text.len() <= self.max_bytes {
            return Ok(Truncated {
                content: text.to_string(),
                output_path: None,
            });
        }
        let mut kept = 0usize;
        let mut bytes = 0usize;
        let mut hit_bytes = false;
        let ordered: Box<dyn Iterator<Item = &&str>> = match direction {
            Direction::Head => Box::new(lines.iter()),
            Direction::Tail => Box::new(lines.iter().rev()),
        };
        for line in ordered {
            if kept >= self.max_lines {
                break;
            }
            let cost = line.len() + usize::from(kept > 0);
            if bytes + cost > self.max_bytes {
                hit_bytes = true;
                break;
            }
            bytes += cost;
            kept += 1;
        }
        let preview = match direction {
            Direction::Head => lines[..kept].join("\n"),
            Direction::Tail => lines[lines.len() - kept..].join("\n"),
        };
        let (removed, unit) = if hit_bytes {
            (text.len() - bytes, "bytes")
        } else {
            (lines.len() - kept, "lines")
        };
        let path = self.save(text)?;
        let hint = format!(
            "The tool call succeeded but the output was truncated. Full output saved to: {}\nUse Grep to search the full content or Read with offset/limit to view specific sections.",
            path.display()
        );
        let content = match direction {
            Direction::Head => format!("{preview}\n\n...{removed} {unit} truncated...\n\n{hint}"),
            Direction::Tail => format!("...{removed} {unit} truncated...\n\n{hint}\n\n{preview}"),
        };
        Ok(Truncated {
            content,
            output_path: Some(path),
        })
    }

    fn save(&self, text: &str) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&self.dir)?;
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let name = format!(
            "tool_{ms}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = self.dir.join(name);
        std::fs::write(&path, text)?;
        Ok(path)
    }
}

/// The creation time encoded in a saved output's name (`tool_<millis>_<pid>_<n>`).
fn saved_at_millis(name: &str) -> Option<u128> {
    name.strip_prefix("tool_")?.split('_').next()?.parse().ok()
}

/// Removes `path` if it is a saved output made before `cutoff`; other files stay.
fn remove_if_old(path: &Path, cutoff: SystemTime) {
    let cutoff_ms = cutoff
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let saved = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(saved_at_millis);
    if saved.is_some_and(|ms| ms < cutoff_ms) {
        let _ = std::fs::remove_file(path);
    }
}

/// A session's folder: its old outputs go, and the folder too when nothing was saved in it
/// (which moves its modification time) since `cutoff`, so that all it held was old. (A
/// session resumed in the instant between that look and the removal would find its folder
/// gone and fail to start, saying so; it can be started again.)
fn sweep_folder(dir: &Path, cutoff: SystemTime) {
    let idle = std::fs::metadata(dir)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t < cutoff);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                remove_if_old(&entry.path(), cutoff);
            }
        }
    }
    if idle {
        // Only if empty: anything the sweep did not recognise stays, with its folder.
        let _ = std::fs::remove_dir(dir);
    }
}

/// Sets a folder's modification time to now.
fn touch(dir: &Path) {
    if let Ok(f) = std::fs::File::open(dir) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// A session id that can be a folder name as it is (a runner id: letters, digits, `-`,
/// `_`, `.`; not a dot name).
fn is_folder_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A folder name no other session has: the time, this process, a counter.
fn fresh_name() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!(
        "run-{ms:013x}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn truncator(lines: usize, bytes: usize) -> (tempfile::TempDir, Truncator) {
        let tmp = tempfile::tempdir().unwrap();
        let mut t = Truncator::new(tmp.path().join("out"));
        t.max_lines = lines;
        t.max_bytes = bytes;
        (tmp, t)
    }

    #[test]
    fn short_text_is_untouched_and_nothing_is_saved() {
        let (_tmp, t) = truncator(10, 1000);
        let r = t.truncate("a\nb", Direction::Head).unwrap();
        assert_eq!(
            r,
            Truncated {
                content: "a\nb".into(),
                output_path: None
            }
        );
        assert!(!t.dir().exists());
    }

    #[test]
    fn head_by_lines_saves_the_full_text() {
        let (_tmp, t) = truncator(3, 1000);
        let text = (1..=10)
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        let r = t.truncate(&text, Direction::Head).unwrap();
        let path = r.output_path.clone().unwrap();
        assert!(
            r.content
                .starts_with("1\n2\n3\n\n...7 lines truncated...\n\n"),
            "{}",
            r.content
        );
        assert!(
            r.content
                .contains(&format!("Full output saved to: {}", path.display()))
        );
        assert!(
            r.content
                .ends_with("Read with offset/limit to view specific sections.")
        );
        assert_eq!(std::fs::read_to_string(path).unwrap(), text);
    }

    #[test]
    fn tail_by_bytes_keeps_the_end() {
        let (_tmp, t) = truncator(100, 10);
        let r = t
            .truncate("aaaa\nbbbb\ncccc\ndddd", Direction::Tail)
            .unwrap();
        // "cccc\ndddd" is 9 bytes; adding "bbbb\n" would pass 10.
        assert!(
            r.content.starts_with("...10 bytes truncated...\n\n"),
            "{}",
            r.content
        );
        assert!(r.content.ends_with("\n\ncccc\ndddd"), "{}", r.content);
    }

    fn set_age(path: &Path, age: Duration) {
        let f = std::fs::File::open(path).unwrap();
        f.set_modified(SystemTime::now() - age).unwrap();
    }

    fn saved_name(now: SystemTime, age: Duration, n: u32) -> String {
        let ms = (now - age).duration_since(UNIX_EPOCH).unwrap().as_millis();
        format!("tool_{ms}_1_{n}")
    }

    /// Old outputs go whether they lie flat in the root (as earlier versions saved them) or
    /// in a session's folder; fresh ones and files the sweep does not recognise stay; a
    /// folder nothing was saved to for the whole period goes with its outputs.
    #[test]
    fn cleanup_removes_only_outputs_past_retention() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("tool-output");
        let t = Truncator::for_session(root.clone(), Some("current"));
        let now = SystemTime::now();
        let old = RETENTION + Duration::from_secs(60);
        let fresh = Duration::from_secs(60);
        let (busy, idle, kept, empty) = (
            root.join("busy"),
            root.join("idle"),
            root.join("idle-with-notes"),
            root.join("new-empty"),
        );
        for d in [&busy, &idle, &kept, &empty] {
            std::fs::create_dir_all(d).unwrap();
        }
        let flat_old = root.join(saved_name(now, old, 0));
        let flat_fresh = root.join(saved_name(now, fresh, 1));
        let flat_foreign = root.join("notes.txt");
        let busy_old = busy.join(saved_name(now, old, 2));
        let busy_fresh = busy.join(saved_name(now, fresh, 3));
        let idle_old = idle.join(saved_name(now, old, 4));
        let kept_note = kept.join("notes.txt");
        for p in [
            &flat_old,
            &flat_fresh,
            &flat_foreign,
            &busy_old,
            &busy_fresh,
            &idle_old,
            &kept_note,
        ] {
            std::fs::write(p, "x").unwrap();
        }
        set_age(&idle, old);
        set_age(&kept, old);
        t.cleanup(now);
        for gone in [&flat_old, &busy_old, &idle_old, &idle] {
            assert!(!gone.exists(), "{} should be gone", gone.display());
        }
        for stays in [&flat_fresh, &flat_foreign, &busy_fresh, &kept_note, &empty] {
            assert!(stays.exists(), "{} should stay", stays.display());
        }
    }

    /// A session saves in a folder of its own, named by its id when that is a plain name;
    /// any other id (a path, a dot name) gets a fresh folder, never a way out of the root.
    #[test]
    fn each_session_saves_in_its_own_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("tool-output");
        let mut a = Truncator::for_session(root.clone(), Some("19a2b3c4d5e6f-0a1b2c"));
        a.max_lines = 1;
        assert_eq!(a.dir(), root.join("19a2b3c4d5e6f-0a1b2c"));
        let saved = a.truncate("1\n2\n3", Direction::Head).unwrap();
        assert_eq!(saved.output_path.unwrap().parent(), Some(a.dir()));
        let mut seen = std::collections::HashSet::new();
        for id in [
            None,
            None,
            Some(""),
            Some(".."),
            Some("../x"),
            Some("a/b"),
            Some(".hidden"),
        ] {
            let t = Truncator::for_session(root.clone(), id);
            assert_eq!(t.dir().parent(), Some(root.as_path()), "{id:?}");
            assert!(seen.insert(t.dir().to_path_buf()), "{id:?} shares a folder");
        }
    }

    /// A session that saved nothing leaves no folder once its last clone goes; one with
    /// outputs keeps them. Reopening an old folder marks it in use, so no sweep takes it.
    #[test]
    fn empty_folders_go_with_their_session_and_a_reopened_one_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("tool-output");
        let quiet = Truncator::for_session(root.clone(), Some("quiet"));
        quiet.prepare().unwrap();
        let clone = quiet.clone();
        drop(quiet);
        assert!(clone.dir().is_dir(), "a clone still holds the session");
        drop(clone);
        assert!(!root.join("quiet").exists());

        let mut busy = Truncator::for_session(root.clone(), Some("busy"));
        busy.max_lines = 1;
        busy.prepare().unwrap();
        busy.truncate("a\nb", Direction::Head).unwrap();
        drop(busy);
        assert!(root.join("busy").is_dir());

        set_age(&root.join("busy"), RETENTION + Duration::from_secs(60));
        let resumed = Truncator::for_session(root.clone(), Some("busy"));
        resumed.prepare().unwrap();
        Truncator::new(root.clone()).cleanup(SystemTime::now());
        assert!(resumed.dir().is_dir());
        assert_eq!(std::fs::read_dir(resumed.dir()).unwrap().count(), 1);
    }
}
