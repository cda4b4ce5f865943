//! Rules and their evaluation: OpenCode's last-match-wins model, with two fixes its users
//! asked for. A rule is `{permission, pattern, action}`; both the permission name and the
//! pattern are wildcards ([`super::wildcard`]); the last rule matching both decides; no match
//! means ask.
//!
//! The fixes:
//! - an "always" approval never overrides a configured deny (OpenCode v1 evaluated approvals
//!   after everything, so approving `rm foo` — remembered as `rm *` — allowed `rm -rf /` even
//!   against a `"rm -rf *": "deny"` rule);
//! - a subject can have several spellings (a file as a worktree-relative and as an absolute
//!   path), and a rule matches if it matches any of them (OpenCode's absolute-path rules never
//!   matched edits, which were checked by relative path).

use serde::{Deserialize, Serialize};

use super::wildcard;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Allow,
    Ask,
    Deny,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Ask => "ask",
            Action::Deny => "deny",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Where a rule came from, so that a decision can be explained ("denied by rule 3 of
/// ~/.config/runner/config.toml").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    /// `built-in defaults`, `profile untrusted`, a file path, `session`, `approval`.
    pub origin: String,
    /// 1-based position within its origin.
    pub position: usize,
    /// The layer it was stacked in ([`super::layers::merge`] sets it). Not shown: the
    /// origin already says where it came from.
    #[serde(skip)]
    pub layer: Layer,
}

/// The config layer a rule was stacked in. Most rules mean the same whatever their layer;
/// the one difference is what only the user may decide, such as opening a private address
/// to requests this machine makes (see `network::outbound`): a repository's
/// `.runner/config.toml` is the repository's word, not the user's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Layer {
    Defaults,
    Profile,
    /// `$XDG_CONFIG_HOME/runner/config.toml`.
    User,
    /// The worktree's `.runner/config.toml`.
    Project,
    /// `--config FILE`.
    Explicit,
    Session,
    /// A managed boundary (`/etc/runner/boundary.toml`, see [`super::boundary`]): not one
    /// more layer on the stack but a cap on what the stack decides.
    Boundary,
    /// Anything else: approvals, rules made in code.
    #[default]
    Other,
}

impl Layer {
    /// Whether the person running runner wrote it themselves: their own config file, or
    /// the file they named with `--config`.
    pub fn is_users_own(self) -> bool {
        matches!(self, Layer::User | Layer::Explicit)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rule {
    pub permission: String,
    pub pattern: String,
    pub action: Action,
    pub source: Source,
}

impl Rule {
    pub fn new(
        permission: &str,
        pattern: &str,
        action: Action,
        origin: &str,
        position: usize,
    ) -> Rule {
        Rule {
            permission: permission.to_string(),
            pattern: pattern.to_string(),
            action,
            source: Source {
                origin: origin.to_string(),
                position,
                layer: Layer::Other,
            },
        }
    }

    /// This rule, stacked in `layer`.
    pub fn in_layer(mut self, layer: Layer) -> Rule {
        self.source.layer = layer;
        self
    }

    fn matches(&self, permission: &str, subjects: &[&str]) -> bool {
        wildcard::matches(permission, &self.permission)
            && subjects.iter().any(|s| wildcard::matches(s, &self.pattern))
    }
}

/// The outcome of evaluating one subject: the action, and the rule that decided it (`None`
/// when nothing matched and the default, ask, applies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<'a> {
    pub action: Action,
    pub rule: Option<&'a Rule>,
}

/// Evaluates `permission` for one subject given in all its spellings. `configured` is the
/// merged ruleset in precedence order (defaults, profile, user, project, `--config`,
/// session, then any boundary); `approved` the "always" approvals, which count after
/// everything but a deny. Rules of the [`Layer::Boundary`] layer do not take part in the
/// last match: each boundary file is evaluated on its own and caps the result (see
/// [`cap`]), so nothing below or beside it, an approval included, decides more loosely.
pub fn evaluate<'a>(
    permission: &str,
    subjects: &[&str],
    configured: &'a [Rule],
    approved: &'a [Rule],
) -> Decision<'a> {
    let stacked = evaluate_stack(permission, subjects, configured, approved);
    cap(stacked, permission, subjects, configured)
}

/// The last-match-wins evaluation of the rules below any boundary.
fn evaluate_stack<'a>(
    permission: &str,
    subjects: &[&str],
    configured: &'a [Rule],
    approved: &'a [Rule],
) -> Decision<'a> {
    let last = |rules: &'a [Rule]| {
        rules
            .iter()
            .rev()
            .filter(|r| r.source.layer != Layer::Boundary)
            .find(|r| r.matches(permission, subjects))
    };
    let configured_rule = last(configured);
    if let Some(rule) = configured_rule
        && rule.action == Action::Deny
    {
        return Decision {
            action: Action::Deny,
            rule: Some(rule),
        };
    }
    if let Some(rule) = last(approved) {
        return Decision {
            action: rule.action,
            rule: Some(rule),
        };
    }
    match configured_rule {
        Some(rule) => Decision {
            action: rule.action,
            rule: Some(rule),
        },
        None => Decision {
            action: Action::Ask,
            rule: None,
        },
    }
}

/// How much an action holds back: allow < ask < deny.
pub fn strictness(action: Action) -> u8 {
    match action {
        Action::Allow => 0,
        Action::Ask => 1,
        Action::Deny => 2,
    }
}

/// The boundary files among `configured`: each maximal run of [`Layer::Boundary`] rules of
/// one origin.
pub fn boundary_runs(configured: &[Rule]) -> Vec<&[Rule]> {
    let mut runs = Vec::new();
    let mut start = None;
    for (i, r) in configured.iter().enumerate() {
        let same_run = start.is_some_and(|s: usize| {
            r.source.layer == Layer::Boundary && configured[s].source.origin == r.source.origin
        });
        if same_run {
            continue;
        }
        if let Some(s) = start.take() {
            runs.push(&configured[s..i]);
        }
        if r.source.layer == Layer::Boundary {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        runs.push(&configured[s..]);
    }
    runs
}

/// `decided`, held back to what every boundary file says about the subject when that is
/// stricter; the boundary's rule then decides. A boundary with no matching rule says ask,
/// as any ruleset does.
fn cap<'a>(
    decided: Decision<'a>,
    permission: &str,
    subjects: &[&str],
    configured: &'a [Rule],
) -> Decision<'a> {
    let mut out = decided;
    for run in boundary_runs(configured) {
        let rule = run.iter().rev().find(|r| r.matches(permission, subjects));
        let action = rule.map_or(Action::Ask, |r| r.action);
        if strictness(action) > strictness(out.action) {
            out = Decision { action, rule };
        }
    }
    out
}

/// The rules shown in a denial: every configured rule whose permission matches, whatever its
/// pattern (OpenCode's `DeniedError` shows the same set).
pub fn relevant<'a>(permission: &str, configured: &'a [Rule]) -> Vec<&'a Rule> {
    configured
        .iter()
        .filter(|r| wildcard::matches(permission, &r.permission))
        .collect()
}

/// Whether a tool should be hidden from the model: the last rule for its permission,
/// whatever the pattern, is `"*"` deny (a later specific allow keeps it visible).
pub fn disabled(permission: &str, configured: &[Rule]) -> bool {
    let stack = configured
        .iter()
        .filter(|r| r.source.layer != Layer::Boundary);
    last_denies_all(permission, stack)
        || boundary_runs(configured)
            .into_iter()
            .any(|run| last_denies_all(permission, run.iter()))
}

/// Whether the last of `rules` for `permission` is a `"*"` deny.
fn last_denies_all<'a>(permission: &str, rules: impl DoubleEndedIterator<Item = &'a Rule>) -> bool {
    rules
        .rev()
        .find(|r| wildcard::matches(permission, &r.permission))
        .is_some_and(|r| r.pattern == "*" && r.action == Action::Deny)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(spec: &[(&str, &str, Action)], origin: &str) -> Vec<Rule> {
        spec.iter()
            .enumerate()
            .map(|(i, (p, pat, a))| Rule::new(p, pat, *a, origin, i + 1))
            .collect()
    }

    use Action::*;

    #[test]
    fn last_match_wins_and_no_match_asks() {
        let cfg = rules(
            &[
                ("*", "*", Allow),
                ("bash", "*", Ask),
                ("bash", "git *", Allow),
                ("bash", "git push *", Deny),
            ],
            "t",
        );
        let cases: &[(&str, &str, Action, Option<usize>)] = &[
            ("read", "src/a.rs", Allow, Some(1)),
            ("bash", "ls", Ask, Some(2)),
            ("bash", "git status", Allow, Some(3)),
            ("bash", "git", Allow, Some(3)),
            ("bash", "git push origin main", Deny, Some(4)),
            ("bash", "git push", Deny, Some(4)),
        ];
        for &(perm, subject, want, pos) in cases {
            let d = evaluate(perm, &[subject], &cfg, &[]);
            assert_eq!(d.action, want, "{perm} {subject}");
            assert_eq!(d.rule.map(|r| r.source.position), pos, "{perm} {subject}");
        }
        let empty: Vec<Rule> = Vec::new();
        let d = evaluate("bash", &["ls"], &empty, &empty);
        assert_eq!((d.action, d.rule), (Ask, None));
    }

    #[test]
    fn order_not_specificity_decides() {
        // A broad rule after a specific one overrides it: config order is precedence.
        let cfg = rules(&[("bash", "rm -rf *", Deny), ("bash", "*", Allow)], "t");
        assert_eq!(evaluate("bash", &["rm -rf /"], &cfg, &[]).action, Allow);
        let cfg = rules(&[("bash", "*", Allow), ("bash", "rm -rf *", Deny)], "t");
        assert_eq!(evaluate("bash", &["rm -rf /"], &cfg, &[]).action, Deny);
    }

    #[test]
    fn permission_names_are_wildcards_too() {
        let cfg = rules(
            &[
                ("*", "*", Ask),
                ("mcp_*", "*", Deny),
                ("mcp_docs", "*", Allow),
            ],
            "t",
        );
        assert_eq!(evaluate("mcp_github", &["x"], &cfg, &[]).action, Deny);
        assert_eq!(evaluate("mcp_docs", &["x"], &cfg, &[]).action, Allow);
        assert_eq!(evaluate("webfetch", &["x"], &cfg, &[]).action, Ask);
    }

    #[test]
    fn an_always_approval_never_beats_a_configured_deny() {
        let cfg = rules(
            &[
                ("*", "*", Allow),
                ("bash", "*", Ask),
                ("bash", "rm -rf *", Deny),
            ],
            "cfg",
        );
        // The user answered "always" to `rm foo`: OpenCode remembers `rm *`.
        let approved = rules(&[("bash", "rm *", Allow)], "approval");
        let d = evaluate("bash", &["rm foo"], &cfg, &approved);
        assert_eq!(d.action, Allow);
        assert_eq!(d.rule.map(|r| r.source.origin.as_str()), Some("approval"));
        let d = evaluate("bash", &["rm -rf /"], &cfg, &approved);
        assert_eq!(d.action, Deny);
        assert_eq!(d.rule.map(|r| r.source.origin.as_str()), Some("cfg"));
        // Approvals still beat an ask.
        assert_eq!(evaluate("bash", &["rm bar"], &cfg, &approved).action, Allow);
        assert_eq!(evaluate("bash", &["ls"], &cfg, &approved).action, Ask);
    }

    #[test]
    fn a_file_rule_matches_relative_and_absolute_spellings() {
        let cfg = rules(
            &[
                ("edit", "*", Allow),
                ("edit", "/work/p/secrets/*", Deny),
                ("edit", "docs/*", Ask),
            ],
            "t",
        );
        let check = |rel: &str| {
            let abs = format!("/work/p/{rel}");
            evaluate("edit", &[rel, abs.as_str()], &cfg, &[]).action
        };
        assert_eq!(check("secrets/k.txt"), Deny);
        assert_eq!(check("docs/a.md"), Ask);
        assert_eq!(check("src/a.rs"), Allow);
        // One spelling alone would miss: the relative form never matches the absolute rule.
        assert_eq!(
            evaluate("edit", &["secrets/k.txt"], &cfg, &[]).action,
            Allow
        );
    }

    #[test]
    fn the_env_defaults() {
        let cfg = rules(
            &[
                ("*", "*", Allow),
                ("read", "*", Allow),
                ("read", "*.env", Ask),
                ("read", "*.env.*", Ask),
                ("read", "*.env.example", Allow),
            ],
            "defaults",
        );
        for (file, want) in [
            (".env", Ask),
            (".env.local", Ask),
            (".env.production", Ask),
            (".env.development.local", Ask),
            ("app/.env", Ask),
            (".env.example", Allow),
            (".envrc", Allow),
            ("environment.ts", Allow),
            ("src/env.rs", Allow),
        ] {
            assert_eq!(evaluate("read", &[file], &cfg, &[]).action, want, "{file}");
        }
    }

    #[test]
    fn relevant_rules_and_hidden_tools() {
        let cfg = rules(
            &[
                ("*", "*", Allow),
                ("question", "*", Deny),
                ("task", "*", Deny),
                ("task", "general", Allow),
                ("edit", "*.md", Deny),
            ],
            "t",
        );
        assert!(disabled("question", &cfg));
        assert!(
            !disabled("task", &cfg),
            "a later specific allow keeps it visible"
        );
        assert!(
            !disabled("edit", &cfg),
            "a pattern deny does not hide the tool"
        );
        assert!(!disabled("read", &cfg));
        let shown: Vec<usize> = relevant("task", &cfg)
            .iter()
            .map(|r| r.source.position)
            .collect();
        assert_eq!(shown, vec![1, 3, 4]);
    }

    fn boundary(spec: &[(&str, &str, Action)], origin: &str) -> Vec<Rule> {
        let mut out = vec![Rule::new("*", "*", Ask, origin, 0).in_layer(Layer::Boundary)];
        out.extend(
            rules(spec, origin)
                .into_iter()
                .map(|r| r.in_layer(Layer::Boundary)),
        );
        out
    }

    #[test]
    fn a_boundary_caps_every_layer_and_every_approval() {
        let mut cfg = rules(
            &[
                ("*", "*", Allow),
                ("bash", "*", Allow),
                ("read", "*", Allow),
            ],
            "cfg",
        );
        cfg.extend(boundary(
            &[
                ("*", "*", Allow),
                ("bash", "rm *", Deny),
                ("read", "/etc/*", Ask),
            ],
            "/etc/runner/boundary.toml",
        ));
        let approved = rules(&[("bash", "rm *", Allow)], "approval");
        let cases: &[(&str, &str, Action, &str, usize)] = &[
            // The stack allows; the boundary denies: denied by the boundary's rule.
            ("bash", "rm -rf /", Deny, "/etc/runner/boundary.toml", 2),
            ("bash", "rm", Deny, "/etc/runner/boundary.toml", 2),
            // An ask in the boundary stays an ask, even against an approval.
            ("read", "/etc/passwd", Ask, "/etc/runner/boundary.toml", 3),
            // What the boundary allows, the stack decides.
            ("bash", "ls", Allow, "cfg", 2),
            ("read", "src/a.rs", Allow, "cfg", 3),
        ];
        for &(perm, subject, want, origin, pos) in cases {
            let d = evaluate(perm, &[subject], &cfg, &approved);
            assert_eq!(d.action, want, "{perm} {subject}");
            let r = d.rule.unwrap();
            assert_eq!((r.source.origin.as_str(), r.source.position), (origin, pos));
        }
        // A stricter stack stays stricter.
        let mut strict = rules(&[("bash", "*", Deny)], "cfg");
        strict.extend(boundary(&[("*", "*", Allow)], "b"));
        assert_eq!(evaluate("bash", &["ls"], &strict, &[]).action, Deny);
        // A boundary without a matching rule asks; two boundaries both apply.
        let mut two = rules(&[("*", "*", Allow)], "cfg");
        two.extend(boundary(&[("bash", "*", Allow)], "b1"));
        two.extend(boundary(
            &[("*", "*", Allow), ("bash", "git *", Deny)],
            "b2",
        ));
        assert_eq!(evaluate("read", &["x"], &two, &[]).action, Ask);
        assert_eq!(evaluate("bash", &["ls"], &two, &[]).action, Allow);
        assert_eq!(evaluate("bash", &["git push"], &two, &[]).action, Deny);
        assert_eq!(boundary_runs(&two).len(), 2);
        // A boundary's `"*"` deny hides the tool; its allow does not undo the stack's.
        let mut hidden = rules(&[("*", "*", Allow)], "cfg");
        hidden.extend(boundary(&[("question", "*", Deny)], "b"));
        assert!(disabled("question", &hidden));
        let mut kept = rules(&[("question", "*", Deny)], "cfg");
        kept.extend(boundary(&[("*", "*", Allow)], "b"));
        assert!(disabled("question", &kept));
    }
}
