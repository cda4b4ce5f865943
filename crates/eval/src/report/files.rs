//! The files an attempt left (its logs, its result, what the verifier printed), each
//! read as a head and a tail, never whole: a log is as long as what a task's commands
//! printed, and the report's memory must not follow it.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// Files of one attempt embedded at most (artifacts can be many); the rest are named.
const FILES_KEPT: usize = 40;
/// Folders below an attempt's own walked at most (its artifacts' folders).
const DEPTH: usize = 3;
/// The files read first, in the order an attempt makes them; any others follow by name.
const ORDER: [&str; 9] = [
    "build.log",
    "setup.log",
    "agent.log",
    "verify.log",
    "result.json",
    "verifier-network.jsonl",
    "missing.txt",
    "diff.patch",
    "session.jsonl",
];
/// Files shown elsewhere in the panel (the diff, the transcript), listed but not embedded
/// twice.
const SHOWN_ELSEWHERE: [(&str, &str); 2] =
    [("diff.patch", "diff"), ("session.jsonl", "transcript")];

/// A file as shown: whole when small, else its head and tail with the size cut between.
pub struct Shown {
    pub text: String,
    pub size: u64,
    pub cut: u64,
}

/// The file at `path`: whole up to `head + tail` bytes, else its first `head` and last
/// `tail` bytes with the size cut between them and where the whole file is (`named`: its
/// path as the reader finds it, beside the report).
pub fn head_and_tail(path: &Path, named: &Path, head: u64, tail: u64) -> std::io::Result<Shown> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    if size <= head + tail {
        let mut bytes = Vec::new();
        file.take(size).read_to_end(&mut bytes)?;
        return Ok(Shown {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            size,
            cut: 0,
        });
    }
    let mut first = vec![0u8; head as usize];
    file.read_exact(&mut first)?;
    file.seek(SeekFrom::Start(size - tail))?;
    let mut last = Vec::with_capacity(tail as usize);
    file.take(tail).read_to_end(&mut last)?;
    let cut = size - head - tail;
    Ok(Shown {
        text: format!(
            "{}\n\n… {cut} bytes not shown here; the whole file is {} …\n\n{}",
            String::from_utf8_lossy(&first),
            named.display(),
            String::from_utf8_lossy(&last)
        ),
        size,
        cut,
    })
}

/// Every file of the attempt in `dir` as the panel embeds it: name (relative to `dir`),
/// path (relative to the results folder `out`), size, and its text cut to `head`/`tail`
/// (none for a file shown elsewhere or one that is not text).
pub fn logs(dir: &Path, out: &Path, head: u64, tail: u64) -> Vec<Value> {
    let mut found = Vec::new();
    walk(dir, dir, 0, &mut found);
    found.sort_by_key(|(rel, _)| {
        let name = rel.to_string_lossy().into_owned();
        let rank = ORDER.iter().position(|o| *o == name).unwrap_or(ORDER.len());
        (rank, name)
    });
    let total = found.len();
    let mut shown: Vec<Value> = found
        .into_iter()
        .take(FILES_KEPT)
        .map(|(rel, size)| one(dir, out, &rel, size, head, tail))
        .collect();
    if total > FILES_KEPT {
        shown.push(json!({
            "name": format!("… and {} more files", total - FILES_KEPT),
            "path": dir.strip_prefix(out).unwrap_or(dir).display().to_string(),
            "size": null,
            "text": null,
            "note": "not embedded: see the attempt's folder",
        }));
    }
    shown
}

/// One file's entry.
fn one(dir: &Path, out: &Path, rel: &Path, size: u64, head: u64, tail: u64) -> Value {
    let name = rel.to_string_lossy().into_owned();
    let path = dir.join(rel);
    let named = path.strip_prefix(out).unwrap_or(&path);
    let link = named.display().to_string();
    if let Some((_, part)) = SHOWN_ELSEWHERE.iter().find(|(n, _)| *n == name) {
        return json!({"name": name, "path": link, "size": size, "text": null,
            "note": format!("shown above as the {part}")});
    }
    match head_and_tail(&path, named, head, tail) {
        Ok(s) if s.text.contains('\0') => json!({"name": name, "path": link, "size": size,
            "text": null, "note": "not text: see the file"}),
        Ok(s) => json!({"name": name, "path": link, "size": s.size, "text": s.text, "cut": s.cut}),
        Err(e) => json!({"name": name, "path": link, "size": size, "text": null,
            "note": format!("cannot be read: {e}")}),
    }
}

/// Regular files under `dir` (links are not followed), as paths relative to `root` with
/// their sizes.
fn walk(root: &Path, dir: &Path, depth: usize, found: &mut Vec<(PathBuf, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() && depth < DEPTH {
            walk(root, &path, depth + 1, found);
        } else if kind.is_file() {
            let size = entry.metadata().map_or(0, |m| m.len());
            let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            found.push((rel, size));
        }
    }
}
