//! `runner mcp serve` driven by a real MCP client (rmcp's client over the child's standard
//! input and output), on landlock and docker: the tools it lists, calls that act in the
//! worktree, and the attacks a client's model could make through those calls (a file
//! outside the worktree, a write outside it, the host's network), each next to a control
//! that works. Asks reach the client as elicitations when it takes them and are refused
//! by default when it does not; a cancelled call ends its command.

use crate::common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientConfig, ClientRequest,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability, NumberOrString,
    ProgressNotificationParam, ProgressToken, RequestMetaObject,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};

use common::Backend;

/// What the test's client answers to an elicitation (`None`: it takes none).
#[derive(Clone)]
struct Client {
    answer: Option<&'static str>,
    asked: Arc<Mutex<Vec<String>>>,
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl Client {
    fn new(answer: Option<&'static str>) -> Client {
        Client {
            answer,
            asked: Arc::default(),
            progress: Arc::default(),
        }
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::default();
        if self.answer.is_some() {
            config.capabilities.elicitation = Some(ElicitationCapability::default());
        }
        config
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::FormElicitationParams { message, .. } = &request else {
            panic!("runner asks with a form: {request:?}");
        };
        self.asked.lock().unwrap().push(message.clone());
        Ok(match self.answer {
            Some("decline") | None => ElicitResult::new(ElicitationAction::Decline),
            Some(answer) => ElicitResult::new(ElicitationAction::Accept)
                .with_content(json!({ "answer": answer })),
        })
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

/// A worktree inside a git work tree, a secret beside it (outside the worktree), and the
/// user's config folder.
struct Place {
    _tmp: tempfile::TempDir,
    wt: PathBuf,
    secret: PathBuf,
    data: PathBuf,
}

const SECRET: &str = "HOST-SECRET-never-through-mcp";

fn place() -> Place {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (wt, data) = (base.join("wt"), base.join("data"));
    for d in [&wt, &data] {
        std::fs::create_dir_all(d).unwrap();
    }
    common::git(&wt, &["init", "-q"]);
    std::fs::write(wt.join("inside.txt"), "INSIDE\n").unwrap();
    let secret = base.join("ssh-key");
    std::fs::write(&secret, SECRET).unwrap();
    Place {
        _tmp: tmp,
        wt,
        secret,
        data,
    }
}

/// `runner mcp serve` on `backend` over `place`, as a running rmcp client session.
async fn serve(
    backend: Backend,
    place: &Place,
    client: Client,
    extra: &[&str],
) -> RunningService<RoleClient, Client> {
    let mut cmd = std::process::Command::new(common::engine::runner_exe());
    cmd.args(["mcp", "serve", "--root"])
        .arg(&place.wt)
        .args(["--sandbox", backend_name(backend)])
        .args(extra)
        .env("XDG_DATA_HOME", &place.data)
        .env("XDG_CONFIG_HOME", place.data.join("config"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if backend == Backend::Docker {
        common::engine::cli(&mut cmd);
    }
    let mut child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .expect("runner mcp serve starts");
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    // The child lives as long as the test's runtime; the transport closing ends it.
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    client
        .serve((stdout, stdin))
        .await
        .expect("the MCP session starts")
}

fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Docker => "docker",
        _ => "landlock",
    }
}

async fn call(
    service: &RunningService<RoleClient, Client>,
    tool: &str,
    args: Value,
) -> CallToolResult {
    service
        .call_tool(
            CallToolRequestParams::new(tool.to_string())
                .with_arguments(args.as_object().cloned().expect("arguments are an object")),
        )
        .await
        .unwrap_or_else(|e| panic!("{tool} {args}: {e}"))
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn failed(result: &CallToolResult) -> bool {
    result.is_error == Some(true)
}

fn bash(command: &str) -> Value {
    json!({ "command": command, "description": "test" })
}

/// The tools listed, their calls acting in the worktree, and the three ways out tried
/// through them, each failing next to a control that works.
async fn tools_work_inside_and_nothing_gets_out(backend: Backend) {
    let place = place();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let audit = place.data.join("audit.jsonl");
    let audit_arg = audit.display().to_string();
    let service = serve(
        backend,
        &place,
        Client::new(None),
        &["--ask", "allow", "--audit", &audit_arg],
    )
    .await;

    let tools = service.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "apply_patch",
            "bash",
            "edit",
            "glob",
            "grep",
            "list",
            "multiedit",
            "read",
            "write"
        ]
    );
    for t in &tools {
        assert!(
            t.description.as_deref().is_some_and(|d| d.len() > 20),
            "{}",
            t.name
        );
        assert_eq!(
            t.input_schema.get("type"),
            Some(&json!("object")),
            "{}",
            t.name
        );
    }

    // Controls: the tools act in the worktree.
    let made = call(
        &service,
        "bash",
        bash("echo made > made-by-mcp; cat /etc/hostname; cat inside.txt"),
    )
    .await;
    assert!(!failed(&made), "{}", text(&made));
    assert!(text(&made).contains("INSIDE"), "{}", text(&made));
    assert_eq!(
        std::fs::read_to_string(place.wt.join("made-by-mcp")).unwrap(),
        "made\n"
    );
    let hostname = text(&made).lines().next().unwrap_or_default().to_string();
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    if backend == Backend::Docker {
        assert_ne!(
            hostname.trim(),
            host.trim(),
            "the command ran in the container"
        );
    }
    let wrote = call(
        &service,
        "write",
        json!({ "filePath": "written.txt", "content": "by write\n" }),
    )
    .await;
    assert!(!failed(&wrote), "{}", text(&wrote));
    assert_eq!(
        std::fs::read_to_string(place.wt.join("written.txt")).unwrap(),
        "by write\n"
    );
    let read = call(&service, "read", json!({ "filePath": "inside.txt" })).await;
    assert!(text(&read).contains("INSIDE"), "{}", text(&read));
    let grep = call(&service, "grep", json!({ "pattern": "by write" })).await;
    assert!(text(&grep).contains("written.txt"), "{}", text(&grep));

    // Attacks: the secret beside the worktree, a write outside it, the host's network.
    let secret = place.secret.display().to_string();
    let by_read = call(&service, "read", json!({ "filePath": secret })).await;
    let by_bash = call(&service, "bash", bash(&format!("cat {secret}"))).await;
    for (how, result) in [("read", &by_read), ("bash", &by_bash)] {
        assert!(
            !text(result).contains(SECRET),
            "{how} read the secret: {}",
            text(result)
        );
    }
    let outside = place.wt.parent().unwrap().join("planted");
    let planted = call(
        &service,
        "bash",
        bash(&format!("echo x > {}; echo done", outside.display())),
    )
    .await;
    let by_write = call(
        &service,
        "write",
        json!({ "filePath": outside.join("w").display().to_string(), "content": "x" }),
    )
    .await;
    assert!(failed(&by_write), "{}", text(&by_write));
    assert!(!outside.exists(), "bash wrote outside: {}", text(&planted));
    let reach = format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=3); print(\"CONNECTED\")'"
    );
    let network = call(&service, "bash", bash(&reach)).await;
    assert!(!text(&network).contains("CONNECTED"), "{}", text(&network));
    assert!(
        listener.accept().is_err(),
        "the host's port got a connection"
    );

    // An unknown tool is the client's error, not a call.
    let unknown = service.call_tool(CallToolRequestParams::new("task")).await;
    assert!(
        unknown.is_err(),
        "task is runner's own, not offered: {unknown:?}"
    );
    service.cancel().await.unwrap();

    // `--audit`: each call's permission decision is an OCSF API Activity line, the bash
    // one naming its command.
    let trail = std::fs::read_to_string(&audit).expect("the audit file");
    let decisions: Vec<Value> = trail
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("one JSON object a line"))
        .filter(|r| r["class_uid"] == 6003)
        .collect();
    assert!(
        decisions
            .iter()
            .any(|r| r.to_string().contains("made-by-mcp")),
        "{trail}"
    );
}

/// A rule that asks: without elicitation the call is refused by default and the refusal
/// says how to allow it; a client that takes elicitations is asked (once: it runs; a
/// decline: it is refused), with the command in the question.
async fn asks_reach_the_client(backend: Backend) {
    let place = place();
    let config = place.data.join("asks.toml");
    std::fs::write(&config, "[permission.bash]\n\"touch *\" = \"ask\"\n").unwrap();
    let config = config.display().to_string();
    let args = ["--config", config.as_str()];

    let service = serve(backend, &place, Client::new(None), &args).await;
    let refused = call(&service, "bash", bash("touch refused")).await;
    assert!(failed(&refused), "{}", text(&refused));
    assert!(text(&refused).contains("--ask allow"), "{}", text(&refused));
    assert!(!place.wt.join("refused").exists());
    service.cancel().await.unwrap();

    for (answer, file, runs) in [("once", "allowed", true), ("decline", "declined", false)] {
        let client = Client::new(Some(answer));
        let asked = client.asked.clone();
        let service = serve(backend, &place, client, &args).await;
        let result = call(&service, "bash", bash(&format!("touch {file}"))).await;
        assert_eq!(
            place.wt.join(file).exists(),
            runs,
            "{answer}: {}",
            text(&result)
        );
        assert_eq!(failed(&result), !runs, "{answer}: {}", text(&result));
        let asked = asked.lock().unwrap().clone();
        assert!(
            asked.len() == 1 && asked[0].contains(&format!("touch {file}")),
            "{asked:?}"
        );
        service.cancel().await.unwrap();
    }
}

/// A long call sends progress to a client that asked for it, and cancelling the request
/// ends the command inside the sandbox: its file never appears, and the next call answers.
async fn a_cancelled_call_ends_its_command(backend: Backend) {
    let place = place();
    let client = Client::new(None);
    let progress = client.progress.clone();
    let service = serve(backend, &place, client, &["--ask", "allow"]).await;
    let mut meta = RequestMetaObject::default();
    meta.set_progress_token(ProgressToken(NumberOrString::Number(7)));
    let arguments =
        bash("for i in 1 2 3 4 5 6 7 8 9 10; do echo tick $i; sleep 1; done; touch late");
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("bash").with_arguments(arguments.as_object().cloned().unwrap()),
    ));
    let handle = service
        .send_cancellable_request(request, PeerRequestOptions::no_options().with_meta(meta))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while progress.lock().unwrap().len() < 2 {
        assert!(Instant::now() < deadline, "no progress for a long call");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    {
        let seen = progress.lock().unwrap();
        assert!(
            seen.iter()
                .any(|p| p.message.as_deref().is_some_and(|m| m.contains("tick")))
        );
        assert!(seen.windows(2).all(|w| w[0].progress <= w[1].progress));
    }
    handle.cancel(Some("the test".into())).await.unwrap();
    let after = call(&service, "bash", bash("echo still-here")).await;
    assert!(text(&after).contains("still-here"), "{}", text(&after));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        !place.wt.join("late").exists(),
        "the cancelled command ran on"
    );
    service.cancel().await.unwrap();
}

#[tokio::test]
async fn landlock_tools_work_inside_and_nothing_gets_out() {
    tools_work_inside_and_nothing_gets_out(Backend::Landlock).await;
}

#[tokio::test]
async fn docker_tools_work_inside_and_nothing_gets_out() {
    common::engine::docker();
    tools_work_inside_and_nothing_gets_out(Backend::Docker).await;
}

#[tokio::test]
async fn landlock_asks_reach_the_client() {
    asks_reach_the_client(Backend::Landlock).await;
}

#[tokio::test]
async fn docker_asks_reach_the_client() {
    common::engine::docker();
    asks_reach_the_client(Backend::Docker).await;
}

#[tokio::test]
async fn landlock_a_cancelled_call_ends_its_command() {
    a_cancelled_call_ends_its_command(Backend::Landlock).await;
}

#[tokio::test]
async fn docker_a_cancelled_call_ends_its_command() {
    common::engine::docker();
    a_cancelled_call_ends_its_command(Backend::Docker).await;
}

/// `--workspace copy`: the client's writes land in a private copy, the checkout stays as
/// it was, and when the session ends the copy is kept for review (marked finished, not
/// discarded), as `runner run --workspace copy` keeps one.
#[tokio::test]
async fn landlock_a_copy_workspace_is_kept_for_review_when_the_session_ends() {
    let place = place();
    let service = serve(
        Backend::Landlock,
        &place,
        Client::new(None),
        &["--ask", "allow", "--workspace", "copy"],
    )
    .await;
    let wrote = call(
        &service,
        "write",
        json!({ "filePath": "reviewed.txt", "content": "in the copy\n" }),
    )
    .await;
    assert!(!failed(&wrote), "{}", text(&wrote));
    service.cancel().await.unwrap();
    let workspaces = place.data.join("runner/workspaces");
    let deadline = Instant::now() + Duration::from_secs(30);
    let kept = loop {
        let finished = std::fs::read_dir(&workspaces)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|ws| {
                std::fs::read_to_string(ws.join("meta.json"))
                    .ok()
                    .and_then(|m| serde_json::from_str::<Value>(&m).ok())
                    .is_some_and(|m| m["finished"] == true)
            });
        if let Some(ws) = finished {
            break ws;
        }
        assert!(
            Instant::now() < deadline,
            "no finished copy in {}",
            workspaces.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        std::fs::read_to_string(kept.join("work/reviewed.txt")).unwrap(),
        "in the copy\n"
    );
    assert!(
        !place.wt.join("reviewed.txt").exists(),
        "the checkout was written"
    );
}
