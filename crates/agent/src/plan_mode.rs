//! Plan mode: `plan_exit` hands a session from `plan` to `build` once the person approves
//! the plan, and `plan_enter` hands it from `build` to `plan` once they agree to plan first
//! (OpenCode's two tools). The approval is a confirmation, never a rule's: no config can
//! wave a session out of plan mode, and headless, `--ask` decides. The switch itself is
//! made by the step loop between steps ([`super::Agent::switch_to`]): the conversation, its
//! files read and its todo list carry over; the system prompt, the rules and the tools are
//! the new agent's.

use std::sync::Weak;

use schemars::JsonSchema;
use serde::Deserialize;

use super::Runtime;
use super::agents::PLANS;
use runner_permission::PermissionRequest;
use runner_tool::{Tool, ToolContext, ToolError, ToolOutput, ToolResult};

/// Neither tool takes arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NoParams {}

/// Which way a tool hands the session over.
#[derive(Clone, Copy)]
enum Direction {
    /// `plan` → `build`.
    Exit,
    /// `build` → `plan`.
    Enter,
}

impl Direction {
    fn to(self) -> &'static str {
        match self {
            Direction::Exit => "build",
            Direction::Enter => "plan",
        }
    }
}

/// `plan_exit`: the plan is ready; ask to hand the session to `build`.
pub struct PlanExit {
    rt: Weak<Runtime>,
    session: String,
}

/// `plan_enter`: ask to hand the session to `plan` before changing anything.
pub struct PlanEnter {
    rt: Weak<Runtime>,
    session: String,
}

impl PlanExit {
    pub fn new(rt: Weak<Runtime>, session: &str) -> Self {
        PlanExit {
            rt,
            session: session.to_string(),
        }
    }
}

impl PlanEnter {
    pub fn new(rt: Weak<Runtime>, session: &str) -> Self {
        PlanEnter {
            rt,
            session: session.to_string(),
        }
    }
}

impl Tool for PlanExit {
    type Params = NoParams;

    fn id(&self) -> &'static str {
        "plan_exit"
    }

    fn description(&self) -> &'static str {
        include_str!("plan_exit.txt")
    }

    async fn permissions(
        &self,
        _params: &NoParams,
        _ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        Ok(Vec::new())
    }

    async fn execute(&self, _params: NoParams, ctx: &ToolContext) -> ToolResult {
        hand_over(&self.rt, &self.session, Direction::Exit, ctx).await
    }
}

impl Tool for PlanEnter {
    type Params = NoParams;

    fn id(&self) -> &'static str {
        "plan_enter"
    }

    fn description(&self) -> &'static str {
        include_str!("plan_enter.txt")
    }

    async fn permissions(
        &self,
        _params: &NoParams,
        _ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        Ok(Vec::new())
    }

    async fn execute(&self, _params: NoParams, ctx: &ToolContext) -> ToolResult {
        hand_over(&self.rt, &self.session, Direction::Enter, ctx).await
    }
}

/// Asks the person; on yes, leaves the switch for the step loop and tells the model what
/// it is now.
async fn hand_over(
    rt: &Weak<Runtime>,
    session: &str,
    direction: Direction,
    ctx: &ToolContext,
) -> ToolResult {
    let rt = rt
        .upgrade()
        .ok_or_else(|| ToolError::Failed("the session is over".into()))?;
    let (permission, question) = match direction {
        Direction::Exit => (
            "plan_exit",
            format!(
                "The plan is ready (under {PLANS}/). Switch to the build agent and carry it out?"
            ),
        ),
        Direction::Enter => (
            "plan_enter",
            format!(
                "Switch to the plan agent and write a plan under {PLANS}/ before changing anything?"
            ),
        ),
    };
    let mut request = PermissionRequest::new(permission, vec![direction.to().into()], Vec::new())
        .with_metadata(serde_json::json!({ "question": question, "to": direction.to() }));
    request.tool = Some(format!(
        "{permission} (switch to the {} agent)",
        direction.to()
    ));
    if let Err(e) = ctx.gate.confirm(&request).await {
        return Err(ToolError::Failed(match direction {
            Direction::Exit => format!(
                "The user did not approve leaving plan mode ({e}). Stay in plan mode: improve the plan, or ask the user what it is missing."
            ),
            Direction::Enter => format!(
                "The user did not agree to switch to plan mode ({e}). Go on as the build agent."
            ),
        }));
    }
    rt.request_handoff(session, direction.to());
    Ok(ToolOutput {
        title: format!("switch to {}", direction.to()),
        output: match direction {
            Direction::Exit => format!(
                "The user approved the plan. From your next step you are the build agent: you may edit files and run commands. Carry out the plan in {PLANS}/."
            ),
            Direction::Enter => format!(
                "The user agreed to plan first. From your next step you are the plan agent: study the code and write the plan as Markdown under {PLANS}/; do not change the project."
            ),
        },
        metadata: runner_tool::meta! { "agent" => direction.to() },
        attachments: Vec::new(),
    })
}
