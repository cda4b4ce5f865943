//! The agent's diff as the report shows it: read a piece at a time, with the files a
//! reader cannot use left out and named (binary files, whose `GIT binary patch` blocks are
//! base85 noise, and what running the tests leaves behind, such as `__pycache__/*.pyc`),
//! and the rest held to a head and a tail. Memory stays at the head, the tail and one
//! line's first [`LINE_PIECE`] bytes, whatever the patch's size.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// Bytes read at most per line at once; a longer line comes in several pieces.
const LINE_PIECE: u64 = 64 * 1024;
/// A file's header (`diff --git`, `index`, modes) held back until its body shows whether
/// it is binary; a header longer than this is a text file's.
const HEADER_LIMIT: usize = 16 * 1024;
/// Names of left-out files kept per kind; the count is always whole.
const NAMES_KEPT: usize = 50;

/// Path parts and file endings of what running a task's tests leaves behind: never what
/// the agent meant to change, so left out as `runner changes` leaves them out by a
/// project's ignore rules.
const LEFTOVER_PARTS: [&str; 4] = ["__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"];
const LEFTOVER_ENDINGS: [&str; 2] = [".pyc", ".pyo"];

/// The diff as shown, and what was left out of it.
#[derive(Debug, Default)]
pub struct Shown {
    pub text: String,
    /// The patch file's size.
    pub size: u64,
    /// Bytes of the kept files not shown between the head and the tail.
    pub cut: u64,
    pub binary: Left,
    pub ignored: Left,
}

/// Files of one kind left out: how many, and the first names.
#[derive(Debug, Default)]
pub struct Left {
    pub count: usize,
    pub names: Vec<String>,
}

impl Left {
    fn add(&mut self, name: &str) {
        self.count += 1;
        if self.names.len() < NAMES_KEPT {
            self.names.push(name.to_string());
        }
    }
}

/// What is done with the lines of the file being read.
enum Fate {
    /// Its header is held until the file shows what it is.
    Undecided(Vec<u8>),
    Kept,
    Binary,
    Ignored,
}

/// The diff at `path` (`named`: its path as the reader finds it): kept files up to `head`
/// bytes from the start and `tail` from the end.
pub fn show(path: &Path, named: &Path, head: usize, tail: usize) -> std::io::Result<Shown> {
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    let mut reader = BufReader::new(file);
    let mut shown = Shown {
        size,
        ..Shown::default()
    };
    let mut sink = Sink::new(head, tail);
    let mut fate = Fate::Kept;
    let mut name = String::new();
    let mut line = Vec::new();
    let mut at_start = true;
    loop {
        line.clear();
        let n = (&mut reader)
            .take(LINE_PIECE)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        let starts = at_start;
        at_start = line.ends_with(b"\n");
        if starts && line.starts_with(b"diff --git ") {
            settle(&mut fate, &mut sink);
            name = file_name(&line);
            fate = if is_leftover(&name) {
                shown.ignored.add(&name);
                Fate::Ignored
            } else {
                Fate::Undecided(Vec::new())
            };
        }
        fate = match fate {
            Fate::Undecided(mut held) => {
                if starts && is_binary_marker(&line) {
                    shown.binary.add(&name);
                    Fate::Binary
                } else if (starts && is_body(&line)) || held.len() + line.len() > HEADER_LIMIT {
                    sink.push(&held);
                    sink.push(&line);
                    Fate::Kept
                } else {
                    held.extend_from_slice(&line);
                    Fate::Undecided(held)
                }
            }
            Fate::Kept => {
                sink.push(&line);
                Fate::Kept
            }
            other => other,
        };
    }
    settle(&mut fate, &mut sink);
    let (text, cut) = sink.finish(named);
    shown.text = text;
    shown.cut = cut;
    Ok(shown)
}

/// The end of a file's section: a header with no body (a mode change, an empty file) is
/// a text change and shown.
fn settle(fate: &mut Fate, sink: &mut Sink) {
    if let Fate::Undecided(held) = fate {
        sink.push(held);
    }
    *fate = Fate::Kept;
}

/// Where a text file's body begins: its `---`/`+++` names or its first hunk.
fn is_body(line: &[u8]) -> bool {
    line.starts_with(b"--- ") || line.starts_with(b"+++ ") || line.starts_with(b"@@")
}

/// git's binary patch, or a "Binary files … differ" line (git's and runner's own).
fn is_binary_marker(line: &[u8]) -> bool {
    line.starts_with(b"GIT binary patch") || line.starts_with(b"Binary files ")
}

/// The new side's name in `diff --git a/NAME b/NAME` (quoted when git quoted it).
fn file_name(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    let rest = text
        .trim_end_matches(['\n', '\r'])
        .trim_start_matches("diff --git ");
    let name = match rest.rfind(" b/").or_else(|| rest.rfind(" \"b/")) {
        Some(at) => &rest[at + 1..],
        None => rest,
    };
    let name = name.trim_matches('"');
    name.strip_prefix("b/").unwrap_or(name).to_string()
}

/// Whether `name` is what running tests leaves behind (see [`LEFTOVER_PARTS`]).
fn is_leftover(name: &str) -> bool {
    name.split('/').any(|part| LEFTOVER_PARTS.contains(&part))
        || LEFTOVER_ENDINGS.iter().any(|e| name.ends_with(e))
}

/// The kept bytes: the first `head` of them, and the last `tail`, in a buffer at most
/// twice `tail` long (its front dropped as it fills).
struct Sink {
    head: Vec<u8>,
    head_limit: usize,
    tail: Vec<u8>,
    tail_limit: usize,
    dropped: u64,
}

impl Sink {
    fn new(head: usize, tail: usize) -> Sink {
        Sink {
            head: Vec::new(),
            head_limit: head,
            tail: Vec::new(),
            tail_limit: tail,
            dropped: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        let room = self.head_limit - self.head.len();
        if room > 0 {
            let n = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.len() >= self.tail_limit {
            self.dropped += (self.tail.len() + bytes.len() - self.tail_limit) as u64;
            self.tail.clear();
            self.tail
                .extend_from_slice(&bytes[bytes.len() - self.tail_limit..]);
            return;
        }
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * self.tail_limit {
            let over = self.tail.len() - self.tail_limit;
            self.tail.drain(..over);
            self.dropped += over as u64;
        }
    }

    /// The text, and how many bytes of it were cut out of its middle.
    fn finish(mut self, path: &Path) -> (String, u64) {
        if self.tail.len() > self.tail_limit {
            let over = self.tail.len() - self.tail_limit;
            self.tail.drain(..over);
            self.dropped += over as u64;
        }
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!(
                "\n… {} bytes not shown here; the whole diff is {} …\n",
                self.dropped,
                path.display()
            ));
        }
        text.push_str(&String::from_utf8_lossy(&self.tail));
        (text, self.dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "diff --git a/src/app.py b/src/app.py\nindex 1..2 100644\n--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n";
    const PYC: &str = "diff --git a/src/__pycache__/app.cpython-312.pyc b/src/__pycache__/app.cpython-312.pyc\nnew file mode 100644\nindex 0000000..e69de29\nGIT binary patch\nliteral 120\nzcmZ?wbhEHbRA7\n\nliteral 0\nHcmV?d00001\n\n";
    const PNG: &str = "diff --git a/logo.png b/logo.png\nnew file mode 100644\nGIT binary patch\nliteral 4\nLcmZ?wbhEHb0\n\n";
    const RUNNERS: &str = "diff --git a/data.bin b/data.bin\nBinary files a/data.bin and b/data.bin differ (10 bytes, 12 bytes)\n";
    const MODE: &str = "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n";

    fn shown_of(patch: &str, head: usize, tail: usize) -> Shown {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("diff.patch");
        std::fs::write(&path, patch).unwrap();
        show(&path, Path::new("diff.patch"), head, tail).unwrap()
    }

    /// Binary blocks and test leftovers go, named; text changes and a bare mode change
    /// stay whole and in order.
    #[test]
    fn binary_files_and_leftovers_are_left_out_and_named() {
        let patch = format!("{PYC}{TEXT}{PNG}{RUNNERS}{MODE}");
        let s = shown_of(&patch, 1 << 20, 1 << 20);
        assert_eq!(s.text, format!("{TEXT}{MODE}"));
        assert!(!s.text.contains("GIT binary patch"));
        assert_eq!(s.binary.count, 2);
        assert_eq!(s.binary.names, ["logo.png", "data.bin"]);
        assert_eq!(s.ignored.count, 1);
        assert_eq!(s.ignored.names, ["src/__pycache__/app.cpython-312.pyc"]);
        assert_eq!(s.size, patch.len() as u64);
        assert_eq!(s.cut, 0);
    }

    /// A patch of many megabytes is shown as its head and tail, exactly as long as asked,
    /// with how much is cut between them and where the rest is.
    #[test]
    fn a_big_diff_keeps_its_head_and_tail() {
        let mut patch = String::from(TEXT);
        for i in 0..200_000 {
            patch.push_str(&format!("+line {i}\n"));
        }
        patch.push_str("+THE-END\n");
        let s = shown_of(&patch, 1000, 2000);
        assert!(s.text.starts_with(TEXT));
        assert!(s.text.ends_with("+THE-END\n"));
        assert_eq!(s.cut, patch.len() as u64 - 3000);
        assert!(
            s.text
                .contains(&format!("… {} bytes not shown here", s.cut))
        );
        assert!(s.text.len() < 3000 + 300, "{}", s.text.len());
    }

    /// A line longer than a piece is read in pieces and kept whole where it fits; a
    /// piece that starts mid-line is never taken for a file's header.
    #[test]
    fn a_long_line_is_read_in_pieces() {
        let long = format!(
            "+{}diff --git a/x.pyc b/x.pyc\n",
            "y".repeat(LINE_PIECE as usize - 1)
        );
        let patch = format!("{TEXT}{long}");
        let s = shown_of(&patch, 1 << 20, 1 << 20);
        assert_eq!(s.text, patch);
        assert_eq!(s.ignored.count, 0);
    }

    #[test]
    fn names_are_read_from_the_header() {
        assert_eq!(
            file_name(b"diff --git a/a b c/x y b/a b c/x y\n"),
            "a b c/x y"
        );
        assert_eq!(
            file_name(b"diff --git \"a/t\\303\\251\" \"b/t\\303\\251\"\n"),
            "t\\303\\251"
        );
        assert!(is_leftover("pkg/__pycache__/m.cpython-311.pyc"));
        assert!(is_leftover("m.pyc"));
        assert!(!is_leftover("src/pycache.py"));
    }
}
