//! The session file: one JSON object per line in `$XDG_DATA_HOME/runner/sessions/ID.jsonl`,
//! appended as the run goes (each line one `write`), so a killed run keeps everything up
//! to its last completed record. It holds every message, every model turn (the replay
//! file is these turns), tool results, permission decisions, timings and token counts;
//! never an API key, which never reaches the loop.
//!
//! Subagents write into their root session's file, tagged with their own session id, so
//! one file holds the whole run in the order the model was asked.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use runner_llm::{Message, Turn, Usage};

/// One line of the file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    Session {
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<String>,
        created_ms: u64,
        root: String,
        model: String,
        agent: String,
        sandbox: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
        /// The window the run measured against: a replay compacts where the run did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context_window: Option<u64>,
    },
    /// A user prompt or a tool result, as the model will read it.
    Message { session: String, message: Message },
    /// One model answer, as the provider returned it (what replay plays back).
    Turn {
        session: String,
        step: u32,
        duration_ms: u64,
        turn: Turn,
        /// The answer to a compaction request: replayed, but not part of the conversation.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        summary: bool,
    },
    Tool {
        session: String,
        id: String,
        tool: String,
        title: String,
        outcome: String,
        duration_ms: u64,
        #[serde(default, skip_serializing_if = "Value::is_null")]
        metadata: Value,
    },
    Permission {
        session: String,
        permission: String,
        patterns: Vec<String>,
        decision: String,
    },
    /// The session was handed to another agent (plan mode) from here on.
    Agent { session: String, agent: String },
    /// The conversation up to here was replaced by a summary.
    Compaction { session: String, summary: String },
    /// A connection through the network proxy (`--network allowlist`), once it is over.
    Network {
        session: String,
        #[serde(flatten)]
        connection: runner_network::ConnectionRecord,
    },
    End {
        session: String,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        steps: u32,
        usage: Usage,
        duration_ms: u64,
    },
}

impl Record {
    pub fn session(&self) -> &str {
        match self {
            Record::Session { session, .. }
            | Record::Message { session, .. }
            | Record::Turn { session, .. }
            | Record::Tool { session, .. }
            | Record::Permission { session, .. }
            | Record::Compaction { session, .. }
            | Record::Agent { session, .. }
            | Record::Network { session, .. }
            | Record::End { session, .. } => session,
        }
    }
}

/// Appends records to a session file. A write that fails is reported once on stderr and
/// the run goes on: losing the log must not lose the work.
pub struct Recorder {
    path: PathBuf,
    file: Mutex<Option<File>>,
    failed: std::sync::atomic::AtomicBool,
}

impl Recorder {
    pub fn create(path: PathBuf) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&path)?;
        end_torn_line(&mut file)?;
        Ok(Recorder {
            path,
            file: Mutex::new(Some(file)),
            failed: Default::default(),
        })
    }

    /// A recorder that keeps nothing (benchmarks).
    pub fn none() -> Self {
        Recorder {
            path: PathBuf::new(),
            file: Mutex::new(None),
            failed: Default::default(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn write(&self, record: &Record) {
        let mut guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let Some(file) = guard.as_mut() else { return };
        let mut line = match serde_json::to_vec(record) {
            Ok(l) => l,
            Err(_) => return,
        };
        line.push(b'\n');
        if let Err(e) = file.write_all(&line)
            && !self.failed.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            eprintln!(
                "runner: cannot write the session file {}: {e}; the run goes on unrecorded",
                self.path.display()
            );
        }
    }
}

/// A session being continued may end in half a line (the earlier run was killed mid-write,
/// or the disk filled): the next record must start on a line of its own, or it is lost
/// with the torn one.
fn end_torn_line(file: &mut File) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    if file.metadata()?.len() == 0 {
        return Ok(());
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::End(-1))?;
    file.read_exact(&mut last)?;
    if last[0] != b'\n' {
        file.write_all(b"\n")?;
    }
    Ok(())
}

/// `$XDG_DATA_HOME/runner/sessions` (default `~/.local/share/runner/sessions`).
pub fn sessions_dir() -> PathBuf {
    runner_dirs::data_home()
        .unwrap_or_else(|| PathBuf::from(".local/share"))
        .join("runner")
        .join("sessions")
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A new session id: sortable by time, unique across parallel runs.
pub fn new_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let ms = now_ms();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mix = (std::process::id() as u64) << 16 ^ n as u64 ^ (ms & 0xffff);
    format!("{ms:013x}-{:06x}", mix & 0xff_ffff)
}

/// A session file read back. Lines that do not parse (a line cut by a kill) are skipped
/// and counted.
pub struct Loaded {
    pub path: PathBuf,
    pub records: Vec<Record>,
    pub skipped: usize,
}

impl Loaded {
    pub fn read(path: &Path) -> std::io::Result<Loaded> {
        // Lossy: a write cut inside a multi-byte character spoils one line, not the file.
        let bytes = std::fs::read(path)?;
        let text = String::from_utf8_lossy(&bytes);
        let mut records = Vec::new();
        let mut skipped = 0;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<Record>(line) {
                Ok(r) => records.push(r),
                Err(_) => skipped += 1,
            }
        }
        Ok(Loaded {
            path: path.to_path_buf(),
            records,
            skipped,
        })
    }

    /// The root session's header.
    pub fn header(&self) -> Option<&Record> {
        self.records
            .iter()
            .find(|r| matches!(r, Record::Session { parent: None, .. }))
    }

    /// The agent leading the root session at its end: the last one it started as or was
    /// handed to (plan mode).
    pub fn lead_agent(&self) -> Option<String> {
        let id = self.id();
        self.records.iter().rev().find_map(|r| match r {
            Record::Agent { session, agent } if *session == id => Some(agent.clone()),
            Record::Session {
                parent: None,
                agent,
                ..
            } => Some(agent.clone()),
            _ => None,
        })
    }

    pub fn id(&self) -> String {
        match self.header() {
            Some(Record::Session { session, .. }) => session.clone(),
            _ => self
                .path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }

    /// The root conversation as the model last saw it: messages and turns in order, a
    /// compaction restarting it from its summary.
    pub fn conversation(&self) -> Vec<Message> {
        let id = self.id();
        let mut messages = Vec::new();
        for r in self.records.iter().filter(|r| r.session() == id) {
            match r {
                Record::Message { message, .. } => messages.push(message.clone()),
                Record::Turn { summary: true, .. } => {}
                Record::Turn { turn, .. } => messages.push(Message::Assistant {
                    text: turn.text.clone(),
                    tool_calls: turn.tool_calls.clone(),
                }),
                Record::Compaction { summary, .. } => {
                    messages = vec![super::compact::summary_message(summary)];
                }
                _ => {}
            }
        }
        repair(&mut messages);
        messages
    }

    /// The replay file: a header with the first prompt, then every model turn (the
    /// subagents' too) in the order they were asked for.
    pub fn export(&self) -> String {
        let mut out = String::new();
        let prompt = self.records.iter().find_map(|r| match r {
            Record::Message {
                message: Message::User { text },
                ..
            } => Some(text.clone()),
            _ => None,
        });
        let (model, window) = match self.header() {
            Some(Record::Session {
                model,
                context_window,
                ..
            }) => (model.clone(), *context_window),
            _ => (String::new(), None),
        };
        let header = serde_json::json!({"type": "replay", "session": self.id(), "model": model, "prompt": prompt, "context_window": window});
        // Exact JSON, with nothing raw a terminal would act on (it is printed to stdout).
        out.push_str(&runner_display::json(&header));
        out.push('\n');
        for r in &self.records {
            if matches!(r, Record::Turn { .. }) {
                let line = runner_display::json(r);
                if !line.is_empty() {
                    out.push_str(&line);
                    out.push('\n');
                }
            }
        }
        out
    }
}

/// A conversation cut by a kill may end with tool calls whose results were never
/// recorded; the providers refuse such a history, so those calls get a result saying so.
pub fn repair(messages: &mut Vec<Message>) {
    let Some(pos) = messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }))
    else {
        return;
    };
    let Message::Assistant { tool_calls, .. } = &messages[pos] else {
        return;
    };
    let answered: Vec<String> = messages[pos + 1..]
        .iter()
        .filter_map(|m| match m {
            Message::Tool { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .collect();
    let missing: Vec<Message> = tool_calls
        .iter()
        .filter(|c| !answered.contains(&c.id))
        .map(|c| Message::Tool {
            call_id: c.id.clone(),
            name: c.name.clone(),
            content: "This call was interrupted before it returned (the run was stopped). Check its effect before repeating it.".into(),
            is_error: true,
            images: Vec::new(),
        })
        .collect();
    let at = pos + 1 + answered.len();
    for (i, m) in missing.into_iter().enumerate() {
        messages.insert((at + i).min(messages.len()), m);
    }
}

/// Every session file, newest first.
pub fn list(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    files.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
    files.into_iter().map(|(_, p)| p).collect()
}

/// Why no one session file answers to an id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotFound {
    #[error("no session {id:?} in {} (see `runner sessions list`)", dir.display())]
    None { id: String, dir: PathBuf },
    #[error("{count} sessions start with {id:?}; give more of the id")]
    Several { id: String, count: usize },
}

/// The file for a session id (or a unique prefix of one).
pub fn find(dir: &Path, id: &str) -> Result<PathBuf, NotFound> {
    let exact = dir.join(format!("{id}.jsonl"));
    if exact.is_file() {
        return Ok(exact);
    }
    let matches: Vec<PathBuf> = list(dir)
        .into_iter()
        .filter(|p| {
            p.file_stem()
                .is_some_and(|s| s.to_string_lossy().starts_with(id))
        })
        .collect();
    match matches.len() {
        1 => Ok(matches.into_iter().next().unwrap_or_default()),
        0 => Err(NotFound::None {
            id: id.to_string(),
            dir: dir.to_path_buf(),
        }),
        count => Err(NotFound::Several {
            id: id.to_string(),
            count,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner_llm::{Finish, ToolCall};

    #[test]
    fn a_continued_session_starts_after_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        // An earlier run killed inside a write, in the middle of a character.
        let mut torn = br#"{"type":"compaction","session":"s","summary":"caf"#.to_vec();
        torn.push(0xc3);
        std::fs::write(&path, torn).unwrap();
        let rec = Recorder::create(path.clone()).unwrap();
        rec.write(&Record::Compaction {
            session: "s".into(),
            summary: "after".into(),
        });
        let loaded = Loaded::read(&path).unwrap();
        assert_eq!(loaded.skipped, 1);
        assert!(matches!(
            &loaded.records[..],
            [Record::Compaction { summary, .. }] if summary == "after"
        ));
    }

    #[test]
    fn a_conversation_cut_mid_step_is_repaired_and_a_torn_line_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let rec = Recorder::create(path.clone()).unwrap();
        let s = "s".to_string();
        rec.write(&Record::Session {
            session: s.clone(),
            parent: None,
            created_ms: 1,
            root: "/w".into(),
            model: "m/x".into(),
            agent: "build".into(),
            sandbox: "none".into(),
            prompt: None,
            context_window: None,
        });
        rec.write(&Record::Message {
            session: s.clone(),
            message: Message::User {
                text: "fix it".into(),
            },
        });
        let calls = vec![
            ToolCall {
                id: "1".into(),
                name: "read".into(),
                arguments: "{}".into(),
            },
            ToolCall {
                id: "2".into(),
                name: "bash".into(),
                arguments: "{}".into(),
            },
        ];
        rec.write(&Record::Turn {
            session: s.clone(),
            step: 1,
            duration_ms: 1,
            turn: Turn {
                text: String::new(),
                tool_calls: calls,
                finish: Finish::ToolCalls,
                usage: Usage::default(),
            },
            summary: false,
        });
        rec.write(&Record::Message {
            session: s.clone(),
            message: Message::Tool {
                call_id: "1".into(),
                name: "read".into(),
                content: "x".into(),
                is_error: false,
                images: vec![],
            },
        });
        drop(rec);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"type\":\"mess")
            .unwrap();
        let loaded = Loaded::read(&path).unwrap();
        assert_eq!(loaded.skipped, 1);
        let conv = loaded.conversation();
        assert_eq!(conv.len(), 4);
        assert!(
            matches!(&conv[3], Message::Tool { call_id, is_error: true, .. } if call_id == "2")
        );
        let export = loaded.export();
        assert!(
            export
                .lines()
                .next()
                .unwrap()
                .contains("\"prompt\":\"fix it\"")
        );
        assert_eq!(export.lines().count(), 2);
    }
}
