//! Interactive commands: a process started with its standard input kept open, written to
//! piece by piece and closed, its output streamed back as it comes (what a stdio MCP server
//! inside the sandbox needs), on every backend.

use std::time::Duration;

use common::Backend;
use runner_protocol::ExecRequest;
use runner_sandbox::client::ExecEvent;

/// Reads output until `want` has appeared; the whole output so far.
async fn until(exec: &mut runner_sandbox::client::Execution, seen: &mut String, want: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !seen.contains(want) {
        let event = tokio::time::timeout_at(deadline, exec.next())
            .await
            .unwrap_or_else(|_| panic!("no {want:?} in {seen:?}"))
            .expect("event");
        match event {
            ExecEvent::Output(o) => seen.push_str(&String::from_utf8_lossy(&o.data)),
            ExecEvent::Exit(s) => panic!("exited ({s:?}) before {want:?}: {seen:?}"),
        }
    }
}

async fn conversation(backend: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let wt = std::fs::canonicalize(tmp.path()).unwrap();
    let sandbox = common::open_sandbox(backend, &wt, &[])
        .await
        .expect("sandbox");
    let mut exec = sandbox
        .client
        .exec(ExecRequest {
            command: "while read -r line; do echo \"got $line\"; done; echo bye".into(),
            cwd: sandbox.worktree.clone(),
            env: sandbox.env.clone(),
            timeout_ms: 60_000,
            stdin: Some(b"first\n".to_vec()),
            output_limit: u64::MAX,
            interactive: true,
        })
        .await
        .expect("exec");
    // Written right behind the request: it must not overtake the first bytes.
    exec.write(b"second\n".to_vec()).await.expect("write");
    let mut seen = String::new();
    until(&mut exec, &mut seen, "got second").await;
    assert!(seen.starts_with("got first\n"), "{backend:?}: {seen:?}");
    exec.write(b"third\n".to_vec()).await.expect("write");
    until(&mut exec, &mut seen, "got third").await;
    exec.close_input().await.expect("close");
    until(&mut exec, &mut seen, "bye").await;
    let status = loop {
        match exec.next().await.expect("event") {
            ExecEvent::Exit(s) => break s,
            ExecEvent::Output(o) => seen.push_str(&String::from_utf8_lossy(&o.data)),
        }
    };
    assert_eq!(status.code, Some(0), "{backend:?}: {seen:?}");
    // The command is gone: its input with it.
    let late = exec.write(b"too late\n".to_vec()).await;
    assert!(
        late.is_err(),
        "{backend:?}: a write after the end was accepted"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interactive_command_is_spoken_to_in_process() {
    conversation(Backend::InProcess).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interactive_command_is_spoken_to_behind_landlock() {
    conversation(Backend::Landlock).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interactive_command_is_spoken_to_in_docker() {
    conversation(Backend::Docker).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_command_takes_no_input_after_it_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let wt = std::fs::canonicalize(tmp.path()).unwrap();
    let sandbox = common::open_sandbox(Backend::InProcess, &wt, &[])
        .await
        .expect("sandbox");
    let exec = sandbox
        .client
        .exec(ExecRequest {
            command: "sleep 5".into(),
            cwd: sandbox.worktree.clone(),
            env: sandbox.env.clone(),
            timeout_ms: 10_000,
            stdin: None,
            output_limit: 1024,
            interactive: false,
        })
        .await
        .expect("exec");
    let refused = exec.write(b"x\n".to_vec()).await;
    assert!(
        refused.is_err(),
        "input reached a command that is not interactive"
    );
    exec.cancel().await.expect("cancel");
}
