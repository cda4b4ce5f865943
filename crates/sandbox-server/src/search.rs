//! In-process file search behind the `glob`, `grep` and `list` tools.
//!
//! OpenCode implements these tools by spawning ripgrep:
//!
//! * glob: `rg --files --glob=!.git/* --hidden --glob=<pattern>` (cwd = search dir)
//! * grep: `rg -nH --hidden --no-messages --field-match-separator=| --regexp <re> [--glob <include>] <path>`
//! * list: `rg --files --hidden` with `!{p}` globs for a default ignore list
//!
//! The sandbox server cannot rely on an `rg` binary being present in (or
//! reachable from) the sandbox, and spawning a process per tool call costs
//! more than the search itself on small trees, so this module reproduces
//! those result sets in-process with ripgrep's own crates (`ignore` for the
//! walk, `grep` for matching/searching). Where ripgrep's behaviour is decided
//! by a default (ignore files, hidden files, binary detection, line
//! terminator handling), the same crate-level setting is used so the result
//! sets are identical.
//!
//! Deliberate differences from the rg commands above:
//!
//! * `.git` directories are skipped at *any* depth for all three tools
//!   (rg's `!.git/*` only covers the root one, and OpenCode's grep does not
//!   exclude `.git` at all). Object files and refs are never useful results.
//! * Symlinks are never followed and never reported. grep opens every file
//!   it reads through the caller's opener, which the server resolves beneath
//!   the file's root (`openat2(RESOLVE_BENEATH)` or the walk) with
//!   `O_NOFOLLOW`: a symlink swapped in for the file, or for a folder above
//!   it, after the walk saw it cannot make the server read outside the root.
//!   (The walk itself reads folders by path: names and times from a folder
//!   swapped for a symlink mid-walk may be listed, never a file's content.)
//! * `list` applies ignore patterns with gitignore semantics (`node_modules/`
//!   matches that directory at any depth) rather than OpenCode's `!{p}*`,
//!   which, being a glob with a slash, only matched at the root.
//!
//! Kept from rg although it can surprise: the glob pattern (and grep's
//! `include`) is an rg *override*, so a file it matches is reported even if
//! a `.gitignore` excludes it (`glob("*.log")` finds ignored logs). Ignored
//! directories the pattern does not match are still pruned, and grep
//! without `include` never sees ignored files.
//!
//! The search root itself is trusted: like rg with an explicit path, a root
//! that is a symlink is followed. The caller resolves and authorizes the root
//! before calling in; only what lies *under* it is guarded here.
//!
//! Everything here is synchronous: the sandbox server runs tools on plain
//! threads, and the parallel walker brings its own scoped worker threads.

use std::cmp::Ordering;
use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
use std::time::SystemTime;

use grep::matcher::LineTerminator;
use grep::regex::{RegexMatcher, RegexMatcherBuilder};
use grep::searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkMatch};
use ignore::overrides::{Override, OverrideBuilder};
use ignore::{DirEntry, ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkState};

// The outcomes are the sandbox API's own types: the engine fills in exactly what travels
// back to the controller.
pub use runner_protocol::{
    FileHit, GlobOutcome, GrepMatch, GrepOutcome, TreeOutcome as ListOutcome,
};

/// Nanoseconds since the epoch: what the API carries, and the key files are sorted by.
fn mtime_ns(modified: SystemTime) -> i64 {
    match modified.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    }
}

/// OpenCode's default ignore list for `list`, interpreted as gitignore
/// patterns: a trailing `/` means "directory with this name at any depth",
/// a name without `/` matches files or directories at any depth.
pub const LIST_DEFAULT_IGNORE: &[&str] = &[
    "node_modules/",
    "__pycache__/",
    ".git/",
    "dist/",
    "build/",
    "target/",
    "vendor/",
    "bin/",
    "obj/",
    ".idea/",
    ".vscode/",
    ".zig-cache/",
    "zig-out",
    ".coverage",
    "coverage/",
    "tmp/",
    "temp/",
    ".cache/",
    "cache/",
    "logs/",
    ".venv/",
    "venv/",
    "env/",
];

/// Why a search could not run at all. Per-file problems during a search are
/// not errors: they set [`GrepOutcome::partial`] instead, as rg does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchError {
    InvalidRegex { pattern: String, message: String },
    InvalidGlob { pattern: String, message: String },
    NotADirectory(PathBuf),
    NotFound(PathBuf),
    Io { path: PathBuf, message: String },
}

impl fmt::Display for SearchError {
    /// Messages go straight back to the model, so each one names the
    /// offending input and says how to fix it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SearchError::InvalidRegex { pattern, message } => write!(
                f,
                "invalid regex `{pattern}`: {message}\n\
                 The pattern is a regular expression (Rust regex syntax). To match \
                 special characters such as ( ) [ ] {{ }} . * + ? | \\ ^ $ literally, \
                 escape them with a backslash (e.g. `foo\\(` instead of `foo(`)."
            ),
            SearchError::InvalidGlob { pattern, message } => write!(
                f,
                "invalid glob `{pattern}`: {message}\n\
                 Use glob syntax such as `*.rs`, `**/*.ts` or `src/**/*.{{js,jsx}}`; \
                 check that every `[` and `{{` is closed."
            ),
            SearchError::NotADirectory(path) => write!(
                f,
                "search path must be a directory: {} is not one. Pass its parent \
                 directory and narrow the search with a glob/include pattern instead.",
                path.display()
            ),
            SearchError::NotFound(path) => write!(
                f,
                "search path {} does not exist. Check the path (relative paths are \
                 resolved against the working directory) or omit it to search the \
                 working directory.",
                path.display()
            ),
            SearchError::Io { path, message } => {
                write!(f, "cannot read {}: {message}", path.display())
            }
        }
    }
}

impl std::error::Error for SearchError {}

/// Finds files under `root` whose path matches `pattern` (rg `--glob`
/// semantics: a pattern without `/` matches the file name at any depth, one
/// with `/` is anchored at `root`).
///
/// The walk stops once more than `limit` files were seen, so a broad pattern
/// on a huge tree stays cheap; which `limit` files are kept then depends on
/// walk order (as with `rg | head`). The kept files are sorted newest first.
pub fn glob(root: &Path, pattern: &str, limit: usize) -> Result<GlobOutcome, SearchError> {
    check_root(root)?;
    let overrides = build_overrides(root, std::iter::once(pattern.to_owned()))?;
    let mut walker = walk_builder(root);
    walker.overrides(overrides).threads(thread_count());

    let shared = GlobShared {
        limit,
        seen: AtomicUsize::new(0),
        truncated: AtomicBool::new(false),
        hits: Mutex::new(Vec::new()),
    };
    walker
        .build_parallel()
        .visit(&mut GlobVisitorBuilder { shared: &shared });

    let truncated = shared.truncated.load(AtomicOrdering::Relaxed);
    let mut files = shared
        .hits
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // Workers only push while the shared counter is below `limit`, so at
    // most `limit` hits exist here.
    sort_newest_first(&mut files, |h| (h.mtime_ns, h.path.as_path()));
    Ok(GlobOutcome { files, truncated })
}

/// Searches every file under `root` (optionally only those matching the
/// `include` glob) for lines matching `regex`.
///
/// All matching lines are counted, so `total_matches` is exact, but only
/// the first `limit` in output order (files newest first) are kept in
/// memory: a per-file cap plus per-thread pruning of files that can no
/// longer make the cut keep a `.` search over a large tree bounded.
/// Opens a file the walk found, for reading; the server's resolves it beneath its root.
pub type Opener<'a> = &'a (dyn Fn(&Path) -> io::Result<File> + Sync);

pub fn grep(
    root: &Path,
    regex: &str,
    include: Option<&str>,
    limit: usize,
    open: Opener<'_>,
) -> Result<GrepOutcome, SearchError> {
    // Validate the regex before touching the file system: a typo should
    // produce the regex error even when the path is also wrong.
    let matcher = RegexMatcherBuilder::new()
        // Like rg without --multiline: matches never span lines, and a
        // literal `\n` in the pattern is rejected with a helpful message.
        .line_terminator(Some(b'\n'))
        .build(regex)
        .map_err(|e| SearchError::InvalidRegex {
            pattern: regex.to_owned(),
            message: e.to_string(),
        })?;
    check_root_or_file(root)?;

    let mut walker = walk_builder(root);
    if let Some(include) = include {
        walker.overrides(build_overrides(root, std::iter::once(include.to_owned()))?);
    }
    walker.threads(thread_count());

    let searcher = SearcherBuilder::new()
        .line_terminator(LineTerminator::byte(b'\n'))
        .line_number(true)
        // rg's setting for files found by walking: stop reading a file at
        // its first NUL byte; lines matched before it are still reported.
        .binary_detection(BinaryDetection::quit(b'\x00'))
        // rg only memory-maps when given a handful of explicit files; for a
        // directory walk buffered reads are faster and mmap would turn a
        // file truncated under us into SIGBUS.
        .memory_map(grep::searcher::MmapChoice::never())
        .build();

    let shared = GrepShared {
        open,
        limit,
        partial: AtomicBool::new(false),
        total: AtomicUsize::new(0),
        files: Mutex::new(Vec::new()),
    };
    walker.build_parallel().visit(&mut GrepVisitorBuilder {
        shared: &shared,
        matcher: &matcher,
        searcher: &searcher,
    });

    let total_matches = shared.total.load(AtomicOrdering::Relaxed);
    let partial = shared.partial.load(AtomicOrdering::Relaxed);
    let mut files = shared
        .files
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    sort_newest_first(&mut files, |f| (f.modified, f.path.as_path()));

    let mut matches = Vec::with_capacity(total_matches.min(limit));
    'files: for file in files {
        for (line_number, text) in file.lines {
            if matches.len() >= limit {
                break 'files;
            }
            matches.push(GrepMatch {
                path: file.path.clone(),
                line_number,
                text,
            });
        }
    }
    Ok(GrepOutcome {
        matches,
        total_matches,
        truncated: total_matches > limit,
        partial,
    })
}

/// Lists the files under `root` (not directories), skipping ignored files,
/// [`LIST_DEFAULT_IGNORE`] and `extra_ignore` (gitignore syntax).
///
/// The walk is sequential and sorted by file name, which visits files in
/// exactly `Path` order, so the first `limit` files are deterministic and the
/// walk can stop there instead of listing a whole huge tree.
pub fn list(
    root: &Path,
    extra_ignore: &[String],
    limit: usize,
) -> Result<ListOutcome, SearchError> {
    check_root(root)?;
    if let Some(bad) = extra_ignore.iter().find(|p| p.starts_with('!')) {
        return Err(SearchError::InvalidGlob {
            pattern: bad.clone(),
            message: "ignore patterns cannot be negated with a leading `!`".to_owned(),
        });
    }
    let globs = LIST_DEFAULT_IGNORE
        .iter()
        .map(|p| (*p).to_owned())
        .chain(extra_ignore.iter().cloned())
        .map(|p| format!("!{p}"));
    let overrides = build_overrides(root, globs).map_err(|e| match e {
        // Report the pattern as the caller wrote it, not our negated form.
        SearchError::InvalidGlob { pattern, message } => SearchError::InvalidGlob {
            pattern: pattern.strip_prefix('!').unwrap_or(&pattern).to_owned(),
            message,
        },
        other => other,
    })?;
    let mut walker = walk_builder(root);
    walker
        .overrides(overrides)
        .sort_by_file_name(|a, b| a.cmp(b));

    let mut files = Vec::new();
    let mut truncated = false;
    for entry in walker.build() {
        let Ok(entry) = entry else { continue };
        if !is_regular_file(&entry) {
            continue;
        }
        if files.len() >= limit {
            truncated = true;
            break;
        }
        let rel = entry
            .path()
            .strip_prefix(root)
            .unwrap_or(entry.path())
            .to_path_buf();
        files.push(rel);
    }
    Ok(ListOutcome { files, truncated })
}

// ---------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------

/// grep, like rg, also searches a single file given as its path.
fn check_root_or_file(root: &Path) -> Result<(), SearchError> {
    match std::fs::metadata(root) {
        Ok(md) if md.is_file() => Ok(()),
        _ => check_root(root),
    }
}

/// Distinguishes "no such path" from "not a directory" up front so the model
/// gets an actionable error instead of an empty result.
fn check_root(root: &Path) -> Result<(), SearchError> {
    match std::fs::metadata(root) {
        Ok(md) if md.is_dir() => Ok(()),
        Ok(_) => Err(SearchError::NotADirectory(root.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(SearchError::NotFound(root.to_path_buf()))
        }
        Err(e) => Err(SearchError::Io {
            path: root.to_path_buf(),
            message: e.to_string(),
        }),
    }
}

/// The walker configuration shared by all tools: ripgrep's defaults plus
/// `--hidden`, with `.git` directories pruned.
fn walk_builder(root: &Path) -> WalkBuilder {
    let mut builder = WalkBuilder::new(root);
    builder
        .hidden(false)
        .follow_links(false)
        .ignore(true)
        .git_ignore(true)
        .git_global(true)
        .git_exclude(true)
        .parents(true)
        .require_git(true)
        // rg reads `.rgignore` as well; honouring it keeps result sets equal.
        .add_custom_ignore_filename(".rgignore")
        // Global gitignore patterns are matched relative to the cwd; the
        // server's own cwd is meaningless here, the search root is not.
        .current_dir(root)
        .filter_entry(|entry| !is_git_dir(entry));
    builder
}

fn is_git_dir(entry: &DirEntry) -> bool {
    entry.depth() > 0
        && entry.file_name() == ".git"
        && entry.file_type().is_some_and(|t| t.is_dir())
}

/// Only regular files are results: symlinks are neither followed nor
/// reported (rg without `-L` skips them too), and FIFOs/devices are not text.
fn is_regular_file(entry: &DirEntry) -> bool {
    entry.file_type().is_some_and(|t| t.is_file())
}

/// Builds rg-style `--glob` overrides, rooted at `root` so patterns with a
/// `/` are anchored there (OpenCode runs rg with cwd = search directory).
fn build_overrides(
    root: &Path,
    globs: impl IntoIterator<Item = String>,
) -> Result<Override, SearchError> {
    let mut builder = OverrideBuilder::new(root);
    let mut last = String::new();
    for glob in globs {
        builder.add(&glob).map_err(|e| SearchError::InvalidGlob {
            pattern: glob.clone(),
            message: glob_message(&e),
        })?;
        last = glob;
    }
    builder.build().map_err(|e| SearchError::InvalidGlob {
        pattern: last,
        message: glob_message(&e),
    })
}

/// `ignore::Error` wraps globset errors with the glob repeated; keep just the
/// reason, since `SearchError`'s Display prints the pattern itself.
fn glob_message(err: &ignore::Error) -> String {
    match err {
        ignore::Error::Glob { err, .. } => err.clone(),
        other => other.to_string(),
    }
}

/// rg uses all cores up to 12; more threads than cores only adds contention.
fn thread_count() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(12)
}

/// Newest first; unknown mtimes last; ties by path so results are stable.
fn sort_newest_first<T, K: Ord>(items: &mut [T], key: impl Fn(&T) -> (Option<K>, &Path)) {
    items.sort_unstable_by(|a, b| {
        let (ma, pa) = key(a);
        let (mb, pb) = key(b);
        newest_first(ma, pa, mb, pb)
    });
}

fn newest_first<K: Ord>(ma: Option<K>, pa: &Path, mb: Option<K>, pb: &Path) -> Ordering {
    // `None < Some(_)`, so comparing b to a puts newest first and None last.
    mb.cmp(&ma).then_with(|| pa.cmp(pb))
}

/// Opens a file found by the walk without following a symlink that may have
/// replaced it since, and without blocking if it became a FIFO. It follows
/// symlinks in the folders above it: the server's opener does not.
pub fn open_by_path(path: &Path) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    options.open(path)
}

// ---------------------------------------------------------------------------
// glob workers
// ---------------------------------------------------------------------------

struct GlobShared {
    limit: usize,
    seen: AtomicUsize,
    truncated: AtomicBool,
    hits: Mutex<Vec<FileHit>>,
}

struct GlobVisitorBuilder<'s> {
    shared: &'s GlobShared,
}

impl<'s> ParallelVisitorBuilder<'s> for GlobVisitorBuilder<'s> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
        Box::new(GlobVisitor {
            shared: self.shared,
            hits: Vec::new(),
        })
    }
}

/// Collects hits thread-locally and merges them once on drop, so the hot
/// path takes no lock.
struct GlobVisitor<'s> {
    shared: &'s GlobShared,
    hits: Vec<FileHit>,
}

impl ParallelVisitor for GlobVisitor<'_> {
    fn visit(&mut self, entry: Result<DirEntry, ignore::Error>) -> WalkState {
        let Ok(entry) = entry else {
            return WalkState::Continue;
        };
        if !is_regular_file(&entry) {
            return WalkState::Continue;
        }
        let seen = self.shared.seen.fetch_add(1, AtomicOrdering::Relaxed);
        if seen >= self.shared.limit {
            self.shared.truncated.store(true, AtomicOrdering::Relaxed);
            return WalkState::Quit;
        }
        // The mtime is part of the tool's output order; stat here, in the
        // worker threads, rather than serially afterwards.
        let mtime_ns = entry
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .map(mtime_ns);
        self.hits.push(FileHit {
            path: entry.into_path(),
            mtime_ns,
        });
        WalkState::Continue
    }
}

impl Drop for GlobVisitor<'_> {
    fn drop(&mut self) {
        let mut hits = self
            .shared
            .hits
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        hits.append(&mut self.hits);
    }
}

// ---------------------------------------------------------------------------
// grep workers
// ---------------------------------------------------------------------------

struct GrepShared<'o> {
    open: Opener<'o>,
    limit: usize,
    partial: AtomicBool,
    total: AtomicUsize,
    files: Mutex<Vec<FileMatches>>,
}

/// The matches of one file, kept until the global mtime sort.
struct FileMatches {
    path: PathBuf,
    modified: Option<SystemTime>,
    /// At most `limit` lines: later lines of a file can never be shown.
    lines: Vec<(u64, String)>,
}

struct GrepVisitorBuilder<'s> {
    shared: &'s GrepShared<'s>,
    matcher: &'s RegexMatcher,
    searcher: &'s Searcher,
}

impl<'s> ParallelVisitorBuilder<'s> for GrepVisitorBuilder<'s> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
        Box::new(GrepVisitor {
            shared: self.shared,
            // Each thread owns its matcher and searcher (and so their
            // scratch buffers), as rg does.
            matcher: self.matcher.clone(),
            searcher: self.searcher.clone(),
            files: Vec::new(),
            retained_lines: 0,
            total: 0,
            prune_at: self.shared.limit.saturating_mul(2).max(PRUNE_MIN_LINES),
        })
    }
}

/// Below this many retained lines per thread, pruning is not worth a sort.
const PRUNE_MIN_LINES: usize = 4096;

struct GrepVisitor<'s> {
    shared: &'s GrepShared<'s>,
    matcher: RegexMatcher,
    searcher: Searcher,
    files: Vec<FileMatches>,
    retained_lines: usize,
    total: usize,
    prune_at: usize,
}

impl GrepVisitor<'_> {
    fn search(&mut self, path: PathBuf) {
        let file = match (self.shared.open)(&path) {
            Ok(file) => file,
            Err(_) => {
                self.shared.partial.store(true, AtomicOrdering::Relaxed);
                return;
            }
        };
        let mut sink = LineSink {
            lines: Vec::new(),
            count: 0,
            keep: self.shared.limit,
        };
        let result = self.searcher.search_file(&self.matcher, &file, &mut sink);
        if result.is_err() {
            // Like rg: report what was found before the read error, but
            // flag the search as incomplete.
            self.shared.partial.store(true, AtomicOrdering::Relaxed);
        }
        if sink.count == 0 {
            return;
        }
        self.total += sink.count;
        // Stat only files that matched, through the open handle (no second
        // path lookup).
        let modified = file.metadata().ok().and_then(|m| m.modified().ok());
        self.retained_lines += sink.lines.len();
        self.files.push(FileMatches {
            path,
            modified,
            lines: sink.lines,
        });
        if self.retained_lines > self.prune_at {
            self.prune();
        }
    }

    /// Drops files that cannot appear in the first `limit` output lines.
    ///
    /// Valid per thread: if this thread alone has `limit` lines in files
    /// ordered before F, the global order has at least as many, so F is out.
    fn prune(&mut self) {
        let limit = self.shared.limit;
        sort_newest_first(&mut self.files, |f| (f.modified, f.path.as_path()));
        let mut kept_lines = 0usize;
        let mut keep_files = self.files.len();
        for (i, file) in self.files.iter().enumerate() {
            if kept_lines >= limit {
                keep_files = i;
                break;
            }
            kept_lines += file.lines.len();
        }
        self.files.truncate(keep_files);
        self.retained_lines = kept_lines;
        // Avoid re-sorting on every new file when the kept set is large.
        self.prune_at = self.retained_lines.saturating_mul(2).max(self.prune_at);
    }
}

impl ParallelVisitor for GrepVisitor<'_> {
    fn visit(&mut self, entry: Result<DirEntry, ignore::Error>) -> WalkState {
        match entry {
            Ok(entry) => {
                if is_regular_file(&entry) {
                    self.search(entry.into_path());
                }
            }
            // Unreadable directories, broken ignore files: rg reports these
            // and exits 2, which OpenCode surfaces as "some paths skipped".
            Err(_) => self.shared.partial.store(true, AtomicOrdering::Relaxed),
        }
        WalkState::Continue
    }
}

impl Drop for GrepVisitor<'_> {
    fn drop(&mut self) {
        self.shared
            .total
            .fetch_add(self.total, AtomicOrdering::Relaxed);
        let mut files = self
            .shared
            .files
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        files.append(&mut self.files);
    }
}

/// Collects matching lines of one file: counts all, keeps the first `keep`.
struct LineSink {
    lines: Vec<(u64, String)>,
    count: usize,
    keep: usize,
}

impl Sink for LineSink {
    type Error = io::Error;

    fn matched(&mut self, _searcher: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, io::Error> {
        self.count += 1;
        if self.lines.len() < self.keep {
            let bytes = mat.bytes();
            let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
            let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            // Line numbers are always on (SearcherBuilder::line_number).
            let line_number = mat.line_number().unwrap_or(0);
            self.lines
                .push((line_number, String::from_utf8_lossy(bytes).into_owned()));
        }
        Ok(true)
    }
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::fs;
    use std::time::Duration;

    fn write(root: &Path, rel: &str, contents: &[u8]) -> PathBuf {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, contents).unwrap();
        path
    }

    fn set_mtime(path: &Path, secs_after_epoch: u64) {
        let file = File::options().write(true).open(path).unwrap();
        file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs_after_epoch))
            .unwrap();
    }

    fn rel_set<'a>(root: &Path, paths: impl IntoIterator<Item = &'a PathBuf>) -> BTreeSet<String> {
        paths
            .into_iter()
            .map(|p| p.strip_prefix(root).unwrap().to_string_lossy().into_owned())
            .collect()
    }

    fn glob_set(root: &Path, pattern: &str) -> BTreeSet<String> {
        let out = glob(root, pattern, usize::MAX).unwrap();
        assert!(!out.truncated);
        rel_set(root, out.files.iter().map(|h| &h.path))
    }

    fn grep_set(root: &Path, re: &str, include: Option<&str>) -> BTreeSet<String> {
        let out = grep(root, re, include, usize::MAX, &open_by_path).unwrap();
        assert!(!out.truncated);
        assert_eq!(out.total_matches, out.matches.len());
        rel_set(root, out.matches.iter().map(|m| &m.path))
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    /// A git work tree (`.git` present) with ignore files, hidden files and
    /// nested directories.
    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, ".git/HEAD", b"ref: refs/heads/main needle\n");
        write(root, ".git/config", b"needle\n");
        write(root, ".gitignore", b"ignored.txt\n/generated/\n");
        write(root, ".ignore", b"*.secret\n");
        write(root, "ignored.txt", b"needle\n");
        write(root, "generated/out.rs", b"needle\n");
        write(root, "key.secret", b"needle\n");
        write(root, "visible.txt", b"needle\n");
        write(root, ".hidden.txt", b"needle\n");
        write(root, ".config/settings.rs", b"needle\n");
        write(root, "src/main.rs", b"fn main() {}\nneedle\n");
        write(root, "src/deep/er/mod.rs", b"needle here\n");
        write(root, "sub/.git/HEAD", b"needle\n");
        write(root, "sub/lib.rs", b"needle\n");
        dir
    }

    #[test]
    fn glob_respects_ignores_includes_hidden_and_skips_git() {
        let dir = repo();
        let root = dir.path();
        // `generated/` is gitignored and does not itself match `*.rs`, so it
        // is pruned; `.git` directories are never entered.
        assert_eq!(
            glob_set(root, "*.rs"),
            set(&[
                ".config/settings.rs",
                "src/deep/er/mod.rs",
                "src/main.rs",
                "sub/lib.rs",
            ])
        );
        assert_eq!(glob_set(root, "HEAD"), set(&[]));
        assert_eq!(
            glob_set(root, ".*"),
            set(&[".gitignore", ".hidden.txt", ".ignore"])
        );
        assert_eq!(glob_set(root, ".config/*"), set(&[".config/settings.rs"]));
    }

    /// rg's `--glob` is an override: a file the pattern matches is listed
    /// even if an ignore file excludes it (`rg --files --glob='*.txt'` shows
    /// a gitignored `ignored.txt`). OpenCode's glob inherits this, so do we.
    #[test]
    fn glob_pattern_overrides_ignore_files_like_rg() {
        let dir = repo();
        let root = dir.path();
        assert_eq!(
            glob_set(root, "*.txt"),
            set(&[".hidden.txt", "ignored.txt", "visible.txt"])
        );
        assert_eq!(glob_set(root, "*.secret"), set(&["key.secret"]));
        assert_eq!(
            glob_set(root, "*"),
            set(&[
                ".config/settings.rs",
                ".gitignore",
                ".hidden.txt",
                ".ignore",
                "generated/out.rs",
                "ignored.txt",
                "key.secret",
                "src/deep/er/mod.rs",
                "src/main.rs",
                "sub/lib.rs",
                "visible.txt",
            ])
        );
    }

    #[test]
    fn glob_basename_pattern_matches_at_any_depth() {
        let dir = repo();
        let root = dir.path();
        let expected = set(&[
            ".config/settings.rs",
            "src/deep/er/mod.rs",
            "src/main.rs",
            "sub/lib.rs",
        ]);
        assert_eq!(glob_set(root, "*.rs"), expected);
        assert_eq!(glob_set(root, "**/*.rs"), expected);
        assert_eq!(glob_set(root, "mod.rs"), set(&["src/deep/er/mod.rs"]));
        // A pattern with a slash is anchored at the root.
        assert_eq!(glob_set(root, "src/*.rs"), set(&["src/main.rs"]));
        assert_eq!(glob_set(root, "deep/**"), set(&[]));
    }

    #[test]
    fn glob_sorts_newest_first_with_path_tiebreak() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let a = write(root, "a.rs", b"");
        let b = write(root, "x/b.rs", b"");
        let c = write(root, "c.rs", b"");
        let d = write(root, "d.rs", b"");
        set_mtime(&a, 1_000);
        set_mtime(&b, 3_000);
        set_mtime(&c, 2_000);
        set_mtime(&d, 2_000);
        let out = glob(root, "*.rs", 100).unwrap();
        let order: Vec<_> = out
            .files
            .iter()
            .map(|h| h.path.strip_prefix(root).unwrap().to_path_buf())
            .collect();
        assert_eq!(
            order,
            ["x/b.rs", "c.rs", "d.rs", "a.rs"]
                .map(PathBuf::from)
                .to_vec()
        );
        assert_eq!(out.files[0].mtime_ns, Some(3_000 * 1_000_000_000));
        assert!(!out.truncated);
    }

    #[test]
    fn glob_limit_sets_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for i in 0..20 {
            write(root, &format!("d{}/f{i}.txt", i % 3), b"");
        }
        let out = glob(root, "*.txt", 5).unwrap();
        assert_eq!(out.files.len(), 5);
        assert!(out.truncated);
        let out = glob(root, "*.txt", 20).unwrap();
        assert_eq!(out.files.len(), 20);
        assert!(!out.truncated);
        let out = glob(root, "*.txt", 0).unwrap();
        assert!(out.files.is_empty());
        assert!(out.truncated);
    }

    fn regex_escape(s: &str) -> String {
        s.chars()
            .flat_map(|c| {
                if c.is_alphanumeric() {
                    vec![c]
                } else {
                    vec!['\\', c]
                }
            })
            .collect()
    }

    #[test]
    fn glob_invalid_pattern_and_bad_roots() {
        let dir = repo();
        let root = dir.path();
        let err = glob(root, "src/[a-", 10).unwrap_err();
        assert!(matches!(err, SearchError::InvalidGlob { .. }), "{err:?}");
        assert!(err.to_string().contains("src/[a-"), "{err}");

        let missing = root.join("nope");
        let err = glob(&missing, "*", 10).unwrap_err();
        assert_eq!(err, SearchError::NotFound(missing.clone()));
        assert!(err.to_string().contains("does not exist"));

        let file = root.join("visible.txt");
        let err = glob(&file, "*", 10).unwrap_err();
        assert_eq!(err, SearchError::NotADirectory(file.clone()));
        assert!(err.to_string().contains("must be a directory"));

        // grep, like rg, searches a single file given as its path, and only that file.
        let text = std::fs::read_to_string(&file).unwrap();
        let word = text.split_whitespace().next().unwrap();
        let out = grep(&file, &regex_escape(word), None, 100, &open_by_path).unwrap();
        assert!(out.total_matches > 0);
        assert!(
            out.matches.iter().all(|m| m.path == file),
            "{:?}",
            out.matches
        );
    }

    #[test]
    fn grep_respects_ignores_includes_hidden_and_skips_git() {
        let dir = repo();
        let root = dir.path();
        assert_eq!(
            grep_set(root, "needle", None),
            set(&[
                ".config/settings.rs",
                ".hidden.txt",
                "src/deep/er/mod.rs",
                "src/main.rs",
                "sub/lib.rs",
                "visible.txt",
            ])
        );
    }

    #[test]
    fn grep_include_filter() {
        let dir = repo();
        let root = dir.path();
        assert_eq!(
            grep_set(root, "needle", Some("*.rs")),
            set(&[
                ".config/settings.rs",
                "src/deep/er/mod.rs",
                "src/main.rs",
                "sub/lib.rs"
            ])
        );
        assert_eq!(
            grep_set(root, "needle", Some("src/**")),
            set(&["src/deep/er/mod.rs", "src/main.rs"])
        );
        let err = grep(root, "needle", Some("{a,b"), 10, &open_by_path).unwrap_err();
        assert!(matches!(err, SearchError::InvalidGlob { .. }));
    }

    #[test]
    fn grep_reports_lines_and_orders_files_by_mtime() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let old = write(root, "old.txt", b"hit one\nmiss\nhit two\r\n");
        let new = write(root, "z/new.txt", b"miss\nhit three\n");
        let mid = write(root, "mid.txt", b"\xffhit bytes\n");
        set_mtime(&old, 10);
        set_mtime(&new, 30);
        set_mtime(&mid, 20);
        let out = grep(root, r"hit \w+", None, 100, &open_by_path).unwrap();
        let got: Vec<_> = out
            .matches
            .iter()
            .map(|m| {
                (
                    m.path
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                    m.line_number,
                    m.text.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("z/new.txt".to_owned(), 2, "hit three".to_owned()),
                ("mid.txt".to_owned(), 1, "\u{fffd}hit bytes".to_owned()),
                ("old.txt".to_owned(), 1, "hit one".to_owned()),
                ("old.txt".to_owned(), 3, "hit two".to_owned()),
            ]
        );
        assert_eq!(out.total_matches, 4);
        assert!(!out.truncated);
        assert!(!out.partial);
    }

    #[test]
    fn grep_limit_keeps_newest_and_counts_all() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for i in 0..30u64 {
            let path = write(root, &format!("f{i:02}.txt"), b"x\nx\nx\n");
            set_mtime(&path, 1_000 + i);
        }
        let out = grep(root, "x", None, 5, &open_by_path).unwrap();
        assert_eq!(out.total_matches, 90);
        assert!(out.truncated);
        let got: Vec<_> = out
            .matches
            .iter()
            .map(|m| (m.path.file_name().unwrap().to_owned(), m.line_number))
            .collect();
        let expected: Vec<_> = [
            ("f29.txt", 1),
            ("f29.txt", 2),
            ("f29.txt", 3),
            ("f28.txt", 1),
            ("f28.txt", 2),
        ]
        .into_iter()
        .map(|(f, l)| (std::ffi::OsString::from(f), l))
        .collect();
        assert_eq!(got, expected);

        let out = grep(root, "x", None, 90, &open_by_path).unwrap();
        assert_eq!(out.matches.len(), 90);
        assert!(!out.truncated);
    }

    #[test]
    fn grep_pruning_keeps_the_right_files() {
        // Enough matches per thread to trigger pruning (> PRUNE_MIN_LINES).
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let body = "m\n".repeat(200);
        for i in 0..60u64 {
            let path = write(root, &format!("d{}/f{i:02}.txt", i % 4), body.as_bytes());
            set_mtime(&path, 5_000 - i);
        }
        let out = grep(root, "m", None, 250, &open_by_path).unwrap();
        assert_eq!(out.total_matches, 60 * 200);
        assert_eq!(out.matches.len(), 250);
        assert!(
            out.matches[..200]
                .iter()
                .all(|m| m.path.ends_with("d0/f00.txt"))
        );
        assert!(
            out.matches[200..]
                .iter()
                .all(|m| m.path.ends_with("d1/f01.txt"))
        );
        assert_eq!(out.matches[249].line_number, 50);
    }

    #[test]
    fn grep_invalid_regex_is_reported_before_walking() {
        let err = grep(
            Path::new("/definitely/not/here"),
            "fn new(",
            None,
            10,
            &open_by_path,
        )
        .unwrap_err();
        let SearchError::InvalidRegex { pattern, message } = &err else {
            panic!("expected InvalidRegex, got {err:?}");
        };
        assert_eq!(pattern, "fn new(");
        assert!(message.contains("unclosed group"), "{message}");
        let text = err.to_string();
        assert!(text.contains("invalid regex `fn new(`"), "{text}");
        assert!(text.contains("escape"), "{text}");

        let err = grep(Path::new("."), r"a\nb", None, 10, &open_by_path).unwrap_err();
        assert!(matches!(err, SearchError::InvalidRegex { .. }), "{err:?}");
    }

    #[test]
    fn grep_skips_binary_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "blob.bin", b"\x00\x01needle\x00\n");
        write(root, "text.txt", b"needle\n");
        assert_eq!(grep_set(root, "needle", None), set(&["text.txt"]));
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_are_not_followed() {
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret.rs", b"needle\n");
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "inside.rs", b"needle\n");
        std::os::unix::fs::symlink(outside.path(), root.join("linkdir")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.rs"), root.join("link.rs")).unwrap();

        assert_eq!(glob_set(root, "*.rs"), set(&["inside.rs"]));
        assert_eq!(grep_set(root, "needle", None), set(&["inside.rs"]));
        let listed = list(root, &[], 100).unwrap();
        assert_eq!(listed.files, vec![PathBuf::from("inside.rs")]);
    }

    #[cfg(unix)]
    #[test]
    fn grep_open_refuses_symlink_swapped_in() {
        let outside = tempfile::tempdir().unwrap();
        let target = write(outside.path(), "secret", b"needle\n");
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("f");
        std::os::unix::fs::symlink(target, &link).unwrap();
        assert!(open_by_path(&link).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn grep_unreadable_file_sets_partial() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let locked = write(root, "locked.txt", b"needle\n");
        write(root, "open.txt", b"needle\n");
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
        if File::open(&locked).is_ok() {
            // Running as root: permissions are not enforced, nothing to test.
            return;
        }
        let out = grep(root, "needle", None, 10, &open_by_path).unwrap();
        assert!(out.partial);
        assert_eq!(
            rel_set(root, out.matches.iter().map(|m| &m.path)),
            set(&["open.txt"])
        );
    }

    /// Root ignores file permissions, so also drive the worker directly
    /// with a file that vanished between the walk and the open.
    #[test]
    fn grep_vanished_file_sets_partial() {
        let shared = GrepShared {
            open: &open_by_path,
            limit: 10,
            partial: AtomicBool::new(false),
            total: AtomicUsize::new(0),
            files: Mutex::new(Vec::new()),
        };
        let matcher = RegexMatcherBuilder::new().build("x").unwrap();
        let searcher = SearcherBuilder::new().line_number(true).build();
        let dir = tempfile::tempdir().unwrap();
        let present = write(dir.path(), "present.txt", b"x\n");
        let mut worker = GrepVisitor {
            shared: &shared,
            matcher,
            searcher,
            files: Vec::new(),
            retained_lines: 0,
            total: 0,
            prune_at: PRUNE_MIN_LINES,
        };
        worker.search(dir.path().join("gone.txt"));
        assert!(shared.partial.swap(false, AtomicOrdering::Relaxed));
        worker.search(present.clone());
        assert!(!shared.partial.load(AtomicOrdering::Relaxed));
        let _ = worker.visit(Err(ignore::Error::Io(io::Error::other("unreadable dir"))));
        drop(worker);
        assert!(shared.partial.load(AtomicOrdering::Relaxed));
        assert_eq!(shared.total.load(AtomicOrdering::Relaxed), 1);
        let files = shared.files.into_inner().unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, present);
    }

    #[test]
    fn list_applies_default_and_extra_ignores_at_any_depth() {
        let dir = repo();
        let root = dir.path();
        write(root, "node_modules/pkg/index.js", b"");
        write(root, "web/node_modules/pkg/index.js", b"");
        write(root, "web/app.js", b"");
        write(root, "crate/target/debug/x", b"");
        write(root, "zig-out", b"");
        write(root, "a/.coverage", b"");
        write(root, "env/bin/python", b"");
        write(root, "environment.txt", b"");
        write(root, "logs.txt", b"");
        write(root, "notes/draft.md", b"");
        write(root, "app.log", b"");
        write(root, "web/debug.log", b"");

        let out = list(root, &["*.log".to_owned(), "notes/".to_owned()], 100).unwrap();
        let got: Vec<_> = out
            .files
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            got,
            vec![
                ".config/settings.rs",
                ".gitignore",
                ".hidden.txt",
                ".ignore",
                "environment.txt",
                "logs.txt",
                "src/deep/er/mod.rs",
                "src/main.rs",
                "sub/lib.rs",
                "visible.txt",
                "web/app.js",
            ]
        );
        assert!(!out.truncated);

        let err = list(root, &["!keep".to_owned()], 100).unwrap_err();
        assert!(matches!(err, SearchError::InvalidGlob { .. }));
    }

    #[test]
    fn list_limit_is_deterministic_prefix_in_path_order() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for rel in ["b.txt", "a/z.txt", "a.txt", "a/b/c.txt", "c/d.txt"] {
            write(root, rel, b"");
        }
        let all = list(root, &[], 100).unwrap();
        let mut sorted = all.files.clone();
        sorted.sort();
        assert_eq!(all.files, sorted);
        assert_eq!(all.files.len(), 5);
        assert!(!all.truncated);

        let some = list(root, &[], 3).unwrap();
        assert_eq!(some.files, sorted[..3].to_vec());
        assert!(some.truncated);

        let exact = list(root, &[], 5).unwrap();
        assert!(!exact.truncated);
    }
}
