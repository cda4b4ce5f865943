//! Runs every scenario of runner-patch's `crates/patch/tests/fixtures/scenarios/` through
//! the real `apply_patch` tool (registry → permission gate → sandbox server → disk), not
//! just the planner its own tests run, and compares the whole worktree byte for byte
//! afterwards. The folders are read and judged by the patch crate's `tests/scenario.rs`, so
//! both runners hold a scenario to the same rules (see the fixtures' README.md).

use std::path::Path;

#[path = "../crates/patch/tests/scenario.rs"]
mod scenario;

use common::{fixture, write_file};
use runner_tool::registry::Outcome;
use scenario::{Scenario, load_all, tree};
use serde_json::json;

/// Runs one scenario; `Err` describes what went wrong.
async fn run(s: &Scenario) -> Result<(), String> {
    let f = fixture().await;
    for (rel, bytes) in &s.input {
        write_file(&f.path(rel), bytes);
    }
    let r = f.call("apply_patch", json!({ "patchText": s.patch })).await;
    let result = match r.outcome {
        Outcome::Ok => Ok(()),
        Outcome::Failed => Err(r.error.clone().unwrap_or_default()),
        other => return Err(format!("unexpected outcome {other:?}: {}", r.output)),
    };
    let succeeded = result.is_ok();
    s.judge(result, &tree(&f.wt))?;
    if succeeded
        && !r
            .output
            .starts_with("Success. Updated the following files:\n")
    {
        return Err(format!("unexpected output {:?}", r.output));
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
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/patch/tests/fixtures/scenarios");
    let scenarios = load_all(&dir);
    assert!(
        scenarios.len() >= 20,
        "only {} scenarios found in {}",
        scenarios.len(),
        dir.display()
    );
    let mut failures = Vec::new();
    for s in &scenarios {
        if let Err(why) = run(s).await {
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
