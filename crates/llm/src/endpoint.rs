//! Where a provider's requests go: base URL, key and extra headers, read on the host and
//! used by both wire formats (`openai`, `anthropic`) and their stream reader.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::LlmError;

/// Where a provider's requests go. `Debug` leaves the key out, so no log can print it.
#[derive(Clone)]
pub struct Endpoint {
    pub name: String,
    pub base_url: String,
    pub api_key: Option<String>,
    pub headers: Vec<(String, String)>,
    /// How long a stream may go without a byte before the turn is given up and retried.
    pub idle_timeout: Duration,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl Endpoint {
    pub(crate) fn extra_headers(&self) -> Result<HeaderMap, LlmError> {
        let mut map = HeaderMap::new();
        for (k, v) in &self.headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                LlmError::Setup(format!(
                    "provider {}: {k:?} is not a header name",
                    self.name
                ))
            })?;
            let value = HeaderValue::from_str(v).map_err(|_| {
                LlmError::Setup(format!(
                    "provider {}: the value of header {k} is not valid",
                    self.name
                ))
            })?;
            map.insert(name, value);
        }
        Ok(map)
    }
}
