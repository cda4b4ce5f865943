//! From `provider/model` to a provider: built-in names (`openai`, `anthropic`, `replay`)
//! configured from the environment as the providers' own SDKs name it, or `[provider.NAME]`
//! tables for anything that speaks one of the two formats (Ollama, vLLM, llama.cpp,
//! LiteLLM, OpenRouter). Keys are read here, on the host, and go no further than the
//! request headers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::anthropic::Anthropic;
use super::endpoint::Endpoint;
use super::openai::OpenAi;
use super::replay::Replay;
use super::retry::RetrySettings;
use super::retry::{RetryPolicy, Retrying};
use super::{LlmError, Provider};

/// A `[provider.NAME]` table of a config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSettings {
    /// `openai` (Chat Completions, the default) or `anthropic` (Messages).
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub base_url: Option<String>,
    /// The environment variable holding the key (the key itself never sits in a file).
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The model's context window in tokens.
    pub context_window: Option<u64>,
    /// Output tokens to ask for per turn (Anthropic requires a number).
    pub max_tokens: Option<u32>,
    /// Seconds a streaming answer may stay silent before the turn counts as cut and is
    /// tried again (default 300: reasoning models can think for minutes between bytes).
    pub idle_timeout_secs: Option<u64>,
    /// What each model costs, by model name: runner knows no prices of its own (they
    /// change), so a cost is reported only where the config gives one.
    #[serde(default)]
    pub prices: BTreeMap<String, Price>,
}

/// A model's price in US dollars per million tokens. Cache reads and writes cost what
/// input does unless given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cache_read: Option<f64>,
    pub cache_write: Option<f64>,
}

impl Price {
    /// What `usage` cost, in US dollars.
    pub fn cost(&self, usage: &super::Usage) -> f64 {
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1e6;
        per(usage.input, self.input)
            + per(usage.output, self.output)
            + per(usage.cache_read, self.cache_read.unwrap_or(self.input))
            + per(usage.cache_write, self.cache_write.unwrap_or(self.input))
    }
}

/// What the loop needs to know about the model besides its provider.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// `provider/model`, as the user wrote it.
    pub spec: String,
    pub provider: String,
    pub model: String,
    pub context_window: u64,
    /// From the provider's table; unset, OpenAI-style servers pick their own limit.
    pub max_tokens: Option<u32>,
    /// From the provider's `prices`, where the config gives this model's.
    pub price: Option<Price>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    OpenAi,
    Anthropic,
    Replay,
}

/// Splits `provider/model` at the first slash: model names may hold slashes of their own
/// (`openrouter/anthropic/claude-sonnet-4`).
pub fn split(spec: &str) -> Result<(&str, &str), LlmError> {
    match spec.split_once('/') {
        Some((p, m)) if !p.is_empty() && !m.is_empty() => Ok((p, m)),
        _ => Err(LlmError::Setup(format!(
            "model {spec:?} is not provider/model (for example anthropic/claude-sonnet-4-5, openai/gpt-5, replay/session.jsonl)"
        ))),
    }
}

/// Builds the provider for `spec`, wrapped in retries.
pub fn resolve(
    spec: &str,
    providers: &BTreeMap<String, ProviderSettings>,
    retry: Option<RetrySettings>,
    on_retry: super::retry::RetryNotice,
) -> Result<(Arc<dyn Provider>, ModelInfo), LlmError> {
    let (name, model) = split(spec)?;
    let table = providers.get(name).cloned().unwrap_or_default();
    let kind = match (table.kind.as_deref(), name) {
        (Some("openai"), _) => Kind::OpenAi,
        (Some("anthropic"), _) => Kind::Anthropic,
        (Some(other), _) => {
            return Err(LlmError::Setup(format!(
                "provider {name}: type {other:?} is not openai or anthropic"
            )));
        }
        (None, "anthropic") => Kind::Anthropic,
        (None, "replay") => Kind::Replay,
        (None, "openai") => Kind::OpenAi,
        (None, _) if table.base_url.is_some() => Kind::OpenAi,
        (None, _) => {
            return Err(LlmError::Setup(format!(
                "unknown provider {name:?}: use openai, anthropic or replay, or describe it in a [provider.{name}] table with base_url (and type = \"anthropic\" if it speaks Anthropic's format)"
            )));
        }
    };
    let info = |recorded_window: Option<u64>| ModelInfo {
        spec: spec.to_string(),
        provider: name.to_string(),
        model: model.to_string(),
        context_window: table
            .context_window
            .or(recorded_window)
            .unwrap_or_else(|| default_window(kind, model)),
        max_tokens: table.max_tokens,
        price: table.prices.get(model).copied(),
    };
    let provider: Arc<dyn Provider> = match kind {
        Kind::Replay => {
            let replay = Replay::open(&PathBuf::from(model))?;
            // A replay measures against the recorded run's window, so that it prunes and
            // compacts where the run did. A recording never fails in a way that a retry
            // would fix.
            let info = info(replay.context_window());
            return Ok((Arc::new(replay), info));
        }
        Kind::OpenAi => Arc::new(OpenAi::new(endpoint(
            name,
            &table,
            "OPENAI",
            "https://api.openai.com/v1",
        )?)?),
        Kind::Anthropic => Arc::new(Anthropic::new(endpoint(
            name,
            &table,
            "ANTHROPIC",
            "https://api.anthropic.com",
        )?)?),
    };
    let info = info(None);
    let policy = RetryPolicy::from_settings(retry);
    Ok((Arc::new(Retrying::new(provider, policy, on_retry)), info))
}

/// The endpoint from the table, else the SDKs' variables (`OPENAI_BASE_URL` includes `/v1`,
/// `ANTHROPIC_BASE_URL` does not), else the public API.
fn endpoint(
    name: &str,
    table: &ProviderSettings,
    prefix: &str,
    public: &str,
) -> Result<Endpoint, LlmError> {
    let builtin = matches!(name, "openai" | "anthropic");
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let base_url = table
        .base_url
        .clone()
        .or_else(|| {
            if builtin {
                env(&format!("{prefix}_BASE_URL"))
            } else {
                None
            }
        })
        .unwrap_or_else(|| public.to_string());
    let key_var = table
        .api_key_env
        .clone()
        .unwrap_or_else(|| format!("{prefix}_API_KEY"));
    let api_key = env(&key_var);
    // A local server (Ollama, llama.cpp) needs no key; the public APIs always do.
    if api_key.is_none() && base_url == public {
        return Err(LlmError::Setup(format!(
            "no API key for {name}: set {key_var} in the environment (it stays on the host; commands in the sandbox never see it)"
        )));
    }
    Ok(Endpoint {
        name: name.to_string(),
        base_url,
        api_key,
        api_key_env: key_var,
        headers: table
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        idle_timeout: Duration::from_secs(table.idle_timeout_secs.unwrap_or(300).max(1)),
    })
}

fn default_window(kind: Kind, model: &str) -> u64 {
    match kind {
        Kind::Anthropic => 200_000,
        _ if model.starts_with("gpt-4.1") => 1_000_000,
        _ if model.starts_with("gpt-5") => 400_000,
        _ => 128_000,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_specs_split_at_the_first_slash() {
        assert_eq!(
            split("openrouter/anthropic/claude").unwrap(),
            ("openrouter", "anthropic/claude")
        );
        assert!(split("gpt-5").is_err());
        assert!(split("/x").is_err());
    }

    #[test]
    fn a_named_provider_needs_a_table_and_keys_stay_out_of_debug() {
        let e = resolve("ollama/qwen", &BTreeMap::new(), None, Arc::new(|_| {}))
            .err()
            .unwrap();
        assert!(e.to_string().contains("[provider.ollama]"), "{e}");
        let ep = Endpoint {
            name: "x".into(),
            base_url: "http://h".into(),
            api_key: Some("sk-secret".into()),
            api_key_env: "X_KEY".into(),
            headers: vec![],
            idle_timeout: Duration::from_secs(1),
        };
        assert!(!format!("{ep:?}").contains("sk-secret"));
    }
}
