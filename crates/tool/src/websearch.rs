//! `websearch`: a web search through the configured service ([`super::search`]), on the
//! host. OpenCode's parameters and permission (`websearch`, the query as the pattern).

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolResult, lenient, search};
use runner_permission::PermissionRequest;

/// How long one search may take.
const LIMIT: Duration = Duration::from_secs(25);

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchType {
    Auto,
    Fast,
    Deep,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Livecrawl {
    Fallback,
    Preferred,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebSearchParams {
    /// What to search the web for
    pub query: String,
    /// How many results to return (default 8)
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    #[schemars(with = "Option<u64>")]
    pub num_results: Option<u64>,
    /// fallback (default): fetch pages fresh only when the index has nothing; preferred: fetch fresh first
    #[serde(default)]
    pub livecrawl: Option<Livecrawl>,
    /// auto (default), fast or deep
    #[serde(default, rename = "type")]
    pub search_type: Option<SearchType>,
    /// At most this many characters of text for all results together
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    #[schemars(with = "Option<u64>")]
    pub context_max_characters: Option<u64>,
}

pub struct WebSearchTool;

impl Tool for WebSearchTool {
    type Params = WebSearchParams;

    fn id(&self) -> &'static str {
        "websearch"
    }

    fn description(&self) -> &'static str {
        include_str!("websearch.txt")
    }

    async fn permissions(
        &self,
        params: &WebSearchParams,
        _ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        Ok(vec![query_ask("websearch", &params.query)?])
    }

    async fn execute(&self, params: WebSearchParams, ctx: &ToolContext) -> ToolResult {
        ctx.ask_all(self.permissions(&params, ctx).await?).await?;
        let service = search::configured(ctx)?;
        let mut args = Map::new();
        args.insert("query".into(), json!(params.query));
        args.insert(
            "type".into(),
            json!(match params.search_type.unwrap_or(SearchType::Auto) {
                SearchType::Auto => "auto",
                SearchType::Fast => "fast",
                SearchType::Deep => "deep",
            }),
        );
        args.insert("numResults".into(), json!(params.num_results.unwrap_or(8)));
        args.insert(
            "livecrawl".into(),
            json!(match params.livecrawl.unwrap_or(Livecrawl::Fallback) {
                Livecrawl::Fallback => "fallback",
                Livecrawl::Preferred => "preferred",
            }),
        );
        if let Some(max) = params.context_max_characters {
            args.insert("contextMaxCharacters".into(), json!(max));
        }
        let text = service.call("web_search_exa", args, LIMIT, ctx).await?;
        Ok(answer(
            &params.query,
            text,
            "The search found nothing; try other words.",
        ))
    }
}

/// The ask every search makes: `permission` for the query itself.
pub(crate) fn query_ask(permission: &str, query: &str) -> Result<PermissionRequest, ToolError> {
    let query = query.trim();
    if query.is_empty() {
        return Err(ToolError::Failed("query must not be empty".into()));
    }
    Ok(
        PermissionRequest::new(permission, vec![query.to_string()], vec!["*".into()])
            .with_metadata(json!({ "query": query })),
    )
}

/// The tool's output: the service's text, or `empty` when it had none.
pub(crate) fn answer(query: &str, text: String, empty: &str) -> ToolOutput {
    let output = if text.trim().is_empty() {
        empty.to_string()
    } else {
        text
    };
    ToolOutput {
        title: query.to_string(),
        output,
        metadata: Map::<String, Value>::new(),
        attachments: Vec::new(),
    }
}
