//! The verifier's phase: the hidden tests put in place, `test.sh` run, its rewards read.
//!
//! It runs once nothing of the agent's does (see [`super::agent`]), in the file system the
//! agent left. What the agent left where the verifier looks (a `conftest.py` in `/tests`, a
//! reward in `/logs/verifier`) is moved aside first; the tests come in under a name nobody
//! could guess and are moved to `/tests` by the verifier's first command, as root (the
//! tests are written there by that same command where they fit in it, see
//! [`super::inline`]). The rewards are printed after `test.sh` by the same command where
//! the verifier runs as root, else (or when what was printed is not whole) read from
//! `/logs/verifier` through the engine; only regular files count.

use std::path::Path;
use std::time::Duration;

use runner_sandbox::Sandbox;
use runner_sandbox::docker::in_image::{ExecOutput, TaskContainer};
use tokio_util::sync::CancellationToken;

use super::network::verifier_proxy;
use super::stages::Stage;
use super::{engine_call, inline, lock};
use crate::EvalError;
use crate::attempt::{LOG_LIMIT, drop_blocking};
use crate::harbor;
use crate::verdict::{Score, Verified};
use crate::verifier_network::PhasePlan;

/// Moves aside what the agent left where the verifier looks (it may have planted a
/// `conftest.py` in `/tests` or a reward in `/logs/verifier`), puts the hidden tests
/// (copied in as `/$1`, a name nobody could guess) at `/tests`, and makes
/// `/logs/verifier` afresh. Run as root; moving works where deleting might not (a
/// directory the agent made read-only).
pub(super) const PREPARE: &str = "set -e
for d in /tests /logs/verifier; do
  if [ -e \"$d\" ] || [ -L \"$d\" ]; then mv -f -- \"$d\" \"$d.left-by-agent.$$\"; fi
done
mv -- \"/$1\" /tests
mkdir -p /logs/verifier
chmod 1777 /logs/verifier";

/// What [`PREPARE`] prints once done, when `test.sh` follows it in the same command: the
/// verifier's output starts after it, and without it the preparation failed.
const PREPARED: &str = "runner: /tests and /logs/verifier are ready";

/// The task container for the verifier: the agent's server if it was kept (nothing else
/// runs there), and how the hidden tests come in.
pub(super) struct Verifying<'a> {
    pub(super) container: &'a TaskContainer,
    pub(super) live: Option<Sandbox>,
    pub(super) tests: TestsIn,
}

/// How the hidden tests come into the container.
pub(super) enum TestsIn {
    /// Copied in through the engine already (or not: why).
    Copied(Result<(), EvalError>),
    /// Written by the verifier's first command: these lines ([`super::inline`]).
    Written(String),
}

/// The lines that write the stage's hidden tests, where they fit in the verifier's command
/// ([`TestsIn::Written`]); `None`: they are copied through the engine.
pub(super) fn tests_inline(stage: &Stage<'_>) -> Option<String> {
    inline::unpack_script(&stage.tests, inline::SCRIPT_LIMIT)
}

pub(super) async fn verify(
    stage: &Stage<'_>,
    verifying: Verifying<'_>,
    way_out: Option<&[runner_permission::rules::Rule]>,
    connections: &mut Vec<runner_network::ConnectionRecord>,
    stop: &CancellationToken,
) -> Verified {
    let Verifying {
        container,
        live,
        tests,
    } = verifying;
    // The oracle's proxy still listens in its server; in a fresh start it is gone.
    let handed_over = lock(&stage.handed_over).take().filter(|_| live.is_some());
    let steps = async {
        let unpack = match tests {
            TestsIn::Copied(copied) => copied.map(|()| String::new())?,
            TestsIn::Written(lines) => lines,
        };
        // A running container for the engine's exec, with nothing of the agent's in it:
        // the agent's own server when nothing else was left, else a fresh start.
        let sandbox = match live {
            Some(sandbox) => sandbox,
            None => {
                let _engine = crate::engines::CALLS.acquire().await;
                engine_call(container.serve())
                    .await
                    .map_err(|e| e.during("cannot start the task container again"))?
            }
        };
        let ran = async {
            let (proxy, skip) = match (handed_over, way_out) {
                (Some(h), rules) => {
                    h.gate
                        .switch(rules.map_or_else(PhasePlan::offline_rules, <[_]>::to_vec));
                    (Some(h.proxy), h.agent_records)
                }
                (None, Some(rules)) => (Some(verifier_proxy(&sandbox, rules).await?), 0),
                (None, None) => (None, 0),
            };
            let ran = run_tests(stage, container, way_out.is_some(), &unpack).await;
            if let Some(proxy) = proxy {
                proxy.settle(Duration::from_secs(2)).await;
                *connections = proxy.records().into_iter().skip(skip).collect();
            }
            ran
        }
        .await;
        drop_blocking(sandbox).await;
        ran
    };
    let (ran, rewards) = tokio::select! {
        r = steps => match r {
            Ok(r) => r,
            Err(e) => return Verified::Failed(e),
        },
        _ = stop.cancelled() => return Verified::Interrupted,
    };
    let mut log = ran.output;
    if let Some(code) = ran.code {
        log.extend_from_slice(format!("\n[test.sh exited with {code}]\n").as_bytes());
    }
    Verified::Ran {
        log,
        exit: ran.code,
        timed_out: ran.timed_out,
        score: Score::Rewards(rewards),
    }
}

/// `/tests` and `/logs/verifier` made afresh with the tests in place (`unpack` writes them
/// first, when they were not copied in), `test.sh` run (with the proxy's variables when it
/// has one), and the rewards it left read. A verifier that runs as root gets all of it in
/// one engine command, the rewards printed after `test.sh`.
async fn run_tests(
    stage: &Stage<'_>,
    container: &TaskContainer,
    proxied: bool,
    unpack: &str,
) -> Result<(ExecOutput, Rewards), EvalError> {
    let limit = stage.verify_limit;
    let mut env: Vec<(String, String)> = Vec::new();
    // The task's loopback is its own, as for its agent (`in_image`).
    if proxied {
        runner_sandbox::spec::set_proxy_env(&mut env, &[]);
    }
    // The task's own variables win, as they would over the environment's.
    env.extend(
        stage
            .verifier
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    let user = stage.verifier.user.as_deref();
    // The task's own PATH could hide the preparation's programs: it then runs apart.
    let together = is_root(&container.exec_user(user)) && !env.iter().any(|(k, _)| k == "PATH");
    let prepare = format!("set -e\n{unpack}{PREPARE}");
    let ran = if together {
        let marker = super::stages::hidden_name()?;
        let script = format!(
            "{prepare}\nprintf '%s\\n' '{PREPARED}'\nset +e\nbash /tests/test.sh\ncode=$?\n{}\nexit \"$code\"",
            inline::PRINT_REWARDS
        );
        let argv = ["sh", "-c", &script, "sh", &stage.tests_name, &marker];
        let ran = engine_call(container.exec(&argv, user, &env, limit, LOG_LIMIT as usize)).await?;
        let mut ran = after_prepared(ran)?;
        if let Some((log, [txt, json])) = inline::split_rewards(&ran.output, &marker) {
            ran.output = log;
            let rewards = harbor::read_reward(txt.as_deref(), json.as_deref());
            return Ok((ran, rewards.map_err(EvalError::from)));
        }
        ran
    } else {
        let argv = ["sh", "-c", &prepare, "sh", &stage.tests_name];
        let prepared =
            engine_call(container.exec(&argv, Some("root"), &[], limit, LOG_LIMIT as usize))
                .await?;
        if prepared.code != Some(0) {
            return Err(not_prepared(&prepared.output));
        }
        let argv = ["bash", "/tests/test.sh"];
        engine_call(container.exec(&argv, user, &env, limit, LOG_LIMIT as usize)).await?
    };
    let rewards = read_rewards(container).await?;
    Ok((ran, rewards))
}

/// Whether an engine exec as `user` runs as root.
fn is_root(user: &str) -> bool {
    let name = user.split(':').next().unwrap_or(user);
    name == "0" || name == "root"
}

/// The verifier's output without [`PREPARED`]; without that line the preparation failed
/// (and what it printed says why). The line is looked for, not expected first: the
/// engine hands over standard output and standard error as two streams, so a line
/// `test.sh` writes to standard error at once can arrive ahead of it.
fn after_prepared(mut ran: ExecOutput) -> Result<ExecOutput, EvalError> {
    let line = format!("{PREPARED}\n");
    let found = ran
        .output
        .windows(line.len())
        .position(|w| w == line.as_bytes());
    match found {
        Some(at) => {
            ran.output.drain(at..at + line.len());
            Ok(ran)
        }
        None => Err(not_prepared(&ran.output)),
    }
}

fn not_prepared(output: &[u8]) -> EvalError {
    EvalError::Task(format!(
        "cannot make /tests and /logs/verifier afresh: {}",
        String::from_utf8_lossy(output).trim()
    ))
}

/// The rewards `test.sh` left, with their file: `Err` when there are none, or they are not
/// numbers.
pub(super) type Rewards = Result<harbor::Written, EvalError>;

/// The rewards `test.sh` left. `Err`: they could not be read (the engine's failure);
/// `Ok(Err)`: there are none, or they are not numbers (the task is not solved).
async fn read_rewards(container: &TaskContainer) -> Result<Rewards, EvalError> {
    // One copy of the folder, when it is small (it usually is); else each file on its own.
    let folder = Path::new("/logs/verifier");
    if let Ok(tar) = engine_call(container.download(folder, 8 << 20)).await {
        let [txt, json] = match tar {
            Some(tar) => reward_files(&tar),
            None => [None, None],
        };
        return Ok(harbor::read_reward(txt.as_deref(), json.as_deref()).map_err(EvalError::from));
    }
    let mut found = [None, None];
    for (slot, name) in found.iter_mut().zip(["reward.txt", "reward.json"]) {
        let path = Path::new("/logs/verifier").join(name);
        if let Some(tar) = engine_call(container.download(&path, 1 << 20)).await? {
            *slot = first_file(&tar);
        }
    }
    let [txt, json] = found;
    Ok(harbor::read_reward(txt.as_deref(), json.as_deref()).map_err(EvalError::from))
}

/// `verifier/reward.txt` and `verifier/reward.json` of the tar of `/logs/verifier`, where
/// they are regular files (a link counts as no reward, as it does copied alone).
fn reward_files(tar: &[u8]) -> [Option<String>; 2] {
    use std::io::Read;
    let mut found = [None, None];
    let mut archive = tar::Archive::new(tar);
    let Ok(entries) = archive.entries() else {
        return found;
    };
    for mut entry in entries.flatten() {
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let Ok(path) = entry.path().map(|p| p.into_owned()) else {
            continue;
        };
        let slot = if path == Path::new("verifier/reward.txt") {
            0
        } else if path == Path::new("verifier/reward.json") {
            1
        } else {
            continue;
        };
        let mut text = String::new();
        if entry.read_to_string(&mut text).is_ok() {
            found[slot] = Some(text);
        }
    }
    found
}

/// The text of the first regular file in a tar (what the engine sends for one file).
fn first_file(tar: &[u8]) -> Option<String> {
    use std::io::Read;
    let mut archive = tar::Archive::new(tar);
    let entries = archive.entries().ok()?;
    for mut entry in entries.flatten() {
        if entry.header().entry_type().is_file() {
            let mut text = String::new();
            entry.read_to_string(&mut text).ok()?;
            return Some(text);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, Option<&str>)]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, body) in entries {
            let mut header = tar::Header::new_gnu();
            match body {
                Some(text) => {
                    header.set_size(text.len() as u64);
                    header.set_mode(0o644);
                    tar.append_data(&mut header, path, text.as_bytes()).unwrap();
                }
                None => {
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_size(0);
                    tar.append_link(&mut header, path, "/elsewhere").unwrap();
                }
            }
        }
        tar.into_inner().unwrap()
    }

    #[test]
    fn rewards_come_from_the_two_files_of_the_folder_alone() {
        let tar = tar_of(&[
            ("verifier/notes/reward.txt", Some("9")),
            ("verifier/reward.txt", Some("1\n")),
            ("verifier/reward.json", Some("{\"a\": 0.5}")),
        ]);
        assert_eq!(
            reward_files(&tar),
            [Some("1\n".to_string()), Some("{\"a\": 0.5}".to_string())]
        );
        // A link is no reward, as it is copied alone.
        let linked = tar_of(&[("verifier/reward.txt", None)]);
        assert_eq!(reward_files(&linked), [None, None]);
    }

    #[test]
    fn the_verifier_output_is_what_follows_the_preparation_or_it_failed() {
        let out = |text: &str| ExecOutput {
            output: text.as_bytes().to_vec(),
            code: Some(0),
            timed_out: false,
        };
        let ran = after_prepared(out(&format!("{PREPARED}\nPASS\n"))).unwrap();
        assert_eq!(ran.output, b"PASS\n");
        let failed = after_prepared(out("mv: cannot move '/tests'\n")).unwrap_err();
        assert!(
            failed.to_string().contains("cannot move '/tests'"),
            "{failed}"
        );
        // test.sh's standard error can arrive ahead of the line (two streams): it is kept,
        // and the line still says the preparation finished (it is printed only then, as
        // the preparation stops at its first failure).
        let raced = after_prepared(out(&format!(
            "grep: /app/one.txt: missing\n{PREPARED}\nFAIL\n"
        )))
        .unwrap();
        assert_eq!(raced.output, b"grep: /app/one.txt: missing\nFAIL\n");
    }

    #[test]
    fn root_is_named_by_name_or_id_with_or_without_a_group() {
        for user in ["0", "root", "0:0", "root:root"] {
            assert!(is_root(user), "{user}");
        }
        for user in ["1000", "agent", "10", "rooted"] {
            assert!(!is_root(user), "{user}");
        }
    }
}
