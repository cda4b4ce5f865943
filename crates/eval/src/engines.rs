//! The Docker engines an evaluation spreads its tasks over (`--docker-host`, once or more;
//! none: DOCKER_HOST or the local socket).
//!
//! Each attempt leases the engine with the most free capacity: its CPUs less the tasks it
//! already runs (the containers it ran when the evaluation started, plus this evaluation's
//! attempts on it). An engine that stops answering is set aside, so the retry of an attempt
//! it failed lands on another; it is asked again after a pause, and comes back if it
//! answers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::Docker;

use super::EvalError;
use super::images::Builder;
use runner_sandbox::docker::DockerError;
use runner_sandbox::docker::engine;
use runner_workspace::image::Base;

/// Image builds at once on one engine: a build takes the engine's CPU and disk.
pub(crate) const IMAGE_BUILDS: usize = 2;
/// How long an engine that failed is left alone before it is asked again.
const SET_ASIDE: Duration = Duration::from_secs(30);

pub struct Engine {
    /// What `--docker-host` said; `None` for the default engine.
    pub host: Option<String>,
    /// Whether it sees this machine's files (a Unix socket): worktrees and the runner
    /// binary can be mounted from here.
    pub local: bool,
    pub docker: Docker,
    /// What it is (Docker or Podman) and what it can do: task containers are made for it
    /// (`in_image::TaskContainer::create`).
    pub described: engine::Engine,
    /// Task images are built per engine: an image on one is not on another.
    pub builder: Builder,
    cpus: usize,
    /// Containers it ran before this evaluation, counted as load.
    baseline: usize,
    running: AtomicUsize,
    down_since: Mutex<Option<Instant>>,
    /// The worktree of each task image (and `workdir`) before anything ran, read once from
    /// a container of it and shared by every attempt at it: the base of their diffs.
    bases: Mutex<std::collections::HashMap<ImageWorktree, Arc<Base>>>,
    /// One turn per image and `workdir` at taking its base: the attempts made ready at
    /// once wait for the first one's base instead of each copying the worktree.
    base_turns: Mutex<std::collections::HashMap<ImageWorktree, Arc<tokio::sync::Mutex<()>>>>,
}

/// A task image and the `workdir` its tasks name (`None`: the image's own).
type ImageWorktree = (String, Option<String>);

impl Engine {
    /// How results name it.
    pub fn name(&self) -> &str {
        self.host.as_deref().unwrap_or("default")
    }

    /// Whether it answers now. An engine that does not is set aside.
    pub async fn alive(&self) -> bool {
        let ok = tokio::time::timeout(Duration::from_secs(10), self.docker.ping())
            .await
            .is_ok_and(|r| r.is_ok());
        let mut down = self.down_since.lock().unwrap_or_else(|p| p.into_inner());
        *down = if ok { None } else { Some(Instant::now()) };
        ok
    }

    /// The base of `image`'s worktree at `workdir`, when an attempt has taken it.
    pub(crate) fn base(&self, image: &str, workdir: Option<&str>) -> Option<Arc<Base>> {
        let key = (image.to_string(), workdir.map(str::to_string));
        self.bases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned()
    }

    /// The turn at taking the base of `image`'s worktree at `workdir`: held from looking
    /// for the base ([`Self::base`]) until one is kept ([`Self::keep_base`]) by whoever
    /// found none.
    pub(crate) async fn base_turn(
        &self,
        image: &str,
        workdir: Option<&str>,
    ) -> tokio::sync::OwnedMutexGuard<()> {
        let key = (image.to_string(), workdir.map(str::to_string));
        let turn = self
            .base_turns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_default()
            .clone();
        turn.lock_owned().await
    }

    /// Keeps a base taken of `image`'s worktree at `workdir`, for the attempts after.
    pub(crate) fn keep_base(&self, image: &str, workdir: Option<&str>, base: Arc<Base>) {
        let key = (image.to_string(), workdir.map(str::to_string));
        self.bases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_insert(base);
    }

    fn usable(&self) -> bool {
        self.down_since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none_or(|since| since.elapsed() > SET_ASIDE)
    }

    fn free(&self) -> f64 {
        let load = self.baseline + self.running.load(Ordering::Relaxed);
        (self.cpus as f64 - load as f64) / self.cpus.max(1) as f64
    }
}

pub struct Engines(Vec<Arc<Engine>>);

impl Engines {
    /// Removes what dead runs left on every engine. Also run once this run is done: an
    /// engine finishes a request whose client was killed (a container created or started
    /// just then) in its own time, which can be after the sweep at the start.
    pub async fn remove_orphans(&self) {
        for engine in &self.0 {
            let _ = runner_sandbox::docker::cleanup::remove_orphans(&engine.docker).await;
        }
    }

    /// Connects to every engine (each must answer now: a host that does not is more likely
    /// a typo than an outage) and removes what earlier runs left on it. `rebuild`: task
    /// images are built again once in this run ([`Builder::rebuilding`]); `build_network`:
    /// the network their `RUN` steps get ([`Builder::on_network`]).
    pub async fn connect(
        hosts: &[String],
        rebuild: bool,
        build_network: Option<&str>,
    ) -> Result<Engines, EvalError> {
        let hosts: Vec<Option<String>> = if hosts.is_empty() {
            vec![None]
        } else {
            hosts.iter().cloned().map(Some).collect()
        };
        let mut engines = Vec::new();
        for host in hosts {
            let described = engine::Engine::open(host.as_deref())
                .await
                .map_err(DockerError::from)?;
            let docker = described.docker.clone();
            // Leftovers go first, so they do not count as the engine's load.
            let _ = runner_sandbox::docker::cleanup::remove_orphans(&docker).await;
            let info = docker.info().await.map_err(DockerError::engine(format!(
                "the engine {} does not say what it has",
                host.as_deref().unwrap_or("default")
            )))?;
            engines.push(Arc::new(Engine {
                // Where it was reached (named, DOCKER_HOST, or the local socket found).
                local: described.host.starts_with("unix://"),
                builder: Builder::new(docker.clone(), IMAGE_BUILDS)
                    .rebuilding(rebuild)
                    .on_network(build_network),
                described,
                docker,
                cpus: info.ncpu.unwrap_or(1).max(1) as usize,
                baseline: info.containers_running.unwrap_or(0).max(0) as usize,
                running: AtomicUsize::new(0),
                down_since: Mutex::new(None),
                bases: Default::default(),
                base_turns: Default::default(),
                host,
            }));
        }
        Ok(Engines(engines))
    }

    /// The engine with the most free capacity among those not set aside (all of them, if
    /// every one is). Held until the attempt ends.
    #[expect(
        clippy::expect_used,
        reason = "Engines::connect makes one engine per host named, or the default engine when none is: the set is never empty"
    )]
    pub fn lease(&self) -> Lease {
        let usable: Vec<&Arc<Engine>> = self.0.iter().filter(|e| e.usable()).collect();
        let pool = if usable.is_empty() {
            self.0.iter().collect()
        } else {
            usable
        };
        let engine = pool
            .into_iter()
            .max_by(|a, b| a.free().total_cmp(&b.free()))
            .expect("Engines::connect makes one engine per host, or the default one")
            .clone();
        engine.running.fetch_add(1, Ordering::Relaxed);
        Lease(engine)
    }

    /// Every engine, in the order named.
    pub fn all(&self) -> impl Iterator<Item = &Engine> {
        self.0.iter().map(|e| &**e)
    }

    /// The engines that do not see this machine's files.
    pub fn remote(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter(|e| !e.local).map(|e| e.name())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether any engine answers.
    pub async fn any_alive(&self) -> bool {
        for e in &self.0 {
            if e.alive().await {
                return true;
            }
        }
        false
    }
}

/// An attempt's hold on an engine.
pub struct Lease(Arc<Engine>);

impl std::ops::Deref for Lease {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.0
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Sandboxes being closed in the background; the evaluation does not end before they are
/// gone.
pub(crate) static CLOSING: std::sync::LazyLock<tokio_util::task::TaskTracker> =
    std::sync::LazyLock::new(tokio_util::task::TaskTracker::new);

/// Sandbox starts and removals in flight at once, whatever `--jobs` says: past a handful,
/// a Docker engine answers every call more slowly and then times out.
pub(crate) static CALLS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(8);

/// Whether the engine an attempt ran on answers (always true off docker: there is no
/// engine to lose).
pub(crate) async fn alive(engine: Option<&Engine>) -> bool {
    match engine {
        Some(e) => e.alive().await,
        None => true,
    }
}
