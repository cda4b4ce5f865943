//! Providers that misbehave, over real HTTP on loopback: a server speaking each provider's
//! wire format, with one thing in its answer that used to panic runner or fill its memory.
//! Each attack sits next to the control that shows the same answer, well formed, works.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test's panic is its failure report"
)]

use std::time::Duration;

use runner_llm::anthropic::Anthropic;
use runner_llm::endpoint::Endpoint;
use runner_llm::openai::OpenAi;
use runner_llm::{LlmError, Message, Provider, Request, Turn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the server sends after the request: the status line and headers, then a body
/// (or a flood of `flood` bytes of one repeated piece, with no line end).
#[derive(Clone)]
struct Answer {
    head: String,
    body: Vec<u8>,
    flood: Option<(Vec<u8>, usize)>,
}

fn sse(body: &[u8]) -> Answer {
    Answer {
        head: "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            .into(),
        body: body.to_vec(),
        flood: None,
    }
}

/// A server on loopback that answers one request with `answer`; its base URL.
async fn serve(answer: Answer) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        read_request(&mut socket).await;
        let _ = socket.write_all(answer.head.as_bytes()).await;
        let _ = socket.write_all(&answer.body).await;
        if let Some((piece, total)) = &answer.flood {
            let block = piece.repeat((1 << 20) / piece.len().max(1));
            let mut sent = 0;
            while sent < *total {
                if socket.write_all(&block).await.is_err() {
                    break;
                }
                sent += block.len();
            }
        }
        let _ = socket.shutdown().await;
    });
    format!("http://{addr}")
}

/// Reads the request head and its body, so the answer does not race the upload.
async fn read_request(socket: &mut tokio::net::TcpStream) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let n = socket.read(&mut buf).await.unwrap();
        assert!(n > 0, "the client hung up before its request ended");
        seen.extend_from_slice(&buf[..n]);
        if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&seen[..head_end]).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0);
    while seen.len() < head_end + length {
        let n = socket.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
    }
}

fn endpoint(name: &str, base_url: String) -> Endpoint {
    Endpoint {
        name: name.into(),
        base_url,
        api_key: Some("k".into()),
        api_key_env: "TEST_KEY".into(),
        headers: Vec::new(),
        idle_timeout: Duration::from_secs(30),
    }
}

async fn turn(provider: &dyn Provider) -> Result<Turn, LlmError> {
    let messages = [Message::User { text: "hi".into() }];
    let request = Request {
        model: "m",
        system: "s",
        messages: &messages,
        tools: &[],
        max_tokens: None,
    };
    provider.turn(&request, &|_| {}).await
}

async fn openai(answer: Answer) -> Result<Turn, LlmError> {
    let url = serve(answer).await;
    turn(&OpenAi::new(endpoint("gw", url)).unwrap()).await
}

async fn anthropic(answer: Answer) -> Result<Turn, LlmError> {
    let url = serve(answer).await;
    turn(&Anthropic::new(endpoint("claude", url)).unwrap()).await
}

const OPENAI_HELLO: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

const ANTHROPIC_HELLO: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":INPUT,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello\"}}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":OUTPUT}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

fn anthropic_hello(input: u64, output: u64) -> Vec<u8> {
    ANTHROPIC_HELLO
        .replace("INPUT", &input.to_string())
        .replace("OUTPUT", &output.to_string())
        .into_bytes()
}

/// A byte-order mark before the first event panicked inside the old SSE parser.
#[tokio::test]
async fn a_stream_that_starts_with_a_byte_order_mark_is_read() {
    // The control: the same answer without the mark.
    assert_eq!(openai(sse(OPENAI_HELLO)).await.unwrap().text, "hello");
    let marked = [b"\xEF\xBB\xBF".as_slice(), OPENAI_HELLO].concat();
    assert_eq!(openai(sse(&marked)).await.unwrap().text, "hello");
    let marked = [b"\xEF\xBB\xBF".to_vec(), anthropic_hello(3, 1)].concat();
    assert_eq!(anthropic(sse(&marked)).await.unwrap().text, "hello");
}

/// `Retry-After: inf` and `retry-after-ms: 1e300` panicked in `Duration::from_secs_f64`.
#[tokio::test]
async fn a_retry_after_of_infinity_or_1e300_is_ignored_or_clamped() {
    let limited = |header: &str| Answer {
        head: format!(
            "HTTP/1.1 429 Too Many Requests\r\n{header}\r\ncontent-type: application/json\r\ncontent-length: 40\r\nconnection: close\r\n\r\n"
        ),
        body: br#"{"error":{"message":"slow down please!"}}"#[..40].to_vec(),
        flood: None,
    };
    let wait = |r: Result<Turn, LlmError>| match r {
        Err(LlmError::Status {
            status: 429,
            retry_after,
            ..
        }) => retry_after,
        other => panic!("{other:?}"),
    };
    // The control: an ordinary value.
    assert_eq!(
        wait(openai(limited("retry-after: 2")).await),
        Some(Duration::from_secs(2))
    );
    assert_eq!(wait(openai(limited("retry-after: inf")).await), None);
    assert_eq!(wait(anthropic(limited("retry-after: NaN")).await), None);
    assert_eq!(
        wait(openai(limited("retry-after-ms: 1e300")).await),
        Some(runner_llm::retry::MAX_RETRY_AFTER)
    );
}

/// Token counts near `u64::MAX` overflowed when the context was summed.
#[tokio::test]
async fn token_counts_near_the_top_of_u64_saturate() {
    let normal = anthropic(sse(&anthropic_hello(10, 5))).await.unwrap();
    assert_eq!(normal.usage.context(), 15);
    let huge = anthropic(sse(&anthropic_hello(u64::MAX - 1, 7)))
        .await
        .unwrap();
    assert_eq!(huge.usage.context(), u64::MAX);
    let mut total = huge.usage;
    total.add(&huge.usage);
    assert_eq!(total.input, u64::MAX);
}

/// A tool call at index `u64::MAX`, then one without an index under a new id: the next
/// index overflowed.
#[tokio::test]
async fn a_tool_call_at_the_largest_index_does_not_overflow() {
    let calls = |first: &str| {
        format!(
            "data: {{\"choices\":[{{\"delta\":{{\"tool_calls\":[{{\"index\":{first},\"id\":\"a\",\"function\":{{\"name\":\"read\",\"arguments\":\"{{}}\"}}}}]}}}}]}}\n\n\
data: {{\"choices\":[{{\"delta\":{{\"tool_calls\":[{{\"id\":\"b\",\"function\":{{\"name\":\"glob\",\"arguments\":\"{{}}\"}}}}]}}}}]}}\n\n\
data: {{\"choices\":[{{\"delta\":{{}},\"finish_reason\":\"tool_calls\"}}]}}\n\ndata: [DONE]\n\n"
        )
    };
    let names = |t: Turn| -> Vec<String> { t.tool_calls.into_iter().map(|c| c.name).collect() };
    // The control: two calls, told apart by their ids.
    let normal = openai(sse(calls("0").as_bytes())).await.unwrap();
    assert_eq!(names(normal), ["read", "glob"]);
    let top = openai(sse(calls(&u64::MAX.to_string()).as_bytes()))
        .await
        .unwrap();
    assert!(!top.tool_calls.is_empty());
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// 256 MiB of one `data:` line with no end: the stream is cut at the per-event limit with
/// an error that names the provider and the limit, and the host's memory does not follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_without_an_end_is_cut_at_the_limit_and_memory_stays_flat() {
    let flood = |body: &[u8]| Answer {
        flood: Some((b"xxxxxxxx".to_vec(), 256 << 20)),
        ..sse(body)
    };
    let before = rss_kib();
    let e = openai(flood(b"data: ")).await.unwrap_err();
    let grown = rss_kib().saturating_sub(before);
    let text = e.to_string();
    assert!(
        text.contains("gw") && text.contains(&runner_llm::event_stream::MAX_EVENT.to_string()),
        "{text}"
    );
    assert!(!e.is_retryable(), "a flood is not worth trying again: {e}");
    assert!(
        grown < 96 << 10,
        "the host grew by {grown} KiB reading a 256 MiB event"
    );
    let e = anthropic(flood(b"event: message_start\ndata: "))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("claude"), "{e}");
    // The control: a well-formed answer after it, from a fresh server.
    assert_eq!(openai(sse(OPENAI_HELLO)).await.unwrap().text, "hello");
}
