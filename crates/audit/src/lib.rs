//! The audit trail: every decision runner makes on a session's behalf, one OCSF JSON line
//! each.
//!
//! Security teams read decisions in a SIEM, and a SIEM reads OCSF (the Open Cybersecurity
//! Schema Framework) as it is: each line here carries OCSF's class, category, activity,
//! type, disposition and severity ids, the time in milliseconds since the epoch, and
//! `metadata.product` / `metadata.version`, so no mapping is needed on the way in. Which
//! class each decision is, and why, is said in [`event`]. Every line also says whose
//! session it is (`metadata.correlation_uid`, with `metadata.sequence` its place in that
//! session), who ran it (`actor.user`) and on which machine (`device`), so lines of many
//! sessions, people and hosts can share a file and still be told apart ([`identity`]).
//!
//! [`Audit`] is the sink. It is shared (`Arc`) by whoever decides: the permission gate, the
//! network proxy, the session. A line is written whole with one `write` on a file opened
//! for appending, so lines from several writers (even several processes on one file) never
//! interleave, and nothing is buffered: a run that is killed keeps every line it wrote.
//! What a command inside the wall can make runner decide is unbounded, so repeats are
//! folded and a session's lines have a budget ([`fold`]). And a file the sandbox could write
//! is no record of it: [`place`] refuses one before the session starts.
//!
//! This crate depends on serde_json and libc alone, so the deciders can all use it without
//! any of them depending on another. [`conformance`] checks records against the OCSF
//! schema's own files; the tests use it on every record runner writes.

pub mod conformance;
pub mod event;
pub mod fold;
pub mod identity;
mod ocsf;
pub mod place;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

pub use event::{
    Connection, Decision, HttpRequest, Permission, RuleRef, SandboxEnd, SandboxStart, SecretUse,
    SelfTest, WallCheck,
};
pub use fold::Limits;
pub use identity::Identity;
pub use ocsf::OCSF_VERSION;
pub use place::Writable;

/// Why a trail file cannot be used.
#[derive(Debug)]
pub enum AuditError {
    /// It could not be opened (or its folder made).
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    /// It is where the sandbox can write ([`place`]).
    Writable {
        path: PathBuf,
        /// Where it really is, every link followed.
        resolved: PathBuf,
        area: Writable,
    },
    /// It is a symbolic link: what it points to can change once it is checked.
    Symlink { path: PathBuf },
    /// It has other names, one of which could be where the sandbox writes.
    Linked { path: PathBuf, links: u64 },
    /// It names a folder, a device or `..`, not a file.
    NotAFile { path: PathBuf },
}

impl AuditError {
    pub(crate) fn open(path: &Path, source: std::io::Error) -> AuditError {
        AuditError::Open {
            path: path.to_path_buf(),
            source,
        }
    }

    /// The file as it was named.
    pub fn path(&self) -> &Path {
        match self {
            AuditError::Open { path, .. }
            | AuditError::Writable { path, .. }
            | AuditError::Symlink { path }
            | AuditError::Linked { path, .. }
            | AuditError::NotAFile { path } => path,
        }
    }
}

/// What to do about any of them.
const NAME_ANOTHER: &str = "name another with --audit FILE or [audit] file in your config";

impl std::fmt::Display for AuditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = self.path().display();
        match self {
            AuditError::Open { source, .. } => write!(
                f,
                "cannot write the audit trail to {path}: {source}; name a file in a folder you can write (--audit FILE or [audit] file in your config)"
            ),
            AuditError::Writable { resolved, area, .. } => {
                write!(f, "the audit trail cannot go in {path}")?;
                if resolved.as_path() != self.path() {
                    write!(f, " (that is {})", resolved.display())?;
                }
                write!(
                    f,
                    ": it is inside {} ({}), which the sandbox can write, so the commands it records could cut it short or add lines of their own; {NAME_ANOTHER}, outside it (for example in ~/.local/state/runner/)",
                    area.what,
                    area.dir.display()
                )
            }
            AuditError::Symlink { .. } => write!(
                f,
                "the audit trail cannot go in {path}: it is a symbolic link, and where it points could change once it is checked; name the file itself, or {NAME_ANOTHER}"
            ),
            AuditError::Linked { links, .. } => write!(
                f,
                "the audit trail cannot go in {path}: the file has {links} names (hard links), and another of them could be where the sandbox writes; {NAME_ANOTHER}"
            ),
            AuditError::NotAFile { .. } => write!(
                f,
                "the audit trail cannot go in {path}: that is not a file name (a folder, a device or `..`); {NAME_ANOTHER}"
            ),
        }
    }
}

impl std::error::Error for AuditError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AuditError::Open { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Who drove the session, where a client names itself (an MCP client's `clientInfo`): on
/// the sandbox's start record as `actor.app_name` and `unmapped.client`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    pub name: String,
    pub version: Option<String>,
}

struct Sink {
    path: PathBuf,
    file: File,
    /// Told once: a trail that stops being written is said on stderr, not at every line.
    failed: bool,
}

/// What the sink changes as lines are made.
struct State {
    sinks: Vec<Sink>,
    /// `metadata.sequence` of the last line written: their order, across files and threads.
    sequence: u64,
    limits: Limits,
    client: Option<Client>,
    folds: fold::Folds,
    /// Bytes of this session's lines written (each line once, however many files).
    written: u64,
    /// Lines past the budget, and their bytes.
    dropped: (u64, u64),
    /// The lines dropped when the last summary of them was written.
    summarized: u64,
    /// A thread closes folding windows on time while any holds a count.
    flusher: bool,
}

/// Whether a line counts against the session's budget.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Budget {
    Counted,
    /// The sandbox's start and stop, and what says lines were dropped.
    Always,
}

struct Inner {
    state: Mutex<State>,
    /// `metadata.product.version`: the runner that decided.
    version: String,
    /// `metadata.correlation_uid`: the session every line belongs to.
    session: String,
    identity: Identity,
}

/// The session's audit sink: zero or more files, each getting every line.
pub struct Audit {
    inner: Arc<Inner>,
}

impl Audit {
    /// A sink that writes nowhere: what every decider holds when no trail was asked for.
    pub fn disabled() -> Audit {
        Audit::with_sinks(Vec::new(), "", None)
    }

    fn with_sinks(sinks: Vec<Sink>, version: &str, session: Option<&str>) -> Audit {
        // Nobody is named where nothing is written (every gate holds a disabled sink).
        let state_has_sinks = !sinks.is_empty();
        let state = State {
            sinks,
            sequence: 0,
            limits: Limits::default(),
            client: None,
            folds: fold::Folds::default(),
            written: 0,
            dropped: (0, 0),
            summarized: 0,
            flusher: false,
        };
        Audit {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                version: version.to_string(),
                session: session.map_or_else(new_session_id, str::to_string),
                identity: match state_has_sinks {
                    true => identity::of_this_process().clone(),
                    false => Identity::default(),
                },
            }),
        }
    }

    /// Opens every file for appending (making its folder), so that a file that cannot be
    /// written stops the session before anything is decided unrecorded. `version` is the
    /// runner's; `session` the session id the lines carry (one is made when there is
    /// none). A file that is a symbolic link is not followed. Where the files may be is
    /// for the caller to check first ([`place::check`]).
    pub fn open(
        files: &[PathBuf],
        version: &str,
        session: Option<&str>,
    ) -> Result<Audit, AuditError> {
        let mut sinks = Vec::new();
        for path in files {
            if sinks.iter().any(|s: &Sink| s.path == *path) {
                continue;
            }
            let err = |e: std::io::Error| AuditError::open(path, e);
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(err)?;
            }
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .map_err(err)?;
            sinks.push(Sink {
                path: path.clone(),
                file,
                failed: false,
            });
        }
        Ok(Audit::with_sinks(sinks, version, session))
    }

    /// How much the session may write ([`fold`]).
    pub fn with_limits(self, limits: Limits) -> Audit {
        self.inner.lock().limits = limits;
        self
    }

    /// Who drove the session, for its start record.
    pub fn with_client(self, client: Option<Client>) -> Audit {
        self.inner.lock().client = client;
        self
    }

    /// Numbers lines on from `sequence`: a session resumed goes on where its trail stopped.
    pub fn continuing(self, sequence: u64) -> Audit {
        self.inner.lock().sequence = sequence;
        self
    }

    /// Whether any line goes anywhere (callers can skip building a record).
    pub fn is_on(&self) -> bool {
        !self.inner.lock().sinks.is_empty()
    }

    /// The files written to.
    pub fn files(&self) -> Vec<PathBuf> {
        self.inner
            .lock()
            .sinks
            .iter()
            .map(|s| s.path.clone())
            .collect()
    }

    /// The session every line names (`metadata.correlation_uid`).
    pub fn session(&self) -> &str {
        &self.inner.session
    }

    /// A permission decision on a tool call (or on anything else the gate judges).
    pub fn permission(&self, p: &Permission) {
        self.decided(Some(p.fold_key()), |m| event::permission(p, m));
    }

    /// A connection through the allow-list's proxy, once it is over (or refused).
    pub fn connection(&self, c: &Connection) {
        self.decided(Some(c.fold_key()), |m| event::connection(c, m));
    }

    /// An inspected HTTP request, judged by method and path.
    pub fn http_request(&self, r: &HttpRequest) {
        self.decided(Some(r.fold_key()), |m| event::http_request(r, m));
    }

    /// A secret put on a request, or refused: by name, never its value.
    pub fn secret_use(&self, s: &SecretUse) {
        self.decided(Some(s.fold_key()), |m| event::secret_use(s, m));
    }

    pub fn sandbox_start(&self, s: &SandboxStart) {
        let inner = &self.inner;
        let mut st = inner.lock();
        if st.sinks.is_empty() {
            return;
        }
        let record = event::sandbox_start(s, st.client.as_ref(), inner.meta(now_ms()));
        inner.emit(&mut st, record, Budget::Always);
    }

    /// The wall's self-test at start, passed or failed: never folded, never over budget.
    pub fn self_test(&self, t: &SelfTest) {
        let inner = &self.inner;
        let mut st = inner.lock();
        if st.sinks.is_empty() {
            return;
        }
        let record = event::self_test(t, inner.meta(now_ms()));
        inner.emit(&mut st, record, Budget::Always);
    }

    /// The sandbox's stop, after every count still open and, when lines were dropped, how
    /// many.
    pub fn sandbox_end(&self, s: &SandboxEnd) {
        let inner = &self.inner;
        let mut st = inner.lock();
        if st.sinks.is_empty() {
            return;
        }
        inner.settle(&mut st);
        let record = event::sandbox_end(s, inner.meta(now_ms()));
        inner.emit(&mut st, record, Budget::Always);
    }

    /// A decision: written, or counted with others alike to it ([`fold`]).
    fn decided(&self, key: Option<String>, build: impl FnOnce(ocsf::Meta) -> serde_json::Value) {
        let inner = &self.inner;
        let mut st = inner.lock();
        if st.sinks.is_empty() {
            return;
        }
        let now = now_ms();
        inner.write_closed(&mut st, now);
        let meta = inner.meta(now);
        let record = match key {
            None => Some(build(meta)),
            Some(key) => {
                let limits = st.limits;
                let offer = st.folds.offer(&key, now, &limits, || build(meta));
                if let Some(closed) = offer.closed {
                    inner.emit(&mut st, closed.into_record(&limits), Budget::Counted);
                }
                if offer.record.is_none() {
                    self.keep_windows_on_time(&mut st);
                }
                offer.record
            }
        };
        if let Some(record) = record {
            inner.emit(&mut st, record, Budget::Counted);
        }
    }

    /// A thread that writes each window's count when the window closes, so that a count
    /// does not wait for the next decision or the session's end.
    fn keep_windows_on_time(&self, st: &mut State) {
        if st.flusher {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        st.flusher = std::thread::Builder::new()
            .name("audit-folds".into())
            .spawn(move || close_windows_on_time(weak))
            .is_ok();
    }
}

/// Until no window holds a count (or the trail is gone): wakes when the next one closes
/// and writes its count.
fn close_windows_on_time(weak: Weak<Inner>) {
    loop {
        let wait = {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let mut st = inner.lock();
            let now = now_ms();
            inner.write_closed(&mut st, now);
            match st.folds.next_due(&st.limits) {
                Some(due) => due.saturating_sub(now),
                None => {
                    st.flusher = false;
                    return;
                }
            }
        };
        std::thread::sleep(std::time::Duration::from_millis(wait.clamp(10, 500)));
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn meta(&self, time: u64) -> ocsf::Meta<'_> {
        ocsf::Meta {
            product_version: &self.version,
            session: &self.session,
            time,
            identity: &self.identity,
        }
    }

    /// The counts of the windows closed by `now`.
    fn write_closed(&self, st: &mut State, now: u64) {
        let limits = st.limits;
        for closed in st.folds.closed_by(now, &limits) {
            self.emit(st, closed.into_record(&limits), Budget::Counted);
        }
    }

    /// The session is ending: every count still open, then, if lines were dropped since
    /// the last summary, one saying how many.
    fn settle(&self, st: &mut State) {
        let limits = st.limits;
        for open in st.folds.drain() {
            self.emit(st, open.into_record(&limits), Budget::Counted);
        }
        if st.dropped.0 > st.summarized {
            let capped = event::Capped {
                budget: limits.max_bytes,
                lines: st.dropped.0,
                bytes: st.dropped.1,
                over: true,
            };
            st.summarized = st.dropped.0;
            let record = event::trail_capped(&capped, self.meta(now_ms()));
            self.emit(st, record, Budget::Always);
        }
    }

    /// Numbers `record` and appends it to every file, within the session's budget (past
    /// it, the line is counted and the first one dropped is said once).
    fn emit(&self, st: &mut State, mut record: serde_json::Value, budget: Budget) {
        let sequence = st.sequence + 1;
        record["metadata"]["sequence"] = serde_json::json!(sequence);
        let mut line = record.to_string();
        line.push('\n');
        let len = line.len() as u64;
        if budget == Budget::Counted && st.written + len > st.limits.max_bytes {
            st.dropped.0 += 1;
            st.dropped.1 += len;
            if st.dropped.0 == 1 {
                let capped = event::Capped {
                    budget: st.limits.max_bytes,
                    lines: 0,
                    bytes: 0,
                    over: false,
                };
                self.emit(
                    st,
                    event::trail_capped(&capped, self.meta(now_ms())),
                    Budget::Always,
                );
            }
            return;
        }
        st.sequence = sequence;
        st.written += len;
        for sink in st.sinks.iter_mut() {
            let written = sink
                .file
                .write_all(line.as_bytes())
                .and_then(|()| sink.file.flush());
            if let Err(e) = written
                && !sink.failed
            {
                sink.failed = true;
                eprintln!(
                    "runner: cannot write the audit trail to {}: {e}; later lines of this session are lost there",
                    sink.path.display()
                );
            }
        }
    }
}

impl Drop for Inner {
    /// A trail let go of without a sandbox's stop (a session that never started one) still
    /// gets its open counts and its summary.
    fn drop(&mut self) {
        let mut st = self.lock();
        if !st.sinks.is_empty() {
            self.settle(&mut st);
        }
    }
}

/// A session id for a trail opened without one: unique across the processes of a machine
/// (the time, the process, a counter), sortable by time.
fn new_session_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{:013x}-{:x}-{n:x}", now_ms(), std::process::id())
}

/// The `metadata.sequence` of `session`'s last line in the trail at `path`, looked for in
/// the file's last lines: where a resumed session numbers on from.
pub fn last_sequence(path: &Path, session: &str) -> Option<u64> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 256 << 10;
    let mut file = File::open(path).ok()?;
    let size = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(size.saturating_sub(TAIL))).ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    String::from_utf8_lossy(&tail)
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r["metadata"]["correlation_uid"] == session)
        .and_then(|r| r["metadata"]["sequence"].as_u64())
}

/// Milliseconds since the epoch: OCSF's `timestamp_t`.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_appended_whole_to_every_file_and_numbered() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a/audit.jsonl");
        let b = dir.path().join("b.jsonl");
        std::fs::write(&b, "{\"earlier\":1}\n").unwrap();
        let audit = Audit::open(&[a.clone(), b.clone(), a.clone()], "9.9.9", Some("s1")).unwrap();
        assert_eq!(audit.files().len(), 2, "a file named twice is written once");
        let start = SandboxStart {
            backend: "landlock".into(),
            network: "allowlist".into(),
            worktree: "/w".into(),
            description: "sandbox: landlock".into(),
            command: None,
        };
        audit.sandbox_start(&start);
        audit.sandbox_end(&SandboxEnd {
            backend: "landlock".into(),
            reason: None,
        });
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&a)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["metadata"]["sequence"], 1);
        assert_eq!(lines[1]["metadata"]["sequence"], 2);
        assert_eq!(lines[0]["metadata"]["correlation_uid"], "s1");
        assert_eq!(lines[0]["metadata"]["product"]["version"], "9.9.9");
        let kept = std::fs::read_to_string(&b).unwrap();
        assert!(
            kept.starts_with("{\"earlier\":1}\n"),
            "appended, not replaced"
        );
        assert_eq!(kept.lines().count(), 3);
    }

    #[test]
    fn a_file_that_cannot_be_opened_is_named_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "").unwrap();
        let bad = blocker.join("audit.jsonl");
        let e = Audit::open(std::slice::from_ref(&bad), "1", None)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains(&bad.display().to_string()) && e.contains("--audit"),
            "{e}"
        );
        // A link is not followed, even where nobody checked the place first.
        let target = dir.path().join("target.jsonl");
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(Audit::open(std::slice::from_ref(&link), "1", None).is_err());
        assert!(!target.exists());
    }

    fn read(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn refused(n: usize) -> Connection {
        Connection {
            host: "refused.example".into(),
            port: 443,
            allowed: false,
            reason: Some("denied by the rule network \"*\" = \"deny\"".into()),
            address: None,
            bytes_sent: 0,
            bytes_received: n as u64,
            summary: "deny refused.example:443".into(),
        }
    }

    fn end() -> SandboxEnd {
        SandboxEnd {
            backend: "landlock".into(),
            reason: None,
        }
    }

    #[test]
    fn every_line_names_its_session_user_and_host_and_sessions_sharing_a_file_differ() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("shared.jsonl");
        for _ in 0..2 {
            let audit = Audit::open(std::slice::from_ref(&file), "1", None).unwrap();
            audit.connection(&refused(0));
            audit.sandbox_end(&end());
        }
        let lines = read(&file);
        assert_eq!(lines.len(), 4);
        let me = identity::of_this_process();
        for l in &lines {
            assert_eq!(l["actor"]["user"]["uid"], me.uid.to_string(), "{l}");
            assert_eq!(l["actor"]["user"]["name"], me.user, "{l}");
            assert_eq!(l["device"]["hostname"], me.hostname, "{l}");
            assert!(
                l["metadata"]["profiles"]
                    .as_array()
                    .unwrap()
                    .contains(&"host".into())
            );
        }
        let session = |i: usize| {
            lines[i]["metadata"]["correlation_uid"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert!(!session(0).is_empty());
        assert_eq!(session(0), session(1));
        assert_eq!(session(2), session(3));
        assert_ne!(session(0), session(2), "two sessions, one id");
        let numbers: Vec<u64> = lines
            .iter()
            .map(|l| l["metadata"]["sequence"].as_u64().unwrap())
            .collect();
        assert_eq!(numbers, [1, 2, 1, 2], "numbered within each session");
    }

    #[test]
    fn repeats_are_folded_and_every_one_is_counted() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.jsonl");
        let limits = Limits {
            fold_after: 5,
            fold_window_ms: 60_000,
            ..Limits::default()
        };
        let audit = Audit::open(std::slice::from_ref(&file), "1", Some("s"))
            .unwrap()
            .with_limits(limits);
        for n in 0..1500 {
            audit.connection(&refused(n));
        }
        audit.connection(&Connection {
            host: "other.example".into(),
            ..refused(0)
        });
        audit.sandbox_end(&end());
        let lines = read(&file);
        let about = |host: &str| -> Vec<&serde_json::Value> {
            lines
                .iter()
                .filter(|l| l["dst_endpoint"]["hostname"] == host)
                .collect()
        };
        let refusals = about("refused.example");
        assert_eq!(refusals.len(), 6, "five one by one, one folded");
        let counted: u64 = refusals
            .iter()
            .map(|l| l["count"].as_u64().unwrap_or(1))
            .sum();
        assert_eq!(counted, 1500);
        let folded = refusals[5];
        assert_eq!(folded["count"], 1495);
        assert!(folded["start_time"].as_u64() <= folded["end_time"].as_u64());
        assert_eq!(folded["traffic"]["bytes_in"], (5..1500u64).sum::<u64>());
        assert_eq!(about("other.example").len(), 1);
        assert_eq!(lines.last().unwrap()["activity_name"], "Stop");
    }

    #[test]
    fn a_window_that_closes_is_written_without_waiting_for_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.jsonl");
        let limits = Limits {
            fold_after: 1,
            fold_window_ms: 200,
            ..Limits::default()
        };
        let audit = Audit::open(std::slice::from_ref(&file), "1", Some("s"))
            .unwrap()
            .with_limits(limits);
        for n in 0..4 {
            audit.connection(&refused(n));
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while read(&file).len() < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let lines = read(&file);
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert_eq!(lines[1]["count"], 3);
        drop(audit);
        assert_eq!(read(&file).len(), 2, "nothing twice");
    }

    #[test]
    fn past_its_budget_a_session_says_so_and_how_much_was_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.jsonl");
        let limits = Limits {
            fold_after: u64::MAX,
            max_bytes: 20_000,
            ..Limits::default()
        };
        let audit = Audit::open(std::slice::from_ref(&file), "1", Some("s"))
            .unwrap()
            .with_limits(limits);
        for n in 0..200 {
            audit.connection(&refused(n));
        }
        audit.sandbox_end(&end());
        let size = std::fs::metadata(&file).unwrap().len();
        let lines = read(&file);
        let n = lines.len();
        assert!(size < 20_000 + 4096, "{size} bytes");
        let written = lines.iter().filter(|l| l["class_uid"] == 4001).count() as u64;
        let (notice, summary) = (&lines[n - 3], &lines[n - 2]);
        assert!(
            notice["message"]
                .as_str()
                .unwrap()
                .contains("reached its budget"),
            "{notice}"
        );
        assert_eq!(summary["activity_name"], "Capped");
        assert_eq!(
            written + summary["unmapped"]["dropped_lines"].as_u64().unwrap(),
            200
        );
        assert_eq!(lines[n - 1]["activity_name"], "Stop");
        let numbers: Vec<u64> = lines
            .iter()
            .map(|l| l["metadata"]["sequence"].as_u64().unwrap())
            .collect();
        assert_eq!(
            numbers,
            (1..=n as u64).collect::<Vec<_>>(),
            "no gaps: dropped lines are not numbered"
        );
    }

    #[test]
    fn a_resumed_session_numbers_on_from_its_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.jsonl");
        let first = Audit::open(std::slice::from_ref(&file), "1", Some("s1")).unwrap();
        first.connection(&refused(0));
        first.sandbox_end(&end());
        drop(first);
        Audit::open(std::slice::from_ref(&file), "1", Some("other"))
            .unwrap()
            .sandbox_end(&end());
        assert_eq!(last_sequence(&file, "s1"), Some(2));
        assert_eq!(last_sequence(&file, "nobody"), None);
        let again = Audit::open(std::slice::from_ref(&file), "1", Some("s1"))
            .unwrap()
            .continuing(2);
        again.sandbox_end(&end());
        assert_eq!(last_sequence(&file, "s1"), Some(3));
    }

    #[test]
    fn a_disabled_sink_builds_nothing() {
        let audit = Audit::disabled();
        assert!(!audit.is_on());
        audit.decided(None, |_| panic!("no record is built for nobody"));
    }
}
