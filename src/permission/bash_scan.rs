//! Placeholder until the tree-sitter scan lands (same API).

use std::path::Path;

pub struct ScanContext<'a> {
    pub cwd: &'a Path,
    pub worktree: &'a Path,
    pub home: Option<&'a Path>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BashScan {
    pub patterns: Vec<String>,
    pub always: Vec<String>,
    pub external: Vec<String>,
    pub reads: Vec<String>,
}

pub fn scan(command: &str, _cx: &ScanContext) -> BashScan {
    let head = command.split_whitespace().next().unwrap_or_default();
    BashScan {
        patterns: vec![command.to_string()],
        always: vec![format!("{head} *")],
        ..BashScan::default()
    }
}
