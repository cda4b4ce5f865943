//! `runner sandbox cleanup` removes what nobody owns, and with `--all --yes` every runner
//! container. A test binary of its own: `--all` removes *all* of them, so it must not run
//! beside tests that have sandboxes open (cargo runs test binaries one after another).
//! Its tests take turns ([`serial`]): a cleanup in one would remove what another planted
//! and is about to look for.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test's panic is its failure report"
)]

use std::collections::HashMap;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::CreateContainerOptionsBuilder;
use runner_protocol::ExecRequest;
use runner_sandbox::client::ExecEvent;
use runner_sandbox::docker::{LABEL, LABEL_BOOT, LABEL_OWNER};
use runner_sandbox::spec::DEFAULT_IMAGE;

/// A pid that cannot be running: the largest a Linux pid can be, plus one.
const DEAD: i32 = 4_194_305;

/// Holds this binary's tests to one at a time (a lock on a file: each call opens it anew,
/// so two tests of this process exclude each other too).
fn serial() -> std::fs::File {
    common::engine::lock("runner-sandbox-cleanup-tests.lock")
}

/// `runner sandbox cleanup ARGS`, with no terminal attached.
fn cleanup(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_runner"));
    cmd.args(["sandbox", "cleanup"]).args(args);
    cmd.stdin(Stdio::null()).output().expect("run cleanup")
}

/// A stopped container labelled as runner's, owned by `pid` of this machine's boot;
/// returns its id and name.
async fn plant(docker: &Docker, pid: i32, name: &str) -> (String, String) {
    plant_labelled(docker, pid, None, name).await
}

/// A stopped runner container owned by `pid` (started at `start`, when given).
async fn plant_labelled(
    docker: &Docker,
    pid: i32,
    start: Option<u64>,
    name: &str,
) -> (String, String) {
    let mut labels = HashMap::from([
        (LABEL.to_string(), "1".to_string()),
        (LABEL_OWNER.to_string(), pid.to_string()),
        (LABEL_BOOT.to_string(), runner_sandbox::owner::boot_id()),
    ]);
    if let Some(start) = start {
        labels.insert(
            runner_sandbox::docker::LABEL_OWNER_START.to_string(),
            start.to_string(),
        );
    }
    let body = ContainerCreateBody {
        image: Some(DEFAULT_IMAGE.into()),
        cmd: Some(vec!["sleep".into(), "1000".into()]),
        labels: Some(labels),
        ..Default::default()
    };
    let name = format!("{name}-{}", std::process::id());
    let id = docker
        .create_container(
            Some(CreateContainerOptionsBuilder::new().name(&name).build()),
            body,
        )
        .await
        .expect("plant a container")
        .id;
    (id, name)
}

async fn exists(docker: &Docker, id: &str) -> bool {
    docker.inspect_container(id, None).await.is_ok()
}

async fn name_of(docker: &Docker, id: &str) -> String {
    let info = docker.inspect_container(id, None).await.expect("inspect");
    info.name
        .unwrap_or_default()
        .trim_start_matches('/')
        .to_string()
}

/// Runs `echo` in the sandbox: its output, or what went wrong.
async fn answers(sandbox: &runner_sandbox::Sandbox) -> Result<String, String> {
    let request = ExecRequest {
        command: "echo still here".into(),
        cwd: sandbox.worktree.clone(),
        env: sandbox.env.clone(),
        timeout_ms: 30_000,
        stdin: None,
        output_limit: 1 << 20,
        interactive: false,
    };
    let run = async {
        let mut exec = sandbox
            .client
            .exec(request)
            .await
            .map_err(|e| e.to_string())?;
        let mut seen = String::new();
        loop {
            match exec.next().await.map_err(|e| e.to_string())? {
                ExecEvent::Output(o) => seen.push_str(&String::from_utf8_lossy(&o.data)),
                ExecEvent::Exit(s) if s.code == Some(0) => return Ok(seen),
                ExecEvent::Exit(s) => return Err(format!("exited {s:?}: {seen}")),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap_or_else(|_| Err("no answer in 60 s".into()))
}

/// Waits until no runner container but this process's own has a live owner: `--all`
/// ends every live sandbox on the engine, and another process's (someone's session,
/// another test run on this machine) is not this test's to end.
async fn alone_on_the_engine(docker: &Docker) {
    alone_on_the_engine_but(docker, std::process::id() as i32).await
}

/// Like [`alone_on_the_engine`], for a test whose live sandbox `me` owns.
async fn alone_on_the_engine_but(docker: &Docker, me: i32) {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let others: Vec<String> = runner_sandbox::docker::cleanup::list(docker)
            .await
            .expect("list containers")
            .into_iter()
            .filter(|c| !c.orphaned() && c.pid != Some(me))
            .map(|c| c.label())
            .collect();
        if others.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "other processes' sandboxes stay live ({others:?}); run this test binary when no other runner uses the engine"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Attack: a live docker sandbox, owned by this test process (as a session in another
/// terminal would own its own), and an orphan whose owner is dead. A plain cleanup
/// removes the orphan and leaves the live one, which still answers a command; `--dry-run`
/// removes nothing and names both with their reasons; `--all` with no terminal and no
/// `--yes` exits 2 and removes nothing; `--all --yes` ends the live one too.
#[tokio::test(flavor = "multi_thread")]
async fn removes_only_what_nobody_owns_unless_all_is_confirmed() {
    let _serial = serial();
    let docker = common::engine::client().await;
    let me = std::process::id();
    let tmp = tempfile::tempdir().unwrap();
    let wt = std::fs::canonicalize(tmp.path()).unwrap();
    let live = common::open_sandbox(common::Backend::Docker, &wt, &[])
        .await
        .expect("open a docker sandbox");
    let live_id = live.container_id.clone().expect("its container");
    let live_name = name_of(&docker, &live_id).await;
    // Planted after the start, whose own sweep would take it.
    let (orphan, orphan_name) = plant(&docker, DEAD, "runner-cleanup-orphan").await;

    let out = cleanup(&["--dry-run"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!(
            "would remove container {orphan_name}: its owner, pid {DEAD}, is gone"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "would keep   container {live_name}: owned by live pid {me} (sandbox_cleanup"
        )),
        "{said}"
    );
    assert!(exists(&docker, &orphan).await && exists(&docker, &live_id).await);

    let out = cleanup(&[]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!exists(&docker, &orphan).await, "{said}");
    assert!(exists(&docker, &live_id).await, "{said}");
    assert!(said.contains("removed 1 container(s), kept"), "{said}");
    assert_eq!(
        answers(&live).await.as_deref(),
        Ok("still here
")
    );

    let (second, _) = plant(&docker, DEAD, "runner-cleanup-second").await;
    let out = cleanup(&["--all"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("add --yes"), "{err}");
    assert!(exists(&docker, &second).await && exists(&docker, &live_id).await);
    assert_eq!(
        answers(&live).await.as_deref(),
        Ok("still here
")
    );

    alone_on_the_engine(&docker).await;
    let out = cleanup(&["--all", "--yes"]);
    assert!(out.status.success(), "{out:?}");
    assert!(!exists(&docker, &second).await, "{out:?}");
    assert!(!exists(&docker, &live_id).await, "{out:?}");
    assert!(answers(&live).await.is_err());
    assert_eq!(
        common::engine::containers_of(&docker, me).await,
        Vec::<String>::new()
    );
}

/// It also removes copy workspaces whose run was killed before it ended with nothing in
/// them, and keeps the ones that ended, or hold changes, for review.
#[test]
fn removes_unfinished_workspaces_of_dead_runs_and_keeps_finished_ones() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let root = data.join("runner/workspaces");
    let dead = DEAD;
    let me = std::process::id() as i32;
    for (id, owner, finished) in [
        ("killed", dead, false),
        ("killed-with-changes", dead, false),
        ("waiting", dead, true),
        ("in-use", me, false),
    ] {
        let dir = root.join(id);
        std::fs::create_dir_all(dir.join("work")).unwrap();
        std::fs::create_dir_all(dir.join("base")).unwrap();
        if id == "killed-with-changes" {
            // What the agent did before the run was killed is kept for review.
            std::fs::write(dir.join("work/new.txt"), "work\n").unwrap();
        }
        let meta = serde_json::json!({"id": id, "source": "/nowhere", "created": 1,
            "owner_pid": owner, "finished": finished});
        std::fs::write(dir.join("meta.json"), meta.to_string()).unwrap();
    }
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["sandbox", "cleanup"])
            .args(args)
            .env("XDG_DATA_HOME", &data)
            .stdin(Stdio::null())
            .output()
            .expect("run cleanup")
    };
    // The dry run names each with its reason and removes none.
    let out = run(&["--dry-run"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for expected in [
        format!(
            "would remove workspace killed: its run, pid {dead}, is gone and it holds no changes"
        ),
        format!(
            "would keep   workspace killed-with-changes: its run, pid {dead}, is gone, but it holds changes"
        ),
        "would keep   workspace waiting: waiting for review".to_string(),
        format!("would keep   workspace in-use: owned by live pid {me} (sandbox_cleanup"),
    ] {
        assert!(text.contains(&expected), "{expected:?} in {text}");
    }
    assert!(root.join("killed").exists());
    let out = run(&[]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("removed 1 unfinished workspace"), "{text}");
    assert!(!root.join("killed").exists());
    assert!(root.join("killed-with-changes").exists());
    assert!(root.join("waiting").exists());
    assert!(root.join("in-use").exists());
}

/// Attack: `runner eval run` is killed with SIGKILL while an attempt's agent works in a
/// worktree with a disk budget, which is an image loop-mounted under `--out/.work`.
/// Nothing of the run gets to unmount it. `runner sandbox cleanup`, run from elsewhere,
/// finds it by the record the run left in its data directory: afterwards no mount is left
/// under that `--out` and no loop device holds the image. Control: a second run, alive
/// through the same cleanup, keeps its mount and its agent's file; once it is killed too,
/// the next run that mounts a budget clears it, whatever its `--out`.
#[test]
fn a_killed_evals_disk_image_is_unmounted_and_a_live_ones_is_kept() {
    use common::provider::{Response, ScriptedModel, call, text};
    use serde_json::json;
    let _serial = serial();
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: a disk budget is a loop mount, which needs root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::create_dir_all(dir.join("repos/t00")).unwrap();
    std::fs::write(dir.join("repos/t00/a.txt"), "a\n").unwrap();
    let profile = dir.join("budget.toml");
    std::fs::write(&profile, "[sandbox]\ndisk = \"64MiB\"\n").unwrap();
    let tasks = dir.join("tasks.jsonl");
    let task = json!({"id": "t00", "instruction": "TASK t00: wait", "repo": "repos/t00",
                      "verify": "true"});
    std::fs::write(&tasks, format!("{task}\n")).unwrap();
    let model = ScriptedModel::responding(|body| {
        let step = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        Response::Stream(if step == 0 {
            call(
                "bash",
                json!({"command": "touch started; sleep 600", "description": "wait"}),
            )
        } else {
            text("Done.")
        })
    });
    let data = dir.join("data");
    let start_set = |tasks: &std::path::Path, out: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["eval", "run"])
            .arg(tasks)
            .arg("--out")
            .arg(out)
            .args(["--model", "openai/scripted", "--sandbox", "landlock"])
            .arg("--profile")
            .arg(&profile)
            .env("XDG_DATA_HOME", &data)
            .env("XDG_CONFIG_HOME", dir.join("config"))
            .env("OPENAI_API_KEY", "sk-eval-test")
            .env("OPENAI_BASE_URL", model.openai_base())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let start = |out: &std::path::Path| start_set(&tasks, out);
    let cleanup = || {
        let out = Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["sandbox", "cleanup"])
            .env("XDG_DATA_HOME", &data)
            .output()
            .expect("run cleanup");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (killed_out, live_out) = (dir.join("killed"), dir.join("live"));
    let mut killed = start(&killed_out);
    let mut live = start(&live_out);
    for out in [&killed_out, &live_out] {
        wait_for_agent(out);
        assert_eq!(common::loops_under(out).len(), 1, "{}", out.display());
    }

    kill(&mut killed);
    assert_eq!(
        common::mounts_under(&killed_out).len(),
        1,
        "SIGKILL unmounts nothing"
    );
    let said = cleanup();
    assert!(said.contains("removed 1 disk image(s)"), "{said}");
    assert_eq!(common::mounts_under(&killed_out), Vec::<String>::new());
    assert_eq!(common::loops_under(&killed_out), Vec::<String>::new());
    // Control: the live run's file system is still there, with its agent's file in it.
    assert_eq!(common::mounts_under(&live_out).len(), 1, "{said}");
    assert_eq!(common::loops_under(&live_out).len(), 1);
    assert!(started_in(&live_out).is_some());

    // Once that run is killed too, the next run that mounts a budget, into another
    // folder, clears it before its own.
    kill(&mut live);
    let next_out = dir.join("next");
    let mut next = start(&next_out);
    wait_for_agent(&next_out);
    assert_eq!(common::mounts_under(&live_out), Vec::<String>::new());
    assert_eq!(common::loops_under(&live_out), Vec::<String>::new());
    kill(&mut next);
    let said = cleanup();
    assert!(said.contains("removed 1 disk image(s)"), "{said}");
    assert_eq!(common::mounts_under(&next_out), Vec::<String>::new());
    assert_eq!(common::loops_under(&next_out), Vec::<String>::new());
    // Control: a run that ends (its agent out of time) takes its mount and record along.
    let short = dir.join("short.jsonl");
    let mut task = task.clone();
    task["timeouts"] = json!({"agent": 2});
    std::fs::write(&short, format!("{task}\n")).unwrap();
    let ended_out = dir.join("ended");
    let ended = start_set(&short, &ended_out).wait().unwrap();
    assert!(ended.success(), "{ended:?}");
    assert_eq!(common::mounts_under(&ended_out), Vec::<String>::new());
    assert_eq!(common::loops_under(&ended_out), Vec::<String>::new());
    // Nothing is left to find: every record went with its mount.
    let records: Vec<_> = std::fs::read_dir(data.join("runner/mounts"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert_eq!(records, Vec::<std::path::PathBuf>::new());
}

/// The file the agent's command made in the attempt's worktree under `out`, once it has.
fn started_in(out: &std::path::Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(out.join(".work"))
        .ok()?
        .flatten()
        .map(|e| e.path().join("work/started"))
        .find(|p| p.exists())
}

/// Waits until the agent of the run into `out` runs its command (in the mounted budget).
fn wait_for_agent(out: &std::path::Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while started_in(out).is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent of {} never started",
            out.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn kill(child: &mut std::process::Child) {
    // SAFETY: a plain signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
}

/// `runner sandbox cleanup --all` on a terminal (`script` gives it one): it names how many
/// live sandboxes it would end and asks; "n" removes nothing, "y" ends the live one.
#[tokio::test(flavor = "multi_thread")]
async fn all_on_a_terminal_asks_before_ending_live_sandboxes() {
    let _serial = serial();
    // util-linux's `script` gives cleanup a terminal.
    common::engine::ensure_package("bsdutils", "/usr/bin/script");
    let docker = common::engine::client().await;
    // A live owner that is not this test, so that only the planted container is live.
    let mut owner = Command::new("sleep").arg("120").spawn().unwrap();
    let (live, name) = plant(&docker, owner.id() as i32, "runner-cleanup-asked").await;
    alone_on_the_engine_but(&docker, owner.id() as i32).await;
    let on_terminal = |answer: &str| {
        let runner = env!("CARGO_BIN_EXE_runner");
        let mut child = Command::new("script")
            .args([
                "-qec",
                &format!("{runner} sandbox cleanup --all"),
                "/dev/null",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run script");
        use std::io::Write;
        // Written before the question: the terminal holds it until cleanup reads.
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(answer.as_bytes()).unwrap();
        let out = child.wait_with_output().expect("wait for script");
        drop(stdin);
        out
    };
    let out = on_terminal("n\n");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("--all ends 1 live sandbox(es)"), "{said}");
    assert!(said.contains("nothing was removed"), "{said}");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(exists(&docker, &live).await, "{said}");
    let out = on_terminal("y\n");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        said.contains(&format!(
            "removed      container {name}: owned by live pid {} (sleep 120)",
            owner.id()
        )),
        "{said}"
    );
    assert!(!exists(&docker, &live).await, "{said}");
    let _ = owner.kill();
    let _ = owner.wait();
}

/// Attack: an orphan whose owner's pid the kernel gave to another process. Its owner
/// label names a live pid (this test process), but its start-time label is not that
/// process's start, as it would be after the owner died and the pid came round again.
/// `--dry-run` names it as going because the pid was reused and removes nothing; a plain
/// cleanup removes it. Control: a container labelled with this process's pid and its true
/// start time is live and stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_container_whose_owner_pid_was_reused_is_an_orphan() {
    use runner_sandbox::docker::LABEL_OWNER_START;
    let _serial = serial();
    let docker = common::engine::client().await;
    let me = std::process::id() as i32;
    let mine = runner_sandbox::owner::started_at(me).expect("this process has a start time");
    let (reused, reused_name) =
        plant_labelled(&docker, me, Some(mine + 1), "runner-cleanup-reused").await;
    let (owned, owned_name) = plant_labelled(&docker, me, Some(mine), "runner-cleanup-owned").await;
    let labels = docker
        .inspect_container(&reused, None)
        .await
        .expect("inspect")
        .config
        .and_then(|c| c.labels)
        .unwrap_or_default();
    assert_eq!(labels.get(LABEL_OWNER_START), Some(&(mine + 1).to_string()));

    let out = cleanup(&["--dry-run"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!(
            "would remove container {reused_name}: its owner, pid {me}, is gone; that pid now belongs to another process"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "would keep   container {owned_name}: owned by live pid {me} (sandbox_cleanup"
        )),
        "{said}"
    );
    assert!(exists(&docker, &reused).await && exists(&docker, &owned).await);

    let out = cleanup(&[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(!exists(&docker, &reused).await, "{said}");
    assert!(exists(&docker, &owned).await, "{said}");
    runner_sandbox::docker::cleanup::list(&docker)
        .await
        .expect("list containers")
        .into_iter()
        .filter(|c| c.id == owned)
        .for_each(|c| assert!(!c.orphaned()));
    let _ = docker
        .remove_container(
            &owned,
            Some(
                bollard::query_parameters::RemoveContainerOptionsBuilder::new()
                    .force(true)
                    .build(),
            ),
        )
        .await;
}
