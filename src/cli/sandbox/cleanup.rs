//! `runner sandbox cleanup`: removes what runner left behind and nobody owns any more.
//!
//! Everything runner leaves outside itself names its owner process, and the rule for what
//! may go is the one a docker start already applies to orphans: a leftover goes when its
//! owner is gone. A cleanup run in one terminal therefore never kills a session in
//! another, nor a running `runner eval`, whose sandboxes would otherwise die with "the
//! sandbox server is gone". `--all` ends live containers too, and because that is
//! destructive to someone else's work it asks first, or, with no terminal to ask on,
//! wants `--yes`. `--dry-run` says, for each leftover, whether it would go and why.

use std::collections::HashSet;
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use bollard::Docker;

use super::CleanupArgs;
use super::exit;
use runner_display::shown;
use runner_sandbox::docker::cleanup::{Orphaned, Owned, Standing};
use runner_sandbox::docker::{cleanup, engine};
use runner_sandbox::landlock::{TMP_PREFIX, cgroup};
use runner_sandbox::owner;

/// Exit codes: 0 done, 1 the engine's containers could not be listed or the question was
/// answered no, 2 `--all` with no terminal to ask on and no `--yes`.
pub async fn run(args: &CleanupArgs) -> u8 {
    let containers = Containers::find().await;
    if args.dry_run {
        let mut tally = Tally::default();
        containers.show_plan(args.all, &mut tally);
        host_plan(&mut tally);
        println!(
            "dry run: {} would be removed, {} would stay; nothing was removed",
            tally.go, tally.stay
        );
        return containers.code();
    }
    if args.all
        && let Err(code) = confirm_all(containers.live(), args.yes)
    {
        return code;
    }
    let code = containers.remove(args.all).await;
    remove_host_leftovers();
    code
}

/// What a dry run found: how many would go and how many would stay.
#[derive(Default)]
struct Tally {
    go: usize,
    stay: usize,
}

impl Tally {
    /// One line of the plan, counted.
    fn plan(&mut self, goes: bool, what: &str, name: &str, why: &str) {
        if goes {
            self.go += 1;
            line("would remove", what, name, why);
        } else {
            self.stay += 1;
            line("would keep", what, name, why);
        }
    }
}

/// Runner's containers on the engine, each judged by its owner.
struct Containers {
    docker: Option<Docker>,
    judged: Vec<(Owned, Standing)>,
    /// Why there are none to judge, when the engine could not be asked.
    trouble: Option<Trouble>,
}

enum Trouble {
    /// No engine answers: there is nothing of runner's in one either.
    NoEngine(String),
    /// The engine answers but would not list its containers.
    CannotList(String),
}

impl Containers {
    async fn find() -> Containers {
        let docker = match engine::connect().await {
            Ok(d) => d,
            Err(e) => {
                return Containers {
                    docker: None,
                    judged: Vec::new(),
                    trouble: Some(Trouble::NoEngine(e.to_string())),
                };
            }
        };
        match cleanup::list(&docker).await {
            Ok(all) => Containers {
                judged: all
                    .into_iter()
                    .map(|c| {
                        let standing = c.standing();
                        (c, standing)
                    })
                    .collect(),
                docker: Some(docker),
                trouble: None,
            },
            Err(e) => Containers {
                docker: Some(docker),
                judged: Vec::new(),
                trouble: Some(Trouble::CannotList(e.to_string())),
            },
        }
    }

    /// How many a cleanup without `--all` keeps because somebody owns them.
    fn live(&self) -> usize {
        self.judged
            .iter()
            .filter(|(_, s)| !matches!(s, Standing::Orphan(_)))
            .count()
    }

    /// The containers each with whether it goes (`all`: every one does).
    fn verdicts(&self, all: bool) -> impl Iterator<Item = (&Owned, &Standing, bool)> {
        self.judged
            .iter()
            .map(move |(c, s)| (c, s, all || matches!(s, Standing::Orphan(_))))
    }

    fn show_plan(&self, all: bool, tally: &mut Tally) {
        self.say_trouble();
        for (c, standing, goes) in self.verdicts(all) {
            let mut why = why(standing);
            if !goes {
                why.push_str("; --all would end it");
            }
            tally.plan(goes, "container", &c.label(), &why);
        }
    }

    /// Removes the orphans (`all`: every container); says what it removed and kept.
    async fn remove(&self, all: bool) -> u8 {
        self.say_trouble();
        let Some(docker) = &self.docker else {
            return exit::OK;
        };
        let (mut removed, mut kept) = (0, 0);
        for (c, standing, goes) in self.verdicts(all) {
            if goes {
                c.remove(docker).await;
                removed += 1;
                line("removed", "container", &c.label(), &why(standing));
            } else {
                kept += 1;
                let why = format!("{}; --all ends it", why(standing));
                line("kept", "container", &c.label(), &why);
            }
        }
        println!("removed {removed} container(s), kept {kept} in use");
        self.code()
    }

    /// Failed when the engine answered but its containers could not be judged; no engine
    /// at all is no failure (there is nothing of runner's in one).
    fn code(&self) -> u8 {
        match self.trouble {
            Some(Trouble::CannotList(_)) => exit::FAILED,
            _ => exit::OK,
        }
    }

    fn say_trouble(&self) {
        match &self.trouble {
            Some(Trouble::NoEngine(e)) => {
                println!("no Docker engine ({}); no containers to remove", shown(e))
            }
            Some(Trouble::CannotList(e)) => eprintln!(
                "runner: cannot list the engine's containers: {}; check that the engine runs (runner sandbox doctor)",
                shown(e)
            ),
            None => {}
        }
    }
}

/// One line of the report: `VERB WHAT NAME: WHY`, the name (from the engine or the disk)
/// escaped.
fn line(verb: &str, what: &str, name: &str, why: &str) {
    println!("{verb:<12} {what} {}: {why}", shown(name));
}

/// Why a container goes or stays, in words (a live owner's command escaped).
fn why(standing: &Standing) -> String {
    match standing {
        Standing::Orphan(Orphaned::OwnerGone(pid)) => format!("its owner, pid {pid}, is gone"),
        Standing::Orphan(Orphaned::OwnerReused(pid)) => {
            format!("its owner, pid {pid}, is gone; that pid now belongs to another process")
        }
        Standing::Orphan(Orphaned::EarlierBoot(Some(pid))) => {
            format!("its owner, pid {pid}, ran before this machine last booted")
        }
        Standing::Orphan(Orphaned::EarlierBoot(None)) => {
            "it was made before this machine last booted".into()
        }
        Standing::Orphan(Orphaned::NoOwner) => "it names no owner process".into(),
        Standing::Live { pid, command } => live_owner(*pid, command),
        Standing::Elsewhere { machine } => format!(
            "made by a runner on another machine ({}) that shares this engine",
            shown(machine)
        ),
    }
}

fn live_owner(pid: i32, command: &Option<String>) -> String {
    match command {
        Some(c) => format!("owned by live pid {pid} ({})", shown(c)),
        None => format!("owned by live pid {pid}"),
    }
}

/// `--all` ends the sessions of others: on a terminal, asks; without one, only `--yes`
/// goes ahead. `Err` carries the exit code when it does not go ahead.
fn confirm_all(live: usize, yes: bool) -> Result<(), u8> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        eprintln!(
            "runner: sandbox cleanup --all also ends live sandboxes ({live} now), and no terminal is attached to ask whether to: add --yes to end them, or leave out --all to remove only what nobody owns. Nothing was removed"
        );
        return Err(exit::USAGE);
    }
    if live == 0 {
        return Ok(());
    }
    eprint!(
        "--all ends {live} live sandbox(es) whose runner still runs (a session in another terminal, a running eval); they will fail with \"the sandbox server is gone\". End them? [y/N] "
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    if matches!(answer.trim(), "y" | "Y" | "yes" | "Yes" | "YES") {
        Ok(())
    } else {
        eprintln!("runner: nothing was removed");
        Err(exit::FAILED)
    }
}

/// What `--dry-run` says of the leftovers on this machine's disk and kernel.
fn host_plan(tally: &mut Tally) {
    for dir in cgroup::leftovers() {
        let why = gone_owner(&dir, cgroup::PREFIX);
        tally.plan(true, "cgroup", &dir.display().to_string(), &why);
    }
    for dir in runner_sandbox::landlock::leftover_tmp_dirs() {
        let why = gone_owner(&dir, TMP_PREFIX);
        tally.plan(true, "temp directory", &dir.display().to_string(), &why);
    }
    for (goes, id, why) in workspace_verdicts() {
        tally.plan(goes, "workspace", &id, &why);
    }
    for left in runner_workspace::disk::leftovers() {
        let pid = left.owner_pid;
        let why = if left.owner_gone {
            format!("its run, pid {pid}, is gone")
        } else {
            live_owner(pid, &owner::command_of(pid))
        };
        let dir = left.dir.display().to_string();
        tally.plan(left.owner_gone, "disk image at", &dir, &why);
    }
}

/// The reason a leftover named `PREFIX<pid>-…` goes.
fn gone_owner(dir: &Path, prefix: &str) -> String {
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    match owner::owner_in_name(&name, prefix) {
        Some(pid) => format!("its owner, pid {pid}, is gone"),
        None => "its owner is gone".into(),
    }
}

/// Every copy workspace: whether a cleanup removes it, its id, and why. It goes only
/// when its run was killed (never finished, owner gone) and left nothing to review.
fn workspace_verdicts() -> Vec<(bool, String, String)> {
    let orphans: HashSet<String> = runner_workspace::orphans()
        .into_iter()
        .map(|w| w.meta.id)
        .collect();
    runner_workspace::list_all()
        .into_iter()
        .map(|w| {
            let m = w.meta;
            let pid = m.owner_pid;
            let why = if orphans.contains(&m.id) {
                format!("its run, pid {pid}, is gone and it holds no changes")
            } else if m.finished {
                format!("waiting for review (runner changes {})", shown(&m.id))
            } else if m.boot.is_empty() || owner::judge_here(&m.boot) == Some(true) {
                if owner::alive(pid) {
                    live_owner(pid, &owner::command_of(pid))
                } else {
                    format!(
                        "its run, pid {pid}, is gone, but it holds changes to review (runner changes {})",
                        shown(&m.id)
                    )
                }
            } else if owner::judge_here(&m.boot).is_none() {
                "made by a runner on another machine that shares this data directory".into()
            } else {
                format!(
                    "its run ended with this machine's last boot, but it holds changes to review (runner changes {})",
                    shown(&m.id)
                )
            };
            (orphans.contains(&m.id), m.id, why)
        })
        .collect()
}

/// Removes the host's leftovers of dead runs: cgroups, temp directories, copy workspaces
/// of killed runs with nothing in them, and disk images killed evals left mounted. Each
/// finder already skips what a live process owns.
fn remove_host_leftovers() {
    let cgroups = cgroup::leftovers();
    cgroup::destroy(&cgroups);
    println!("removed {} cgroup(s)", cgroups.len());
    let dirs = runner_sandbox::landlock::leftover_tmp_dirs()
        .into_iter()
        .filter(|d| std::fs::remove_dir_all(d).is_ok())
        .count();
    println!("removed {dirs} temp director(ies)");
    // Copies whose command never ended (a killed run) hold nothing meant for review.
    let mut copies = 0;
    for w in runner_workspace::orphans() {
        if w.discard().is_ok() {
            copies += 1;
        }
    }
    println!("removed {copies} unfinished workspace(s)");
    // After the cgroups and containers: their processes no longer hold the file systems.
    let swept = runner_workspace::disk::sweep_leftovers();
    for line in &swept.notes {
        eprintln!("runner: {line}");
    }
    println!("removed {} disk image(s) of killed runs", swept.removed);
}
