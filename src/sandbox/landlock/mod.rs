//! The `landlock` backend: `runner` re-executes itself as the server, which confines itself
//! (see [`crate::sandbox::confine`]) before serving. The host side prepares what the
//! confinement needs: a private temp directory, a cgroup where the machine allows one, and
//! the command line that tells the server its walls.

pub mod cgroup;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::spec::SandboxSpec;
use super::worktree_guard::{SweepOnClose, WorktreeGuard};
use super::{BackendKind, Sandbox, SandboxError, local};

/// Private temp directories are `runner-sandbox-<owner pid>-…` in the system temp dir.
pub const TMP_PREFIX: &str = "runner-sandbox-";

/// Private temp directories of runs that are gone (a SIGKILLed runner cannot remove its own).
pub fn leftover_tmp_dirs() -> Vec<PathBuf> {
    super::owner::orphans_in(&std::env::temp_dir(), TMP_PREFIX)
}

/// The command-line flags that make `runner sandbox-server` confine itself; shared with
/// `sandbox shell`, which starts the same server in shell mode.
pub struct Prepared {
    pub args: Vec<OsString>,
    pub env: Vec<(String, String)>,
    pub tmp: tempfile::TempDir,
    pub cgroup: Option<cgroup::SandboxCgroup>,
    pub sweep: SweepOnClose,
}

pub fn prepare(spec: &SandboxSpec, worktree: &Path) -> Result<Prepared, SandboxError> {
    let io = |what: &str, e: std::io::Error| {
        SandboxError::Disconnected(format!("cannot prepare the landlock sandbox: {what}: {e}"))
    };
    let tmp = tempfile::Builder::new()
        .prefix(&format!("{TMP_PREFIX}{}-", std::process::id()))
        .tempdir()
        .map_err(|e| io("private temp directory", e))?;
    let tmp_path = tmp.path().to_path_buf();
    // Cgroups of runs that died without cleaning up go first, so they never pile up.
    cgroup::destroy(&cgroup::leftovers());
    let cgroup = cgroup::create(&spec.limits);
    let mut args: Vec<OsString> = vec!["sandbox-server".into()];
    args.extend(local::root_args(worktree, &spec.read_only)?);
    let mut flag = |name: &str, value: OsString| {
        args.push(format!("--{name}").into());
        args.push(value);
    };
    flag("confine", "landlock".into());
    flag("tmp", tmp_path.clone().into());
    flag("network", spec.network.as_arg().into());
    flag("memory", spec.limits.memory_bytes.to_string().into());
    flag("pids", spec.limits.pids.to_string().into());
    flag("tmp-size", spec.limits.tmp_bytes.to_string().into());
    let guard = WorktreeGuard::new(worktree, &spec.protected);
    for path in &guard.read_only {
        flag("protect", path.clone().into());
    }
    for dir in &guard.pins {
        flag("pin", dir.clone().into());
    }
    for path in &guard.forbid {
        flag("forbid", path.clone().into());
    }
    for path in guard
        .repositories
        .dirs
        .iter()
        .chain(&guard.repositories.pointers)
    {
        flag("known-repository", path.clone().into());
    }
    if let Some(cg) = &cgroup {
        for dir in &cg.dirs {
            flag("cgroup", dir.clone().into());
        }
    }
    if spec.sweep_repositories {
        args.push("--sweep-repositories".into());
    }
    let tmp_str = tmp_path.to_string_lossy().into_owned();
    // The common allow-list and the profile's additions, but not the host's HOME (its dot
    // files are outside the wall; the private temp directory stands in) and not PATH as is:
    // entries the sandbox cannot read (a version manager's shims in the home directory)
    // would only turn "command not found" into "permission denied".
    let mut env: Vec<(String, String)> = super::ENV_ALLOW_LIST
        .iter()
        .filter(|k| !matches!(**k, "HOME" | "PATH"))
        .map(|k| k.to_string())
        .chain(spec.env_allow.iter().cloned())
        .filter_map(|k| std::env::var(&k).ok().map(|v| (k, v)))
        .collect();
    let host_path = std::env::var("PATH").unwrap_or_default();
    let mut path: Vec<&str> = host_path
        .split(':')
        .filter(|d| readable_in_sandbox(Path::new(d), worktree))
        .collect();
    if path.is_empty() {
        path = vec!["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"];
    }
    env.push(("PATH".into(), path.join(":")));
    env.push(("HOME".into(), tmp_str.clone()));
    env.push(("TMPDIR".into(), tmp_str));
    if spec.network == super::spec::Network::Allowlist {
        super::spec::set_proxy_env(&mut env);
    }
    Ok(Prepared {
        args,
        env,
        tmp,
        cgroup,
        sweep: guard.sweep_on_close(worktree, spec.sweep_repositories),
    })
}

fn readable_in_sandbox(dir: &Path, worktree: &Path) -> bool {
    super::confine::SYSTEM_DIRS
        .iter()
        .any(|sys| dir.starts_with(sys))
        || dir.starts_with(worktree)
}

pub async fn open(spec: &SandboxSpec) -> Result<Sandbox, SandboxError> {
    let worktree = local::absolute(&spec.worktree)?;
    let worktree = std::fs::canonicalize(&worktree).unwrap_or(worktree);
    let prepared = prepare(spec, &worktree)?;
    let mut command = tokio::process::Command::new(&spec.server_exe);
    command.args(&prepared.args);
    // Guards drop in reverse: the cgroup (killing stragglers) before the temp directory,
    // and the sweep last, when nothing in the sandbox can plant anything again.
    let guards: Vec<Box<dyn Send + Sync>> = vec![
        Box::new(prepared.sweep),
        Box::new(prepared.tmp),
        Box::new(prepared.cgroup),
    ];
    local::spawn_server(
        command,
        &spec.server_exe,
        worktree,
        BackendKind::Landlock,
        prepared.env,
        guards,
    )
    .await
}

/// The temp directory commands get, seen from the host (for tests and `doctor`).
pub fn tmp_of(sandbox: &Sandbox) -> Option<PathBuf> {
    sandbox
        .env
        .iter()
        .find(|(k, _)| k == "TMPDIR")
        .map(|(_, v)| PathBuf::from(v))
}
