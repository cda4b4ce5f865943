//! Slurm's client commands: `sbatch` to submit, `scontrol show job` to follow, `scancel`
//! to cancel. Not `sacct`: it answers only where `slurmdbd` keeps accounting, which many
//! clusters (and Debian's packages on one machine) do not run; `scontrol` answers from the
//! controller itself for as long as it keeps a finished job (`MinJobAge`).
//!
//! Each command runs with this process's environment (`SLURM_CONF` included: without it,
//! or `/etc/slurm/slurm.conf`, every Slurm command fails).

use std::collections::BTreeMap;
use std::ffi::OsString;

use super::SlurmError;

/// What Slurm says of one element of an array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// `PENDING`, `RUNNING`, `COMPLETING`, `COMPLETED`, `FAILED`, `CANCELLED`, …
    pub state: String,
    /// The batch script's exit status, once it has one.
    pub exit: Option<i32>,
}

/// States after which an element runs nothing any more. Anything else (pending,
/// running, completing, suspended, requeued, held, a state this list does not know) is
/// followed on: a job still winding down still has processes.
const ENDED: [&str; 9] = [
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
];

impl Element {
    pub fn ended(&self) -> bool {
        ENDED.contains(&self.state.as_str())
    }
}

/// Runs a Slurm command, its standard output if it succeeded.
async fn run(program: &str, args: &[OsString]) -> Result<String, SlurmError> {
    let output = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| SlurmError::Command {
            command: program.into(),
            message: if e.kind() == std::io::ErrorKind::NotFound {
                format!("{program} is not on PATH: eval submit --slurm runs Slurm's client commands (sbatch, scontrol, scancel) on this machine")
            } else {
                format!("cannot run {program}: {e}")
            },
        })?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    Err(SlurmError::Command {
        command: program.into(),
        message: format!("{program} failed ({}): {}", output.status, said.trim()),
    })
}

/// `sbatch --parsable ARGS`: the job id it printed (`123`, or `123;cluster`).
pub async fn sbatch(args: &[OsString]) -> Result<String, SlurmError> {
    let mut all = vec![OsString::from("--parsable")];
    all.extend_from_slice(args);
    let printed = run("sbatch", &all).await?;
    let id = printed.trim().split(';').next().unwrap_or("").to_string();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        return Err(SlurmError::Command {
            command: "sbatch".into(),
            message: format!("sbatch printed no job id: {:?}", printed.trim()),
        });
    }
    Ok(id)
}

/// `scancel JOB`: every element of the array.
pub async fn scancel(job: &str) -> Result<(), SlurmError> {
    run("scancel", &[OsString::from(job)]).await.map(|_| ())
}

/// The elements of array `job` by their index; `None` when Slurm no longer knows the job
/// (it was purged after `MinJobAge`).
pub async fn elements(job: &str) -> Result<Option<BTreeMap<u32, Element>>, SlurmError> {
    let args = ["show", "job", "-o", job].map(OsString::from);
    match run("scontrol", &args).await {
        Ok(text) => Ok(Some(parse_show_job(&text))),
        Err(SlurmError::Command { message, .. }) if message.contains("Invalid job id") => Ok(None),
        Err(e) => Err(e),
    }
}

/// `scontrol show job -o`'s lines, one job record each, as `index → element`. A pending
/// part of an array is one record whose `ArrayTaskId` is a list of ranges (`2-4,7%2`).
pub fn parse_show_job(text: &str) -> BTreeMap<u32, Element> {
    let mut elements = BTreeMap::new();
    for line in text.lines() {
        let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
        for word in line.split_whitespace() {
            if let Some((k, v)) = word.split_once('=') {
                fields.entry(k).or_insert(v);
            }
        }
        let (Some(ids), Some(state)) = (fields.get("ArrayTaskId"), fields.get("JobState")) else {
            continue;
        };
        let exit = fields
            .get("ExitCode")
            .and_then(|c| c.split(':').next())
            .and_then(|c| c.parse().ok());
        for index in indices(ids) {
            elements.insert(
                index,
                Element {
                    state: state.to_string(),
                    exit,
                },
            );
        }
    }
    elements
}

/// `1,3-5%2` → 1, 3, 4, 5 (the `%` throttle is not an index).
fn indices(list: &str) -> Vec<u32> {
    let list = list.split('%').next().unwrap_or("");
    let mut all = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    all.extend(a..=b.min(a.saturating_add(100_000)));
                }
            }
            None => all.extend(part.parse::<u32>().ok()),
        }
    }
    all
}

/// `1,3-4`: the `--array` list of these indices (sorted).
pub fn array_list(indices: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let start = indices[i];
        let mut end = start;
        while i + 1 < indices.len() && indices[i + 1] == end + 1 {
            i += 1;
            end = indices[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records as Slurm 22.05 prints them: started elements one a line, the pending rest as
    /// ranges, and the exit status before its colon.
    #[test]
    fn show_job_lines_give_each_element() {
        let text = "JobId=7 ArrayJobId=6 ArrayTaskId=2 JobName=runner-eval UserId=root(0) JobState=CANCELLED Reason=None ExitCode=130:0 RunTime=00:00:03\n\
JobId=8 ArrayJobId=6 ArrayTaskId=1 JobName=runner-eval JobState=COMPLETING Reason=None ExitCode=0:0\n\
JobId=6 ArrayJobId=6 ArrayTaskId=3-4,7%2 JobName=runner-eval JobState=PENDING Reason=Resources ExitCode=0:0\n";
        let e = parse_show_job(text);
        assert_eq!(e.keys().copied().collect::<Vec<_>>(), [1, 2, 3, 4, 7]);
        assert_eq!(e[&2].state, "CANCELLED");
        assert_eq!(e[&2].exit, Some(130));
        assert!(e[&2].ended());
        assert!(!e[&1].ended(), "completing is still running");
        assert!(!e[&4].ended());
        assert_eq!(array_list(&[1, 3, 4, 5, 7, 9, 10]), "1,3-5,7,9-10");
        assert_eq!(array_list(&[2]), "2");
    }
}
