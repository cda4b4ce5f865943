//! A workspace whose worktree lives inside a task's image (a Harbor task's `WORKDIR`).
//!
//! The image is built first, so it sets the worktree up and the session works in it
//! without a copy. What the workspace adds is what a copy on the host has: a base taken
//! before anything runs (a snapshot of the created container's worktree, which is the
//! image's), the work measured against it (a second snapshot, once every process in the
//! container is dead), and the run's folders on the host, gone with it. The patch is the
//! review renderer's, as for `runner changes`: there is no repository of ours to give git.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::diff::{Snapshot, diff};
use super::{Error, Place, Workspace, owned_folder};
use runner_sandbox::docker::in_image::TaskContainer;

/// The largest worktree snapshot read for the patch.
const SNAPSHOT_LIMIT: u64 = 512 << 20;
/// How long reading a snapshot may take before the engine counts as not answering.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(300);

/// The worktree as it was before anything ran, or why there is none.
#[derive(Default)]
pub struct Base(OnceLock<Result<Snapshot, Error>>);

impl Workspace {
    /// An owned workspace for a worktree in a task container: the host folders now (the
    /// container mounts `outputs/`), the base once the container exists
    /// ([`Self::take_base`]).
    pub fn for_image(parent: &Path, name: &str, image: &str) -> Result<Workspace, Error> {
        Self::for_image_sharing(parent, name, image, None)
    }

    /// [`Self::for_image`] over a base another workspace took from a container of the same
    /// image and worktree (`None`: a base of its own). Many attempts at one image then
    /// read its worktree once.
    pub fn for_image_sharing(
        parent: &Path,
        name: &str,
        image: &str,
        base: Option<Arc<Base>>,
    ) -> Result<Workspace, Error> {
        let dir = owned_folder(parent, name)?;
        let root = dir.path().join("work");
        std::fs::create_dir(&root).map_err(Error::io("create", &root))?;
        Self::owned(dir, image, Place::Image(base.unwrap_or_default()))
    }

    /// The base, once one was taken: for [`Self::for_image_sharing`].
    pub fn taken_base(&self) -> Option<Arc<Base>> {
        match &self.place {
            Place::Image(base) if matches!(base.0.get(), Some(Ok(_))) => Some(base.clone()),
            _ => None,
        }
    }

    /// Takes the base from the created, not yet started container. Without one the run
    /// still goes ahead; its patch then says why there is none.
    pub async fn take_base(&self, container: &TaskContainer) {
        let Place::Image(base) = &self.place else {
            return;
        };
        // Taken already, by a workspace it shares the base with.
        if base.0.get().is_some() {
            return;
        }
        let taken = if container.workdir() == Path::new("/") {
            Err(Error::NoSnapshot(
                "the worktree is the whole file system (the image names no WORKDIR): no diff is taken".into(),
            ))
        } else {
            snapshot(container).await
        };
        let _ = base.0.set(taken);
    }

    /// Why this workspace will have no patch, known before the run.
    fn no_base(&self) -> Option<String> {
        match &self.place {
            Place::Image(base) => match base.0.get() {
                Some(Ok(_)) => None,
                Some(Err(e)) => Some(e.to_string()),
                None => Some("no snapshot of the worktree was taken before the run".into()),
            },
            Place::Host => None,
        }
    }

    /// The changes in the (stopped) container since the base, as a review patch.
    pub async fn image_patch(&self, container: &TaskContainer) -> Result<Vec<u8>, Error> {
        let Place::Image(base) = &self.place else {
            return self.diff(super::PatchFormat::Review);
        };
        let base = match base.0.get() {
            Some(Ok(b)) => b,
            _ => return Err(Error::NoSnapshot(self.no_base().unwrap_or_default())),
        };
        let after = snapshot(container).await?;
        Ok(diff(base, &after).into_bytes())
    }
}

async fn snapshot(container: &TaskContainer) -> Result<Snapshot, Error> {
    let workdir = container.workdir();
    let download = tokio::time::timeout(
        SNAPSHOT_TIMEOUT,
        container.download(workdir, SNAPSHOT_LIMIT),
    );
    let tar = download
        .await
        .map_err(|_| {
            Error::NoSnapshot(format!(
                "the engine did not answer within {} s",
                SNAPSHOT_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| Error::NoSnapshot(e.to_string()))?
        .ok_or_else(|| {
            Error::NoSnapshot(format!(
                "the worktree {} is not in the container",
                workdir.display()
            ))
        })?;
    tokio::task::spawn_blocking(move || Snapshot::read(&tar))
        .await
        .map_err(|_| Error::Panicked("reading the snapshot"))?
}
