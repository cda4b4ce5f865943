//! Workspaces: where a sandbox's worktree really is.
//!
//! `direct` (the default) is the user's checkout itself. `copy` is a private copy of it, so
//! that nothing the agent does (`git reset --hard`, `rm -rf`, a poisoned build script)
//! touches the user's files while it runs; what it changed is reviewed afterwards
//! (`runner changes ID`) and brought over on request (`runner apply ID`), refusing files
//! the user changed in the meantime.
//!
//! A copy lives in `$XDG_DATA_HOME/runner/workspaces/ID/`: `work/` (what the sandbox sees),
//! `base/` (the checkout as it was when copied: what changes are measured against and
//! what the real files must still match for an apply), and `meta.json`. Both are made with
//! `cp -a --reflink=auto`: a reflink where the file system can, else a copy that keeps
//! modes, links and times. `.git` is copied (git works inside) but is never part of the
//! changes: bringing an agent's `.git` over would bring its hooks and config with it.
//!
//! What the worktree's ignore rules ignore and the checkout did not have (an agent's
//! `__pycache__/`, a build's `target/`) is left out of what `runner changes` shows and
//! `runner apply` brings over, and counted, unless `--include-ignored` is given
//! ([`ignored`] has the exact rule). A copy whose run changed nothing at all is discarded
//! when the run ends ([`Workspace::changed_nothing`]): there is nothing in it to review.
//!
//! An evaluation attempt works in the same kind of workspace, made with
//! [`Workspace::prepare`] under the evaluation's own folder: its `work/` is filled with a
//! clone at the task's commit, and `base/` copied from it before anything runs. Such a
//! workspace belongs to its attempt ([`Kind::Owned`]): it is never listed, reaped or
//! applied, and its patch is the one a harness can `git apply` ([`PatchFormat::Git`]).
//! A Harbor task's worktree lives in its image instead ([`image`]): the same owned
//! workspace, whose base and work are snapshots of the container.

pub mod apply;
pub mod changes;
pub mod content;
pub mod diff;
pub mod disk;
pub mod git;
pub mod ignored;
pub mod image;
pub mod leaf;

mod error;
pub use error::Error;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

/// Where the sandbox works.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The checkout itself.
    #[default]
    Direct,
    /// A private copy, reviewed and applied afterwards.
    Copy,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Direct, Mode::Copy];

    /// The name the command line and profiles use.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::Copy => "copy",
        }
    }

    /// What the mode is, in a sentence (for `--help`).
    pub fn about(self) -> &'static str {
        match self {
            Mode::Direct => "The checkout itself",
            Mode::Copy => "A private copy, reviewed and applied afterwards",
        }
    }
}

/// What `meta.json` records.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub id: String,
    /// The checkout it was copied from.
    pub source: PathBuf,
    /// Seconds since the epoch.
    pub created: u64,
    /// The runner process that made it; while it runs the copy is in use.
    pub owner_pid: i32,
    /// The command that made it ended (so the copy waits for review, not for its owner).
    #[serde(default)]
    pub finished: bool,
    /// The owner's machine and boot ([`runner_sandbox::owner::boot_id`]): its pid means
    /// something only there.
    #[serde(default)]
    pub boot: String,
    /// The disk budget of its `work/` file system in bytes ([`disk`]); `None`: no budget
    /// (the machine could not give one, or a copy made before budgets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<u64>,
}

/// Who a workspace is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `--workspace copy`: under [`root_dir`], listed by `runner changes`, reaped when its
    /// owner is gone, reviewed, then applied to the checkout or discarded.
    Kept,
    /// Made for one run that owns it (an evaluation attempt), in a folder of that run's:
    /// never listed or reaped (the run removes it), never applied anywhere.
    Owned,
}

/// How a patch is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchFormat {
    /// For a person: every file but `.git`, ignored ones included (`runner changes ID`
    /// leaves those out, [`Workspace::write_review`]); binaries, links, modes and renames
    /// named ([`diff::diff`], the renderer a Harbor task's snapshots use too).
    Review,
    /// For `git apply` (an evaluation's `diff.patch` and predictions): host git against the
    /// base's own repository. Files the work tree's `.gitignore` ignores are left out (an
    /// agent's `__pycache__` is not its answer) and binaries are carried whole, so that
    /// one of them does not make the harness reject the patch.
    Git,
}

/// What an apply made.
#[derive(Debug)]
pub struct Applied {
    pub changes: Vec<changes::Change>,
    /// Changes not applied because the ignore rules ignore them ([`ignored`]).
    pub left_out: usize,
    /// For the person: special bits dropped, old files that could not be removed.
    pub notes: Vec<String>,
}

#[derive(Clone)]
pub struct Workspace {
    pub meta: Meta,
    dir: PathBuf,
    kind: Kind,
    place: Place,
}

/// Where the two trees are.
#[derive(Clone)]
enum Place {
    /// `base/` and `work/` under the workspace's folder.
    Host,
    /// In a task container ([`image`]): `work/` is only the session's empty root on the
    /// host, and the base is a snapshot of the container's worktree.
    Image(std::sync::Arc<image::Base>),
}

/// Where every workspace lives: `$XDG_DATA_HOME/runner/workspaces`.
pub fn root_dir() -> PathBuf {
    runner_dirs::data_home()
        .unwrap_or_else(|| std::env::temp_dir().join("runner-data"))
        .join("runner")
        .join("workspaces")
}

impl Workspace {
    /// Copies `source` into a new workspace whose `work/` holds `budget` bytes more than
    /// the copy ([`disk`]), or as much as the host's disk where the machine cannot give a
    /// budget (said once).
    pub fn create(source: &Path, budget: u64) -> Result<Workspace, Error> {
        let source =
            std::fs::canonicalize(source).map_err(Error::io("read the worktree", source))?;
        // Copies of runs that were killed before they ended go first, like containers.
        for orphan in orphans() {
            let _ = orphan.discard();
        }
        let id = new_id();
        let dir = root_dir().join(&id);
        std::fs::create_dir_all(&dir).map_err(Error::io("create", &dir))?;
        let mut ws = Workspace {
            meta: Meta {
                id,
                source: source.clone(),
                created: now(),
                owner_pid: std::process::id() as i32,
                finished: false,
                boot: runner_sandbox::owner::boot_id(),
                disk: Some(budget),
            },
            dir,
            kind: Kind::Kept,
            place: Place::Host,
        };
        // The meta first: a copy cut short is then found and reaped by its dead owner.
        ws.save()?;
        // The workspaces themselves may live inside the checkout (a data directory under
        // it): they are left out, or the copy would copy itself.
        let skip = std::fs::canonicalize(root_dir()).unwrap_or_else(|_| root_dir());
        ws.mount_work(&source, &skip, budget)?;
        // Both copies at once: each is mostly waiting on the file system (or, with
        // reflinks, on metadata), so together they take about as long as one.
        let copies: Vec<Result<(), Error>> = std::thread::scope(|scope| {
            let handles: Vec<_> = ["base", "work"]
                .iter()
                .map(|side| {
                    let (source, dest, skip) = (&source, ws.dir.join(side), &skip);
                    scope.spawn(move || copy_tree(source, &dest, Some(skip)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Err(Error::Panicked("the copy thread"))))
                .collect()
        });
        if let Some(Err(e)) = copies.into_iter().find(Result::is_err) {
            let _ = ws.discard();
            return Err(e);
        }
        Ok(ws)
    }

    /// Makes `work/` the copy's own file system of the copy's size plus `budget`, before
    /// anything is copied into it. Where the machine cannot, says so once and records
    /// that this copy has no budget.
    fn mount_work(&mut self, source: &Path, skip: &Path, budget: u64) -> Result<(), Error> {
        let work = self.work();
        std::fs::create_dir(&work).map_err(Error::io("create", &work))?;
        let need = disk::measure(source, Some(skip));
        if let Err(why) = disk::attach(&self.dir, &work, need, budget) {
            disk::unavailable(&why);
            self.meta.disk = None;
            self.save()?;
        }
        Ok(())
    }

    /// A workspace for one run in a new folder `parent/NAME-XXXXXX`: `fill` makes `work/`
    /// (it is handed the path, which does not exist yet), then `base/` is copied from it,
    /// `.git` and all, before anything runs there. What `fill` returns comes back with it.
    /// On any error nothing is left. `source` names where it came from (in messages, and
    /// measured when it is a folder on this machine).
    ///
    /// With a `budget`, `work/` is first made a file system of its own that holds the
    /// source's size plus the budget ([`disk`]): what the clone takes beyond the source's
    /// size comes out of the budget (a repository fetched by URL is not measured).
    pub fn prepare<T, E: From<Error>>(
        parent: &Path,
        name: &str,
        source: &str,
        budget: Option<u64>,
        fill: impl FnOnce(&Path) -> Result<T, E>,
    ) -> Result<(Workspace, T), E> {
        let dir = owned_folder(parent, name)?;
        let work = dir.path().join("work");
        if let Some(budget) = budget {
            std::fs::create_dir(&work).map_err(Error::io("create", &work))?;
            let local = Path::new(source);
            let need = if local.is_dir() {
                disk::measure(local, None)
            } else {
                disk::Need::default()
            };
            if let Err(why) = disk::attach_for_run(dir.path(), &work, need, budget) {
                disk::unavailable(&why);
            }
        }
        let filled = fill(&work).and_then(|filled| {
            copy_tree(&work, &dir.path().join("base"), None)
                .map(|()| filled)
                .map_err(E::from)
        });
        match filled {
            Ok(filled) => Ok((Self::owned(dir, source, Place::Host)?, filled)),
            Err(e) => {
                // The folder goes with `dir`; its file system first.
                let _ = disk::detach(dir.path(), &work);
                Err(e)
            }
        }
    }

    /// An owned workspace in `dir` (which holds `work/`), with its `outputs/`.
    fn owned(dir: tempfile::TempDir, source: &str, place: Place) -> Result<Workspace, Error> {
        let outputs = dir.path().join("outputs");
        std::fs::create_dir(&outputs).map_err(Error::io("create", &outputs))?;
        let dir = dir.keep();
        let id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Workspace {
            meta: Meta {
                id,
                source: PathBuf::from(source),
                created: now(),
                owner_pid: std::process::id() as i32,
                finished: false,
                boot: runner_sandbox::owner::boot_id(),
                disk: None,
            },
            dir,
            kind: Kind::Owned,
            place,
        })
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Where a run in an owned workspace saves its full tool outputs: beside the copy,
    /// readable by its sandbox, and gone with the workspace, so no other run sees them.
    pub fn outputs(&self) -> PathBuf {
        self.dir.join("outputs")
    }

    /// The workspace `id` (or a unique prefix of one).
    pub fn open(id: &str) -> Result<Workspace, Error> {
        let mut found: Vec<Workspace> = list_all()
            .into_iter()
            .filter(|w| w.meta.id.starts_with(id))
            .collect();
        if found.len() > 1 {
            return Err(Error::Ambiguous {
                prefix: id.to_string(),
                count: found.len(),
            });
        }
        found.pop().ok_or_else(|| Error::NotFound(id.to_string()))
    }

    /// What the sandbox works in.
    /// The worktree on the host. For a workspace in an image, the session's root on the
    /// host: an empty folder where config files are looked for (the files are in the image).
    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    fn base(&self) -> PathBuf {
        self.dir.join("base")
    }

    /// Marks the command that made it as ended: the copy now waits for review.
    pub fn finish(&mut self) -> Result<(), Error> {
        self.meta.finished = true;
        match self.kind {
            Kind::Kept => self.save(),
            // Nobody reviews it; its run removes it.
            Kind::Owned => Ok(()),
        }
    }

    /// The changes the agent made, against the checkout as it was copied.
    pub fn changes(&self) -> Result<Vec<changes::Change>, Error> {
        self.on_host()?;
        changes::between(&self.base(), &self.work())
    }

    /// The changes a person reviews and an apply brings over, and how many the ignore
    /// rules left out ([`ignored`]); with `include_ignored`, all of them.
    pub fn review(&self, include_ignored: bool) -> Result<(Vec<changes::Change>, usize), Error> {
        let all = self.changes()?;
        Ok(ignored::split(
            all,
            &self.work(),
            &self.base(),
            include_ignored,
        ))
    }

    /// Whether the copy holds no change at all, not even one the ignore rules leave out
    /// (an ignored file can still be what the person asked for, and is kept for them).
    /// `false` when the changes cannot be read: such a copy is kept to be looked at.
    pub fn changed_nothing(&self) -> bool {
        self.kind == Kind::Kept && self.any_change().is_ok_and(|any| !any)
    }

    /// Whether anything changed, read only as far as the first change.
    fn any_change(&self) -> Result<bool, Error> {
        self.on_host()?;
        changes::any_between(&self.base(), &self.work())
    }

    /// Refuses what needs both trees on the host; mounts a budgeted copy's file system
    /// again where a reboot took it away.
    fn on_host(&self) -> Result<(), Error> {
        match self.place {
            Place::Host => disk::ready(&self.dir, &self.work()),
            Place::Image(_) => Err(Error::InImage(self.meta.id.clone())),
        }
    }

    /// The changes as a patch, for a person or for `git apply`.
    pub fn diff(&self, format: PatchFormat) -> Result<Vec<u8>, Error> {
        self.on_host()?;
        match format {
            PatchFormat::Review => {
                let mut out = Vec::new();
                let list = self.changes()?;
                diff::write_changes(&list, &self.base(), &self.work(), &mut out)?;
                Ok(out)
            }
            PatchFormat::Git => {
                let base_git = self.base().join(".git");
                // The base's own repository only. A `.git` file (a linked worktree's)
                // points at the user's repository, and git would write objects there.
                if !std::fs::symlink_metadata(&base_git).is_ok_and(|m| m.is_dir()) {
                    return Err(Error::NotARepository(self.base()));
                }
                git::patch(&base_git, &self.work(), &self.dir.join("git-index"))
            }
        }
    }

    /// The review patch, written to `out` as it is made (never held whole): what
    /// [`Workspace::review`] lists. Returns how many changes it left out.
    pub fn write_review(
        &self,
        out: &mut dyn std::io::Write,
        include_ignored: bool,
    ) -> Result<usize, Error> {
        self.on_host()?;
        let (list, left_out) = self.review(include_ignored)?;
        diff::write_changes(&list, &self.base(), &self.work(), out)?;
        Ok(left_out)
    }

    /// Brings the changes over to the real checkout and removes the workspace: all of them
    /// or, when anything fails, none. Refuses (naming them) where the real files no longer
    /// match what was copied, unless `force`. `stop` is asked while the files are staged (an
    /// interrupt): when it says so, nothing is applied. What the ignore rules leave out
    /// ([`ignored`]) is not applied unless `include_ignored`, and goes with the copy.
    pub fn apply(
        self,
        force: bool,
        include_ignored: bool,
        stop: &dyn Fn() -> bool,
    ) -> Result<Applied, Error> {
        if self.kind == Kind::Owned {
            return Err(Error::Owned(self.meta.id.clone()));
        }
        self.not_in_use()?;
        let (list, left_out) = self.review(include_ignored)?;
        let (base, work) = (self.base(), self.work());
        let notes = apply::apply(&list, &base, &work, &self.meta.source, force, stop).map_err(
            |refused| match refused {
                apply::Refused::Conflicts(files) => Error::Conflicts {
                    checkout: self.meta.source.clone(),
                    files,
                    id: self.meta.id.clone(),
                },
                refused => Error::Apply(refused),
            },
        )?;
        self.discard()?;
        Ok(Applied {
            changes: list,
            left_out,
            notes,
        })
    }

    /// Refuses while the command that made it still runs: its sandbox works in the copy.
    pub fn not_in_use(&self) -> Result<(), Error> {
        if !self.meta.finished && self.owner_alive() {
            return Err(Error::InUse {
                id: self.meta.id.clone(),
                pid: self.meta.owner_pid,
            });
        }
        Ok(())
    }

    /// Whether the process that made it still runs (on this machine and boot).
    fn owner_alive(&self) -> bool {
        if self.meta.boot.is_empty() {
            return runner_sandbox::owner::alive(self.meta.owner_pid);
        }
        match runner_sandbox::owner::judge_here(&self.meta.boot) {
            Some(true) => runner_sandbox::owner::alive(self.meta.owner_pid),
            Some(false) => false,
            // Another machine's (a shared home): assume it runs.
            None => true,
        }
    }

    /// Removes the workspace: its file system first (unmounted, its image removed), so
    /// that nothing of it is left mounted or on disk.
    pub fn discard(self) -> Result<(), Error> {
        disk::detach(&self.dir, &self.work())?;
        remove_tree(&self.dir);
        if self.dir.exists() {
            return Err(Error::io("remove", &self.dir)(std::io::Error::other(
                "it is still there",
            )));
        }
        Ok(())
    }

    fn save(&self) -> Result<(), Error> {
        let path = self.dir.join("meta.json");
        let text = serde_json::to_vec_pretty(&self.meta)
            .map_err(|e| Error::io("write", &path)(e.into()))?;
        write_file(&path, &text).map_err(Error::io("write", &path))
    }
}

/// A new folder `parent/NAME-XXXXXX` for an owned workspace, removed unless kept.
fn owned_folder(parent: &Path, name: &str) -> Result<tempfile::TempDir, Error> {
    std::fs::create_dir_all(parent).map_err(Error::io("create", parent))?;
    tempfile::Builder::new()
        .prefix(&format!("{name}-"))
        .tempdir_in(parent)
        .map_err(Error::io("create a workspace in", parent))
}

/// Every workspace on this machine, oldest first.
pub fn list_all() -> Vec<Workspace> {
    let mut all: Vec<Workspace> = std::fs::read_dir(root_dir())
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let text = std::fs::read_to_string(e.path().join("meta.json")).ok()?;
                    let meta: Meta = serde_json::from_str(&text).ok()?;
                    Some(Workspace {
                        meta,
                        dir: e.path(),
                        kind: Kind::Kept,
                        place: Place::Host,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    all.sort_by_key(|w| (w.meta.created, w.meta.id.clone()));
    all
}

/// Copies whose command never ended, whose owner is gone (a killed run), and that hold no
/// change: nothing in them is lost by removing them. One with changes stays listed for
/// review, whatever ended its run.
pub fn orphans() -> Vec<Workspace> {
    list_all()
        .into_iter()
        .filter(|w| !w.meta.finished && !w.owner_alive())
        .filter(|w| w.any_change().is_ok_and(|any| !any))
        .collect()
}

/// `cp -a --reflink=auto`: coreutils already knows how to reflink and how to keep modes,
/// links, times and special files. Everything of `source` but `skip` goes to `dest`: the
/// folders on the way to `skip` are made here, everything beside them is copied whole.
/// Every private copy runner makes goes through here: a copy workspace's, and an
/// evaluation attempt's worktree and its base repository (`eval::worktree`).
pub fn copy_tree(source: &Path, dest: &Path, skip: Option<&Path>) -> Result<(), Error> {
    let cp = |args: &mut Command| -> Result<(), Error> {
        let out = args.output().map_err(|e| Error::Program {
            what: "run cp to copy the worktree".into(),
            detail: e.to_string(),
        })?;
        if out.status.success() {
            return Ok(());
        }
        Err(Error::program(
            format!("copy {} to {}", source.display(), dest.display()),
            &out.stderr,
        ))
    };
    let Some(skip) = skip.filter(|s| s.starts_with(source)) else {
        return cp(Command::new("cp")
            .args(["-a", "--reflink=auto", "--no-target-directory", "--"])
            .arg(source)
            .arg(dest));
    };
    let io = |e: std::io::Error| Error::io("copy", source)(e);
    std::fs::create_dir_all(dest).map_err(io)?;
    let mode = std::fs::metadata(source).map_err(io)?.permissions();
    let mut whole = Vec::new();
    for entry in std::fs::read_dir(source).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path == skip {
            continue;
        }
        let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        if is_dir && skip.starts_with(&path) {
            copy_tree(
                &path,
                &dest.join(path.file_name().unwrap_or_default()),
                Some(skip),
            )?;
        } else {
            whole.push(path);
        }
    }
    if !whole.is_empty() {
        cp(Command::new("cp")
            .args(["-a", "--reflink=auto", "-t"])
            .arg(dest)
            .arg("--")
            .args(&whole))?;
    }
    std::fs::set_permissions(dest, mode).map_err(io)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Short, sortable by time, unique enough: seconds in hex and a random tail.
fn new_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{:x}{:04x}",
        now(),
        (nanos as u32 ^ std::process::id()) & 0xffff
    )
}

/// Writes a file whole or not at all.
pub fn write_file(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(data)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Removes a tree even where the agent took the write bit off its directories.
/// Removes a folder of [`Workspace::prepare`]d workspaces that a killed run left behind:
/// each one's file system is unmounted first (a mount point cannot be removed).
pub fn remove_run_folders(path: &Path) {
    for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
        let dir = entry.path();
        if let Err(e) = disk::detach(&dir, &dir.join("work")) {
            eprintln!("runner: {e}");
        }
    }
    remove_tree(path);
}

pub fn remove_tree(path: &Path) {
    if std::fs::remove_dir_all(path).is_ok() || !path.exists() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    for entry in ignore::WalkBuilder::new(path)
        .standard_filters(false)
        .build()
        .flatten()
    {
        if entry.file_type().is_some_and(|t| t.is_dir()) {
            let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o700));
        }
    }
    if let Err(e) = std::fs::remove_dir_all(path) {
        eprintln!("runner: cannot remove {}: {e}", path.display());
    }
}
