//! The Python package (`python/`, `runner-sandbox`) against this build's runner: the
//! pytest suites `python/tests/test_protocol.py` (the `runner sandbox serve --stdio`
//! protocol through the asyncio client), `test_inspect_self_check.py` (inspect_ai's own
//! conformance suite for sandbox providers, on landlock and on a docker task image) and
//! `test_inspect_eval.py` (a real inspect eval, `mockllm` scripted to call bash, with
//! `sandbox="runner"`).
//!
//! The venv (Python 3.12, inspect_ai pinned) is `common::inspect`'s, made once under
//! `target/tmp/`; the package is installed into it on every run with `pip install
//! ./python`, as a user installs it, so the test sees the checkout's code and inspect
//! finds the plug-in through the package's entry point, never by an import.

use std::path::Path;
use std::process::Command;

#[test]
fn the_python_package_and_the_inspect_plug_in_pass_their_suites() {
    common::engine::docker();
    let python = common::inspect::venv();
    let package = common::inspect::install_package(&python, Path::new(env!("CARGO_MANIFEST_DIR")));
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
    // Every check ran: the passes and, on landlock, exactly the one expected failure
    // (another user); the checks that write to /tmp pass in landlock's own /tmp.
    assert!(stdout.contains(" passed"), "{stdout}");
    assert!(
        !stdout.contains("skipped"),
        "a check was skipped:\n{stdout}"
    );
    assert!(stdout.contains(" 1 xfailed"), "{stdout}");
}
