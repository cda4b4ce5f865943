//! Finding and removing runner's leftovers: containers whose owner process is gone, and,
//! for `runner sandbox cleanup`, all of them.

use std::collections::HashMap;

use bollard::Docker;
use bollard::query_parameters::ListContainersOptionsBuilder;

use super::container::{LABEL, LABEL_BOOT, LABEL_OWNER, remove};
use crate::owner;

/// Runner's containers: (id, owner pid, owner's machine and boot).
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
            c.id.clone().map(|id| Owned { id, pid, boot })
        })
        .collect())
}

/// A container of runner's and who owns it.
pub struct Owned {
    pub id: String,
    pub pid: Option<i32>,
    pub boot: Option<String>,
}

impl Owned {
    /// Whether its owner is gone. A container another machine made is never judged here
    /// (that machine's pids are not this one's); one from an earlier boot of this machine
    /// is gone whatever its pid says.
    pub fn orphaned(&self) -> bool {
        match self.boot.as_deref().map(owner::judge_here) {
            Some(None) => false,
            Some(Some(false)) => true,
            _ => !self.pid.is_some_and(owner::alive),
        }
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

/// Removes every runner container, owned or not; returns how many.
pub async fn remove_all(docker: &Docker) -> Result<usize, bollard::errors::Error> {
    let all = list(docker).await?;
    for c in &all {
        remove(docker, &c.id).await;
    }
    Ok(all.len())
}
