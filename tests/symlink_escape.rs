//! Symlinks planted inside the worktree must not let any file tool reach outside it.
//!
//! In the `none` backend nothing but the server's beneath-resolution stands between a
//! model and the host, so every file tool is tried against every kind of escaping link:
//! an absolute link to a secret file, an absolute link to an outside directory, relative
//! `../` links to both, and links through the `/proc/self/root` magic link. Each call must
//! fail naming the symlink (or the outside), leave the outside tree byte-for-byte as it
//! was, create nothing there, and never echo the secret. Every case runs against both the
//! in-process server and the real child-process server.
//!
//! Every test runs a second time with the server's openat2 fallback forced (`RUNNER_RESOLVE=walk`,
//! the resolver of kernels before 5.6 and of gVisor), so both resolvers face the same links.
//!
//! Positive controls at the end show that links staying inside the worktree still work, so
//! the refusals above are not just every symlink being refused.

use common::{Backend, Fixture, Options, fixture_with, snapshot_tree};
use runner_tool::CallResult;
use runner_tool::registry::Outcome;
use serde_json::{Value, json};

const SECRET: &str = "TOP-SECRET-7c1f9a";

/// Links to the outside secret file.
const FILE_LINKS: &[&str] = &["abs_file", "rel_file", "proc_file"];
/// Links to the outside directory (which holds `secret.txt`).
const DIR_LINKS: &[&str] = &["abs_dir", "rel_dir", "proc_dir"];
const BACKENDS: [Backend; 4] = [
    Backend::InProcess,
    Backend::Child,
    Backend::Landlock,
    Backend::Docker,
];

/// A worktree with escaping links, inner links, and a secret outside. Every session counts
/// files as read (single call), so only the symlink guard can stop a write.
async fn planted(backend: Backend) -> Fixture {
    use std::os::unix::fs::symlink;
    let f = fixture_with(Options {
        backend,
        single_call: true,
        ..Options::default()
    })
    .await;
    let secret = f.outside.join("secret.txt");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    std::fs::create_dir_all(f.outside.join("nested")).unwrap();
    std::fs::write(f.outside.join("nested/other.txt"), format!("{SECRET} 2\n")).unwrap();
    let proc_outside = format!("/proc/self/root{}", f.outside.display());

    symlink(&secret, f.path("abs_file")).unwrap();
    symlink("../outside/secret.txt", f.path("rel_file")).unwrap();
    symlink(format!("{proc_outside}/secret.txt"), f.path("proc_file")).unwrap();
    symlink(&f.outside, f.path("abs_dir")).unwrap();
    symlink("../outside", f.path("rel_dir")).unwrap();
    symlink(&proc_outside, f.path("proc_dir")).unwrap();
    // A link one level down that climbs out through `..`.
    std::fs::create_dir_all(f.path("sub")).unwrap();
    symlink("../../outside/secret.txt", f.path("sub/deep_rel")).unwrap();

    f.write("real.txt", "inside\n");
    f.write("realdir/inner.txt", "inner\n");
    symlink("real.txt", f.path("inner_link")).unwrap();
    symlink("realdir", f.path("inner_dir")).unwrap();
    f
}

/// Every escape path to try for a tool that takes a file path: the links themselves, and
/// files reached through the directory links.
fn file_targets() -> Vec<String> {
    let mut v: Vec<String> = FILE_LINKS.iter().map(|s| s.to_string()).collect();
    v.push("sub/deep_rel".into());
    for d in DIR_LINKS {
        v.push(format!("{d}/secret.txt"));
    }
    v
}

/// Paths that would create a new file outside through a directory link.
fn new_file_targets() -> Vec<String> {
    let mut v: Vec<String> = DIR_LINKS.iter().map(|d| format!("{d}/new.txt")).collect();
    v.push("abs_dir/nested/deeper/new.txt".into());
    v
}

/// Asserts that the call was refused for the right reason and left no trace outside.
fn assert_refused(f: &Fixture, r: &CallResult, outside_before: &[(String, Vec<u8>)], what: &str) {
    assert_ne!(r.outcome, Outcome::Ok, "{what}: succeeded: {}", r.output);
    let err = r.error.as_deref().unwrap_or_default();
    let lower = err.to_lowercase();
    assert!(
        lower.contains("symlink") || lower.contains("outside"),
        "{what}: error does not say why: {err}"
    );
    assert_unchanged(f, r, outside_before, what);
}

/// The outside tree is unchanged and the secret appears nowhere in the result.
fn assert_unchanged(f: &Fixture, r: &CallResult, outside_before: &[(String, Vec<u8>)], what: &str) {
    assert_eq!(
        snapshot_tree(&f.outside),
        outside_before,
        "{what}: the outside tree changed"
    );
    let whole = serde_json::to_string(r).unwrap();
    assert!(
        !whole.contains(SECRET),
        "{what}: the secret leaked: {whole}"
    );
}

async fn each_backend<Fut>(mut body: impl FnMut(Fixture, Vec<(String, Vec<u8>)>) -> Fut)
where
    Fut: std::future::Future<Output = ()>,
{
    for backend in BACKENDS {
        let f = planted(backend).await;
        let before = snapshot_tree(&f.outside);
        assert_eq!(before.len(), 2, "fixture: two outside files");
        body(f, before).await;
    }
}

#[tokio::test]
async fn read_refuses_escaping_links() {
    each_backend(|f, before| async move {
        let mut targets = file_targets();
        // Reading the directory link would list outside names.
        targets.extend(DIR_LINKS.iter().map(|s| s.to_string()));
        for t in targets {
            for path in [t.clone(), f.abs(&t)] {
                let r = f.call("read", json!({ "filePath": path })).await;
                assert_refused(&f, &r, &before, &format!("read {path}"));
                assert!(r.attachments.is_empty());
            }
        }
    })
    .await;
}

#[tokio::test]
async fn write_refuses_escaping_links() {
    each_backend(|f, before| async move {
        let mut targets = file_targets();
        targets.extend(new_file_targets());
        for t in targets {
            let r = f
                .call("write", json!({ "filePath": t, "content": "pwned\n" }))
                .await;
            assert_refused(&f, &r, &before, &format!("write {t}"));
        }
        // The links are still links, not replaced by regular files.
        for l in FILE_LINKS.iter().chain(DIR_LINKS) {
            let md = std::fs::symlink_metadata(f.path(l)).unwrap();
            assert!(md.file_type().is_symlink(), "{l} was replaced");
        }
    })
    .await;
}

fn patch(body: &str) -> Value {
    json!({ "patchText": format!("*** Begin Patch\n{body}\n*** End Patch") })
}

#[tokio::test]
async fn apply_patch_add_refuses_escaping_links() {
    each_backend(|f, before| async move {
        let mut targets = file_targets();
        targets.extend(new_file_targets());
        for t in targets {
            let r = f
                .call("apply_patch", patch(&format!("*** Add File: {t}\n+pwned")))
                .await;
            assert_refused(&f, &r, &before, &format!("add {t}"));
        }
    })
    .await;
}

#[tokio::test]
async fn apply_patch_update_refuses_escaping_links() {
    each_backend(|f, before| async move {
        for t in file_targets() {
            let body = format!("*** Update File: {t}\n@@\n-{SECRET}\n+pwned");
            let r = f.call("apply_patch", patch(&body)).await;
            assert_refused(&f, &r, &before, &format!("update {t}"));
        }
    })
    .await;
}

#[tokio::test]
async fn apply_patch_delete_refuses_escaping_links() {
    each_backend(|f, before| async move {
        for t in DIR_LINKS.iter().map(|d| format!("{d}/secret.txt")) {
            let r = f
                .call("apply_patch", patch(&format!("*** Delete File: {t}")))
                .await;
            assert_refused(&f, &r, &before, &format!("delete {t}"));
        }
        // Deleting a link itself may only ever remove the link; whatever the tool decides,
        // the outside file must survive.
        for t in FILE_LINKS {
            let r = f
                .call("apply_patch", patch(&format!("*** Delete File: {t}")))
                .await;
            assert_unchanged(&f, &r, &before, &format!("delete {t}"));
        }
    })
    .await;
}

/// A move out through a directory link, and a move of an outside file into the worktree
/// (which would copy the secret in), are both refused; the inside file stays put.
#[tokio::test]
async fn apply_patch_move_refuses_escaping_links() {
    each_backend(|f, before| async move {
        for d in DIR_LINKS {
            let body = format!(
                "*** Update File: real.txt\n*** Move to: {d}/moved.txt\n@@\n-inside\n+moved"
            );
            let r = f.call("apply_patch", patch(&body)).await;
            assert_refused(&f, &r, &before, &format!("move real.txt to {d}"));
            assert_eq!(f.read("real.txt"), "inside\n", "rolled back");
        }
        for t in file_targets() {
            let body = format!("*** Update File: {t}\n*** Move to: stolen.txt\n@@\n-{SECRET}\n+x");
            let r = f.call("apply_patch", patch(&body)).await;
            assert_refused(&f, &r, &before, &format!("move {t} in"));
            assert!(!f.path("stolen.txt").exists(), "move {t}: copied in");
        }
        let body = "*** Update File: abs_file\n*** Move to: stolen.txt";
        let r = f.call("apply_patch", patch(body)).await;
        assert_refused(&f, &r, &before, "rename abs_file in");
        assert!(!f.path("stolen.txt").exists());
    })
    .await;
}

#[tokio::test]
async fn glob_refuses_escaping_directory_links() {
    each_backend(|f, before| async move {
        for d in DIR_LINKS {
            let r = f
                .call("glob", json!({ "pattern": "**/*", "path": d }))
                .await;
            assert_refused(&f, &r, &before, &format!("glob in {d}"));
            assert!(!r.output.contains("secret.txt"));
        }
        // A worktree-wide glob neither follows nor reports the links.
        let r = f.ok("glob", json!({ "pattern": "**/*" })).await;
        assert_unchanged(&f, &r, &before, "glob **/*");
        assert!(!r.output.contains("secret.txt"), "{}", r.output);
        assert!(!r.output.contains(&*f.outside.to_string_lossy()));
        assert!(r.output.contains("real.txt"), "{}", r.output);
    })
    .await;
}

#[tokio::test]
async fn grep_refuses_escaping_directory_links() {
    each_backend(|f, before| async move {
        for d in DIR_LINKS {
            let r = f
                .call("grep", json!({ "pattern": "SECRET", "path": d }))
                .await;
            assert_refused(&f, &r, &before, &format!("grep in {d}"));
        }
        // Searching the whole worktree does not follow the links to the secret.
        let r = f.ok("grep", json!({ "pattern": "SECRET" })).await;
        assert_eq!(r.output, "No files found");
        assert_unchanged(&f, &r, &before, "grep SECRET");
        let r = f.ok("grep", json!({ "pattern": "inside" })).await;
        assert!(r.output.contains("real.txt"), "{}", r.output);
    })
    .await;
}

#[tokio::test]
async fn list_refuses_escaping_directory_links() {
    each_backend(|f, before| async move {
        for d in DIR_LINKS {
            let r = f.call("list", json!({ "path": d })).await;
            assert_refused(&f, &r, &before, &format!("list {d}"));
            assert!(!r.output.contains("secret.txt"));
        }
        let r = f.ok("list", json!({})).await;
        assert_unchanged(&f, &r, &before, "list");
        assert!(!r.output.contains("secret.txt"), "{}", r.output);
        assert!(!r.output.contains("other.txt"), "{}", r.output);
        assert!(r.output.contains("real.txt"), "{}", r.output);
    })
    .await;
}

/// Fails with "Unknown tool" until the `edit` tool is registered.
#[tokio::test]
async fn edit_refuses_escaping_links() {
    each_backend(|f, before| async move {
        for t in file_targets() {
            let r = f
                .call(
                    "edit",
                    json!({ "filePath": t, "oldString": SECRET, "newString": "pwned" }),
                )
                .await;
            assert_eq!(r.tool, "edit", "the edit tool is not registered");
            assert_refused(&f, &r, &before, &format!("edit {t}"));
        }
        for t in new_file_targets() {
            let r = f
                .call(
                    "edit",
                    json!({ "filePath": t, "oldString": "", "newString": "pwned" }),
                )
                .await;
            assert_refused(&f, &r, &before, &format!("edit-create {t}"));
        }
    })
    .await;
}

/// Fails with "Unknown tool" until the `multiedit` tool is registered.
#[tokio::test]
async fn multiedit_refuses_escaping_links() {
    each_backend(|f, before| async move {
        for t in file_targets() {
            let r = f
                .call(
                    "multiedit",
                    json!({
                        "filePath": t,
                        "edits": [{ "oldString": SECRET, "newString": "pwned" }],
                    }),
                )
                .await;
            assert_eq!(r.tool, "multiedit", "the multiedit tool is not registered");
            assert_refused(&f, &r, &before, &format!("multiedit {t}"));
        }
        for t in new_file_targets() {
            let r = f
                .call(
                    "multiedit",
                    json!({
                        "filePath": t,
                        "edits": [{ "oldString": "", "newString": "pwned" }],
                    }),
                )
                .await;
            assert_refused(&f, &r, &before, &format!("multiedit-create {t}"));
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Positive controls: links that stay inside the worktree work.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn inner_links_can_be_read() {
    each_backend(|f, _| async move {
        let r = f.ok("read", json!({ "filePath": "inner_link" })).await;
        assert!(r.output.contains("1: inside"), "{}", r.output);
        let r = f
            .ok("read", json!({ "filePath": "inner_dir/inner.txt" }))
            .await;
        assert!(r.output.contains("1: inner"), "{}", r.output);
        let r = f.ok("list", json!({ "path": "inner_dir" })).await;
        assert!(r.output.contains("inner.txt"), "{}", r.output);
        let r = f
            .ok("grep", json!({ "pattern": "inner", "path": "inner_dir" }))
            .await;
        assert!(r.output.contains("Line 1: inner"), "{}", r.output);
    })
    .await;
}

/// Writing through an inner link updates its target and keeps the link a link.
#[tokio::test]
async fn inner_links_write_to_their_target() {
    each_backend(|f, _| async move {
        f.ok(
            "write",
            json!({ "filePath": "inner_link", "content": "via link\n" }),
        )
        .await;
        assert_eq!(f.read("real.txt"), "via link\n");
        assert!(
            std::fs::symlink_metadata(f.path("inner_link"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        f.ok(
            "write",
            json!({ "filePath": "inner_dir/new.txt", "content": "new\n" }),
        )
        .await;
        assert_eq!(f.read("realdir/new.txt"), "new\n");
    })
    .await;
}

/// Not a symlink, but the same wall: `..` out of the worktree is outside, and the
/// read-only root holding saved outputs cannot be written even though it can be read.
#[tokio::test]
async fn dotdot_paths_and_the_read_only_root_are_refused() {
    each_backend(|f, before| async move {
        for t in ["../outside/secret.txt", "sub/../../outside/new.txt"] {
            let r = f.call("read", json!({ "filePath": t })).await;
            assert_refused(&f, &r, &before, &format!("read {t}"));
            let r = f
                .call("write", json!({ "filePath": t, "content": "pwned" }))
                .await;
            assert_refused(&f, &r, &before, &format!("write {t}"));
            let r = f
                .call("apply_patch", patch(&format!("*** Add File: {t}\n+pwned")))
                .await;
            assert_refused(&f, &r, &before, &format!("add {t}"));
        }
        let saved = f.out.join("tool_1_1_1");
        std::fs::write(&saved, "saved output\n").unwrap();
        let r = f
            .ok("read", json!({ "filePath": saved.to_string_lossy() }))
            .await;
        assert!(r.output.contains("1: saved output"), "{}", r.output);
        let r = f
            .call(
                "write",
                json!({ "filePath": saved.to_string_lossy(), "content": "tampered" }),
            )
            .await;
        assert_eq!(r.outcome, Outcome::Failed);
        assert!(
            r.error.as_deref().unwrap().contains("read-only"),
            "{:?}",
            r.error
        );
        assert_eq!(std::fs::read_to_string(&saved).unwrap(), "saved output\n");
    })
    .await;
}

/// Every test above again, each server resolving paths with the walk instead of openat2.
#[test]
fn every_test_again_with_the_walk() {
    // This module's tests, but not this one.
    let module = common::in_this_binary(module_path!(), "");
    let me = common::in_this_binary(module_path!(), "every_test_again_with_the_walk");
    common::rerun_with_the_walk(&[&module, "--skip", &me]);
}
