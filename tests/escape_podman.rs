//! The docker escape suite and the tool conformance script on rootful Podman, through its
//! Docker-compatible API (`podman system service` on /run/podman/podman.sock, started here
//! if it does not answer; the sandbox image is copied over from the machine's Docker).
//! The same attack table as `escape_docker.rs`, the same holes (none); the conformance
//! test compares Podman's results with the in-process server's, call by call.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test's panic is its failure report"
)]

use common::Backend;
use common::escape;

const BACKEND: Backend = Backend::Docker;

/// Every test of this suite runs on rootful Podman.
fn on_podman() {
    common::engine::use_engine(common::podman::rootful);
}

common::escape_suite!(BACKEND, holes: &[], engine: common::podman::rootful);

/// The tool script of `backends_agree.rs` gives the reference's results on Podman too.
#[tokio::test(flavor = "multi_thread")]
async fn tools_agree_with_the_reference() {
    on_podman();
    common::agree::check(&[Backend::Docker]).await;
}

/// The sandbox really runs on Podman: its containers carry runner's labels there, and the
/// engine says it is Podman.
#[tokio::test(flavor = "multi_thread")]
async fn sandbox_runs_on_podman() {
    on_podman();
    let engine =
        runner_sandbox::docker::engine::Engine::open(common::engine::engine().host.as_deref())
            .await
            .expect("the engine answers");
    assert_eq!(engine.kind, runner_sandbox::docker::engine::Kind::Podman);
    assert!(engine.host.ends_with(common::podman::ROOTFUL_SOCKET));
    let lab = escape::Lab::new(BACKEND);
    let sb = lab.open().await;
    let docker = common::engine::client().await;
    let mine = common::engine::containers_of(&docker, std::process::id()).await;
    assert!(
        mine.iter().any(|id| Some(id) == sb.container_id.as_ref()),
        "the sandbox container {:?} is not among this process's labelled ones: {mine:?}",
        sb.container_id
    );
    let (code, stdout, stderr, _) = escape::run(&sb, "ulimit -Hn; ulimit -Sn").await;
    assert_eq!(code, Some(0), "{stdout:?} {stderr:?}");
    let want = engine.hard_limits.nofile.to_string();
    assert_eq!(
        stdout,
        format!("{want}\n{want}\n"),
        "RLIMIT_NOFILE in the sandbox"
    );
}

/// A Harbor task container (`in_image`) is made as the sandbox container is: with the
/// engine's own hard limits as its rlimits (rootful Podman's OCI runtime refuses to start
/// a container that asks for more, "error setting rlimit type 7"), and under the runtime
/// asked for: one the engine lacks is refused, naming those it has.
#[tokio::test(flavor = "multi_thread")]
async fn harbor_task_containers_get_the_engines_rlimits_and_runtime() {
    use runner_sandbox::docker::in_image::{TaskContainer, TaskImage};
    on_podman();
    let engine =
        runner_sandbox::docker::engine::Engine::open(common::engine::engine().host.as_deref())
            .await
            .expect("the engine answers");
    let task = |runtime: &str| TaskImage {
        image: common::engine::IMAGE.into(),
        workdir: Some("/tmp".into()),
        user: None,
        env: Vec::new(),
        limits: runner_sandbox::spec::Limits::default(),
        network: runner_sandbox::spec::Network::None,
        read_only: Vec::new(),
        server_exe: env!("CARGO_BIN_EXE_runner").into(),
        engine_is_local: true,
        runtime: vec![runtime.to_string()],
        ca_bundle: None,
        verifier_proxy: false,
    };
    for (runtime, says) in [
        ("kata-qemu", "no runtime \"kata-qemu\""),
        ("runsc", "would not be applied"),
    ] {
        let refused = TaskContainer::create(&engine, &task(runtime))
            .await
            .expect_err(runtime);
        assert!(refused.to_string().contains(says), "{runtime}: {refused}");
    }
    let container = TaskContainer::create(&engine, &task("runc"))
        .await
        .expect("the task container is made");
    let sb = container.serve().await.expect("the task container starts");
    let (code, stdout, stderr, _) = escape::run(&sb, "ulimit -Hn; ulimit -Sn").await;
    assert_eq!(code, Some(0), "{stdout:?} {stderr:?}");
    let want = engine.hard_limits.nofile.to_string();
    assert_eq!(stdout, format!("{want}\n{want}\n"), "RLIMIT_NOFILE");
}

/// Podman's Docker-compatible API runs every container under its default runtime whatever
/// the request names (Podman 4.3: `HostConfig.Runtime` is dropped), so a sandbox asking for
/// another one (gVisor's `runsc`, which this Podman lists) is refused, saying so; its
/// default (`runc`) is accepted. Control: Podman itself does ignore the runtime asked for.
#[tokio::test(flavor = "multi_thread")]
async fn a_runtime_podman_would_not_apply_is_refused() {
    on_podman();
    let host = common::engine::engine().host.expect("podman's socket");
    let control = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "id=$(docker -H {host} create --runtime runsc {img} true) && \
             podman inspect --format '{{{{.OCIRuntime}}}}' $id; docker -H {host} rm -f $id >/dev/null",
            img = common::engine::IMAGE
        ))
        .output()
        .expect("docker create");
    assert_eq!(
        String::from_utf8_lossy(&control.stdout).trim(),
        "runc",
        "control: Podman ignored the runtime asked for ({control:?}); if it now applies it, \
         runner need not refuse it"
    );
    let lab = escape::Lab::new(BACKEND);
    let mut spec = lab.spec(runner_sandbox::spec::Limits::default());
    spec.docker.runtime = vec!["runsc".into()];
    let refused = runner_sandbox::open(&spec)
        .await
        .err()
        .expect("runsc on Podman is refused");
    assert!(
        refused.to_string().contains("would not be applied")
            && refused.to_string().contains("containers.conf"),
        "{refused}"
    );
    spec.docker.runtime = vec!["runc".into()];
    let sb = lab.open_spec(&spec).await;
    let (code, stdout, _, _) = escape::run(&sb, "echo ran").await;
    assert_eq!((code, stdout.as_str()), (Some(0), "ran\n"));
}
