//! inspect_ai for the tests and the bench of runner's Python package (`python/`): a venv
//! of Python 3.12 with inspect_ai pinned, made once per set of requirements, and the
//! checkout's package installed into it as a user installs it.
//!
//! inspect_ai needs a newer Python than Debian's here: the venv is made with pyenv's 3.12
//! (or a `python3.12` on PATH, installed with apt when neither is there), in a scratch
//! folder renamed into place whole, under a lock, so a killed run never leaves a half venv
//! that later runs would trust. It lives in the machine's test cache
//! ([`crate::third_party::cache_dir`]), as the other pinned third-party installs do, named
//! by its Python and requirements: a clean clone on the same machine finds it instead of
//! downloading and unpacking inspect_ai again (about a minute). The checkout's own package
//! is installed into it afresh by every run that tests it ([`install_package`]).

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the venv holds besides the package; its folder's name is a hash of this text.
pub const REQUIREMENTS: &str = "inspect_ai==0.3.285\npytest==8.4.2\npytest-asyncio==1.2.0\n\
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
    crate::engine::ensure_package_for("python3.12-venv", "Python 3.12", || on_path().is_some());
    on_path().expect("python3.12 installed but not on PATH")
}

/// The venv's Python with [`REQUIREMENTS`], made in the machine's test cache if missing.
pub fn venv() -> PathBuf {
    let base = python312();
    // FNV-1a: stable across toolchains, enough to tell requirement sets apart.
    let hash = format!("{}\n{REQUIREMENTS}", base.display())
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let dir = crate::third_party::cache_dir().join(format!("inspect-venv-{hash:016x}"));
    let python = dir.join("bin/python");
    if python.exists() {
        return python;
    }
    let _lock = crate::engine::lock("runner-test-inspect-venv.lock");
    if python.exists() {
        return python;
    }
    let scratch = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&scratch);
    run(
        Command::new(&base).args(["-m", "venv"]).arg(&scratch),
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

/// `pip install ./python` of the checkout `root` into the venv of `python`, built in a
/// copy so that no build folder is left in the checkout. Its folder (`root/python`).
pub fn install_package(python: &Path, root: &Path) -> PathBuf {
    let package = root.join("python");
    let build = tempfile::tempdir().unwrap();
    let copy = build.path().join("python");
    run(
        Command::new("cp").arg("-r").arg(&package).arg(&copy),
        "copying python/",
    );
    run(
        pip(python)
            .args(["--no-deps", "--no-build-isolation", "--force-reinstall"])
            .arg(&copy),
        "pip install ./python",
    );
    package
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
