//! `[network.hosts."NAME"] programs`: only the named executables reach a host, judged by
//! the file each connection's process was started from, on landlock and on docker (the
//! first attacks and controls are in `crates/test-support/src/allowlist.rs`).
//!
//! The rest is here: the program that connects must be the program that was allowed,
//! whoever else holds the socket and whatever the loader added to it. The outside is
//! `127.0.0.1`, which only git may reach, once by name (`programs = ["git"]`) and once by
//! path (git's and its HTTP helper's files, in both layouts: the host's under landlock,
//! the image's under docker); `localhost` reaches the same server under a name no entry
//! covers.
//!
//! - Control: `git ls-remote` reaches the outside, and so does git with an unrelated
//!   variable in its environment; python3 reaches `localhost`.
//! - Attack (shared): python creates a socket, forks, and `exec`s git while the child
//!   python keeps the same socket and connects through it: git (the lower pid) and python
//!   both hold it. Refused, naming python and git.
//! - Attack (hidden): the same, the child python first made not dumpable, so its
//!   descriptors cannot be listed. Refused: a holder that hides cannot be vouched for.
//! - Attack (mem): python starts git and writes into its code through `/proc/PID/mem`,
//!   which `ptrace` being refused does not cover. Refused on both walls (read-only
//!   `/proc`); reading git's map is the control.
//! - Attack (preload): git started with `LD_PRELOAD` of a library built (on the host) into
//!   the worktree, whose constructor runs inside git. Refused, naming the variable.
//! - Attack (libpath): git started with `LD_LIBRARY_PATH` pointing at a copy of the zlib its
//!   helper loads, in the worktree. Refused, naming the variable.
//! - Attack (copy, names only): a copy of git's HTTP helper in the worktree, called
//!   `git-remote-http` like the installed one, with no loader variable. Refused: it runs
//!   code from a file the sandbox can write.
//!
//! Every refusal is a 403 whose reason names the rule and why, and nothing refused
//! arrives at the outside.

use common::Backend;
use common::allowlist::{call, records, setup};
use common::outside::Outside;

#[test]
fn landlock_only_named_programs_reach_a_host() {
    common::allowlist::only_named_programs_reach_a_host(Backend::Landlock);
}

#[test]
fn docker_only_named_programs_reach_a_host() {
    common::allowlist::only_named_programs_reach_a_host(Backend::Docker);
}

#[test]
fn landlock_the_program_that_connects_is_the_one_allowed_by_name() {
    the_program_that_connects_is_the_one_allowed(Backend::Landlock, Entries::Name);
}

#[test]
fn docker_the_program_that_connects_is_the_one_allowed_by_name() {
    the_program_that_connects_is_the_one_allowed(Backend::Docker, Entries::Name);
}

#[test]
fn landlock_the_program_that_connects_is_the_one_allowed_by_path() {
    the_program_that_connects_is_the_one_allowed(Backend::Landlock, Entries::Path);
}

#[test]
fn docker_the_program_that_connects_is_the_one_allowed_by_path() {
    the_program_that_connects_is_the_one_allowed(Backend::Docker, Entries::Path);
}

#[derive(Clone, Copy, PartialEq)]
enum Entries {
    /// `programs = ["git"]`.
    Name,
    /// git and its HTTP helper by path, where the host and the image keep them.
    Path,
}

impl Entries {
    fn toml(self) -> &'static str {
        match self {
            Entries::Name => r#"["git"]"#,
            Entries::Path => {
                r#"["/usr/bin/git", "/usr/lib/git-core/git-remote-http", "/usr/local/bin/git", "/usr/local/libexec/git-core/git-remote-http"]"#
            }
        }
    }
}

/// A python that shares its socket with git: it forks, the parent becomes git (holding the
/// socket, until the child closes git's standard input), and the child connects through
/// the shared socket to the proxy and asks for the URL. `hidden` makes the child not
/// dumpable first.
const SHARED_PY: &str = r#"
import ctypes, os, socket, sys, time
mode, url = sys.argv[1], sys.argv[2]
proxy = os.environ["http_proxy"].split("//")[-1].strip("/")
host, port = proxy.rsplit(":", 1)
s = socket.socket()
s.set_inheritable(True)
r, w = os.pipe()
if os.fork():
    os.close(w)
    os.dup2(r, 0)
    os.execvp("git", ["git", "hash-object", "--stdin"])
os.close(r)
if mode == "hidden":
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
time.sleep(1)
print("SHARED", mode, "BESIDE", os.readlink(f"/proc/{os.getppid()}/exe"), flush=True)
s.connect((host, int(port)))
name = url.split("/")[2]
s.sendall(f"GET {url} HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
answer = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    answer += chunk
head, _, body = answer.partition(b"\r\n\r\n")
status = head.split(b"\r\n")[0].decode(errors="replace")
print("SHARED", mode, "STATUS", status, "BODY", body[:300].decode(errors="replace").replace("\n", " "), flush=True)
os.close(w)
"#;

/// Writing into a running git through `/proc/PID/mem` (ptrace by another door), beside
/// reading its map, which stays open.
const MEM_PY: &str = r#"
import subprocess, time
git = subprocess.Popen(["git", "hash-object", "--stdin"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
# The exec has happened when Popen returns, the loading of git's file perhaps not yet.
for _ in range(100):
    maps = open(f"/proc/{git.pid}/maps").read()
    if "/git" in maps:
        break
    time.sleep(0.05)
print("MAPS READ", "/git" in maps, flush=True)
try:
    with open(f"/proc/{git.pid}/mem", "r+b", buffering=0) as mem:
        start = int(maps.split("-")[0], 16)
        mem.seek(start)
        code = mem.read(4)
        mem.seek(start)
        mem.write(code)
        print("MEM WRITTEN", flush=True)
except OSError as e:
    print("MEM REFUSED", e, flush=True)
git.communicate(b"")
"#;

/// A library whose constructor says it ran, in whatever program loads it.
const PRELOAD_C: &str = r#"
#include <unistd.h>
__attribute__((constructor)) static void ran(void) {
    write(2, "PRELOAD_RAN\n", 12);
}
"#;

/// Builds the preloaded library into the worktree with the host's compiler (both walls see
/// the worktree; the image need not have one).
fn build_preload(wt: &std::path::Path) {
    let src = wt.join("..").join("preload.c");
    std::fs::write(&src, PRELOAD_C).unwrap();
    common::engine::ensure_package("gcc", "/usr/bin/cc");
    let out = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(wt.join("libquiet.so"))
        .arg(&src)
        .output()
        .expect("run the host's C compiler (cc)");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The controls and attacks, one after the other, as a script in the worktree (the bash
/// tool's own checks would stop at the paths its command names).
fn attacks_sh(entries: Entries, port: u16) -> String {
    let url = |path: &str| format!("http://127.0.0.1:{port}/{path}");
    let helper = "\"$(git --exec-path)/git-remote-http\"";
    let mut lines = vec![
        "export no_proxy= NO_PROXY=".to_string(),
        // Controls.
        format!(
            "git ls-remote {} >/dev/null 2>&1; echo PLAIN_DONE",
            url("plain.git")
        ),
        format!(
            "RUNNER_TEST_HARMLESS=1 git ls-remote {} >/dev/null 2>&1; echo HARMLESS_DONE",
            url("harmless.git")
        ),
        format!("python3 net.py fetch http://localhost:{port}/blob"),
        // Attacks.
        format!("python3 shared.py shared {}", url("blob?shared")),
        format!("python3 shared.py hidden {}", url("blob?hidden")),
        "python3 mem.py".to_string(),
        format!(
            "LD_PRELOAD=$PWD/libquiet.so git ls-remote {} >/dev/null 2>preload.err; echo PRELOAD_RAN_IN_GIT $(grep -c PRELOAD_RAN preload.err)",
            url("preload.git")
        ),
        format!(
            "mkdir -p libdir && cp \"$(ldd {helper} | awk '/libz[.]so/ {{print $3}}')\" libdir/ && echo LIBDIR $(ls libdir)"
        ),
        format!(
            "LD_LIBRARY_PATH=$PWD/libdir git ls-remote {} >/dev/null 2>&1; echo LIBPATH_DONE",
            url("libpath.git")
        ),
    ];
    if entries == Entries::Name {
        lines.push(format!(
            "cp {helper} ./git-remote-http && printf 'list\\n\\n' | ./git-remote-http origin {} >/dev/null 2>&1; echo COPY_DONE",
            url("copy.git")
        ));
    }
    lines.join("\n") + "\n"
}

fn the_program_that_connects_is_the_one_allowed(backend: Backend, entries: Entries) {
    let s = setup();
    std::fs::write(
        &s.config,
        format!(
            "[permission.network]\n\"*\" = \"deny\"\n\"127.0.0.1\" = \"allow\"\n\"localhost\" = \"allow\"\n\n[network.hosts.\"127.0.0.1\"]\nprograms = {}\n",
            entries.toml()
        ),
    )
    .unwrap();
    std::fs::write(s.wt.join("shared.py"), SHARED_PY).unwrap();
    std::fs::write(s.wt.join("mem.py"), MEM_PY).unwrap();
    build_preload(&s.wt);
    let outside = Outside::start(1000);
    let p = outside.port;
    std::fs::write(s.wt.join("attacks.sh"), attacks_sh(entries, p)).unwrap();
    let out = call(&s, backend, "bash attacks.sh");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let ctx = format!(
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recs = records(&out);
    let allowed: Vec<_> = recs.iter().filter(|r| r.0 == "allow").collect();
    // The records come in the script's order: two gits and python to localhost allowed,
    // then nothing but refusals. Each attack's refusals are found by why.
    let localhost = recs
        .iter()
        .position(|r| r.0 == "allow" && r.1.starts_with("localhost"))
        .unwrap_or_else(|| panic!("python3 to localhost was refused: {ctx}"));
    let before: Vec<_> = recs[..localhost].iter().collect();
    assert_eq!(
        before.len(),
        2,
        "one connection for each control git: {ctx}"
    );
    assert!(
        before
            .iter()
            .all(|r| r.0 == "allow" && r.1.starts_with("127.0.0.1")),
        "plain git, and git with an unrelated variable, reach the host: {ctx}"
    );
    let after: Vec<&String> = recs[localhost + 1..].iter().map(|r| &r.2).collect();
    assert!(
        recs[localhost + 1..].iter().all(|r| r.0 == "deny"),
        "an attack reached the host only git may reach: {ctx}"
    );
    let refused = |why: &[&str]| -> Vec<&String> {
        after
            .iter()
            .copied()
            .filter(|r| why.iter().all(|w| r.contains(w)))
            .collect()
    };
    for r in &after {
        assert!(
            r.contains("only ") && r.contains("may reach 127.0.0.1 ([network.hosts] programs)"),
            "{r}\n{ctx}"
        );
    }

    for done in ["PLAIN_DONE", "HARMLESS_DONE", "LIBPATH_DONE"] {
        assert!(stdout.contains(done), "{done}: {ctx}");
    }
    assert!(
        stdout.contains(&format!("OK http://localhost:{p}/blob 1000")),
        "{ctx}"
    );

    // Shared: git (the lower pid) and python hold the socket; python is named, and git.
    assert!(stdout.contains("SHARED shared BESIDE /"), "{ctx}");
    assert!(
        stdout.contains("SHARED shared STATUS HTTP/1.1 403"),
        "{ctx}"
    );
    let shared = refused(&["came from /", "python3", "(held also by /", "git"]);
    assert_eq!(shared.len(), 1, "{ctx}");

    // Hidden: the not-dumpable python cannot be seen through, so nothing is let by.
    assert!(
        stdout.contains("SHARED hidden STATUS HTTP/1.1 403"),
        "{ctx}"
    );
    assert_eq!(refused(&["hides its descriptors"]).len(), 1, "{ctx}");

    // Nobody writes into a running git's memory; its map is still there to read.
    assert!(stdout.contains("MAPS READ True"), "{ctx}");
    assert!(
        stdout.contains("MEM REFUSED") && !stdout.contains("MEM WRITTEN"),
        "{ctx}"
    );

    // Preload: the library's code really ran inside git, and git was refused for it.
    assert!(!stdout.contains("PRELOAD_RAN_IN_GIT 0"), "{ctx}");
    assert!(stdout.contains("PRELOAD_RAN_IN_GIT "), "{ctx}");
    let preload = refused(&["was started with LD_PRELOAD=", "/libquiet.so"]);
    assert!(!preload.is_empty(), "{ctx}");

    // Library path: zlib was copied into the worktree; git was refused for the variable.
    assert!(stdout.contains("LIBDIR libz.so"), "{ctx}");
    let libpath = refused(&["was started with LD_LIBRARY_PATH=", "/libdir"]);
    assert!(!libpath.is_empty(), "{ctx}");

    // Copy: named git-remote-http, with no variable, but run from the worktree.
    let mut attacks = shared.len() + 1 + preload.len() + libpath.len();
    if entries == Entries::Name {
        assert!(stdout.contains("COPY_DONE"), "{ctx}");
        let copy = refused(&[
            "runs code from /",
            "git-remote-http, a file in a place the sandbox can write",
        ]);
        assert!(!copy.is_empty(), "{ctx}");
        attacks += copy.len();
    }
    assert_eq!(
        after.len(),
        attacks,
        "each refusal is one of the attacks': {ctx}"
    );
    assert_eq!(
        outside.accepted(),
        allowed.len(),
        "only the allowed connections arrived: {ctx}"
    );
}
