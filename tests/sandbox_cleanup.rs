//! `runner sandbox cleanup` removes every runner container. A test binary of its own: it
//! removes *all* of them, so it must not run beside tests that have sandboxes open (cargo
//! runs test binaries one after another).

mod common;

use std::collections::HashMap;
use std::process::Command;

use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{CreateContainerOptionsBuilder, ListContainersOptionsBuilder};
use runner::sandbox::docker::{LABEL, LABEL_OWNER};
use runner::sandbox::spec::DEFAULT_IMAGE;

async fn docker() -> Docker {
    common::engine::docker();
    Docker::connect_with_defaults()
        .expect("connect")
        .negotiate_version()
        .await
        .expect("engine answers")
}

async fn containers_of(docker: &Docker, pid: u32) -> Vec<String> {
    let filters = HashMap::from([("label", vec![LABEL])]);
    let opts = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    docker
        .list_containers(Some(opts))
        .await
        .expect("list")
        .into_iter()
        .filter(|c| c.labels.as_ref().and_then(|l| l.get(LABEL_OWNER)) == Some(&pid.to_string()))
        .filter_map(|c| c.id)
        .collect()
}

/// `runner sandbox cleanup` removes every runner container, even one whose owner lives.
#[tokio::test(flavor = "multi_thread")]
async fn removes_every_runner_container_even_with_a_live_owner() {
    let docker = docker().await;
    let me = std::process::id();
    let body = ContainerCreateBody {
        image: Some(DEFAULT_IMAGE.into()),
        cmd: Some(vec!["sleep".into(), "1000".into()]),
        labels: Some(HashMap::from([
            (LABEL.to_string(), "1".to_string()),
            (LABEL_OWNER.to_string(), me.to_string()),
        ])),
        ..Default::default()
    };
    let planted = docker
        .create_container(Some(CreateContainerOptionsBuilder::new().build()), body)
        .await
        .expect("plant a container")
        .id;
    assert!(containers_of(&docker, me).await.contains(&planted));
    let out = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["sandbox", "cleanup"])
        .output()
        .expect("run cleanup");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("container(s)"), "{text}");
    assert_eq!(containers_of(&docker, me).await, Vec::<String>::new());
}
