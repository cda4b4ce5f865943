//! `runner [run] [OPTIONS] [PROMPT]`: the agent. A prompt (or `-` for standard input) runs
//! one task and exits; no prompt on a terminal starts a conversation, one line per turn in
//! one session and one sandbox. Ctrl-C cancels the turn in flight (its commands die inside
//! the sandbox); a second Ctrl-C, or Ctrl-D at the prompt, ends the session.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::exit;
use super::signals::Signals;
use super::tool::SandboxArgs;
use runner_agent::config::profile::AskMode;
use runner_agent::events::{EventSink, JsonLines};
use runner_agent::start::{Resume, RunOptions, start};
use runner_agent::{End, LoopOptions};
use runner_display::{escape, shown};

mod view;
use view::TerminalView;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The task. `-` reads it from standard input. Without one, on a terminal, runner
    /// starts a conversation.
    pub prompt: Option<String>,
    /// provider/model: anthropic/…, openai/…, replay/FILE, or a [provider.NAME] from the
    /// config (default: the config's `model`).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// The worktree the agent works in.
    #[arg(long, default_value = ".")]
    pub root: PathBuf,
    /// The agent: build (the default), plan (edits only its plan under .runner/plans/), or
    /// one of the user's own. A resumed session goes on as the agent it last had.
    #[arg(long)]
    pub agent: Option<String>,
    /// Model turns before the run stops.
    #[arg(long, default_value_t = 100)]
    pub max_steps: u32,
    /// Who answers what the rules leave open: prompt (the terminal), allow, deny.
    #[arg(long, value_parser = super::ask_arg())]
    pub ask: Option<AskMode>,
    /// A runner TOML config or an OpenCode JSON config, after the user's and the project's.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// One JSON event per line on stdout instead of the terminal view.
    #[arg(long)]
    pub json: bool,
    /// Continue the session with this id (or a unique prefix) in a fresh sandbox.
    #[arg(long, conflicts_with = "continue_last")]
    pub resume: Option<String>,
    /// Continue the last session of this worktree.
    #[arg(long = "continue", short = 'c')]
    pub continue_last: bool,
    /// Keep going when an ask is refused (the model reads the refusal), instead of
    /// stopping the run.
    #[arg(long)]
    pub continue_on_deny: bool,
    /// With a copy workspace: apply its changes to the worktree at the end, unless a file
    /// there changed meanwhile (then the copy is kept, and the conflicting files named).
    #[arg(long)]
    pub apply: bool,
    /// Trust the worktree's `.runner/config.toml` as it is now to loosen built-in defaults,
    /// without the question (remembered until the file changes). It never loosens your own
    /// rules or the profile's.
    #[arg(long)]
    pub trust_project: bool,
    /// Let the direct workspace edit a folder that is not inside a git work tree. Without
    /// it such a run stops before the model is asked: nothing would record what changed.
    #[arg(long)]
    pub no_git_check: bool,
    /// Append every decision of the session (each tool call's permission with the rule
    /// that decided, each connection and inspected request through the allow-list, each
    /// secret's use, the sandbox's start and end) to FILE as OCSF JSON lines, besides
    /// `[audit] file` in your config and the session's own trail (`runner sessions audit
    /// ID`). See docs/AUDIT.md.
    #[arg(long, value_name = "FILE")]
    pub audit: Option<std::path::PathBuf>,
}

/// Under `--json`, a run that cannot start still gives its reader one event to parse
/// instead of nothing on stdout: `{"type":"error","code":N,"message":…}`, the code being
/// the exit status that follows. The same words also go to stderr for a person watching.
fn print_startup_error(code: u8, message: &str) {
    let event = serde_json::json!({ "type": "error", "code": code, "message": message });
    println!("{}", runner_display::json(&event));
}

pub async fn run(args: RunArgs) -> u8 {
    let interactive_terminal = std::io::stdin().is_terminal();
    let prompt = match args.prompt.as_deref() {
        Some("-") => {
            let mut text = String::new();
            if let Err(e) = std::io::stdin().read_to_string(&mut text) {
                eprintln!("runner: cannot read the prompt from standard input: {e}");
                return exit::USAGE;
            }
            Some(text)
        }
        other => other.map(str::to_string),
    };
    let is_replay = args
        .model
        .as_deref()
        .is_some_and(|m| m.starts_with("replay/"));
    if prompt.is_none() && !interactive_terminal && !is_replay {
        let message =
            "no prompt: give the task as an argument, or `-` to read it from standard input";
        eprintln!("runner: {message}");
        if args.json {
            print_startup_error(exit::USAGE, message);
        }
        return exit::USAGE;
    }
    let view: Arc<dyn EventSink> = if args.json {
        Arc::new(JsonLines::new(std::io::stdout()))
    } else {
        Arc::new(TerminalView::new())
    };
    let options = run_options(&args, view, interactive_terminal);
    let mut run = match start(options).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("runner: {}", shown(&e));
            if args.json {
                print_startup_error(exit::of_start(&e), &e.to_string());
            }
            return exit::of_start(&e);
        }
    };
    if !args.json {
        eprintln!("runner: {}", run.open.wall);
    }
    for note in &run.notes {
        eprintln!("runner: {}", escape(note));
    }
    let signals = Signals::listen(None, Box::new(run.on_forced_exit()));
    let end = match prompt.or(run.recorded_prompt.clone()) {
        Some(prompt) => {
            let cancel = signals.turn();
            run.turn(&prompt, cancel).await.end
        }
        None => conversation(&mut run, &signals, args.json).await,
    };
    run.finish(&end);
    if let Some(hooks) = run.open.ctx.services.hooks.clone() {
        hooks.session_end(end.reason(), &run.open.ctx).await;
    }
    if !args.json {
        super::tool::report_network(run.open.ctx.services.network.as_deref()).await;
        eprintln!(
            "runner: session {} saved in {}",
            run.agent.id,
            run.session_file().display()
        );
    }
    let workspace = run.open.workspace.take();
    // The sandbox closes, and every process in it dies, before the copy is handed over.
    drop(run);
    if let Some(ws) = workspace {
        hand_over(ws, args.apply);
    }
    exit::of_end(&end)
}

/// The run the command line asks for: its sandbox and rules, model, agent, limits, and
/// the conversation it resumes.
fn run_options(args: &RunArgs, view: Arc<dyn EventSink>, interactive_terminal: bool) -> RunOptions {
    let mut options = RunOptions::new(&args.root, view);
    options.session = args.sandbox.options(
        &args.root,
        &super::permission::RuleArgs {
            config: args.config.clone(),
        },
        args.ask,
    );
    if args.trust_project {
        options.session.project_trust = runner_agent::config::trust::TrustMode::Grant;
    }
    options.session.require_git_for_direct = !args.no_git_check;
    options.session.audit.file = args.audit.clone();
    if interactive_terminal && std::io::stderr().is_terminal() {
        options.user = Some(Arc::new(runner_tool::question::TerminalUser));
    }
    options.model = args.model.clone();
    options.agent = args.agent.clone();
    options.loop_options = LoopOptions {
        max_steps: args.max_steps,
        continue_on_deny: args.continue_on_deny,
        ..LoopOptions::default()
    };
    options.resume = match (&args.resume, args.continue_last) {
        (Some(id), _) => Some(Resume::Id(id.clone())),
        (None, true) => Some(Resume::Last),
        _ => None,
    };
    options
}

/// A copy workspace after its session: its changes listed, then applied (`--apply`) or
/// left for review; a copy with no changes is discarded.
fn hand_over(ws: runner_workspace::Workspace, apply: bool) {
    let Some(id) = super::changes::report(Some(ws)) else {
        return;
    };
    if !apply {
        eprintln!(
            "runner: review with `runner changes {id}`, then `runner apply {id}` (or `runner discard {id}`)"
        );
        return;
    }
    let applied =
        runner_workspace::Workspace::open(&id).and_then(|w| w.apply(false, false, &|| false));
    match applied {
        Ok(applied) => {
            for note in &applied.notes {
                eprintln!("runner: {}", escape(note));
            }
            if let Some(note) = runner_workspace::ignored::note(applied.left_out) {
                eprintln!("runner: {note}");
            }
            eprintln!("runner: applied {} change(s)", applied.changes.len())
        }
        Err(e) => eprintln!("runner: {}", escape(&e.to_string())),
    }
}

/// One line, one turn, until Ctrl-D (or a second Ctrl-C at the prompt). A turn that ends
/// for any reason but a broken provider or sandbox leaves the conversation open.
async fn conversation(run: &mut runner_agent::start::Run, signals: &Signals, json: bool) -> End {
    let mut last = End::Finished;
    loop {
        if !json {
            eprint!("\n{} ", paint("1;36", "›"));
            let _ = std::io::stderr().flush();
        }
        let line = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            match std::io::stdin().lock().read_line(&mut line) {
                Ok(0) | Err(_) => None,
                Ok(_) => Some(line),
            }
        })
        .await
        .ok()
        .flatten();
        let Some(line) = line else {
            return last;
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let outcome = run.turn(line, signals.turn()).await;
        last = outcome.end;
        match &last {
            End::ProviderError(m) | End::SandboxError(m) => {
                eprintln!("runner: {}", escape(m));
                return last;
            }
            End::Interrupted => eprintln!("\n{}", paint("33", "interrupted")),
            End::MaxSteps => eprintln!("{}", paint("33", "step limit reached")),
            End::Refused(m) | End::ModelRefused(m) => eprintln!("{}", paint("33", m)),
            End::Finished => {}
        }
    }
}

fn colour() -> bool {
    std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}

/// `text` in runner's colour `code`. The text is escaped first (it often holds what the
/// model or a tool wrote), so the only sequences that reach the terminal are the colour's.
fn paint(code: &str, text: &str) -> String {
    let text = escape(text);
    if colour() {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.into_owned()
    }
}

pub fn short_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    }
}
