//! Fuzzing for what the host reads from peers it does not trust, on the stable toolchain.
//!
//! Every target is a plain `fn(&[u8])` (in [`targets`]) that feeds the bytes to one of
//! runner's real decoders and asserts what must hold whatever the bytes are: no panic, and a
//! property where one exists (a frame that decodes encodes back to itself; a tunnel's verdict
//! does not depend on where the client paused). The driver here adds the two bounds a panic
//! check alone misses: memory ([`alloc`]: an input that makes the host hold more than its
//! target's budget is a finding) and time (a slow input is a finding, a hung one is written
//! out by a watchdog).
//!
//! The driver is a mutation fuzzer without coverage feedback: it starts from each target's
//! corpus (`corpus/NAME/`) and stacks byte-level and dictionary mutations on it. That runs
//! in `cargo test` on the machine's stable Rust with no sanitizer runtime, which is what CI
//! has. Inputs that once failed live in `regressions/NAME/` and are replayed first, every
//! time.

pub mod alloc;
mod driver;
mod mutate;
#[allow(
    clippy::expect_used,
    reason = "a target asserts what must hold by panicking: the panic is the fuzzer's finding"
)]
pub mod targets;

pub use driver::{Failure, Report, Settings, run_target};
pub use targets::{TARGETS, Target, find};

/// Every binary that links the fuzz crate (its tests, its command) counts memory per input.
#[global_allocator]
static ALLOCATOR: alloc::Budgeted = alloc::Budgeted;
