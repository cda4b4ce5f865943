//! The prover against brute force: every subject up to a length, judged by the gate.

use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use runner_permission::PermissionRequest;
use runner_permission::gate::{PolicyAsker, RuleGate};
use runner_permission::rules::{Action, Layer, Rule, strictness};

use super::*;

const WORKTREE: &str = "/a";
/// The subjects' characters: the worktree's, the path parser's, the wildcard's own, a
/// space (for `" *"`), and one no pattern names.
const LETTERS: [char; 8] = ['a', 'b', '/', '\\', '.', '*', ' ', 'x'];
const NAMES: [&str; 5] = ["read", "list", "bash", "r", ""];

fn judge(gate: &RuleGate, asks_denied: bool, permission: &str, subject: &str) -> Action {
    let request = PermissionRequest::new(permission, vec![subject.to_string()], Vec::new());
    match gate.verdict(&request).action {
        Action::Ask if asks_denied => Action::Deny,
        a => a,
    }
}

fn pattern() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "a", "b", "/", "\\", ".", "*", "?", " ", " *", "/a/", "./", "*.",
    ]);
    prop::collection::vec(piece, 0..4).prop_map(|p| p.concat())
}

fn rule() -> impl Strategy<Value = (String, String, Action)> {
    let permission = prop::sample::select(vec!["*", "read", "bash", "r*", "?ead", "edit", "*t"]);
    let action = prop::sample::select(vec![Action::Allow, Action::Ask, Action::Deny]);
    (permission, pattern(), action).prop_map(|(p, pat, a)| (p.to_string(), pat, a))
}

fn ruleset(spec: &[(String, String, Action)], origin: &str, layer: Layer) -> Vec<Rule> {
    spec.iter()
        .enumerate()
        .map(|(i, (p, pat, a))| Rule::new(p, pat, *a, origin, i + 1).in_layer(layer))
        .collect()
}

proptest! {
    // 16 cases in CI (about 6 s in a debug build); PROPTEST_CASES=N for a longer run.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(16),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_prover_agrees_with_trying_every_subject(
        loose in prop::collection::vec(rule(), 0..5),
        capped in prop::collection::vec(rule(), 0..3),
        limit in prop::collection::vec(rule(), 0..5),
        asks_denied in any::<bool>(),
    ) {
        const MAX: usize = 4;
        let mut loose_rules = ruleset(&loose, "loose", Layer::User);
        // Sometimes an installed boundary sits on the loose side too.
        loose_rules.extend(ruleset(&capped, "installed", Layer::Boundary));
        let limit_rules = ruleset(&limit, "limit", Layer::Other);
        let a = Side { rules: &loose_rules, asks_denied };
        let b = Side::new(&limit_rules);
        let proof = compare(a, b, Path::new(WORKTREE)).unwrap();
        let patterns: Vec<glob::Glob> = loose_rules
            .iter()
            .chain(&limit_rules)
            .map(|r| glob::Glob::new(&r.permission))
            .collect();
        let problem = search::Problem::new(a, b, WORKTREE);
        let gate = |s: Side| {
            RuleGate::new(Path::new(WORKTREE), s.rules.to_vec(), Arc::new(PolicyAsker::allow()))
        };
        let (ga, gb) = (gate(a), gate(b));
        for name in NAMES {
            // The model decides every short subject as the gate does, both sides, for file
            // permissions (two spellings) and others alike; and the gate's shortest way out.
            let file = names::FILE.contains(&name);
            let mut shortest: Option<usize> = None;
            let mut wrong: Option<String> = None;
            problem.walk(&names::matched(&patterns, name), file, &LETTERS, MAX, &mut |s, model| {
                let by_gate = (judge(&ga, a.asks_denied, name, s), judge(&gb, false, name, s));
                if model != by_gate && wrong.is_none() {
                    wrong = Some(format!("{name} {s:?}: model {model:?}, gate {by_gate:?}"));
                }
                if strictness(by_gate.0) < strictness(by_gate.1) {
                    let n = s.chars().count();
                    shortest = Some(shortest.map_or(n, |m| m.min(n)));
                }
            });
            prop_assert!(wrong.is_none(), "{}", wrong.unwrap_or_default());
            // A name stands for its class: the same rules' permission patterns match it, and
            // it is a file permission exactly when the name is one.
            let reported = proof.counterexamples.iter().find(|c| {
                let theirs = c.permission.as_str();
                if file || names::FILE.contains(&theirs) {
                    theirs == name
                } else {
                    names::matched(&patterns, theirs) == names::matched(&patterns, name)
                }
            });
            match (shortest, reported) {
                (None, Some(c)) => prop_assert!(
                    c.subject.chars().count() > MAX,
                    "{name}: reported {:?} but no subject up to {MAX} breaks it", c.subject
                ),
                (Some(n), None) => prop_assert!(false, "{name}: a subject of length {n} breaks it, none reported"),
                (Some(n), Some(c)) => prop_assert_eq!(
                    c.subject.chars().count(), n, "{}: {:?} is not a shortest", name, c.subject
                ),
                (None, None) => {}
            }
        }
        // Every reported one is real: the gate decides it as named.
        for c in &proof.counterexamples {
            prop_assert!(strictness(c.action) < strictness(c.limit));
        }
    }
}

fn rules(spec: &[(&str, &str, Action)], origin: &str) -> Vec<Rule> {
    spec.iter()
        .enumerate()
        .map(|(i, (p, pat, a))| Rule::new(p, pat, *a, origin, i + 1))
        .collect()
}

#[test]
fn the_defaults_within_a_boundary_and_a_shortest_way_out() {
    use Action::*;
    let defaults = runner_permission::layers::defaults();
    let boundary = rules(
        &[
            ("*", "*", Allow),
            ("bash", "rm *", Deny),
            ("read", "/etc/*", Deny),
            ("external_directory", "*", Ask),
            ("question", "*", Deny),
            ("network", "*", Ask),
        ],
        "b.toml",
    );
    let proof = prove(&defaults, &boundary, Path::new("/w")).unwrap();
    let found: Vec<(&str, &str, Action, Action)> = proof
        .counterexamples
        .iter()
        .map(|c| (c.permission.as_str(), c.subject.as_str(), c.action, c.limit))
        .collect();
    // `rm` alone is the shortest command `"rm *"` denies; `/etc/` the shortest path.
    assert_eq!(
        found,
        [("bash", "rm", Allow, Deny), ("read", "/etc/", Allow, Deny)]
    );
    let rm = &proof.counterexamples[0];
    assert_eq!(rm.rule.as_ref().map(|r| r.source.position), Some(1));
    assert_eq!(rm.limit_rule.as_ref().map(|r| r.source.position), Some(2));
}

#[test]
fn a_relative_rule_reaches_through_the_absolute_spelling() {
    use Action::*;
    // The boundary denies the absolute spelling only; the rules allow everything.
    let boundary = rules(&[("*", "*", Allow), ("edit", "/w/secret/*", Deny)], "b");
    let merged = rules(&[("*", "*", Allow)], "m");
    let proof = prove(&merged, &boundary, Path::new("/w")).unwrap();
    let subjects: Vec<&str> = proof
        .counterexamples
        .iter()
        .map(|c| c.subject.as_str())
        .collect();
    // `secret/` is relative: only its second spelling, `/w/secret/`, meets the deny.
    assert_eq!(subjects, ["secret/"]);
    assert_eq!(proof.counterexamples[0].permission, "edit");
    // Outside a file permission the same pattern is only a string.
    let proof = prove(
        &merged,
        &rules(&[("*", "*", Allow), ("bash", "/w/secret/*", Deny)], "b"),
        Path::new("/w"),
    )
    .unwrap();
    assert_eq!(proof.counterexamples[0].subject, "/w/secret/");
}

#[test]
fn names_beyond_the_known_ones_are_proved_too() {
    use Action::*;
    let merged = rules(&[("*", "*", Allow)], "m");
    let boundary = rules(&[("*", "*", Allow), ("mcp_*", "*", Deny)], "b");
    let proof = prove(&merged, &boundary, Path::new("/w")).unwrap();
    let names: Vec<&str> = proof
        .counterexamples
        .iter()
        .map(|c| c.permission.as_str())
        .collect();
    assert_eq!(names, ["mcp_"]);
    assert_eq!(proof.counterexamples[0].subject, "");
}

#[test]
fn a_diff_shows_only_what_the_new_rules_add() {
    use Action::*;
    let old = rules(
        &[
            ("*", "*", Allow),
            ("bash", "*", Ask),
            ("bash", "git *", Allow),
        ],
        "old",
    );
    let same = rules(
        &[
            ("*", "*", Allow),
            ("bash", "*", Ask),
            ("bash", "git status *", Allow),
        ],
        "new",
    );
    assert!(diff(&old, &same, Path::new("/w")).unwrap().holds());
    let wider = rules(
        &[("*", "*", Allow), ("bash", "*", Ask), ("bash", "g*", Allow)],
        "new",
    );
    let added = diff(&old, &wider, Path::new("/w")).unwrap();
    let found: Vec<(&str, &str)> = added
        .counterexamples
        .iter()
        .map(|c| (c.permission.as_str(), c.subject.as_str()))
        .collect();
    assert_eq!(found, [("bash", "g")]);
}

#[test]
fn the_real_defaults_prove_fast() {
    let defaults = runner_permission::layers::defaults();
    let boundary = runner_permission::layers::parse_toml(
        "[permission]\n\"*\" = \"allow\"\nexternal_directory = \"ask\"\nnetwork = \"ask\"\nquestion = \"deny\"\n[permission.bash]\n\"rm -rf *\" = \"deny\"\n\"sudo *\" = \"deny\"\n[permission.read]\n\"*.env\" = \"ask\"\n\"*.env.*\" = \"ask\"\n\"*.env.example\" = \"allow\"\n\"/etc/shadow\" = \"deny\"\n",
        "b",
        "/h",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let proof = prove(&defaults, &boundary, Path::new("/home/u/project")).unwrap();
    let took = started.elapsed();
    let names: Vec<&str> = proof
        .counterexamples
        .iter()
        .map(|c| c.permission.as_str())
        .collect();
    assert_eq!(names, ["bash", "read"]);
    // Debug build: well under a second in release (see the bench).
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
}

#[test]
fn a_boundary_denying_outside_folders_meets_the_saved_output_allow() {
    use runner_permission::layers::{Layers, merge};
    // A profile denies every outside folder, as the boundary does; runner's own allow for
    // its saved output comes after every layer.
    let merged = merge(Layers {
        defaults: runner_permission::layers::defaults(),
        profile: rules(&[("external_directory", "*", Action::Deny)], "profile p"),
        output_dir: Some("/data/out".into()),
        ..Layers::default()
    });
    let deny_outside = rules(
        &[
            ("*", "*", Action::Allow),
            ("external_directory", "*", Action::Deny),
        ],
        "b",
    );
    let proof = prove(&merged, &deny_outside, Path::new("/w")).unwrap();
    let c = &proof.counterexamples[0];
    assert_eq!(
        (c.permission.as_str(), c.subject.as_str(), c.action, c.limit),
        (
            "external_directory",
            "/data/out/",
            Action::Allow,
            Action::Deny
        )
    );
    assert_eq!(c.rule.as_ref().unwrap().source.origin, "saved tool output");
    // Allowing that folder in the boundary settles it.
    let with_outputs = rules(
        &[
            ("*", "*", Action::Allow),
            ("external_directory", "*", Action::Deny),
            ("external_directory", "/data/out/*", Action::Allow),
        ],
        "b",
    );
    assert!(
        prove(&merged, &with_outputs, Path::new("/w"))
            .unwrap()
            .holds()
    );
}
