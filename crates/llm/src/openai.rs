//! OpenAI Chat Completions with streaming, the format OpenAI, Ollama, vLLM, llama.cpp's
//! server, LiteLLM and OpenRouter all speak. Tool-call arguments arrive as fragments keyed
//! by the call's `index`; usage comes in a last chunk when `stream_options.include_usage`
//! asks for it.
//!
//! Every index and count in a chunk is the server's word: calls are kept by index in a
//! map (a huge index allocates nothing), and arithmetic on them saturates.

#![deny(clippy::arithmetic_side_effects)]

use std::collections::BTreeMap;

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;

use super::endpoint::Endpoint;
use super::sse::{Fold, Http, stream_turn};
use super::{
    Finish, Image, LlmError, Message, Provider, Request, TextSink, ToolCall, ToolSpec, Turn,
    TurnFuture, Usage,
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

/// The request body's bytes: the system prompt as the first message, tools as functions.
///
/// It is serialized straight from the request, borrowing every string and schema: a step
/// copies nothing into a `serde_json::Value` first, which for the unchanging part (the
/// system prompt and every tool's description and schema) was most of a step's own time.
/// `provider` is the endpoint's name: OpenAI's own API has renamed the output limit to
/// `max_completion_tokens` (its reasoning models refuse the old name), while the servers
/// that copy its format mostly know only `max_tokens`.
pub fn body(request: &Request, provider: &str) -> Vec<u8> {
    let body = Body {
        request,
        messages: messages(request),
        renamed_limit: provider == "openai",
    };
    // Strings, numbers and schemas that are already JSON: serializing cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

struct Body<'a> {
    request: &'a Request<'a>,
    messages: Vec<Wire<'a>>,
    renamed_limit: bool,
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.request;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("model", r.model)?;
        map.serialize_entry("messages", &self.messages)?;
        map.serialize_entry("stream", &true)?;
        map.serialize_entry(
            "stream_options",
            &StreamOptions {
                include_usage: true,
            },
        )?;
        if let (Some(max), false) = (r.max_tokens, self.renamed_limit) {
            map.serialize_entry("max_tokens", &max)?;
        }
        if !r.tools.is_empty() {
            map.serialize_entry("tools", &Tools(r.tools))?;
        }
        // After the tools: where the rename always put it.
        if let (Some(max), true) = (r.max_tokens, self.renamed_limit) {
            map.serialize_entry("max_completion_tokens", &max)?;
        }
        map.end()
    }
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// One message on the wire, every string borrowed from the conversation.
#[derive(Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum Wire<'a> {
    System {
        content: &'a str,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(
            skip_serializing_if = "<[ToolCall]>::is_empty",
            serialize_with = "calls"
        )]
        tool_calls: &'a [ToolCall],
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

/// A user message's content: text, or the images a tool call returned after a line that
/// says which call.
enum UserContent<'a> {
    Text(&'a str),
    Images {
        call_id: &'a str,
        images: &'a [Image],
    },
}

/// The conversation in wire order. A step's `tool` messages must follow its assistant
/// message with nothing between, so the images they return wait until the last of them.
fn messages<'a>(request: &'a Request) -> Vec<Wire<'a>> {
    let mut messages = Vec::with_capacity(request.messages.len().saturating_add(1));
    messages.push(Wire::System {
        content: request.system,
    });
    let mut images_after_tools: Vec<Wire<'a>> = Vec::new();
    for message in request.messages {
        if !matches!(message, Message::Tool { .. }) {
            messages.append(&mut images_after_tools);
        }
        match message {
            Message::User { text } => messages.push(Wire::User {
                content: UserContent::Text(text),
            }),
            // An assistant message needs content or tool calls; an empty answer has neither.
            Message::Assistant { text, tool_calls }
                if text.trim().is_empty() && tool_calls.is_empty() => {}
            Message::Assistant { text, tool_calls } => messages.push(Wire::Assistant {
                content: (!text.is_empty()).then_some(text.as_str()),
                tool_calls,
            }),
            Message::Tool {
                call_id,
                content,
                images,
                ..
            } => {
                messages.push(Wire::Tool {
                    tool_call_id: call_id,
                    content,
                });
                // A tool message carries only text; images follow as a user message.
                if !images.is_empty() {
                    images_after_tools.push(Wire::User {
                        content: UserContent::Images { call_id, images },
                    });
                }
            }
        }
    }
    messages.append(&mut images_after_tools);
    messages
}

/// A tool call as the API wants it back: `{"id", "type": "function", "function": {...}}`.
fn calls<S: Serializer>(calls: &&[ToolCall], s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Call<'a> {
        id: &'a str,
        #[serde(rename = "type")]
        kind: &'static str,
        function: Function<'a>,
    }
    #[derive(Serialize)]
    struct Function<'a> {
        name: &'a str,
        arguments: &'a str,
    }
    s.collect_seq(calls.iter().map(|c| Call {
        id: &c.id,
        kind: "function",
        function: Function {
            name: &c.name,
            arguments: &c.arguments,
        },
    }))
}

impl Serialize for UserContent<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum Part {
            Text { text: String },
            ImageUrl { image_url: Url },
        }
        #[derive(Serialize)]
        struct Url {
            url: String,
        }
        match self {
            UserContent::Text(text) => s.serialize_str(text),
            UserContent::Images { call_id, images } => {
                let head = Part::Text {
                    text: format!("Images returned by tool call {call_id}:"),
                };
                let images = images.iter().map(|i| Part::ImageUrl {
                    image_url: Url {
                        url: format!("data:{};base64,{}", i.mime, i.data),
                    },
                });
                s.collect_seq(std::iter::once(head).chain(images))
            }
        }
    }
}

/// The tools as functions: `{"type": "function", "function": {name, description,
/// parameters}}`, the schemas serialized where they are.
struct Tools<'a>(&'a [ToolSpec]);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Tool<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            function: &'a ToolSpec,
        }
        s.collect_seq(self.0.iter().map(|function| Tool {
            kind: "function",
            function,
        }))
    }
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
            let body = body(request, &self.http.endpoint.name);
            stream_turn::<Accumulator>(&self.http, &url, headers, body, text)
                .await
                .map_err(|e| self.http.endpoint.explain(e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The body as it was built before it was serialized from borrowed parts (into a
    /// `serde_json::Value`, then bytes, the limit renamed for OpenAI afterwards): the
    /// oracle the bytes on the wire are held to.
    fn value_body(request: &Request) -> Value {
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
                    messages
                        .push(json!({"role": "tool", "tool_call_id": call_id, "content": content}));
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

    fn value_bytes(request: &Request, provider: &str) -> String {
        let mut body = value_body(request);
        if provider == "openai"
            && let Some(max) = body.as_object_mut().and_then(|b| b.remove("max_tokens"))
        {
            body["max_completion_tokens"] = max;
        }
        serde_json::to_string(&body).unwrap()
    }

    #[test]
    fn the_bytes_sent_are_the_ones_the_value_builder_sent() {
        let messages = crate::wire_samples::conversation();
        let tools = crate::wire_samples::tools();
        for provider in ["openai", "local"] {
            for max_tokens in [None, Some(8192)] {
                for tools in [&tools[..], &[]] {
                    // Every prefix: each kind of message last, images waiting or not.
                    for n in 0..=messages.len() {
                        let req = Request {
                            model: "gpt-x",
                            system: "You are \"runner\".\n\tBe brief.",
                            messages: &messages[..n],
                            tools,
                            max_tokens,
                        };
                        let sent = String::from_utf8(body(&req, provider)).unwrap();
                        assert_eq!(
                            sent,
                            value_bytes(&req, provider),
                            "{provider} {max_tokens:?} {n}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn openai_itself_gets_the_renamed_limit_after_the_tools() {
        let tools = crate::wire_samples::tools();
        let req = Request {
            model: "m",
            system: "sys",
            messages: &[],
            tools: &tools,
            max_tokens: Some(64),
        };
        let own = String::from_utf8(body(&req, "openai")).unwrap();
        assert!(own.ends_with(r#"}}],"max_completion_tokens":64}"#), "{own}");
        assert!(!own.contains("\"max_tokens\""), "{own}");
        let other = String::from_utf8(body(&req, "ollama")).unwrap();
        assert!(other.contains(r#""max_tokens":64,"tools":["#), "{other}");
    }

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
        let b: Value = serde_json::from_slice(&body(&req, "local")).unwrap();
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
