//! Benchmark: runner's `glob`/`grep` (through the sandbox protocol) against ripgrep.
//!
//! Two phases, because speed is worthless if the answers differ:
//!
//! 1. Parity: on a synthetic git tree full of edge cases (nested ignore
//!    files, negations, hidden files, binary files, symlinks, CRLF, invalid
//!    UTF-8) and on the benchmark tree, the result *sets* of runner and of
//!    OpenCode's rg command lines must be identical. Any difference aborts.
//! 2. Speed: on the cargo registry sources, runner (a sandbox request with its mtime
//!    sort) and rg (spawned, stdout drained through a pipe) run alternately,
//!    1 warm-up + 10 timed runs each; the medians must satisfy
//!    runner / rg <= 1.25.
//!
//! Run with `cargo bench --bench search`. `SEARCH_BENCH_ROOT` overrides the
//! tree; `SEARCH_BENCH_RUNS` the number of timed runs.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark that cannot set up has nothing to measure: it stops there"
)]

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use std::cell::RefCell;
use std::collections::HashMap;

use runner_protocol::{GlobOutcome, GrepOutcome};
use runner_sandbox::{Sandbox, local};

/// runner's side is measured through the sandbox protocol (request frame → server thread →
/// ripgrep's crates → JSON response with every result → client), the path the tools take,
/// not by calling the search functions directly.
struct Through {
    rt: tokio::runtime::Runtime,
    sandboxes: RefCell<HashMap<PathBuf, Sandbox>>,
}

thread_local! {
    static THROUGH: Through = Through {
        rt: tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime"),
        sandboxes: RefCell::new(HashMap::new()),
    };
}

fn with_sandbox<T>(root: &Path, f: impl AsyncFnOnce(&Sandbox) -> T) -> T {
    THROUGH.with(|t| {
        if !t.sandboxes.borrow().contains_key(root) {
            let sandbox =
                t.rt.block_on(local::in_process(root, &[]))
                    .expect("start the sandbox");
            t.sandboxes.borrow_mut().insert(root.to_path_buf(), sandbox);
        }
        let boxes = t.sandboxes.borrow();
        t.rt.block_on(f(&boxes[root]))
    })
}

fn grep(
    root: &Path,
    pattern: &str,
    include: Option<&str>,
    limit: usize,
) -> Result<GrepOutcome, String> {
    with_sandbox(root, async |s: &Sandbox| {
        s.client
            .grep(root.to_path_buf(), pattern, include, limit)
            .await
            .map_err(|e| e.to_string())
    })
}

fn glob(root: &Path, pattern: &str, limit: usize) -> Result<GlobOutcome, String> {
    with_sandbox(root, async |s: &Sandbox| {
        s.client
            .glob(root.to_path_buf(), pattern, limit)
            .await
            .map_err(|e| e.to_string())
    })
}

const TARGET_RATIO: f64 = 1.25;

const GREP_CASES: &[&str] = &[r"fn\s+new\(", "unsafe impl", "RESOLVE_BENEATH", r"\bSelf\b"];
const GLOB_CASES: &[&str] = &["*.rs", "**/Cargo.toml", "*.md"];

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; any other argument is a name filter we
    // do not support, so ignore arguments entirely.
    if Command::new("rg").arg("--version").output().is_err() {
        eprintln!(
            "ripgrep (`rg`) is not installed or not on PATH; the benchmark compares \
             against it. Install it with `apt-get install -y ripgrep` and re-run."
        );
        return ExitCode::FAILURE;
    }
    let rg_version = Command::new("rg")
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .unwrap_or_default();
    println!("peer: {rg_version}");

    if let Err(msg) = fixture_parity() {
        eprintln!("PARITY FAILURE on the edge-case fixture: {msg}");
        return ExitCode::FAILURE;
    }
    println!("parity on edge-case fixture: OK");

    let root = bench_root();
    let (files, bytes) = tree_size(&root);
    println!(
        "tree: {} ({files} files, {:.1} MiB)",
        root.display(),
        bytes as f64 / (1024.0 * 1024.0)
    );
    if files < 1000 {
        eprintln!(
            "the benchmark tree is nearly empty; populate it (e.g. `cargo fetch` in this \
             crate fills the cargo registry) or set SEARCH_BENCH_ROOT"
        );
        return ExitCode::FAILURE;
    }
    let runs: usize = std::env::var("SEARCH_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("cores: {threads}, runs: 1 warm-up + {runs} timed, alternating\n");

    let mut rows = Vec::new();
    let mut all_pass = true;
    for pattern in GREP_CASES {
        let parity = grep_parity(&root, pattern, None);
        let count = match parity {
            Ok(n) => n,
            Err(msg) => {
                eprintln!("PARITY FAILURE grep {pattern:?}: {msg}");
                return ExitCode::FAILURE;
            }
        };
        let rg_args = grep_rg_args(pattern, &root);
        let (ours, theirs) = time_pair(
            runs,
            || {
                let out = grep(&root, pattern, None, usize::MAX).expect("grep failed");
                std::hint::black_box(out.matches.len());
            },
            || {
                run_rg(&root, &rg_args);
            },
        );
        all_pass &= push_row(&mut rows, format!("grep {pattern}"), count, ours, theirs);
    }
    for pattern in GLOB_CASES {
        let count = match glob_parity(&root, pattern) {
            Ok(n) => n,
            Err(msg) => {
                eprintln!("PARITY FAILURE glob {pattern:?}: {msg}");
                return ExitCode::FAILURE;
            }
        };
        let rg_args = glob_rg_args(pattern, &root);
        let (ours, theirs) = time_pair(
            runs,
            || {
                let out = glob(&root, pattern, usize::MAX).expect("glob failed");
                std::hint::black_box(out.files.len());
            },
            || {
                run_rg(&root, &rg_args);
            },
        );
        all_pass &= push_row(&mut rows, format!("glob {pattern}"), count, ours, theirs);
    }

    println!(
        "{:<22} {:>8} {:>12} {:>12} {:>7}  result",
        "case", "results", "runner", "rg", "ratio"
    );
    for row in &rows {
        println!("{row}");
    }
    if all_pass {
        println!("\nall cases within runner/rg <= {TARGET_RATIO}");
        ExitCode::SUCCESS
    } else {
        println!("\nsome cases exceed runner/rg <= {TARGET_RATIO}");
        ExitCode::FAILURE
    }
}

fn push_row(
    rows: &mut Vec<String>,
    name: String,
    count: usize,
    ours: Duration,
    theirs: Duration,
) -> bool {
    let ratio = ours.as_secs_f64() / theirs.as_secs_f64();
    let pass = ratio <= TARGET_RATIO;
    rows.push(format!(
        "{name:<22} {count:>8} {:>9.2} ms {:>9.2} ms {ratio:>7.2}  {}",
        ours.as_secs_f64() * 1e3,
        theirs.as_secs_f64() * 1e3,
        if pass { "PASS" } else { "FAIL" }
    ));
    pass
}

fn bench_root() -> PathBuf {
    if let Some(root) = std::env::var_os("SEARCH_BENCH_ROOT") {
        return PathBuf::from(root);
    }
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from(".cargo"));
    cargo_home.join("registry").join("src")
}

/// Counts regular files and bytes without following symlinks.
fn tree_size(root: &Path) -> (usize, u64) {
    let mut stack = vec![root.to_path_buf()];
    let (mut files, mut bytes) = (0, 0);
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(md) = entry.metadata() else { continue };
            if md.is_dir() {
                stack.push(entry.path());
            } else if md.is_file() {
                files += 1;
                bytes += md.len();
            }
        }
    }
    (files, bytes)
}

/// Alternates runner and rg so drift in machine load hits both equally.
fn time_pair(
    runs: usize,
    mut ours: impl FnMut(),
    mut theirs: impl FnMut(),
) -> (Duration, Duration) {
    ours();
    theirs();
    let mut a = Vec::with_capacity(runs);
    let mut b = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        ours();
        a.push(t.elapsed());
        let t = Instant::now();
        theirs();
        b.push(t.elapsed());
    }
    (median(a), median(b))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    let n = v.len();
    if n == 0 {
        Duration::ZERO
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

/// OpenCode's grep command line, verbatim.
fn grep_rg_args(pattern: &str, root: &Path) -> Vec<String> {
    vec![
        "-nH".into(),
        "--hidden".into(),
        "--no-messages".into(),
        "--field-match-separator=|".into(),
        "--regexp".into(),
        pattern.into(),
        root.to_string_lossy().into_owned(),
    ]
}

/// OpenCode's glob command line, verbatim.
fn glob_rg_args(pattern: &str, root: &Path) -> Vec<String> {
    vec![
        "--files".into(),
        "--glob=!.git/*".into(),
        "--hidden".into(),
        format!("--glob={pattern}"),
        root.to_string_lossy().into_owned(),
    ]
}

/// Spawns rg with cwd = root (as OpenCode does, which also anchors `--glob`
/// patterns at root) and drains its stdout through a pipe.
fn run_rg(root: &Path, args: &[String]) -> Vec<u8> {
    let out = Command::new("rg")
        .args(args)
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("spawning rg");
    std::hint::black_box(out.stdout)
}

fn has_git_component(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == ".git")
}

/// Compares (path, line) sets of runner's grep and rg's. rg's `.git`
/// contents are dropped: runner skips `.git` on purpose.
fn grep_parity(root: &Path, pattern: &str, include: Option<&str>) -> Result<usize, String> {
    let ours = grep(root, pattern, include, usize::MAX)?;
    if ours.total_matches != ours.matches.len() || ours.truncated {
        return Err("runner truncated an unlimited search".into());
    }
    let ours: BTreeSet<(PathBuf, u64)> = ours
        .matches
        .into_iter()
        .map(|m| (m.path, m.line_number))
        .collect();

    let mut args: Vec<String> = vec![
        "-nH".into(),
        "--null".into(),
        "--hidden".into(),
        "--no-messages".into(),
    ];
    args.push("--regexp".into());
    args.push(pattern.into());
    if let Some(include) = include {
        args.push("--glob".into());
        args.push(include.into());
    }
    args.push(root.to_string_lossy().into_owned());
    let stdout = run_rg(root, &args);
    let mut theirs = BTreeSet::new();
    for line in stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        // rg notes on stdout that it stopped at a NUL after earlier matches.
        if !line.contains(&0) && line.windows(8).any(|w| w == b"WARNING:") {
            continue;
        }
        let nul = line
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| format!("unparsable rg line {:?}", String::from_utf8_lossy(line)))?;
        let path = PathBuf::from(OsStr::from_bytes(&line[..nul]));
        let rest = &line[nul + 1..];
        let colon = rest.iter().position(|&b| b == b':').unwrap_or(rest.len());
        let number: u64 = std::str::from_utf8(&rest[..colon])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad line number in {:?}", String::from_utf8_lossy(line)))?;
        if !has_git_component(&path) {
            theirs.insert((path, number));
        }
    }
    compare_sets(&ours, &theirs)?;
    Ok(ours.len())
}

fn glob_parity(root: &Path, pattern: &str) -> Result<usize, String> {
    let ours = glob(root, pattern, usize::MAX).map_err(|e| e.to_string())?;
    if ours.truncated {
        return Err("runner truncated an unlimited glob".into());
    }
    let ours: BTreeSet<PathBuf> = ours.files.into_iter().map(|h| h.path).collect();
    let stdout = run_rg(root, &glob_rg_args(pattern, root));
    let theirs: BTreeSet<PathBuf> = stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| PathBuf::from(OsStr::from_bytes(l)))
        .filter(|p| !has_git_component(p))
        .collect();
    compare_sets(&ours, &theirs)?;
    Ok(ours.len())
}

fn compare_sets<T: Ord + std::fmt::Debug>(
    ours: &BTreeSet<T>,
    theirs: &BTreeSet<T>,
) -> Result<(), String> {
    if ours == theirs {
        return Ok(());
    }
    let only_ours: Vec<_> = ours.difference(theirs).take(10).collect();
    let only_theirs: Vec<_> = theirs.difference(ours).take(10).collect();
    Err(format!(
        "runner has {} results, rg {}; only runner (first 10): {only_ours:?}; only rg (first 10): {only_theirs:?}",
        ours.len(),
        theirs.len()
    ))
}

/// A small git work tree exercising the rules where a reimplementation is
/// most likely to drift from rg.
fn fixture_parity() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path();
    let write = |rel: &str, body: &[u8]| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().expect("fixture path has a parent"))
            .expect("create fixture dir");
        std::fs::write(&path, body).expect("write fixture file");
    };
    write(".git/HEAD", b"needle\n");
    write(".git/objects/ab/cdef", b"needle\n");
    write(".gitignore", b"*.log\n!keep.log\n/build/\ndocs/**/*.tmp\n");
    write(".ignore", b"secret*\n");
    write(".rgignore", b"rgskip.txt\n");
    write("app.log", b"needle\n");
    write("keep.log", b"needle\n");
    write("build/out.rs", b"needle\n");
    write("src/build/gen.rs", b"fn needle() {}\n");
    write("docs/a/b/x.tmp", b"needle\n");
    write("docs/readme.md", b"needle\n");
    write("secret.txt", b"needle\n");
    write("rgskip.txt", b"needle\n");
    write("src/.hidden/inner.rs", b"  fn needle()\n");
    write("src/lib.rs", b"fn a() {}\n  fn needle() {}\nneedle\r\n");
    write("src/nested/.gitignore", b"*.rs\n!keep.rs\n");
    write("src/nested/drop.rs", b"needle\n");
    write("src/nested/keep.rs", b"needle\n");
    write("bin/data.bin", b"needle\x00needle\n");
    let mut late_nul = b"needle\n".repeat(20_000);
    late_nul.extend_from_slice(b"\x00needle\n");
    write("late_nul.txt", &late_nul);
    write("latin1.txt", b"caf\xe9 needle\n");
    write("sub/.git/HEAD", b"needle\n");
    write("sub/.gitignore", b"ignored_in_sub.txt\n");
    write("sub/ignored_in_sub.txt", b"needle\n");
    write("sub/kept.txt", b"needle\n");
    write("a[b].txt", b"needle\n");
    let outside = tempfile::tempdir().map_err(|e| e.to_string())?;
    std::fs::write(outside.path().join("out.txt"), b"needle\n").map_err(|e| e.to_string())?;
    std::os::unix::fs::symlink(outside.path(), root.join("linkdir")).map_err(|e| e.to_string())?;
    std::os::unix::fs::symlink(outside.path().join("out.txt"), root.join("link.txt"))
        .map_err(|e| e.to_string())?;

    for pattern in ["needle", r"^\s+fn", "caf", r"needle\r?$"] {
        grep_parity(root, pattern, None).map_err(|e| format!("grep {pattern:?}: {e}"))?;
    }
    for include in ["*.rs", "src/**", "*.{txt,log}", "*.log"] {
        grep_parity(root, "needle", Some(include))
            .map_err(|e| format!("grep needle --glob {include:?}: {e}"))?;
    }
    for pattern in [
        "*",
        "*.rs",
        "**/*.rs",
        "src/**",
        "*.{txt,log}",
        "*.log",
        "build/*",
        "**/build/**",
        ".*",
        "a[[]b].txt",
        "HEAD",
    ] {
        glob_parity(root, pattern).map_err(|e| format!("glob {pattern:?}: {e}"))?;
    }
    Ok(())
}
