//! Which version of each file the model has seen in this session.
//!
//! Overwriting a file the model never read, or one that changed since it read it (an editor,
//! a formatter, another agent), silently destroys work. So write and edit refuse unless the
//! file's current stamp is the one recorded when the model last read it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use runner_protocol::FileStamp;

use crate::ToolError;

pub struct FileTimes {
    /// In a one-call session there is no earlier call to have read the file in, so the
    /// version on disk at the start counts as read.
    assume_read: bool,
    seen: Mutex<HashMap<PathBuf, FileStamp>>,
}

impl FileTimes {
    pub fn new(assume_read: bool) -> Self {
        FileTimes {
            assume_read,
            seen: Mutex::new(HashMap::new()),
        }
    }

    pub fn record(&self, path: &Path, stamp: FileStamp) {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path.to_path_buf(), stamp);
    }

    pub fn get(&self, path: &Path) -> Option<FileStamp> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(path)
            .copied()
    }

    /// Checks that the file on disk (with stamp `current`) is the version the model read.
    pub fn check(&self, path: &Path, current: FileStamp) -> Result<(), ToolError> {
        match self.get(path) {
            Some(seen) if seen == current => Ok(()),
            Some(_) => Err(ToolError::Failed(format!(
                "File {} has been modified since it was last read.\n\nPlease read the file again before modifying it.",
                path.display()
            ))),
            None if self.assume_read => {
                self.record(path, current);
                Ok(())
            }
            None => Err(ToolError::Failed(format!(
                "You must read file {} before overwriting it. Use the Read tool first",
                path.display()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(mtime_ns: i64) -> FileStamp {
        FileStamp {
            mtime_ns,
            size: 1,
            ino: 1,
        }
    }

    #[test]
    fn strict_session_requires_a_read_of_the_same_version() {
        let t = FileTimes::new(false);
        let p = Path::new("/w/f");
        assert!(
            t.check(p, stamp(1))
                .unwrap_err()
                .to_string()
                .contains("must read file /w/f")
        );
        t.record(p, stamp(1));
        assert!(t.check(p, stamp(1)).is_ok());
        assert!(
            t.check(p, stamp(2))
                .unwrap_err()
                .to_string()
                .contains("modified since it was last read")
        );
    }

    #[test]
    fn single_call_session_counts_the_starting_version_as_read() {
        let t = FileTimes::new(true);
        let p = Path::new("/w/f");
        assert!(t.check(p, stamp(1)).is_ok());
        assert!(t.check(p, stamp(2)).is_err());
    }
}
