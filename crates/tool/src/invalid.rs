//! Where calls go that cannot run: an unknown tool name or arguments that are not JSON.
//! Its output tells the model what was wrong, so the model can correct itself instead of the
//! loop failing.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Tool, ToolContext, ToolOutput, ToolResult};
use runner_permission::PermissionRequest;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct InvalidParams {
    /// The tool the model tried to call.
    pub tool: String,
    /// What was wrong with the call.
    pub error: String,
}

pub struct InvalidTool;

impl Tool for InvalidTool {
    type Params = InvalidParams;

    fn id(&self) -> &'static str {
        "invalid"
    }

    fn description(&self) -> &'static str {
        include_str!("invalid.txt")
    }

    /// It only explains an error to the model; there is nothing to allow.
    async fn permissions(
        &self,
        _params: &InvalidParams,
        _ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, super::ToolError> {
        Ok(Vec::new())
    }

    async fn execute(&self, params: InvalidParams, _ctx: &ToolContext) -> ToolResult {
        Ok(ToolOutput {
            title: "Invalid Tool".into(),
            output: format!(
                "The arguments provided to the tool are invalid: {}",
                params.error
            ),
            metadata: crate::meta! { "tool" => params.tool },
            attachments: Vec::new(),
        })
    }
}
