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

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::attempt::{self, LOG_LIMIT, drop_blocking};
use super::engines::Engine;
use super::harbor::{self, HarborTask};
use super::images;
use super::results::{Status, TaskResult};
use super::verdict::{self, Score, Verdict, Verified, fresh_dir, infra, judge_end};
use super::verifier_network::{PhaseGate, PhasePlan};
use super::{EvalError, EvalOptions};
use runner_agent::End;
use runner_agent::events::NoEvents;
use runner_agent::start::{RunOptions, start};
use runner_sandbox::Sandbox;
use runner_sandbox::docker::in_image::{ExecOutput, TaskContainer, TaskImage};
use runner_sandbox::spec::{Limits, Network};
use runner_workspace::{Workspace, write_file};

/// How long one engine operation (a start, a copy in or out) may take before the engine
/// counts as not answering.
const ENGINE_TIMEOUT: Duration = Duration::from_secs(300);
/// Harbor's default limits for the phases a task does not set.
const BUILD_TIMEOUT: Duration = Duration::from_secs(600);

pub async fn run(
    task: &HarborTask,
    attempt: u32,
    out: &Path,
    options: &EvalOptions,
    engine: &Engine,
    stop: &CancellationToken,
) -> Option<Verdict> {
    let started = Instant::now();
    let mut result = TaskResult::new(&task.id, attempt, options.model_label());
    result.set_instruction(&instruction_text(task));
    if let Err(e) = fresh_dir(out) {
        return infra(result, "prepare", e, false);
    }
    // Read from the task folder now: a folder that cannot be read is the task's failure,
    // found before anything runs.
    let stages = match stages(task, options) {
        Ok(s) => s,
        Err(e) => return infra(result, "prepare", e, false),
    };

    let prepared = match prepare(task, attempt, out, options, engine, &mut result, stop).await {
        Ok(p) => p,
        Err(ended) => return ended,
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
        let went = take_turn(stage, &place, ws, options, &mut result, stop).await;
        match went {
            Turn::Stopped(verdict) => return *verdict,
            Turn::Decided => return verdict::decided_by_the_agent(&mut result, started).flatten(),
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
    result.timings.total_ms = started.elapsed().as_millis() as u64;
    drop(prepared.owner);
    let (verified, limit) = turns.verdict(task.reward_strategy, &mut result);
    verdict::conclude(result, verified, out, limit, Some(engine)).await
}

/// What an attempt works in: its workspace (removed when the attempt is done) and its task
/// container (removed off the async threads).
struct Prepared {
    removing: attempt::Removing,
    owner: Owned,
    /// Where config files are looked for on the host (an empty folder).
    scratch: std::path::PathBuf,
    /// Where full tool outputs are saved, readable in the container.
    outputs: std::path::PathBuf,
}

/// The task's image, the attempt's workspace over it and its container, with the base the
/// diff is taken against. `Err`: the attempt ends here (`None` when it was stopped).
async fn prepare(
    task: &HarborTask,
    attempt: u32,
    out: &Path,
    options: &EvalOptions,
    engine: &Engine,
    result: &mut TaskResult,
    stop: &CancellationToken,
) -> Result<Prepared, Option<Verdict>> {
    // The image. A stop during a build ends it: the engine cancels a build whose client
    // went away.
    let setup_limit = task
        .environment
        .build_timeout
        .unwrap_or(BUILD_TIMEOUT)
        .mul_f64(options.timeout_multiplier);
    let image = build_image(task, engine, setup_limit, out, result, stop).await?;
    // The attempt's workspace: the worktree is the image's; on the host, the session's
    // root (where config files are looked for: none, the task's files are in the image)
    // and the folder where full tool outputs are saved.
    let name = format!("{}-{attempt}", task.id);
    let ws = Workspace::for_image(&options.out.join(".work"), &name, &image)
        .map_err(|e| infra(result.clone(), "prepare", e, false))?;
    let (scratch, outputs) = (ws.work(), ws.outputs());
    let removing = attempt::Removing(Some(ws));
    let spec = task_image(task, image, options, engine, &outputs)
        .map_err(|e| infra(result.clone(), "prepare", e, false))?;
    // The one long-lived handle is the owner's, so that the container is removed where it
    // says (off the async threads), not wherever the last clone happens to go.
    let owner = create_container(engine, &spec)
        .await
        .map_err(|(e, retryable)| {
            verdict::failed(result.clone(), "prepare", e, Some(engine), retryable)
        })?;
    let container = owner.container();
    // The base only serves the diff: without one the attempt still runs.
    let ws = removing.workspace();
    ws.take_base(container).await;
    Ok(Prepared {
        removing,
        owner,
        scratch,
        outputs,
    })
}

/// One turn of an attempt: what the agent is told (or the solution it runs), how long it
/// has, and the tests that judge it. A task of one step is one stage; a multi-step task's
/// steps are stages in order, in one container.
struct Stage<'a> {
    /// The step's name; `None` for a task of one step.
    name: Option<&'a str>,
    instruction: &'a str,
    /// Relative to `folder`.
    solution: Option<&'a Path>,
    solution_env: &'a std::collections::BTreeMap<String, String>,
    /// The task's folder, which the solution is read from.
    folder: &'a super::folder::Folder,
    /// Where `--agent oracle`'s complaint about a missing solution points.
    dir: std::path::PathBuf,
    /// The task's tests, the step's laid over them, as a tar of one folder named
    /// `tests_name`: copied to `/` once the agent's processes are dead and moved to
    /// `/tests` by the verifier's first command (see [`PREPARE`]).
    tests: Vec<u8>,
    /// A name nobody can guess ([`hidden_name`]): what the agent planted cannot be
    /// where the tests land.
    tests_name: String,
    verifier: &'a harbor::VerifierSection,
    /// What the agent's phase may reach (see [`super::verifier_network`]).
    agent_net: PhasePlan,
    /// What the verifier's phase may reach.
    verifier_net: PhasePlan,
    /// The `network` rules of `--config`, laid over each phase's own.
    net_extra: Vec<runner_permission::rules::Rule>,
    /// The agent's connections through its proxy, kept as its phase ends.
    agent_connections: std::sync::Mutex<Vec<runner_network::ConnectionRecord>>,
    /// The oracle's proxy once its phase is over, for the verifier if the oracle's server
    /// is kept for it (the server listens for the proxy only once).
    handed_over: std::sync::Mutex<Option<HandedOver>>,
    agent_limit: Duration,
    verify_limit: Duration,
    min_reward: Option<f64>,
    contributes: bool,
}

/// The stages of `task`, their tests packed and their limits scaled.
fn stages<'a>(task: &'a HarborTask, options: &EvalOptions) -> Result<Vec<Stage<'a>>, EvalError> {
    let extra = user_network_rules(options)?;
    let scale = |d: Duration| d.mul_f64(options.timeout_multiplier);
    let agent =
        |t: Option<Duration>| scale(t.or(task.agent.timeout).unwrap_or(options.timeouts.agent));
    let verify = |t: Option<Duration>| {
        scale(
            t.or(task.verifier.timeout)
                .unwrap_or(options.timeouts.verify),
        )
    };
    if task.steps.is_empty() {
        let hidden = hidden_name()?;
        return Ok(vec![Stage {
            name: None,
            instruction: &task.instruction,
            solution: task.solution.as_deref(),
            solution_env: &task.solution_env,
            folder: &task.folder,
            dir: task.dir.clone(),
            tests: pack_layers(&task.folder, &[&task.tests], &hidden)?,
            tests_name: hidden,
            verifier: &task.verifier,
            agent_net: agent_plan(task, None, options),
            verifier_net: verifier_plan(task, None, options),
            net_extra: extra.clone(),
            agent_connections: Default::default(),
            handed_over: Default::default(),
            agent_limit: agent(None),
            verify_limit: verify(None),
            min_reward: None,
            contributes: true,
        }]);
    }
    task.steps
        .iter()
        .map(|step| {
            let mut layers: Vec<&Path> = vec![&task.tests];
            layers.extend(step.tests.as_deref());
            let hidden = hidden_name()?;
            Ok(Stage {
                name: Some(&step.name),
                instruction: &step.instruction,
                solution: step.solution.as_deref(),
                solution_env: &task.solution_env,
                folder: &task.folder,
                dir: task.dir.join("steps").join(&step.name),
                tests: pack_layers(&task.folder, &layers, &hidden)?,
                tests_name: hidden,
                verifier: &step.verifier,
                agent_net: agent_plan(task, Some(step), options),
                verifier_net: verifier_plan(task, Some(step), options),
                net_extra: extra.clone(),
                agent_connections: Default::default(),
                handed_over: Default::default(),
                agent_limit: agent(step.agent.timeout),
                verify_limit: verify(step.verifier.timeout),
                min_reward: step.min_reward,
                contributes: step.contributes,
            })
        })
        .collect()
}

/// A folder name for the hidden tests on their way in: 128 random bits, drawn before the
/// agent starts and never in the container until every process of the agent's is dead.
fn hidden_name() -> Result<String, EvalError> {
    use std::io::Read;
    let urandom = Path::new("/dev/urandom");
    let mut bytes = [0u8; 16];
    std::fs::File::open(urandom)
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(EvalError::io("read", urandom))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(".runner-tests-{hex}"))
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
    let (ran, live) = run_agent(stage, here, options, result, stop).await;
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
    // (outside the worktree), where nobody is left to see them before the verifier.
    let verify_started = Instant::now();
    let container = place.container;
    let (patch, uploaded) = tokio::join!(
        ws.image_patch(container),
        engine_call(container.upload(Path::new("/"), stage.tests.clone())),
    );
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
            uploaded,
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

/// The verifier's judgements of an attempt's turns, and how they make one.
#[derive(Default)]
struct Turns {
    /// Each step run: its name and rewards (empty when its verifier left none).
    steps: Vec<(String, std::collections::BTreeMap<String, f64>, bool)>,
    /// Steps not run (the trial stopped early) that would have counted.
    skipped: usize,
    /// The verdict as it stands: the last turn's, or the first that could not be read.
    last: Option<(Verified, Duration)>,
    logs: Vec<u8>,
    multi: bool,
}

impl Turns {
    /// Takes a turn's judgement; false when the attempt stops here (a verifier that could
    /// not run, or a step below its `min_reward`).
    fn add(&mut self, stage: &Stage<'_>, verified: Verified) -> bool {
        let limit = stage.verify_limit;
        let Some(name) = stage.name else {
            self.last = Some((verified, limit));
            return false;
        };
        self.multi = true;
        let Verified::Ran {
            log,
            exit,
            timed_out,
            score,
        } = verified
        else {
            self.last = Some((verified, limit));
            return false;
        };
        self.logs
            .extend_from_slice(format!("=== step {name}\n").as_bytes());
        self.logs.extend_from_slice(&log);
        let rewards = match &score {
            Score::Rewards(Ok(w)) => w.rewards.clone(),
            _ => Default::default(),
        };
        let below = stage
            .min_reward
            .is_some_and(|min| rewards.is_empty() || rewards.values().any(|r| *r < min));
        self.steps
            .push((name.to_string(), rewards, stage.contributes));
        self.last = Some((
            Verified::Ran {
                log: Vec::new(),
                exit,
                timed_out,
                score,
            },
            limit,
        ));
        !below && !timed_out
    }

    /// The attempt's verification: a task of one step's as it was; a multi-step task's
    /// rewards rolled up by `strategy`, each step's kept in the result.
    fn verdict(
        self,
        strategy: harbor::RewardStrategy,
        result: &mut TaskResult,
    ) -> (Verified, Duration) {
        let (last, limit) = self.last.unwrap_or((
            Verified::Failed(EvalError::Task("no step ran".into())),
            Duration::ZERO,
        ));
        if !self.multi {
            return (last, limit);
        }
        result.step_rewards = self
            .steps
            .iter()
            .map(|(name, rewards, _)| (name.clone(), rewards.clone()))
            .collect();
        let Verified::Ran {
            exit, timed_out, ..
        } = last
        else {
            return (last, limit);
        };
        let counted: Vec<&std::collections::BTreeMap<String, f64>> = self
            .steps
            .iter()
            .filter(|(_, _, contributes)| *contributes)
            .map(|(_, r, _)| r)
            .collect();
        let rolled = roll_up(strategy, &counted, self.skipped);
        let score = match rolled {
            Some(rewards) => Score::Rewards(Ok(harbor::Written {
                rewards,
                file: None,
            })),
            None => Score::Rewards(Err(EvalError::Reward(harbor::BadReward::Missing))),
        };
        (
            Verified::Ran {
                log: self.logs,
                exit,
                timed_out,
                score,
            },
            limit,
        )
    }
}

/// Harbor's roll-up of step rewards: each key's mean over the contributing steps (a key a
/// step lacks, and a step the trial stopped before, count 0), or the last step's.
fn roll_up(
    strategy: harbor::RewardStrategy,
    steps: &[&std::collections::BTreeMap<String, f64>],
    skipped: usize,
) -> Option<std::collections::BTreeMap<String, f64>> {
    match strategy {
        harbor::RewardStrategy::Final if skipped > 0 => Some([("reward".to_string(), 0.0)].into()),
        harbor::RewardStrategy::Final => steps.last().map(|r| (*r).clone()),
        harbor::RewardStrategy::Mean => {
            let keys: std::collections::BTreeSet<&String> =
                steps.iter().flat_map(|r| r.keys()).collect();
            let n = (steps.len() + skipped) as f64;
            if keys.is_empty() {
                return (n > 0.0).then(|| [("reward".to_string(), 0.0)].into());
            }
            Some(
                keys.into_iter()
                    .map(|k| {
                        let sum: f64 = steps.iter().map(|r| r.get(k).copied().unwrap_or(0.0)).sum();
                        (k.clone(), sum / n)
                    })
                    .collect(),
            )
        }
    }
}

/// `artifacts`: each path copied out of the container into the attempt's `artifacts/`,
/// as the tar the engine gives (a path that is not there is noted, not an error).
async fn collect_artifacts(container: &TaskContainer, paths: &[String], out: &Path) {
    let dir = out.join("artifacts");
    let _ = std::fs::create_dir_all(&dir);
    let mut missing = String::new();
    for path in paths {
        let name = super::fields::sanitize(path.trim_start_matches('/'));
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

/// The agent (or, with `--agent oracle`, the task's own solution) in the task's container;
/// every process it left running is dead when this returns: killed in the running
/// container when only the server is left after (the server then comes back, for the
/// verifier), else with the container's stop.
async fn run_agent(
    stage: &Stage<'_>,
    place: Place<'_>,
    options: &EvalOptions,
    result: &mut TaskResult,
    stop: &CancellationToken,
) -> (AgentRan, Option<Sandbox>) {
    let container = place.container;
    let (ran, live) = match options.agent {
        super::AgentKind::Oracle => oracle(stage, container, place.engine, place.out, stop).await,
        super::AgentKind::Model => (model(stage, place, options, result, stop).await, None),
    };
    let live = match live {
        Some(sandbox) => quiesce(sandbox, container, stop).await,
        None => None,
    };
    if live.is_none() {
        container.stop().await;
    }
    (ran, live)
}

/// Run through the oracle's server as the agent's user: SIGKILL to every live process
/// but the container's init (1), the server (this shell's parent) and this shell, again
/// until none is left or a hundred rounds have passed. Zombies are dead already. (Not
/// `kill -1`: the server, the init's child, runs as the agent's user too.)
const KILL_THE_REST: &str = "keep=\" 1 $PPID $$ \"
n=0
while :; do
  left=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case \"$keep\" in *\" $p \"*) continue ;; esac
    if [ ! -r \"$d/status\" ]; then continue; fi
    s=
    while read -r k v rest; do
      if [ \"$k\" = State: ]; then s=$v; break; fi
    done 2>/dev/null < \"$d/status\"
    if [ -n \"$s\" ] && [ \"$s\" != Z ]; then left=\"$left $p\"; kill -9 \"$p\" 2>/dev/null; fi
  done
  if [ -z \"$left\" ]; then exit 0; fi
  n=$((n + 1))
  if [ $n -ge 100 ]; then echo \"still running:$left\"; exit 1; fi
done";

/// Ends every process the agent left without stopping the container, so that the verifier
/// needs no second start: [`KILL_THE_REST`] through the container's own server, then the
/// engine, which nothing in the container can fool, lists what runs there. The server and
/// its init alone: the server is given back, for the verifier's proxy. Anything more (a process of another
/// user, a fork that outran the kill, a server that died) and the sandbox is closed, which
/// stops the container as before: `None`, and the verifier starts it afresh.
async fn quiesce(
    sandbox: Sandbox,
    container: &TaskContainer,
    stop: &CancellationToken,
) -> Option<Sandbox> {
    let limit = Duration::from_secs(20);
    let killed = attempt::exec(&sandbox, KILL_THE_REST, limit, 4096, stop).await;
    let quiet = matches!(killed, Ok(ref r) if r.code == Some(0));
    if quiet && only_the_server(&sandbox, container).await {
        return Some(sandbox);
    }
    drop_blocking(sandbox).await;
    None
}

/// Whether the engine sees two live processes in the container: its init and the server,
/// its child (the server answered a moment ago, and a container whose init is gone has
/// stopped). Zombies are dead and not counted. An engine that cannot tell (a runtime
/// without `top`) counts as no.
async fn only_the_server(sandbox: &Sandbox, container: &TaskContainer) -> bool {
    let Some(id) = sandbox.container_id.as_deref() else {
        return false;
    };
    let options = bollard::query_parameters::TopOptions {
        ps_args: "-o pid,stat".into(),
    };
    let listed = tokio::time::timeout(
        Duration::from_secs(30),
        container.engine().top_processes(id, Some(options)),
    )
    .await;
    let Ok(Ok(top)) = listed else {
        return false;
    };
    let Some(stat) = top
        .titles
        .as_ref()
        .and_then(|t| t.iter().position(|t| t == "STAT"))
    else {
        return false;
    };
    let alive = top
        .processes
        .unwrap_or_default()
        .iter()
        .filter(|p| p.get(stat).is_some_and(|s| !s.starts_with('Z')))
        .count();
    alive == 2
}

/// Closes a kept server (which stops its container), off the async threads.
async fn close(live: Option<Sandbox>) {
    if let Some(sandbox) = live {
        drop_blocking(sandbox).await;
    }
}

/// The task's image: built from its `environment/Dockerfile`, or its prebuilt
/// `docker_image`, reused when the engine already has it; what happened is the attempt's
/// `build.log`. `Err`: the attempt ends here (`None` when it was stopped).
async fn build_image(
    task: &HarborTask,
    engine: &Engine,
    limit: Duration,
    out: &Path,
    result: &mut TaskResult,
    stop: &CancellationToken,
) -> Result<String, Option<Verdict>> {
    let build_started = Instant::now();
    let mut log = String::new();
    let built = async {
        match (&task.build_context, &task.environment.docker_image) {
            (Some(context), _) => {
                // The context is a folder of its own beneath the task's.
                let context = task.folder.sub(context).map_err(images::task_error)?;
                engine.builder.image_logged(&context, limit, &mut log).await
            }
            (None, Some(image)) => engine.builder.prebuilt(image, limit).await,
            (None, None) => Err(EvalError::Task(format!(
                "{} has neither environment/Dockerfile nor docker_image",
                task.dir.display()
            ))),
        }
    };
    let built = tokio::select! {
        b = built => b,
        _ = stop.cancelled() => return Err(None),
    };
    match &built {
        Ok(images::Built::Cached(image)) => {
            log = format!(
                "{image} was already on the engine (built or pulled before for the same files and bases); nothing was built\n"
            )
        }
        Ok(images::Built::Fresh(_)) => {}
        Err(e) => log.push_str(&format!("\n{e}\n")),
    }
    let _ = write_file(&out.join("build.log"), log.as_bytes());
    match built {
        Ok(built) => {
            if matches!(built, images::Built::Fresh(_)) {
                result.timings.build_ms = build_started.elapsed().as_millis() as u64;
            }
            Ok(built.image().to_string())
        }
        Err(e) => {
            // A step that failed fails again; an engine that went away may not.
            let retryable = !super::engines::alive(Some(engine)).await;
            Err(verdict::failed(
                result.clone(),
                "build",
                e,
                Some(engine),
                retryable,
            ))
        }
    }
}

/// The task's container, created (not started) and owned by the attempt. `Err`: why (its
/// kind kept: an engine that failed the call), and whether another try could go
/// differently (an engine that went away).
async fn create_container(engine: &Engine, spec: &TaskImage) -> Result<Owned, (EvalError, bool)> {
    let container = {
        let _engine = super::engines::CALLS.acquire().await;
        TaskContainer::create(&engine.described, spec).await
    };
    match container {
        Ok(c) => Ok(Owned(Some(Arc::new(c)))),
        Err(e) => Err((e.into(), !super::engines::alive(Some(engine)).await)),
    }
}

/// The container's recipe: the task's limits over the profile's; no network, or the
/// allow-list proxy where a phase may reach anything.
fn task_image(
    task: &HarborTask,
    image: String,
    options: &EvalOptions,
    engine: &Engine,
    outputs: &Path,
) -> Result<TaskImage, EvalError> {
    let profile = runner_agent::config::profile::load(&options.profile)?;
    let mut spec =
        runner_sandbox::spec::SandboxSpec::new(runner_sandbox::BackendKind::Docker, outputs)
            .map_err(EvalError::io(
                "find the runner executable at",
                Path::new("/proc/self/exe"),
            ))?;
    profile.sandbox.apply(&mut spec);
    if let Some(r) = &options.runtime {
        spec.docker.runtime = vec![r.clone()];
    }
    // The task's commands and its verifier trust what the host trusts.
    let (settings, _) =
        runner_agent::config::settings::Settings::load(outputs, options.config.as_deref())?;
    let e = &task.environment;
    let limits = Limits {
        memory_bytes: e.memory_bytes.unwrap_or(spec.limits.memory_bytes),
        cpus: e.cpus.unwrap_or(spec.limits.cpus),
        ..spec.limits
    };
    Ok(TaskImage {
        image,
        workdir: e.workdir.clone(),
        user: task.agent.user.clone(),
        env: e.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        limits,
        network: if proxied_phases(task, options).0 {
            Network::Allowlist
        } else {
            Network::None
        },
        read_only: vec![outputs.to_path_buf()],
        server_exe: options.server_exe.clone().unwrap_or(spec.server_exe),
        engine_is_local: engine.local,
        runtime: spec.docker.runtime,
        // In a container, the engine mounts from its own host: the bundle goes where the
        // out folder is, as the server does.
        ca_bundle: if runner_sandbox::spec::in_container() {
            settings.ca_bundle_in(&options.out.join(".server"))?
        } else {
            settings.ca_bundle()?
        },
        verifier_proxy: proxied_phases(task, options).1,
    })
}

enum AgentRan {
    /// How the agent's run ended (`None` for the oracle), and whether its time ran out.
    Ended(Option<End>, bool),
    CouldNotStart(EvalError, bool),
    Interrupted,
}

/// Where the agent's run happens and leaves its files.
#[derive(Clone, Copy)]
struct Place<'a> {
    container: &'a Arc<TaskContainer>,
    engine: &'a Engine,
    /// Where config files are looked for on the host (an empty folder).
    scratch: &'a Path,
    /// Where full tool outputs are saved, readable in the container.
    outputs: &'a Path,
    /// The attempt's result folder.
    out: &'a Path,
}

/// runner's own loop, in a sandbox over the task container.
async fn model(
    stage: &Stage<'_>,
    place: Place<'_>,
    options: &EvalOptions,
    result: &mut TaskResult,
    stop: &CancellationToken,
) -> AgentRan {
    let limit = stage.agent_limit;
    let Place {
        container,
        engine,
        scratch,
        outputs,
        out,
    } = place;
    let mut session = attempt::session_options_for(None, options, scratch);
    session.output_dir = Some(outputs.to_path_buf());
    session.in_image = Some(container.clone());
    session.docker_host = engine.host.clone();
    // Outside the worktree is still the task's container, not the host: the file tools
    // cannot leave their root there, and bash may work anywhere in it.
    session
        .session_rules
        .push(runner_permission::rules::Rule::new(
            "external_directory",
            "*",
            runner_permission::rules::Action::Allow,
            "harbor task container",
            1,
        ));
    // The phase's network, after every config layer: its mode's rules, then the user's
    // own `--config` rules again (they add hosts, as for the oracle). The proxy still
    // refuses the host's own services, private networks and cloud metadata. A no-network
    // phase in a container that has the proxy for another step's sake refuses everything.
    if container.network() == Network::Allowlist {
        let extra = if stage.agent_net.proxied() {
            &stage.net_extra[..]
        } else {
            &[]
        };
        session.session_rules.extend(stage.agent_net.rules(extra));
    }
    let mut run_options = RunOptions::new(scratch, Arc::new(NoEvents));
    run_options.session = session;
    run_options.model = options.model.clone();
    run_options.sessions_dir = out.to_path_buf();
    run_options.loop_options.max_steps = options.max_steps;
    let started = {
        let _engine = super::engines::CALLS.acquire().await;
        start(run_options).await
    };
    let mut run = match started {
        Ok(r) => r,
        Err(e) => {
            // A sandbox that cannot start on an engine that answers (a task user the image
            // lacks, say) will not start on a second try either.
            let retryable = e.kind() == runner_agent::start::StartKind::Sandbox
                && !super::engines::alive(Some(engine)).await;
            return AgentRan::CouldNotStart(
                EvalError::from(e).during("cannot start the agent"),
                retryable,
            );
        }
    };
    let (end, timed_out) = attempt::drive(&mut run, stage.instruction, limit, stop).await;
    run.finish(&end);
    // A multi-step task's turns add up.
    result.usage.add(&run.agent.usage);
    result.steps += run.agent.steps;
    if let Some(price) = run.rt.model.price {
        *result.cost_usd.get_or_insert(0.0) += price.cost(&run.agent.usage);
    }
    let session_file = run.session_file().to_path_buf();
    if let Some(proxy) = run.open.network.clone() {
        keep_agent_connections(stage, &proxy).await;
    }
    drop_blocking(run).await;
    let _ = std::fs::rename(&session_file, out.join("session.jsonl"));
    AgentRan::Ended(Some(end), timed_out)
}

/// The task's `solution/solve.sh`, copied to `/solution` and run as the agent would be.
/// With the server still running once the solution ended in its time (`Some`), for
/// [`quiesce`] to try to keep.
async fn oracle(
    stage: &Stage<'_>,
    container: &TaskContainer,
    engine: &Engine,
    out: &Path,
    stop: &CancellationToken,
) -> (AgentRan, Option<Sandbox>) {
    let limit = stage.agent_limit;
    let Some(solution) = stage.solution else {
        let missing = EvalError::Task(format!(
            "{} has no solution/solve.sh for --agent oracle",
            stage.dir.display()
        ));
        return (AgentRan::CouldNotStart(missing, false), None);
    };
    let tar = match pack_layers(stage.folder, &[solution], "solution") {
        Ok(t) => t,
        Err(e) => return (AgentRan::CouldNotStart(e, false), None),
    };
    let started = async {
        engine_call(container.upload(Path::new("/"), tar)).await?;
        let _engine = super::engines::CALLS.acquire().await;
        engine_call(container.serve()).await
    };
    let sandbox = match started.await {
        Ok(s) => s,
        Err(e) => {
            let retryable = !super::engines::alive(Some(engine)).await;
            let failed = e.during("cannot start the task container");
            return (AgentRan::CouldNotStart(failed, retryable), None);
        }
    };
    // The phase's network through the proxy, as the model's run gets it.
    let proxy = match agent_proxy(stage, container, &sandbox).await {
        Ok(p) => p,
        Err(e) => {
            drop_blocking(sandbox).await;
            return (AgentRan::CouldNotStart(e, false), None);
        }
    };
    let command = with_env(stage.solution_env, "bash /solution/solve.sh");
    let ran = attempt::exec(&sandbox, &command, limit, LOG_LIMIT, stop).await;
    if let Some((proxy, gate)) = proxy {
        keep_agent_connections(stage, &proxy).await;
        // Nothing passes until the verifier's phase says what may.
        gate.switch(PhasePlan::offline_rules());
        let agent_records = proxy.records().len();
        *lock(&stage.handed_over) = Some(HandedOver {
            proxy,
            gate,
            agent_records,
        });
    }
    // The agent's proxy is gone with its phase; the server stays only for a solution that
    // ended in its time.
    let live = match &ran {
        Ok(r) if !r.interrupted && !r.timed_out => Some(sandbox),
        _ => {
            drop_blocking(sandbox).await;
            None
        }
    };
    let ran = match ran {
        Ok(r) if r.interrupted => AgentRan::Interrupted,
        Ok(r) => {
            let _ = write_file(&out.join("agent.log"), &r.output);
            AgentRan::Ended(None, r.timed_out)
        }
        Err(e) => AgentRan::CouldNotStart(e, true),
    };
    (ran, live)
}

/// `command` with `[solution] env` set for it: `env 'K=V' … command`, each pair quoted for
/// the shell. A name that is no variable name is left out (the shell would not take it).
fn with_env(env: &std::collections::BTreeMap<String, String>, command: &str) -> String {
    let valid = |k: &str| {
        !k.is_empty()
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let pairs: Vec<String> = env
        .iter()
        .filter(|(k, _)| valid(k))
        .map(|(k, v)| runner_tool::stdio::shell_quote(&format!("{k}={v}")))
        .collect();
    if pairs.is_empty() {
        return command.to_string();
    }
    format!("env {} {command}", pairs.join(" "))
}

/// The agent's proxy in `sandbox`, when its phase may reach anything (and the container
/// was made with one); the phase's rules alone decide, nobody is asked. Its gate can be
/// switched to the verifier's rules ([`HandedOver`]).
async fn agent_proxy(
    stage: &Stage<'_>,
    container: &TaskContainer,
    sandbox: &runner_sandbox::Sandbox,
) -> Result<Option<(runner_network::NetworkProxy, Arc<PhaseGate>)>, EvalError> {
    if !stage.agent_net.proxied() || container.network() != Network::Allowlist {
        return Ok(None);
    }
    let gate = Arc::new(PhaseGate::new(
        sandbox.worktree(),
        stage.agent_net.rules(&stage.net_extra),
        "an evaluation answers every ask with deny",
    ));
    let policy = runner_network::Policy {
        gate: gate.clone(),
        // The reserved-address check: only the user's own exact rules open one, in either
        // phase.
        rules: stage.net_extra.clone(),
        programs: Default::default(),
        inspection: None,
    };
    let proxy = runner_network::NetworkProxy::start(
        sandbox.client.clone(),
        policy,
        runner_network::NetworkLimits::default(),
    )
    .await
    .map_err(|e| {
        EvalError::from(e).during("cannot start the network proxy in the task container")
    })?;
    Ok(Some((proxy, gate)))
}

/// The oracle's proxy after its phase: refusing everything until the verifier's phase
/// switches its rules, with the number of its records that are the agent's.
struct HandedOver {
    proxy: runner_network::NetworkProxy,
    gate: Arc<PhaseGate>,
    agent_records: usize,
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keeps the agent's connections once its commands are done (the host's side of each
/// given a moment to finish counting).
async fn keep_agent_connections(stage: &Stage<'_>, proxy: &runner_network::NetworkProxy) {
    proxy.settle(Duration::from_secs(2)).await;
    *stage
        .agent_connections
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = proxy.records();
}

/// The agent's phase in `result.json`'s `network`, and its connections whole in
/// `agent-network.jsonl`, as the verifier's are kept.
fn note_agent_network(stage: &Stage<'_>, result: &mut TaskResult, out: &Path) {
    let connections = std::mem::take(
        &mut *stage
            .agent_connections
            .lock()
            .unwrap_or_else(|p| p.into_inner()),
    );
    result
        .network
        .push(stage.agent_net.noted("agent", stage.name, &connections));
    if connections.is_empty() {
        return;
    }
    let lines: String = connections
        .iter()
        .filter_map(|c| serde_json::to_string(c).ok())
        .map(|l| l + "\n")
        .collect();
    let _ = write_file(&out.join("agent-network.jsonl"), lines.as_bytes());
}

/// The plan of the agent's phase in `step`: `--agent-network`, else the task's policy.
fn agent_plan(
    task: &HarborTask,
    step: Option<&harbor::HarborStep>,
    options: &EvalOptions,
) -> PhasePlan {
    PhasePlan::of(
        options.agent_network,
        "--agent-network",
        task.agent_network(step),
    )
}

/// The plan of the verifier's phase in `step`: `--verifier-network`, else the task's.
fn verifier_plan(
    task: &HarborTask,
    step: Option<&harbor::HarborStep>,
    options: &EvalOptions,
) -> PhasePlan {
    PhasePlan::of(
        options.verifier_network,
        "--verifier-network",
        task.verifier_network(step),
    )
}

/// Whether any agent phase, and any verifier phase, of the task gets the proxy: the
/// container is made for it (the agent's commands see the proxy's variables; the server
/// may listen on the container's loopback).
fn proxied_phases(task: &HarborTask, options: &EvalOptions) -> (bool, bool) {
    let steps: Vec<Option<&harbor::HarborStep>> = if task.steps.is_empty() {
        vec![None]
    } else {
        task.steps.iter().map(Some).collect()
    };
    let agent = steps
        .iter()
        .any(|s| agent_plan(task, *s, options).proxied());
    let verifier = steps
        .iter()
        .any(|s| verifier_plan(task, *s, options).proxied());
    (agent, verifier)
}

/// A proxy in `sandbox` where `rules` alone decide (`why_no_ask` for what they leave open).
async fn rules_proxy(
    sandbox: &runner_sandbox::Sandbox,
    rules: Vec<runner_permission::rules::Rule>,
    why_no_ask: &str,
    failed: &str,
) -> Result<runner_network::NetworkProxy, EvalError> {
    let policy = runner_network::Policy::without_asks(sandbox.worktree(), rules, why_no_ask);
    runner_network::NetworkProxy::start(
        sandbox.client.clone(),
        policy,
        runner_network::NetworkLimits::default(),
    )
    .await
    .map_err(|e| EvalError::from(e).during(failed))
}

/// The `network` rules of the evaluation's `--config`, the user's own: laid over each
/// phase's rules (an exact one there may open a private address).
fn user_network_rules(
    options: &EvalOptions,
) -> Result<Vec<runner_permission::rules::Rule>, EvalError> {
    let Some(path) = &options.config else {
        return Ok(Vec::new());
    };
    let home = std::env::var("HOME").unwrap_or_default();
    Ok(runner_permission::layers::load_file(path, &home)
        .map_err(|e| EvalError::Options(e.to_string()))?
        .into_iter()
        // `--config` is the user's own: its exact rules may open a private address.
        .map(|r| r.in_layer(runner_permission::rules::Layer::Explicit))
        .filter(|r| runner_permission::wildcard::matches("network", &r.permission))
        .collect())
}

/// The verifier's connections in the attempt: one line each in `result.json`, every
/// record whole in `verifier-network.jsonl`.
fn record_connections(
    result: &mut TaskResult,
    out: &Path,
    connections: &[runner_network::ConnectionRecord],
) {
    if connections.is_empty() {
        return;
    }
    // A multi-step task's steps add theirs in turn.
    result
        .verifier_network
        .extend(connections.iter().map(|c| c.line()));
    let lines: String = connections
        .iter()
        .filter_map(|c| serde_json::to_string(c).ok())
        .map(|l| l + "\n")
        .collect();
    let _ = write_file(&out.join("verifier-network.jsonl"), lines.as_bytes());
}

/// Moves aside what the agent left where the verifier looks (it may have planted a
/// `conftest.py` in `/tests` or a reward in `/logs/verifier`), puts the hidden tests
/// (copied in as `/$1`, a name nobody could guess) at `/tests`, and makes
/// `/logs/verifier` afresh. Run as root; moving works where deleting might not (a
/// directory the agent made read-only).
const PREPARE: &str = "set -e
for d in /tests /logs/verifier; do
  if [ -e \"$d\" ] || [ -L \"$d\" ]; then mv -f -- \"$d\" \"$d.left-by-agent.$$\"; fi
done
mv -- \"/$1\" /tests
mkdir -p /logs/verifier
chmod 1777 /logs/verifier";

/// What [`PREPARE`] prints once done, when `test.sh` follows it in the same command: the
/// verifier's output starts after it, and without it the preparation failed.
const PREPARED: &str = "runner: /tests and /logs/verifier are ready";

/// The task container for the verifier: the agent's server if it was kept (nothing else
/// runs there), and how the copy of the hidden tests went.
struct Verifying<'a> {
    container: &'a TaskContainer,
    live: Option<Sandbox>,
    uploaded: Result<(), EvalError>,
}

async fn verify(
    stage: &Stage<'_>,
    verifying: Verifying<'_>,
    way_out: Option<&[runner_permission::rules::Rule]>,
    connections: &mut Vec<runner_network::ConnectionRecord>,
    stop: &CancellationToken,
) -> Verified {
    let Verifying {
        container,
        live,
        uploaded,
    } = verifying;
    // The oracle's proxy still listens in its server; in a fresh start it is gone.
    let handed_over = lock(&stage.handed_over).take().filter(|_| live.is_some());
    let steps = async {
        uploaded?;
        // A running container for the engine's exec, with nothing of the agent's in it:
        // the agent's own server when nothing else was left, else a fresh start.
        let sandbox = match live {
            Some(sandbox) => sandbox,
            None => {
                let _engine = super::engines::CALLS.acquire().await;
                engine_call(container.serve())
                    .await
                    .map_err(|e| e.during("cannot start the task container again"))?
            }
        };
        let ran = async {
            let (proxy, skip) = match (handed_over, way_out) {
                (Some(h), rules) => {
                    h.gate
                        .switch(rules.map_or_else(PhasePlan::offline_rules, <[_]>::to_vec));
                    (Some(h.proxy), h.agent_records)
                }
                (None, Some(rules)) => (Some(verifier_proxy(&sandbox, rules).await?), 0),
                (None, None) => (None, 0),
            };
            let ran = run_tests(stage, container, way_out.is_some()).await;
            if let Some(proxy) = proxy {
                proxy.settle(Duration::from_secs(2)).await;
                *connections = proxy.records().into_iter().skip(skip).collect();
            }
            ran
        }
        .await;
        drop_blocking(sandbox).await;
        ran
    };
    let (ran, rewards) = tokio::select! {
        r = steps => match r {
            Ok(r) => r,
            Err(e) => return Verified::Failed(e),
        },
        _ = stop.cancelled() => return Verified::Interrupted,
    };
    let mut log = ran.output;
    if let Some(code) = ran.code {
        log.extend_from_slice(format!("\n[test.sh exited with {code}]\n").as_bytes());
    }
    Verified::Ran {
        log,
        exit: ran.code,
        timed_out: ran.timed_out,
        score: Score::Rewards(rewards),
    }
}

/// `/tests` and `/logs/verifier` made afresh with the tests (already copied in) in place,
/// `test.sh` run (with the proxy's variables when it has one), and the rewards it left
/// read. A verifier that runs as root gets both in one engine command.
async fn run_tests(
    stage: &Stage<'_>,
    container: &TaskContainer,
    proxied: bool,
) -> Result<(ExecOutput, Rewards), EvalError> {
    let limit = stage.verify_limit;
    let mut env: Vec<(String, String)> = Vec::new();
    // The task's loopback is its own, as for its agent (`in_image`).
    if proxied {
        runner_sandbox::spec::set_proxy_env(&mut env, &[]);
    }
    // The task's own variables win, as they would over the environment's.
    env.extend(
        stage
            .verifier
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    let user = stage.verifier.user.as_deref();
    // The task's own PATH could hide the preparation's programs: it then runs apart.
    let together = is_root(&container.exec_user(user)) && !env.iter().any(|(k, _)| k == "PATH");
    let ran = if together {
        let script = format!("{PREPARE}\nprintf '%s\\n' '{PREPARED}'\nexec bash /tests/test.sh");
        let argv = ["sh", "-c", &script, "sh", &stage.tests_name];
        let ran = engine_call(container.exec(&argv, user, &env, limit, LOG_LIMIT as usize)).await?;
        after_prepared(ran)?
    } else {
        let argv = ["sh", "-c", PREPARE, "sh", &stage.tests_name];
        let prepared =
            engine_call(container.exec(&argv, Some("root"), &[], limit, LOG_LIMIT as usize))
                .await?;
        if prepared.code != Some(0) {
            return Err(not_prepared(&prepared.output));
        }
        let argv = ["bash", "/tests/test.sh"];
        engine_call(container.exec(&argv, user, &env, limit, LOG_LIMIT as usize)).await?
    };
    let rewards = read_rewards(container).await?;
    Ok((ran, rewards))
}

/// Whether an engine exec as `user` runs as root.
fn is_root(user: &str) -> bool {
    let name = user.split(':').next().unwrap_or(user);
    name == "0" || name == "root"
}

/// The verifier's output without [`PREPARED`]; without that line the preparation failed
/// (and what it printed says why). The line is looked for, not expected first: the
/// engine hands over standard output and standard error as two streams, so a line
/// `test.sh` writes to standard error at once can arrive ahead of it.
fn after_prepared(mut ran: ExecOutput) -> Result<ExecOutput, EvalError> {
    let line = format!("{PREPARED}\n");
    let found = ran
        .output
        .windows(line.len())
        .position(|w| w == line.as_bytes());
    match found {
        Some(at) => {
            ran.output.drain(at..at + line.len());
            Ok(ran)
        }
        None => Err(not_prepared(&ran.output)),
    }
}

fn not_prepared(output: &[u8]) -> EvalError {
    EvalError::Task(format!(
        "cannot make /tests and /logs/verifier afresh: {}",
        String::from_utf8_lossy(output).trim()
    ))
}

/// The rewards `test.sh` left, with their file: `Err` when there are none, or they are not
/// numbers.
type Rewards = Result<harbor::Written, EvalError>;

/// The verifier's proxy: `rules` decide, nobody is asked.
async fn verifier_proxy(
    sandbox: &runner_sandbox::Sandbox,
    rules: &[runner_permission::rules::Rule],
) -> Result<runner_network::NetworkProxy, EvalError> {
    rules_proxy(
        sandbox,
        rules.to_vec(),
        "the verifier's network is its phase's rules alone (the task's, or --verifier-network's)",
        "cannot start the verifier's network proxy",
    )
    .await
}

/// An engine operation, bounded: an engine that stops answering mid-call must not hold
/// the attempt forever.
async fn engine_call<T, E: Into<EvalError>>(
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, EvalError> {
    match tokio::time::timeout(ENGINE_TIMEOUT, call).await {
        Ok(done) => done.map_err(Into::into),
        Err(_) => Err(EvalError::EngineTimeout(ENGINE_TIMEOUT.as_secs())),
    }
}

/// The rewards `test.sh` left. `Err`: they could not be read (the engine's failure);
/// `Ok(Err)`: there are none, or they are not numbers (the task is not solved).
async fn read_rewards(container: &TaskContainer) -> Result<Rewards, EvalError> {
    // One copy of the folder, when it is small (it usually is); else each file on its own.
    let folder = Path::new("/logs/verifier");
    if let Ok(tar) = engine_call(container.download(folder, 8 << 20)).await {
        let [txt, json] = match tar {
            Some(tar) => reward_files(&tar),
            None => [None, None],
        };
        return Ok(harbor::read_reward(txt.as_deref(), json.as_deref()).map_err(EvalError::from));
    }
    let mut found = [None, None];
    for (slot, name) in found.iter_mut().zip(["reward.txt", "reward.json"]) {
        let path = Path::new("/logs/verifier").join(name);
        if let Some(tar) = engine_call(container.download(&path, 1 << 20)).await? {
            *slot = first_file(&tar);
        }
    }
    let [txt, json] = found;
    Ok(harbor::read_reward(txt.as_deref(), json.as_deref()).map_err(EvalError::from))
}

/// `verifier/reward.txt` and `verifier/reward.json` of the tar of `/logs/verifier`, where
/// they are regular files (a link counts as no reward, as it does copied alone).
fn reward_files(tar: &[u8]) -> [Option<String>; 2] {
    use std::io::Read;
    let mut found = [None, None];
    let mut archive = tar::Archive::new(tar);
    let Ok(entries) = archive.entries() else {
        return found;
    };
    for mut entry in entries.flatten() {
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let Ok(path) = entry.path().map(|p| p.into_owned()) else {
            continue;
        };
        let slot = if path == Path::new("verifier/reward.txt") {
            0
        } else if path == Path::new("verifier/reward.json") {
            1
        } else {
            continue;
        };
        let mut text = String::new();
        if entry.read_to_string(&mut text).is_ok() {
            found[slot] = Some(text);
        }
    }
    found
}

/// The text of the first regular file in a tar (what the engine sends for one file).
fn first_file(tar: &[u8]) -> Option<String> {
    use std::io::Read;
    let mut archive = tar::Archive::new(tar);
    let entries = archive.entries().ok()?;
    for mut entry in entries.flatten() {
        if entry.header().entry_type().is_file() {
            let mut text = String::new();
            entry.read_to_string(&mut text).ok()?;
            return Some(text);
        }
    }
    None
}

/// Folders of the task's `folder` packed as one folder `name`, each laid over the ones
/// before it (a step's tests over the task's): a file in a later one wins. Read beneath
/// the task's folder: a link that stays inside is packed as a link, one that leaves it
/// fails the packing, named.
fn pack_layers(
    folder: &super::folder::Folder,
    dirs: &[&Path],
    name: &str,
) -> Result<Vec<u8>, EvalError> {
    let mut files: std::collections::BTreeMap<std::path::PathBuf, (&Path, super::folder::Entry)> =
        Default::default();
    let mut present = Vec::new();
    for dir in dirs {
        if !folder.is_dir(dir).map_err(images::task_error)? {
            continue;
        }
        present.push(*dir);
        for entry in images::files_under(folder, dir)? {
            files.insert(entry.rel.clone(), (*dir, entry));
        }
    }
    let mut tar = tar::Builder::new(Vec::new());
    // The folder itself, plain (a multi-step task may have tests only in its steps).
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Directory);
    header.set_mode(0o755);
    header.set_size(0);
    tar.append_data(&mut header, name, std::io::empty())
        .map_err(EvalError::io("pack", folder.path()))?;
    for (rel, (dir, entry)) in files {
        folder
            .append(&mut tar, dir, &entry, &Path::new(name).join(&rel))
            .map_err(images::task_error)?;
    }
    tar.into_inner()
        .map_err(EvalError::io("pack", folder.path()))
}

/// The task container, removed off the async threads when the attempt is done.
struct Owned(Option<Arc<TaskContainer>>);

impl Owned {
    /// The container, there until the owner is dropped.
    #[expect(
        clippy::expect_used,
        reason = "only Drop takes the container out; the Option is for that take"
    )]
    fn container(&self) -> &Arc<TaskContainer> {
        self.0
            .as_ref()
            .expect("the container is there until its owner is dropped")
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            super::engines::CLOSING.spawn(async move {
                let _engine = super::engines::CALLS.acquire().await;
                let _ = tokio::task::spawn_blocking(move || drop(c)).await;
            });
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, Option<&str>)]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, body) in entries {
            let mut header = tar::Header::new_gnu();
            match body {
                Some(text) => {
                    header.set_size(text.len() as u64);
                    header.set_mode(0o644);
                    tar.append_data(&mut header, path, text.as_bytes()).unwrap();
                }
                None => {
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_size(0);
                    tar.append_link(&mut header, path, "/elsewhere").unwrap();
                }
            }
        }
        tar.into_inner().unwrap()
    }

    #[test]
    fn rewards_come_from_the_two_files_of_the_folder_alone() {
        let tar = tar_of(&[
            ("verifier/notes/reward.txt", Some("9")),
            ("verifier/reward.txt", Some("1\n")),
            ("verifier/reward.json", Some("{\"a\": 0.5}")),
        ]);
        assert_eq!(
            reward_files(&tar),
            [Some("1\n".to_string()), Some("{\"a\": 0.5}".to_string())]
        );
        // A link is no reward, as it is copied alone.
        let linked = tar_of(&[("verifier/reward.txt", None)]);
        assert_eq!(reward_files(&linked), [None, None]);
    }

    #[test]
    fn the_verifier_output_is_what_follows_the_preparation_or_it_failed() {
        let out = |text: &str| ExecOutput {
            output: text.as_bytes().to_vec(),
            code: Some(0),
            timed_out: false,
        };
        let ran = after_prepared(out(&format!("{PREPARED}\nPASS\n"))).unwrap();
        assert_eq!(ran.output, b"PASS\n");
        let failed = after_prepared(out("mv: cannot move '/tests'\n")).unwrap_err();
        assert!(
            failed.to_string().contains("cannot move '/tests'"),
            "{failed}"
        );
        // test.sh's standard error can arrive ahead of the line (two streams): it is kept,
        // and the line still says the preparation finished (it is printed only then, as
        // the preparation stops at its first failure).
        let raced = after_prepared(out(&format!(
            "grep: /app/one.txt: missing\n{PREPARED}\nFAIL\n"
        )))
        .unwrap();
        assert_eq!(raced.output, b"grep: /app/one.txt: missing\nFAIL\n");
    }

    #[test]
    fn root_is_named_by_name_or_id_with_or_without_a_group() {
        for user in ["0", "root", "0:0", "root:root"] {
            assert!(is_root(user), "{user}");
        }
        for user in ["1000", "agent", "10", "rooted"] {
            assert!(!is_root(user), "{user}");
        }
    }

    #[test]
    fn hidden_names_differ_and_say_nothing() {
        let (a, b) = (hidden_name().unwrap(), hidden_name().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), ".runner-tests-".len() + 32);
    }
}
