//! Escape attacks against the `landlock` backend: the server confined by landlock, seccomp,
//! dropped capabilities, a private mount namespace and a cgroup, on this host.
//!
//! The attack table lives in `common/escape.rs` (shared with the docker suite); each group
//! (one test each, from `escape_suite!`) runs its whole table and lists every attack that
//! got through. No attack is a known hole today (`holes: &[]`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::escape;
use common::{Backend, NOBODY};

const BACKEND: Backend = Backend::Landlock;

common::escape_suite!(BACKEND, holes: &[]);

/// The side-door table with no wall: every attack the backends' `git_side_doors` hold off
/// hits the host when nothing stands in its way.
#[test]
fn git_side_doors_are_live_attacks_with_no_wall() {
    common::side_doors::live_without_a_wall();
}

/// The side-door table again, through `runner tool call` as an unprivileged user: the
/// mounts that keep `.git` read-only then need an unprivileged user namespace.
#[test]
fn git_side_doors_as_an_unprivileged_user() {
    common::side_doors::run_unprivileged(false);
}

/// The side-door table where the machine refuses unprivileged user namespaces: no mount
/// keeps `.git/hooks` and `.git/config` read-only, so the attacks' commands succeed; what
/// they changed must be put back, and host git after the session must run none of it.
#[test]
fn git_side_doors_without_user_namespaces() {
    common::side_doors::run_unprivileged(true);
}

/// `runner tool call bash COMMAND` on landlock as `nobody`, where user namespaces are
/// refused (with `blocked`), in `base/wt`, with `extra` arguments.
fn bash_as_nobody(base: &Path, command: &str, blocked: bool, extra: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    let args = serde_json::json!({"command": command, "description": "attack"});
    let mut c = Command::new(common::runner_for_any_user());
    c.args(["tool", "call", "bash", &args.to_string(), "--ask", "allow"])
        .arg("--root")
        .arg(base.join("wt"))
        .args(extra)
        .uid(NOBODY)
        .gid(NOBODY)
        .env("HOME", base)
        .env("XDG_DATA_HOME", base.join("data"))
        .env("XDG_CONFIG_HOME", base.join("config"))
        .env("TMPDIR", base);
    if blocked {
        common::without_user_namespaces(&mut c);
    }
    c.output().expect("runner runs")
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A folder `nobody` owns, holding the worktree `wt`, and beside it, outside every wall,
/// a secret `nobody` may read and a folder it may write.
fn nobody_scene() -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::Builder::new()
        .prefix("runner-no-userns-")
        .tempdir()
        .unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::create_dir(base.join("wt")).unwrap();
    std::fs::write(base.join("wt/inside.txt"), "inside\n").unwrap();
    std::fs::write(base.join("secret"), "SECRET-OUTSIDE\n").unwrap();
    std::fs::create_dir(base.join("open")).unwrap();
    common::chown_tree(&base, NOBODY, NOBODY);
    std::fs::set_permissions(base.join("open"), std::fs::Permissions::from_mode(0o777)).unwrap();
    (tmp, base)
}

/// The test's filter is a live stand-in for the machine's policy: `nobody` can make a user
/// namespace here, and cannot under the filter.
#[test]
fn the_filter_refuses_user_namespaces_as_the_policies_do() {
    use std::os::unix::process::CommandExt;
    let unshare = |blocked: bool| {
        let mut c = Command::new("unshare");
        c.args(["--user", "--mount", "true"])
            .uid(NOBODY)
            .gid(NOBODY);
        if blocked {
            common::without_user_namespaces(&mut c);
        }
        c.output().unwrap()
    };
    let open = unshare(false);
    assert!(open.status.success(), "{open:?}");
    let refused = unshare(true);
    assert!(!refused.status.success(), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("Operation not permitted"),
        "{refused:?}"
    );
}

/// Where unprivileged user namespaces are refused, landlock still starts as `nobody`, says
/// once what it goes without, and still confines: reading a file outside the worktree,
/// writing outside, and connecting to a TCP port on the host all fail; the controls (the
/// same read with no wall, and reading and writing inside the worktree) succeed.
#[test]
fn without_user_namespaces_landlock_starts_says_what_it_gave_up_and_still_confines() {
    let (_tmp, base) = nobody_scene();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let secret = base.join("secret");
    let planted = base.join("open/planted");
    let command = format!(
        "cat {secret} ; echo written > {planted} ; \
         (echo hi > /dev/tcp/127.0.0.1/{port}) 2>&1 ; \
         echo made > made.txt && cat inside.txt made.txt",
        secret = secret.display(),
        planted = planted.display(),
    );
    let out = bash_as_nobody(&base, &command, true, &["--sandbox", "landlock"]);
    let all = said(&out);
    assert!(out.status.success(), "{all}");
    let note = "landlock here goes without: no mount or PID namespace (unshare: Operation not \
                permitted (os error 1);";
    assert_eq!(all.matches(note).count(), 1, "said once: {all}");
    for given_up in [
        ".git/hooks, .git/config and the other files host git runs are put back after every \
         command and at close instead of being read-only",
        "$TMPDIR is a folder on disk (each file up to 1024 MiB, the total not bounded)",
        "no /tmp of its own (the host's stays closed to it)",
        "/proc shows the host's processes",
        "--network allowlist is refused",
        "no cgroup",
        "CPU not at all",
    ] {
        assert!(all.contains(given_up), "{given_up:?} not in {all}");
    }
    assert!(!all.contains("SECRET-OUTSIDE"), "read outside: {all}");
    assert!(!planted.exists(), "wrote outside: {all}");
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "connected to the host's port: {all}"
    );
    assert!(all.contains("inside\nmade\n"), "the controls inside: {all}");
    assert_eq!(
        std::fs::read_to_string(base.join("wt/made.txt")).unwrap(),
        "made\n"
    );
    // Control: with no wall, the same user reads the secret and writes the folder.
    let bare = bash_as_nobody(
        &base,
        &format!("cat {} && echo w > {}", secret.display(), planted.display()),
        true,
        &["--sandbox", "none"],
    );
    assert!(said(&bare).contains("SECRET-OUTSIDE"), "{}", said(&bare));
    assert!(planted.exists());
    // `sandbox doctor` says the same, with how to get the namespaces.
    let doctor = doctor_as_nobody(&base);
    for part in [
        "warn  namespaces: none (unshare: Operation not permitted",
        "Landlock still starts, without them",
        "--network allowlist is refused. To get them: allow unprivileged user namespaces",
        "warn  limits: no cgroup",
    ] {
        assert!(doctor.contains(part), "{part:?} not in {doctor}");
    }
}

fn doctor_as_nobody(base: &Path) -> String {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(common::runner_for_any_user());
    c.args(["sandbox", "doctor"])
        .uid(NOBODY)
        .gid(NOBODY)
        .env("HOME", base)
        .env("TMPDIR", base);
    common::without_user_namespaces(&mut c);
    said(&c.output().expect("runner runs"))
}

/// `--network allowlist` needs a private network namespace (the proxy is the only way out
/// only if the sandbox has no network of its own): refused, saying why and what to do, and
/// no command runs. Control: the same user with user namespaces gets the allow-list.
#[test]
fn without_user_namespaces_network_allowlist_is_refused_with_the_reason() {
    let (_tmp, base) = nobody_scene();
    let args = ["--sandbox", "landlock", "--network", "allowlist"];
    let out = bash_as_nobody(&base, "echo ran > ran.txt", true, &args);
    let all = said(&out);
    assert!(!out.status.success(), "{all}");
    for part in [
        "--network allowlist needs a private network namespace, where the proxy is the only \
         way out, and this machine refuses to make one (unshare: Operation not permitted",
        "Use --network none, --sandbox docker, or allow unprivileged user namespaces",
    ] {
        assert!(all.contains(part), "{part:?} not in {all}");
    }
    assert!(!base.join("wt/ran.txt").exists());
    let out = bash_as_nobody(&base, "echo ran > ran.txt", false, &args);
    assert!(out.status.success(), "{}", said(&out));
    assert!(base.join("wt/ran.txt").exists());
}

/// The saved-output attacks with runner run by an unprivileged user: landlock without root
/// must hold them too.
#[test]
fn saved_outputs_of_other_sessions_as_an_unprivileged_user() {
    common::saved_outputs::attacks_unprivileged();
}

/// Without a PID namespace nothing dies with the sandbox by itself: a `setsid` process a
/// command left behind would go on writing to the worktree after the host put the
/// protected files back. The server, their subreaper, kills them when it stops. Control:
/// the process was running (its first file is there) when the command ended.
#[test]
fn without_user_namespaces_a_process_left_behind_dies_with_the_sandbox() {
    let (_tmp, base) = nobody_scene();
    let command = "setsid sh -c 'echo start > started.txt; sleep 1; echo alive > late.txt' \
                   </dev/null >/dev/null 2>&1 & sleep 0.3; echo left";
    let out = bash_as_nobody(&base, command, true, &["--sandbox", "landlock"]);
    assert!(out.status.success(), "{}", said(&out));
    assert!(base.join("wt/started.txt").exists(), "{}", said(&out));
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(
        !base.join("wt/late.txt").exists(),
        "the process outlived the sandbox"
    );
}

/// A cgroup v2 directory handed to `nobody` the way systemd hands a `Delegate=yes` unit's
/// to its user (the directory, `cgroup.procs`, `cgroup.subtree_control`, `cgroup.threads`),
/// removed with whatever is left in it when dropped.
struct Delegated(PathBuf);

impl Delegated {
    fn new() -> Delegated {
        let mount = runner_sandbox::landlock::cgroup::v2::mount()
            .expect("this machine mounts a cgroup v2 hierarchy (hybrid: /sys/fs/cgroup/unified)");
        let dir = mount.join(format!("runner-test-delegated-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        for p in [
            dir.clone(),
            dir.join("cgroup.procs"),
            dir.join("cgroup.subtree_control"),
            dir.join("cgroup.threads"),
        ] {
            std::os::unix::fs::lchown(&p, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        Delegated(dir)
    }

    /// The directories beneath it.
    fn children(&self) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .unwrap()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }
}

impl Drop for Delegated {
    fn drop(&mut self) {
        for child in self.children() {
            let _ = std::fs::write(self.0.join(&child).join("cgroup.kill"), "1");
            std::thread::sleep(std::time::Duration::from_millis(50));
            let _ = std::fs::remove_dir(self.0.join(child));
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// An unprivileged user whose cgroup v2 directory is delegated to it: each landlock sandbox
/// gets a leaf of its own beneath it (the commands run there), gone when the sandbox
/// closes; the limits it cannot have (this machine's v2 hierarchy has no memory, pids or cpu
/// controller) are said once, with why. Control: the same run outside the delegated
/// directory makes no leaf anywhere and says "no cgroup".
#[test]
fn a_delegated_cgroup_v2_gets_a_leaf_per_sandbox() {
    let (_tmp, base) = nobody_scene();
    let delegated = Delegated::new();
    let run = |inside: bool| {
        let args = serde_json::json!({"command": "cat /proc/self/cgroup", "description": "where"});
        let join = if inside {
            format!("echo $$ > {}/cgroup.procs && ", delegated.0.display())
        } else {
            String::new()
        };
        let script = format!(
            "{join}exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups \"$0\" tool call bash \"$1\" --ask allow --sandbox landlock --root \"$2\""
        );
        let out = Command::new("sh")
            .args(["-c", &script])
            .arg(common::runner_for_any_user())
            .arg(args.to_string())
            .arg(base.join("wt"))
            .env("HOME", &base)
            .env("XDG_DATA_HOME", base.join("data"))
            .env("XDG_CONFIG_HOME", base.join("config"))
            .env("TMPDIR", &base)
            .output()
            .expect("runner runs");
        (out.status.success(), said(&out))
    };

    let (ok, all) = run(true);
    assert!(ok, "{all}");
    let name = delegated
        .0
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let leaf = all
        .lines()
        .find_map(|l| l.strip_prefix("0::/"))
        .unwrap_or_else(|| panic!("no cgroup v2 line in {all}"));
    let (parent, own) = leaf.split_once('/').unwrap_or((leaf, ""));
    assert_eq!(
        parent, name,
        "the command ran outside the delegated cgroup: {all}"
    );
    assert!(
        own.starts_with("runner-") && !own.ends_with("-host"),
        "the command ran in {leaf:?}, not in a sandbox's leaf: {all}"
    );
    for part in [
        "no cgroup limit for memory",
        &format!("runner's cgroup {} has no", delegated.0.display()),
        "controller to pass on",
    ] {
        assert_eq!(all.matches(part).count(), 1, "{part:?} said once in {all}");
    }
    assert!(
        !delegated.children().iter().any(|c| c == own),
        "the sandbox's leaf {own} outlived it: {:?}",
        delegated.children()
    );

    let (ok, all) = run(false);
    assert!(ok, "{all}");
    assert!(all.contains("no cgroup (only root"), "{all}");
    assert!(all.contains("0::/\n"), "{all}");
}
