//! Where a path really leads, for the `external_directory` check.
//!
//! A lexical check is not enough: `link/x` with `link -> /etc` is "inside" by its spelling.
//! The file tools cannot be fooled that way (the sandbox server resolves beneath its roots),
//! but the rules are asked first and must name the directory the call really reaches, and
//! bash commands are not resolved by anyone else before they run.

use std::path::{Component, Path, PathBuf};

/// `path` with every symlink on it followed, as the kernel would when the call runs: a
/// component at a time, a link's target spliced in before the rest, `..` applied to what
/// has been resolved so far. Dangling links are followed too (`out -> /etc/new` is where a
/// write to `out` would land). Once a component does not exist, the rest is lexical.
pub fn resolve_existing(path: &Path) -> PathBuf {
    // Linux gives up after 40 links; so do we, keeping what was resolved.
    const MAX_LINKS: usize = 40;
    let mut pending: Vec<std::ffi::OsString> = path
        .components()
        .rev()
        .map(|c| c.as_os_str().to_os_string())
        .collect();
    let mut out = PathBuf::from("/");
    let mut links = 0;
    let mut exists = true;
    while let Some(part) = pending.pop() {
        if part == "/" || part == "." {
            continue;
        }
        if part == ".." {
            out.pop();
            // Back on ground that may exist (`missing/../link`): links count again.
            exists = std::fs::symlink_metadata(&out).is_ok();
            continue;
        }
        out.push(&part);
        if !exists {
            continue;
        }
        match std::fs::symlink_metadata(&out) {
            Ok(meta) if meta.file_type().is_symlink() && links < MAX_LINKS => {
                links += 1;
                let Ok(target) = std::fs::read_link(&out) else {
                    continue;
                };
                out.pop();
                if target.is_absolute() {
                    out = PathBuf::from("/");
                }
                pending.extend(
                    target
                        .components()
                        .rev()
                        .map(|c| c.as_os_str().to_os_string()),
                );
            }
            Ok(_) => {}
            Err(_) => exists = false,
        }
    }
    out
}

/// `.` and `..` applied without touching the file system.
pub fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The `external_directory` pattern for a directory: `<dir>/*`.
pub fn dir_pattern(dir: &Path) -> String {
    let text = dir.to_string_lossy();
    format!("{}/*", text.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_links_that_exist_and_keeps_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let wt = root.join("wt");
        let outside = root.join("outside");
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, wt.join("link")).unwrap();
        std::os::unix::fs::symlink(wt.join("sub"), wt.join("inner")).unwrap();

        let cases: &[(&str, PathBuf, bool)] = &[
            ("link/secret", outside.join("secret"), false),
            ("link/a/../b", outside.join("b"), false),
            ("missing/../link/x", outside.join("x"), false),
            ("plain/new.txt", wt.join("plain/new.txt"), true),
            ("inner/x", wt.join("sub/x"), true),
            ("../outside/x", outside.join("x"), false),
        ];
        for (rel, want, inside) in cases {
            let got = resolve_existing(&wt.join(rel));
            assert_eq!(&got, want, "{rel}");
            assert_eq!(got.starts_with(&wt), *inside, "{rel}");
        }
        // A worktree named through a symlink resolves to its real place.
        let alias = root.join("alias");
        std::os::unix::fs::symlink(&wt, &alias).unwrap();
        assert_eq!(resolve_existing(&alias.join("f")), wt.join("f"));
        assert_eq!(dir_pattern(Path::new("/etc/")), "/etc/*");
        assert_eq!(dir_pattern(Path::new("/")), "/*");
    }
}
