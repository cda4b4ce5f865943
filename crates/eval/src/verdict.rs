//! How an attempt ends, written once for both kinds of task: the infrastructure's failure
//! (no verdict; maybe worth another try), the agent's own end (a timeout, a sandbox it
//! brought down), or the verifier's judgement. runner's task files are judged by the verify
//! command's exit status, Harbor's by the rewards `test.sh` writes; everything around the
//! score (a verifier past its limit, one that died under code the agent wrote, an engine
//! that went away) means the same for both.

use std::path::Path;
use std::time::{Duration, Instant};

use super::EvalError;
use super::engines::Engine;
use super::results::{Status, TaskResult, VerifierEnd};
use runner_agent::End;
use runner_workspace::write_file;

/// Whether a failure is the infrastructure's (worth another try) or the task's own.
pub struct Verdict {
    pub result: TaskResult,
    pub retryable: bool,
}

/// How the verifier's run went, whatever ran it.
pub(super) enum Verified {
    Ran {
        log: Vec<u8>,
        /// The verifier's exit status, when it ended by itself.
        exit: Option<i64>,
        timed_out: bool,
        score: Score,
    },
    /// The verifier could not run to its end: its sandbox or container died, or the engine.
    Failed(EvalError),
    Interrupted,
}

/// What the verifier said of the work.
pub(super) enum Score {
    /// A runner task's verify command: exit status 0 resolves it.
    Exit(Option<i32>),
    /// A Harbor task's rewards, by name, with their file, or why `test.sh` left none.
    Rewards(Result<super::harbor::Written, EvalError>),
}

/// An attempt that ends as the infrastructure's failure: no verdict, and `retryable` says
/// whether another try could go differently.
pub(super) fn infra(
    mut result: TaskResult,
    phase: &str,
    error: impl std::fmt::Display,
    retryable: bool,
) -> Option<Verdict> {
    result.status = Status::InfraError;
    result.phase = Some(phase.into());
    result.error = Some(error.to_string());
    Some(Verdict { result, retryable })
}

/// An attempt that ends on `error`. When the engine itself failed a call in it (a 5xx, a
/// broken connection, no answer in time), that is the engine's failure whatever the phase
/// and whatever `retryable` says: named with the engine and the call, and worth another
/// try. Any other error is the infrastructure's failure as the caller judged it.
pub(super) fn failed(
    result: TaskResult,
    phase: &str,
    error: EvalError,
    engine: Option<&Engine>,
    retryable: bool,
) -> Option<Verdict> {
    match error.engine_fault() {
        Some(fault) => infra(result, phase, engine_failure(engine, fault, &error), true),
        None => infra(result, phase, error, retryable),
    }
}

/// What an attempt's result says of an engine that failed one of its calls: which engine,
/// how it failed, and the call (the error names what was being done).
fn engine_failure(
    engine: Option<&Engine>,
    fault: runner_sandbox::docker::EngineFault,
    error: &EvalError,
) -> String {
    let engine = engine.map_or_else(
        || "the container engine".to_string(),
        |e| e.described.describe(),
    );
    format!(
        "the engine failed a call, not the agent: {engine}: {fault}: {error}. runner tries such an attempt again; if this repeats, check the engine (`runner sandbox doctor`, the engine's log)"
    )
}

/// An attempt's result folder, empty: what an interrupted earlier try left there (no
/// result.json, or it would not run again) is stale.
pub(super) fn fresh_dir(out: &Path) -> Result<(), EvalError> {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).map_err(EvalError::io("create", out))
}

/// What the agent's end makes of the attempt: a timeout, the agent's own error (it brought
/// its sandbox down), or (`Err`) the infrastructure's failure (the provider, a dead engine).
pub(super) async fn judge_end(
    result: &mut TaskResult,
    end: Option<&End>,
    timed_out: bool,
    limit: Duration,
    engine: Option<&super::engines::Engine>,
) -> Result<(), Option<Verdict>> {
    if timed_out {
        result.status = Status::Timeout;
        result.phase = Some("agent".into());
        result.error = Some(format!("the agent ran past {} s", limit.as_secs()));
        return Ok(());
    }
    match end {
        Some(End::ProviderError(m)) => Err(infra(result.clone(), "agent", m.clone(), true)),
        Some(End::SandboxError(m)) => {
            // The agent's own commands can bring its sandbox down; a dead engine cannot
            // be blamed on it.
            if super::engines::alive(engine).await {
                result.status = Status::AgentError;
                result.phase = Some("agent".into());
                result.error = Some(m.clone());
                Ok(())
            } else {
                Err(infra(
                    result.clone(),
                    "agent",
                    format!("the engine failed: {m}"),
                    true,
                ))
            }
        }
        _ => Ok(()),
    }
}

/// Records the agent's changes as `diff.patch`, or why there are none: a timed-out or
/// crashed agent still gets its diff recorded.
pub(super) fn record_patch(result: &mut TaskResult, out: &Path, patch: Result<Vec<u8>, EvalError>) {
    match patch {
        Ok(patch) => {
            let _ = write_file(&out.join("diff.patch"), &patch);
        }
        Err(e) => result.diff_error = Some(e.to_string()),
    }
}

/// Writes the agent's changes in a workspace on the host into `path` as git makes them,
/// never holding the patch whole; no file is left when there is none.
pub(super) fn stream_patch(ws: &runner_workspace::Workspace, path: &Path) -> Result<(), EvalError> {
    let file = std::fs::File::create(path).map_err(EvalError::io("write", path))?;
    ws.write_git_patch(file).map_err(|e| {
        let _ = std::fs::remove_file(path);
        EvalError::from(e)
    })
}

/// The verdict when the agent's end already decided the attempt (it ran past its limit, or
/// brought its own sandbox down): nothing is left to verify.
pub(super) fn decided_by_the_agent(
    result: &mut TaskResult,
    started: Instant,
) -> Option<Option<Verdict>> {
    if !matches!(result.status, Status::Timeout | Status::AgentError) {
        return None;
    }
    result.timings.total_ms = started.elapsed().as_millis() as u64;
    Some(Some(Verdict {
        result: result.clone(),
        retryable: false,
    }))
}

/// The attempt's verdict from the verifier's run; its log is kept as `verify.log`.
/// `None`: the run was interrupted.
pub(super) async fn conclude(
    mut result: TaskResult,
    verified: Verified,
    out: &Path,
    limit: Duration,
    engine: Option<&Engine>,
) -> Option<Verdict> {
    match verified {
        Verified::Interrupted => None,
        Verified::Ran {
            log,
            exit,
            timed_out,
            score,
        } => {
            let _ = write_file(&out.join("verify.log"), &log);
            let mut reward_file = None;
            if timed_out {
                result.status = Status::Timeout;
                result.phase = Some("verify".into());
                result.error = Some(format!("verify ran past {} s", limit.as_secs()));
            } else {
                reward_file = score_into(&mut result, score);
            }
            if result.status != Status::Resolved {
                result.verifier = Some(VerifierEnd {
                    reward_file,
                    ..VerifierEnd::of(exit, &log)
                });
            }
            Some(Verdict {
                result,
                retryable: false,
            })
        }
        // An engine call the engine itself failed (copying the tests in, starting the
        // container again, reading the reward) says nothing of the agent's work.
        Verified::Failed(e) if e.engine_fault().is_some() => {
            failed(result, "verify", e, engine, true)
        }
        // The verifier runs code the agent wrote, in what the agent left: if it dies under
        // that code while the engine is fine, that is the agent's doing.
        Verified::Failed(e) if super::engines::alive(engine).await => {
            result.status = Status::AgentError;
            result.phase = Some("verify".into());
            result.error = Some(e.to_string());
            Some(Verdict {
                result,
                retryable: false,
            })
        }
        Verified::Failed(e) => infra(result, "verify", format!("the engine failed: {e}"), true),
    }
}

/// Status and reward from the score: resolved only when every reward is at least 1 (or the
/// command exited 0). Returns the reward file the verdict was read from.
fn score_into(result: &mut TaskResult, score: Score) -> Option<super::harbor::RewardFile> {
    match score {
        Score::Exit(code) => {
            let resolved = code == Some(0);
            result.status = if resolved {
                Status::Resolved
            } else {
                Status::Unresolved
            };
            result.reward = Some(if resolved { 1.0 } else { 0.0 });
            None
        }
        Score::Rewards(Ok(super::harbor::Written { rewards: map, file })) => {
            let least = map.values().copied().fold(f64::INFINITY, f64::min);
            result.status = if least >= 1.0 {
                Status::Resolved
            } else {
                Status::Unresolved
            };
            result.reward = Some(map.get("reward").copied().unwrap_or(least));
            if map.len() > 1 || !map.contains_key("reward") {
                result.rewards = map;
            }
            file
        }
        // test.sh that ends without a reward judged nothing: the task is not solved, and
        // the log says why.
        Score::Rewards(Err(e)) => {
            result.status = Status::Unresolved;
            result.reward = Some(0.0);
            result.phase = Some("verify".into());
            result.error = Some(e.to_string());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy_failed(status_code: u16) -> EvalError {
        let e = bollard::errors::Error::DockerResponseServerError {
            status_code,
            message: "boom".into(),
        };
        EvalError::from(runner_sandbox::docker::DockerError::engine(
            "cannot copy files into /",
        )(e))
    }

    #[test]
    fn an_engine_fault_is_retried_and_named_whatever_the_caller_judged() {
        let result = TaskResult::new("t", 1, "oracle".into());
        let v = failed(result.clone(), "agent", copy_failed(500), None, false).unwrap();
        assert!(v.retryable);
        assert_eq!(v.result.status, Status::InfraError);
        assert_eq!(v.result.phase.as_deref(), Some("agent"));
        let error = v.result.error.unwrap();
        assert!(error.contains("not the agent"), "{error}");
        assert!(error.contains("status 500"), "{error}");
        assert!(error.contains("cannot copy files into /"), "{error}");
        // A refusal keeps the caller's judgement and its own words.
        let v = failed(result, "agent", copy_failed(404), None, false).unwrap();
        assert!(!v.retryable);
        assert!(!v.result.error.unwrap().contains("not the agent"));
    }
}
