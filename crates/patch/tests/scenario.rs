//! The scenario folders of `tests/fixtures/scenarios/` (their README.md has the layout),
//! read and judged in one place for both runners: this crate's own (the planner over a
//! temporary directory) and the root's end-to-end run through the `apply_patch` tool and
//! the sandbox, which includes this file by path.

use std::path::{Path, PathBuf};

/// Files as (path relative to the tree's root with `/`, bytes), sorted; directories are
/// not listed (git cannot store empty ones).
pub type Tree = Vec<(String, Vec<u8>)>;

/// One `NNN_short_name/` folder.
pub struct Scenario {
    pub name: String,
    /// The files before the patch (`input/`; missing means an empty tree).
    pub input: Tree,
    /// `patch.txt`, byte for byte.
    pub patch: String,
    /// The files after the patch (`expected/`; missing means an empty tree).
    pub expected: Tree,
    /// `error.txt` without trailing whitespace: a substring the error must contain.
    pub error: Option<String>,
}

/// Every scenario under `dir`, in name order. Panics, naming the folder, when there is
/// none or one has no `patch.txt`, so a runner cannot pass by finding nothing.
pub fn load_all(dir: &Path) -> Vec<Scenario> {
    let mut folders: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list scenarios in {}: {e}", dir.display()))
        .map(|e| e.expect("scenario folder entry").path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    assert!(!folders.is_empty(), "no scenarios in {}", dir.display());
    folders.iter().map(|folder| load(folder)).collect()
}

fn load(folder: &Path) -> Scenario {
    let name = folder
        .file_name()
        .expect("a scenario folder has a name")
        .to_string_lossy()
        .into_owned();
    let patch = std::fs::read_to_string(folder.join("patch.txt"))
        .unwrap_or_else(|e| panic!("scenario {name}: cannot read patch.txt: {e}"));
    let error = std::fs::read_to_string(folder.join("error.txt"))
        .ok()
        .map(|e| e.trim_end().to_string());
    Scenario {
        input: tree(&folder.join("input")),
        expected: tree(&folder.join("expected")),
        name,
        patch,
        error,
    }
}

impl Scenario {
    /// Judges one run: `result` is `Ok` or the error the run reported, `got` the tree
    /// afterwards. A failure must contain `error.txt` and leave the tree exactly as
    /// `input/`; a success must leave exactly `expected/`. `Err` says what went wrong.
    pub fn judge(&self, result: Result<(), String>, got: &Tree) -> Result<(), String> {
        match (&self.error, result) {
            (Some(want), Ok(())) => Err(format!(
                "expected a failure containing {want:?}, the patch applied"
            )),
            (Some(want), Err(err)) => {
                if !err.contains(want.as_str()) {
                    return Err(format!("error {err:?} does not contain {want:?}"));
                }
                if *got != self.input {
                    return Err(format!(
                        "a failed patch changed the tree:\n{}",
                        describe_diff(got, &self.input)
                    ));
                }
                // The README promises expected/ is a copy of input/ for failures.
                if self.expected != self.input {
                    return Err("fixture: expected/ is not a copy of input/".into());
                }
                Ok(())
            }
            (None, Err(err)) => Err(format!("expected success, got error {err:?}")),
            (None, Ok(())) if *got != self.expected => Err(format!(
                "tree differs from expected/:\n{}",
                describe_diff(got, &self.expected)
            )),
            (None, Ok(())) => Ok(()),
        }
    }
}

/// The files under `root`; a missing root is an empty tree.
pub fn tree(root: &Path) -> Tree {
    let mut out = Vec::new();
    if root.exists() {
        walk(root, root, &mut out);
    }
    out.sort();
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Tree) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            walk(root, &path, out);
        } else {
            let rel = path.strip_prefix(root).expect("under root");
            let rel = rel.to_string_lossy().replace('\\', "/");
            out.push((rel, std::fs::read(&path).expect("read file")));
        }
    }
}

/// Names the files that differ, so a failure says more than "trees differ".
fn describe_diff(got: &Tree, want: &Tree) -> String {
    let mut lines = Vec::new();
    for (path, bytes) in want {
        match got.iter().find(|(p, _)| p == path) {
            None => lines.push(format!("  missing {path}")),
            Some((_, b)) if b != bytes => lines.push(format!(
                "  {path} differs:\n    want {:?}\n    got  {:?}",
                String::from_utf8_lossy(bytes),
                String::from_utf8_lossy(b)
            )),
            Some(_) => {}
        }
    }
    for (path, _) in got {
        if !want.iter().any(|(p, _)| p == path) {
            lines.push(format!("  unexpected {path}"));
        }
    }
    lines.join("\n")
}
