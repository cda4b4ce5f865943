//! The agent's phase: runner's own loop (`--model`), or the task's solution (`--agent
//! oracle`), in the task's container, and then the end of every process it started.
//!
//! Nothing of the agent's may run while the verifier does: the tests are hidden from the
//! agent, and a process left behind could plant a reward or change what the tests see.
//! So the phase ends with every process the agent left killed: inside the running
//! container when the engine then sees only runner's server there (the server is kept, for
//! the verifier's proxy), else by stopping the container, whose PID namespace goes with
//! everything in it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use runner_agent::End;
use runner_agent::events::NoEvents;
use runner_agent::start::{RunOptions, start};
use runner_sandbox::Sandbox;
use runner_sandbox::docker::in_image::TaskContainer;
use runner_sandbox::spec::Network;
use runner_workspace::write_file;
use tokio_util::sync::CancellationToken;

use super::network::HandedOver;
use super::stages::{Stage, pack_layers};
use super::{Place, engine_call, lock};
use crate::attempt::{self, LOG_LIMIT, drop_blocking};
use crate::engines::Engine;
use crate::results::TaskResult;
use crate::verifier_network::{PhaseGate, PhasePlan};
use crate::{EvalError, EvalOptions};

/// The agent (or, with `--agent oracle`, the task's own solution) in the task's container;
/// every process it left running is dead when this returns: killed in the running
/// container when only the server is left after (the server then comes back, for the
/// verifier), else with the container's stop.
pub(super) async fn run_agent(
    stage: &Stage<'_>,
    place: Place<'_>,
    options: &EvalOptions,
    result: &mut TaskResult,
    served: Served,
    stop: &CancellationToken,
) -> (AgentRan, Option<Sandbox>) {
    let container = place.container;
    let (ran, live) = match options.agent {
        crate::AgentKind::Oracle => {
            oracle(stage, container, place.engine, place.out, served, stop).await
        }
        crate::AgentKind::Model => model(stage, place, options, result, stop).await,
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
/// until none is left or a hundred rounds have passed. A process is dead only when all
/// its threads are: a leader that called `exit` shows as a zombie while its other threads
/// run on, so every thread's state is read. (Not `kill -1`: the server, the init's child,
/// runs as the agent's user too.)
const KILL_THE_REST: &str = "keep=\" 1 $PPID $$ \"
n=0
while :; do
  left=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case \"$keep\" in *\" $p \"*) continue ;; esac
    if [ ! -r \"$d/status\" ]; then continue; fi
    live=
    for t in \"$d\"/task/*; do
      while read -r k v rest; do
        if [ \"$k\" = State: ]; then
          if [ \"$v\" != Z ] && [ \"$v\" != X ]; then live=1; fi
          break
        fi
      done 2>/dev/null < \"$t/status\"
      if [ -n \"$live\" ]; then break; fi
    done
    if [ -n \"$live\" ]; then left=\"$left $p\"; kill -9 \"$p\" 2>/dev/null; fi
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

/// Whether the container's cgroup holds two live processes: its init and the server, its
/// child (the server answered a moment ago, and a container whose init is gone has
/// stopped). A process counts while any of its threads lives (a zombie leader's other
/// threads run on). Read from the kernel's cgroup files where
/// the engine is this machine's Docker (no engine call), else the engine's `top` lists
/// them; an engine that cannot tell (a runtime without `top`) counts as no.
async fn only_the_server(sandbox: &Sandbox, container: &TaskContainer) -> bool {
    let Some(id) = sandbox.container_id.as_deref() else {
        return false;
    };
    if let Some(live) = container.live_processes() {
        return live == 2;
    }
    // A row per thread (`-L`), each with its process's pid.
    let options = bollard::query_parameters::TopOptions {
        ps_args: "-L -o pid,stat".into(),
    };
    let listed = tokio::time::timeout(
        Duration::from_secs(30),
        container.engine().top_processes(id, Some(options)),
    )
    .await;
    let Ok(Ok(top)) = listed else {
        return false;
    };
    let column = |name: &str| top.titles.as_ref()?.iter().position(|t| t == name);
    let (Some(pid), Some(stat)) = (column("PID"), column("STAT")) else {
        return false;
    };
    let alive: std::collections::HashSet<&String> = top
        .processes
        .iter()
        .flatten()
        .filter(|row| row.get(stat).is_some_and(|s| !s.starts_with('Z')))
        .filter_map(|row| row.get(pid))
        .collect();
    alive.len() == 2
}

/// Closes a kept server (which stops its container), off the async threads.
pub(super) async fn close(live: Option<Sandbox>) {
    if let Some(sandbox) = live {
        drop_blocking(sandbox).await;
    }
}

pub(super) enum AgentRan {
    /// How the agent's run ended (`None` for the oracle), and whether its time ran out.
    Ended(Option<End>, bool),
    CouldNotStart(EvalError, bool),
    Interrupted,
}

/// runner's own loop, in a sandbox over the task container.
async fn model(
    stage: &Stage<'_>,
    place: Place<'_>,
    options: &EvalOptions,
    result: &mut TaskResult,
    stop: &CancellationToken,
) -> (AgentRan, Option<Sandbox>) {
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
        let _engine = crate::engines::CALLS.acquire().await;
        start(run_options).await
    };
    let mut run = match started {
        Ok(r) => r,
        Err(e) => {
            // A sandbox that cannot start on an engine that answers (a task user the image
            // lacks, say) will not start on a second try either.
            let retryable = e.kind() == runner_agent::start::StartKind::Sandbox
                && !crate::engines::alive(Some(engine)).await;
            let failed = EvalError::from(e).during("cannot start the agent");
            return (AgentRan::CouldNotStart(failed, retryable), None);
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
    // The server is kept for the verifier, as the oracle's is, when the run ended in its
    // time and its proxy did not use the server's one listener for a proxy (the
    // verifier may need it).
    let proxied = run.open.network.clone();
    let keep = (!timed_out && !stop.is_cancelled() && proxied.is_none())
        .then(|| run.open.ctx.services.sandbox.clone());
    if let Some(proxy) = proxied {
        keep_agent_connections(stage, &proxy).await;
    }
    drop_blocking(run).await;
    let _ = std::fs::rename(&session_file, out.join("session.jsonl"));
    // Only once the run and everything of it is gone is the sandbox ours alone; a piece
    // of the run still holding it (a background task) means the container is stopped as
    // before.
    let live = keep.and_then(|shared| Arc::try_unwrap(shared).ok());
    (AgentRan::Ended(Some(end), timed_out), live)
}

/// The task's `solution/solve.sh`, copied to `/solution` and run as the agent would be.
/// With the server still running once the solution ended in its time (`Some`), for
/// [`quiesce`] to try to keep.
async fn oracle(
    stage: &Stage<'_>,
    container: &TaskContainer,
    engine: &Engine,
    out: &Path,
    served: Served,
    stop: &CancellationToken,
) -> (AgentRan, Option<Sandbox>) {
    let limit = stage.agent_limit;
    let started = match served.take() {
        Some(started) => started,
        None => Served::start(stage, container, engine)
            .await
            .take()
            .unwrap_or_else(|| {
                Err((
                    EvalError::Task("the oracle's server was not started".into()),
                    false,
                ))
            }),
    };
    let sandbox = match started {
        Ok(s) => s,
        Err((e, retryable)) => return (AgentRan::CouldNotStart(e, retryable), None),
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

/// The oracle's solution copied into the (created) container and its server started: done
/// ahead of the attempt's turn by the warm pool ([`super::Ready`]), or at the turn. `None`
/// inside: not started (not the oracle's, or already taken). A server never taken is
/// closed off the async threads when this is dropped.
#[derive(Default)]
pub(super) struct Served(Option<Result<Sandbox, (EvalError, bool)>>);

impl Served {
    fn take(mut self) -> Option<Result<Sandbox, (EvalError, bool)>> {
        self.0.take()
    }

    pub(super) async fn start(
        stage: &Stage<'_>,
        container: &TaskContainer,
        engine: &Engine,
    ) -> Served {
        let Some(solution) = stage.solution else {
            let missing = EvalError::Task(format!(
                "{} has no solution/solve.sh for --agent oracle",
                stage.dir.display()
            ));
            return Served(Some(Err((missing, false))));
        };
        let tar = match pack_layers(stage.folder, &[solution], "solution") {
            Ok(t) => t,
            Err(e) => return Served(Some(Err((e, false)))),
        };
        // Started first: the solution is then written by a command through the server
        // (nothing runs there yet but the server), or copied into the running container,
        // which spares the engine mounting its file system.
        let started = async {
            let sandbox = {
                let _engine = crate::engines::CALLS.acquire().await;
                engine_call(container.serve()).await?
            };
            if write_through(&sandbox, &tar).await {
                return Ok(sandbox);
            }
            match engine_call(container.upload(Path::new("/"), tar)).await {
                Ok(()) => Ok(sandbox),
                Err(e) => {
                    drop_blocking(sandbox).await;
                    Err(e)
                }
            }
        };
        Served(Some(match started.await {
            Ok(s) => Ok(s),
            Err(e) => {
                let retryable = !crate::engines::alive(Some(engine)).await;
                Err((e.during("cannot start the task container"), retryable))
            }
        }))
    }
}

/// The solution's files written by a command through the container's own server, as the
/// agent's user: no engine call. False when they do not fit in a command, or the command
/// failed (a user who may not make `/solution`): the engine copies them then.
async fn write_through(sandbox: &Sandbox, tar: &[u8]) -> bool {
    let Some(lines) = super::inline::unpack_script(tar, super::inline::SCRIPT_LIMIT) else {
        return false;
    };
    let command = format!("set -e\n{lines}");
    let limit = Duration::from_secs(60);
    let never = CancellationToken::new();
    let ran = attempt::exec(sandbox, &command, limit, 4096, &never).await;
    matches!(ran, Ok(r) if r.code == Some(0))
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(Ok(sandbox)) = self.0.take() {
            crate::engines::CLOSING.spawn(async move {
                let _ = tokio::task::spawn_blocking(move || drop(sandbox)).await;
            });
        }
    }
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
pub(super) fn note_agent_network(stage: &Stage<'_>, result: &mut TaskResult, out: &Path) {
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
