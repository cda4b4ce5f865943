//! The wall a served sandbox is: a session's (`runner run`'s wall around a worktree, with
//! its proxy and audit trail), or a task image's container, whose own file system is the
//! worktree and whose root may switch users (as `runner eval` runs a Harbor task).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use runner_agent::session::{OpenError, OpenSession, SessionAsker, SessionOptions};
use runner_permission::gate::PolicyAsker;
use runner_sandbox::docker::in_image::{TaskContainer, TaskImage};
use runner_sandbox::spec::{Network, SandboxSpec};
use runner_tool::Conversation;

use crate::command::Users;

/// How long building a task image may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// A task image to serve instead of a worktree.
#[derive(Debug, Clone, Default)]
pub struct TaskImageOptions {
    /// An image on the engine.
    pub image: Option<String>,
    /// A folder with a `Dockerfile`, built by runner's engine (the image's name is the
    /// hash of the folder, so a second start reuses it).
    pub build: Option<PathBuf>,
    /// Where commands start; default the image's `WORKDIR`.
    pub workdir: Option<String>,
    /// Who commands run as; default the image's `USER`.
    pub user: Option<String>,
}

/// Why the sandbox did not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenFailure {
    #[error(transparent)]
    Session(#[from] OpenError),
    /// The engine, the image's build or the task container.
    #[error("{0}")]
    TaskImage(String),
}

/// An open sandbox and what it is.
pub struct Opened {
    pub session: OpenSession,
    pub users: Users,
    /// Kept until the session is gone: the container is removed when it is dropped.
    pub container: Option<Arc<TaskContainer>>,
}

/// Opens the session `options` describe, over a task image's container when `task` names
/// one. Asks are refused: nobody is there to answer them while a harness drives.
pub async fn open(
    mut options: SessionOptions,
    task: Option<TaskImageOptions>,
) -> Result<Opened, OpenFailure> {
    let asker = PolicyAsker::deny(
        "a harness drives this sandbox and nobody can answer; allow the host under [permission.network] in the config",
    );
    options.asker = Some(SessionAsker(Arc::new(asker)));
    options.require_git_for_direct = false;
    options.private_worktree = true;
    let container = match task {
        Some(task) => Some(task_container(&options, &task).await?),
        None => None,
    };
    options.in_image = container.clone();
    let session = options.open(Conversation::new(session_id())).await?;
    let users = match container {
        Some(_) => Users::Switch,
        None => Users::One,
    };
    Ok(Opened {
        session,
        users,
        container,
    })
}

fn session_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("stdio-{}-{nanos:08x}", std::process::id())
}

/// The task image's container, created (not started): the image taken or built, the
/// profile's limits, runtime and network.
async fn task_container(
    options: &SessionOptions,
    task: &TaskImageOptions,
) -> Result<Arc<TaskContainer>, OpenFailure> {
    let failed =
        |what: &str, e: &dyn std::fmt::Display| OpenFailure::TaskImage(format!("{what}: {e}"));
    let profile =
        runner_agent::config::profile::load(options.profile.as_deref().unwrap_or("default"))
            .map_err(OpenError::from)?;
    let spec: SandboxSpec = options.spec(&profile)?;
    let engine = runner_sandbox::docker::engine::Engine::open(spec.docker.host.as_deref())
        .await
        .map_err(|e| failed("cannot reach the container engine", &e))?;
    let image = match (&task.build, &task.image) {
        (Some(dir), _) => {
            let builder = runner_eval::images::Builder::new(engine.docker.clone(), 1);
            let built = builder
                .image_for(dir, BUILD_TIMEOUT)
                .await
                .map_err(|e| failed(&format!("cannot build {}", dir.display()), &e))?;
            built.image().to_string()
        }
        (None, Some(image)) => image.clone(),
        (None, None) => {
            return Err(OpenFailure::TaskImage(
                "a task image needs --task-image IMAGE or --build DIR".into(),
            ));
        }
    };
    let recipe = TaskImage {
        image,
        workdir: task.workdir.clone(),
        user: task.user.clone(),
        env: Vec::new(),
        limits: spec.limits,
        network: match spec.network {
            Network::Allowlist => Network::Allowlist,
            _ => Network::None,
        },
        read_only: Vec::new(),
        server_exe: spec.server_exe.clone(),
        ca_bundle: spec.ca_bundle.clone(),
        verifier_proxy: false,
        engine_is_local: engine.host.starts_with("unix://"),
        runtime: spec.docker.runtime.clone(),
    };
    let container = TaskContainer::create(&engine, &recipe)
        .await
        .map_err(|e| failed("cannot create the task container", &e))?;
    Ok(Arc::new(container))
}
