//! Every scenario in `tests/fixtures/scenarios/` through this crate alone: the input copied
//! into a temporary directory, [`parse_patch`] and [`plan`] reading it from disk, the planned
//! changes written in order as the `apply_patch` tool writes them, and the whole tree then
//! compared byte for byte. The root's `tests/apply_patch_scenarios.rs` runs the same folders
//! through the real tool and sandbox.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test's panic is its failure report"
)]

mod scenario;

use std::path::Path;

use runner_patch::{FileChange, ReadFailure, parse_patch, plan};
use scenario::{Scenario, load_all, tree};

fn scenarios() -> Vec<Scenario> {
    load_all(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/scenarios"))
}

/// Writes `content` at `path`, creating its parent directories.
fn write(path: &Path, content: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, content)
}

/// The planned changes written under `root`, in patch order.
fn write_changes(root: &Path, changes: &[FileChange]) -> std::io::Result<()> {
    for change in changes {
        match change {
            FileChange::Add { path, content } => write(&root.join(path), content.as_bytes())?,
            FileChange::Delete { path, .. } => std::fs::remove_file(root.join(path))?,
            FileChange::Update {
                path,
                move_path: Some(to),
                new_content,
                ..
            } => {
                write(&root.join(to), new_content.as_bytes())?;
                std::fs::remove_file(root.join(path))?;
            }
            FileChange::Update {
                path,
                move_path: None,
                new_content,
                ..
            } => write(&root.join(path), new_content.as_bytes())?,
        }
    }
    Ok(())
}

/// Parses, plans against the files under `root` and writes; `Err` is the message the tool
/// would give the model.
fn apply(root: &Path, patch: &str) -> Result<(), String> {
    let hunks = parse_patch(patch).map_err(|e| e.tool_message())?;
    let mut read = |path: &str| -> Result<String, ReadFailure> {
        std::fs::read_to_string(root.join(path)).map_err(ReadFailure::from)
    };
    let changes = plan(&hunks, &mut read).map_err(|e| e.tool_message())?;
    write_changes(root, &changes).map_err(|e| format!("writing the planned changes: {e}"))
}

/// All scenarios, collecting every failure so one run shows them all.
#[test]
fn every_scenario_matches_its_expected_tree() {
    let scenarios = scenarios();
    let mut failures = Vec::new();
    for s in &scenarios {
        let dir = tempfile::tempdir().expect("temporary directory");
        for (rel, bytes) in &s.input {
            write(&dir.path().join(rel), bytes).expect("write input file");
        }
        let result = apply(dir.path(), &s.patch);
        if let Err(why) = s.judge(result, &tree(dir.path())) {
            failures.push(format!("{}: {why}", s.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenarios failed:\n{}",
        failures.len(),
        scenarios.len(),
        failures.join("\n")
    );
}

/// The fixture set covers both outcomes, so neither branch of the judge is vacuous.
#[test]
fn scenarios_cover_success_and_failure() {
    let scenarios = scenarios();
    let failing = scenarios.iter().filter(|s| s.error.is_some()).count();
    assert!(scenarios.len() >= 20, "only {} scenarios", scenarios.len());
    assert!(failing >= 5, "only {failing} failure scenarios");
    assert!(
        scenarios.len() - failing >= 15,
        "only {} success scenarios",
        scenarios.len() - failing
    );
}

/// The judge itself: a tree that is not the expected one, or an error that is not the
/// expected one, is reported, so the loop above cannot pass by judging nothing.
#[test]
fn the_judge_refuses_a_wrong_tree_and_a_wrong_error() {
    let scenarios = scenarios();
    let success = scenarios
        .iter()
        .find(|s| s.error.is_none())
        .expect("a success");
    let failure = scenarios
        .iter()
        .find(|s| s.error.is_some())
        .expect("a failure");
    let wrong_tree = vec![("stray.txt".to_string(), b"x".to_vec())];
    assert!(success.judge(Ok(()), &wrong_tree).is_err());
    assert!(
        success
            .judge(Err("boom".into()), &success.expected)
            .is_err()
    );
    assert!(failure.judge(Ok(()), &failure.input).is_err());
    assert!(failure.judge(Err("boom".into()), &failure.input).is_err());
    let right = failure.error.clone().expect("error.txt");
    assert!(failure.judge(Err(right), &failure.input).is_ok());
}
