//! `runner mcp serve` driven by a real MCP client (rmcp's client over the child's standard
//! input and output), on landlock and docker: the tools it lists, calls that act in the
//! worktree, and the attacks a client's model could make through those calls (a file
//! outside the worktree, a write outside it, the host's network), each next to a control
//! that works. Asks reach the client as elicitations when it takes them and are refused
//! by default when it does not; a cancelled call ends its command.
//!
//! The protocol itself is checked on the wire (JSON-RPC line by line: the revision each
//! proposal is answered with, the form an ask takes in each, "Method not found" for
//! `server/discover` and other unknown methods) and with the official SDKs' clients as
//! they come (the Python SDK 1.x and 2.x, the TypeScript SDK), each installed at a pinned
//! release on first use.

use std::path::{Path, PathBuf};
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

/// The rules of the protocol tests below: `touch` asks.
const ASKS: &str = "[permission.bash]\n\"touch *\" = \"ask\"\n";

/// The titled choices runner's question offers from 2025-11-25.
fn titled_choices() -> Value {
    json!([
        { "const": "once", "title": "Allow once" },
        { "const": "always", "title": "Allow for this session" },
        { "const": "reject", "title": "Reject" }
    ])
}

/// `runner mcp serve` spoken to line by line, as JSON-RPC on its standard input and
/// output: for what an SDK would hide (the exact error code, the schema as sent).
struct Wire {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Wire {
    /// The server over `place` on landlock, with `config` as its `--config` and `extra`.
    fn start(place: &Place, config: &str, extra: &[&str]) -> Wire {
        Wire::start_at(place, &place.wt, config, extra)
    }

    /// The same with `root` as its worktree.
    fn start_at(place: &Place, root: &Path, config: &str, extra: &[&str]) -> Wire {
        let rules = place.data.join("wire.toml");
        std::fs::write(&rules, config).unwrap();
        let mut child = std::process::Command::new(common::engine::runner_exe())
            .args(["mcp", "serve", "--sandbox", "landlock", "--root"])
            .arg(root)
            .arg("--config")
            .arg(&rules)
            .args(extra)
            .env("XDG_DATA_HOME", &place.data)
            .env("XDG_CONFIG_HOME", place.data.join("config"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("runner mcp serve starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Wire {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, message: Value) {
        use std::io::Write;
        writeln!(self.stdin, "{message}").expect("the server reads");
        self.stdin.flush().unwrap();
    }

    /// The server's next message.
    fn next(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the server answers within a minute and stays up");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Request `id` and the server's next message (its answer, or a request of its own).
    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        self.next()
    }

    /// `initialize` proposing `version` with `capabilities`, then `initialized`; the
    /// revision the server answered.
    fn initialize(&mut self, version: &str, capabilities: Value) -> String {
        let answer = self.request(
            1,
            "initialize",
            json!({
                "protocolVersion": version,
                "capabilities": capabilities,
                "clientInfo": { "name": "wire-test", "version": "9.9" }
            }),
        );
        assert_eq!(answer["id"], 1, "{answer}");
        assert_eq!(answer["result"]["serverInfo"]["name"], "runner", "{answer}");
        self.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        answer["result"]["protocolVersion"]
            .as_str()
            .unwrap_or_else(|| panic!("no revision: {answer}"))
            .to_string()
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn call_bash(id: u64, command: &str) -> (u64, &'static str, Value) {
    (
        id,
        "tools/call",
        json!({ "name": "bash", "arguments": bash(command) }),
    )
}

/// The 2026 revisions open with `server/discover`, which runner does not speak: it is
/// "Method not found" (-32601), and the client's `initialize` that follows opens the
/// session. After it, a method nobody defined is -32601 too and the session goes on: the
/// tools are listed and a call asks with the choices as the spec's titled enum. The audit
/// trail's start record names the client as its `initialize` did.
#[test]
fn landlock_discover_and_unknown_methods_are_method_not_found_and_the_session_goes_on() {
    let place = place();
    let audit = place.data.join("wire-audit.jsonl");
    let audit_arg = audit.display().to_string();
    let mut wire = Wire::start(&place, ASKS, &["--audit", &audit_arg]);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "wire-test", "version": "9.9" },
        "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} }
    });
    let discover = wire.request(0, "server/discover", json!({ "_meta": meta }));
    assert_eq!(discover["id"], 0, "{discover}");
    assert_eq!(discover["error"]["code"], -32601, "{discover}");

    let agreed = wire.initialize("2025-11-25", json!({ "elicitation": {} }));
    assert_eq!(agreed, "2025-11-25");
    let unknown = wire.request(2, "runner/no-such-method", json!({}));
    assert_eq!(unknown["id"], 2, "{unknown}");
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("runner/no-such-method")),
        "{unknown}"
    );
    let again = wire.request(3, "server/discover", json!({ "_meta": meta }));
    assert_eq!(again["error"]["code"], -32601, "{again}");

    let listed = wire.request(4, "tools/list", json!({}));
    let tools = listed["result"]["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 9, "{listed}");
    let (id, method, params) = call_bash(5, "touch by-wire");
    let ask = wire.request(id, method, params);
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert!(
        ask["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("touch by-wire")),
        "{ask}"
    );
    let answer = &ask["params"]["requestedSchema"]["properties"]["answer"];
    assert_eq!(answer["type"], "string", "{ask}");
    assert_eq!(answer["oneOf"], titled_choices(), "{ask}");
    assert_eq!(
        ask["params"]["requestedSchema"]["required"],
        json!(["answer"])
    );
    wire.send(json!({
        "jsonrpc": "2.0",
        "id": ask["id"],
        "result": { "action": "accept", "content": { "answer": "once" } }
    }));
    let done = wire.next();
    assert_eq!(done["id"], 5, "{done}");
    assert_ne!(done["result"]["isError"], true, "{done}");
    assert!(place.wt.join("by-wire").exists(), "{done}");
    drop(wire);

    let trail = std::fs::read_to_string(&audit).expect("the audit file");
    assert_eq!(
        clients_named(&trail),
        [json!({ "name": "wire-test", "version": "9.9" })],
        "{trail}"
    );
}

/// The clients the trail's records name (the start record names the one that drove it).
fn clients_named(trail: &str) -> Vec<Value> {
    trail
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("one JSON object a line"))
        .map(|r| r["unmapped"]["client"].clone())
        .filter(|c| !c.is_null())
        .collect()
}

/// The sandbox opens at `initialize`: a session that cannot open (here a direct workspace
/// outside any git work tree) fails that `initialize` with the reason, and the server ends
/// with the usage status, having made nothing.
#[test]
fn landlock_a_session_that_cannot_open_fails_initialize_with_the_reason() {
    let place = place();
    let plain = place.wt.parent().unwrap().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let mut wire = Wire::start_at(&place, &plain, "", &[]);
    let answer = wire.request(
        1,
        "initialize",
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": { "name": "wire-test", "version": "9.9" }
        }),
    );
    assert_eq!(answer["id"], 1, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("is not inside a git work tree") && message.contains("--no-git-check"),
        "{answer}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = wire.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the server did not end");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(2), "{status}");
    assert_eq!(std::fs::read_dir(&plain).unwrap().count(), 0);
}

/// What each revision is answered and how an ask reaches its client: 2025-06-18 takes the
/// choices as `enum` with `enumNames`, 2025-11-25 as titled `oneOf`, a revision from before
/// elicitation (and a client that takes URL elicitations only) is never sent one and the
/// call is refused by the default policy, saying why and how to allow it. A revision
/// runner does not know is answered with the newest it speaks.
#[test]
fn landlock_each_revision_is_asked_as_it_can_be() {
    let place = place();
    let form = json!({ "elicitation": {} });
    let cases = [
        ("2025-06-18", form.clone(), "2025-06-18", Some("enumNames")),
        ("2099-01-01", form.clone(), "2025-11-25", Some("oneOf")),
        ("2025-03-26", form.clone(), "2025-03-26", None),
        ("2024-11-05", form, "2024-11-05", None),
        (
            "2025-11-25",
            json!({ "elicitation": { "url": {} } }),
            "2025-11-25",
            None,
        ),
    ];
    for (n, (proposed, capabilities, answered, choices)) in cases.into_iter().enumerate() {
        let mut wire = Wire::start(&place, ASKS, &[]);
        let agreed = wire.initialize(proposed, capabilities.clone());
        assert_eq!(agreed, answered, "{proposed}");
        let file = format!("made-{n}");
        let (id, method, params) = call_bash(2, &format!("touch {file}"));
        let first = wire.request(id, method, params);
        let done = match choices {
            Some(kind) => {
                assert_eq!(first["method"], "elicitation/create", "{proposed}: {first}");
                check_choices(&first, kind);
                wire.send(json!({
                    "jsonrpc": "2.0",
                    "id": first["id"],
                    "result": { "action": "accept", "content": { "answer": "always" } }
                }));
                wire.next()
            }
            None => first,
        };
        assert_eq!(done["id"], 2, "{proposed}: {done}");
        let ran = place.wt.join(&file).exists();
        if choices.is_some() {
            assert!(
                ran && done["result"]["isError"] != true,
                "{proposed}: {done}"
            );
        } else {
            assert!(
                !ran,
                "{proposed} {capabilities}: ran without an answer: {done}"
            );
            let why = match capabilities["elicitation"].get("url") {
                Some(_) => "URL".to_string(),
                None => format!("MCP {proposed}"),
            };
            check_refused(&done, &why);
        }
    }
}

/// The ask's choices as `kind` writes them (`oneOf`, or `enum` with `enumNames`), and not
/// the other way too.
fn check_choices(ask: &Value, kind: &str) {
    let answer = &ask["params"]["requestedSchema"]["properties"]["answer"];
    if kind == "oneOf" {
        assert_eq!(answer["oneOf"], titled_choices(), "{ask}");
        assert!(answer.get("enum").is_none(), "{ask}");
    } else {
        assert_eq!(answer["enum"], json!(["once", "always", "reject"]), "{ask}");
        assert_eq!(
            answer["enumNames"],
            json!(["Allow once", "Allow for this session", "Reject"]),
            "{ask}"
        );
        assert!(answer.get("oneOf").is_none(), "{ask}");
    }
}

/// A call refused by the default policy, its text saying `why` the user was not asked and
/// how to allow it.
fn check_refused(done: &Value, why: &str) {
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert!(
        text.contains("--ask allow") && text.contains(why),
        "{why}: {text}"
    );
}

/// The official SDK releases the tests run, pinned (see `common::third_party`): the
/// Python SDK's last 1.x and its 2.x, and the TypeScript SDK.
const PYTHON_SDK_1: &str = "1.30.0";
const PYTHON_SDK_2: &str = "2.3.0";
const TYPESCRIPT_SDK: &str = "1.32.2";

/// The folder of the test's client scripts.
fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_clients")
}

/// Runs an SDK's client script, `client`, with `runner mcp serve` (on `backend`, `touch`
/// asks, an audit file) as the server it starts; its report, the worktree and the audit
/// trail.
fn sdk_session(mut client: std::process::Command, backend: Backend) -> (Place, Value, String) {
    let place = place();
    let config = place.data.join("asks.toml");
    std::fs::write(&config, ASKS).unwrap();
    let audit = place.data.join("sdk-audit.jsonl");
    client
        .arg(common::engine::runner_exe())
        .args(["mcp", "serve", "--sandbox", backend_name(backend), "--root"])
        .arg(&place.wt)
        .arg("--config")
        .arg(&config)
        .arg("--audit")
        .arg(&audit)
        .env("XDG_DATA_HOME", &place.data)
        .env("XDG_CONFIG_HOME", place.data.join("config"))
        .env("PICK", "Allow for this session")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = client.spawn().expect("the SDK's client starts");
    let out = finish_within(child, Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the client failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let report = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
        .unwrap_or_else(|| panic!("no report:\n{stdout}\n{stderr}"));
    let trail = std::fs::read_to_string(&audit).expect("the audit file");
    (place, report, trail)
}

/// The child's output once it ends; past `limit` it is killed and the test fails.
fn finish_within(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the client did not finish within {limit:?}:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What every SDK's session must show: the newest revision agreed, runner's tools listed
/// and run, one ask whose choices came as the titled enum (the client picked "Allow for
/// this session" by its title, so the second call like it was not asked), the unknown
/// method refused as -32601 with the session going on, and the client named on the
/// audit trail's start record.
fn check_sdk_session(place: &Place, report: &Value, trail: &str, client: Value) {
    assert_eq!(report["protocol"], "2025-11-25", "{report}");
    assert_eq!(report["server"], "runner", "{report}");
    assert_eq!(
        report["tools"],
        json!([
            "apply_patch",
            "bash",
            "edit",
            "glob",
            "grep",
            "list",
            "multiedit",
            "read",
            "write"
        ]),
        "{report}"
    );
    assert!(
        report["echo"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("said-by-sdk")),
        "{report}"
    );
    assert_eq!(
        std::fs::read_to_string(place.wt.join("said.txt")).unwrap(),
        "said-by-sdk\n"
    );
    let asked = report["asked"].as_array().expect("the asks");
    assert_eq!(asked.len(), 1, "always covers the second call: {report}");
    assert!(
        asked[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("touch asked-first")),
        "{report}"
    );
    assert_eq!(
        asked[0]["requestedSchema"]["properties"]["answer"]["oneOf"],
        titled_choices(),
        "{report}"
    );
    for (call, file) in [("first", "asked-first"), ("second", "asked-second")] {
        assert_eq!(report[call]["error"], false, "{call}: {report}");
        assert!(place.wt.join(file).exists(), "{call}: {report}");
    }
    assert_eq!(report["unknown"]["code"], -32601, "{report}");
    assert!(
        report["after"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("still-here")),
        "{report}"
    );
    assert_eq!(
        clients_named(trail),
        [client],
        "the start record names the client:\n{trail}"
    );
}

/// The Python SDK's last 1.x `ClientSession` over its stdio client, as it comes.
#[test]
fn landlock_python_sdk_1_client_works_with_its_defaults() {
    python_sdk_client_works_with_its_defaults(PYTHON_SDK_1, Backend::Landlock);
}

/// The Python SDK 2.x `Client`, whose default opens with `server/discover`: answered
/// "Method not found", it falls back to `initialize` (no discovery was adopted).
#[test]
fn landlock_python_sdk_2_client_works_with_its_defaults() {
    python_sdk_client_works_with_its_defaults(PYTHON_SDK_2, Backend::Landlock);
}

/// The same client and checks with the tools behind the docker wall: what the protocol
/// answers does not depend on the wall, and this shows it.
#[test]
fn docker_python_sdk_2_client_works_with_its_defaults() {
    common::engine::docker();
    python_sdk_client_works_with_its_defaults(PYTHON_SDK_2, Backend::Docker);
}

/// The Python SDK `version`'s client script run against `runner mcp serve` on `backend`;
/// a 2.x client must also have fallen back from its discovery.
fn python_sdk_client_works_with_its_defaults(version: &str, backend: Backend) {
    let python = common::third_party::pip_venv("mcp", version);
    let mut client = std::process::Command::new(python);
    client.arg(clients_dir().join("python_client.py"));
    let (place, report, trail) = sdk_session(client, backend);
    assert_eq!(report["sdk"], version);
    if version == PYTHON_SDK_2 {
        assert_eq!(report["discovered"], false, "{report}");
    }
    check_sdk_session(
        &place,
        &report,
        &trail,
        json!({ "name": "mcp", "version": "0.1.0" }),
    );
}

/// The TypeScript SDK's `Client` over its stdio transport, declaring elicitation.
#[test]
fn landlock_typescript_sdk_client_works_with_its_defaults() {
    let sdk = common::third_party::npm_package("@modelcontextprotocol/sdk", TYPESCRIPT_SDK);
    // Node resolves a script's imports from the script's folder: the script goes beside a
    // link to the install's node_modules.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("typescript_client.mjs");
    std::fs::copy(clients_dir().join("typescript_client.mjs"), &script).unwrap();
    std::os::unix::fs::symlink(sdk.join("node_modules"), dir.path().join("node_modules")).unwrap();
    let mut client = std::process::Command::new("node");
    client.arg(&script);
    let (place, report, trail) = sdk_session(client, Backend::Landlock);
    assert_eq!(report["sdk"], TYPESCRIPT_SDK);
    check_sdk_session(
        &place,
        &report,
        &trail,
        json!({ "name": "runner-test-typescript", "version": TYPESCRIPT_SDK }),
    );
}
