//! The `docker` backend: the server runs as the main process of a hardened container that
//! sees only the worktree, and the controller speaks the protocol over the container's
//! attached stdin/stdout.

pub mod cleanup;
mod error;
pub use error::DockerError;
mod container;
pub mod engine;
pub mod image;
pub mod in_image;
mod shell;

use super::spec::SandboxSpec;
use super::{Sandbox, SandboxError};

pub use container::{LABEL, LABEL_BOOT, LABEL_CREATED, LABEL_OWNER, LABEL_RUN, open_container};
pub use shell::shell;

/// Where the server binary is mounted in every container.
pub const SERVER_PATH: &str = "/opt/runner/runner";

pub async fn open(spec: &SandboxSpec) -> Result<Sandbox, SandboxError> {
    let engine = engine::Engine::open(spec.docker.host.as_deref()).await?;
    engine::warn_unenforced(&engine);
    // Leftovers of runs that died without cleaning up go first, so they never pile up.
    let _ = cleanup::remove_orphans(&engine.docker).await;
    open_container(&engine, spec).await
}

/// A sandbox over an existing task container (an evaluation's Harbor task): the worktree is
/// a directory of that container's image, so nothing is mounted and no container is made.
pub async fn open_over(task: &in_image::TaskContainer) -> Result<Sandbox, SandboxError> {
    let _ = cleanup::remove_orphans(task.engine()).await;
    task.serve().await
}
