//! The built-in tools, in the order models are shown them. A list of its own, above the
//! registry and every tool: the registry knows how to hold and find tools, not which exist,
//! so a tool that itself calls the registry (`batch`) is no circle.

use std::sync::Arc;

use super::DynTool;
use super::registry::Registry;

impl Registry {
    /// Every built-in tool, in the order models are shown them.
    pub fn builtin() -> Self {
        let tools: Vec<Arc<dyn DynTool>> = vec![
            Arc::new(super::bash::BashTool),
            Arc::new(super::read::ReadTool),
            Arc::new(super::write::WriteTool),
            Arc::new(super::edit::EditTool),
            Arc::new(super::multiedit::MultiEditTool),
            Arc::new(super::apply_patch::ApplyPatchTool),
            Arc::new(super::glob::GlobTool),
            Arc::new(super::grep::GrepTool),
            Arc::new(super::list::ListTool),
            Arc::new(super::todo::TodoWriteTool),
            Arc::new(super::todo::TodoReadTool),
            Arc::new(super::question::QuestionTool),
            Arc::new(super::webfetch::WebFetchTool),
            Arc::new(super::batch::BatchTool),
            Arc::new(super::invalid::InvalidTool),
        ];
        Registry::of(tools)
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::builtin()
    }
}
