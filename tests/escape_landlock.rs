//! Escape attacks against the `landlock` backend: the server confined by landlock, seccomp,
//! dropped capabilities, a private mount namespace and a cgroup, on this host.
//!
//! The attack table lives in `common/escape.rs` (shared with the docker suite); each group
//! (one test each, from `escape_suite!`) runs its whole table and lists every attack that
//! got through. No attack is a known hole today (`holes: &[]`).

mod common;

use common::Backend;
use common::escape;

const BACKEND: Backend = Backend::Landlock;

escape::escape_suite!(BACKEND, holes: &[]);

/// The side-door table again, through `runner tool call` as an unprivileged user: the
/// mounts that keep `.git` read-only then need an unprivileged user namespace.
#[test]
fn git_side_doors_as_an_unprivileged_user() {
    common::side_doors::run_unprivileged();
}

/// The saved-output attacks with runner run by an unprivileged user: landlock without root
/// must hold them too.
#[test]
fn saved_outputs_of_other_sessions_as_an_unprivileged_user() {
    common::saved_outputs::attacks_unprivileged();
}
