//! `runner eval`: many tasks, each in its own sandbox, with results a harness can trust.
//!
//! This file is the crate's face: what a caller uses is named here, the work is in the
//! modules. [`EvalOptions`] ([`options`]) says what to run; [`run`] ([`scheduler`]) runs it
//! and returns a [`Report`]; [`summary`] reads one back from disk.
//!
//! The pieces: [`tasks`] reads JSON-lines task sets and [`harbor`] Harbor task folders,
//! [`worktree`] fills each attempt's private [`runner_workspace::Workspace`], [`attempt`]
//! runs setup, the agent and the verifier (and [`harbor_attempt`] a Harbor task's stages in
//! its own image), [`engines`] spreads the attempts over the Docker engines, and [`results`]
//! keeps what came of them on disk and sums it up. The scheduler decides which attempts
//! run, when, and how often: `--jobs` at once, retries for infrastructure failures only, a
//! pause while the engine keeps failing, and a resume that skips what is already finished.
//! [`environment`] is the other way round: Harbor's own harness runs the trial, and runner
//! serves it a task's container (`runner eval environment`, behind the Python plug-in).
//!
//! Across machines: [`shard`] cuts an evaluation into N shards by a hash of each task's id
//! (`--shard K/N`), each writing a folder of its own; [`merge`] joins shard folders into one
//! results folder; [`slurm`] runs the shards as a Slurm job array and follows it.

pub mod attempt;
pub mod engines;
pub mod environment;
mod error;
pub mod events;
pub mod fields;
pub mod folder;
pub mod harbor;
pub mod harbor_attempt;
pub mod images;
pub mod merge;
pub mod options;
pub mod report;
pub mod results;
pub mod scheduler;
pub mod shard;
pub mod slurm;
pub mod tasks;
pub mod terminal_bench;
mod verdict;
pub mod verifier_network;
pub mod worktree;

pub use error::EvalError;
pub use options::{AgentKind, EvalOptions};
pub use scheduler::{Outcome, Report, run, summary};
