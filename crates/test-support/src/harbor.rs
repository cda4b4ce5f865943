//! Harbor (the evaluation harness, from PyPI) for the tests and the bench that drive
//! runner's Harbor environment (`python/runner_sandbox/harbor.py`).
//!
//! Harbor needs Python 3.12 or newer, which Debian's python3 is not here: the virtual
//! environment is made with pyenv's 3.12 (or a `python3.12` or `python3.13` on PATH), once
//! per Python and set of requirements (its folder is named by their hash), in the
//! machine's test cache ([`crate::third_party::cache_dir`], where a clean clone on the same
//! machine finds it, as it finds the other pinned installs), in a scratch folder renamed
//! into place whole, under a lock, its scripts then pointed at the final path. Harbor itself runs as [`cli`]
//! runs it, through the venv's Python. `podman-compose` is in it for Harbor's own `--env
//! podman`, which the bench runs beside runner's environment.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the venv holds.
pub const REQUIREMENTS: &str =
    "harbor==0.26.0\npytest==8.4.2\npytest-asyncio==1.2.0\npodman-compose==1.6.0\n";

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
         or apt-get install python3.12) and run again"
    );
}

/// The venv's Python, made in the machine's test cache if missing.
pub fn venv() -> PathBuf {
    let base = python312();
    // FNV-1a: stable across toolchains, enough to tell requirement sets apart.
    let hash = format!("{}\n{REQUIREMENTS}", base.display())
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let dir = super::third_party::cache_dir().join(format!("harbor-venv-{hash:016x}"));
    let python = dir.join("bin/python");
    if python.exists() {
        return python;
    }
    let _lock = super::engine::lock("runner-test-harbor-venv.lock");
    if python.exists() {
        return python;
    }
    let scratch = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&scratch);
    let run = |cmd: &mut Command, what: &str| {
        let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            out.status.success(),
            "{what} failed; Harbor's tests need it and never skip:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(
        Command::new(&base).args(["-m", "venv"]).arg(&scratch),
        "making Harbor's venv",
    );
    let requirements = scratch.join("requirements.txt");
    std::fs::write(&requirements, REQUIREMENTS).expect("write requirements.txt");
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
        "pip install harbor, pytest and podman-compose",
    );
    std::fs::rename(&scratch, &dir).unwrap_or_else(|e| {
        panic!(
            "cannot move {} to {}: {e}",
            scratch.display(),
            dir.display()
        )
    });
    repoint_scripts(&dir, &scratch);
    python
}

/// The venv's scripts (`podman-compose`, which Harbor runs by name) name their Python by
/// the scratch path they were installed at: pointed at where the venv now lies.
fn repoint_scripts(dir: &Path, scratch: &Path) {
    let old = format!("#!{}/", scratch.display());
    let new = format!("#!{}/", dir.display());
    for entry in std::fs::read_dir(dir.join("bin"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(text) = std::fs::read(entry.path()) else {
            continue;
        };
        if text.starts_with(old.as_bytes()) {
            let mut fixed = new.clone().into_bytes();
            fixed.extend_from_slice(&text[old.len()..]);
            std::fs::write(entry.path(), fixed).expect("rewrite a venv script");
        }
    }
}

/// `harbor ARGS…` through the venv's `python` (no script in between), with
/// the venv's `bin/` first on PATH (`podman-compose`), the plug-in from the source tree
/// (`python/`), and LiteLLM's price list read from its own copy, not fetched (it retries
/// for seconds where there is no network).
pub fn cli(python: &Path) -> Command {
    let bin = python.parent().expect("the venv's bin/");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(python);
    cmd.args([
        "-c",
        "import sys; from harbor.cli.main import app; sys.argv[0] = 'harbor'; app()",
    ])
    .env("PATH", path)
    .env("PYTHONPATH", root)
    .env("LITELLM_LOCAL_MODEL_COST_MAP", "True");
    cmd
}
