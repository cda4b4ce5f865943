//! Finding and removing runner's leftovers: containers whose owner process is gone, and,
//! for `runner sandbox cleanup`, all of them.

use std::collections::HashMap;

use bollard::Docker;
use bollard::query_parameters::ListContainersOptionsBuilder;

use super::container::{LABEL, LABEL_OWNER, remove};
use crate::sandbox::owner;

/// Runner's containers: (id, owner pid).
pub async fn list(docker: &Docker) -> Result<Vec<(String, Option<i32>)>, bollard::errors::Error> {
    let filters = HashMap::from([("label", vec![LABEL])]);
    let opts = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let containers = docker.list_containers(Some(opts)).await?;
    Ok(containers
        .into_iter()
        .filter_map(|c| {
            let owner = c
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_OWNER))
                .and_then(|p| p.parse().ok());
            c.id.map(|id| (id, owner))
        })
        .collect())
}

/// Removes containers whose owning runner process no longer exists; returns how many.
pub async fn remove_orphans(docker: &Docker) -> Result<usize, bollard::errors::Error> {
    let mut removed = 0;
    for (id, owner) in list(docker).await? {
        if owner.is_some_and(owner::alive) {
            continue;
        }
        remove(docker, &id).await;
        removed += 1;
    }
    Ok(removed)
}

/// Removes every runner container, owned or not; returns how many.
pub async fn remove_all(docker: &Docker) -> Result<usize, bollard::errors::Error> {
    let all = list(docker).await?;
    for (id, _) in &all {
        remove(docker, id).await;
    }
    Ok(all.len())
}
