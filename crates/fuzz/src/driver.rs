//! Runs one target: its regressions, its corpus, then mutations for a while.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::alloc;
use crate::mutate::{Rng, mutate};
use crate::targets::Target;

/// How long and from where one target runs.
pub struct Settings {
    /// Time spent mutating, after the regressions and the corpus.
    pub explore: Duration,
    /// The generator's seed (printed in every report, so a run can be repeated).
    pub seed: u64,
    /// Where this crate's `corpus/` and `regressions/` are.
    pub root: PathBuf,
    /// Where a failing input is written.
    pub crashes: PathBuf,
}

impl Settings {
    /// From the environment: `FUZZ_SECONDS` (default `default_seconds`), `FUZZ_SEED`
    /// (default the clock), `FUZZ_CRASHES` (default `target/fuzz-crashes`).
    pub fn from_env(default_seconds: f64) -> Settings {
        let seconds = std::env::var("FUZZ_SECONDS")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .unwrap_or(default_seconds);
        let seed = std::env::var("FUZZ_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let crashes = std::env::var_os("FUZZ_CRASHES")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("../../target/fuzz-crashes"));
        Settings {
            explore: Duration::from_secs_f64(seconds.min(1e9)),
            seed,
            root,
            crashes,
        }
    }
}

/// What a clean run did.
#[derive(Debug)]
pub struct Report {
    pub target: &'static str,
    pub seed: u64,
    pub regressions: usize,
    pub corpus: usize,
    pub mutations: u64,
    pub slowest: Duration,
    pub elapsed: Duration,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} regressions, {} corpus inputs, {} mutations in {:.1} s (seed {}), slowest input {} ms",
            self.target,
            self.regressions,
            self.corpus,
            self.mutations,
            self.elapsed.as_secs_f64(),
            self.seed,
            self.slowest.as_millis()
        )
    }
}

/// An input that broke a target, written to `saved`.
#[derive(Debug)]
pub enum Failure {
    Panicked {
        target: &'static str,
        message: String,
        saved: PathBuf,
    },
    Slow {
        target: &'static str,
        took: Duration,
        saved: PathBuf,
    },
    Io(PathBuf, std::io::Error),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keep = "once fixed, move it into crates/fuzz/regressions/<target>/ so it is replayed on every run";
        match self {
            Failure::Panicked {
                target,
                message,
                saved,
            } => write!(
                f,
                "{target}: an input panicked ({message}); it is in {}; {keep}",
                saved.display()
            ),
            Failure::Slow {
                target,
                took,
                saved,
            } => write!(
                f,
                "{target}: an input took {} ms, over the target's time bound; it is in {}; {keep}",
                took.as_millis(),
                saved.display()
            ),
            Failure::Io(path, e) => write!(f, "{}: {e}", path.display()),
        }
    }
}

/// Regressions, corpus, then mutations until `settings.explore` has passed.
pub fn run_target(target: &'static Target, settings: &Settings) -> Result<Report, Failure> {
    let started = Instant::now();
    lift_budget_on_panic();
    std::fs::create_dir_all(&settings.crashes)
        .map_err(|e| Failure::Io(settings.crashes.clone(), e))?;
    let mut runner = Runner::new(target, settings);
    let regressions = inputs(&settings.root.join("regressions").join(target.name))?;
    for input in &regressions {
        runner.run(input)?;
    }
    let mut corpus = (target.seeds)();
    corpus.extend(inputs(&settings.root.join("corpus").join(target.name))?);
    for input in &corpus {
        runner.run(input)?;
    }
    let mut seeds: Vec<Vec<u8>> = corpus.iter().chain(&regressions).cloned().collect();
    if seeds.is_empty() {
        seeds.push(Vec::new());
    }
    let mut rng = Rng::new(settings.seed);
    let mut mutations = 0u64;
    let explore_until = Instant::now() + settings.explore;
    while Instant::now() < explore_until {
        let base = &seeds[rng.below(seeds.len())];
        let input = mutate(&mut rng, base, &seeds, target.dictionary, target.max_len);
        runner.run(&input)?;
        mutations += 1;
    }
    Ok(Report {
        target: target.name,
        seed: settings.seed,
        regressions: regressions.len(),
        corpus: corpus.len(),
        mutations,
        slowest: runner.slowest,
        elapsed: started.elapsed(),
    })
}

/// A panic is already a finding: the report of it (a backtrace is symbolised from the debug
/// information, tens of megabytes) must not be taken for a second one, over memory.
fn lift_budget_on_panic() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            alloc::stop();
            report(info);
        }));
    });
}

/// The files of a folder, in name order; none when it does not exist.
fn inputs(dir: &Path) -> Result<Vec<Vec<u8>>, Failure> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Failure::Io(dir.to_path_buf(), e)),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| std::fs::read(&p).map_err(|e| Failure::Io(p, e)))
        .collect()
}

/// Runs inputs of one target on the calling thread.
struct Runner {
    target: &'static Target,
    crashes: PathBuf,
    /// Where the allocator writes an input that goes over its budget.
    oom_path: CString,
    slowest: Duration,
}

impl Runner {
    fn new(target: &'static Target, settings: &Settings) -> Runner {
        let oom = settings
            .crashes
            .join(format!("{}-over-memory", target.name));
        Runner {
            target,
            crashes: settings.crashes.clone(),
            oom_path: CString::new(oom.into_os_string().into_encoded_bytes()).unwrap_or_default(),
            slowest: Duration::ZERO,
        }
    }

    fn run(&mut self, input: &[u8]) -> Result<(), Failure> {
        let watched = Watched::start(self.target, input, &self.crashes);
        alloc::start(self.target.memory, input, &self.oom_path);
        let started = Instant::now();
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.target.run)(input)));
        let took = started.elapsed();
        alloc::stop();
        drop(watched);
        self.slowest = self.slowest.max(took);
        if let Err(panic) = outcome {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic with no message".into());
            let saved = self.save(input, "panic")?;
            return Err(Failure::Panicked {
                target: self.target.name,
                message,
                saved,
            });
        }
        if took > self.target.time {
            let saved = self.save(input, "slow")?;
            return Err(Failure::Slow {
                target: self.target.name,
                took,
                saved,
            });
        }
        Ok(())
    }

    fn save(&self, input: &[u8], kind: &str) -> Result<PathBuf, Failure> {
        let path = self
            .crashes
            .join(format!("{}-{kind}-{:016x}", self.target.name, fnv(input)));
        std::fs::write(&path, input).map_err(|e| Failure::Io(path.clone(), e))?;
        Ok(path)
    }
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// An input in flight, for the watchdog: an input that hangs never returns to the driver,
/// so the watchdog writes it out and ends the process.
struct Slot {
    target: &'static str,
    deadline: Instant,
    input: Vec<u8>,
    crashes: PathBuf,
}

static IN_FLIGHT: Mutex<Vec<(u64, Slot)>> = Mutex::new(Vec::new());
static WATCHDOG: AtomicBool = AtomicBool::new(false);

/// A hang is this many times the target's time bound.
const HANG_FACTOR: u32 = 10;

struct Watched(u64);

impl Watched {
    fn start(target: &'static Target, input: &[u8], crashes: &Path) -> Watched {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let key = NEXT.fetch_add(1, Ordering::Relaxed);
        let slot = Slot {
            target: target.name,
            deadline: Instant::now() + target.time * HANG_FACTOR,
            input: input.to_vec(),
            crashes: crashes.to_path_buf(),
        };
        if let Ok(mut slots) = IN_FLIGHT.lock() {
            slots.push((key, slot));
        }
        if !WATCHDOG.swap(true, Ordering::SeqCst) {
            std::thread::spawn(watchdog);
        }
        Watched(key)
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Ok(mut slots) = IN_FLIGHT.lock() {
            slots.retain(|(key, _)| *key != self.0);
        }
    }
}

fn watchdog() {
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let Ok(slots) = IN_FLIGHT.lock() else {
            continue;
        };
        let now = Instant::now();
        if let Some((_, hung)) = slots.iter().find(|(_, s)| now > s.deadline) {
            let path = hung
                .crashes
                .join(format!("{}-hang-{:016x}", hung.target, fnv(&hung.input)));
            let _ = std::fs::write(&path, &hung.input);
            eprintln!(
                "runner-fuzz: {}: an input has not finished in {}x its time bound; it is in {}",
                hung.target,
                HANG_FACTOR,
                path.display()
            );
            std::process::abort();
        }
    }
}
