//! The audit trail: every decision runner makes on a session's behalf, one OCSF JSON line
//! each.
//!
//! Security teams read decisions in a SIEM, and a SIEM reads OCSF (the Open Cybersecurity
//! Schema Framework) as it is: each line here carries OCSF's class, category, activity,
//! type, disposition and severity ids, the time in milliseconds since the epoch, and
//! `metadata.product` / `metadata.version`, so no mapping is needed on the way in. Which
//! class each decision is, and why, is said in [`event`].
//!
//! [`Audit`] is the sink. It is shared (`Arc`) by whoever decides: the permission gate, the
//! network proxy, the session. A line is written whole with one `write` on a file opened
//! for appending, so lines from several writers (even several processes on one file) never
//! interleave, and nothing is buffered: a run that is killed keeps every line it wrote.
//!
//! This crate depends on serde_json alone, so the deciders can all use it without any of them
//! depending on another. [`conformance`] checks records against the OCSF schema's own
//! files; the tests use it on every record runner writes.

pub mod conformance;
pub mod event;
mod ocsf;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub use event::{
    Connection, Decision, HttpRequest, Permission, RuleRef, SandboxEnd, SandboxStart, SecretUse,
};
pub use ocsf::OCSF_VERSION;

/// Where an audit line could not go, and why.
#[derive(Debug)]
pub struct AuditError {
    pub path: PathBuf,
    pub message: String,
}

impl std::fmt::Display for AuditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot write the audit trail to {}: {}",
            self.path.display(),
            self.message
        )
    }
}

impl std::error::Error for AuditError {}

struct Sink {
    path: PathBuf,
    file: File,
    /// Told once: a trail that stops being written is said on stderr, not at every line.
    failed: bool,
}

/// The session's audit sink: zero or more files, each getting every line.
pub struct Audit {
    sinks: Mutex<Vec<Sink>>,
    /// `metadata.product.version`: the runner that decided.
    version: String,
    /// `metadata.correlation_uid`: the session every line belongs to.
    session: Option<String>,
    /// `metadata.sequence`: the order lines were made in, across files and threads.
    sequence: AtomicU64,
}

impl Audit {
    /// A sink that writes nowhere: what every decider holds when no trail was asked for.
    pub fn disabled() -> Audit {
        Audit {
            sinks: Mutex::new(Vec::new()),
            version: String::new(),
            session: None,
            sequence: AtomicU64::new(0),
        }
    }

    /// Opens every file for appending (making its folder), so that a file that cannot be
    /// written stops the session before anything is decided unrecorded. `version` is the
    /// runner's; `session` the session id the lines carry.
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
            let err = |e: std::io::Error| AuditError {
                path: path.clone(),
                message: format!(
                    "{e}; name a file in a folder you can write (--audit FILE or [audit] file in your config)"
                ),
            };
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(err)?;
            }
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(err)?;
            sinks.push(Sink {
                path: path.clone(),
                file,
                failed: false,
            });
        }
        Ok(Audit {
            sinks: Mutex::new(sinks),
            version: version.to_string(),
            session: session.map(str::to_string),
            sequence: AtomicU64::new(0),
        })
    }

    /// Whether any line goes anywhere (callers can skip building a record).
    pub fn is_on(&self) -> bool {
        !self.lock().is_empty()
    }

    /// The files written to.
    pub fn files(&self) -> Vec<PathBuf> {
        self.lock().iter().map(|s| s.path.clone()).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Sink>> {
        self.sinks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A permission decision on a tool call (or on anything else the gate judges).
    pub fn permission(&self, p: &Permission) {
        self.write(|m| event::permission(p, m));
    }

    /// A connection through the allow-list's proxy, once it is over (or refused).
    pub fn connection(&self, c: &Connection) {
        self.write(|m| event::connection(c, m));
    }

    /// An inspected HTTP request, judged by method and path.
    pub fn http_request(&self, r: &HttpRequest) {
        self.write(|m| event::http_request(r, m));
    }

    /// A secret put on a request, or refused: by name, never its value.
    pub fn secret_use(&self, s: &SecretUse) {
        self.write(|m| event::secret_use(s, m));
    }

    pub fn sandbox_start(&self, s: &SandboxStart) {
        self.write(|m| event::sandbox_start(s, m));
    }

    pub fn sandbox_end(&self, s: &SandboxEnd) {
        self.write(|m| event::sandbox_end(s, m));
    }

    /// Builds one record (only when some file wants it) and appends it to every file.
    fn write(&self, build: impl FnOnce(ocsf::Meta) -> serde_json::Value) {
        let mut sinks = self.lock();
        if sinks.is_empty() {
            return;
        }
        let meta = ocsf::Meta {
            product_version: &self.version,
            session: self.session.as_deref(),
            sequence: self.sequence.fetch_add(1, Ordering::Relaxed) + 1,
            time: now_ms(),
        };
        let mut line = build(meta).to_string();
        line.push('\n');
        for sink in sinks.iter_mut() {
            let written = sink
                .file
                .write_all(line.as_bytes())
                .and_then(|()| sink.file.flush());
            if let Err(e) = written
                && !sink.failed
            {
                sink.failed = true;
                eprintln!(
                    "runner: {}",
                    AuditError {
                        path: sink.path.clone(),
                        message: format!("{e}; later lines of this session are lost there"),
                    }
                );
            }
        }
    }
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
    }

    #[test]
    fn a_disabled_sink_builds_nothing() {
        let audit = Audit::disabled();
        assert!(!audit.is_on());
        audit.write(|_| panic!("no record is built for nobody"));
    }
}
