//! One evaluation cut into N shards that any batch engine (a Slurm array, a Kubernetes
//! Indexed Job, a loop of `ssh`) can run side by side, each on a machine of its own.
//!
//! Which shard a task belongs to is a function of its id alone: the first eight bytes of
//! the SHA-256 of the id, read as a big-endian number, modulo N, plus one. Not the order of
//! the sets (a folder lists its entries in another order on another machine) and not the
//! time (a rerun must find the same share): a rerun of shard K plans exactly the attempts
//! shard K planned before, and skips those it finished. Adding a task to a set moves no
//! other task. The price is an uneven split for small sets (tasks fall into shards as
//! coins do); over hundreds of tasks the shares differ by a few percent.
//!
//! Where a shard writes: `OUT/shards/K-of-N/`, a results folder of its own (its
//! `run.json`, summary, predictions, worktrees and converted tasks), whether OUT is shared
//! by every shard over a network file system or is each shard's own. No two shards ever
//! write the same file, so they need no lock (NFS breaks locks). The folder's
//! `shard.json`, written before any attempt runs, names the shard's tasks: a merge can then
//! tell a finished shard from one cut short, and name what is missing.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::events::Event;
use crate::results::{self, Status, TaskResult};
use crate::tasks::Loaded;
use crate::{EvalError, EvalOptions};

/// The K-th (1-based) of N shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub of: u32,
}

/// The record each shard writes into its folder before it runs anything.
pub const RECORD: &str = "shard.json";

/// The folder under an out folder that holds its shards.
pub const SHARDS: &str = "shards";

impl Shard {
    pub fn new(index: u32, of: u32) -> Result<Shard, String> {
        if of == 0 || index == 0 || index > of {
            return Err(format!(
                "shard {index}/{of} does not exist: shards are numbered 1 to N (--shard 1/{} … {}/{})",
                of.max(1),
                of.max(1),
                of.max(1)
            ));
        }
        Ok(Shard { index, of })
    }

    /// Whether the task `id` is this shard's.
    pub fn holds(self, id: &str) -> bool {
        shard_of(id, self.of) == self.index
    }

    /// `K-of-N`: the name of the shard's folder.
    pub fn folder_name(self) -> String {
        format!("{}-of-{}", self.index, self.of)
    }

    /// Where the shard's results go, under the evaluation's `out`.
    pub fn folder(self, out: &Path) -> PathBuf {
        out.join(SHARDS).join(self.folder_name())
    }

    /// The shard a folder named `K-of-N` holds.
    pub fn from_folder_name(name: &str) -> Option<Shard> {
        let (k, n) = name.split_once("-of-")?;
        Shard::new(k.parse().ok()?, n.parse().ok()?).ok()
    }
}

/// The shard (1 to `of`) the task `id` belongs to: a hash of the id alone.
pub fn shard_of(id: &str, of: u32) -> u32 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % u64::from(of.max(1))) as u32 + 1
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.of)
    }
}

impl FromStr for Shard {
    type Err = String;

    /// `K/N`, as `--shard` takes it.
    fn from_str(s: &str) -> Result<Shard, String> {
        let (k, n) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not K/N (the K-th of N shards, from 1: 2/8)"))?;
        let number = |part: &str, what: &str| {
            part.trim().parse::<u32>().map_err(|_| {
                format!("{s:?}: {what} {part:?} is not a whole number (K/N, such as 2/8)")
            })
        };
        Shard::new(number(k, "the shard")?, number(n, "the count")?)
    }
}

/// `shard.json`: which shard of which evaluation a folder holds, and its share of tasks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardRecord {
    pub shard: u32,
    pub of: u32,
    pub model: String,
    pub attempts: u32,
    pub task_set_hash: String,
    /// The shard's tasks, by id, sorted (those that cannot load included: they are
    /// attempts that end in `infra_error`).
    pub tasks: Vec<String>,
    /// The load problems that are the shard's (its tasks', and the sets' own).
    #[serde(default)]
    pub load_problems: Vec<Event>,
}

impl ShardRecord {
    pub fn shard(&self) -> Result<Shard, String> {
        Shard::new(self.shard, self.of)
    }

    /// Reads `dir/shard.json`: `Ok(None)` when there is none.
    pub fn read(dir: &Path) -> Result<Option<ShardRecord>, String> {
        let path = dir.join(RECORD);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| format!("{} cannot be read: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }
}

/// Makes `options` run `shard`: its results go to the shard's folder under `--out`.
pub fn apply(options: &mut EvalOptions, shard: Shard) {
    options.out = shard.folder(&options.out);
    options.shard = Some(shard);
}

/// The scheduler's hook: the tasks of `loaded` this run's shard holds, and the problems that
/// are theirs (a set's own, such as holding no task, stays with every shard). Without a
/// shard, everything.
pub fn select(
    options: &EvalOptions,
    loaded: Vec<Loaded>,
    problems: Vec<Event>,
) -> (Vec<Loaded>, Vec<Event>) {
    let Some(shard) = options.shard else {
        return (loaded, problems);
    };
    let loaded = loaded.into_iter().filter(|l| shard.holds(l.id())).collect();
    let problems = problems
        .into_iter()
        .filter(|p| match p {
            Event::LoadProblem { task: Some(id), .. } => shard.holds(id),
            _ => true,
        })
        .collect();
    (loaded, problems)
}

/// The scheduler's hook, once the shard's folder is claimed and before any attempt runs:
/// writes its `shard.json`. Without a shard, nothing.
pub fn record(
    options: &EvalOptions,
    loaded: &[Loaded],
    task_set_hash: &str,
    problems: &[Event],
) -> Result<(), EvalError> {
    let Some(shard) = options.shard else {
        return Ok(());
    };
    let mut tasks: Vec<String> = loaded.iter().map(|l| l.id().to_string()).collect();
    tasks.sort();
    let record = ShardRecord {
        shard: shard.index,
        of: shard.of,
        model: options.model_label(),
        attempts: options.attempts,
        task_set_hash: task_set_hash.to_string(),
        tasks,
        load_problems: problems.to_vec(),
    };
    let path = options.out.join(RECORD);
    let mut text =
        serde_json::to_vec_pretty(&record).map_err(|e| EvalError::io("encode", &path)(e.into()))?;
    text.push(b'\n');
    runner_workspace::write_file(&path, &text).map_err(EvalError::io("write", &path))
}

/// What a shard's folder holds of the attempts its record plans.
#[derive(Debug, Default)]
pub struct Progress {
    /// Every attempt's result that is there.
    pub results: Vec<TaskResult>,
    /// Attempts with no `result.json`: not run, or cut short.
    pub missing: Vec<(String, u32)>,
    /// `result.json` files that are there but cannot be read.
    pub unreadable: Vec<PathBuf>,
}

impl Progress {
    /// Reads the result of each of `attempts` attempts of every task of `tasks` in `dir`
    /// (a shard's folder).
    pub fn of(dir: &Path, tasks: &[String], attempts: u32) -> Progress {
        let mut progress = Progress::default();
        for id in tasks {
            for attempt in 1..=attempts {
                let folder = results::attempt_dir(dir, id, attempt, attempts);
                let path = folder.join("result.json");
                match std::fs::read(&path) {
                    Ok(bytes) => match serde_json::from_slice::<TaskResult>(&bytes) {
                        Ok(r) => progress.results.push(r),
                        Err(_) => progress.unreadable.push(path),
                    },
                    Err(_) => progress.missing.push((id.clone(), attempt)),
                }
            }
        }
        progress
    }

    /// Every planned attempt has a result.
    pub fn whole(&self) -> bool {
        self.missing.is_empty() && self.unreadable.is_empty()
    }

    /// Whole, and none of it the infrastructure's failure: a rerun of the shard would run
    /// nothing.
    pub fn done(&self) -> bool {
        self.whole() && self.results.iter().all(|r| r.status != Status::InfraError)
    }

    /// Attempts a rerun of the shard would run.
    pub fn to_run(&self) -> usize {
        self.missing.len()
            + self.unreadable.len()
            + self
                .results
                .iter()
                .filter(|r| r.status == Status::InfraError)
                .count()
    }

    /// What is missing, in a line: `3 of 10 attempts have no result (t1, t5 attempt 2, …)`.
    pub fn said(&self, planned: usize) -> String {
        let mut named: Vec<String> = self
            .missing
            .iter()
            .map(|(id, attempt)| match attempt {
                1 => id.clone(),
                n => format!("{id} attempt {n}"),
            })
            .chain(
                self.unreadable
                    .iter()
                    .map(|p| format!("{} cannot be read", p.display())),
            )
            .collect();
        let count = named.len();
        if named.len() > 5 {
            named.truncate(5);
            named.push("…".into());
        }
        format!(
            "{count} of {planned} attempts have no result ({})",
            named.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The split is a function of the id alone: pinned values (a change of hash or of
    /// arithmetic would move every running evaluation's tasks to other shards), the same
    /// shard whatever the order of the ids.
    #[test]
    fn the_split_is_stable() {
        let ids = [
            "adds",
            "multiplies",
            "django__django-11099",
            "t-0",
            "t-1",
            "é",
        ];
        let pinned: Vec<u32> = ids.iter().map(|id| shard_of(id, 4)).collect();
        let again: Vec<u32> = ids.iter().rev().map(|id| shard_of(id, 4)).rev().collect();
        assert_eq!(pinned, again);
        // Worked out apart from this code (Python's hashlib), so the rule cannot change
        // unseen.
        assert_eq!(pinned, expected_pins());
        for of in 1..=9 {
            for id in ids {
                let k = shard_of(id, of);
                assert!((1..=of).contains(&k), "{id} of {of}: {k}");
            }
        }
        assert_eq!(shard_of("anything", 1), 1);
    }

    fn expected_pins() -> Vec<u32> {
        vec![3, 2, 3, 4, 3, 4]
    }

    /// Every task is in exactly one shard, for any N, and over a thousand ids the shares
    /// are near even (a split by a bad hash, or by the first letter, is not).
    #[test]
    fn the_shards_partition_the_tasks() {
        let ids: Vec<String> = (0..1000).map(|i| format!("task-{i}")).collect();
        for of in [1u32, 2, 3, 7, 16] {
            let mut counts = vec![0usize; of as usize];
            for id in &ids {
                let holders: Vec<u32> = (1..=of)
                    .filter(|&k| Shard::new(k, of).unwrap().holds(id))
                    .collect();
                assert_eq!(holders.len(), 1, "{id} of {of}: {holders:?}");
                counts[holders[0] as usize - 1] += 1;
            }
            assert_eq!(counts.iter().sum::<usize>(), ids.len());
            // Within four standard deviations of an even share (tasks fall into shards
            // as a fair die does).
            let p = 1.0 / f64::from(of);
            let even = ids.len() as f64 * p;
            let spread = 4.0 * (ids.len() as f64 * p * (1.0 - p)).sqrt();
            for (k, n) in counts.iter().enumerate() {
                assert!(
                    (*n as f64 - even).abs() <= spread,
                    "shard {}/{of} holds {n} of {} tasks",
                    k + 1,
                    ids.len()
                );
            }
        }
    }

    #[test]
    fn shard_flags_parse_or_say_why_not() {
        assert_eq!("2/8".parse::<Shard>(), Ok(Shard { index: 2, of: 8 }));
        assert_eq!(Shard::new(3, 3).unwrap().folder_name(), "3-of-3");
        assert_eq!(
            Shard::from_folder_name("3-of-4"),
            Some(Shard { index: 3, of: 4 })
        );
        assert_eq!(Shard::from_folder_name("5-of-4"), None);
        for bad in ["0/4", "5/4", "1/0", "a/4", "3", "1/-2"] {
            let e = bad.parse::<Shard>().unwrap_err();
            assert!(e.contains("K/N") || e.contains("1 to N"), "{bad}: {e}");
        }
    }
}
