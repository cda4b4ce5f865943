//! Every fuzz target in `cargo test`: its regressions and corpus always, then mutations for
//! `FUZZ_SECONDS` (2 s a target unless set; CI keeps the default). A failure names the seed
//! and the file the failing input was written to.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test's panic is its failure report"
)]

use runner_fuzz::{Settings, find, run_target};

fn fuzz(name: &str) {
    let target = find(name).unwrap_or_else(|| panic!("no fuzz target {name}"));
    match run_target(target, &Settings::from_env(2.0)) {
        Ok(report) => eprintln!("{report}"),
        Err(failure) => panic!("{failure}"),
    }
}

macro_rules! targets {
    ($($name:ident),* $(,)?) => {
        $(#[test] fn $name() { fuzz(stringify!($name)); })*

        /// Each target above is in the crate's list, and each listed target is above.
        #[test]
        fn every_target_runs_here() {
            let here = [$(stringify!($name)),*];
            for t in runner_fuzz::TARGETS {
                assert!(here.contains(&t.name), "{} is not run by tests/all.rs", t.name);
            }
        }
    };
}

targets!(
    protocol_frames,
    client_answers,
    proxy_request,
    tunnel_first_bytes,
    sni,
    inspected_request,
    patch,
    bash_scan,
    lsp_framing,
    line_framing,
    sse,
    openai_chunks,
    anthropic_chunks,
);
