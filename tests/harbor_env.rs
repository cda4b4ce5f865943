//! Harbor's own harness driving runner's environment (`harbor run --env
//! runner_sandbox.harbor:RunnerEnvironment`), end to end: the pytest suite
//! `python/tests/test_harbor.py` runs Harbor's oracle over the task folders in
//! `python/tests/fixtures/harbor` and `runner eval` over the same folders, and checks the
//! verdicts agree, each phase's network, the audit trail, the compose refusal, the
//! resource refusal and that nothing is left; `test_harbor_calls.py` makes the
//! environment's calls one by one (exec's streams, status, cwd, env, user and timeout,
//! files and folders both ways).
//!
//! Harbor and pytest are in a Python 3.12 venv under `target/tmp/`, made once per set of
//! requirements ([`common::harbor::venv`]); the plug-in is taken from the source tree
//! (`PYTHONPATH=python`), so an edit to it needs no reinstall.

use std::path::Path;
use std::process::Command;

#[test]
fn harbors_oracle_in_runners_environment_agrees_with_runner_eval() {
    common::engine::docker();
    let python = common::harbor::venv();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let out = Command::new(&python)
        .args([
            "-m",
            "pytest",
            "tests/test_harbor.py",
            "tests/test_harbor_calls.py",
            "-q",
            "-p",
            "no:cacheprovider",
        ])
        .current_dir(&root)
        .env("RUNNER_BIN", env!("CARGO_BIN_EXE_runner"))
        .env("PYTHONPATH", &root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pytest of the Harbor environment failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
