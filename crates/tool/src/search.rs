//! The search service behind `websearch` and `codesearch`: Exa's hosted MCP endpoint, spoken
//! to over streamable HTTP from the host (like `webfetch` and remote MCP servers, and under
//! the same address rules). Offered only when the user's own config has a `[websearch]`
//! table: a repository's config may not name where the user's `EXA_API_KEY` goes.

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ContentBlock};
use serde::Deserialize;
use serde_json::Value;

use super::server_error::ServerError;
use super::{ToolContext, ToolError};

/// Exa's hosted MCP endpoint.
pub const EXA_URL: &str = "https://mcp.exa.ai/mcp";

/// The environment variable the key is read from (on the host; it never enters a sandbox).
pub const KEY_VARIABLE: &str = "EXA_API_KEY";

/// The `[websearch]` table of a config file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SearchSettings {
    /// Who answers: `exa` (the only one so far).
    pub provider: String,
    /// Another endpoint speaking Exa's MCP tools (a proxy of the company's, a test server).
    pub url: Option<String>,
}

/// A configured search service: where it is and the key it is sent.
#[derive(Debug, Clone)]
pub struct Search {
    pub url: String,
    key: Option<String>,
}

impl Search {
    /// The service the settings name, with the key from the host's environment.
    pub fn from_settings(settings: &SearchSettings) -> Result<Search, ServerError> {
        if settings.provider != "exa" {
            return Err(ServerError::Config(format!(
                "[websearch] provider = {:?}: the only provider is \"exa\"",
                settings.provider
            )));
        }
        let key = std::env::var(KEY_VARIABLE).ok().filter(|k| !k.is_empty());
        Ok(Search {
            url: settings.url.clone().unwrap_or_else(|| EXA_URL.to_string()),
            key,
        })
    }

    /// Calls the service's `tool` with `arguments` and returns its text, within `limit`.
    pub async fn call(
        &self,
        tool: &'static str,
        arguments: serde_json::Map<String, Value>,
        limit: Duration,
        ctx: &ToolContext,
    ) -> Result<String, ToolError> {
        let failed = |what: String| ToolError::Failed(format!("The search at {} {what}", self.url));
        let run = async {
            let client = self.connect(ctx).await.map_err(|e| failed(e.to_string()))?;
            let result = client
                .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(arguments))
                .await
                .map_err(|e| failed(format!("failed: {e}")));
            let _ = client.cancel().await;
            let result = result?;
            let text: Vec<String> = result
                .content
                .iter()
                .filter_map(|c| match c {
                    ContentBlock::Text(t) => Some(t.text.clone()),
                    _ => None,
                })
                .collect();
            if result.is_error == Some(true) {
                return Err(failed(format!(
                    "answered with an error: {}",
                    text.join("\n")
                )));
            }
            Ok(text.join("\n\n"))
        };
        tokio::select! {
            r = tokio::time::timeout(limit, run) => r.unwrap_or_else(|_| {
                Err(failed(format!("did not answer within {} s", limit.as_secs())))
            }),
            _ = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
        }
    }

    /// An MCP session with the service: checked against the host's address rules first,
    /// the key sent as `x-api-key` to this endpoint and to no redirect elsewhere.
    async fn connect(
        &self,
        ctx: &ToolContext,
    ) -> Result<rmcp::service::RunningService<rmcp::RoleClient, ()>, ServerError> {
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let parsed = reqwest::Url::parse(&self.url)
            .map_err(|e| ServerError::Config(format!("is not a URL: {e}")))?;
        ctx.services
            .outbound
            .check(&parsed)
            .await
            .map_err(|e| ServerError::NotContacted(format!("was not contacted: {e}")))?;
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(key) = &self.key {
            let mut value = reqwest::header::HeaderValue::from_str(key).map_err(|_| {
                ServerError::Config(format!(
                    "cannot be sent the key: {KEY_VARIABLE} holds characters a header cannot carry"
                ))
            })?;
            value.set_sensitive(true);
            headers.insert("x-api-key", value);
        }
        let client = ctx
            .services
            .outbound
            .client_with_headers(headers)
            .map_err(|e| ServerError::Failed(e.to_string()))?;
        let transport = StreamableHttpClientTransport::with_client(
            client,
            StreamableHttpClientTransportConfig::with_uri(self.url.clone()),
        );
        ().serve(transport)
            .await
            .map_err(
                |e| match runner_network::outbound::Outbound::refusal_in(&e) {
                    Some(refused) => {
                        ServerError::NotContacted(format!("was not contacted: {refused}"))
                    }
                    None => ServerError::Failed(format!("did not answer as an MCP server: {e}")),
                },
            )
    }
}

/// The service of this session, or the error a search tool gives without one.
pub fn configured(ctx: &ToolContext) -> Result<&Search, ToolError> {
    ctx.services.search.as_deref().ok_or_else(|| {
        ToolError::Failed(
            "No search service is configured: the user can add [websearch] provider = \"exa\" to their own config and set EXA_API_KEY.".into(),
        )
    })
}
