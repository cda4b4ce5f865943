//! The tool conformance script: the same tool calls must give the same results on every
//! backend (and every engine and runtime the docker backend runs on), since the tools are
//! host logic over one protocol. A script of calls covering every file tool and bash; the
//! in-process server's results are the reference; outcomes, outputs, errors and metadata
//! are compared after the per-run paths are replaced. `backends_agree.rs` runs it on every
//! backend, `engine_runsc.rs` on docker under gVisor.

use super::{Backend, Options, fixture_with};
use serde_json::{Value, json};

fn script() -> Vec<(&'static str, Value)> {
    vec![
        ("read", json!({ "filePath": "src/lib.rs" })),
        (
            "read",
            json!({ "filePath": "src/lib.rs", "offset": 2, "limit": 1 }),
        ),
        ("read", json!({ "filePath": "missing.rs" })),
        ("read", json!({ "filePath": "src" })),
        ("read", json!({ "filePath": "bin.dat" })),
        (
            "write",
            json!({ "filePath": "new/file.txt", "content": "hello\nworld\n" }),
        ),
        ("read", json!({ "filePath": "new/file.txt" })),
        (
            "edit",
            json!({ "filePath": "src/lib.rs", "oldString": "fn one() -> u32 {\n    1", "newString": "fn one() -> u32 {\n    11" }),
        ),
        (
            "edit",
            json!({ "filePath": "src/lib.rs", "oldString": "  fn   two()  ", "newString": "fn two_renamed()" }),
        ),
        (
            "edit",
            json!({ "filePath": "src/lib.rs", "oldString": "not there", "newString": "x" }),
        ),
        (
            "multiedit",
            json!({ "filePath": "notes.md", "edits": [
                { "oldString": "alpha", "newString": "ALPHA" },
                { "oldString": "beta", "newString": "BETA", "replaceAll": true }
            ] }),
        ),
        (
            "apply_patch",
            json!({ "patchText": "*** Begin Patch\n*** Add File: added.txt\n+added line\n*** Update File: notes.md\n@@\n-gamma\n+GAMMA\n*** End Patch" }),
        ),
        ("glob", json!({ "pattern": "**/*.rs" })),
        ("glob", json!({ "pattern": "*.md" })),
        ("grep", json!({ "pattern": "fn \\w+", "include": "*.rs" })),
        ("grep", json!({ "pattern": "BETA" })),
        ("grep", json!({ "pattern": "(" })),
        ("list", json!({})),
        ("list", json!({ "path": "src" })),
        // One stream per call: how stdout and stderr interleave is up to the scheduler.
        (
            "bash",
            json!({ "command": "printf 'a\\nb\\n'; exit 3", "description": "exit" }),
        ),
        (
            "bash",
            json!({ "command": "echo err >&2; exit 4", "description": "stderr" }),
        ),
        (
            "bash",
            json!({ "command": "cat notes.md | tr a-z A-Z | sort", "description": "pipe" }),
        ),
        (
            "bash",
            json!({ "command": "cd src && ls", "description": "cd" }),
        ),
        (
            "bash",
            json!({ "command": "seq 1 5000", "description": "long output" }),
        ),
        (
            "bash",
            json!({ "command": "sleep 5", "description": "timeout", "timeout": 300 }),
        ),
        ("read", json!({ "filePath": "added.txt" })),
    ]
}

/// Keeps what the model sees and what decides the outcome; drops timings.
fn comparable(r: &runner_tool::CallResult, filters: &[(regex::Regex, &str)]) -> Value {
    let mut meta = r.metadata.clone();
    meta.remove("outputPath");
    let v = json!({
        "tool": r.tool,
        "outcome": format!("{:?}", r.outcome),
        "title": r.title,
        "output": r.output,
        "error": r.error,
        "metadata": meta,
    });
    let mut text = serde_json::to_string_pretty(&v).expect("json");
    for (re, to) in filters {
        text = re.replace_all(&text, *to).into_owned();
    }
    serde_json::from_str(&text).expect("json")
}

pub async fn run_on(backend: Backend) -> Vec<Value> {
    let f = fixture_with(Options {
        backend,
        ..Options::default()
    })
    .await;
    f.write(
        "src/lib.rs",
        "pub fn one() -> u32 {\n    1\n}\n\npub fn two() -> u32 {\n    2\n}\n",
    );
    f.write("src/main.rs", "fn main() {}\n");
    f.write("notes.md", "alpha\nbeta\nbeta\ngamma\n");
    f.write("bin.dat", [0u8, 1, 2, 3, 0, 255]);
    let filters: Vec<(regex::Regex, &str)> = super::path_filters(&f.wt, &f.out)
        .into_iter()
        .map(|(re, to)| (regex::Regex::new(&re).expect("filter"), to))
        .collect();
    let mut out = Vec::new();
    for (tool, args) in script() {
        // A strict session: reads come before edits, as a model's would.
        if matches!(tool, "edit" | "multiedit" | "apply_patch") {
            let path = args
                .get("filePath")
                .and_then(Value::as_str)
                .unwrap_or("notes.md");
            let _ = f.call("read", json!({ "filePath": path })).await;
        }
        let r = f.call(tool, args).await;
        out.push(comparable(&r, &filters));
    }
    out
}

/// Runs the script on the in-process server, then on each of `backends`, and fails at the
/// first call whose result differs.
pub async fn check(backends: &[Backend]) {
    let reference = run_on(Backend::InProcess).await;
    assert!(
        reference.iter().filter(|r| r["outcome"] == "Ok").count() >= 15,
        "the script must mostly succeed to compare anything: {reference:#?}"
    );
    for &backend in backends {
        let got = run_on(backend).await;
        assert_eq!(got.len(), reference.len());
        for (i, (want, have)) in reference.iter().zip(&got).enumerate() {
            let on = match backend {
                Backend::Docker => super::engine::label(),
                other => format!("{other:?}"),
            };
            assert_eq!(have, want, "call {i} ({}) differs on {on}", want["tool"]);
        }
    }
}
