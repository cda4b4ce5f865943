//! The targets: one decoder each, fed bytes it did not choose.
//!
//! Each target names its bounds. `memory` is what the host may hold for one input; it is
//! set well above what a correct decoder needs for `max_len` bytes, and well below what a
//! decoder that believes a peer's length field would reserve. `time` is generous for a debug
//! build on a loaded 2-core machine: it catches quadratic blow-ups and loops, not slowness.

use std::time::Duration;

mod framing;
mod llm;
mod network;
mod protocol;
mod text;

pub struct Target {
    pub name: &'static str,
    /// What the target is about, for `runner-fuzz list`.
    pub about: &'static str,
    pub run: fn(&[u8]),
    /// Inputs made by the real encoders, so that the seeds stay valid as formats change
    /// (files in `corpus/NAME/` are added to these).
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Tokens the mutator drops in: header names, markers, keywords.
    pub dictionary: &'static [&'static [u8]],
    pub max_len: usize,
    pub memory: usize,
    pub time: Duration,
}

const MIB: usize = 1 << 20;

pub static TARGETS: &[Target] = &[
    protocol::FRAMES,
    protocol::CLIENT,
    network::REQUEST,
    network::TUNNEL,
    network::SNI,
    network::INSPECTED,
    text::PATCH,
    text::BASH,
    framing::LSP,
    framing::LINES,
    llm::SSE,
    llm::OPENAI,
    llm::ANTHROPIC,
];

/// The target called `name`.
pub fn find(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
