//! The boundary (issue 42 §1) on real runs, and `runner permission prove` (§2) held to
//! `runner permission eval`: every counterexample it names is decided as it says.
//!
//! Each run's rules allow what the boundary denies, from every layer a person or a
//! repository controls: a profile, the user's config, the repository's `.runner/config.toml`,
//! and `--config`. The boundary must win on landlock and on docker, for a bash call and a
//! read; the same calls without the boundary, and other calls with it, are the controls.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use common::boundary::{boundary_file, root_only_dir};
use common::project::Project;

const BOUNDARY: &str = r#"[permission]
"*" = "allow"
[permission.bash]
"touch *" = "deny"
"make *" = "ask"
[permission.read]
"secret.txt" = "deny"
"#;

/// What every layer below the boundary says: allow it all.
const LOOSE: &str = r#"[permission]
"*" = "allow"
[permission.bash]
"touch *" = "allow"
"make *" = "allow"
[permission.read]
"secret.txt" = "allow"
"#;

struct Setup {
    project: Project,
    explicit: PathBuf,
    /// A profile file whose rules allow it all too.
    profile: PathBuf,
    _dir: tempfile::TempDir,
    boundary: PathBuf,
}

fn setup() -> Setup {
    let project = Project::new("wt");
    project.user_config(LOOSE);
    project.file(".runner/config.toml", LOOSE);
    project.file("secret.txt", "the secret\n");
    project.file("other.txt", "not secret\n");
    let explicit = project.outside.join("loose.toml");
    std::fs::write(&explicit, LOOSE).unwrap();
    let profile = project.outside.join("loose-profile.toml");
    std::fs::write(
        &profile,
        format!("description = \"allows it all\"\n[sandbox]\nnetwork = \"none\"\n{LOOSE}"),
    )
    .unwrap();
    let dir = root_only_dir();
    let boundary = boundary_file(dir.path(), BOUNDARY);
    Setup {
        project,
        explicit,
        profile,
        _dir: dir,
        boundary,
    }
}

impl Setup {
    /// `runner ARGS --root WT --config LOOSE`, with
    /// `RUNNER_BOUNDARY` set to `boundary` (or removed).
    fn runner(&self, args: &[&str], boundary: Option<&Path>) -> Command {
        let mut c = self.project.command();
        c.args(args)
            .arg("--root")
            .arg(&self.project.root)
            .arg("--config")
            .arg(&self.explicit)
            .env_remove("RUNNER_BOUNDARY");
        if let Some(b) = boundary {
            c.env("RUNNER_BOUNDARY", b);
        }
        c
    }

    fn call(
        &self,
        backend: common::Backend,
        tool: &str,
        args: Value,
        boundary: Option<&Path>,
        audit: &Path,
    ) -> Output {
        let args = args.to_string();
        let sandbox = match backend {
            common::Backend::Docker => {
                common::engine::docker();
                "docker"
            }
            _ => "landlock",
        };
        let audit = audit.to_string_lossy().into_owned();
        let profile = self.profile.to_string_lossy().into_owned();
        let argv = [
            "tool",
            "call",
            tool,
            &args,
            "--sandbox",
            sandbox,
            "--ask",
            "deny",
            "--profile",
            &profile,
            "--audit",
            &audit,
        ];
        let mut c = self.runner(&argv, boundary);
        if backend == common::Backend::Docker {
            common::engine::cli(&mut c);
        }
        c.output().unwrap()
    }
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout {}\nstderr {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn bash(command: &str) -> Value {
    json!({"command": command, "description": "boundary test", "timeout": 60000})
}

#[test]
fn a_boundary_beats_every_layer_on_landlock() {
    a_boundary_beats_every_layer(common::Backend::Landlock);
}

#[test]
fn a_boundary_beats_every_layer_on_docker() {
    a_boundary_beats_every_layer(common::Backend::Docker);
}

fn a_boundary_beats_every_layer(backend: common::Backend) {
    let s = setup();
    let wt = &s.project.root;
    let trail = s.project.outside.join("trail.jsonl");
    let b = Some(s.boundary.as_path());

    // Controls: without the boundary, the layers' allows stand.
    let out = s.call(
        backend,
        "bash",
        bash("touch without-boundary"),
        None,
        &trail,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(wt.join("without-boundary").exists(), "{}", text(&out));
    let out = s.call(
        backend,
        "read",
        json!({"filePath": "secret.txt"}),
        None,
        &trail,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("the secret"));

    // With it: the bash call and the read are denied, nothing ran.
    let out = s.call(backend, "bash", bash("touch with-boundary"), b, &trail);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(!wt.join("with-boundary").exists(), "{}", text(&out));
    assert!(
        text(&out).contains(&s.boundary.display().to_string()),
        "{}",
        text(&out)
    );
    let out = s.call(
        backend,
        "read",
        json!({"filePath": "secret.txt"}),
        b,
        &trail,
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("the secret"));
    // The boundary's ask stays an ask: with nobody to answer, refused.
    let out = s.call(backend, "bash", bash("make -v"), b, &trail);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    // What the boundary allows still runs under it.
    let out = s.call(backend, "bash", bash("echo fine > allowed"), b, &trail);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(wt.join("allowed").exists());
    let out = s.call(backend, "read", json!({"filePath": "other.txt"}), b, &trail);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // The trail names the boundary as the deciding layer of the two denials.
    let records: Vec<Value> = std::fs::read_to_string(&trail)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_boundary: Vec<&Value> = records
        .iter()
        .filter(|r| r.pointer("/policy/data/layer") == Some(&json!("boundary")))
        .collect();
    let origin = s.boundary.display().to_string();
    assert_eq!(by_boundary.len(), 3, "{records:#?}");
    for r in by_boundary {
        assert_eq!(
            r.pointer("/policy/data/origin"),
            Some(&json!(origin)),
            "{r}"
        );
    }
}

#[test]
fn a_boundary_anyone_could_write_is_refused() {
    let s = setup();
    // In the worktree (the repository's own file), under /tmp: refused loudly, nothing runs.
    let planted = s.project.file("boundary.toml", "permission = \"allow\"\n");
    let missing = s.project.outside.join("missing.toml");
    for path in [&planted, &missing] {
        let out = s
            .runner(
                &[
                    "tool",
                    "call",
                    "bash",
                    &bash("touch ran").to_string(),
                    "--sandbox",
                    "landlock",
                ],
                Some(path),
            )
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(!s.project.root.join("ran").exists());
    }
    // A root-owned file in a folder anyone may write is refused too.
    let open = tempfile::tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let swapped = boundary_file(open.path(), BOUNDARY);
    let out = s
        .runner(&["permission", "eval", "bash", "ls"], Some(&swapped))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("chmod go-w"),
        "{}",
        text(&out)
    );
}

fn eval(
    s: &Setup,
    permission: &str,
    subject: &str,
    config: &Path,
    boundary: Option<&Path>,
) -> Value {
    let mut c = s.project.command();
    c.args([
        "permission",
        "eval",
        permission,
        subject,
        "--json",
        "--trust-project",
    ])
    .arg("--root")
    .arg(&s.project.root)
    .arg("--config")
    .arg(config)
    .env_remove("RUNNER_BOUNDARY");
    if let Some(b) = boundary {
        c.env("RUNNER_BOUNDARY", b);
    }
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn prove(s: &Setup, args: &[&str]) -> (Option<i32>, Value) {
    let out = s
        .project
        .command()
        .args(["permission", "prove", "--json", "--trust-project"])
        .args(args)
        .arg("--root")
        .arg(&s.project.root)
        .env_remove("RUNNER_BOUNDARY")
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    (out.status.code(), v)
}

#[test]
fn every_counterexample_is_what_eval_decides() {
    let s = setup();
    let explicit = s.explicit.to_string_lossy().into_owned();
    let boundary = s.boundary.to_string_lossy().into_owned();
    let (code, proof) = prove(&s, &["--boundary", &boundary, "--config", &explicit]);
    assert_eq!(code, Some(1), "{proof:#}");
    assert_eq!(proof["holds"], json!(false));
    let found = proof["counterexamples"].as_array().unwrap();
    let named: Vec<(&str, &str)> = found
        .iter()
        .map(|c| {
            (
                c["permission"].as_str().unwrap(),
                c["subject"].as_str().unwrap(),
            )
        })
        .collect();
    // `touch` alone is the shortest command `"touch *"` denies; `make` asks.
    assert!(
        named.contains(&("bash", "make")) || named.contains(&("bash", "touch")),
        "{named:?}"
    );
    assert!(named.contains(&("read", "secret.txt")), "{named:?}");
    for c in found {
        let (permission, subject) = (
            c["permission"].as_str().unwrap(),
            c["subject"].as_str().unwrap(),
        );
        // Without the boundary installed, eval decides as the prover said, by its rule.
        let v = eval(&s, permission, subject, &s.explicit, None);
        assert_eq!(v["action"], c["decision"], "{c:#}\n{v:#}");
        assert_eq!(v["rule"], c["rule"], "{c:#}\n{v:#}");
        // The boundary file alone decides as it said; installed, it decides.
        let v = eval(&s, permission, subject, &s.explicit, Some(&s.boundary));
        assert_eq!(v["action"], c["boundary"]["action"], "{c:#}\n{v:#}");
        assert_eq!(v["layer"], json!("boundary"), "{c:#}\n{v:#}");
    }
    // A boundary that allows it all: the proof holds.
    let dir = root_only_dir();
    let wide = boundary_file(dir.path(), "permission = \"allow\"\n");
    let (code, proof) = prove(
        &s,
        &["--boundary", wide.to_str().unwrap(), "--config", &explicit],
    );
    assert_eq!(
        (code, &proof["holds"]),
        (Some(0), &json!(true)),
        "{proof:#}"
    );
}

#[test]
fn a_diff_names_only_the_added_reach() {
    let s = setup();
    let old = s.project.outside.join("old.toml");
    let new = s.project.outside.join("new.toml");
    let same = s.project.outside.join("same.toml");
    let base = "[permission]\n\"*\" = \"ask\"\n[permission.bash]\n\"git *\" = \"allow\"\n";
    std::fs::write(&old, base).unwrap();
    std::fs::write(&same, format!("{base}\"git status *\" = \"allow\"\n")).unwrap();
    std::fs::write(&new, format!("{base}\"cargo *\" = \"allow\"\n")).unwrap();
    let arg = |p: &Path| p.to_string_lossy().into_owned();
    let (code, v) = prove(&s, &["--diff", &arg(&old), &arg(&same)]);
    assert_eq!((code, &v["holds"]), (Some(0), &json!(true)), "{v:#}");
    let (code, v) = prove(&s, &["--diff", &arg(&old), &arg(&new)]);
    assert_eq!(code, Some(1), "{v:#}");
    let found = v["counterexamples"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{v:#}");
    assert_eq!(
        (
            found[0]["permission"].as_str(),
            found[0]["subject"].as_str()
        ),
        (Some("bash"), Some("cargo"))
    );
    assert_eq!(
        eval(&s, "bash", "cargo", &new, None)["action"],
        json!("allow")
    );
    assert_eq!(
        eval(&s, "bash", "cargo", &old, None)["action"],
        found[0]["old"]["action"]
    );
}
