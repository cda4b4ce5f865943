//! The same tool calls give the same results on every backend: the tools are host logic
//! over one protocol, so the wall they run behind must not change what the model sees.
//! The script (`common/agree.rs`) runs on the in-process server (the reference), the plain
//! child, landlock and docker; outcomes, outputs, errors and metadata are compared after the
//! per-run paths are replaced.

use common::Backend;

#[tokio::test(flavor = "multi_thread")]
async fn every_backend_gives_the_same_results() {
    common::agree::check(&[Backend::Child, Backend::Landlock, Backend::Docker]).await;
}
