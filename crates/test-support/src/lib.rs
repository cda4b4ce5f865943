//! Shared fixture for the integration tests: a temporary worktree (plus a directory outside
//! it, and the directory truncated outputs are saved to), a [`ToolContext`] wired to a real
//! sandbox server (in-process thread or child process, same wire protocol), a recording
//! permission gate, and insta settings that hide the temporary paths.
//!
//! A crate of its own, so it is compiled once for every test binary (`all` and the four
//! that change what the whole process uses), not once in each; each binary names it
//! `common`. The runner binary the tests start is found beside the test binary
//! ([`runner_exe`]): cargo builds it for the package's integration tests.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a fixture for tests: its panic is the failing test's report"
)]

pub mod agree;
pub mod allowlist;
pub mod boundary;
pub mod engine;
pub mod engine_faults;
pub mod escape;
pub mod harbor;
pub mod inspect;
pub mod outside;
pub mod podman;
pub mod project;
pub mod provider;
pub mod saved_outputs;
pub mod side_doors;
pub mod special_files;
pub mod third_party;
pub mod tls;
pub mod upstream;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use runner_permission::{AskPolicy, PermissionRequest, PolicyGate};
use runner_tool::registry::Outcome;
use runner_tool::truncate::Truncator;
use runner_tool::{CallResult, Conversation, Registry, ToolContext};
use serde_json::Value;

/// The `runner` binary of this build: `target/…/debug/runner`, beside the `deps/` folder
/// the test binary runs from. (`CARGO_BIN_EXE_runner` is set only while compiling the
/// package's own test targets, and this is a crate of its own.)
pub fn runner_exe() -> &'static Path {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let test = std::env::current_exe().expect("the test binary's path");
        let dir = test
            .parent()
            .and_then(Path::parent)
            .expect("a test binary lives in target/…/deps");
        let exe = dir.join("runner");
        assert!(
            exe.is_file(),
            "{} is missing: the tests run the runner binary cargo builds beside them",
            exe.display()
        );
        exe
    })
}

/// Puts a copy of the runner binary at `to`, to be run from there. The copy is written by
/// a `cp` of its own: a copy written by this process holds its file open for writing, and
/// a test on another thread that forks in that moment hands the open file to its child
/// until the child's exec, so running the copy then fails with "Text file busy" (seen
/// with four tests at a time).
pub fn copy_runner_to(to: &Path) {
    let status = std::process::Command::new("cp")
        .arg(runner_exe())
        .arg(to)
        .status()
        .unwrap_or_else(|e| panic!("cp runner to {}: {e}", to.display()));
    assert!(status.success(), "cp runner to {}: {status}", to.display());
}

/// `nobody`'s uid and gid, for tests that run runner as a user with no rights of its own.
pub const NOBODY: u32 = 65534;

/// Gives `path` and everything under it to `uid:gid` (links themselves, not what they
/// point at), as `chown -R` would; fails the test on the first file it cannot change.
pub fn chown_tree(path: &Path, uid: u32, gid: u32) {
    let mut todo = vec![path.to_path_buf()];
    while let Some(p) = todo.pop() {
        std::os::unix::fs::lchown(&p, Some(uid), Some(gid))
            .unwrap_or_else(|e| panic!("hand {} over to uid {uid}: {e}", p.display()));
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
            for entry in std::fs::read_dir(&p).expect("read_dir").flatten() {
                todo.push(entry.path());
            }
        }
    }
}

/// Runs git in `dir` with a throwaway identity; fails the test if git does.
pub fn git(dir: &Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

/// Where the sandbox server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A thread of the test process (`local::in_process`).
    InProcess,
    /// The real `runner sandbox-server` binary as a child (`local::spawn_child`).
    Child,
    /// The server confined by landlock + seccomp.
    Landlock,
    /// The server in a hardened container of the default image.
    Docker,
}

/// Starts a sandbox of `backend` on `wt` the way the CLI does, with `read_only` mounted.
pub async fn open_sandbox(
    backend: Backend,
    wt: &Path,
    read_only: &[PathBuf],
) -> Result<runner_sandbox::Sandbox, runner_sandbox::SandboxError> {
    use runner_sandbox::BackendKind;
    let kind = match backend {
        Backend::InProcess => return runner_sandbox::local::in_process(wt, read_only).await,
        Backend::Child => BackendKind::None,
        Backend::Landlock => BackendKind::Landlock,
        Backend::Docker => {
            engine::docker();
            BackendKind::Docker
        }
    };
    let mut spec = runner_sandbox::spec::SandboxSpec::new(kind, wt).expect("spec");
    spec.server_exe = crate::runner_exe().to_path_buf();
    spec.read_only = read_only.to_vec();
    if kind == BackendKind::Docker {
        engine::apply(&mut spec);
    }
    runner_sandbox::open(&spec).await
}

/// How a fixture is set up; `Options::default()` is in-process, a strict session (read
/// before write) and a gate that allows everything.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub backend: Backend,
    /// `Session::single_call` instead of `Session::new`: files count as read at the start.
    pub single_call: bool,
    pub policy: AskPolicy,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            backend: Backend::InProcess,
            single_call: false,
            policy: AskPolicy::Allow,
        }
    }
}

/// Layout under one temp dir: `wt/` (the worktree), `outside/` (a sibling the tools must
/// not reach), `out/` (saved full outputs, mounted read-only in the sandbox like the CLI
/// does).
pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub wt: PathBuf,
    pub outside: PathBuf,
    pub out: PathBuf,
    pub gate: Arc<PolicyGate>,
    pub ctx: ToolContext,
    pub registry: Registry,
}

pub async fn fixture() -> Fixture {
    fixture_with(Options::default()).await
}

pub async fn fixture_with(opts: Options) -> Fixture {
    let tmp = tempfile::Builder::new()
        .prefix("runner-test-")
        .tempdir()
        .expect("temp dir");
    // The canonical form, so that the worktree the sandbox reports and the one the tests
    // build paths from are the same string.
    let base = std::fs::canonicalize(tmp.path()).expect("canonical temp dir");
    let wt = base.join("wt");
    let outside = base.join("outside");
    let out = base.join("out");
    for d in [&wt, &outside, &out] {
        std::fs::create_dir_all(d).expect("fixture dirs");
    }
    engine::hand_over(&base);
    let read_only = [out.clone()];
    let sandbox = open_sandbox(opts.backend, &wt, &read_only)
        .await
        .expect("sandbox starts");
    let session = if opts.single_call {
        Conversation::single_call("t")
    } else {
        Conversation::new("t")
    };
    let gate = Arc::new(PolicyGate::new(opts.policy));
    let ctx = ToolContext::new(
        Arc::new(sandbox),
        Arc::new(session),
        gate.clone(),
        Arc::new(Truncator::new(out.clone())),
    );
    Fixture {
        tmp,
        wt,
        outside,
        out,
        gate,
        ctx,
        registry: Registry::builtin(),
    }
}

impl Fixture {
    /// Runs one call through the registry (validation → tool → truncation).
    pub async fn call(&self, tool: &str, args: Value) -> CallResult {
        self.registry.call(tool, args, &self.ctx).await
    }

    /// Runs one call whose arguments are raw model text.
    pub async fn call_raw(&self, tool: &str, raw: &str) -> CallResult {
        self.registry.call_raw(tool, raw, &self.ctx).await
    }

    /// A call that must succeed; returns its result.
    pub async fn ok(&self, tool: &str, args: Value) -> CallResult {
        let r = self.call(tool, args.clone()).await;
        assert_eq!(
            r.outcome,
            Outcome::Ok,
            "{tool} {args} should succeed, got error {:?}",
            r.error
        );
        assert!(r.error.is_none());
        r
    }

    /// A call that must fail (not be denied); returns its error text.
    pub async fn err(&self, tool: &str, args: Value) -> String {
        let r = self.call(tool, args.clone()).await;
        assert_eq!(
            r.outcome,
            Outcome::Failed,
            "{tool} {args} should fail, got output {:?}",
            r.output
        );
        r.error.expect("a failed call carries an error")
    }

    /// Absolute path of a worktree-relative path.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.wt.join(rel)
    }

    /// `path(rel)` as a string, for tool arguments.
    pub fn abs(&self, rel: &str) -> String {
        self.path(rel).to_string_lossy().into_owned()
    }

    /// Writes a worktree file, creating its parents (handed to the worktree's owner, when
    /// the sandbox runs as another user: `engine::hand_over`).
    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let path = write_file(&self.path(rel), content.as_ref());
        engine::hand_over(&self.wt);
        path
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).expect("worktree file")
    }

    /// Every permission ask so far, as (permission, patterns, always).
    pub fn asks(&self) -> Vec<(String, Vec<String>, Vec<String>)> {
        self.gate.asked().into_iter().map(ask_tuple).collect()
    }

    pub fn raw_asks(&self) -> Vec<PermissionRequest> {
        self.gate.asked()
    }

    /// insta settings whose filters replace the worktree path with `[WT]`, saved outputs
    /// with `[OUT]` and the rest of the temp dir with `[TMP]`. Bind them with
    /// `let _s = f.insta().bind_to_scope();` before asserting snapshots.
    pub fn insta(&self) -> insta::Settings {
        let mut s = insta::Settings::clone_current();
        for (re, replacement) in path_filters(&self.wt, &self.out) {
            s.add_filter(&re, replacement);
        }
        s
    }
}

pub fn ask_tuple(r: PermissionRequest) -> (String, Vec<String>, Vec<String>) {
    (r.permission, r.patterns, r.always)
}

/// Builds an expected ask tuple from string slices.
pub fn ask(
    permission: &str,
    patterns: &[&str],
    always: &[&str],
) -> (String, Vec<String>, Vec<String>) {
    (
        permission.to_string(),
        patterns.iter().map(|s| s.to_string()).collect(),
        always.iter().map(|s| s.to_string()).collect(),
    )
}

pub fn write_file(path: &Path, content: &[u8]) -> PathBuf {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("parent dirs");
    }
    std::fs::write(path, content).expect("write file");
    path.to_path_buf()
}

/// Regex filters (pattern, replacement), most specific first: a saved output file becomes
/// `[OUT]`, the output dir `[OUT_DIR]`, the worktree `[WT]`, and the temp dir holding them
/// `[TMP]`.
pub fn path_filters(wt: &Path, out: &Path) -> Vec<(String, &'static str)> {
    let base = wt.parent().expect("worktree has a parent");
    vec![
        (
            format!("{}/tool_[0-9]+_[0-9]+_[0-9]+", regex_escape(out)),
            "[OUT]",
        ),
        (regex_escape(out), "[OUT_DIR]"),
        (regex_escape(wt), "[WT]"),
        (regex_escape(base), "[TMP]"),
    ]
}

fn regex_escape(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Every regular file under `root`, as (relative path with `/`, bytes), sorted. Symlinks
/// are reported as `-> target` so that a test notices one appearing.
pub fn snapshot_tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    if root.exists() {
        walk(root, root, &mut out);
    }
    out.sort();
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let entry = entry.expect("dir entry");
        let path = entry.path();
        let ft = entry.file_type().expect("file type");
        let rel = path
            .strip_prefix(root)
            .expect("under root")
            .to_string_lossy()
            .replace('\\', "/");
        if ft.is_symlink() {
            let target = std::fs::read_link(&path).expect("read_link");
            out.push((rel, format!("-> {}", target.display()).into_bytes()));
        } else if ft.is_dir() {
            walk(root, &path, out);
        } else {
            out.push((rel, std::fs::read(&path).expect("read file")));
        }
    }
}

/// The runner binary where any user can run it: the build's own path may sit under a
/// home directory other users cannot enter (a clone in `/root`). Copied into a
/// world-readable temp folder named by the build, so every test binary and run of the same
/// build shares one copy.
pub fn runner_for_any_user() -> PathBuf {
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::fs::PermissionsExt;
        let built = std::fs::metadata(crate::runner_exe()).expect("the runner build");
        let dir =
            std::env::temp_dir().join(format!("runner-bin-{}-{}", built.mtime(), built.size()));
        let exe = dir.join("runner");
        if std::fs::metadata(&exe).is_ok_and(|m| m.size() == built.size()) {
            return exe;
        }
        std::fs::create_dir_all(&dir).expect("a folder for the runner copy");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Copied beside, then renamed: two test binaries may do this at once.
        let part = dir.join(format!("runner.{}", std::process::id()));
        std::fs::copy(crate::runner_exe(), &part).expect("copy runner");
        std::fs::set_permissions(&part, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&part, &exe).expect("place the runner copy");
        exe
    })
    .clone()
}

/// Makes `command` run as on a machine that refuses unprivileged user namespaces (Ubuntu
/// 24.04's AppArmor policy, `user.max_user_namespaces=0`): a seccomp filter, installed
/// after the switch of user and inherited by everything the command starts, fails
/// `unshare` and `clone` with `CLONE_NEWUSER` with EPERM, as those policies do. `clone3`,
/// whose flags a filter cannot read, gets ENOSYS, so the C library falls back to `clone`.
pub fn without_user_namespaces(command: &mut std::process::Command) {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    };
    use std::os::unix::process::CommandExt;
    let arch = std::env::consts::ARCH.try_into().unwrap();
    let new_user = || {
        let flag = libc::CLONE_NEWUSER as u64;
        let when = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        );
        vec![SeccompRule::new(vec![when.unwrap()]).unwrap()]
    };
    let refuse: seccompiler::BpfProgram = SeccompFilter::new(
        [
            (libc::SYS_unshare, new_user()),
            (libc::SYS_clone, new_user()),
        ]
        .into(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .unwrap()
    .try_into()
    .unwrap();
    let no_clone3: seccompiler::BpfProgram = SeccompFilter::new(
        [(libc::SYS_clone3, Vec::<SeccompRule>::new())].into(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .unwrap()
    .try_into()
    .unwrap();
    // SAFETY: between fork and exec only async-signal-safe calls (prctl, seccomp).
    unsafe {
        command.pre_exec(move || {
            seccompiler::apply_filter(&refuse).map_err(std::io::Error::other)?;
            seccompiler::apply_filter(&no_clone3).map_err(std::io::Error::other)
        });
    }
}

/// Unmounts the file systems of the copy workspaces under the data directory `data` (a
/// copy's `work/` is a loop-mounted image) when dropped, so that a test that leaves a copy
/// behind leaves no mount, no loop device and no image: its temporary folder can go.
pub struct CopyMounts(pub PathBuf);

impl Drop for CopyMounts {
    fn drop(&mut self) {
        let Ok(dirs) = std::fs::read_dir(self.0.join("runner/workspaces")) else {
            return;
        };
        for dir in dirs.flatten() {
            let work = dir.path().join("work");
            if let Ok(c) = std::ffi::CString::new(work.as_os_str().as_encoded_bytes()) {
                // SAFETY: a valid C string; plain syscall. Not mounted: a harmless EINVAL.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
            let _ = std::fs::remove_file(dir.path().join("disk.img"));
        }
    }
}

/// The mount points in this process's mount namespace at or below `path`.
pub fn mounts_under(path: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let path = path.to_string_lossy();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(path.as_ref()))
        .map(str::to_string)
        .collect()
}

/// The loop devices whose backing file is at or below `path`.
pub fn loops_under(path: &Path) -> Vec<String> {
    let path = path.to_string_lossy();
    std::fs::read_dir("/sys/block")
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path().join("loop/backing_file")).ok())
                .filter(|b| b.starts_with(path.as_ref()))
                .collect()
        })
        .unwrap_or_default()
}

/// Runs tests of this very binary again in a child process with `RUNNER_RESOLVE=walk`, so
/// that every server (in-process, child, landlock, docker: the variable is passed on as
/// `--resolve walk`) resolves paths with the openat2 fallback, and the same attacks face
/// both resolvers on a kernel that has openat2. `args` select the tests (`--exact NAME`,
/// `--skip NAME`, …); fails with the child's output when a test there fails.
/// A test's name as the test binary's filter sees it: `module` is the caller's
/// `module_path!()`, whose first part is the binary itself (`all::escape_docker` names
/// `escape_docker::NAME` in `tests/all.rs`, `sandbox_cleanup` names plain `NAME`).
pub fn in_this_binary(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}

pub fn rerun_with_the_walk(args: &[&str]) {
    use runner_sandbox_server::roots::{RESOLVE_VAR, Resolver};
    if std::env::var(RESOLVE_VAR).is_ok() {
        // Already the rerun (a filter that matched its own caller): nothing to do twice.
        assert_eq!(Resolver::chosen(), Resolver::Walk);
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(args)
        .args(["--test-threads", "2"])
        .env(RESOLVE_VAR, "walk")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("rerun the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stdout
        .lines()
        .filter(|l| l.starts_with("test ") || l.starts_with("test result"))
        .collect::<Vec<_>>()
        .join("\n");
    eprintln!("with {RESOLVE_VAR}=walk:\n{summary}");
    assert!(
        out.status.success() && stdout.contains("test result: ok") && !stdout.contains(" 0 passed"),
        "with {RESOLVE_VAR}=walk, {args:?} failed:\n{stdout}\n{stderr}"
    );
}
