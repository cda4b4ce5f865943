//! One attempt at a Harbor task: its image built (or found), a container from it whose
//! `WORKDIR` is the worktree, the agent (or the task's own solution) working in it, then
//! the verifier in the same file system once every process of the agent's is dead.
//!
//! The order is what makes the verdict trustworthy:
//! 1. the container is created and a snapshot of the worktree taken before anything runs;
//! 2. the agent works through runner's server in the container (`/tests` is not there);
//! 3. the container is killed: the PID namespace goes, and every process the agent left
//!    behind with it, while its files stay;
//! 4. the second snapshot gives `diff.patch`;
//! 5. the container starts again with only runner's server in it; whatever the agent left
//!    at `/tests` or `/logs/verifier` is moved aside, the hidden tests are copied in, and
//!    `bash /tests/test.sh` runs as `[verifier] user` through the engine;
//! 6. the reward is read from `/logs/verifier`, and the container removed.
//!
//! What this does not stop, as in Harbor itself: the verifier runs in the file system the
//! agent left, so an agent with the rights to do so can change the programs `test.sh`
//! uses. The tests are hidden, no process of the agent's survives into the verdict, and
//! neither a planted reward nor planted tests count.
//!
//! The attempt is split along its phases, one file each, so that each can be read (and
//! reviewed for what it lets the agent do) on its own:
//! - [`mod@stages`]: what each turn is (a task of one step is one stage, a multi-step task's
//!   steps are stages in order, in one container) and how the turns' verdicts make one;
//! - [`image`]: the task's image, the attempt's workspace over it, and the container
//!   made from them (steps 1 and 6);
//! - [`agent`]: runner's loop, or the task's own solution, in the container, and every
//!   process it left ended before anything else happens (steps 2 and 3);
//! - [`network`]: what each phase may reach, through a proxy whose rules that phase alone
//!   decides, and the connections each phase made;
//! - [`mod@verify`]: the hidden tests put in place, `test.sh` run, its rewards read (step 5);
//! - [`inline`]: files put in (and rewards read back) by commands running in the container
//!   anyway, where the engine would otherwise copy them.
//!
//! This file runs them in order ([`run`], each turn in [`take_turn`]) and holds what every
//! phase uses: the place a turn works in and the bound on every engine call. The arrows go
//! one way: this file uses the phases; agent and verify use the stages and the network;
//! stages use the network; the network uses none of them.

mod agent;
mod image;
mod inline;
mod network;
mod stages;
mod verify;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use runner_sandbox::docker::in_image::TaskContainer;
use runner_workspace::{Workspace, write_file};
use tokio_util::sync::CancellationToken;

use crate::engines::Engine;
use crate::harbor::HarborTask;
use crate::results::{Status, TaskResult};
use crate::verdict::{self, Verdict, Verified, fresh_dir, infra, judge_end};
use crate::{EvalError, EvalOptions};
use agent::{AgentRan, close, note_agent_network, run_agent};
pub use image::image_ahead;
use image::prepare;
use network::record_connections;
use stages::{Stage, Turns};
use verify::{TestsIn, Verifying, verify};

/// How long one engine operation (a start, a copy in or out) may take before the engine
/// counts as not answering.
const ENGINE_TIMEOUT: Duration = Duration::from_secs(300);

/// One attempt, made ready and run at once (no pool: a retry, or a caller of its own).
pub async fn run(
    task: &HarborTask,
    attempt: u32,
    out: &Path,
    options: &EvalOptions,
    engine: &Engine,
    stop: &CancellationToken,
) -> Option<Verdict> {
    match ready(task, attempt, out, options, engine, stop).await {
        Ok(ready) => run_ready(ready, task, out, options, engine, stop).await,
        Err(ended) => ended,
    }
}

/// An attempt made ready ahead of its turn, for the scheduler's warm pool: its folder
/// fresh, its stages read, its image built, its workspace and container made and the
/// worktree's base taken; with `--agent oracle` also the first solution copied in and the
/// container started with runner's server in it. It belongs to this one attempt: nothing
/// ran in the container yet but the server, and it is never handed to another attempt.
/// Dropped unused (a stop, an error), its server is closed and its container removed, off
/// the async threads.
pub struct Ready<'a> {
    /// How long making it ready took (the wait for a turn is not the attempt's time).
    warmed: Duration,
    result: TaskResult,
    stages: Vec<Stage<'a>>,
    prepared: image::Prepared,
    /// The oracle's server, started for the first stage.
    served: agent::Served,
}

/// Makes the attempt ready ([`Ready`]). `Err`: it ended there (`None`: it was stopped).
pub async fn ready<'a>(
    task: &'a HarborTask,
    attempt: u32,
    out: &Path,
    options: &EvalOptions,
    engine: &Engine,
    stop: &CancellationToken,
) -> Result<Ready<'a>, Option<Verdict>> {
    let started = Instant::now();
    let mut result = TaskResult::new(&task.id, attempt, options.model_label());
    result.set_instruction(&instruction_text(task));
    if let Err(e) = fresh_dir(out) {
        return Err(infra(result, "prepare", e, false));
    }
    // Read from the task folder now: a folder that cannot be read is the task's failure,
    // found before anything runs.
    let stages = match stages::stages(task, options) {
        Ok(s) => s,
        Err(e) => return Err(infra(result, "prepare", e, false)),
    };
    let prepared = prepare(task, attempt, out, options, engine, &mut result, stop).await?;
    // The oracle's first solution copied in and its server started now; a failure is the
    // agent phase's, as it would have been there.
    let served = match (options.agent, stages.first()) {
        (crate::AgentKind::Oracle, Some(stage)) => {
            agent::Served::start(stage, prepared.owner.container(), engine).await
        }
        _ => agent::Served::default(),
    };
    Ok(Ready {
        warmed: started.elapsed(),
        result,
        stages,
        prepared,
        served,
    })
}

/// The attempt made ready: each turn, its artifacts, its verdict.
pub async fn run_ready(
    ready: Ready<'_>,
    task: &HarborTask,
    out: &Path,
    options: &EvalOptions,
    engine: &Engine,
    stop: &CancellationToken,
) -> Option<Verdict> {
    let started = Instant::now();
    let Ready {
        warmed,
        mut result,
        stages,
        prepared,
        mut served,
    } = ready;
    let spent = |result: &mut TaskResult| {
        result.timings.total_ms = (warmed + started.elapsed()).as_millis() as u64;
    };
    let ws = prepared.removing.workspace();
    let container = prepared.owner.container();
    let place = Place {
        container,
        engine,
        scratch: &prepared.scratch,
        outputs: &prepared.outputs,
        out,
    };
    let mut turns = Turns::default();
    for (i, stage) in stages.iter().enumerate() {
        let first = std::mem::take(&mut served);
        let went = take_turn(stage, &place, ws, options, &mut result, first, stop).await;
        match went {
            Turn::Stopped(verdict) => return *verdict,
            Turn::Decided => {
                let verdict = verdict::decided_by_the_agent(&mut result, started).flatten();
                return verdict.map(|mut v| {
                    spent(&mut v.result);
                    v
                });
            }
            Turn::Judged(verified) => {
                if !turns.add(stage, verified) {
                    // The steps not run count against the roll-up.
                    turns.skipped = stages[i + 1..].iter().filter(|s| s.contributes).count();
                    break;
                }
            }
        }
    }
    if !task.artifacts.is_empty() {
        collect_artifacts(container, &task.artifacts, out).await;
    }
    spent(&mut result);
    drop(prepared.owner);
    let (verified, limit) = turns.verdict(task.reward_strategy, &mut result);
    verdict::conclude(result, verified, out, limit, Some(engine)).await
}

/// How a turn went.
enum Turn {
    /// The attempt ends here with this verdict (`None`: interrupted).
    Stopped(Box<Option<Verdict>>),
    /// The agent's end decided the attempt (a timeout, its own error).
    Decided,
    /// The verifier judged the turn.
    Judged(Verified),
}

/// One turn: the agent (or the solution), its end judged, its diff recorded, then the
/// verifier in what it left.
async fn take_turn(
    stage: &Stage<'_>,
    place: &Place<'_>,
    ws: &Workspace,
    options: &EvalOptions,
    result: &mut TaskResult,
    served: agent::Served,
    stop: &CancellationToken,
) -> Turn {
    let out = match stage.name {
        Some(name) => place.out.join("steps").join(name),
        None => place.out.to_path_buf(),
    };
    let _ = std::fs::create_dir_all(&out);
    let agent_started = Instant::now();
    let here = Place {
        out: &out,
        ..*place
    };
    // `live`: the oracle's server, kept running for the verifier when nothing else is.
    let (ran, live) = run_agent(stage, here, options, result, served, stop).await;
    result.timings.agent_ms += agent_started.elapsed().as_millis() as u64;
    note_agent_network(stage, result, &out);
    let (end, timed_out) = match ran {
        AgentRan::Interrupted => return Turn::Stopped(Box::new(None)),
        AgentRan::CouldNotStart(e, retryable) => {
            let ended = verdict::failed(result.clone(), "agent", e, Some(place.engine), retryable);
            return Turn::Stopped(Box::new(ended));
        }
        AgentRan::Ended(end, timed_out) => (end, timed_out),
    };
    if stop.is_cancelled() && !timed_out {
        close(live).await;
        return Turn::Stopped(Box::new(None));
    }
    result.end = end.as_ref().map(|e| e.reason().to_string());
    let engine = Some(place.engine);
    if let Err(infra) = judge_end(result, end.as_ref(), timed_out, stage.agent_limit, engine).await
    {
        close(live).await;
        return Turn::Stopped(Box::new(infra));
    }
    // The diff, from a container where nothing of the agent's runs: everything since the
    // attempt began. The hidden tests go in at the same time, under their hidden name
    // (outside the worktree), where nobody is left to see them before the verifier; or,
    // where they fit in a command, with the verifier's first command.
    let verify_started = Instant::now();
    let container = place.container;
    let tests = match verify::tests_inline(stage) {
        Some(lines) => TestsIn::Written(lines),
        None => TestsIn::Copied(Ok(())),
    };
    let (patch, tests) = tokio::join!(ws.image_patch(container), async {
        match tests {
            TestsIn::Copied(_) => TestsIn::Copied(
                engine_call(container.upload(Path::new("/"), stage.tests.clone())).await,
            ),
            written => written,
        }
    });
    verdict::record_patch(result, place.out, patch.map_err(EvalError::from));
    if matches!(result.status, Status::Timeout | Status::AgentError) {
        close(live).await;
        return Turn::Decided;
    }
    let mut connections = Vec::new();
    let net = &stage.verifier_net;
    let way_out = net.proxied().then(|| net.rules(&stage.net_extra));
    let verified = verify(
        stage,
        Verifying {
            container,
            live,
            tests,
        },
        way_out.as_deref(),
        &mut connections,
        stop,
    )
    .await;
    record_connections(result, &out, &connections);
    result
        .network
        .push(net.noted("verifier", stage.name, &connections));
    result.timings.verify_ms += verify_started.elapsed().as_millis() as u64;
    Turn::Judged(verified)
}

/// Where the agent's run happens and leaves its files.
#[derive(Clone, Copy)]
pub(super) struct Place<'a> {
    pub(super) container: &'a Arc<TaskContainer>,
    pub(super) engine: &'a Engine,
    /// Where config files are looked for on the host (an empty folder).
    pub(super) scratch: &'a Path,
    /// Where full tool outputs are saved, readable in the container.
    pub(super) outputs: &'a Path,
    /// The attempt's result folder.
    pub(super) out: &'a Path,
}

/// An engine operation, bounded: an engine that stops answering mid-call must not hold
/// the attempt forever.
pub(super) async fn engine_call<T, E: Into<EvalError>>(
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, EvalError> {
    match tokio::time::timeout(ENGINE_TIMEOUT, call).await {
        Ok(done) => done.map_err(Into::into),
        Err(_) => Err(EvalError::EngineTimeout(ENGINE_TIMEOUT.as_secs())),
    }
}

pub(super) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `artifacts`: each path copied out of the container into the attempt's `artifacts/`,
/// as the tar the engine gives (a path that is not there is noted, not an error).
async fn collect_artifacts(container: &TaskContainer, paths: &[String], out: &Path) {
    let dir = out.join("artifacts");
    let _ = std::fs::create_dir_all(&dir);
    let mut missing = String::new();
    for path in paths {
        let name = crate::fields::sanitize(path.trim_start_matches('/'));
        match engine_call(container.download(Path::new(path), 64 << 20)).await {
            Ok(Some(tar)) => {
                let _ = write_file(&dir.join(format!("{name}.tar")), &tar);
            }
            Ok(None) => missing.push_str(&format!("{path}: not in the container\n")),
            Err(e) => missing.push_str(&format!("{path}: {e}\n")),
        }
    }
    if !missing.is_empty() {
        let _ = write_file(&dir.join("missing.txt"), missing.as_bytes());
    }
}

/// What the agent is asked, as the report shows it: the task's instruction, or a
/// multi-step task's steps' under their names.
fn instruction_text(task: &HarborTask) -> String {
    if task.steps.is_empty() {
        return task.instruction.clone();
    }
    let steps: Vec<String> = task
        .steps
        .iter()
        .map(|s| format!("## {}\n\n{}", s.name, s.instruction))
        .collect();
    steps.join("\n\n")
}
