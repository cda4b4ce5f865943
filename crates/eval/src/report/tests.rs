use super::*;
use crate::results::VerifierEnd;

#[test]
fn nothing_a_task_wrote_can_close_the_data_block() {
    let data = json!({"diff": "</script><script>alert(1)</script>\u{2028}"});
    let text = page::embeddable(&data);
    assert!(!text.contains('<'), "{text}");
    let back: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(back, data);
}

/// A file past the limit is shown as its head and tail with what is left out between and
/// where the whole file is; a small one whole.
#[test]
fn a_big_file_is_shown_by_its_head_and_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("agent.log");
    let mut body = b"FIRST-LINE\n".to_vec();
    body.resize(3 << 20, b'x');
    body.extend_from_slice(b"\nLAST-LINE\n");
    std::fs::write(&path, &body).unwrap();
    let named = Path::new("tasks/t/agent.log");
    let s = files::head_and_tail(&path, named, LOG_HEAD, LOG_TAIL).unwrap();
    assert!(s.text.starts_with("FIRST-LINE\n"), "{}", &s.text[..40]);
    assert!(s.text.ends_with("LAST-LINE\n"));
    assert!(
        s.text.len() < (LOG_HEAD + LOG_TAIL) as usize + 512,
        "{}",
        s.text.len()
    );
    assert_eq!(s.cut, body.len() as u64 - LOG_HEAD - LOG_TAIL);
    assert!(
        s.text.contains(&format!(
            "… {} bytes not shown here; the whole file is tasks/t/agent.log",
            s.cut
        )),
        "{}",
        &s.text[LOG_HEAD as usize..LOG_HEAD as usize + 200]
    );
    std::fs::write(&path, "small\n").unwrap();
    let s = files::head_and_tail(&path, named, LOG_HEAD, LOG_TAIL).unwrap();
    assert_eq!((s.text.as_str(), s.size, s.cut), ("small\n", 6, 0));
}

fn unresolved(id: &str, attempt: u32) -> TaskResult {
    let mut r = TaskResult::new(id, attempt, "m".into());
    r.status = Status::Unresolved;
    r.reward = Some(0.0);
    r
}

/// The reason filter groups attempts by how they failed, not by each one's own words.
#[test]
fn reasons_are_grouped_into_kinds() {
    let mut a = unresolved("a", 1);
    a.verifier = Some(VerifierEnd::of(Some(1), b"E   assert 1 == 2\n"));
    assert_eq!(reason_kind(&a), "the verifier exited 1");
    let mut b = unresolved("b", 1);
    b.status = Status::InfraError;
    b.phase = Some("setup".into());
    b.error = Some("setup exited 2 (see setup.log): make: *** no rule".into());
    assert_eq!(reason_kind(&b), "setup: setup exited 2 (see setup.log)");
    let mut c = unresolved("c", 1);
    c.status = Status::Resolved;
    assert_eq!(reason_kind(&c), "");
}

/// A results folder of `n` attempts, each with the files a real Harbor attempt leaves
/// (small ones), every fourth unresolved with a verifier's failure.
pub(crate) fn fixture(out: &Path, n: usize) {
    for i in 0..n {
        let id = format!("task-{i:04}");
        let mut r = unresolved(&id, 1);
        if i % 4 == 0 {
            r.verifier = Some(VerifierEnd::of(
                Some(1),
                b"collected 3 items\ntests/test_x.py ..F\nE   assert 41 == 42\n1 failed, 2 passed\n[test.sh exited with 1]\n",
            ));
        } else {
            r.status = Status::Resolved;
            r.reward = Some(1.0);
        }
        r.timings.total_ms = 1000 + i as u64 * 37;
        r.set_instruction("Make the tests in /tests pass: the function add(a, b) returns a + b.\n");
        let dir = results::attempt_dir(out, &id, 1, 1);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("result.json"),
            serde_json::to_vec_pretty(&r).unwrap(),
        )
        .unwrap();
        std::fs::write(
            dir.join("diff.patch"),
            "diff --git a/add.py b/add.py\n--- a/add.py\n+++ b/add.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("agent.log"),
            "$ bash solution/solve.sh\npatched add.py\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("verify.log"),
            "collected 3 items\ntests/test_x.py ...\n3 passed in 0.02s\n[test.sh exited with 0]\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("build.log"),
            "image runner-task-add:latest found\n",
        )
        .unwrap();
    }
}

/// The page for 500 small attempts stays light enough to open at once: every attempt's
/// files are embedded, so its weight is what each attempt costs times 500. Measured at
/// about 2.1 KiB per attempt, 1.0 MB in all (see docs/EVALUATIONS.md); the bound leaves room.
#[test]
fn five_hundred_attempts_make_a_page_of_bounded_weight() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path(), 500);
    let path = write(tmp.path()).unwrap();
    let weight = std::fs::metadata(&path).unwrap().len();
    eprintln!("report.html for 500 attempts: {weight} bytes");
    assert!(weight < 2 << 20, "{weight} bytes");
    let html = std::fs::read_to_string(&path).unwrap();
    assert_eq!(html.matches("\"folder\":\"tasks/task-").count(), 500);
}
