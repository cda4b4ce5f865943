//! `[network.hosts."NAME"] programs`: only the named executables reach a host, judged by
//! the file each connection's process was started from, on landlock and on docker (the
//! attacks and controls are in `crates/test-support/src/allowlist.rs`).

use crate::common;

use common::Backend;

#[test]
fn landlock_only_named_programs_reach_a_host() {
    common::allowlist::only_named_programs_reach_a_host(Backend::Landlock);
}

#[test]
fn docker_only_named_programs_reach_a_host() {
    common::allowlist::only_named_programs_reach_a_host(Backend::Docker);
}
