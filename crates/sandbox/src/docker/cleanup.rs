//! Finding and removing runner's containers, each judged by its owner. The next docker
//! start removes the ones whose owner is gone ([`remove_orphans`]); `runner sandbox
//! cleanup` removes the same ones and, with `--all`, the live ones too. Both use one rule
//! ([`Owned::standing`]), so that a cleanup never ends a session that a start would have
//! left alone.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::ListContainersOptionsBuilder;

use super::container::{LABEL, LABEL_BOOT, LABEL_OWNER, LABEL_OWNER_START, remove};
use crate::owner;

/// How long [`list`] waits for an engine to name every container's state in Docker's words.
const UNKNOWN_STATE_PATIENCE: Duration = Duration::from_secs(5);

/// Runner's containers, each with its name and the owner its labels name.
pub async fn list(docker: &Docker) -> Result<Vec<Owned>, bollard::errors::Error> {
    let containers = list_labelled(docker).await?;
    Ok(containers
        .into_iter()
        .filter_map(|c| {
            let label = |k: &str| c.labels.as_ref().and_then(|l| l.get(k)).cloned();
            let pid = label(LABEL_OWNER).and_then(|p| p.parse().ok());
            let boot = label(LABEL_BOOT);
            let start = label(LABEL_OWNER_START).and_then(|s| s.parse().ok());
            let name = c
                .names
                .as_ref()
                .and_then(|n| n.first())
                .map(|n| n.trim_start_matches('/').to_string());
            c.id.clone().map(|id| Owned {
                id,
                name,
                pid,
                start,
                boot,
            })
        })
        .collect())
}

/// Every container with runner's label, as the engine lists them.
///
/// Podman's Docker-compatible list names a container whose process has ended but which
/// Podman has not yet cleaned up `stopped`, a state Docker's API does not have, and one
/// such entry fails the whole answer's decoding. The state passes on its own within
/// moments (Podman's cleanup makes it `exited`), so the list is asked again until it
/// decodes, for a few seconds; a state that stays unknown longer is the engine's error.
async fn list_labelled(
    docker: &Docker,
) -> Result<Vec<bollard::models::ContainerSummary>, bollard::errors::Error> {
    let filters = HashMap::from([("label", vec![LABEL])]);
    let opts = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let since = Instant::now();
    loop {
        match docker.list_containers(Some(opts.clone())).await {
            Err(bollard::errors::Error::JsonDataError { .. })
                if since.elapsed() < UNKNOWN_STATE_PATIENCE =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            answer => return answer,
        }
    }
}

/// A container of runner's and who owns it.
pub struct Owned {
    pub id: String,
    /// The engine's name for it, as the engine gave it (show it escaped).
    pub name: Option<String>,
    pub pid: Option<i32>,
    /// When the owner started ([`owner::started_at`]); `None` on containers of runners
    /// that did not record it, which the pid alone judges.
    pub start: Option<u64>,
    pub boot: Option<String>,
}

/// Where a container stands with its owner, and so whether a cleanup may remove it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Nobody owns it any more: the next start or a cleanup removes it.
    Orphan(Orphaned),
    /// Its owner, process `pid` of this machine, still runs (`command`: what it runs,
    /// from [`owner::command_of`]). Only `--all` ends it.
    Live { pid: i32, command: Option<String> },
    /// Another machine made it on a shared engine: that machine's pids mean nothing here,
    /// so it is treated as live.
    Elsewhere { machine: String },
}

/// Why a container counts as nobody's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Orphaned {
    /// Its owner's pid no longer runs.
    OwnerGone(i32),
    /// Its owner's pid runs, but as another process (one that started at another time
    /// than the owner did): the owner is gone and the kernel gave its pid to a newcomer.
    OwnerReused(i32),
    /// Its owner ran before this machine last booted.
    EarlierBoot(Option<i32>),
    /// It names no owner at all (made by hand, or by a runner that did not label owners).
    NoOwner,
}

impl Owned {
    /// Whether its owner is gone. A container another machine made is never judged here
    /// (that machine's pids are not this one's); one from an earlier boot of this machine
    /// is gone whatever its pid says.
    pub fn standing(&self) -> Standing {
        match self.boot.as_deref().map(|b| (b, owner::judge_here(b))) {
            Some((boot, None)) => Standing::Elsewhere {
                machine: boot.split('/').next().unwrap_or_default().to_string(),
            },
            Some((_, Some(false))) => Standing::Orphan(Orphaned::EarlierBoot(self.pid)),
            _ => match self.pid {
                None => Standing::Orphan(Orphaned::NoOwner),
                Some(pid) => self.by_pid(pid),
            },
        }
    }

    /// The standing of a container owned by `pid` of this boot: live while that pid runs
    /// and, when the labels record when the owner started, started then. A pid whose
    /// start cannot be read (a zombie, or a `/proc` that hides it) is judged by whether
    /// it exists, as containers without the start label are.
    fn by_pid(&self, pid: i32) -> Standing {
        let live = || Standing::Live {
            pid,
            command: owner::command_of(pid),
        };
        match (self.start, owner::started_at(pid)) {
            (Some(recorded), Some(now)) if recorded != now => {
                Standing::Orphan(Orphaned::OwnerReused(pid))
            }
            (Some(_), Some(_)) => live(),
            _ if owner::alive(pid) => live(),
            _ => Standing::Orphan(Orphaned::OwnerGone(pid)),
        }
    }

    pub fn orphaned(&self) -> bool {
        matches!(self.standing(), Standing::Orphan(_))
    }

    /// Its name, or the start of its id when the engine gave none (show it escaped).
    pub fn label(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| self.id.chars().take(12).collect())
    }

    /// Removes it, with its anonymous volumes, whether it runs or not.
    pub async fn remove(&self, docker: &Docker) {
        remove(docker, &self.id).await;
    }
}

/// Removes containers whose owning runner process no longer exists; returns how many.
pub async fn remove_orphans(docker: &Docker) -> Result<usize, bollard::errors::Error> {
    let mut removed = 0;
    for c in list(docker).await? {
        if !c.orphaned() {
            continue;
        }
        remove(docker, &c.id).await;
        removed += 1;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(pid: Option<i32>, boot: Option<String>) -> Owned {
        started(pid, None, boot)
    }

    fn started(pid: Option<i32>, start: Option<u64>, boot: Option<String>) -> Owned {
        Owned {
            id: "0123456789abcdef0123".into(),
            name: None,
            pid,
            start,
            boot,
        }
    }

    #[test]
    fn a_container_stands_by_its_owner() {
        let here = owner::boot_id();
        let me = std::process::id() as i32;
        let machine = here.split('/').next().unwrap().to_string();
        assert!(matches!(
            owned(Some(me), Some(here.clone())).standing(),
            Standing::Live { pid, .. } if pid == me
        ));
        // Without a boot label (an older runner's), the pid alone decides.
        assert!(matches!(
            owned(Some(me), None).standing(),
            Standing::Live { .. }
        ));
        assert_eq!(
            owned(Some(i32::MAX), Some(here)).standing(),
            Standing::Orphan(Orphaned::OwnerGone(i32::MAX))
        );
        assert_eq!(
            owned(Some(me), Some(format!("{machine}/an-earlier-boot"))).standing(),
            Standing::Orphan(Orphaned::EarlierBoot(Some(me)))
        );
        assert_eq!(
            owned(None, None).standing(),
            Standing::Orphan(Orphaned::NoOwner)
        );
        assert_eq!(
            owned(Some(i32::MAX), Some("far-away/boot".into())).standing(),
            Standing::Elsewhere {
                machine: "far-away".into()
            }
        );
        assert_eq!(owned(None, None).label(), "0123456789ab");
    }

    /// Attack: the owner's pid now names another live process (this test's, with a start
    /// time the owner did not have). By the pid alone it looks owned; by pid and start
    /// time it is an orphan, and the reason names the reuse.
    #[test]
    fn a_reused_pid_does_not_keep_a_container() {
        let here = owner::boot_id();
        let me = std::process::id() as i32;
        let mine = owner::started_at(me).expect("this process has a start time");
        assert_eq!(
            started(Some(me), Some(mine + 1), Some(here.clone())).standing(),
            Standing::Orphan(Orphaned::OwnerReused(me))
        );
        assert!(started(Some(me), Some(mine.saturating_sub(1)), None).orphaned());
        // Control: the pid with the start it has is its owner, live.
        assert!(matches!(
            started(Some(me), Some(mine), Some(here.clone())).standing(),
            Standing::Live { pid, .. } if pid == me
        ));
        // Without the start label (an older runner's), the pid alone decides, as before.
        assert!(matches!(
            started(Some(me), None, Some(here.clone())).standing(),
            Standing::Live { .. }
        ));
        // A recorded start does not make a dead pid live.
        assert_eq!(
            started(Some(i32::MAX), Some(mine), Some(here)).standing(),
            Standing::Orphan(Orphaned::OwnerGone(i32::MAX))
        );
    }
}
