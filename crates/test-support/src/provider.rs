//! A scripted model behind a real HTTP server that speaks each provider's documented
//! streaming format: OpenAI Chat Completions (`data:` chunks, tool-call fragments keyed by
//! index, a usage chunk, `[DONE]`) and Anthropic Messages (named events, `ping`,
//! `input_json_delta`, `message_delta` usage) and OpenAI Responses (named `response.*`
//! events around whole output items, the API Codex CLI speaks). The format follows the
//! request path, so one script can drive any of them. Every request is kept for the test
//! to inspect.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// One model answer.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub text: String,
    /// (tool name, raw arguments): raw so a test can send malformed JSON.
    pub calls: Vec<(String, String)>,
    /// Input tokens the server reports (to drive context pruning and compaction).
    pub prompt_tokens: u64,
    /// The answer hit the output limit (`length` / `max_tokens`) instead of ending.
    pub cut_at_limit: bool,
}

pub fn text(t: &str) -> Answer {
    Answer {
        text: t.into(),
        ..Default::default()
    }
}

pub fn call(name: &str, args: Value) -> Answer {
    Answer {
        calls: vec![(name.into(), args.to_string())],
        ..Default::default()
    }
}

pub fn calls(list: Vec<(&str, Value)>) -> Answer {
    Answer {
        calls: list
            .into_iter()
            .map(|(n, a)| (n.to_string(), a.to_string()))
            .collect(),
        ..Default::default()
    }
}

#[derive(Debug, Clone)]
pub enum Response {
    /// A complete streamed answer.
    Stream(Answer),
    /// The first `events` events of the answer, then the connection closes.
    Cut(Answer, usize),
    /// An error status with headers and a body.
    Status(u16, Vec<(String, String)>, String),
    /// Waits before answering (for cancellation tests).
    Slow(Answer, Duration),
    /// A 200 event stream whose body is these pieces exactly, each written as it comes:
    /// for recorded streams and the shapes [`render`] never makes (no blank line after the
    /// last event, an error event, a refusal).
    Raw(Vec<String>),
}

/// When one request of a fast model was in and when its answer was out: a benchmark's
/// clock for what the client does between an answer and its next request.
#[derive(Debug, Clone, Copy)]
pub struct Exchange {
    /// The whole request read (head and body).
    pub received: std::time::Instant,
    /// The whole answer written.
    pub answered: std::time::Instant,
    /// The request body's size.
    pub request_bytes: usize,
}

#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: Value,
}

/// Decides each answer from the request alone, for servers many runs share at once.
pub type Responder = Arc<dyn Fn(&Value) -> Response + Send + Sync>;

pub struct ScriptedModel {
    pub port: u16,
    /// Whole answers in one write on kept-alive connections (benchmarks), instead of one
    /// write per event on a connection per request (tests of the stream parser).
    fast: Arc<std::sync::atomic::AtomicBool>,
    script: Arc<Mutex<VecDeque<Response>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    responder: Arc<Mutex<Option<Responder>>>,
    exchanges: Arc<Mutex<Vec<Exchange>>>,
}

impl ScriptedModel {
    pub fn start(script: Vec<Response>) -> ScriptedModel {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, r) = (script.clone(), seen.clone());
        let fast = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f = fast.clone();
        let responder: Arc<Mutex<Option<Responder>>> = Arc::new(Mutex::new(None));
        let a = responder.clone();
        let exchanges: Arc<Mutex<Vec<Exchange>>> = Arc::default();
        let x = exchanges.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (s, r, f, a, x) = (s.clone(), r.clone(), f.clone(), a.clone(), x.clone());
                std::thread::spawn(move || {
                    let _ = stream.set_nodelay(true);
                    while serve(
                        &stream,
                        &s,
                        &r,
                        &a,
                        f.load(std::sync::atomic::Ordering::Relaxed).then_some(&*x),
                    ) {}
                });
            }
        });
        ScriptedModel {
            port,
            fast,
            script,
            seen,
            responder,
            exchanges,
        }
    }

    /// A model whose every answer is `f(request body)`: many runs can share it, each
    /// getting the answers its own conversation calls for.
    pub fn responding(f: impl Fn(&Value) -> Response + Send + Sync + 'static) -> ScriptedModel {
        let m = ScriptedModel::start(Vec::new());
        *m.responder.lock().unwrap() = Some(Arc::new(f));
        m
    }

    /// Answers as fast as the server can: see [`ScriptedModel::fast`].
    pub fn fast(self) -> Self {
        self.fast.store(true, std::sync::atomic::Ordering::Relaxed);
        self
    }

    pub fn openai_base(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn anthropic_base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn remaining(&self) -> usize {
        self.script.lock().unwrap().len()
    }

    /// Each request a fast model answered with a stream, in order: when it was in and
    /// when its answer was out.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.exchanges.lock().unwrap().clone()
    }
}

/// Serves one request; true when the connection stays open for another. `fast` (a
/// benchmark's model, see [`ScriptedModel::fast`]) is where its exchanges are kept.
fn serve(
    stream: &TcpStream,
    script: &Mutex<VecDeque<Response>>,
    seen: &Mutex<Vec<Seen>>,
    responder: &Mutex<Option<Responder>>,
    fast: Option<&Mutex<Vec<Exchange>>>,
) -> bool {
    let mut stream = stream;
    let mut reader = BufReader::new(stream);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return false;
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_string();
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return false;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    if reader.read_exact(&mut body).is_err() {
        return false;
    }
    let received = std::time::Instant::now();
    // A benchmark's model answers without reading the request: parsing it is not the
    // controller's cost.
    let body: Value = if fast.is_some() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    };
    seen.lock().unwrap().push(Seen {
        path: path.clone(),
        headers,
        body: body.clone(),
    });
    let anthropic = path.ends_with("/messages");
    let responses = path.ends_with("/responses");
    let rendered = |a: &Answer| {
        if responses {
            render_responses(a)
        } else {
            render(a, anthropic)
        }
    };
    let respond = responder.lock().unwrap().clone();
    let response = match respond {
        Some(f) => Some(f(&body)),
        None => script.lock().unwrap().pop_front(),
    };
    let Some(response) = response else {
        let _ = write!(
            stream,
            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: 52\r\n\r\n{{\"error\":{{\"message\":\"the script has no more turns\"}}}}"
        );
        return false;
    };
    match response {
        Response::Status(code, extra, body) => {
            let mut head = format!(
                "HTTP/1.1 {code} Error\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n",
                body.len()
            );
            for (k, v) in extra {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            let _ = write!(stream, "{head}\r\n{body}");
        }
        Response::Stream(a) if fast.is_some() => {
            let body: String = rendered(&a).concat();
            let whole = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let written = stream.write_all(whole.as_bytes()).is_ok();
            fast.unwrap().lock().unwrap().push(Exchange {
                received,
                answered: std::time::Instant::now(),
                request_bytes: len,
            });
            return written;
        }
        Response::Stream(a) => send(&mut stream, &rendered(&a), None),
        Response::Cut(a, n) => send(&mut stream, &rendered(&a), Some(n)),
        Response::Raw(pieces) => send(&mut stream, &pieces, None),
        Response::Slow(a, d) => {
            std::thread::sleep(d);
            send(&mut stream, &rendered(&a), None)
        }
    }
    false
}

fn send(stream: &mut &TcpStream, events: &[String], cut: Option<usize>) {
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n"
    );
    for (i, e) in events.iter().enumerate() {
        if cut == Some(i) {
            let _ = stream.flush();
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
        let _ = stream.write_all(e.as_bytes());
        let _ = stream.flush();
    }
}

/// Splits a string into pieces of `n` characters.
fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}

pub fn render(a: &Answer, anthropic: bool) -> Vec<String> {
    if anthropic {
        render_anthropic(a)
    } else {
        render_openai(a)
    }
}

fn render_openai(a: &Answer) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "scripted",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let mut out = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for p in pieces(&a.text, 5) {
        out.push(chunk(json!({"content": p}), Value::Null));
    }
    for (i, (name, _)) in a.calls.iter().enumerate() {
        out.push(chunk(
            json!({"tool_calls": [{"index": i, "id": format!("call_{i}_{name}"), "type": "function", "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        ));
    }
    // Argument fragments of all calls interleaved, a few characters each.
    let frags: Vec<Vec<String>> = a.calls.iter().map(|(_, args)| pieces(args, 4)).collect();
    let longest = frags.iter().map(Vec::len).max().unwrap_or(0);
    for k in 0..longest {
        for (i, f) in frags.iter().enumerate() {
            if let Some(p) = f.get(k) {
                out.push(chunk(
                    json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]}),
                    Value::Null,
                ));
            }
        }
    }
    let finish = if a.cut_at_limit {
        "length"
    } else if a.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    out.push(chunk(json!({}), json!(finish)));
    let prompt = if a.prompt_tokens == 0 {
        1000
    } else {
        a.prompt_tokens
    };
    out.push(format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
               "usage": {"prompt_tokens": prompt, "completion_tokens": 50, "total_tokens": prompt + 50,
                         "prompt_tokens_details": {"cached_tokens": 200}}})
    ));
    out.push("data: [DONE]\n\n".into());
    out
}

fn render_anthropic(a: &Answer) -> Vec<String> {
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let prompt = if a.prompt_tokens == 0 {
        1000
    } else {
        a.prompt_tokens
    };
    let mut out = vec![ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
               "model": "scripted", "content": [], "stop_reason": null,
               "usage": {"input_tokens": prompt / 10, "cache_read_input_tokens": prompt * 8 / 10,
                         "cache_creation_input_tokens": prompt / 10, "output_tokens": 1}}}),
    )];
    out.push(ev("ping", json!({"type": "ping"})));
    let mut index = 0;
    if !a.text.is_empty() {
        out.push(ev("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
        for p in pieces(&a.text, 5) {
            out.push(ev("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}})));
        }
        out.push(ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for (name, args) in &a.calls {
        out.push(ev("content_block_start", json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": format!("toolu_{index}_{name}"), "name": name, "input": {}}})));
        for p in pieces(args, 4) {
            out.push(ev("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": p}})));
        }
        out.push(ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        if index == 0 {
            out.push(ev("ping", json!({"type": "ping"})));
        }
        index += 1;
    }
    let stop = if a.cut_at_limit {
        "max_tokens"
    } else if a.calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    out.push(ev("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 50}})));
    out.push(ev("message_stop", json!({"type": "message_stop"})));
    out
}

/// An answer as the OpenAI Responses API streams it (`POST …/responses`): `response.created`,
/// then each output item opened with `response.output_item.added`, filled by text or
/// argument deltas and closed with `response.output_item.done` carrying the whole item,
/// then `response.completed` with the usage. A call name `NAMESPACE/NAME` becomes a
/// `function_call` of tool `NAME` in `NAMESPACE`: that is how Codex offers an MCP server's
/// tools (namespace `mcp__SERVER`), and `/` cannot appear in a plain tool name.
pub fn render_responses(a: &Answer) -> Vec<String> {
    let response = |status: &str| {
        json!({"id": "resp_1", "object": "response", "model": "scripted", "status": status,
               "output": []})
    };
    let mut events = vec![json!({"type": "response.created", "response": response("in_progress")})];
    let mut index = 0;
    if !a.text.is_empty() {
        events.extend(responses_message(&a.text, index));
        index += 1;
    }
    for (i, (name, args)) in a.calls.iter().enumerate() {
        events.extend(responses_call(name, args, i, index));
        index += 1;
    }
    let prompt = if a.prompt_tokens == 0 {
        1000
    } else {
        a.prompt_tokens
    };
    let mut done = response(if a.cut_at_limit {
        "incomplete"
    } else {
        "completed"
    });
    done["usage"] = json!({"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 200},
                           "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 0},
                           "total_tokens": prompt + 50});
    let kind = if a.cut_at_limit {
        done["incomplete_details"] = json!({"reason": "max_output_tokens"});
        "response.incomplete"
    } else {
        "response.completed"
    };
    events.push(json!({"type": kind, "response": done}));
    // Each event is named by its type and numbered in order, as the API does.
    events
        .into_iter()
        .enumerate()
        .map(|(n, mut data)| {
            data["sequence_number"] = json!(n);
            let name = data["type"].as_str().unwrap_or_default().to_string();
            format!("event: {name}\ndata: {data}\n\n")
        })
        .collect()
}

/// An assistant message item at `index`: added empty, its text in deltas, then done whole.
fn responses_message(text: &str, index: usize) -> Vec<Value> {
    let id = format!("msg_{index}");
    let item = |content: Value, status: &str| {
        json!({"type": "message", "id": id, "role": "assistant", "status": status,
               "content": content})
    };
    let part = json!({"type": "output_text", "text": text, "annotations": []});
    let mut out = vec![
        json!({"type": "response.output_item.added", "output_index": index,
                              "item": item(json!([]), "in_progress")}),
    ];
    for p in pieces(text, 5) {
        out.push(json!({"type": "response.output_text.delta", "item_id": id,
                        "output_index": index, "content_index": 0, "delta": p}));
    }
    out.push(
        json!({"type": "response.output_text.done", "item_id": id, "output_index": index,
                    "content_index": 0, "text": text}),
    );
    out.push(
        json!({"type": "response.output_item.done", "output_index": index,
                    "item": item(json!([part]), "completed")}),
    );
    out
}

/// A `function_call` item at `index`: added with empty arguments, the arguments in deltas,
/// then done whole.
fn responses_call(name: &str, args: &str, call: usize, index: usize) -> Vec<Value> {
    let id = format!("fc_{index}");
    let (namespace, tool) = match name.split_once('/') {
        Some((ns, tool)) => (Some(ns), tool),
        None => (None, name),
    };
    let item = |arguments: &str, status: &str| {
        let mut item = json!({"type": "function_call", "id": id, "status": status,
                              "call_id": format!("call_{call}_{tool}"), "name": tool,
                              "arguments": arguments});
        if let Some(ns) = namespace {
            item["namespace"] = json!(ns);
        }
        item
    };
    let mut out = vec![
        json!({"type": "response.output_item.added", "output_index": index,
                              "item": item("", "in_progress")}),
    ];
    for p in pieces(args, 4) {
        out.push(
            json!({"type": "response.function_call_arguments.delta", "item_id": id,
                        "output_index": index, "delta": p}),
        );
    }
    out.push(
        json!({"type": "response.function_call_arguments.done", "item_id": id,
                    "output_index": index, "arguments": args}),
    );
    out.push(
        json!({"type": "response.output_item.done", "output_index": index,
                    "item": item(args, "completed")}),
    );
    out
}
