//! Every integration test that can share a process, in one test binary: the shared
//! fixture (`common`) is compiled once and the runner library linked once, instead of
//! once per file. Each file is a module of its own, named as before.
//!
//! The suites of the other engines (`engine_runsc`, `escape_podman`, `podman_rootless`)
//! are modules here too: a test chooses its engine for its own thread
//! (`common::engine::use_engine`), so they run beside the machine engine's tests instead
//! of after them. One suite is a binary of its own: `sandbox_cleanup` ends every runner
//! container on the machine (`--all --yes`), which would pull sandboxes from under the
//! tests beside it.

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
mod engine_runsc;
mod escape_docker;
mod escape_landlock;
mod escape_podman;
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
mod podman_rootless;
mod private_tmp;
mod python_sandbox;
mod sandbox_start;
mod symlink_escape;
mod terminal_output;
mod third_party_agent;
mod tool_snapshots;
mod user_tools;
mod wall_self_test;
mod workspace;
