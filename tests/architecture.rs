//! The crate boundaries hold: what runs inside the wall (`runner-sandbox-server`) links no
//! HTTP client, Docker client, MCP SDK, tree-sitter or command-line parser, and the
//! protocol both sides share is plain data. The compiler enforces this for the code as it
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

#[test]
fn the_server_links_nothing_of_the_host_side() {
    let linked = tree("runner-sandbox-server", None);
    assert!(linked.contains(&"landlock".to_string()), "{linked:?}");
    for forbidden in [
        "reqwest",
        "hyper",
        "bollard",
        "rmcp",
        "tree-sitter",
        "clap",
        "tokio",
        "runner",
    ] {
        assert!(
            !linked.iter().any(|p| p == forbidden),
            "runner-sandbox-server links {forbidden}: {linked:?}"
        );
    }
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
