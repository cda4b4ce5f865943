//! The `landlock` backend: `runner` re-executes itself as the server, which confines itself
//! (see [`crate::confine`]) before serving. The host side prepares what the
//! confinement needs: a private temp directory, a cgroup where the machine allows one, and
//! the command line that tells the server its walls.

pub mod cgroup;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::spec::{Network, SandboxSpec};
use super::worktree_guard::{SweepOnClose, WorktreeGuard};
use super::{BackendKind, Sandbox, SandboxError, local};
use runner_protocol::{ApiError, ErrorKind};
use runner_sandbox_server::restore::ProtectedCopy;

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
    /// What this machine makes the sandbox go without, in one line to show the user once
    /// (`None`: nothing).
    pub given_up: Option<String>,
}

pub fn prepare(spec: &SandboxSpec, worktree: &Path) -> Result<Prepared, SandboxError> {
    let io = |what: &str, e: std::io::Error| {
        SandboxError::Disconnected(format!("cannot prepare the landlock sandbox: {what}: {e}"))
    };
    let refused = super::confine::namespaces_refused();
    if let Some(why) = &refused
        && spec.network == Network::Allowlist
    {
        return Err(refusal(format!(
            "--network allowlist needs a private network namespace, where the proxy is the \
             only way out, and this machine refuses to make one ({why}). Use --network none, \
             --sandbox docker, or allow unprivileged user namespaces"
        )));
    }
    let tmp = tempfile::Builder::new()
        .prefix(&format!("{TMP_PREFIX}{}-", std::process::id()))
        .tempdir()
        .map_err(|e| io("private temp directory", e))?;
    let tmp_path = tmp.path().to_path_buf();
    // Cgroups of runs that died without cleaning up go first, so they never pile up.
    cgroup::destroy(&cgroup::leftovers());
    let cgroup = cgroup::create(&spec.limits);
    let guard = WorktreeGuard::new(worktree, &spec.protected);
    // Without a mount namespace nothing is read-only: what the mounts would keep is copied
    // now, before anything runs, and put back after every command and at close.
    let kept = match refused {
        Some(_) => Some(
            ProtectedCopy::take(worktree, &guard.read_only).map_err(|e| {
                refusal(format!(
                    "{e}; without a mount namespace (this machine refuses one) the protected \
                 files are kept by copy. Use --sandbox docker"
                ))
            })?,
        ),
        None => None,
    };
    let mut args = server_args(spec, worktree, &tmp_path, &guard)?;
    if refused.is_some() {
        args.push("--no-namespaces".into());
    }
    if let Some(cg) = &cgroup {
        for dir in &cg.dirs {
            args.push("--cgroup".into());
            args.push(dir.clone().into());
        }
    }
    let given_up = given_up(refused.as_deref(), cgroup.as_ref(), spec);
    Ok(Prepared {
        args,
        env: sandbox_env(spec, worktree, &tmp_path),
        tmp,
        cgroup,
        sweep: guard.sweep_on_close(worktree, spec.sweep_repositories, kept),
        given_up,
    })
}

fn refusal(message: String) -> SandboxError {
    SandboxError::Api(ApiError::new(ErrorKind::InvalidArgument, message))
}

/// The command line of `runner sandbox-server` for this sandbox, but for the cgroups.
fn server_args(
    spec: &SandboxSpec,
    worktree: &Path,
    tmp: &Path,
    guard: &WorktreeGuard,
) -> Result<Vec<OsString>, SandboxError> {
    let mut args: Vec<OsString> = vec!["sandbox-server".into()];
    // The certificate bundle is read where it is: its folder joins the read-only roots.
    let bundle_dir = spec
        .ca_bundle
        .as_deref()
        .and_then(Path::parent)
        .map(Path::to_path_buf);
    let read_only: Vec<PathBuf> = spec.read_only.iter().cloned().chain(bundle_dir).collect();
    args.extend(local::root_args(worktree, &read_only)?);
    let mut flag = |name: &str, value: OsString| {
        args.push(format!("--{name}").into());
        args.push(value);
    };
    flag("confine", "landlock".into());
    flag("tmp", tmp.into());
    flag("network", spec.network.as_arg().into());
    flag("memory", spec.limits.memory_bytes.to_string().into());
    flag("pids", spec.limits.pids.to_string().into());
    flag("tmp-size", spec.limits.tmp_bytes.to_string().into());
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
    if spec.sweep_repositories {
        args.push("--sweep-repositories".into());
    }
    args.extend(
        super::spec::test_gap_args(spec)
            .into_iter()
            .map(OsString::from),
    );
    Ok(args)
}

/// What the sandbox goes without on this machine, as one line: the namespaces (when
/// `refused` says why there are none) and the cgroup limits.
fn given_up(
    refused: Option<&str>,
    cgroup: Option<&cgroup::SandboxCgroup>,
    spec: &SandboxSpec,
) -> Option<String> {
    let namespaces = refused.map(|why| {
        format!(
            "no mount or PID namespace ({why}): .git/hooks, .git/config and the other files \
             host git runs are put back after every command and at close instead of being \
             read-only; $TMPDIR is a folder on disk (each file up to {} MiB, the total not \
             bounded); no /tmp of its own (the host's stays closed to it); /proc shows the \
             host's processes; --network allowlist is refused",
            spec.limits.tmp_bytes >> 20
        )
    });
    let parts: Vec<String> = namespaces
        .into_iter()
        .chain(cgroup::missing_limits(cgroup))
        .collect();
    (!parts.is_empty()).then(|| {
        format!(
            "landlock here goes without: {} (`runner sandbox doctor` says how to get them)",
            parts.join("; ")
        )
    })
}

/// The environment commands get. The common allow-list and the profile's additions, but
/// not the host's HOME (its dot files are outside the wall; the private temp directory
/// stands in) and not PATH as is: entries the sandbox cannot read (a version manager's
/// shims in the home directory) would only turn "command not found" into "permission
/// denied".
fn sandbox_env(spec: &SandboxSpec, worktree: &Path, tmp: &Path) -> Vec<(String, String)> {
    let tmp_str = tmp.to_string_lossy().into_owned();
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
    if spec.network == Network::Allowlist {
        super::spec::set_proxy_env(&mut env, &spec.host_loopback);
    }
    if let Some(bundle) = &spec.ca_bundle {
        crate::trust::set_env(&mut env, bundle);
    }
    env
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
    let given_up = prepared.given_up;
    let namespaces = !prepared.args.iter().any(|a| a == "--no-namespaces");
    let mut command = tokio::process::Command::new(&spec.server_exe);
    command.args(&prepared.args);
    // Guards drop in reverse: the cgroup (killing stragglers) before the temp directory,
    // and the sweep last, when nothing in the sandbox can plant anything again.
    let guards: Vec<Box<dyn Send + Sync>> = vec![
        Box::new(prepared.sweep),
        Box::new(prepared.tmp),
        Box::new(prepared.cgroup),
    ];
    let mut sandbox = local::spawn_server(
        command,
        &spec.server_exe,
        worktree,
        BackendKind::Landlock,
        prepared.env,
        guards,
    )
    .await?;
    sandbox.notes.extend(given_up);
    sandbox.wall = Some(crate::self_test::Wall::Landlock { namespaces });
    Ok(sandbox)
}

/// The temp directory commands get, seen from the host (for tests and `doctor`).
pub fn tmp_of(sandbox: &Sandbox) -> Option<PathBuf> {
    sandbox
        .env
        .iter()
        .find(|(k, _)| k == "TMPDIR")
        .map(|(_, v)| PathBuf::from(v))
}
