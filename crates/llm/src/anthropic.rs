//! Anthropic Messages with streaming: typed events (`message_start`, `content_block_*`,
//! `message_delta`, `message_stop`, `ping`, `error`), tool input as `input_json_delta`
//! fragments, the system prompt as its own field, and prompt caching: `cache_control` on
//! the system prompt and on the last two turns, so each step re-reads the conversation so
//! far from the cache instead of paying for it again.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Value, json};

use super::endpoint::Endpoint;
use super::sse::{Fold, Http, stream_turn};
use super::{
    Finish, Image, LlmError, Message, Provider, Request, TextSink, ToolCall, ToolSpec, Turn,
    TurnFuture, Usage,
};

pub const API_VERSION: &str = "2023-06-01";

pub struct Anthropic {
    http: Http,
}

impl Anthropic {
    pub fn new(endpoint: Endpoint) -> Result<Self, LlmError> {
        Ok(Anthropic {
            http: Http::new(endpoint)?,
        })
    }
}

/// The request body's bytes. Consecutive tool results and user text become one user
/// message, as the API wants the roles to alternate.
///
/// It is serialized straight from the request, borrowing every string and schema: a step
/// copies nothing into a `serde_json::Value` first (the system prompt and the tools, the
/// same each step, were most of a step's own time when it did).
pub fn body(request: &Request) -> Vec<u8> {
    let body = Body {
        request,
        messages: messages(request),
    };
    // Strings, numbers and schemas that are already JSON: serializing cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

struct Body<'a> {
    request: &'a Request<'a>,
    messages: Vec<Wire<'a>>,
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.request;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("model", r.model)?;
        // The API requires a number; 16k fits every current model's output limit.
        map.serialize_entry("max_tokens", &r.max_tokens.unwrap_or(16_384))?;
        let system = ContentBlock::Text {
            text: r.system,
            cache_control: Some(EPHEMERAL),
        };
        map.serialize_entry("system", &[system])?;
        map.serialize_entry("messages", &self.messages)?;
        map.serialize_entry("stream", &true)?;
        if !r.tools.is_empty() {
            map.serialize_entry("tools", &Tools(r.tools))?;
        }
        map.end()
    }
}

#[derive(Clone, Copy, Serialize)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

/// One message on the wire: a role and its blocks.
#[derive(Serialize)]
struct Wire<'a> {
    role: &'static str,
    content: Vec<ContentBlock<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentBlock<'a> {
    Text {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: &'a str,
        #[serde(serialize_with = "result_parts")]
        content: (&'a str, &'a [Image]),
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
}

impl ContentBlock<'_> {
    fn cache_control(&mut self) -> &mut Option<CacheControl> {
        match self {
            ContentBlock::Text { cache_control, .. }
            | ContentBlock::ToolUse { cache_control, .. }
            | ContentBlock::ToolResult { cache_control, .. } => cache_control,
        }
    }
}

/// The conversation in wire order, each block borrowing its strings.
fn messages<'a>(request: &'a Request) -> Vec<Wire<'a>> {
    let mut messages: Vec<Wire<'a>> = Vec::new();
    let mut push = |role: &'static str, block: ContentBlock<'a>| match messages.last_mut() {
        Some(last) if last.role == role => last.content.push(block),
        _ => messages.push(Wire {
            role,
            content: vec![block],
        }),
    };
    for message in request.messages {
        match message {
            // The API refuses text blocks that are empty or only whitespace.
            Message::User { text } => {
                let text = if text.trim().is_empty() {
                    "(empty message)"
                } else {
                    text
                };
                push("user", text_block(text));
            }
            Message::Assistant { text, tool_calls } => {
                if !text.trim().is_empty() {
                    push("assistant", text_block(text));
                }
                for c in tool_calls {
                    push(
                        "assistant",
                        ContentBlock::ToolUse {
                            id: &c.id,
                            name: &c.name,
                            input: input(&c.arguments),
                            cache_control: None,
                        },
                    );
                }
            }
            Message::Tool {
                call_id,
                content,
                is_error,
                images,
                ..
            } => push(
                "user",
                ContentBlock::ToolResult {
                    tool_use_id: call_id,
                    content: (content, images),
                    is_error: *is_error,
                    cache_control: None,
                },
            ),
        }
    }
    // Cache breakpoints on the last block of the last two messages (the API allows four;
    // the system prompt takes a third).
    for m in messages.iter_mut().rev().take(2) {
        if let Some(last) = m.content.last_mut() {
            *last.cache_control() = Some(EPHEMERAL);
        }
    }
    messages
}

fn text_block(text: &str) -> ContentBlock<'_> {
    ContentBlock::Text {
        text,
        cache_control: None,
    }
}

/// A call's `input`, which must be an object: arguments the model garbled are sent as a
/// string under a key so the conversation stays valid.
fn input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ if arguments.trim().is_empty() => Value::Object(serde_json::Map::new()),
        _ => json!({"unparsed_arguments": arguments}),
    }
}

/// A tool result's content: its text (never empty: the API refuses that), then its images.
fn result_parts<S: Serializer>(
    (content, images): &(&str, &[Image]),
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Part<'a> {
        Text { text: &'a str },
        Image { source: Source<'a> },
    }
    #[derive(Serialize)]
    struct Source<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        media_type: &'a str,
        data: &'a str,
    }
    let text = if content.trim().is_empty() {
        "(no output)"
    } else {
        content
    };
    let images = images.iter().map(|i| Part::Image {
        source: Source {
            kind: "base64",
            media_type: &i.mime,
            data: &i.data,
        },
    });
    s.collect_seq(std::iter::once(Part::Text { text }).chain(images))
}

/// The tools with their schemas as `input_schema`, serialized where they are.
struct Tools<'a>(&'a [ToolSpec]);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Tool<'a> {
            name: &'a str,
            description: &'a str,
            input_schema: &'a Value,
        }
        s.collect_seq(self.0.iter().map(|t| Tool {
            name: &t.name,
            description: &t.description,
            input_schema: &t.parameters,
        }))
    }
}

/// Folds the events of one streamed message into a turn.
#[derive(Default)]
pub struct Accumulator {
    /// Content blocks by index: text, or a tool call with its input fragments.
    blocks: BTreeMap<u64, Block>,
    finish: Option<Finish>,
    usage: Usage,
    stopped: bool,
}

enum Block {
    Text(String),
    Tool {
        id: String,
        name: String,
        json: String,
    },
    /// Thinking and anything newer: kept out of the turn.
    Other,
}

/// A `content_block_delta` for a block index no `content_block_start` opened.
#[derive(Debug, thiserror::Error)]
#[error("a delta for block {0}, which never started")]
struct UnstartedBlock(u64);

impl Accumulator {
    /// `message_start`: the usage so far (input counted, output only begun).
    fn start_message(&mut self, usage: &Value) {
        self.usage.input = count(usage, "input_tokens");
        self.usage.cache_read = count(usage, "cache_read_input_tokens");
        self.usage.cache_write = count(usage, "cache_creation_input_tokens");
        self.usage.output = count(usage, "output_tokens");
    }

    /// `content_block_start`: a text or tool-use block opens at `index`; other kinds
    /// (thinking, server tools) are kept as placeholders so their deltas are not errors.
    fn start_block(&mut self, index: u64, b: &Value) {
        let block = match b["type"].as_str() {
            Some("text") => Block::Text(b["text"].as_str().unwrap_or_default().to_string()),
            Some("tool_use") => Block::Tool {
                id: b["id"].as_str().unwrap_or_default().to_string(),
                name: b["name"].as_str().unwrap_or_default().to_string(),
                json: String::new(),
            },
            _ => Block::Other,
        };
        self.blocks.insert(index, block);
    }

    /// `content_block_delta`: text to show (returned) or a piece of a tool call's JSON.
    /// A delta for a block the stream never started is a broken stream.
    fn block_delta(&mut self, index: u64, d: &Value) -> Result<Option<String>, UnstartedBlock> {
        match (self.blocks.get_mut(&index), d["type"].as_str()) {
            (Some(Block::Text(t)), Some("text_delta")) => {
                let piece = d["text"].as_str().unwrap_or_default();
                t.push_str(piece);
                if !piece.is_empty() {
                    return Ok(Some(piece.to_string()));
                }
            }
            (Some(Block::Tool { json, .. }), Some("input_json_delta")) => {
                json.push_str(d["partial_json"].as_str().unwrap_or_default());
            }
            (None, _) => return Err(UnstartedBlock(index)),
            _ => {}
        }
        Ok(None)
    }

    /// `message_delta`: why the message stopped and the final usage.
    fn message_delta(&mut self, delta: &Value, u: &Value) {
        if let Some(reason) = delta["stop_reason"].as_str() {
            self.finish = Some(match reason {
                "end_turn" | "stop_sequence" => Finish::Stop,
                "tool_use" => Finish::ToolCalls,
                "max_tokens" => Finish::Length,
                "refusal" => Finish::Refusal,
                other => Finish::Other(other.to_string()),
            });
        }
        if u.get("output_tokens").is_some() {
            self.usage.output = count(u, "output_tokens");
        }
        // Newer servers repeat the input counts here; keep the larger.
        let usage = &mut self.usage;
        usage.input = usage.input.max(count(u, "input_tokens"));
        usage.cache_read = usage.cache_read.max(count(u, "cache_read_input_tokens"));
        usage.cache_write = usage
            .cache_write
            .max(count(u, "cache_creation_input_tokens"));
    }
}

impl Accumulator {
    /// One event (its `event:` type and its data): [`Fold::push`], public so a fuzz harness
    /// can drive the decoder. Returns the text delta, if any.
    pub fn push_event(
        &mut self,
        event: &str,
        data: &str,
        provider: &str,
    ) -> Result<Option<String>, LlmError> {
        Fold::push(self, event, data, provider)
    }

    /// The turn the events pushed so far make, or why there is none ([`Fold::finish`]).
    pub fn into_turn(self, provider: &str) -> Result<Turn, LlmError> {
        Fold::finish(self, provider)
    }
}

impl Fold for Accumulator {
    fn done(&self) -> bool {
        self.stopped
    }

    /// One event. Returns the text delta, if any.
    fn push(
        &mut self,
        event: &str,
        data: &str,
        provider: &str,
    ) -> Result<Option<String>, LlmError> {
        let protocol = |message: String| LlmError::Protocol {
            provider: provider.to_string(),
            message,
        };
        if event == "ping" {
            return Ok(None);
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| protocol(format!("event {event:?} is not JSON ({e})")))?;
        // Every payload names its own type; a gateway that drops the `event:` lines still
        // sends that.
        let event = match event {
            "" | "message" => v["type"].as_str().unwrap_or(event),
            named => named,
        };
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match event {
            "message_start" => self.start_message(&v["message"]["usage"]),
            "content_block_start" => self.start_block(index, &v["content_block"]),
            "content_block_delta" => {
                return self
                    .block_delta(index, &v["delta"])
                    .map_err(|e| protocol(e.to_string()));
            }
            "message_delta" => self.message_delta(&v["delta"], &v["usage"]),
            "message_stop" => self.stopped = true,
            "error" => return Err(stream_error(&v["error"], provider)),
            // `content_block_stop` and event types added later carry nothing a turn needs.
            _ => {}
        }
        Ok(None)
    }

    fn finish(self, provider: &str) -> Result<Turn, LlmError> {
        let (true, Some(finish)) = (self.stopped, self.finish) else {
            return Err(LlmError::Transport {
                provider: provider.to_string(),
                message: "the stream ended before the message was complete".into(),
            });
        };
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for block in self.blocks.into_values() {
            match block {
                Block::Text(t) => text.push_str(&t),
                Block::Tool { id, name, json } => tool_calls.push(ToolCall {
                    id,
                    name,
                    arguments: if json.trim().is_empty() {
                        "{}".into()
                    } else {
                        json
                    },
                }),
                Block::Other => {}
            }
        }
        Ok(Turn {
            text,
            tool_calls,
            finish,
            usage: self.usage,
        })
    }
}

impl Provider for Anthropic {
    fn name(&self) -> &str {
        &self.http.endpoint.name
    }

    fn turn<'a>(&'a self, request: &'a Request<'a>, text: TextSink<'a>) -> TurnFuture<'a> {
        Box::pin(async move {
            let mut headers = self.http.headers("x-api-key", "")?;
            headers.insert(
                reqwest::header::HeaderName::from_static("anthropic-version"),
                reqwest::header::HeaderValue::from_static(API_VERSION),
            );
            let url = self.http.url("/v1/messages");
            stream_turn::<Accumulator>(&self.http, &url, headers, body(request), text)
                .await
                .map_err(|e| self.http.endpoint.explain(e))
        })
    }
}

/// A token count from a usage object; absent counts are 0.
fn count(usage: &Value, key: &str) -> u64 {
    usage.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// An `error` event mid-stream, as the event says it: its type and message. Whether trying
/// again helps follows Anthropic's documented types (overloaded, rate limited, its own
/// error, a timeout); a request it rejects fails the same way again.
fn stream_error(e: &Value, provider: &str) -> LlmError {
    let kind = e["type"].as_str().unwrap_or("error");
    LlmError::Stream {
        provider: provider.to_string(),
        kind: kind.to_string(),
        message: e["message"].as_str().unwrap_or("unknown error").to_string(),
        retryable: matches!(
            kind,
            "overloaded_error" | "rate_limit_error" | "api_error" | "timeout_error"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::Fold;

    /// The body as it was built before it was serialized from borrowed parts (into a
    /// `serde_json::Value`, then bytes): the oracle the bytes on the wire are held to.
    fn ephemeral() -> Value {
        json!({"type": "ephemeral"})
    }
    fn value_body(request: &Request) -> Value {
        let mut messages: Vec<Value> = Vec::new();
        let mut push = |role: &str, block: Value| {
            if let Some(last) = messages.last_mut()
                && last["role"] == role
                && let Some(content) = last["content"].as_array_mut()
            {
                content.push(block);
                return;
            }
            messages.push(json!({"role": role, "content": [block]}));
        };
        for message in request.messages {
            match message {
                // The API refuses text blocks that are empty or only whitespace.
                Message::User { text } if text.trim().is_empty() => {
                    push("user", json!({"type": "text", "text": "(empty message)"}))
                }
                Message::User { text } => push("user", json!({"type": "text", "text": text})),
                Message::Assistant { text, tool_calls } => {
                    if !text.trim().is_empty() {
                        push("assistant", json!({"type": "text", "text": text}));
                    }
                    for c in tool_calls {
                        // `input` must be an object; arguments the model garbled are sent as
                        // a string under a key so the conversation stays valid.
                        let input = match serde_json::from_str::<Value>(&c.arguments) {
                            Ok(v @ Value::Object(_)) => v,
                            _ if c.arguments.trim().is_empty() => json!({}),
                            _ => json!({"unparsed_arguments": c.arguments}),
                        };
                        push(
                            "assistant",
                            json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                        );
                    }
                }
                Message::Tool {
                    call_id,
                    content,
                    is_error,
                    images,
                    ..
                } => {
                    let mut parts = vec![
                        json!({"type": "text", "text": if content.trim().is_empty() { "(no output)" } else { content.as_str() }}),
                    ];
                    parts.extend(images.iter().map(|i| {
                        json!({"type": "image", "source": {"type": "base64", "media_type": i.mime, "data": i.data}})
                    }));
                    let mut block =
                        json!({"type": "tool_result", "tool_use_id": call_id, "content": parts});
                    if *is_error {
                        block["is_error"] = json!(true);
                    }
                    push("user", block);
                }
            }
        }
        // Cache breakpoints on the last block of the last two messages (the API allows four;
        // the system prompt takes a third).
        for m in messages.iter_mut().rev().take(2) {
            if let Some(last) = m["content"].as_array_mut().and_then(|c| c.last_mut()) {
                last["cache_control"] = ephemeral();
            }
        }
        let mut body = json!({
            "model": request.model,
            // The API requires a number; 16k fits every current model's output limit.
            "max_tokens": request.max_tokens.unwrap_or(16_384),
            "system": [{"type": "text", "text": request.system, "cache_control": ephemeral()}],
            "messages": messages,
            "stream": true,
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
        }
        body
    }

    #[test]
    fn the_bytes_sent_are_the_ones_the_value_builder_sent() {
        let messages = crate::wire_samples::conversation();
        let tools = crate::wire_samples::tools();
        for max_tokens in [None, Some(8192)] {
            for tools in [&tools[..], &[]] {
                // Every prefix: each kind of message last, so the cache breakpoints move.
                for n in 0..=messages.len() {
                    let req = Request {
                        model: "claude-x",
                        system: "You are \"runner\".\n\tBe brief.",
                        messages: &messages[..n],
                        tools,
                        max_tokens,
                    };
                    let sent = String::from_utf8(body(&req)).unwrap();
                    let before = serde_json::to_string(&value_body(&req)).unwrap();
                    assert_eq!(sent, before, "{max_tokens:?} {n}");
                }
            }
        }
    }

    #[test]
    fn tool_results_merge_into_one_user_turn_and_the_tail_is_cached() {
        let messages = vec![
            Message::User { text: "go".into() },
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![
                    ToolCall {
                        id: "a".into(),
                        name: "read".into(),
                        arguments: r#"{"filePath":"x"}"#.into(),
                    },
                    ToolCall {
                        id: "b".into(),
                        name: "read".into(),
                        arguments: "{oops".into(),
                    },
                ],
            },
            Message::Tool {
                call_id: "a".into(),
                name: "read".into(),
                content: "1".into(),
                is_error: false,
                images: vec![],
            },
            Message::Tool {
                call_id: "b".into(),
                name: "read".into(),
                content: "bad".into(),
                is_error: true,
                images: vec![],
            },
        ];
        let tools = vec![ToolSpec {
            name: "read".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        }];
        let req = Request {
            model: "m",
            system: "sys",
            messages: &messages,
            tools: &tools,
            max_tokens: Some(100),
        };
        let b: Value = serde_json::from_slice(&body(&req)).unwrap();
        let msgs = b["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(
            msgs[1]["content"][1]["input"],
            json!({"unparsed_arguments": "{oops"})
        );
        assert_eq!(msgs[2]["content"].as_array().unwrap().len(), 2);
        assert_eq!(msgs[2]["content"][1]["is_error"], json!(true));
        assert_eq!(msgs[2]["content"][1]["cache_control"], ephemeral());
        assert_eq!(msgs[1]["content"][1]["cache_control"], ephemeral());
        assert!(msgs[0]["content"][0].get("cache_control").is_none());
        assert_eq!(b["system"][0]["cache_control"], ephemeral());
        assert_eq!(b["tools"][0]["input_schema"], json!({"type": "object"}));
    }

    #[test]
    fn a_stream_without_event_lines_is_read_by_its_payload_types() {
        let mut acc = Accumulator::default();
        for d in [
            r#"{"type":"message_start","message":{"usage":{"input_tokens":3}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#,
            r#"{"type":"message_stop"}"#,
        ] {
            acc.push("", d, "t").unwrap();
        }
        assert!(acc.done());
        let turn = acc.finish("t").unwrap();
        assert_eq!(turn.text, "ok");
        assert_eq!(turn.usage.input, 3);
        let mut acc = Accumulator::default();
        let e = acc
            .push(
                "error",
                r#"{"type":"error","error":{"type":"not_found_error","message":"model: nope"}}"#,
                "t",
            )
            .unwrap_err();
        assert!(!e.is_retryable(), "{e}");
    }

    #[test]
    fn blank_text_never_reaches_the_api() {
        let messages = vec![
            Message::User { text: "  ".into() },
            Message::Assistant {
                text: "\n\n".into(),
                tool_calls: vec![],
            },
            Message::User { text: "go".into() },
        ];
        let req = Request {
            model: "m",
            system: "sys",
            messages: &messages,
            tools: &[],
            max_tokens: None,
        };
        let b: Value = serde_json::from_slice(&body(&req)).unwrap();
        for m in b["messages"].as_array().unwrap() {
            for block in m["content"].as_array().unwrap() {
                if let Some(t) = block["text"].as_str() {
                    assert!(!t.trim().is_empty(), "{b}");
                }
            }
        }
        assert_eq!(b["max_tokens"], 16_384);
    }

    #[test]
    fn events_fold_into_a_turn() {
        let mut acc = Accumulator::default();
        let events = [
            (
                "message_start",
                r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":90,"cache_creation_input_tokens":5,"output_tokens":1}}}"#,
            ),
            (
                "content_block_start",
                r#"{"index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            ("ping", r#"{"type":"ping"}"#),
            (
                "content_block_delta",
                r#"{"index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
            ),
            ("content_block_stop", r#"{"index":0}"#),
            (
                "content_block_start",
                r#"{"index":1,"content_block":{"type":"tool_use","id":"t1","name":"bash","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"index":1,"delta":{"type":"input_json_delta","partial_json":"{\"comm"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"index":1,"delta":{"type":"input_json_delta","partial_json":"and\":\"true\"}"}}"#,
            ),
            ("content_block_stop", r#"{"index":1}"#),
            (
                "message_delta",
                r#"{"delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":12}}"#,
            ),
            ("message_stop", r#"{}"#),
        ];
        for (e, d) in events {
            acc.push(e, d, "t").unwrap();
        }
        let turn = acc.finish("t").unwrap();
        assert_eq!(turn.text, "Hi");
        assert_eq!(turn.tool_calls[0].arguments, r#"{"command":"true"}"#);
        assert_eq!(turn.finish, Finish::ToolCalls);
        assert_eq!(
            turn.usage,
            Usage {
                input: 10,
                output: 12,
                cache_read: 90,
                cache_write: 5
            }
        );
    }

    #[test]
    fn an_overloaded_event_is_retryable_and_a_missing_stop_is_a_cut() {
        let mut acc = Accumulator::default();
        let e = acc
            .push(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                "t",
            )
            .unwrap_err();
        assert!(e.is_retryable());
        let mut acc = Accumulator::default();
        acc.push("message_start", r#"{"message":{"usage":{}}}"#, "t")
            .unwrap();
        assert!(matches!(acc.finish("t"), Err(LlmError::Transport { .. })));
    }
}
