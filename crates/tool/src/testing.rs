//! A context for the tools' unit tests: a temporary worktree behind an in-process sandbox
//! server and a gate that records every ask and allows it.

use std::path::PathBuf;
use std::sync::Arc;

use super::truncate::Truncator;
use super::{Conversation, ToolContext};
use runner_permission::{AskPolicy, PolicyGate};

pub struct TestCtx {
    /// Keeps the temporary directory alive.
    pub tmp: tempfile::TempDir,
    /// The worktree, canonical so that it matches what the sandbox reports.
    pub wt: PathBuf,
    pub gate: Arc<PolicyGate>,
    pub ctx: ToolContext,
}

impl TestCtx {
    pub async fn new() -> Self {
        Self::with_policy(AskPolicy::Allow).await
    }

    pub async fn with_policy(policy: AskPolicy) -> Self {
        let tmp = tempfile::Builder::new()
            .prefix("runner-tool-test-")
            .tempdir()
            .expect("temp dir");
        let base = std::fs::canonicalize(tmp.path()).expect("canonical temp dir");
        let wt = base.join("wt");
        let out = base.join("out");
        std::fs::create_dir_all(&wt).expect("worktree");
        std::fs::create_dir_all(&out).expect("output dir");
        let sandbox = runner_sandbox::local::in_process(&wt, std::slice::from_ref(&out))
            .await
            .expect("sandbox starts");
        let gate = Arc::new(PolicyGate::new(policy));
        let ctx = ToolContext::new(
            Arc::new(sandbox),
            Arc::new(Conversation::new("test")),
            gate.clone(),
            Arc::new(Truncator::new(out)),
        );
        TestCtx { tmp, wt, gate, ctx }
    }

    /// Writes a worktree file, creating its parents.
    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let path = self.wt.join(rel);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("parents");
        std::fs::write(&path, content).expect("write");
        path
    }

    /// Every ask so far as (permission, patterns, always).
    pub fn asks(&self) -> Vec<(String, Vec<String>, Vec<String>)> {
        self.gate
            .asked()
            .into_iter()
            .map(|r| (r.permission, r.patterns, r.always))
            .collect()
    }
}

/// An ask as [`TestCtx::asks`] lists it.
pub fn ask(
    permission: &str,
    patterns: &[&str],
    always: &[&str],
) -> (String, Vec<String>, Vec<String>) {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
    (permission.to_string(), v(patterns), v(always))
}
