//! `runner exec [wall flags] -- PROGRAM ARGS…` (issue 34, part 2), through the real binary
//! on both walls: the program's status and streams come back exactly, its argv arrives as
//! given (no shell between), the wall holds around it next to controls that pass, and on a
//! terminal (util-linux `script`) it takes keys, sees the window size and its changes, and
//! gets Ctrl-C itself while runner waits it out.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::allowlist::Setup;

const WALLS: [&str; 2] = ["landlock", "docker"];

/// `runner exec --sandbox BACKEND EXTRA… -- ARGV…` with the setup's folders, on the test
/// engine for docker.
fn exec(s: &Setup, backend: &str, extra: &[&str], argv: &[&std::ffi::OsStr]) -> Command {
    let mut args = vec!["exec", "--sandbox", backend];
    args.extend_from_slice(extra);
    let mut c = common::allowlist::runner(s, &args);
    if backend == "docker" {
        common::engine::docker();
        common::engine::cli(&mut c);
    }
    c.arg("--").args(argv);
    c
}

fn os<'a>(args: &[&'a str]) -> Vec<&'a std::ffi::OsStr> {
    args.iter().map(|a| std::ffi::OsStr::new(*a)).collect()
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Prints each argument as hex on stdout, the hex of all of stdin after them, a line on
/// stderr, and exits 7.
const ECHO_PY: &str = "import os, sys\n\
for a in sys.argv[1:]:\n    print(os.fsencode(a).hex())\n\
print('stdin', sys.stdin.buffer.read().hex())\n\
print('to stderr', file=sys.stderr)\n\
sys.exit(7)\n";

/// The status, the two streams apart, stdin piped through, and every awkward argument
/// arriving byte for byte: spaces, quotes, `$`, a backquote, a newline, a glob, an empty
/// one, one that looks like a flag. A shell anywhere on the way would change one of them.
#[test]
fn the_program_gets_its_argv_and_stdin_exactly_and_its_status_comes_back() {
    let awkward = [
        "two words",
        "it's \"quoted\"",
        "$HOME `id` $(id)",
        "line one\nline two",
        "*",
        "",
        "--sandbox",
    ];
    let input: &[u8] = b"bytes\0\xff\xfe\n\r\x1b end";
    for backend in WALLS {
        let s = common::allowlist::setup();
        let mut argv = os(&["python3", "-c", ECHO_PY]);
        argv.extend(awkward.iter().map(std::ffi::OsStr::new));
        let mut child = exec(&s, backend, &[], &argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = child.wait_with_output().unwrap();
        let all = text(&out);
        assert_eq!(
            out.status.code(),
            Some(7),
            "{backend}: the program's status\n{all}"
        );
        let mut want: String = awkward
            .iter()
            .map(|a| format!("{}\n", hex(a.as_bytes())))
            .collect();
        want.push_str(&format!("stdin {}\n", hex(input)));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            want,
            "{backend}: argv or stdin changed on the way\n{all}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("to stderr"), "{backend}\n{all}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("to stderr"),
            "{backend}: stderr is kept apart from stdout\n{all}"
        );
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An argument that is not UTF-8 crosses the landlock wall as it is; docker, whose engine
/// takes JSON text, refuses it with runner's failure status and says why, rather than
/// mangling it.
#[test]
fn a_non_utf8_argument_arrives_under_landlock_and_is_refused_by_docker() {
    let raw = std::ffi::OsStr::from_bytes(b"caf\xe9 \xff");
    let s = common::allowlist::setup();
    let mut argv = os(&[
        "python3",
        "-c",
        "import os,sys; print(os.fsencode(sys.argv[1]).hex())",
    ]);
    argv.push(raw);
    let out = exec(&s, "landlock", &[], &argv).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        hex(raw.as_bytes()),
        "{}",
        text(&out)
    );
    let out = exec(&s, "docker", &[], &argv).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not UTF-8"),
        "{}",
        text(&out)
    );
}

/// A death by signal N is 128 + N, as a shell reports it; a program the sandbox does not
/// have is 127 with a line that names it and the sandbox's PATH; a plain exit is its own.
#[test]
fn signal_deaths_and_missing_programs_get_a_shells_statuses() {
    for backend in WALLS {
        let s = common::allowlist::setup();
        let out = exec(&s, backend, &[], &os(&["sh", "-c", "kill -TERM $$"]))
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(128 + 15),
            "{backend}\n{}",
            text(&out)
        );
        let out = exec(&s, backend, &[], &os(&["no-such-program-4d1", "x"]))
            .output()
            .unwrap();
        let all = text(&out);
        assert_eq!(out.status.code(), Some(127), "{backend}\n{all}");
        assert!(
            all.contains("\"no-such-program-4d1\"") && all.contains("sandbox's PATH"),
            "{backend}: the message names the program and where it was looked for\n{all}"
        );
        let out = exec(&s, backend, &[], &os(&["sh", "-c", "exit 42"]))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(42), "{backend}\n{}", text(&out));
    }
}

/// A secret next to the worktree (as `~/.ssh` is next to a project), a folder outside it,
/// and a port on the host: from `runner exec` the read fails, the write fails and the
/// connection fails, while the same read from the host, a read and a write in the worktree,
/// and the network through the allow-list (the host named in the config) all work.
#[test]
fn the_wall_holds_around_the_program_next_to_controls_that_pass() {
    for backend in WALLS {
        let s = common::allowlist::setup();
        let base = s.wt.parent().unwrap().to_path_buf();
        let ssh = base.join("home/.ssh");
        std::fs::create_dir_all(&ssh).unwrap();
        let key = ssh.join("id_ed25519");
        std::fs::write(&key, "HOST-SECRET-KEY-5e2a\n").unwrap();
        let outside = base.join("elsewhere");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(s.wt.join("inside.txt"), "INSIDE-TEXT\n").unwrap();
        common::engine::hand_over(&base);
        let listener = Listener::start();
        let host_addr = if backend == "docker" {
            docker_gateway()
        } else {
            "127.0.0.1".to_string()
        };
        let script = format!(
            "cat {key} || echo READ-REFUSED\n\
             touch {out}/pwned || echo WRITE-REFUSED\n\
             cat inside.txt && touch made-inside\n\
             python3 net.py direct {host_addr} {port}\n",
            key = key.display(),
            out = outside.display(),
            port = listener.port,
        );
        let out = exec(&s, backend, &[], &os(&["sh", "-c", &script]))
            .output()
            .unwrap();
        let all = text(&out);
        // The control beside the attack: the key is there, and readable from the host.
        assert!(
            std::fs::read_to_string(&key)
                .unwrap()
                .contains("HOST-SECRET")
        );
        assert!(
            !all.contains("HOST-SECRET"),
            "{backend}: the key was read\n{all}"
        );
        assert!(all.contains("READ-REFUSED"), "{backend}\n{all}");
        assert!(all.contains("WRITE-REFUSED"), "{backend}\n{all}");
        assert!(
            !outside.join("pwned").exists(),
            "{backend}: wrote outside\n{all}"
        );
        assert!(
            all.contains("INSIDE-TEXT"),
            "{backend}: the worktree reads\n{all}"
        );
        assert!(
            s.wt.join("made-inside").exists(),
            "{backend}: the worktree writes\n{all}"
        );
        assert!(all.contains("BLOCKED"), "{backend}: the host port\n{all}");
        assert_eq!(
            listener.accepted(),
            0,
            "{backend}: a connection arrived\n{all}"
        );
        // The port is open from the host (the attack failed at the wall, not at the port).
        std::net::TcpStream::connect(("127.0.0.1", listener.port)).unwrap();
        // With the allow-list, the host the config names is reached through the proxy,
        // and the connection is listed at the end.
        let web = common::outside::Outside::start(1000);
        let config = s.config.display().to_string();
        let url = format!("http://127.0.0.1:{}/blob", web.port);
        let out = exec(
            &s,
            backend,
            &["--network", "allowlist", "--config", &config],
            // The loopback is the sandbox's own unless the proxy carries it there.
            &os(&[
                "env",
                "no_proxy=",
                "NO_PROXY=",
                "python3",
                "net.py",
                "fetch",
                &url,
            ]),
        )
        .output()
        .unwrap();
        let all = text(&out);
        assert!(all.contains(&format!("OK {url} 1000")), "{backend}\n{all}");
        assert_eq!(web.accepted(), 1, "{backend}\n{all}");
        assert!(
            common::allowlist::records(&out)
                .iter()
                .any(|(d, h, _)| d == "allow" && h == &format!("127.0.0.1:{}", web.port)),
            "{backend}: the connection is reported\n{all}"
        );
    }
}

/// A loopback address your own config opens by name means the host's (a model server on
/// this machine): it leaves `no_proxy`, so a client that honours the proxy variables
/// reaches it through the proxy with no flag of its own, as OpenCode's recipe in
/// docs/EXEC.md needs. The other loopback names stay the sandbox's own: `localhost` goes
/// direct and reaches nothing of the host's. A repository's `.runner/config.toml` naming
/// `localhost` does not move it to the host (the attack: a repository choosing which of the
/// host's loopback services its commands are sent to); the host's server sees only the one
/// connection the user opened.
#[test]
fn a_loopback_address_your_config_opens_is_the_hosts_and_the_rest_stay_the_sandboxs() {
    for backend in WALLS {
        let s = common::allowlist::setup();
        std::fs::create_dir_all(s.wt.join(".runner")).unwrap();
        std::fs::write(
            s.wt.join(".runner/config.toml"),
            "[permission.network]\n\"localhost\" = \"allow\"\n",
        )
        .unwrap();
        let web = common::outside::Outside::start(1000);
        let config = s.config.display().to_string();
        let (opened, other) = (
            format!("http://127.0.0.1:{}/blob", web.port),
            format!("http://localhost:{}/blob", web.port),
        );
        let script = format!(
            "echo \"no_proxy=$no_proxy NO_PROXY=$NO_PROXY\"; python3 net.py fetch {opened}; \
             python3 net.py fetch {other}"
        );
        let out = exec(
            &s,
            backend,
            &["--network", "allowlist", "--config", &config],
            &os(&["sh", "-c", &script]),
        )
        .output()
        .unwrap();
        let all = text(&out);
        assert!(
            all.contains("no_proxy=localhost,::1 NO_PROXY=localhost,::1\n"),
            "{backend}: the opened address is still sent direct\n{all}"
        );
        assert!(
            all.contains(&format!("OK {opened} 1000")),
            "{backend}\n{all}"
        );
        assert!(
            common::allowlist::records(&out)
                .iter()
                .any(|(d, h, _)| d == "allow" && h == &format!("127.0.0.1:{}", web.port)),
            "{backend}: the connection went through the proxy\n{all}"
        );
        assert!(
            all.contains(&format!("FAIL {other}")),
            "{backend}: localhost reached the host\n{all}"
        );
        assert_eq!(web.accepted(), 1, "{backend}\n{all}");
    }
}

/// A secret declared in the config is a placeholder inside the wall: an agent CLI's key
/// run under exec never holds the value, which only the proxy puts into requests to the
/// hosts the secret names. The value is in runner's environment (the control).
#[test]
fn a_declared_secret_is_a_placeholder_inside_the_wall() {
    const VALUE: &str = "sk-real-value-7c1e90";
    for backend in WALLS {
        let s = common::allowlist::setup();
        std::fs::write(
            &s.config,
            "[permission.network]\n\"*\" = \"deny\"\n\n[network.secrets.EXEC_TEST_KEY]\nhosts = [\"api.example.com\"]\n",
        )
        .unwrap();
        let config = s.config.display().to_string();
        let out = exec(
            &s,
            backend,
            &["--network", "allowlist", "--config", &config],
            &os(&["sh", "-c", "echo \"key=$EXEC_TEST_KEY\"; env"]),
        )
        .env("EXEC_TEST_KEY", VALUE)
        .output()
        .unwrap();
        let all = text(&out);
        assert_eq!(out.status.code(), Some(0), "{backend}\n{all}");
        assert!(
            all.contains("key=runner-secret-EXEC_TEST_KEY-"),
            "{backend}: the placeholder\n{all}"
        );
        assert!(!all.contains(VALUE), "{backend}: the value crossed\n{all}");
    }
}

/// The docker bridge's address on the host: where a container with a network would find
/// the host's ports.
fn docker_gateway() -> String {
    let out = Command::new("docker")
        .args([
            "network",
            "inspect",
            "bridge",
            "-f",
            "{{(index .IPAM.Config 0).Gateway}}",
        ])
        .output()
        .unwrap();
    let addr = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if addr.is_empty() {
        "172.17.0.1".into()
    } else {
        addr
    }
}

/// A port open on every address of the host, counting who reaches it.
struct Listener {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Listener {
    fn start() -> Listener {
        let listener = TcpListener::bind("0.0.0.0:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for _ in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
            }
        });
        Listener { port, accepted }
    }

    /// Connections so far; the host's own control connection is made after this is read.
    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// A copy workspace: the program works in the copy, the checkout stays as it was, and the
/// copy is kept and named at the end for `runner changes`.
#[test]
fn a_copy_workspace_is_kept_and_named() {
    let s = common::allowlist::setup();
    std::fs::write(s.wt.join("a.txt"), "before\n").unwrap();
    common::git(&s.wt, &["add", "a.txt"]);
    common::git(
        &s.wt,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "a",
        ],
    );
    common::engine::hand_over(&s.wt);
    let out = exec(
        &s,
        "landlock",
        &["--workspace", "copy"],
        &os(&["sh", "-c", "echo after > a.txt; pwd"]),
    )
    .output()
    .unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert_eq!(
        std::fs::read_to_string(s.wt.join("a.txt")).unwrap(),
        "before\n"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains(&s.wt.display().to_string()),
        "the program ran in the checkout, not the copy\n{all}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("workspace: "))
        .unwrap_or_else(|| panic!("the copy is not named\n{all}"));
    let copy = s
        .data
        .join("runner/workspaces")
        .join(id.trim())
        .join("work");
    assert_eq!(
        std::fs::read_to_string(copy.join("a.txt")).unwrap(),
        "after\n",
        "the named copy holds the change\n{all}"
    );
}

/// `runner exec ARGS` on a pseudo-terminal of util-linux `script`, which first notes its
/// terminal's name (for resizing it from here) and sets its size.
struct OnPty {
    child: std::process::Child,
    keys: std::process::ChildStdin,
    screen: Arc<Mutex<Vec<u8>>>,
    tty: PathBuf,
}

impl OnPty {
    fn start(s: &Setup, backend: &str, argv: &[&str]) -> OnPty {
        common::engine::ensure_package("bsdutils", "/usr/bin/script");
        let quote = |a: &str| format!("'{}'", a.replace('\'', "'\\''"));
        let tty = s.wt.parent().unwrap().join("tty-name");
        let mut runner = vec![
            common::engine::runner_exe().display().to_string(),
            "exec".into(),
            "--sandbox".into(),
            backend.into(),
            "--root".into(),
            s.wt.display().to_string(),
        ];
        if backend == "docker" {
            common::engine::docker();
            if let Some(r) = common::engine::engine().runtime {
                runner.extend(["--runtime".into(), r]);
            }
        }
        runner.push("--".into());
        runner.extend(argv.iter().map(|a| a.to_string()));
        let inner = format!(
            "tty > {}; stty rows 33 cols 101; exec {}",
            quote(&tty.display().to_string()),
            runner
                .iter()
                .map(|a| quote(a))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let mut c = Command::new("script");
        c.args(["-qec", &inner, "/dev/null"])
            .current_dir(&s.wt)
            .env("XDG_DATA_HOME", &s.data)
            .env("XDG_CONFIG_HOME", s.data.join("config"))
            .env("TERM", "xterm")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(h) = common::engine::engine().host {
            c.env("DOCKER_HOST", h);
        }
        common::engine::as_owner(&mut c);
        let mut child = c.spawn().expect("util-linux script");
        let screen = Arc::new(Mutex::new(Vec::new()));
        let (mut out, sink) = (child.stdout.take().unwrap(), screen.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let keys = child.stdin.take().unwrap();
        OnPty {
            child,
            keys,
            screen,
            tty,
        }
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits up to a minute for `want` on the screen.
    fn expect(&self, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.screen().contains(want) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{want:?} never appeared:\n{}", self.screen());
    }

    fn type_keys(&mut self, keys: &str) {
        self.keys.write_all(keys.as_bytes()).unwrap();
        self.keys.flush().unwrap();
    }

    /// Resizes `script`'s terminal, as a window manager does: the kernel tells its
    /// foreground process group (runner) with SIGWINCH.
    fn resize(&self, rows: u16, cols: u16) {
        let name = std::fs::read_to_string(&self.tty).unwrap();
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(Path::new(name.trim()))
            .unwrap();
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        use std::os::fd::AsRawFd;
        // SAFETY: TIOCSWINSZ reads the winsize given, on a terminal we opened.
        assert_eq!(
            unsafe { libc::ioctl(tty.as_raw_fd(), libc::TIOCSWINSZ, &ws) },
            0
        );
    }

    fn finish(mut self) -> (Option<i32>, String) {
        let status = self.child.wait().unwrap();
        (status.code(), self.screen())
    }
}

/// On a terminal: keys reach the program, it sees the terminal's size and each change of
/// it, Ctrl-C interrupts the program (its trap runs) while runner goes on, and runner
/// ends with the status the program ends with. Each marker is computed by the shell, so
/// the echo of what was typed never satisfies a wait.
#[test]
fn on_a_terminal_keys_window_size_and_ctrl_c_reach_the_program() {
    for backend in WALLS {
        let s = common::allowlist::setup();
        let mut pty = OnPty::start(&s, backend, &["bash", "--norc", "-i"]);
        pty.type_keys("stty size; echo M$((40+1))\r");
        pty.expect("M41");
        assert!(
            pty.screen().contains("33 101"),
            "{backend}: {}",
            pty.screen()
        );
        pty.resize(44, 120);
        std::thread::sleep(Duration::from_millis(500));
        pty.type_keys("stty size; echo M$((40+2))\r");
        pty.expect("M42");
        assert!(
            pty.screen().contains("44 120"),
            "{backend}: {}",
            pty.screen()
        );
        pty.type_keys(
            "bash -c \"trap 'echo GOT-$((6*7)); exit 9' INT; echo READY-$((2*3)); while :; do sleep 0.1; done\"; echo inner=$?\r",
        );
        pty.expect("READY-6");
        pty.type_keys("\x03");
        pty.expect("inner=9");
        pty.type_keys("exit 5\r");
        let (status, screen) = pty.finish();
        assert!(
            screen.contains("GOT-42"),
            "{backend}: the trap ran\n{screen}"
        );
        assert_eq!(
            status,
            Some(5),
            "{backend}: runner lived on after Ctrl-C and ended with the program's status\n{screen}"
        );
    }
}
