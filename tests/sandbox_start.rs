//! A sandbox that cannot start says why, and what to do, instead of "the sandbox server is
//! gone": each case is made real here (an image the engine lacks, a socket this user may
//! not open, a runtime the engine lacks, no engine at all, an image without a shell) and
//! `runner run` must exit with its sandbox status (6), name the cause, and never ask the
//! model. Control: the same run with the real image starts.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// A worktree and data folders any user may use, and a model address nothing serves (a
/// run that got as far as asking would fail differently).
struct Place {
    _tmp: tempfile::TempDir,
    base: PathBuf,
}

impl Place {
    fn new() -> Place {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        for d in ["wt", "data", "config"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        // A checkout: a direct `runner run` outside git stops before the sandbox starts.
        common::git(&base.join("wt"), &["init", "-q"]);
        for d in [
            &base,
            &base.join("wt"),
            &base.join("data"),
            &base.join("config"),
        ] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        Place { _tmp: tmp, base }
    }

    fn run(&self, exe: PathBuf, args: &[&str], env: &[(&str, &str)], uid: Option<u32>) -> Output {
        let mut c = Command::new(exe);
        c.current_dir(self.base.join("wt"))
            .args(["run", "--model", "openai/none", "--sandbox", "docker"])
            .args(args)
            .arg("say hello")
            .env("HOME", &self.base)
            .env("XDG_DATA_HOME", self.base.join("data"))
            .env("XDG_CONFIG_HOME", self.base.join("config"))
            .env("OPENAI_API_KEY", "sk-none")
            .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
            .env_remove("DOCKER_HOST")
            .stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        if let Some(id) = uid {
            c.uid(id).gid(id);
        }
        c.output().unwrap()
    }
}

fn said(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts a start failure: the sandbox exit status, every part said, and not the words of
/// a server that died mid-session.
fn refused(out: &Output, parts: &[&str]) {
    let text = said(out);
    assert_eq!(out.status.code(), Some(6), "{text}");
    for part in parts {
        assert!(text.contains(part), "{part:?} not in:\n{text}");
    }
    assert!(!text.contains("server is gone"), "{text}");
}

const RUNNER: &str = env!("CARGO_BIN_EXE_runner");

#[test]
fn a_missing_image_says_runner_image_build() {
    common::engine::docker();
    let p = Place::new();
    let out = p.run(
        RUNNER.into(),
        &["--image", "runner-test-nope:latest"],
        &[],
        None,
    );
    refused(
        &out,
        &[
            "cannot start the docker sandbox: the sandbox image runner-test-nope:latest is not in the engine at Docker",
            "build it with `runner image build`",
        ],
    );
}

#[test]
fn a_runtime_the_engine_lacks_is_named_with_the_ones_it_has() {
    common::engine::docker();
    let p = Place::new();
    let out = p.run(RUNNER.into(), &["--runtime", "nosuchrt"], &[], None);
    refused(&out, &["has no runtime \"nosuchrt\"; it has: ", "runc"]);
}

#[test]
fn no_engine_says_where_it_looked() {
    let p = Place::new();
    let nowhere = format!("unix://{}/no.sock", p.base.display());
    let out = p.run(RUNNER.into(), &[], &[("DOCKER_HOST", &nowhere)], None);
    refused(
        &out,
        &[
            &format!("no engine answers at DOCKER_HOST={nowhere}"),
            "start it there, or unset DOCKER_HOST",
        ],
    );
}

/// The machine's engine socket is `root:docker 0660`: nobody (uid 65534) may open it, and
/// must be told that, not that the engine is down.
#[test]
fn a_socket_this_user_may_not_open_says_permission_denied() {
    common::engine::docker();
    let p = Place::new();
    let out = p.run(common::runner_for_any_user(), &[], &[], Some(65534));
    refused(
        &out,
        &[
            "permission denied on the container engine's socket /var/run/docker.sock",
            "usermod -aG docker",
            "rootless Podman",
        ],
    );
    assert!(!said(&out).contains("does not answer"), "{}", said(&out));
}

/// An image with files but no shell: the server says so at once, and runner says the image
/// has no shell. Control: the real image starts (the run then fails at the model, which is
/// not a sandbox failure).
#[tokio::test(flavor = "multi_thread")]
async fn an_image_without_a_shell_is_named() {
    common::engine::docker();
    const IMAGE: &str = "runner-test-noshell";
    let mut tar = tar::Builder::new(Vec::new());
    for d in ["etc/", "tmp/", "bin/"] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        tar.append_data(&mut h, d, std::io::empty()).unwrap();
    }
    let bytes = tar.into_inner().unwrap();
    common::engine::import_image(IMAGE, bytes).await;
    let p = Place::new();
    let out = p.run(
        RUNNER.into(),
        &["--image", &format!("{IMAGE}:latest")],
        &[],
        None,
    );
    refused(
        &out,
        &[&format!("the image {IMAGE}:latest has no shell"), "/bin/sh"],
    );
    // Control: the sandbox image starts; what fails then is the model nothing serves.
    let out = p.run(RUNNER.into(), &[], &[], None);
    let text = said(&out);
    assert!(text.starts_with("runner: sandbox: docker"), "{text}");
    assert_ne!(out.status.code(), Some(6), "{text}");
}

/// An engine is asked what it is once per process: a second open only asks whether it
/// still answers (`/_ping`, and on Docker its cheap `/info` for the runtimes), since Podman answers `/version` by asking dpkg for its
/// helpers' versions (about half a second each). One that stops answering is identified
/// afresh, and one that is gone gives the error a first open gives.
#[tokio::test(flavor = "multi_thread")]
async fn an_engine_is_identified_once_and_again_only_after_it_stops_answering() {
    use common::engine_faults::{EngineFaults, Fault};
    use runner_sandbox::docker::engine::Engine;
    use runner_sandbox::start_error::SandboxStartError;
    common::engine::docker();
    let engine = std::path::Path::new(runner_sandbox::docker::engine::DOCKER_SOCKET);
    // The second ping fails: the third open must identify the engine again.
    let proxy = EngineFaults::start(engine, vec![Fault::status(500, "GET /_ping").nth(2)]);
    let host = proxy.host();
    let count = |call: &str| proxy.calls().iter().filter(|c| *c == call).count();
    let first = Engine::open(Some(&host)).await.expect("the engine answers");
    let asked = count("GET /version");
    assert!(
        asked >= 1,
        "the first open asks what the engine is: {:?}",
        proxy.calls()
    );
    let informed = count("GET /info");
    assert_eq!(
        informed,
        1,
        "Docker's runtimes are read: {:?}",
        proxy.calls()
    );
    let second = Engine::open(Some(&host)).await.expect("the engine answers");
    assert_eq!(count("GET /version"), asked, "{:?}", proxy.calls());
    assert_eq!(count("GET /_ping"), 1, "{:?}", proxy.calls());
    // Docker can change its runtimes without a restart: they are read again.
    assert_eq!(count("GET /info"), 2, "{:?}", proxy.calls());
    assert_eq!((second.kind, &second.version), (first.kind, &first.version));
    Engine::open(Some(&host)).await.expect("the engine answers");
    assert_eq!(proxy.fired(), ["GET /_ping -> 500"], "{:?}", proxy.calls());
    assert_eq!(
        count("GET /version"),
        2 * asked,
        "an engine whose ping failed is identified again: {:?}",
        proxy.calls()
    );
    drop(proxy);
    match Engine::open(Some(&host)).await {
        Err(SandboxStartError::EngineDown(said)) => {
            assert!(said.contains(&host), "{said}");
        }
        Err(other) => panic!("not the engine-down error: {other}"),
        Ok(_) => panic!("an engine that is gone was taken as known"),
    }
}
