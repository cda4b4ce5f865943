//! `runner eval report` as an evaluator uses it, in a real browser: a small real run
//! (`--agent oracle` on two Harbor tasks, one right, one wrong that leaves binary files
//! and a test failure behind), its report opened in headless Chromium with a permalink and
//! with a search, and the page's DOM read back. What is checked is what the page shows
//! after its script ran: the attempt's panel beside the table, the rows a search hides,
//! every file of the attempt embedded with its size, the diff without its binary files
//! (and saying so), and a "why" that quotes the failing assertion.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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
    std::fs::write(dir.join("environment/Dockerfile"), "FROM runner-sandbox:bookworm\n").unwrap();
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
    let browser = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
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
        .unwrap_or_else(|e| panic!("cannot start {browser} (install chromium, or name it in CHROMIUM): {e}"));
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
    assert!(failing.contains("FAILED tests/test_calc.py::test_add"), "{failing}");
    let result: serde_json::Value =
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
            log.contains(&format!("<span class=\"size\">{}</span>", size_of(&bad.join(name)))),
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
    assert!(!diff.contains("logo.png") && !diff.contains("__pycache__"), "{diff}");
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
