//! The rule gate: every ask a tool makes is judged against the configured rules and the
//! session's approvals, and only what the rules leave open reaches a person.
//!
//! The state machine is OpenCode's (`permission/next.ts`): a pattern that evaluates to deny
//! fails the call at once; if every pattern is allowed the call goes on; otherwise the ask
//! waits in `pending` until a reply. Replies:
//! - once: this call goes on;
//! - always: also remembers the ask's always-patterns as allow rules, and resolves every other
//!   pending ask of the session they now cover;
//! - reject: fails this call (with the person's feedback for the model, if any) and every
//!   other pending ask of the session, since the person has stopped the turn.
//!
//! Who replies is an [`Asker`]: a terminal prompt, a fixed policy, or a test. An asker that
//! cannot answer says so and the call fails at once: nothing waits for an answer that cannot
//! come.
//!
//! Every decision the gate reaches is told to its audit trail ([`RuleGate::with_audit`]),
//! with the rule that decided (or sent it to a person) and how a person answered. An ask
//! dropped before its answer (the turn was cancelled) decided nothing and is not told.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use super::rules::{self, Action, Rule, Source};
use super::{AskFuture, Denial, PermissionError, PermissionGate, PermissionRequest};

/// A person's answer to one ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Once,
    Always,
    Reject { feedback: Option<String> },
}

/// One ask as an asker sees it.
#[derive(Debug, Clone)]
pub struct Ask {
    pub id: u64,
    pub request: PermissionRequest,
}

/// Why nobody can answer an ask (no terminal, a policy that refuses), in words for the
/// model and the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unanswerable(pub String);

pub type ReplyFuture<'a> = Pin<Box<dyn Future<Output = Result<Reply, Unanswerable>> + Send + 'a>>;

/// Whoever answers asks. `Err(reason)` means "nobody can answer this" (no terminal, a policy
/// that refuses): the call fails at once with the reason. A future that never completes is
/// allowed: the answer then comes through [`RuleGate::reply`] (tests, a UI).
pub trait Asker: Send + Sync {
    fn ask<'a>(&'a self, ask: &'a Ask) -> ReplyFuture<'a>;
}

/// Answers every ask the same way: `--ask allow|deny`, or a profile's `ask = "deny"`.
pub struct PolicyAsker {
    allow: bool,
    /// Why asks are refused, for the model and the log ("profile eval answers every ask
    /// with deny").
    reason: String,
}

impl PolicyAsker {
    pub fn allow() -> Self {
        PolicyAsker {
            allow: true,
            reason: String::new(),
        }
    }

    pub fn deny(reason: impl Into<String>) -> Self {
        PolicyAsker {
            allow: false,
            reason: reason.into(),
        }
    }
}

impl Asker for PolicyAsker {
    fn ask<'a>(&'a self, _ask: &'a Ask) -> ReplyFuture<'a> {
        let answer = if self.allow {
            Ok(Reply::Once)
        } else {
            Err(Unanswerable(self.reason.clone()))
        };
        Box::pin(std::future::ready(answer))
    }
}

/// For callers that drive replies themselves: each ask is sent on a channel and stays
/// pending until someone calls [`RuleGate::reply`].
pub struct ChannelAsker {
    sender: mpsc::UnboundedSender<Ask>,
}

impl ChannelAsker {
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Ask>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        (ChannelAsker { sender }, receiver)
    }
}

impl Asker for ChannelAsker {
    fn ask<'a>(&'a self, ask: &'a Ask) -> ReplyFuture<'a> {
        if self.sender.send(ask.clone()).is_err() {
            return Box::pin(std::future::ready(Err(Unanswerable(
                "nobody is listening for permission asks any more".to_string(),
            ))));
        }
        Box::pin(std::future::pending())
    }
}

struct Pending {
    request: PermissionRequest,
    done: oneshot::Sender<Result<(), PermissionError>>,
    /// Asked with [`PermissionGate::confirm`]: only approvals settle it, never the
    /// configured rules' allows.
    confirm: bool,
}

#[derive(Default)]
struct State {
    approved: Vec<Rule>,
    pending: BTreeMap<u64, Pending>,
    next_id: u64,
}

/// How one request fares against the rules alone, before anybody is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub action: Action,
    /// The pattern that decided (the denied one, else the first that needs asking).
    pub pattern: Option<String>,
    pub rule: Option<Rule>,
}

/// The gate of one session.
pub struct RuleGate {
    worktree: PathBuf,
    configured: Vec<Rule>,
    asker: Arc<dyn Asker>,
    state: Mutex<State>,
    audit: Arc<runner_audit::Audit>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("no pending permission ask with id {0}")]
pub struct UnknownAsk(pub u64);

impl RuleGate {
    /// `configured` is the merged ruleset ([`super::layers::merge`]); `worktree` lets a file
    /// rule match a path written either relative to it or absolute.
    pub fn new(worktree: &Path, configured: Vec<Rule>, asker: Arc<dyn Asker>) -> Self {
        RuleGate {
            worktree: worktree.to_path_buf(),
            configured,
            asker,
            state: Mutex::new(State::default()),
            audit: Arc::new(runner_audit::Audit::disabled()),
        }
    }

    /// Tells `audit` of every decision from now on.
    pub fn with_audit(mut self, audit: Arc<runner_audit::Audit>) -> Self {
        self.audit = audit;
        self
    }

    pub fn rules(&self) -> &[Rule] {
        &self.configured
    }

    /// The approvals remembered so far ("always" replies).
    pub fn approved(&self) -> Vec<Rule> {
        self.lock().approved.clone()
    }

    /// The asks waiting for a reply, oldest first.
    pub fn pending(&self) -> Vec<Ask> {
        self.lock()
            .pending
            .iter()
            .map(|(id, p)| Ask {
                id: *id,
                request: p.request.clone(),
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The spellings a subject of `permission` can be matched under: a file is its
    /// worktree-relative path and its absolute path, whichever it was written as.
    fn spellings(&self, permission: &str, pattern: &str) -> Vec<String> {
        let mut out = vec![pattern.to_string()];
        if !matches!(permission, "read" | "edit" | "list") || pattern == "*" {
            return out;
        }
        let path = Path::new(pattern);
        if path.is_absolute() {
            if let Ok(rel) = path.strip_prefix(&self.worktree) {
                let rel = rel.to_string_lossy().replace('\\', "/");
                out.push(if rel.is_empty() { ".".into() } else { rel });
            }
        } else {
            let rel = pattern.strip_prefix("./").unwrap_or(pattern);
            out.push(self.worktree.join(rel).to_string_lossy().into_owned());
        }
        out
    }

    /// Judges a request against the rules and approvals without asking anybody. Any denied
    /// pattern makes the whole request denied (even if an earlier one needed asking).
    pub fn verdict(&self, request: &PermissionRequest) -> Verdict {
        let approved = self.lock().approved.clone();
        self.verdict_with(request, &approved)
    }

    fn verdict_with(&self, request: &PermissionRequest, approved: &[Rule]) -> Verdict {
        let mut first_ask: Option<Verdict> = None;
        let mut allowed: Option<Verdict> = None;
        for pattern in &request.patterns {
            let spellings = self.spellings(&request.permission, pattern);
            let subjects: Vec<&str> = spellings.iter().map(String::as_str).collect();
            let mut d = rules::evaluate(&request.permission, &subjects, &self.configured, approved);
            if d.action != Action::Deny {
                let others = request
                    .deny_spellings
                    .iter()
                    .filter(|(p, _)| p == pattern)
                    .flat_map(|(_, others)| others);
                for other in others {
                    let o = rules::evaluate(&request.permission, &[other], &self.configured, &[]);
                    if o.action == Action::Deny {
                        d = o;
                        break;
                    }
                }
            }
            let verdict = || Verdict {
                action: d.action,
                pattern: Some(pattern.clone()),
                rule: d.rule.cloned(),
            };
            match d.action {
                Action::Deny => return verdict(),
                Action::Ask if first_ask.is_none() => first_ask = Some(verdict()),
                Action::Allow if allowed.is_none() => allowed = Some(verdict()),
                _ => {}
            }
        }
        first_ask.or(allowed).unwrap_or(Verdict {
            action: Action::Allow,
            pattern: None,
            rule: None,
        })
    }

    fn denied(&self, request: &PermissionRequest, verdict: Verdict) -> PermissionError {
        PermissionError::Denied(Box::new(Denial {
            permission: request.permission.clone(),
            pattern: verdict.pattern.unwrap_or_default(),
            rule: verdict.rule,
            relevant: rules::relevant(&request.permission, &self.configured)
                .into_iter()
                .cloned()
                .collect(),
        }))
    }

    /// Answers a pending ask. Unknown ids (already answered, cancelled, cascaded) are an
    /// error so that a UI can tell a stale click from a real one.
    pub fn reply(&self, id: u64, reply: Reply) -> Result<(), UnknownAsk> {
        let mut state = self.lock();
        let pending = state.pending.remove(&id).ok_or(UnknownAsk(id))?;
        match reply {
            Reply::Once => {
                let _ = pending.done.send(Ok(()));
            }
            Reply::Always => {
                for pattern in &pending.request.always {
                    let position = state.approved.len() + 1;
                    state.approved.push(Rule {
                        permission: pending.request.permission.clone(),
                        pattern: pattern.clone(),
                        action: Action::Allow,
                        source: Source {
                            origin: APPROVAL_ORIGIN.into(),
                            position,
                            layer: rules::Layer::Other,
                        },
                    });
                }
                let _ = pending.done.send(Ok(()));
                // The new approvals may cover asks still waiting; those go on without a
                // second prompt. Judged with the configured rules too, so an approval never
                // releases something a rule denies.
                let covered: Vec<u64> = state
                    .pending
                    .iter()
                    .filter(|(_, p)| {
                        let verdict = self.verdict_with(&p.request, &state.approved);
                        if p.confirm {
                            verdict.action != Action::Deny
                                && !held_back(&verdict)
                                && Self::approved_covers(&p.request, &state.approved)
                        } else {
                            verdict.action == Action::Allow
                        }
                    })
                    .map(|(id, _)| *id)
                    .collect();
                for id in covered {
                    if let Some(p) = state.pending.remove(&id) {
                        let _ = p.done.send(Ok(()));
                    }
                }
            }
            Reply::Reject { feedback } => {
                let _ = pending
                    .done
                    .send(Err(PermissionError::Rejected { feedback }));
                for (_, p) in std::mem::take(&mut state.pending) {
                    let _ = p
                        .done
                        .send(Err(PermissionError::Rejected { feedback: None }));
                }
            }
        }
        Ok(())
    }

    /// [`PermissionGate::ask`] for a caller that shows when a person is being asked: the
    /// rules are judged once, `asking` is called (and what it returns held) only while the
    /// ask waits for a person, and the verdict's action comes back beside the outcome, so
    /// the caller need not judge the request again to know how it was decided.
    pub async fn ask_with<G>(
        &self,
        request: &PermissionRequest,
        asking: impl FnOnce() -> G,
    ) -> (Action, Result<(), PermissionError>) {
        let (verdict, result) = self.ask_inner(request, asking).await;
        self.audit(request, &verdict, &result);
        (verdict.action, result)
    }

    async fn ask_inner<G>(
        &self,
        request: &PermissionRequest,
        asking: impl FnOnce() -> G,
    ) -> (Verdict, Result<(), PermissionError>) {
        let (id, done, verdict) = {
            let mut state = self.lock();
            let verdict = self.verdict_with(request, &state.approved);
            match verdict.action {
                Action::Allow => return (verdict, Ok(())),
                Action::Deny => return (verdict.clone(), Err(self.denied(request, verdict))),
                Action::Ask => {}
            }
            let (id, done) = Self::enqueue(&mut state, request, false);
            (id, done, verdict)
        };
        let _shown = asking();
        (verdict, self.answer(id, done, request).await)
    }

    /// [`PermissionGate::confirm`]: the configured rules can refuse but not allow; only a
    /// person's answer, now or an "always" earlier in the session, lets it through.
    async fn confirm_inner(
        &self,
        request: &PermissionRequest,
    ) -> (Verdict, Result<(), PermissionError>) {
        let (id, done, verdict) = {
            let mut state = self.lock();
            let verdict = self.verdict_with(request, &state.approved);
            if verdict.action == Action::Deny {
                return (verdict.clone(), Err(self.denied(request, verdict)));
            }
            if !held_back(&verdict) && Self::approved_covers(request, &state.approved) {
                // Decided by the earlier "always", not by whatever configured rule matched.
                let by_approval = self.verdict_with_only(request, &state.approved);
                return (by_approval, Ok(()));
            }
            let (id, done) = Self::enqueue(&mut state, request, true);
            let asked = Verdict {
                action: Action::Ask,
                ..verdict
            };
            (id, done, asked)
        };
        (verdict, self.answer(id, done, request).await)
    }

    /// The verdict of the approvals alone (for a confirmation they settled).
    fn verdict_with_only(&self, request: &PermissionRequest, approved: &[Rule]) -> Verdict {
        let pattern = request.patterns.first().cloned();
        let rule = pattern.as_deref().and_then(|p| {
            rules::evaluate(&request.permission, &[p], &[], approved)
                .rule
                .cloned()
        });
        Verdict {
            action: Action::Allow,
            pattern,
            rule,
        }
    }

    /// Tells the audit trail how `request` was decided: by `verdict`'s rule, or by whoever
    /// was asked when the rules left it open.
    fn audit(
        &self,
        request: &PermissionRequest,
        verdict: &Verdict,
        result: &Result<(), PermissionError>,
    ) {
        use runner_audit::Decision;
        if !self.audit.is_on() {
            return;
        }
        let asked = verdict.action == Action::Ask;
        let (decision, detail) = match result {
            Ok(()) if asked => (
                Decision::Approved,
                Some("asked, and the answer was yes".to_string()),
            ),
            Ok(()) => (Decision::Allowed, None),
            Err(PermissionError::Denied(_)) => (Decision::Denied, None),
            Err(PermissionError::Rejected { feedback }) => (
                Decision::Rejected,
                Some(match feedback {
                    Some(f) => format!("asked, and the answer was no: {f}"),
                    None => "asked, and the answer was no".to_string(),
                }),
            ),
            Err(PermissionError::Unanswered { reason, .. }) => (
                Decision::Unanswered,
                Some(format!("needed asking, and nobody could answer: {reason}")),
            ),
        };
        self.audit.permission(&runner_audit::Permission {
            tool: request.tool.clone(),
            permission: request.permission.clone(),
            patterns: request.patterns.clone(),
            decision,
            rule: verdict.rule.as_ref().map(audit_rule),
            detail,
        });
    }

    /// Whether this session's "always" answers cover every pattern of the request.
    fn approved_covers(request: &PermissionRequest, approved: &[Rule]) -> bool {
        request.patterns.iter().all(|p| {
            rules::evaluate(&request.permission, &[p], &[], approved).action == Action::Allow
        })
    }

    /// Records an ask as pending; its id, and where its outcome will arrive.
    fn enqueue(
        state: &mut State,
        request: &PermissionRequest,
        confirm: bool,
    ) -> (u64, oneshot::Receiver<Result<(), PermissionError>>) {
        state.next_id += 1;
        let id = state.next_id;
        let (tx, rx) = oneshot::channel();
        state.pending.insert(
            id,
            Pending {
                request: request.clone(),
                done: tx,
                confirm,
            },
        );
        (id, rx)
    }

    /// Puts a pending ask to the asker and waits for its outcome (or another reply's).
    async fn answer(
        &self,
        id: u64,
        mut done: oneshot::Receiver<Result<(), PermissionError>>,
        request: &PermissionRequest,
    ) -> Result<(), PermissionError> {
        // If this call is dropped (cancelled) while waiting, its ask must not linger.
        let _forget = ForgetOnDrop { gate: self, id };
        let ask = Ask {
            id,
            request: request.clone(),
        };
        let closed = || PermissionError::Rejected { feedback: None };
        tokio::select! {
            result = &mut done => result.unwrap_or_else(|_| Err(closed())),
            answer = self.asker.ask(&ask) => {
                match answer {
                    Ok(reply) => {
                        // A cascade may have settled it meanwhile; then that outcome stands.
                        let _ = self.reply(id, reply);
                        done.await.unwrap_or_else(|_| Err(closed()))
                    }
                    Err(Unanswerable(reason)) => Err(PermissionError::Unanswered {
                        permission: request.permission.clone(),
                        patterns: request.patterns.clone(),
                        reason,
                    }),
                }
            }
        }
    }
}

pub const APPROVAL_ORIGIN: &str = "approval";

struct ForgetOnDrop<'a> {
    gate: &'a RuleGate,
    id: u64,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        self.gate.lock().pending.remove(&self.id);
    }
}

/// A rule as the audit trail names it: its text, its file and place, its layer.
/// Whether a boundary holds the request back to an ask, which no approval settles.
fn held_back(verdict: &Verdict) -> bool {
    verdict.action == Action::Ask
        && verdict
            .rule
            .as_ref()
            .is_some_and(|r| r.source.layer == rules::Layer::Boundary)
}

pub fn audit_rule(rule: &Rule) -> runner_audit::RuleRef {
    runner_audit::RuleRef {
        permission: rule.permission.clone(),
        pattern: rule.pattern.clone(),
        action: rule.action.as_str().to_string(),
        origin: rule.source.origin.clone(),
        position: rule.source.position,
        layer: format!("{:?}", rule.source.layer).to_lowercase(),
    }
}

impl PermissionGate for RuleGate {
    fn ask<'a>(&'a self, request: &'a PermissionRequest) -> AskFuture<'a> {
        Box::pin(async move { self.ask_with(request, || ()).await.1 })
    }

    fn confirm<'a>(&'a self, request: &'a PermissionRequest) -> AskFuture<'a> {
        Box::pin(async move {
            let (verdict, result) = self.confirm_inner(request).await;
            self.audit(request, &verdict, &result);
            result
        })
    }

    fn disabled(&self, permission: &str) -> Option<Rule> {
        if rules::disabled(permission, &self.configured) {
            self.configured
                .iter()
                .rev()
                .find(|r| super::wildcard::matches(permission, &r.permission))
                .cloned()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action::{Allow, Deny};
    use std::time::Duration;
    const ASK: Action = Action::Ask;

    const WT: &str = "/work/tree";

    fn gate(spec: &[(&str, &str, Action)], asker: Arc<dyn Asker>) -> Arc<RuleGate> {
        let rules = spec
            .iter()
            .enumerate()
            .map(|(i, (p, pat, a))| Rule::new(p, pat, *a, "test", i + 1))
            .collect();
        Arc::new(RuleGate::new(Path::new(WT), rules, asker))
    }

    fn req(permission: &str, patterns: &[&str], always: &[&str]) -> PermissionRequest {
        PermissionRequest::new(
            permission,
            patterns.iter().map(|s| s.to_string()).collect(),
            always.iter().map(|s| s.to_string()).collect(),
        )
    }

    fn channel_gate(
        spec: &[(&str, &str, Action)],
    ) -> (Arc<RuleGate>, mpsc::UnboundedReceiver<Ask>) {
        let (asker, rx) = ChannelAsker::new();
        (gate(spec, Arc::new(asker)), rx)
    }

    /// Starts an ask in the background and waits until it is pending.
    async fn start(
        gate: &Arc<RuleGate>,
        asks: &mut mpsc::UnboundedReceiver<Ask>,
        request: PermissionRequest,
    ) -> (u64, tokio::task::JoinHandle<Result<(), PermissionError>>) {
        let g = gate.clone();
        let handle = tokio::spawn(async move { g.ask(&request).await });
        let ask = tokio::time::timeout(Duration::from_secs(5), asks.recv())
            .await
            .expect("the ask reaches the asker")
            .unwrap();
        (ask.id, handle)
    }

    async fn outcome(
        h: tokio::task::JoinHandle<Result<(), PermissionError>>,
    ) -> Result<(), PermissionError> {
        tokio::time::timeout(Duration::from_secs(5), h)
            .await
            .expect("the ask settles")
            .unwrap()
    }

    #[tokio::test]
    async fn a_boundary_ask_is_asked_every_time_whatever_was_approved() {
        let mut rules: Vec<Rule> = vec![Rule::new("*", "*", Allow, "cfg", 1)];
        rules.extend(
            [
                ("*", "*", ASK, 0),
                ("*", "*", Allow, 1),
                ("bash", "make *", ASK, 2),
            ]
            .into_iter()
            .map(|(p, pat, a, i)| {
                Rule::new(p, pat, a, "boundary", i).in_layer(rules::Layer::Boundary)
            }),
        );
        let (asker, mut asks) = ChannelAsker::new();
        let g = Arc::new(RuleGate::new(Path::new(WT), rules, Arc::new(asker)));
        let request = req("bash", &["make all"], &["make *"]);
        for confirm in [false, true] {
            // Answered "always" once: the same call is asked again, by ask and confirm.
            let (id, h) = start(&g, &mut asks, request.clone()).await;
            g.reply(id, Reply::Always).unwrap();
            outcome(h).await.unwrap();
            let r = request.clone();
            let g2 = g.clone();
            let h = tokio::spawn(async move {
                if confirm {
                    g2.confirm(&r).await
                } else {
                    g2.ask(&r).await
                }
            });
            let again = tokio::time::timeout(Duration::from_secs(5), asks.recv())
                .await
                .expect("asked again")
                .unwrap();
            g.reply(again.id, Reply::Once).unwrap();
            outcome(h).await.unwrap();
        }
        // What the boundary allows, the approval settles as before.
        let ls = req("bash", &["ls"], &["ls *"]);
        g.ask(&ls).await.unwrap();
        assert!(asks.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_confirmation_asks_whatever_the_rules_allow() {
        // The defaults allow everything, and a rule names the very subject: still asked.
        let (g, mut asks) = channel_gate(&[
            ("*", "*", Allow),
            ("bash", "*", ASK),
            ("remote_mcp", "http://x/", Allow),
        ]);
        let request = req("remote_mcp", &["http://x/"], &["http://x/"]);
        let r = request.clone();
        let g2 = g.clone();
        let h = tokio::spawn(async move { g2.confirm(&r).await });
        let ask = tokio::time::timeout(Duration::from_secs(5), asks.recv())
            .await
            .expect("the confirmation reaches the asker")
            .unwrap();
        // Another ask's "always" settles asks its approvals cover, never a confirmation
        // the configured rules happen to allow.
        let (other, ho) = start(&g, &mut asks, req("bash", &["x"], &["x"])).await;
        g.reply(other, Reply::Always).unwrap();
        outcome(ho).await.unwrap();
        assert_eq!(g.pending().len(), 1, "the confirmation is still waiting");
        g.reply(ask.id, Reply::Always).unwrap();
        outcome(h).await.unwrap();
        // Its own "always" counts for the rest of the session.
        g.confirm(&request).await.unwrap();
        assert!(asks.try_recv().is_err());

        // A configured deny refuses at once; nobody to ask refuses too.
        let (g, mut asks) = channel_gate(&[("remote_mcp", "*", Deny)]);
        assert!(matches!(
            g.confirm(&request).await,
            Err(PermissionError::Denied(_))
        ));
        assert!(asks.try_recv().is_err());
        let g = gate(
            &[("*", "*", Allow)],
            Arc::new(PolicyAsker::deny("nobody is there")),
        );
        assert!(matches!(
            g.confirm(&request).await,
            Err(PermissionError::Unanswered { .. })
        ));
    }

    #[tokio::test]
    async fn ask_with_judges_once_and_shows_only_what_a_person_is_asked() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        /// Counts the asks shown and how many are on screen now.
        #[derive(Default)]
        struct View {
            shown: AtomicUsize,
            up: AtomicUsize,
        }
        struct Shown<'a>(&'a View);
        impl Drop for Shown<'_> {
            fn drop(&mut self) {
                self.0.up.fetch_sub(1, SeqCst);
            }
        }
        let show = |v: &'static View| {
            move || {
                v.shown.fetch_add(1, SeqCst);
                v.up.fetch_add(1, SeqCst);
                Shown(v)
            }
        };
        let spec = [
            ("*", "*", Allow),
            ("bash", "rm *", Deny),
            ("bash", "git *", ASK),
        ];
        let g = gate(&spec, Arc::new(PolicyAsker::allow()));
        let view: &'static View = Box::leak(Box::default());
        for (pattern, want) in [("ls", Allow), ("rm -rf /", Deny), ("git push", ASK)] {
            let request = req("bash", &[pattern], &[]);
            let (action, result) = g.ask_with(&request, show(view)).await;
            // The same decision the rules give on their own, and the outcome it implies.
            assert_eq!(action, want, "{pattern}");
            assert_eq!(g.verdict(&request).action, want, "{pattern}");
            assert_eq!(result.is_ok(), want != Deny, "{pattern}: {result:?}");
        }
        assert_eq!(
            view.shown.load(SeqCst),
            1,
            "only the ask a person answers is shown"
        );
        assert_eq!(view.up.load(SeqCst), 0, "and it is gone once answered");

        // Shown for as long as the person takes.
        let (g, mut asks) = channel_gate(&spec);
        let view: &'static View = Box::leak(Box::default());
        let g2 = g.clone();
        let h = tokio::spawn(async move {
            g2.ask_with(&req("bash", &["git push"], &[]), show(view))
                .await
        });
        let ask = tokio::time::timeout(Duration::from_secs(5), asks.recv())
            .await
            .expect("the ask reaches the asker")
            .unwrap();
        assert_eq!(view.up.load(SeqCst), 1, "shown while it waits");
        g.reply(ask.id, Reply::Once).unwrap();
        let (action, result) = h.await.unwrap();
        assert_eq!((action, result.is_ok()), (ASK, true));
        assert_eq!(view.up.load(SeqCst), 0);
    }

    #[tokio::test]
    async fn allowed_and_denied_calls_never_reach_the_asker() {
        let (g, mut asks) = channel_gate(&[("*", "*", Allow), ("bash", "rm *", Deny)]);
        g.ask(&req("bash", &["ls -la"], &["ls *"])).await.unwrap();
        // A deny on a later pattern wins even though an earlier one is allowed.
        let e = g
            .ask(&req("bash", &["ls", "rm -rf /"], &["ls *", "rm *"]))
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("rm -rf /") && text.contains("rm *") && text.contains("test #2"),
            "{text}"
        );
        assert!(asks.try_recv().is_err());
        assert!(g.pending().is_empty());
    }

    #[tokio::test]
    async fn once_lets_one_call_through_and_remembers_nothing() {
        let (g, mut asks) = channel_gate(&[("bash", "*", ASK)]);
        let (id, h) = start(&g, &mut asks, req("bash", &["make"], &["make *"])).await;
        assert_eq!(g.pending().len(), 1);
        g.reply(id, Reply::Once).unwrap();
        outcome(h).await.unwrap();
        assert!(g.approved().is_empty());
        assert!(g.pending().is_empty());
        // Asked again next time.
        let (_, h) = start(&g, &mut asks, req("bash", &["make"], &["make *"])).await;
        h.abort();
        assert_eq!(g.reply(id, Reply::Once), Err(UnknownAsk(id)));
    }

    #[tokio::test]
    async fn always_remembers_and_resolves_the_pending_asks_it_covers() {
        let (g, mut asks) = channel_gate(&[("bash", "*", ASK)]);
        let (a, ha) = start(
            &g,
            &mut asks,
            req("bash", &["git status"], &["git status *"]),
        )
        .await;
        let (_b, hb) = start(
            &g,
            &mut asks,
            req("bash", &["git status -s"], &["git status *"]),
        )
        .await;
        let (c, hc) = start(&g, &mut asks, req("bash", &["git push"], &["git push *"])).await;
        g.reply(a, Reply::Always).unwrap();
        outcome(ha).await.unwrap();
        outcome(hb).await.unwrap(); // covered by the new approval, no second prompt
        assert_eq!(
            g.pending().iter().map(|p| p.id).collect::<Vec<_>>(),
            vec![c]
        );
        assert_eq!(g.approved().len(), 1);
        assert_eq!(g.approved()[0].pattern, "git status *");
        g.reply(c, Reply::Once).unwrap();
        outcome(hc).await.unwrap();
        // Later calls under the approval go straight through.
        g.ask(&req("bash", &["git status --porcelain"], &[]))
            .await
            .unwrap();
        assert!(asks.try_recv().is_err());
    }

    #[tokio::test]
    async fn an_always_approval_never_beats_a_configured_deny() {
        let (g, mut asks) = channel_gate(&[("bash", "*", ASK), ("bash", "rm -rf *", Deny)]);
        let (a, h) = start(&g, &mut asks, req("bash", &["rm foo"], &["rm *"])).await;
        g.reply(a, Reply::Always).unwrap();
        outcome(h).await.unwrap();
        g.ask(&req("bash", &["rm bar"], &[])).await.unwrap();
        let e = g.ask(&req("bash", &["rm -rf /"], &[])).await.unwrap_err();
        assert!(matches!(e, PermissionError::Denied(_)), "{e}");
    }

    #[tokio::test]
    async fn reject_fails_the_call_with_feedback_and_every_other_pending_ask() {
        let (g, mut asks) = channel_gate(&[("*", "*", ASK)]);
        let (a, ha) = start(&g, &mut asks, req("edit", &["src/a.rs"], &["*"])).await;
        let (_b, hb) = start(
            &g,
            &mut asks,
            req("bash", &["cargo test"], &["cargo test *"]),
        )
        .await;
        g.reply(
            a,
            Reply::Reject {
                feedback: Some("use the helper in util.rs instead".into()),
            },
        )
        .unwrap();
        let ea = outcome(ha).await.unwrap_err().to_string();
        assert!(
            ea.contains("with the following feedback: use the helper in util.rs instead"),
            "{ea}"
        );
        let eb = outcome(hb).await.unwrap_err();
        assert_eq!(eb, PermissionError::Rejected { feedback: None });
        assert!(g.pending().is_empty());
        assert!(g.approved().is_empty());
    }

    #[tokio::test]
    async fn a_reply_state_table() {
        // (reply to the first ask, outcome of the first, outcome of a second ask that the
        // first's always-pattern covers, outcome of a third that it does not)
        type Row = (Reply, bool, Option<bool>, Option<bool>);
        let rows: Vec<Row> = vec![
            (Reply::Once, true, None, None),
            (Reply::Always, true, Some(true), None),
            (
                Reply::Reject { feedback: None },
                false,
                Some(false),
                Some(false),
            ),
        ];
        for (reply, first_ok, second, third) in rows {
            let (g, mut asks) = channel_gate(&[("bash", "*", ASK)]);
            let (a, h1) = start(
                &g,
                &mut asks,
                req("bash", &["npm run dev"], &["npm run dev *"]),
            )
            .await;
            let (_, h2) = start(&g, &mut asks, req("bash", &["npm run dev --port 1"], &[])).await;
            let (_, h3) = start(&g, &mut asks, req("bash", &["npm publish"], &[])).await;
            g.reply(a, reply.clone()).unwrap();
            assert_eq!(outcome(h1).await.is_ok(), first_ok, "{reply:?}");
            for (h, want) in [(h2, second), (h3, third)] {
                match want {
                    Some(ok) => assert_eq!(outcome(h).await.is_ok(), ok, "{reply:?}"),
                    None => {
                        // Still pending after the reply.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        assert!(!h.is_finished(), "{reply:?}");
                        h.abort();
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn a_cancelled_call_leaves_no_pending_ask() {
        let (g, mut asks) = channel_gate(&[("*", "*", ASK)]);
        let (id, h) = start(&g, &mut asks, req("bash", &["x"], &[])).await;
        h.abort();
        let _ = h.await;
        assert!(g.pending().is_empty());
        assert_eq!(g.reply(id, Reply::Once), Err(UnknownAsk(id)));
    }

    #[tokio::test]
    async fn an_asker_that_cannot_answer_fails_at_once() {
        let g = gate(
            &[("*", "*", ASK)],
            Arc::new(PolicyAsker::deny("there is no terminal to ask on")),
        );
        let e = tokio::time::timeout(Duration::from_secs(1), g.ask(&req("bash", &["make"], &[])))
            .await
            .expect("no hang")
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("no terminal") && text.contains("make"),
            "{text}"
        );
        assert!(g.pending().is_empty());
        let g = gate(&[("*", "*", ASK)], Arc::new(PolicyAsker::allow()));
        g.ask(&req("bash", &["make"], &["make *"])).await.unwrap();
        assert!(
            g.approved().is_empty(),
            "a policy approves once, never always"
        );
    }

    #[test]
    fn file_rules_match_relative_and_absolute_spellings() {
        let g = gate(
            &[
                ("*", "*", Allow),
                ("edit", "/work/tree/secrets/*", Deny),
                ("read", "config/*", ASK),
            ],
            Arc::new(PolicyAsker::allow()),
        );
        let cases: &[(&str, &str, Action)] = &[
            ("edit", "secrets/key.pem", Deny),
            ("edit", "/work/tree/secrets/key.pem", Deny),
            ("edit", "./secrets/key.pem", Deny),
            ("edit", "src/secrets.rs", Allow),
            ("read", "/work/tree/config/app.toml", ASK),
            ("read", "config/app.toml", ASK),
            ("read", "/elsewhere/config/app.toml", Allow),
            // Not a file permission: no second spelling.
            ("bash", "secrets/key.pem", Allow),
        ];
        for (p, s, want) in cases {
            assert_eq!(g.verdict(&req(p, &[s], &[])).action, *want, "{p} {s}");
        }
    }

    #[test]
    fn other_spellings_can_deny_but_never_allow() {
        let g = gate(
            &[
                ("bash", "*", ASK),
                ("bash", "rm *", Deny),
                ("bash", "ls *", Allow),
            ],
            Arc::new(PolicyAsker::allow()),
        );
        let with = |pattern: &str, others: &[&str]| {
            let mut r = req("bash", &[pattern], &[]);
            r.deny_spellings = vec![(
                pattern.to_string(),
                others.iter().map(|s| s.to_string()).collect(),
            )];
            g.verdict(&r)
        };
        let d = with("\\rm -rf x", &["rm -rf x"]);
        assert_eq!(d.action, Deny);
        assert_eq!(d.rule.unwrap().pattern, "rm *");
        assert_eq!(with("sudo rm x", &["rm x"]).action, Deny);
        // `sudo ls` is not `ls`: the inner form may deny, never allow.
        assert_eq!(with("sudo ls", &["ls"]).action, ASK);
        assert_eq!(with("ls", &["ls"]).action, Allow);
    }

    #[tokio::test]
    async fn every_decision_is_audited_with_the_rule_that_made_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("audit.jsonl");
        let audit =
            Arc::new(runner_audit::Audit::open(std::slice::from_ref(&file), "1", None).unwrap());
        let rules = [
            ("*", "*", Allow),
            ("bash", "rm *", Deny),
            ("bash", "make *", ASK),
        ];
        let g = Arc::into_inner(gate(&rules, Arc::new(PolicyAsker::allow())))
            .unwrap()
            .with_audit(audit.clone());
        g.ask(&req("bash", &["ls"], &[])).await.unwrap();
        g.ask(&req("bash", &["rm -rf /"], &[])).await.unwrap_err();
        g.ask(&req("bash", &["make all"], &[])).await.unwrap();
        let nobody = Arc::into_inner(gate(&rules, Arc::new(PolicyAsker::deny("no terminal"))))
            .unwrap()
            .with_audit(audit);
        nobody
            .ask(&req("bash", &["make x"], &[]))
            .await
            .unwrap_err();
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let seen: Vec<(String, u64, String)> = lines
            .iter()
            .map(|l| {
                (
                    l["resources"][0]["name"].as_str().unwrap().to_string(),
                    l["disposition_id"].as_u64().unwrap(),
                    l["policy"]["uid"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let want = [
            ("ls", 1, "test#1"),
            ("rm -rf /", 2, "test#2"),
            ("make all", 8, "test#3"),
            ("make x", 2, "test#3"),
        ];
        let want: Vec<(String, u64, String)> = want
            .iter()
            .map(|(s, d, u)| (s.to_string(), *d, u.to_string()))
            .collect();
        assert_eq!(seen, want);
        assert_eq!(lines[1]["policy"]["name"], "bash \"rm *\" = deny");
        assert!(
            lines[3]["status_detail"]
                .as_str()
                .unwrap()
                .contains("no terminal")
        );
    }

    #[test]
    fn a_tool_is_hidden_only_by_a_final_star_deny() {
        let g = gate(
            &[
                ("*", "*", Allow),
                ("webfetch", "*", Deny),
                ("task", "*", Deny),
                ("task", "general", Allow),
            ],
            Arc::new(PolicyAsker::allow()),
        );
        assert_eq!(g.disabled("webfetch").map(|r| r.source.position), Some(2));
        assert!(g.disabled("task").is_none());
        assert!(g.disabled("bash").is_none());
    }
}
