//! The HTTP half both streaming providers share: POST a JSON body, turn an error status
//! into [`LlmError::Status`] with the provider's own message, and hand back the body as
//! server-sent events (decoded by [`super::event_stream`], with a bound per event).
//!
//! Everything a provider sends is read as hostile: a header's `Retry-After` is clamped and
//! NaN or infinity ignored, an event past [`MAX_EVENT`] ends the stream, and nothing here
//! computes with a peer's numbers except by checked or saturating arithmetic.

#![deny(clippy::arithmetic_side_effects)]

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use reqwest::header::HeaderMap;

use super::endpoint::Endpoint;
use super::event_stream::{Decoder, Event, MAX_EVENT};
use super::retry::MAX_RETRY_AFTER;
use super::{LlmError, TextSink, Turn};

/// An endpoint and the client that talks to it.
pub(crate) struct Http {
    pub endpoint: Endpoint,
    client: reqwest::Client,
}

impl Http {
    pub fn new(endpoint: Endpoint) -> Result<Self, LlmError> {
        let client = runner_http::client_builder()
            .build()
            .map_err(|e| LlmError::Setup(format!("cannot build the HTTP client: {e}")))?;
        Ok(Http { endpoint, client })
    }

    /// The configured extra headers plus the key under `name` (as `prefix` + key).
    pub fn headers(&self, name: &'static str, prefix: &str) -> Result<HeaderMap, LlmError> {
        let mut headers = self.endpoint.extra_headers()?;
        if let Some(key) = &self.endpoint.api_key {
            let value = reqwest::header::HeaderValue::from_str(&format!("{prefix}{key}")).map_err(
                |_| {
                    LlmError::Setup(format!(
                        "the API key for {} holds characters a header cannot carry",
                        self.endpoint.name
                    ))
                },
            )?;
            let mut value = value;
            value.set_sensitive(true);
            headers.insert(reqwest::header::HeaderName::from_static(name), value);
        }
        Ok(headers)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.endpoint.base_url.trim_end_matches('/'))
    }
}

/// How a provider folds its stream's events into a turn.
pub(crate) trait Fold: Default {
    /// One event; the text delta it carries, if any.
    fn push(&mut self, event: &str, data: &str, provider: &str)
    -> Result<Option<String>, LlmError>;
    /// The stream said it is over.
    fn done(&self) -> bool;
    fn finish(self, provider: &str) -> Result<Turn, LlmError>;
}

/// POSTs `body`, folds the events into a turn, and hands text to `text` as it arrives.
pub(crate) async fn stream_turn<F: Fold>(
    http: &Http,
    url: &str,
    headers: HeaderMap,
    body: Vec<u8>,
    text: TextSink<'_>,
) -> Result<Turn, LlmError> {
    let name = http.endpoint.name.as_str();
    let idle = http.endpoint.idle_timeout;
    // A server or proxy that stops sending without closing would hold the run forever;
    // silence past the limit counts as a cut stream, which the retry layer tries again.
    let silent = || LlmError::Transport {
        provider: name.to_string(),
        message: format!(
            "no answer for {} s (idle_timeout_secs in [provider.{name}] sets the limit)",
            idle.as_secs()
        ),
    };
    let events = tokio::time::timeout(idle, post_stream(&http.client, name, url, headers, body))
        .await
        .map_err(|_| silent())??;
    let mut events = std::pin::pin!(events);
    let mut acc = F::default();
    while let Some(event) = tokio::time::timeout(idle, events.next())
        .await
        .map_err(|_| silent())?
    {
        let event = event?;
        let delta = match acc.push(&event.event, &event.data, name) {
            // The body's last event is dispatched even without a blank line after it
            // ([`events`]); when it does not parse, the body was cut in the middle of it.
            Err(LlmError::Protocol { .. })
                if matches!(tokio::time::timeout(idle, events.next()).await, Ok(None)) =>
            {
                return Err(LlmError::Transport {
                    provider: name.to_string(),
                    message: "the stream broke off in the middle of an event".into(),
                });
            }
            pushed => pushed?,
        };
        if let Some(delta) = delta {
            text(&delta);
        }
        if acc.done() {
            break;
        }
    }
    acc.finish(name)
}

pub(crate) async fn post_stream(
    client: &reqwest::Client,
    provider: &str,
    url: &str,
    headers: HeaderMap,
    body: Vec<u8>,
) -> Result<impl Stream<Item = Result<Event, LlmError>> + Send + use<>, LlmError> {
    let transport = |e: reqwest::Error| {
        if e.is_builder() {
            // A malformed base URL or header fails the same way on every try.
            LlmError::Setup(format!(
                "{provider}: {}; check its base_url",
                describe(e, url)
            ))
        } else if let Some(refused) = super::endpoint::local_refusal(provider, url, &e) {
            refused
        } else {
            LlmError::Transport {
                provider: provider.to_string(),
                message: describe(e, url),
            }
        }
    };
    let response = client
        .post(url)
        .headers(headers)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(body)
        .send()
        .await
        .map_err(transport)?;
    let status = response.status();
    if !status.is_success() {
        let retry_after = retry_after(response.headers());
        let text = response.text().await.unwrap_or_default();
        return Err(LlmError::Status {
            provider: provider.to_string(),
            status: status.as_u16(),
            message: error_message(&text),
            retry_after,
        });
    }
    Ok(events(
        response.bytes_stream(),
        provider.to_string(),
        MAX_EVENT,
    ))
}

/// The body as events. The last event is dispatched even without a blank line after it:
/// the providers' own SDKs do so, and a server that closes right after `message_stop` sent
/// a whole answer. An event cut in the middle then fails to parse, which [`stream_turn`]
/// reports as a cut stream. An event over `limit` ends the stream with an error that names
/// the provider and the limit.
pub(crate) fn events<S, E>(
    body: S,
    provider: String,
    limit: usize,
) -> impl Stream<Item = Result<Event, LlmError>> + Send + use<S, E>
where
    S: Stream<Item = Result<bytes::Bytes, E>> + Send,
    E: std::fmt::Display,
{
    struct State<S> {
        body: std::pin::Pin<Box<S>>,
        decoder: Decoder,
        ready: VecDeque<Event>,
        ended: bool,
    }
    let state = State {
        body: Box::pin(body),
        decoder: Decoder::new(limit),
        ready: VecDeque::new(),
        ended: false,
    };
    futures_util::stream::unfold(state, move |mut st| {
        let provider = provider.clone();
        async move {
            let too_large = |e: super::event_stream::TooLarge| LlmError::Protocol {
                provider: provider.clone(),
                message: format!("{e}; runner stopped reading the answer"),
            };
            loop {
                if let Some(event) = st.ready.pop_front() {
                    return Some((Ok(event), st));
                }
                if st.ended {
                    return None;
                }
                let decoded = match st.body.next().await {
                    Some(Ok(bytes)) => st.decoder.push(&bytes),
                    Some(Err(e)) => {
                        st.ended = true;
                        let message = format!("the stream broke off: {e}");
                        return Some((Err(LlmError::Transport { provider, message }), st));
                    }
                    None => {
                        st.ended = true;
                        st.decoder.finish().map(|last| last.into_iter().collect())
                    }
                };
                match decoded {
                    Ok(events) => st.ready.extend(events),
                    Err(e) => {
                        st.ended = true;
                        return Some((Err(too_large(e)), st));
                    }
                }
            }
        }
    })
}

/// reqwest's Display hides the cause ("error sending request"); the chain says what
/// actually happened (connection refused, reset, DNS).
fn describe(e: reqwest::Error, url: &str) -> String {
    let e = e.without_url();
    let mut text = format!("request to {} failed: {e}", redact(url));
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// The URL without credentials or query: some gateways take a key as `user:pass@` or
/// `?key=`, and error messages end up in sessions and `--json` output.
fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.to_string()
        }
        Err(_) => "(the configured base_url)".to_string(),
    }
}

/// Both providers wrap errors as `{"error": {"message": …}}`; anything else is shown raw
/// (cut to a readable length), since a proxy in between may answer in HTML.
fn error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        let error = v.get("error").unwrap_or(&v);
        if let Some(m) = error.get("message").and_then(|m| m.as_str()) {
            let kind = error.get("type").and_then(|t| t.as_str());
            return match kind {
                Some(kind) => format!("{m} ({kind})"),
                None => m.to_string(),
            };
        }
        if let Some(m) = error.as_str() {
            return m.to_string();
        }
    }
    let body = body.trim();
    if body.is_empty() {
        return "(no message)".to_string();
    }
    let cut: String = body.chars().take(500).collect();
    cut
}

/// `Retry-After` in seconds (HTTP-dates are rare from these APIs and treated as absent),
/// or OpenAI's `retry-after-ms`. Total: what is not a finite number is absent, a negative
/// wait is none, and a long one is clamped to [`MAX_RETRY_AFTER`] (`Duration` itself
/// panics on infinity, NaN or a value past its range).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite())
    };
    if let Some(ms) = get("retry-after-ms") {
        return Some(clamped_seconds(ms / 1000.0));
    }
    get("retry-after").map(clamped_seconds)
}

/// A finite number of seconds as a wait within [`MAX_RETRY_AFTER`].
fn clamped_seconds(seconds: f64) -> Duration {
    let max = MAX_RETRY_AFTER.as_secs_f64();
    Duration::try_from_secs_f64(seconds.clamp(0.0, max)).unwrap_or(MAX_RETRY_AFTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_messages_are_found_in_their_envelopes() {
        assert_eq!(
            error_message(
                r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#
            ),
            "Incorrect API key provided (invalid_request_error)"
        );
        assert_eq!(
            error_message(
                r#"{"type":"error","error":{"type":"not_found_error","message":"model: nope"}}"#
            ),
            "model: nope (not_found_error)"
        );
        assert_eq!(
            error_message("<html>bad gateway</html>"),
            "<html>bad gateway</html>"
        );
        assert_eq!(error_message(""), "(no message)");
    }

    #[test]
    fn urls_in_messages_lose_their_credentials() {
        let shown = redact("https://user:sk-secret@gw.example/v1/chat?key=sk-other");
        assert_eq!(shown, "https://gw.example/v1/chat");
        assert_eq!(redact("not a url"), "(the configured base_url)");
    }

    #[test]
    fn retry_after_reads_seconds_and_milliseconds() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", "150".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), None);
    }

    /// Each of these panicked in `Duration::from_secs_f64`, or waited for ever.
    #[test]
    fn retry_after_from_a_hostile_server_is_clamped_or_ignored() {
        let of = |name: &str, value: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
            retry_after(&h)
        };
        for (name, value) in [("retry-after", "inf"), ("retry-after", "NaN")] {
            assert_eq!(of(name, value), None, "{name}: {value}");
        }
        assert_eq!(of("retry-after-ms", "-inf"), None);
        for (name, value) in [
            ("retry-after-ms", "1e300"),
            ("retry-after", "1e300"),
            ("retry-after", "99999999999999999999"),
        ] {
            assert_eq!(of(name, value), Some(MAX_RETRY_AFTER), "{name}: {value}");
        }
        assert_eq!(of("retry-after", "-5"), Some(Duration::ZERO));
        // The control: an ordinary value is read as it is.
        assert_eq!(of("retry-after", "1.5"), Some(Duration::from_millis(1500)));
    }

    #[tokio::test]
    async fn events_are_bounded_and_a_mark_at_the_start_is_harmless() {
        let chunks = |parts: Vec<&'static [u8]>| {
            futures_util::stream::iter(
                parts
                    .into_iter()
                    .map(|p| Ok::<_, std::io::Error>(bytes::Bytes::from_static(p))),
            )
        };
        let got: Vec<_> = events(
            chunks(vec![b"\xEF\xBB", b"\xBFdata: {}\n\ndata: [DONE]"]),
            "p".into(),
            64,
        )
        .collect()
        .await;
        let data: Vec<String> = got.into_iter().map(|e| e.unwrap().data).collect();
        assert_eq!(data, ["{}", "[DONE]"]);
        let flood: Vec<&'static [u8]> = vec![b"data: "; 100];
        let got: Vec<_> = events(chunks(flood), "p".into(), 64).collect().await;
        let [Err(e)] = &got[..] else {
            panic!("{got:?}")
        };
        assert!(
            e.to_string().contains("p sent") && e.to_string().contains("64 bytes"),
            "{e}"
        );
    }
}
