//! `runner eval run|summary`: flags in, [`runner_eval`] does the work.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand, ValueEnum};

mod shards;

use super::exit;
use super::signals::Signals;
use runner_agent::events::{JsonLines, NoEvents};
use runner_eval::events::{Event, EventSink};
use runner_eval::{AgentKind, EvalOptions, Outcome};
use runner_sandbox::BackendKind;

#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// Run task sets, each task in its own sandbox, into an output folder.
    Run(Box<RunArgs>),
    /// Write DIR/report.html (self-contained: summary, a filterable table, each task's
    /// diff, verify log and transcript) and print its path.
    Report {
        /// The output folder of an `eval run` (its `--out`).
        dir: PathBuf,
    },
    /// Join the results of shards (`eval run --shard K/N`) into one folder: one summary,
    /// one predictions file and one report; a missing or half-written shard is named.
    Merge(shards::MergeArgs),
    /// Run the evaluation as a Slurm job array, one element per shard, follow it, and
    /// merge the shards into --out; run it again to finish what did not.
    Submit(Box<shards::SubmitArgs>),
    /// The counts again, from what is on disk.
    Summary {
        /// The output folder of an `eval run` (its `--out`).
        dir: PathBuf,
        /// The summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve one Harbor task environment over standard input and output (JSON lines) to
    /// Harbor's `runner_sandbox.harbor:RunnerEnvironment`; see docs/EVALUATIONS.md.
    Environment,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Task sets: JSON-lines files (one task a line: id, instruction, repo, commit,
    /// setup, verify, tests_dir, image, timeouts), or Harbor task folders (one task, or a
    /// folder of them).
    #[arg(required = true)]
    tasks: Vec<PathBuf>,
    /// Where results go; a rerun with the same folder skips finished tasks.
    #[arg(long)]
    out: PathBuf,
    /// provider/model for runner's own agent loop.
    #[arg(long)]
    model: Option<String>,
    /// `oracle` runs each task's reference solution instead of a model.
    #[arg(long)]
    agent: Option<String>,
    /// Tasks at once (default: the number of cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// The isolation backend (default: the profile's; docker for `eval`).
    #[arg(long = "sandbox", value_parser = super::backend_arg())]
    backend: Option<BackendKind>,
    /// The profile each task's sandbox and rules start from (a name or a profile TOML
    /// file); `eval`: docker, no network, and what the rules would ask is denied.
    #[arg(long, default_value = "eval")]
    profile: String,
    /// The sandbox image for tasks that do not name their own.
    #[arg(long)]
    image: Option<String>,
    /// The OCI runtime of the sandbox containers (`runsc` for gVisor, `runc`, `default`);
    /// default: the profile's, else the engine's.
    #[arg(long, value_name = "NAME")]
    runtime: Option<String>,
    /// A runner TOML config or an OpenCode JSON config, read after the user's, for
    /// every task (providers, rules, tools).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Attempts per task (pass@k is reported for k up to this).
    #[arg(long, default_value_t = 1)]
    attempts: u32,
    /// Seconds for setup, in tasks that do not set their own (default 600).
    #[arg(long)]
    setup_timeout: Option<f64>,
    /// Seconds for the agent, in tasks that do not set their own (default 1800).
    #[arg(long)]
    agent_timeout: Option<f64>,
    /// Seconds for verify, in tasks that do not set their own (default 600).
    #[arg(long)]
    verify_timeout: Option<f64>,
    /// Scales every task's timeouts.
    #[arg(long, default_value_t = 1.0)]
    timeout_multiplier: f64,
    /// Model turns per attempt before the agent is stopped (the attempt is then scored
    /// as it stands).
    #[arg(long, default_value_t = 100)]
    max_steps: u32,
    /// A Docker engine to run tasks on (`unix:///path/docker.sock`, `tcp://host:2375`);
    /// repeat it to spread tasks over several, by their free CPUs. Default: DOCKER_HOST
    /// or the local socket.
    #[arg(long = "docker-host", value_name = "HOST")]
    docker_hosts: Vec<String>,
    /// Build every task image again (once in this run), not trusting an image of the same
    /// content already on the engine.
    #[arg(long)]
    rebuild: bool,
    /// The engine network task images' `RUN` steps use: for an engine started without a
    /// default bridge (`dockerd --bridge none`), where the default has none to give.
    #[arg(long, value_name = "NAME")]
    build_network: Option<String>,
    /// Where a Harbor task's verifier may connect (its test tools' installers), for the
    /// whole run; default what the task says. Always through runner's proxy, and
    /// recorded in the attempt.
    #[arg(long, value_name = "MODE", default_value = "task", value_parser = network_arg())]
    verifier_network: runner_eval::verifier_network::NetworkChoice,
    /// Where a Harbor task's agent (or its solution) may connect, for the whole run;
    /// default what the task says. Always through runner's proxy, and recorded.
    #[arg(long, value_name = "MODE", default_value = "task", value_parser = network_arg())]
    agent_network: runner_eval::verifier_network::NetworkChoice,
    /// Events as JSON lines on stdout (run_start, load_problem, attempt_start, phase,
    /// attempt_end, run_end; docs/EVALUATIONS.md), for a harness; the lines for a person
    /// go to stderr.
    #[arg(long)]
    json: bool,
    /// Exit non-zero (10) for what is otherwise a verdict: `unresolved`, any attempt not
    /// resolved, for CI that wants red on it.
    #[arg(long, value_name = "WHAT", value_enum)]
    fail_on: Option<FailOn>,
    /// Run only the K-th of N shards (from 1: `--shard 2/8`), the tasks whose id hashes
    /// to it, into OUT/shards/K-of-N; `eval merge` joins the shards.
    #[arg(long, value_name = "K/N")]
    shard: Option<runner_eval::shard::Shard>,
}

/// `--fail-on`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FailOn {
    /// Any attempt that was not resolved (unresolved, agent_error, timeout).
    Unresolved,
}

/// `--agent-network` and `--verifier-network`'s values, with their other spellings
/// (Harbor's `no-network`; `host` and `allowlist`, the verifier's flag's older values).
fn network_arg()
-> impl clap::builder::TypedValueParser<Value = runner_eval::verifier_network::NetworkChoice> {
    use clap::builder::{PossibleValue, TypedValueParser};
    use runner_eval::verifier_network::NetworkChoice;
    let values = NetworkChoice::ALL.map(|c| {
        PossibleValue::new(c.name())
            .aliases(c.aliases().iter().copied())
            .help(c.about())
    });
    clap::builder::PossibleValuesParser::new(values).try_map(|s| {
        NetworkChoice::parse(&s).ok_or_else(|| format!("{s} is not one of the values listed"))
    })
}

pub fn run(cmd: EvalCommand) -> u8 {
    match cmd {
        EvalCommand::Summary { dir, json } => match runner_eval::summary(&dir) {
            Ok(s) => {
                if json {
                    println!("{}", runner_display::json_pretty(&s));
                } else {
                    println!("{}", summary_line(&s));
                }
                exit::OK
            }
            Err(e) => {
                eprintln!("runner: {}", runner_display::escape(&e.to_string()));
                exit::FAILED
            }
        },
        EvalCommand::Report { dir } => match runner_eval::report::write(&dir) {
            Ok(path) => {
                println!("{}", runner_display::shown(path.display()));
                exit::OK
            }
            Err(e) => {
                eprintln!("runner: {}", runner_display::escape(&e.to_string()));
                exit::FAILED
            }
        },
        EvalCommand::Run(args) => super::block_on_plain(run_eval(*args)),
        EvalCommand::Merge(args) => shards::merge(args),
        EvalCommand::Submit(args) => super::block_on_plain(shards::submit(*args)),
        EvalCommand::Environment => super::block_on_plain(async {
            match runner_eval::environment::serve::serve().await {
                Ok(()) => exit::OK,
                Err(e) => {
                    eprintln!("runner: eval environment: {e}");
                    exit::FAILED
                }
            }
        }),
    }
}

async fn run_eval(args: RunArgs) -> u8 {
    let (json, fail_on) = (args.json, args.fail_on);
    let events: Arc<dyn EventSink> = if json {
        Arc::new(JsonLines::new(std::io::stdout()))
    } else {
        Arc::new(NoEvents)
    };
    let options = match options_of(args) {
        Ok(o) => o,
        Err(message) => return failed(&*events, exit::USAGE, &message),
    };
    // A shard's results are in its own folder under --out.
    let out = options.out.clone();
    // Ctrl-C stops new tasks and cancels the running ones; a second exits at once.
    let signals = Signals::listen(
        Some("stopping: running tasks are cancelled, finished ones are kept"),
        Box::new(|| {}),
    );
    let stop = signals.turn();
    match runner_eval::run(options, stop.clone(), events.clone()).await {
        Ok(report) => finish(&report, fail_on, &out, json, &*events),
        Err(e) => {
            let code = match e {
                // Options that cannot make an evaluation (no model, …): usage, as for `run`.
                runner_eval::EvalError::Options(_) => exit::USAGE,
                _ => exit::FAILED,
            };
            failed(&*events, code, &e.to_string())
        }
    }
}

/// The evaluation's options from the flags; `Err`: a flag no evaluation can take.
fn options_of(args: RunArgs) -> Result<EvalOptions, String> {
    let mut options = EvalOptions::new(args.tasks, args.out);
    options.model = args.model;
    options.agent = match args.agent.as_deref() {
        None => AgentKind::Model,
        Some("oracle") => AgentKind::Oracle,
        Some(other) => {
            return Err(format!(
                "--agent {other:?}: eval runs --model with runner's own loop, or --agent oracle"
            ));
        }
    };
    if let Some(j) = args.jobs {
        options.jobs = j;
    }
    options.backend = args.backend;
    options.profile = args.profile;
    options.image = args.image;
    options.runtime = args.runtime;
    options.config = args.config;
    options.attempts = args.attempts;
    options.timeout_multiplier = args.timeout_multiplier;
    let secs = |v: Option<f64>, d| v.and_then(runner_eval::fields::seconds).unwrap_or(d);
    let d = options.timeouts;
    options.timeouts = runner_eval::tasks::Timeouts {
        setup: secs(args.setup_timeout, d.setup),
        agent: secs(args.agent_timeout, d.agent),
        verify: secs(args.verify_timeout, d.verify),
    };
    options.max_steps = args.max_steps;
    options.docker_hosts = args.docker_hosts;
    options.rebuild = args.rebuild;
    options.verifier_network = args.verifier_network;
    options.agent_network = args.agent_network;
    options.build_network = args.build_network;
    options.progress = std::io::stderr().is_terminal();
    if let Some(shard) = args.shard {
        runner_eval::shard::apply(&mut options, shard);
    }
    Ok(options)
}

/// A run that could not start or go on: its words on stderr, and under `--json` one
/// `error` event, so a harness reading stdout is never left with nothing.
fn failed(events: &dyn EventSink, code: u8, message: &str) -> u8 {
    eprintln!("runner: {}", runner_display::escape(message));
    events.emit(&Event::Error {
        code,
        message: message.to_string(),
    });
    code
}

/// The summary (stdout, or stderr under `--json`, where stdout is the events'), why the
/// status is not 0 when it is not, and `run_end`.
fn finish(
    report: &runner_eval::Report,
    fail_on: Option<FailOn>,
    out: &std::path::Path,
    json: bool,
    events: &dyn EventSink,
) -> u8 {
    let outcome = report.outcome(fail_on == Some(FailOn::Unresolved));
    finish_as(report, outcome, out, json, events, None)
}

/// [`finish`] for an outcome already judged (a merge's, which also weighs its shards),
/// with why it is not 0 when the caller knows better (`None`: the run's reasons).
fn finish_as(
    report: &runner_eval::Report,
    outcome: Outcome,
    out: &std::path::Path,
    json: bool,
    events: &dyn EventSink,
    why: Option<String>,
) -> u8 {
    let code = match outcome {
        Outcome::Stopped => exit::INTERRUPTED,
        Outcome::Empty => exit::EVAL_EMPTY,
        Outcome::Incomplete => exit::EVAL_INCOMPLETE,
        Outcome::Unresolved => exit::EVAL_UNRESOLVED,
        Outcome::Verdicts => exit::OK,
    };
    let lines = [
        summary_line(&report.summary),
        format!(
            "results: {}",
            runner_display::shown(out.join("summary.json").display())
        ),
    ];
    for line in lines.iter().filter(|_| outcome != Outcome::Empty) {
        if json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
    if let Some(why) = why.or_else(|| why_not_zero(report, outcome)) {
        eprintln!("runner: {why} (exit {code})");
    }
    events.emit(&Event::RunEnd {
        summary: report.summary.clone(),
        unfinished: report.unfinished,
        load_problems: report.load_problems,
        exit_code: code,
    });
    code
}

/// Why a run's status is not 0, in a line.
fn why_not_zero(report: &runner_eval::Report, outcome: Outcome) -> Option<String> {
    let count = |s: runner_eval::results::Status| report.summary.counts.get(s.name()).copied();
    let infra = count(runner_eval::results::Status::InfraError).unwrap_or(0);
    let resolved = count(runner_eval::results::Status::Resolved).unwrap_or(0);
    Some(match outcome {
        Outcome::Verdicts => return None,
        Outcome::Stopped => format!(
            "stopped with {} attempts unfinished; run the same command again to finish them",
            report.unfinished
        ),
        Outcome::Empty => "the task sets hold no task: nothing ran".into(),
        Outcome::Incomplete => format!(
            "not every attempt reached a verdict ({infra} infra_error in the summary, {} load problems said above): the counts are not the agent's whole score",
            report.load_problems
        ),
        Outcome::Unresolved => format!(
            "--fail-on unresolved: {} of {} attempts were not resolved",
            report.summary.attempts - resolved,
            report.summary.attempts
        ),
    })
}

/// The counts in one line. A summary read back from disk (`eval summary DIR`) was written
/// where the tasks' own files live, so its model name is escaped with the rest.
fn summary_line(s: &runner_eval::results::Summary) -> String {
    let counts: Vec<String> = s
        .counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    let mut line = format!(
        "{} tasks, {} attempts: {}; resolved {:.1}%",
        s.tasks,
        s.attempts,
        if counts.is_empty() {
            "nothing run".to_string()
        } else {
            counts.join(", ")
        },
        s.resolved_rate * 100.0
    );
    for (k, v) in &s.pass_at {
        line.push_str(&format!(", pass@{k} {:.1}%", v * 100.0));
    }
    line.push_str(&format!(
        "; tokens in {} out {} cached {}",
        s.usage.input, s.usage.output, s.usage.cache_read
    ));
    runner_display::escape(&line).into_owned()
}
