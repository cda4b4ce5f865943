//! Why a request to the container engine failed, outside a sandbox's own calls (those are
//! [`crate::SandboxError`]): connecting, asking for runtimes, building images, running a
//! task container's commands and moving its files.

use std::path::PathBuf;

pub use crate::engine_fault::EngineFault;
use crate::start_error::SandboxStartError;

#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// No engine to work with, or not the one asked for (connecting, a missing runtime).
    #[error(transparent)]
    Start(#[from] SandboxStartError),
    /// The engine answered `what` with an error.
    #[error("{what}: {source}")]
    Engine {
        what: String,
        #[source]
        source: bollard::errors::Error,
    },
    /// The engine did what runner cannot go on from (a detached exec, a build that made
    /// no image, a base that is not there); the message says what.
    #[error("{0}")]
    Unexpected(String),
    /// A file on the host for the engine could not be read or made.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A sandbox container could not be opened.
    #[error(transparent)]
    Sandbox(#[from] crate::SandboxError),
    /// A program runner runs for the engine (`mmdebstrap`) failed.
    #[error("{0}")]
    Program(String),
}

impl DockerError {
    /// `map_err(DockerError::engine("cannot create the shell"))`.
    pub fn engine(what: impl Into<String>) -> impl FnOnce(bollard::errors::Error) -> DockerError {
        let what = what.into();
        move |source| DockerError::Engine { what, source }
    }

    /// `map_err(DockerError::io("open", &path))`.
    pub fn io(
        action: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> DockerError {
        let path = path.to_path_buf();
        move |source| DockerError::Io {
            action,
            path,
            source,
        }
    }
}

/// Where a sandbox is being opened, an engine that fails a request is one that cannot
/// start it: no session was lost.
impl From<DockerError> for crate::SandboxError {
    fn from(e: DockerError) -> crate::SandboxError {
        match e {
            DockerError::Start(start) => crate::SandboxError::Start(start),
            DockerError::Sandbox(e) => e,
            // The engine failed the call itself: the kind goes along, so that whoever
            // gets this can tell a broken engine from a refusal.
            DockerError::Engine { what, source } if EngineFault::of(&source).is_some() => {
                SandboxStartError::Engine {
                    engine: "the container engine".into(),
                    step: what.strip_prefix("cannot ").unwrap_or(&what).to_string(),
                    reason: source.to_string(),
                    fault: EngineFault::of(&source),
                }
                .into()
            }
            other => crate::SandboxError::Start(SandboxStartError::EngineDown(other.to_string())),
        }
    }
}

impl DockerError {
    /// Whether the engine itself failed the call ([`EngineFault`]), wherever in this
    /// error that happened.
    pub fn engine_fault(&self) -> Option<EngineFault> {
        match self {
            DockerError::Engine { source, .. } => EngineFault::of(source),
            DockerError::Start(start) => start.engine_fault(),
            DockerError::Sandbox(e) => e.engine_fault(),
            DockerError::Unexpected(_) | DockerError::Io { .. } | DockerError::Program(_) => None,
        }
    }
}

impl SandboxStartError {
    /// The engine's own failure of a step of the start, if that is what stopped it.
    pub fn engine_fault(&self) -> Option<EngineFault> {
        match self {
            SandboxStartError::Engine { fault, .. } => *fault,
            _ => None,
        }
    }
}

impl crate::SandboxError {
    /// The engine's own failure, when that is why the sandbox could not start or a file
    /// could not be put in place. A server that went away mid-session says nothing of the
    /// engine (its commands may have killed it), so it is `None`.
    pub fn engine_fault(&self) -> Option<EngineFault> {
        match self {
            crate::SandboxError::Start(start) => start.engine_fault(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::errors::Error as B;

    fn status(code: u16) -> B {
        B::DockerResponseServerError {
            status_code: code,
            message: "x".into(),
        }
    }

    #[test]
    fn the_engines_own_failures_are_told_from_its_answers() {
        assert_eq!(
            EngineFault::of(&status(500)),
            Some(EngineFault::ServerError(500))
        );
        assert_eq!(
            EngineFault::of(&status(503)),
            Some(EngineFault::ServerError(503))
        );
        // An answer about the request: no such container, a conflict, a bad request.
        for code in [400, 404, 409] {
            assert_eq!(EngineFault::of(&status(code)), None, "{code}");
        }
        assert_eq!(
            EngineFault::of(&B::RequestTimeoutError),
            Some(EngineFault::Timeout)
        );
        let io = |kind| B::IOError {
            err: std::io::Error::from(kind),
        };
        assert_eq!(
            EngineFault::of(&io(std::io::ErrorKind::ConnectionReset)),
            Some(EngineFault::Connection)
        );
        assert_eq!(
            EngineFault::of(&io(std::io::ErrorKind::TimedOut)),
            Some(EngineFault::Timeout)
        );
        // What a build step printed as its error is the build's, not the engine's.
        let step = B::DockerStreamError {
            error: "The command '/bin/sh -c exit 7' returned a non-zero code: 7".into(),
        };
        assert_eq!(EngineFault::of(&step), None);
    }

    #[test]
    fn the_kind_survives_the_way_into_a_sandbox_error() {
        let copy = DockerError::engine("cannot copy files into /")(status(500));
        assert_eq!(copy.engine_fault(), Some(EngineFault::ServerError(500)));
        let sandbox = crate::SandboxError::from(copy);
        assert_eq!(sandbox.engine_fault(), Some(EngineFault::ServerError(500)));
        assert!(
            sandbox.to_string().contains("copy files into /"),
            "{sandbox}"
        );
        // Refusals stay refusals.
        let missing = DockerError::engine("cannot read /x")(status(404));
        assert_eq!(crate::SandboxError::from(missing).engine_fault(), None);
        let disconnected = crate::SandboxError::Disconnected("gone".into());
        assert_eq!(disconnected.engine_fault(), None);
    }
}
