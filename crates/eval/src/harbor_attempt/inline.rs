//! Files put into the task container by a command that is running there anyway, instead
//! of by a copy through the engine.
//!
//! Every copy through the engine's archive API costs the engine a process of its own that
//! enters the container's file system: on a busy machine as much as a quarter of a
//! container's start. The hidden tests go in with the verifier's first command, the
//! oracle's solution with a command through the container's own server, and the rewards
//! come back in the verifier's output. What a file becomes here is shell: a `printf '%b'`
//! of its bytes (escaped, so that any byte passes) into its path, with its mode. Only the
//! shell's builtins and `mkdir`/`chmod` are needed, which the verifier's preparation uses
//! already. Folders too large for one argument of a command, or holding anything but
//! folders and regular files, go through the engine as before.

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::Path;

/// The largest script made: one argument of a command may not pass 128 KiB on Linux, and
/// the verifier's own lines go in the same argument.
pub(super) const SCRIPT_LIMIT: usize = 96 << 10;

/// The shell lines that recreate `tar`'s folders and regular files under `/` (its paths
/// are relative), each file with its mode. `None`: the tar holds something else (a link),
/// cannot be read, or makes a script over `limit` bytes.
pub(super) fn unpack_script(tar: &[u8], limit: usize) -> Option<String> {
    let mut script = String::new();
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries().ok()? {
        let mut entry = entry.ok()?;
        let path = entry.path().ok()?.into_owned();
        let path = Path::new("/").join(path.to_str()?.trim_end_matches('/'));
        let quoted = quote(path.to_str()?);
        let mode = entry.header().mode().ok()? & 0o7777;
        match entry.header().entry_type() {
            tar::EntryType::Directory => {
                let _ = writeln!(script, "mkdir -p -- {quoted}");
            }
            tar::EntryType::Regular => {
                let mut bytes = Vec::new();
                entry.read_to_end(&mut bytes).ok()?;
                let _ = writeln!(script, "printf '%b' '{}' > {quoted}", escape(&bytes));
            }
            _ => return None,
        }
        let _ = writeln!(script, "chmod {mode:o} -- {quoted}");
        if script.len() > limit {
            return None;
        }
    }
    Some(script)
}

/// `bytes` for `printf '%b'` inside single quotes: printable ASCII but `\` and `'` as it
/// is, newlines and tabs as `\n` and `\t`, every other byte as `\0` and three octal digits.
fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\'' => out.push_str("\\0047"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\0{b:03o}");
            }
        }
    }
    out
}

/// `text` as one single-quoted shell word.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// Where the rewards start in the verifier's output: the marker's line, then each reward
/// file that is a regular file (in a `/logs/verifier` that is a folder, not a link) between
/// a line naming it and a line closing it, then the marker's end line. `$2` is the marker,
/// a word drawn on the host for this one command; `$code` is `test.sh`'s status, with which
/// the command ends at once (without the end line) if a file cannot be read.
pub(super) const PRINT_REWARDS: &str = "printf '\\n%s rewards\\n' \"$2\"
for f in reward.txt reward.json; do
  p=/logs/verifier/$f
  if [ -d /logs/verifier ] && [ ! -L /logs/verifier ] && [ -f \"$p\" ] && [ ! -L \"$p\" ]; then
    printf '%s <%s\\n' \"$2\" \"$f\"
    cat -- \"$p\" || exit \"$code\"
    printf '\\n%s %s>\\n' \"$2\" \"$f\"
  fi
done
printf '%s end\\n' \"$2\"";

/// The two reward files' text (`reward.txt`, `reward.json`) printed by [`PRINT_REWARDS`]
/// with `marker`, and the output before them; `None` when the block is not whole and
/// alone at the end (cut, or mixed with output of something still running): the rewards
/// are then read through the engine.
pub(super) fn split_rewards(output: &[u8], marker: &str) -> Option<(Vec<u8>, [Option<String>; 2])> {
    let start = format!("\n{marker} rewards\n");
    let end = format!("{marker} end\n");
    let at = find(output, start.as_bytes())?;
    let mut rest = &output[at + start.len()..];
    let mut found = [None, None];
    while !rest.starts_with(end.as_bytes()) {
        let (slot, name) = if rest.starts_with(format!("{marker} <reward.txt\n").as_bytes()) {
            (0, "reward.txt")
        } else if rest.starts_with(format!("{marker} <reward.json\n").as_bytes()) {
            (1, "reward.json")
        } else {
            return None;
        };
        let open = format!("{marker} <{name}\n");
        let close = format!("\n{marker} {name}>\n");
        let body = &rest[open.len()..];
        let stop = find(body, close.as_bytes())?;
        if found[slot].is_some() {
            return None;
        }
        // Text or nothing, as a copy read through the engine would give it.
        found[slot] = String::from_utf8(body[..stop].to_vec()).ok();
        rest = &body[stop + close.len()..];
    }
    if rest.len() != end.len() {
        return None;
    }
    Some((output[..at].to_vec(), found))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, Option<&[u8]>, u32)]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, body, mode) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_mode(*mode);
            match body {
                Some(bytes) => {
                    header.set_size(bytes.len() as u64);
                    tar.append_data(&mut header, path, *bytes).unwrap();
                }
                None => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_size(0);
                    tar.append_data(&mut header, path, std::io::empty())
                        .unwrap();
                }
            }
        }
        tar.into_inner().unwrap()
    }

    /// Every byte value, quotes and backslashes, a mode and a nested folder come out of
    /// `sh` as they went in.
    #[test]
    fn the_script_recreates_folders_and_files_byte_for_byte() {
        let all: Vec<u8> = (0..=255u8).chain(*b"\\n'\"%b\\0101 $x `x`").collect();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("it's here");
        let rel = root
            .strip_prefix("/")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let tar = tar_of(&[
            (&rel, None, 0o755),
            (&format!("{rel}/sub"), None, 0o700),
            (&format!("{rel}/sub/all.bin"), Some(&all), 0o640),
            (&format!("{rel}/run.sh"), Some(b"echo hi\n"), 0o755),
            (&format!("{rel}/empty"), Some(b""), 0o644),
        ]);
        let script = unpack_script(&tar, SCRIPT_LIMIT).unwrap();
        for shell in ["sh", "bash"] {
            let _ = std::fs::remove_dir_all(&root);
            let ran = std::process::Command::new(shell)
                .args(["-c", &format!("set -e\n{script}")])
                .output()
                .unwrap();
            assert!(ran.status.success(), "{shell}: {ran:?}");
            assert_eq!(
                std::fs::read(root.join("sub/all.bin")).unwrap(),
                all,
                "{shell}"
            );
            assert_eq!(std::fs::read(root.join("run.sh")).unwrap(), b"echo hi\n");
            assert_eq!(std::fs::read(root.join("empty")).unwrap(), b"");
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &str| {
                std::fs::metadata(root.join(p))
                    .unwrap()
                    .permissions()
                    .mode()
            };
            assert_eq!(mode("sub") & 0o7777, 0o700);
            assert_eq!(mode("sub/all.bin") & 0o7777, 0o640);
            assert_eq!(mode("run.sh") & 0o7777, 0o755);
        }
        // Too large for the limit, or a link: the engine copies it.
        assert!(unpack_script(&tar, 64).is_none());
        let mut linked = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        linked.append_link(&mut header, "t/link", "/etc").unwrap();
        assert!(unpack_script(&linked.into_inner().unwrap(), SCRIPT_LIMIT).is_none());
    }

    #[test]
    fn rewards_are_read_from_a_whole_block_at_the_end_alone() {
        let m = "MARK";
        let out = b"PASS\n\nMARK rewards\nMARK <reward.txt\n1\n\nMARK reward.txt>\nMARK end\n";
        let (log, [txt, json]) = split_rewards(out, m).unwrap();
        assert_eq!(log, b"PASS\n");
        assert_eq!(txt.as_deref(), Some("1\n"));
        assert_eq!(json, None);
        let none = b"FAIL\n\nMARK rewards\nMARK end\n";
        assert_eq!(split_rewards(none, m).unwrap().1, [None, None]);
        // Both files, and a reward whose text holds a line like the marker's own.
        let both = b"\nMARK rewards\nMARK <reward.txt\n0\n\nMARK reward.txt>\nMARK <reward.json\n{\"a\": 1}\nMARK end\n\nMARK reward.json>\nMARK end\n";
        let (_, [txt, json]) = split_rewards(both, m).unwrap();
        assert_eq!(txt.as_deref(), Some("0\n"));
        assert_eq!(json.as_deref(), Some("{\"a\": 1}\nMARK end\n"));
        // Output of something still running mixed in, cut, or after the end: not trusted.
        let mixed = b"\nMARK rewards\nstray\nMARK <reward.txt\n1\n\nMARK reward.txt>\nMARK end\n";
        assert!(split_rewards(mixed, m).is_none());
        let cut = b"\nMARK rewards\nMARK <reward.txt\n1\n";
        assert!(split_rewards(cut, m).is_none());
        let after = b"\nMARK rewards\nMARK end\nlate output\n";
        assert!(split_rewards(after, m).is_none());
        assert!(split_rewards(b"no block\n", m).is_none());
    }
}
