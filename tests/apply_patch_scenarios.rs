//! Runs every scenario in `tests/fixtures/apply_patch/` through the real `apply_patch`
//! tool (registry → permission gate → sandbox server → disk), not just the planner, and
//! compares the whole worktree byte for byte afterwards.
//!
//! Folder layout (see the fixtures' README.md): `input/` (missing = empty tree),
//! `patch.txt`, `expected/` (missing = empty tree), and for failures `error.txt`, a
//! substring of the error; a failed patch must leave the tree exactly as `input/`.

use crate::common;

use std::path::{Path, PathBuf};

use common::{fixture, snapshot_tree, write_file};
use runner::tool::registry::Outcome;
use serde_json::json;

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/apply_patch")
}

fn scenarios() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(scenarios_dir())
        .expect("fixtures dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// Files under `dir` as (relative path, bytes); a missing dir is an empty tree.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    snapshot_tree(dir)
}

/// Names the files that differ, so a failure says more than "trees differ".
fn describe_diff(got: &[(String, Vec<u8>)], want: &[(String, Vec<u8>)]) -> String {
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

/// Runs one scenario; `Err` describes what went wrong.
async fn run(dir: &Path) -> Result<(), String> {
    let f = fixture().await;
    let input = tree(&dir.join("input"));
    for (rel, bytes) in &input {
        write_file(&f.path(rel), bytes);
    }
    let patch_text = std::fs::read_to_string(dir.join("patch.txt"))
        .map_err(|e| format!("cannot read patch.txt: {e}"))?;
    let r = f
        .call("apply_patch", json!({ "patchText": patch_text }))
        .await;
    let got = tree(&f.wt);

    match std::fs::read_to_string(dir.join("error.txt")) {
        Ok(expected_error) => {
            let expected_error = expected_error.trim_end();
            if r.outcome != Outcome::Failed {
                return Err(format!(
                    "expected failure containing {expected_error:?}, got {:?}: {}",
                    r.outcome, r.output
                ));
            }
            let err = r.error.unwrap_or_default();
            if !err.contains(expected_error) {
                return Err(format!("error {err:?} does not contain {expected_error:?}"));
            }
            if got != input {
                return Err(format!(
                    "a failed patch changed the tree:\n{}",
                    describe_diff(&got, &input)
                ));
            }
            // The README promises expected/ is a copy of input/ for failures.
            let expected = tree(&dir.join("expected"));
            if expected != input {
                return Err("fixture: expected/ is not a copy of input/".into());
            }
        }
        Err(_) => {
            if r.outcome != Outcome::Ok {
                return Err(format!("expected success, got error {:?}", r.error));
            }
            if !r
                .output
                .starts_with("Success. Updated the following files:\n")
            {
                return Err(format!("unexpected output {:?}", r.output));
            }
            let expected = tree(&dir.join("expected"));
            if got != expected {
                return Err(format!(
                    "tree differs from expected/:\n{}",
                    describe_diff(&got, &expected)
                ));
            }
        }
    }
    // Every run asks once for edit (successes), or not at all (failures found while
    // planning); never a stray external_directory ask for worktree paths.
    if f.asks().iter().any(|a| a.0 != "edit") || f.asks().len() > 1 {
        return Err(format!("unexpected asks {:?}", f.asks()));
    }
    Ok(())
}

/// All scenarios, collecting every failure so one run shows them all.
#[tokio::test]
async fn every_apply_patch_scenario_matches_its_expected_tree() {
    let dirs = scenarios();
    assert!(
        dirs.len() >= 20,
        "only {} scenarios found in {}",
        dirs.len(),
        scenarios_dir().display()
    );
    let mut failures = Vec::new();
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if let Err(why) = run(dir).await {
            failures.push(format!("{name}: {why}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenarios failed:\n{}",
        failures.len(),
        dirs.len(),
        failures.join("\n")
    );
}

/// The fixture set covers both outcomes, so neither branch above is vacuous.
#[test]
fn scenarios_cover_success_and_failure() {
    let dirs = scenarios();
    let failing = dirs.iter().filter(|d| d.join("error.txt").exists()).count();
    let missing_patch: Vec<_> = dirs
        .iter()
        .filter(|d| !d.join("patch.txt").exists())
        .collect();
    assert!(
        missing_patch.is_empty(),
        "no patch.txt in {missing_patch:?}"
    );
    assert!(failing >= 5, "only {failing} failure scenarios");
    assert!(
        dirs.len() - failing >= 15,
        "only {} success scenarios",
        dirs.len() - failing
    );
}
