//! The task's image and the container the attempt works in.
//!
//! The image is built from the task's `environment/Dockerfile` (or its prebuilt
//! `docker_image` pulled), once per engine for the same files and bases, with what happened
//! in the attempt's `build.log`. The attempt's workspace sits over the image (its worktree
//! is the image's `WORKDIR`) and takes the base the diff is taken against before anything
//! runs. The container's recipe lays the task's limits over the profile's and has the
//! allow-list proxy only where a phase may reach anything. The attempt owns the container,
//! and removes it off the async threads when it is done, whatever way it ends.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use runner_sandbox::docker::in_image::{TaskContainer, TaskImage};
use runner_sandbox::spec::{Limits, Network};
use runner_workspace::{Workspace, write_file};
use tokio_util::sync::CancellationToken;

use super::network::proxied_phases;
use crate::attempt;
use crate::engines::Engine;
use crate::harbor::HarborTask;
use crate::images;
use crate::results::TaskResult;
use crate::verdict::{self, Verdict, infra};
use crate::{EvalError, EvalOptions};

/// Harbor's default limits for the phases a task does not set.
const BUILD_TIMEOUT: Duration = Duration::from_secs(600);

/// What an attempt works in: its workspace (removed when the attempt is done) and its task
/// container (removed off the async threads).
pub(super) struct Prepared {
    pub(super) removing: attempt::Removing,
    pub(super) owner: Owned,
    /// Where config files are looked for on the host (an empty folder).
    pub(super) scratch: std::path::PathBuf,
    /// Where full tool outputs are saved, readable in the container.
    pub(super) outputs: std::path::PathBuf,
}

/// The task's image, the attempt's workspace over it and its container, with the base the
/// diff is taken against. `Err`: the attempt ends here (`None` when it was stopped).
pub(super) async fn prepare(
    task: &HarborTask,
    attempt: u32,
    out: &Path,
    options: &EvalOptions,
    engine: &Engine,
    result: &mut TaskResult,
    stop: &CancellationToken,
) -> Result<Prepared, Option<Verdict>> {
    // The image. A stop during a build ends it: the engine cancels a build whose client
    // went away.
    let setup_limit = task
        .environment
        .build_timeout
        .unwrap_or(BUILD_TIMEOUT)
        .mul_f64(options.timeout_multiplier);
    let image = build_image(task, engine, setup_limit, out, result, stop).await?;
    // The attempt's workspace: the worktree is the image's; on the host, the session's
    // root (where config files are looked for: none, the task's files are in the image)
    // and the folder where full tool outputs are saved.
    let name = format!("{}-{attempt}", task.id);
    // The image's worktree is the same in every container of it: read once per engine.
    let workdir = task.environment.workdir.as_deref();
    // The first attempt at the image takes the base while the others made ready with it
    // wait, then find it.
    let mut turn = Some(engine.base_turn(&image, workdir).await);
    let shared = engine.base(&image, workdir);
    if shared.is_some() {
        turn = None;
    }
    let ws = Workspace::for_image_sharing(&options.out.join(".work"), &name, &image, shared)
        .map_err(|e| infra(result.clone(), "prepare", e, false))?;
    let (scratch, outputs) = (ws.work(), ws.outputs());
    let removing = attempt::Removing(Some(ws));
    let image_name = image.clone();
    let spec = task_image(task, image, options, engine, &outputs)
        .map_err(|e| infra(result.clone(), "prepare", e, false))?;
    // The one long-lived handle is the owner's, so that the container is removed where it
    // says (off the async threads), not wherever the last clone happens to go.
    let owner = create_container(engine, &spec)
        .await
        .map_err(|(e, retryable)| {
            verdict::failed(result.clone(), "prepare", e, Some(engine), retryable)
        })?;
    let container = owner.container();
    // The base only serves the diff: without one the attempt still runs.
    let ws = removing.workspace();
    ws.take_base(container).await;
    if let Some(base) = ws.taken_base() {
        engine.keep_base(&image_name, workdir, base);
    }
    drop(turn);
    Ok(Prepared {
        removing,
        owner,
        scratch,
        outputs,
    })
}

/// The task's image: built from its `environment/Dockerfile`, or its prebuilt
/// `docker_image`, reused when the engine already has it (or this run made it already,
/// ahead of the attempts); what happened is the attempt's `build.log`. `Err`: the attempt
/// ends here (`None` when it was stopped).
async fn build_image(
    task: &HarborTask,
    engine: &Engine,
    limit: Duration,
    out: &Path,
    result: &mut TaskResult,
    stop: &CancellationToken,
) -> Result<String, Option<Verdict>> {
    let built = tokio::select! {
        b = made_image(task, engine, limit) => b,
        _ = stop.cancelled() => return Err(None),
    };
    let log = match &built {
        // The first attempt to take an image built in this run tells of the build.
        Ok(made) if matches!(made.built, images::Built::Fresh(_)) && made.claim() => {
            result.timings.build_ms = made.took.as_millis() as u64;
            made.log.clone()
        }
        Ok(made) if matches!(made.built, images::Built::Fresh(_)) => format!(
            "{} was built in this run for the same files and bases ({:.1} s); nothing more was built\n",
            made.built.image(),
            made.took.as_secs_f64()
        ),
        Ok(made) => format!(
            "{} was already on the engine (built or pulled before for the same files and bases); nothing was built\n",
            made.built.image()
        ),
        Err((e, log)) => format!("{log}\n{e}\n"),
    };
    let _ = write_file(&out.join("build.log"), log.as_bytes());
    match built {
        Ok(made) => Ok(made.built.image().to_string()),
        Err((e, _)) => {
            // A step that failed fails again; an engine that went away may not.
            let retryable = !crate::engines::alive(Some(engine)).await;
            Err(verdict::failed(
                result.clone(),
                "build",
                e,
                Some(engine),
                retryable,
            ))
        }
    }
}

/// The task's image on `engine`, made once in this run ([`images::Builder::for_task`]):
/// by whichever comes first of the build ahead of the attempts ([`image_ahead`]) and the
/// task's first attempt.
async fn made_image(
    task: &HarborTask,
    engine: &Engine,
    limit: Duration,
) -> Result<Arc<images::Made>, (EvalError, String)> {
    let make = || async {
        let mut log = String::new();
        let built = match (&task.build_context, &task.environment.docker_image) {
            (Some(context), _) => {
                // The context is a folder of its own beneath the task's.
                match task.folder.sub(context).map_err(images::task_error) {
                    Ok(context) => engine.builder.image_logged(&context, limit, &mut log).await,
                    Err(e) => Err(e),
                }
            }
            (None, Some(image)) => engine.builder.prebuilt(image, limit).await,
            (None, None) => Err(EvalError::Task(format!(
                "{} has neither environment/Dockerfile nor docker_image",
                task.dir.display()
            ))),
        };
        match built {
            Ok(b) => Ok((b, log)),
            Err(e) => Err((e, log)),
        }
    };
    engine.builder.for_task(&task.dir, make).await
}

/// The task's image made on `engine` ahead of its attempts (they find it made, or wait for
/// it): the image, how long it took, and whether it was built (or pulled) now rather than
/// found. `Err`: why it could not be made (its attempts try again, each in its turn).
pub async fn image_ahead(
    task: &HarborTask,
    engine: &Engine,
    options: &EvalOptions,
) -> Result<(String, Duration, bool), EvalError> {
    let limit = task
        .environment
        .build_timeout
        .unwrap_or(BUILD_TIMEOUT)
        .mul_f64(options.timeout_multiplier);
    match made_image(task, engine, limit).await {
        Ok(made) => Ok((
            made.built.image().to_string(),
            made.took,
            matches!(made.built, images::Built::Fresh(_)),
        )),
        Err((e, _)) => Err(e),
    }
}

/// The task's container, created (not started) and owned by the attempt. `Err`: why (its
/// kind kept: an engine that failed the call), and whether another try could go
/// differently (an engine that went away).
async fn create_container(engine: &Engine, spec: &TaskImage) -> Result<Owned, (EvalError, bool)> {
    let container = {
        let _engine = crate::engines::CALLS.acquire().await;
        TaskContainer::create(&engine.described, spec).await
    };
    match container {
        Ok(c) => Ok(Owned(Some(Arc::new(c)))),
        Err(e) => Err((e.into(), !crate::engines::alive(Some(engine)).await)),
    }
}

/// The container's recipe: the task's limits over the profile's; no network, or the
/// allow-list proxy where a phase may reach anything.
fn task_image(
    task: &HarborTask,
    image: String,
    options: &EvalOptions,
    engine: &Engine,
    outputs: &Path,
) -> Result<TaskImage, EvalError> {
    let profile = runner_agent::config::profile::load(&options.profile)?;
    let mut spec =
        runner_sandbox::spec::SandboxSpec::new(runner_sandbox::BackendKind::Docker, outputs)
            .map_err(EvalError::io(
                "find the runner executable at",
                Path::new("/proc/self/exe"),
            ))?;
    profile.sandbox.apply(&mut spec);
    if let Some(r) = &options.runtime {
        spec.docker.runtime = vec![r.clone()];
    }
    // The task's commands and its verifier trust what the host trusts.
    let (settings, _) =
        runner_agent::config::settings::Settings::load(outputs, options.config.as_deref())?;
    let e = &task.environment;
    let limits = Limits {
        memory_bytes: e.memory_bytes.unwrap_or(spec.limits.memory_bytes),
        cpus: e.cpus.unwrap_or(spec.limits.cpus),
        ..spec.limits
    };
    Ok(TaskImage {
        image,
        workdir: e.workdir.clone(),
        user: task.agent.user.clone(),
        env: e.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        limits,
        network: if proxied_phases(task, options).0 {
            Network::Allowlist
        } else {
            Network::None
        },
        read_only: vec![outputs.to_path_buf()],
        server_exe: options.server_exe.clone().unwrap_or(spec.server_exe),
        engine_is_local: engine.local,
        runtime: spec.docker.runtime,
        // In a container, the engine mounts from its own host: the bundle goes where the
        // out folder is, as the server does.
        ca_bundle: if runner_sandbox::spec::in_container() {
            settings.ca_bundle_in(&options.out.join(".server"))?
        } else {
            settings.ca_bundle()?
        },
        verifier_proxy: proxied_phases(task, options).1,
    })
}

/// The task container, removed off the async threads when the attempt is done.
pub(super) struct Owned(Option<Arc<TaskContainer>>);

impl Owned {
    /// The container, there until the owner is dropped.
    #[expect(
        clippy::expect_used,
        reason = "only Drop takes the container out; the Option is for that take"
    )]
    pub(super) fn container(&self) -> &Arc<TaskContainer> {
        self.0
            .as_ref()
            .expect("the container is there until its owner is dropped")
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            crate::engines::CLOSING.spawn(async move {
                let _engine = crate::engines::CALLS.acquire().await;
                let _ = tokio::task::spawn_blocking(move || drop(c)).await;
            });
        }
    }
}
