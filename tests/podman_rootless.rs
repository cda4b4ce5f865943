//! Rootless Podman: an unprivileged user's own `podman system service` (started once per
//! test process). Two ways in:
//!
//! - That user running runner (a rootless engine can only mount what its user may read):
//!   runner finds the engine by itself (`$XDG_RUNTIME_DIR/podman/podman.sock`), the sandbox
//!   writes the worktree as the user, and the walls hold: each attack must fail, next to a
//!   control showing the user itself could do it outside the sandbox. On cgroup v1 the
//!   engine has no cgroup controllers: runner says which limits it cannot enforce.
//! - The whole docker escape suite (`escape_suite!`, the same attack table as
//!   `escape_docker.rs`) and the tool conformance script, on this engine
//!   (`common::podman::rootless_engine`): the test folders belong to the user, the sandbox
//!   runs as the user (keep-id), host git and the runner command line run as the user. The
//!   same holes as on Docker (none). The limits this engine says it cannot enforce are not
//!   judged, each with its reason (`podman::unenforced_limits`); all the others are.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test's panic is its failure report"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Backend;
use common::engine::use_engine;
use common::escape;
use common::podman::{ROOTLESS_USER, Rootless, rootless, rootless_engine};

const BACKEND: Backend = Backend::Docker;

common::escape_suite!(BACKEND, holes: &[], engine: rootless_engine);

/// The tool script of `backends_agree.rs` gives the reference's results on rootless Podman
/// too, with the worktree the user's.
#[tokio::test(flavor = "multi_thread")]
async fn tools_agree_with_the_reference() {
    use_engine(rootless_engine);
    common::agree::check(&[Backend::Docker]).await;
}

/// The suite's sandboxes really are the user's: the engine says it is rootless Podman, the
/// commands run as the user, and what they make in the worktree is the user's on the host.
#[tokio::test(flavor = "multi_thread")]
async fn the_suites_sandbox_runs_as_the_user_on_its_engine() {
    let test_engine = use_engine(rootless_engine);
    let owner = test_engine.owner.clone().expect("an owner");
    let engine = runner_sandbox::docker::engine::Engine::open(test_engine.host.as_deref())
        .await
        .expect("the engine answers");
    assert_eq!(engine.kind, runner_sandbox::docker::engine::Kind::Podman);
    assert!(engine.rootless, "{}", engine.describe());
    assert_eq!(engine.owner, Some((owner.uid, owner.gid)));
    let lab = escape::Lab::new(BACKEND);
    let sb = lab.open().await;
    let (code, stdout, stderr, _) = escape::run(&sb, "id -u; id -g; echo x > made.txt").await;
    assert_eq!(code, Some(0), "{stdout:?} {stderr:?}");
    assert_eq!(stdout, format!("{}\n{}\n", owner.uid, owner.gid));
    let made = std::fs::metadata(lab.wt.join("made.txt")).expect("made.txt on the host");
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&made), owner.uid);
}

/// A lab the user owns: `wt/` (the worktree) and `outside/secret.txt` beside it.
struct Lab {
    _tmp: tempfile::TempDir,
    wt: PathBuf,
    outside: PathBuf,
    runner: PathBuf,
}

fn lab(engine: &Rootless) -> Lab {
    let tmp = tempfile::Builder::new()
        .prefix("runner-rootless-")
        .tempdir()
        .unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (wt, outside) = (base.join("wt"), base.join("outside"));
    std::fs::create_dir_all(&wt).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(wt.join("a.txt"), "inside\n").unwrap();
    std::fs::write(outside.join("secret.txt"), "outside secret\n").unwrap();
    // The runner under test, where the user can run it (the build may be under a home
    // other users cannot enter).
    let runner = base.join("runner");
    common::copy_runner_to(&runner);
    common::chown_tree(&base, engine.uid, engine.gid);
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&base, mode).unwrap();
    Lab {
        _tmp: tmp,
        wt,
        outside,
        runner,
    }
}

/// Runs `args` as the user, with only its own HOME and XDG_RUNTIME_DIR: (status ok, stdout,
/// stderr).
fn as_user(engine: &Rootless, cwd: &Path, program: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("runuser")
        .args(["-u", ROOTLESS_USER, "--", "env", "-i", "PATH=/usr/bin:/bin"])
        .args(engine.env.iter().map(|(k, v)| format!("{k}={v}")))
        .arg(program)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("runuser");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One bash tool call in a rootless sandbox on `lab.wt`.
fn bash(engine: &Rootless, lab: &Lab, command: &str) -> (bool, String, String) {
    let args = serde_json::json!({ "command": command, "description": "t" }).to_string();
    let root = lab.wt.display().to_string();
    as_user(
        engine,
        &lab.wt,
        &lab.runner,
        &[
            "tool",
            "call",
            "bash",
            &args,
            "--sandbox",
            "docker",
            "--root",
            &root,
            "--ask",
            "allow",
        ],
    )
}

#[test]
fn sandbox_serves_the_user_on_its_own_engine() {
    let engine = rootless();
    let lab = lab(engine);
    let (ok, out, err) = bash(engine, &lab, "id -u; cat a.txt; echo made > made.txt");
    assert!(ok, "stdout {out:?} stderr {err:?}");
    assert_eq!(
        out.trim_end(),
        format!("{}\ninside", engine.uid),
        "the user's uid and the worktree ({err:?})"
    );
    let made = std::fs::metadata(lab.wt.join("made.txt")).expect("made.txt on the host");
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&made), engine.uid);
    assert!(
        err.contains("Podman") && err.contains("(rootless)") && err.contains("pids"),
        "runner says which limits the engine cannot enforce: {err:?}"
    );
    let (_, doctor, _) = as_user(engine, &lab.wt, &lab.runner, &["sandbox", "doctor"]);
    let engine_line = format!("(rootless) at unix://{}", engine.socket);
    assert!(doctor.contains(&engine_line), "{doctor}");
    assert!(
        doctor.contains("warn  cgroups") || doctor.contains("ok    cgroups"),
        "{doctor}"
    );
}

#[test]
fn attacks_from_a_rootless_sandbox_fail() {
    let engine = rootless();
    let lab = lab(engine);
    let secret = lab.outside.join("secret.txt");
    let planted = lab.outside.join("planted");
    let home_file = "/var/lib/runner-podman/.config/containers/storage.conf";
    // Controls: the user itself reads both files outside the sandbox.
    for file in [secret.as_path(), Path::new(home_file)] {
        let (ok, out, _) = as_user(
            engine,
            &lab.wt,
            Path::new("/bin/cat"),
            &[&file.display().to_string()],
        );
        assert!(
            ok && !out.is_empty(),
            "control: the user reads {}",
            file.display()
        );
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let command = format!(
        "cat {s} && echo READ-SECRET; cat {home_file} && echo READ-HOME; \
         echo x > {p} && echo WROTE-OUTSIDE; \
         python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)' 2>/dev/null && echo CONNECTED; \
         echo done",
        s = secret.display(),
        p = planted.display(),
    );
    let (ok, out, err) = bash(engine, &lab, &command);
    assert!(ok, "stdout {out:?} stderr {err:?}");
    assert!(out.trim_end().ends_with("done"), "the command ran: {out:?}");
    for leak in ["READ-SECRET", "READ-HOME", "WROTE-OUTSIDE", "CONNECTED"] {
        assert!(!out.contains(leak), "{leak}: {out:?}");
    }
    assert!(!planted.exists(), "a file was planted outside the worktree");
}
