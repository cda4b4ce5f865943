//! The same tool calls give the same results on every backend (`common/conformance.rs`):
//! the in-process server (the reference), the plain child, landlock and docker.

mod common;

use common::{Backend, conformance};

#[tokio::test(flavor = "multi_thread")]
async fn every_backend_gives_the_same_results() {
    let reference = conformance::reference().await;
    for backend in [Backend::Child, Backend::Landlock, Backend::Docker] {
        conformance::agree_with(&reference, backend).await;
    }
}
