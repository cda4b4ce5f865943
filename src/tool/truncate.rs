//! Cutting long tool output down to what fits in a model's context, as OpenCode does.
//!
//! The model gets the head (or tail) of the output and a hint; the full text is saved to a
//! file under the runner's data directory, which the sandbox mounts read-only so the model
//! can page through it with `read` or search it with `grep`. Saved outputs older than seven
//! days are removed.

use std::path::{Path, PathBuf};
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
    dir: PathBuf,
    pub max_lines: usize,
    pub max_bytes: usize,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

impl Truncator {
    pub fn new(dir: PathBuf) -> Self {
        Truncator {
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

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates the directory and removes saved outputs past the retention period.
    pub fn prepare(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        self.cleanup(SystemTime::now());
        Ok(())
    }

    /// Removes saved outputs whose name says they are older than [`RETENTION`] at `now`.
    pub fn cleanup(&self, now: SystemTime) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let cutoff = now
            .checked_sub(RETENTION)
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis());
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(ms) = name.to_str().and_then(saved_at_millis) else {
                continue;
            };
            if ms < cutoff {
                let _ = std::fs::remove_file(entry.path());
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

    #[test]
    fn cleanup_removes_only_outputs_past_retention() {
        let (_tmp, t) = truncator(1, 1);
        std::fs::create_dir_all(t.dir()).unwrap();
        let now = SystemTime::now();
        let ms = |age: Duration| (now - age).duration_since(UNIX_EPOCH).unwrap().as_millis();
        let old = t.dir().join(format!(
            "tool_{}_1_0",
            ms(RETENTION + Duration::from_secs(60))
        ));
        let fresh = t
            .dir()
            .join(format!("tool_{}_1_1", ms(Duration::from_secs(60))));
        let foreign = t.dir().join("notes.txt");
        for p in [&old, &fresh, &foreign] {
            std::fs::write(p, "x").unwrap();
        }
        t.cleanup(now);
        assert!(!old.exists());
        assert!(fresh.exists() && foreign.exists());
    }
}
