//! `runner permission learn` on a real session's trail: a scripted model over real HTTP
//! fixes a test behind landlock and in docker, one command denied by a rule, all recorded
//! with `--audit`. The learned rules, given to a replay of the same session with `--ask
//! deny`, let the same calls run and refuse the same one; a call the trail never saw is
//! denied by them; a boundary the learned rules would exceed stops `learn` with the
//! counterexample and nothing written.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::project::Project;
use common::provider::{Response, ScriptedModel, call, text};
use serde_json::{Value, json};

const BROKEN: &str = "echo $(($1 - $2))\n";
const FIXED: &str = "echo $(($1 + $2))\n";

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The session: read, edit, run the test, try to clean up with `rm` (denied), answer.
/// `extra`: one more command before the answer.
fn script(extra: Option<&str>) -> Vec<Response> {
    let mut s = vec![
        Response::Stream(call("read", json!({"filePath": "add.sh"}))),
        Response::Stream(call(
            "edit",
            json!({"filePath": "add.sh", "oldString": "$1 - $2", "newString": "$1 + $2"}),
        )),
        Response::Stream(call(
            "bash",
            json!({"command": "sh test.sh", "description": "Run the test"}),
        )),
        Response::Stream(call(
            "bash",
            json!({"command": "rm -rf build", "description": "Clean"}),
        )),
    ];
    if let Some(command) = extra {
        s.push(Response::Stream(call(
            "bash",
            json!({"command": command, "description": "More"}),
        )));
    }
    s.push(Response::Stream(text("Fixed.")));
    s
}

struct Setup {
    project: Project,
    backend: &'static str,
}

impl Setup {
    fn new(backend: &'static str) -> Setup {
        let project = Project::new("wt");
        common::git(&project.root, &["init", "-q"]);
        project.file("add.sh", BROKEN);
        project.file(
            "test.sh",
            "if [ \"$(sh add.sh 2 3)\" = 5 ]; then echo PASS; else echo FAIL; exit 1; fi\n",
        );
        if backend == "docker" {
            common::engine::docker();
            for dir in [&project.root, &project.outside, &project.data] {
                common::engine::hand_over(dir);
            }
        }
        Setup { project, backend }
    }

    fn runner(&self) -> Command {
        let mut c = self.project.command();
        if self.backend == "docker" {
            common::engine::as_owner(&mut c);
        }
        c
    }

    /// One session with `config`, recorded in `trail`; the model's calls are `script`.
    fn session(
        &self,
        config: &Path,
        trail: &Path,
        script: Vec<Response>,
    ) -> (Output, ScriptedModel) {
        let model = ScriptedModel::start(script);
        std::fs::write(self.project.root.join("add.sh"), BROKEN).unwrap();
        common::engine::hand_over(&self.project.root);
        let mut c = self.project.command();
        c.args([
            "run",
            "--sandbox",
            self.backend,
            "--ask",
            "deny",
            "--continue-on-deny",
        ])
        .arg("--config")
        .arg(config)
        .arg("--audit")
        .arg(trail)
        .args(["--model", "openai/gpt-test", "--json", "fix the test"])
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", model.openai_base());
        if self.backend == "docker" {
            common::engine::cli(&mut c);
        }
        (c.output().unwrap(), model)
    }

    fn outside(&self, name: &str) -> PathBuf {
        self.project.outside.join(name)
    }
}

/// The gate's decisions in a trail: (permission, subjects, allowed).
fn decisions(trail: &Path) -> Vec<(String, Vec<String>, bool)> {
    let text = std::fs::read_to_string(trail).unwrap();
    let mut out: Vec<(String, Vec<String>, bool)> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["class_uid"] == 6003 && r["api"]["service"]["name"] == "runner tools")
        .map(|r| {
            let subjects = r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x["name"].as_str().unwrap().to_string())
                .collect();
            let allowed = matches!(r["disposition_id"].as_u64(), Some(1 | 8));
            (
                r["api"]["operation"].as_str().unwrap().to_string(),
                subjects,
                allowed,
            )
        })
        .collect();
    out.sort();
    out
}

fn learn_and_replay(backend: &'static str) {
    let s = Setup::new(backend);
    let wide = s.outside("wide.toml");
    std::fs::write(&wide, "[permission.bash]\n\"rm *\" = \"deny\"\n").unwrap();
    let first = s.outside("first.jsonl");
    let (out, _) = s.session(&wide, &first, script(None));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        std::fs::read_to_string(s.project.root.join("add.sh")).unwrap(),
        FIXED
    );
    let seen = decisions(&first);
    assert!(
        seen.contains(&("bash".into(), vec!["rm -rf build".into()], false)),
        "{seen:?}"
    );
    assert!(
        seen.contains(&("edit".into(), vec!["add.sh".into()], true)),
        "{seen:?}"
    );

    // Learn, into a file.
    let learned = s.outside("learned.toml");
    let out = s
        .runner()
        .args(["permission", "learn"])
        .arg(&first)
        .arg("--out")
        .arg(&learned)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let rules = std::fs::read_to_string(&learned).unwrap();
    assert!(
        rules.contains("\"sh test.sh\" = \"allow\" # 1 call"),
        "{rules}"
    );
    assert!(rules.contains("\"add.sh\" = \"allow\" # 1 call"), "{rules}");
    assert!(!rules.contains("\"rm -rf build\" = \"allow\""), "{rules}");

    // The same session under the learned rules alone, asks refused: the same calls run,
    // the same one is refused, and the test is fixed again.
    let second = s.outside("second.jsonl");
    let (out, model) = s.session(&learned, &second, script(None));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        std::fs::read_to_string(s.project.root.join("add.sh")).unwrap(),
        FIXED
    );
    assert_eq!(decisions(&second), seen);
    let told = model.requests()[3].body.to_string();
    assert!(told.contains("PASS"), "the test ran: {told}");

    // A call the trail never saw is denied, by the learned file's own rule.
    let third = s.outside("third.jsonl");
    let (out, model) = s.session(&learned, &third, script(Some("echo unseen > seen.txt")));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(!s.project.root.join("seen.txt").exists());
    let last = decisions(&third);
    assert!(
        last.contains(&("bash".into(), vec!["echo unseen > seen.txt".into()], false)),
        "{last:?}"
    );
    let told = model.requests()[5].body.to_string();
    assert!(
        told.contains(&learned.display().to_string()),
        "the rule is named: {told}"
    );
}

#[test]
fn learned_rules_replay_the_same_calls_and_deny_new_ones_behind_landlock() {
    learn_and_replay("landlock");
}

#[test]
fn learned_rules_replay_the_same_calls_and_deny_new_ones_in_docker() {
    learn_and_replay("docker");
}

/// `--boundary`: proved before anything is written; stdout without `--out`.
#[test]
fn learned_rules_beyond_a_boundary_are_refused_with_the_counterexample() {
    let s = Setup::new("landlock");
    let wide = s.outside("wide.toml");
    std::fs::write(&wide, "[permission.bash]\n\"rm *\" = \"deny\"\n").unwrap();
    let trail = s.outside("trail.jsonl");
    let (out, _) = s.session(&wide, &trail, script(None));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let boundary = s.outside("boundary.toml");
    std::fs::write(
        &boundary,
        "[permission]\n\"*\" = \"allow\"\n[permission.bash]\n\"sh *\" = \"deny\"\n",
    )
    .unwrap();
    let learned = s.outside("learned.toml");
    let learn = |boundary: &Path, out: Option<&Path>| {
        let mut c = s.runner();
        c.args(["permission", "learn"])
            .arg(&trail)
            .arg("--boundary")
            .arg(boundary);
        if let Some(out) = out {
            c.arg("--out").arg(out);
        }
        c.output().unwrap()
    };
    let out = learn(&boundary, Some(&learned));
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bash \"sh test.sh\""), "{err}");
    assert!(err.contains("\"sh *\" = deny"), "{err}");
    assert!(!learned.exists(), "nothing is written");
    // Within a boundary that allows it all, the rules go to stdout.
    std::fs::write(&boundary, "[permission]\n\"*\" = \"allow\"\n").unwrap();
    let out = learn(&boundary, None);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"sh test.sh\" = \"allow\""));
}

/// Attack: a session that cleaned a scratch folder with `rm -rf *` must not teach an allow
/// that also matches `rm -rf /` (the language has no literal `*`); the command it could
/// say, `sh test.sh`, is still allowed.
#[test]
fn a_wildcard_the_session_ran_is_not_learned_as_one_that_matches_more() {
    let s = Setup::new("landlock");
    s.project.file("junk/old.txt", "x\n");
    let wide = s.outside("wide.toml");
    std::fs::write(&wide, "[permission]\n\"*\" = \"allow\"\n").unwrap();
    let trail = s.outside("trail.jsonl");
    let (out, _) = s.session(&wide, &trail, script(Some("cd junk && rm -rf *")));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let seen = decisions(&trail);
    assert!(
        seen.contains(&("bash".into(), vec!["rm -rf *".into()], true)),
        "{seen:?}"
    );
    let learned = s.outside("learned.toml");
    let out = s
        .runner()
        .args(["permission", "learn"])
        .arg(&trail)
        .arg("--out")
        .arg(&learned)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not learned: bash \"rm -rf *\""), "{err}");
    let rules = std::fs::read_to_string(&learned).unwrap();
    assert!(
        rules.contains(
            "# not learned (the rule language cannot say it literally, 1 call): rm -rf *"
        ),
        "{rules}"
    );
    let eval = |permission: &str, subject: &str| {
        let out = s
            .runner()
            .args(["permission", "eval", permission, subject, "--json"])
            .arg("--root")
            .arg(&s.project.root)
            .arg("--config")
            .arg(&learned)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["action"].as_str().unwrap_or_default().to_string()
    };
    for attack in ["rm -rf /", "rm -rf ~", "rm -rf .", "rm -rf *"] {
        assert_eq!(eval("bash", attack), "deny", "{attack}\n{rules}");
    }
    // The read side: the glob's `*` was read as a subject, and `?` is not learned for it.
    assert!(!rules.contains("\"?\" = \"allow\""), "{rules}");
    assert_eq!(eval("read", "x"), "deny", "{rules}");
    assert_eq!(eval("bash", "sh test.sh"), "allow", "{rules}");
}
