//! The `docker` backend: the server runs as the main process of a hardened container that
//! sees only the worktree, and the controller speaks the protocol over the container's
//! attached stdin/stdout.

pub mod cleanup;
mod error;
pub use error::{DockerError, EngineFault};
mod container;
pub mod engine;
pub mod image;
pub mod in_image;
mod shell;

use std::path::{Path, PathBuf};

use super::spec::SandboxSpec;
use super::{Sandbox, SandboxError};

pub use container::{
    LABEL, LABEL_BOOT, LABEL_CREATED, LABEL_OWNER, LABEL_OWNER_START, LABEL_RUN, open_container,
    wait_gone,
};
pub use shell::exec;

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

/// Copies this executable to `dir/runner` (mode 0755, written whole or not at all) for
/// sandbox containers to mount when runner runs in a container ([`crate::spec::IN_CONTAINER_ENV`]):
/// `dir` must be at the same path on the engine's host. A copy of an earlier run is
/// replaced, never changed in place: a container still mounting it keeps the file it had.
pub fn server_copy(dir: &Path) -> Result<PathBuf, DockerError> {
    use std::os::unix::fs::PermissionsExt;
    let exe = std::env::current_exe().map_err(DockerError::io(
        "find the runner executable at",
        Path::new("/proc/self/exe"),
    ))?;
    std::fs::create_dir_all(dir).map_err(DockerError::io("create", dir))?;
    let dest = dir.join("runner");
    let made = (|| {
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        std::io::copy(&mut std::fs::File::open(&exe)?, tmp.as_file_mut())?;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o755))?;
        tmp.persist(&dest).map_err(|e| e.error)?;
        std::io::Result::Ok(())
    })();
    made.map_err(DockerError::io(
        "copy the runner executable for the sandbox containers to mount to",
        &dest,
    ))?;
    Ok(dest)
}
