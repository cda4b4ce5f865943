//! What each turn of an attempt is, and how the turns' verdicts make the attempt's.
//!
//! A task of one step is one [`Stage`]; a multi-step task's steps are stages in order, in
//! one container, each with its instruction, its limits, its tests (the task's with the
//! step's laid over them) and the network plans of its two phases. All of it is read from
//! the task's folder before anything runs: a folder that cannot be read is the task's
//! failure, found before the image is built. A turn (`super::take_turn`) is the agent's
//! phase, its end judged and its diff recorded, then the verifier's; [`Turns`] rolls the
//! steps' rewards up as Harbor does.

use std::path::Path;
use std::time::Duration;

use super::network::{HandedOver, agent_plan, user_network_rules, verifier_plan};
use crate::harbor::{self, HarborTask};
use crate::images;
use crate::results::TaskResult;
use crate::verdict::{Score, Verified};
use crate::verifier_network::PhasePlan;
use crate::{EvalError, EvalOptions};

/// One turn of an attempt: what the agent is told (or the solution it runs), how long it
/// has, and the tests that judge it. A task of one step is one stage; a multi-step task's
/// steps are stages in order, in one container.
pub(super) struct Stage<'a> {
    /// The step's name; `None` for a task of one step.
    pub(super) name: Option<&'a str>,
    pub(super) instruction: &'a str,
    /// Relative to `folder`.
    pub(super) solution: Option<&'a Path>,
    pub(super) solution_env: &'a std::collections::BTreeMap<String, String>,
    /// The task's folder, which the solution is read from.
    pub(super) folder: &'a crate::folder::Folder,
    /// Where `--agent oracle`'s complaint about a missing solution points.
    pub(super) dir: std::path::PathBuf,
    /// The task's tests, the step's laid over them, as a tar of one folder named
    /// `tests_name`: copied to `/` once the agent's processes are dead and moved to
    /// `/tests` by the verifier's first command (see [`PREPARE`]).
    pub(super) tests: Vec<u8>,
    /// A name nobody can guess ([`hidden_name`]): what the agent planted cannot be
    /// where the tests land.
    pub(super) tests_name: String,
    pub(super) verifier: &'a harbor::VerifierSection,
    /// What the agent's phase may reach (see [`crate::verifier_network`]).
    pub(super) agent_net: PhasePlan,
    /// What the verifier's phase may reach.
    pub(super) verifier_net: PhasePlan,
    /// The `network` rules of `--config`, laid over each phase's own.
    pub(super) net_extra: Vec<runner_permission::rules::Rule>,
    /// The agent's connections through its proxy, kept as its phase ends.
    pub(super) agent_connections: std::sync::Mutex<Vec<runner_network::ConnectionRecord>>,
    /// The oracle's proxy once its phase is over, for the verifier if the oracle's server
    /// is kept for it (the server listens for the proxy only once).
    pub(super) handed_over: std::sync::Mutex<Option<HandedOver>>,
    pub(super) agent_limit: Duration,
    pub(super) verify_limit: Duration,
    pub(super) min_reward: Option<f64>,
    pub(super) contributes: bool,
}

/// The stages of `task`, their tests packed and their limits scaled.
pub(super) fn stages<'a>(
    task: &'a HarborTask,
    options: &EvalOptions,
) -> Result<Vec<Stage<'a>>, EvalError> {
    let extra = user_network_rules(options)?;
    let scale = |d: Duration| d.mul_f64(options.timeout_multiplier);
    let agent =
        |t: Option<Duration>| scale(t.or(task.agent.timeout).unwrap_or(options.timeouts.agent));
    let verify = |t: Option<Duration>| {
        scale(
            t.or(task.verifier.timeout)
                .unwrap_or(options.timeouts.verify),
        )
    };
    if task.steps.is_empty() {
        let hidden = hidden_name()?;
        return Ok(vec![Stage {
            name: None,
            instruction: &task.instruction,
            solution: task.solution.as_deref(),
            solution_env: &task.solution_env,
            folder: &task.folder,
            dir: task.dir.clone(),
            tests: pack_layers(&task.folder, &[&task.tests], &hidden)?,
            tests_name: hidden,
            verifier: &task.verifier,
            agent_net: agent_plan(task, None, options),
            verifier_net: verifier_plan(task, None, options),
            net_extra: extra.clone(),
            agent_connections: Default::default(),
            handed_over: Default::default(),
            agent_limit: agent(None),
            verify_limit: verify(None),
            min_reward: None,
            contributes: true,
        }]);
    }
    task.steps
        .iter()
        .map(|step| {
            let mut layers: Vec<&Path> = vec![&task.tests];
            layers.extend(step.tests.as_deref());
            let hidden = hidden_name()?;
            Ok(Stage {
                name: Some(&step.name),
                instruction: &step.instruction,
                solution: step.solution.as_deref(),
                solution_env: &task.solution_env,
                folder: &task.folder,
                dir: task.dir.join("steps").join(&step.name),
                tests: pack_layers(&task.folder, &layers, &hidden)?,
                tests_name: hidden,
                verifier: &step.verifier,
                agent_net: agent_plan(task, Some(step), options),
                verifier_net: verifier_plan(task, Some(step), options),
                net_extra: extra.clone(),
                agent_connections: Default::default(),
                handed_over: Default::default(),
                agent_limit: agent(step.agent.timeout),
                verify_limit: verify(step.verifier.timeout),
                min_reward: step.min_reward,
                contributes: step.contributes,
            })
        })
        .collect()
}

/// A folder name for the hidden tests on their way in: 128 random bits, drawn before the
/// agent starts and never in the container until every process of the agent's is dead.
pub(super) fn hidden_name() -> Result<String, EvalError> {
    use std::io::Read;
    let urandom = Path::new("/dev/urandom");
    let mut bytes = [0u8; 16];
    std::fs::File::open(urandom)
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(EvalError::io("read", urandom))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(".runner-tests-{hex}"))
}

/// The verifier's judgements of an attempt's turns, and how they make one.
#[derive(Default)]
pub(super) struct Turns {
    /// Each step run: its name and rewards (empty when its verifier left none).
    pub(super) steps: Vec<(String, std::collections::BTreeMap<String, f64>, bool)>,
    /// Steps not run (the trial stopped early) that would have counted.
    pub(super) skipped: usize,
    /// The verdict as it stands: the last turn's, or the first that could not be read.
    pub(super) last: Option<(Verified, Duration)>,
    pub(super) logs: Vec<u8>,
    pub(super) multi: bool,
}

impl Turns {
    /// Takes a turn's judgement; false when the attempt stops here (a verifier that could
    /// not run, or a step below its `min_reward`).
    pub(super) fn add(&mut self, stage: &Stage<'_>, verified: Verified) -> bool {
        let limit = stage.verify_limit;
        let Some(name) = stage.name else {
            self.last = Some((verified, limit));
            return false;
        };
        self.multi = true;
        let Verified::Ran {
            log,
            exit,
            timed_out,
            score,
        } = verified
        else {
            self.last = Some((verified, limit));
            return false;
        };
        self.logs
            .extend_from_slice(format!("=== step {name}\n").as_bytes());
        self.logs.extend_from_slice(&log);
        let rewards = match &score {
            Score::Rewards(Ok(w)) => w.rewards.clone(),
            _ => Default::default(),
        };
        let below = stage
            .min_reward
            .is_some_and(|min| rewards.is_empty() || rewards.values().any(|r| *r < min));
        self.steps
            .push((name.to_string(), rewards, stage.contributes));
        self.last = Some((
            Verified::Ran {
                log: Vec::new(),
                exit,
                timed_out,
                score,
            },
            limit,
        ));
        !below && !timed_out
    }

    /// The attempt's verification: a task of one step's as it was; a multi-step task's
    /// rewards rolled up by `strategy`, each step's kept in the result.
    pub(super) fn verdict(
        self,
        strategy: harbor::RewardStrategy,
        result: &mut TaskResult,
    ) -> (Verified, Duration) {
        let (last, limit) = self.last.unwrap_or((
            Verified::Failed(EvalError::Task("no step ran".into())),
            Duration::ZERO,
        ));
        if !self.multi {
            return (last, limit);
        }
        result.step_rewards = self
            .steps
            .iter()
            .map(|(name, rewards, _)| (name.clone(), rewards.clone()))
            .collect();
        let Verified::Ran {
            exit, timed_out, ..
        } = last
        else {
            return (last, limit);
        };
        let counted: Vec<&std::collections::BTreeMap<String, f64>> = self
            .steps
            .iter()
            .filter(|(_, _, contributes)| *contributes)
            .map(|(_, r, _)| r)
            .collect();
        let rolled = roll_up(strategy, &counted, self.skipped);
        let score = match rolled {
            Some(rewards) => Score::Rewards(Ok(harbor::Written {
                rewards,
                file: None,
            })),
            None => Score::Rewards(Err(EvalError::Reward(harbor::BadReward::Missing))),
        };
        (
            Verified::Ran {
                log: self.logs,
                exit,
                timed_out,
                score,
            },
            limit,
        )
    }
}

/// Harbor's roll-up of step rewards: each key's mean over the contributing steps (a key a
/// step lacks, and a step the trial stopped before, count 0), or the last step's.
fn roll_up(
    strategy: harbor::RewardStrategy,
    steps: &[&std::collections::BTreeMap<String, f64>],
    skipped: usize,
) -> Option<std::collections::BTreeMap<String, f64>> {
    match strategy {
        harbor::RewardStrategy::Final if skipped > 0 => Some([("reward".to_string(), 0.0)].into()),
        harbor::RewardStrategy::Final => steps.last().map(|r| (*r).clone()),
        harbor::RewardStrategy::Mean => {
            let keys: std::collections::BTreeSet<&String> =
                steps.iter().flat_map(|r| r.keys()).collect();
            let n = (steps.len() + skipped) as f64;
            if keys.is_empty() {
                return (n > 0.0).then(|| [("reward".to_string(), 0.0)].into());
            }
            Some(
                keys.into_iter()
                    .map(|k| {
                        let sum: f64 = steps.iter().map(|r| r.get(k).copied().unwrap_or(0.0)).sum();
                        (k.clone(), sum / n)
                    })
                    .collect(),
            )
        }
    }
}

/// Folders of the task's `folder` packed as one folder `name`, each laid over the ones
/// before it (a step's tests over the task's): a file in a later one wins. Read beneath
/// the task's folder: a link that stays inside is packed as a link, one that leaves it
/// fails the packing, named.
pub(super) fn pack_layers(
    folder: &crate::folder::Folder,
    dirs: &[&Path],
    name: &str,
) -> Result<Vec<u8>, EvalError> {
    let mut files: std::collections::BTreeMap<std::path::PathBuf, (&Path, crate::folder::Entry)> =
        Default::default();
    let mut present = Vec::new();
    for dir in dirs {
        if !folder.is_dir(dir).map_err(images::task_error)? {
            continue;
        }
        present.push(*dir);
        for entry in images::files_under(folder, dir)? {
            files.insert(entry.rel.clone(), (*dir, entry));
        }
    }
    let mut tar = tar::Builder::new(Vec::new());
    // The folder itself, plain (a multi-step task may have tests only in its steps).
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Directory);
    header.set_mode(0o755);
    header.set_size(0);
    tar.append_data(&mut header, name, std::io::empty())
        .map_err(EvalError::io("pack", folder.path()))?;
    for (rel, (dir, entry)) in files {
        folder
            .append(&mut tar, dir, &entry, &Path::new(name).join(&rel))
            .map_err(images::task_error)?;
    }
    tar.into_inner()
        .map_err(EvalError::io("pack", folder.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_names_differ_and_say_nothing() {
        let (a, b) = (hidden_name().unwrap(), hidden_name().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), ".runner-tests-".len() + 32);
    }
}
