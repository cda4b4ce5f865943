//! The user's own tools: `.runner/tools/NAME.toml` in the worktree and
//! `$XDG_CONFIG_HOME/runner/tools/NAME.toml`, each a `description`, `parameters` (a JSON
//! Schema written as a TOML table) and a `command`.
//!
//! The command is a shell command run inside the sandbox, like bash's, with the call's
//! arguments as JSON on its standard input; its standard output is the result, and a
//! non-zero exit is a failure whose message is its output. A tool from a repository is
//! code from that repository: it runs behind the same wall as everything else, and its
//! permission key is its name, so `"NAME" = "deny"` (or `"*_lint" = "ask"`) governs it. Its
//! command is also judged by the `bash` rules, as the command it is.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{DynTool, PermissionsFuture, ToolContext, ToolError, ToolFuture, ToolOutput};
use runner_permission::PermissionRequest;

/// Where tools live below a worktree or the user's config directory.
pub const TOOLS_DIR: &str = ".runner/tools";
/// The most of a command's output kept (the registry then cuts what the model sees).
const CAPTURE_LIMIT: u64 = 16 * 1024 * 1024;
const MAX_FILE: u64 = 256 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    description: String,
    #[serde(default)]
    parameters: Option<toml::Table>,
    command: String,
    /// Seconds; default bash's two minutes.
    timeout: Option<f64>,
}

/// One tool, as its file describes it.
#[derive(Debug, Clone)]
pub struct UserTool {
    /// Leaked once per tool and process: tool ids are `&'static str` everywhere else.
    id: &'static str,
    description: String,
    parameters: Value,
    command: String,
    timeout: Duration,
    /// The file it came from, for messages.
    pub source: PathBuf,
}

/// Why a tool file is not a tool; the message starts with the file.
#[derive(Debug, thiserror::Error)]
pub enum BadToolFile {
    #[error("{}: a tool name is letters, digits, '_' and '-'", .0.display())]
    Name(PathBuf),
    #[error("{}: {}", .0.display(), .1)]
    Toml(PathBuf, Box<toml::de::Error>),
    #[error("{}: command is empty", .0.display())]
    NoCommand(PathBuf),
    #[error("{}: parameters must be a table", .0.display())]
    Parameters(PathBuf),
    #[error("cannot read {}: {}", .0.display(), .1)]
    Unreadable(PathBuf, String),
    #[error("{} leads out of the worktree", .0.display())]
    OutOfWorktree(PathBuf),
}

impl UserTool {
    /// Reads one tool file's text; `name` is the file's stem.
    pub fn parse(name: &str, text: &str, source: &Path) -> Result<UserTool, BadToolFile> {
        let path = || source.to_path_buf();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(BadToolFile::Name(path()));
        }
        let file: File =
            toml::from_str(text).map_err(|e| BadToolFile::Toml(path(), Box::new(e)))?;
        if file.command.trim().is_empty() {
            return Err(BadToolFile::NoCommand(path()));
        }
        let mut parameters = match file.parameters {
            Some(table) => {
                serde_json::to_value(table).map_err(|_| BadToolFile::Parameters(path()))?
            }
            None => Value::Object(Map::new()),
        };
        let Some(schema) = parameters.as_object_mut() else {
            return Err(BadToolFile::Parameters(path()));
        };
        // Model APIs want an object schema with properties, even an empty one.
        schema
            .entry("type")
            .or_insert_with(|| Value::String("object".into()));
        schema
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        let timeout = file
            .timeout
            .filter(|t| t.is_finite() && *t > 0.0)
            .map(|t| Duration::from_secs_f64(t.min(3600.0)))
            .unwrap_or(Duration::from_millis(super::bash::DEFAULT_TIMEOUT_MS));
        Ok(UserTool {
            id: Box::leak(name.to_string().into_boxed_str()),
            description: file.description,
            parameters,
            command: file.command,
            timeout,
            source: source.to_path_buf(),
        })
    }

    /// The tool's own key, then its command as the `bash` rules see it: a command the user
    /// denied (or asks about) as bash is not let through by wrapping it in a tool.
    fn asks(&self) -> Vec<PermissionRequest> {
        vec![
            PermissionRequest::new(self.id, vec!["*".into()], vec!["*".into()]),
            PermissionRequest::new(
                "bash",
                vec![self.command.clone()],
                vec![self.command.clone()],
            ),
        ]
    }

    async fn run(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if !args.is_object() {
            return Err(ToolError::InvalidArguments {
                tool: self.id.to_string(),
                message: "the arguments must be a JSON object".into(),
            });
        }
        ctx.ask_all(self.asks()).await?;
        let stdin = serde_json::to_vec(&args).map_err(|e| ToolError::Failed(e.to_string()))?;
        let super::collect::Collected {
            stdout,
            stderr,
            status,
        } = super::collect::run(ctx, &self.command, stdin, self.timeout, CAPTURE_LIMIT).await?;
        if status.cancelled {
            return Err(ToolError::Cancelled);
        }
        let out = String::from_utf8_lossy(&stdout).into_owned();
        if status.timed_out {
            return Err(ToolError::Failed(format!(
                "the {} tool's command ran past its {} s timeout and was stopped. Output so far:\n{out}",
                self.id,
                self.timeout.as_secs()
            )));
        }
        if status.code != Some(0) {
            let err = String::from_utf8_lossy(&stderr);
            let how = match status.code {
                Some(c) => format!("exited with {c}"),
                None => "was killed by a signal".into(),
            };
            return Err(ToolError::Failed(
                format!("the {} tool's command {how}:\n{out}{err}", self.id)
                    .trim_end()
                    .to_string(),
            ));
        }
        Ok(ToolOutput {
            title: self.id.to_string(),
            output: out,
            metadata: crate::meta! { "exit" => 0 },
            attachments: Vec::new(),
        })
    }
}

impl DynTool for UserTool {
    fn id(&self) -> &'static str {
        self.id
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn truncation(&self) -> super::truncate::Direction {
        super::truncate::Direction::Head
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(self.run(args, ctx))
    }

    fn permissions<'a>(&'a self, _args: Value, _ctx: &'a ToolContext) -> PermissionsFuture<'a> {
        Box::pin(async move { Ok(self.asks()) })
    }
}

/// The built-in tools, the user's own and the MCP servers': the registry `tool call`,
/// `tool script`, `permission check` and the agent use. What could not be loaded comes
/// back as notes.
pub async fn registry(ctx: &ToolContext) -> (super::Registry, Vec<String>) {
    let builtin = super::Registry::builtin();
    let taken: Vec<&str> = builtin.tools().map(|t| t.id()).collect();
    let (tools, notes) = discover(ctx, &runner_dirs::config_dir().join("tools"), &taken).await;
    let mut registry = builtin.clone();
    let mut notes = notes;
    for t in tools {
        registry = registry.with(std::sync::Arc::new(t));
    }
    // Offered only where a language server can run.
    if let Some(lsp) = &ctx.services.lsp
        && lsp.any(ctx).await
    {
        registry = registry.with(std::sync::Arc::new(super::lsp::LspTool));
    }
    // Offered only where a search service is configured.
    if ctx.services.search.is_some() {
        registry = registry
            .with(std::sync::Arc::new(super::websearch::WebSearchTool))
            .with(std::sync::Arc::new(super::codesearch::CodeSearchTool));
    }
    if let Some(mcp) = &ctx.services.mcp {
        let (tools, states) = mcp.tools(ctx).await;
        notes.extend(
            states
                .into_iter()
                .filter(|s| s.state != "running")
                .map(|s| s.state),
        );
        for t in tools {
            // A server may not stand in for a built-in tool (its permission, its checks).
            if taken.contains(&t.id()) {
                notes.push(format!(
                    "the MCP tool {} is not offered: {} is a built-in tool's name",
                    t.name(),
                    t.id()
                ));
                continue;
            }
            registry = registry.with(std::sync::Arc::new(t));
        }
    }
    (registry, notes)
}

/// The user's tools, then the worktree's (read through the sandbox, so a link out of the
/// worktree is not followed).
pub async fn discover(
    ctx: &ToolContext,
    user_dir: &Path,
    taken: &[&str],
) -> (Vec<UserTool>, Vec<String>) {
    let mut files = user_files(user_dir);
    let dir = ctx.worktree().join(TOOLS_DIR);
    let names: Vec<String> = match ctx.services.sandbox.client.list(&dir).await {
        Ok(entries) => entries.into_iter().map(|e| e.name).collect(),
        Err(_) => Vec::new(),
    };
    for (name, file) in toml_files(&names) {
        let path = dir.join(file);
        let text = match ctx.services.sandbox.client.read_all(&path, MAX_FILE).await {
            Ok(r) => Ok(String::from_utf8_lossy(&r.data).into_owned()),
            Err(e) => Err(BadToolFile::Unreadable(path.clone(), e.to_string())),
        };
        files.push((name, path, text));
    }
    build(files, taken)
}

/// The same, read from the host for `runner tool list`, which starts no sandbox: a
/// worktree file is read only if it really is below the worktree.
pub fn discover_on_host(
    root: &Path,
    user_dir: &Path,
    taken: &[&str],
) -> (Vec<UserTool>, Vec<String>) {
    let mut files = user_files(user_dir);
    let dir = root.join(TOOLS_DIR);
    let real_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    for (name, file) in toml_files(&names_in(&dir)) {
        let path = dir.join(file);
        let text = match std::fs::canonicalize(&path) {
            Ok(real) if real.starts_with(&real_root) => std::fs::read_to_string(&real)
                .map_err(|e| BadToolFile::Unreadable(path.clone(), e.to_string())),
            _ => Err(BadToolFile::OutOfWorktree(path.clone())),
        };
        files.push((name, path, text));
    }
    build(files, taken)
}

type Found = (String, PathBuf, Result<String, BadToolFile>);

fn user_files(dir: &Path) -> Vec<Found> {
    toml_files(&names_in(dir))
        .into_iter()
        .map(|(name, file)| {
            let path = dir.join(file);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| BadToolFile::Unreadable(path.clone(), e.to_string()));
            (name, path, text)
        })
        .collect()
}

fn names_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Tools from files, first of a name wins; a name a built-in has is skipped with a note.
fn build(files: Vec<Found>, taken: &[&str]) -> (Vec<UserTool>, Vec<String>) {
    let mut tools: Vec<UserTool> = Vec::new();
    let mut notes = Vec::new();
    for (name, path, text) in files {
        let tool = text.and_then(|t| UserTool::parse(&name, &t, &path));
        match tool {
            Ok(t) if taken.contains(&t.id) || tools.iter().any(|u| u.id == t.id) => {
                notes.push(format!(
                    "the tool {} in {} is hidden by another of the same name",
                    t.id,
                    path.display()
                ))
            }
            Ok(t) => tools.push(t),
            Err(e) => notes.push(e.to_string()),
        }
    }
    (tools, notes)
}

/// `(stem, file name)` of every `*.toml`, sorted.
fn toml_files(names: &[String]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = names
        .iter()
        .filter_map(|n| n.strip_suffix(".toml").map(|s| (s.to_string(), n.clone())))
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_file_is_its_schema_and_command_and_a_bad_one_says_why() {
        let t = UserTool::parse(
            "count_lines",
            "description = \"Counts lines.\"\ncommand = \"wc -l\"\ntimeout = 5\n[parameters]\ntype = \"object\"\nrequired = [\"path\"]\n[parameters.properties.path]\ntype = \"string\"\n",
            Path::new("t.toml"),
        )
        .unwrap();
        assert_eq!(DynTool::id(&t), "count_lines");
        assert_eq!(t.parameters["properties"]["path"]["type"], "string");
        assert_eq!(t.parameters["required"][0], "path");
        assert_eq!(t.timeout, Duration::from_secs(5));
        let asks = t.asks();
        assert_eq!(asks[0].permission, "count_lines");
        assert_eq!(asks[1].permission, "bash");
        assert_eq!(asks[1].patterns, ["wc -l"]);
        let bare = UserTool::parse(
            "x",
            "description = \"d\"\ncommand = \"true\"\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(bare.parameters["type"], "object");
        assert!(bare.parameters["properties"].is_object());
        assert!(
            UserTool::parse(
                "bad name",
                "description=\"d\"\ncommand=\"x\"",
                Path::new("b.toml")
            )
            .is_err()
        );
        let e = UserTool::parse("t", "description = \"d\"\n", Path::new("t.toml")).unwrap_err();
        assert!(e.to_string().contains("command"), "{e}");
        let e = UserTool::parse(
            "t",
            "description = \"d\"\ncommand = \"x\"\nextra = 1\n",
            Path::new("t.toml"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("extra"), "{e}");
    }
}
