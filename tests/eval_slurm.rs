//! `runner eval submit --slurm` on a real Slurm: Debian's `slurm-wlm` and `munge`, one
//! `slurmctld` and one `slurmd` on this machine, started here with a config of the test's
//! own (its ports, its state and spool folders, the node named as `slurmd -C` sees this
//! machine). The same Harbor tasks run without Slurm first; the array's merged verdicts
//! must be theirs exactly. An element cancelled in the middle of its shard leaves a
//! half-written shard that the merge names (exit 8), and the same command run again
//! submits that shard alone, which runs only its unfinished attempts. Ctrl-C cancels the
//! array (exit 130). After each, nothing is left: no job in Slurm's queue, no shard
//! process, no container of a shard.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const DOCKERFILE: &str =
    "FROM runner-sandbox:bookworm\nWORKDIR /app\nRUN echo 'echo $(($1 - $2))' > /app/calc.sh\n";
const TEST: &str = "#!/bin/bash\nif [ \"$(sh /app/calc.sh 2 3)\" = 5 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";
const TOML: &str = "version = \"1.0\"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n";

/// The tasks: `adds-*` resolve, `mul-*` do not, `slow` resolves after a pause long enough to
/// cancel it in. Over 3 shards: 1 holds adds-2 and mul-1, 2 holds adds-1 and adds-3, 3
/// holds adds-5, mul-3 and slow (checked below against the library's split).
const TASKS: [&str; 7] = [
    "adds-1", "adds-2", "adds-3", "adds-5", "mul-1", "mul-3", "slow",
];
const SLOW_SHARD: u32 = 3;

fn task(dir: &Path, id: &str) {
    let dir = dir.join(id);
    for sub in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("instruction.md"), "calc.sh should add.\n").unwrap();
    std::fs::write(dir.join("task.toml"), TOML).unwrap();
    std::fs::write(dir.join("environment/Dockerfile"), DOCKERFILE).unwrap();
    std::fs::write(dir.join("tests/test.sh"), TEST).unwrap();
    let op = if id.starts_with("mul") { '*' } else { '+' };
    let pause = if id == "slow" { "sleep 6\n" } else { "" };
    std::fs::write(
        dir.join("solution/solve.sh"),
        format!("{pause}printf 'echo $(($1 {op} $2))\\n' > /app/calc.sh\n"),
    )
    .unwrap();
}

/// One Slurm cluster of one node, on the test's own ports, config and folders; every
/// daemon it started, and every job still in its queue, ended when it is dropped.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<(&'static str, Child)>,
    _tmp: tempfile::TempDir,
}

/// A TCP port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn id_of(user: &str, flag: &str) -> u32 {
    let out = Command::new("id").args([flag, user]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn wait_for(what: &str, limit: Duration, mut ready: impl FnMut() -> bool, logs: &Path) {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() > limit {
            let mut said = String::new();
            for entry in std::fs::read_dir(logs).unwrap().flatten() {
                if entry.path().extension().is_some_and(|e| e == "log") {
                    said += &format!(
                        "--- {}\n{}\n",
                        entry.path().display(),
                        std::fs::read_to_string(entry.path()).unwrap_or_default()
                    );
                }
            }
            panic!("{what} not within {limit:?}\n{said}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Cluster {
    fn start() -> Cluster {
        common::engine::ensure_package("munge", "/usr/sbin/munged");
        common::engine::ensure_package("slurm-wlm", "/usr/sbin/slurmctld");
        // SAFETY: plain syscall.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "slurmd runs jobs as their users: the Slurm test runs as root"
        );
        let tmp = tempfile::Builder::new()
            .prefix("runner-slurm")
            .tempdir()
            .unwrap();
        let dir = std::fs::canonicalize(tmp.path()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let open = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(&dir, open.clone()).unwrap();
        let munge = dir.join("munge");
        for sub in ["munge", "state", "spool", "logs"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let (uid, gid) = (id_of("munge", "-u"), id_of("munge", "-g"));
        std::os::unix::fs::chown(&munge, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&munge, open).unwrap();
        let key = munge.join("munge.key");
        let made = Command::new("mungekey")
            .arg("--create")
            .arg(format!("--keyfile={}", key.display()))
            .status()
            .unwrap();
        assert!(made.success(), "mungekey --create failed");
        std::os::unix::fs::chown(&key, Some(uid), Some(gid)).unwrap();
        let mut cluster = Cluster {
            conf: dir.join("slurm.conf"),
            dir: dir.clone(),
            daemons: Vec::new(),
            _tmp: tmp,
        };
        let socket = munge.join("munge.sock");
        let mut munged = Command::new("/usr/sbin/munged");
        munged.arg("--foreground");
        for (flag, file) in [
            ("socket", "munge.sock"),
            ("key-file", "munge.key"),
            ("log-file", "munged.log"),
            ("pid-file", "munged.pid"),
            ("seed-file", "munged.seed"),
        ] {
            munged.arg(format!("--{flag}={}", munge.join(file).display()));
        }
        munged.uid(uid).gid(gid);
        cluster.spawn("munged", munged);
        let logs = dir.join("logs");
        wait_for(
            "munged's socket",
            Duration::from_secs(10),
            || socket.exists(),
            &munge,
        );
        std::fs::write(&cluster.conf, config(&dir, &socket)).unwrap();
        for daemon in ["slurmctld", "slurmd"] {
            let mut cmd = Command::new(format!("/usr/sbin/{daemon}"));
            cmd.arg("-D").arg("-f").arg(&cluster.conf);
            cluster.spawn(daemon, cmd);
        }
        wait_for(
            "the node idle in sinfo",
            Duration::from_secs(30),
            || {
                let out = cluster.slurm("sinfo").args(["-h", "-o", "%t"]).output();
                out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
            },
            &logs,
        );
        cluster
    }

    fn spawn(&mut self, name: &'static str, mut cmd: Command) {
        let log = std::fs::File::create(self.dir.join("logs").join(format!("{name}.log"))).unwrap();
        cmd.env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.daemons.push((name, child));
    }

    /// A Slurm command of this cluster.
    fn slurm(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("SLURM_CONF", &self.conf);
        cmd
    }

    /// The jobs in the queue that are not over (pending, running, completing).
    fn queued(&self) -> String {
        let out = self
            .slurm("squeue")
            .args(["-h", "-o", "%i %T"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

/// slurm.conf: the node as `slurmd -C` describes this machine (its real name and CPUs),
/// the test's own ports and folders, no cgroups (linuxproc tracks a job's processes), and
/// finished jobs kept an hour, since without slurmdbd `scontrol` is all that knows them.
fn config(dir: &Path, socket: &Path) -> String {
    let node = Command::new("/usr/sbin/slurmd").arg("-C").output().unwrap();
    let node = String::from_utf8_lossy(&node.stdout);
    let line = node
        .lines()
        .find(|l| l.starts_with("NodeName="))
        .expect("slurmd -C names the node");
    // Its memory as Slurm counts it can differ by a little from run to run: left out.
    let node: Vec<&str> = line
        .split_whitespace()
        .filter(|w| !w.starts_with("RealMemory="))
        .collect();
    let name = node[0].trim_start_matches("NodeName=");
    let d = dir.display();
    format!(
        "ClusterName=runnertest\n\
         SlurmctldHost={name}(127.0.0.1)\n\
         SlurmctldPort={}\nSlurmdPort={}\n\
         AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={}\n\
         SlurmUser=root\nSlurmdUser=root\n\
         StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
         SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
         SlurmctldLogFile={d}/logs/slurmctld.log\nSlurmdLogFile={d}/logs/slurmd.log\n\
         ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
         JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
         JobCompType=jobcomp/none\nMpiDefault=none\n\
         SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n\
         ReturnToService=2\nMinJobAge=3600\nKillWait=30\n\
         {} NodeAddr=127.0.0.1 State=UNKNOWN\n\
         PartitionName=test Nodes={name} Default=YES MaxTime=INFINITE State=UP\n",
        free_port(),
        free_port(),
        socket.display(),
        node.join(" "),
    )
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Jobs first (their shards clean up on SIGTERM), then the daemons, newest first.
        let _ = self.slurm("scancel").args(["--user", "root"]).status();
        let start = Instant::now();
        while !self.queued().is_empty() && start.elapsed() < Duration::from_secs(40) {
            std::thread::sleep(Duration::from_millis(200));
        }
        for (_, child) in self.daemons.iter_mut().rev() {
            // SAFETY: signals a process group this test started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
            let start = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if start.elapsed() > Duration::from_secs(5) {
                    // SAFETY: as above.
                    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// A run of `eval submit`, read as it goes.
struct Submit {
    child: Child,
    lines: BufReader<std::process::ChildStdout>,
    events: Vec<Value>,
    /// Processes that ran a shard of this out folder, seen while it ran.
    shard_pids: BTreeSet<u32>,
}

fn submit(cluster: &Cluster, set: &Path, out: &Path, data: &Path) -> Submit {
    let mut child = cluster
        .slurm(common::runner_exe().to_str().unwrap())
        .args(["eval", "submit", "--slurm"])
        .arg(set)
        .args(["--shards", "3", "--out"])
        .arg(out)
        .args(["--agent", "oracle", "--jobs", "2", "--json"])
        .env("XDG_DATA_HOME", data.join("data"))
        .env("XDG_CONFIG_HOME", data.join("config"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap());
    Submit {
        child,
        lines,
        events: Vec::new(),
        shard_pids: BTreeSet::new(),
    }
}

impl Submit {
    /// Reads events until `stop_at` says so for one (then returns true) or the stream
    /// ends (false).
    fn read_until(&mut self, out: &Path, mut stop_at: impl FnMut(&[Value]) -> bool) -> bool {
        loop {
            let mut line = String::new();
            if self.lines.read_line(&mut line).unwrap() == 0 {
                return false;
            }
            self.shard_pids.extend(shard_processes(out));
            let event: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not an event: {line:?}: {e}"));
            self.events.push(event);
            if stop_at(&self.events) {
                return true;
            }
        }
    }

    /// The rest of the stream, the exit status and what it said on stderr.
    fn finish(mut self, out: &Path) -> (i32, Vec<Value>, String, BTreeSet<u32>) {
        self.read_until(out, |_| false);
        let output = self.child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let code = output.status.code().unwrap_or(-1);
        let events = self.events;
        assert_eq!(
            events.first().map(|e| &e["type"]),
            Some(&Value::from("run_start")),
            "{stderr}"
        );
        let last = events.last().unwrap();
        assert_eq!(last["type"], "run_end", "{stderr}");
        assert_eq!(last["exit_code"], code, "{stderr}");
        (code, events, stderr, self.shard_pids)
    }
}

/// Processes whose command line names `out`: the shards writing into it.
fn shard_processes(out: &Path) -> Vec<u32> {
    let needle = out.to_string_lossy().into_owned();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains("--shard") && cmdline.contains(&needle) {
            pids.push(pid);
        }
    }
    pids
}

/// Nothing of a submission is left: no job in the queue, no shard process, no container
/// of one.
fn nothing_left(cluster: &Cluster, out: &Path, pids: &BTreeSet<u32>) {
    assert_eq!(cluster.queued(), "", "jobs left in Slurm's queue");
    assert_eq!(
        shard_processes(out),
        Vec::<u32>::new(),
        "shard processes left"
    );
    for pid in pids {
        let left = Command::new("docker")
            .args(["ps", "-aq", "--filter"])
            .arg(format!("label=runner.owner-pid={pid}"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&left.stdout).trim(),
            "",
            "containers of shard process {pid} left"
        );
    }
}

/// Each attempt's verdict in an out folder: task → (status, reward).
fn verdicts(out: &Path) -> BTreeMap<String, (String, Value)> {
    TASKS
        .iter()
        .map(|id| {
            let path = out.join("tasks").join(id).join("result.json");
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let r: Value = serde_json::from_str(&text).unwrap();
            (
                id.to_string(),
                (
                    r["status"].as_str().unwrap().to_string(),
                    r["reward"].clone(),
                ),
            )
        })
        .collect()
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

#[test]
fn an_evaluation_runs_as_a_slurm_array_and_a_cancelled_shard_resumes() {
    common::engine::docker();
    for id in TASKS {
        let expected = match id {
            "adds-2" | "mul-1" => 1,
            "adds-1" | "adds-3" => 2,
            _ => SLOW_SHARD,
        };
        assert_eq!(runner_eval::shard::shard_of(id, 3), expected, "{id}");
    }
    let started = Instant::now();
    let cluster = Cluster::start();
    let slurm_up = started.elapsed();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let set = dir.join("set");
    for id in TASKS {
        task(&set, id);
    }

    // The same tasks without Slurm: the verdicts the array must reach.
    let t = Instant::now();
    let base = dir.join("base");
    let run = Command::new(common::runner_exe())
        .args(["eval", "run"])
        .arg(&set)
        .arg("--out")
        .arg(&base)
        .args(["--agent", "oracle", "--jobs", "2"])
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let expected = verdicts(&base);
    assert_eq!(
        expected.values().filter(|(s, _)| s == "resolved").count(),
        5,
        "{expected:?}"
    );
    let plain = t.elapsed();

    // The array, its slow shard cancelled once it has finished an attempt and is in
    // its slow one (each shard runs two attempts at a time).
    let t = Instant::now();
    let out = dir.join("shared");
    let mut first = submit(&cluster, &set, &out, &dir);
    let reached = first.read_until(&out, |events| {
        let seen = |kind: &str, slow: bool| {
            events.iter().any(|e| {
                let task = e["task"].as_str().unwrap_or("");
                e["type"] == kind
                    && (task == "slow") == slow
                    && runner_eval::shard::shard_of(task, 3) == SLOW_SHARD
            })
        };
        // Two at a time in a shard: whatever the order, another of its attempts ends
        // while the slow one pauses.
        seen("attempt_start", true) && !seen("attempt_end", true) && seen("attempt_end", false)
    });
    assert!(
        reached,
        "the slow shard never started its slow attempt: {:#?}",
        first.events
    );
    let job = of_type(&first.events, "submitted")[0]["job"]
        .as_str()
        .unwrap()
        .to_string();
    let cancelled = cluster
        .slurm("scancel")
        .arg(format!("{job}_{SLOW_SHARD}"))
        .status()
        .unwrap();
    assert!(cancelled.success());
    let (code, events, stderr, pids) = first.finish(&out);
    let cancel_round = t.elapsed();
    assert_eq!(
        code, 8,
        "a half-written shard is an incomplete run: {stderr}"
    );
    assert!(
        stderr.contains(&format!("shard {SLOW_SHARD}/3 is half-written: ")),
        "{stderr}"
    );
    let submitted = of_type(&events, "submitted");
    assert_eq!(submitted.len(), 1);
    assert_eq!(submitted[0]["shards"], serde_json::json!([1, 2, 3]));
    let shards = of_type(&events, "shard");
    assert_eq!(shards.len(), 3, "one shard event per shard: {shards:#?}");
    for s in &shards {
        let (state, job_state) = if s["shard"] == SLOW_SHARD {
            ("half_written", "CANCELLED")
        } else {
            ("complete", "COMPLETED")
        };
        assert_eq!(s["state"], state, "{s}");
        assert_eq!(s["job_state"], job_state, "{s}");
    }
    nothing_left(&cluster, &out, &pids);
    assert!(!pids.is_empty(), "no shard process was seen");
    // What the cancelled shard left unfinished, from its folder.
    let slow_dir = out.join("shards").join(format!("{SLOW_SHARD}-of-3"));
    let unfinished: BTreeSet<String> = TASKS
        .iter()
        .filter(|id| runner_eval::shard::shard_of(id, 3) == SLOW_SHARD)
        .filter(|id| !slow_dir.join("tasks").join(id).join("result.json").exists())
        .map(|id| id.to_string())
        .collect();
    assert!(unfinished.contains("slow"), "{unfinished:?}");
    assert!(
        unfinished.len() < 3,
        "the shard finished nothing before: {unfinished:?}"
    );

    // The same command again: that shard alone is submitted, and runs only what it left.
    let t = Instant::now();
    let (code, events, stderr, pids) = submit(&cluster, &set, &out, &dir).finish(&out);
    let resume_round = t.elapsed();
    assert_eq!(code, 0, "{stderr}");
    let submitted = of_type(&events, "submitted");
    assert_eq!(submitted.len(), 1, "{events:#?}");
    assert_eq!(submitted[0]["shards"], serde_json::json!([SLOW_SHARD]));
    let ran: BTreeSet<String> = of_type(&events, "attempt_start")
        .iter()
        .map(|e| e["task"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        ran, unfinished,
        "the rerun ran other attempts than those left"
    );
    assert_eq!(events[0]["to_run"], unfinished.len(), "{}", events[0]);
    assert_eq!(of_type(&events, "shard").len(), 3, "{events:#?}");
    assert_eq!(
        verdicts(&out),
        expected,
        "the merged verdicts differ from a plain run's"
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["counts"]["resolved"], 5);
    assert_eq!(summary["counts"]["unresolved"], 2);
    assert!(out.join("report.html").exists());
    nothing_left(&cluster, &out, &pids);

    // `eval merge` of the same shards elsewhere, twice: the same summary each time.
    let merged = dir.join("merged");
    let mut summaries = Vec::new();
    for _ in 0..2 {
        let run = Command::new(common::runner_exe())
            .args(["eval", "merge"])
            .arg(&out)
            .arg("--out")
            .arg(&merged)
            .output()
            .unwrap();
        assert_eq!(
            run.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        summaries.push(std::fs::read(merged.join("summary.json")).unwrap());
    }
    assert_eq!(summaries[0], summaries[1]);
    assert_eq!(verdicts(&merged), expected);

    // Ctrl-C while the shards run: the array is cancelled, and the command exits 130 once
    // every element has ended.
    let t = Instant::now();
    let out2 = dir.join("stopped");
    let mut third = submit(&cluster, &set, &out2, &dir);
    let reached = third.read_until(&out2, |events| {
        events.iter().any(|e| e["type"] == "attempt_start")
    });
    assert!(reached, "{:#?}", third.events);
    // SAFETY: signals the child this test started.
    unsafe { libc::kill(third.child.id() as i32, libc::SIGINT) };
    let (code, _events, stderr, pids) = third.finish(&out2);
    let stop_round = t.elapsed();
    assert_eq!(code, 130, "{stderr}");
    assert!(stderr.contains("scancel"), "{stderr}");
    nothing_left(&cluster, &out2, &pids);
    eprintln!(
        "slurm test: daemons up in {slurm_up:.1?}; plain run {plain:.1?}; array with a cancelled shard {cancel_round:.1?}; resume {resume_round:.1?}; Ctrl-C {stop_round:.1?}; total {:.1?}",
        started.elapsed()
    );
}
