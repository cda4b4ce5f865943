//! Harbor's own harness driving runner's environment (`harbor run --env
//! runner_sandbox.harbor:RunnerEnvironment`), end to end: the pytest suite
//! `python/tests/test_harbor.py` runs Harbor's oracle over the task folders in
//! `python/tests/fixtures/harbor` and `runner eval` over the same folders, and checks the
//! verdicts agree, each phase's network, the audit trail, the compose refusal, the
//! resource refusal and that nothing is left.
//!
//! Harbor needs Python 3.12 or newer, which Debian's python3 is not here: the virtual
//! environment is made with pyenv's 3.12 (or a `python3.12` on PATH), once per set of
//! requirements, under `target/tmp/` (a scratch folder renamed into place whole, under a
//! lock), and the plug-in is taken from the source tree (`PYTHONPATH=python`), so an edit
//! to it needs no reinstall.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the venv holds; its folder's name is a hash of this text.
const REQUIREMENTS: &str = "harbor==0.26.0\npytest==8.4.2\npytest-asyncio==1.2.0\n";

/// A Python of 3.12 or newer: pyenv's, else one on PATH.
fn python312() -> PathBuf {
    let pyenv = Path::new("/root/.pyenv/versions/3.12.1/bin/python3.12");
    if pyenv.exists() {
        return pyenv.to_path_buf();
    }
    for name in ["python3.13", "python3.12"] {
        if let Ok(out) = Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
            && out.status.success()
        {
            return PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        }
    }
    panic!(
        "Harbor needs Python 3.12 or newer and none is here: install one (pyenv install 3.12, \
         or apt-get install python3.12) and run the test again"
    );
}

/// The venv's Python, made if missing.
fn harbor_venv() -> PathBuf {
    // FNV-1a: stable across toolchains, enough to tell requirement sets apart.
    let hash = REQUIREMENTS
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("harbor-venv-{hash:016x}"));
    let python = dir.join("bin/python");
    if python.exists() {
        return python;
    }
    let _lock = common::engine::lock("runner-test-harbor-venv.lock");
    if python.exists() {
        return python;
    }
    let scratch = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&scratch);
    let run = |cmd: &mut Command, what: &str| {
        let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            out.status.success(),
            "{what} failed; the test needs it and never skips:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(
        Command::new(python312()).args(["-m", "venv"]).arg(&scratch),
        "making the Harbor venv",
    );
    let requirements = scratch.join("requirements.txt");
    std::fs::write(&requirements, REQUIREMENTS).unwrap();
    run(
        Command::new(scratch.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg("-r")
            .arg(&requirements),
        "pip install harbor and pytest",
    );
    // The venv's Python finds its packages from where it lies (the test runs Harbor as
    // `python -c`, not through a script that names the scratch path).
    std::fs::rename(&scratch, &dir).unwrap_or_else(|e| {
        panic!(
            "cannot move {} to {}: {e}",
            scratch.display(),
            dir.display()
        )
    });
    python
}

#[test]
fn harbors_oracle_in_runners_environment_agrees_with_runner_eval() {
    common::engine::docker();
    let python = harbor_venv();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let out = Command::new(&python)
        .args([
            "-m",
            "pytest",
            "tests/test_harbor.py",
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
        "pytest tests/test_harbor.py failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
