//! Model providers behind one trait.
//!
//! A provider turns a [`Request`] (system prompt, conversation, tool specs) into one
//! assistant [`Turn`]: its text, its tool calls, why it stopped, and what it cost. Text is
//! handed to a callback as it streams so a terminal can show it live; the turn itself is
//! returned whole, which is what the loop needs and what makes a cut stream simple to retry
//! (the whole turn again, see [`retry`]). The loop never sees a wire format.

pub mod anthropic;
pub mod endpoint;
pub mod event_stream;
pub mod models;
pub mod openai;
pub mod replay;
pub mod retry;
mod sse;
#[cfg(test)]
mod wire_samples;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One message of the conversation, in the loop's terms. Providers translate to their
/// wire format (Anthropic merges consecutive tool results into one user message; OpenAI
/// sends one `tool` message each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    User {
        text: String,
    },
    Assistant {
        #[serde(default, skip_serializing_if = "String::is_empty")]
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        call_id: String,
        /// The tool's name as the model called it (Anthropic does not need it, some
        /// OpenAI-compatible servers do).
        name: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        /// Images the tool produced (read of a PNG, webfetch of an image).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<Image>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments exactly as the model wrote them: they may not be JSON at all, and
    /// that is for the registry to explain to the model, not for the provider to hide.
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Image {
    pub mime: String,
    /// Base64, without the `data:` prefix.
    pub data: String,
}

/// A tool as the model is told about it.
#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

pub struct Request<'a> {
    pub model: &'a str,
    pub system: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
    /// Output tokens to ask for; `None` leaves it to the provider where it may.
    pub max_tokens: Option<u32>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens billed at the full price (cache reads and writes excluded).
    pub input: u64,
    pub output: u64,
    #[serde(default)]
    pub cache_read: u64,
    #[serde(default)]
    pub cache_write: u64,
}

/// The counts come from the provider's answer, so they are added saturating: a count near
/// `u64::MAX` from a broken or hostile server must not panic (debug) or wrap (release).
#[deny(clippy::arithmetic_side_effects)]
impl Usage {
    /// Everything the model read this turn: what fills the context window.
    pub fn context(&self) -> u64 {
        self.input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
            .saturating_add(self.output)
    }

    pub fn add(&mut self, other: &Usage) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// The model is done with this turn (no tool calls, or it says so).
    Stop,
    ToolCalls,
    /// The output hit `max_tokens`.
    Length,
    /// The model declined to answer (Anthropic's `refusal` stop reason, OpenAI's
    /// `delta.refusal`): its words, if any, are the turn's text.
    Refusal,
    Other(String),
}

/// One assistant turn, complete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish: Finish,
    pub usage: Usage,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    /// The provider answered with an error status. `retry_after` is its `Retry-After`.
    #[error("{provider} answered {status}: {message}")]
    Status {
        provider: String,
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// The answer began (status 200) and then the stream carried an error event: the
    /// provider's own kind and message, never a status it did not send.
    #[error("{provider} reported an error in its answer: {message} ({kind})")]
    Stream {
        provider: String,
        kind: String,
        message: String,
        /// The kind is one that passes (overload, rate limit, a server error).
        retryable: bool,
    },
    /// The connection failed or the stream ended before the turn did.
    #[error("{provider}: {message}")]
    Transport { provider: String, message: String },
    /// A server on this machine or its private network refused the connection: nothing
    /// listens there, which waiting will not change, so it is said at once, not retried.
    /// `url` is the request's (credentials and query removed), `server` its scheme, host
    /// and port.
    #[error(
        "{provider}: the connection to {url} was refused: is the server at {server} running? \
         (a refusal from a local or private address is not retried; start the server, or fix base_url)"
    )]
    Refused {
        provider: String,
        url: String,
        server: String,
    },
    /// The provider sent something that is not its documented format.
    #[error("{provider} sent a malformed stream: {message}")]
    Protocol { provider: String, message: String },
    /// Not the provider's fault: a missing key, a replay file that ran out.
    #[error("{0}")]
    Setup(String),
}

impl LlmError {
    /// Worth trying the same turn again: rate limits, overload, server errors, a cut
    /// stream. Anything about the request itself (bad key, unknown model, context too
    /// long) will fail the same way again.
    pub fn is_retryable(&self) -> bool {
        match self {
            // An exhausted quota is a 429 too, but waiting does not refill it.
            LlmError::Status {
                status: 429,
                message,
                ..
            } if message.contains("insufficient_quota") => false,
            LlmError::Status { status, .. } => {
                matches!(status, 408 | 409 | 429 | 529) || *status >= 500
            }
            LlmError::Stream { retryable, .. } => *retryable,
            LlmError::Transport { .. } => true,
            LlmError::Refused { .. } | LlmError::Protocol { .. } | LlmError::Setup(_) => false,
        }
    }
}

/// Where streamed text goes while a turn is in flight.
pub type TextSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

pub type TurnFuture<'a> = Pin<Box<dyn Future<Output = Result<Turn, LlmError>> + Send + 'a>>;

pub trait Provider: Send + Sync {
    /// The name used in `provider/model` and in messages.
    fn name(&self) -> &str;

    fn turn<'a>(&'a self, request: &'a Request<'a>, text: TextSink<'a>) -> TurnFuture<'a>;
}
