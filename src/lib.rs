//! `runner`: a sandboxed agent runner. See `ARCHITECTURE.md` for the shape of the whole.

pub mod cli;

// The layers carved out as crates of their own, under the names the rest of the code uses.
pub use runner_agent as agent;
pub use runner_agent::{config, session};
pub use runner_dirs as dirs;
pub use runner_display as display;
pub use runner_eval as eval;
pub use runner_http as http;
pub use runner_llm as llm;
pub use runner_network as network;
pub use runner_permission as permission;
pub use runner_sandbox as sandbox;
pub use runner_tool as tool;
pub use runner_workspace as workspace;
