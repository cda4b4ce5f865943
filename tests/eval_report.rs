//! `runner eval report` as an evaluator uses it, in a real browser: a small real run
//! (`--agent oracle` on two Harbor tasks, one right, one wrong that leaves binary files
//! and a test failure behind), its report opened in headless Chromium with a permalink and
//! with a search, and the page's DOM read back. What is checked is what the page shows
//! after its script ran: the attempt's panel beside the table, the rows a search hides,
//! every file of the attempt embedded with its size, the diff without its binary files
//! (and saying so), and a "why" that quotes the failing assertion.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

/// The task's image: `runner-sandbox` with the program to fix.
const TOML: &str = "version = \"1.0\"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n[environment]\ndocker_image = \"runner-sandbox:bookworm\"\nworkdir = \"/app\"\n";
/// A verifier that prints as pytest does, and a last line that explains nothing: the
/// failing assertion is several lines up, and no reward is written.
const TEST: &str = "#!/bin/bash
echo 'collected 1 item'
got=$(sh /app/calc.sh 2 3)
if [ \"$got\" != 5 ]; then
  echo \"E   AssertionError: calc.sh 2 3 gave $got, expected 5\"
  echo 'FAILED tests/test_calc.py::test_add'
  echo '1 failed in 0.01s'
  echo 'OK'
  exit 1
fi
echo 1 > /logs/verifier/reward.txt
";
const RIGHT: &str = "mkdir -p /app && printf 'echo $(($1 + $2))\\n' > /app/calc.sh\n";
/// Wrong, and leaves what running Python leaves (a `.pyc`) and a binary file of its own.
const WRONG: &str = "mkdir -p /app/__pycache__ && printf 'echo $(($1 * $2))\\n' > /app/calc.sh && printf '\\x89PNG\\r\\n\\x1a\\n\\x00\\x00\\x00' > /app/logo.png && printf '\\x00\\x01\\x02\\x03' > /app/__pycache__/calc.cpython-311.pyc\n";
/// Words of a task's that must reach the page as text, never as markup.
const MARKUP: &str = "<b id=\"planted\">bold</b> & </script>";

fn task(dir: &Path, instruction: &str, solution: &str) {
    for sub in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("instruction.md"), instruction).unwrap();
    std::fs::write(dir.join("task.toml"), TOML).unwrap();
    std::fs::write(
        dir.join("environment/Dockerfile"),
        "FROM runner-sandbox:bookworm\n",
    )
    .unwrap();
    std::fs::write(dir.join("tests/test.sh"), TEST).unwrap();
    std::fs::write(dir.join("solution/solve.sh"), solution).unwrap();
}

/// One real run of two tasks and its report: the results folder and `report.html`.
struct Run {
    _tmp: tempfile::TempDir,
    out: PathBuf,
    report: PathBuf,
}

fn run() -> Run {
    common::engine::docker();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let set = dir.join("tasks");
    task(&set.join("good"), "Fix calc.sh so that it adds.\n", RIGHT);
    task(
        &set.join("bad"),
        &format!("Fix calc.sh so that it adds. {MARKUP}\n"),
        WRONG,
    );
    let out = dir.join("out");
    let ran = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["eval", "run"])
        .arg(&set)
        .arg("--out")
        .arg(&out)
        .args(["--agent", "oracle", "--jobs", "2"])
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(out.join("tasks/bad/result.json").is_file(), "{said}");
    let made = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["eval", "report"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let report = out.join("report.html");
    Run {
        _tmp: tmp,
        out,
        report,
    }
}

/// The page's DOM once its script ran, opened at `report.html` + `suffix` (a query, a
/// hash) in headless Chromium (`CHROMIUM` names another browser binary).
fn dom(report: &Path, suffix: &str) -> String {
    let browser = browser();
    let url = format!("file://{}{suffix}", report.display());
    let shown = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=2000",
            "--dump-dom",
        ])
        .arg(&url)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot start {browser} (install chromium, or name it in CHROMIUM): {e}")
        });
    let text = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(
        text.contains("data-ready=\"1\""),
        "the page's script did not finish at {url}: {}\n{}",
        String::from_utf8_lossy(&shown.stderr),
        &text[..text.len().min(2000)]
    );
    text
}

/// The opening tag of the element whose markup holds `needle` (an attribute).
fn tag<'a>(dom: &'a str, needle: &str) -> &'a str {
    let at = dom
        .find(needle)
        .unwrap_or_else(|| panic!("no element with {needle}"));
    let start = dom[..at].rfind('<').unwrap();
    let end = at + dom[at..].find('>').unwrap();
    &dom[start..=end]
}

/// The markup from the element whose tag holds `needle` to the next `until`.
fn section<'a>(dom: &'a str, needle: &str, until: &str) -> &'a str {
    let at = dom
        .find(needle)
        .unwrap_or_else(|| panic!("no element with {needle}"));
    let end = dom[at..].find(until).map_or(dom.len(), |e| at + e);
    &dom[at..end]
}

/// How the page writes a size.
fn size_of(path: &Path) -> String {
    let n = std::fs::metadata(path).unwrap().len();
    if n < 1024 {
        format!("{n} B")
    } else {
        format!("{:.1} KiB", n as f64 / 1024.0)
    }
}

#[test]
fn the_report_is_one_page_an_evaluator_works_in() {
    let run = run();
    let bad = run.out.join("tasks/bad");
    let html = std::fs::read_to_string(&run.report).unwrap();
    // Self-contained: nothing is fetched.
    for fetch in ["src=\"http", "href=\"http", "@import", "url("] {
        assert!(!html.contains(fetch), "the page fetches something: {fetch}");
    }

    // A permalink opens that attempt's panel, beside the table.
    let page = dom(&run.report, "#bad/1");
    let panel = tag(&page, "id=\"detail\"");
    assert!(panel.contains("data-task=\"bad\""), "{panel}");
    assert!(panel.contains("data-attempt=\"1\""), "{panel}");
    assert!(!panel.contains("hidden"), "{panel}");
    assert!(tag(&page, "id=\"main\"").contains("class=\"open\""));
    assert!(page.contains("bad (attempt 1): unresolved"));
    assert!(tag(&page, "id=\"row-bad/1\"").contains("selected"));

    // The why: the exit status and the failing assertion, not the last line ("OK") nor
    // only the missing reward.
    let why = section(&page, "id=\"detail-why\"", "</section>");
    assert!(why.contains("The verifier exited with status 1."), "{why}");
    assert!(
        why.contains("the verifier exited 1: E   AssertionError: calc.sh 2 3 gave 6, expected 5"),
        "{why}"
    );
    let failing = section(&page, "id=\"why-failing\"", "</pre>");
    assert!(
        failing.contains("FAILED tests/test_calc.py::test_add"),
        "{failing}"
    );
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(bad.join("result.json")).unwrap()).unwrap();
    assert!(
        result["verifier"]["failing"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().starts_with("E   AssertionError")),
        "{result:#}"
    );

    // Every file of the attempt, collapsed, with its size; the log's text is in the page.
    for name in ["agent.log", "verify.log", "result.json"] {
        let log = section(&page, &format!("data-name=\"{name}\""), "</details>");
        assert!(
            log.contains(&format!(
                "<span class=\"size\">{}</span>",
                size_of(&bad.join(name))
            )),
            "{name}: {log}"
        );
        assert!(!tag(&page, &format!("data-name=\"{name}\"")).contains("open"));
    }
    let verify = section(&page, "data-name=\"verify.log\"", "</details>");
    assert!(verify.contains("1 failed in 0.01s"), "{verify}");
    assert!(verify.contains("tasks/bad/verify.log"), "{verify}");

    // The diff: the text change, without the binary file and the `.pyc`, said.
    let diff = section(&page, "id=\"detail-diff\"", "</pre>");
    assert!(diff.contains("calc.sh"), "{diff}");
    assert!(
        !diff.contains("logo.png") && !diff.contains("__pycache__"),
        "{diff}"
    );
    assert!(
        std::fs::read_to_string(bad.join("diff.patch"))
            .unwrap()
            .contains("logo.png"),
        "the fixture's diff has no binary file"
    );
    let note = section(&page, "id=\"diff-note\"", "</p>");
    assert!(note.contains("1 binary file left out: logo.png"), "{note}");
    assert!(note.contains("__pycache__/calc.cpython-311.pyc"), "{note}");

    // The instruction, as text; the run's date, runner's version, model and settings.
    let instruction = section(&page, "id=\"detail-instruction\"", "</pre>");
    assert!(
        instruction.contains("&lt;b id=\"planted\"&gt;bold&lt;/b&gt; &amp; &lt;/script&gt;"),
        "{instruction}"
    );
    assert!(!page.contains("<b id=\"planted\">"));
    let summary = section(&page, "id=\"summary\"", "</section>");
    for fact in [
        "<dt>run date</dt>",
        "<dt>runner</dt>",
        env!("CARGO_PKG_VERSION"),
        "<dd>oracle</dd>",
    ] {
        assert!(summary.contains(fact), "{fact}: {summary}");
    }
    assert!(!summary.contains("unknown"), "{summary}");
    let settings = section(&page, "id=\"settings-list\"", "</dl>");
    assert!(settings.contains("<dt>jobs</dt><dd>2</dd>"), "{settings}");

    // Two charts, drawn: a bar per status and one per attempt.
    let status_chart = section(&page, "id=\"chart-status\"", "</svg>");
    assert_eq!(status_chart.matches("<rect").count(), 5, "{status_chart}");
    let time_chart = section(&page, "id=\"chart-time\"", "</svg>");
    assert_eq!(time_chart.matches("<rect").count(), 2, "{time_chart}");
}

/// A search by task id and the filters hide the other rows, from a link that carries them.
#[test]
fn search_and_filters_hide_the_other_rows() {
    let run = run();
    let page = dom(&run.report, "?q=goo");
    assert!(!tag(&page, "id=\"row-good/1\"").contains("hidden"));
    assert!(tag(&page, "id=\"row-bad/1\"").contains("hidden"));
    assert!(page.contains("1 of 2 shown"));
    assert!(tag(&page, "id=\"search\"").contains("type=\"search\""));

    let page = dom(&run.report, "?status=unresolved");
    assert!(tag(&page, "id=\"row-good/1\"").contains("hidden"));
    assert!(!tag(&page, "id=\"row-bad/1\"").contains("hidden"));

    let page = dom(&run.report, "?reason=the%20verifier%20exited%201#good/1");
    assert!(tag(&page, "id=\"row-good/1\"").contains("hidden"));
    assert!(!tag(&page, "id=\"row-bad/1\"").contains("hidden"));
    // The permalink still opens the attempt it names, filtered out or not.
    assert!(tag(&page, "id=\"detail\"").contains("data-task=\"good\""));
}

/// Headless Chromium driven as a reader drives it: over the DevTools protocol on a pipe
/// (`--remote-debugging-pipe`: commands in on fd 3, answers out on fd 4, each a JSON
/// message ended by a NUL), with one page open and expressions run in it for the clicks
/// and keystrokes.
struct Browser {
    child: Child,
    to: std::fs::File,
    from: BufReader<std::fs::File>,
    next: u64,
    session: String,
}

/// A pipe whose two ends are above the descriptors the child gets (3 and 4), both closed
/// on exec: the child's copies are made in `pre_exec`.
fn pipe_above_four() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let moved = fds.map(|fd| {
        // SAFETY: duplicating a descriptor this function owns, then closing the original.
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
        assert!(high >= 10);
        unsafe { libc::close(fd) };
        high
    });
    (moved[0], moved[1])
}

impl Browser {
    fn open(url: &str) -> Browser {
        use std::os::unix::process::CommandExt;
        let browser = browser();
        let (command_read, command_write) = pipe_above_four();
        let (answer_read, answer_write) = pipe_above_four();
        let mut cmd = Command::new(&browser);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--remote-debugging-pipe",
            "about:blank",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only dup2 runs between fork and exec; it is async-signal-safe, and the
        // copies it makes are not closed on exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(command_read, 3) < 0 || libc::dup2(answer_write, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot start {browser} (install chromium, or name it in CHROMIUM): {e}")
        });
        // SAFETY: the child holds its own copies; these are ours alone from here on.
        let (to, from) = unsafe {
            libc::close(command_read);
            libc::close(answer_write);
            (
                std::fs::File::from_raw_fd(command_write),
                std::fs::File::from_raw_fd(answer_read),
            )
        };
        let mut b = Browser {
            child,
            to,
            from: BufReader::new(from),
            next: 0,
            session: String::new(),
        };
        let target = b.call("Target.createTarget", json!({"url": url}), false);
        let target = target["targetId"].as_str().unwrap().to_string();
        let attached = b.call(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
            false,
        );
        b.session = attached["sessionId"].as_str().unwrap().to_string();
        // The page's script has run once it marks the body.
        let ready = b.eval(
            "new Promise(r => { const c = () => document.body && document.body.dataset.ready ? r(true) : setTimeout(c, 20); c(); })",
        );
        assert_eq!(ready, true, "the report's script did not finish at {url}");
        b
    }

    /// One command and its answer's `result` (events in between are skipped); `Err` with
    /// the protocol's error.
    fn send(&mut self, method: &str, params: Value, in_page: bool) -> Result<Value, Value> {
        self.next += 1;
        let mut message = json!({"id": self.next, "method": method, "params": params});
        if in_page {
            message["sessionId"] = json!(self.session);
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        loop {
            let mut answer = Vec::new();
            let n = self.from.read_until(0, &mut answer).unwrap();
            assert!(n > 0, "the browser closed its end of the pipe");
            answer.pop();
            let answer: Value = serde_json::from_slice(&answer).unwrap();
            if answer["id"] == self.next {
                return match answer.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(answer["result"].clone()),
                };
            }
        }
    }

    fn call(&mut self, method: &str, params: Value, in_page: bool) -> Value {
        self.send(method, params, in_page)
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// The value of `expression` in the page (a promise is awaited). The page may still
    /// be replacing about:blank at first: that is tried again.
    fn eval(&mut self, expression: &str) -> Value {
        let params = json!({"expression": expression, "awaitPromise": true, "returnByValue": true});
        for _ in 0..100 {
            match self.send("Runtime.evaluate", params.clone(), true) {
                Ok(r) if r.get("exceptionDetails").is_some() => panic!("{expression}: {r}"),
                Ok(r) => return r["result"]["value"].clone(),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
            }
        }
        panic!("{expression}: the page never answered");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.send("Browser.close", json!({}), false);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a reader does after the page loaded: a click on a row, a hash typed into the
/// address bar, keystrokes in the search box, a filter chosen, a log opened. Each moves the
/// page as the links above do on load.
#[test]
fn the_page_follows_clicks_hash_changes_and_typing() {
    let run = run();
    let url = format!("file://{}#good/1", run.report.display());
    let mut page = Browser::open(&url);
    let panel = "document.getElementById('detail').dataset.task";
    assert_eq!(page.eval(panel), "good");

    // A hash changed after the load opens that attempt.
    let after_hash = format!(
        "new Promise(r => {{ addEventListener('hashchange', () => setTimeout(() => r({panel}), 0), {{once: true}}); location.hash = 'bad/1'; }})"
    );
    assert_eq!(page.eval(&after_hash), "bad");

    // A click on a row opens it, and the address names it.
    let clicked = format!(
        "new Promise(r => {{ addEventListener('hashchange', () => setTimeout(() => r([{panel}, location.hash]), 0), {{once: true}}); document.getElementById('row-good/1').click(); }})"
    );
    assert_eq!(page.eval(&clicked), json!(["good", "#good/1"]));

    // Typing in the search box hides the rows whose id does not match.
    let visible =
        "[...document.querySelectorAll('#tasks tbody tr')].filter(t => !t.hidden).map(t => t.id)";
    let typed = format!(
        "(() => {{ const s = document.getElementById('search'); s.value = 'BA'; s.dispatchEvent(new Event('input')); return {visible}; }})()"
    );
    assert_eq!(page.eval(&typed), json!(["row-bad/1"]));
    let cleared = format!(
        "(() => {{ const s = document.getElementById('search'); s.value = ''; s.dispatchEvent(new Event('input')); const f = document.getElementById('filter'); f.value = 'resolved'; f.dispatchEvent(new Event('input')); return {visible}; }})()"
    );
    assert_eq!(page.eval(&cleared), json!(["row-good/1"]));

    // The logs are collapsed until opened.
    let log = "document.querySelector('#detail-logs details[data-name=\"agent.log\"]')";
    assert_eq!(page.eval(&format!("{log}.open")), false);
    assert_eq!(
        page.eval(&format!(
            "{log}.querySelector('summary').click(), {log}.open"
        )),
        true
    );
}

/// The headless browser the page is tested in: `CHROMIUM` when it names one, else Debian's
/// `chromium`, installed first when the machine lacks it (a fresh machine's `cargo test`
/// sets up what it needs).
fn browser() -> String {
    if let Ok(named) = std::env::var("CHROMIUM") {
        return named;
    }
    common::engine::ensure_package("chromium", "/usr/bin/chromium");
    "/usr/bin/chromium".into()
}
