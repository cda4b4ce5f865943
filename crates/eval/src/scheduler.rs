//! The scheduler: `--jobs` attempts at once, retries for infrastructure failures only, a
//! pause while the engine keeps failing, and a resume that skips what is already finished.
//!
//! A run loads every task set first (each problem said as it is found, so a typo in a set of
//! a thousand tasks is seen before any runs), claims the out folder, connects the engines
//! where anything runs on docker, plans the attempts still to run, runs them, and sums up
//! what is on disk. The attempts themselves are [`crate::attempt`] and
//! [`crate::harbor_attempt`]; this file decides only which run, when, and how often.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use runner_sandbox::BackendKind;
use tokio_util::sync::CancellationToken;

use crate::events::{self, Event, EventSink};
use crate::results::{self, Status, Summary, TaskResult};
use crate::tasks::{self, Loaded, Problem, Task};
use crate::{AgentKind, EvalError, EvalOptions};
use crate::{attempt, engines, harbor, harbor_attempt, verdict};

/// What a finished (or interrupted) evaluation reports.
pub struct Report {
    pub summary: Summary,
    /// Attempts not run because the evaluation was stopped; a rerun picks them up.
    pub unfinished: usize,
    /// Tasks in the sets, those that cannot run included.
    pub tasks: usize,
    /// Tasks that could not be loaded, and sets that hold no task.
    pub load_problems: usize,
}

/// What a run comes to, for its exit status: the first that holds, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A stop left attempts unrun.
    Stopped,
    /// The task sets hold no task: nothing was run, most likely not what was meant.
    Empty,
    /// An attempt ended in `infra_error`, or a task could not be loaded: the counts are
    /// not the agent's whole score.
    Incomplete,
    /// Asked to fail on it (`--fail-on unresolved`): an attempt was not resolved.
    Unresolved,
    /// Every attempt reached a verdict, or ended by the agent's own doing (agent_error,
    /// timeout), which scores as not resolved.
    Verdicts,
}

impl Report {
    pub fn outcome(&self, fail_on_unresolved: bool) -> Outcome {
        let count = |s: Status| self.summary.counts.get(s.name()).copied().unwrap_or(0);
        if self.unfinished > 0 {
            Outcome::Stopped
        } else if self.tasks == 0 {
            Outcome::Empty
        } else if self.load_problems > 0 || count(Status::InfraError) > 0 {
            Outcome::Incomplete
        } else if fail_on_unresolved && count(Status::Resolved) < self.summary.attempts {
            Outcome::Unresolved
        } else {
            Outcome::Verdicts
        }
    }
}

/// Runs every task set into `options.out` and writes `summary.json` and
/// `predictions.jsonl`. Attempts already finished there are not run again. What happens
/// goes to `events` as well as to the terminal; the run's end is the caller's to send (it
/// knows the exit status).
pub async fn run(
    mut options: EvalOptions,
    stop: CancellationToken,
    events: Arc<dyn EventSink>,
) -> Result<Report, EvalError> {
    check(&options)?;
    let (loaded, hash, problems) = load_sets(&options)?;
    if loaded.is_empty() {
        // Nothing to claim the folder for, and nothing to sum up.
        start_events(&*events, &options, 0, 0, problems.iter());
        return Ok(Report {
            summary: results::summarize(&[], &options.model_label(), &hash),
            unfinished: 0,
            tasks: 0,
            load_problems: problems.len(),
        });
    }
    // A shard runs its share (an empty share is a finished shard, not an empty set).
    let set_tasks = loaded.len();
    let (loaded, problems) = crate::shard::select(&options, loaded, problems);
    std::fs::create_dir_all(options.out.join("tasks"))
        .map_err(EvalError::io("create", &options.out))?;
    results::claim(&options.out, &options)?;
    crate::shard::record(&options, &loaded, &hash, &problems)?;
    // Worktrees of a run that was killed: nothing of theirs is worth keeping.
    runner_workspace::remove_run_folders(&options.out.join(".work"));
    let engines = connect_engines(&mut options, &loaded).await?;
    let Plan { jobs, refused } = plan(&loaded, &options)?;
    start_events(
        &*events,
        &options,
        loaded.len(),
        jobs.len(),
        problems.iter().chain(&refused),
    );
    let options = Arc::new(options);
    let (unfinished, progress) =
        run_jobs(jobs, options.clone(), engines.clone(), stop, events).await;
    engines::CLOSING.close();
    engines::CLOSING.wait().await;
    if let Some(e) = &engines {
        e.remove_orphans().await;
    }
    progress.done();
    runner_workspace::remove_run_folders(&options.out.join(".work"));
    let summary = write_summary(&options, &hash)?;
    Ok(Report {
        summary,
        unfinished,
        tasks: set_tasks,
        load_problems: problems.len(),
    })
}

/// `run_start`, then the load problems the terminal was told of as they were found, and the
/// ends of the attempts they cost.
fn start_events<'a>(
    events: &dyn EventSink,
    options: &EvalOptions,
    tasks: usize,
    to_run: usize,
    problems: impl Iterator<Item = &'a Event>,
) {
    events.emit(&Event::RunStart {
        schema: events::SCHEMA,
        out: options.out.display().to_string(),
        tasks,
        attempts: options.attempts,
        to_run,
        jobs: options.jobs,
        agent: match options.agent {
            AgentKind::Model => "model",
            AgentKind::Oracle => "oracle",
        }
        .into(),
        model: options.model_label(),
    });
    for p in problems {
        events.emit(p);
    }
}

/// Options that cannot make a run, refused before anything is written.
pub(crate) fn check(options: &EvalOptions) -> Result<(), EvalError> {
    if options.agent == AgentKind::Model && options.model.is_none() {
        return Err(EvalError::Options("no model: pass --model provider/model, or --agent oracle to run the tasks' own solutions".into()));
    }
    if options.attempts == 0 || options.jobs == 0 {
        return Err(EvalError::Options(
            "--attempts and --jobs must be at least 1".into(),
        ));
    }
    if options.backend == Some(BackendKind::None) {
        return Err(EvalError::Options("eval needs a sandbox that ends every process an attempt started before the verdict (docker, or landlock with its PID namespace); --sandbox none has none".into()));
    }
    Ok(())
}

/// Every task of every set (a folder of Harbor tasks, or a JSON-lines file), each id once;
/// the sets' content hash; and each load problem, as an event. Each problem is said on the
/// terminal as it is found: a typo in a set of a thousand tasks is seen before they run.
pub(crate) fn load_sets(
    options: &EvalOptions,
) -> Result<(Vec<Loaded>, String, Vec<Event>), EvalError> {
    let mut sourced: Vec<(PathBuf, Option<usize>, Loaded)> = Vec::new();
    let mut problems = Vec::new();
    let mut files = Vec::new();
    let broken = |l: &Loaded| match l {
        Loaded::Broken(p) => Some(found(Some(&p.id), &p.file, p.line, p.message.clone())),
        _ => None,
    };
    for set in &options.task_sets {
        let before = sourced.len();
        if set.is_dir() {
            load_folder(set, options, &mut sourced)?;
        } else {
            let lines = tasks::load_jsonl(set, options.timeouts)?;
            sourced.extend(lines.into_iter().map(|(n, l)| (set.clone(), Some(n), l)));
        }
        if sourced.len() == before {
            problems.push(found(None, set, None, "holds no task".into()));
        }
        problems.extend(sourced[before..].iter().filter_map(|(_, _, l)| broken(l)));
        files.push(set.clone());
    }
    let hash = tasks::content_hash(&files);
    for at in dedupe(&mut sourced) {
        problems.extend(broken(&sourced[at].2));
    }
    let loaded: Vec<Loaded> = sourced.into_iter().map(|(_, _, l)| l).collect();
    Ok((loaded, hash, problems))
}

/// A folder's Harbor tasks into `sourced`, each with the folder it is in. A folder with no
/// task in it adds none (the caller says so).
fn load_folder(
    set: &Path,
    options: &EvalOptions,
    sourced: &mut Vec<(PathBuf, Option<usize>, Loaded)>,
) -> Result<(), EvalError> {
    let one = harbor::is_task(set);
    let any = one
        || std::fs::read_dir(set)
            .map_err(EvalError::io("read the task set", set))?
            .flatten()
            .any(|e| harbor::is_task(&e.path()));
    if !any {
        return Ok(());
    }
    let converted = options.out.join(".converted");
    let harbor::TaskSet { tasks, notes } = harbor::load_set(set, &converted)?;
    // Once per set: what its tasks ask for that runner does differently. A note
    // names a field of a task's file: the task's words, escaped.
    for note in notes {
        say(&note);
    }
    for task in tasks {
        let (file, loaded) = match task {
            Ok(t) => (t.dir.clone(), Loaded::Harbor(Box::new(t))),
            Err((id, message)) => {
                let folder = if one {
                    set.to_path_buf()
                } else {
                    set.join(&id)
                };
                let p = harbor_problem(id, folder, message);
                (p.file.clone(), Loaded::Broken(p))
            }
        };
        sourced.push((file, None, loaded));
    }
    Ok(())
}

/// A Harbor task's problem, placed: in its `task.toml` at the line the TOML parser names,
/// else in its folder (the message names the file: `cannot read …/instruction.md`).
fn harbor_problem(id: String, folder: PathBuf, message: String) -> Problem {
    let toml = folder.join("task.toml");
    let line = message
        .strip_prefix(&format!("{}: ", toml.display()))
        .and_then(|rest| rest.strip_prefix("TOML parse error at line "))
        .and_then(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        });
    Problem {
        id,
        file: if line.is_some() { toml } else { folder },
        line,
        message,
    }
}

/// A load problem, said on the terminal now and kept as an event for the stream.
fn found(task: Option<&str>, file: &Path, line: Option<usize>, message: String) -> Event {
    let place = match line {
        Some(n) => format!("{}:{n}", file.display()),
        None => file.display().to_string(),
    };
    match task {
        Some(id) => say(&format!(
            "{place}: task {id} cannot run (infra_error): {message}"
        )),
        None => say(&format!("{place}: {message}")),
    }
    Event::LoadProblem {
        file: file.display().to_string(),
        line,
        task: task.map(str::to_string),
        message,
    }
}

/// The engines, where anything runs on docker: Harbor tasks always, the others unless the
/// sandbox is landlock. In a container, this executable is not on the engine's host: the
/// sandboxes mount a copy in the out folder, which the attempts' worktrees already need at
/// the same path.
async fn connect_engines(
    options: &mut EvalOptions,
    loaded: &[Loaded],
) -> Result<Option<Arc<engines::Engines>>, EvalError> {
    let on_docker = loaded.iter().any(|l| matches!(l, Loaded::Harbor(_))) || uses_docker(options)?;
    if !on_docker {
        return Ok(None);
    }
    let engines = engines::Engines::connect(
        &options.docker_hosts,
        options.rebuild,
        options.build_network.as_deref(),
    )
    .await?;
    if let Some(far) = engines.remote().next()
        && loaded.iter().any(|l| matches!(l, Loaded::Task(_)))
        && uses_docker(options)?
    {
        return Err(EvalError::Options(format!(
            "the engine {far} is not reached through a Unix socket, so it may not see this machine's files, and JSON-lines tasks mount their worktree from here; run them on local engines, or use Harbor task folders (their files live in the image)"
        )));
    }
    if options.server_exe.is_none() && runner_sandbox::spec::in_container() {
        options.server_exe = Some(runner_sandbox::docker::server_copy(
            &options.out.join(".server"),
        )?);
    }
    Ok(Some(Arc::new(engines)))
}

/// What a run has to do: the attempts to run, and the `attempt_end` of each attempt of a
/// task that cannot run (its result already written), sent after `run_start`: a harness
/// counting ends must count every attempt the summary does.
struct Plan {
    jobs: Vec<(Arc<Job>, u32)>,
    refused: Vec<Event>,
}

/// The attempts still to run: finished means a verdict or the agent's own failure; what
/// the infrastructure failed runs again. An attempt of a task that cannot run at all gets
/// its result now.
fn plan(loaded: &[Loaded], options: &EvalOptions) -> Result<Plan, EvalError> {
    let mut jobs: Vec<(Arc<Job>, u32)> = Vec::new();
    let mut ends = Vec::new();
    for l in loaded {
        for attempt in 1..=options.attempts {
            let dir = results::attempt_dir(&options.out, l.id(), attempt, options.attempts);
            if results::read_result(&dir).is_some_and(|r| r.status != Status::InfraError) {
                continue;
            }
            let mut refused = |reason: &str| {
                let mut r = TaskResult::new(l.id(), attempt, options.model_label());
                r.status = Status::InfraError;
                r.phase = Some("load".into());
                r.error = Some(reason.to_string());
                write_result(&dir, &r)?;
                ends.push(Event::attempt_end(&r, &dir));
                Ok::<(), EvalError>(())
            };
            match l {
                Loaded::Broken(p) => refused(&p.located())?,
                Loaded::Task(_) if options.agent == AgentKind::Oracle => refused(
                    "--agent oracle runs a Harbor task's solution/solve.sh; a JSON-lines task has none",
                )?,
                Loaded::Task(t) => jobs.push((Arc::new(Job::Repo(t.clone())), attempt)),
                Loaded::Harbor(t) => jobs.push((Arc::new(Job::Harbor(t.clone())), attempt)),
            }
        }
    }
    // Said once, not per task: a run that was meant for a model is not a typo per line.
    let no_solution = loaded
        .iter()
        .filter(|l| matches!(l, Loaded::Task(_)))
        .count();
    if options.agent == AgentKind::Oracle && no_solution > 0 {
        say(&format!(
            "--agent oracle: {no_solution} JSON-lines tasks have no solution to run; each is infra_error (run them with --model)"
        ));
    }
    Ok(Plan {
        jobs,
        refused: ends,
    })
}

/// Attempts made ready ahead of their turn, past `--jobs`: the warm pool's margin. Each
/// holds a container (created, and started for the oracle) while it waits.
pub const POOL_MARGIN: usize = 2;

/// Runs the attempts, `options.jobs` at a time, each result written as it finishes: how
/// many were left unfinished by a stop, and the progress line (done once all is closed).
///
/// The warm pool: up to `jobs` + [`POOL_MARGIN`] attempts are under way at once, and all
/// but `jobs` of them are only made ready ([`harbor_attempt::ready`]: the image, the
/// container, the oracle's server) while the others run and are judged; each then waits
/// for a turn. A ready attempt is one attempt's alone: its container is never given to
/// another, and dropped unused (a stop) it is removed.
async fn run_jobs(
    jobs: Vec<(Arc<Job>, u32)>,
    options: Arc<EvalOptions>,
    engines: Option<Arc<engines::Engines>>,
    stop: CancellationToken,
    events: Arc<dyn EventSink>,
) -> (usize, Progress) {
    let progress = Progress::new(jobs.len(), options.progress, events);
    let breaker = Breaker::default();
    let unfinished = AtomicUsize::new(0);
    let turns = tokio::sync::Semaphore::new(options.jobs);
    let tasks: Vec<Arc<Job>> = jobs.iter().map(|(job, _)| job.clone()).collect();
    let runs = futures_util::stream::iter(jobs)
        .map(|(task, attempt)| {
            let (options, engines, progress, breaker, stop, unfinished, turns) = (
                options.clone(),
                engines.clone(),
                &progress,
                &breaker,
                stop.clone(),
                &unfinished,
                &turns,
            );
            async move {
                let at = Attempt {
                    task: &task,
                    attempt,
                    options: &options,
                    engines: engines.as_deref(),
                    breaker,
                    stop: &stop,
                    progress,
                };
                match at.warm_then_run(turns).await {
                    Some(r) => {
                        let dir = results::attempt_dir(
                            &options.out,
                            task.id(),
                            attempt,
                            options.attempts,
                        );
                        if let Err(e) = write_result(&dir, &r) {
                            progress.note(&e.to_string());
                        }
                        if let Some(why) = r.reason() {
                            progress.note(&format!(
                                "{} attempt {}: {}: {why}",
                                r.id,
                                r.attempt,
                                r.status.name()
                            ));
                        }
                        progress.finished(&r, &dir, &task);
                    }
                    None => {
                        unfinished.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
        .buffer_unordered(options.jobs + POOL_MARGIN);
    let ahead = async {
        tokio::select! {
            () = images_ahead(&tasks, engines.as_deref(), &options, &progress) => {}
            () = stop.cancelled() => {}
        }
    };
    tokio::join!(ahead, runs.collect::<Vec<()>>());
    (unfinished.into_inner(), progress)
}

/// Images built off the attempts' path: every Harbor task's image made before and
/// alongside the attempts, in the order they run, as many at once as the engine's builder
/// allows; an attempt whose image is being made waits for it, the others run meanwhile.
/// Each is said as it is made, with how long it took.
async fn images_ahead(
    tasks: &[Arc<Job>],
    engines: Option<&engines::Engines>,
    options: &EvalOptions,
    progress: &Progress,
) {
    let Some(engines) = engines else {
        return;
    };
    let many = engines.len() > 1;
    let mut seen = std::collections::HashSet::new();
    let each = tasks.iter().filter_map(|job| match &**job {
        Job::Harbor(t) if seen.insert(t.dir.clone()) => Some(t),
        _ => None,
    });
    let made = futures_util::stream::iter(each.flat_map(|t| engines.all().map(move |e| (t, e))))
        .map(|(task, engine)| async move {
            let made = harbor_attempt::image_ahead(task, engine, options).await;
            progress.image(&task.dir, many.then(|| engine.name()), made);
        })
        .buffer_unordered(engines::IMAGE_BUILDS * engines.len());
    made.collect::<Vec<()>>().await;
}

/// `summary.json` and `predictions.jsonl`, from every result on disk.
fn write_summary(options: &EvalOptions, hash: &str) -> Result<results::Summary, EvalError> {
    let all = results::collect(&options.out);
    let summary = results::summarize(&all, &options.model_label(), hash);
    write_json(&options.out.join("summary.json"), &summary)?;
    let predictions = options.out.join("predictions.jsonl");
    results::write_predictions(
        &predictions,
        &options.out,
        &all,
        &options.model_label(),
        options.attempts,
    )
    .map_err(EvalError::io("write", &predictions))?;
    Ok(summary)
}

/// The summary again, from what is on disk.
pub fn summary(out: &Path) -> Result<Summary, EvalError> {
    let text = std::fs::read_to_string(out.join("summary.json")).ok();
    let previous: Option<Summary> = text.and_then(|t| serde_json::from_str(&t).ok());
    let all = results::collect(out);
    if all.is_empty() && previous.is_none() {
        return Err(EvalError::NotOurs(format!(
            "{} holds no evaluation results (run `runner eval run TASKS --out {}` first)",
            out.display(),
            out.display()
        )));
    }
    let (model, hash) = previous
        .map(|p| (p.model, p.task_set_hash))
        .unwrap_or_else(|| {
            let model = all.first().map(|r| r.model.clone()).unwrap_or_default();
            (model, String::new())
        });
    Ok(results::summarize(&all, &model, &hash))
}

/// One attempt as the scheduler runs it: made ready ahead (a Harbor task), then run in its
/// turn, again while the infrastructure fails it and retries are left.
struct Attempt<'a> {
    task: &'a Job,
    attempt: u32,
    options: &'a EvalOptions,
    engines: Option<&'a engines::Engines>,
    breaker: &'a Breaker,
    stop: &'a CancellationToken,
    progress: &'a Progress,
}

impl Attempt<'_> {
    /// The attempt made ready while others run, then run once a turn is free. `None`: a
    /// stop left it unrun (whatever was made ready is removed).
    async fn warm_then_run(&self, turns: &tokio::sync::Semaphore) -> Option<TaskResult> {
        let dir = self.dir();
        let (lease, harbor) = match (self.task, self.engines) {
            (Job::Harbor(t), Some(engines)) => {
                self.breaker
                    .wait_for_engine(Some(engines), self.stop, self.progress)
                    .await;
                (Some(engines.lease()), Some(t))
            }
            _ => (None, None),
        };
        let ready = match (harbor, lease.as_deref()) {
            (Some(t), Some(engine)) if !self.stop.is_cancelled() => Some(
                harbor_attempt::ready(t, self.attempt, &dir, self.options, engine, self.stop).await,
            ),
            _ => None,
        };
        let _turn = tokio::select! {
            turn = turns.acquire() => turn.ok()?,
            _ = self.stop.cancelled() => return None,
        };
        if self.stop.is_cancelled() {
            return None;
        }
        self.progress.started(self.task.id(), self.attempt);
        let first = match (ready, harbor, lease.as_deref()) {
            (Some(Ok(ready)), Some(t), Some(engine)) => Some(
                harbor_attempt::run_ready(ready, t, &dir, self.options, engine, self.stop).await,
            ),
            (Some(Err(ended)), _, _) => Some(ended),
            _ => None,
        };
        let finished = self.run_with_retries(first, lease.as_deref()).await;
        if finished.is_none() {
            self.progress.abandoned();
        }
        finished
    }

    fn dir(&self) -> PathBuf {
        let o = self.options;
        results::attempt_dir(&o.out, self.task.id(), self.attempt, o.attempts)
    }

    /// Runs the attempt until it ends in other than a retryable failure; `first`: the
    /// first try's verdict, run from the warm pool on `first_engine`.
    async fn run_with_retries(
        &self,
        mut first: Option<Option<verdict::Verdict>>,
        first_engine: Option<&engines::Engine>,
    ) -> Option<TaskResult> {
        let Attempt {
            task,
            attempt,
            options,
            engines,
            breaker,
            stop,
            progress,
        } = *self;
        let dir = self.dir();
        let mut retries = 0;
        loop {
            let warmed = first.take();
            let lease = match warmed {
                Some(_) => None,
                None => {
                    breaker.wait_for_engine(engines, stop, progress).await;
                    if stop.is_cancelled() {
                        return None;
                    }
                    engines.map(|e| e.lease())
                }
            };
            let engine = match warmed {
                Some(_) => first_engine,
                None => lease.as_deref(),
            };
            let verdict = match warmed {
                Some(verdict) => verdict?,
                None => run_once(task, attempt, &dir, options, engine, stop).await?,
            };
            let mut result = verdict.result;
            result.infra_retries = retries;
            result.engine = engines
                .filter(|e| e.len() > 1)
                .and(engine)
                .map(|e| e.name().to_string());
            if result.status == Status::InfraError {
                breaker.failed();
            } else {
                breaker.succeeded();
            }
            if verdict.retryable && retries < options.infra_retries && !stop.is_cancelled() {
                retries += 1;
                // An engine that no longer answers is set aside, so the next try lands on
                // another.
                if let Some(e) = engine {
                    e.alive().await;
                }
                drop(lease);
                progress.retrying(
                    task.id(),
                    attempt,
                    (retries, options.infra_retries),
                    result.error.as_deref().unwrap_or(""),
                );
                tokio::time::sleep(Duration::from_secs(2u64.pow(retries))).await;
                continue;
            }
            return Some(result);
        }
    }
}

/// One try of an attempt, made ready and run at once.
async fn run_once(
    task: &Job,
    attempt: u32,
    dir: &Path,
    options: &EvalOptions,
    engine: Option<&engines::Engine>,
    stop: &CancellationToken,
) -> Option<verdict::Verdict> {
    match task {
        Job::Repo(t) => attempt::run(t, attempt, dir, options, engine, stop).await,
        Job::Harbor(t) => match engine {
            Some(engine) => harbor_attempt::run(t, attempt, dir, options, engine, stop).await,
            // The engines are connected whenever the set holds a Harbor task; were that
            // ever not so, the attempt says it rather than the evaluation panicking.
            None => verdict::infra(
                TaskResult::new(&t.id, attempt, options.model_label()),
                "prepare",
                "no Docker engine is connected to run this Harbor task in",
                false,
            ),
        },
    }
}

/// One task's attempt to run: a repository copied per attempt, or a Harbor task whose
/// worktree is in its image.
enum Job {
    Repo(Box<Task>),
    Harbor(Box<harbor::HarborTask>),
}

impl Job {
    fn id(&self) -> &str {
        match self {
            Job::Repo(t) => &t.id,
            Job::Harbor(t) => &t.id,
        }
    }
}

/// Whether JSON-lines tasks run on docker: `--sandbox`, else the profile's backend.
fn uses_docker(options: &EvalOptions) -> Result<bool, EvalError> {
    let backend = match options.backend {
        Some(b) => b,
        None => runner_agent::config::profile::load(&options.profile)?
            .sandbox
            .backend
            .unwrap_or(BackendKind::None),
    };
    Ok(backend == BackendKind::Docker)
}

/// Stops new starts while the engine keeps failing, instead of burning every task on it.
#[derive(Default)]
struct Breaker {
    consecutive: AtomicU32,
}

impl Breaker {
    const OPEN_AFTER: u32 = 3;

    fn failed(&self) {
        self.consecutive.fetch_add(1, Ordering::Relaxed);
    }

    fn succeeded(&self) {
        self.consecutive.store(0, Ordering::Relaxed);
    }

    async fn wait_for_engine(
        &self,
        engines: Option<&engines::Engines>,
        stop: &CancellationToken,
        progress: &Progress,
    ) {
        if self.consecutive.load(Ordering::Relaxed) < Self::OPEN_AFTER {
            return;
        }
        let Some(engines) = engines else {
            return self.succeeded();
        };
        let mut said = false;
        while !stop.is_cancelled() && !engines.any_alive().await {
            if !said {
                progress.note("the engine keeps failing: new tasks wait until it answers again");
                said = true;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                _ = stop.cancelled() => return,
            }
        }
        self.succeeded();
    }
}

/// A later task with an id already taken would overwrite the first one's results.
/// Returns where those are.
fn dedupe(sourced: &mut [(PathBuf, Option<usize>, Loaded)]) -> Vec<usize> {
    let mut seen = std::collections::HashSet::new();
    let mut again = Vec::new();
    for (at, (file, line, l)) in sourced.iter_mut().enumerate() {
        if !seen.insert(l.id().to_string()) {
            again.push(at);
            *l = Loaded::Broken(Problem {
                id: format!("{}.duplicate", l.id()),
                file: file.clone(),
                line: *line,
                message: format!("task id {} appears more than once in the task sets", l.id()),
            });
        }
    }
    again
}

fn write_result(dir: &Path, r: &TaskResult) -> Result<(), EvalError> {
    std::fs::create_dir_all(dir).map_err(EvalError::io("create", dir))?;
    write_json(&dir.join("result.json"), r)
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), EvalError> {
    let mut text =
        serde_json::to_vec_pretty(value).map_err(|e| EvalError::io("encode", path)(e.into()))?;
    text.push(b'\n');
    runner_workspace::write_file(path, &text).map_err(EvalError::io("write", path))
}

/// The one way eval writes a line of its own to the terminal. Every such line carries
/// words of a task, a repository, a sandbox or a peer (a field name, a task's folder, what
/// a command printed), so every one goes through the display crate's escaping: an escape
/// sequence in a task's file is shown, never acted on.
fn say(text: &str) {
    eprintln!("runner: {}", runner_display::escape(text));
}

/// The live line: done / running / failed, resolved so far, elapsed, ETA; and the events
/// of the attempts, which it passes on to the caller's sink as they happen.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    running: AtomicUsize,
    resolved: AtomicUsize,
    failed: AtomicUsize,
    events: Arc<dyn EventSink>,
}

impl Progress {
    fn new(total: usize, show: bool, events: Arc<dyn EventSink>) -> Progress {
        let bar = show.then(|| {
            let bar = indicatif::ProgressBar::new(total as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {pos}/{len} done, {msg} (ETA {eta})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(500));
            bar
        });
        let p = Progress {
            bar,
            running: AtomicUsize::new(0),
            resolved: AtomicUsize::new(0),
            failed: AtomicUsize::new(0),
            events,
        };
        p.refresh();
        p
    }

    fn refresh(&self) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!(
                "{} running, {} failed, {} resolved",
                self.running.load(Ordering::Relaxed),
                self.failed.load(Ordering::Relaxed),
                self.resolved.load(Ordering::Relaxed)
            ));
        }
    }

    fn started(&self, task: &str, attempt: u32) {
        self.events.emit(&Event::AttemptStart {
            task: task.to_string(),
            attempt,
        });
        self.running.fetch_add(1, Ordering::Relaxed);
        self.refresh();
    }

    /// The attempt's result `r`, written into `dir`: its phases and its end.
    fn finished(&self, r: &TaskResult, dir: &Path, job: &Job) {
        let (harbor, setup) = match job {
            Job::Repo(t) => (false, t.setup.is_some()),
            Job::Harbor(_) => (true, false),
        };
        for phase in Event::phases(r, harbor, setup) {
            self.events.emit(&phase);
        }
        self.events.emit(&Event::attempt_end(r, dir));
        self.running.fetch_sub(1, Ordering::Relaxed);
        match r.status {
            Status::Resolved => self.resolved.fetch_add(1, Ordering::Relaxed),
            Status::Unresolved => 0,
            _ => self.failed.fetch_add(1, Ordering::Relaxed),
        };
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
        self.refresh();
    }

    /// A task's image made ahead of its attempts ([`images_ahead`]): its event, and a line
    /// when it was built now or could not be made.
    fn image(
        &self,
        task_dir: &Path,
        engine: Option<&str>,
        made: Result<(String, Duration, bool), EvalError>,
    ) {
        let on = engine.map(|e| format!(" on {e}")).unwrap_or_default();
        let event = match made {
            Ok((image, took, built)) => {
                if built {
                    self.note(&format!(
                        "image {image} for {}{on}: built in {:.1} s",
                        task_dir.display(),
                        took.as_secs_f64()
                    ));
                }
                Event::Image {
                    image: Some(image),
                    task_dir: task_dir.display().to_string(),
                    built,
                    seconds: took.as_secs_f64(),
                    engine: engine.map(str::to_string),
                    error: None,
                }
            }
            Err(e) => {
                self.note(&format!(
                    "the image for {}{on} could not be made ahead of its attempts (each tries again): {e}",
                    task_dir.display()
                ));
                Event::Image {
                    image: None,
                    task_dir: task_dir.display().to_string(),
                    built: false,
                    seconds: 0.0,
                    engine: engine.map(str::to_string),
                    error: Some(e.to_string()),
                }
            }
        };
        self.events.emit(&event);
    }

    fn abandoned(&self) {
        self.running.fetch_sub(1, Ordering::Relaxed);
        self.refresh();
    }

    /// An attempt tried again after the infrastructure failed it: `(retry, of)`.
    fn retrying(&self, task: &str, attempt: u32, (retry, of): (u32, u32), reason: &str) {
        self.note(&format!(
            "{task}: infrastructure failure, trying again ({retry}/{of}): {reason}"
        ));
        self.events.emit(&Event::AttemptRetry {
            task: task.to_string(),
            attempt,
            retry,
            of,
            reason: reason.to_string(),
        });
    }

    /// A line above the bar. It names tasks (from the task files) and quotes failures
    /// (what a command printed), so it is escaped.
    fn note(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(format!("runner: {}", runner_display::escape(text))),
            None => say(text),
        }
    }

    fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
