//! `codesearch`: code examples and documentation for a query, through the configured
//! service ([`super::search`]), on the host. OpenCode's parameters and permission
//! (`codesearch`, the query as the pattern).

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, json};

use super::websearch::{answer, query_ask};
use super::{Tool, ToolContext, ToolError, ToolResult, lenient, search};
use runner_permission::PermissionRequest;

/// How long one search may take.
const LIMIT: Duration = Duration::from_secs(30);

/// The range of `tokensNum` the service takes, and the default.
const TOKENS: (u64, u64, u64) = (1000, 50_000, 5000);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CodeSearchParams {
    /// The library, API or tool, and what to do with it
    pub query: String,
    /// How many tokens of context to return: 1000 to 50000 (default 5000)
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    #[schemars(with = "Option<u64>")]
    pub tokens_num: Option<u64>,
}

pub struct CodeSearchTool;

impl Tool for CodeSearchTool {
    type Params = CodeSearchParams;

    fn id(&self) -> &'static str {
        "codesearch"
    }

    fn description(&self) -> &'static str {
        include_str!("codesearch.txt")
    }

    async fn permissions(
        &self,
        params: &CodeSearchParams,
        _ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        Ok(vec![query_ask("codesearch", &params.query)?])
    }

    async fn execute(&self, params: CodeSearchParams, ctx: &ToolContext) -> ToolResult {
        let (least, most, default) = TOKENS;
        let tokens = params.tokens_num.unwrap_or(default);
        if !(least..=most).contains(&tokens) {
            return Err(ToolError::Failed(format!(
                "tokensNum must be between {least} and {most}, got {tokens}"
            )));
        }
        ctx.ask_all(self.permissions(&params, ctx).await?).await?;
        let service = search::configured(ctx)?;
        let mut args = Map::new();
        args.insert("query".into(), json!(params.query));
        args.insert("tokensNum".into(), json!(tokens));
        let text = service
            .call("get_code_context_exa", args, LIMIT, ctx)
            .await?;
        Ok(answer(
            &params.query,
            text,
            "The search found no code for this; try naming the library and the task differently.",
        ))
    }
}
