//! `runner eval run|summary`: flags in, [`crate::eval`] does the work.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::exit;
use super::signals::Signals;
use crate::display;
use crate::eval::{self, AgentKind, EvalOptions};
use crate::sandbox::BackendKind;

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
    /// The counts again, from what is on disk.
    Summary {
        /// The output folder of an `eval run` (its `--out`).
        dir: PathBuf,
        /// The summary as JSON.
        #[arg(long)]
        json: bool,
    },
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
    verifier_network: crate::eval::verifier_network::NetworkChoice,
    /// Where a Harbor task's agent (or its solution) may connect, for the whole run;
    /// default what the task says. Always through runner's proxy, and recorded.
    #[arg(long, value_name = "MODE", default_value = "task", value_parser = network_arg())]
    agent_network: crate::eval::verifier_network::NetworkChoice,
}

/// `--agent-network` and `--verifier-network`'s values, with their other spellings
/// (Harbor's `no-network`; `host` and `allowlist`, the verifier's flag's older values).
fn network_arg()
-> impl clap::builder::TypedValueParser<Value = crate::eval::verifier_network::NetworkChoice> {
    use crate::eval::verifier_network::NetworkChoice;
    use clap::builder::{PossibleValue, TypedValueParser};
    let values = NetworkChoice::ALL.map(|c| {
        PossibleValue::new(c.name())
            .aliases(c.aliases().iter().copied())
            .help(c.about())
    });
    clap::builder::PossibleValuesParser::new(values)
        .map(|s| NetworkChoice::parse(&s).expect("clap checked it is a listed value"))
}

pub fn run(cmd: EvalCommand) -> u8 {
    match cmd {
        EvalCommand::Summary { dir, json } => match eval::summary(&dir) {
            Ok(s) => {
                if json {
                    println!("{}", display::json_pretty(&s));
                } else {
                    println!("{}", summary_line(&s));
                }
                exit::OK
            }
            Err(e) => {
                eprintln!("runner: {}", display::escape(&e.to_string()));
                exit::FAILED
            }
        },
        EvalCommand::Report { dir } => match eval::report::write(&dir) {
            Ok(path) => {
                println!("{}", display::shown(path.display()));
                exit::OK
            }
            Err(e) => {
                eprintln!("runner: {}", display::escape(&e.to_string()));
                exit::FAILED
            }
        },
        EvalCommand::Run(args) => super::block_on_plain(run_eval(*args)),
    }
}

async fn run_eval(args: RunArgs) -> u8 {
    let mut options = EvalOptions::new(args.tasks, args.out.clone());
    options.model = args.model;
    options.agent = match args.agent.as_deref() {
        None => AgentKind::Model,
        Some("oracle") => AgentKind::Oracle,
        Some(other) => {
            eprintln!(
                "runner: --agent {other:?}: eval runs --model with runner's own loop, or --agent oracle"
            );
            return exit::USAGE;
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
    let secs = |v: Option<f64>, d| v.and_then(crate::eval::fields::seconds).unwrap_or(d);
    let d = options.timeouts;
    options.timeouts = crate::eval::tasks::Timeouts {
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
    // Ctrl-C stops new tasks and cancels the running ones; a second exits at once.
    let signals = Signals::listen(
        Some("stopping: running tasks are cancelled, finished ones are kept"),
        Box::new(|| {}),
    );
    let stop = signals.turn();
    match eval::run(options, stop.clone()).await {
        Ok(report) => {
            println!("{}", summary_line(&report.summary));
            println!("results: {}", args.out.join("summary.json").display());
            if report.unfinished > 0 {
                eprintln!(
                    "runner: stopped with {} attempts unfinished; run the same command again to finish them",
                    report.unfinished
                );
                return 130;
            }
            exit::OK
        }
        Err(e) => {
            eprintln!("runner: {}", display::escape(&e.to_string()));
            match e {
                // Options that cannot make an evaluation (no model, …): usage, as for `run`.
                eval::EvalError::Options(_) => exit::USAGE,
                _ => exit::FAILED,
            }
        }
    }
}

/// The counts in one line. A summary read back from disk (`eval summary DIR`) was written
/// where the tasks' own files live, so its model name is escaped with the rest.
fn summary_line(s: &eval::results::Summary) -> String {
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
    display::escape(&line).into_owned()
}
