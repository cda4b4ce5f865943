//! Side doors: what a sandbox leaves in the worktree that host git would run afterwards.
//!
//! An attacker who controls the repository and the model's output does not need to get out
//! of the sandbox: it can leave a repository whose config names a command (`core.fsmonitor`
//! here, the one git runs on a plain `git status`) where the user's next git command will
//! find it. Each attack runs inside the wall in a fresh checkout (a commit, a remote, an
//! absorbed submodule, a linked worktree beside it, a config that includes a worktree file
//! and turns on `extensions.worktreeConfig`); then the host runs the git commands a user
//! runs (`status`, `diff`, `log`, `stash`, `add`, `commit`, `submodule status|update`,
//! `fetch`, and `status` in every directory of the checkout and in the linked worktree),
//! after the sandbox has closed (and the read-only ones at the top right after the
//! command, while it is still open). The command the attack planted touches a marker file
//! on the host: it must never appear.
//!
//! Every attack is also run once with no sandbox at all, straight on the host
//! ([`live_without_a_wall`]), and there the marker must appear: that proves each one is a
//! live attack, not one that fails anyway.
//! Controls: git inside the wall still commits, reads the submodule and shows status.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use runner_sandbox::spec::{Network, SandboxSpec};
use runner_sandbox::{BackendKind, Sandbox};

use super::escape::{ESCAPED, exec};
use super::{Backend, NOBODY};

const EROFS: &str = "Read-only file system";
const EBUSY: &str = "Device or resource busy";

/// Which directory the sandbox is opened on.
#[derive(Clone, Copy, PartialEq)]
enum Root {
    Checkout,
    /// The linked worktree beside it (its `.git` is a `gitdir:` file).
    Linked,
}

/// One attack. `MARK` in its command and files stands for the host marker's path.
struct SideDoor {
    name: &'static str,
    root: Root,
    command: &'static str,
    /// Files written through the sandbox's file API (the `write` tool) before the command.
    writes: &'static [(&'static str, &'static str)],
    /// The command must fail with one of these; empty: it may succeed (the wall is a sweep).
    errors: &'static [&'static str],
    /// Planted by a process that outlives its command: the host is checked after close only.
    late: bool,
    /// Whether it runs the marker on a host with no wall (git itself refuses some).
    live: bool,
}

const FSMONITOR: &str = r#"printf '[core]\n\tfsmonitor = "touch MARK; false"\n'"#;

fn attacks() -> Vec<SideDoor> {
    let door = |name, command| SideDoor {
        name,
        root: Root::Checkout,
        command,
        writes: &[],
        errors: &[],
        late: false,
        live: true,
    };
    vec![
        // The issue's own example: a nested repository recorded as a gitlink.
        door(
            "nested_repository_as_gitlink",
            "mkdir sub && cd sub && git init -q && git config core.fsmonitor 'touch MARK; false' \
             && git commit -q --allow-empty -m x && cd .. && git add sub && echo ESCAPED",
        ),
        door(
            "nested_repository_in_a_subdirectory",
            "mkdir -p src/deep && git -C src/deep init -q && \
             git -C src/deep config core.fsmonitor 'touch MARK; false' && echo ESCAPED",
        ),
        door(
            "gitdir_file_to_a_bare_repository",
            "git init -q --bare evil && git -C evil config core.bare false && \
             git -C evil config core.fsmonitor 'touch MARK; false' && mkdir -p sub2 && \
             printf 'gitdir: ../evil\\n' > sub2/.git && echo ESCAPED",
        ),
        door(
            "bare_repository_found_by_discovery",
            "git init -q --bare tools && git -C tools config core.bare false && \
             git -C tools config core.worktree .. && \
             git -C tools config core.fsmonitor 'touch MARK; false' && echo ESCAPED",
        ),
        door(
            "nested_repository_committed_as_gitlink",
            "mkdir -p docs && cd docs && git init -q && git config core.fsmonitor 'touch MARK; false' \
             && git commit -q --allow-empty -m x && cd .. && git add docs && git commit -qm docs \
             && echo ESCAPED",
        ),
        SideDoor {
            errors: &[EROFS, EBUSY],
            ..door(
                "absorbed_submodule_config",
                "git -C lib config core.fsmonitor 'touch MARK; false' && echo ESCAPED",
            )
        },
        SideDoor {
            errors: &[EROFS],
            ..door(
                "absorbed_submodule_hook",
                // The submodule's HEAD moves, so the user's `git submodule update` checks
                // the recorded commit out again, which runs `post-checkout`.
                "git -C lib -c user.name=a -c user.email=a@a commit -q --allow-empty -m moved && \
                 printf '#!/bin/sh\\ntouch MARK\\n' > .git/modules/lib/hooks/post-checkout && \
                 chmod +x .git/modules/lib/hooks/post-checkout && echo ESCAPED",
            )
        },
        SideDoor {
            errors: &[EBUSY, EROFS],
            ..door(
                "absorbed_submodule_swapped",
                "mv .git/modules/lib .git/modules/lib.old && cp -a .git/modules/lib.old .git/modules/lib && \
                 git -C lib config core.fsmonitor 'touch MARK; false' && echo ESCAPED",
            )
        },
        SideDoor {
            errors: &[EROFS],
            ..door(
                "submodule_gitdir_file_redirected",
                "cp -a .git/modules/lib .git/modules/lib2 && \
                 git --git-dir=.git/modules/lib2 config core.fsmonitor 'touch MARK; false' && \
                 printf 'gitdir: ../.git/modules/lib2\\n' > lib/.git && echo ESCAPED",
            )
        },
        door(
            "submodule_commondir",
            "cp -a .git/modules/lib .git/modules/lib-common && \
             git --git-dir=.git/modules/lib-common config core.fsmonitor 'touch MARK; false' && \
             echo ../lib-common > .git/modules/lib/commondir && echo ESCAPED",
        ),
        door(
            "config_worktree",
            // `extensions.worktreeConfig` is on in this checkout's (read-only) config.
            "FS > .git/config.worktree && echo ESCAPED",
        ),
        SideDoor {
            errors: &[EROFS],
            ..door(
                "included_config_file",
                // The checkout's config has `[include] path = ../project.gitconfig`.
                "FS > project.gitconfig && echo ESCAPED",
            )
        },
        SideDoor {
            errors: &[EROFS],
            ..door(
                "linked_worktree_commondir",
                "cp -a .git .git-evil 2>/dev/null; git --git-dir=.git-evil config core.fsmonitor \
                 'touch MARK; false'; echo \"$PWD/.git-evil\" > .git/worktrees/linked/commondir && \
                 echo ESCAPED",
            )
        },
        door(
            "linked_worktree_config_worktree",
            "FS > .git/worktrees/linked/config.worktree && echo ESCAPED",
        ),
        SideDoor {
            root: Root::Linked,
            errors: &[EROFS, EBUSY],
            ..door(
                "linked_checkout_gitdir_file",
                "git init -q --bare .evil && \
                 git -C .evil config core.bare false && git -C .evil config core.worktree .. && \
                 git -C .evil config core.fsmonitor 'touch MARK; false' && \
                 printf 'gitdir: .evil\\n' > .git && echo ESCAPED",
            )
        },
        SideDoor {
            live: false,
            ..door(
                // git refuses `update = !command` from .gitmodules: the control that the
                // file the agent may edit is no door by itself.
                "gitmodules_update_command",
                "git config -f .gitmodules submodule.lib.update '!touch MARK' && echo ESCAPED",
            )
        },
        SideDoor {
            late: true,
            // The command waits until the process has left its group: ended at once, the
            // kill of its group could take the process before `setsid` does.
            ..door(
                "planted_after_the_command_ends",
                "setsid sh -c 'sleep 1; git init -q late && \
                 git -C late config core.fsmonitor \"touch MARK; false\"' \
                 </dev/null >/dev/null 2>&1 & sleep 0.3; echo started",
            )
        },
        SideDoor {
            writes: &[
                ("w/.git", "gitdir: ../wevil\n"),
                ("wevil/HEAD", "ref: refs/heads/main\n"),
                (
                    "wevil/config",
                    "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = \"touch MARK; false\"\n",
                ),
                ("wevil/objects/info/keep", ""),
                ("wevil/refs/heads/keep", ""),
            ],
            ..door("repository_made_with_the_write_tool", "true")
        },
    ]
}

/// One attack's own folder: the checkout, its linked worktree, and the marker's path.
struct Scene {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    wt: PathBuf,
    linked: PathBuf,
    mark: PathBuf,
}

impl Scene {
    /// A copy of the process's [`template`] checkout, with its absolute paths moved to the
    /// new folder: making each checkout with git (a submodule added, a push, a linked
    /// worktree) took about 60 processes, and the table makes one per attack and backend.
    fn new(prefix: &str) -> Scene {
        let tmp = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let template = template();
        copy_moved(
            template,
            &base,
            &template.to_string_lossy(),
            &base.to_string_lossy(),
        );
        super::engine::hand_over(&base);
        Scene {
            _tmp: tmp,
            mark: base.join("MARKER"),
            wt: base.join("wt"),
            linked: base.join("linked"),
            base,
        }
    }

    /// The directory the attack's sandbox is opened on.
    fn root(&self, door: &SideDoor) -> &Path {
        if door.root == Root::Linked {
            &self.linked
        } else {
            &self.wt
        }
    }
}

/// The checkout every scene copies, made once per process with [`checkout`] and removed
/// when the process exits.
fn template() -> &'static Path {
    static TEMPLATE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    extern "C" fn remove_template() {
        if let Some(dir) = TEMPLATE.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    TEMPLATE.get_or_init(|| {
        let tmp = tempfile::Builder::new()
            .prefix("runner-sidedoor-template-")
            .tempdir()
            .unwrap();
        let base = std::fs::canonicalize(tmp.keep()).unwrap();
        checkout(&base);
        // SAFETY: registers a plain function that only removes a folder.
        unsafe { libc::atexit(remove_template) };
        base
    })
}

/// Copies the tree `from` to `to` (modes and symlinks kept), writing `new` for `old` in
/// every text file that holds it: the absolute paths git wrote (the linked worktree's
/// `gitdir` files, the submodule's URL in the configs).
fn copy_moved(from: &Path, to: &Path, old: &str, new: &str) {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
            continue;
        }
        if kind.is_dir() {
            std::fs::create_dir(&dst).unwrap();
            copy_moved(&src, &dst, old, new);
        } else {
            let data = std::fs::read(&src).unwrap();
            let moved = match std::str::from_utf8(&data) {
                Ok(text) if text.contains(old) => text.replace(old, new).into_bytes(),
                _ => data,
            };
            std::fs::write(&dst, moved).unwrap();
        }
        let mode = entry.metadata().unwrap().permissions().mode();
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// A checkout as a user has one, beside its remote, its submodule's origin and a linked
/// worktree. Returns the checkout and the linked worktree.
fn checkout(base: &Path) -> (PathBuf, PathBuf) {
    let wt = base.join("wt");
    let git = |dir: &Path, args: &[&str]| {
        let o = host_git(dir, args);
        assert!(
            o.status.success(),
            "git {args:?} in {}: {o:?}",
            dir.display()
        );
    };
    std::fs::create_dir_all(&wt).unwrap();
    super::engine::hand_over(base);
    git(base, &["init", "-q", "--bare", "remote.git"]);
    git(base, &["init", "-q", "lib-origin"]);
    git(
        &base.join("lib-origin"),
        &["commit", "-q", "--allow-empty", "-m", "lib"],
    );
    git(&wt, &["init", "-q"]);
    std::fs::write(wt.join("README"), "hello\n").unwrap();
    std::fs::write(wt.join("project.gitconfig"), "[user]\n\tname = project\n").unwrap();
    git(&wt, &["add", "README", "project.gitconfig"]);
    git(&wt, &["commit", "-q", "-m", "first"]);
    git(&wt, &["submodule", "add", "-q", "../lib-origin", "lib"]);
    git(&wt, &["commit", "-q", "-m", "lib"]);
    git(&wt, &["remote", "add", "origin", "../remote.git"]);
    git(&wt, &["push", "-q", "origin", "HEAD"]);
    git(&wt, &["worktree", "add", "-q", "../linked"]);
    git(&wt, &["config", "core.repositoryformatversion", "1"]);
    git(&wt, &["config", "extensions.worktreeConfig", "true"]);
    git(&wt, &["config", "include.path", "../project.gitconfig"]);
    assert!(wt.join(".git/modules/lib/config").is_file());
    (wt, base.join("linked"))
}

/// Host git as the user who owns the checkout: this process's, or the test engine's own
/// user (`engine::as_owner`; git refuses a repository another user owns).
fn host_git(dir: &Path, args: &[&str]) -> std::process::Output {
    host_git_as(None, dir, args)
}

/// Host git as the user who owns the checkout (`uid`), or as [`host_git`] runs it.
fn host_git_as(uid: Option<u32>, dir: &Path, args: &[&str]) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new("timeout");
    match uid {
        Some(id) => {
            c.uid(id).gid(id).env("HOME", dir);
        }
        None => {
            super::engine::as_owner(&mut c);
        }
    }
    c.arg("30")
        .arg("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(["-c", "protocol.file.allow=always"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_DIR")
        .output()
        .expect("run host git")
}

/// What a user does in the checkout after a session, with plain git.
fn user_runs_git(wt: &Path, linked: &Path) {
    user_runs_git_as(None, wt, linked)
}

fn user_runs_git_as(uid: Option<u32>, wt: &Path, linked: &Path) {
    let host_git = |dir: &Path, args: &[&str]| host_git_as(uid, dir, args);
    for args in [
        &["status"][..],
        &["diff"],
        &["log", "-1"],
        &["submodule", "status"],
        &["submodule", "update"],
        &["fetch", "-q", "origin"],
        &["stash"],
        &["stash", "pop"],
        &["add", "-A"],
        &["commit", "-qm", "after the session"],
    ] {
        host_git(wt, args);
    }
    for dir in directories(wt).iter().chain([&linked.to_path_buf()]) {
        host_git(dir, &["status"]);
    }
}

/// Every directory of the checkout, its own `.git` left out.
fn directories(wt: &Path) -> Vec<PathBuf> {
    let mut all = vec![wt.to_path_buf()];
    let mut i = 0;
    while i < all.len() {
        if let Ok(entries) = std::fs::read_dir(&all[i]) {
            for e in entries.flatten() {
                let top_git = all[i] == wt && e.file_name() == ".git";
                if e.file_type().is_ok_and(|t| t.is_dir()) && !top_git {
                    all.push(e.path());
                }
            }
        }
        i += 1;
    }
    all
}

fn fill(s: &str, mark: &Path) -> String {
    s.replace("FS", FSMONITOR)
        .replace("MARK", &mark.display().to_string())
        .replace("ESCAPED", ESCAPED)
}

/// A sandbox of `backend` over `root` with no network, on the tests' engine.
pub(crate) async fn open(backend: Backend, root: &Path) -> Sandbox {
    if backend == Backend::Docker {
        super::engine::docker();
    }
    let kind = match backend {
        Backend::Docker => BackendKind::Docker,
        _ => BackendKind::Landlock,
    };
    let mut spec = SandboxSpec::new(kind, root).unwrap();
    spec.server_exe = crate::runner_exe().to_path_buf();
    spec.network = Network::None;
    if kind == BackendKind::Docker {
        super::engine::apply(&mut spec);
    }
    runner_sandbox::open(&spec)
        .await
        .expect("the sandbox opens")
}

/// Runs one attack behind the wall; returns what went wrong (empty: it held).
async fn attempt(backend: Backend, door: &SideDoor) -> Vec<String> {
    let scene = Scene::new("runner-sidedoor-");
    let (wt, linked) = (&scene.wt, &scene.linked);
    let (mark, root) = (&scene.mark, scene.root(door));
    let sb = open(backend, root).await;
    let mut broken = Vec::new();
    for (path, content) in door.writes {
        let data = fill(content, mark).into_bytes();
        if let Err(e) = sb.client.write(&root.join(path), data, None).await {
            broken.push(format!("the write tool could not write {path}: {e}"));
        }
    }
    let run = exec(&sb, &fill(door.command, mark))
        .await
        .expect("the command runs");
    if run.all().contains(ESCAPED) && !door.errors.is_empty() {
        broken.push(format!("the command got through: {}", run.all()));
    }
    if !door.errors.is_empty() && !door.errors.iter().any(|e| run.all().contains(e)) {
        broken.push(format!("expected one of {:?}: {}", door.errors, run.all()));
    }
    if !door.late {
        // While the session runs, the quick sweep after each command covers what plain
        // git at the top of the checkout reads; the full one when the sandbox closes.
        for args in [
            &["status"][..],
            &["diff"],
            &["log", "-1"],
            &["submodule", "status"],
        ] {
            host_git(wt, args);
        }
        if mark.exists() {
            broken.push("host git ran the planted command while the sandbox was open".into());
            let _ = std::fs::remove_file(mark);
        }
    } else {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    drop(sb);
    user_runs_git(wt, linked);
    if mark.exists() {
        broken.push("host git ran the planted command after the sandbox closed".into());
    }
    broken
}

/// The same attack with no wall: the host must be hit, or the attack proves nothing.
fn unguarded(door: &SideDoor) -> bool {
    let scene = Scene::new("runner-sidedoor-bare-");
    let (wt, linked) = (&scene.wt, &scene.linked);
    let (mark, root) = (&scene.mark, scene.root(door));
    for (path, content) in door.writes {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, fill(content, mark)).unwrap();
    }
    super::engine::hand_over(&scene.base);
    let out = super::engine::as_owner(&mut Command::new("bash"))
        .arg("-c")
        .arg(fill(door.command, mark))
        .current_dir(root)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(out.status.success() || !door.live, "{}: {out:?}", door.name);
    if door.late {
        std::thread::sleep(Duration::from_secs(2));
    }
    // The attack itself may already have run it (git inside the attack, on the host).
    let _ = std::fs::remove_file(mark);
    user_runs_git(wt, linked);
    mark.exists()
}

/// The files host git runs from the checkout that an attack may change: with a mount
/// namespace they are read-only; without one they must be as they were once the session
/// is over. With their modes (an executable hook is one git runs).
fn protected_files(base: &Path) -> Vec<(String, u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut paths: Vec<PathBuf> = [
        "wt/.git/config",
        "wt/.git/modules/lib/config",
        "wt/.git/worktrees/linked/commondir",
        "wt/lib/.git",
        "wt/project.gitconfig",
        "linked/.git",
    ]
    .iter()
    .map(|p| base.join(p))
    .collect();
    for hooks in ["wt/.git/hooks", "wt/.git/modules/lib/hooks"] {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(base.join(hooks))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        entries.sort();
        paths.push(base.join(hooks));
        paths.extend(entries);
    }
    paths
        .iter()
        .map(|p| {
            let meta = std::fs::symlink_metadata(p);
            let mode = meta.map_or(0, |m| m.permissions().mode());
            let data = std::fs::read(p).unwrap_or_default();
            (p.display().to_string(), mode, data)
        })
        .collect()
}

/// Runs one attack through the real `runner tool call`, as an unprivileged user who owns
/// the checkout, on the landlock backend; returns what went wrong (empty: it held). With
/// `no_userns`, on a machine that refuses unprivileged user namespaces
/// ([`super::without_user_namespaces`]): nothing is read-only then, so the attack's
/// command may succeed, but what it changed must be put back.
fn attempt_unprivileged(door: &SideDoor, no_userns: bool) -> Vec<String> {
    use std::os::unix::process::CommandExt;
    let scene = Scene::new("runner-sidedoor-user-");
    let (base, wt, linked) = (&scene.base, &scene.wt, &scene.linked);
    super::chown_tree(base, NOBODY, NOBODY);
    let (mark, root) = (&scene.mark, scene.root(door));
    let before = protected_files(base);
    let call = |tool: &str, args: serde_json::Value| {
        let mut c = Command::new(super::runner_for_any_user());
        if no_userns {
            super::without_user_namespaces(&mut c);
        }
        c.args([
            "tool",
            "call",
            tool,
            &args.to_string(),
            "--sandbox",
            "landlock",
        ])
        .arg("--root")
        .arg(root)
        .args(["--ask", "allow"])
        .uid(NOBODY)
        .gid(NOBODY)
        .env("HOME", base)
        .env("XDG_DATA_HOME", base.join("data"))
        .env("XDG_CONFIG_HOME", base.join("config"))
        .env("TMPDIR", base)
        .output()
        .expect("runner runs")
    };
    let mut broken = Vec::new();
    for (path, content) in door.writes {
        let args = serde_json::json!({"filePath": root.join(path), "content": fill(content, mark)});
        let out = call("write", args);
        if !out.status.success() {
            broken.push(format!("the write tool failed on {path}: {out:?}"));
        }
    }
    let args = serde_json::json!({"command": fill(door.command, mark), "description": "attack"});
    let out = call("bash", args);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if all.contains("cannot start") || all.contains("sandbox failed") {
        broken.push(format!(
            "the landlock sandbox did not start as uid {NOBODY}: {all}"
        ));
    }
    if door.late {
        // Long enough for a survivor to plant its repository before host git looks.
        std::thread::sleep(Duration::from_secs(2));
    }
    if no_userns {
        broken.extend(check_without_userns(door, &all));
        if protected_files(base) != before {
            broken.push("a protected file was not put back after the session".into());
        }
    } else if !door.errors.is_empty() && !door.errors.iter().any(|e| all.contains(e)) {
        broken.push(format!("expected one of {:?}: {all}", door.errors));
    }
    user_runs_git_as(Some(NOBODY), wt, linked);
    if mark.exists() {
        broken.push("host git ran the planted command".into());
    }
    broken
}

/// Without user namespaces: the session said once what it went without, and an attack on
/// a protected file was put back (the output says so) rather than refused.
fn check_without_userns(door: &SideDoor, all: &str) -> Vec<String> {
    let mut broken = Vec::new();
    let said = all
        .matches("landlock here goes without: no mount or PID namespace")
        .count();
    if said != 1 {
        broken.push(format!(
            "the start note was said {said} times, not once: {all}"
        ));
    }
    let put_back = all.contains("[runner: put back") || all.contains("[runner: disarmed");
    if !door.errors.is_empty() && !put_back {
        broken.push(format!("the output does not say what was put back: {all}"));
    }
    broken
}

/// The table through `runner tool call` as an unprivileged user (landlock only: docker
/// needs the engine's socket); with `no_userns`, where user namespaces are refused.
pub fn run_unprivileged(no_userns: bool) {
    let failures: Vec<String> = attacks()
        .iter()
        .flat_map(|door| {
            attempt_unprivileged(door, no_userns)
                .into_iter()
                .map(move |p| format!("{}: {p}", door.name))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "side doors open as uid {NOBODY}:\n{}",
        failures.join("\n")
    );
}

/// Every attack of the table with no wall at all, straight on the host: each one that is
/// `live` must hit it, the others must not. The table is the same on every backend, so it
/// is proved live once, here, not again beside each backend's run.
pub fn live_without_a_wall() {
    let failures: Vec<String> = attacks()
        .iter()
        .filter(|door| unguarded(door) != door.live)
        .map(|door| {
            format!(
                "{}: with no wall the host {} hit",
                door.name,
                if door.live { "was not" } else { "was" }
            )
        })
        .collect();
    assert!(
        failures.is_empty(),
        "attacks that prove nothing:\n{}",
        failures.join("\n")
    );
}

/// The whole table on one backend, then the controls.
pub async fn run(backend: Backend) {
    let mut failures = Vec::new();
    for door in attacks() {
        for problem in attempt(backend, &door).await {
            failures.push(format!("{}: {problem}", door.name));
        }
    }
    failures.extend(controls(backend).await);
    assert!(
        failures.is_empty(),
        "side doors open:\n{}",
        failures.join("\n")
    );
}

/// Git inside the wall still does its everyday work, and the host sees the result.
async fn controls(backend: Backend) -> Vec<String> {
    let scene = Scene::new("runner-sidedoor-ok-");
    let wt = &scene.wt;
    let sb = open(backend, wt).await;
    let mut failures = Vec::new();
    for (name, command) in [
        (
            "commit",
            "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@a GIT_COMMITTER_NAME=a \
             GIT_COMMITTER_EMAIL=a@a; echo new > f.txt && git add f.txt && \
             git commit -qm 'made inside' && git log --oneline -1",
        ),
        ("status", "git status --short && git submodule status"),
        ("submodule_log", "git -C lib log --oneline -1"),
        (
            "branch",
            "git checkout -qb feature && git branch --show-current",
        ),
    ] {
        let run = exec(&sb, command).await.expect("the control runs");
        if run.code != Some(0) {
            failures.push(format!("control {name} failed: {}", run.all()));
        }
    }
    drop(sb);
    let log = host_git(wt, &["log", "-1", "--format=%s"]);
    if String::from_utf8_lossy(&log.stdout).trim() != "made inside" {
        failures.push(format!("control commit: the host does not see it: {log:?}"));
    }
    failures
}
