//! `runner sandbox cleanup` removes every runner container. A test binary of its own: it
//! removes *all* of them, so it must not run beside tests that have sandboxes open (cargo
//! runs test binaries one after another).

use runner_test_support as common;

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

/// It also removes copy workspaces whose run was killed before it ended with nothing in
/// them, and keeps the ones that ended, or hold changes, for review.
#[test]
fn removes_unfinished_workspaces_of_dead_runs_and_keeps_finished_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let root = data.join("runner/workspaces");
    // A pid that cannot be running: the largest a Linux pid can be, plus one.
    let dead = 4_194_305;
    let me = std::process::id();
    for (id, owner, finished) in [
        ("killed", dead, false),
        ("killed-with-changes", dead, false),
        ("waiting", dead, true),
        ("in-use", me, false),
    ] {
        let dir = root.join(id);
        std::fs::create_dir_all(dir.join("work")).unwrap();
        std::fs::create_dir_all(dir.join("base")).unwrap();
        if id == "killed-with-changes" {
            // What the agent did before the run was killed is kept for review.
            std::fs::write(dir.join("work/new.txt"), "work\n").unwrap();
        }
        let meta = serde_json::json!({"id": id, "source": "/nowhere", "created": 1,
            "owner_pid": owner, "finished": finished});
        std::fs::write(dir.join("meta.json"), meta.to_string()).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["sandbox", "cleanup"])
        .env("XDG_DATA_HOME", &data)
        .output()
        .expect("run cleanup");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("removed 1 unfinished workspace"), "{text}");
    assert!(!root.join("killed").exists());
    assert!(root.join("killed-with-changes").exists());
    assert!(root.join("waiting").exists());
    assert!(root.join("in-use").exists());
}
