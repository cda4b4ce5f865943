//! What a proof costs: `cargo bench --bench prove`.
//!
//! The built-in defaults against a typical boundary (the one in docs/PERMISSIONS.md, with
//! `.env` reads and a few commands held back), proved for every permission and subject.
//! Target: well under a second. The peer, run side by side, is what a test without a
//! prover would do: ask the gate about every subject up to three characters over the same
//! alphabet for the same permissions, which proves nothing beyond those subjects.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark that cannot set up has nothing to measure: it stops there"
)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use runner_permission::PermissionRequest;
use runner_permission::gate::{PolicyAsker, RuleGate};
use runner_permission::layers::{defaults, parse_toml};

const TARGET: Duration = Duration::from_secs(1);
const RUNS: usize = 20;
const BOUNDARY: &str = r#"[permission]
"*" = "allow"
external_directory = "ask"
network = "ask"
question = "deny"
[permission.bash]
"sudo *" = "deny"
"rm -rf *" = "deny"
"curl *" = "ask"
[permission.read]
"*.env" = "ask"
"*.env.*" = "ask"
"*.env.example" = "allow"
"/etc/shadow" = "deny"
"#;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let worktree = Path::new("/home/u/project");
    let rules = defaults();
    let boundary = parse_toml(BOUNDARY, "boundary.toml", "/home/u").unwrap();
    let proof = runner_prove::prove(&rules, &boundary, worktree).unwrap();
    let names: Vec<(&str, &str)> = proof
        .counterexamples
        .iter()
        .map(|c| (c.permission.as_str(), c.subject.as_str()))
        .collect();
    println!("counterexamples: {names:?}");

    let proving = median(
        (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(runner_prove::prove(&rules, &boundary, worktree).unwrap());
                t.elapsed()
            })
            .collect(),
    );

    // The peer: every subject of up to three characters, for the same permissions.
    let letters: Vec<char> = "/.* -aerlmsvxc".chars().collect();
    let mut subjects = vec![String::new()];
    let mut layer = vec![String::new()];
    for _ in 0..3 {
        layer = layer
            .iter()
            .flat_map(|s| letters.iter().map(move |c| format!("{s}{c}")))
            .collect();
        subjects.extend(layer.iter().cloned());
    }
    let gate = |r: &[runner_permission::rules::Rule]| {
        RuleGate::new(worktree, r.to_vec(), Arc::new(PolicyAsker::allow()))
    };
    let (a, b) = (gate(&rules), gate(&boundary));
    let sampling = median(
        (0..3)
            .map(|_| {
                let t = Instant::now();
                for permission in runner_prove::KNOWN {
                    for s in &subjects {
                        let request =
                            PermissionRequest::new(permission, vec![s.clone()], Vec::new());
                        std::hint::black_box((a.verdict(&request), b.verdict(&request)));
                    }
                }
                t.elapsed()
            })
            .collect(),
    );
    let tried = subjects.len() * runner_prove::KNOWN.len();
    println!(
        "prove (every subject, every permission): {:.2} ms median of {RUNS}",
        proving.as_secs_f64() * 1e3
    );
    println!(
        "peer, the gate on {tried} subjects up to 3 characters: {:.2} ms",
        sampling.as_secs_f64() * 1e3
    );
    println!(
        "ratio prove / peer: {:.2}",
        proving.as_secs_f64() / sampling.as_secs_f64()
    );
    println!(
        "target < {} ms: {}",
        TARGET.as_millis(),
        if proving < TARGET { "met" } else { "MISSED" }
    );
}
