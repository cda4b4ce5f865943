//! `runner`: a sandboxed agent runner. See `ARCHITECTURE.md` for the shape of the whole.

pub mod agent;
pub mod cli;
pub mod config;
pub mod dirs;
pub mod display;
pub mod eval;
pub mod http;
pub mod llm;
pub mod network;
pub mod permission;
pub mod sandbox;
pub mod session;
pub mod tool;
pub mod workspace;
