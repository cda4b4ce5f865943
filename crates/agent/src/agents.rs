//! Agents: a name, what it is for, its own instructions, and the rules that make it what it
//! is. `build` (the default) and `plan` lead a session; `general` and `explore` are
//! subagents the `task` tool starts; users add their own as Markdown files with front
//! matter in `.runner/agents/*.md` (the project's, read through the sandbox) and
//! `$XDG_CONFIG_HOME/runner/agents/*.md`.
//!
//! An agent's rules come after every config layer, so a user's config cannot reopen what
//! `plan` or `explore` close. A user-defined agent can only narrow: its allow rules are
//! dropped, since a repository that ships an agent file must not be able to widen what the
//! session may do.

use std::path::Path;

use serde_json::{Map, Value, json};

use runner_permission::layers::rules_from_value;
use runner_permission::rules::{Action, Rule};
use runner_tool::ToolContext;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Primary,
    Subagent,
    All,
}

#[derive(Debug, Clone)]
pub struct AgentDef {
    pub name: String,
    pub description: String,
    pub mode: Mode,
    /// Instructions added to the system prompt.
    pub prompt: Option<String>,
    /// `provider/model`, when the agent wants a model of its own.
    pub model: Option<String>,
    pub rules: Vec<Rule>,
    /// Where it was defined, for messages.
    pub source: String,
}

/// The plan file directory: the only place `plan` may edit.
pub const PLANS: &str = ".runner/plans";

fn rules(value: Value, origin: &str) -> Vec<Rule> {
    rules_from_value(&value, origin, "").unwrap_or_default()
}

/// The readonly profile's bash table: commands that only look. `plan` and `explore` run
/// bash under it, so "no edits" also holds for `sed -i` or `> file`.
/// A table that does not load (a user's own `readonly` profile with a typo) denies bash
/// outright: these agents fail closed, never open.
fn read_only_bash() -> Value {
    crate::config::profile::load("readonly")
        .ok()
        .and_then(|p| p.permission)
        .and_then(|p| p.get("bash").cloned())
        .filter(|table| rules_from_value(&json!({ "bash": table }), "readonly", "").is_ok())
        .unwrap_or(json!("deny"))
}

pub fn builtin() -> Vec<AgentDef> {
    let def = |name: &str, description: &str, mode, prompt: Option<&str>, value: Value| AgentDef {
        name: name.into(),
        description: description.into(),
        mode,
        prompt: prompt.map(str::to_string),
        model: None,
        rules: rules(value, &format!("agent {name}")),
        source: "built-in".into(),
    };
    vec![
        def(
            "build",
            "The default agent: reads, edits and runs commands to get the task done.",
            Mode::Primary,
            None,
            json!({"question": "allow"}),
        ),
        def(
            "plan",
            "Looks and plans without changing the project: edits only its plan file.",
            Mode::Primary,
            Some(include_str!("plan.txt")),
            json!({
                "question": "allow",
                "edit": {"*": "deny", format!("{PLANS}/*"): "allow"},
                "bash": read_only_bash(),
            }),
        ),
        def(
            "general",
            "A general-purpose helper for a self-contained piece of work (research, a multi-step change) that returns one answer.",
            Mode::Subagent,
            None,
            json!({"todowrite": "deny", "todoread": "deny"}),
        ),
        def(
            "explore",
            "Fast, read-only exploration of the worktree: finds files, searches code, answers questions about it. Cannot change anything.",
            Mode::Subagent,
            Some(include_str!("explore.txt")),
            json!({
                "edit": "deny",
                "bash": read_only_bash(),
                "todowrite": "deny",
                "todoread": "deny",
                "task": "deny",
            }),
        ),
    ]
}

/// Every agent: built-ins, then the user's, then the project's (a later one with the same
/// name replaces an earlier one, but never a built-in's restrictions: see [`narrow`]).
pub async fn all(ctx: &ToolContext, user_dir: &Path) -> (Vec<AgentDef>, Vec<String>) {
    let mut agents = builtin();
    let mut notes = Vec::new();
    let add = |def: AgentDef, agents: &mut Vec<AgentDef>| {
        match agents.iter_mut().find(|a| a.name == def.name) {
            Some(existing) => {
                // A same-named file adds instructions and restrictions; it keeps the
                // built-in's rules so it cannot undo them.
                let mut merged = def;
                let mut rules = existing.rules.clone();
                rules.extend(merged.rules);
                merged.rules = rules;
                *existing = merged;
            }
            None => agents.push(def),
        }
    };
    for entry in std::fs::read_dir(user_dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "md")
            && let Ok(text) = std::fs::read_to_string(&path)
        {
            match parse(&text, &path.display().to_string()) {
                Ok(def) => add(def, &mut agents),
                Err(e) => notes.push(e.to_string()),
            }
        }
    }
    let dir = ctx.worktree().join(".runner").join("agents");
    if let Ok(entries) = ctx.services.sandbox.client.list(&dir).await {
        let mut names: Vec<String> = entries
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n.ends_with(".md"))
            .collect();
        names.sort();
        for name in names {
            let path = dir.join(&name);
            let Ok(r) = ctx
                .services
                .sandbox
                .client
                .read_all(&path, 256 * 1024)
                .await
            else {
                continue;
            };
            let text = String::from_utf8_lossy(&r.data);
            match parse(&text, &ctx.relative(&path)) {
                Ok(def) => add(def, &mut agents),
                Err(e) => notes.push(e.to_string()),
            }
        }
    }
    (agents, notes)
}

/// Why an agent file is not an agent; the message starts with the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadAgentFile {
    #[error("{0}: an agent file starts with front matter between --- lines")]
    NoFrontMatter(String),
    #[error("{0}: the front matter needs a description")]
    NoDescription(String),
    #[error("{origin}: {why}")]
    Permission { origin: String, why: String },
}

/// A Markdown agent: front matter (`description`, `mode`, `model`, `tools`,
/// `permission`) and the body as its instructions. The file name is its name.
pub fn parse(text: &str, origin: &str) -> Result<AgentDef, BadAgentFile> {
    let name = Path::new(origin)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (front, body) =
        split_front_matter(text).ok_or_else(|| BadAgentFile::NoFrontMatter(origin.to_string()))?;
    let meta = parse_front_matter(front);
    let description = meta
        .get("description")
        .and_then(Value::as_str)
        .ok_or_else(|| BadAgentFile::NoDescription(origin.to_string()))?
        .to_string();
    let mode = match meta.get("mode").and_then(Value::as_str) {
        Some("primary") => Mode::Primary,
        Some("all") => Mode::All,
        _ => Mode::Subagent,
    };
    let mut permission = Map::new();
    // OpenCode's `tools: {name: false}` turns tools off.
    if let Some(Value::Object(tools)) = meta.get("tools") {
        for (tool, on) in tools {
            if on == &json!(false) || on == &json!("false") {
                let key = runner_tool::registry::permission_key(tool).to_string();
                permission.insert(key, json!("deny"));
            }
        }
    }
    if let Some(Value::Object(p)) = meta.get("permission") {
        for (k, v) in p {
            permission.insert(k.clone(), v.clone());
        }
    }
    let rules = narrow(
        rules_from_value(&Value::Object(permission), origin, "").map_err(|e| {
            BadAgentFile::Permission {
                origin: origin.to_string(),
                why: e.to_string(),
            }
        })?,
    );
    Ok(AgentDef {
        name,
        description,
        mode,
        prompt: Some(body.trim().to_string()).filter(|b| !b.is_empty()),
        model: meta
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string),
        rules,
        source: origin.to_string(),
    })
}

/// Drops allow rules: an agent file may close things, never open them.
fn narrow(rules: Vec<Rule>) -> Vec<Rule> {
    rules
        .into_iter()
        .filter(|r| r.action != Action::Allow)
        .collect()
}

fn split_front_matter(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix("---")?;
    let rest = rest
        .strip_prefix("\r\n")
        .or_else(|| rest.strip_prefix('\n'))?;
    let end = rest.find("\n---")?;
    let body = &rest[end + 4..];
    let body = body.split_once('\n').map(|(_, b)| b).unwrap_or("");
    Some((&rest[..end], body))
}

/// The small YAML subset front matter uses: `key: value` scalars and nested maps by
/// indentation, quotes optional.
pub fn parse_front_matter(text: &str) -> Map<String, Value> {
    fn scalar(s: &str) -> Value {
        let s = s.trim();
        let unquoted = s
            .strip_prefix('"')
            .and_then(|x| x.strip_suffix('"'))
            .or_else(|| s.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')));
        match unquoted {
            Some(u) => json!(u),
            None if s == "true" => json!(true),
            None if s == "false" => json!(false),
            None => json!(s),
        }
    }
    fn block(lines: &[(usize, &str)], i: &mut usize, indent: usize) -> Map<String, Value> {
        let mut map = Map::new();
        while *i < lines.len() {
            let (ind, line) = lines[*i];
            if ind < indent {
                break;
            }
            *i += 1;
            let Some((key, value)) = split_key(line) else {
                continue;
            };
            let key = match scalar(key) {
                Value::String(s) => s,
                other => other.to_string(),
            };
            if value.trim().is_empty() {
                let child_indent = lines.get(*i).map(|l| l.0).unwrap_or(0);
                if child_indent > ind {
                    map.insert(key, Value::Object(block(lines, i, child_indent)));
                } else {
                    map.insert(key, json!(""));
                }
            } else {
                map.insert(key, scalar(value));
            }
        }
        map
    }
    let lines: Vec<(usize, &str)> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|l| (l.len() - l.trim_start().len(), l.trim()))
        .collect();
    let mut i = 0;
    block(&lines, &mut i, 0)
}

/// `key: value`, where a quoted key may hold colons (`"git *": allow`).
fn split_key(line: &str) -> Option<(&str, &str)> {
    if let Some(q) = line.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let close = line[1..].find(q)? + 1;
        let rest = line[close + 1..].trim_start().strip_prefix(':')?;
        return Some((&line[..=close], rest));
    }
    line.split_once(':')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_file_can_close_but_never_open() {
        let text = "---\ndescription: Reviews diffs\nmodel: anthropic/claude-x\ntools:\n  write: false\npermission:\n  bash:\n    \"*\": allow\n    \"git push *\": deny\n  webfetch: ask\n---\nYou review.\n";
        let def = parse(text, ".runner/agents/reviewer.md").unwrap();
        assert_eq!(def.name, "reviewer");
        assert_eq!(def.model.as_deref(), Some("anthropic/claude-x"));
        assert_eq!(def.prompt.as_deref(), Some("You review."));
        let got: Vec<(String, String, Action)> = def
            .rules
            .iter()
            .map(|r| (r.permission.clone(), r.pattern.clone(), r.action))
            .collect();
        assert_eq!(
            got,
            vec![
                ("edit".into(), "*".into(), Action::Deny),
                ("bash".into(), "git push *".into(), Action::Deny),
                ("webfetch".into(), "*".into(), Action::Ask),
            ]
        );
        assert!(parse("no front matter", "x.md").is_err());
    }

    #[test]
    fn plan_and_explore_bash_is_the_readonly_table() {
        let agents = builtin();
        let plan = agents.iter().find(|a| a.name == "plan").unwrap();
        let eval =
            |p: &str, s: &str| runner_permission::rules::evaluate(p, &[s], &plan.rules, &[]).action;
        assert_eq!(eval("edit", "src/main.rs"), Action::Deny);
        assert_eq!(eval("edit", ".runner/plans/fix.md"), Action::Allow);
        assert_eq!(eval("bash", "rm -rf src"), Action::Deny);
        assert_eq!(eval("bash", "git log -3"), Action::Allow);
    }
}
