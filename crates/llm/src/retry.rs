//! Retries as a layer around any provider: rate limits, overload, server errors and cut
//! streams are tried again with exponential backoff and jitter, honouring `Retry-After`,
//! a bounded number of times. Each retry is announced, so a run that is waiting says so.
//! A server's `Retry-After` is a number from a peer: it is clamped to [`MAX_RETRY_AFTER`].

#![deny(clippy::arithmetic_side_effects)]

use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

use super::{LlmError, Provider, Request, TextSink, TurnFuture};

/// The `[retry]` table of a config file.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySettings {
    /// Retries after the first attempt (default 5).
    pub attempts: Option<u32>,
    /// The first backoff in milliseconds, doubled each retry (default 1000).
    pub base_ms: Option<u64>,
}

/// The longest a server's `Retry-After` can make a run wait before one retry.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub attempts: u32,
    pub base: Duration,
    pub max_delay: Duration,
}

impl RetryPolicy {
    pub fn from_settings(s: Option<RetrySettings>) -> Self {
        RetryPolicy {
            attempts: s.and_then(|s| s.attempts).unwrap_or(5),
            base: Duration::from_millis(s.and_then(|s| s.base_ms).unwrap_or(1000)),
            max_delay: Duration::from_secs(60),
        }
    }

    /// Backoff for retry `n` (1-based): base·2ⁿ⁻¹ with jitter in [½, 1], capped; a server's
    /// `Retry-After` wins when it asks for longer (up to [`MAX_RETRY_AFTER`]).
    pub fn delay(&self, n: u32, retry_after: Option<Duration>, jitter: f64) -> Duration {
        let doubling = 1u32.checked_shl(n.saturating_sub(1).min(16)).unwrap_or(1);
        let exp = self.base.saturating_mul(doubling);
        // In [½, 1] whatever `jitter` is (NaN counts as 0).
        let factor = if jitter.is_nan() {
            0.5
        } else {
            0.5 + jitter.clamp(0.0, 1.0) / 2.0
        };
        let backoff = exp.min(self.max_delay).mul_f64(factor);
        match retry_after {
            Some(ra) => backoff.max(ra.min(MAX_RETRY_AFTER)),
            None => backoff,
        }
    }
}

/// One retry, for whoever shows progress.
#[derive(Debug, Clone)]
pub struct Retry {
    pub attempt: u32,
    pub of: u32,
    pub delay: Duration,
    pub error: String,
    /// The failed attempt had already streamed text: that text is void, the answer starts
    /// over.
    pub discard_text: bool,
}

pub type RetryNotice = Arc<dyn Fn(Retry) + Send + Sync>;

pub struct Retrying {
    inner: Arc<dyn Provider>,
    policy: RetryPolicy,
    notice: RetryNotice,
}

impl Retrying {
    pub fn new(inner: Arc<dyn Provider>, policy: RetryPolicy, notice: RetryNotice) -> Self {
        Retrying {
            inner,
            policy,
            notice,
        }
    }
}

impl Provider for Retrying {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn turn<'a>(&'a self, request: &'a Request<'a>, text: TextSink<'a>) -> TurnFuture<'a> {
        Box::pin(async move {
            let mut n = 0;
            loop {
                let streamed = std::sync::atomic::AtomicBool::new(false);
                let sink = |t: &str| {
                    streamed.store(true, std::sync::atomic::Ordering::Relaxed);
                    text(t)
                };
                match self.inner.turn(request, &sink).await {
                    Ok(turn) => return Ok(turn),
                    Err(e) if e.is_retryable() && n < self.policy.attempts => {
                        n = n.saturating_add(1);
                        let retry_after = match &e {
                            LlmError::Status { retry_after, .. } => *retry_after,
                            _ => None,
                        };
                        let delay = self.policy.delay(n, retry_after, jitter());
                        (self.notice)(Retry {
                            attempt: n,
                            of: self.policy.attempts,
                            delay,
                            error: e.to_string(),
                            discard_text: streamed.load(std::sync::atomic::Ordering::Relaxed),
                        });
                        tokio::time::sleep(delay).await;
                    }
                    Err(e) if e.is_retryable() => {
                        return Err(match e {
                            LlmError::Status {
                                provider,
                                status,
                                message,
                                retry_after,
                            } => LlmError::Status {
                                provider,
                                status,
                                message: format!("{message} (gave up after {n} retries)"),
                                retry_after,
                            },
                            LlmError::Transport { provider, message } => LlmError::Transport {
                                provider,
                                message: format!("{message} (gave up after {n} retries)"),
                            },
                            LlmError::Stream {
                                provider,
                                kind,
                                message,
                                retryable,
                            } => LlmError::Stream {
                                provider,
                                kind,
                                message: format!("{message} (gave up after {n} retries)"),
                                retryable,
                            },
                            other => other,
                        });
                    }
                    Err(e) => return Err(e),
                }
            }
        })
    }
}

/// Jitter from the clock's low bits: enough to keep parallel runs from retrying in step,
/// without a random-number crate for one number.
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut x = u64::from(nanos) ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x.wrapping_shl(13);
    x ^= x.wrapping_shr(7);
    x ^= x.wrapping_shl(17);
    (x.checked_rem(10_000).unwrap_or(0)) as f64 / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_and_retry_after_wins() {
        let p = RetryPolicy {
            attempts: 5,
            base: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        assert_eq!(p.delay(1, None, 1.0), Duration::from_millis(100));
        assert_eq!(p.delay(2, None, 1.0), Duration::from_millis(200));
        assert_eq!(p.delay(2, None, 0.0), Duration::from_millis(100));
        assert_eq!(p.delay(10, None, 1.0), Duration::from_secs(1));
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(3)), 0.5),
            Duration::from_secs(3)
        );
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(900)), 0.5),
            Duration::from_secs(300)
        );
        // A Retry-After shorter than the backoff does not shorten it.
        assert_eq!(
            p.delay(3, Some(Duration::from_millis(5)), 1.0),
            Duration::from_millis(400)
        );
    }
}
