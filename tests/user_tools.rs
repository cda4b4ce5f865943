//! The user's own tools (`.runner/tools/NAME.toml`): arguments as JSON on standard input,
//! standard output as the result, a non-zero exit as a failure, the same gate (the tool's
//! name is its permission key, its command a deny-only bash spelling), and the same wall:
//! a project's tool runs inside the sandbox and cannot reach the host's home directory.

use common::project::Project;

use std::path::Path;
use std::process::Output;

use serde_json::Value;

/// A worktree with `tools` (name, TOML) in `.runner/tools/`; `outside` stands for the
/// host's home, with a private key in it.
fn project(tools: &[(&str, &str)]) -> Project {
    let p = Project::new("repo");
    std::fs::create_dir_all(p.root.join(".runner/tools")).unwrap();
    std::fs::create_dir_all(p.outside.join(".ssh")).unwrap();
    std::fs::write(p.outside.join(".ssh/id_ed25519"), "PRIVATE KEY MATERIAL\n").unwrap();
    p.file("notes.txt", "inside the worktree\n");
    for (name, text) in tools {
        p.file(&format!(".runner/tools/{name}.toml"), text);
    }
    p
}

/// `runner ARGS --root WORKTREE` with `HOME` at the folder outside.
fn runner(p: &Project, args: &[&str]) -> Output {
    p.command()
        .args(args)
        .arg("--root")
        .arg(&p.root)
        .env("HOME", &p.outside)
        .output()
        .unwrap()
}

fn call(p: &Project, backend: &str, tool: &str, args: &str, extra: &[&str]) -> (Output, Value) {
    let mut all = vec!["tool", "call", tool, args, "--json", "--sandbox", backend];
    all.extend_from_slice(extra);
    let out = runner(p, &all);
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, v)
}

const SHOUT: &str = r#"
description = "Says the text back, louder."
command = "tr a-z A-Z"
[parameters]
type = "object"
required = ["text"]
[parameters.properties.text]
type = "string"
"#;

fn peek(path: &Path) -> String {
    format!(
        "description = \"Reads a file.\"\ncommand = \"cat {} && echo READ\"\n",
        path.display()
    )
}

fn tools_on(backend: &str) {
    let p = project(&[("shout", SHOUT)]);
    let key = p.outside.join(".ssh/id_ed25519");
    std::fs::write(p.root.join(".runner/tools/peek_home.toml"), peek(&key)).unwrap();
    std::fs::write(
        p.root.join(".runner/tools/peek_notes.toml"),
        peek(&p.root.join("notes.txt")),
    )
    .unwrap();
    std::fs::write(
        p.root.join(".runner/tools/broken.toml"),
        "description = \"Fails.\"\ncommand = \"echo half; echo why >&2; exit 3\"\n",
    )
    .unwrap();

    // The arguments arrive as JSON on standard input; standard output is the result.
    let (out, v) = call(&p, backend, "shout", r#"{"text":"hello"}"#, &[]);
    assert_eq!(out.status.code(), Some(0), "{backend}: {out:?}");
    assert_eq!(v["output"], r#"{"TEXT":"HELLO"}"#, "{backend}: {v}");

    // A non-zero exit is a failure, with the output as the message.
    let (out, v) = call(&p, backend, "broken", "{}", &[]);
    assert_eq!(out.status.code(), Some(1), "{backend}: {v}");
    let e = v["error"].as_str().unwrap();
    assert!(
        e.contains("exited with 3") && e.contains("half") && e.contains("why"),
        "{e}"
    );

    // Behind the wall: the worktree is there, the host's home is not.
    let (out, v) = call(&p, backend, "peek_notes", "{}", &["--ask", "allow"]);
    assert_eq!(out.status.code(), Some(0), "{backend}: {v}");
    assert!(
        v["output"]
            .as_str()
            .unwrap()
            .contains("inside the worktree")
    );
    let (out, v) = call(&p, backend, "peek_home", "{}", &["--ask", "allow"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{backend}: the home was read: {v}"
    );
    let text = v.to_string();
    assert!(
        !text.contains("PRIVATE KEY MATERIAL") && !text.contains("READ\\n"),
        "{text}"
    );

    // The tool's name is its permission key.
    let deny = p.data.join("deny.toml");
    std::fs::create_dir_all(&p.data).unwrap();
    std::fs::write(&deny, "[permission]\nshout = \"deny\"\n").unwrap();
    let d = deny.display().to_string();
    let (out, v) = call(&p, backend, "shout", r#"{"text":"x"}"#, &["--config", &d]);
    assert_eq!(out.status.code(), Some(3), "{backend}: {v}");
    // A command denied to bash is not let through by wrapping it in a tool.
    std::fs::write(&deny, "[permission.bash]\n\"tr *\" = \"deny\"\n").unwrap();
    let (out, v) = call(&p, backend, "shout", r#"{"text":"x"}"#, &["--config", &d]);
    assert_eq!(out.status.code(), Some(3), "{backend}: {v}");
}

#[test]
fn project_tools_run_behind_the_landlock_wall_and_the_gate() {
    tools_on("landlock");
}

#[test]
fn project_tools_run_behind_the_docker_wall_and_the_gate() {
    common::engine::docker();
    tools_on("docker");
}

#[test]
fn tool_list_shows_them_beside_the_built_ins_and_names_a_broken_file() {
    let p = project(&[
        ("shout", SHOUT),
        ("bash", SHOUT),
        ("nonsense", "command = 1\n"),
    ]);
    let out = runner(&p, &["tool", "list", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let shout = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "shout")
        .expect("the project's tool is listed");
    assert_eq!(shout["description"], "Says the text back, louder.");
    assert_eq!(shout["parameters"]["properties"]["text"]["type"], "string");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nonsense.toml"), "{err}");
    assert!(err.contains("bash.toml") && err.contains("hidden"), "{err}");
    // The built-in bash is still the built-in one.
    let bash = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "bash")
        .unwrap();
    assert_ne!(bash["description"], "Says the text back, louder.");
}

/// A tool whose command prints 300 MB: what reaches the host is the capture limit's
/// worth (the sandbox keeps a head and a tail, and the host refuses more than twice the
/// limit from a server that ignores it), so runner's memory stays far below the flood.
#[test]
fn a_tool_that_floods_its_output_leaves_the_hosts_memory_flat() {
    let p = project(&[(
        "flood",
        "description = \"prints a lot\"\ncommand = \"head -c 314572800 /dev/zero | tr '\\\\0' x; echo; echo end\"\n",
    )]);
    let (out, peak_kib) = crate::hooks::run_measured(
        p.command()
            .args([
                "tool",
                "call",
                "flood",
                "{}",
                "--json",
                "--sandbox",
                "landlock",
            ])
            .args(["--ask", "allow", "--root"])
            .arg(&p.root)
            .env("HOME", &p.outside),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["metadata"]["exit"], 0, "{v}");
    assert_eq!(v["metadata"]["truncated"], true, "{v}");
    assert!(
        peak_kib < 200 << 10,
        "runner peaked at {peak_kib} KiB against 300 MB of output"
    );
}
