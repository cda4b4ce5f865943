//! A landlock sandbox's `/tmp` is its own (crates/sandbox-server/src/confine/tmp.rs): a
//! command writes `/tmp/x` and reads it back, and the host's `/tmp` never gets it; the
//! host's files in `/tmp` are not there for the sandbox, whatever their permissions; the
//! next sandbox starts with an empty `/tmp`. Controls beside the attacks: a worktree under
//! the host's `/tmp` (where tests and harnesses put theirs) still works, a read-only root
//! under `/tmp` is readable and stays read-only (landlock's rule for `/tmp` would let it be
//! written), a worktree inside a read-only root stays writable, and the folder holding the
//! worktree takes nothing beside it.

use std::path::{Path, PathBuf};

use common::escape::{Run, exec};
use runner_sandbox::spec::{Network, SandboxSpec};
use runner_sandbox::{BackendKind, Sandbox};

const HOST_SECRET: &str = "HOST-TMP-SECRET-5d21";

/// A lab under the host's `/tmp`: `wt` (the worktree), `ro` (a read-only root holding
/// `given.txt`), and a host file straight in `/tmp` that every user may read.
struct Scene {
    _dir: tempfile::TempDir,
    base: PathBuf,
    host_file: PathBuf,
    tag: String,
}

impl Scene {
    fn new() -> Scene {
        let dir = tempfile::Builder::new()
            .prefix("runner-private-tmp-")
            .tempdir_in("/tmp")
            .unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        assert!(base.starts_with("/tmp"), "{}", base.display());
        std::fs::create_dir(base.join("wt")).unwrap();
        std::fs::create_dir(base.join("ro")).unwrap();
        std::fs::write(base.join("ro/given.txt"), "given by the host\n").unwrap();
        let tag = format!(
            "{}-{}",
            std::process::id(),
            base.display().to_string().len()
        );
        let host_file = PathBuf::from(format!("/tmp/runner-private-tmp-host-{tag}"));
        std::fs::write(&host_file, format!("{HOST_SECRET}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&host_file, std::fs::Permissions::from_mode(0o644)).unwrap();
        Scene {
            _dir: dir,
            base,
            host_file,
            tag,
        }
    }

    async fn open(&self) -> Sandbox {
        self.open_reading(self.base.join("ro")).await
    }

    /// The sandbox, with `read_only` as its read-only root.
    async fn open_reading(&self, read_only: PathBuf) -> Sandbox {
        let mut spec = SandboxSpec::new(BackendKind::Landlock, &self.base.join("wt")).unwrap();
        spec.server_exe = common::runner_exe().to_path_buf();
        spec.network = Network::None;
        spec.read_only = vec![read_only];
        runner_sandbox::open(&spec)
            .await
            .unwrap_or_else(|e| panic!("the landlock sandbox opens: {e}"))
    }

    /// Where an attack plants a file in the host's `/dev/shm`.
    fn planted(&self) -> PathBuf {
        PathBuf::from(format!("/dev/shm/runner-private-tmp-planted-{}", self.tag))
    }

    /// The file a command writes in its `/tmp`.
    fn scratch(&self) -> PathBuf {
        PathBuf::from(format!("/tmp/runner-private-tmp-scratch-{}", self.tag))
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.host_file);
        let _ = std::fs::remove_file(self.scratch());
        let _ = std::fs::remove_file(self.planted());
    }
}

async fn sh(sb: &Sandbox, command: &str) -> Run {
    exec(sb, command)
        .await
        .unwrap_or_else(|e| panic!("the sandbox did not run {command:?}: {e}"))
}

fn shown(r: &Run) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        r.code, r.stdout, r.stderr
    )
}

fn name_of(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

#[tokio::test]
async fn a_landlock_sandbox_has_a_tmp_of_its_own() {
    let scene = Scene::new();
    let scratch = scene.scratch();
    let sb = scene.open().await;

    // Control: /tmp is writable, and what one command writes the next one reads.
    let r = sh(
        &sb,
        &format!("echo made-inside > {0} && cat {0}", scratch.display()),
    )
    .await;
    assert!(r.ok() && r.stdout == "made-inside\n", "{}", shown(&r));
    let r = sh(&sb, &format!("cat {}", scratch.display())).await;
    assert!(r.ok() && r.stdout == "made-inside\n", "{}", shown(&r));
    // Attack: it never reaches the host's /tmp.
    assert!(
        !scratch.exists(),
        "{} appeared on the host",
        scratch.display()
    );

    // Attack: the host's file in /tmp, readable by everyone, is not there at all.
    let r = sh(&sb, &format!("cat {}", scene.host_file.display())).await;
    assert!(!r.ok(), "{}", shown(&r));
    assert!(
        r.stderr.contains("No such file or directory"),
        "{}",
        shown(&r)
    );
    assert!(!r.stdout.contains(HOST_SECRET), "{}", shown(&r));
    // The listing holds only what the sandbox needs: the way to its worktree, its
    // $TMPDIR and what it wrote; none of the host's entries.
    let r = sh(&sb, "ls -A /tmp").await;
    assert!(r.ok(), "{}", shown(&r));
    let tmpdir = runner_sandbox::landlock::tmp_of(&sb).unwrap();
    let mut expected = vec![name_of(&scene.base), name_of(&tmpdir), name_of(&scratch)];
    expected.sort();
    let mut listed: Vec<String> = r.stdout.lines().map(String::from).collect();
    listed.sort();
    assert_eq!(listed, expected, "the sandbox's /tmp");

    // Control: the worktree under the host's /tmp works both ways.
    let r = sh(&sb, "echo from-the-sandbox > made.txt && cat made.txt").await;
    assert!(r.ok(), "{}", shown(&r));
    assert_eq!(
        std::fs::read_to_string(scene.base.join("wt/made.txt")).unwrap(),
        "from-the-sandbox\n"
    );
    // Control and attack: the read-only root under /tmp reads, and stays read-only.
    let ro = scene.base.join("ro");
    let r = sh(&sb, &format!("cat {}/given.txt", ro.display())).await;
    assert!(r.ok() && r.stdout == "given by the host\n", "{}", shown(&r));
    let r = sh(&sb, &format!("echo planted > {}/planted.txt", ro.display())).await;
    assert!(!r.ok(), "{}", shown(&r));
    assert!(!ro.join("planted.txt").exists());
    // Attack: nothing beside the worktree, and the way to it stays put.
    let r = sh(&sb, "echo planted > ../beside.txt").await;
    assert!(r.stderr.contains("Read-only file system"), "{}", shown(&r));
    let r = sh(&sb, &format!("mv {0} {0}-moved", scene.base.display())).await;
    assert!(!r.ok(), "{}", shown(&r));
    drop(sb);
    assert!(!scene.base.join("beside.txt").exists());
    assert!(
        !scratch.exists(),
        "{} appeared on the host",
        scratch.display()
    );

    // The next sandbox's /tmp starts empty: the first one's file is gone with it.
    let sb = scene.open().await;
    let r = sh(&sb, &format!("cat {}", scratch.display())).await;
    assert!(!r.ok(), "{}", shown(&r));
    drop(sb);

    // A read-only root holding the worktree: the worktree inside it is still writable,
    // the rest of it is not.
    let sb = scene.open_reading(scene.base.clone()).await;
    let r = sh(&sb, "echo again > made.txt && cat ../ro/given.txt").await;
    assert!(r.ok() && r.stdout == "given by the host\n", "{}", shown(&r));
    let r = sh(&sb, "echo planted > ../ro/planted.txt").await;
    assert!(r.stderr.contains("Read-only file system"), "{}", shown(&r));
    drop(sb);
    assert_eq!(
        std::fs::read_to_string(scene.base.join("wt/made.txt")).unwrap(),
        "again\n"
    );
    assert!(!scene.base.join("ro/planted.txt").exists());
}

/// A tmpfs the host mounts inside a root, taken down when the test ends.
struct Mounted(PathBuf);

impl Mounted {
    fn new(at: &Path) -> Mounted {
        std::fs::create_dir_all(at).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(at)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount tmpfs: {out:?}");
        Mounted(at.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let out = std::process::Command::new("umount").arg(&self.0).output();
        if !out.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("umount {}: {out:?}", self.0.display());
        }
    }
}

/// A read-only root under `/tmp` that has a mount of the host's inside it (a loop-mounted
/// workspace, a bind): landlock's rule for the private `/tmp` lets the sandbox write
/// everything beneath `/tmp`, so the mount inside must be bound back read-only as well,
/// or the sandbox writes into the host's file system through it.
#[tokio::test]
async fn a_mount_inside_a_read_only_root_under_tmp_stays_read_only() {
    let scene = Scene::new();
    let inner = scene.base.join("ro/inner");
    let mounted = Mounted::new(&inner);
    std::fs::write(inner.join("given.txt"), "inside the mount\n").unwrap();
    let sb = scene.open().await;

    // Control: the mount is there and reads.
    let r = sh(&sb, &format!("cat {}/given.txt", inner.display())).await;
    assert!(r.ok() && r.stdout == "inside the mount\n", "{}", shown(&r));
    // Attack: writing into it, or replacing what the host gave.
    let r = sh(
        &sb,
        &format!(
            "echo planted > {0}/planted.txt; echo changed > {0}/given.txt",
            inner.display()
        ),
    )
    .await;
    assert!(r.stderr.contains("Read-only file system"), "{}", shown(&r));
    drop(sb);
    assert!(
        !inner.join("planted.txt").exists(),
        "the sandbox wrote into the host's mount"
    );
    assert_eq!(
        std::fs::read_to_string(inner.join("given.txt")).unwrap(),
        "inside the mount\n"
    );
    drop(mounted);
}

/// A read-only root under `/tmp` that is a link to `/dev`: every mount in it (`/dev/shm`,
/// where programs share memory) must be read-only too, though landlock's rule for `/tmp`
/// covers all of it.
#[tokio::test]
async fn a_read_only_root_linking_to_dev_writes_nothing() {
    let scene = Scene::new();
    let link = scene.base.join("devices");
    std::os::unix::fs::symlink("/dev", &link).unwrap();
    let sb = scene.open_reading(link.clone()).await;
    let planted = scene.planted();
    let name = name_of(&planted);

    // Control: it reads through the link.
    let r = sh(
        &sb,
        &format!("test -c {0}/null && ls {0}/shm", link.display()),
    )
    .await;
    assert!(r.ok(), "{}", shown(&r));
    // Attack: the shared-memory mount inside it is written to.
    let r = sh(
        &sb,
        &format!("echo planted > {}/shm/{name}", link.display()),
    )
    .await;
    assert!(r.stderr.contains("Read-only file system"), "{}", shown(&r));
    drop(sb);
    let written = planted.exists();
    let _ = std::fs::remove_file(&planted);
    assert!(
        !written,
        "the sandbox wrote {} on the host",
        planted.display()
    );
}
