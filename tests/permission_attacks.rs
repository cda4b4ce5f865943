//! Attacks on the boundary (issue 42 §1) from outside its author's view: what the person or
//! program starting runner controls (its environment, a folder's mode the administrator
//! chose) and the spellings a model can give a path it is denied. Each attack sits beside
//! the control that shows the same setup decides as it should when nobody attacks.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use common::boundary::{boundary_file, root_only_dir};
use common::project::Project;

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout {}\nstderr {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The home folder the password database gives this account.
fn account_home() -> PathBuf {
    let out = Command::new("sh")
        .args(["-c", "getent passwd \"$(id -u)\" | cut -d: -f6"])
        .output()
        .unwrap();
    let home = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(home.starts_with('/'), "no home for this account: {home:?}");
    PathBuf::from(home)
}

/// `runner permission eval PERMISSION SUBJECT --json` under `boundary`, with `home` as
/// `$HOME`; the decision's action and layer.
fn eval(project: &Project, boundary: &Path, home: &Path, subject: &Path) -> (Value, Value) {
    let out = project
        .command()
        .args(["permission", "eval", "read"])
        .arg(subject)
        .args(["--json", "--root"])
        .arg(&project.root)
        .env("RUNNER_BOUNDARY", boundary)
        .env("HOME", home)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    (v["action"].clone(), v["layer"].clone())
}

/// A boundary's `~` is the account's home: whoever starts runner sets `$HOME`, and moving
/// it to an empty folder must not move the boundary's deny away from the real `~/.ssh`.
#[test]
fn a_boundarys_home_does_not_move_with_home() {
    let project = Project::new("wt");
    let dir = root_only_dir();
    let boundary = boundary_file(
        dir.path(),
        "[permission]\n\"*\" = \"allow\"\n[permission.read]\n\"~/.ssh/*\" = \"deny\"\n",
    );
    let home = account_home();
    let key = home.join(".ssh/id_ed25519");
    let decoy = project.outside.join("home");
    std::fs::create_dir_all(&decoy).unwrap();

    // Control: with the account's own $HOME, its key is the boundary's.
    assert_eq!(
        eval(&project, &boundary, &home, &key),
        (json!("deny"), json!("boundary"))
    );
    // The attack: $HOME pointed elsewhere. The real key stays denied by the boundary...
    assert_eq!(
        eval(&project, &boundary, &decoy, &key),
        (json!("deny"), json!("boundary"))
    );
    // ...and the decoy's `.ssh` is not what the boundary names (the defaults allow it).
    let (action, layer) = eval(&project, &boundary, &decoy, &decoy.join(".ssh/id_ed25519"));
    assert_eq!(action, json!("allow"));
    assert_ne!(layer, json!("boundary"));
}

/// `/etc/runner/boundary.toml` in a private mount namespace (a tmpfs over `/etc`, so the
/// machine's own `/etc` and every other test are untouched), its folder's mode `mode`,
/// and `runner permission eval read secret.txt` run as nobody.
fn as_nobody_under_system_boundary(mode: u32, file_mode: u32, boundary: &str) -> Output {
    let project = Project::new("wt");
    project.file("secret.txt", "the secret\n");
    // nobody must reach the worktree and the runner folders.
    let base = project.root.parent().unwrap();
    for dir in [base, &project.root, &project.data, &project.config] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let script = format!(
        r#"set -e
mount -t tmpfs -o mode=755 runner-attack /etc
mkdir -p /etc/runner
cat > /etc/runner/boundary.toml <<'TOML'
{boundary}
TOML
chmod {file_mode:o} /etc/runner/boundary.toml
chmod {mode:o} /etc/runner
exec setpriv --reuid=65534 --regid=65534 --clear-groups "$@""#
    );
    Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .arg(common::runner_exe())
        .args(["permission", "eval", "read", "secret.txt", "--root"])
        .arg(&project.root)
        .env("HOME", &project.outside)
        .env("XDG_DATA_HOME", &project.data)
        .env("XDG_CONFIG_HOME", &project.config)
        .env_remove("RUNNER_BOUNDARY")
        .current_dir(&project.root)
        .output()
        .unwrap()
}

const SYSTEM: &str =
    "[permission]\n\"*\" = \"allow\"\n[permission.read]\n\"secret.txt\" = \"deny\"";

/// The system boundary hidden from the user who runs runner (its folder not searchable, or
/// the file not readable, or broken) stops the run: it is refused, never taken as absent.
#[test]
fn a_system_boundary_the_user_cannot_see_is_refused_not_skipped() {
    // Control: a boundary anyone may read decides.
    let out = as_nobody_under_system_boundary(0o755, 0o644, SYSTEM);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("deny") && said.contains("/etc/runner/boundary.toml"),
        "{}",
        text(&out)
    );
    // The attacks: a folder nobody else may search, a file nobody else may read, a file
    // that is not TOML. Each is an error naming the file, with the usage status.
    for (mode, file_mode, boundary) in [
        (0o700, 0o644, SYSTEM),
        (0o755, 0o600, SYSTEM),
        (0o755, 0o644, "[permission\n"),
    ] {
        let out = as_nobody_under_system_boundary(mode, file_mode, boundary);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{mode:o} {file_mode:o}\n{}",
            text(&out)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("/etc/runner/boundary.toml"),
            "{}",
            text(&out)
        );
        assert!(out.stdout.is_empty(), "{}", text(&out));
    }
}

/// Every spelling of a file the boundary denies, relative, absolute, climbing, doubled
/// slashes, and symlinks inside the worktree to it, is denied by the boundary on a real
/// read through the wall, while every layer below allows it; a file beside it is read.
#[test]
fn every_spelling_of_a_denied_file_is_denied() {
    let project = Project::new("wt");
    let wt = project.root.clone();
    project.file("secret.txt", "the secret\n");
    project.file("other.txt", "not secret\n");
    project.file("sub/keep", "");
    std::os::unix::fs::symlink("secret.txt", wt.join("alias.txt")).unwrap();
    std::os::unix::fs::symlink("../secret.txt", wt.join("sub/link")).unwrap();
    std::os::unix::fs::symlink(wt.join("secret.txt"), wt.join("absolute-link")).unwrap();
    let loose = project.outside.join("loose.toml");
    std::fs::write(&loose, "[permission]\n\"*\" = \"allow\"\n").unwrap();
    let dir = root_only_dir();
    let boundary = boundary_file(
        dir.path(),
        "[permission]\n\"*\" = \"allow\"\n[permission.read]\n\"secret.txt\" = \"deny\"\n",
    );
    let read = |path: &str| {
        project
            .command()
            .args(["tool", "call", "read"])
            .arg(json!({ "filePath": path }).to_string())
            .args(["--sandbox", "landlock", "--ask", "deny", "--root"])
            .arg(&wt)
            .arg("--config")
            .arg(&loose)
            .env("RUNNER_BOUNDARY", &boundary)
            .output()
            .unwrap()
    };
    // Control: the file beside it is read.
    let out = read("other.txt");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("not secret"));
    let w = wt.display();
    for path in [
        "secret.txt".to_string(),
        "./secret.txt".into(),
        "sub/../secret.txt".into(),
        "sub//..//./secret.txt".into(),
        format!("{w}/secret.txt"),
        format!("{w}//secret.txt"),
        format!("{w}/./secret.txt"),
        format!("{w}/sub/../secret.txt"),
        "alias.txt".into(),
        "sub/link".into(),
        "absolute-link".into(),
    ] {
        let out = read(&path);
        let all = text(&out);
        assert_eq!(out.status.code(), Some(3), "{path}\n{all}");
        assert!(!all.contains("the secret"), "{path}\n{all}");
        assert!(
            all.contains(&boundary.display().to_string()),
            "{path}\n{all}"
        );
    }
}

/// `runner eval environment` (Harbor's trials) with `RUNNER_BOUNDARY` set to `boundary`
/// (or not): a public phase whose command fetches a page; the proxy's word on it, from the
/// `stop` answer's connections.
fn harbor_fetch(project: &Project, boundary: Option<&Path>) -> String {
    use std::io::{BufRead, BufReader, Write};
    common::engine::docker();
    let env_dir = project.outside.join("environment");
    std::fs::create_dir_all(&env_dir).unwrap();
    std::fs::write(
        env_dir.join("Dockerfile"),
        "FROM runner-sandbox:bookworm\nWORKDIR /app\n",
    )
    .unwrap();
    let mut c = project.command();
    c.args(["eval", "environment"])
        .env_remove("RUNNER_BOUNDARY")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    if let Some(b) = boundary {
        c.env("RUNNER_BOUNDARY", b);
    }
    let mut child = c.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut ask = |request: Value| -> Value {
        writeln!(input, "{request}").unwrap();
        let line = lines.next().unwrap().unwrap();
        serde_json::from_str(&line).unwrap()
    };
    let started = ask(json!({"id": 1, "op": "start", "environment_dir": env_dir,
        "network": {"network_mode": "public"}}));
    assert_eq!(started["ok"], json!(true), "{started}");
    let ran = ask(json!({"id": 2, "op": "exec",
        "command": "curl -s -m 10 -o /dev/null http://example.com/ || true"}));
    assert_eq!(ran["ok"], json!(true), "{ran}");
    let stopped = ask(json!({"id": 3, "op": "stop"}));
    assert!(child.wait().unwrap().success());
    stopped["result"]["connections"].to_string()
}

/// The boundary caps the proxy of a Harbor trial served by `runner eval environment` as
/// it caps `runner exec`'s: a boundary that denies every host is the proxy's reason to
/// refuse, whatever the task's `network_mode` opens.
#[test]
fn a_boundary_caps_a_harbor_environments_network() {
    let project = Project::new("wt");
    let dir = root_only_dir();
    let boundary = boundary_file(
        dir.path(),
        "[permission]\n\"*\" = \"allow\"\n[permission.network]\n\"*\" = \"deny\"\n",
    );
    // Control: without it, the public phase's rules let the request go on (to the page,
    // or to a name the host cannot resolve); no rule refuses it.
    let said = harbor_fetch(&project, None);
    assert!(said.contains("example.com"), "{said}");
    assert!(!said.contains("is denied by the rule"), "{said}");
    // With it, the boundary's rule refuses it.
    let said = harbor_fetch(&project, Some(&boundary));
    assert!(said.contains("is denied by the rule"), "{said}");
    assert!(said.contains(&boundary.display().to_string()), "{said}");
}
