//! Learning from trails runner's own audit sink wrote, judged by the gate.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use runner_audit::{Audit, Decision, Limits, Permission, SandboxStart};
use runner_permission::PermissionRequest;
use runner_permission::gate::{PolicyAsker, RuleGate};
use runner_permission::rules::Action;

use super::*;

/// A trail with `decisions` (permission, subjects, decision, times), after a start in
/// `worktree`; repeats past two are folded into a count, as a long session's are.
fn trail(dir: &Path, worktree: &Path, decisions: &[(&str, &[&str], Decision, u64)]) -> PathBuf {
    let path = dir.join("trail.jsonl");
    let audit = Audit::open(std::slice::from_ref(&path), "test", None)
        .unwrap()
        .with_limits(Limits {
            fold_after: 2,
            ..Limits::default()
        });
    audit.sandbox_start(&SandboxStart {
        backend: "landlock".into(),
        network: "none".into(),
        worktree: worktree.display().to_string(),
        description: "test".into(),
        command: None,
    });
    for (permission, subjects, decision, times) in decisions {
        for _ in 0..*times {
            audit.permission(&Permission {
                tool: None,
                permission: permission.to_string(),
                patterns: subjects.iter().map(|s| s.to_string()).collect(),
                decision: *decision,
                rule: None,
                detail: None,
            });
        }
    }
    audit.sandbox_end(&runner_audit::SandboxEnd {
        backend: "landlock".into(),
        reason: None,
    });
    path
}

fn learned(decisions: &[(&str, &[&str], Decision, u64)]) -> (Learned, Observed, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let wt = dir.path().join("wt");
    std::fs::create_dir_all(&wt).unwrap();
    let path = trail(dir.path(), &wt, decisions);
    let observed = trail::read_all(&[path]).unwrap();
    assert_eq!(observed.worktree.as_deref(), Some(wt.as_path()));
    let options = Options {
        worktree: wt.clone(),
        home: "/home/someone".into(),
    };
    let learned = learn(&observed, &options).unwrap();
    // The tempdir goes; the paths stay meaningful as strings.
    (learned, observed, wt)
}

fn decide(learned: &Learned, wt: &Path, permission: &str, subjects: &[&str]) -> Action {
    let gate = RuleGate::new(
        wt,
        learned.rules.clone(),
        Arc::new(PolicyAsker::deny("test")),
    );
    let request = PermissionRequest::new(
        permission,
        subjects.iter().map(|s| s.to_string()).collect(),
        Vec::new(),
    );
    gate.verdict(&request).action
}

#[test]
fn what_the_trail_allowed_is_allowed_and_nothing_else() {
    let (l, observed, wt) = learned(&[
        ("bash", &["git status"], Decision::Allowed, 5),
        ("bash", &["rm -rf build"], Decision::Denied, 1),
        ("edit", &["src/a.rs"], Decision::Approved, 1),
        ("read", &[".env"], Decision::Rejected, 1),
        ("read", &["README.md"], Decision::Allowed, 1),
        ("network", &["example.com"], Decision::Allowed, 1),
        ("external_directory", &["/tmp/x/*"], Decision::Unanswered, 1),
    ]);
    assert!(l.conflicts.is_empty(), "{:?}", l.conflicts);
    // Folded repeats still count: five calls of git status.
    assert_eq!(observed.allowed_calls(), 8);
    assert_eq!(observed.denied_calls(), 3);
    assert!(
        l.text.contains("\"git status\" = \"allow\" # 5 calls"),
        "{}",
        l.text
    );
    for (permission, subject) in [
        ("bash", "git status"),
        ("edit", "src/a.rs"),
        ("read", "README.md"),
        ("network", "example.com"),
    ] {
        assert_eq!(
            decide(&l, &wt, permission, &[subject]),
            Action::Allow,
            "{subject}"
        );
    }
    // The same file by its absolute spelling, as the gate takes it.
    let abs = wt.join("src/a.rs").display().to_string();
    assert_eq!(decide(&l, &wt, "edit", &[&abs]), Action::Allow);
    for (permission, subject) in [
        ("bash", "rm -rf build"),
        ("read", ".env"),
        ("external_directory", "/tmp/x/*"),
        // Never seen.
        ("bash", "git push"),
        ("bash", "git status --porcelain"),
        ("edit", "src/b.rs"),
        ("webfetch", "https://example.com"),
        ("network", "example.org"),
    ] {
        assert_eq!(
            decide(&l, &wt, permission, &[subject]),
            Action::Deny,
            "{subject}"
        );
    }
    assert!(
        l.text
            .contains("# denied in the trails (1 call), and here: rm -rf build"),
        "{}",
        l.text
    );
}

#[test]
fn a_subject_no_pattern_says_literally_is_not_learned_but_named() {
    let (l, _, wt) = learned(&[
        ("bash", &["ls *.rs"], Decision::Allowed, 1),
        ("bash", &["rm -rf *"], Decision::Allowed, 2),
        ("bash", &["git status"], Decision::Allowed, 1),
        ("read", &["?"], Decision::Allowed, 1),
        ("bash", &["ls a.rs"], Decision::Denied, 1),
    ]);
    assert!(l.conflicts.is_empty(), "{:?}", l.conflicts);
    // `rm -rf ?` would allow these: nothing does.
    for (permission, subject) in [
        ("bash", "rm -rf /"),
        ("bash", "rm -rf ~"),
        ("bash", "rm -rf ."),
        ("bash", "rm -rf *"),
        ("bash", "ls *.rs"),
        ("bash", "ls a.rs"),
        ("read", "x"),
        ("read", "?"),
    ] {
        assert_eq!(
            decide(&l, &wt, permission, &[subject]),
            Action::Deny,
            "{subject}\n{}",
            l.text
        );
    }
    assert_eq!(decide(&l, &wt, "bash", &["git status"]), Action::Allow);
    assert!(!l.text.contains("\"rm -rf ?\""), "{}", l.text);
    assert!(
        l.text.contains(
            "# not learned (the rule language cannot say it literally, 2 calls): rm -rf *"
        ),
        "{}",
        l.text
    );
    let mut unsayable = l.unsayable.clone();
    unsayable.sort();
    assert_eq!(
        unsayable,
        vec![
            ("bash".to_string(), "ls *.rs".to_string(), 1),
            ("bash".to_string(), "rm -rf *".to_string(), 2),
            ("read".to_string(), "?".to_string(), 1),
        ]
    );
}

#[test]
fn another_spelling_of_an_allowed_command_does_not_deny_it() {
    let (l, _, wt) = learned(&[("bash", &["/bin/echo hi"], Decision::Allowed, 1)]);
    assert!(l.conflicts.is_empty(), "{:?}\n{}", l.conflicts, l.text);
    let mut request = PermissionRequest::new("bash", vec!["/bin/echo hi".into()], Vec::new());
    request.deny_spellings = vec![(
        "/bin/echo hi".into(),
        narrow::deny_spellings("/bin/echo hi", &wt, None),
    )];
    assert!(
        !request.deny_spellings[0].1.is_empty(),
        "the analyser gives echo hi"
    );
    let gate = RuleGate::new(&wt, l.rules.clone(), Arc::new(PolicyAsker::deny("test")));
    assert_eq!(gate.verdict(&request).action, Action::Allow, "{}", l.text);
}

#[test]
fn a_denied_request_of_subjects_each_allowed_elsewhere_is_named() {
    let (l, _, _) = learned(&[
        ("bash", &["make"], Decision::Allowed, 1),
        ("bash", &["make test"], Decision::Allowed, 1),
        ("bash", &["make", "make test"], Decision::Denied, 1),
    ]);
    assert_eq!(l.conflicts.len(), 1, "{}", l.text);
    assert!(l.text.contains("# NOT REPRODUCED: bash"), "{}", l.text);
}

#[test]
fn the_boundary_is_proved_before_anything_is_kept() {
    let (l, _, wt) = learned(&[
        ("bash", &["git status"], Decision::Allowed, 1),
        ("bash", &["rm -rf build"], Decision::Allowed, 1),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let tight = dir.path().join("boundary.toml");
    std::fs::write(
        &tight,
        "[permission.bash]\n\"*\" = \"allow\"\n\"rm *\" = \"deny\"\n",
    )
    .unwrap();
    let rules = runner_permission::layers::load_file(&tight, "/home/someone").unwrap();
    let err = within(&l, &tight, &rules, &wt).unwrap_err().to_string();
    assert!(err.contains("bash \"rm -rf build\""), "{err}");
    assert!(err.contains("\"rm *\" = deny"), "{err}");
    let wide = dir.path().join("wide.toml");
    std::fs::write(&wide, "[permission.bash]\n\"*\" = \"allow\"\n").unwrap();
    let rules = runner_permission::layers::load_file(&wide, "/home/someone").unwrap();
    within(&l, &wide, &rules, &wt).unwrap();
}

#[test]
fn a_file_that_is_no_trail_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "{\"class_uid\": 6003}\nnot json\n").unwrap();
    let err = trail::read_all(std::slice::from_ref(&path))
        .unwrap_err()
        .to_string();
    assert!(err.contains("notes.txt:2"), "{err}");
    std::fs::write(&path, "{\"class_uid\": 6002}\n").unwrap();
    let err = trail::read_all(&[path]).unwrap_err().to_string();
    assert!(err.contains("holds no permission decision"), "{err}");
}

#[test]
fn the_output_is_written_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rules.toml");
    std::fs::write(&out, "old").unwrap();
    write_atomic(&out, "new").unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "new");
    let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(leftovers, 1, "no temporary file is left");
    let err = write_atomic(&dir.path().join("missing/rules.toml"), "x").unwrap_err();
    assert!(err.to_string().contains("missing/rules.toml"), "{err}");
}
