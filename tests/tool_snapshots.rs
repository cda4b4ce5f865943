//! The exact text each tool returns to the model, pinned as insta snapshots, plus the exact
//! permission asks each tool makes.
//!
//! Models are trained on OpenCode's wording (footers such as "Showing lines", "No files
//! found", "Line N:"), so the output text is part of the contract: a change to it must be a
//! deliberate snapshot update, not an accident. Temp paths are filtered to `[WT]` (the
//! worktree), `[OUT]` (a saved full output) and `[OUT_DIR]`.

use std::time::{Duration, SystemTime};

use base64::Engine;
use common::{Options, ask, fixture, fixture_with};
use runner_permission::AskPolicy;
use runner_tool::registry::Outcome;
use serde_json::{Value, json};

/// A valid 1×1 RGB PNG.
const PNG: &[u8] = &[
    137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0,
    0, 0, 144, 119, 83, 222, 0, 0, 0, 12, 73, 68, 65, 84, 120, 156, 99, 248, 207, 192, 0, 0, 3, 1,
    1, 0, 201, 254, 146, 239, 0, 0, 0, 0, 73, 69, 78, 68, 174, 66, 96, 130,
];

fn set_mtime(path: &std::path::Path, secs: u64) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open for mtime")
        .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
        .expect("set mtime");
}

fn numbered(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

// ---------------------------------------------------------------------------------------
// read
// ---------------------------------------------------------------------------------------

/// A whole small file: numbered lines, the end-of-file footer, one `read` ask with the
/// worktree-relative path.
#[tokio::test]
async fn read_whole_file() {
    let f = fixture().await;
    f.write("src/lib.rs", "fn one() {}\n\nfn two() {}\n");
    let r = f
        .ok("read", json!({ "filePath": f.abs("src/lib.rs") }))
        .await;
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("read_whole_file", r.output);
    assert_eq!(r.title, "src/lib.rs");
    assert_eq!(r.metadata["truncated"], json!(false));
    assert_eq!(f.asks(), vec![ask("read", &["src/lib.rs"], &["*"])]);
}

/// offset/limit select a window and the footer says how to continue; numbers given as
/// strings are coerced like OpenCode does.
#[tokio::test]
async fn read_window_with_offset_and_limit() {
    let f = fixture().await;
    f.write("ten.txt", numbered(10));
    let r = f
        .ok(
            "read",
            json!({ "filePath": "ten.txt", "offset": 3, "limit": "4" }),
        )
        .await;
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("read_window", r.output);
    assert!(
        r.output
            .contains("(Showing lines 3-6 of 10. Use offset=7 to continue.)")
    );
    assert_eq!(r.metadata["truncated"], json!(true));

    let err = f
        .err("read", json!({ "filePath": "ten.txt", "offset": 11 }))
        .await;
    assert_eq!(err, "Offset 11 is out of range for this file (10 lines)");
}

/// A line over 2000 characters is cut with a marker; the rest of the file is unaffected.
#[tokio::test]
async fn read_cuts_long_lines() {
    let f = fixture().await;
    f.write("long.txt", format!("short\n{}\nafter\n", "x".repeat(2500)));
    let r = f.ok("read", json!({ "filePath": "long.txt" })).await;
    let cut_line = r.output.lines().find(|l| l.starts_with("2: ")).unwrap();
    assert_eq!(cut_line.matches('x').count(), 2000);
    let mut s = f.insta();
    s.add_filter("x{2000}", "[2000 x]");
    let _s = s.bind_to_scope();
    insta::assert_snapshot!("read_long_line", r.output);
}

/// Output is capped at 50 KB of lines: 51 lines of 1000 bytes fit (51 050 bytes with
/// newlines), the 52nd does not, and the footer gives the offset to continue from.
#[tokio::test]
async fn read_caps_output_at_50_kb() {
    let f = fixture().await;
    let line = "y".repeat(1000);
    f.write("wide.txt", format!("{line}\n").repeat(100));
    let r = f.ok("read", json!({ "filePath": "wide.txt" })).await;
    assert_eq!(r.output.lines().filter(|l| l.contains(&line)).count(), 51);
    assert_eq!(r.metadata["truncated"], json!(true));
    let mut s = f.insta();
    s.add_filter("y{1000}", "[1000 y]");
    let _s = s.bind_to_scope();
    insta::assert_snapshot!("read_50kb_cap", r.output);
}

/// Files bigger than the 1 MiB read chunk: line numbers and totals stay exact across
/// chunk boundaries, including a line and a multi-byte character that straddle one.
#[tokio::test]
async fn read_large_file_across_chunks() {
    let f = fixture().await;
    let mut text = String::new();
    let mut n = 0;
    while text.len() < 1024 * 1024 - 200 {
        n += 1;
        text.push_str(&format!("line {n}\n"));
    }
    // Pad so that "é" (2 bytes) starts one byte before the 1 MiB boundary.
    let pad = 1024 * 1024 - 1 - text.len() - "straddle ".len();
    n += 1;
    text.push_str(&format!("straddle {}é end\n", "-".repeat(pad)));
    assert_eq!(text.as_bytes()[1024 * 1024 - 1], "é".as_bytes()[0]);
    let straddle_line = n;
    while n < 150_000 {
        n += 1;
        text.push_str(&format!("line {n}\n"));
    }
    f.write("big.log", &text);

    let r = f
        .ok(
            "read",
            json!({ "filePath": "big.log", "offset": straddle_line, "limit": 2 }),
        )
        .await;
    assert!(
        r.output.contains(&format!("{straddle_line}: straddle ")),
        "{}",
        &r.output[..200.min(r.output.len())]
    );
    assert!(r.output.contains("é end\n"), "the character was split");
    assert!(r.output.contains(&format!(
        "(Showing lines {straddle_line}-{} of 150000. Use offset={} to continue.)",
        straddle_line + 1,
        straddle_line + 2
    )));

    let r = f
        .ok("read", json!({ "filePath": "big.log", "offset": 149_999 }))
        .await;
    assert!(
        r.output
            .contains("149999: line 149999\n150000: line 150000\n")
    );
    assert!(r.output.contains("(End of file - total 150000 lines)"));
}

/// A directory lists its entries sorted case-insensitively, sub-directories with a `/`.
#[tokio::test]
async fn read_directory_lists_entries() {
    let f = fixture().await;
    f.write("proj/README.md", "r");
    f.write("proj/b.txt", "b");
    f.write("proj/src/main.rs", "m");
    f.write("proj/a.txt", "a");
    let r = f.ok("read", json!({ "filePath": "proj" })).await;
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("read_directory", r.output);
    assert_eq!(f.asks(), vec![ask("read", &["proj"], &["*"])]);
}

/// A missing file fails with up to three similar names from its directory: names that
/// contain the missing one or are contained in it, else names a typo away.
#[tokio::test]
async fn read_missing_file_suggests_similar_names() {
    let f = fixture().await;
    f.write("config.json", "{}");
    f.write("config.yaml", "a: 1");
    f.write("unrelated.txt", "u");
    let err = f.err("read", json!({ "filePath": "config" })).await;
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("read_missing_with_suggestions", err);
    assert!(!err.contains("unrelated"));

    let err = f.err("read", json!({ "filePath": "zzz.md" })).await;
    assert_eq!(err, format!("File not found: {}", f.abs("zzz.md")));

    // No name contains the other: a name one typo away is suggested.
    f.write("src/main.rs", "fn main() {}");
    f.write("src/lib.rs", "");
    let err = f.err("read", json!({ "filePath": "src/mian.rs" })).await;
    assert_eq!(
        err,
        format!(
            "File not found: {}\n\nDid you mean one of these?\n{}",
            f.abs("src/mian.rs"),
            f.abs("src/main.rs")
        )
    );
}

/// Binary content (by extension, or a NUL byte) is refused instead of dumped.
#[tokio::test]
async fn read_refuses_binary_files() {
    let f = fixture().await;
    f.write("blob.txt", b"text\0more");
    f.write("archive.zip", "looks like text");
    let err = f.err("read", json!({ "filePath": "blob.txt" })).await;
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("read_binary_error", err);
    let err = f.err("read", json!({ "filePath": "archive.zip" })).await;
    assert_eq!(
        err,
        format!("Cannot read binary file: {}", f.abs("archive.zip"))
    );
}

/// An image comes back as an attachment whose data URL decodes to the file's bytes.
#[tokio::test]
async fn read_png_returns_an_attachment() {
    let f = fixture().await;
    f.write("img/dot.png", PNG);
    let r = f.ok("read", json!({ "filePath": "img/dot.png" })).await;
    assert_eq!(r.attachments.len(), 1);
    let a = &r.attachments[0];
    let _s = f.insta().bind_to_scope();
    insta::assert_json_snapshot!(
        "read_png_attachment",
        json!({ "output": r.output, "mime": a.mime, "filename": a.filename, "metadata": r.metadata })
    );
    let data = a
        .url
        .strip_prefix("data:image/png;base64,")
        .expect("a base64 PNG data URL");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(data)
        .expect("valid base64");
    assert_eq!(decoded, PNG);
}

// ---------------------------------------------------------------------------------------
// write
// ---------------------------------------------------------------------------------------

/// A new file (parents created): metadata says it did not exist and carries the diff.
#[tokio::test]
async fn write_new_file() {
    let f = fixture().await;
    let r = f
        .ok(
            "write",
            json!({ "filePath": "deep/new.txt", "content": "alpha\nbeta\n" }),
        )
        .await;
    assert_eq!(f.read("deep/new.txt"), "alpha\nbeta\n");
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("write_new_output", r.output);
    insta::assert_json_snapshot!("write_new_metadata", r.metadata);
    assert_eq!(r.title, "deep/new.txt");
    assert_eq!(f.asks(), vec![ask("edit", &["deep/new.txt"], &["*"])]);
}

/// Overwriting needs a read first in a session; after one it works and the diff shows
/// exactly the changed line.
#[tokio::test]
async fn write_overwrite_after_read() {
    let f = fixture().await;
    f.write("notes.md", "one\ntwo\nthree\n");
    let args = json!({ "filePath": "notes.md", "content": "one\n2\nthree\n" });
    let err = f.err("write", args.clone()).await;
    assert!(err.contains("You must read file"), "{err}");
    assert_eq!(f.read("notes.md"), "one\ntwo\nthree\n");

    f.ok("read", json!({ "filePath": "notes.md" })).await;
    let r = f.ok("write", args).await;
    assert_eq!(f.read("notes.md"), "one\n2\nthree\n");
    assert_eq!(r.metadata["exists"], json!(true));
    let _s = f.insta().bind_to_scope();
    insta::assert_json_snapshot!("write_overwrite_metadata", r.metadata);
}

/// A denied ask writes nothing and the call counts as denied, not failed.
#[tokio::test]
async fn write_denied_writes_nothing() {
    let f = fixture_with(Options {
        policy: AskPolicy::Deny,
        ..Options::default()
    })
    .await;
    let r = f
        .call("write", json!({ "filePath": "x.txt", "content": "x" }))
        .await;
    assert_eq!(r.outcome, Outcome::Denied);
    assert_eq!(
        r.error.as_deref(),
        Some("The user rejected permission to use this specific tool call.")
    );
    assert!(!f.path("x.txt").exists());
}

// ---------------------------------------------------------------------------------------
// bash
// ---------------------------------------------------------------------------------------

/// stdout and stderr both reach the model, and the exit code is in `metadata.exit`.
#[tokio::test]
async fn bash_stdout_stderr_and_exit_code() {
    let f = fixture().await;
    let command = "echo out; sleep 0.2; echo err >&2; exit 3";
    let r = f
        .ok(
            "bash",
            json!({ "command": command, "description": "Print to both streams" }),
        )
        .await;
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("bash_streams", r.output);
    assert_eq!(r.metadata["exit"], json!(3));
    assert_eq!(r.title, "Print to both streams");
    // One pattern per command (the redirect belongs to its command), remembered by prefix.
    assert_eq!(
        f.asks(),
        vec![ask(
            "bash",
            &["echo out", "sleep 0.2", "echo err >&2", "exit 3"],
            &["echo *", "sleep *", "exit *"]
        )]
    );
}

/// The working directory defaults to the worktree and `workdir` changes it.
#[tokio::test]
async fn bash_runs_in_the_worktree_or_workdir() {
    let f = fixture().await;
    std::fs::create_dir_all(f.path("sub")).unwrap();
    let r = f
        .ok("bash", json!({ "command": "pwd", "description": "Where" }))
        .await;
    assert_eq!(r.output.trim(), f.wt.to_string_lossy());
    let r = f
        .ok(
            "bash",
            json!({ "command": "pwd", "description": "Where", "workdir": "sub" }),
        )
        .await;
    assert_eq!(r.output.trim(), f.abs("sub"));
}

/// A command past its timeout is killed and the model is told why.
#[tokio::test]
async fn bash_timeout_is_reported() {
    let f = fixture().await;
    let started = std::time::Instant::now();
    let r = f
        .ok(
            "bash",
            json!({ "command": "echo started; sleep 30", "timeout": 500, "description": "Sleep" }),
        )
        .await;
    assert!(started.elapsed() < Duration::from_secs(10), "not killed");
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("bash_timeout", r.output);
    assert!(
        r.output
            .contains("bash tool terminated command after exceeding timeout 500 ms")
    );
    assert_eq!(r.metadata["timedOut"], json!(true));
}

/// Cancelling the call kills the command at once; the output so far is kept and the
/// model is told the user aborted it.
#[tokio::test]
async fn bash_cancel_kills_the_command() {
    let f = fixture().await;
    let cancel = f.ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let started = std::time::Instant::now();
    let r = f
        .ok(
            "bash",
            json!({ "command": "echo before; sleep 30; echo after", "description": "Wait" }),
        )
        .await;
    assert!(started.elapsed() < Duration::from_secs(10), "not killed");
    assert_eq!(
        r.output,
        "before\n\n\n<bash_metadata>\nUser aborted the command\n</bash_metadata>"
    );
    assert_eq!(r.metadata["cancelled"], json!(true));
    assert_eq!(r.metadata["exit"], Value::Null);
}

/// Long output keeps its tail (where errors are) and the full text is saved to
/// `outputPath`, which the read tool can then open (it asks `external_directory` for it).
#[tokio::test]
async fn bash_long_output_is_truncated_and_saved() {
    let f = fixture().await;
    let r = f
        .ok(
            "bash",
            json!({ "command": "seq 1 5000", "description": "Count" }),
        )
        .await;
    assert_eq!(r.metadata["truncated"], json!(true));
    let saved = r.metadata["outputPath"].as_str().expect("outputPath");
    let full: String = (1..=5000).map(|i| format!("{i}\n")).collect();
    assert_eq!(std::fs::read_to_string(saved).unwrap(), full);
    assert!(r.output.ends_with("4999\n5000\n"), "tail kept");
    assert!(!r.output.contains("\n3001\n"), "head dropped");
    let head: Vec<&str> = r.output.lines().take(4).collect();
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("bash_truncated_head", head.join("\n"));

    let read = f
        .ok(
            "read",
            json!({ "filePath": saved, "offset": 4999, "limit": 5 }),
        )
        .await;
    assert!(read.output.contains("4999: 4999\n5000: 5000"));
    let out_dir = f.out.to_string_lossy().into_owned();
    assert_eq!(
        f.asks()[1..],
        [
            ask(
                "external_directory",
                &[&format!("{out_dir}/*")],
                &[&format!("{out_dir}/*")]
            ),
            ask("read", &[saved], &["*"]),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// glob
// ---------------------------------------------------------------------------------------

/// Files come newest first (by mtime), as absolute paths.
#[tokio::test]
async fn glob_orders_newest_first() {
    let f = fixture().await;
    for (rel, secs) in [("a.rs", 1_000), ("b.rs", 3_000), ("sub/c.rs", 2_000)] {
        let p = f.write(rel, "x");
        set_mtime(&p, secs);
    }
    f.write("notes.txt", "not matched");
    let r = f.ok("glob", json!({ "pattern": "**/*.rs" })).await;
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("glob_newest_first", r.output);
    assert_eq!(r.metadata["count"], json!(3));
    assert_eq!(f.asks(), vec![ask("glob", &["**/*.rs"], &["*"])]);

    let r = f.ok("glob", json!({ "pattern": "*.py" })).await;
    assert_eq!(r.output, "No files found");
    assert_eq!(r.metadata["count"], json!(0));
}

/// More than 100 matches: 100 are shown and a footer says the list is cut.
#[tokio::test]
async fn glob_truncates_at_100() {
    let f = fixture().await;
    for i in 0..105 {
        f.write(&format!("many/f{i:03}.txt"), "x");
    }
    let r = f
        .ok("glob", json!({ "pattern": "*.txt", "path": "many" }))
        .await;
    let listed = r.output.lines().filter(|l| l.ends_with(".txt")).count();
    assert_eq!(listed, 100);
    assert_eq!(r.metadata["truncated"], json!(true));
    let footer: Vec<&str> = r.output.lines().skip(100).collect();
    insta::assert_snapshot!("glob_truncated_footer", footer.join("\n"));
}

/// Exactly 100 matches is not a truncated result.
#[tokio::test]
async fn glob_exactly_100_is_not_truncated() {
    let f = fixture().await;
    for i in 0..100 {
        f.write(&format!("many/f{i:03}.txt"), "x");
    }
    let r = f
        .ok("glob", json!({ "pattern": "*.txt", "path": "many" }))
        .await;
    assert_eq!(r.output.lines().count(), 100);
    assert!(!r.output.contains("truncated"));
    assert_eq!(r.metadata["truncated"], json!(false));
    assert_eq!(r.metadata["count"], json!(100));
}

// ---------------------------------------------------------------------------------------
// grep
// ---------------------------------------------------------------------------------------

/// Matches are grouped per file (newest file first) as `Line N: text`.
#[tokio::test]
async fn grep_groups_lines_per_file() {
    let f = fixture().await;
    let old = f.write("old.rs", "fn main() {}\nlet needle = 1;\n");
    let new = f.write("src/new.rs", "needle();\nnothing\n    needle.again();\n");
    f.write("other.txt", "no match here\n");
    set_mtime(&old, 1_000);
    set_mtime(&new, 2_000);
    let r = f.ok("grep", json!({ "pattern": "needle" })).await;
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("grep_grouped", r.output);
    assert_eq!(r.metadata["matches"], json!(3));
    assert_eq!(f.asks(), vec![ask("grep", &["needle"], &["*"])]);
}

/// `include` restricts the files searched.
#[tokio::test]
async fn grep_include_filter() {
    let f = fixture().await;
    f.write("a.rs", "needle\n");
    f.write("b.ts", "needle\n");
    let r = f
        .ok("grep", json!({ "pattern": "needle", "include": "*.ts" }))
        .await;
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("grep_include", r.output);
    assert!(!r.output.contains("a.rs"));
}

/// No match is not an error; an invalid regex is, with a hint to escape.
#[tokio::test]
async fn grep_no_match_and_invalid_regex() {
    let f = fixture().await;
    f.write("a.rs", "fn new() {}\n");
    let r = f.ok("grep", json!({ "pattern": "absent_word" })).await;
    assert_eq!(r.output, "No files found");
    assert_eq!(r.metadata["matches"], json!(0));

    let err = f.err("grep", json!({ "pattern": "fn new(" })).await;
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("grep_invalid_regex", err);
}

/// Past 100 matches the header and footer say how many were hidden; exactly 100 is whole.
#[tokio::test]
async fn grep_truncates_at_100_matches() {
    let f = fixture().await;
    f.write("hits.txt", "hit\n".repeat(105));
    let r = f.ok("grep", json!({ "pattern": "hit" })).await;
    assert_eq!(r.output.matches("  Line ").count(), 100);
    assert_eq!(r.metadata["matches"], json!(105));
    assert_eq!(r.metadata["truncated"], json!(true));
    let lines: Vec<&str> = r.output.lines().collect();
    let ends = format!("{}\n...\n{}", lines[0], lines[lines.len() - 1]);
    insta::assert_snapshot!("grep_truncated_header_footer", ends);

    f.write("hits.txt", "hit\n".repeat(100));
    let r = f.ok("grep", json!({ "pattern": "hit" })).await;
    assert_eq!(r.output.lines().next(), Some("Found 100 matches"));
    assert!(!r.output.contains("truncated"));
    assert_eq!(r.metadata["truncated"], json!(false));
}

// ---------------------------------------------------------------------------------------
// list
// ---------------------------------------------------------------------------------------

/// The tree skips the default ignores (node_modules/, target/, …) at any depth and puts
/// directories before files.
#[tokio::test]
async fn list_tree_skips_default_ignores() {
    let f = fixture().await;
    for rel in [
        "README.md",
        "src/main.rs",
        "src/util/mod.rs",
        "node_modules/pkg/index.js",
        "web/node_modules/x.js",
        "target/debug/app",
        "docs/guide.md",
        ".git/HEAD",
    ] {
        f.write(rel, "x");
    }
    let r = f.ok("list", json!({})).await;
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("list_tree", r.output);
    for skipped in ["node_modules", "target", "HEAD"] {
        assert!(!r.output.contains(skipped), "{skipped} listed");
    }
    let wt = f.wt.to_string_lossy().into_owned();
    assert_eq!(f.asks(), vec![ask("list", &[&wt], &["*"])]);

    let r = f
        .ok("list", json!({ "path": "src", "ignore": ["util/"] }))
        .await;
    insta::assert_snapshot!("list_subdir_with_ignore", r.output);
}

// ---------------------------------------------------------------------------------------
// apply_patch
// ---------------------------------------------------------------------------------------

/// Add, update and delete in one patch: the summary lists A/M/D, and one `edit` ask names
/// every file.
#[tokio::test]
async fn apply_patch_add_update_delete() {
    let f = fixture().await;
    f.write("mod.txt", "keep\nold\nkeep\n");
    f.write("del.txt", "bye\n");
    let patch = "*** Begin Patch\n*** Add File: new/added.txt\n+hello\n*** Update File: mod.txt\n@@\n keep\n-old\n+new\n*** Delete File: del.txt\n*** End Patch";
    let r = f.ok("apply_patch", json!({ "patchText": patch })).await;
    assert_eq!(f.read("new/added.txt"), "hello\n");
    assert_eq!(f.read("mod.txt"), "keep\nnew\nkeep\n");
    assert!(!f.path("del.txt").exists());
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("apply_patch_output", r.output);
    insta::assert_json_snapshot!("apply_patch_metadata", r.metadata);
    assert_eq!(
        f.asks(),
        vec![ask(
            "edit",
            &["new/added.txt", "mod.txt", "del.txt"],
            &["*"]
        )]
    );
}

/// A move is reported as `M <destination>`; its ask names the source and the destination
/// (OpenCode names only the source, so a deny rule on the destination never fired).
#[tokio::test]
async fn apply_patch_move() {
    let f = fixture().await;
    f.write("from.txt", "a\nb\n");
    let patch = "*** Begin Patch\n*** Update File: from.txt\n*** Move to: to/dest.txt\n@@\n a\n-b\n+c\n*** End Patch";
    let r = f.ok("apply_patch", json!({ "patchText": patch })).await;
    assert_eq!(
        r.output,
        "Success. Updated the following files:\nM to/dest.txt"
    );
    assert_eq!(f.read("to/dest.txt"), "a\nc\n");
    assert!(!f.path("from.txt").exists());
    assert_eq!(
        f.asks(),
        vec![ask("edit", &["from.txt", "to/dest.txt"], &["*"])]
    );
}

// ---------------------------------------------------------------------------------------
// invalid calls and argument validation
// ---------------------------------------------------------------------------------------

/// An unknown tool name goes to the `invalid` tool, whose output lists the real tools.
#[tokio::test]
async fn unknown_tool_is_routed_to_invalid() {
    let f = fixture().await;
    let r = f.call("nope", json!({})).await;
    assert_eq!(r.outcome, Outcome::Failed);
    assert_eq!(r.tool, "invalid");
    assert_eq!(r.metadata["tool"], json!("nope"));
    assert_eq!(r.error.as_deref(), Some(r.output.as_str()));
    let ids: Vec<&str> = f
        .registry
        .tools()
        .map(|t| t.id())
        .filter(|id| *id != "invalid")
        .collect();
    assert!(
        r.output
            .ends_with(&format!("Available tools: {}", ids.join(", "))),
        "{}",
        r.output
    );
    // The list grows as tools are added; the wording around it is what is pinned.
    let mut s = f.insta();
    s.add_filter("Available tools: .*", "Available tools: [TOOLS]");
    let _s = s.bind_to_scope();
    insta::assert_snapshot!("invalid_unknown_tool", r.output);
    assert!(f.asks().is_empty());

    // A name that differs only in case is repaired rather than rejected.
    f.write("a.txt", "x\n");
    let r = f.ok("READ", json!({ "filePath": "a.txt" })).await;
    assert_eq!(r.tool, "read");
}

/// Arguments that are not JSON (or not an object) also go to `invalid`.
#[tokio::test]
async fn non_json_arguments_are_routed_to_invalid() {
    let f = fixture().await;
    let r = f.call_raw("read", "{filePath: 'a.txt'").await;
    assert_eq!(r.outcome, Outcome::Failed);
    assert_eq!(r.tool, "invalid");
    assert_eq!(r.metadata["tool"], json!("read"));
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("invalid_non_json", r.output);

    let r = f.call("read", json!(["a.txt"])).await;
    assert_eq!(r.tool, "invalid");
    insta::assert_snapshot!("invalid_not_an_object", r.output);
    assert!(f.asks().is_empty());
}

/// A missing required field or a wrong type fails with OpenCode's "invalid arguments"
/// message, before any ask.
#[tokio::test]
async fn invalid_arguments_are_explained() {
    let f = fixture().await;
    let err = f.err("read", json!({})).await;
    let _s = f.insta().bind_to_scope();
    insta::assert_snapshot!("args_missing_field", err);
    assert!(err.contains("was called with invalid arguments"));
    assert!(err.contains("Please rewrite the input"));

    let err = f
        .err("bash", json!({ "command": 42, "description": "d" }))
        .await;
    assert!(
        err.starts_with("The bash tool was called with invalid arguments: invalid type"),
        "{err}"
    );
    let err = f
        .err("read", json!({ "filePath": "a", "offset": "ten" }))
        .await;
    assert!(err.contains("expected a number, got \"ten\""), "{err}");
    assert!(f.asks().is_empty());
}

// ---------------------------------------------------------------------------------------
// permission asks
// ---------------------------------------------------------------------------------------

/// A path outside the worktree asks `external_directory` for its directory before the
/// tool's own ask; the sandbox then still refuses to reach it.
#[tokio::test]
async fn outside_paths_ask_external_directory_first() {
    let f = fixture().await;
    let outside = f.outside.to_string_lossy().into_owned();
    let pattern = format!("{outside}/*");
    let ext = ask("external_directory", &[&pattern], &[&pattern]);

    let target = f.outside.join("x.txt");
    let err = f
        .err(
            "write",
            json!({ "filePath": target.to_string_lossy(), "content": "x" }),
        )
        .await;
    assert!(err.contains("outside"), "{err}");
    assert!(!target.exists());
    assert_eq!(f.asks(), vec![ext.clone()]);

    let err = f.err("list", json!({ "path": outside })).await;
    assert!(err.contains("outside"), "{err}");
    assert_eq!(
        f.asks()[1..],
        [ext.clone(), ask("list", &[&outside], &["*"])]
    );

    let _ = f
        .err("glob", json!({ "pattern": "*", "path": outside }))
        .await;
    assert_eq!(f.asks()[3..], [ask("glob", &["*"], &["*"]), ext.clone()]);

    let _ = f
        .err("grep", json!({ "pattern": "x", "path": outside }))
        .await;
    assert_eq!(f.asks()[5..], [ask("grep", &["x"], &["*"]), ext.clone()]);

    let _ = f
        .err(
            "bash",
            json!({ "command": "ls", "description": "ls", "workdir": outside }),
        )
        .await;
    assert_eq!(f.asks()[7], ext);
}

/// With a deny policy the external ask is the only one made, and nothing is written.
#[tokio::test]
async fn denied_external_directory_stops_the_call() {
    let f = fixture_with(Options {
        policy: AskPolicy::Deny,
        ..Options::default()
    })
    .await;
    let target = f.outside.join("x.txt");
    let r = f
        .call(
            "write",
            json!({ "filePath": target.to_string_lossy(), "content": "x" }),
        )
        .await;
    assert_eq!(r.outcome, Outcome::Denied);
    assert_eq!(f.asks().len(), 1);
    assert_eq!(f.asks()[0].0, "external_directory");
    assert!(!target.exists());
}

/// The edit ask of write carries the diff a human would approve.
#[tokio::test]
async fn write_ask_carries_the_diff() {
    let f = fixture().await;
    f.ok("write", json!({ "filePath": "d.txt", "content": "x\n" }))
        .await;
    let asked = f.raw_asks();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0].metadata["diff"],
        json!(
            "Index: d.txt\n===================================================================\n--- d.txt\n+++ d.txt\n@@ -0,0 +1 @@\n+x\n"
        )
    );
    assert_eq!(asked[0].metadata["filepath"], Value::String(f.abs("d.txt")));
}

/// The same tools behave the same behind the child-process server (the CLI's backend).
#[tokio::test]
async fn child_process_backend_gives_the_same_output() {
    let f = fixture_with(Options {
        backend: common::Backend::Child,
        ..Options::default()
    })
    .await;
    f.write("src/lib.rs", "fn one() {}\n\nfn two() {}\n");
    let r = f.ok("read", json!({ "filePath": "src/lib.rs" })).await;
    let _s = f.insta().bind_to_scope();
    // Same snapshot as the in-process read.
    insta::assert_snapshot!("read_whole_file", r.output);
    let r = f
        .ok(
            "bash",
            json!({ "command": "exit 7", "description": "Fail" }),
        )
        .await;
    assert_eq!(r.metadata["exit"], json!(7));
}
