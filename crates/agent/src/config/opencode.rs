//! An OpenCode `opencode.json` given with `--config`, read as OpenCode writes it: JSONC
//! (comments and trailing commas), its `provider` blocks turned into runner's provider
//! tables, its `instructions` kept for the system prompt, and every other key it holds
//! that runner does not act on named once, with what runner does instead. A user moving
//! from OpenCode should never wonder whether a part of their file took effect.
//!
//! Only a file the user names is read this way. A project's own `opencode.json` is noticed
//! and never read (see [`project_notice`]): its `baseURL` would say where the user's key
//! is sent.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use runner_llm::models::ProviderSettings;

/// What runner takes from an OpenCode config besides its permission rules (which
/// `permission::layers` reads from the same file).
#[derive(Debug, Default)]
pub struct OpenCodeFile {
    pub model: Option<String>,
    pub provider: BTreeMap<String, ProviderSettings>,
    pub mcp: BTreeMap<String, runner_tool::mcp::McpSpec>,
    pub lsp: BTreeMap<String, runner_tool::lsp_client::LspSpec>,
    /// `instructions`: files and globs, as written.
    pub instructions: Vec<String>,
    /// One line for each key runner does not act on.
    pub notes: Vec<String>,
}

/// Where OpenCode finds a project's config in its worktree; `--config` takes any of them.
pub const PROJECT_FILES: [&str; 4] = [
    "opencode.json",
    "opencode.jsonc",
    ".opencode/opencode.json",
    ".opencode/opencode.jsonc",
];

/// Parses `text` (the file at `path`). A syntax error carries the file's own line, since
/// the JSONC scanner keeps every newline.
pub fn read(path: &Path, text: &str) -> Result<OpenCodeFile, String> {
    let clean = runner_permission::layers::strip_json_comments(text);
    let doc: Value = serde_json::from_str(&clean).map_err(|e| {
        format!(
            "line {}: not valid JSON (comments and trailing commas are fine): {e}",
            e.line()
        )
    })?;
    let Value::Object(doc) = doc else {
        return Err("the top level must be an object".into());
    };
    let mut file = OpenCodeFile::default();
    for (key, value) in &doc {
        take_key(&mut file, key, value, path)?;
    }
    Ok(file)
}

/// One top-level key: read it, leave it to the permission layer, or name it.
fn take_key(file: &mut OpenCodeFile, key: &str, value: &Value, path: &Path) -> Result<(), String> {
    match key {
        "model" => {
            file.model = Some(
                value
                    .as_str()
                    .ok_or("`model` must be a string like \"provider/model\"")?
                    .to_string(),
            );
        }
        "mcp" => file.mcp = runner_tool::mcp::from_opencode(value).map_err(|e| e.to_string())?,
        "lsp" => {
            file.lsp = runner_tool::lsp_client::from_opencode(value).map_err(|e| e.to_string())?
        }
        "provider" => providers(file, value)?,
        "instructions" => {
            let list = value
                .as_array()
                .ok_or("`instructions` must be a list of files or globs")?;
            for item in list {
                let s = item
                    .as_str()
                    .ok_or("`instructions` must be a list of strings")?;
                if s.starts_with("http://") || s.starts_with("https://") {
                    file.notes.push(format!(
                        "{}: instruction {s:?} is a URL; runner reads instruction files only, so download it and name the file",
                        path.display()
                    ));
                } else {
                    file.instructions.push(s.to_string());
                }
            }
        }
        // The permission layer reads these two; `$schema` is for editors.
        "permission" | "tools" | "$schema" => {}
        other => file.notes.push(format!(
            "{}: `{other}` is not read by runner: {}",
            path.display(),
            instead(other)
        )),
    }
    Ok(())
}

/// What runner does instead of an OpenCode key it does not read.
fn instead(key: &str) -> &'static str {
    match key {
        "agent" | "mode" | "default_agent" => {
            "runner's agents are Markdown files in .runner/agents/ or ~/.config/runner/agents/ (build and plan are built in)"
        }
        "small_model" => "runner uses `model` for every step, titles and compaction included",
        "command" => "runner has no custom commands; put the prompt in the task",
        "formatter" => "runner does not format files after edits; ask for it in AGENTS.md",
        "plugin" => "runner's extensions are hooks and MCP servers in its TOML config",
        "theme" | "keybinds" | "tui" | "layout" | "username" => {
            "runner has no interactive interface to style"
        }
        "share" | "autoshare" => "runner never uploads a session; its transcript stays local",
        "autoupdate" => "runner updates with `cargo install`",
        "disabled_providers" | "enabled_providers" => {
            "runner uses only the provider that `model` names"
        }
        "compaction" => "runner compacts at [context] threshold in its TOML config",
        "experimental" | "server" | "snapshot" | "watcher" | "enterprise" => {
            "runner has no such feature"
        }
        _ => "the key has no effect here",
    }
}

/// `provider`: `{NAME: {"npm": …, "options": {"baseURL", "apiKey", "headers"}, "models"}}`.
fn providers(file: &mut OpenCodeFile, value: &Value) -> Result<(), String> {
    let blocks = value
        .as_object()
        .ok_or("`provider` must be an object of providers")?;
    for (name, block) in blocks {
        let block = block
            .as_object()
            .ok_or_else(|| format!("provider {name:?} must be an object"))?;
        if let Some(table) = provider(name, block, &mut file.notes)? {
            file.provider.insert(name.clone(), table);
        }
    }
    Ok(())
}

/// One provider block as runner's `[provider.NAME]` table; `None` for a package runner
/// cannot speak (named in `notes`).
fn provider(
    name: &str,
    block: &Map<String, Value>,
    notes: &mut Vec<String>,
) -> Result<Option<ProviderSettings>, String> {
    let mut table = ProviderSettings::default();
    match block.get("npm").and_then(Value::as_str) {
        None | Some("@ai-sdk/openai-compatible" | "@ai-sdk/openai") => {
            if !matches!(name, "anthropic") {
                table.kind = Some("openai".into());
            }
        }
        Some("@ai-sdk/anthropic") => table.kind = Some("anthropic".into()),
        Some(other) => {
            notes.push(format!(
                "provider {name:?}: the package {other:?} is not one runner speaks (it speaks the OpenAI-compatible and Anthropic formats); the block is not used"
            ));
            return Ok(None);
        }
    }
    let empty = Map::new();
    let options = match block.get("options") {
        None => &empty,
        Some(o) => o
            .as_object()
            .ok_or_else(|| format!("provider {name:?}: `options` must be an object"))?,
    };
    for (key, value) in options {
        let text = || {
            value
                .as_str()
                .ok_or_else(|| format!("provider {name:?}: options.{key} must be a string"))
        };
        match key.as_str() {
            "baseURL" => table.base_url = Some(text()?.to_string()),
            "apiKey" => api_key(name, text()?, &mut table),
            "headers" => {
                for (h, v) in value.as_object().into_iter().flatten() {
                    let v = v.as_str().ok_or_else(|| {
                        format!("provider {name:?}: header {h:?} must be a string")
                    })?;
                    table.headers.insert(h.clone(), env_text(v));
                }
            }
            other => notes.push(format!(
                "provider {name:?}: options.{other} is not read by runner (it reads baseURL, apiKey and headers)"
            )),
        }
    }
    limits(name, block.get("models"), &mut table, notes)?;
    for key in block.keys() {
        if !matches!(key.as_str(), "npm" | "name" | "options" | "models" | "id") {
            notes.push(format!("provider {name:?}: `{key}` is not read by runner"));
        }
    }
    Ok(Some(table))
}

/// `apiKey`: `{env:VAR}` names the variable (read when the run starts, never stored); a
/// literal key is sent as OpenCode sends it, as a bearer token.
fn api_key(name: &str, value: &str, table: &mut ProviderSettings) {
    match env_var_name(value) {
        Some(var) => table.api_key_env = Some(var.to_string()),
        None => {
            table
                .headers
                .insert("Authorization".into(), format!("Bearer {value}"));
            // No variable of the user's shell stands in for a key written here.
            table.api_key_env = Some(format!(
                "{}_API_KEY",
                name.to_ascii_uppercase().replace(['-', '.'], "_")
            ));
        }
    }
}

/// `VAR` of `{env:VAR}`.
fn env_var_name(value: &str) -> Option<&str> {
    value
        .strip_prefix("{env:")?
        .strip_suffix('}')
        .filter(|v| !v.is_empty())
}

/// `value` with each `{env:VAR}` replaced by the variable's value (empty when unset), as
/// OpenCode substitutes them.
fn env_text(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("{env:") {
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        out.push_str(&rest[..start]);
        let var = &rest[start + 5..start + len];
        out.push_str(&std::env::var(var).unwrap_or_default());
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    out
}

/// `models`: runner sends the name after the slash as it is; a model's `limit` (context and
/// output tokens) becomes the provider's window and answer size, the smallest given, so
/// no model of the block is asked for more than it holds.
fn limits(
    name: &str,
    models: Option<&Value>,
    table: &mut ProviderSettings,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let Some(models) = models else {
        return Ok(());
    };
    let models = models
        .as_object()
        .ok_or_else(|| format!("provider {name:?}: `models` must be an object"))?;
    for (model, spec) in models {
        let limit = spec.get("limit");
        if let Some(context) = limit.and_then(|l| l.get("context")).and_then(Value::as_u64) {
            table.context_window = Some(table.context_window.map_or(context, |c| c.min(context)));
        }
        if let Some(output) = limit.and_then(|l| l.get("output")).and_then(Value::as_u64) {
            let output = u32::try_from(output).unwrap_or(u32::MAX);
            table.max_tokens = Some(table.max_tokens.map_or(output, |m| m.min(output)));
        }
        if spec.get("id").is_some() {
            notes.push(format!(
                "provider {name:?}: model {model:?} has an `id`; runner sends the name after the slash ({name}/{model} asks for {model:?})"
            ));
        }
    }
    Ok(())
}

/// A note for each OpenCode config of the project that the run does not read: how to use
/// it, and why it is not read by itself.
pub fn project_notice(worktree: &Path, explicit: Option<&Path>) -> Vec<String> {
    let explicit = explicit.and_then(|p| std::fs::canonicalize(p).ok());
    PROJECT_FILES.iter().filter_map(|name| {
        let found = worktree.join(name);
        if !found.is_file() {
            return None;
        }
        if explicit.is_some() && std::fs::canonicalize(&found).ok() == explicit {
            return None;
        }
        Some(format!(
            "{} is not read: a repository's file may not choose where your API keys are sent; if you trust it, pass it with `--config {name}`",
            found.display()
        ))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_block_becomes_a_provider_table() {
        let text = r#"{
  // local models
  "provider": {
    "ollama": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "Ollama (local)",
      "options": { "baseURL": "http://localhost:11434/v1", "apiKey": "{env:OLLAMA_KEY}", },
      "models": { "qwen": { "name": "Qwen", "limit": { "context": 32000, "output": 4096 } }, },
    },
    "lit": { "options": { "baseURL": "http://h/v1", "apiKey": "sk-1" } },
    "g": { "npm": "@ai-sdk/google" },
  },
  "model": "ollama/qwen",
  "agent": {},
}"#;
        let f = read(Path::new("o.json"), text).unwrap();
        let p = &f.provider["ollama"];
        assert_eq!(p.base_url.as_deref(), Some("http://localhost:11434/v1"));
        assert_eq!(p.api_key_env.as_deref(), Some("OLLAMA_KEY"));
        assert_eq!(p.kind.as_deref(), Some("openai"));
        assert_eq!((p.context_window, p.max_tokens), (Some(32000), Some(4096)));
        assert_eq!(f.provider["lit"].headers["Authorization"], "Bearer sk-1");
        assert!(!f.provider.contains_key("g"));
        assert_eq!(f.model.as_deref(), Some("ollama/qwen"));
        let notes = f.notes.join("\n");
        assert!(
            notes.contains("`agent` is not read by runner: runner's agents"),
            "{notes}"
        );
        assert!(notes.contains("\"@ai-sdk/google\""), "{notes}");
    }

    #[test]
    fn a_syntax_error_names_the_files_own_line() {
        let e = read(Path::new("o.json"), "{\n/* a\nb */\n\"model\": ,,\n}").unwrap_err();
        assert!(e.starts_with("line 4:"), "{e}");
    }
}
