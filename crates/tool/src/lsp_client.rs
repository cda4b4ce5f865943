//! Language servers inside the wall. A language server runs the repository's code (build
//! scripts, proc macros, project config files), so runner starts it behind the sandbox
//! like any command ([`super::stdio`]), never on the host, and speaks LSP to it over the
//! sandbox channel. A server starts when a file it handles is first asked about, is kept
//! for the session, and dies with the sandbox.
//!
//! Servers come from `[lsp.NAME]` config tables (OpenCode's `lsp` section read as it is:
//! `command`, `extensions`, `env`, `initialization`, `disabled`) and from built-in entries
//! for common servers, used when their command exists inside the sandbox.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, BufReader, WriteHalf};
use tokio::sync::{Mutex, OnceCell, oneshot};

use super::ToolContext;
use super::server_error::ServerError;

/// How long a server may take to start and answer `initialize`.
const START_LIMIT: Duration = Duration::from_secs(60);
/// How long one request may take.
const REQUEST_LIMIT: Duration = Duration::from_secs(30);

/// `[lsp.NAME]` as a config file writes it.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LspSpec {
    #[serde(default)]
    pub command: Vec<String>,
    /// The file extensions it handles, with their dot (`.py`).
    #[serde(default)]
    pub extensions: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Sent as `initializationOptions`.
    pub initialization: Option<Value>,
    pub disabled: Option<bool>,
}

/// OpenCode's `lsp` section: a table of servers as [`LspSpec`] reads them, or `false` for
/// none at all (every built-in disabled).
pub fn from_opencode(section: &Value) -> Result<BTreeMap<String, LspSpec>, ServerError> {
    match section {
        Value::Bool(false) => Ok(BUILTIN
            .iter()
            .map(|(name, ..)| {
                let off = LspSpec {
                    disabled: Some(true),
                    ..LspSpec::default()
                };
                (name.to_string(), off)
            })
            .collect()),
        Value::Object(_) => serde_json::from_value(section.clone())
            .map_err(|e| ServerError::Config(format!("its \"lsp\" section: {e}"))),
        other => Err(ServerError::Config(format!(
            "its \"lsp\" section is {other}: a table of servers, or false"
        ))),
    }
}

/// The built-in servers: name, command, extensions.
const BUILTIN: &[(&str, &[&str], &[&str])] = &[
    ("pylsp", &["pylsp"], &[".py", ".pyi"]),
    (
        "pyright",
        &["pyright-langserver", "--stdio"],
        &[".py", ".pyi"],
    ),
    ("rust-analyzer", &["rust-analyzer"], &[".rs"]),
    ("gopls", &["gopls"], &[".go"]),
    (
        "typescript",
        &["typescript-language-server", "--stdio"],
        &[".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts"],
    ),
    (
        "clangd",
        &["clangd"],
        &[".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx"],
    ),
];

/// One configured or built-in server.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    spec: LspSpec,
    /// Built in: offered only if its command exists inside the sandbox.
    builtin: bool,
}

/// A server being started, once: the client, or why it did not start.
type Starting = OnceCell<Result<Arc<LspClient>, ServerError>>;

/// A session's language servers: what is configured, which exist, and those started.
pub struct LspServers {
    entries: Vec<Entry>,
    /// The built-ins whose command the sandbox has, found once.
    present: OnceCell<Vec<String>>,
    running: Mutex<HashMap<String, Arc<Starting>>>,
}

impl LspServers {
    /// The built-ins, then the configured ones (a configured name replaces a built-in;
    /// `disabled` removes it).
    pub fn new(configured: &BTreeMap<String, LspSpec>) -> LspServers {
        let mut entries: Vec<Entry> = BUILTIN
            .iter()
            .map(|(name, command, extensions)| Entry {
                name: name.to_string(),
                spec: LspSpec {
                    command: command.iter().map(|c| c.to_string()).collect(),
                    extensions: extensions.iter().map(|e| e.to_string()).collect(),
                    ..LspSpec::default()
                },
                builtin: true,
            })
            .collect();
        for (name, spec) in configured {
            entries.retain(|e| &e.name != name);
            if spec.disabled != Some(true) && !spec.command.is_empty() {
                entries.push(Entry {
                    name: name.clone(),
                    spec: spec.clone(),
                    builtin: false,
                });
            }
        }
        LspServers {
            entries,
            present: OnceCell::new(),
            running: Mutex::new(HashMap::new()),
        }
    }

    /// The servers that can run here: every configured one, and the built-ins whose
    /// command exists inside the sandbox.
    async fn available(&self, ctx: &ToolContext) -> Vec<&Entry> {
        let present = self
            .present
            .get_or_init(|| present_commands(ctx, &self.entries))
            .await;
        self.entries
            .iter()
            .filter(|e| !e.builtin || present.contains(&e.name))
            .collect()
    }

    /// Whether any server can run here (the `lsp` tool is offered only then).
    pub async fn any(&self, ctx: &ToolContext) -> bool {
        !self.available(ctx).await.is_empty()
    }

    /// The running server for `file` (started on first use), or why there is none.
    pub async fn for_file(
        &self,
        file: &Path,
        ctx: &ToolContext,
    ) -> Result<Arc<LspClient>, ServerError> {
        let ext = file
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default();
        let entry = self
            .available(ctx)
            .await
            .into_iter()
            .find(|e| e.spec.extensions.contains(&ext))
            .cloned()
            .ok_or_else(|| {
                ServerError::Missing(format!(
                    "No language server is available for {} files here. Use grep and read instead.",
                    if ext.is_empty() { "these" } else { &ext }
                ))
            })?;
        let cell = self
            .running
            .lock()
            .await
            .entry(entry.name.clone())
            .or_default()
            .clone();
        cell.get_or_init(|| async {
            tokio::time::timeout(START_LIMIT, LspClient::start(&entry, ctx))
                .await
                .unwrap_or_else(|_| {
                    Err(ServerError::Failed(format!(
                        "the language server {} did not answer within {} s of starting",
                        entry.name,
                        START_LIMIT.as_secs()
                    )))
                })
                .map(Arc::new)
        })
        .await
        .clone()
    }
}

/// Which built-in commands exist inside the sandbox: one command that looks for all.
async fn present_commands(ctx: &ToolContext, entries: &[Entry]) -> Vec<String> {
    let checks: Vec<String> = entries
        .iter()
        .filter(|e| e.builtin)
        .map(|e| {
            format!(
                "command -v {} >/dev/null 2>&1 && echo {}",
                super::stdio::shell_quote(&e.spec.command[0]),
                e.name
            )
        })
        .collect();
    let script = checks.join("; ") + "; true";
    match super::collect::run(ctx, &script, Vec::new(), Duration::from_secs(10), 64 * 1024).await {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
        Err(_) => Vec::new(),
    }
}

type Pending = Arc<std::sync::Mutex<HashMap<i64, oneshot::Sender<Result<Value, Value>>>>>;

/// The diagnostics a server last published, by document URI, each with the number of the
/// publication that brought it (so a wait can tell a new one from an old one).
#[derive(Default)]
struct Published {
    by_uri: std::sync::Mutex<HashMap<String, (u64, Vec<Value>)>>,
    count: AtomicI64,
    arrived: tokio::sync::Notify,
}

impl Published {
    fn store(&self, params: &Value) {
        let Some(uri) = params["uri"].as_str() else {
            return;
        };
        let items = params["diagnostics"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let n = self.count.fetch_add(1, Ordering::SeqCst) as u64 + 1;
        self.by_uri
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uri.to_string(), (n, items));
        self.arrived.notify_waiters();
    }

    fn of(&self, uri: &str) -> Option<(u64, Vec<Value>)> {
        self.by_uri
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uri)
            .cloned()
    }

    fn all(&self) -> HashMap<String, Vec<Value>> {
        self.by_uri
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect()
    }
}

/// What a server said after an edit: the edited file's diagnostics, and those of other
/// files that changed with it (by URI).
pub struct Diagnosed {
    pub file: Vec<Value>,
    pub others: HashMap<String, Vec<Value>>,
}

/// One running language server and the documents it has been shown.
pub struct LspClient {
    pub name: String,
    writer: Arc<Mutex<WriteHalf<tokio::io::DuplexStream>>>,
    pending: Pending,
    next_id: AtomicI64,
    /// Open documents and their version.
    versions: Mutex<HashMap<PathBuf, i64>>,
    stderr: Arc<std::sync::Mutex<String>>,
    published: Arc<Published>,
    /// Why runner stopped reading the server, when it broke the protocol's bounds.
    cut: Arc<std::sync::OnceLock<String>>,
}

impl LspClient {
    /// Starts the server in the sandbox and initializes it with the worktree as its root.
    async fn start(entry: &Entry, ctx: &ToolContext) -> Result<LspClient, ServerError> {
        let env: Vec<(String, String)> = entry
            .spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let started = super::stdio::spawn(ctx, &entry.spec.command, &env)
            .await
            .map_err(|e| {
                ServerError::Failed(format!(
                    "cannot start the language server {}: {e}",
                    entry.name
                ))
            })?;
        let (read, write) = tokio::io::split(started.stream);
        let writer = Arc::new(Mutex::new(write));
        let pending: Pending = Arc::default();
        let published: Arc<Published> = Arc::default();
        let cut: Arc<std::sync::OnceLock<String>> = Arc::default();
        let reading = Reading {
            writer: writer.clone(),
            pending: pending.clone(),
            published: published.clone(),
            cut: cut.clone(),
            stop: started.stop.clone(),
        };
        tokio::spawn(read_messages(read, reading));
        let client = LspClient {
            name: entry.name.clone(),
            writer,
            pending,
            next_id: AtomicI64::new(1),
            versions: Mutex::new(HashMap::new()),
            stderr: started.stderr,
            published,
            cut,
        };
        let root = uri(ctx.worktree());
        let init = json!({
            "processId": null,
            "rootUri": root,
            "workspaceFolders": [{"uri": root, "name": "worktree"}],
            "initializationOptions": entry.spec.initialization.clone().unwrap_or(Value::Null),
            "capabilities": {
                "textDocument": {
                    "synchronization": {"didSave": true},
                    "hover": {"contentFormat": ["markdown", "plaintext"]},
                    "definition": {}, "references": {}, "implementation": {},
                    "documentSymbol": {"hierarchicalDocumentSymbolSupport": true},
                    "callHierarchy": {},
                    "publishDiagnostics": {}
                },
                "workspace": {"symbol": {}, "workspaceFolders": true, "configuration": true}
            }
        });
        client
            .request("initialize", init, START_LIMIT)
            .await
            .map_err(|e| client.failure(&format!("did not initialize: {e}")))?;
        client.notify("initialized", json!({})).await?;
        Ok(client)
    }

    /// What went wrong, with what the server last wrote to its standard error (or why
    /// runner cut it off).
    fn failure(&self, what: &str) -> ServerError {
        if let Some(cut) = self.cut.get() {
            // A failure wrapped in another already says why.
            return ServerError::Failed(if what.contains(cut.as_str()) {
                format!("the language server {} {what}", self.name)
            } else {
                format!("the language server {} {what}: {cut}", self.name)
            });
        }
        let tail = self
            .stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let tail = tail.trim();
        ServerError::Failed(if tail.is_empty() {
            format!("the language server {} {what}", self.name)
        } else {
            format!("the language server {} {what} (it said: {tail})", self.name)
        })
    }

    /// Shows the server `path`'s current `text` (opened the first time, changed after).
    pub async fn sync(&self, path: &Path, text: &str) -> Result<(), ServerError> {
        let mut versions = self.versions.lock().await;
        let uri = uri(path);
        match versions.get_mut(path) {
            Some(version) => {
                *version += 1;
                let params = json!({
                    "textDocument": {"uri": uri, "version": *version},
                    "contentChanges": [{"text": text}]
                });
                self.notify("textDocument/didChange", params).await
            }
            None => {
                versions.insert(path.to_path_buf(), 1);
                let params = json!({"textDocument": {
                    "uri": uri, "languageId": language_id(path), "version": 1, "text": text
                }});
                self.notify("textDocument/didOpen", params).await
            }
        }
    }

    /// Shows the server `path`'s new `text` (changed, then saved) and waits, at most
    /// `limit`, for the diagnostics it publishes for that text; returns as soon as they
    /// arrive. `None`: the server said nothing in time. With them, what it holds for the
    /// other files at that moment.
    pub async fn diagnose(
        &self,
        path: &Path,
        text: &str,
        limit: Duration,
    ) -> Result<Option<Diagnosed>, ServerError> {
        let uri = uri(path);
        let before = self.published.of(&uri).map_or(0, |(n, _)| n);
        let others_before = self.published.all();
        let arrived = self.published.arrived.notified();
        tokio::pin!(arrived);
        arrived.as_mut().enable();
        self.sync(path, text).await?;
        self.notify(
            "textDocument/didSave",
            json!({"textDocument": {"uri": uri}, "text": text}),
        )
        .await?;
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some((n, items)) = self.published.of(&uri)
                && n > before
            {
                let others = self
                    .published
                    .all()
                    .into_iter()
                    .filter(|(other, now)| *other != uri && others_before.get(other) != Some(now))
                    .collect();
                return Ok(Some(Diagnosed {
                    file: items,
                    others,
                }));
            }
            if tokio::time::timeout_at(deadline, arrived.as_mut())
                .await
                .is_err()
            {
                return Ok(None);
            }
            arrived.set(self.published.arrived.notified());
            arrived.as_mut().enable();
        }
    }

    /// A request and its result (`null` when the server found nothing).
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        limit: Duration,
    ) -> Result<Value, ServerError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        match tokio::time::timeout(limit, rx).await {
            Err(_) => Err(self.failure(&format!(
                "did not answer {method} within {} s",
                limit.as_secs()
            ))),
            Ok(Err(_)) => Err(self.failure("stopped")),
            Ok(Ok(Err(error))) => Err(ServerError::Answered(format!(
                "the language server {} could not answer {method}: {}",
                self.name,
                error["message"].as_str().unwrap_or("an error")
            ))),
            Ok(Ok(Ok(result))) => Ok(result),
        }
    }

    /// A request within the usual limit.
    pub async fn ask(&self, method: &str, params: Value) -> Result<Value, ServerError> {
        self.request(method, params, REQUEST_LIMIT).await
    }

    async fn notify(&self, method: &str, params: Value) -> Result<(), ServerError> {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await
    }

    async fn send(&self, message: &Value) -> Result<(), ServerError> {
        write_message(&self.writer, message)
            .await
            .map_err(|_| self.failure("stopped"))
    }
}

/// Writes one message with its `Content-Length` header.
async fn write_message(
    writer: &Mutex<WriteHalf<tokio::io::DuplexStream>>,
    message: &Value,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(message).unwrap_or_default();
    let mut w = writer.lock().await;
    w.write_all(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes())
        .await?;
    w.write_all(&body).await?;
    w.flush().await
}

/// What the task reading a server's messages shares with its client.
struct Reading {
    writer: Arc<Mutex<WriteHalf<tokio::io::DuplexStream>>>,
    pending: Pending,
    published: Arc<Published>,
    cut: Arc<std::sync::OnceLock<String>>,
    /// Ends the server's program.
    stop: tokio_util::sync::CancellationToken,
}

/// Reads the server's messages until it ends: responses go to whoever asked; requests
/// the server makes of the client get the plain answers an editor without those features
/// gives; diagnostics are kept ([`Published`]); other notifications (logs) are dropped.
/// A message past the framing limits ends the server, and the reason is kept for every
/// waiting and later request to report.
async fn read_messages(read: tokio::io::ReadHalf<tokio::io::DuplexStream>, r: Reading) {
    let mut reader = BufReader::new(read);
    loop {
        let message = match read_message(&mut reader).await {
            Ok(Some(message)) => message,
            Ok(None) => break,
            Err(e) => {
                let _ = r.cut.set(format!(
                    "sent {e}; runner cut it off (the limits are {} bytes per header line and {} bytes per message)",
                    runner_framing::MAX_HEADER_LINE,
                    runner_framing::MAX_BODY
                ));
                r.stop.cancel();
                break;
            }
        };
        if !answer(&message, &r).await {
            break;
        }
    }
    // The server is gone: whoever waits learns it now.
    r.pending.lock().unwrap_or_else(|p| p.into_inner()).clear();
}

/// Handles one message from the server; false when the server can no longer be written to.
async fn answer(message: &Value, r: &Reading) -> bool {
    let id = message.get("id").cloned();
    match (message.get("method").and_then(Value::as_str), id) {
        (Some(method), Some(id)) => {
            let result = match method {
                "workspace/configuration" => {
                    let n = message["params"]["items"].as_array().map_or(0, Vec::len);
                    Value::Array(vec![Value::Null; n])
                }
                _ => Value::Null,
            };
            let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
            if write_message(&r.writer, &reply).await.is_err() {
                return false;
            }
        }
        (None, Some(id)) => {
            let Some(id) = id.as_i64() else { return true };
            let waiter = r
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            if let Some(waiter) = waiter {
                let answer = match message.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                };
                let _ = waiter.send(answer);
            }
        }
        (Some("textDocument/publishDiagnostics"), None) => r.published.store(&message["params"]),
        _ => {}
    }
    true
}

/// One message, `None` at the end of the stream, or why the frame could not be read
/// within the limits ([`runner_framing`]). A body that is not JSON is skipped.
async fn read_message<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
) -> Result<Option<Value>, runner_framing::FrameError> {
    loop {
        let Some(body) =
            runner_framing::read_lsp_message(reader, runner_framing::Limits::default()).await?
        else {
            return Ok(None);
        };
        if let Ok(message) = serde_json::from_slice(&body) {
            return Ok(Some(message));
        }
    }
}

/// `path` as a `file://` URI.
pub fn uri(path: &Path) -> String {
    reqwest::Url::from_file_path(path)
        .map(|u| u.to_string())
        .unwrap_or_else(|_| format!("file://{}", path.display()))
}

/// The LSP language id of a file, by its extension.
fn language_id(path: &Path) -> &'static str {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default()
    {
        "py" | "pyi" => "python",
        "rs" => "rust",
        "go" => "go",
        "ts" | "mts" | "cts" => "typescript",
        "tsx" => "typescriptreact",
        "js" | "mjs" | "cjs" => "javascript",
        "jsx" => "javascriptreact",
        "c" | "h" => "c",
        "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => "cpp",
        _ => "plaintext",
    }
}
