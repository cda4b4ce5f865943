//! The top-level Dockerfile, built and run for real: the image is built offline from this
//! test's own static binary (the debug build, passed as `BINARY`) on the Debian base
//! `runner image build` makes, with the repository as the build context (so `.dockerignore`
//! is what keeps target/ out). Then the image runs `runner eval` against the host's engine
//! through its socket: a Harbor task with `--agent oracle`, and a JSON-lines task, whose
//! worktree the host engine mounts from the out folder, with a scripted model reached over
//! the host's network. Both must come out resolved.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::git;
use common::provider::{Response, ScriptedModel, call, text};
use serde_json::{Value, json};

const SOCKET: &str = "/var/run/docker.sock";
const BUGGY: &str = "echo $(($1 - $2))\n";
const FIXED: &str = "echo $(($1 + $2))\n";
const HIDDEN_TEST: &str =
    "if [ \"$(sh calc.sh 2 3)\" = 5 ]; then echo PASS; else echo FAIL; exit 1; fi\n";

/// The image this test built; removed when the test ends, pass or fail (it is the size of
/// the debug binary on top of the shared base).
struct Image(String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rmi", "-f", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn said(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `docker build` of the repository's Dockerfile with this test's runner as `BINARY`. The
/// context is the repository when the binary is inside it (the usual target/ folder), else
/// a folder holding the Dockerfile and the binary (a `CARGO_TARGET_DIR` elsewhere).
fn build_image(scratch: &Path) -> Image {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = Path::new(env!("CARGO_BIN_EXE_runner"));
    let (context, binary) = match exe.strip_prefix(repo) {
        Ok(relative) => (repo.to_path_buf(), relative.to_path_buf()),
        Err(_) => {
            let context = scratch.join("context");
            std::fs::create_dir_all(&context).unwrap();
            std::fs::copy(repo.join("Dockerfile"), context.join("Dockerfile")).unwrap();
            std::fs::copy(exe, context.join("runner")).unwrap();
            (context, PathBuf::from("runner"))
        }
    };
    let image = Image(format!("runner-image-test:{}", std::process::id()));
    let out = Command::new("docker")
        .args(["build", "--rm", "-t", &image.0, "--build-arg"])
        .arg(format!("BINARY={}", binary.display()))
        .arg(&context)
        .stdin(Stdio::null())
        .output()
        .expect("run docker build");
    assert!(out.status.success(), "docker build failed\n{}", said(&out));
    // The context sent is the sources and the binaries, not target/ (gigabytes).
    let log = String::from_utf8_lossy(&out.stdout);
    if let Some(size) = log
        .lines()
        .find_map(|l| l.strip_prefix("Sending build context to Docker daemon"))
    {
        let size = size.trim();
        assert!(
            size.ends_with("kB") || size.ends_with("MB"),
            "the build context is {size}: .dockerignore lets in more than the binaries"
        );
    }
    image
}

/// `docker run --rm` of the image with the engine's socket and `dir` mounted at the same
/// path (the host engine resolves the worktree mounts of the sandboxes on its own host).
fn run_image(image: &Image, dir: &Path, extra: &[&str], args: &[&str]) -> Output {
    let same = format!("{}:{}", dir.display(), dir.display());
    Command::new("docker")
        .args(["run", "--rm", "-v"])
        .arg(format!("{SOCKET}:{SOCKET}"))
        .args(["-v", &same])
        .args(extra)
        .arg(&image.0)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run docker run")
}

fn read_json(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

/// The scripted model of the JSON-lines task: read calc.sh, write the fix, done.
fn answer(body: &Value) -> Response {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let step = messages.iter().filter(|m| m["role"] == "assistant").count();
    Response::Stream(match step {
        0 => call("read", json!({"filePath": "calc.sh"})),
        1 => call("write", json!({"filePath": "calc.sh", "content": FIXED})),
        _ => text("Done."),
    })
}

/// A task set of one JSON-lines task: a git repository whose calc.sh subtracts, and a
/// hidden test that wants it to add.
fn jsonl_task(dir: &Path) -> PathBuf {
    let repo = dir.join("repos/calc");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("calc.sh"), BUGGY).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "buggy"]);
    std::fs::create_dir_all(dir.join("hidden")).unwrap();
    std::fs::write(dir.join("hidden/test.sh"), HIDDEN_TEST).unwrap();
    let task = json!({
        "id": "calc",
        "instruction": "calc.sh should add its two arguments. Fix it.",
        "repo": "repos/calc",
        "verify": "sh test.sh",
        "tests_dir": "hidden",
    });
    let file = dir.join("tasks.jsonl");
    std::fs::write(&file, format!("{task}\n")).unwrap();
    file
}

#[test]
fn the_image_builds_offline_and_runs_eval_against_the_hosts_engine() {
    common::engine::ensure_base();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let image = build_image(&dir);

    // The binary in the image is this one.
    let version = run_image(&image, &dir, &[], &["--version"]);
    assert!(version.status.success(), "{}", said(&version));
    // The same version, commit and build date as the binary under test.
    let ours = Command::new(env!("CARGO_BIN_EXE_runner"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        String::from_utf8_lossy(&ours.stdout).trim()
    );
    assert!(
        String::from_utf8_lossy(&ours.stdout)
            .starts_with(&format!("runner {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{}",
        String::from_utf8_lossy(&ours.stdout)
    );

    // A Harbor task and its own solution: no model, no network.
    let harbor = dir.join("harbor");
    std::fs::create_dir_all(&harbor).unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/harbor/add-numbers");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(&example)
        .arg(&harbor)
        .status()
        .unwrap();
    assert!(copied.success(), "copy {}", example.display());
    let out = dir.join("out-harbor");
    let ran = run_image(
        &image,
        &dir,
        &[],
        &[
            "eval",
            "run",
            &harbor.join("add-numbers").display().to_string(),
            "--agent",
            "oracle",
            "--out",
            &out.display().to_string(),
        ],
    );
    assert!(ran.status.success(), "{}", said(&ran));
    let r = read_json(&out.join("tasks/add-numbers/result.json"));
    assert_eq!(r["status"], "resolved", "{r:#}\n{}", said(&ran));
    // The sandboxes mounted runner's copy in the out folder, not a host path that is not there.
    assert!(out.join(".server/runner").is_file(), "no server copy");

    // A JSON-lines task: its worktree is a clone in the out folder, which the host engine
    // mounts into the sandboxes; the model is a scripted server on the host's loopback.
    let tasks = jsonl_task(&dir);
    let model = ScriptedModel::responding(answer);
    let out = dir.join("out-jsonl");
    let ran = run_image(
        &image,
        &dir,
        &[
            "--network",
            "host",
            "-e",
            "OPENAI_API_KEY=sk-image-test",
            "-e",
            &format!("OPENAI_BASE_URL={}", model.openai_base()),
        ],
        &[
            "eval",
            "run",
            &tasks.display().to_string(),
            "--model",
            "openai/scripted",
            "--out",
            &out.display().to_string(),
        ],
    );
    assert!(ran.status.success(), "{}", said(&ran));
    let r = read_json(&out.join("tasks/calc/result.json"));
    assert_eq!(r["status"], "resolved", "{r:#}\n{}", said(&ran));
    let diff = std::fs::read_to_string(out.join("tasks/calc/diff.patch")).unwrap();
    assert!(diff.contains("+echo $(($1 + $2))"), "diff.patch:\n{diff}");
    assert!(
        !out.join(".work").exists()
            || std::fs::read_dir(out.join(".work"))
                .unwrap()
                .next()
                .is_none(),
        "worktrees left behind"
    );

    // Elsewhere in the image the docker backend is refused with the reason, not left to fail
    // on a mount of a path the host does not have.
    let refused = run_image(
        &image,
        &dir,
        &[],
        &[
            "tool",
            "call",
            "--sandbox",
            "docker",
            "--root",
            &dir.display().to_string(),
            "bash",
            r#"{"command": "true", "description": "nothing"}"#,
        ],
    );
    assert!(!refused.status.success(), "{}", said(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("RUNNER_IN_CONTAINER"),
        "{}",
        said(&refused)
    );
}
