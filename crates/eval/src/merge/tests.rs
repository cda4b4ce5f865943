use super::*;
use crate::results::{Status, TaskResult};
use crate::shard::shard_of;

const MODEL: &str = "oracle";

/// Shard `k` of `of` under `root/shards/`, planning the ids of `ids` it holds; each gets a
/// result (resolved, or unresolved for ids ending in an odd digit) unless it is in `skip`.
fn shard(root: &Path, k: u32, of: u32, ids: &[&str], skip: &[&str]) -> PathBuf {
    let s = Shard::new(k, of).unwrap();
    let dir = s.folder(root);
    std::fs::create_dir_all(dir.join("tasks")).unwrap();
    let mine: Vec<String> = ids
        .iter()
        .filter(|id| s.holds(id))
        .map(|id| id.to_string())
        .collect();
    let record = ShardRecord {
        shard: k,
        of,
        model: MODEL.into(),
        attempts: 1,
        task_set_hash: "sha256:set".into(),
        tasks: mine.clone(),
        load_problems: Vec::new(),
    };
    std::fs::write(
        dir.join(shard::RECORD),
        serde_json::to_vec(&record).unwrap(),
    )
    .unwrap();
    for id in mine.iter().filter(|id| !skip.contains(&id.as_str())) {
        result(&dir, id, status_of(id));
    }
    dir
}

fn status_of(id: &str) -> Status {
    if id.ends_with(['1', '3', '5', '7', '9']) {
        Status::Unresolved
    } else {
        Status::Resolved
    }
}

fn result(dir: &Path, id: &str, status: Status) {
    let folder = results::attempt_dir(dir, id, 1, 1);
    std::fs::create_dir_all(&folder).unwrap();
    let mut r = TaskResult::new(id, 1, MODEL.into());
    r.status = status;
    r.reward = Some(if status == Status::Resolved { 1.0 } else { 0.0 });
    r.started_unix_s = Some(1_700_000_000);
    std::fs::write(folder.join("diff.patch"), format!("diff of {id}\n")).unwrap();
    std::fs::write(folder.join("verify.log"), "ok\n").unwrap();
    std::fs::write(folder.join("result.json"), serde_json::to_vec(&r).unwrap()).unwrap();
}

/// Every file under `dir` with its bytes, sorted.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_path_buf();
                files.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    files.sort();
    files
}

const IDS: [&str; 10] = ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"];

/// Three complete shards merge into one folder holding every task once, the counts of the
/// whole, predictions for each task and a report; a second merge changes no byte, and a
/// shard rerun since is taken up (only its task's folder is replaced).
#[test]
fn merging_twice_gives_the_same_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("shared");
    for k in 1..=3 {
        shard(&root, k, 3, &IDS, &[]);
    }
    let out = tmp.path().join("merged");
    let merged = merge(std::slice::from_ref(&root), &out).unwrap();
    assert!(merged.problems().is_empty(), "{:?}", merged.problems());
    assert_eq!(merged.report.tasks, 10);
    assert_eq!(merged.report.summary.attempts, 10);
    assert_eq!(merged.report.summary.counts["resolved"], 5);
    assert_eq!(merged.report.summary.counts["unresolved"], 5);
    assert_eq!(merged.outcome(false, false), Outcome::Verdicts);
    assert_eq!(merged.outcome(false, true), Outcome::Unresolved);
    let predictions = std::fs::read_to_string(out.join("predictions.jsonl")).unwrap();
    assert_eq!(predictions.lines().count(), 10);
    assert!(out.join("report.html").exists());
    for id in IDS {
        let r = results::read_result(&out.join("tasks").join(id)).unwrap();
        assert_eq!(r.status, status_of(id), "{id}");
    }
    let first = snapshot(&out);
    merge(std::slice::from_ref(&root), &out).unwrap();
    assert_eq!(snapshot(&out), first, "a second merge changed the folder");
    // A file that is the shard's, hard-linked: the same inode, no copy.
    use std::os::unix::fs::MetadataExt;
    let home = Shard::new(shard_of("t4", 3), 3).unwrap().folder(&root);
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    assert_eq!(
        ino(&home.join("tasks/t4/verify.log")),
        ino(&out.join("tasks/t4/verify.log"))
    );
    // The shard reran t4, which now fails: the merge takes it up.
    result(&home, "t4", Status::AgentError);
    let again = merge(std::slice::from_ref(&root), &out).unwrap();
    assert_eq!(again.report.summary.counts["agent_error"], 1);
    assert_eq!(again.report.summary.counts["resolved"], 4);
    // Merged into the shards' own parent, as `eval submit` does: the same counts.
    let inside = merge(std::slice::from_ref(&root), &root).unwrap();
    assert_eq!(inside.report.summary, again.report.summary);
}

/// A shard with no folder and one cut short are each named, with what is missing, and the
/// merge is incomplete (8), or stopped when the command was; what they did finish is
/// merged. Once they are whole, the merge is too, and holds nothing stale.
#[test]
fn a_missing_or_half_written_shard_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("shared");
    shard(&root, 1, 3, &IDS, &[]);
    let third: Vec<&str> = IDS
        .iter()
        .copied()
        .filter(|id| shard_of(id, 3) == 3)
        .collect();
    assert!(third.len() >= 2, "{third:?}");
    let cut = third[0];
    let dir3 = shard(&root, 3, 3, &IDS, &[cut]);
    let out = tmp.path().join("merged");
    let merged = merge(std::slice::from_ref(&root), &out).unwrap();
    let problems = merged.problems();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].starts_with("shard 2/3 is missing: no folder 2-of-3"),
        "{problems:?}"
    );
    assert_eq!(
        problems[1],
        format!(
            "shard 3/3 is half-written: 1 of {} attempts have no result ({cut})",
            third.len()
        )
    );
    assert_eq!(merged.outcome(false, false), Outcome::Incomplete);
    assert_eq!(merged.outcome(true, false), Outcome::Stopped);
    assert_eq!(merged.report.unfinished, 1);
    let shard3 = &merged.shards[2];
    assert_eq!(shard3.state, State::HalfWritten);
    assert_eq!(shard3.finished, third.len() - 1);
    let finished = merged.report.summary.attempts;
    assert_eq!(
        finished,
        IDS.iter().filter(|id| shard_of(id, 3) == 1).count() + third.len() - 1
    );
    // A record that does not parse is named with its file.
    let dir2 = Shard::new(2, 3).unwrap().folder(&root);
    std::fs::create_dir_all(&dir2).unwrap();
    std::fs::write(dir2.join(shard::RECORD), b"{\"shard\": 2, \"of\"").unwrap();
    let merged = merge(std::slice::from_ref(&root), &out).unwrap();
    assert!(
        merged.problems()[0].contains("shard.json cannot be read"),
        "{:?}",
        merged.problems()
    );
    // Both finished: the merge is whole and holds each task once.
    shard(&root, 2, 3, &IDS, &[]);
    result(&dir3, cut, status_of(cut));
    let merged = merge(std::slice::from_ref(&root), &out).unwrap();
    assert!(merged.problems().is_empty(), "{:?}", merged.problems());
    assert_eq!(merged.outcome(true, false), Outcome::Verdicts);
    assert_eq!(merged.report.summary.attempts, IDS.len());
    // A folder in tasks/ that no shard holds (an earlier merge's) goes.
    std::fs::create_dir_all(out.join("tasks/gone")).unwrap();
    std::fs::write(out.join("tasks/gone/result.json"), b"{}").unwrap();
    merge(std::slice::from_ref(&root), &out).unwrap();
    assert!(!out.join("tasks/gone").exists());
}

/// Shards of two splits, of another model, a shard given twice, a folder with no shard
/// and an out folder that holds a run's own results are refused, each said.
#[test]
fn shards_of_another_evaluation_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    shard(&a, 1, 2, &IDS, &[]);
    shard(&b, 1, 3, &IDS, &[]);
    let out = tmp.path().join("out");
    let e = merge(&[a.clone(), b.clone()], &out)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("merge the shards of one split at a time"), "{e}");
    let c = tmp.path().join("c");
    shard(&c, 1, 2, &IDS, &[]);
    let e = merge(&[a.clone(), c.clone()], &out)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("shard 1/2 is in both"), "{e}");
    let d = tmp.path().join("d");
    let dir = shard(&d, 2, 2, &IDS, &[]);
    let mut record = ShardRecord::read(&dir).unwrap().unwrap();
    record.model = "anthropic/claude".into();
    std::fs::write(
        dir.join(shard::RECORD),
        serde_json::to_vec(&record).unwrap(),
    )
    .unwrap();
    let e = merge(&[a.clone(), d], &out).err().unwrap().to_string();
    assert!(
        e.contains("has model oracle") && e.contains("has anthropic/claude"),
        "{e}"
    );
    let e = merge(&[tmp.path().join("nothing")], &out)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("holds no shard"), "{e}");
    let run = tmp.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("run.json"),
        b"{\"attempts\":1,\"model\":\"oracle\"}",
    )
    .unwrap();
    let e = merge(std::slice::from_ref(&a), &run)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("holds results of an eval run"), "{e}");
    // The shards/ folder itself, named directly, merges as its parent does.
    let whole = merge(&[a.join("shards")], &tmp.path().join("out-a")).unwrap();
    assert_eq!(whole.shards.len(), 2);
    // A shard's own folder, named directly, merges (the other shard missing).
    let merged = merge(&[Shard::new(1, 2).unwrap().folder(&a)], &out).unwrap();
    assert_eq!(merged.problems().len(), 1, "{:?}", merged.problems());
}
