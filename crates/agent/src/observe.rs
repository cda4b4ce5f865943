//! A layer around the permission gate that reports each decision (events, session file)
//! and remembers a refusal, which ends the run unless `--continue-on-deny`: a person who
//! said no (or nobody there to say yes) is not something the model should work around.
//! A rule's deny does not end it; the model reads the rule and may do the task another way.

use std::sync::{Arc, Mutex};

use runner_permission::gate::RuleGate;
use runner_permission::rules::Action;
use runner_permission::{AskFuture, PermissionError, PermissionGate, PermissionRequest};
use runner_tool::UserChannel;
use runner_tool::question::{AnswerFuture, Question};

use super::events::{Event, EventSink};
use super::record::{Record, Recorder};

pub struct ObservedGate {
    pub inner: Arc<RuleGate>,
    pub session: String,
    pub events: Arc<dyn EventSink>,
    pub recorder: Arc<Recorder>,
    /// Shared by a run and its subagents: the first refusal.
    pub refused: Arc<Mutex<Option<String>>>,
}

impl PermissionGate for ObservedGate {
    fn ask<'a>(&'a self, request: &'a PermissionRequest) -> AskFuture<'a> {
        Box::pin(async move {
            // The rules are judged once: the gate says how it decided, and starts the view's
            // "asking" only when a person is asked.
            let (action, result) = self
                .inner
                .ask_with(request, || Asking::start(self.events.as_ref()))
                .await;
            // Plain allows by rule are the common case and not news.
            self.report(request, action == Action::Allow, true, result)
        })
    }

    fn confirm<'a>(&'a self, request: &'a PermissionRequest) -> AskFuture<'a> {
        Box::pin(async move {
            // A refused confirmation (a repository's MCP server nobody approved) leaves
            // that one thing out; the run goes on without it.
            let result = {
                let _asking = Asking::start(self.events.as_ref());
                self.inner.confirm(request).await
            };
            self.report(request, false, false, result)
        })
    }

    fn disabled(&self, permission: &str) -> Option<runner_permission::rules::Rule> {
        self.inner.disabled(permission)
    }
}

impl ObservedGate {
    /// Reports a decision (unless `quiet` and allowed) and, when `ends_run`, remembers a
    /// refusal.
    fn report(
        &self,
        request: &PermissionRequest,
        quiet: bool,
        ends_run: bool,
        result: Result<(), PermissionError>,
    ) -> Result<(), PermissionError> {
        if quiet && result.is_ok() {
            return result;
        }
        let (decision, message) = match &result {
            Ok(()) => ("allow", None),
            Err(e @ PermissionError::Denied(_)) => ("deny", Some(e.to_string())),
            Err(e @ PermissionError::Rejected { .. }) => ("reject", Some(e.to_string())),
            Err(e @ PermissionError::Unanswered { .. }) => ("refused", Some(e.to_string())),
        };
        if ends_run && matches!(decision, "reject" | "refused") {
            let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
            if refused.is_none() {
                *refused = Some(format!(
                    "{} {} was not approved: {}",
                    request.permission,
                    request.patterns.join(", "),
                    message.clone().unwrap_or_default()
                ));
            }
        }
        self.events.emit(&Event::Permission {
            session: self.session.clone(),
            tool: request.tool.clone(),
            permission: request.permission.clone(),
            patterns: request.patterns.clone(),
            decision: decision.to_string(),
            message,
        });
        self.recorder.write(&Record::Permission {
            session: self.session.clone(),
            permission: request.permission.clone(),
            patterns: request.patterns.clone(),
            decision: decision.to_string(),
        });
        result
    }
}

/// The view told that a question may be on the terminal, for as long as it is asked (an
/// ask dropped mid-way, its call cancelled, still says it ended).
struct Asking<'a>(&'a dyn EventSink);

impl<'a> Asking<'a> {
    fn start(events: &'a dyn EventSink) -> Self {
        events.asking(true);
        Asking(events)
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.0.asking(false);
    }
}

/// The person's channel for the `question` tool, telling the view while a question is up
/// (as [`ObservedGate`] does for permission prompts).
pub struct ObservedUser {
    pub inner: Arc<dyn UserChannel>,
    pub events: Arc<dyn EventSink>,
}

impl UserChannel for ObservedUser {
    fn ask<'a>(&'a self, questions: &'a [Question]) -> AnswerFuture<'a> {
        Box::pin(async move {
            let _asking = Asking::start(self.events.as_ref());
            self.inner.ask(questions).await
        })
    }
}
