//! Lifecycle of sandboxes: what is left behind when runner dies, is interrupted, or runs a
//! command that ignores SIGTERM. Real engine, real kernel, real `runner` processes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::CreateContainerOptionsBuilder;
use runner_sandbox::BackendKind;
use runner_sandbox::docker::{LABEL, LABEL_OWNER};
use runner_sandbox::spec::{DEFAULT_IMAGE, SandboxSpec};

fn worktree() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix("runner-life-")
        .tempdir()
        .expect("temp dir");
    let wt = std::fs::canonicalize(tmp.path()).expect("canonical");
    (tmp, wt)
}

/// Processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) && !cmdline.contains("runner tool call") {
            out.push(pid);
        }
    }
    out
}

fn spawn_runner(backend: &str, wt: &Path, command: &str) -> Child {
    let args = serde_json::json!({ "command": command, "description": "long", "timeout": 600000 });
    Command::new(env!("CARGO_BIN_EXE_runner"))
        .args([
            "tool",
            "call",
            "bash",
            &args.to_string(),
            "--sandbox",
            backend,
            "--root",
        ])
        .arg(wt)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn runner")
}

async fn wait_until(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !f().await {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A sleep duration no other process on the machine uses: distinct per test process and,
/// through a counter, per test within it (tests run in parallel; a shared marker would let
/// one test see another's processes and signal its runner too early).
fn marker() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}", 1_000_000 + (std::process::id() % 100_000) * 100 + n)
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
}

fn wait_exit(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        assert!(start.elapsed() < timeout, "runner did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_runner_leaves_nothing_after_the_next_start() {
    let docker = common::engine::client().await;
    let (_tmp, wt) = worktree();
    let mark = marker();
    let mut child = spawn_runner("docker", &wt, &format!("sleep {mark}"));
    let pid = child.id();
    wait_until("the container", Duration::from_secs(30), async || {
        !common::engine::containers_of(&docker, pid).await.is_empty()
    })
    .await;
    signal(&child, libc::SIGKILL);
    wait_exit(&mut child, Duration::from_secs(10));

    // A container whose owner died without any cleanup at all (planted, because a killed
    // runner's own container usually goes by itself when its stdin closes). Its owner is a
    // stand-in that lives until the container runs: the tests beside this one start
    // sandboxes too, and each start removes the orphans it finds, this one included.
    let mut stand_in = Command::new("sleep").arg("1000").spawn().expect("sleep");
    let owner = stand_in.id();
    let body = ContainerCreateBody {
        image: Some(DEFAULT_IMAGE.into()),
        cmd: Some(vec!["sleep".into(), "1000".into()]),
        labels: Some(HashMap::from([
            (LABEL.to_string(), "1".to_string()),
            (LABEL_OWNER.to_string(), owner.to_string()),
        ])),
        ..Default::default()
    };
    let planted = docker
        .create_container(Some(CreateContainerOptionsBuilder::new().build()), body)
        .await
        .expect("plant a leftover container")
        .id;
    docker
        .start_container(&planted, None)
        .await
        .expect("start it");
    assert!(
        common::engine::containers_of(&docker, owner)
            .await
            .contains(&planted)
    );
    stand_in.kill().expect("end the stand-in owner");
    stand_in.wait().expect("reap it");

    // The next start removes every container whose owner is gone (and waits for one
    // another start is removing at the same moment).
    let mut spec = SandboxSpec::new(BackendKind::Docker, &wt).expect("spec");
    spec.server_exe = PathBuf::from(env!("CARGO_BIN_EXE_runner"));
    let sandbox = runner_sandbox::open(&spec).await.expect("next start");
    for owner in [pid, owner] {
        assert_eq!(
            common::engine::containers_of(&docker, owner).await,
            Vec::<String>::new()
        );
    }
    assert!(
        processes_with(&format!("sleep {mark}")).is_empty(),
        "the killed runner's command still runs"
    );
    drop(sandbox);
}

async fn interrupt_leaves_nothing(backend: &str) {
    let docker = if backend == "docker" {
        Some(common::engine::client().await)
    } else {
        None
    };
    let (_tmp, wt) = worktree();
    let mark = marker();
    let mut child = spawn_runner(backend, &wt, &format!("sleep {mark} & sleep {mark}; wait"));
    let pid = child.id();
    let pattern = format!("sleep {mark}");
    wait_until("the command", Duration::from_secs(30), async || {
        processes_with(&pattern).len() >= 2
    })
    .await;
    signal(&child, libc::SIGINT);
    let status = wait_exit(&mut child, Duration::from_secs(15));
    assert_eq!(
        status.code(),
        Some(130),
        "Ctrl-C exits with 130 ({status:?})"
    );
    wait_until(
        "the command's processes to go",
        Duration::from_secs(5),
        async || processes_with(&pattern).is_empty(),
    )
    .await;
    if let Some(docker) = docker {
        assert_eq!(
            common::engine::containers_of(&docker, pid).await,
            Vec::<String>::new()
        );
    }
    // The landlock sandbox's private temp directory goes too.
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .expect("tmp")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{}{pid}-", runner_sandbox::landlock::TMP_PREFIX))
        })
        .collect();
    assert!(leftovers.is_empty(), "temp directories left: {leftovers:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_during_a_long_command_leaves_no_container_and_no_process_docker() {
    interrupt_leaves_nothing("docker").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_during_a_long_command_leaves_no_process_landlock() {
    interrupt_leaves_nothing("landlock").await;
}

async fn sigterm_ignorer_dies_at_timeout(kind: BackendKind) {
    if kind == BackendKind::Docker {
        common::engine::docker();
    }
    let (_tmp, wt) = worktree();
    let mut spec = SandboxSpec::new(kind, &wt).expect("spec");
    spec.server_exe = PathBuf::from(env!("CARGO_BIN_EXE_runner"));
    let sandbox = runner_sandbox::open(&spec).await.expect("open");
    let mark = marker();
    let start = Instant::now();
    let mut ex = sandbox
        .client
        .exec(runner_protocol::ExecRequest {
            command: format!("trap '' TERM INT; (trap '' TERM; sleep {mark}) & sleep {mark}"),
            cwd: sandbox.worktree.clone(),
            env: sandbox.env.clone(),
            timeout_ms: 1000,
            stdin: None,
            output_limit: 1 << 16,
            interactive: false,
        })
        .await
        .expect("exec");
    let status = loop {
        match ex.next().await.expect("event") {
            runner_sandbox::client::ExecEvent::Exit(s) => break s,
            runner_sandbox::client::ExecEvent::Output(_) => {}
        }
    };
    assert!(status.timed_out, "{status:?}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
    wait_until("the ignorers to die", Duration::from_secs(3), async || {
        processes_with(&format!("sleep {mark}")).is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigterm_ignorer_is_killed_at_its_timeout_landlock() {
    sigterm_ignorer_dies_at_timeout(BackendKind::Landlock).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigterm_ignorer_is_killed_at_its_timeout_docker() {
    sigterm_ignorer_dies_at_timeout(BackendKind::Docker).await;
}

/// `runner sandbox doctor` on this machine: every check passes and each names what it found.
#[test]
fn sandbox_doctor_reports_what_the_machine_enforces() {
    common::engine::docker();
    let out = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["sandbox", "doctor"])
        .output()
        .expect("run doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for line in [
        "ok    landlock: kernel landlock ABI",
        "ok    seccomp:",
        "ok    engine: Docker",
        &format!("ok    image: {DEFAULT_IMAGE}"),
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(!text.contains("FAIL"), "{text}");
}

/// Processes (zombies included) whose process group is `pgid`.
fn in_group(pgid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("proc").flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp …; comm may hold spaces, so split after its ')'.
        let Some((head, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pgid) {
            out.push(format!("{head}) {}", fields[0]));
        }
    }
    out
}

/// A one-shot `tool call` leaves nothing of its process group behind: the server it started
/// is waited for (not left a zombie or an orphan) on every backend that starts one.
#[test]
fn a_tool_call_waits_for_the_server_it_started() {
    use std::os::unix::process::CommandExt;
    let (_tmp, wt) = worktree();
    for backend in ["none", "landlock"] {
        for _ in 0..10 {
            let mut child = Command::new(env!("CARGO_BIN_EXE_runner"))
                .args(["tool", "call", "bash"])
                .arg(r#"{"command":"true","description":"nothing"}"#)
                .args(["--sandbox", backend, "--root"])
                .arg(&wt)
                .env("XDG_DATA_HOME", wt.join(".data"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .expect("runner");
            let pgid = child.id();
            let status = child.wait().expect("wait");
            assert!(status.success(), "{backend}: {status}");
            let left = in_group(pgid);
            assert!(left.is_empty(), "{backend} left {left:?}");
        }
    }
}
