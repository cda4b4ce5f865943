//! The seccomp filter: syscalls a coding agent's commands never need and that open a way
//! out (debugging other processes, mounting, new namespaces, kernel modules, BPF, keyrings,
//! io_uring, which can open sockets without `socket()`), plus network sockets when the
//! network is off. Denied calls fail with EPERM rather than killing the process, so tools
//! report a clear error.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

use super::ConfineError;
use runner_protocol::Network;

const DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fsconfig,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_userfaultfd,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
];

/// Namespace flags `clone` may not carry.
const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
    0x80, // CLONE_NEWTIME
];

/// Socket families that stay open without network: Unix sockets (local IPC, used by many
/// build tools) only.
const NETWORK_FAMILIES: &[libc::c_int] = &[
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_NETLINK,
    libc::AF_PACKET,
    libc::AF_VSOCK,
    libc::AF_BLUETOOTH,
    libc::AF_ALG,
];

fn error(e: impl std::fmt::Display) -> ConfineError {
    ConfineError::new("seccomp", e)
}

fn arch() -> Result<seccompiler::TargetArch, ConfineError> {
    std::env::consts::ARCH.try_into().map_err(error)
}

fn arg_has(index: u8, value: u64, masked: bool) -> Result<SeccompRule, ConfineError> {
    let op = if masked {
        SeccompCmpOp::MaskedEq(value)
    } else {
        SeccompCmpOp::Eq
    };
    let cond = SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value).map_err(error)?;
    SeccompRule::new(vec![cond]).map_err(error)
}

/// The EPERM filter.
pub fn deny_filter(network: Network, block_unix: bool) -> Result<BpfProgram, ConfineError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &nr in DENIED {
        rules.insert(nr, Vec::new());
    }
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&f| arg_has(0, f as u64, true))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    let mut families: Vec<libc::c_int> = Vec::new();
    match network {
        Network::None => families.extend(NETWORK_FAMILIES),
        // TCP/IP to the proxy on the sandbox's loopback, nothing else: the namespace has no
        // other interface, and netlink or raw sockets are not needed to reach a proxy.
        Network::Allowlist => families.extend(
            NETWORK_FAMILIES
                .iter()
                .filter(|f| !matches!(**f, libc::AF_INET | libc::AF_INET6)),
        ),
        Network::Host => {}
    }
    // vsock reaches the hypervisor whatever the network namespace says.
    if !families.contains(&libc::AF_VSOCK) {
        families.push(libc::AF_VSOCK);
    }
    let socket_rules = families
        .iter()
        .map(|&f| arg_has(0, f as u64, false))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_socketpair, socket_rules.clone());
    let mut socket_only = socket_rules;
    if block_unix {
        socket_only.push(arg_has(0, libc::AF_UNIX as u64, false)?);
    }
    rules.insert(libc::SYS_socket, socket_only);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch()?,
    )
    .map_err(error)?;
    filter.try_into().map_err(error)
}

/// `clone3` passes its flags in memory, where a filter cannot look, so it is refused with
/// ENOSYS: the C library then falls back to `clone`, whose flags the other filter checks.
pub fn clone3_filter() -> Result<BpfProgram, ConfineError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_clone3, Vec::new());
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch()?,
    )
    .map_err(error)?;
    filter.try_into().map_err(error)
}

/// The kernel's audit socket (`socket(AF_NETLINK, _, NETLINK_AUDIT)`), refused as a
/// protocol this kernel does not have rather than with the deny filter's EPERM. Both
/// refuse it; the difference is what programs make of it. libaudit, and with it shadow's
/// `useradd`, `groupadd` and `adduser` as root in a task image, read EPERM as "auditing
/// is mandatory and broken" and abort, but EPROTONOSUPPORT as "no audit here" and go on.
/// Installed after the deny filter, so its errno is the one the call gets.
pub fn audit_socket_filter() -> Result<BpfProgram, ConfineError> {
    let family = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        libc::AF_NETLINK as u64,
    )
    .map_err(error)?;
    let protocol = SeccompCondition::new(
        2,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        libc::NETLINK_AUDIT as u64,
    )
    .map_err(error)?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(
        libc::SYS_socket,
        vec![SeccompRule::new(vec![family, protocol]).map_err(error)?],
    );
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPROTONOSUPPORT as u32),
        arch()?,
    )
    .map_err(error)?;
    filter.try_into().map_err(error)
}

pub fn install(network: Network, block_unix: bool) -> Result<(), ConfineError> {
    let deny = deny_filter(network, block_unix)?;
    let clone3 = clone3_filter()?;
    let audit = audit_socket_filter()?;
    seccompiler::apply_filter(&deny).map_err(error)?;
    seccompiler::apply_filter(&clone3).map_err(error)?;
    seccompiler::apply_filter(&audit).map_err(error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The errno `socket(family, SOCK_RAW, protocol)` fails with in a thread that applied
    /// the filters as `install` does (seccomp binds that thread alone); 0 if it opened.
    fn socket_errno(family: libc::c_int, protocol: libc::c_int) -> i32 {
        std::thread::spawn(move || {
            seccompiler::apply_filter(&deny_filter(Network::None, false).unwrap()).unwrap();
            seccompiler::apply_filter(&audit_socket_filter().unwrap()).unwrap();
            // SAFETY: plain syscall; a descriptor, if any, is closed at once.
            let fd = unsafe { libc::socket(family, libc::SOCK_RAW, protocol) };
            if fd >= 0 {
                unsafe { libc::close(fd) };
                return 0;
            }
            std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
        })
        .join()
        .unwrap()
    }

    #[test]
    fn the_audit_socket_is_missing_and_every_other_network_socket_denied() {
        assert_eq!(
            socket_errno(libc::AF_NETLINK, libc::NETLINK_AUDIT),
            libc::EPROTONOSUPPORT
        );
        // The audit filter opens nothing the deny filter shuts.
        assert_eq!(
            socket_errno(libc::AF_NETLINK, libc::NETLINK_ROUTE),
            libc::EPERM
        );
        assert_eq!(socket_errno(libc::AF_INET, libc::IPPROTO_TCP), libc::EPERM);
        assert_eq!(socket_errno(libc::AF_PACKET, 0), libc::EPERM);
    }
}
