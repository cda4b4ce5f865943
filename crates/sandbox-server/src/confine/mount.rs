//! The mount(2) calls confinement makes, for the private mount namespace
//! (`process::private_mounts`) and the private `/tmp` (`tmp`): kept apart so that both use
//! them without either importing the other.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub(super) fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Makes the mount at `path` read-only, that mount alone (not the ones beneath it).
pub(super) fn read_only(path: &Path) -> std::io::Result<()> {
    // A remount must keep the flags the original mount has locked (nosuid, nodev, noexec
    // under a user namespace), or the kernel refuses it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let c_path = cstring(path)?;
    // SAFETY: valid C string and out-pointer.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut st) } != 0 {
        return Err(errno());
    }
    let mut keep = 0;
    for (vfs, ms) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if st.f_flag & vfs != 0 {
            keep |= ms;
        }
    }
    mount(
        None,
        path,
        None,
        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | keep,
        None,
    )
}

fn cstring(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path"))
}

pub(super) fn mount(
    source: Option<&std::ffi::OsStr>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> std::io::Result<()> {
    let to_c = |s: &str| {
        CString::new(s)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in argument"))
    };
    let source = source.map(|s| cstring(Path::new(s))).transpose()?;
    let fstype = fstype.map(to_c).transpose()?;
    let data = data.map(to_c).transpose()?;
    let target = cstring(target)?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: all pointers are valid C strings or null.
    let rc = unsafe {
        libc::mount(
            ptr(&source),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if rc != 0 { Err(errno()) } else { Ok(()) }
}
