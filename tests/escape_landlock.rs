//! Escape attacks against the `landlock` backend: the server confined by landlock, seccomp,
//! dropped capabilities, a private mount namespace and a cgroup, on this host.
//!
//! The attack table lives in `common/escape.rs` (shared with the docker suite); each group
//! below runs its whole table and lists every attack that got through. Attacks that are
//! known holes are skipped by the groups and each has an ignored test of its own that fails
//! until the hole is closed: run them with `cargo test --test escape_landlock -- --ignored`.

mod common;

use common::Backend;
use common::escape::{self, Group};

const BACKEND: Backend = Backend::Landlock;

/// Attacks that currently succeed against this backend (see the `hole_*` tests).
const HOLES: &[&str] = &[];

#[tokio::test(flavor = "multi_thread")]
async fn filesystem() {
    escape::run_group(BACKEND, Group::Filesystem, HOLES).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn proc() {
    escape::run_group(BACKEND, Group::Proc, HOLES).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn env() {
    escape::run_group(BACKEND, Group::Env, HOLES).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn network() {
    escape::run_group(BACKEND, Group::Network, HOLES).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn privileges() {
    escape::run_group(BACKEND, Group::Privileges, HOLES).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn git() {
    escape::run_group(BACKEND, Group::Git, HOLES).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn signals() {
    escape::run_group(BACKEND, Group::Signals, HOLES).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn limits() {
    escape::run_limits(BACKEND).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn positive_controls() {
    escape::run_controls(BACKEND).await;
}
