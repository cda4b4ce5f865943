//! The landlock ruleset: what the sandbox may touch on the file system, which TCP ports it
//! may use (none when the network is off), and the scopes (no signals to, and no abstract
//! Unix sockets of, processes outside the sandbox).

use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};

use super::{ConfineError, Confinement};
use runner_protocol::Network;

/// The ABI whose every right we request. V6 is the first with signal and abstract-socket
/// scopes; the sandbox is refused on kernels that cannot enforce all of it.
const TARGET_ABI: ABI = ABI::V6;

/// System directories the sandbox may read and execute from.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
];

/// `/etc` is granted entry by entry, without these: as root, a process without capabilities
/// still owns them and could read them.
const ETC_SECRETS: &[&str] = &[
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "ssh",
    "ssl/private",
    "docker",
    "security/opasswd",
];

/// Devices a shell expects to read and write. No terminals: `/dev/pts/N` would reach the
/// user's terminals (writing to them, or injecting input where TIOCSTI is allowed), and
/// `/dev/tty` is harmless only because the server has no controlling terminal (see
/// `process::leave_terminal`).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

fn etc_entries() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/etc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if ETC_SECRETS.contains(&name.as_ref()) {
            continue;
        }
        if name == "ssl" {
            // Certificates yes, private keys no.
            if let Ok(ssl) = std::fs::read_dir("/etc/ssl") {
                out.extend(
                    ssl.flatten()
                        .filter(|e| e.file_name() != "private")
                        .map(|e| e.path()),
                );
            }
            continue;
        }
        out.push(entry.path());
    }
    out
}

fn landlock_error(e: impl std::fmt::Display) -> ConfineError {
    ConfineError::new("landlock", e)
}

/// Restricts this process to `c`'s roots and the system directories; `private` are further
/// writable folders the namespace made the sandbox's own (its `/tmp`).
pub fn restrict(c: &Confinement, private: &[PathBuf]) -> Result<(), ConfineError> {
    let abi = TARGET_ABI;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(landlock_error)?
        .scope(Scope::from_all(abi))
        .map_err(landlock_error)?;
    if c.network == Network::None {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(landlock_error)?;
    }
    let read = AccessFs::from_read(abi);
    let system: Vec<PathBuf> = SYSTEM_DIRS
        .iter()
        .map(PathBuf::from)
        .chain(etc_entries())
        .chain(c.readable.iter().cloned())
        .collect();
    let status = ruleset
        .create()
        .map_err(landlock_error)?
        .add_rules(path_beneath_rules(&system, read))
        .map_err(landlock_error)?
        .add_rules(path_beneath_rules(DEVICES, AccessFs::from_all(abi)))
        .map_err(landlock_error)?
        .add_rules(path_beneath_rules(&c.writable, AccessFs::from_all(abi)))
        .map_err(landlock_error)?
        .add_rules(path_beneath_rules(private, AccessFs::from_all(abi)))
        .map_err(landlock_error)?
        .restrict_self()
        .map_err(landlock_error)?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(()),
        other => Err(ConfineError::new(
            "landlock",
            format!(
                "the kernel enforces the ruleset only {} ({}); the landlock backend needs \
                 landlock ABI {} (Linux 6.12 or later). Use --sandbox docker on this machine",
                match other {
                    RulesetStatus::PartiallyEnforced => "partially",
                    _ => "not at all",
                },
                describe(status.landlock),
                TARGET_ABI as i32,
            ),
        )),
    }
}

fn describe(status: LandlockStatus) -> String {
    match status {
        LandlockStatus::NotEnabled => {
            "landlock is built in but not enabled: add `landlock` to the lsm= boot parameter".into()
        }
        LandlockStatus::NotImplemented => "the kernel has no landlock".into(),
        LandlockStatus::Available { effective_abi, .. } => {
            format!("kernel landlock ABI {}", effective_abi as i32)
        }
    }
}

/// What the running kernel offers, for `sandbox doctor`, found the only reliable way: by
/// restricting a throwaway thread.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LandlockSupport {
    pub abi: Option<i32>,
    pub fully_enforced: bool,
    pub detail: String,
}

pub fn probe() -> LandlockSupport {
    std::thread::spawn(|| {
        let result = Ruleset::default()
            .handle_access(AccessFs::from_all(TARGET_ABI))
            .and_then(|r| r.handle_access(AccessNet::from_all(TARGET_ABI)))
            .and_then(|r| r.scope(Scope::from_all(TARGET_ABI)))
            .and_then(|r| r.create())
            .and_then(|r| r.restrict_self());
        match result {
            Ok(status) => LandlockSupport {
                abi: match status.landlock {
                    LandlockStatus::Available { effective_abi, .. } => Some(effective_abi as i32),
                    _ => None,
                },
                fully_enforced: status.ruleset == RulesetStatus::FullyEnforced,
                detail: describe(status.landlock),
            },
            Err(e) => LandlockSupport {
                abi: None,
                fully_enforced: false,
                detail: e.to_string(),
            },
        }
    })
    .join()
    .unwrap_or(LandlockSupport {
        abi: None,
        fully_enforced: false,
        detail: "the probe thread panicked".into(),
    })
}
