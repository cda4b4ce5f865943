//! Repositories that host git must never pick up from a worktree the sandbox wrote.
//!
//! Host git trusts whatever repository it finds: its `config` (`core.fsmonitor`,
//! `core.hooksPath`, `diff.external`, `filter.*`, …) and its hooks are commands it runs as
//! the user. The worktree's own `.git` and every repository already in it when the sandbox
//! starts are walled off by mounts (see the host's `sandbox::worktree_guard`); this module
//! handles what no mount can stop, a repository the sandbox *makes*:
//!
//! - a nested `.git` (directory, `gitdir:` file or symlink) anywhere below the worktree's
//!   top: `git add` records it as a gitlink, and host git then runs `git status` inside it,
//!   with its config; a user who runs git in that subdirectory uses it directly;
//! - a directory git would take for a bare repository (`HEAD` beside `objects` or `refs`),
//!   which git discovers when run inside it, and which a `gitdir:` file can point at;
//! - a new repository under `.git/modules/`, which `git submodule update` would use for a
//!   submodule the user has initialised but not yet cloned.
//!
//! Each is *disarmed*, not deleted: a `.git` entry is renamed to `.git.disarmed` and the
//! `HEAD` of a repository directory to `HEAD.disarmed`, so git no longer sees a repository
//! and nothing the agent made is lost. The sweep runs after every command and every write
//! or rename the server makes, and once more on the host when the sandbox has closed and
//! nothing in it can plant anything again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The name a disarmed `.git` entry gets (a number follows if it is taken).
pub const DISARMED_GIT: &str = ".git.disarmed";
/// The name a disarmed repository's `HEAD` gets.
pub const DISARMED_HEAD: &str = "HEAD.disarmed";

/// The repositories of a worktree: what git would use as a repository directory, and the
/// `.git` entries (files and symlinks) that point at one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Repositories {
    /// Repository directories: the top `.git`, nested `.git` directories, bare-looking
    /// directories, and those under `.git/modules` and `.git/worktrees`.
    pub dirs: Vec<PathBuf>,
    /// `.git` entries that are not directories (`gitdir:` files, symlinks).
    pub pointers: Vec<PathBuf>,
}

impl Repositories {
    /// Every repository in `worktree`, without following symlinks. Repository
    /// directories are not searched further (their objects can be many), except for their
    /// `modules` and `worktrees`, where git keeps more repositories.
    pub fn scan(worktree: &Path) -> Repositories {
        let mut found = Repositories::default();
        let mut stack = vec![worktree.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Some(listing) = read_listing(&dir) else {
                continue;
            };
            if listing.is_repository && dir != worktree {
                found.add_dir(dir);
                continue;
            }
            if let Some(is_dir) = listing.git {
                let git = dir.join(".git");
                if is_dir {
                    found.add_dir(git);
                } else {
                    found.pointers.push(git);
                }
            }
            stack.extend(listing.subdirs.iter().map(|name| dir.join(name)));
        }
        found.dirs.sort();
        found.pointers.sort();
        found
    }

    /// `path` if it is a `.git` entry or a folder git would take for a repository.
    fn consider(&mut self, path: &Path) {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return;
        };
        if path.file_name().is_some_and(|n| n == ".git") {
            if meta.is_dir() {
                self.add_dir(path.to_path_buf());
            } else {
                self.pointers.push(path.to_path_buf());
            }
        } else if meta.is_dir() && looks_like_repository(path) {
            self.add_dir(path.to_path_buf());
        }
    }

    /// A repository directory, and the repositories git keeps inside it.
    fn add_dir(&mut self, dir: PathBuf) {
        let mut inner = vec![dir.join("modules")];
        if let Ok(entries) = std::fs::read_dir(dir.join("worktrees")) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    self.dirs.push(e.path());
                }
            }
        }
        self.dirs.push(dir);
        // A submodule's name may hold slashes: its repository is then nested in folders.
        while let Some(d) = inner.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let p = e.path();
                if looks_like_repository(&p) {
                    self.add_dir(p);
                } else {
                    inner.push(p);
                }
            }
        }
    }
}

/// Whether git could take `dir` for a repository: a `HEAD` (of any kind) beside `objects`
/// or `commondir`. Git itself asks a little more (a valid `HEAD`, and `refs` too); asking
/// less errs on the side of disarming. (`HEAD` beside `refs` alone is a repository's
/// `logs` folder.)
pub fn looks_like_repository(dir: &Path) -> bool {
    let has = |name: &str| std::fs::symlink_metadata(dir.join(name)).is_ok();
    has("HEAD") && (has("objects") || has("commondir"))
}

/// What a folder holds, as far as repositories go: one read of the folder gives it all
/// (entry types come with the listing, so no folder is looked at twice).
struct Listing {
    /// Whether git could take the folder itself for a repository.
    is_repository: bool,
    /// A `.git` entry in it: `Some(true)` a directory, `Some(false)` anything else.
    git: Option<bool>,
    /// Its subfolders but `.git`, not following links.
    subdirs: Vec<std::ffi::OsString>,
}

fn read_listing(dir: &Path) -> Option<Listing> {
    let mut listing = Listing {
        is_repository: false,
        git: None,
        subdirs: Vec::new(),
    };
    let (mut head, mut objects) = (false, false);
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        match name.to_str() {
            Some(".git") => listing.git = Some(is_dir),
            Some("HEAD") => head = true,
            Some("objects" | "commondir") => objects = true,
            _ => {}
        }
        if is_dir && name != ".git" {
            listing.subdirs.push(name);
        }
    }
    listing.is_repository = head && objects;
    Some(listing)
}

/// The repositories present when the sandbox started, and the sweep that disarms any
/// other. Paths are as the server sees them.
#[derive(Debug, Default)]
pub struct RepositorySweep {
    pub worktree: PathBuf,
    /// Repository directories and pointers that were there at the start; they are walled
    /// off by mounts instead (read-only config and hooks, pinned directories).
    pub known: BTreeSet<PathBuf>,
    /// The index as the last quick sweep read it (its identity, and its gitlinks).
    index: std::sync::Mutex<Option<(IndexStamp, Vec<PathBuf>)>>,
}

type IndexStamp = (u64, i64, i64, u64);

impl RepositorySweep {
    pub fn new(worktree: &Path, known: impl IntoIterator<Item = PathBuf>) -> RepositorySweep {
        RepositorySweep {
            worktree: worktree.to_path_buf(),
            known: known.into_iter().collect(),
            index: Default::default(),
        }
    }

    /// The sweep that knows what `at_start` found.
    pub fn knowing(worktree: &Path, at_start: &Repositories) -> RepositorySweep {
        let known = at_start.dirs.iter().chain(&at_start.pointers).cloned();
        RepositorySweep::new(worktree, known)
    }

    /// Disarms every repository in the worktree that was not there at the start (one
    /// read of every folder: for when the sandbox has closed); returns what it did, one
    /// line each, worktree-relative.
    pub fn sweep(&self) -> Vec<String> {
        self.disarm(&Repositories::scan(&self.worktree))
    }

    /// What a command can leave for plain git at the top of the checkout, checked without
    /// reading the whole worktree: a new top `.git`, a new repository at a gitlink the
    /// index records (git enters those), and new repositories under `modules`.
    pub fn after_command(&self) -> Vec<String> {
        let mut now = Repositories::default();
        let top = self.worktree.join(".git");
        match std::fs::symlink_metadata(&top) {
            Ok(m) if m.is_dir() => now.add_dir(top.clone()),
            Ok(_) => now.pointers.push(top.clone()),
            Err(_) => {}
        }
        for link in self.gitlinks(&top.join("index")) {
            let dir = self.worktree.join(link);
            now.consider(&dir);
            now.consider(&dir.join(".git"));
        }
        for dir in self.known.iter().filter(|d| d.is_dir()) {
            now.add_dir(dir.clone());
        }
        self.disarm(&now)
    }

    /// After a write or rename through the file tools: `path` itself and the folders
    /// above it, up to the worktree (and everything below `path` when it is a folder).
    pub fn after_file_change(&self, path: &Path) -> Vec<String> {
        let mut now = if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
            Repositories::scan(path)
        } else {
            Repositories::default()
        };
        for a in path
            .ancestors()
            .take_while(|a| a.starts_with(&self.worktree))
        {
            now.consider(a);
            now.consider(&a.join(".git"));
        }
        self.disarm(&now)
    }

    fn disarm(&self, now: &Repositories) -> Vec<String> {
        let mut done = Vec::new();
        let new = |p: &&PathBuf| !self.known.contains(*p);
        // Directories first: a new `.git` directory loses its `HEAD`, then its name.
        let dirs: BTreeSet<&PathBuf> = now.dirs.iter().filter(new).collect();
        done.extend(dirs.iter().filter_map(|d| self.disarm_dir(d)));
        let entries: BTreeSet<&PathBuf> =
            now.dirs.iter().chain(&now.pointers).filter(new).collect();
        for entry in entries {
            if entry.file_name().is_some_and(|n| n == ".git") {
                done.extend(self.rename_git_entry(entry));
            }
        }
        done
    }

    /// The worktree paths the index records as gitlinks, read again only when the index
    /// file changed.
    fn gitlinks(&self, index: &Path) -> Vec<PathBuf> {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = std::fs::symlink_metadata(index) else {
            return Vec::new();
        };
        let stamp = (meta.ino(), meta.ctime(), meta.ctime_nsec(), meta.size());
        let mut seen = self.index.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((was, links)) = &*seen
            && *was == stamp
        {
            return links.clone();
        }
        let links = std::fs::read(index)
            .ok()
            .and_then(|bytes| index_gitlinks(&bytes, 20).or_else(|| index_gitlinks(&bytes, 32)))
            .unwrap_or_default();
        *seen = Some((stamp, links.clone()));
        links
    }

    fn relative<'a>(&self, p: &'a Path) -> std::borrow::Cow<'a, str> {
        p.strip_prefix(&self.worktree)
            .unwrap_or(p)
            .to_string_lossy()
    }

    fn disarm_dir(&self, dir: &Path) -> Option<String> {
        let head = dir.join("HEAD");
        std::fs::symlink_metadata(&head).ok()?;
        let to = free_name(dir, DISARMED_HEAD);
        match std::fs::rename(&head, &to) {
            Ok(()) => Some(format!(
                "{}/HEAD renamed to {}",
                self.relative(dir),
                self.relative(&to)
            )),
            Err(e) => Some(format!(
                "cannot disarm the repository {}: {e}",
                self.relative(dir)
            )),
        }
    }

    fn rename_git_entry(&self, entry: &Path) -> Option<String> {
        let parent = entry.parent()?;
        let to = free_name(parent, DISARMED_GIT);
        match std::fs::rename(entry, &to) {
            Ok(()) => Some(format!(
                "{} renamed to {}",
                self.relative(entry),
                self.relative(&to)
            )),
            Err(e) => Some(format!("cannot disarm {}: {e}", self.relative(entry))),
        }
    }
}

/// The paths of the gitlinks (mode 160000) in a git index, versions 2 to 4, with object
/// names of `hash` bytes (20 for SHA-1, 32 for SHA-256); `None` if it does not parse so.
fn index_gitlinks(bytes: &[u8], hash: usize) -> Option<Vec<PathBuf>> {
    use std::os::unix::ffi::OsStrExt;
    let be32 = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    if bytes.get(..4)? != b"DIRC" {
        return None;
    }
    let version = be32(4)?;
    let count = be32(8)? as usize;
    if !(2..=4).contains(&version) {
        return None;
    }
    let (mut at, mut links, mut path) = (12usize, Vec::new(), Vec::<u8>::new());
    for _ in 0..count {
        let mode = be32(at + 24)?;
        let flags_at = at + 40 + hash;
        let flags = u16::from_be_bytes(bytes.get(flags_at..flags_at + 2)?.try_into().ok()?);
        let mut name_at = flags_at + 2;
        if flags & 0x4000 != 0 {
            name_at += 2;
        }
        if version == 4 {
            // The path is the previous one, less a varint count of bytes, plus a suffix.
            let (strip, used) = offset_varint(bytes.get(name_at..)?)?;
            path.truncate(path.len().checked_sub(strip)?);
            let rest = bytes.get(name_at + used..)?;
            let end = rest.iter().position(|b| *b == 0)?;
            path.extend_from_slice(&rest[..end]);
            at = name_at + used + end + 1;
        } else {
            let rest = bytes.get(name_at..)?;
            let end = rest.iter().position(|b| *b == 0)?;
            path = rest[..end].to_vec();
            // Entries are padded with 1 to 8 NULs to a multiple of 8 bytes.
            at += (name_at - at + end + 8) & !7;
        }
        if path.is_empty() {
            return None;
        }
        if mode == 0o160000 {
            links.push(PathBuf::from(std::ffi::OsStr::from_bytes(&path)));
        }
    }
    Some(links)
}

/// Git's "offset" varint (index v4 path prefixes): 7 bits a byte, each continuation
/// adding one before the shift. Returns the value and the bytes it took.
fn offset_varint(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut value = (*bytes.first()? & 0x7f) as usize;
    let mut used = 1;
    while bytes[used - 1] & 0x80 != 0 {
        let b = *bytes.get(used)?;
        value = ((value + 1) << 7) | (b & 0x7f) as usize;
        used += 1;
        if used > 9 {
            return None;
        }
    }
    Some((value, used))
}

/// `dir/name`, or `dir/name.N` for the first N not taken.
fn free_name(dir: &Path, name: &str) -> PathBuf {
    let first = dir.join(name);
    if std::fs::symlink_metadata(&first).is_err() {
        return first;
    }
    (1..)
        .map(|n| dir.join(format!("{name}.{n}")))
        .find(|p| std::fs::symlink_metadata(p).is_err())
        .unwrap_or(first)
}

/// The note a command's output ends with when the sweep disarmed something.
pub fn note(done: &[String]) -> Option<String> {
    (!done.is_empty()).then(|| {
        format!(
            "\n[runner: disarmed {} — git on the host would run the config and hooks of a \
             repository made in the sandbox. The files are kept; nested repositories cannot \
             live in this worktree]\n",
            done.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    #[test]
    fn gitlinks_are_read_from_every_index_version() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path();
        git(wt, &["init", "-q"]);
        for (i, name) in ["a.txt", "deep/er/b.txt", "deep/er/c.txt"]
            .iter()
            .enumerate()
        {
            std::fs::create_dir_all(wt.join(name).parent().unwrap()).unwrap();
            std::fs::write(wt.join(name), format!("{i}")).unwrap();
            git(wt, &["add", name]);
        }
        let sha = "0123456789abcdef0123456789abcdef01234567";
        for link in ["deep/er/sub", "zz-last"] {
            git(
                wt,
                &[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("160000,{sha},{link}"),
                ],
            );
        }
        for version in ["2", "3", "4"] {
            git(wt, &["update-index", "--index-version", version]);
            let bytes = std::fs::read(wt.join(".git/index")).unwrap();
            assert_eq!(
                index_gitlinks(&bytes, 20),
                Some(vec![PathBuf::from("deep/er/sub"), PathBuf::from("zz-last")]),
                "index version {version}"
            );
        }
        assert_eq!(index_gitlinks(b"DIRC\0\0\0\x02\0\0\0\x05", 20), None);
    }

    #[test]
    fn after_a_command_a_repository_at_a_gitlink_is_disarmed() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path();
        git(wt, &["init", "-q"]);
        let sweep = RepositorySweep::knowing(wt, &Repositories::scan(wt));
        git(wt, &["init", "-q", "sub"]);
        git(
            wt,
            &["-C", "sub", "commit", "-q", "--allow-empty", "-m", "x"],
        );
        // Untracked, it is for the sweep at close; added as a gitlink, for the quick one.
        assert!(sweep.after_command().is_empty());
        git(wt, &["add", "sub"]);
        assert_eq!(sweep.after_command().len(), 2);
        assert!(wt.join("sub/.git.disarmed").is_dir());
    }

    #[test]
    fn scan_finds_every_kind_of_repository() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path();
        git(wt, &["init", "-q"]);
        git(wt, &["init", "-q", "vendor/nested"]);
        git(wt, &["init", "-q", "--bare", "fixtures/bare.git"]);
        std::fs::create_dir_all(wt.join(".git/modules/a/b")).unwrap();
        git(wt, &["init", "-q", "--bare", ".git/modules/a/b"]);
        std::fs::create_dir_all(wt.join("sub")).unwrap();
        std::fs::write(wt.join("sub/.git"), "gitdir: ../.git/modules/a/b\n").unwrap();
        let found = Repositories::scan(wt);
        let rel: Vec<_> = found
            .dirs
            .iter()
            .map(|d| d.strip_prefix(wt).unwrap().to_path_buf())
            .collect();
        assert_eq!(
            rel,
            [
                ".git",
                ".git/modules/a/b",
                "fixtures/bare.git",
                "vendor/nested/.git"
            ]
            .map(PathBuf::from)
        );
        assert_eq!(found.pointers, [wt.join("sub/.git")]);
    }

    #[test]
    fn sweep_disarms_only_what_is_new_and_keeps_the_files() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path();
        git(wt, &["init", "-q"]);
        git(wt, &["init", "-q", "old"]);
        let sweep = RepositorySweep::knowing(wt, &Repositories::scan(wt));
        assert!(sweep.sweep().is_empty(), "nothing new yet");
        git(wt, &["init", "-q", "new"]);
        git(wt, &["init", "-q", "--bare", "bare"]);
        std::fs::write(wt.join("old/.git/config.new"), "x").unwrap();
        let done = sweep.sweep();
        assert_eq!(done.len(), 3, "{done:?}");
        assert!(wt.join("new/.git.disarmed/HEAD.disarmed").is_file());
        assert!(!wt.join("new/.git").exists());
        assert!(wt.join("bare/HEAD.disarmed").is_file() && !wt.join("bare/HEAD").exists());
        assert!(wt.join("old/.git/HEAD").is_file() && wt.join(".git/HEAD").is_file());
        // A second repository at the same place gets a name of its own.
        git(wt, &["init", "-q", "new"]);
        assert_eq!(sweep.sweep().len(), 2);
        assert!(wt.join("new/.git.disarmed.1").is_dir());
    }

    #[test]
    fn sweep_around_a_write_sees_a_pointer_and_leaves_ordinary_writes_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path();
        git(wt, &["init", "-q"]);
        let sweep = RepositorySweep::knowing(wt, &Repositories::scan(wt));
        std::fs::create_dir_all(wt.join("src")).unwrap();
        std::fs::write(wt.join("src/main.rs"), "fn main() {}").unwrap();
        assert!(sweep.after_file_change(&wt.join("src/main.rs")).is_empty());
        std::fs::write(wt.join("src/.git"), "gitdir: ../evil\n").unwrap();
        let done = sweep.after_file_change(&wt.join("src/.git"));
        assert_eq!(done.len(), 1, "{done:?}");
        assert!(wt.join("src/.git.disarmed").is_file());
    }
}
