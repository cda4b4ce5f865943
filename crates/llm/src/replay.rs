//! The model's side of a recorded session, played back: `--model replay/PATH`. No
//! network, no key; the turns come back in the order they were recorded, so the same
//! worktree and the same prompt give the same tool calls, the same files and the same
//! events. A run that asks for more turns than the recording holds has diverged from it,
//! and says so.
//!
//! The file is what `runner sessions export` writes (or a session file itself): JSON
//! lines, of which those with `"type": "turn"` are the model's answers, and the first with
//! a `prompt` gives the task, so the recording can be replayed without retyping it.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;

use super::{LlmError, Provider, Request, TextSink, Turn, TurnFuture};

pub struct Replay {
    path: PathBuf,
    turns: Mutex<VecDeque<Turn>>,
    total: usize,
    prompt: Option<String>,
    context_window: Option<u64>,
}

impl Replay {
    pub fn open(path: &Path) -> Result<Self, LlmError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            LlmError::Setup(format!(
                "cannot read the replay file {}: {e}",
                path.display()
            ))
        })?;
        let mut turns = VecDeque::new();
        let mut prompt = None;
        let mut context_window = None;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let bad =
                |m: String| LlmError::Setup(format!("{} line {}: {m}", path.display(), n + 1));
            let v: Value = serde_json::from_str(line).map_err(|e| bad(format!("not JSON: {e}")))?;
            if context_window.is_none() {
                context_window = v.get("context_window").and_then(Value::as_u64);
            }
            if v["type"] == "turn" {
                let turn: Turn = serde_json::from_value(v["turn"].clone())
                    .map_err(|e| bad(format!("not a recorded turn: {e}")))?;
                turns.push_back(turn);
            } else if prompt.is_none()
                && let Some(p) = v.get("prompt").and_then(Value::as_str)
            {
                prompt = Some(p.to_string());
            }
        }
        if turns.is_empty() {
            return Err(LlmError::Setup(format!(
                "{} holds no recorded turns (make one with `runner sessions export ID`)",
                path.display()
            )));
        }
        Ok(Replay {
            path: path.to_path_buf(),
            total: turns.len(),
            turns: Mutex::new(turns),
            prompt,
            context_window,
        })
    }

    /// The task the recording was made with.
    pub fn prompt(&self) -> Option<&str> {
        self.prompt.as_deref()
    }

    /// The context window the recorded run measured against.
    pub fn context_window(&self) -> Option<u64> {
        self.context_window
    }
}

impl Provider for Replay {
    fn name(&self) -> &str {
        "replay"
    }

    fn turn<'a>(&'a self, _request: &'a Request<'a>, text: TextSink<'a>) -> TurnFuture<'a> {
        let next = self
            .turns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front();
        Box::pin(async move {
            let turn = next.ok_or_else(|| {
                LlmError::Setup(format!(
                    "the recording {} has no turn after its {}: this run asked the model more than the recorded one did (a different prompt, worktree or configuration)",
                    self.path.display(),
                    self.total
                ))
            })?;
            if !turn.text.is_empty() {
                text(&turn.text);
            }
            Ok(turn)
        })
    }
}
