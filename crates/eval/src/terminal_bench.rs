//! The original Terminal-Bench layout, converted to a Harbor task folder so that one path
//! runs both: `task.yaml` (the instruction and limits), a `Dockerfile` at the task's root
//! (with `docker-compose.yaml` beside it), `run-tests.sh` with the tests under `tests/`,
//! and `solution.sh`.
//!
//! The old harness judged a run by parsing the tests' output (pytest's, by default), not
//! by a reward file. The converted task's `tests/test.sh` is written here: it runs
//! `run-tests.sh` from the task's working directory with `TEST_DIR=/tests`, as the old
//! harness did, and writes reward 1 only when it exits 0 and pytest's summary lists no
//! test as FAILED or ERROR.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::folder::exists;
use super::folder::{Folder, FolderError};

/// Whether `dir` is a task in the original layout (a `task.yaml` that is a link counts:
/// converting the task then says where it leads).
pub fn is_task(dir: &Path) -> bool {
    exists(&dir.join("task.yaml")) && !exists(&dir.join("task.toml"))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TaskYaml {
    instruction: Option<String>,
    /// The oldest tasks: a list of descriptions, the one keyed `base` being the task's.
    descriptions: Vec<Description>,
    max_agent_timeout_sec: Option<f64>,
    max_test_timeout_sec: Option<f64>,
    parser_name: Option<String>,
    run_tests_in_same_shell: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Description {
    key: String,
    description: String,
}

/// The verifier written for a converted task: the old harness's way of running the tests
/// and reading their verdict.
const TEST_SH: &str = r#"#!/bin/bash
# Written by runner for a task in the original Terminal-Bench layout: runs its
# run-tests.sh as that harness did, and turns the verdict into a reward.
export TEST_DIR=/tests
log=$(mktemp)
bash /tests/run-tests.sh 2>&1 | tee "$log"
code=${PIPESTATUS[0]}
if [ "$code" = 0 ] && ! grep -qE '^(FAILED|ERROR)( |$)' "$log"; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
exit "$code"
"#;

/// What is in an old task's folder that is not its build context.
const NOT_CONTEXT: &[&str] = &[
    "task.yaml",
    "tests",
    "run-tests.sh",
    "solution.sh",
    "solution.yaml",
];

/// Fields runner does not honour, each with what it does instead.
pub type Unsupported = Vec<(String, &'static str)>;

/// Writes the Harbor form of the old task in `folder` under `into/ID` and returns that
/// folder, with the old fields runner does not honour. Every file is read beneath the old
/// folder; a link in it is copied as a link when it stays inside, and refused when it
/// leaves. `Err`: the task's id and why not.
pub fn convert(folder: &Folder, into: &Path) -> Result<(PathBuf, Unsupported), (String, String)> {
    let dir = folder.path();
    let id = super::fields::folder_id(dir);
    let fail = |reason: String| (id.clone(), reason);
    let text = folder
        .read_string(Path::new("task.yaml"))
        .map_err(|e| fail(e.to_string()))?;
    let yaml: TaskYaml = serde_yaml_ng::from_str(&text)
        .map_err(|e| fail(format!("{}/task.yaml: {e}", dir.display())))?;
    let instruction = yaml
        .instruction
        .clone()
        .or_else(|| {
            yaml.descriptions
                .iter()
                .find(|d| d.key == "base")
                .map(|d| d.description.clone())
        })
        .filter(|i| !i.trim().is_empty())
        .ok_or_else(|| fail(format!("{}/task.yaml has no instruction", dir.display())))?;
    let is_file = |rel: &str| {
        folder
            .is_file(Path::new(rel))
            .map_err(|e| fail(e.to_string()))
    };
    if !is_file("Dockerfile")? {
        return Err(fail(format!("{} has no Dockerfile", dir.display())));
    }
    if !is_file("run-tests.sh")? {
        return Err(fail(format!(
            "{} has no run-tests.sh: the verifier runs it",
            dir.display()
        )));
    }
    // Links out are refused before anything is written.
    let entries = folder
        .walk_inside(Path::new(""))
        .map_err(|e| fail(e.to_string()))?;
    let out = into.join(&id);
    let written = write_task(folder, &entries, &out, &yaml, &instruction);
    written.map_err(|e| {
        fail(format!(
            "cannot convert {} into {}: {e}",
            dir.display(),
            out.display()
        ))
    })?;
    Ok((out, notes(folder, &yaml)))
}

fn write_task(
    folder: &Folder,
    entries: &[super::folder::Entry],
    out: &Path,
    yaml: &TaskYaml,
    instruction: &str,
) -> Result<(), FolderError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FolderError::Io { path, source }
    };
    if exists(out) {
        std::fs::remove_dir_all(out).map_err(io(out))?;
    }
    write_skeleton(out, yaml, instruction).map_err(io(out))?;
    // The build context: everything at the root but the tests, scripts and solutions.
    for entry in entries {
        let top = entry.rel.components().next();
        let top = top.map(|c| c.as_os_str().to_string_lossy().into_owned());
        if top.is_some_and(|t| NOT_CONTEXT.contains(&t.as_str())) {
            continue;
        }
        folder.copy_out(
            Path::new(""),
            entry,
            &out.join("environment").join(&entry.rel),
        )?;
    }
    let tests = out.join("tests");
    if folder.is_dir(Path::new("tests"))? {
        for entry in folder.walk_inside(Path::new("tests"))? {
            folder.copy_out(Path::new("tests"), &entry, &tests.join(&entry.rel))?;
        }
    }
    // runner's own files replace whatever is there (never written through a link).
    for name in ["run-tests.sh", "test.sh"] {
        if exists(&tests.join(name)) {
            std::fs::remove_file(tests.join(name)).map_err(io(&tests))?;
        }
    }
    folder.copy_file(Path::new("run-tests.sh"), &tests.join("run-tests.sh"))?;
    std::fs::write(tests.join("test.sh"), TEST_SH).map_err(io(&tests))?;
    if folder.is_file(Path::new("solution.sh"))? {
        let solution = out.join("solution");
        std::fs::create_dir_all(&solution).map_err(io(&solution))?;
        folder.copy_file(Path::new("solution.sh"), &solution.join("solve.sh"))?;
    }
    Ok(())
}

/// The converted task's own files: its folders, its instruction and its `task.toml`.
fn write_skeleton(out: &Path, yaml: &TaskYaml, instruction: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(out.join("environment"))?;
    std::fs::create_dir_all(out.join("tests"))?;
    std::fs::write(out.join("instruction.md"), instruction)?;
    let mut toml = String::from("version = \"1.0\"\n");
    if let Some(t) = yaml.max_agent_timeout_sec {
        toml.push_str(&format!("[agent]\ntimeout_sec = {t:?}\n"));
    }
    if let Some(t) = yaml.max_test_timeout_sec {
        toml.push_str(&format!("[verifier]\ntimeout_sec = {t:?}\n"));
    }
    std::fs::write(out.join("task.toml"), toml)
}

/// What of the old task runner does not do as the old harness did.
fn notes(folder: &Folder, yaml: &TaskYaml) -> Vec<(String, &'static str)> {
    let is_file = |rel: &str| folder.is_file(Path::new(rel)).unwrap_or(false);
    let mut notes = Vec::new();
    if yaml.parser_name.as_deref().is_some_and(|p| p != "pytest") {
        notes.push((
            "task.yaml parser_name".into(),
            "only pytest's summary is read; otherwise run-tests.sh's exit status decides",
        ));
    }
    if yaml.run_tests_in_same_shell == Some(true) {
        notes.push((
            "task.yaml run_tests_in_same_shell".into(),
            "the tests run in a shell of their own after the agent's processes have ended",
        ));
    }
    if is_file("solution.yaml") && !is_file("solution.sh") {
        notes.push((
            "solution.yaml".into(),
            "a solution of terminal keystrokes is not replayed; --agent oracle needs solution.sh",
        ));
    }
    if compose_services(folder) > 1 {
        notes.push((
            "docker-compose.yaml services".into(),
            "only the task's own Dockerfile is built and run; the services beside it are not started",
        ));
    }
    notes
}

/// How many services the task's compose file names (0 when there is none or it cannot be
/// read).
fn compose_services(folder: &Folder) -> usize {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Compose {
        services: BTreeMap<String, serde_yaml_ng::Value>,
    }
    folder
        .read_string(Path::new("docker-compose.yaml"))
        .ok()
        .and_then(|t| serde_yaml_ng::from_str::<Compose>(&t).ok())
        .map_or(0, |c| c.services.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_task_becomes_a_harbor_folder_with_its_limits_and_a_verifier() {
        let tmp = tempfile::tempdir().unwrap();
        let old = tmp.path().join("hello-world");
        std::fs::create_dir_all(old.join("tests")).unwrap();
        std::fs::write(
            old.join("task.yaml"),
            "instruction: |\n  Write hello.\nauthor_email: a@b.c\nmax_agent_timeout_sec: 90\nmax_test_timeout_sec: 30.5\nparser_name: swebench\n",
        )
        .unwrap();
        std::fs::write(old.join("Dockerfile"), "FROM x\n").unwrap();
        std::fs::write(old.join("app.py"), "print(1)\n").unwrap();
        std::fs::write(old.join("run-tests.sh"), "pytest\n").unwrap();
        std::fs::write(old.join("tests/test_outputs.py"), "def test(): pass\n").unwrap();
        std::fs::write(old.join("solution.sh"), "echo hello\n").unwrap();
        std::fs::write(
            old.join("docker-compose.yaml"),
            "services:\n  client:\n    build: .\n  db:\n    image: postgres\n",
        )
        .unwrap();
        let old_folder = Folder::open(&old).unwrap();
        let (folder, notes) = convert(&old_folder, &tmp.path().join("converted")).unwrap();
        let task = super::super::harbor::load(&folder).unwrap();
        assert_eq!(task.id, "hello-world");
        assert_eq!(task.instruction.trim(), "Write hello.");
        assert_eq!(task.agent.timeout, Some(std::time::Duration::from_secs(90)));
        assert_eq!(
            task.verifier.timeout,
            Some(std::time::Duration::from_secs_f64(30.5))
        );
        let context = folder.join(task.build_context.unwrap());
        assert!(context.join("app.py").is_file() && context.join("Dockerfile").is_file());
        assert!(!context.join("tests").exists() && !context.join("solution.sh").exists());
        let tests = folder.join(&task.tests);
        assert!(tests.join("run-tests.sh").is_file());
        assert!(tests.join("test_outputs.py").is_file());
        assert!(
            folder
                .join(task.solution.unwrap())
                .join("solve.sh")
                .is_file()
        );
        let fields: Vec<&str> = notes.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            ["task.yaml parser_name", "docker-compose.yaml services"]
        );
        // No instruction: the task says so.
        std::fs::write(old.join("task.yaml"), "author_email: a@b.c\n").unwrap();
        let (id, why) = convert(&old_folder, &tmp.path().join("converted")).unwrap_err();
        assert_eq!(id, "hello-world");
        assert!(why.contains("no instruction"), "{why}");
    }
}
