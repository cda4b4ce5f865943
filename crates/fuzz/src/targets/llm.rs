//! A provider's stream: server-sent events, and the OpenAI and Anthropic decoders that fold
//! their chunks into a turn. The server may be a gateway or a hijacked endpoint.

use std::time::Duration;

use runner_llm::event_stream::{Decoder, Event, decode};
use runner_llm::{anthropic, openai};

use super::{MIB, Target};

pub const SSE: Target = Target {
    name: "sse",
    about: "server-sent events; the events do not depend on how the bytes were cut into reads, and none passes the limit",
    run: sse,
    seeds: sse_seeds,
    dictionary: SSE_WORDS,
    max_len: 256 * 1024,
    memory: 8 * MIB,
    time: Duration::from_secs(2),
};

pub const OPENAI: Target = Target {
    name: "openai_chunks",
    about: "OpenAI Chat Completions chunks folded into a turn",
    run: openai_chunks,
    seeds: openai_seeds,
    dictionary: SSE_WORDS,
    max_len: 64 * 1024,
    memory: 16 * MIB,
    time: Duration::from_secs(2),
};

pub const ANTHROPIC: Target = Target {
    name: "anthropic_chunks",
    about: "Anthropic Messages events folded into a turn",
    run: anthropic_chunks,
    seeds: anthropic_seeds,
    dictionary: SSE_WORDS,
    max_len: 64 * 1024,
    memory: 16 * MIB,
    time: Duration::from_secs(2),
};

const SSE_WORDS: &[&[u8]] = &[
    b"data: ",
    b"event: ",
    b"\n\n",
    b"\r\n\r\n",
    b"\r",
    b"\xEF\xBB\xBF",
    b": keep-alive\n",
    b"[DONE]",
    b"\"index\":",
    b"\"input_tokens\":",
    b"\"output_tokens\":",
    b"\"prompt_tokens\":",
    b"\"tool_calls\":[{",
    b"\"arguments\":\"",
    b"content_block_delta",
    b"input_json_delta",
    b"\"partial_json\":\"",
];

/// Small, so the fuzzer's inputs reach it.
const LIMIT: usize = 4096;

fn sse(data: &[u8]) {
    let whole = decode(data, LIMIT);
    if let Ok(events) = &whole {
        for e in events {
            assert!(
                e.data.len() <= LIMIT,
                "an event of {} bytes passed the limit",
                e.data.len()
            );
        }
    }
    let step = 1 + usize::from(data.first().copied().unwrap_or(0)) % 17;
    for cut in [1, step, 1 + data.len() / 2] {
        let pieces = in_pieces(data, cut);
        match (&whole, &pieces) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "reads of {cut} bytes gave other events"),
            (Err(_), Err(_)) => {}
            _ => panic!("reads of {cut} bytes decided otherwise: {whole:?} / {pieces:?}"),
        }
    }
}

fn in_pieces(data: &[u8], cut: usize) -> Result<Vec<Event>, runner_llm::event_stream::TooLarge> {
    let mut decoder = Decoder::new(LIMIT);
    let mut events = Vec::new();
    for piece in data.chunks(cut.max(1)) {
        events.extend(decoder.push(piece)?);
    }
    events.extend(decoder.finish()?);
    Ok(events)
}

fn openai_chunks(data: &[u8]) {
    let Ok(events) = decode(data, LIMIT * 16) else {
        return;
    };
    let mut turn = openai::Accumulator::default();
    for e in &events {
        if turn.push_data(&e.data, "fuzz").is_err() {
            return;
        }
    }
    if let Ok(turn) = turn.into_turn("fuzz") {
        let _ = turn.usage.context();
    }
}

fn anthropic_chunks(data: &[u8]) {
    let Ok(events) = decode(data, LIMIT * 16) else {
        return;
    };
    let mut turn = anthropic::Accumulator::default();
    for e in &events {
        if turn.push_event(&e.event, &e.data, "fuzz").is_err() {
            return;
        }
    }
    if let Ok(turn) = turn.into_turn("fuzz") {
        let _ = turn.usage.context();
    }
}

fn sse_seeds() -> Vec<Vec<u8>> {
    let mut seeds = openai_seeds();
    seeds.extend(anthropic_seeds());
    seeds.push(b"\xEF\xBB\xBFdata: x\r\rdata: y\r\n\r\n: comment\nevent: e\ndata\n\n".to_vec());
    seeds
}

fn openai_seeds() -> Vec<Vec<u8>> {
    let chunks = [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"lo"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"comm"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"and\":\"ls\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}"#,
        "[DONE]",
    ];
    vec![
        chunks
            .iter()
            .map(|c| format!("data: {c}\n\n"))
            .collect::<String>()
            .into_bytes(),
    ]
}

fn anthropic_seeds() -> Vec<Vec<u8>> {
    let events = [
        (
            "message_start",
            r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":2,"output_tokens":1}}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"bash","input":{}}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"command\":\"ls\"}"}}"#,
        ),
        (
            "content_block_stop",
            r#"{"type":"content_block_stop","index":1}"#,
        ),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#,
        ),
        ("message_stop", r#"{"type":"message_stop"}"#),
    ];
    vec![
        events
            .iter()
            .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
            .collect::<String>()
            .into_bytes(),
    ]
}
