//! Task images built through the Engine API, named by the content of their build context
//! and the images it starts `FROM` (`runner-task:<hash>`), so an unchanged task is built
//! once and then found, and a base tagged anew (a rebuilt stand-in, a newer release under
//! the same tag) makes a new build instead of a stale image. Two tasks
//! with the same context never build it at the same time (the second waits and finds the
//! first's image), and a separate bound keeps builds from crowding out the engine.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::BuildImageOptionsBuilder;
use futures_util::StreamExt;
use tokio::sync::Semaphore;

use super::EvalError;
use super::folder::{Entry, Folder, Kind};
use runner_sandbox::docker::{DockerError, EngineFault};

/// How a build went, for whoever counts builds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Built {
    /// Built now.
    Fresh(String),
    /// Found from an earlier build.
    Cached(String),
}

impl Built {
    pub fn image(&self) -> &str {
        match self {
            Built::Fresh(i) | Built::Cached(i) => i,
        }
    }
}

pub struct Builder {
    docker: Docker,
    builds: Semaphore,
    /// One lock per image name.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// `--rebuild`: every image is built (or pulled) again, once per run, whatever the
    /// engine already has under its name. The names done so far.
    rebuild: Option<Mutex<std::collections::HashSet<String>>>,
    /// The network `RUN` steps get; `None`: the engine's default bridge.
    network: Option<String>,
    /// Each task's image as this run made (or found) it, by the task's folder: made once,
    /// by the build ahead of the attempts or by the first attempt that needs it, whichever
    /// comes first; the others wait for it and take it.
    tasks: Mutex<HashMap<std::path::PathBuf, Arc<tokio::sync::OnceCell<Arc<Made>>>>>,
}

/// A task's image as this run made it ([`Builder::for_task`]).
#[derive(Debug)]
pub struct Made {
    pub built: Built,
    /// What the build printed (empty when nothing was built).
    pub log: String,
    /// How long it took to build, pull or find.
    pub took: Duration,
    claimed: std::sync::atomic::AtomicBool,
}

impl Made {
    /// True for the first attempt that asks: the one whose `build.log` and `build` time
    /// carry a build made in this run.
    pub fn claim(&self) -> bool {
        !self.claimed.swap(true, std::sync::atomic::Ordering::SeqCst)
    }
}

/// The most of one build's output kept for its attempt's `build.log`.
const BUILD_LOG_LIMIT: usize = 2 << 20;

impl Builder {
    pub fn new(docker: Docker, concurrent_builds: usize) -> Builder {
        Builder {
            docker,
            builds: Semaphore::new(concurrent_builds.max(1)),
            locks: Mutex::new(HashMap::new()),
            rebuild: None,
            network: None,
            tasks: Mutex::new(HashMap::new()),
        }
    }

    /// The image of the task whose folder is `task`, made by `make` once in this run (the
    /// image and what the build printed); a caller that comes while it is being made waits
    /// for it. A failure is not kept: the next caller makes it again (an engine that failed
    /// may answer then). `Err`: the failure and what the build printed before it.
    pub async fn for_task<F, Fut>(
        &self,
        task: &Path,
        make: F,
    ) -> Result<Arc<Made>, (EvalError, String)>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(Built, String), (EvalError, String)>>,
    {
        let cell = self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(task.to_path_buf())
            .or_default()
            .clone();
        cell.get_or_try_init(|| async {
            let started = std::time::Instant::now();
            let (built, log) = make().await?;
            Ok(Arc::new(Made {
                built,
                log,
                took: started.elapsed(),
                claimed: Default::default(),
            }))
        })
        .await
        .cloned()
    }

    /// Builds with `RUN` steps on the engine network `name` (`runner eval run
    /// --build-network`): an engine started without a default bridge has no `bridge`
    /// network to give them.
    pub fn on_network(mut self, name: Option<&str>) -> Builder {
        self.network = name.map(str::to_string);
        self
    }

    /// Builds (or pulls) each image again once in this run, not trusting what the engine
    /// has (`runner eval run --rebuild`).
    pub fn rebuilding(mut self, rebuild: bool) -> Builder {
        self.rebuild = rebuild.then(Default::default);
        self
    }

    /// Whether `image` may come from the engine as it is: always, unless rebuilding and
    /// not yet rebuilt in this run.
    async fn found(&self, image: &str) -> bool {
        let stale = self.rebuild.as_ref().is_some_and(|done| {
            !done
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(image)
        });
        !stale && self.docker.inspect_image(image).await.is_ok()
    }

    /// Notes `image` as made in this run.
    fn made(&self, image: &str) {
        if let Some(done) = &self.rebuild {
            done.lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(image.to_string());
        }
    }

    /// The image for `context` (a folder with a `Dockerfile`), built if it is not there.
    pub async fn image_for(&self, context: &Path, timeout: Duration) -> Result<Built, EvalError> {
        let context = Folder::open(context).map_err(task_error)?;
        self.image_logged(&context, timeout, &mut String::new())
            .await
    }

    /// [`Self::image_for`], with the build's output (when it builds) added to `log`. The
    /// context is read beneath its folder: a link that leaves it fails the build, naming
    /// the link; one that stays is packed as a link.
    pub async fn image_logged(
        &self,
        context: &Folder,
        timeout: Duration,
        log: &mut String,
    ) -> Result<Built, EvalError> {
        let files = files_under(context, Path::new(""))?;
        let bases = self.bases(context).await;
        let tag = format!("runner-task:{}", hash(context, &files, &bases)?);
        let lock = self
            .locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(tag.clone())
            .or_default()
            .clone();
        let _same_image = lock.lock().await;
        if self.found(&tag).await {
            return Ok(Built::Cached(tag));
        }
        let _slot = self
            .builds
            .acquire()
            .await
            .map_err(|_| EvalError::Image("the image builder was shut down".into()))?;
        let tar = pack(context, &files)?;
        tokio::time::timeout(timeout, self.build(&tag, tar, log))
            .await
            .map_err(|_| {
                EvalError::Image(format!(
                    "building the image of {} ran past {} s",
                    context.path().display(),
                    timeout.as_secs()
                ))
            })??;
        self.made(&tag);
        Ok(Built::Fresh(tag))
    }

    /// Each image the Dockerfile starts `FROM`, with the engine's id for it (`None`: not on
    /// the engine yet; the build pulls it). A name built from an `ARG` is left out: what it
    /// becomes is in the Dockerfile, which the hash already covers.
    async fn bases(&self, context: &Folder) -> Vec<(String, Option<String>)> {
        let text = context
            .read_string(Path::new("Dockerfile"))
            .unwrap_or_default();
        let mut out = Vec::new();
        for name in from_images(&text) {
            let id = self
                .docker
                .inspect_image(&name)
                .await
                .ok()
                .and_then(|i| i.id);
            out.push((name, id));
        }
        out
    }

    /// A prebuilt image (`[environment] docker_image`): found on the engine, else pulled.
    pub async fn prebuilt(&self, image: &str, timeout: Duration) -> Result<Built, EvalError> {
        let lock = self
            .locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(image.to_string())
            .or_default()
            .clone();
        let _same_image = lock.lock().await;
        if self.found(image).await {
            return Ok(Built::Cached(image.to_string()));
        }
        let _slot = self
            .builds
            .acquire()
            .await
            .map_err(|_| EvalError::Image("the image builder was shut down".into()))?;
        let (from, tag) = split_reference(image);
        let opts = bollard::query_parameters::CreateImageOptionsBuilder::new()
            .from_image(from)
            .tag(tag)
            .build();
        let pull = async {
            let mut stream = self.docker.create_image(Some(opts), None, None);
            while let Some(item) = stream.next().await {
                item.map_err(|e| {
                    EvalError::Image(format!(
                        "{image} is not on the engine and cannot be pulled: {e}"
                    ))
                })?;
            }
            Ok::<(), EvalError>(())
        };
        tokio::time::timeout(timeout, pull).await.map_err(|_| {
            EvalError::Image(format!("pulling {image} ran past {} s", timeout.as_secs()))
        })??;
        self.made(image);
        Ok(Built::Fresh(image.to_string()))
    }

    async fn build(&self, tag: &str, tar: Vec<u8>, log: &mut String) -> Result<(), EvalError> {
        let mut opts = BuildImageOptionsBuilder::new()
            .dockerfile("Dockerfile")
            .t(tag)
            .rm(true)
            .forcerm(true)
            .labels(&HashMap::from([("runner.task-image", "1")]));
        if let Some(network) = &self.network {
            opts = opts.networkmode(network);
        }
        let opts = opts.build();
        let mut stream = self
            .docker
            .build_image(opts, None, Some(bollard::body_full(tar.into())));
        // The last lines of output explain a failed step.
        let mut tail: Vec<String> = Vec::new();
        while let Some(item) = stream.next().await {
            // The engine failing the call keeps its kind (worth another try); anything
            // else is the build's own failure, said with the last lines it printed.
            let info = item.map_err(|e| match EngineFault::of(&e) {
                Some(_) => DockerError::engine(format!("cannot build {tag}"))(e).into(),
                None => failed(tag, &e.to_string(), &tail),
            })?;
            if let Some(line) = info.stream {
                if log.len() < BUILD_LOG_LIMIT {
                    log.push_str(&line);
                }
                for l in line.lines().filter(|l| !l.trim().is_empty()) {
                    tail.push(l.to_string());
                    if tail.len() > 15 {
                        tail.remove(0);
                    }
                }
            }
            if let Some(detail) = info.error_detail {
                let message = detail.message.unwrap_or_else(|| "unknown error".into());
                return Err(failed(tag, &message, &tail));
            }
        }
        if self.docker.inspect_image(tag).await.is_err() {
            return Err(failed(tag, "the build ended without an image", &tail));
        }
        Ok(())
    }
}

/// `repo[:tag]` as the pull API wants it; a `:` in a registry's port is not a tag, and a
/// digest (`@sha256:…`) goes whole.
fn split_reference(image: &str) -> (&str, &str) {
    if image.contains('@') {
        return (image, "");
    }
    match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, tag),
        _ => (image, "latest"),
    }
}

fn failed(tag: &str, error: &str, tail: &[String]) -> EvalError {
    EvalError::Image(format!(
        "building {tag} failed: {}\n{}",
        error.trim(),
        tail.join("\n")
    ))
}

/// Every file and link below `rel` in `folder` (links not followed, none leaving the
/// folder), relative to `rel`, in a stable order: a build context to hash and pack, or
/// hidden tests to put in place.
pub(super) fn files_under(folder: &Folder, rel: &Path) -> Result<Vec<Entry>, EvalError> {
    let entries = folder.walk_inside(rel).map_err(task_error)?;
    Ok(entries
        .into_iter()
        .filter(|e| e.kind != Kind::Dir)
        .collect())
}

/// All of `reader` into `h`, a piece at a time (a file of a task may be large).
pub(super) fn feed(h: &mut sha2::Sha256, mut reader: impl Read) -> std::io::Result<()> {
    use sha2::Digest;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match reader.read(&mut buf)? {
            0 => return Ok(()),
            n => h.update(&buf[..n]),
        }
    }
}

/// A task's folder that cannot be read as it is: the task's failure, with the path.
pub(super) fn task_error(e: super::folder::FolderError) -> EvalError {
    EvalError::Task(e.to_string())
}

/// The images a Dockerfile's `FROM` lines name, in order: not the build's own stages
/// (`FROM builder`), nor a name made from an `ARG`.
fn from_images(dockerfile: &str) -> Vec<String> {
    let mut stages: Vec<String> = Vec::new();
    let mut images = Vec::new();
    for line in dockerfile.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if !words
            .first()
            .is_some_and(|w| w.eq_ignore_ascii_case("FROM"))
        {
            continue;
        }
        let mut rest = words[1..].iter().skip_while(|w| w.starts_with("--"));
        let Some(image) = rest.next() else { continue };
        if !image.contains('$') && !stages.iter().any(|s| s.eq_ignore_ascii_case(image)) {
            images.push(image.to_string());
        }
        if rest.next().is_some_and(|w| w.eq_ignore_ascii_case("AS"))
            && let Some(stage) = rest.next()
        {
            stages.push(stage.to_string());
        }
    }
    images
}

/// Names, modes, link targets and contents: anything that changes what the build sees;
/// and the ids of the images it starts from.
fn hash(
    context: &Folder,
    files: &[Entry],
    bases: &[(String, Option<String>)],
) -> Result<String, EvalError> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (name, id) in bases {
        h.update(format!("FROM {name} {}\n", id.as_deref().unwrap_or("-")).as_bytes());
    }
    for f in files {
        h.update(f.rel.display().to_string().as_bytes());
        h.update(f.mode.to_le_bytes());
        match &f.kind {
            Kind::Link { target, .. } => {
                let body = target.display().to_string().into_bytes();
                h.update((body.len() as u64).to_le_bytes());
                h.update(&body);
            }
            _ => {
                let mut file = context.open_entry(Path::new(""), f).map_err(task_error)?;
                let path = context.path().join(&f.rel);
                let len = file.metadata().map_err(EvalError::io("read", &path))?.len();
                h.update(len.to_le_bytes());
                feed(&mut h, (&mut file).take(len)).map_err(EvalError::io("read", &path))?;
            }
        }
    }
    Ok(h.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect())
}

#[cfg(test)]
#[test]
fn the_images_a_dockerfile_starts_from() {
    let text = "ARG BASE=debian\nFROM ${BASE} AS first\nFROM --platform=linux/amd64 python:3.12 AS Build\nRUN true\nfrom build\nFROM first\nFROM ubuntu:24.04\n";
    assert_eq!(from_images(text), ["python:3.12", "ubuntu:24.04"]);
}

#[cfg(test)]
#[test]
fn references_split_into_repository_and_tag() {
    assert_eq!(split_reference("python:3.12"), ("python", "3.12"));
    assert_eq!(split_reference("ubuntu"), ("ubuntu", "latest"));
    assert_eq!(
        split_reference("registry.local:5000/team/img"),
        ("registry.local:5000/team/img", "latest")
    );
    assert_eq!(
        split_reference("registry.local:5000/img:v2"),
        ("registry.local:5000/img", "v2")
    );
    assert_eq!(split_reference("img@sha256:abc").1, "");
}

/// The build context as the engine takes it: each file's bytes, each link as a link.
fn pack(context: &Folder, files: &[Entry]) -> Result<Vec<u8>, EvalError> {
    let mut tar = tar::Builder::new(Vec::new());
    for f in files {
        context
            .append(&mut tar, Path::new(""), f, &f.rel)
            .map_err(task_error)?;
    }
    tar.into_inner()
        .map_err(EvalError::io("pack the build context of", context.path()))
}
