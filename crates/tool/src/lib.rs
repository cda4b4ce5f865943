//! The tool system: what a tool is, the context a call runs in, and the tools themselves
//! (one file each, with its model-facing description in a `.txt` beside it).
//!
//! Tool logic runs on the host; every effect on files or processes goes through
//! [`ToolContext::sandbox`], so the same code runs behind every isolation backend.

mod builtin;
mod context;
mod diagnostics;
mod diff;
mod filetime;
pub mod registry;
pub mod truncate;

mod apply_patch;
mod bash;
pub mod batch;
pub mod codesearch;
mod collect;
pub mod edit;
mod glob;
mod grep;
pub mod hooks;
pub mod instructions;
mod invalid;
mod list;
pub mod lsp;
pub mod lsp_client;
pub mod mcp;
mod multiedit;
pub mod question;
mod read;
pub mod search;
pub mod server_error;
pub mod skill;
pub mod stdio;
pub mod todo;
pub mod user;
pub mod webfetch;
pub mod websearch;
mod write;

#[cfg(test)]
pub(crate) mod testing;

use std::future::Future;
use std::pin::Pin;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

pub use context::{Conversation, Progress, ProgressSink, Services, ToolContext};
pub use question::{Question, QuestionOption, TerminalUser, UserChannel};
pub use registry::{CallResult, Registry};
pub use skill::{Skill, SkillTool};
pub use todo::{Todo, TodoPriority, TodoStatus};

use runner_permission::{PermissionError, PermissionRequest};
use runner_sandbox::SandboxError;

/// What a successful call returns to the model (and to the CLI's `--json`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ToolOutput {
    pub title: String,
    pub output: String,
    pub metadata: Map<String, Value>,
    pub attachments: Vec<Attachment>,
}

/// A file handed to the model beside the text, such as an image the read tool loaded.
/// Written as OpenCode's file part: `{"type": "file", mime, url, filename}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename = "file")]
pub struct Attachment {
    pub mime: String,
    /// A `data:` URL with the base64 content.
    pub url: String,
    pub filename: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The tool could not do what was asked; the message tells the model why and what to do.
    #[error("{0}")]
    Failed(String),
    #[error(
        "The {tool} tool was called with invalid arguments: {message}.\nPlease rewrite the input so it satisfies the expected schema."
    )]
    InvalidArguments { tool: String, message: String },
    #[error(transparent)]
    Permission(#[from] PermissionError),
    #[error("The tool call was cancelled.")]
    Cancelled,
    #[error(transparent)]
    Sandbox(SandboxError),
}

impl From<SandboxError> for ToolError {
    fn from(e: SandboxError) -> Self {
        match e {
            // An API error is about the request (missing file, escape…): the model can act on
            // the message. A dead server is the runner's problem and stays distinguishable.
            SandboxError::Api(api) => ToolError::Failed(api.message),
            other => ToolError::Sandbox(other),
        }
    }
}

/// What a server says is for the model to act on (use grep instead, fix the call).
impl From<server_error::ServerError> for ToolError {
    fn from(e: server_error::ServerError) -> Self {
        ToolError::Failed(e.to_string())
    }
}

pub type ToolResult = Result<ToolOutput, ToolError>;

/// A tool with typed parameters. The JSON Schema the model sees is derived from `Params`,
/// so the schema and the validation can never disagree.
pub trait Tool: Send + Sync + 'static {
    type Params: DeserializeOwned + JsonSchema + Send;

    /// OpenCode's id for the tool, which models trained on OpenCode or Claude Code know.
    fn id(&self) -> &'static str;

    /// The model-facing description, kept in a text file beside the tool.
    fn description(&self) -> &str;

    /// Which end of a long output to keep.
    fn truncation(&self) -> truncate::Direction {
        truncate::Direction::Head
    }

    /// What a call with these parameters asks the permission gate, in the order it asks,
    /// without doing anything (only reads that locate the target, such as a stat). `execute`
    /// asks exactly these, so `runner permission check` shows the truth; the diff that edits
    /// attach for the person deciding is metadata only and is added when it exists.
    fn permissions(
        &self,
        params: &Self::Params,
        ctx: &ToolContext,
    ) -> impl Future<Output = Result<Vec<PermissionRequest>, ToolError>> + Send;

    fn execute(
        &self,
        params: Self::Params,
        ctx: &ToolContext,
    ) -> impl Future<Output = ToolResult> + Send;
}

pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = ToolResult> + Send + 'a>>;
pub type PermissionsFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<PermissionRequest>, ToolError>> + Send + 'a>>;

/// The object-safe face of [`Tool`] that the registry stores: it takes raw JSON and does the
/// validation itself.
pub trait DynTool: Send + Sync {
    fn id(&self) -> &'static str;
    fn description(&self) -> &str;
    fn parameters(&self) -> Value;
    fn truncation(&self) -> truncate::Direction;
    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a>;
    fn permissions<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> PermissionsFuture<'a>;
}

impl<T: Tool> DynTool for T {
    fn id(&self) -> &'static str {
        Tool::id(self)
    }

    fn description(&self) -> &str {
        Tool::description(self)
    }

    fn parameters(&self) -> Value {
        // Nested types (a todo, a question's options) are written out in place: not every
        // model API resolves `$ref`.
        let mut schema = schemars::generate::SchemaSettings::draft2020_12()
            .with(|s| s.inline_subschemas = true)
            .into_generator()
            .into_root_schema_for::<T::Params>()
            .to_value();
        if let Some(obj) = schema.as_object_mut() {
            obj.remove("$schema");
            obj.remove("title");
            // A tool without parameters still shows an (empty) object: some model APIs
            // reject an object schema without `properties`.
            if !obj.contains_key("properties") {
                obj.insert("properties".into(), Value::Object(Map::new()));
            }
        }
        schema
    }

    fn truncation(&self) -> truncate::Direction {
        Tool::truncation(self)
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let params = parse_params::<T>(self, args)?;
            self.execute(params, ctx).await
        })
    }

    fn permissions<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> PermissionsFuture<'a> {
        Box::pin(async move {
            let params = parse_params::<T>(self, args)?;
            Tool::permissions(self, &params, ctx).await
        })
    }
}

fn parse_params<T: Tool>(tool: &T, args: Value) -> Result<T::Params, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments {
        tool: Tool::id(tool).to_string(),
        message: e.to_string(),
    })
}

/// Numbers from models sometimes arrive as strings (`"offset": "20"`); OpenCode coerces
/// them, so do we, rather than bouncing a call whose meaning is clear.
pub(crate) mod lenient {
    use serde::{Deserialize, Deserializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumOrString {
        Num(f64),
        Str(String),
    }

    /// A required whole number, coerced like [`opt_u64`].
    pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        opt_u64(d)?.ok_or_else(|| serde::de::Error::custom("expected a number"))
    }

    pub fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        opt_i64(d)?
            .map(|v| {
                u64::try_from(v).map_err(|_| {
                    serde::de::Error::custom(format!("expected a non-negative number, got {v}"))
                })
            })
            .transpose()
    }

    pub fn opt_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        let value = match Option::<NumOrString>::deserialize(d)? {
            None => return Ok(None),
            Some(NumOrString::Num(n)) => n,
            Some(NumOrString::Str(s)) => s
                .trim()
                .parse::<f64>()
                .map_err(|_| serde::de::Error::custom(format!("expected a number, got {s:?}")))?,
        };
        if value.fract() != 0.0 || !value.is_finite() {
            return Err(serde::de::Error::custom(format!(
                "expected a whole number, got {value}"
            )));
        }
        Ok(Some(value as i64))
    }
}

/// Metadata from `key => value` pairs.
#[macro_export]
macro_rules! meta {
    ($($k:literal => $v:expr),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut m = serde_json::Map::new();
        $( m.insert($k.to_string(), serde_json::json!($v)); )*
        m
    }};
}
