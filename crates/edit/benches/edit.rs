//! Benchmark for the edit replacer cascade: `cargo bench --bench edit`.
//!
//! Realistic cases: a generated 20,000-line Rust-like file and a 12-line
//! block whose `oldString` is mutated so that Simple fails and a specific
//! fuzzy replacer has to find it. Target: median < 20 ms per edit.
//!
//! Adversarial cases show there is no quadratic blow-up: each is timed at
//! 20,000 and 40,000 lines; the ratio should be ~2 (linear), not ~4.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark that cannot set up has nothing to measure: it stops there"
)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use runner_edit::replace::{ReplaceError, replace_with_info};

const TARGET_MS: f64 = 20.0;
const RUNS: usize = 50;

/// Small deterministic PRNG (xorshift64*), so the file is the same each run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The 12-line block at the heart of every generated function; the
/// benchmark edits the one of function `i`.
fn block(i: usize, r: &mut Rng) -> Vec<String> {
    let (a, b, c, d, e) = (
        r.below(97) + 2,
        r.below(13),
        r.below(1000),
        r.below(17) + 1,
        r.below(31) + 1,
    );
    vec![
        format!("    let label = \"function_{i}\";"),
        format!("    let value = arg.wrapping_mul({a}) + {b};"),
        format!("    if value > {c} {{"),
        "        println!(\"{} is large: {}\", label, value);".to_owned(),
        "    } else {".to_owned(),
        "        eprintln!(\"{} is small\", label);".to_owned(),
        "    }".to_owned(),
        "    let mut total = 0u64;".to_owned(),
        format!("    for k in 0..{d} {{"),
        format!("        total += (k as u64) * {e};"),
        "    }".to_owned(),
        "    Ok(total)".to_owned(),
    ]
}

/// A ~`target`-line Rust-like file. Returns the file and the block of the
/// function in the middle.
fn generate(target: usize) -> (String, Vec<String>) {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out: Vec<String> = Vec::with_capacity(target + 32);
    let mut chosen = Vec::new();
    let mut i = 0;
    while out.len() < target {
        match r.below(4) {
            0 => out.push(format!("/// Computes the total for item {i}.")),
            1 => out.push(format!("#[inline]\n// item {i}")),
            _ => {}
        }
        out.push(format!(
            "pub fn function_{i}(arg: u64, name: &str) -> Result<u64, Error{}> {{",
            r.below(5)
        ));
        let b = block(i, &mut r);
        if i == 600 {
            chosen = b.clone();
        }
        out.extend(b);
        if r.below(3) == 0 {
            out.push(format!("    // trailing note {}", r.below(10_000)));
        }
        out.push("}".to_owned());
        out.push(String::new());
        i += 1;
    }
    let mut s = out.join("\n");
    s.push('\n');
    (s, chosen)
}

fn stats(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let median = ms(samples[samples.len() / 2]);
    let p95 = ms(samples[(samples.len() * 95).div_ceil(100) - 1]);
    (median, p95)
}

/// Time `runs` replacements; returns (median ms, p95 ms, outcome).
fn time(content: &str, old: &str, new: &str, runs: usize) -> (f64, f64, String) {
    let mut samples = Vec::with_capacity(runs);
    let mut outcome = String::new();
    for _ in 0..runs {
        let t = Instant::now();
        let r = black_box(replace_with_info(
            black_box(content),
            black_box(old),
            new,
            false,
        ));
        samples.push(t.elapsed());
        outcome = match r {
            Ok((_, name)) => name.to_owned(),
            Err(ReplaceError::NotFound) => "error: NotFound".to_owned(),
            Err(ReplaceError::Multiple) => "error: Multiple".to_owned(),
            Err(e) => format!("error: {e:?}"),
        };
    }
    let (median, p95) = stats(samples);
    (median, p95, outcome)
}

fn realistic(all_pass: &mut bool) {
    let (content, block) = generate(20_000);
    let lines = content.lines().count();
    println!(
        "realistic file: {lines} lines, {} KiB; {RUNS} runs per case",
        content.len() / 1024
    );
    let exact = block.join("\n");
    assert!(content.contains(&exact));
    let new = "    todo!()";

    let reindented = block
        .iter()
        .map(|l| format!("  {}", l.trim_start()))
        .collect::<Vec<_>>()
        .join("\n");
    let mut drifted = block.clone();
    drifted[1] = drifted[1].replace("wrapping_mul(", "wrapping_mul(1");
    let drifted = drifted.join("\n");
    let spaced = block
        .iter()
        .map(|l| format!("\t{}", l.trim_start().replace(' ', "  ")))
        .collect::<Vec<_>>()
        .join("\n");
    let mut half = block.clone();
    for k in [2, 4, 6, 8, 10] {
        half[k] = "    zzzzzzzzzzzzzzzzzzzzzzzzzzzz();".to_owned();
    }
    let half = half.join("\n");
    let escaped = exact.replace('"', "\\\"");

    let cases: [(&str, &str, &str); 6] = [
        ("exact", &exact, "Simple"),
        ("indentation changed", &reindented, "LineTrimmed"),
        ("middle line drifted", &drifted, "BlockAnchor"),
        ("whitespace changed", &spaced, "WhitespaceNormalized"),
        ("quotes over-escaped", &escaped, "EscapeNormalized"),
        ("half of middle rewritten", &half, "ContextAware"),
    ];
    println!(
        "{:<26} {:>10} {:>10}  {:<22} result",
        "case", "median ms", "p95 ms", "matched by"
    );
    for (name, old, want) in cases {
        let (median, p95, got) = time(&content, old, new, RUNS);
        let pass = median < TARGET_MS && got == want;
        *all_pass &= pass;
        println!(
            "{name:<26} {median:>10.3} {p95:>10.3}  {got:<22} {}",
            if pass { "PASS" } else { "FAIL" }
        );
    }
}

fn adversarial(all_pass: &mut bool) {
    type Build = fn(usize) -> (String, String);
    let cases: [(&str, Build); 4] = [
        ("every line = first anchor, no last anchor", |n| {
            (
                "fn anchor() {\n".repeat(n),
                "fn anchor() {\n    body();\n}".to_owned(),
            )
        }),
        ("identical lines, 1-line oldString", |n| {
            (
                "let x = compute(1, 2, 3);\n".repeat(n),
                "let x = compute(1, 2, 3);".to_owned(),
            )
        }),
        ("identical lines, 3-line oldString", |n| {
            (
                "    let x = compute(1, 2, 3);\n".repeat(n),
                "let x = compute(1, 2, 3);\nlet x = compute(1, 2, 3);\nlet x = compute(1, 2, 3);"
                    .to_owned(),
            )
        }),
        ("all first anchors, last anchor at end", |n| {
            (
                format!("{}}}\n", "{\n".repeat(n - 1)),
                "{\n    inner();\n}".to_owned(),
            )
        }),
    ];
    println!();
    println!(
        "{:<44} {:>10} {:>10} {:>7}  result",
        "adversarial case", "20k ms", "40k ms", "ratio"
    );
    for (name, build) in cases {
        let (c20, old20) = build(20_000);
        let (c40, old40) = build(40_000);
        let (m20, _, r20) = time(&c20, &old20, "X", 21);
        let (m40, _, r40) = time(&c40, &old40, "X", 21);
        let ratio = m40 / m20;
        // Linear ≈ 2; allow noise, but ~4 (quadratic) fails.
        let pass = ratio < 3.0 && m40 < 200.0 && r20 == r40;
        *all_pass &= pass;
        println!(
            "{name:<44} {m20:>10.3} {m40:>10.3} {ratio:>7.2}  {r40} {}",
            if pass { "PASS" } else { "FAIL" }
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is accepted and ignored.
    let mut all_pass = true;
    realistic(&mut all_pass);
    adversarial(&mut all_pass);
    println!();
    println!(
        "overall: {} (target: median < {TARGET_MS} ms per realistic edit, linear scaling)",
        if all_pass { "PASS" } else { "FAIL" }
    );
}
