//! The system prompt: who the agent is and how to work (`system.txt`), the environment as
//! it really is behind the wall, the agent's own instructions, and the instructions the
//! project and the user wrote (`AGENTS.md`, or `CLAUDE.md` where a project has no
//! AGENTS.md), and the files an OpenCode config's `instructions` name. The project's
//! files are read through the sandbox, like every other file the model sees.

use std::path::Path;

use runner_sandbox::BackendKind;
use runner_sandbox::spec::{Network, SandboxSpec};
use runner_tool::ToolContext;

use super::agents::AgentDef;

/// What the environment section says.
pub struct Environment<'a> {
    pub worktree: &'a Path,
    pub spec: &'a SandboxSpec,
    pub date: String,
}

pub async fn build(
    ctx: &ToolContext,
    env: &Environment<'_>,
    agent: &AgentDef,
    user_config: &Path,
    configured: &[String],
) -> String {
    let mut prompt = String::from(include_str!("system.txt"));
    prompt.push('\n');
    prompt.push_str(&environment(env));
    if let Some(extra) = &agent.prompt {
        prompt.push_str(&format!("\n# Your role: {}\n{extra}\n", agent.name));
    }
    if let Some((name, text)) = project_instructions(ctx).await {
        prompt.push_str(&format!(
            "\n# Project instructions ({name} at the worktree root)\n{}\n",
            text.trim()
        ));
    }
    // An OpenCode config's `instructions`: the files the user's own config names.
    for (path, text) in runner_tool::instructions::configured(ctx, configured).await {
        let name = match path.strip_prefix(ctx.worktree()) {
            Ok(rel) => rel.display().to_string(),
            Err(_) => path.display().to_string(),
        };
        prompt.push_str(&format!(
            "\n# Instructions from {name} (named in the config)\n{}\n",
            text.trim()
        ));
    }
    if let Ok(text) = std::fs::read_to_string(user_config.join("AGENTS.md")) {
        prompt.push_str(&format!(
            "\n# The user's own instructions\n{}\n",
            text.trim()
        ));
    }
    prompt
}

fn environment(env: &Environment) -> String {
    let wt = env.worktree.display();
    let wall = match env.spec.backend {
        BackendKind::Docker if env.spec.docker.over_task_image => format!(
            "Your commands and file tools run inside a Docker container made from the image {}. The worktree {wt} is a directory of that image, not a folder of anyone's machine: the whole file system of the container is yours to read and change, and nothing outside the container is visible. The file tools work inside the worktree; use bash for the rest of the container. Installed programs are the image's.",
            env.spec.docker.image
        ),
        BackendKind::Docker => format!(
            "Your commands and file tools run inside a Docker container made from the image {}. The worktree {wt} is mounted into it and is the only part of the user's machine you can see or change. The rest of the file system is the image's: read-only, except a private temporary directory ($TMPDIR, /tmp). Installed programs are the image's, not the user's.",
            env.spec.docker.image
        ),
        BackendKind::Landlock => format!(
            "Your commands and file tools run behind a landlock and seccomp wall on the user's Linux machine. They can write only the worktree {wt} and a private temporary directory ($TMPDIR; /tmp is private too where the machine lets the wall have a mount namespace of its own, and refused where it does not); system directories (/usr, /bin, /lib, /etc) are read-only; the user's home directory and every other project do not exist for you. Programs are the machine's own."
        ),
        BackendKind::None => format!(
            "Your commands run directly on the user's machine, without an isolation wall: only the permission rules stand between you and the rest of the system. Stay inside the worktree {wt}."
        ),
    };
    let network = match (env.spec.backend, env.spec.network) {
        (BackendKind::None, _) => {
            "Nothing cuts commands off from the network here; use it only when the task needs it."
        }
        (_, Network::None) => {
            "There is no network: package downloads, git fetch and web requests from commands fail. Work with what is installed and in the worktree; if the task needs the network, say so."
        }
        (_, Network::Allowlist) => {
            "Commands reach the network only through an HTTP proxy that the environment variables (http_proxy, https_proxy) already point at; pip, npm, cargo, git and curl use it as they are. There is no DNS and no direct connection. Each host is allowed or refused by the user's rules: a refused one answers 403 with the reason, so do not retry it; say which host the task needs."
        }
        (_, Network::Host) => "Commands can reach the network.",
    };
    format!(
        "# Environment\n- Worktree (your working directory): {wt}\n- {wall}\n- {network}\n- Commands get a minimal environment: no API keys, tokens or credentials from the user's shell, and nothing you need will be found in environment variables.\n- Each bash call is a fresh shell: `cd` and variables do not carry over; processes left in the background are stopped when the call returns.\n- Long outputs are cut, and the full text is saved to a file whose path the output gives; read or grep that file for the rest.\n- Operating system: Linux. Today's date: {}.\n",
        env.date
    )
}

/// `AGENTS.md` at the worktree root, else `CLAUDE.md`: its name and text.
pub async fn project_instructions(ctx: &ToolContext) -> Option<(String, String)> {
    let (path, text) = runner_tool::instructions::in_folder(ctx, ctx.worktree()).await?;
    let name = path.file_name()?.to_string_lossy().into_owned();
    Some((name, text))
}

/// Today's date from the system clock, as YYYY-MM-DD (civil from days, UTC).
pub fn today() -> String {
    let days = (super::record::now_ms() / 86_400_000) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
