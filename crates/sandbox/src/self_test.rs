//! The wall checks itself at every start, before the first tool call.
//!
//! The most common failure of an agent sandbox is not a clever escape but a wall that was
//! never up: a kernel without landlock, a runtime that dropped the seccomp profile, a
//! container given a network, an engine that kept capabilities. Each of those starts
//! quietly and runs the agent as if nothing were missing. So once the server answers, the
//! host asks it to try, from inside, what the wall must refuse and the one thing it must
//! allow ([`runner_protocol::wall`]), and judges the answers here against what this
//! backend must say. A check that fails stops the session with
//! [`SandboxStartError::WallCheck`], naming the layer and what to do; the report (every
//! check, passed or not, and its time) goes to the audit trail and `runner sandbox doctor`.
//!
//! What each wall must say differs, and the checks say which:
//!
//! | check | landlock | docker (runc), Podman | gVisor (runsc) |
//! |---|---|---|---|
//! | worktree | a file can be made, written and removed | the same, as the command user | the same |
//! | canary | a host file outside the worktree: EACCES (landlock refuses it) | not there at all (ENOENT: nothing of the host but the mounts) | the same as docker |
//! | seccomp | mode 2, and `ptrace` of itself refused with EPERM, where the kernel alone says ESRCH (runner's filter; an engine's default profile allows `ptrace`) | the same: runner's filter on top of the engine's | the same, gVisor's kernel applying the filter |
//! | network `none` | no AF_INET socket (EPERM) | the same | the same |
//! | network `allowlist` | no route to 192.0.2.1 or 2001:db8::1 (only a loopback in the namespace) | the same (`network_mode=none`) | the same |
//! | capabilities | none effective, permitted or ambient; no new privileges; an empty bounding set where a namespace or root let the server empty it | all empty, no new privileges | the same |
//!
//! `--network host` is not checked: the host's network is what was asked for.
//!
//! A task image's container ([`Wall::Task`]) is judged as docker's, except where the task
//! decides: its root keeps [`TASK_CAPABILITIES`], and its folder may be closed to its user.
//! A server started with `--exec` answers on a socket of its own before its program
//! ([`over_socket`]), since it serves no requests.

use std::path::PathBuf;
use std::time::Instant;

use runner_protocol::wall::probes;
use runner_protocol::{Network, Probe, SelfTestRequest, WallFacts};

use crate::start_error::SandboxStartError;
use crate::{Sandbox, SandboxError};

/// Which wall a sandbox is, as far as the checks care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wall {
    /// `namespaces`: the server made its user, mount and PID namespaces (the machine
    /// allowed them), so it could empty its bounding set even without being root.
    Landlock { namespaces: bool },
    /// A container; `podman` says which engine, `gvisor` whether runsc runs it.
    Container { podman: bool, gvisor: bool },
    /// A task image's container (an evaluation's Harbor task, `sandbox serve
    /// --task-image`): a container as above, except that its server runs as the image's
    /// user, root keeping the capabilities a system's own files need
    /// ([`TASK_CAPABILITIES`]), and the worktree is the image's own folder, whose
    /// permissions are the task's.
    Task { podman: bool, gvisor: bool },
}

/// The capabilities a task container's root keeps (`CHOWN`, `DAC_OVERRIDE`, `FOWNER`,
/// `FSETID`, `SETGID`, `SETUID`: bits 0, 1, 3, 4, 6, 7), as `docker::in_image` adds them.
pub const TASK_CAPABILITIES: u64 = 0xdb;

impl Wall {
    /// `landlock`, `docker`, `podman`, `docker (gVisor)`: what a report names.
    pub fn name(self) -> String {
        match self {
            Wall::Landlock { namespaces: true } => "landlock".into(),
            Wall::Landlock { namespaces: false } => "landlock (no namespaces)".into(),
            Wall::Container { podman, gvisor } | Wall::Task { podman, gvisor } => {
                let engine = if podman { "podman" } else { "docker" };
                let task = match self {
                    Wall::Task { .. } => " task image",
                    _ => "",
                };
                match gvisor {
                    true => format!("{engine}{task} (gVisor)"),
                    false => format!("{engine}{task}"),
                }
            }
        }
    }
}

/// The layer a check is about: what the error names, what the fix is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    Worktree,
    Files,
    Seccomp,
    Network,
    Capabilities,
}

impl Layer {
    pub fn name(self) -> &'static str {
        match self {
            Layer::Worktree => "worktree",
            Layer::Files => "files",
            Layer::Seccomp => "seccomp",
            Layer::Network => "network",
            Layer::Capabilities => "capabilities",
        }
    }
}

/// One check, judged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Check {
    /// `worktree writable`, `canary unreadable`, …
    pub name: &'static str,
    pub layer: Layer,
    pub passed: bool,
    /// What was seen, and what this wall must show.
    pub saw: String,
    pub want: String,
    /// The probes' time inside the wall.
    pub micros: u64,
    /// What to do, when it failed ([`fix`]); empty when it passed.
    pub fix: &'static str,
}

/// Every check of one start.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SelfTestReport {
    /// [`Wall::name`].
    pub wall: String,
    pub network: Network,
    pub checks: Vec<Check>,
    /// The whole self-test as the host waited for it: the canary made, the round trip,
    /// the judging.
    pub total_micros: u64,
}

impl SelfTestReport {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    pub fn failures(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.passed)
    }

    /// One line per check, as `doctor` shows them.
    pub fn lines(&self) -> Vec<String> {
        self.checks
            .iter()
            .map(|c| {
                format!(
                    "{} ({} layer, {} µs): saw {}; {} must show {}",
                    c.name,
                    c.layer.name(),
                    c.micros,
                    c.saw,
                    self.wall,
                    c.want
                )
            })
            .collect()
    }
}

/// The first failed check of a start, and the whole report (for the audit trail).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {wall} sandbox failed its self-test at start, in its {layer} layer: {check} saw {saw}, where it must show {want}. \
     No tool call ran. To do: {fix}; `runner sandbox doctor` runs the same checks"
)]
pub struct WallCheckFailed {
    pub wall: String,
    pub layer: String,
    pub check: String,
    pub saw: String,
    pub want: String,
    pub fix: String,
    pub report: SelfTestReport,
}

/// What to do when a layer's check fails.
pub fn fix(layer: Layer, wall: Wall, network: Network) -> &'static str {
    match (layer, wall) {
        (Layer::Worktree, _) => {
            "the worktree must be writable from inside: check its owner and the file system it is on (read-only, or ids a rootless engine maps elsewhere)"
        }
        (Layer::Files, Wall::Landlock { .. }) => {
            "landlock did not refuse a file outside the worktree: boot a kernel with landlock ABI 6 (Linux 6.12+, lsm=...,landlock), or use --sandbox docker"
        }
        (Layer::Files, Wall::Container { .. } | Wall::Task { .. }) => {
            "a host file outside the worktree is visible in the container: remove the engine's extra mounts (default volumes or binds in daemon.json or containers.conf), or use --sandbox landlock"
        }
        (Layer::Seccomp, _) => {
            "no seccomp filter holds: the kernel needs CONFIG_SECCOMP_FILTER, and the container runtime must not be told to run unconfined (seccomp=unconfined); or use another backend"
        }
        (Layer::Network, _) if network == Network::None => {
            "network sockets can be made though --network none was asked: the seccomp filter is not the one runner installs; use another backend"
        }
        (Layer::Network, _) => {
            "the sandbox has a route out beside the proxy: its network namespace must hold only a loopback (network_mode none for a container); check the engine's network settings, or use --network none"
        }
        (Layer::Capabilities, _) => {
            "the sandbox kept capabilities or may gain them: the engine must honour cap_drop ALL and no-new-privileges, and the kernel must let the server drop its own"
        }
    }
}

/// A file outside the worktree for the server to fail to read; removed when dropped.
/// It is made in `/var/tmp` where there is one, not in `/tmp`: a landlock sandbox with a
/// mount namespace has a `/tmp` of its own, where the canary would be missing whether or
/// not landlock is up, and only landlock's EACCES proves the wall.
struct Canary {
    dir: tempfile::TempDir,
}

impl Canary {
    fn make() -> Result<Canary, SandboxError> {
        let place = Some(PathBuf::from("/var/tmp"))
            .filter(|d| d.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        let made = || -> std::io::Result<Canary> {
            let dir = tempfile::Builder::new()
                .prefix(&format!("runner-canary-{}-", std::process::id()))
                .tempdir_in(&place)?;
            std::fs::write(
                dir.path().join("canary"),
                b"a file the sandbox must not read\n",
            )?;
            Ok(Canary { dir })
        };
        made().map_err(|e| {
            SandboxError::Disconnected(format!(
                "cannot make the self-test's canary file in {}: {e}",
                place.display()
            ))
        })
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("canary")
    }
}

/// Runs the self-test on a started sandbox: the report when every check passed, the
/// typed error (holding the report) when one did not.
pub async fn run(
    sandbox: &Sandbox,
    wall: Wall,
    network: Network,
) -> Result<SelfTestReport, SandboxError> {
    let start = Instant::now();
    let canary = Canary::make()?;
    let facts = sandbox
        .client
        .self_test(SelfTestRequest {
            worktree: sandbox.worktree.clone(),
            canary: canary.path(),
        })
        .await?;
    drop(canary);
    verdict(&facts, wall, network, start)
}

/// The self-test of a server started with `--exec --self-test-fd`, which holds its
/// program back until told: the request and the facts over `socket`, then `true` when
/// every check passed. When one failed the socket closes unanswered and the server ends
/// without running the program. Blocking, with a 30 s limit on each read: the probes take
/// microseconds, and a server that died before answering closes its end at once.
pub fn over_socket(
    mut socket: std::os::unix::net::UnixStream,
    worktree: &std::path::Path,
    wall: Wall,
    network: Network,
) -> Result<SelfTestReport, SandboxError> {
    let start = Instant::now();
    let lost = |e: std::io::Error| {
        SandboxError::Disconnected(format!(
            "the sandbox's server did not answer its self-test: {e}"
        ))
    };
    socket
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .map_err(lost)?;
    let canary = Canary::make()?;
    let request = SelfTestRequest {
        worktree: worktree.to_path_buf(),
        canary: canary.path(),
    };
    runner_protocol::write_frame(&mut socket, &request).map_err(lost)?;
    let facts: WallFacts = runner_protocol::read_frame(&mut socket)
        .map_err(lost)?
        .ok_or_else(|| lost(std::io::ErrorKind::UnexpectedEof.into()))?;
    drop(canary);
    let report = verdict(&facts, wall, network, start)?;
    runner_protocol::write_frame(&mut socket, &true).map_err(lost)?;
    Ok(report)
}

/// The facts judged: the report when every check passed, the typed error otherwise.
fn verdict(
    facts: &WallFacts,
    wall: Wall,
    network: Network,
    start: Instant,
) -> Result<SelfTestReport, SandboxError> {
    let mut report = judge(facts, wall, network);
    report.total_micros = start.elapsed().as_micros() as u64;
    let Some(failed) = report.failures().next().cloned() else {
        return Ok(report);
    };
    Err(SandboxStartError::WallCheck(Box::new(WallCheckFailed {
        wall: report.wall.clone(),
        layer: failed.layer.name().to_string(),
        check: failed.name.to_string(),
        saw: failed.saw,
        want: failed.want,
        fix: failed.fix.to_string(),
        report,
    }))
    .into())
}

/// The checks, judged from the facts for this wall and network.
pub fn judge(facts: &WallFacts, wall: Wall, network: Network) -> SelfTestReport {
    let mut checks = vec![worktree(facts, wall), canary(facts, wall), seccomp(facts)];
    checks.extend(net(facts, network));
    checks.push(capabilities(facts, wall));
    for check in checks.iter_mut().filter(|c| !c.passed) {
        check.fix = fix(check.layer, wall, network);
    }
    SelfTestReport {
        wall: wall.name(),
        network,
        checks,
        total_micros: 0,
    }
}

/// The probes by name; a missing one (an older server) is a failed fact, never a pass.
struct Seen<'a> {
    facts: &'a WallFacts,
    micros: u64,
}

impl<'a> Seen<'a> {
    fn new(facts: &'a WallFacts) -> Seen<'a> {
        Seen { facts, micros: 0 }
    }

    fn get(&mut self, name: &str) -> Option<&'a Probe> {
        let probe = self.facts.probe(name);
        self.micros += probe.map_or(0, |p| p.micros);
        probe
    }

    /// `Some(errno)` when the probe failed with one, `Some(0)` when it worked.
    fn errno(&mut self, name: &str) -> Option<i32> {
        self.get(name).map(|p| p.errno.unwrap_or(0))
    }

    fn value(&mut self, name: &str) -> Option<u64> {
        self.get(name).and_then(|p| p.value)
    }
}

fn errno_name(errno: i32) -> String {
    let name = match errno {
        0 => return "success".into(),
        libc::EPERM => "EPERM",
        libc::ESRCH => "ESRCH",
        libc::ENOENT => "ENOENT",
        libc::EACCES => "EACCES",
        libc::EROFS => "EROFS",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::ENOSYS => "ENOSYS",
        libc::EINVAL => "EINVAL",
        _ => return format!("errno {errno}"),
    };
    name.into()
}

fn shown(errno: Option<i32>) -> String {
    errno.map_or_else(|| "no answer".into(), errno_name)
}

fn worktree(facts: &WallFacts, wall: Wall) -> Check {
    let mut seen = Seen::new(facts);
    let errno = seen.errno(probes::WORKTREE_WRITE);
    // A task image's folder is the task's, as its image made it: a user the image does not
    // let write there is the task's choice, which the agent meets as any command would.
    let (passed, want) = match wall {
        Wall::Task { .. } => (
            matches!(errno, Some(0) | Some(libc::EACCES)),
            "a file made, written and removed, or EACCES (the image's own permissions)",
        ),
        _ => (errno == Some(0), "a file made, written and removed"),
    };
    Check {
        name: "worktree writable",
        layer: Layer::Worktree,
        passed,
        saw: shown(errno),
        want: want.into(),
        micros: seen.micros,
        fix: "",
    }
}

fn canary(facts: &WallFacts, wall: Wall) -> Check {
    let mut seen = Seen::new(facts);
    let errno = seen.errno(probes::CANARY_READ);
    // Landlock must say EACCES: the file is there, and landlock is what refuses it. In a
    // container the host's file is not there at all; any refusal keeps it unread.
    let (passed, want) = match wall {
        Wall::Landlock { .. } => (errno == Some(libc::EACCES), "EACCES"),
        Wall::Container { .. } | Wall::Task { .. } => (
            errno.is_some_and(|e| e != 0),
            "an error (ENOENT: the container has no such file)",
        ),
    };
    Check {
        name: "canary outside the worktree unreadable",
        layer: Layer::Files,
        passed,
        saw: shown(errno),
        want: want.into(),
        micros: seen.micros,
        fix: "",
    }
}

fn seccomp(facts: &WallFacts) -> Check {
    let mut seen = Seen::new(facts);
    let mode = seen.value(probes::SECCOMP_MODE);
    let denied = seen.errno(probes::SECCOMP_DENIES);
    Check {
        name: "seccomp filter on",
        layer: Layer::Seccomp,
        passed: mode == Some(2) && denied == Some(libc::EPERM),
        saw: format!(
            "mode {}, ptrace(self) {}",
            mode.map_or_else(|| "unknown".into(), |m| m.to_string()),
            shown(denied)
        ),
        want: "mode 2, ptrace(self) EPERM".into(),
        micros: seen.micros,
        fix: "",
    }
}

fn net(facts: &WallFacts, network: Network) -> Option<Check> {
    let mut seen = Seen::new(facts);
    let (passed, saw, want) = match network {
        Network::Host => return None,
        Network::None => {
            let socket = seen.errno(probes::INET_SOCKET);
            (
                socket == Some(libc::EPERM),
                format!("socket(AF_INET) {}", shown(socket)),
                "socket(AF_INET) EPERM",
            )
        }
        Network::Allowlist => {
            let v4 = seen.errno(probes::ROUTE_V4);
            let v6 = seen.errno(probes::ROUTE_V6);
            let no_route = |e: Option<i32>| e.is_some_and(|e| e != 0);
            (
                no_route(v4) && no_route(v6),
                format!(
                    "route to 192.0.2.1 {}, to 2001:db8::1 {}",
                    shown(v4),
                    shown(v6)
                ),
                "no route to either (only the loopback, where the proxy is)",
            )
        }
    };
    Some(Check {
        name: "network only the proxy",
        layer: Layer::Network,
        passed,
        saw,
        want: want.into(),
        micros: seen.micros,
        fix: "",
    })
}

fn capabilities(facts: &WallFacts, wall: Wall) -> Check {
    let mut seen = Seen::new(facts);
    let effective = seen.value(probes::CAP_EFFECTIVE);
    let permitted = seen.value(probes::CAP_PERMITTED);
    let ambient = seen.value(probes::CAP_AMBIENT);
    let bounding = seen.value(probes::CAP_BOUNDING);
    let no_new_privs = seen.value(probes::NO_NEW_PRIVS);
    // Landlock without a user namespace, as a user other than root, cannot empty the
    // bounding set (that needs CAP_SETPCAP); no_new_privs then keeps any exec from
    // gaining what the set still names.
    let bounding_must_be_empty = match wall {
        Wall::Landlock { namespaces } => namespaces || is_root(),
        Wall::Container { .. } | Wall::Task { .. } => true,
    };
    // A task container's root keeps a few (none that reach past the container).
    let allowed = match wall {
        Wall::Task { .. } => TASK_CAPABILITIES,
        _ => 0,
    };
    let within = |set: Option<u64>| set.is_some_and(|v| v & !allowed == 0);
    let passed = within(effective)
        && within(permitted)
        && ambient == Some(0)
        && no_new_privs == Some(1)
        && (!bounding_must_be_empty || within(bounding));
    let mask = |v: Option<u64>| v.map_or_else(|| "unknown".into(), |v| format!("{v:#x}"));
    Check {
        name: "no capabilities",
        layer: Layer::Capabilities,
        passed,
        saw: format!(
            "effective {}, permitted {}, ambient {}, bounding {}, no_new_privs {}",
            mask(effective),
            mask(permitted),
            mask(ambient),
            mask(bounding),
            no_new_privs.map_or_else(|| "unknown".into(), |v| v.to_string())
        ),
        want: match (wall, bounding_must_be_empty) {
            (Wall::Task { .. }, _) => "effective, permitted and bounding within 0xdb (the task's six), ambient 0x0, no_new_privs 1",
            (_, true) => "every set 0x0, no_new_privs 1",
            (_, false) => "effective, permitted and ambient 0x0, no_new_privs 1 (the bounding set is left: no namespace to empty it in)",
        }
        .into(),
        micros: seen.micros,
        fix: "",
    }
}

fn is_root() -> bool {
    // SAFETY: plain syscall.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a landlock wall that holds reports, with network none.
    fn holding() -> WallFacts {
        let probe = |name: &str, errno: Option<i32>, value: Option<u64>| Probe {
            name: name.into(),
            errno,
            value,
            micros: 3,
        };
        WallFacts {
            probes: vec![
                probe(probes::WORKTREE_WRITE, None, None),
                probe(probes::CANARY_READ, Some(libc::EACCES), None),
                probe(probes::SECCOMP_MODE, None, Some(2)),
                probe(probes::SECCOMP_DENIES, Some(libc::EPERM), None),
                probe(probes::INET_SOCKET, Some(libc::EPERM), None),
                probe(probes::ROUTE_V4, Some(libc::EPERM), None),
                probe(probes::ROUTE_V6, Some(libc::EPERM), None),
                probe(probes::CAP_EFFECTIVE, None, Some(0)),
                probe(probes::CAP_PERMITTED, None, Some(0)),
                probe(probes::CAP_BOUNDING, None, Some(0)),
                probe(probes::CAP_AMBIENT, None, Some(0)),
                probe(probes::NO_NEW_PRIVS, None, Some(1)),
            ],
        }
    }

    fn set(facts: &mut WallFacts, name: &str, errno: Option<i32>, value: Option<u64>) {
        let p = facts.probes.iter_mut().find(|p| p.name == name).unwrap();
        p.errno = errno;
        p.value = value;
    }

    fn failed(report: &SelfTestReport) -> Vec<Layer> {
        report.failures().map(|c| c.layer).collect()
    }

    const LANDLOCK: Wall = Wall::Landlock { namespaces: true };
    const DOCKER: Wall = Wall::Container {
        podman: false,
        gvisor: false,
    };

    #[test]
    fn a_holding_wall_passes_every_check_and_times_them() {
        let report = judge(&holding(), LANDLOCK, Network::None);
        assert!(report.passed(), "{report:#?}");
        assert_eq!(report.checks.len(), 5);
        assert_eq!(report.checks[2].micros, 6, "both seccomp probes counted");
    }

    #[test]
    fn each_backend_must_show_its_own_truth_about_the_canary() {
        let mut facts = holding();
        set(&mut facts, probes::CANARY_READ, Some(libc::ENOENT), None);
        // Absent is right for a container, wrong for landlock (the file is there: only
        // landlock refusing it with EACCES shows landlock is on).
        assert!(judge(&facts, DOCKER, Network::None).passed());
        assert_eq!(
            failed(&judge(&facts, LANDLOCK, Network::None)),
            [Layer::Files]
        );
        set(&mut facts, probes::CANARY_READ, None, None);
        assert_eq!(
            failed(&judge(&facts, DOCKER, Network::None)),
            [Layer::Files]
        );
    }

    #[test]
    fn an_engines_filter_alone_is_not_runners() {
        let mut facts = holding();
        set(&mut facts, probes::SECCOMP_DENIES, Some(libc::ESRCH), None);
        assert_eq!(
            failed(&judge(&facts, DOCKER, Network::None)),
            [Layer::Seccomp]
        );
    }

    #[test]
    fn a_route_out_beside_the_proxy_fails_the_allowlist() {
        let mut facts = holding();
        set(&mut facts, probes::INET_SOCKET, None, None);
        set(&mut facts, probes::ROUTE_V4, Some(libc::ENETUNREACH), None);
        set(&mut facts, probes::ROUTE_V6, Some(libc::ENETUNREACH), None);
        assert!(judge(&facts, DOCKER, Network::Allowlist).passed());
        // A socket that can be made fails `none`.
        assert_eq!(
            failed(&judge(&facts, DOCKER, Network::None)),
            [Layer::Network]
        );
        set(&mut facts, probes::ROUTE_V4, None, None);
        let report = judge(&facts, DOCKER, Network::Allowlist);
        assert_eq!(failed(&report), [Layer::Network]);
        assert!(report.checks[3].fix.contains("route out"));
        // The host's network is what `host` asks for: not checked.
        assert!(judge(&facts, DOCKER, Network::Host).passed());
    }

    #[test]
    fn capabilities_left_in_any_set_fail() {
        for probe in [
            probes::CAP_EFFECTIVE,
            probes::CAP_PERMITTED,
            probes::CAP_AMBIENT,
            probes::CAP_BOUNDING,
        ] {
            let mut facts = holding();
            set(&mut facts, probe, None, Some(1 << 21));
            let report = judge(&facts, DOCKER, Network::None);
            assert_eq!(failed(&report), [Layer::Capabilities], "{probe}");
        }
        let mut facts = holding();
        set(&mut facts, probes::NO_NEW_PRIVS, None, Some(0));
        assert_eq!(
            failed(&judge(&facts, DOCKER, Network::None)),
            [Layer::Capabilities]
        );
    }

    /// A task container's root keeps its six capabilities and may find the image's folder
    /// closed to its user; anything beyond those still fails.
    #[test]
    fn a_task_image_is_judged_as_a_container_with_the_tasks_own_capabilities() {
        const TASK: Wall = Wall::Task {
            podman: false,
            gvisor: false,
        };
        let mut facts = holding();
        for probe in [
            probes::CAP_EFFECTIVE,
            probes::CAP_PERMITTED,
            probes::CAP_BOUNDING,
        ] {
            set(&mut facts, probe, None, Some(TASK_CAPABILITIES));
        }
        set(&mut facts, probes::WORKTREE_WRITE, Some(libc::EACCES), None);
        let report = judge(&facts, TASK, Network::None);
        assert!(report.passed(), "{:?}", report.lines());
        assert_eq!(report.wall, "docker task image");
        // The same facts on a plain container fail.
        assert_eq!(
            failed(&judge(&facts, DOCKER, Network::None)),
            [Layer::Worktree, Layer::Capabilities]
        );
        // CAP_SYS_ADMIN (21), or any ambient capability, is beyond the task's.
        set(&mut facts, probes::CAP_EFFECTIVE, None, Some(1 << 21));
        assert_eq!(
            failed(&judge(&facts, TASK, Network::None)),
            [Layer::Capabilities]
        );
        set(&mut facts, probes::CAP_EFFECTIVE, None, Some(0));
        set(&mut facts, probes::CAP_AMBIENT, None, Some(1));
        assert_eq!(
            failed(&judge(&facts, TASK, Network::None)),
            [Layer::Capabilities]
        );
        // The host's file is still never visible.
        set(&mut facts, probes::CAP_AMBIENT, None, Some(0));
        set(&mut facts, probes::CANARY_READ, Some(0), None);
        assert_eq!(failed(&judge(&facts, TASK, Network::None)), [Layer::Files]);
    }

    #[test]
    fn a_probe_the_server_did_not_answer_is_a_failure() {
        let mut facts = holding();
        facts.probes.retain(|p| p.name != probes::WORKTREE_WRITE);
        let report = judge(&facts, LANDLOCK, Network::None);
        assert_eq!(failed(&report), [Layer::Worktree]);
        assert_eq!(report.checks[0].saw, "no answer");
    }
}
