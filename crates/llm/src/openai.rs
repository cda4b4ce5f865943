//! OpenAI Chat Completions with streaming, the format OpenAI, Ollama, vLLM, llama.cpp's
//! server, LiteLLM and OpenRouter all speak. Tool-call arguments arrive as fragments keyed
//! by the call's `index`; usage comes in a last chunk when `stream_options.include_usage`
//! asks for it.
//!
//! Every index and count in a chunk is the server's word: calls are kept by index in a
//! map (a huge index allocates nothing), and arithmetic on them saturates.

#![deny(clippy::arithmetic_side_effects)]

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::endpoint::Endpoint;
use super::sse::{Fold, Http, stream_turn};
use super::{
    Finish, LlmError, Message, Provider, Request, TextSink, ToolCall, Turn, TurnFuture, Usage,
};

pub struct OpenAi {
    http: Http,
}

impl OpenAi {
    pub fn new(endpoint: Endpoint) -> Result<Self, LlmError> {
        Ok(OpenAi {
            http: Http::new(endpoint)?,
        })
    }
}

/// The request body: the system prompt as the first message, tools as functions.
pub fn body(request: &Request) -> Value {
    let mut messages = vec![json!({"role": "system", "content": request.system})];
    // A step's `tool` messages must follow its assistant message with nothing between, so
    // the images they return wait until the last of them.
    let mut images_after_tools: Vec<Value> = Vec::new();
    for message in request.messages {
        if !matches!(message, Message::Tool { .. }) {
            messages.append(&mut images_after_tools);
        }
        match message {
            Message::User { text } => messages.push(json!({"role": "user", "content": text})),
            // An assistant message needs content or tool calls; an empty answer has neither.
            Message::Assistant { text, tool_calls }
                if text.trim().is_empty() && tool_calls.is_empty() => {}
            Message::Assistant { text, tool_calls } => {
                let mut m = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
                if !tool_calls.is_empty() {
                    m["tool_calls"] = tool_calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": c.arguments}})
                        })
                        .collect();
                }
                messages.push(m);
            }
            Message::Tool {
                call_id,
                content,
                images,
                ..
            } => {
                messages.push(json!({"role": "tool", "tool_call_id": call_id, "content": content}));
                // A tool message carries only text; images follow as a user message.
                if !images.is_empty() {
                    let mut parts = vec![
                        json!({"type": "text", "text": format!("Images returned by tool call {call_id}:")}),
                    ];
                    parts.extend(images.iter().map(|i| {
                        json!({"type": "image_url", "image_url": {"url": format!("data:{};base64,{}", i.mime, i.data)}})
                    }));
                    images_after_tools.push(json!({"role": "user", "content": parts}));
                }
            }
        }
    }
    messages.append(&mut images_after_tools);
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if let Some(max) = request.max_tokens {
        body["max_tokens"] = json!(max);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
    }
    body
}

/// Folds the chunks of one streamed answer into a turn.
#[derive(Default)]
pub struct Accumulator {
    text: String,
    /// What the model said instead of answering (`delta.refusal`); also in `text`, so it
    /// is shown and kept like any answer.
    refusal: String,
    /// By `index`: id, name, argument fragments joined.
    calls: BTreeMap<u64, (String, String, String)>,
    finish: Option<Finish>,
    usage: Usage,
    done: bool,
}

impl Accumulator {
    /// One `data:` payload. Returns the text delta, if any, for the terminal.
    pub fn push_data(&mut self, data: &str, provider: &str) -> Result<Option<String>, LlmError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(None);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| LlmError::Protocol {
            provider: provider.to_string(),
            message: format!("a chunk is not JSON ({e}): {}", cut(data)),
        })?;
        if let Some(error) = chunk.get("error") {
            // Some servers report a failure mid-stream as a chunk.
            return Err(chunk_error(error, provider));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = usage_of(usage);
        }
        let mut delta_text = None;
        for choice in array(&chunk, "choices") {
            let delta = choice.get("delta").unwrap_or(&Value::Null);
            if let Some(t) = delta.get("content").and_then(Value::as_str)
                && !t.is_empty()
            {
                self.text.push_str(t);
                delta_text.get_or_insert_with(String::new).push_str(t);
            }
            if let Some(r) = delta.get("refusal").and_then(Value::as_str)
                && !r.is_empty()
            {
                self.refusal.push_str(r);
                self.text.push_str(r);
                delta_text.get_or_insert_with(String::new).push_str(r);
            }
            for call in array(delta, "tool_calls") {
                self.push_call(call);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish = Some(match reason {
                    "stop" => Finish::Stop,
                    "tool_calls" | "function_call" => Finish::ToolCalls,
                    "length" => Finish::Length,
                    other => Finish::Other(other.to_string()),
                });
            }
        }
        Ok(delta_text)
    }

    /// One fragment of a tool call: its id and name (first fragment) and a piece of its
    /// arguments' JSON.
    fn push_call(&mut self, call: &Value) {
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|i| !i.is_empty());
        // Servers that leave out `index` send each call whole or start it with a new id:
        // a new id is a new call, anything else continues the last one.
        let index = match call.get("index").and_then(Value::as_u64) {
            Some(i) => i,
            None => match (self.calls.last_key_value(), id) {
                (Some((i, c)), Some(id)) if c.0 == id => *i,
                (Some((i, _)), None) => *i,
                (Some((i, _)), Some(_)) => i.saturating_add(1),
                (None, _) => 0,
            },
        };
        let entry = self.calls.entry(index).or_default();
        if let Some(id) = id {
            entry.0 = id.to_string();
        }
        let function = call.get("function").unwrap_or(&Value::Null);
        if let Some(name) = function.get("name").and_then(Value::as_str) {
            // Some servers repeat the whole name in every fragment.
            if entry.1.is_empty() || !entry.1.ends_with(name) {
                entry.1.push_str(name);
            }
        }
        if let Some(args) = function.get("arguments").and_then(Value::as_str) {
            entry.2.push_str(args);
        }
    }
}

/// The items of `v[key]` when it is an array; none otherwise.
fn array<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

/// A chunk's usage; cached prompt tokens are counted as cache reads, not input.
fn usage_of(usage: &Value) -> Usage {
    let n = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let prompt = n(usage, "prompt_tokens");
    let cached = usage
        .get("prompt_tokens_details")
        .map(|d| n(d, "cached_tokens"))
        .unwrap_or(0);
    Usage {
        input: prompt.saturating_sub(cached),
        output: n(usage, "completion_tokens"),
        cache_read: cached,
        cache_write: 0,
    }
}

/// An error chunk as the stream says it: its code (or type) and message, never a status the
/// server did not send. Trying again helps for rate limits (not an exhausted quota) and
/// server-side failures; a numeric code is judged as the HTTP status it names.
fn chunk_error(error: &Value, provider: &str) -> LlmError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("unknown error")
        .to_string();
    let code = error.get("code");
    let named = code
        .and_then(Value::as_str)
        .or_else(|| error.get("type").and_then(Value::as_str));
    let (kind, retryable) = match (code.and_then(Value::as_u64), named) {
        (Some(n), _) => (
            format!("code {n}"),
            matches!(n, 408 | 409 | 429) || n >= 500,
        ),
        (None, Some(kind)) => (
            kind.to_string(),
            !matches!(
                kind,
                "insufficient_quota"
                    | "invalid_api_key"
                    | "model_not_found"
                    | "context_length_exceeded"
                    | "invalid_request_error"
            ),
        ),
        (None, None) => ("error".to_string(), true),
    };
    LlmError::Stream {
        provider: provider.to_string(),
        kind,
        message,
        retryable,
    }
}

impl Accumulator {
    /// The turn the chunks pushed so far make, or why there is none: what [`Fold::finish`]
    /// gives the stream, public for fuzzing the decoder from outside the crate.
    pub fn into_turn(self, provider: &str) -> Result<Turn, LlmError> {
        Fold::finish(self, provider)
    }
}

impl Fold for Accumulator {
    fn push(
        &mut self,
        _event: &str,
        data: &str,
        provider: &str,
    ) -> Result<Option<String>, LlmError> {
        self.push_data(data, provider)
    }

    fn done(&self) -> bool {
        self.done
    }

    /// The turn, once the stream has ended ([`Accumulator::into_turn`]). A stream that stops before a finish reason
    /// (or `[DONE]`) was cut, and the turn cannot be trusted.
    fn finish(self, provider: &str) -> Result<Turn, LlmError> {
        let Some(mut finish) = self
            .finish
            .or(if self.done { Some(Finish::Stop) } else { None })
        else {
            return Err(LlmError::Transport {
                provider: provider.to_string(),
                message: "the stream ended before the answer was complete".into(),
            });
        };
        if !self.refusal.is_empty() {
            finish = Finish::Refusal;
        }
        let tool_calls = self
            .calls
            .into_iter()
            .map(|(index, (id, name, arguments))| ToolCall {
                id: if id.is_empty() {
                    format!("call_{index}")
                } else {
                    id
                },
                name,
                arguments,
            })
            .collect();
        Ok(Turn {
            text: self.text,
            tool_calls,
            finish,
            usage: self.usage,
        })
    }
}

fn cut(s: &str) -> String {
    s.chars().take(200).collect()
}

impl Provider for OpenAi {
    fn name(&self) -> &str {
        &self.http.endpoint.name
    }

    fn turn<'a>(&'a self, request: &'a Request<'a>, text: TextSink<'a>) -> TurnFuture<'a> {
        Box::pin(async move {
            let headers = self.http.headers("authorization", "Bearer ")?;
            let url = self.http.url("/chat/completions");
            let mut body = body(request);
            // OpenAI's own API has renamed the field (its reasoning models refuse the old
            // name); the servers that copy its format mostly know only the old one.
            if self.http.endpoint.name == "openai"
                && let Some(max) = body.as_object_mut().and_then(|b| b.remove("max_tokens"))
            {
                body["max_completion_tokens"] = max;
            }
            stream_turn::<Accumulator>(&self.http, &url, headers, &body, text)
                .await
                .map_err(|e| self.http.endpoint.explain(e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Image, ToolCall};

    #[test]
    fn images_wait_until_the_steps_tool_messages_are_done() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "read".into(),
            arguments: "{}".into(),
        };
        let result = |id: &str, images: Vec<Image>| Message::Tool {
            call_id: id.into(),
            name: "read".into(),
            content: "ok".into(),
            is_error: false,
            images,
        };
        let png = Image {
            mime: "image/png".into(),
            data: "AAAA".into(),
        };
        let messages = vec![
            Message::User {
                text: "look".into(),
            },
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![call("a"), call("b")],
            },
            result("a", vec![png]),
            result("b", vec![]),
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![],
            },
        ];
        let req = Request {
            model: "m",
            system: "sys",
            messages: &messages,
            tools: &[],
            max_tokens: Some(50),
        };
        let b = body(&req);
        let roles: Vec<&str> = b["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        // The empty answer at the end is dropped: it has neither content nor calls.
        assert_eq!(
            roles,
            ["system", "user", "assistant", "tool", "tool", "user"]
        );
        assert_eq!(b["max_tokens"], 50);
    }

    #[test]
    fn calls_without_an_index_are_told_apart_by_their_ids() {
        let mut acc = Accumulator::default();
        for c in [
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"read","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"glob","arguments":"{\"pat"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"glob","arguments":"tern\":\"*\"}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ] {
            acc.push_data(c, "t").unwrap();
        }
        let turn = acc.finish("t").unwrap();
        let names: Vec<&str> = turn.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["read", "glob"]);
        assert_eq!(turn.tool_calls[1].arguments, r#"{"pattern":"*"}"#);
    }

    #[test]
    fn an_error_chunk_with_a_string_code_keeps_its_meaning() {
        let mut acc = Accumulator::default();
        let e = acc
            .push_data(
                r#"{"error":{"message":"too long","code":"context_length_exceeded"}}"#,
                "t",
            )
            .unwrap_err();
        assert!(!e.is_retryable(), "{e}");
        assert!(e.to_string().contains("context_length_exceeded"));
    }

    #[test]
    fn fragments_join_per_index_and_usage_counts_cached_tokens() {
        let mut acc = Accumulator::default();
        let chunks = [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Look"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"read","arguments":"{\"fi"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"glob","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"lePath\":\"x\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":60}}}"#,
            "[DONE]",
        ];
        for c in chunks {
            acc.push_data(c, "t").unwrap();
        }
        let turn = acc.finish("t").unwrap();
        assert_eq!(turn.text, "Look");
        assert_eq!(turn.finish, Finish::ToolCalls);
        assert_eq!(turn.tool_calls.len(), 2);
        assert_eq!(turn.tool_calls[0].arguments, r#"{"filePath":"x"}"#);
        assert_eq!(turn.tool_calls[1].name, "glob");
        assert_eq!(
            turn.usage,
            Usage {
                input: 40,
                output: 7,
                cache_read: 60,
                cache_write: 0
            }
        );
    }

    #[test]
    fn a_stream_without_an_end_is_a_cut_stream() {
        let mut acc = Accumulator::default();
        acc.push_data(
            r#"{"choices":[{"index":0,"delta":{"content":"half"}}]}"#,
            "t",
        )
        .unwrap();
        let err = acc.finish("t").unwrap_err();
        assert!(err.is_retryable(), "{err}");
    }
}
