//! Why a request to the container engine failed, outside a sandbox's own calls (those are
//! [`crate::SandboxError`]): connecting, asking for runtimes, building images, running a
//! task container's commands and moving its files.

use std::path::PathBuf;

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
            other => crate::SandboxError::Start(SandboxStartError::EngineDown(other.to_string())),
        }
    }
}
