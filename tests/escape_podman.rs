//! The docker escape suite and the tool conformance script on rootful Podman, through its
//! Docker-compatible API (`podman system service` on /run/podman/podman.sock, started here
//! if it does not answer; the sandbox image is copied over from the machine's Docker).
//! The same attack table as `escape_docker.rs`, the same holes (none); the conformance
//! test compares Podman's results with the in-process server's, call by call.

mod common;

use common::Backend;
use common::escape;

const BACKEND: Backend = Backend::Docker;

/// Every test of this binary runs on rootful Podman.
fn on_podman() {
    common::engine::use_engine(common::podman::rootful);
}

escape::escape_suite!(BACKEND, holes: &[], engine: common::podman::rootful);

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
        runner::sandbox::docker::engine::Engine::open(common::engine::engine().host.as_deref())
            .await
            .expect("the engine answers");
    assert_eq!(engine.kind, runner::sandbox::docker::engine::Kind::Podman);
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
