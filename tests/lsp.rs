//! `lsp` with a real language server (Debian's `pylsp`, installed if missing; in docker,
//! the `dev` image's) started inside the wall: its answers on none, landlock and docker, the
//! errors a model can act on, the tool not offered where no server can run, and an attack:
//! a server told to look outside the worktree (`PYTHONPATH` at a folder beside it) finds
//! nothing there behind landlock or docker, while the same server without a wall does (the
//! control). And diagnostics: an edit that
//! breaks a file comes back with the server's errors.

use common::project::Project;

use std::process::Output;

use serde_json::{Value, json};

/// A worktree with two Python files (b.py calls a.py's `greet`) and, beside it, a module
/// the worktree must not see.
fn project() -> Project {
    common::engine::ensure_package("python3-pylsp", "/usr/bin/pylsp");
    // pylsp reports errors through pyflakes, which Debian only suggests.
    common::engine::ensure_package(
        "python3-pyflakes",
        "/usr/lib/python3/dist-packages/pyflakes/__init__.py",
    );
    let p = Project::new("repo");
    let (root, outside) = (&p.root, &p.outside);
    std::fs::write(
        root.join("a.py"),
        "def greet(name):\n    \"\"\"Say hello to NAME.\"\"\"\n    return \"hi \" + name\n",
    )
    .unwrap();
    std::fs::write(
        root.join("b.py"),
        "from a import greet\n\nprint(greet(\"x\"))\n\nimport secretmod\nsecretmod.leak()\n",
    )
    .unwrap();
    std::fs::write(
        outside.join("secretmod.py"),
        "def leak():\n    return 'HOST SECRET'\n",
    )
    .unwrap();
    p
}

/// `runner tool call lsp ARGS --json` on `backend`, with `extra` flags.
fn lsp(p: &Project, backend: &str, args: Value, extra: &[&str]) -> (Output, Value) {
    let a = args.to_string();
    let mut all = vec!["tool", "call", "lsp", &a, "--json", "--sandbox", backend];
    all.extend_from_slice(extra);
    let out = p.run(&all);
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, v)
}

fn at(op: &str, file: &str, line: u64, character: u64) -> Value {
    json!({"operation": op, "filePath": file, "line": line, "character": character})
}

/// The file a location result points into.
fn target(v: &Value) -> String {
    let output: Value =
        serde_json::from_str(v["output"].as_str().unwrap_or("null")).unwrap_or(Value::Null);
    output[0]["uri"].as_str().unwrap_or_default().to_string()
}

/// `backend`'s flags: the docker wall runs the `dev` image, which has the servers.
fn flags(backend: &str) -> Vec<&'static str> {
    match backend {
        "docker" => vec!["--image", common::engine::dev_image()],
        _ => Vec::new(),
    }
}

fn answers_on(backend: &str) {
    let p = project();
    let extra = flags(backend);
    let lsp = |p: &Project, backend: &str, args: Value, more: &[&str]| {
        let all: Vec<&str> = extra.iter().copied().chain(more.iter().copied()).collect();
        lsp(p, backend, args, &all)
    };
    // `greet` in `print(greet("x"))`: line 3, character 7, as an editor counts.
    let (out, v) = lsp(&p, backend, at("goToDefinition", "b.py", 3, 7), &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(target(&v).ends_with("/repo/a.py"), "{v}");
    assert_eq!(v["metadata"]["server"], "pylsp");

    let (_, v) = lsp(&p, backend, at("hover", "b.py", 3, 7), &[]);
    assert!(
        v["output"].as_str().unwrap().contains("Say hello to NAME."),
        "{v}"
    );

    let (_, v) = lsp(&p, backend, at("documentSymbol", "a.py", 1, 1), &[]);
    assert!(v["output"].as_str().unwrap().contains("\"greet\""), "{v}");

    let (_, v) = lsp(&p, backend, at("findReferences", "a.py", 1, 5), &[]);
    let refs = v["output"].as_str().unwrap();
    assert!(refs.contains("a.py") && refs.contains("b.py"), "{v}");

    // On an empty line: nothing, said so.
    let (out, v) = lsp(&p, backend, at("hover", "b.py", 2, 1), &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(v["output"], "No results found for hover", "{v}");

    // Errors the model can act on.
    let (_, v) = lsp(&p, backend, at("hover", "nope.py", 1, 1), &[]);
    assert!(
        v["error"].as_str().unwrap().starts_with("File not found"),
        "{v}"
    );
    std::fs::write(p.root.join("notes.xyz"), "x\n").unwrap();
    let (_, v) = lsp(&p, backend, at("hover", "notes.xyz", 1, 1), &[]);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("No language server is available for .xyz files"),
        "{v}"
    );
}

#[test]
fn a_language_server_answers_from_inside_no_wall() {
    answers_on("none");
}

/// In docker the server runs from the `dev` image: the host's pylsp is not what answers.
#[test]
fn a_language_server_answers_from_behind_the_docker_wall() {
    answers_on("docker");
}

#[test]
fn a_language_server_answers_from_behind_the_landlock_wall() {
    answers_on("landlock");
}

/// Where no server can run (every one disabled here), `lsp` is not offered at all.
#[test]
fn lsp_is_not_offered_without_a_server() {
    let p = project();
    let config = p.data.join("off.json");
    std::fs::write(&config, r#"{"lsp": false}"#).unwrap();
    let c = config.display().to_string();
    let (out, v) = lsp(&p, "landlock", at("hover", "b.py", 3, 7), &["--config", &c]);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("Unknown tool"),
        "{v}"
    );
}

/// A language server runs what the repository configures; behind landlock it still sees
/// only the worktree. Told to import from a folder beside it (`PYTHONPATH`), it finds the
/// module without a wall and nothing behind landlock.
#[test]
fn attack_a_language_server_cannot_read_outside_the_worktree() {
    let p = project();
    let config = p.data.join("lsp.toml");
    std::fs::write(
        &config,
        format!(
            "[lsp.pylsp]\ncommand = [\"pylsp\"]\nextensions = [\".py\"]\nenv = {{ PYTHONPATH = \"{}\" }}\n",
            p.outside.display()
        ),
    )
    .unwrap();
    let c = config.display().to_string();
    // `leak` in `secretmod.leak()`: line 6, character 11.
    let (out, v) = lsp(
        &p,
        "none",
        at("goToDefinition", "b.py", 6, 11),
        &["--config", &c],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        target(&v).ends_with("/outside/secretmod.py"),
        "control: {v}"
    );

    for backend in ["landlock", "docker"] {
        let mut extra = flags(backend);
        extra.extend(["--config", &c]);
        let (out, v) = lsp(&p, backend, at("goToDefinition", "b.py", 6, 11), &extra);
        assert_eq!(out.status.code(), Some(0), "{backend}: {out:?}");
        assert_eq!(v["metadata"]["server"], "pylsp", "{backend}: {v}");
        let output = v["output"].as_str().unwrap_or_default();
        assert!(
            !output.contains("secretmod.py") && !output.contains("HOST SECRET"),
            "{backend}: the server read outside the worktree: {v}"
        );
    }
}

/// `runner tool call TOOL ARGS --json` on landlock.
fn call(p: &Project, tool: &str, args: Value) -> Value {
    let a = args.to_string();
    let out = p.run(&["tool", "call", tool, &a, "--json", "--sandbox", "landlock"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// After `write`, `edit` and `apply_patch`, the language server's errors in the file come
/// back with the output (1-based positions); a clean file and a file no server handles
/// come back as they always did.
#[test]
fn edits_come_back_with_the_servers_errors() {
    let p = project();
    let v = call(
        &p,
        "write",
        json!({"filePath": "c.py", "content": "def f(:\n    return 1\n"}),
    );
    let out = v["output"].as_str().unwrap();
    assert!(out.starts_with("Wrote file successfully."), "{out}");
    assert!(out.contains("reports errors in this file"), "{out}");
    assert!(
        out.contains(&format!(
            "<diagnostics file=\"{}\">",
            p.root.join("c.py").display()
        )),
        "{out}"
    );
    assert!(out.contains("ERROR [1:"), "{out}");

    let v = call(
        &p,
        "edit",
        json!({"filePath": "a.py", "oldString": "return \"hi \" + name", "newString": "return \"hi \" + nobody"}),
    );
    let out = v["output"].as_str().unwrap();
    assert!(
        out.contains("ERROR [3:20] undefined name 'nobody'"),
        "{out}"
    );

    let patch = "*** Begin Patch\n*** Add File: d.py\n+print(missing)\n*** End Patch";
    let v = call(&p, "apply_patch", json!({"patchText": patch}));
    let out = v["output"].as_str().unwrap();
    assert!(out.contains("undefined name 'missing'"), "{out}");

    let v = call(
        &p,
        "write",
        json!({"filePath": "ok.py", "content": "print(1)\n"}),
    );
    assert_eq!(v["output"], "Wrote file successfully.", "{v}");
    let v = call(
        &p,
        "write",
        json!({"filePath": "notes.txt", "content": "def f(:\n"}),
    );
    assert_eq!(v["output"], "Wrote file successfully.", "{v}");
}

/// A language server inside the wall that answers `initialize` with a header naming
/// 1.5 GB and then sends 300 MB: runner refuses the length before allocating it, stops
/// the server, and says which server and which limit; its memory stays flat. (It used to
/// allocate the length as given and fill it, or abort on a length past memory.)
#[test]
fn attack_a_language_server_that_names_a_huge_length_is_cut_off() {
    let p = project();
    std::fs::write(
        p.root.join("flood.py"),
        r#"import sys
out = sys.stdout.buffer
out.write(b"Content-Length: 1500000000\r\n\r\n")
block = b"x" * (1 << 20)
try:
    for _ in range(300):
        out.write(block)
    out.flush()
except BrokenPipeError:
    pass
"#,
    )
    .unwrap();
    std::fs::write(p.root.join("a.fl"), "x\n").unwrap();
    std::fs::create_dir_all(p.config.join("runner")).unwrap();
    std::fs::write(
        p.config.join("runner/config.toml"),
        format!(
            "[lsp.flood]\ncommand = [\"python3\", \"{}\"]\nextensions = [\".fl\"]\n",
            p.root.join("flood.py").display()
        ),
    )
    .unwrap();
    let args = at("hover", "a.fl", 1, 1).to_string();
    let (out, peak_kib) = crate::hooks::run_measured(
        p.command()
            .args([
                "tool",
                "call",
                "lsp",
                &args,
                "--json",
                "--sandbox",
                "landlock",
            ])
            .arg("--root")
            .arg(&p.root),
    );
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        all.contains("flood") && all.contains("67108864"),
        "{}",
        &all[..all.len().min(2000)]
    );
    assert!(
        peak_kib < 200 << 10,
        "runner peaked at {peak_kib} KiB against a 1.5 GB length"
    );
}
