//! `runner eval merge DIR… --out DIR`: the shards of one evaluation ([`crate::shard`]) as
//! one results folder, with one summary, one `predictions.jsonl` and one report.
//!
//! The merged folder is an ordinary results folder (`eval summary` and `eval report` read
//! it as they read a run's), its `tasks/` made of the shards' task folders. Each file is
//! hard-linked where the file system allows (a merge of thousands of attempts costs no
//! copy of their logs), else copied; results are never changed in place (every file is
//! written to a temporary name and renamed), so a link never shows half of a file a shard
//! is rewriting. A task folder is put in place whole (built beside, then renamed), and
//! one whose results are the same as the shard's is left as it is: merging twice gives
//! the same folder, and a merge after one shard was rerun replaces only what it redid.
//!
//! The disk decides what a shard finished: its `shard.json` lists its tasks, and each
//! planned attempt has a `result.json` or it does not. A shard with no folder, or no
//! record, is missing; one with attempts left is half-written; both are named, and the
//! merge's status is then 8 (the counts are not the agent's whole score).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::events::{self, Event};
use crate::results::{self, RunStart};
use crate::shard::{self, Progress, Shard, ShardRecord};
use crate::{EvalError, Outcome, Report};

/// The file a merged folder keeps of its merge (and by which a later merge knows the folder
/// is one it may rewrite).
pub const RECORD: &str = "merge.json";

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// A folder given to merge that holds no shard, or an out folder that is not a merge's.
    #[error("{}: {message}", dir.display())]
    Folder { dir: PathBuf, message: String },
    /// The shards are not of one evaluation (another split, model, task set), or one is
    /// given twice.
    #[error("{0}")]
    Mixed(String),
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Eval(#[from] EvalError),
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> MergeError {
    let path = path.to_path_buf();
    move |source| MergeError::Io {
        action,
        path,
        source,
    }
}

/// How a shard's folder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Every planned attempt has a result.
    Complete,
    /// Some planned attempts have none (the shard was cut short, or still runs).
    HalfWritten,
    /// No folder, or no `shard.json` in it: the shard never got to plan its tasks.
    Missing,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Complete => "complete",
            State::HalfWritten => "half_written",
            State::Missing => "missing",
        }
    }
}

/// One shard in a merge.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardReport {
    pub shard: Shard,
    pub folder: PathBuf,
    pub state: State,
    /// Attempts the shard plans, when its record was read.
    pub attempts: Option<usize>,
    /// Attempts with a result.
    pub finished: usize,
    /// What is missing, when the shard is not complete.
    pub message: Option<String>,
}

impl ShardReport {
    /// The shard's `shard` event; `job`: what the batch engine said of its job.
    pub fn event(&self, job: Option<(&str, Option<i32>)>) -> Event {
        Event::Shard {
            shard: self.shard.index,
            of: self.shard.of,
            state: self.state.name().into(),
            attempts: self.attempts,
            finished: self.finished,
            folder: self.folder.display().to_string(),
            job_state: job.map(|(s, _)| s.to_string()),
            exit_code: job.and_then(|(_, c)| c),
            message: self.message.clone(),
        }
    }

    /// `shard 2/4 is half-written: …`, for a shard that is not complete.
    pub fn problem(&self) -> Option<String> {
        let what = match self.state {
            State::Complete => return None,
            State::HalfWritten => "is half-written",
            State::Missing => "is missing",
        };
        Some(format!(
            "shard {} {what}: {}",
            self.shard,
            self.message.as_deref().unwrap_or("")
        ))
    }
}

/// What a merge came to.
pub struct Merged {
    pub report: Report,
    pub shards: Vec<ShardReport>,
    pub model: String,
    pub attempts: u32,
    pub out: PathBuf,
}

impl Merged {
    /// The exit status's reason, by eval's table: stopped (`stopped`: the command was, and
    /// a shard is not complete) first, then a missing or half-written shard as an
    /// incomplete run, then what the results say.
    pub fn outcome(&self, stopped: bool, fail_on_unresolved: bool) -> Outcome {
        let whole = self.shards.iter().all(|s| s.state == State::Complete);
        if stopped && !whole {
            return Outcome::Stopped;
        }
        let report = Report {
            summary: self.report.summary.clone(),
            unfinished: 0,
            tasks: self.report.tasks,
            load_problems: self.report.load_problems,
        };
        match report.outcome(fail_on_unresolved) {
            Outcome::Verdicts | Outcome::Unresolved if !whole => Outcome::Incomplete,
            other => other,
        }
    }

    /// The shards that are not complete, each in a line.
    pub fn problems(&self) -> Vec<String> {
        self.shards
            .iter()
            .filter_map(ShardReport::problem)
            .collect()
    }

    /// A `run_start` for a stream about the merged folder.
    pub fn start_event(&self, to_run: usize, jobs: usize) -> Event {
        Event::RunStart {
            schema: events::SCHEMA,
            out: self.out.display().to_string(),
            tasks: self.report.tasks,
            attempts: self.attempts,
            to_run,
            jobs,
            agent: if self.model == "oracle" {
                "oracle"
            } else {
                "model"
            }
            .into(),
            model: self.model.clone(),
        }
    }
}

/// The shard folders `dirs` name, with the number of shards of their split. A dir is a
/// shard's folder (it holds `shard.json`, or is named `K-of-N`), a folder with a `shards/`
/// of them (an `--out` of `eval run --shard`, or of `eval submit`), or that `shards/`.
pub fn find(dirs: &[PathBuf]) -> Result<(u32, Vec<(Shard, PathBuf)>), MergeError> {
    let mut found: Vec<(Shard, PathBuf)> = Vec::new();
    for dir in dirs {
        let before = found.len();
        if let Some(shard) = shard_in(dir)? {
            found.push((shard, dir.clone()));
        } else {
            // OUT (its shards/ holds them), or OUT/shards itself.
            for parent in [dir.join(shard::SHARDS), dir.clone()] {
                for entry in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
                    let name = entry.file_name();
                    if let Some(shard) = name.to_str().and_then(Shard::from_folder_name) {
                        found.push((shard, entry.path()));
                    }
                }
                if found.len() > before {
                    break;
                }
            }
        }
        if found.len() == before {
            return Err(MergeError::Folder {
                dir: dir.clone(),
                message: "holds no shard: no shard.json, and no shards/ folder of K-of-N folders (was it run with --shard?)".into(),
            });
        }
    }
    found.sort();
    let of = found[0].0.of;
    if let Some((other, dir)) = found.iter().find(|(s, _)| s.of != of) {
        return Err(MergeError::Mixed(format!(
            "{} holds shard {other} and {} holds shard {}: merge the shards of one split at a time",
            dir.display(),
            found[0].1.display(),
            found[0].0
        )));
    }
    for pair in found.windows(2) {
        if pair[0].0 == pair[1].0 {
            return Err(MergeError::Mixed(format!(
                "shard {} is in both {} and {}: give each shard once",
                pair[0].0,
                pair[0].1.display(),
                pair[1].1.display()
            )));
        }
    }
    Ok((of, found))
}

/// The shard `dir` is the folder of, if it is one (by its record, else by its name).
fn shard_in(dir: &Path) -> Result<Option<Shard>, MergeError> {
    let named = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(Shard::from_folder_name);
    match ShardRecord::read(dir) {
        Ok(Some(record)) => record
            .shard()
            .map(Some)
            .map_err(|message| MergeError::Folder {
                dir: dir.to_path_buf(),
                message,
            }),
        Ok(None) => Ok(named),
        Err(message) => named.map(Some).ok_or(MergeError::Folder {
            dir: dir.to_path_buf(),
            message,
        }),
    }
}

/// Merges the shards in `dirs` into `out`.
pub fn merge(dirs: &[PathBuf], out: &Path) -> Result<Merged, MergeError> {
    let (of, found) = find(dirs)?;
    merge_shards(of, &found, out)
}

/// One shard's folder as read: its record (if any) and what it holds of it.
struct Read {
    report: ShardReport,
    dir: Option<PathBuf>,
    record: Option<ShardRecord>,
}

/// How shard `shard` stands in its folder `dir`.
pub fn shard_report(shard: Shard, dir: &Path) -> ShardReport {
    read_shard(shard, Some(dir), dir).report
}

/// Reads shard `shard` in `dir` (or `None`: it is not among the folders given).
fn read_shard(shard: Shard, dir: Option<&Path>, hint: &Path) -> Read {
    let report = |state, attempts, finished, message: String| ShardReport {
        shard,
        folder: dir.map_or_else(|| shard.folder(hint), Path::to_path_buf),
        state,
        attempts,
        finished,
        message: Some(message).filter(|m| !m.is_empty()),
    };
    let Some(dir) = dir else {
        let message = format!("no folder {} among those given", shard.folder_name());
        return Read {
            report: report(State::Missing, None, 0, message),
            dir: None,
            record: None,
        };
    };
    let record = match ShardRecord::read(dir) {
        Ok(Some(r)) if r.shard == shard.index && r.of == shard.of => r,
        Ok(Some(r)) => {
            let message = format!(
                "its shard.json is of shard {}/{}, not {shard}",
                r.shard, r.of
            );
            return Read {
                report: report(State::HalfWritten, None, 0, message),
                dir: None,
                record: None,
            };
        }
        Ok(None) => {
            let message = format!(
                "{} has no {}: the shard did not get as far as planning its tasks",
                dir.display(),
                shard::RECORD
            );
            return Read {
                report: report(State::Missing, None, 0, message),
                dir: None,
                record: None,
            };
        }
        Err(message) => {
            return Read {
                report: report(State::HalfWritten, None, 0, message),
                dir: None,
                record: None,
            };
        }
    };
    let progress = Progress::of(dir, &record.tasks, record.attempts);
    let planned = record.tasks.len() * record.attempts as usize;
    let (state, message) = if progress.whole() {
        (State::Complete, String::new())
    } else {
        (State::HalfWritten, progress.said(planned))
    };
    Read {
        report: report(state, Some(planned), progress.results.len(), message),
        dir: Some(dir.to_path_buf()),
        record: Some(record),
    }
}

/// Merges shards 1 to `of`, those of them in `found`, into `out`.
pub fn merge_shards(of: u32, found: &[(Shard, PathBuf)], out: &Path) -> Result<Merged, MergeError> {
    let hint = found
        .first()
        .and_then(|(_, d)| d.parent().and_then(Path::parent))
        .unwrap_or(out)
        .to_path_buf();
    let shards: Vec<Read> = (1..=of)
        .map(|k| {
            let shard = Shard { index: k, of };
            let dir = found.iter().find(|(s, _)| *s == shard).map(|(_, d)| d);
            read_shard(shard, dir.map(PathBuf::as_path), &hint)
        })
        .collect();
    let (model, attempts, hash) = agreed(&shards)?;
    claim(out)?;
    write_json(&out.join(RECORD), &MergeRecord::of(&shards))?;
    link_tasks(&shards, out)?;
    let all = results::collect(out);
    let summary = results::summarize(&all, &model, &hash);
    write_json(&out.join("summary.json"), &summary)?;
    let predictions = out.join("predictions.jsonl");
    results::write_predictions(&predictions, out, &all, &model, attempts)
        .map_err(io("write", &predictions))?;
    results::record_runs(out, attempts, &model, runs_of(&shards))?;
    crate::report::write(out)?;
    let mut problems = BTreeSet::new();
    for r in shards.iter().filter_map(|s| s.record.as_ref()) {
        for p in &r.load_problems {
            problems.insert(serde_json::to_string(p).unwrap_or_default());
        }
    }
    let report = Report {
        summary,
        unfinished: shards
            .iter()
            .map(|s| s.report.attempts.unwrap_or(0) - s.report.finished)
            .sum(),
        tasks: shards
            .iter()
            .filter_map(|s| s.record.as_ref())
            .map(|r| r.tasks.len())
            .sum(),
        load_problems: problems.len(),
    };
    Ok(Merged {
        report,
        shards: shards.into_iter().map(|s| s.report).collect(),
        model,
        attempts,
        out: out.to_path_buf(),
    })
}

/// The model, attempts per task and task set hash every recorded shard agrees on.
fn agreed(shards: &[Read]) -> Result<(String, u32, String), MergeError> {
    let mut recorded = shards
        .iter()
        .filter_map(|s| s.record.as_ref().map(|r| (r, &s.report.folder)));
    let Some((first, at)) = recorded.next() else {
        return Ok((String::new(), 1, String::new()));
    };
    for (r, folder) in recorded {
        let differs = [
            ("model", &first.model, &r.model),
            ("task set hash", &first.task_set_hash, &r.task_set_hash),
        ]
        .into_iter()
        .find(|(_, a, b)| a != b)
        .map(|(what, a, b)| (what, a.clone(), b.clone()))
        .or_else(|| {
            (first.attempts != r.attempts).then(|| {
                (
                    "--attempts",
                    first.attempts.to_string(),
                    r.attempts.to_string(),
                )
            })
        });
        if let Some((what, a, b)) = differs {
            return Err(MergeError::Mixed(format!(
                "the shards are not of one evaluation: {} has {what} {a}, {} has {b} (the same task sets at the same paths, model and --attempts make one)",
                at.display(),
                folder.display()
            )));
        }
    }
    Ok((
        first.model.clone(),
        first.attempts,
        first.task_set_hash.clone(),
    ))
}

/// Refuses an out folder that holds results other than a merge's (an `eval run`'s own).
fn claim(out: &Path) -> Result<(), MergeError> {
    if out.join(RECORD).exists() {
        return Ok(());
    }
    let has_tasks = std::fs::read_dir(out.join("tasks")).is_ok_and(|mut e| e.next().is_some());
    if out.join("run.json").exists() || has_tasks {
        return Err(MergeError::Folder {
            dir: out.to_path_buf(),
            message: "holds results of an eval run, not of a merge; merge into another folder (the shards' parent, or a new one)".into(),
        });
    }
    std::fs::create_dir_all(out).map_err(io("create", out))
}

/// `merge.json`: which shards made the folder, and how each stood.
#[derive(Serialize)]
struct MergeRecord<'a> {
    of: u32,
    shards: Vec<&'a ShardReport>,
}

impl<'a> MergeRecord<'a> {
    fn of(shards: &'a [Read]) -> MergeRecord<'a> {
        MergeRecord {
            of: shards.first().map_or(0, |s| s.report.shard.of),
            shards: shards.iter().map(|s| &s.report).collect(),
        }
    }
}

/// Every shard's task folders into `out/tasks`, and nothing else there: a task no shard
/// holds any more (an earlier merge's) goes.
fn link_tasks(shards: &[Read], out: &Path) -> Result<(), MergeError> {
    let tasks = out.join("tasks");
    let staging = out.join(".merging");
    workspace_remove(&staging);
    std::fs::create_dir_all(&tasks).map_err(io("create", &tasks))?;
    std::fs::create_dir_all(&staging).map_err(io("create", &staging))?;
    let mut placed: BTreeMap<String, &Path> = BTreeMap::new();
    for s in shards {
        let (Some(dir), Some(record)) = (&s.dir, &s.record) else {
            continue;
        };
        for id in &record.tasks {
            let src = dir.join("tasks").join(id);
            if !src.exists() {
                continue;
            }
            if let Some(other) = placed.insert(id.clone(), dir) {
                return Err(MergeError::Mixed(format!(
                    "task {id} is in two shards, {} and {}: their task sets differ",
                    other.display(),
                    dir.display()
                )));
            }
            let dst = tasks.join(id);
            let stage = staging.join(placed.len().to_string());
            place(&src, &dst, &stage).map_err(io("link the results of", &src))?;
        }
    }
    let kept: BTreeSet<&str> = placed
        .keys()
        .filter_map(|id| id.split('/').next())
        .collect();
    for entry in std::fs::read_dir(&tasks)
        .map_err(io("read", &tasks))?
        .flatten()
    {
        let name = entry.file_name();
        if !name.to_str().is_some_and(|n| kept.contains(n)) {
            workspace_remove(&entry.path());
        }
    }
    workspace_remove(&staging);
    Ok(())
}

fn workspace_remove(path: &Path) {
    if path.exists() {
        runner_workspace::remove_tree(path);
    }
}

/// Puts the task folder `src` at `dst`, built at `stage` first: left as it is when `dst`
/// already holds the same results.
fn place(src: &Path, dst: &Path, stage: &Path) -> std::io::Result<()> {
    if dst.exists() && fingerprint(src)? == fingerprint(dst)? {
        return Ok(());
    }
    copy_tree(src, stage)?;
    if dst.exists() {
        let old = stage.with_extension("old");
        std::fs::rename(dst, &old)?;
        std::fs::rename(stage, dst)?;
        runner_workspace::remove_tree(&old);
        Ok(())
    } else {
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::rename(stage, dst)
    }
}

/// `src` at `dst`: folders made, links kept as links, each file hard-linked where the file
/// system allows, else copied.
fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&from, &to)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&from)?, &to)?;
        } else if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to)?;
        }
    }
    Ok(())
}

/// What tells two task folders' results apart: every file's path and size, and each
/// `result.json`'s bytes (written last, and anew, whenever an attempt is run again).
type Fingerprint = Vec<(PathBuf, u64, Option<Vec<u8>>)>;

fn fingerprint(dir: &Path) -> std::io::Result<Fingerprint> {
    fn walk(root: &Path, dir: &Path, into: &mut Fingerprint) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            let kind = entry.file_type()?;
            if kind.is_dir() {
                walk(root, &path, into)?;
                continue;
            }
            let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            let len = std::fs::symlink_metadata(&path)?.len();
            let bytes = (entry.file_name() == "result.json")
                .then(|| std::fs::read(&path))
                .transpose()?;
            into.push((rel, len, bytes));
        }
        Ok(())
    }
    let mut print = Vec::new();
    walk(dir, dir, &mut print)?;
    print.sort();
    Ok(print)
}

/// Every shard's runs into its folder, oldest first (ties in shard order).
fn runs_of(shards: &[Read]) -> Vec<RunStart> {
    let mut runs: Vec<RunStart> = shards
        .iter()
        .filter_map(|s| s.dir.as_deref())
        .flat_map(results::runs_of)
        .collect();
    runs.sort_by_key(|r| r.started_unix_s);
    runs
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), MergeError> {
    let mut text = serde_json::to_vec_pretty(value).map_err(|e| io("encode", path)(e.into()))?;
    text.push(b'\n');
    runner_workspace::write_file(path, &text).map_err(io("write", path))
}

#[cfg(test)]
mod tests;
