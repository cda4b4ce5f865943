//! The crate boundaries hold: what runs inside the wall (`runner-sandbox-server`) links no
//! HTTP client, Docker client, MCP SDK, tree-sitter or command-line parser, the protocol
//! both sides share is plain data, and each host-side layer (permissions, providers, the
//! host sandbox, workspaces, the network, tools, the agent core, eval) links nothing above or
//! beside it. The compiler enforces this for the code as it
//! is; these tests catch a dependency added to a crate's manifest later, which would
//! quietly put that code inside the wall.

use std::process::Command;

/// The packages `cargo tree` lists for `package` (normal dependencies, to `depth`).
fn tree(package: &str, depth: Option<u32>) -> Vec<String> {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args([
        "tree",
        "--offline",
        "-e",
        "normal",
        "--prefix",
        "none",
        "-p",
        package,
    ])
    .current_dir(env!("CARGO_MANIFEST_DIR"));
    if let Some(d) = depth {
        cmd.args(["--depth", &d.to_string()]);
    }
    let out = cmd.output().expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Fails when `package` links any of `forbidden`, at any depth; `expected` is one package
/// it must link, so an empty or wrong tree cannot pass.
fn links_none(package: &str, expected: &str, forbidden: &[&str]) {
    let linked = tree(package, None);
    assert!(
        linked.iter().any(|p| p == expected),
        "{package} should link {expected}: {linked:?}"
    );
    for forbidden in forbidden {
        assert!(
            !linked.iter().any(|p| p == forbidden),
            "{package} links {forbidden}: {linked:?}"
        );
    }
}

#[test]
fn the_server_links_nothing_of_the_host_side() {
    links_none(
        "runner-sandbox-server",
        "landlock",
        &[
            "reqwest",
            "hyper",
            "bollard",
            "rmcp",
            "tree-sitter",
            "clap",
            "tokio",
            "runner",
            "runner-llm",
            "runner-permission",
        ],
    );
}

/// Permissions decide from rules and a command's syntax tree: no network, no engine, no
/// provider, no sandbox.
#[test]
fn permissions_link_no_network_engine_or_provider() {
    links_none(
        "runner-permission",
        "tree-sitter-bash",
        &[
            "reqwest",
            "hyper",
            "bollard",
            "rmcp",
            "clap",
            "runner",
            "runner-llm",
            "runner-protocol",
            "runner-sandbox-server",
        ],
    );
}

/// Providers speak HTTP to a model: they know nothing of tools' permissions, the sandbox or
/// Docker.
#[test]
fn providers_link_no_sandbox_engine_or_permissions() {
    links_none(
        "runner-llm",
        "reqwest",
        &[
            "bollard",
            "rmcp",
            "tree-sitter",
            "clap",
            "runner",
            "runner-permission",
            "runner-protocol",
            "runner-sandbox-server",
        ],
    );
}

#[test]
fn the_protocol_is_plain_data() {
    let mut direct = tree("runner-protocol", Some(1));
    direct.sort();
    assert_eq!(
        direct,
        ["base64", "runner-protocol", "serde", "serde_json"],
        "runner-protocol's direct dependencies"
    );
}

/// The host side of the wall starts servers and speaks the sandbox API: it decides nothing
/// (permissions), asks no model (providers) and parses no command line.
#[test]
fn the_host_sandbox_links_no_provider_permissions_or_cli() {
    links_none(
        "runner-sandbox",
        "bollard",
        &[
            "reqwest",
            "rmcp",
            "tree-sitter",
            "clap",
            "runner",
            "runner-llm",
            "runner-permission",
        ],
    );
}

/// Workspaces copy, compare and apply files: no network, no model, no permission rules.
#[test]
fn workspaces_link_no_network_provider_or_permissions() {
    links_none(
        "runner-workspace",
        "similar",
        &[
            "reqwest",
            "rmcp",
            "clap",
            "runner",
            "runner-llm",
            "runner-permission",
            "runner-network",
            "runner-tool",
        ],
    );
}

/// The allow-list's host side checks and relays connections; it runs no tool and asks no
/// model.
#[test]
fn the_network_layer_links_no_tool_provider_or_cli() {
    links_none(
        "runner-network",
        "runner-permission",
        &[
            "rmcp",
            "clap",
            "runner",
            "runner-llm",
            "runner-tool",
            "runner-workspace",
        ],
    );
}

/// Tools run behind the wall and ask the gate; the model that calls them is the agent's
/// business, so a tool cannot reach a provider or the command line.
#[test]
fn tools_link_no_provider_or_cli() {
    links_none(
        "runner-tool",
        "runner-sandbox",
        &["clap", "runner", "runner-llm"],
    );
}

/// The agent core (sessions, the loop, profiles) is a library the command line and the
/// evaluator drive: it links no command-line parser, nothing of eval, not the binary.
#[test]
fn the_agent_core_links_no_cli_or_eval() {
    links_none(
        "runner-agent",
        "runner-tool",
        &["clap", "runner", "runner-eval", "indicatif"],
    );
}

/// The evaluator drives the agent core; the command line drives it, not the other way.
#[test]
fn eval_links_no_cli() {
    links_none("runner-eval", "runner-agent", &["clap", "runner"]);
}

/// The MCP front end opens sessions through the agent core and serves their tools: it is
/// not a second command line, and nothing of the evaluator comes with it.
#[test]
fn the_mcp_front_end_links_no_cli_or_eval() {
    links_none(
        "runner-mcp-serve",
        "runner-agent",
        &["clap", "runner", "runner-eval", "indicatif"],
    );
}

/// The workspace as cargo sees it: each member's package name and its folder from the
/// repository's root (`""` for the root package).
fn workspace_members() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--offline",
            "--no-deps",
            "--format-version",
            "1",
        ])
        .current_dir(root)
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let members = meta["workspace_members"].as_array().expect("members");
    let mut found: Vec<(String, String)> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter(|p| members.contains(&p["id"]))
        .map(|p| {
            let manifest = std::path::Path::new(p["manifest_path"].as_str().expect("a path"));
            let dir = manifest.parent().expect("a folder");
            let rel = dir
                .strip_prefix(root)
                .expect("a member inside the repository");
            let name = p["name"].as_str().expect("a name").to_string();
            (name, rel.display().to_string())
        })
        .collect();
    found.sort();
    found
}

/// What DEVELOPMENT.md's `## Layout` (the one map of the workspace) gets wrong about
/// `members`: a crate the table leaves out or names without it existing, a `runner-…` in
/// the drawing that is no crate, a member's folder missing from the folder list, and a
/// folder listed there that `exists` says is not there.
fn layout_problems(
    doc: &str,
    members: &[(String, String)],
    exists: impl Fn(&str) -> bool,
) -> Vec<String> {
    let Some(start) = doc.find("\n## Layout\n") else {
        return vec!["DEVELOPMENT.md has no `## Layout` section".to_string()];
    };
    let section = &doc[start + 1..];
    let section = &section[..section[1..].find("\n## ").map_or(section.len(), |e| e + 1)];
    let names: std::collections::BTreeSet<&str> = members.iter().map(|(n, _)| n.as_str()).collect();
    let crate_word = regex::Regex::new(r"\brunner(?:-[a-z]+)+\b").expect("pattern");
    let tick = regex::Regex::new(r"`([^`]+)`").expect("pattern");

    let mut problems = Vec::new();
    let mut in_table = std::collections::BTreeSet::new();
    let mut listed = std::collections::BTreeSet::new();
    let mut in_fence = false;
    for line in section.lines() {
        if line.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            for word in crate_word.find_iter(line) {
                if !names.contains(word.as_str()) {
                    problems.push(format!(
                        "the drawing names {}, which is no crate",
                        word.as_str()
                    ));
                }
            }
            let path = line.split_whitespace().next().unwrap_or("");
            if !line.starts_with(' ') && path.contains('/') {
                if !exists(path) {
                    problems.push(format!(
                        "the folder list names {path}, which does not exist"
                    ));
                }
                listed.insert(path.trim_end_matches('/').to_string());
            }
        } else if let Some(cell) = line.strip_prefix("| `runner") {
            let cell = format!("`runner{}", cell.split('|').next().unwrap_or(""));
            for name in tick.captures_iter(&cell) {
                in_table.insert(name[1].to_string());
            }
        }
    }
    for (name, dir) in members {
        if !in_table.contains(name) {
            problems.push(format!("the crate table leaves out {name} ({dir})"));
        }
        if !dir.is_empty() && !listed.contains(dir) {
            problems.push(format!("the folder list leaves out {dir}/ ({name})"));
        }
    }
    for name in &in_table {
        if !names.contains(name.as_str()) {
            problems.push(format!("the crate table names {name}, which is no crate"));
        }
    }
    problems
}

/// DEVELOPMENT.md's layout is the one map of where things live (ARCHITECTURE.md links to it
/// and keeps none of its own): it names every crate of the workspace and nothing else, and
/// lists every crate's folder and only folders that exist.
#[test]
fn the_layout_doc_maps_the_real_workspace() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let members = workspace_members();
    assert!(
        members.iter().any(|(n, d)| n == "runner" && d.is_empty())
            && members.iter().any(|(n, _)| n == "runner-sandbox-server"),
        "cargo metadata listed {members:?}"
    );
    let doc = std::fs::read_to_string(root.join("docs/DEVELOPMENT.md")).expect("read the doc");
    let problems = layout_problems(&doc, &members, |p| root.join(p).exists());
    assert!(
        problems.is_empty(),
        "docs/DEVELOPMENT.md's layout disagrees with the workspace:\n{}",
        problems.join("\n")
    );
    let architecture =
        std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("read the doc");
    assert!(
        architecture.contains("(DEVELOPMENT.md#layout)"),
        "ARCHITECTURE.md should point at the one map, DEVELOPMENT.md#layout"
    );
    assert!(
        !architecture
            .lines()
            .any(|l| l.starts_with("crates/") || l.starts_with("  core/")),
        "ARCHITECTURE.md keeps a folder map of its own; the map is DEVELOPMENT.md's"
    );
}

/// The map's check finds each kind of disagreement, and only those.
#[test]
fn the_layout_check_catches_what_it_is_for() {
    let members = [
        ("runner".to_string(), String::new()),
        ("runner-a".to_string(), "crates/a".to_string()),
        ("runner-b".to_string(), "crates/b".to_string()),
    ];
    let doc = "\
# Dev\n\n## Layout\n\n\
```\nrunner\n└── runner-a\n    └── runner-ghost\n```\n\n\
| crate | what |\n|---|---|\n\
| `runner-a`, `runner-gone` | a |\n| `runner` (the root) | cli |\n\n\
```\ncrates/a/    a\n             continued, crates/x/ in prose\ncrates/old/  gone\nsrc/cli/     cli\n```\n\n\
## Next\n\n| `runner-b` | outside the section |\n";
    let found = layout_problems(doc, &members, |p| p != "crates/old/");
    let expect = [
        "the drawing names runner-ghost",
        "the crate table leaves out runner-b",
        "the crate table names runner-gone",
        "the folder list leaves out crates/b/",
        "the folder list names crates/old/, which does not exist",
    ];
    for e in expect {
        assert!(
            found.iter().any(|f| f.contains(e)),
            "missed: {e}\nfound: {found:#?}"
        );
    }
    assert_eq!(found.len(), expect.len(), "false alarms: {found:#?}");
}

/// apply_patch's language and edit's replacers are pure text: they link nothing at all, so
/// the fuzzer and the edit bench build them alone.
#[test]
fn the_text_engines_link_nothing() {
    for package in ["runner-patch", "runner-edit"] {
        assert_eq!(
            tree(package, Some(1)),
            [package],
            "{package}'s dependencies"
        );
    }
}

/// The fuzzer links the decoders it fuzzes (the patch parser among them), not the tools
/// around them with their MCP SDK.
#[test]
fn the_fuzzer_links_no_tool_or_mcp() {
    links_none(
        "runner-fuzz",
        "runner-patch",
        &["runner-tool", "rmcp", "runner-agent", "runner"],
    );
}

/// Two choices that keep a clean build short are not in any manifest's dependency list, so
/// a routine `cargo update` or a feature added back would undo them unseen: the lock holds
/// `idna_adapter` on 1.1 (url's IDNA on unicode-rs, not ICU4X's twenty crates and derive
/// macros), and rmcp's default `macros` stays off (its proc-macro and darling).
#[test]
fn the_build_keeps_out_icu_and_rmcps_macros() {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock"))
        .expect("read Cargo.lock");
    for package in [
        "icu_normalizer",
        "zerofrom-derive",
        "rmcp-macros",
        "darling",
    ] {
        assert!(
            !lock.contains(&format!("name = \"{package}\"\n")),
            "Cargo.lock has {package} again: `cargo update -p idna_adapter --precise 1.1.0` \
             puts url's IDNA back on unicode-rs; rmcp needs `default-features = false` \
             (docs/DEVELOPMENT.md, the compile's figures)"
        );
    }
}

/// Doc tests are off in every crate (`doctest = false`): `cargo test` would otherwise run
/// rustdoc over each of them, about ten seconds of CI for no test at all. A doc comment's
/// code block that rustdoc would compile as Rust would then never run, so none may be
/// written: an example is a test, or its block says what it is (```text, ```sh, …).
#[test]
fn no_doc_comment_holds_a_doc_test() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut manifests = vec![root.join("Cargo.toml")];
    let mut sources = vec![root.join("src")];
    for crate_dir in std::fs::read_dir(root.join("crates")).expect("read crates/") {
        let dir = crate_dir.expect("an entry of crates/").path();
        if dir.join("src/lib.rs").exists() {
            manifests.push(dir.join("Cargo.toml"));
        }
        sources.push(dir.join("src"));
    }
    let mut problems = Vec::new();
    for manifest in &manifests {
        let text = std::fs::read_to_string(manifest).expect("read a manifest");
        if !text.contains("[lib]\n") || !text.contains("\ndoctest = false\n") {
            problems.push(format!(
                "{}: no `[lib] doctest = false`",
                manifest.display()
            ));
        }
    }
    while let Some(path) = sources.pop() {
        if path.is_dir() {
            sources.extend(
                std::fs::read_dir(&path)
                    .expect("read a folder")
                    .map(|e| e.expect("a folder's entry").path()),
            );
        } else if path.extension().is_some_and(|e| e == "rs") {
            problems.extend(doc_tests_in(&path));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The doc-comment code blocks of `path` that rustdoc would compile: a fence with no
/// language or a Rust one (`rust`, `ignore`, `no_run`, `should_panic`, `compile_fail`).
fn doc_tests_in(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("read a source file");
    let mut open = false;
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_start();
        let Some(doc) = line
            .strip_prefix("///")
            .or_else(|| line.strip_prefix("//!"))
        else {
            continue;
        };
        let Some(info) = doc.trim().strip_prefix("```") else {
            continue;
        };
        if !open {
            let lang = info.split(',').next().unwrap_or_default().trim();
            let rust = [
                "",
                "rust",
                "ignore",
                "no_run",
                "should_panic",
                "compile_fail",
            ];
            if rust.contains(&lang) {
                found.push(format!(
                    "{}:{}: a doc test that would never run",
                    path.display(),
                    n + 1
                ));
            }
        }
        open = !open;
    }
    found
}

#[test]
fn the_doc_test_check_catches_a_rust_block() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let file = dir.path().join("lib.rs");
    std::fs::write(
        &file,
        "//! ```text\n//! fine\n//! ```\n/// ```\n/// assert!(true);\n/// ```\npub fn f() {}\n",
    )
    .expect("write");
    let found = doc_tests_in(&file);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].ends_with("lib.rs:4: a doc test that would never run"),
        "{found:?}"
    );
}
