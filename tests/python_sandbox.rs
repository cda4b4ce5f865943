//! The Python package (`python/`, `runner-sandbox`) against this build's runner: the
//! pytest suites `python/tests/test_protocol.py` (the `runner sandbox serve --stdio`
//! protocol through the asyncio client), `test_inspect_self_check.py` (inspect_ai's own
//! conformance suite for sandbox providers, on landlock and on a docker task image) and
//! `test_inspect_eval.py` (a real inspect eval, `mockllm` scripted to call bash, with
//! `sandbox="runner"`).
//!
//! inspect_ai needs a newer Python than Debian's here: the virtual environment is made with
//! pyenv's 3.12 (or a `python3.12` on PATH, installed with apt when neither is there), once
//! per set of requirements, under `target/tmp/` (made in a scratch folder and renamed into
//! place whole, under a lock). The package itself is installed into it on every run with
//! `pip install ./python`, as a user installs it: the test sees the checkout's code, and
//! inspect finds the plug-in through the package's entry point, never by an import.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the venv holds besides the package; its folder's name is a hash of this text.
const REQUIREMENTS: &str = "inspect_ai==0.3.285\npytest==8.4.2\npytest-asyncio==1.2.0\n\
                            pytest-xdist==3.8.0\nsetuptools==80.9.0\n";

/// pyenv's Python 3.12, else one on PATH, else Debian's package of it.
fn python312() -> PathBuf {
    let pyenv = Path::new("/root/.pyenv/versions/3.12.1/bin/python3.12");
    if pyenv.exists() {
        return pyenv.to_path_buf();
    }
    let on_path = || {
        ["python3.13", "python3.12"].iter().find_map(|name| {
            let out = Command::new("sh")
                .args(["-c", &format!("command -v {name}")])
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        })
    };
    if let Some(found) = on_path() {
        return found;
    }
    common::engine::ensure_package_for("python3.12-venv", "Python 3.12", || on_path().is_some());
    on_path().expect("python3.12 installed but not on PATH")
}

/// The venv's Python with the requirements, made if missing.
fn venv() -> PathBuf {
    // FNV-1a: stable across toolchains, enough to tell requirement sets apart.
    let hash = REQUIREMENTS
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("inspect-venv-{hash:016x}"));
    let python = dir.join("bin/python");
    if python.exists() {
        return python;
    }
    let _lock = common::engine::lock("runner-test-inspect-venv.lock");
    if python.exists() {
        return python;
    }
    let scratch = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&scratch);
    run(
        Command::new(python312()).args(["-m", "venv"]).arg(&scratch),
        "making the inspect venv",
    );
    let requirements = scratch.join("requirements.txt");
    std::fs::write(&requirements, REQUIREMENTS).unwrap();
    run(
        pip(&scratch.join("bin/python"))
            .arg("-r")
            .arg(&requirements),
        "pip install inspect_ai and pytest",
    );
    std::fs::rename(&scratch, &dir).unwrap_or_else(|e| {
        panic!(
            "cannot move {} to {}: {e}",
            scratch.display(),
            dir.display()
        )
    });
    python
}

fn pip(python: &Path) -> Command {
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]);
    cmd
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed; the test needs it and never skips:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_python_package_and_the_inspect_plug_in_pass_their_suites() {
    common::engine::docker();
    let python = venv();
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    // The checkout's package, installed as a user installs it (built in a copy, so no
    // build folder is left in the checkout).
    let build = tempfile::tempdir().unwrap();
    let copy = build.path().join("python");
    run(
        Command::new("cp").arg("-r").arg(&package).arg(&copy),
        "copying python/",
    );
    run(
        pip(&python)
            .args(["--no-deps", "--no-build-isolation", "--force-reinstall"])
            .arg(&copy),
        "pip install ./python",
    );
    let out = Command::new(&python)
        // -P: the installed package, not the source folder pytest starts in.
        .args([
            "-P",
            "-m",
            "pytest",
            "tests/test_protocol.py",
            "tests/test_inspect_self_check.py",
            "tests/test_inspect_eval.py",
            "-q",
            "-p",
            "no:cacheprovider",
            // The checks wait on sleeps and timeouts more than on the CPU.
            "-n",
            "4",
        ])
        .current_dir(&package)
        .env("RUNNER_BIN", env!("CARGO_BIN_EXE_runner"))
        .env("RUNNER_TEST_IMAGE", runner_sandbox::spec::DEFAULT_IMAGE)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pytest failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every check ran: the passes and, on landlock, exactly the expected failures.
    assert!(stdout.contains(" passed"), "{stdout}");
    assert!(
        !stdout.contains("skipped"),
        "a check was skipped:\n{stdout}"
    );
    assert!(stdout.contains("5 xfailed"), "{stdout}");
}
