//! Every integration test that can share a process, in one test binary: the shared
//! fixture (`common`) is compiled once and the runner library linked once, instead of
//! once per file. Each file is a module of its own, named as before.
//!
//! Four suites are binaries of their own because they change or sweep what the whole
//! process uses: `engine_runsc`, `escape_podman` and `podman_rootless` choose the engine
//! every sandbox of the process runs on (`common::engine::use_engine`), and
//! `sandbox_cleanup` ends every runner container on the machine (`--all --yes`), which would pull
//! sandboxes from under the tests beside it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test's panic is its failure report"
)]

mod agent;
mod apply_patch_scenarios;
mod architecture;
mod audit_trail;
mod backends_agree;
mod cli;
mod container_image;
mod docs;
mod escape_docker;
mod escape_landlock;
mod escape_webfetch;
mod eval;
mod eval_engine_faults;
mod eval_events;
mod eval_harbor;
mod eval_network;
mod eval_pool;
mod eval_report;
mod eval_slurm;
mod exec;
mod harbor_env;
mod hooks;
mod interactive_exec;
mod lifecycle;
mod lsp;
mod mcp;
mod mcp_serve;
mod network;
mod network_inspect;
mod network_programs;
mod permission_attacks;
mod permission_boundary;
mod permission_gate;
mod permission_learn;
mod python_sandbox;
mod sandbox_start;
mod symlink_escape;
mod terminal_output;
mod third_party_agent;
mod tool_snapshots;
mod user_tools;
mod wall_self_test;
mod workspace;
