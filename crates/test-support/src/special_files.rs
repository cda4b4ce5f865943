//! Special files out of the wall: in a direct workspace the worktree is the user's
//! checkout, and a setuid program the sandbox leaves there is one the host runs with its
//! owner's rights (root's, when runner runs as root).
//!
//! The attack copies a program and makes it setuid and setgid, sets the bits on a file
//! that was already there, makes a sticky folder and a setgid one, a FIFO, and tries a
//! device node; a process it leaves behind sets a bit after the command has returned, and
//! a write through the file API replaces a setuid file of the checkout's. The host checks
//! the checkout right after the command (no special bit, no device node; the FIFO may stay,
//! something may still read it) and after the sandbox has closed (no special bit, no FIFO).
//! Controls: an executable keeps its `755`, and a setuid file the checkout had before the
//! sandbox opened, which the sandbox left alone, keeps its bit.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Backend;
use super::escape::exec;
use super::side_doors::open;

const ATTACK: &str = "cp /bin/true x && chmod 6755 x; chmod 4755 existing; \
    mkdir d && chmod +t d; mkdir g && chmod 2755 g; mkfifo f; \
    cp /bin/true plain && chmod 755 plain; mknod dev c 1 3 2>/dev/null; \
    touch late; setsid sh -c 'sleep 1; chmod 4755 late' </dev/null >/dev/null 2>&1 & \
    ls -l";

/// Entries below `wt` with a setuid, setgid or sticky bit, and device nodes and FIFOs
/// (`kind: path`), links not followed.
fn special_entries(wt: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![wt.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let t = meta.file_type();
            let rel = path.strip_prefix(wt).unwrap_or(&path).display().to_string();
            if t.is_char_device() || t.is_block_device() {
                found.push(format!("device: {rel}"));
            } else if t.is_fifo() {
                found.push(format!("fifo: {rel}"));
            } else if meta.mode() & 0o7000 != 0 {
                found.push(format!("mode {:o}: {rel}", meta.mode() & 0o7777));
            }
            if t.is_dir() {
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .map(|m| m.mode() & 0o7777)
        .unwrap_or(0)
}

/// The checkout: a file the attack makes setuid, one that is setuid already and is
/// rewritten through the file API, and one that is setuid already and left alone.
fn checkout() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix("runner-special-")
        .tempdir()
        .unwrap();
    let wt = std::fs::canonicalize(tmp.path()).unwrap();
    for name in ["existing", "rewritten", "kept"] {
        std::fs::write(wt.join(name), "#!/bin/sh\n").unwrap();
    }
    // To the sandbox's user first (a change of owner drops a setuid bit), then the modes.
    super::engine::hand_over(&wt);
    for (name, m) in [("existing", 0o755), ("rewritten", 0o4755), ("kept", 0o4755)] {
        std::fs::set_permissions(wt.join(name), std::fs::Permissions::from_mode(m)).unwrap();
    }
    (tmp, wt)
}

/// Runs the attack; panics with every special entry the host found where none may be.
pub async fn run(backend: Backend) {
    let (_tmp, wt) = checkout();
    let sb = open(backend, &wt).await;
    let mut failures = Vec::new();
    let r = exec(&sb, ATTACK).await.expect("the command runs");
    let said = r.all();
    // The command did what it set out to do, or the test proves nothing.
    for made in ["x", "d", "g", "plain"] {
        if !wt.join(made).exists() {
            failures.push(format!("the attack did not make {made}: {said}"));
        }
    }
    if sb
        .client
        .write(
            &wt.join("rewritten"),
            b"#!/bin/sh\necho new\n".to_vec(),
            None,
        )
        .await
        .is_err()
    {
        failures.push("the write tool could not rewrite `rewritten`".into());
    }
    // Right after the call, the sandbox still open: only the FIFO may stay.
    let now: Vec<String> = special_entries(&wt)
        .into_iter()
        .filter(|e| e != "fifo: f" && e != "mode 4755: kept")
        .collect();
    if !now.is_empty() {
        failures.push(format!("right after the command: {now:?}\n{said}"));
    }
    if !said.contains("cleared the setuid and setgid bits of \"x\"") {
        failures.push(format!(
            "the command's output does not say what was cleared: {said}"
        ));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    drop(sb);
    let closed: Vec<String> = special_entries(&wt)
        .into_iter()
        .filter(|e| e != "mode 4755: kept")
        .collect();
    if !closed.is_empty() {
        failures.push(format!("after the sandbox closed: {closed:?}"));
    }
    // Controls: plain executable bits stay, and so does a bit the sandbox did not touch.
    if mode(&wt.join("plain")) != 0o755 {
        failures.push(format!(
            "plain lost its mode: {:o}",
            mode(&wt.join("plain"))
        ));
    }
    if mode(&wt.join("x")) != 0o755 {
        failures.push(format!("x is not plain 755: {:o}", mode(&wt.join("x"))));
    }
    if mode(&wt.join("kept")) != 0o4755 {
        failures.push(format!(
            "kept, untouched, lost its bit: {:o}",
            mode(&wt.join("kept"))
        ));
    }
    assert!(
        failures.is_empty(),
        "special files out of the wall:\n{}",
        failures.join("\n")
    );
}
