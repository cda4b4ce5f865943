//! The calls an audit trail shows decided, read back from its OCSF lines.
//!
//! Only the gate's records count: *API Activity* whose service is `runner tools` (a tool
//! call, or a connection the network rules judged), with the permission as `api.operation`
//! and the subjects as `resources`. How it came out is `disposition_id`: Allowed (1) and
//! Approved (8, asked and answered yes) were let through; Blocked (2: a rule denied it, or
//! an ask nobody could answer) and Rejected (25: asked and answered no) were not. A record
//! that counts repeats (`count`, see `runner_audit::fold`) stands for that many calls. The
//! rest of the trail (the sandbox's start, connections, secrets) decides nothing a rule
//! could learn, except the worktree the start names, which file rules are taken against.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::LearnError;

/// One permission request as the trail shows it, with how many calls made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub permission: String,
    pub subjects: Vec<String>,
    /// Let through (allowed, or asked and approved).
    pub allowed: bool,
    pub calls: u64,
}

/// What one or more trails show.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Alike requests merged, in the order first seen.
    pub calls: Vec<Call>,
    /// The worktree the first sandbox start names.
    pub worktree: Option<PathBuf>,
    /// The files read, for the output's header.
    pub trails: Vec<PathBuf>,
}

impl Observed {
    pub fn allowed_calls(&self) -> u64 {
        self.calls
            .iter()
            .filter(|c| c.allowed)
            .map(|c| c.calls)
            .sum()
    }

    pub fn denied_calls(&self) -> u64 {
        self.calls
            .iter()
            .filter(|c| !c.allowed)
            .map(|c| c.calls)
            .sum()
    }
}

/// Reads every trail; one with no decision in it is an error (the wrong file, most likely).
pub fn read_all(paths: &[PathBuf]) -> Result<Observed, LearnError> {
    let mut merged: BTreeMap<(String, Vec<String>, bool), usize> = BTreeMap::new();
    let mut observed = Observed::default();
    for path in paths {
        let text = std::fs::read_to_string(path).map_err(|source| LearnError::Read {
            path: path.clone(),
            source,
        })?;
        let mut decided = 0;
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let record: Value = serde_json::from_str(line).map_err(|e| LearnError::Line {
                path: path.clone(),
                line: n + 1,
                message: e.to_string(),
            })?;
            if observed.worktree.is_none() {
                observed.worktree = started_in(&record);
            }
            let Some(call) = call_of(&record, path, n + 1)? else {
                continue;
            };
            decided += 1;
            let key = (call.permission.clone(), call.subjects.clone(), call.allowed);
            match merged.get(&key) {
                Some(&i) => observed.calls[i].calls += call.calls,
                None => {
                    merged.insert(key, observed.calls.len());
                    observed.calls.push(call);
                }
            }
        }
        if decided == 0 {
            return Err(LearnError::NoDecisions { path: path.clone() });
        }
        observed.trails.push(path.clone());
    }
    Ok(observed)
}

/// The worktree a sandbox start record names.
fn started_in(record: &Value) -> Option<PathBuf> {
    (record["class_uid"] == 6002 && record["activity_id"] == 3)
        .then(|| record["unmapped"]["worktree"].as_str())
        .flatten()
        .map(PathBuf::from)
}

/// The gate's decision a record holds, if it is one.
fn call_of(record: &Value, path: &Path, line: usize) -> Result<Option<Call>, LearnError> {
    if record["class_uid"] != 6003 || record["api"]["service"]["name"] != "runner tools" {
        return Ok(None);
    }
    let bad = |message: &str| LearnError::Line {
        path: path.to_path_buf(),
        line,
        message: message.to_string(),
    };
    let permission = record["api"]["operation"]
        .as_str()
        .ok_or_else(|| bad("a decision without api.operation (the permission)"))?;
    let subjects = record["resources"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .filter_map(|r| r["name"].as_str().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let allowed = match record["disposition_id"].as_u64() {
        Some(1 | 8) => true,
        Some(2 | 25) => false,
        other => {
            return Err(bad(&format!(
                "a decision whose disposition_id is {other:?}, not 1, 8, 2 or 25"
            )));
        }
    };
    Ok(Some(Call {
        permission: permission.to_string(),
        subjects,
        allowed,
        calls: record["count"].as_u64().unwrap_or(1).max(1),
    }))
}
