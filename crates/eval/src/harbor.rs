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
use std::time::Duration;

use serde::Deserialize;

use super::EvalError;

/// One Harbor task, as its folder describes it.
#[derive(Debug, Clone)]
pub struct HarborTask {
    pub id: String,
    pub dir: PathBuf,
    pub instruction: String,
    pub agent: AgentSection,
    pub verifier: VerifierSection,
    pub environment: EnvironmentSection,
    /// `environment/`, when it holds a Dockerfile to build.
    pub build_context: Option<PathBuf>,
    /// `tests/`: copied into the container at `/tests` only after the agent is done.
    pub tests: PathBuf,
    /// `solution/`, for `--agent oracle`.
    pub solution: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct File {
    agent: RawAgent,
    verifier: RawVerifier,
    environment: RawEnvironment,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct RawAgent {
    timeout_sec: Option<f64>,
    user: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct RawVerifier {
    timeout_sec: Option<f64>,
    env: BTreeMap<String, String>,
    user: Option<String>,
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
    workdir: Option<String>,
    env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentSection {
    pub timeout: Option<Duration>,
    pub user: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct VerifierSection {
    pub timeout: Option<Duration>,
    pub env: BTreeMap<String, String>,
    pub user: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnvironmentSection {
    pub build_timeout: Option<Duration>,
    /// A prebuilt image instead of `environment/Dockerfile`.
    pub docker_image: Option<String>,
    pub cpus: Option<f64>,
    pub memory_bytes: Option<u64>,
    pub storage_bytes: Option<u64>,
    pub allow_internet: bool,
    /// Where the agent works; default the image's own `WORKDIR`.
    pub workdir: Option<String>,
    pub env: BTreeMap<String, String>,
}

/// A task, or the id of one that cannot be used and why.
pub type LoadedTask = Result<HarborTask, (String, String)>;

/// Whether `dir` is one Harbor task (it has a `task.toml`).
pub fn is_task(dir: &Path) -> bool {
    dir.join("task.toml").is_file()
}

/// The tasks of a task set folder: the folder itself if it is a task, else each of its
/// subfolders that is one, in name order. `Err` with the reason for a task that cannot
/// be used, keyed by its id.
pub fn load_set(dir: &Path) -> Result<Vec<LoadedTask>, EvalError> {
    if is_task(dir) {
        return Ok(vec![load(dir)]);
    }
    let entries = std::fs::read_dir(dir).map_err(EvalError::io("read the task set", dir))?;
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_task(p))
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        return Err(EvalError::Task(format!(
            "{} is neither a Harbor task (no task.toml) nor a folder of them",
            dir.display()
        )));
    }
    Ok(dirs.iter().map(|d| load(d)).collect())
}

/// One task folder.
pub fn load(dir: &Path) -> LoadedTask {
    let id = dir
        .file_name()
        .map(|n| super::fields::sanitize(&n.to_string_lossy()))
        .unwrap_or_else(|| "task".into());
    let fail = |reason: String| (id.clone(), reason);
    let text = std::fs::read_to_string(dir.join("task.toml"))
        .map_err(|e| fail(format!("cannot read {}/task.toml: {e}", dir.display())))?;
    let file: File =
        toml::from_str(&text).map_err(|e| fail(format!("{}/task.toml: {e}", dir.display())))?;
    let instruction = std::fs::read_to_string(dir.join("instruction.md"))
        .map_err(|e| fail(format!("cannot read {}/instruction.md: {e}", dir.display())))?;
    if instruction.trim().is_empty() {
        return Err(fail(format!("{}/instruction.md is empty", dir.display())));
    }
    let tests = dir.join("tests");
    if !tests.join("test.sh").is_file() {
        return Err(fail(format!(
            "{}/tests/test.sh is missing: the verifier runs it",
            dir.display()
        )));
    }
    let env_dir = dir.join("environment");
    let build_context = env_dir.join("Dockerfile").is_file().then_some(env_dir);
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
    let secs = |v: Option<f64>| v.and_then(super::fields::seconds);
    let solution = dir.join("solution");
    Ok(HarborTask {
        id,
        dir: dir.to_path_buf(),
        instruction,
        agent: AgentSection {
            timeout: secs(file.agent.timeout_sec),
            user: file.agent.user,
        },
        verifier: VerifierSection {
            timeout: secs(file.verifier.timeout_sec),
            env: file.verifier.env,
            user: file.verifier.user,
        },
        environment: EnvironmentSection {
            build_timeout: secs(e.build_timeout_sec),
            docker_image: e.docker_image,
            cpus: e.cpus,
            memory_bytes,
            storage_bytes: e.storage_mb.map(|mb| mb << 20),
            allow_internet: e.allow_internet.unwrap_or(false),
            workdir: e.workdir,
            env: e.env,
        },
        build_context,
        tests,
        solution: solution.join("solve.sh").is_file().then_some(solution),
    })
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

        let loaded = load_set(set).unwrap();
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
        assert_eq!(load_set(&set.join("good")).unwrap().len(), 1);
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
