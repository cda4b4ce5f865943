//! `runner-fuzz`: runs the fuzz targets for longer than the test suite does.
//!
//! ```sh
//! cargo run -p runner-fuzz --release -- list
//! cargo run -p runner-fuzz --release -- run tunnel_first_bytes --seconds 600
//! FUZZ_SECONDS=120 cargo run -p runner-fuzz --release -- all
//! ```

use std::process::ExitCode;

use runner_fuzz::{Settings, TARGETS, find, run_target};

const USAGE: &str =
    "usage: runner-fuzz list | run TARGET [--seconds N] [--seed N] | all [--seconds N] [--seed N]
Failing inputs are written to target/fuzz-crashes (or FUZZ_CRASHES); FUZZ_SECONDS and
FUZZ_SEED are read when the flags are not given.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let mut settings = Settings::from_env(60.0);
    if let Some(s) = flag("--seconds") {
        match s.parse::<f64>() {
            Ok(s) if s.is_finite() && s >= 0.0 => {
                settings.explore = std::time::Duration::from_secs_f64(s);
            }
            _ => return usage(&format!("--seconds wants a number of seconds, not {s:?}")),
        }
    }
    if let Some(s) = flag("--seed") {
        match s.parse() {
            Ok(seed) => settings.seed = seed,
            Err(_) => return usage(&format!("--seed wants a whole number, not {s:?}")),
        }
    }
    let chosen: Vec<_> = match args.first().map(String::as_str) {
        Some("list") => {
            for t in TARGETS {
                println!("{:<20} {}", t.name, t.about);
            }
            return ExitCode::SUCCESS;
        }
        Some("all") => TARGETS.iter().collect(),
        Some("run") => match args.get(1).and_then(|n| find(n)) {
            Some(t) => vec![t],
            None => return usage("`run` wants a target's name; `runner-fuzz list` shows them"),
        },
        _ => return usage("no command"),
    };
    let mut failed = false;
    for target in chosen {
        match run_target(target, &settings) {
            Ok(report) => println!("{report}"),
            Err(failure) => {
                eprintln!("{failure}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn usage(why: &str) -> ExitCode {
    eprintln!("runner-fuzz: {why}\n{USAGE}");
    ExitCode::from(2)
}
