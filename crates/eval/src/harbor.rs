//! Harbor task directories (Terminal-Bench 2): `instruction.md`, `task.toml`,
//! `environment/Dockerfile` (or a prebuilt `docker_image`), `tests/test.sh`, and an
//! optional `solution/solve.sh`. A task set is a folder of such folders, or one of them;
//! a task's id is its folder's name.
//!
//! `task.toml` is read leniently: task sets in the wild carry `[metadata]` and fields of
//! newer Harbor versions, and a field runner does not use must not cost a task. What it
//! does use must have the right type.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::EvalError;
use super::folder::Folder;

/// One Harbor task, as its folder describes it.
#[derive(Debug, Clone)]
pub struct HarborTask {
    pub id: String,
    pub dir: PathBuf,
    /// The task's folder, open: every file of the task is read through it, beneath it
    /// (the paths below are relative to it).
    pub folder: Arc<Folder>,
    pub instruction: String,
    pub agent: AgentSection,
    pub verifier: VerifierSection,
    pub environment: EnvironmentSection,
    /// `environment`, when it holds a Dockerfile to build.
    pub build_context: Option<PathBuf>,
    /// `tests`: copied into the container at `/tests` only after the agent is done.
    pub tests: PathBuf,
    /// `solution`, for `--agent oracle`.
    pub solution: Option<PathBuf>,
    /// `[solution] env`: the oracle's solution runs with these.
    pub solution_env: BTreeMap<String, String>,
    /// `[[steps]]`: a multi-step task's steps, in order, in one environment; empty for a
    /// task of one step (the fields above).
    pub steps: Vec<HarborStep>,
    /// How a multi-step task's reward comes from its steps'.
    pub reward_strategy: RewardStrategy,
    /// `artifacts`: paths in the container kept in the attempt folder.
    pub artifacts: Vec<String>,
    /// Fields of `task.toml` runner does not honour, each with what it does instead.
    pub unsupported: Vec<(String, &'static str)>,
}

/// One step of a multi-step task: `steps/NAME/` with its `instruction.md`, and optionally
/// `tests/` (laid over the task's own) and `solution/solve.sh` (paths relative to the
/// task's folder).
#[derive(Debug, Clone)]
pub struct HarborStep {
    pub name: String,
    pub instruction: String,
    pub tests: Option<PathBuf>,
    pub solution: Option<PathBuf>,
    pub agent: AgentSection,
    pub verifier: VerifierSection,
    /// The trial stops after this step when its reward is below this.
    pub min_reward: Option<f64>,
    /// Whether its reward counts in the task's.
    pub contributes: bool,
}

/// `multi_step_reward_strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RewardStrategy {
    /// Each reward key's mean over the contributing steps (a key a step lacks counts 0).
    #[default]
    Mean,
    /// The last contributing step's rewards.
    Final,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct File {
    agent: RawAgent,
    verifier: RawVerifier,
    environment: RawEnvironment,
    solution: RawSolution,
    steps: Vec<RawStep>,
    multi_step_reward_strategy: Option<String>,
    /// Paths in the container collected into the attempt folder after the verifier.
    artifacts: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct RawSolution {
    env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct RawStep {
    name: String,
    min_reward: Option<f64>,
    contributes_to_reward: Option<bool>,
    agent: RawAgent,
    verifier: RawVerifier,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct RawAgent {
    timeout_sec: Option<f64>,
    user: Option<String>,
    network_mode: Option<String>,
    allowed_hosts: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct RawVerifier {
    timeout_sec: Option<f64>,
    env: BTreeMap<String, String>,
    user: Option<String>,
    network_mode: Option<String>,
    allowed_hosts: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct RawEnvironment {
    build_timeout_sec: Option<f64>,
    docker_image: Option<String>,
    cpus: Option<f64>,
    memory_mb: Option<u64>,
    /// Older tasks give the memory as a string such as "2G".
    memory: Option<String>,
    storage_mb: Option<u64>,
    allow_internet: Option<bool>,
    network_mode: Option<String>,
    allowed_hosts: Option<Vec<String>>,
    workdir: Option<String>,
    env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentSection {
    pub timeout: Option<Duration>,
    pub user: Option<String>,
    /// `network_mode` / `allowed_hosts` of this section, when it sets either: the phase's
    /// own policy over the environment's.
    pub network: Option<NetworkPolicy>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct VerifierSection {
    pub timeout: Option<Duration>,
    pub env: BTreeMap<String, String>,
    pub user: Option<String>,
    /// As [`AgentSection::network`], for the verifier's phase.
    pub network: Option<NetworkPolicy>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnvironmentSection {
    pub build_timeout: Option<Duration>,
    /// A prebuilt image instead of `environment/Dockerfile`.
    pub docker_image: Option<String>,
    pub cpus: Option<f64>,
    pub memory_bytes: Option<u64>,
    pub storage_bytes: Option<u64>,
    /// The environment's network, which a phase without a policy of its own gets:
    /// `network_mode` (with `allowed_hosts`), else `allow_internet` (Harbor's default
    /// `true`: public).
    pub network: NetworkPolicy,
    /// Where the agent works; default the image's own `WORKDIR`.
    pub workdir: Option<String>,
    pub env: BTreeMap<String, String>,
}

/// Harbor's `network_mode`: what a phase of the task may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetworkMode {
    /// The internet: every public host (runner's proxy still refuses the host's own and
    /// private addresses, and records every connection).
    #[default]
    Public,
    /// Nothing at all.
    NoNetwork,
    /// The hosts in `allowed_hosts` alone.
    Allowlist,
}

impl NetworkMode {
    pub const ALL: [NetworkMode; 3] = [
        NetworkMode::Public,
        NetworkMode::NoNetwork,
        NetworkMode::Allowlist,
    ];

    /// The value as `task.toml` spells it.
    pub fn name(self) -> &'static str {
        match self {
            NetworkMode::Public => "public",
            NetworkMode::NoNetwork => "no-network",
            NetworkMode::Allowlist => "allowlist",
        }
    }
}

/// The network policy of a section of `task.toml`, and which of its fields set it (for
/// `result.json`, so a reader can find what decided).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NetworkPolicy {
    pub mode: NetworkMode,
    /// Lower-case host names or IPv4 addresses, without a trailing dot, each once; only
    /// with [`NetworkMode::Allowlist`].
    pub allowed_hosts: Vec<String>,
    /// `[agent] network_mode`, `[environment] allow_internet`, Harbor's default…
    pub from: String,
}

/// Harbor's precedence, as its task model reads `task.toml` (harbor
/// `src/harbor/models/task/config.py`: `EnvironmentConfig.resolve_baseline`,
/// `AgentConfig`/`VerifierConfig.explicit_phase_policy`, `_validate_network_policy_fields`,
/// `normalize_allowed_hosts`; and `src/harbor/trial/network_policy.py`:
/// `resolve_agent_phase_policy`, `resolve_verifier_phase_policy`, read in the
/// LegoX/harbor mirror at commit 73fd120e):
///
/// 1. In each section (`[environment]`, `[agent]`, `[verifier]`, and a step's
///    `[steps.agent]` and `[steps.verifier]`), `allowed_hosts` without `network_mode`
///    means `allowlist`; `allowed_hosts` beside another mode is an error. Hosts are
///    trimmed, lower-cased, stripped of a trailing dot, emptied ones dropped and each kept
///    once; one with `://`, `/` or `:` (a URL, a CIDR range, a port, IPv6) is an error.
/// 2. The environment's policy (the baseline) is its `network_mode`; without one,
///    `allow_internet = false` is `no-network`, and anything else (the field defaults to
///    `true`) is `public`.
/// 3. A phase's policy is its step's section's, else the task's `[agent]` or
///    `[verifier]`, else the baseline. The verifier shares the agent's environment, so its
///    baseline is the same one.
///
/// runner adds one refusal Harbor does not need: a wildcard (`*`, `?`) in a host, which
/// runner's rules would read as a pattern where Harbor resolves a name.
fn section_policy(
    section: &str,
    mode: Option<&str>,
    hosts: Option<&[String]>,
) -> Result<Option<NetworkPolicy>, String> {
    let mode = match mode {
        None => None,
        Some(text) => Some(
            NetworkMode::ALL
                .into_iter()
                .find(|m| m.name() == text)
                .ok_or_else(|| {
                    format!(
                        "{section} network_mode {text:?} is none of \"public\", \"no-network\", \"allowlist\""
                    )
                })?,
        ),
    };
    let allowed_hosts = normalized_hosts(section, hosts.unwrap_or_default())?;
    let from = |field: &str| format!("task {section} {field}");
    Ok(match (mode, allowed_hosts.is_empty()) {
        (None, true) => None,
        (None, false) => Some(NetworkPolicy {
            mode: NetworkMode::Allowlist,
            allowed_hosts,
            from: from("allowed_hosts"),
        }),
        (Some(m), false) if m != NetworkMode::Allowlist => {
            return Err(format!(
                "{section} allowed_hosts is only for network_mode = \"allowlist\", not {:?}",
                m.name()
            ));
        }
        (Some(mode), _) => Some(NetworkPolicy {
            mode,
            allowed_hosts,
            from: from("network_mode"),
        }),
    })
}

/// `allowed_hosts` as Harbor normalizes them (see [`section_policy`]).
pub(crate) fn normalized_hosts(section: &str, hosts: &[String]) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for host in hosts {
        let value = host.trim().to_lowercase();
        let value = value.trim_end_matches('.');
        if value.is_empty() {
            continue;
        }
        if value.contains("://") || value.contains(['/', ':']) {
            return Err(format!(
                "{section} allowed_hosts: {host:?} is not a host name or an IPv4 address (no URLs, ranges, ports or paths)"
            ));
        }
        if value.contains(['*', '?']) {
            return Err(format!(
                "{section} allowed_hosts: {host:?} has a wildcard; name each host"
            ));
        }
        if !out.iter().any(|h| h == value) {
            out.push(value.to_string());
        }
    }
    Ok(out)
}

/// The environment's policy: its own `network_mode`/`allowed_hosts`, else `allow_internet`.
fn baseline(e: &RawEnvironment) -> Result<NetworkPolicy, String> {
    let own = section_policy(
        "[environment]",
        e.network_mode.as_deref(),
        e.allowed_hosts.as_deref(),
    )?;
    Ok(match (own, e.allow_internet) {
        (Some(policy), _) => policy,
        (None, Some(false)) => NetworkPolicy {
            mode: NetworkMode::NoNetwork,
            allowed_hosts: Vec::new(),
            from: "task [environment] allow_internet = false".into(),
        },
        (None, Some(true)) => NetworkPolicy {
            mode: NetworkMode::Public,
            allowed_hosts: Vec::new(),
            from: "task [environment] allow_internet = true".into(),
        },
        (None, None) => NetworkPolicy {
            mode: NetworkMode::Public,
            allowed_hosts: Vec::new(),
            from: "Harbor's default (allow_internet = true)".into(),
        },
    })
}

impl HarborTask {
    /// The agent's network in `step` (`None`: a task of one step), by Harbor's precedence.
    pub fn agent_network<'a>(&'a self, step: Option<&'a HarborStep>) -> &'a NetworkPolicy {
        step.and_then(|s| s.agent.network.as_ref())
            .or(self.agent.network.as_ref())
            .unwrap_or(&self.environment.network)
    }

    /// The verifier's network in `step`, by Harbor's precedence.
    pub fn verifier_network<'a>(&'a self, step: Option<&'a HarborStep>) -> &'a NetworkPolicy {
        step.and_then(|s| s.verifier.network.as_ref())
            .or(self.verifier.network.as_ref())
            .unwrap_or(&self.environment.network)
    }
}

/// A task, or the id of one that cannot be used and why.
pub type LoadedTask = Result<HarborTask, (String, String)>;

/// Whether `dir` is one Harbor task (it has a `task.toml`) or one in the original
/// Terminal-Bench layout (`task.yaml`).
/// A `task.toml` that is a link counts: loading the task then says where it leads.
pub fn is_task(dir: &Path) -> bool {
    super::folder::exists(&dir.join("task.toml")) || super::terminal_bench::is_task(dir)
}

/// A task set, and what the person running it should know of its tasks: each field
/// runner does not honour, once, with how many tasks carry it and what runner does.
pub struct TaskSet {
    pub tasks: Vec<LoadedTask>,
    pub notes: Vec<String>,
}

/// The tasks of a task set folder: the folder itself if it is a task, else each of its
/// subfolders that is one, in name order. `Err` with the reason for a task that cannot
/// be used, keyed by its id. Tasks in the original Terminal-Bench layout are converted
/// into Harbor folders under `converted` first.
pub fn load_set(dir: &Path, converted: &Path) -> Result<TaskSet, EvalError> {
    let one = is_task(dir);
    let dirs: Vec<PathBuf> = if one {
        vec![dir.to_path_buf()]
    } else {
        let entries = std::fs::read_dir(dir).map_err(EvalError::io("read the task set", dir))?;
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| is_task(p))
            .collect();
        dirs.sort();
        dirs
    };
    if dirs.is_empty() {
        return Err(EvalError::Task(format!(
            "{} is neither a task (no task.toml, no task.yaml) nor a folder of them",
            dir.display()
        )));
    }
    // A task folder in a set is opened beneath the set: a link to a folder elsewhere on
    // the host is no task of the set's.
    let set = if one {
        None
    } else {
        Some(Folder::open(dir).map_err(|e| EvalError::Task(e.to_string()))?)
    };
    let mut fields: BTreeMap<(String, &'static str), usize> = BTreeMap::new();
    let tasks: Vec<LoadedTask> = dirs
        .iter()
        .map(|d| {
            let task = load_in_set(set.as_ref(), d, converted);
            if let Ok(t) = &task {
                for (field, doing) in &t.unsupported {
                    *fields.entry((field.clone(), *doing)).or_default() += 1;
                }
            }
            task
        })
        .collect();
    let notes = fields
        .into_iter()
        .map(|((field, doing), n)| {
            let tasks = if n == 1 {
                "1 task".to_string()
            } else {
                format!("{n} tasks")
            };
            format!("{}: `{field}` ({tasks}): {doing}", dir.display())
        })
        .collect();
    Ok(TaskSet { tasks, notes })
}

/// The task at `d`, opened beneath `set` when it is one of a set's folders; converted
/// into `converted` first when it is in the original Terminal-Bench layout.
fn load_in_set(set: Option<&Folder>, d: &Path, converted: &Path) -> LoadedTask {
    let id = super::fields::folder_id(d);
    let folder = match set {
        None => Folder::open(d),
        Some(set) => set.sub(Path::new(d.file_name().unwrap_or_default())),
    }
    .map_err(|e| (id, e.to_string()))?;
    if super::folder::exists(&d.join("task.toml")) {
        return load_folder(folder);
    }
    let (converted, notes) = super::terminal_bench::convert(&folder, converted)?;
    load(&converted).map(|mut t| {
        t.unsupported.extend(notes);
        t
    })
}

/// One task folder.
pub fn load(dir: &Path) -> LoadedTask {
    let folder = Folder::open(dir).map_err(|e| (super::fields::folder_id(dir), e.to_string()))?;
    load_folder(folder)
}

/// One task folder, open: each of its files read beneath it.
fn load_folder(folder: Folder) -> LoadedTask {
    let dir = folder.path().to_path_buf();
    let dir = dir.as_path();
    let id = super::fields::folder_id(dir);
    let fail = |reason: String| (id.clone(), reason);
    let (file, unsupported) = read_toml(&folder).map_err(fail)?;
    let multi = !file.steps.is_empty();
    let instruction = read_instruction(&folder, multi).map_err(fail)?;
    let (tests, build_context) = checked_trees(&folder, multi).map_err(fail)?;
    let e = file.environment;
    if build_context.is_none() && e.docker_image.is_none() {
        return Err(fail(format!(
            "{} has neither environment/Dockerfile nor [environment] docker_image",
            dir.display()
        )));
    }
    let memory_bytes = match (e.memory_mb, &e.memory) {
        (Some(mb), _) => Some(mb << 20),
        (None, Some(text)) => Some(
            parse_memory(text)
                .ok_or_else(|| fail(format!("[environment] memory {text:?} is not a size")))?,
        ),
        (None, None) => None,
    };
    let steps = file
        .steps
        .iter()
        .map(|raw| load_step(&folder, raw))
        .collect::<Result<Vec<_>, String>>()
        .map_err(fail)?;
    let reward_strategy = match file.multi_step_reward_strategy.as_deref() {
        None | Some("mean") => RewardStrategy::Mean,
        Some("final") => RewardStrategy::Final,
        Some(other) => {
            return Err(fail(format!(
                "multi_step_reward_strategy {other:?} is neither \"mean\" nor \"final\""
            )));
        }
    };
    let solution = solution_of(&folder, Path::new("")).map_err(fail)?;
    let in_file = |e: String| fail(format!("{}/task.toml: {e}", dir.display()));
    let agent = agent_section(&file.agent, "[agent]").map_err(in_file)?;
    let verifier = verifier_section(&file.verifier, "[verifier]").map_err(in_file)?;
    let network = baseline(&e).map_err(in_file)?;
    Ok(HarborTask {
        id,
        dir: dir.to_path_buf(),
        folder: Arc::new(folder),
        instruction,
        agent,
        verifier,
        environment: EnvironmentSection {
            build_timeout: secs(e.build_timeout_sec),
            docker_image: e.docker_image,
            cpus: e.cpus,
            memory_bytes,
            storage_bytes: e.storage_mb.map(|mb| mb << 20),
            network,
            workdir: e.workdir,
            env: e.env,
        },
        build_context,
        tests,
        solution,
        solution_env: file.solution.env,
        steps,
        reward_strategy,
        artifacts: file.artifacts,
        unsupported,
    })
}

/// `task.toml`, and the fields in it runner does not honour.
fn read_toml(folder: &Folder) -> Result<(File, super::terminal_bench::Unsupported), String> {
    let dir = folder.path();
    let text = folder
        .read_string(Path::new("task.toml"))
        .map_err(|e| e.to_string())?;
    let doc: toml::Table =
        toml::from_str(&text).map_err(|e| format!("{}/task.toml: {e}", dir.display()))?;
    let unsupported = unsupported_fields(&doc);
    let file: File = doc
        .try_into()
        .map_err(|e| format!("{}/task.toml: {e}", dir.display()))?;
    Ok((file, unsupported))
}

/// `instruction.md`. A multi-step task's root instruction is never sent: it may be absent.
fn read_instruction(folder: &Folder, multi: bool) -> Result<String, String> {
    let instruction = match folder.read_string(Path::new("instruction.md")) {
        Ok(text) => text,
        Err(e) if multi && e.is_missing() => String::new(),
        Err(e) => return Err(e.to_string()),
    };
    if instruction.trim().is_empty() && !multi {
        return Err(format!(
            "{}/instruction.md is empty",
            folder.path().display()
        ));
    }
    Ok(instruction)
}

/// `tests` (with the `test.sh` a task of one step needs; a multi-step task's root tests
/// only back its steps') and the build context, if any; both go out whole later, so a
/// link out of either is refused now. The build context is a folder of its own: no link
/// in it may leave it.
fn checked_trees(folder: &Folder, multi: bool) -> Result<(PathBuf, Option<PathBuf>), String> {
    let text = |e: super::folder::FolderError| e.to_string();
    let tests = PathBuf::from("tests");
    if !folder.is_file(&tests.join("test.sh")).map_err(text)? && !multi {
        return Err(format!(
            "{}/tests/test.sh is missing: the verifier runs it",
            folder.path().display()
        ));
    }
    if folder.is_dir(&tests).map_err(text)? {
        folder.walk_inside(&tests).map_err(text)?;
    }
    let context = PathBuf::from("environment");
    if !folder.is_file(&context.join("Dockerfile")).map_err(text)? {
        return Ok((tests, None));
    }
    folder
        .sub(&context)
        .and_then(|c| c.walk_inside(Path::new("")))
        .map_err(text)?;
    Ok((tests, Some(context)))
}

fn secs(v: Option<f64>) -> Option<Duration> {
    v.and_then(super::fields::seconds)
}

/// `[agent]` (or a step's), `section` naming it in errors.
fn agent_section(raw: &RawAgent, section: &str) -> Result<AgentSection, String> {
    Ok(AgentSection {
        timeout: secs(raw.timeout_sec),
        user: raw.user.clone(),
        network: section_policy(
            section,
            raw.network_mode.as_deref(),
            raw.allowed_hosts.as_deref(),
        )?,
    })
}

/// `[verifier]` (or a step's), `section` naming it in errors.
fn verifier_section(raw: &RawVerifier, section: &str) -> Result<VerifierSection, String> {
    Ok(VerifierSection {
        timeout: secs(raw.timeout_sec),
        env: raw.env.clone(),
        user: raw.user.clone(),
        network: section_policy(
            section,
            raw.network_mode.as_deref(),
            raw.allowed_hosts.as_deref(),
        )?,
    })
}

/// `under/solution`, when it has a `solve.sh`; the whole folder checked for links out (it
/// is packed for the oracle).
fn solution_of(folder: &Folder, under: &Path) -> Result<Option<PathBuf>, String> {
    let solution = under.join("solution");
    if !folder
        .is_file(&solution.join("solve.sh"))
        .map_err(|e| e.to_string())?
    {
        return Ok(None);
    }
    folder.walk_inside(&solution).map_err(|e| e.to_string())?;
    Ok(Some(solution))
}

/// `steps/NAME/`: its instruction, and a `test.sh` of its own or the task's.
fn load_step(folder: &Folder, raw: &RawStep) -> Result<HarborStep, String> {
    let name = super::fields::sanitize(&raw.name);
    if raw.name.is_empty() || name != raw.name {
        return Err(format!(
            "[[steps]] name {:?} is not a plain folder name",
            raw.name
        ));
    }
    let step = Path::new("steps").join(&name);
    let text = |e: super::folder::FolderError| e.to_string();
    let instruction = folder
        .read_string(&step.join("instruction.md"))
        .map_err(text)?;
    let tests = step.join("tests");
    let tests = folder.is_dir(&tests).map_err(text)?.then_some(tests);
    if let Some(t) = &tests {
        folder.walk_inside(t).map_err(text)?;
    }
    let in_file = |e: String| format!("{}/task.toml: {e}", folder.path().display());
    let own = match &tests {
        Some(t) => folder.is_file(&t.join("test.sh")).map_err(text)?,
        None => false,
    };
    if !own && !folder.is_file(Path::new("tests/test.sh")).map_err(text)? {
        return Err(format!(
            "step {name} has no tests/test.sh, and the task has none to fall back on"
        ));
    }
    let agent =
        agent_section(&raw.agent, &format!("[steps.agent] of step {name}")).map_err(in_file)?;
    let verifier = verifier_section(&raw.verifier, &format!("[steps.verifier] of step {name}"))
        .map_err(in_file)?;
    Ok(HarborStep {
        name,
        instruction,
        tests,
        solution: solution_of(folder, &step)?,
        agent,
        verifier,
        min_reward: raw.min_reward,
        contributes: raw.contributes_to_reward.unwrap_or(true),
    })
}

/// The keys runner reads, by table (`steps[]`: each entry of `[[steps]]`).
const KNOWN: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "version",
            "schema_version",
            "metadata",
            "task",
            "source",
            "agent",
            "verifier",
            "environment",
            "solution",
            "steps",
            "multi_step_reward_strategy",
            "artifacts",
        ],
    ),
    (
        "agent",
        &["timeout_sec", "user", "network_mode", "allowed_hosts"],
    ),
    (
        "verifier",
        &[
            "timeout_sec",
            "env",
            "user",
            "network_mode",
            "allowed_hosts",
        ],
    ),
    (
        "environment",
        &[
            "build_timeout_sec",
            "docker_image",
            "cpus",
            "memory_mb",
            "memory",
            "allow_internet",
            "network_mode",
            "allowed_hosts",
            "workdir",
            "env",
        ],
    ),
    ("solution", &["env"]),
    (
        "steps[]",
        &[
            "name",
            "min_reward",
            "contributes_to_reward",
            "agent",
            "verifier",
        ],
    ),
    (
        "steps[].agent",
        &["timeout_sec", "network_mode", "allowed_hosts"],
    ),
    (
        "steps[].verifier",
        &[
            "timeout_sec",
            "env",
            "user",
            "network_mode",
            "allowed_hosts",
        ],
    ),
];

/// What runner does instead of what an unread field asks.
fn instead(field: &str) -> &'static str {
    match field.rsplit('.').next().unwrap_or(field) {
        "storage" | "storage_mb" => {
            "not enforced: the task container gets the engine's disk (a quota needs a storage driver with one)"
        }
        "gpus" | "gpu_types" => "no GPUs are given to task containers",
        "mcp_servers" => "the agent gets no MCP servers from a task",
        "skills_dir" => "skills in a task are not loaded",
        "user" if field == "steps[].agent.user" => "every step runs as the task's [agent] user",
        "healthcheck" | "setup" => "not run",
        _ => "ignored",
    }
}

/// The fields of `task.toml` runner does not honour, each with what it does instead.
/// Read leniently (a task with them still runs), but said once per task set.
fn unsupported_fields(doc: &toml::Table) -> Vec<(String, &'static str)> {
    let mut tables: Vec<(String, &toml::Table)> = vec![(String::new(), doc)];
    for name in ["agent", "verifier", "environment", "solution"] {
        if let Some(toml::Value::Table(t)) = doc.get(name) {
            tables.push((name.to_string(), t));
        }
    }
    if let Some(toml::Value::Array(steps)) = doc.get("steps") {
        for step in steps.iter().filter_map(|s| s.as_table()) {
            tables.push(("steps[]".into(), step));
            for name in ["agent", "verifier"] {
                if let Some(toml::Value::Table(t)) = step.get(name) {
                    tables.push((format!("steps[].{name}"), t));
                }
            }
        }
    }
    let mut out: Vec<(String, &'static str)> = tables
        .iter()
        .flat_map(|(path, table)| {
            let known = KNOWN
                .iter()
                .find(|(p, _)| p == path)
                .map_or(&[][..], |(_, k)| *k);
            table
                .keys()
                .filter(move |k| !known.contains(&k.as_str()))
                .map(move |k| {
                    let field = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    let doing = instead(&field);
                    (field, doing)
                })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// "512M", "2G", "2GiB", "1024" (bytes).
fn parse_memory(text: &str) -> Option<u64> {
    let t = text.trim();
    let digits = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (n, unit) = t.split_at(digits);
    let n: f64 = n.parse().ok()?;
    let scale = match unit
        .trim()
        .to_ascii_lowercase()
        .trim_end_matches("ib")
        .trim_end_matches('b')
    {
        "" => 1u64,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        _ => return None,
    };
    Some((n * scale as f64) as u64)
}

/// Why what the verifier left is no reward.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadReward {
    #[error("reward.txt holds {0:?}, not a number")]
    NotANumber(String),
    #[error("reward.json is not a flat map of numbers: {0}")]
    NotAMap(String),
    #[error("reward.json: {key} is {value}, not a number")]
    EntryNotANumber { key: String, value: String },
    #[error("reward.json is an empty map")]
    Empty,
    #[error("the verifier wrote neither /logs/verifier/reward.txt nor reward.json")]
    Missing,
}

/// Where a verifier leaves its rewards: one number, or a flat map of numbers.
pub const REWARD_TXT: &str = "/logs/verifier/reward.txt";
pub const REWARD_JSON: &str = "/logs/verifier/reward.json";

/// A reward file as the verifier left it: where, and its text (trimmed, blanks run
/// together, cut to [`REWARD_TEXT_BYTES`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardFile {
    pub path: String,
    pub text: String,
}

/// How much of a reward file a result quotes.
pub const REWARD_TEXT_BYTES: usize = 200;

impl RewardFile {
    pub fn new(path: &str, text: &str) -> RewardFile {
        let mut text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if text.len() > REWARD_TEXT_BYTES {
            let mut at = REWARD_TEXT_BYTES;
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text.truncate(at);
            text.push('…');
        }
        RewardFile {
            path: path.to_string(),
            text,
        }
    }
}

/// What a verifier wrote: its rewards, and the file they were read from.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub rewards: BTreeMap<String, f64>,
    /// `None` for rewards no one file holds (a multi-step task's roll-up).
    pub file: Option<RewardFile>,
}

/// [`parse_reward`], keeping the file that decided ([`REWARD_TXT`] wins, as there) and
/// what it held, for the reason an attempt is not resolved.
pub fn read_reward(txt: Option<&str>, json: Option<&str>) -> Result<Written, BadReward> {
    let rewards = parse_reward(txt, json)?;
    let file = match (txt, json) {
        (Some(text), _) => Some(RewardFile::new(REWARD_TXT, text)),
        (None, Some(text)) => Some(RewardFile::new(REWARD_JSON, text)),
        (None, None) => None,
    };
    Ok(Written { rewards, file })
}

/// What the verifier left in `/logs/verifier`: `reward.txt` (one number) or
/// `reward.json` (a flat map of numbers). Resolved means every reward is at least 1.
pub fn parse_reward(
    txt: Option<&str>,
    json: Option<&str>,
) -> Result<BTreeMap<String, f64>, BadReward> {
    if let Some(text) = txt {
        let value: f64 = text
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| BadReward::NotANumber(cut(text)))?;
        return Ok(BTreeMap::from([("reward".to_string(), value)]));
    }
    if let Some(text) = json {
        let map: BTreeMap<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|e| BadReward::NotAMap(e.to_string()))?;
        let mut rewards = BTreeMap::new();
        for (k, v) in map {
            let n =
                v.as_f64()
                    .filter(|n| n.is_finite())
                    .ok_or_else(|| BadReward::EntryNotANumber {
                        key: k.clone(),
                        value: v.to_string(),
                    })?;
            rewards.insert(k, n);
        }
        if rewards.is_empty() {
            return Err(BadReward::Empty);
        }
        return Ok(rewards);
    }
    Err(BadReward::Missing)
}

fn cut(text: &str) -> String {
    text.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(dir: &Path, toml: &str) {
        std::fs::create_dir_all(dir.join("environment")).unwrap();
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        std::fs::write(dir.join("task.toml"), toml).unwrap();
        std::fs::write(dir.join("instruction.md"), "Fix calc.sh.\n").unwrap();
        std::fs::write(dir.join("environment/Dockerfile"), "FROM scratch\n").unwrap();
        std::fs::write(dir.join("tests/test.sh"), "exit 0\n").unwrap();
    }

    #[test]
    fn a_set_reads_every_task_and_says_what_is_wrong_with_the_others() {
        let tmp = tempfile::tempdir().unwrap();
        let set = tmp.path();
        task(
            &set.join("good"),
            r#"
version = "1.0"
[metadata]
author = "someone"
[agent]
timeout_sec = 90.0
user = "agent"
[verifier]
timeout_sec = 30
env = { CHECK = "1" }
user = "root"
[environment]
build_timeout_sec = 600.0
cpus = 2
memory = "2G"
allow_internet = false
workdir = "/app"
"#,
        );
        std::fs::create_dir_all(set.join("good/solution")).unwrap();
        std::fs::write(set.join("good/solution/solve.sh"), "true\n").unwrap();
        task(&set.join("bad-type"), "[agent]\ntimeout_sec = \"soon\"\n");
        task(&set.join("no-tests"), "");
        std::fs::remove_file(set.join("no-tests/tests/test.sh")).unwrap();
        std::fs::create_dir_all(set.join("not-a-task")).unwrap();

        let loaded = load_set(set, &set.join(".converted")).unwrap().tasks;
        assert_eq!(loaded.len(), 3, "{loaded:?}");
        let good = loaded
            .iter()
            .find_map(|l| l.as_ref().ok())
            .expect("the good task");
        assert_eq!(good.id, "good");
        assert_eq!(good.agent.timeout, Some(Duration::from_secs(90)));
        assert_eq!(good.agent.user.as_deref(), Some("agent"));
        assert_eq!(good.verifier.env["CHECK"], "1");
        assert_eq!(good.environment.memory_bytes, Some(2 << 30));
        assert_eq!(good.environment.workdir.as_deref(), Some("/app"));
        assert!(good.solution.is_some());
        assert!(good.build_context.is_some());
        let errors: Vec<&(String, String)> =
            loaded.iter().filter_map(|l| l.as_ref().err()).collect();
        assert!(
            errors
                .iter()
                .any(|(id, e)| id == "bad-type" && e.contains("timeout_sec"))
        );
        assert!(
            errors
                .iter()
                .any(|(id, e)| id == "no-tests" && e.contains("test.sh"))
        );
        // One task folder is a task set of one.
        assert_eq!(
            load_set(&set.join("good"), &set.join(".converted"))
                .unwrap()
                .tasks
                .len(),
            1
        );
    }

    #[test]
    fn fields_runner_does_not_read_are_named_with_what_it_does() {
        let doc: toml::Table = toml::from_str(
            r#"
version = "1.0"
skills_dir = "skills"
[environment]
cpus = 2
gpus = 1
storage = "10G"
[[steps]]
name = "a"
[steps.agent]
timeout_sec = 5
user = "x"
"#,
        )
        .unwrap();
        let fields = unsupported_fields(&doc);
        let names: Vec<&str> = fields.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            names,
            [
                "environment.gpus",
                "environment.storage",
                "skills_dir",
                "steps[].agent.user"
            ]
        );
        assert!(fields[0].1.contains("no GPUs"));
        assert!(fields[3].1.contains("[agent] user"));
    }

    /// The task at a fresh folder with `toml`, loaded.
    fn loaded(toml: &str) -> LoadedTask {
        let tmp = tempfile::tempdir().unwrap();
        task(tmp.path(), toml);
        for step in ["a", "b"] {
            let dir = tmp.path().join("steps").join(step);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("instruction.md"), "Do it.\n").unwrap();
        }
        load(tmp.path())
    }

    fn modes(t: &HarborTask, step: Option<usize>) -> (NetworkPolicy, NetworkPolicy) {
        let step = step.map(|i| &t.steps[i]);
        (
            t.agent_network(step).clone(),
            t.verifier_network(step).clone(),
        )
    }

    #[test]
    fn network_policy_follows_harbors_precedence() {
        use NetworkMode::*;
        // Nothing said: Harbor's default, public, for both phases.
        let t = loaded("").unwrap();
        let (a, v) = modes(&t, None);
        assert_eq!((a.mode, v.mode), (Public, Public));
        assert!(a.from.contains("default"), "{a:?}");
        // The older field keeps its meaning.
        let t = loaded("[environment]\nallow_internet = false\n").unwrap();
        assert_eq!(modes(&t, None).0.mode, NoNetwork);
        // network_mode wins over allow_internet; a phase's own wins over the environment's.
        let t = loaded(
            "[environment]\nallow_internet = false\nnetwork_mode = \"public\"\n[verifier]\nnetwork_mode = \"no-network\"\n",
        )
        .unwrap();
        let (a, v) = modes(&t, None);
        assert_eq!((a.mode, v.mode), (Public, NoNetwork));
        assert_eq!(v.from, "task [verifier] network_mode");
        // allowed_hosts alone means allowlist, normalized; the verifier inherits it.
        let t = loaded(
            "[environment]\nallowed_hosts = [\" PyPI.org. \", \"pypi.org\", \"\", \"10.0.0.5\"]\n[agent]\nnetwork_mode = \"public\"\n",
        )
        .unwrap();
        let (a, v) = modes(&t, None);
        assert_eq!(a.mode, Public);
        assert_eq!(v.mode, Allowlist);
        assert_eq!(v.allowed_hosts, ["pypi.org", "10.0.0.5"]);
        // A step's section wins over the task's, which wins over the environment's.
        let t = loaded(
            "[environment]\nnetwork_mode = \"no-network\"\n[agent]\nnetwork_mode = \"public\"\n[[steps]]\nname = \"a\"\n[steps.agent]\nallowed_hosts = [\"x.test\"]\n[[steps]]\nname = \"b\"\n",
        );
        let t = match t {
            Ok(t) => t,
            Err(e) => panic!("{e:?}"),
        };
        assert_eq!(modes(&t, Some(0)).0.allowed_hosts, ["x.test"]);
        assert_eq!(modes(&t, Some(1)).0.mode, Public);
        assert_eq!(modes(&t, Some(1)).1.mode, NoNetwork);
    }

    #[test]
    fn a_network_field_runner_cannot_read_names_the_file_and_the_field() {
        for (toml, field) in [
            (
                "[environment]\nnetwork_mode = \"offline\"\n",
                "[environment] network_mode",
            ),
            (
                "[agent]\nnetwork_mode = \"Public\"\n",
                "[agent] network_mode",
            ),
            (
                "[verifier]\nnetwork_mode = \"public\"\nallowed_hosts = [\"a.test\"]\n",
                "[verifier] allowed_hosts",
            ),
            (
                "[environment]\nallowed_hosts = [\"https://a.test/x\"]\n",
                "[environment] allowed_hosts",
            ),
            (
                "[agent]\nallowed_hosts = [\"*.a.test\"]\n",
                "[agent] allowed_hosts",
            ),
            (
                "[agent]\nallowed_hosts = [\"a.test:443\"]\n",
                "[agent] allowed_hosts",
            ),
        ] {
            let (_, why) = loaded(toml).expect_err(toml);
            assert!(
                why.contains("task.toml") && why.contains(field),
                "{toml}: {why}"
            );
        }
        // The fields are read, so they are not said to be ignored.
        let doc: toml::Table =
            toml::from_str("[agent]\nnetwork_mode = \"public\"\nallowed_hosts = []\n").unwrap();
        assert!(unsupported_fields(&doc).is_empty());
    }

    #[test]
    fn rewards_come_from_either_file_and_nonsense_is_an_error() {
        assert_eq!(parse_reward(Some("1\n"), None).unwrap()["reward"], 1.0);
        let map = parse_reward(None, Some(r#"{"a": 1, "b": 0.5}"#)).unwrap();
        assert_eq!(map["b"], 0.5);
        assert!(parse_reward(Some("pass"), None).is_err());
        // NaN would slip past every comparison with 1.
        assert!(parse_reward(Some("nan"), None).is_err());
        assert!(parse_reward(Some("inf"), None).is_err());
        assert!(parse_reward(None, Some(r#"{"a": "yes"}"#)).is_err());
        assert!(parse_reward(None, None).is_err());
        assert_eq!(parse_memory("512M"), Some(512 << 20));
        assert_eq!(parse_memory("2GiB"), Some(2 << 30));
        assert_eq!(parse_memory("lots"), None);
    }
}
