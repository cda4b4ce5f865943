//! The boundary: a managed policy above every layer of rules.
//!
//! Rules stack (defaults, profile, the user's config, the repository's, `--config`, the
//! session) and the last match wins, so any layer can loosen what a lower one said. An
//! administrator who lets agents loose on a laptop wants a limit none of them can move: a
//! file in the same rule language that caps the decision. Whatever the stack says, a
//! subject the boundary denies is denied and one it asks about is asked at most (see
//! [`super::rules::evaluate`]).
//!
//! A limit is only a limit if the people it limits cannot edit it, so only a file that
//! only root can change counts: the file and every folder above it (of the path as given
//! and of the path it resolves to) must be owned by root and writable by nobody else
//! (neither group nor others). Anything else is refused with an error, never quietly
//! skipped.
//!
//! `/etc/runner/boundary.toml` applies whenever it exists. `RUNNER_BOUNDARY` names one more
//! boundary file, applied beside it: an environment variable can be set by whoever starts
//! runner (a sandboxed command included), so it may add a limit but never take the system
//! one away. A `RUNNER_BOUNDARY` naming a file that does not exist is an error: somebody
//! meant a limit to be there.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::rules::{Action, Layer, Rule};
use crate::files::{ConfigError, load_file};

/// The system boundary's place.
pub const SYSTEM_PATH: &str = "/etc/runner/boundary.toml";

/// The environment variable that names one more boundary file.
pub const ENV: &str = "RUNNER_BOUNDARY";

pub use crate::files::BoundaryError;

/// Every boundary that applies here: the system one if it exists, then the one
/// `RUNNER_BOUNDARY` names. Each file's rules come in the [`Layer::Boundary`] layer, after
/// an implicit first rule (`"*" = "ask"`, position 0) that says what the rule language says
/// when nothing matches. `~` in them is the account's home ([`account_home`]); `home` (the
/// caller's `$HOME`) only stands in for an account the password database does not know.
pub fn load_installed(home: &str) -> Result<Vec<Rule>, BoundaryError> {
    let home = account_home().unwrap_or_else(|| home.to_string());
    let home = home.as_str();
    let mut rules = Vec::new();
    let system = Path::new(SYSTEM_PATH);
    // Absent only when the kernel says so: a folder this user may not search hides the
    // file without making it absent, and an unknown boundary is refused, never skipped.
    match std::fs::symlink_metadata(system) {
        Ok(_) => rules.extend(load_checked(system, home)?),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) => {}
        Err(source) => {
            return Err(BoundaryError::Stat {
                path: system.to_path_buf(),
                source,
            });
        }
    }
    if let Some(named) = std::env::var_os(ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(named);
        if std::fs::metadata(&path).is_err() {
            return Err(BoundaryError::Missing { path });
        }
        rules.extend(load_checked(&path, home)?);
    }
    Ok(rules)
}

/// The home folder a boundary's `~` and `$HOME` stand for: the account's, from the
/// password database. Not `$HOME`: whoever starts runner sets its environment, and a
/// boundary's `"~/.ssh/*" = "deny"` must not move to an empty folder with it. `None` when
/// the account has no entry (the caller then has only `$HOME`).
fn account_home() -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: an all-zero passwd is a valid value to be filled in.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and `buf.len()` is the buffer's size.
    let rc = unsafe {
        libc::getpwuid_r(
            libc::getuid(),
            &mut entry,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() || entry.pw_dir.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded, so pw_dir points to a NUL-terminated string in `buf`.
    let dir = unsafe { std::ffi::CStr::from_ptr(entry.pw_dir) };
    let dir = dir.to_str().ok()?;
    (!dir.is_empty()).then(|| dir.to_string())
}

/// A boundary file's rules once [`check_owner`] accepts it.
pub fn load_checked(path: &Path, home: &str) -> Result<Vec<Rule>, BoundaryError> {
    check_owner(path)?;
    Ok(load_unchecked(path, home)?)
}

/// A boundary file's rules, whoever owns it: for `runner permission prove --boundary`,
/// which only reads a candidate.
pub fn load_unchecked(path: &Path, home: &str) -> Result<Vec<Rule>, ConfigError> {
    let origin = path.display().to_string();
    let mut rules = vec![Rule::new("*", "*", Action::Ask, &origin, 0)];
    rules.extend(load_file(path, home)?);
    Ok(rules
        .into_iter()
        .map(|r| r.in_layer(Layer::Boundary))
        .collect())
}

/// Whether only root can change `path`: the file (a regular file) and every folder above
/// it, both along the path as given and along the path its links resolve to, are owned by
/// uid 0 and have neither the group nor the other write bit.
pub fn check_owner(path: &Path) -> Result<(), BoundaryError> {
    let stat = |p: &Path| {
        std::fs::metadata(p).map_err(|source| BoundaryError::Stat {
            path: p.to_path_buf(),
            source,
        })
    };
    if !stat(path)?.is_file() {
        return Err(BoundaryError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let absolute = std::path::absolute(path).map_err(|source| BoundaryError::Stat {
        path: path.to_path_buf(),
        source,
    })?;
    let resolved = std::fs::canonicalize(path).map_err(|source| BoundaryError::Stat {
        path: path.to_path_buf(),
        source,
    })?;
    for spelled in [&absolute, &resolved] {
        for what in spelled.ancestors() {
            let meta = stat(what)?;
            if meta.uid() != 0 {
                return Err(BoundaryError::NotRootOwned {
                    path: path.to_path_buf(),
                    what: what.to_path_buf(),
                    uid: meta.uid(),
                });
            }
            if meta.mode() & 0o022 != 0 {
                return Err(BoundaryError::Writable {
                    path: path.to_path_buf(),
                    what: what.to_path_buf(),
                    mode: meta.mode() & 0o7777,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A folder only root can write, under /run (root's, 0755): not under the checkout,
    /// which a clone in /tmp puts below a folder everybody may write.
    fn root_dir() -> tempfile::TempDir {
        let base = Path::new("/run/runner-boundary-tests");
        std::fs::create_dir_all(base).unwrap();
        std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = tempfile::tempdir_in(base).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    #[test]
    fn only_a_file_only_root_can_change_counts() {
        // The checks are about root; the suite runs as root (as the walls' tests do).
        assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root");
        let dir = root_dir();
        let file = dir.path().join("boundary.toml");
        std::fs::write(&file, "[permission]\nbash = \"deny\"\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let rules = load_checked(&file, "/h").unwrap();
        assert_eq!(rules.len(), 2);
        assert!(rules.iter().all(|r| r.source.layer == Layer::Boundary));
        assert_eq!(
            (rules[0].source.position, rules[0].action),
            (0, Action::Ask)
        );

        // Writable by its group, or by others: refused.
        for mode in [0o664, 0o646] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = load_checked(&file, "/h").unwrap_err();
            assert!(matches!(err, BoundaryError::Writable { .. }), "{err}");
            assert!(err.to_string().contains("chmod go-w"), "{err}");
        }
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        // Owned by somebody else: refused.
        std::os::unix::fs::chown(&file, Some(1000), None).unwrap();
        let err = load_checked(&file, "/h").unwrap_err();
        assert!(
            matches!(err, BoundaryError::NotRootOwned { uid: 1000, .. }),
            "{err}"
        );
        std::os::unix::fs::chown(&file, Some(0), None).unwrap();
        // Its folder writable by others: refused (the file could be swapped).
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = load_checked(&file, "/h").unwrap_err();
        assert!(
            matches!(&err, BoundaryError::Writable { what, .. } if what == dir.path()),
            "{err}"
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        // A link from a root-only folder to a file in a folder anyone may write: refused.
        let open = tempfile::tempdir().unwrap();
        let target = open.path().join("b.toml");
        std::fs::write(&target, "permission = \"allow\"\n").unwrap();
        let link = dir.path().join("link.toml");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = load_checked(&link, "/h").unwrap_err();
        assert!(matches!(err, BoundaryError::Writable { .. }), "{err}");
        // A folder is not a boundary file.
        let err = load_checked(dir.path(), "/h").unwrap_err();
        assert!(matches!(err, BoundaryError::NotAFile { .. }), "{err}");
    }
}
