//! `runner sandbox cleanup` removes every runner container. A test binary of its own: it
//! removes *all* of them, so it must not run beside tests that have sandboxes open (cargo
//! runs test binaries one after another).

mod common;

use std::collections::HashMap;
use std::process::Command;

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::CreateContainerOptionsBuilder;
use runner::sandbox::docker::{LABEL, LABEL_OWNER};
use runner::sandbox::spec::DEFAULT_IMAGE;

/// `runner sandbox cleanup` removes every runner container, even one whose owner lives.
#[tokio::test(flavor = "multi_thread")]
async fn removes_every_runner_container_even_with_a_live_owner() {
    let docker = common::engine::client().await;
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
    assert!(
        common::engine::containers_of(&docker, me)
            .await
            .contains(&planted)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["sandbox", "cleanup"])
        .output()
        .expect("run cleanup");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("container(s)"), "{text}");
    assert_eq!(
        common::engine::containers_of(&docker, me).await,
        Vec::<String>::new()
    );
}
