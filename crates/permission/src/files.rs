//! Reading one rules file: runner's TOML and OpenCode's JSON(C), and what can be wrong
//! with a file, a boundary's ownership included.
//!
//! Both the layer stack ([`crate::layers`]) and the boundary ([`crate::boundary`]) read
//! files the same way; keeping the reading and its errors here lets each of them depend on
//! it without depending on the other. The two error types refer to each other (a boundary
//! can fail to parse, and the stack reports a boundary that cannot be used), so they live
//! together.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::rules::{Action, Rule};
use crate::wildcard;

/// A config file that could not be used. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {origin} is not valid {format}: {message}")]
    Syntax {
        origin: String,
        format: &'static str,
        message: String,
    },
    #[error("config {origin}: {message}")]
    Invalid { origin: String, message: String },
    /// A boundary file that is not only root's to change, or that is missing or broken.
    #[error(transparent)]
    Boundary(Box<BoundaryError>),
}

impl From<BoundaryError> for ConfigError {
    fn from(e: BoundaryError) -> Self {
        ConfigError::Boundary(Box::new(e))
    }
}

/// A boundary file that cannot be used. Each variant names the file or folder at fault.
#[derive(Debug, thiserror::Error)]
pub enum BoundaryError {
    #[error(
        "the boundary file {path} named by RUNNER_BOUNDARY does not exist; create it (owned by root, writable only by root) or unset RUNNER_BOUNDARY"
    )]
    Missing { path: PathBuf },
    #[error("cannot inspect the boundary file {path}: {source}")]
    Stat {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "refusing the boundary {path}: {what} is owned by uid {uid}, not root; a boundary only counts when only root can change it (chown root {what})"
    )]
    NotRootOwned {
        path: PathBuf,
        what: PathBuf,
        uid: u32,
    },
    #[error(
        "refusing the boundary {path}: {what} is writable by its group or by others (mode {mode:o}); a boundary only counts when only root can change it (chmod go-w {what})"
    )]
    Writable {
        path: PathBuf,
        what: PathBuf,
        mode: u32,
    },
    #[error("refusing the boundary {path}: it is not a regular file")]
    NotAFile { path: PathBuf },
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// The rules of one `permission` value. Patterns get `~` and `$HOME` expanded, as
/// OpenCode's loader does, so `"~/notes/*"` means the same in every file.
pub fn rules_from_value(value: &Value, origin: &str, home: &str) -> Result<Vec<Rule>, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        origin: origin.to_string(),
        message,
    };
    let mut out = Vec::new();
    let mut push = |permission: &str, pattern: &str, action: Action| {
        let position = out.len() + 1;
        out.push(Rule::new(
            permission,
            &wildcard::expand_home(pattern, home),
            action,
            origin,
            position,
        ));
    };
    match value {
        Value::String(_) => push(
            "*",
            "*",
            action_of(value).map_err(|e| invalid(e.to_string()))?,
        ),
        Value::Object(map) => {
            for (permission, v) in map {
                match v {
                    Value::Object(patterns) => {
                        for (pattern, a) in patterns {
                            let action = action_of(a).map_err(|m| {
                                invalid(format!("permission.{permission}.{pattern:?}: {m}"))
                            })?;
                            push(permission, pattern, action);
                        }
                    }
                    other => {
                        let action = action_of(other)
                            .map_err(|m| invalid(format!("permission.{permission}: {m}")))?;
                        push(permission, "*", action);
                    }
                }
            }
        }
        other => {
            return Err(invalid(format!(
                "permission must be an action (\"allow\", \"ask\", \"deny\") or a table, got {other}"
            )));
        }
    }
    Ok(out)
}

/// A value where an action belongs that is none.
#[derive(Debug, thiserror::Error)]
#[error("expected \"allow\", \"ask\" or \"deny\" (or a table of pattern = action), got {0}")]
struct NotAnAction(Value);

fn action_of(value: &Value) -> Result<Action, NotAnAction> {
    match value.as_str() {
        Some("allow") => Ok(Action::Allow),
        Some("ask") => Ok(Action::Ask),
        Some("deny") => Ok(Action::Deny),
        _ => Err(NotAnAction(value.clone())),
    }
}

/// Reads a config file: runner's TOML (`permission` here; the other known keys are read by
/// `config::settings`, and any unknown key is refused so that a typo cannot silently drop
/// rules), or an OpenCode JSON config, of which
/// only `permission` and the legacy `tools` map matter here. A missing `permission` means no
/// rules.
pub fn load_file(path: &Path, home: &str) -> Result<Vec<Rule>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let origin = path.display().to_string();
    let is_json = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("json" | "jsonc")
    );
    if is_json {
        parse_opencode_json(&text, &origin, home)
    } else {
        parse_toml(&text, &origin, home)
    }
}

/// The top-level keys of a runner TOML config: `permission` here, the rest read by
/// `config::settings` from the same files.
pub const RUNNER_KEYS: [&str; 11] = [
    "permission",
    "model",
    "provider",
    "retry",
    "context",
    "hooks",
    "mcp",
    "websearch",
    "lsp",
    "network",
    "audit",
];

/// Each top-level key of a TOML document with the line it is on (1-based); empty for a
/// document that does not parse (the caller has already said why).
fn top_level_key_lines(text: &str) -> Vec<(String, usize)> {
    let Ok(doc) = toml::de::DeTable::parse(text) else {
        return Vec::new();
    };
    doc.get_ref()
        .keys()
        .map(|k| (k.get_ref().to_string(), line_of(text, k.span().start)))
        .collect()
}

/// The 1-based line of byte `offset` in `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

pub use runner_display::spelling::did_you_mean;

pub fn parse_toml(text: &str, origin: &str, home: &str) -> Result<Vec<Rule>, ConfigError> {
    let doc: Map<String, Value> = toml::from_str(text).map_err(|e| ConfigError::Syntax {
        origin: origin.to_string(),
        format: "TOML",
        message: e.to_string(),
    })?;
    // The other keys belong to `config::settings`, which reads the same files. Every
    // unknown key is named at once, with its line: fixing typos one run at a time is a hunt.
    let unknown: Vec<&String> = doc
        .keys()
        .filter(|k| !RUNNER_KEYS.contains(&k.as_str()))
        .collect();
    if !unknown.is_empty() {
        let lines = top_level_key_lines(text);
        let named: Vec<String> = unknown
            .iter()
            .map(|key| {
                let line = lines
                    .iter()
                    .find(|(k, _)| k == *key)
                    .map(|(_, l)| format!("line {l}: "))
                    .unwrap_or_default();
                let hint = did_you_mean(key, &RUNNER_KEYS)
                    .map(|k| format!(" (did you mean `{k}`?)"))
                    .unwrap_or_default();
                format!("{line}unknown key {key:?}{hint}")
            })
            .collect();
        return Err(ConfigError::Invalid {
            origin: origin.to_string(),
            message: format!(
                "{}; a runner config holds {}",
                named.join("; "),
                RUNNER_KEYS.map(|k| format!("`{k}`")).join(", ")
            ),
        });
    }
    match doc.get("permission") {
        Some(p) => rules_from_value(p, origin, home),
        None => Ok(Vec::new()),
    }
}

/// OpenCode's `opencode.json`: `tools: {name: bool}` becomes rules placed before
/// `permission` (its `mergeDeep(tools, permission)`), with `write`, `edit`, `patch` and
/// `multiedit` all meaning the `edit` permission.
pub fn parse_opencode_json(text: &str, origin: &str, home: &str) -> Result<Vec<Rule>, ConfigError> {
    let doc: Value =
        serde_json::from_str(&strip_json_comments(text)).map_err(|e| ConfigError::Syntax {
            origin: origin.to_string(),
            format: "JSON",
            message: e.to_string(),
        })?;
    let Value::Object(doc) = doc else {
        return Err(ConfigError::Invalid {
            origin: origin.to_string(),
            message: "the top level must be an object".into(),
        });
    };
    let mut permission = Map::new();
    if let Some(tools) = doc.get("tools").and_then(Value::as_object) {
        for (name, enabled) in tools {
            let Some(enabled) = enabled.as_bool() else {
                continue;
            };
            let key = match name.as_str() {
                "write" | "edit" | "patch" | "multiedit" => "edit",
                other => other,
            };
            permission.insert(
                key.to_string(),
                Value::String(if enabled { "allow" } else { "deny" }.into()),
            );
        }
    }
    match doc.get("permission") {
        None => {}
        Some(Value::Object(p)) => {
            for (k, v) in p {
                // A later key replaces the same key from `tools` but keeps its place, as a
                // deep merge of two objects does.
                permission.insert(k.clone(), v.clone());
            }
        }
        Some(bare) => {
            // A bare action applies to everything after the tools map.
            let mut rules = rules_from_value(&Value::Object(permission), origin, home)?;
            let mut tail = rules_from_value(bare, origin, home)?;
            for r in &mut tail {
                r.source.position += rules.len();
            }
            rules.extend(tail);
            return Ok(rules);
        }
    }
    rules_from_value(&Value::Object(permission), origin, home)
}

/// OpenCode reads its config as JSONC: comments and trailing commas (before `}` or `]`)
/// are blanked outside strings so such a file parses unchanged. Every newline is kept, a
/// block comment's too, so a JSON error's line is the line in the file.
pub fn strip_json_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    // Where in `out` the last comma outside a string sits, while only blanks follow it.
    let mut pending_comma: Option<usize> = None;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => out.extend(chars.next()),
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('/', Some('/')) => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut prev = ' ';
                for c in chars.by_ref() {
                    if prev == '*' && c == '/' {
                        break;
                    }
                    if c == '\n' {
                        out.push('\n');
                    }
                    prev = c;
                }
            }
            (c, _) if c.is_whitespace() => out.push(c),
            (c, _) => {
                if let (Some(at), '}' | ']') = (pending_comma, c) {
                    out.replace_range(at..at + 1, " ");
                }
                pending_comma = None;
                match c {
                    '"' => in_string = true,
                    ',' => pending_comma = Some(out.len()),
                    _ => {}
                }
                out.push(c);
            }
        }
    }
    out
}
