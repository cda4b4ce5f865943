//! What a run leaves outside itself (containers, cgroups, temp directories) names the
//! process that owns it, so that leftovers of dead runs can be told from live ones.

use std::path::{Path, PathBuf};

/// Whether process `pid` exists (EPERM means it does, just not ours to signal).
pub fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// When process `pid` started, in clock ticks after boot (field 22 of `/proc/PID/stat`),
/// if it runs and is not a zombie. A pid alone names a process only while it lives: once
/// it ends, the kernel may hand the same number to another. A pid with its start time
/// (on one boot) names one process for good, so a record of both tells its owner from a
/// stranger that got the owner's pid.
pub fn started_at(pid: i32) -> Option<u64> {
    if pid <= 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields are counted after the last
    // `)`, from the state (field 3) to the start time (field 22).
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    if fields.next()? == "Z" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// What process `pid` runs, in a few words for a person deciding whether to end it:
/// its program's name and the subcommand words after it (`runner eval run`), never the
/// rest of its arguments, which may be a long task or a path. `None` when it is gone or
/// its command line cannot be read. The words come from another process: show them
/// escaped.
pub fn command_of(pid: i32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut args = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(String::from_utf8_lossy);
    let program = args.next()?;
    let program = program.rsplit('/').next().unwrap_or_default().to_string();
    let is_word = |a: &str| {
        !a.is_empty()
            && a.len() <= 20
            && a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
            && !a.starts_with('-')
    };
    let words: Vec<String> = std::iter::once(program)
        .chain(
            args.map(|a| a.into_owned())
                .take_while(|a| is_word(a))
                .take(2),
        )
        .collect();
    Some(words.join(" "))
}

/// This machine and its current boot, as `MACHINE/BOOT`: a pid means something only on
/// the machine (and boot) that issued it, and an engine can be shared by several machines.
pub fn boot_id() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let machine = Some(read("/etc/machine-id"))
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| read("/proc/sys/kernel/hostname"));
    format!("{machine}/{}", read("/proc/sys/kernel/random/boot_id"))
}

/// Whether a resource labelled with `label` (a [`boot_id`]) may be judged by its owner
/// pid here (`Some(true)`), is an orphan of an earlier boot of this machine
/// (`Some(false)`), or belongs to another machine (`None`: not ours to judge).
pub fn judge_here(label: &str) -> Option<bool> {
    let ours = boot_id();
    let machine = |s: &str| s.split('/').next().unwrap_or_default().to_string();
    if label == ours {
        Some(true)
    } else if machine(label) == machine(&ours) {
        Some(false)
    } else {
        None
    }
}

/// The owner named in `PREFIX<pid>-…`.
pub fn owner_in_name(name: &str, prefix: &str) -> Option<i32> {
    name.strip_prefix(prefix)?.split('-').next()?.parse().ok()
}

/// Entries of `dir` named `PREFIX<pid>-…` whose owner is gone.
pub fn orphans_in(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            owner_in_name(&e.file_name().to_string_lossy(), prefix).is_some_and(|p| !alive(p))
        })
        .map(|e| e.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_machine_judges_its_own_pids() {
        let here = boot_id();
        assert_eq!(judge_here(&here), Some(true));
        let machine = here.split('/').next().unwrap();
        assert_eq!(
            judge_here(&format!("{machine}/an-earlier-boot")),
            Some(false)
        );
        assert_eq!(judge_here("another-machine/some-boot"), None);
    }

    #[test]
    fn names_and_liveness() {
        assert_eq!(owner_in_name("runner-123-0", "runner-"), Some(123));
        assert_eq!(
            owner_in_name("runner-sandbox-77-Xy", "runner-sandbox-"),
            Some(77)
        );
        assert_eq!(owner_in_name("runner-x-0", "runner-"), None);
        assert_eq!(owner_in_name("other-1-0", "runner-"), None);
        assert!(alive(std::process::id() as i32));
        assert!(!alive(0));
        assert!(!alive(i32::MAX));
    }

    #[test]
    fn a_start_time_is_read_for_running_processes_only() {
        let me = std::process::id() as i32;
        let mine = started_at(me).expect("this process has a start time");
        assert_eq!(started_at(me), Some(mine), "a start time does not change");
        // A child forked after this process started cannot have started earlier.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let theirs = started_at(child.id() as i32).expect("the child runs");
        assert!(theirs >= mine, "{theirs} < {mine}");
        let _ = child.kill();
        // Killed but not yet waited for: a zombie (once the signal lands), which runs
        // nothing.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while started_at(child.id() as i32).is_some() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(started_at(child.id() as i32), None);
        let _ = child.wait();
        assert_eq!(started_at(i32::MAX), None);
        assert_eq!(started_at(0), None);
    }

    #[test]
    fn a_command_is_its_program_and_subcommand_words() {
        let me = std::process::id() as i32;
        let exe = std::env::current_exe().unwrap();
        let name = exe.file_name().unwrap().to_string_lossy().into_owned();
        let shown = command_of(me).expect("this process has a command line");
        assert!(shown.starts_with(&name), "{shown} vs {name}");
        // GNU sleep adds up its intervals: three words, of which two are shown. (An
        // argument sleep does not take would end it before it is seen.)
        let mut child = std::process::Command::new("sleep")
            .args(["30", "1s", "2s"])
            .spawn()
            .unwrap();
        // The child may not have exec'd yet: wait until its command line is sleep's.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut seen = None;
        while std::time::Instant::now() < deadline {
            seen = command_of(child.id() as i32);
            if seen.as_deref() == Some("sleep 30 1s") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(seen.as_deref(), Some("sleep 30 1s"));
        assert_eq!(command_of(i32::MAX), None);
    }

    #[test]
    fn orphans_are_the_entries_of_dead_owners() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        for name in [
            format!("runner-{me}-0"),
            format!("runner-{}-1", i32::MAX),
            "unrelated".into(),
        ] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        assert_eq!(
            orphans_in(dir.path(), "runner-"),
            vec![dir.path().join(format!("runner-{}-1", i32::MAX))]
        );
    }
}
