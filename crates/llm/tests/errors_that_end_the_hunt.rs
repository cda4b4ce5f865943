//! Errors whose cure is on the user's side, over real HTTP on loopback and through the
//! same resolution and retry layer a run uses (`models::resolve`, default retry policy):
//! a local server that is not running is said at once with its address, not after five
//! retries; a refused key names the variable it came from. The controls show that what
//! waiting can cure (a 429 from the same loopback server) is still retried.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test's panic is its failure report"
)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use runner_llm::models::{ProviderSettings, resolve};
use runner_llm::retry::{Retry, RetrySettings};
use runner_llm::{LlmError, Message, Provider, Request, Turn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A loopback server answering each request with the next of `answers` (status line,
/// headers and body, whole); the base URL and how many requests it has had.
async fn serve(answers: Vec<String>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        for answer in answers {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            read_request(&mut socket).await;
            seen.fetch_add(1, Ordering::SeqCst);
            let _ = socket.write_all(answer.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
    });
    (format!("http://{addr}/v1"), count)
}

/// Reads one request's head and body, so the answer never races the upload.
async fn read_request(socket: &mut tokio::net::TcpStream) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let Ok(n) = socket.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        seen.extend_from_slice(&buf[..n]);
        let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&seen[..at]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if seen.len() >= at + 4 + length {
            return;
        }
    }
}

fn answer(status: &str, headers: &str, content_type: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n{headers}connection: close\r\n\r\n{body}",
        body.len()
    )
}

const HELLO: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

/// The provider a run would get for `local/m` with this table and retry settings, and
/// the retries it announced.
fn provider(
    table: ProviderSettings,
    retry: Option<RetrySettings>,
) -> (Arc<dyn Provider>, Arc<Mutex<Vec<Retry>>>) {
    let retries = Arc::new(Mutex::new(Vec::new()));
    let log = retries.clone();
    let providers = BTreeMap::from([("local".to_string(), table)]);
    let (p, _) = resolve(
        "local/m",
        &providers,
        retry,
        Arc::new(move |r| log.lock().unwrap().push(r)),
    )
    .unwrap();
    (p, retries)
}

fn table(base_url: String, key_var: &str) -> ProviderSettings {
    ProviderSettings {
        base_url: Some(base_url),
        api_key_env: Some(key_var.into()),
        ..Default::default()
    }
}

async fn turn(p: &dyn Provider) -> Result<Turn, LlmError> {
    let messages = [Message::User { text: "hi".into() }];
    let request = Request {
        model: "m",
        system: "s",
        messages: &messages,
        tools: &[],
        max_tokens: None,
    };
    p.turn(&request, &|_| {}).await
}

/// A loopback port nobody listens on: bound, then let go.
fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_local_server_that_is_not_running_is_said_at_once_with_its_address() {
    let port = dead_port();
    let url = format!("http://127.0.0.1:{port}/v1");
    // The default retry policy: five retries from 1 s, about 23 s of waiting in all.
    let (p, retries) = provider(table(url, "RUNNER_TEST_KEY_NEVER_SET"), None);
    let started = Instant::now();
    let e = turn(p.as_ref()).await.unwrap_err();
    let took = started.elapsed();
    let said = e.to_string();
    assert!(took < Duration::from_secs(2), "took {took:?}: {said}");
    assert!(retries.lock().unwrap().is_empty(), "no retry: {said}");
    assert!(matches!(e, LlmError::Refused { .. }), "{e:?}");
    assert!(
        said.contains(&format!("http://127.0.0.1:{port}/v1/chat/completions"))
            && said.contains(&format!(
                "is the server at http://127.0.0.1:{port} running?"
            )),
        "{said}"
    );
}

#[tokio::test]
async fn localhost_by_name_counts_as_local() {
    let port = dead_port();
    let (p, _) = provider(
        table(
            format!("http://localhost:{port}/v1"),
            "RUNNER_TEST_KEY_NEVER_SET",
        ),
        None,
    );
    let started = Instant::now();
    let e = turn(p.as_ref()).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2), "{e}");
    assert!(
        e.to_string().contains(&format!(
            "is the server at http://localhost:{port} running?"
        )),
        "{e}"
    );
}

#[tokio::test]
async fn a_401_names_the_variable_the_key_came_from_and_is_not_retried() {
    let body = r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#;
    let (url, count) = serve(vec![answer(
        "401 Unauthorized",
        "",
        "application/json",
        body,
    )])
    .await;
    let (p, retries) = provider(table(url.clone(), "RUNNER_TEST_KEY_NEVER_SET"), None);
    let e = turn(p.as_ref()).await.unwrap_err();
    let said = e.to_string();
    assert_eq!(count.load(Ordering::SeqCst), 1, "one request: {said}");
    assert!(retries.lock().unwrap().is_empty());
    assert!(
        said.contains("local answered 401")
            && said.contains("Unauthorized: Incorrect API key provided")
            && said.contains("RUNNER_TEST_KEY_NEVER_SET is not set")
            && said.contains(&url),
        "{said}"
    );
}

#[tokio::test]
async fn a_403_with_a_key_set_names_its_variable() {
    let body = r#"{"error":{"message":"this key may not use model m"}}"#;
    let (url, _) = serve(vec![answer("403 Forbidden", "", "application/json", body)]).await;
    // PATH is set in every test process: it stands in for a variable holding a key.
    let (p, _) = provider(table(url.clone(), "PATH"), None);
    let said = turn(p.as_ref()).await.unwrap_err().to_string();
    assert!(
        said.contains("403")
            && said.contains("this key may not use model m")
            && said.contains("The key came from PATH; check that it is set to a valid key for")
            && said.contains(&url),
        "{said}"
    );
}

/// Control: what waiting cures is still waited for, on loopback as anywhere.
#[tokio::test]
async fn a_429_from_a_loopback_server_is_still_retried() {
    let (url, count) = serve(vec![
        answer(
            "429 Too Many Requests",
            "retry-after: 0\r\n",
            "application/json",
            r#"{"error":{"message":"slow down"}}"#,
        ),
        answer("200 OK", "", "text/event-stream", HELLO),
    ])
    .await;
    let retry = RetrySettings {
        attempts: Some(3),
        base_ms: Some(10),
    };
    let (p, retries) = provider(table(url, "RUNNER_TEST_KEY_NEVER_SET"), Some(retry));
    let t = turn(p.as_ref()).await.unwrap();
    assert_eq!(t.text, "hello");
    assert_eq!(count.load(Ordering::SeqCst), 2);
    assert_eq!(retries.lock().unwrap().len(), 1);
}
