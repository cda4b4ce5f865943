//! The documentation points only at things that exist. `README.md` and every `docs/*.md`
//! name files of this repository, in links and in backticks, and link to each other's
//! sections. Files move (the crates split out of `src/`), sections move between files, and
//! nothing else notices: a reader follows a path to nowhere. So every relative link must
//! reach a file inside the repository (a link that leaves it would depend on how the
//! checkout happens to sit on one machine), every `#anchor` must be a heading of its target
//! by GitHub's slug rule, and every backticked path that names a repository file must exist.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

/// Where the documents live: the root package's manifest folder is the repository's root.
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents this test holds to account: the README and every Markdown file in docs/.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![root.join("README.md")];
    if let Ok(entries) = std::fs::read_dir(root.join("docs")) {
        let mut found: Vec<PathBuf> = entries
            .map(|e| e.expect("read docs/").path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        found.sort();
        docs.extend(found);
    }
    docs
}

/// The prose of a Markdown file, cut into blocks (paragraphs, list items run together),
/// with fenced code blocks left out: a path or a `#` line inside a fence is an example, not
/// a link or a heading. Each block keeps the line it starts on, for the error message.
fn prose_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    let mut fence: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(f) = &fence {
            if trimmed.starts_with(f.as_str()) {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let marker: String = trimmed
                .chars()
                .take_while(|c| *c == '`' || *c == '~')
                .collect();
            fence = Some(marker);
            if !current.is_empty() {
                blocks.push((start, std::mem::take(&mut current)));
            }
            continue;
        }
        if trimmed.is_empty() {
            if !current.is_empty() {
                blocks.push((start, std::mem::take(&mut current)));
            }
            continue;
        }
        if current.is_empty() {
            start = i + 1;
        }
        current.push_str(line);
        current.push('\n');
    }
    if !current.is_empty() {
        blocks.push((start, current));
    }
    blocks
}

/// Splits a block into its code spans and the text around them, as CommonMark does: a run
/// of N backticks opens a span that the next run of exactly N closes; a run with no closing
/// partner is literal text.
fn code_spans(block: &str) -> (Vec<String>, String) {
    let bytes = block.as_bytes();
    let mut spans = Vec::new();
    let mut rest = String::new();
    let mut i = 0;
    let run_at = |at: usize| bytes[at..].iter().take_while(|b| **b == b'`').count();
    while i < bytes.len() {
        if bytes[i] != b'`' {
            let next = block[i..].find('`').map_or(block.len(), |n| i + n);
            rest.push_str(&block[i..next]);
            i = next;
            continue;
        }
        let open = run_at(i);
        let mut j = i + open;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let run = run_at(j);
                if run == open {
                    close = Some(j);
                    break;
                }
                j += run;
            } else {
                j += 1;
            }
        }
        match close {
            Some(c) => {
                let inner = block[i + open..c].replace('\n', " ");
                spans.push(inner.trim().to_string());
                rest.push(' ');
                i = c + open;
            }
            None => {
                rest.push_str(&block[i..i + open]);
                i += open;
            }
        }
    }
    (spans, rest)
}

/// GitHub's anchor for a heading: the rendered text (code spans and emphasis reduced to
/// their letters, a link to its text), lower-cased, every character that is not a letter,
/// digit, space, `-` or `_` dropped, and each space made a `-`.
fn slug(heading: &str) -> String {
    let link = regex::Regex::new(r"\[([^\]]*)\]\([^)]*\)").expect("pattern");
    let text = link.replace_all(heading, "$1");
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a Markdown file offers: its ATX headings (outside fences), slugged, with
/// GitHub's `-1`, `-2`, … for a slug already taken.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fence = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = !fence;
            continue;
        }
        if fence || line.starts_with("    ") {
            continue;
        }
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) {
            continue;
        }
        let Some(title) = trimmed[hashes..].strip_prefix(' ') else {
            continue;
        };
        let base = slug(title.trim_end_matches('#'));
        let mut candidate = base.clone();
        let mut n = 0;
        while seen.contains(&candidate) {
            n += 1;
            candidate = format!("{base}-{n}");
        }
        seen.insert(candidate);
    }
    seen
}

/// `path` with `.` and `..` taken away lexically; `None` when a `..` climbs above the start,
/// which for a path relative to the repository's root means it leaves the repository.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// The top-level entries a backticked path must start with to count as a repository path.
/// A path elsewhere (`.runner/tools/`, `/etc/ssl/…`, `$XDG_DATA_HOME/…`) is about the
/// user's machine or a sandbox, not this repository.
const TOP_LEVEL: &[&str] = &[
    "crates/",
    "src/",
    "tests/",
    "images/",
    "profiles/",
    "examples/",
    "benches/",
    "docs/",
    ".ci/",
    ".cargo/",
    "proptest-regressions/",
    "Cargo.toml",
    "Cargo.lock",
    "Dockerfile",
    "Dockerfile.build",
    "README.md",
    "build.rs",
    ".dockerignore",
];

/// Endings of a file name that make a backticked word a path even without a `/`.
const EXTENSIONS: &[&str] = &[
    ".rs", ".toml", ".md", ".txt", ".sh", ".json", ".jsonl", ".snap", ".yaml", ".yml", ".lock",
];

/// Words that stand for a name the reader fills in (`crates/fuzz/regressions/NAME/`).
const PLACEHOLDERS: &[&str] = &["NAME", "ID", "FILE", "DIR", "PATH", "HOST", "SESSION"];

/// The repository path a code span names, if it names one: it starts with a top-level
/// entry, has a `/` or a known ending, and has no placeholder, wildcard or space in it.
fn repository_path(span: &str) -> Option<&str> {
    if span.contains(|c: char| c.is_whitespace() || "<>*…${}|?".contains(c)) {
        return None;
    }
    if !TOP_LEVEL.iter().any(|t| span.starts_with(t)) {
        return None;
    }
    if !span.contains('/')
        && !EXTENSIONS.iter().any(|e| span.ends_with(e))
        && !TOP_LEVEL.contains(&span)
    {
        return None;
    }
    let placeholder = span
        .split(['/', '.', '-', '_'])
        .any(|word| PLACEHOLDERS.contains(&word));
    (!placeholder).then_some(span)
}

/// What is wrong with one document: each relative link that leaves the repository, names a
/// missing file or a missing heading, and each backticked repository path that is missing.
/// `rel` is the document's path from the repository's root, for the messages.
fn problems(root: &Path, rel: &Path, text: &str) -> Vec<String> {
    let link = regex::Regex::new(r#"\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)"#).expect("pattern");
    let reference = regex::Regex::new(r"(?m)^\s*\[[^\]]+\]:\s+(\S+)").expect("pattern");
    let here = rel.parent().unwrap_or(Path::new(""));
    let mut found = Vec::new();
    for (line, block) in prose_blocks(text) {
        let (spans, rest) = code_spans(&block);
        let targets = link
            .captures_iter(&rest)
            .chain(reference.captures_iter(&rest))
            .map(|c| c[1].to_string());
        for target in targets {
            if let Some(problem) = check_link(root, rel, here, text, &target) {
                found.push(format!("{}:{line}: {problem}", rel.display()));
            }
        }
        let missing = spans
            .iter()
            .filter_map(|span| repository_path(span))
            .filter(|path| !root.join(path).exists());
        for path in missing {
            found.push(format!(
                "{}:{line}: `{path}` names a repository path that does not exist",
                rel.display()
            ));
        }
    }
    found
}

/// One link's problem, if it has one. Links with a scheme (`https:`, `mailto:`) are the
/// web's and not checked here.
fn check_link(root: &Path, rel: &Path, here: &Path, text: &str, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let (file, body) = if path.is_empty() {
        (rel.to_path_buf(), text.to_string())
    } else {
        let Some(file) = normalize(&here.join(path)) else {
            return Some(format!(
                "link `{target}` leaves the repository: the docs must point only inside it"
            ));
        };
        let full = root.join(&file);
        if !full.exists() {
            return Some(format!(
                "link `{target}`: {} does not exist",
                file.display()
            ));
        }
        (file, std::fs::read_to_string(&full).unwrap_or_default())
    };
    let anchor = anchor?;
    let is_markdown = file.extension().is_some_and(|e| e == "md");
    (is_markdown && !anchors(&body).contains(anchor)).then(|| {
        format!(
            "link `{target}`: {} has no heading whose anchor is #{anchor}",
            file.display()
        )
    })
}

#[test]
fn every_link_and_named_path_in_the_docs_exists() {
    let root = repo();
    let mut all = Vec::new();
    for doc in documents(&root) {
        let rel = doc
            .strip_prefix(&root)
            .expect("inside the repository")
            .to_path_buf();
        let text =
            std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("read {}: {e}", doc.display()));
        all.extend(problems(&root, &rel, &text));
    }
    assert!(
        all.is_empty(),
        "{} broken references in the docs (fix the path, or the link's anchor):\n{}",
        all.len(),
        all.join("\n")
    );
}

#[test]
fn the_readme_maps_every_file_in_docs() {
    let root = repo();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README.md");
    let docs = documents(&root);
    assert!(docs.len() > 1, "docs/ holds no Markdown file");
    let missing: Vec<String> = docs[1..]
        .iter()
        .map(|d| d.strip_prefix(&root).expect("inside").display().to_string())
        .filter(|d| !readme.contains(&format!("]({d}")))
        .collect();
    assert!(
        missing.is_empty(),
        "README.md links none of: {} (its map of docs/ should name each)",
        missing.join(", ")
    );
}

#[test]
fn the_checker_catches_what_it_is_for() {
    // A scratch repository: one real file with a heading, and a document that gets each
    // kind of reference right once and wrong once.
    let dir = std::env::temp_dir().join(format!("runner-docs-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("docs")).expect("scratch");
    std::fs::create_dir_all(dir.join("crates/protocol/src")).expect("scratch");
    std::fs::write(dir.join("crates/protocol/src/lib.rs"), "").expect("scratch");
    std::fs::write(
        dir.join("docs/GUIDE.md"),
        "# Guide\n\n### gVisor (`--runtime runsc`)\n",
    )
    .expect("scratch");
    let doc = "\
# Top\n\n\
Good: [g](docs/GUIDE.md#gvisor---runtime-runsc), [t](#top), `crates/protocol/src/lib.rs`,\n\
`crates/fuzz/regressions/NAME/`, `.runner/tools/x.toml`, `cargo test --test all`.\n\n\
Bad: [a](../shared/ARCHITECTURE.md), [m](docs/GONE.md), [h](docs/GUIDE.md#sandboxes),\n\
[s](#nowhere), `src/sandbox/api.rs`.\n\n\
```sh\n\
# not a heading; `src/in/a/fence.rs` is an example\n\
```\n";
    let found = problems(&dir, Path::new("README.md"), doc);
    std::fs::remove_dir_all(&dir).ok();
    let expect = [
        "`../shared/ARCHITECTURE.md` leaves the repository",
        "docs/GONE.md does not exist",
        "docs/GUIDE.md has no heading whose anchor is #sandboxes",
        "README.md has no heading whose anchor is #nowhere",
        "`src/sandbox/api.rs` names a repository path",
    ];
    for e in expect {
        assert!(
            found.iter().any(|f| f.contains(e)),
            "missed: {e}\nfound: {found:#?}"
        );
    }
    assert_eq!(found.len(), expect.len(), "false alarms: {found:#?}");
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug("gVisor (`--runtime runsc`)"), "gvisor---runtime-runsc");
    assert_eq!(slug("Language servers (`lsp`)"), "language-servers-lsp");
    assert_eq!(
        slug("The network: an allow-list"),
        "the-network-an-allow-list"
    );
    assert_eq!(slug("runner in a container"), "runner-in-a-container");
    let twice = anchors("# Limits\n\n## Limits\n\n```\n# Not\n```\n");
    assert!(twice.contains("limits") && twice.contains("limits-1"));
    assert!(!twice.contains("not"), "a line in a fence is no heading");
}
