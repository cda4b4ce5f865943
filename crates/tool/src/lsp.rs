//! `lsp`: OpenCode's language-server tool, with the servers inside the wall
//! ([`super::lsp_client`]). Asks `lsp` for the file, with the worktree and
//! external-directory rules `read` has.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::lsp_client::uri;
use super::server_error::ServerError;
use super::{Tool, ToolContext, ToolError, ToolOutput, ToolResult, lenient};
use runner_permission::PermissionRequest;
use runner_protocol::FileKind;

/// Larger files are not sent to a server.
const MAX_FILE: u64 = 4 * 1024 * 1024;

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Operation {
    GoToDefinition,
    FindReferences,
    Hover,
    DocumentSymbol,
    WorkspaceSymbol,
    GoToImplementation,
    PrepareCallHierarchy,
    IncomingCalls,
    OutgoingCalls,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::GoToDefinition => "goToDefinition",
            Operation::FindReferences => "findReferences",
            Operation::Hover => "hover",
            Operation::DocumentSymbol => "documentSymbol",
            Operation::WorkspaceSymbol => "workspaceSymbol",
            Operation::GoToImplementation => "goToImplementation",
            Operation::PrepareCallHierarchy => "prepareCallHierarchy",
            Operation::IncomingCalls => "incomingCalls",
            Operation::OutgoingCalls => "outgoingCalls",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LspParams {
    /// The operation to perform
    pub operation: Operation,
    /// The file to ask about
    pub file_path: String,
    /// The line, 1-based as an editor shows it
    #[serde(deserialize_with = "lenient::u64")]
    #[schemars(with = "u64")]
    pub line: u64,
    /// The character on the line, 1-based as an editor shows it
    #[serde(deserialize_with = "lenient::u64")]
    #[schemars(with = "u64")]
    pub character: u64,
}

pub struct LspTool;

impl Tool for LspTool {
    type Params = LspParams;

    fn id(&self) -> &'static str {
        "lsp"
    }

    fn description(&self) -> &'static str {
        include_str!("lsp.txt")
    }

    async fn permissions(
        &self,
        params: &LspParams,
        ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        let path = ctx.resolve(&params.file_path)?;
        Ok(ctx.file_asks(&path, false, "lsp"))
    }

    async fn execute(&self, params: LspParams, ctx: &ToolContext) -> ToolResult {
        ctx.ask_all(self.permissions(&params, ctx).await?).await?;
        let path = ctx.resolve(&params.file_path)?;
        let rel = ctx.relative(&path);
        match ctx.stat_if_exists(&path).await? {
            None => {
                return Err(ToolError::Failed(format!(
                    "File not found: {}",
                    path.display()
                )));
            }
            Some(s) if s.kind != FileKind::File => {
                return Err(ToolError::Failed(format!(
                    "{} is not a file",
                    path.display()
                )));
            }
            Some(_) => {}
        }
        let servers = ctx.services.lsp.as_deref().ok_or_else(|| {
            ToolError::Failed("No language server is configured in this session.".into())
        })?;
        let client = servers.for_file(&path, ctx).await?;
        let text = ctx
            .services
            .sandbox
            .client
            .read_all(&path, MAX_FILE)
            .await?;
        client
            .sync(&path, &String::from_utf8_lossy(&text.data))
            .await?;
        let position = json!({
            "line": params.line.saturating_sub(1),
            "character": params.character.saturating_sub(1),
        });
        let at = json!({"textDocument": {"uri": uri(&path)}, "position": position});
        let op = params.operation;
        let result = tokio::select! {
            r = ask(&client, op, at) => r?,
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        let found = !nothing(&result);
        Ok(ToolOutput {
            title: format!("{} {rel}:{}:{}", op.name(), params.line, params.character),
            output: if found {
                serde_json::to_string_pretty(&result).unwrap_or_default()
            } else {
                format!("No results found for {}", op.name())
            },
            metadata: crate::meta! { "server" => client.name.clone(), "found" => found },
            attachments: Vec::new(),
        })
    }
}

/// Whether a result says nothing: `null`, an empty list, or a hover with empty contents
/// (which some servers send for a position on no symbol).
fn nothing(result: &Value) -> bool {
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::String(s) => s.trim().is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o
            .get("value")
            .and_then(Value::as_str)
            .is_some_and(|s| s.trim().is_empty()),
        _ => false,
    };
    empty(result) || result.get("contents").is_some_and(empty)
}

/// The LSP request(s) an operation is: the call-hierarchy ones first prepare the item at
/// the position, then ask about it.
async fn ask(
    client: &super::lsp_client::LspClient,
    op: Operation,
    at: Value,
) -> Result<Value, ServerError> {
    let document = json!({"textDocument": at["textDocument"].clone()});
    match op {
        Operation::GoToDefinition => client.ask("textDocument/definition", at).await,
        Operation::GoToImplementation => client.ask("textDocument/implementation", at).await,
        Operation::Hover => client.ask("textDocument/hover", at).await,
        Operation::FindReferences => {
            let mut params = at;
            params["context"] = json!({"includeDeclaration": true});
            client.ask("textDocument/references", params).await
        }
        Operation::DocumentSymbol => client.ask("textDocument/documentSymbol", document).await,
        Operation::WorkspaceSymbol => client.ask("workspace/symbol", json!({"query": ""})).await,
        Operation::PrepareCallHierarchy => {
            client.ask("textDocument/prepareCallHierarchy", at).await
        }
        Operation::IncomingCalls | Operation::OutgoingCalls => {
            let items = client.ask("textDocument/prepareCallHierarchy", at).await?;
            let Some(item) = items.as_array().and_then(|a| a.first()).cloned() else {
                return Ok(Value::Null);
            };
            let method = match op {
                Operation::IncomingCalls => "callHierarchy/incomingCalls",
                _ => "callHierarchy/outgoingCalls",
            };
            client.ask(method, json!({"item": item})).await
        }
    }
}
