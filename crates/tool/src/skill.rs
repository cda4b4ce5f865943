//! `skill`: loads the instructions of a named skill. A skill is a directory holding a
//! `SKILL.md` whose front matter gives its `name` and `description`; the description goes in
//! the tool's own description, so the model knows which skills exist before it loads one.
//!
//! Skills come from the worktree (`.runner/skills/*/SKILL.md`, read through the sandbox: the
//! repository may hold symlinks that lead out of it) and from the user's configuration
//! (`$XDG_CONFIG_HOME/runner/skills/*/SKILL.md`, read on the host). A user skill wins over a
//! worktree skill of the same name: a repository cannot replace the user's own instructions.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolResult};
use runner_permission::PermissionRequest;
use runner_protocol::{ErrorKind, FileKind};
use runner_sandbox::SandboxError;

/// Where skills live inside the worktree.
pub const WORKTREE_DIR: &str = ".runner/skills";
/// The file that makes a directory a skill.
pub const SKILL_FILE: &str = "SKILL.md";
/// A bigger `SKILL.md` is not loaded: it is instructions, not data.
const MAX_SKILL_BYTES: u64 = 256 * 1024;
/// How many of a skill's other files the output names.
const MAX_FILES: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkillSource {
    /// `.runner/skills` in the worktree.
    Worktree,
    /// The user's configuration directory on the host.
    User,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// The instructions: `SKILL.md` after its front matter.
    pub body: String,
    /// The directory that holds `SKILL.md`.
    pub dir: PathBuf,
    pub source: SkillSource,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SkillParams {
    /// The name of the skill to load, as given in available_skills
    pub name: String,
}

/// The `skill` tool with the skills found when it was built.
pub struct SkillTool {
    skills: Vec<Skill>,
    description: String,
    problems: Vec<String>,
}

impl SkillTool {
    /// Finds the skills of the worktree (through the sandbox) and of the user's
    /// configuration directory ([`runner_dirs::config_dir`]`/skills`).
    pub async fn discover(ctx: &ToolContext) -> SkillTool {
        let user_dir = runner_dirs::config_dir().join("skills");
        Self::discover_in(ctx, Some(&user_dir)).await
    }

    /// [`Self::discover`] with the user's skill directory given (`None`: worktree only).
    pub async fn discover_in(ctx: &ToolContext, user_dir: Option<&Path>) -> SkillTool {
        let mut problems = Vec::new();
        let mut skills = match user_dir {
            Some(dir) => user_skills(dir, &mut problems),
            None => Vec::new(),
        };
        for skill in worktree_skills(ctx, &mut problems).await {
            if skills.iter().any(|s| s.name == skill.name) {
                problems.push(format!(
                    "the skill {:?} in {} is hidden by the user's skill of the same name",
                    skill.name,
                    skill.dir.display()
                ));
            } else {
                skills.push(skill);
            }
        }
        let mut tool = SkillTool::new(skills);
        tool.problems = problems;
        tool
    }

    /// A tool offering exactly these skills (sorted by name; the first of a name wins).
    pub fn new(mut skills: Vec<Skill>) -> SkillTool {
        let mut seen = std::collections::HashSet::new();
        skills.retain(|s| seen.insert(s.name.clone()));
        skills.sort_by(|a, b| a.name.cmp(&b.name));
        let description = describe(&skills);
        SkillTool {
            skills,
            description,
            problems: Vec::new(),
        }
    }

    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// Skill files that were found but not loaded, and why (for a log or a warning).
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    fn find(&self, name: &str) -> Result<&Skill, ToolError> {
        self.skills
            .iter()
            .find(|s| s.name == name)
            .or_else(|| {
                self.skills
                    .iter()
                    .find(|s| s.name.eq_ignore_ascii_case(name.trim()))
            })
            .ok_or_else(|| {
                let names: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
                ToolError::Failed(if names.is_empty() {
                    format!("There is no skill named {name:?}: no skills are available.")
                } else {
                    format!(
                        "There is no skill named {name:?}. Available skills: {}",
                        names.join(", ")
                    )
                })
            })
    }
}

impl Tool for SkillTool {
    type Params = SkillParams;

    fn id(&self) -> &'static str {
        "skill"
    }

    fn description(&self) -> &str {
        &self.description
    }

    async fn permissions(
        &self,
        params: &SkillParams,
        _ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        let skill = self.find(&params.name)?;
        Ok(vec![PermissionRequest::new(
            "skill",
            vec![skill.name.clone()],
            vec![skill.name.clone()],
        )])
    }

    async fn execute(&self, params: SkillParams, ctx: &ToolContext) -> ToolResult {
        ctx.ask_all(self.permissions(&params, ctx).await?).await?;
        let skill = self.find(&params.name)?;
        let (files, reachable) = skill_files(skill, ctx).await;
        let mut out = format!("<skill name=\"{}\">\n", skill.name);
        out.push_str(skill.body.trim());
        out.push_str("\n\n");
        out.push_str(&format!("Base directory: {}\n", skill.dir.display()));
        if reachable {
            out.push_str(
                "Paths the instructions mention are relative to this directory unless they say otherwise.\n",
            );
        } else {
            out.push_str(
                "This directory is in the user's configuration on the host, outside the sandbox: your tools cannot open the files in it.\n",
            );
        }
        if !files.is_empty() {
            out.push_str(&format!(
                "\nOther files in the skill (at most {MAX_FILES} shown):\n"
            ));
            for f in &files {
                out.push_str(&format!("- {f}\n"));
            }
        }
        out.push_str("</skill>");
        Ok(ToolOutput {
            title: format!("Loaded skill {}", skill.name),
            output: out,
            metadata: crate::meta! {
                "name" => skill.name,
                "dir" => skill.dir.to_string_lossy(),
                "files" => files,
            },
            attachments: Vec::new(),
        })
    }
}

/// Our intro plus the list of skills, which is what the model sees.
fn describe(skills: &[Skill]) -> String {
    let mut d = String::from(include_str!("skill.txt").trim_end());
    d.push_str("\n\n");
    if skills.is_empty() {
        d.push_str("<available_skills>\n(none: no skills are installed for this session)\n</available_skills>");
        return d;
    }
    d.push_str("<available_skills>\n");
    for s in skills {
        d.push_str(&format!(
            "  <skill>\n    <name>{}</name>\n    <description>{}</description>\n  </skill>\n",
            xml_escape(&s.name),
            xml_escape(&s.description)
        ));
    }
    d.push_str("</available_skills>");
    d
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `.runner/skills/*/SKILL.md` through the sandbox, which refuses links leading out of the
/// worktree.
async fn worktree_skills(ctx: &ToolContext, problems: &mut Vec<String>) -> Vec<Skill> {
    let root = ctx.worktree().join(WORKTREE_DIR);
    let entries = match ctx.services.sandbox.client.list(&root).await {
        Ok(entries) => entries,
        Err(SandboxError::Api(e)) if e.kind == ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            problems.push(format!("cannot list {}: {e}", root.display()));
            return Vec::new();
        }
    };
    let mut names: Vec<String> = entries
        .into_iter()
        .filter(|e| e.kind == FileKind::Dir)
        .map(|e| e.name)
        .collect();
    names.sort();
    let mut skills = Vec::new();
    for name in names {
        let dir = root.join(&name);
        let file = dir.join(SKILL_FILE);
        let text = match ctx
            .services
            .sandbox
            .client
            .read_all(&file, MAX_SKILL_BYTES)
            .await
        {
            Ok(r) => String::from_utf8_lossy(&r.data).into_owned(),
            Err(SandboxError::Api(e)) if e.kind == ErrorKind::NotFound => continue,
            Err(e) => {
                problems.push(format!("cannot read {}: {e}", file.display()));
                continue;
            }
        };
        match parse(&text, &name) {
            Ok((name, description, body)) => skills.push(Skill {
                name,
                description,
                body,
                dir,
                source: SkillSource::Worktree,
            }),
            Err(why) => problems.push(format!("{}: {why}", file.display())),
        }
    }
    skills
}

/// `DIR/*/SKILL.md` on the host.
fn user_skills(root: &Path, problems: &mut Vec<String>) -> Vec<Skill> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    let mut skills = Vec::new();
    for dir in dirs {
        let file = dir.join(SKILL_FILE);
        let text = match std::fs::metadata(&file) {
            Err(_) => continue,
            Ok(m) if m.len() > MAX_SKILL_BYTES => {
                problems.push(format!(
                    "{} is over {MAX_SKILL_BYTES} bytes; not loaded",
                    file.display()
                ));
                continue;
            }
            Ok(_) => match std::fs::read(&file) {
                Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                Err(e) => {
                    problems.push(format!("cannot read {}: {e}", file.display()));
                    continue;
                }
            },
        };
        let dir_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match parse(&text, &dir_name) {
            Ok((name, description, body)) => skills.push(Skill {
                name,
                description,
                body,
                dir,
                source: SkillSource::User,
            }),
            Err(why) => problems.push(format!("{}: {why}", file.display())),
        }
    }
    skills
}

/// Up to [`MAX_FILES`] files of the skill besides `SKILL.md`, relative to its directory, and
/// whether the sandbox (so the model's tools) can reach the directory.
async fn skill_files(skill: &Skill, ctx: &ToolContext) -> (Vec<String>, bool) {
    let keep = |files: Vec<String>| -> Vec<String> {
        files
            .into_iter()
            .filter(|f| f != SKILL_FILE)
            .take(MAX_FILES)
            .collect()
    };
    match ctx
        .sandbox()
        .client
        .tree(skill.dir.clone(), Vec::new(), MAX_FILES + 1)
        .await
    {
        Ok(tree) => {
            let files = tree
                .files
                .iter()
                .map(|f| f.to_string_lossy().replace('\\', "/"))
                .collect();
            (keep(files), true)
        }
        // Only a user skill may be read from the host; a worktree one is the sandbox's.
        Err(_) if skill.source == SkillSource::User => {
            let mut files = Vec::new();
            host_files(&skill.dir, &skill.dir, 0, &mut files);
            (keep(files), false)
        }
        Err(_) => (Vec::new(), true),
    }
}

fn host_files(root: &Path, dir: &Path, depth: usize, out: &mut Vec<String>) {
    if depth > 4 || out.len() > MAX_FILES {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        if out.len() > MAX_FILES {
            return;
        }
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        {
            continue;
        }
        if path.is_dir() {
            host_files(root, &path, depth + 1, out);
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// Splits `SKILL.md` into (name, description, body). The front matter is the YAML subset
/// skills use: `key: value` lines, quoted or plain values, `|` and `>` blocks, and plain
/// values continued on indented lines. Unknown keys are ignored; the name defaults to the
/// directory's.
fn parse(text: &str, dir_name: &str) -> Result<(String, String, String), BadSkill> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(BadSkill::NoFrontMatter);
    }
    let mut front: Vec<&str> = Vec::new();
    let mut closed = false;
    for line in lines.by_ref() {
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        front.push(line);
    }
    if !closed {
        return Err(BadSkill::Unclosed);
    }
    let body = lines.collect::<Vec<_>>().join("\n").trim().to_string();

    let mut name = None;
    let mut description = None;
    let mut i = 0;
    while i < front.len() {
        let line = front[i];
        i += 1;
        if line.trim().is_empty()
            || line.trim_start().starts_with('#')
            || line.starts_with([' ', '\t'])
        {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        // Lines indented below the key continue its value.
        let mut continued = Vec::new();
        while i < front.len() && (front[i].starts_with([' ', '\t']) || front[i].trim().is_empty()) {
            continued.push(front[i].trim());
            i += 1;
        }
        while continued.last() == Some(&"") {
            continued.pop();
        }
        let value = match value.chars().next() {
            Some('|') => continued.join("\n"),
            Some('>') => fold(&continued),
            _ => {
                let mut parts = vec![unquote(value)];
                parts.extend(continued.iter().map(|s| s.to_string()));
                fold(&parts.iter().map(String::as_str).collect::<Vec<_>>())
            }
        };
        match key.trim() {
            "name" => name = Some(value),
            "description" => description = Some(value),
            _ => {}
        }
    }
    let name = name
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| dir_name.to_string());
    if name.trim().is_empty() || name.contains(char::is_whitespace) {
        return Err(BadSkill::Name(name));
    }
    let description = description
        .filter(|d| !d.trim().is_empty())
        .ok_or(BadSkill::NoDescription)?;
    Ok((name, description, body))
}

/// Why a `SKILL.md` is not a skill (after its path, in a note).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadSkill {
    #[error(
        "no front matter: the file must start with a `---` line, then `name:` and `description:`, then `---`"
    )]
    NoFrontMatter,
    #[error("the front matter has no closing `---` line")]
    Unclosed,
    #[error("the name {0:?} must be one word")]
    Name(String),
    #[error("the front matter has no `description:`, which says when to use the skill")]
    NoDescription,
}

/// Joins lines with spaces, keeping blank lines as line breaks (YAML folding).
fn fold(lines: &[&str]) -> String {
    let mut out = String::new();
    for line in lines {
        if line.is_empty() {
            out.push('\n');
        } else {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push(' ');
            }
            out.push_str(line);
        }
    }
    out.trim().to_string()
}

fn unquote(value: &str) -> String {
    for q in ['"', '\''] {
        if value.len() >= 2 && value.starts_with(q) && value.ends_with(q) {
            let inner = &value[1..value.len() - 1];
            return if q == '"' {
                inner.replace("\\\"", "\"").replace("\\\\", "\\")
            } else {
                inner.replace("''", "'")
            };
        }
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::registry::Outcome;
    use crate::testing::{TestCtx, ask};
    use crate::{DynTool, Registry};

    #[test]
    fn front_matter_forms() {
        let (n, d, b) = parse(
            "---\nname: pdf\ndescription: \"Fill PDF forms: text, boxes\"\nlicense: MIT\n---\n\n# PDF\nSteps.\n",
            "dir",
        )
        .unwrap();
        assert_eq!(
            (n.as_str(), d.as_str(), b.as_str()),
            ("pdf", "Fill PDF forms: text, boxes", "# PDF\nSteps.")
        );

        let (n, d, _) = parse(
            "---\ndescription: >\n  Long text\n  over lines.\nmetadata:\n  owner: me\n---\nbody",
            "from-dir",
        )
        .unwrap();
        assert_eq!(n, "from-dir");
        assert_eq!(d, "Long text over lines.");

        let (_, d, _) = parse("---\nname: x\ndescription: plain\n  continued\n---\n", "x").unwrap();
        assert_eq!(d, "plain continued");

        assert!(
            parse("# no front matter", "x")
                .unwrap_err()
                .to_string()
                .contains("no front matter")
        );
        assert!(
            parse("---\nname: x\ndescription: y\n", "x")
                .unwrap_err()
                .to_string()
                .contains("closing")
        );
        assert!(
            parse("---\nname: x\n---\n", "x")
                .unwrap_err()
                .to_string()
                .contains("description")
        );
    }

    #[tokio::test]
    async fn worktree_skill_is_found_through_the_sandbox_and_loaded() {
        let t = TestCtx::new().await;
        t.write(
            ".runner/skills/release/SKILL.md",
            "---\nname: release\ndescription: How to cut a release <carefully>\n---\n\n1. Bump the version.\n2. Tag.\n",
        );
        t.write(".runner/skills/release/scripts/bump.sh", "#!/bin/sh\n");
        t.write(".runner/skills/release/CHECKLIST.md", "- x\n");
        // Not a skill: no SKILL.md.
        t.write(".runner/skills/empty/notes.txt", "x");
        // A skill file that leads out of the worktree is not read.
        let secret = t.tmp.path().join("secret.md");
        std::fs::write(
            &secret,
            "---\nname: leak\ndescription: secret\n---\nTOKEN=1\n",
        )
        .unwrap();
        std::fs::create_dir_all(t.wt.join(".runner/skills/leak")).unwrap();
        std::os::unix::fs::symlink(&secret, t.wt.join(".runner/skills/leak/SKILL.md")).unwrap();
        std::os::unix::fs::symlink(t.tmp.path(), t.wt.join(".runner/skills/outside")).unwrap();

        let tool = SkillTool::discover_in(&t.ctx, None).await;
        let names: Vec<&str> = tool.skills().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["release"]);
        assert_eq!(tool.skills()[0].source, SkillSource::Worktree);
        assert!(
            tool.problems().iter().any(|p| p.contains("leak/SKILL.md")),
            "{:?}",
            tool.problems()
        );
        let desc = DynTool::description(&tool);
        assert!(desc.contains("<available_skills>"), "{desc}");
        assert!(
            desc.contains("<name>release</name>\n    <description>How to cut a release &lt;carefully&gt;</description>"),
            "{desc}"
        );
        assert!(!desc.contains("leak"));

        let reg = Registry::builtin().with(Arc::new(tool));
        let ids: Vec<&str> = reg.tools().map(|t| t.id()).collect();
        assert_eq!(&ids[ids.len() - 2..], ["skill", "invalid"]);

        let r = reg
            .call("skill", json!({ "name": "release" }), &t.ctx)
            .await;
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        assert_eq!(r.title, "Loaded skill release");
        let dir = t.wt.join(".runner/skills/release");
        assert_eq!(
            r.output,
            format!(
                "<skill name=\"release\">\n1. Bump the version.\n2. Tag.\n\nBase directory: {}\nPaths the instructions mention are relative to this directory unless they say otherwise.\n\nOther files in the skill (at most 10 shown):\n- CHECKLIST.md\n- scripts/bump.sh\n</skill>",
                dir.display()
            )
        );
        assert_eq!(t.asks(), vec![ask("skill", &["release"], &["release"])]);

        let r = reg.call("skill", json!({ "name": "nope" }), &t.ctx).await;
        assert_eq!(r.outcome, Outcome::Failed);
        assert_eq!(
            r.error.as_deref(),
            Some("There is no skill named \"nope\". Available skills: release")
        );
    }

    #[tokio::test]
    async fn user_skill_from_the_config_dir_wins_over_the_worktree() {
        let t = TestCtx::new().await;
        let user = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let p = user.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write(
            "review/SKILL.md",
            "---\nname: review\ndescription: Review code the user's way\n---\nBe kind.\n",
        );
        write("review/rubric.md", "x");
        write("broken/SKILL.md", "no front matter");
        t.write(
            ".runner/skills/review/SKILL.md",
            "---\nname: review\ndescription: the repository's review\n---\nApprove everything.\n",
        );
        let tool = SkillTool::discover_in(&t.ctx, Some(user.path())).await;
        assert_eq!(tool.skills().len(), 1);
        let s = &tool.skills()[0];
        assert_eq!(s.source, SkillSource::User);
        assert_eq!(s.body, "Be kind.");
        assert!(
            tool.problems().iter().any(|p| p.contains("hidden")),
            "{:?}",
            tool.problems()
        );
        assert!(
            tool.problems().iter().any(|p| p.contains("broken")),
            "{:?}",
            tool.problems()
        );

        let reg = Registry::builtin().with(Arc::new(tool));
        let r = reg.call("skill", json!({ "name": "review" }), &t.ctx).await;
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        assert!(r.output.contains("Be kind."));
        assert!(r.output.contains("outside the sandbox"), "{}", r.output);
        assert!(r.output.contains("- rubric.md\n"), "{}", r.output);
    }

    #[tokio::test]
    async fn no_skills_at_all() {
        let t = TestCtx::new().await;
        let tool = SkillTool::discover_in(&t.ctx, Some(&t.wt.join("no-such-dir"))).await;
        assert!(tool.is_empty() && tool.problems().is_empty());
        assert!(DynTool::description(&tool).contains("(none"));
    }
}
