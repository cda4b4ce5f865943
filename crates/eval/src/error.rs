//! Why an evaluation, or one attempt of it, could not go on.
//!
//! An attempt's error becomes its result's `error` (with the phase it happened in), never
//! a score: the harness can tell a task the agent failed from one the machine could not
//! run. An error of the whole evaluation (its options, its output folder, its sets) stops
//! it before any attempt runs.

use std::path::PathBuf;

use runner_sandbox::SandboxError;
use runner_sandbox::docker::{DockerError, EngineFault};

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The options cannot make an evaluation (no model, no attempts, no wall that ends
    /// an attempt's processes).
    #[error("{0}")]
    Options(String),
    /// A task or task set cannot be used; the message names the file or the field.
    #[error("{0}")]
    Task(String),
    /// The output folder holds another evaluation's results.
    #[error("{0}")]
    NotOurs(String),
    /// A file of the evaluation could not be read or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The verifier left no reward, or one that cannot be read.
    #[error(transparent)]
    Reward(#[from] super::harbor::BadReward),
    /// A task's image could not be built or found.
    #[error("{0}")]
    Image(String),
    /// The engine did not answer a call within this many seconds.
    #[error("the engine did not answer within {0} s")]
    EngineTimeout(u64),
    /// The step `what` failed for this reason.
    #[error("{what}: {source}")]
    Step {
        what: String,
        #[source]
        source: Box<EvalError>,
    },
    #[error(transparent)]
    Profile(#[from] runner_agent::config::profile::ProfileError),
    #[error(transparent)]
    Settings(#[from] runner_agent::config::settings::SettingsError),
    #[error(transparent)]
    Trust(#[from] runner_sandbox::trust::TrustError),
    #[error(transparent)]
    Workspace(#[from] runner_workspace::Error),
    #[error(transparent)]
    Docker(#[from] DockerError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The sandbox failed at `what` (running a command, putting a file in place).
    #[error("{what}: {source}")]
    InSandbox {
        what: String,
        #[source]
        source: SandboxError,
    },
    /// The agent's run could not start.
    #[error(transparent)]
    Agent(#[from] runner_agent::start::StartError),
    /// The attempt's session could not be opened.
    #[error(transparent)]
    Session(#[from] runner_agent::session::OpenError),
    /// A task that opens a sandbox or fills a worktree off the async threads died.
    #[error("{what} failed: {source}")]
    Join {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
}

impl EvalError {
    /// The same error, said to be what made `what` fail.
    pub fn during(self, what: impl Into<String>) -> EvalError {
        EvalError::Step {
            what: what.into(),
            source: Box::new(self),
        }
    }

    /// Whether the engine itself failed a call somewhere in this error (a 5xx, a broken
    /// connection, no answer in time): then the attempt is the machine's failure and worth
    /// another try, whatever phase it was in. The kind travels with the error from
    /// bollard's; a message is never read for it.
    pub fn engine_fault(&self) -> Option<EngineFault> {
        match self {
            EvalError::EngineTimeout(_) => Some(EngineFault::Timeout),
            EvalError::Docker(e) => e.engine_fault(),
            EvalError::Sandbox(e) | EvalError::InSandbox { source: e, .. } => e.engine_fault(),
            EvalError::Step { source, .. } => source.engine_fault(),
            EvalError::Agent(e) => e.engine_fault(),
            EvalError::Session(e) => e.engine_fault(),
            _ => None,
        }
    }

    /// `map_err(EvalError::io("write", &path))`.
    pub fn io(
        action: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> EvalError {
        let path = path.to_path_buf();
        move |source| EvalError::Io {
            action,
            path,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine_500(what: &str) -> EvalError {
        DockerError::engine(what)(bollard::errors::Error::DockerResponseServerError {
            status_code: 500,
            message: "boom".into(),
        })
        .into()
    }

    #[test]
    fn an_engine_fault_is_found_however_deep_the_steps_wrap_it() {
        let wrapped = engine_500("cannot copy files into /")
            .during("cannot start the task container")
            .during("the agent's turn");
        assert_eq!(wrapped.engine_fault(), Some(EngineFault::ServerError(500)));
        assert_eq!(
            EvalError::EngineTimeout(300).engine_fault(),
            Some(EngineFault::Timeout)
        );
        let through_sandbox = EvalError::Sandbox(SandboxError::from(DockerError::engine(
            "cannot start the task container",
        )(
            bollard::errors::Error::RequestTimeoutError,
        )));
        assert_eq!(through_sandbox.engine_fault(), Some(EngineFault::Timeout));
        // Not the engine: the task's, the agent's, a server that went away.
        assert_eq!(EvalError::Task("no step ran".into()).engine_fault(), None);
        let gone = EvalError::InSandbox {
            what: "the sandbox failed during the command".into(),
            source: SandboxError::Disconnected("eof".into()),
        };
        assert_eq!(gone.engine_fault(), None);
    }
}
