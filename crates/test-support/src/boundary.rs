//! Boundary files for the tests: a boundary only counts when root alone can change it and
//! every folder above it, so the files live under `/run` (root's, 0755), never under the
//! checkout, which a clone in `/tmp` puts below a folder anyone may write.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A fresh folder only root may write.
pub fn root_only_dir() -> tempfile::TempDir {
    let base = Path::new("/run/runner-boundary-tests");
    std::fs::create_dir_all(base).unwrap();
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tempfile::tempdir_in(base).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// `boundary.toml` in `dir`, with `text`, readable by all and writable by root alone.
pub fn boundary_file(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("boundary.toml");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    path
}
