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
