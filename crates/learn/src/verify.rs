//! Every call of the trail put to the gate's own verdict under the learned rules: an
//! allowed one must come out allowed, a denied one must not. The gate is the judge, not a
//! model of it, so file spellings and a command's other spellings count as they do in a
//! session.

use std::path::Path;
use std::sync::Arc;

use runner_permission::PermissionRequest;
use runner_permission::gate::{PolicyAsker, RuleGate};
use runner_permission::rules::{Action, Rule};

use crate::narrow;
use crate::trail::{Call, Observed};

/// The calls the rules decide otherwise than the trail shows.
pub fn mismatches<'a>(
    observed: &'a Observed,
    rules: &[Rule],
    worktree: &Path,
    home: Option<&Path>,
) -> Vec<&'a Call> {
    let gate = RuleGate::new(
        worktree,
        rules.to_vec(),
        Arc::new(PolicyAsker::deny(
            "learned rules are checked with asks refused",
        )),
    );
    observed
        .calls
        .iter()
        .filter(|call| !call.subjects.is_empty())
        .filter(|call| {
            let mut request =
                PermissionRequest::new(&call.permission, call.subjects.clone(), Vec::new());
            if call.permission == "bash" {
                request.deny_spellings = call
                    .subjects
                    .iter()
                    .map(|s| (s.clone(), narrow::deny_spellings(s, worktree, home)))
                    .filter(|(_, others)| !others.is_empty())
                    .collect();
            }
            let allowed = gate.verdict(&request).action == Action::Allow;
            allowed != call.allowed
        })
        .collect()
}

/// A call the rules cannot reproduce, for the file's header and the error.
pub fn describe(call: &Call) -> String {
    let shown = if call.allowed { "allowed" } else { "denied" };
    format!(
        "{} {:?} ({} in the trails) is not {shown} by these rules: its subjects are decided otherwise in other calls",
        call.permission, call.subjects, shown
    )
}
