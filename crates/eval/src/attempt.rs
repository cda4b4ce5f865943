//! One attempt at one task: a fresh worktree, setup and the agent in one sandbox, then the
//! verdict in another.
//!
//! The agent's sandbox is closed (its container removed, every process it started dead)
//! before the verifier's opens, so nothing the agent left running can touch the files the
//! verdict is taken from; the hidden tests reach the worktree only then, written through
//! the verifier's sandbox (the worktree is the agent's now, and a symlink it planted must
//! not steer a host write).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::results::TaskResult;
use super::tasks::Task;
use super::verdict::{self, Score, Verdict, Verified, fresh_dir, infra, judge_end};
use super::worktree;
use super::{EvalError, EvalOptions};
use runner_agent::End;
use runner_agent::events::NoEvents;
use runner_agent::session::{OpenError, OpenSession, SessionOptions};
use runner_agent::start::{RunOptions, start};
use runner_protocol::ExecRequest;
use runner_sandbox::Sandbox;
use runner_sandbox::client::ExecEvent;
use runner_tool::Conversation;
use runner_workspace::{Workspace, write_file};

/// Output kept from setup and verify commands (head and tail beyond it).
pub(super) const LOG_LIMIT: u64 = 1 << 20;
/// How long a cancelled agent gets to wind down before its sandbox is torn down anyway.
const WIND_DOWN: Duration = Duration::from_secs(30);

/// Runs the attempt and writes its files into `out` (except `result.json`, which the
/// caller writes last, so that its presence means "finished"). `None`: the run was
/// interrupted and the attempt counts as not run.
pub async fn run(
    task: &Task,
    attempt: u32,
    out: &Path,
    options: &EvalOptions,
    engine: Option<&super::engines::Engine>,
    stop: &CancellationToken,
) -> Option<Verdict> {
    let started = Instant::now();
    let mut result = TaskResult::new(&task.id, attempt, options.model_label());
    result.set_instruction(&task.instruction);
    let timeouts = task.timeouts.scaled(options.timeout_multiplier);
    if let Err(e) = fresh_dir(out) {
        return infra(result, "prepare", e, false);
    }

    // The worktree, with the task's base commit.
    let (ws, base) = match prepare_worktree(task, attempt, options).await {
        Ok(made) => made,
        Err(e) => return infra(result, "prepare", e, false),
    };
    let removing = Removing(Some(ws));
    let ws = removing.workspace();
    let root = ws.work();
    result.base = Some(base);
    let mut session = session_options(task, options, &root);
    session.docker_host = engine.and_then(|e| e.host.clone());
    session.output_dir = Some(ws.outputs());

    // Setup and the agent, in one sandbox.
    let agent_started = Instant::now();
    // The verifier's sandbox starts while the agent works, so its start costs no time;
    // it runs nothing until the agent's sandbox is gone.
    let verifier = Prewarmed::open(session.clone());
    let mut run = match start_agent(&root, session, options, out).await {
        Ok(r) => r,
        Err((e, retryable)) => return infra(result, "agent", e, retryable),
    };
    if let Some(setup) = &task.setup {
        let ran = run_setup(setup, &run, timeouts.setup, out, &mut result, stop).await;
        if let Err(ended) = ran {
            drop_blocking(run).await;
            return ended;
        }
    }
    let (end, timed_out) = drive(&mut run, &task.instruction, timeouts.agent, stop).await;
    keep_the_agents_record(run, &end, out, &mut result).await;
    result.timings.agent_ms = agent_started.elapsed().as_millis() as u64;
    if stop.is_cancelled() && !timed_out {
        return None;
    }
    if let Err(infra) = judge_end(&mut result, Some(&end), timed_out, timeouts.agent, engine).await
    {
        return infra;
    }

    // The diff, from the host's copy of the base, and the verdict, in a fresh sandbox. A
    // timed-out or crashed agent still gets its diff recorded.
    let verify_started = Instant::now();
    let patching = ws.clone();
    let into = out.join("diff.patch");
    let patch = tokio::task::spawn_blocking(move || verdict::stream_patch(&patching, &into));
    if let Err(e) = match patch.await {
        Ok(made) => made,
        Err(source) => Err(EvalError::Join {
            what: "taking the patch",
            source,
        }),
    } {
        result.diff_error = Some(e.to_string());
    }
    if let Some(decided) = verdict::decided_by_the_agent(&mut result, started) {
        return decided;
    }
    let verifier = match verifier.take().await {
        Ok(v) => v,
        Err(e) => {
            return infra(
                result,
                "verify",
                format!("cannot open the verifier's sandbox: {e}"),
                true,
            );
        }
    };
    let verified = judge(task, &verifier, timeouts.verify, stop).await;
    drop_blocking(verifier).await;
    result.timings.verify_ms = verify_started.elapsed().as_millis() as u64;
    result.timings.total_ms = started.elapsed().as_millis() as u64;
    verdict::conclude(result, verified, out, timeouts.verify, engine).await
}

/// The agent's turn on the instruction, cut off (and given a moment to wind down) past
/// `limit`. Returns how it ended and whether the limit did it.
pub(super) async fn drive(
    run: &mut runner_agent::start::Run,
    instruction: &str,
    limit: Duration,
    stop: &CancellationToken,
) -> (End, bool) {
    let cancel = stop.child_token();
    let turn = run.turn(instruction, cancel.clone());
    tokio::pin!(turn);
    tokio::select! {
        outcome = &mut turn => (outcome.end, false),
        _ = tokio::time::sleep(limit) => {
            cancel.cancel();
            let end = tokio::time::timeout(WIND_DOWN, turn)
                .await
                .map(|o| o.end)
                .unwrap_or(End::Interrupted);
            (end, true)
        }
    }
}

/// The agent's run over the attempt's worktree, recorded into `out`. `Err`: why it could
/// not start, and whether another try could go differently (its sandbox's start failed).
async fn start_agent(
    root: &Path,
    session: SessionOptions,
    options: &EvalOptions,
    out: &Path,
) -> Result<runner_agent::start::Run, (String, bool)> {
    let mut run_options = RunOptions::new(root, Arc::new(NoEvents));
    run_options.session = session;
    run_options.model = options.model.clone();
    run_options.sessions_dir = out.to_path_buf();
    run_options.loop_options.max_steps = options.max_steps;
    let _engine = super::engines::CALLS.acquire().await;
    start(run_options).await.map_err(|e| {
        let retryable = e.kind() == runner_agent::start::StartKind::Sandbox;
        (format!("cannot start the agent: {e}"), retryable)
    })
}

/// Ends the agent's run: its usage and end into the result, its sandbox gone, its session
/// file kept as `session.jsonl` (its audit trail is `audit.ndjson` beside it, written
/// there from the start: see `agent::audit::trail_of`).
async fn keep_the_agents_record(
    run: runner_agent::start::Run,
    end: &End,
    out: &Path,
    result: &mut TaskResult,
) {
    run.finish(end);
    result.usage = run.agent.usage;
    result.cost_usd = run.rt.model.price.map(|p| p.cost(&run.agent.usage));
    result.steps = run.agent.steps;
    result.end = Some(end.reason().to_string());
    let session_file = run.session_file().to_path_buf();
    drop_blocking(run).await;
    let _ = std::fs::rename(&session_file, out.join("session.jsonl"));
}

/// A fresh workspace for the attempt, filled with the task's repository at its base
/// commit (off the async threads: a clone can take a while): the workspace and the base.
async fn prepare_worktree(
    task: &Task,
    attempt: u32,
    options: &EvalOptions,
) -> Result<(Workspace, String), EvalError> {
    let (repo, commit, parent) = (
        task.repo.clone(),
        task.commit.clone(),
        options.out.join(".work"),
    );
    let name = format!("{}-{attempt}", task.id);
    let budget = disk_budget(options);
    tokio::task::spawn_blocking(move || {
        worktree::create(&repo, commit.as_deref(), &parent, &name, Some(budget))
    })
    .await
    .map_err(|source| EvalError::Join {
        what: "filling the worktree",
        source,
    })?
}

/// The task's setup command in the agent's sandbox, its log kept as `setup.log`. `Err`:
/// the attempt ends here (`None` when it was interrupted). Setup is the task's, not the
/// agent's: however it fails, it is no verdict.
async fn run_setup(
    setup: &str,
    run: &runner_agent::start::Run,
    limit: Duration,
    out: &Path,
    result: &mut TaskResult,
    stop: &CancellationToken,
) -> Result<(), Option<Verdict>> {
    let setup_started = Instant::now();
    let ran = exec(run.open.sandbox(), setup, limit, LOG_LIMIT, stop).await;
    result.timings.setup_ms = setup_started.elapsed().as_millis() as u64;
    let log = ran.map_err(|e| infra(result.clone(), "setup", e, true))?;
    let _ = write_file(&out.join("setup.log"), &log.output);
    if log.interrupted {
        return Err(None);
    }
    if !log.timed_out && log.code == Some(0) {
        return Ok(());
    }
    let error = match log.code {
        _ if log.timed_out => format!("setup ran past {} s", limit.as_secs()),
        Some(c) => format!("setup exited with {c} (see setup.log)"),
        None => "setup was killed by a signal (see setup.log)".into(),
    };
    Err(infra(result.clone(), "setup", error, false))
}

/// The hidden tests in place, then the verify command.
async fn judge(
    task: &Task,
    verifier: &OpenSession,
    timeout: Duration,
    stop: &CancellationToken,
) -> Verified {
    let sandbox = verifier.sandbox();
    if let Some(dir) = &task.tests_dir {
        // Whatever the agent left at the tests' paths (a symlink out, a directory in the
        // way) goes first, so the hidden files land as themselves.
        let names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| runner_tool::stdio::shell_quote(&e.file_name().to_string_lossy()))
                    .collect()
            })
            .unwrap_or_default();
        if !names.is_empty() {
            let clear = format!("rm -rf -- {}", names.join(" "));
            match exec(sandbox, &clear, timeout, LOG_LIMIT, stop).await {
                Ok(r) if r.interrupted => return Verified::Interrupted,
                Ok(_) => {}
                Err(e) => return Verified::Failed(e),
            }
        }
        if let Err(e) = put_tests(sandbox, dir).await {
            return Verified::Failed(e);
        }
    }
    match exec(sandbox, &task.verify, timeout, LOG_LIMIT, stop).await {
        Ok(v) if v.interrupted => Verified::Interrupted,
        Ok(v) => Verified::Ran {
            log: v.output,
            exit: v.code.map(i64::from),
            timed_out: v.timed_out,
            score: Score::Exit(v.code),
        },
        Err(e) => Verified::Failed(e),
    }
}

/// A workspace removed off the async threads when the attempt is done with it (a large
/// tree takes a while), before the evaluation ends.
pub(super) struct Removing(pub(super) Option<Workspace>);

impl Removing {
    /// The workspace, there until the guard is dropped.
    #[expect(
        clippy::expect_used,
        reason = "only Drop takes the workspace out; the Option is for that take"
    )]
    pub(super) fn workspace(&self) -> &Workspace {
        self.0
            .as_ref()
            .expect("the workspace is there until the guard is dropped")
    }
}

impl Drop for Removing {
    fn drop(&mut self) {
        if let Some(ws) = self.0.take() {
            super::engines::CLOSING.spawn(async move {
                let _ = tokio::task::spawn_blocking(move || ws.discard()).await;
            });
        }
    }
}

pub(super) fn session_options_for(
    image: Option<String>,
    options: &EvalOptions,
    root: &Path,
) -> SessionOptions {
    let mut s = SessionOptions::new(root);
    // The worktree is already private (the attempt's workspace, or the task's container):
    // the session works in it and makes no copy of its own, whatever the profile says.
    // A copy would leave the attempt's diff and verifier looking at the untouched files.
    s.workspace = Some(runner_workspace::Mode::Direct);
    s.private_worktree = true;
    s.profile = Some(options.profile.clone());
    s.backend = options.backend;
    s.image = image.or(options.image.clone());
    s.runtime = options.runtime.clone();
    s.config = options.config.clone();
    // Nobody watches an evaluation: what a rule would ask is refused.
    s.ask = Some(runner_agent::config::profile::AskMode::Deny);
    s.server_exe = options.server_exe.clone();
    s
}

/// What an attempt's commands may write beyond its clone: the profile's `disk`, else the
/// default. A profile that does not load fails the attempt later, with its own message.
fn disk_budget(options: &EvalOptions) -> u64 {
    runner_agent::config::profile::load(&options.profile)
        .ok()
        .and_then(|p| p.sandbox.disk)
        .map_or(runner_sandbox::spec::DEFAULT_DISK_BUDGET, |size| size.0)
}

fn session_options(task: &Task, options: &EvalOptions, root: &Path) -> SessionOptions {
    session_options_for(task.image.clone(), options, root)
}

/// A session being opened in the background. Dropped unused, it is closed once open:
/// a start cut short could leave a container nobody owns.
struct Prewarmed(Option<tokio::task::JoinHandle<Result<OpenSession, OpenError>>>);

impl Prewarmed {
    fn open(session: SessionOptions) -> Prewarmed {
        Prewarmed(Some(tokio::spawn(async move {
            let _engine = super::engines::CALLS.acquire().await;
            session.open(Conversation::new("verify")).await
        })))
    }

    #[expect(
        clippy::expect_used,
        reason = "the handle leaves only here, which consumes the guard, or in Drop"
    )]
    async fn take(mut self) -> Result<OpenSession, EvalError> {
        let handle = self.0.take().expect("a prewarmed session is taken once");
        match handle.await {
            Ok(Ok(open)) => Ok(open),
            Ok(Err(e)) => Err(e.into()),
            Err(source) => Err(EvalError::Join {
                what: "the sandbox start",
                source,
            }),
        }
    }
}

impl Drop for Prewarmed {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            super::engines::CLOSING.spawn(async move {
                if let Ok(Ok(open)) = handle.await {
                    drop_blocking(open).await;
                }
            });
        }
    }
}

pub(super) async fn drop_blocking<T: Send + 'static>(value: T) {
    let _engine = super::engines::CALLS.acquire().await;
    let _ = tokio::task::spawn_blocking(move || drop(value)).await;
}

pub(super) struct Ran {
    pub output: Vec<u8>,
    pub code: Option<i32>,
    pub timed_out: bool,
    pub interrupted: bool,
}

/// A command in the sandbox's worktree, to its end; stdout and stderr interleaved.
pub(super) async fn exec(
    sandbox: &Sandbox,
    command: &str,
    timeout: Duration,
    limit: u64,
    stop: &CancellationToken,
) -> Result<Ran, EvalError> {
    let mut execution = sandbox
        .client
        .exec(ExecRequest {
            command: command.to_string(),
            cwd: sandbox.worktree.clone(),
            env: sandbox.env.clone(),
            timeout_ms: timeout.as_millis() as u64,
            stdin: None,
            output_limit: limit,
            interactive: false,
        })
        .await
        .map_err(|source| EvalError::InSandbox {
            what: "the sandbox refused the command".into(),
            source,
        })?;
    let mut output = Vec::new();
    // The server enforces the timeout; this deadline holds even if the server cannot (the
    // command stopped it, or it hangs).
    let deadline = tokio::time::sleep(timeout + WIND_DOWN);
    tokio::pin!(deadline);
    loop {
        let event = tokio::select! {
            e = execution.next() => e,
            _ = &mut deadline => {
                let _ = execution.cancel().await;
                return Ok(Ran { output, code: None, timed_out: true, interrupted: false });
            }
            _ = stop.cancelled() => {
                let _ = execution.cancel().await;
                return Ok(Ran { output, code: None, timed_out: false, interrupted: true });
            }
        };
        let event = event.map_err(|source| EvalError::InSandbox {
            what: "the sandbox failed during the command".into(),
            source,
        })?;
        match event {
            ExecEvent::Output(o) => output.extend_from_slice(&o.data),
            ExecEvent::Exit(s) => {
                return Ok(Ran {
                    output,
                    code: s.code,
                    timed_out: s.timed_out,
                    interrupted: false,
                });
            }
        }
    }
}

/// Copies the hidden tests over the worktree, through the sandbox. Read beneath `dir`: a
/// link in it that stays inside is copied as what it leads to, one that leaves it fails
/// the attempt, named.
async fn put_tests(sandbox: &Sandbox, dir: &Path) -> Result<(), EvalError> {
    use std::io::Read;
    let folder = super::folder::Folder::open(dir).map_err(super::images::task_error)?;
    for entry in super::images::files_under(&folder, Path::new(""))? {
        let rel = entry.rel.clone();
        let path = dir.join(&rel);
        let mut data = Vec::new();
        folder
            .open_through(&rel)
            .map_err(super::images::task_error)?
            .read_to_end(&mut data)
            .map_err(EvalError::io("read", &path))?;
        sandbox
            .client
            .write(&sandbox.worktree.join(&rel), data, None)
            .await
            .map_err(|source| EvalError::InSandbox {
                what: format!("cannot put {} in place", rel.display()),
                source,
            })?;
    }
    Ok(())
}
