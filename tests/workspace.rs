//! `--workspace copy`: the sandbox works on a private copy, the checkout is not touched
//! while it runs, and `runner changes` / `apply` / `discard` review and bring over what it
//! did. Real `runner` processes on the landlock and docker backends.

use common::git;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

struct Checkout {
    /// Dropped first: no copy's file system outlives the test.
    _mounts: common::CopyMounts,
    _tmp: tempfile::TempDir,
    root: PathBuf,
    data: PathBuf,
}

/// A repository with committed, untracked and ignored files, a binary and a script.
fn checkout() -> Checkout {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let root = base.join("repo");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("a.txt"), "hello\n").unwrap();
    std::fs::write(root.join("bin.dat"), [0u8, 1, 2, 255]).unwrap();
    std::fs::write(root.join("run.sh"), "echo hi\n").unwrap();
    std::fs::write(root.join("old.txt"), "moving\n").unwrap();
    std::fs::write(root.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(root.join("src/lib.rs"), "fn main() {}\n").unwrap();
    std::fs::write(root.join(".gitignore"), "ignored.log\n").unwrap();
    git(&root, &["init", "-q"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-qm", "init"]);
    std::fs::write(root.join("untracked.txt"), "not committed\n").unwrap();
    std::fs::write(root.join("ignored.log"), "ignored\n").unwrap();
    Checkout {
        _mounts: common::CopyMounts(base.join("data")),
        data: base.join("data"),
        _tmp: tmp,
        root,
    }
}

fn runner(c: &Checkout, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(args)
        .env("XDG_DATA_HOME", &c.data)
        .env("XDG_CONFIG_HOME", c.data.join("config"))
        .current_dir(&c.root)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `runner tool call bash COMMAND` in a copy on `backend`, not yet run.
fn copy_call(c: &Checkout, backend: &str, command: &str) -> Command {
    let args = serde_json::json!({"command": command, "description": "work"}).to_string();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_runner"));
    cmd.args([
        "tool",
        "call",
        "bash",
        &args,
        "--workspace",
        "copy",
        "--sandbox",
        backend,
    ])
    .args(["--ask", "allow", "--root"])
    .arg(&c.root)
    .env("XDG_DATA_HOME", &c.data)
    .env("XDG_CONFIG_HOME", c.data.join("config"))
    .current_dir(&c.root)
    .stdin(Stdio::null());
    cmd
}

/// `runner tool call bash COMMAND` in a copy; returns the workspace id it printed.
fn in_copy(c: &Checkout, backend: &str, command: &str) -> String {
    let out = copy_call(c, backend, command).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    err.lines()
        .find_map(|l| l.strip_prefix("workspace: "))
        .unwrap_or_else(|| panic!("no workspace line: {err}"))
        .to_string()
}

/// Every file below `root` but `.git`, with its bytes and executable bit.
fn tree(root: &Path) -> Vec<(String, Vec<u8>, bool)> {
    common::snapshot_tree(root)
        .into_iter()
        .filter(|(p, _)| !p.starts_with(".git/"))
        .map(|(p, bytes)| {
            let exec = std::fs::symlink_metadata(root.join(&p))
                .map(|m| m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false);
            (p, bytes, exec)
        })
        .collect()
}

fn wreck_and_check(backend: &str) {
    let c = checkout();
    let before = tree(&c.root);
    let git_before = common::snapshot_tree(&c.root.join(".git"));
    let id = in_copy(
        &c,
        backend,
        "rm -rf ./* .gitignore ignored.log untracked.txt && git reset -q --hard && git clean -fdxq && echo done",
    );
    assert_eq!(tree(&c.root), before, "{backend}: the checkout changed");
    assert_eq!(
        common::snapshot_tree(&c.root.join(".git")),
        git_before,
        "{backend}: the checkout's .git changed"
    );
    // The copy is waiting, and says what the agent did to it.
    let listed = runner(&c, &["changes", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed[0]["id"], id.as_str(), "{listed}");
    assert_eq!(listed[0]["changed_files"], 2, "{listed}");
    let shown = runner(&c, &["changes", &id]);
    let patch = String::from_utf8_lossy(&shown.stdout);
    assert!(
        patch.contains("deleted file mode 100644\n--- a/ignored.log"),
        "{patch}"
    );
    assert!(runner(&c, &["discard", &id]).status.success());
    let after: Value = serde_json::from_slice(&runner(&c, &["changes", "--json"]).stdout).unwrap();
    assert_eq!(after, serde_json::json!([]));
}

#[test]
fn a_copy_keeps_the_checkout_byte_for_byte_on_landlock() {
    wreck_and_check("landlock");
}

#[test]
fn a_copy_keeps_the_checkout_byte_for_byte_in_docker() {
    common::engine::docker();
    wreck_and_check("docker");
}

#[test]
fn apply_brings_exactly_the_reviewed_changes_and_refuses_a_conflict() {
    let c = checkout();
    let id = in_copy(
        &c,
        "landlock",
        "printf '\\000\\011\\010' > bin.dat && rm gone.txt && mv old.txt renamed.txt && chmod +x run.sh && echo world >> a.txt && mkdir -p deep/er && echo new > deep/er/file.txt",
    );
    let listed: Value =
        serde_json::from_slice(&runner(&c, &["changes", &id, "--json"]).stdout).unwrap();
    assert_eq!(listed["left_out"], 0, "{listed}");
    let changes: Vec<(String, String)> = listed["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["change"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("a.txt", "modified"),
        ("bin.dat", "modified"),
        ("deep/er/file.txt", "added"),
        ("gone.txt", "deleted"),
        ("old.txt", "deleted"),
        ("renamed.txt", "added"),
        ("run.sh", "mode"),
    ]
    .iter()
    .map(|(p, k)| (p.to_string(), k.to_string()))
    .collect();
    assert_eq!(changes, expected);
    let patch = String::from_utf8_lossy(&runner(&c, &["changes", &id]).stdout).into_owned();
    for part in [
        "Binary files a/bin.dat and b/bin.dat differ",
        "rename from old.txt\nrename to renamed.txt",
        "old mode 100644\nnew mode 100755",
        "+world",
    ] {
        assert!(patch.contains(part), "{part:?} missing from\n{patch}");
    }

    // The user edits a file the agent changed: not applied, and the file is named.
    std::fs::write(c.root.join("a.txt"), "the user's own edit\n").unwrap();
    let refused = runner(&c, &["apply", &id]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("a.txt") && !said.contains("bin.dat"),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(c.root.join("a.txt")).unwrap(),
        "the user's own edit\n"
    );
    assert!(
        c.root.join("gone.txt").exists(),
        "a refused apply changed nothing"
    );

    git(&c.root, &["checkout", "-q", "a.txt"]);
    let applied = runner(&c, &["apply", &id]);
    assert!(applied.status.success(), "{applied:?}");
    assert_eq!(std::fs::read(c.root.join("bin.dat")).unwrap(), [0u8, 9, 8]);
    assert!(!c.root.join("gone.txt").exists());
    assert!(!c.root.join("old.txt").exists());
    assert_eq!(
        std::fs::read_to_string(c.root.join("renamed.txt")).unwrap(),
        "moving\n"
    );
    let mode = std::fs::metadata(c.root.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_ne!(mode & 0o111, 0, "the executable bit came over");
    assert_eq!(
        std::fs::read_to_string(c.root.join("a.txt")).unwrap(),
        "hello\nworld\n"
    );
    assert_eq!(
        std::fs::read_to_string(c.root.join("deep/er/file.txt")).unwrap(),
        "new\n"
    );
    // Untouched files stay as they were, and the applied copy is gone.
    assert_eq!(
        std::fs::read_to_string(c.root.join("untracked.txt")).unwrap(),
        "not committed\n"
    );
    let left: Value = serde_json::from_slice(&runner(&c, &["changes", "--json"]).stdout).unwrap();
    assert_eq!(left, serde_json::json!([]));

    // --force overwrites a conflicting file.
    let id = in_copy(&c, "landlock", "echo agent > a.txt");
    std::fs::write(c.root.join("a.txt"), "user\n").unwrap();
    assert!(!runner(&c, &["apply", &id]).status.success());
    assert!(runner(&c, &["apply", &id, "--force"]).status.success());
    assert_eq!(
        std::fs::read_to_string(c.root.join("a.txt")).unwrap(),
        "agent\n"
    );
}

#[test]
fn a_copy_whose_run_was_killed_is_reaped_by_the_next_and_a_finished_one_waits() {
    let c = checkout();
    let waiting = in_copy(&c, "landlock", "echo kept > kept.txt");
    let mut child = copy_call(&c, "landlock", "sleep 60")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let workspaces = c.data.join("runner/workspaces");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::read_dir(&workspaces)
        .map(|d| d.count())
        .unwrap_or(0)
        < 2
    {
        assert!(std::time::Instant::now() < deadline, "no second copy");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    // The next copy reaps it, as the next start reaps a dead run's containers (`runner
    // sandbox cleanup` does the same; tests/sandbox_cleanup.rs checks that). The next
    // one changes nothing, so it goes too.
    let next = copy_call(&c, "landlock", "true").output().unwrap();
    assert!(next.status.success(), "{next:?}");
    let left: Value = serde_json::from_slice(&runner(&c, &["changes", "--json"]).stdout).unwrap();
    let ids: Vec<&str> = left
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [waiting.as_str()]);
}

#[test]
fn a_data_directory_inside_the_checkout_is_left_out_of_its_copies() {
    let mut c = checkout();
    c.data = c.root.join(".data");
    let id = in_copy(
        &c,
        "landlock",
        "test ! -e .data/runner/workspaces/*/work && echo x > b.txt",
    );
    let listed: Value =
        serde_json::from_slice(&runner(&c, &["changes", &id, "--json"]).stdout).unwrap();
    assert_eq!(
        listed["changes"],
        serde_json::json!([{"path": "b.txt", "change": "added"}])
    );
    assert!(runner(&c, &["apply", &id]).status.success());
    assert_eq!(
        std::fs::read_to_string(c.root.join("b.txt")).unwrap(),
        "x\n"
    );
}

/// Attacks on `apply` from what the agent leaves in its copy, and from the checkout having
/// changed under it: nothing may be written outside the checkout or through a link in it,
/// no host file's content may be copied in, and no `.git` comes over.
#[test]
fn attack_apply_never_writes_through_links_nor_brings_a_git_or_a_hosts_file() {
    let c = checkout();
    let secret = c.data.parent().unwrap().join("host-secret.txt");
    std::fs::write(&secret, "HOST SECRET\n").unwrap();
    let outside = c.data.parent().unwrap().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    let id = in_copy(
        &c,
        "landlock",
        &format!(
            "ln -s {} leak && mkdir -p vendor/x/.git && printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' > vendor/x/.git/config && echo new > src/added.rs",
            secret.display()
        ),
    );
    let listed: Value =
        serde_json::from_slice(&runner(&c, &["changes", &id, "--json"]).stdout).unwrap();
    let paths: Vec<&str> = listed["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["leak", "src/added.rs"], "no .git is a change");

    // The user turns `src` into a link to somewhere else meanwhile: nothing goes through it,
    // not even with --force.
    std::fs::remove_dir_all(c.root.join("src")).unwrap();
    std::os::unix::fs::symlink(&outside, c.root.join("src")).unwrap();
    for args in [
        vec!["apply", id.as_str()],
        vec!["apply", id.as_str(), "--force"],
    ] {
        let refused = runner(&c, &args);
        assert!(!refused.status.success(), "{refused:?}");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(
            said.contains("src/added.rs") && said.contains("link"),
            "{said}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "written through the link"
    );
    assert!(
        !c.root.join("leak").exists(),
        "a refused apply wrote something"
    );

    // Back to a plain directory: the link comes over as a link, never as the host file's
    // content, and the nested .git stays in the copy.
    std::fs::remove_file(c.root.join("src")).unwrap();
    std::fs::create_dir(c.root.join("src")).unwrap();
    std::fs::write(c.root.join("src/lib.rs"), "fn main() {}\n").unwrap();
    let applied = runner(&c, &["apply", &id]);
    assert!(applied.status.success(), "{applied:?}");
    let leak = std::fs::symlink_metadata(c.root.join("leak")).unwrap();
    assert!(leak.file_type().is_symlink(), "the host file was copied in");
    assert!(!c.root.join("vendor").exists(), "a .git came over");
}

#[test]
fn a_copy_in_use_is_neither_applied_nor_discarded() {
    let c = checkout();
    let mut child = copy_call(&c, "landlock", "echo busy > busy.txt; sleep 20")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let workspaces = c.data.join("runner/workspaces");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let id = loop {
        let found = std::fs::read_dir(&workspaces)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned());
        if let Some(id) = found.filter(|id| workspaces.join(id).join("work/busy.txt").exists()) {
            break id;
        }
        assert!(std::time::Instant::now() < deadline, "no copy");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    for verb in ["apply", "discard"] {
        let refused = runner(&c, &[verb, &id]);
        assert!(!refused.status.success(), "{verb}: {refused:?}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("still in use"),
            "{verb}: {refused:?}"
        );
    }
    assert!(!c.root.join("busy.txt").exists());
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
}

#[test]
fn a_copy_without_a_wall_is_refused() {
    let c = checkout();
    let args = serde_json::json!({"command": "true", "description": "x"}).to_string();
    let root = c.root.display().to_string();
    let out = runner(
        &c,
        &[
            "tool",
            "call",
            "bash",
            &args,
            "--workspace",
            "copy",
            "--sandbox",
            "none",
            "--root",
            &root,
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs a wall"),
        "{out:?}"
    );
}

/// Every entry below `root` but `.git`: its kind and full mode (special bits included) and
/// its bytes or link target. Two equal snapshots are the same tree, byte for byte.
fn exact_tree(root: &Path) -> Vec<(String, u32, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if rel == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let body = if meta.file_type().is_symlink() {
                std::fs::read_link(&path)
                    .unwrap()
                    .display()
                    .to_string()
                    .into_bytes()
            } else if meta.is_dir() {
                stack.push(path.clone());
                Vec::new()
            } else {
                std::fs::read(&path).unwrap()
            };
            out.push((rel, meta.mode(), body));
        }
    }
    out.sort();
    out
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Attack: the agent makes a new file setuid and setgid (`chmod 6755`) and an existing one
/// setuid (`chmod 4755`, and `4644` on a plain file), hoping `apply` brings a setuid file,
/// owned by the user (root when root), into the checkout. The review names every one of
/// those modes; the apply drops the special bits (saying so, file by file) and writes
/// exactly 0755 or 0644. Control: a new 0755 script applies as 0755, a 0644 file as 0644.
fn special_bits_never_reach_the_checkout(backend: &str) {
    let c = checkout();
    for f in ["a.txt", "run.sh"] {
        set_mode(&c.root.join(f), 0o644);
    }
    let id = in_copy(
        &c,
        backend,
        "printf '#!/bin/sh\\nid\\n' > suid.sh && chmod 6755 suid.sh && chmod 4755 run.sh && chmod 4644 a.txt \
         && printf '#!/bin/sh\\necho ok\\n' > script.sh && chmod 755 script.sh && echo plain > plain.txt && chmod 644 plain.txt",
    );
    // The attack took: the copy holds the bits (a wall that refused them would test nothing).
    let work = c.data.join("runner/workspaces").join(&id).join("work");
    assert_eq!(mode(&work.join("suid.sh")), 0o6755, "{backend}");
    assert_eq!(mode(&work.join("run.sh")), 0o4755, "{backend}");
    assert_eq!(mode(&work.join("a.txt")), 0o4644, "{backend}");

    let patch = String::from_utf8_lossy(&runner(&c, &["changes", &id]).stdout).into_owned();
    for part in [
        "diff --git a/suid.sh b/suid.sh\nnew file mode 106755\n",
        "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 104755\n",
        "diff --git a/a.txt b/a.txt\nold mode 100644\nnew mode 104644\n",
        // Controls.
        "diff --git a/script.sh b/script.sh\nnew file mode 100755\n",
        "diff --git a/plain.txt b/plain.txt\nnew file mode 100644\n",
    ] {
        assert!(
            patch.contains(part),
            "{backend}: {part:?} missing from\n{patch}"
        );
    }

    let applied = runner(&c, &["apply", &id]);
    assert!(applied.status.success(), "{backend}: {applied:?}");
    let said = String::from_utf8_lossy(&applied.stderr);
    for line in [
        "runner: suid.sh: the setuid and setgid bits dropped: the copy's file has mode 6755, applied as 0755",
        "runner: run.sh: the setuid bit dropped: the copy's file has mode 4755, applied as 0755",
        "runner: a.txt: the setuid bit dropped: the copy's file has mode 4644, applied as 0644",
    ] {
        assert!(
            said.contains(line),
            "{backend}: {line:?} not said in\n{said}"
        );
    }
    for (file, expected) in [
        ("suid.sh", 0o755),
        ("run.sh", 0o755),
        ("a.txt", 0o644),
        ("script.sh", 0o755),
        ("plain.txt", 0o644),
    ] {
        assert_eq!(
            mode(&c.root.join(file)),
            expected,
            "{backend}: {file} applied as {:o}",
            mode(&c.root.join(file))
        );
    }
    assert_eq!(
        std::fs::read_to_string(c.root.join("suid.sh")).unwrap(),
        "#!/bin/sh\nid\n"
    );
}

#[test]
fn attack_special_bits_never_reach_the_checkout_on_landlock() {
    special_bits_never_reach_the_checkout("landlock");
}

#[test]
fn attack_special_bits_never_reach_the_checkout_in_docker() {
    common::engine::docker();
    special_bits_never_reach_the_checkout("docker");
}

/// Sets or clears a file's immutable flag (`chattr +i`): not even root may rename, remove
/// or write it.
fn immutable(path: &Path, on: bool) {
    use std::os::fd::AsRawFd;
    const FS_IMMUTABLE_FL: libc::c_int = 0x10;
    let file = std::fs::File::open(path).unwrap();
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS/SETFLAGS read and write one int through a valid pointer.
    unsafe {
        assert_eq!(
            libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags),
            0,
            "FS_IOC_GETFLAGS on {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
        flags = if on {
            flags | FS_IMMUTABLE_FL
        } else {
            flags & !FS_IMMUTABLE_FL
        };
        assert_eq!(
            libc::ioctl(file.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags),
            0,
            "FS_IOC_SETFLAGS on {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
}

/// An apply that fails half-way (an I/O error on a file it must replace, after a deletion,
/// a new folder, new files and a replaced file were already put in place) leaves the
/// checkout byte for byte, mode for mode, as it was: no staged file, no new folder. As root
/// the failing file is made immutable (root ignores permissions); otherwise a folder holding
/// the last deletion is made read-only (and the deletion before it is undone). Then, the
/// obstacle gone, the same copy applies whole.
#[test]
fn a_failed_apply_leaves_the_checkout_exactly_as_it_was() {
    let c = checkout();
    std::fs::write(c.root.join("src/old.rs"), "old\n").unwrap();
    let id = in_copy(
        &c,
        "landlock",
        "echo changed > a.txt && rm gone.txt src/old.rs && echo new > new.txt && chmod +x run.sh \
         && echo more >> src/lib.rs && mkdir -p deep && echo d > deep/file.txt && ln -s a.txt link",
    );
    let root = unsafe { libc::geteuid() } == 0;
    let obstacle = if root {
        // Written after a.txt, deep/ and new.txt: the commit fails half-way.
        let target = c.root.join("run.sh");
        immutable(&target, true);
        target
    } else {
        let target = c.root.join("src");
        set_mode(&target, 0o555);
        target
    };
    let before = exact_tree(&c.root);
    for args in [
        vec!["apply", id.as_str()],
        vec!["apply", id.as_str(), "--force"],
    ] {
        let failed = runner(&c, &args);
        assert!(!failed.status.success(), "{failed:?}");
        let said = String::from_utf8_lossy(&failed.stderr);
        assert!(said.contains("nothing was changed"), "{said}");
        assert_eq!(exact_tree(&c.root), before, "{args:?}: {said}");
    }
    if root {
        immutable(&obstacle, false);
    } else {
        set_mode(&obstacle, 0o755);
    }
    let applied = runner(&c, &["apply", &id]);
    assert!(applied.status.success(), "{applied:?}");
    assert_eq!(
        std::fs::read_to_string(c.root.join("deep/file.txt")).unwrap(),
        "d\n"
    );
    assert_eq!(mode(&c.root.join("run.sh")), 0o755);
    assert!(!c.root.join("src/old.rs").exists());
    let left: Vec<String> = exact_tree(&c.root)
        .into_iter()
        .map(|(p, _, _)| p)
        .filter(|p| p.contains(".runner-apply-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `runner ARGS` with its output, its peak resident memory and how long it took.
///
/// The peak comes from GNU time, which forks runner from its own small process: a child
/// forked straight from this test process would count this process's pages as its own
/// peak (Linux carries the memory a process had before `exec` into its maximum), and a
/// test binary running many suites at once is far above the limit by itself.
fn runner_measured(c: &Checkout, args: &[&str]) -> (Output, u64, std::time::Duration) {
    common::engine::ensure_package("time", "/usr/bin/time");
    let report = c.data.join("peak-rss");
    let start = std::time::Instant::now();
    let output = Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o"])
        .arg(&report)
        .arg(env!("CARGO_BIN_EXE_runner"))
        .args(args)
        .env("XDG_DATA_HOME", &c.data)
        .env("XDG_CONFIG_HOME", c.data.join("config"))
        .current_dir(&c.root)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = start.elapsed();
    let text = std::fs::read_to_string(&report).expect("GNU time's report");
    // On a failure GNU time writes "Command exited with non-zero status N" first.
    let kib: u64 = text
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak in GNU time's report: {text:?}"));
    (output, kib * 1024, took)
}

/// A copy holding a 100 GiB sparse file the agent made, and another 100 GiB one of the
/// checkout's that it changed in the middle: `changes` names both as large with their
/// sizes, `apply` brings both over (still sparse), and neither goes over 100 MiB of memory
/// nor reads the holes (it would take minutes).
#[test]
fn a_100_gib_sparse_file_is_reviewed_and_applied_in_bounded_memory() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    const SIZE: u64 = 100 << 30;
    const LIMIT: u64 = 100 << 20;
    let c = checkout();
    let huge = std::fs::File::create(c.root.join("huge.img")).unwrap();
    huge.write_all_at(b"head", 0).unwrap();
    huge.set_len(SIZE).unwrap();
    drop(huge);
    // A change of its own, or the copy would be discarded as unchanged when the call ends.
    let id = in_copy(&c, "landlock", "echo x > marker.txt");
    let work = c.data.join("runner/workspaces").join(&id).join("work");
    std::fs::File::create(work.join("big.img"))
        .unwrap()
        .set_len(SIZE)
        .unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(work.join("huge.img"))
        .unwrap()
        .write_all_at(b"X", SIZE / 2)
        .unwrap();

    let (shown, rss, took) = runner_measured(&c, &["changes", &id]);
    assert!(shown.status.success(), "{shown:?}");
    let patch = String::from_utf8_lossy(&shown.stdout);
    for part in [
        "diff --git a/big.img b/big.img\nnew file mode 100644\nLarge files /dev/null and b/big.img differ (107374182400 bytes (100.0 GiB); not shown: over the 1 MiB diff limit)\n",
        "diff --git a/huge.img b/huge.img\nLarge files a/huge.img and b/huge.img differ (107374182400 bytes (100.0 GiB) → 107374182400 bytes (100.0 GiB); not shown",
    ] {
        assert!(patch.contains(part), "{part:?} missing from\n{patch}");
    }
    assert!(rss < LIMIT, "changes peaked at {} MiB", rss >> 20);
    eprintln!("changes: {took:?}, peak RSS {} KiB", rss >> 10);

    let (applied, rss, took) = runner_measured(&c, &["apply", &id]);
    assert!(applied.status.success(), "{applied:?}");
    assert!(rss < LIMIT, "apply peaked at {} MiB", rss >> 20);
    eprintln!("apply: {took:?}, peak RSS {} KiB", rss >> 10);
    for name in ["big.img", "huge.img"] {
        let meta = std::fs::metadata(c.root.join(name)).unwrap();
        assert_eq!(meta.len(), SIZE, "{name}");
        assert!(meta.blocks() * 512 < 16 << 20, "{name} is no longer sparse");
    }
    let huge = std::fs::File::open(c.root.join("huge.img")).unwrap();
    let (mut head, mut middle) = ([0u8; 4], [0u8; 1]);
    huge.read_exact_at(&mut head, 0).unwrap();
    huge.read_exact_at(&mut middle, SIZE / 2).unwrap();
    assert_eq!((&head, &middle), (b"head", b"X"));
}

/// A profile file (outside the checkout) whose copies get `disk` of budget and whose
/// temp directories hold `tmp`.
fn budget_profile(c: &Checkout, disk: &str, tmp: &str) -> PathBuf {
    let path = c.data.join("budget.toml");
    std::fs::create_dir_all(&c.data).unwrap();
    std::fs::write(
        &path,
        format!("[sandbox]\ndisk = \"{disk}\"\ntmp = \"{tmp}\"\n"),
    )
    .unwrap();
    path
}

/// Free bytes of the host file system that holds `path`.
fn free_bytes(path: &Path) -> u64 {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut fs) }, 0);
    fs.f_bavail as u64 * fs.f_frsize as u64
}

/// Attack: a command in a copy with a 64 MiB budget writes 200 MiB into the worktree (in
/// files of 25 MiB: landlock's file size limit is the temp directory's size). It
/// gets ENOSPC, the host's disk loses no more than the copy's image holds, and runner's
/// output names the budget and the key that raises it. Controls in the same run: 16 MiB
/// within the budget is written, and the temp directory (a 32 MiB tmpfs) takes 20 MiB and
/// refuses the next 20 with ENOSPC.
fn a_command_cannot_write_past_the_copy_budget(backend: &str) {
    let c = checkout();
    let profile = budget_profile(&c, "64MiB", "32MiB");
    let free_before = free_bytes(&c.root);
    let out = copy_call(
        &c,
        backend,
        "echo within > small.txt && dd if=/dev/zero of=fits bs=1M count=16 2>/dev/null && echo FITS; \
         T=${TMPDIR:-/tmp}; dd if=/dev/zero of=$T/a bs=1M count=20 2>/dev/null && echo TMP_A; \
         dd if=/dev/zero of=$T/b bs=1M count=20 2>&1 | grep -o 'No space left on device' | sed 's/^/TMP: /'; \
         rm -f $T/a $T/b; for i in 1 2 3 4 5 6 7 8; do dd if=/dev/zero of=big$i bs=1M count=25 || break; done; false",
    )
    .arg("--profile")
    .arg(&profile)
    .output()
    .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("FITS"),
        "{backend}: within the budget: {text}"
    );
    assert!(text.contains("TMP_A"), "{backend}: within tmp: {text}");
    assert!(
        text.contains("TMP: No space left on device"),
        "{backend}: {text}"
    );
    assert!(
        text.contains(": No space left on device\n") && text.contains("error writing 'big"),
        "{backend}: the write past the budget did not get ENOSPC: {text}"
    );
    assert!(
        text.contains("disk budget of 64 MiB is used up")
            && text.contains("`disk` under [sandbox]"),
        "{backend}: runner did not name the budget: {text}"
    );
    let id = text
        .lines()
        .find_map(|l| l.strip_prefix("workspace: "))
        .unwrap_or_else(|| panic!("no workspace line: {text}"))
        .to_string();
    let dir = c.data.join("runner/workspaces").join(&id);
    // What the host gave: the image's blocks, however much the command tried to write.
    let held = std::fs::metadata(dir.join("disk.img")).unwrap().blocks() * 512;
    assert!(held < 100 << 20, "{backend}: the image holds {held} bytes");
    // What the command wrote: about the budget, never less, and only ext4's slack more.
    let written: u64 = std::fs::read_dir(dir.join("work"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("big") || e.file_name() == "fits")
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(
        ((63 << 20)..=(72 << 20)).contains(&written),
        "{backend}: the command wrote {written} bytes"
    );
    // Other engineers' builds move the host's free space too: a loose bound, but one that
    // 200 MiB written to the host would break.
    let dropped = free_before.saturating_sub(free_bytes(&c.root));
    assert!(
        dropped < 180 << 20,
        "{backend}: the host lost {dropped} bytes"
    );
    // Nothing of the copy's file system is left once it is discarded.
    assert!(
        !common::mounts_under(&dir).is_empty(),
        "{backend}: work/ is not a mount"
    );
    let gone = runner(&c, &["discard", &id]);
    assert!(gone.status.success(), "{gone:?}");
    assert_eq!(common::mounts_under(&c.data), Vec::<String>::new());
    assert_eq!(common::loops_under(&c.data), Vec::<String>::new());
    assert!(!dir.exists(), "{backend}: the workspace folder is left");
}

/// Control: a budgeted copy is reviewed and applied as any other, and the apply leaves no
/// mount, loop device or image.
fn a_budgeted_copy_applies(backend: &str) {
    let c = checkout();
    let profile = budget_profile(&c, "64MiB", "32MiB");
    let out = copy_call(&c, backend, "echo within > small.txt")
        .arg("--profile")
        .arg(&profile)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("no disk budget"), "{err}");
    let id = err
        .lines()
        .find_map(|l| l.strip_prefix("workspace: "))
        .unwrap_or_else(|| panic!("no workspace line: {err}"))
        .to_string();
    assert_eq!(common::mounts_under(&c.data).len(), 1, "{backend}");
    let shown = runner(&c, &["changes", &id]);
    let patch = String::from_utf8_lossy(&shown.stdout);
    assert!(patch.contains("+within"), "{patch}");
    assert!(!patch.contains("lost+found"), "{patch}");
    let applied = runner(&c, &["apply", &id]);
    assert!(applied.status.success(), "{applied:?}");
    assert_eq!(
        std::fs::read_to_string(c.root.join("small.txt")).unwrap(),
        "within\n"
    );
    assert_eq!(common::mounts_under(&c.data), Vec::<String>::new());
    assert_eq!(common::loops_under(&c.data), Vec::<String>::new());
    assert!(!c.data.join("runner/workspaces").join(&id).exists());
}

#[test]
fn attack_a_command_cannot_fill_the_host_through_a_copy_on_landlock() {
    a_command_cannot_write_past_the_copy_budget("landlock");
}

#[test]
fn attack_a_command_cannot_fill_the_host_through_a_copy_in_docker() {
    common::engine::docker();
    a_command_cannot_write_past_the_copy_budget("docker");
}

#[test]
fn control_a_budgeted_copy_applies_on_landlock() {
    a_budgeted_copy_applies("landlock");
}

#[test]
fn control_a_budgeted_copy_applies_in_docker() {
    common::engine::docker();
    a_budgeted_copy_applies("docker");
}

/// After a reboot the image is there but not its mount: the next command mounts it again
/// before reading the copy, rather than reading the empty folder under it as "every file
/// deleted".
#[test]
fn a_copy_whose_mount_is_gone_is_mounted_again_before_it_is_read() {
    let c = checkout();
    let profile = budget_profile(&c, "64MiB", "32MiB");
    let out = copy_call(&c, "landlock", "echo again > small.txt")
        .arg("--profile")
        .arg(&profile)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let id = err
        .lines()
        .find_map(|l| l.strip_prefix("workspace: "))
        .unwrap_or_else(|| panic!("no workspace line: {err}"))
        .to_string();
    let work = c.data.join("runner/workspaces").join(&id).join("work");
    let path = std::ffi::CString::new(work.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::umount2(path.as_ptr(), 0) }, 0);
    let listed: Value = serde_json::from_slice(&runner(&c, &["changes", "--json"]).stdout).unwrap();
    assert_eq!(listed[0]["changed_files"], 1, "{listed}");
    assert_eq!(common::mounts_under(&c.data).len(), 1);
    assert!(runner(&c, &["discard", &id]).status.success());
    assert_eq!(common::mounts_under(&c.data), Vec::<String>::new());
}

/// A copy whose command changed nothing is not kept: the call says so in one line, and
/// nothing waits for review (it was kept and announced as `workspace: ID` before). The
/// agent's own `.git` (git refreshes its index) is no change.
#[test]
fn a_copy_with_no_changes_is_discarded_and_says_so() {
    let c = checkout();
    let out = copy_call(&c, "landlock", "cat a.txt && git status --short")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("runner: the copy has no changes; discarded it"),
        "{err}"
    );
    assert!(!err.contains("workspace: "), "{err}");
    let listed: Value = serde_json::from_slice(&runner(&c, &["changes", "--json"]).stdout).unwrap();
    assert_eq!(listed, serde_json::json!([]));
    let left = std::fs::read_dir(c.data.join("runner/workspaces"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "a copy's folder is left");
    assert_eq!(common::mounts_under(&c.data), Vec::<String>::new());
}

/// What the agent wrote that the worktree's `.gitignore` ignores (`__pycache__/`) is left
/// out of `changes` and `apply`, and counted; `--include-ignored` shows and applies it.
#[test]
fn changes_and_apply_leave_out_what_the_ignore_rules_ignore() {
    let c = checkout();
    std::fs::write(c.root.join(".gitignore"), "ignored.log\n__pycache__/\n").unwrap();
    git(&c.root, &["commit", "-qam", "ignore pycache"]);
    let agent = "mkdir -p __pycache__ && echo 'print(1)' > x.py && printf '\\000\\015\\015\\012' > __pycache__/x.cpython-311.pyc";
    let pyc = c.root.join("__pycache__");

    let id = in_copy(&c, "landlock", agent);
    let one: Value =
        serde_json::from_slice(&runner(&c, &["changes", &id, "--json"]).stdout).unwrap();
    assert_eq!(
        one["changes"],
        serde_json::json!([{"path": "x.py", "change": "added"}]),
        "{one}"
    );
    assert_eq!(one["left_out"], 1, "{one}");
    let listed: Value = serde_json::from_slice(&runner(&c, &["changes", "--json"]).stdout).unwrap();
    assert_eq!(
        (&listed[0]["changed_files"], &listed[0]["left_out"]),
        (&Value::from(1), &Value::from(1)),
        "{listed}"
    );
    let shown = runner(&c, &["changes", &id]);
    let (patch, said) = (
        String::from_utf8_lossy(&shown.stdout),
        String::from_utf8_lossy(&shown.stderr),
    );
    assert!(
        patch.contains("+++ b/x.py") && !patch.contains("__pycache__"),
        "{patch}"
    );
    let note = "left out 1 file the worktree's ignore rules ignore (--include-ignored shows them)";
    assert!(said.contains(note), "{said}");
    let all: Value = serde_json::from_slice(
        &runner(&c, &["changes", &id, "--json", "--include-ignored"]).stdout,
    )
    .unwrap();
    assert_eq!(
        all,
        serde_json::json!({"id": id, "left_out": 0, "changes": [
            {"path": "__pycache__/x.cpython-311.pyc", "change": "added"},
            {"path": "x.py", "change": "added"},
        ]})
    );

    let applied = runner(&c, &["apply", &id]);
    assert!(applied.status.success(), "{applied:?}");
    assert!(
        String::from_utf8_lossy(&applied.stderr).contains(
            "left out 1 file the worktree's ignore rules ignore, discarded with the copy \
             (`runner apply --include-ignored` brings such files over)"
        ),
        "{applied:?}"
    );
    assert_eq!(
        std::fs::read_to_string(c.root.join("x.py")).unwrap(),
        "print(1)\n"
    );
    assert!(!pyc.exists(), "the ignored file was applied");

    std::fs::remove_file(c.root.join("x.py")).unwrap();
    let id = in_copy(&c, "landlock", agent);
    let applied = runner(&c, &["apply", &id, "--include-ignored"]);
    assert!(applied.status.success(), "{applied:?}");
    assert!(c.root.join("x.py").exists());
    assert_eq!(
        std::fs::read(pyc.join("x.cpython-311.pyc")).unwrap(),
        [0u8, 0o15, 0o15, 0o12]
    );
}
