//! Finding and removing runner's containers, each judged by its owner. The next docker
//! start removes the ones whose owner is gone ([`remove_orphans`]); `runner sandbox
//! cleanup` removes the same ones and, with `--all`, the live ones too. Both use one rule
//! ([`Owned::standing`]), so that a cleanup never ends a session that a start would have
//! left alone.

use std::collections::HashMap;

use bollard::Docker;
use bollard::query_parameters::ListContainersOptionsBuilder;

use super::container::{LABEL, LABEL_BOOT, LABEL_OWNER, remove};
use crate::owner;

/// Runner's containers, each with its name and the owner its labels name.
pub async fn list(docker: &Docker) -> Result<Vec<Owned>, bollard::errors::Error> {
    let filters = HashMap::from([("label", vec![LABEL])]);
    let opts = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let containers = docker.list_containers(Some(opts)).await?;
    Ok(containers
        .into_iter()
        .filter_map(|c| {
            let label = |k: &str| c.labels.as_ref().and_then(|l| l.get(k)).cloned();
            let pid = label(LABEL_OWNER).and_then(|p| p.parse().ok());
            let boot = label(LABEL_BOOT);
            let name = c
                .names
                .as_ref()
                .and_then(|n| n.first())
                .map(|n| n.trim_start_matches('/').to_string());
            c.id.clone().map(|id| Owned {
                id,
                name,
                pid,
                boot,
            })
        })
        .collect())
}

/// A container of runner's and who owns it.
pub struct Owned {
    pub id: String,
    /// The engine's name for it, as the engine gave it (show it escaped).
    pub name: Option<String>,
    pub pid: Option<i32>,
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
                Some(pid) if owner::alive(pid) => Standing::Live {
                    pid,
                    command: owner::command_of(pid),
                },
                Some(pid) => Standing::Orphan(Orphaned::OwnerGone(pid)),
            },
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
        Owned {
            id: "0123456789abcdef0123".into(),
            name: None,
            pid,
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
}
