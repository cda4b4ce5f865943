//! Stamps the binary with the commit it was built from and the build date, for
//! `runner --version`: a bug report then says which code it is about.
//!
//! The commit is `git rev-parse --short HEAD` when the sources are a git checkout and git
//! is installed, else `unknown` (a tarball, a crates.io build). The date is
//! SOURCE_DATE_EPOCH's when set (reproducible builds), else today's, in UTC.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    let commit = commit().unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=RUNNER_COMMIT={commit}");
    println!("cargo:rustc-env=RUNNER_BUILD_DATE={}", build_date());
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    rerun_when_head_moves();
}

fn commit() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    let hash = String::from_utf8(out.stdout).ok()?.trim().to_string();
    let is_hash = !hash.is_empty() && hash.chars().all(|c| c.is_ascii_hexdigit());
    (out.status.success() && is_hash).then_some(hash)
}

/// Without these lines cargo would rerun this script on any change in the package (so
/// never for a commit alone); with them, it reruns when HEAD moves to another branch or
/// the branch it names moves to another commit.
fn rerun_when_head_moves() {
    let git = Path::new(".git");
    let head = git.join("HEAD");
    if !head.is_file() {
        // Not a plain checkout (a tarball, or a worktree whose .git is a file): the
        // script still reruns when build.rs itself changes.
        println!("cargo:rerun-if-changed=build.rs");
        return;
    }
    println!("cargo:rerun-if-changed=.git/HEAD");
    let Ok(text) = std::fs::read_to_string(&head) else {
        return;
    };
    if let Some(reference) = text.trim().strip_prefix("ref: ") {
        // A branch lives in its own file, or only in packed-refs after `git gc`. Only
        // files that exist are named: cargo counts a missing one as changed, and would
        // rerun this script (and rebuild the crate) on every build.
        for file in [format!(".git/{reference}"), ".git/packed-refs".to_string()] {
            if Path::new(&file).exists() {
                println!("cargo:rerun-if-changed={file}");
            }
        }
    }
}

/// YYYY-MM-DD of SOURCE_DATE_EPOCH, else of now.
fn build_date() -> String {
    let seconds = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0)
        });
    let (y, m, d) = civil_from_days(seconds.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// algorithm: eras of 400 years, years starting in March so the leap day comes last).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}
