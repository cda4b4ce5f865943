//! `runner`: a sandboxed agent runner. See `ARCHITECTURE.md` for the shape of the whole.

pub mod cli;
