//! Asking the person at the terminal.
//!
//! The prompt goes to stderr (stdout carries tool results, which scripts parse) and shows
//! what a person needs to decide: the tool, the permission, the concrete command or path,
//! what "always" would remember, and for edits the diff. One key answers: `o` once, `a`
//! always, `r` reject; `f` then a line of text rejects the call and hands the text to the
//! model as feedback, which is how a person says "not that, do this". Feedback needs its own
//! key so that typing "avoid that" can never mean `a`lways, and every other key is ignored.
//! Keys typed before a prompt appeared are thrown away: an answer is only ever given to a
//! question that was on the screen.
//!
//! Prompts are taken one at a time even when calls ask concurrently; an ask settled by
//! another reply's cascade while it waits for its turn is never shown.

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

use super::gate::{Ask, Asker, Reply, ReplyFuture, Unanswerable};
use runner_display::escape;

/// Reads answers from standard input, which must be a terminal (the CLI checks), and
/// writes prompts to stderr.
pub struct TerminalAsker {
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Default for TerminalAsker {
    fn default() -> Self {
        Self::new()
    }
}

impl TerminalAsker {
    pub fn new() -> Self {
        TerminalAsker {
            turn: Arc::new(tokio::sync::Mutex::new(())),
        }
    }
}

impl Asker for TerminalAsker {
    fn ask<'a>(&'a self, ask: &'a Ask) -> ReplyFuture<'a> {
        Box::pin(async move {
            // The turn moves into the reader: if this ask is cancelled while the prompt is
            // up, the next prompt still waits until that reader is done with the terminal.
            let turn = self.turn.clone().lock_owned().await;
            let prompt = render(ask);
            tokio::task::spawn_blocking(move || {
                let _turn = turn;
                let _keys = SingleKeys::enable();
                discard_typed_ahead();
                let mut err = std::io::stderr().lock();
                let _ = err.write_all(prompt.as_bytes());
                let _ = err.flush();
                drop(err);
                let mut input = StdinKeys;
                read_answer(&mut input, &mut std::io::stderr())
            })
            .await
            .map_err(|e| Unanswerable(format!("the terminal prompt failed: {e}")))?
        })
    }
}

/// What the person sees for one ask. Everything in it but runner's own words came from the
/// model or the repository, so all of it is escaped ([`runner_display::escape`]): a command
/// whose carriage return or escape sequences would redraw the line shows those bytes
/// instead. A command is shown whole, as it will run, each further line indented under the
/// first, above the parts the rules judged.
pub fn render(ask: &Ask) -> String {
    let r = &ask.request;
    let mut out = String::from("\n");
    let tool = r.tool.as_deref().unwrap_or("a tool");
    out.push_str(&format!(
        "Permission needed: {} asks for `{}`\n",
        escape(tool),
        escape(&r.permission)
    ));
    let command = r
        .metadata
        .get("command")
        .and_then(|c| c.as_str())
        .map(str::trim_end)
        .filter(|c| !c.is_empty());
    if let Some(command) = command {
        let mut lines = command.split('\n');
        out.push_str(&format!(
            "  command: {}\n",
            escape(lines.next().unwrap_or_default())
        ));
        for line in lines {
            out.push_str(&format!("           {}\n", escape(line)));
        }
    }
    let only_the_command = command.is_some_and(|c| r.patterns.len() == 1 && r.patterns[0] == c);
    if command.is_some() && !only_the_command && !r.patterns.is_empty() {
        out.push_str("  judged as:\n");
    }
    for p in r.patterns.iter().filter(|_| !only_the_command) {
        if p.contains('\n') {
            out.push_str("  ┌\n");
            for line in p.split('\n') {
                out.push_str(&format!("  │ {}\n", escape(line)));
            }
            out.push_str("  └\n");
        } else {
            out.push_str(&format!("  {}\n", escape(p)));
        }
    }
    if let Some(diff) = r.metadata.get("diff").and_then(|d| d.as_str())
        && !diff.is_empty()
    {
        const SHOWN: usize = 60;
        let lines: Vec<&str> = diff.lines().collect();
        for line in lines.iter().take(SHOWN) {
            out.push_str(&format!("  {}\n", escape(line)));
        }
        if lines.len() > SHOWN {
            out.push_str(&format!("  … {} more diff lines\n", lines.len() - SHOWN));
        }
    }
    if !r.always.is_empty() {
        out.push_str(&format!(
            "  \"always\" would allow from now on: {}\n",
            escape(&r.always.join(", "))
        ));
    }
    out.push_str("[o]nce  [a]lways  [r]eject  [f]eedback (reject, telling the model why): ");
    out
}

/// Where answer bytes come from; a trait so the key logic is testable without a terminal.
pub trait Keys {
    /// The next byte, or `None` at end of input.
    fn next_byte(&mut self) -> Option<u8>;
    /// The rest of the current line (after the canonical mode is back, on a terminal).
    fn rest_of_line(&mut self) -> Option<String>;
}

struct StdinKeys;

impl Keys for StdinKeys {
    fn next_byte(&mut self) -> Option<u8> {
        let mut b = [0u8; 1];
        loop {
            // SAFETY: reading one byte into a valid buffer from fd 0.
            let n = unsafe { libc::read(0, b.as_mut_ptr().cast(), 1) };
            if n == 1 {
                return Some(b[0]);
            }
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        }
    }

    fn rest_of_line(&mut self) -> Option<String> {
        SingleKeys::restore_now();
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        }
    }
}

/// Turns one answer into a reply. Only `o`, `a`, `r` and `f` mean anything; every other
/// key (Enter, an arrow key's escape sequence, a stray letter) is ignored, so nothing is
/// decided by accident. End of input is an error, not a silent yes or no.
pub fn read_answer(keys: &mut dyn Keys, echo: &mut dyn Write) -> Result<Reply, Unanswerable> {
    loop {
        let Some(byte) = keys.next_byte() else {
            return Err(Unanswerable("the terminal closed before an answer".into()));
        };
        let reply = match byte {
            b'o' | b'O' => Reply::Once,
            b'a' | b'A' => Reply::Always,
            b'r' | b'R' => Reply::Reject { feedback: None },
            b'f' | b'F' => {
                let _ = write!(echo, "\nfeedback for the model: ");
                let _ = echo.flush();
                let feedback = keys.rest_of_line().unwrap_or_default().trim().to_string();
                Reply::Reject {
                    feedback: (!feedback.is_empty()).then_some(feedback),
                }
            }
            0x1b => {
                skip_escape_sequence(keys);
                continue;
            }
            _ => continue,
        };
        let _ = writeln!(echo);
        return Ok(reply);
    }
}

/// Asks a yes/no question at the terminal: `question` (already escaped by the caller: it
/// may quote a repository's text) on stderr, one key from stdin. Only `y` means yes; `n`,
/// Enter and the end of input mean no, so a question nobody answers never grants anything.
/// Keys typed before the question appeared are thrown away, as for asks.
pub fn confirm(question: &str) -> bool {
    let _keys = SingleKeys::enable();
    discard_typed_ahead();
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(question.as_bytes());
    let _ = err.flush();
    drop(err);
    read_yes_no(&mut StdinKeys, &mut std::io::stderr())
}

/// [`confirm`]'s key logic, apart from the terminal.
pub fn read_yes_no(keys: &mut dyn Keys, echo: &mut dyn Write) -> bool {
    loop {
        let answer = match keys.next_byte() {
            None => false,
            Some(b'y' | b'Y') => true,
            Some(b'n' | b'N' | b'\n' | b'\r') => false,
            Some(0x1b) => {
                skip_escape_sequence(keys);
                continue;
            }
            Some(_) => continue,
        };
        let _ = writeln!(echo);
        return answer;
    }
}

/// An arrow or function key arrives as ESC `[` (or `O`) … final byte; its letters (`A` for
/// up) must not be read as answers.
fn skip_escape_sequence(keys: &mut dyn Keys) {
    if !matches!(keys.next_byte(), Some(b'[' | b'O')) {
        return;
    }
    while let Some(b) = keys.next_byte() {
        if (0x40..=0x7e).contains(&b) {
            return;
        }
    }
}

/// Throws away keys pressed before the prompt was shown.
fn discard_typed_ahead() {
    // SAFETY: tcflush on fd 0; harmless if it is not a terminal.
    unsafe { libc::tcflush(0, libc::TCIFLUSH) };
}

/// Non-canonical input with echo, so one key answers without Enter; restored on drop.
struct SingleKeys;

static SAVED: Mutex<Option<libc::termios>> = Mutex::new(None);

impl SingleKeys {
    fn enable() -> SingleKeys {
        // SAFETY: tcgetattr/tcsetattr on fd 0 with a valid termios.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) == 0 {
                *SAVED.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
                t.c_lflag &= !libc::ICANON;
                t.c_cc[libc::VMIN] = 1;
                t.c_cc[libc::VTIME] = 0;
                libc::tcsetattr(0, libc::TCSANOW, &t);
            }
        }
        SingleKeys
    }

    fn restore_now() {
        if let Some(t) = SAVED.lock().unwrap_or_else(|p| p.into_inner()).take() {
            // SAFETY: restoring the attributes saved above.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, &t) };
        }
    }
}

impl Drop for SingleKeys {
    fn drop(&mut self) {
        SingleKeys::restore_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PermissionRequest;

    struct Scripted {
        bytes: std::collections::VecDeque<u8>,
    }

    impl Keys for Scripted {
        fn next_byte(&mut self) -> Option<u8> {
            self.bytes.pop_front()
        }
        fn rest_of_line(&mut self) -> Option<String> {
            let mut line = Vec::new();
            while let Some(b) = self.bytes.pop_front() {
                if b == b'\n' {
                    break;
                }
                line.push(b);
            }
            Some(String::from_utf8_lossy(&line).into_owned())
        }
    }

    fn answer(input: &str) -> Result<Reply, Unanswerable> {
        let mut keys = Scripted {
            bytes: input.bytes().collect(),
        };
        read_answer(&mut keys, &mut Vec::new())
    }

    #[test]
    fn only_y_says_yes() {
        let yes_no = |input: &str| {
            let mut keys = Scripted {
                bytes: input.bytes().collect(),
            };
            read_yes_no(&mut keys, &mut Vec::new())
        };
        assert!(yes_no("y"));
        assert!(yes_no("\x1b[Ay"), "an arrow key's letter is not an answer");
        assert!(yes_no("qY"));
        assert!(!yes_no("\n"));
        assert!(!yes_no("n"));
        assert!(!yes_no(""), "the end of input is a no");
    }

    #[test]
    fn single_keys_and_typed_feedback() {
        let fb = |s: &str| Reply::Reject {
            feedback: Some(s.to_string()),
        };
        let closed = || Unanswerable("the terminal closed before an answer".into());
        let cases: Vec<(&str, Result<Reply, Unanswerable>)> = vec![
            ("o", Ok(Reply::Once)),
            ("a", Ok(Reply::Always)),
            ("A", Ok(Reply::Always)),
            ("r", Ok(Reply::Reject { feedback: None })),
            ("\n\na", Ok(Reply::Always)),
            // An arrow key is ESC [ A: ignored, not a reject plus a stray `A`lways.
            ("\x1b[Ao", Ok(Reply::Once)),
            // Stray letters decide nothing; y and n are not answers.
            ("ynxr", Ok(Reply::Reject { feedback: None })),
            (
                "fuse cargo nextest instead\n",
                Ok(fb("use cargo nextest instead")),
            ),
            ("fça va pas\n", Ok(fb("ça va pas"))),
            ("f\n", Ok(Reply::Reject { feedback: None })),
            ("", Err(closed())),
            ("\n\n", Err(closed())),
        ];
        for (input, want) in cases {
            assert_eq!(answer(input), want, "{input:?}");
        }
    }

    #[test]
    fn the_prompt_shows_tool_command_always_and_diff() {
        let mut request =
            PermissionRequest::new("edit", vec!["src/lib.rs".into()], vec!["*".into()])
                .with_metadata(serde_json::json!({"diff": "--- a\n+++ b\n-old\n+new\n"}));
        request.tool = Some("edit".into());
        let text = render(&Ask { id: 1, request });
        for want in [
            "edit asks for `edit`",
            "src/lib.rs",
            "-old",
            "+new",
            "from now on: *",
            "[o]nce",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        let heredoc = PermissionRequest::new("bash", vec!["cat > f <<EOF\nhi\nEOF".into()], vec![]);
        let text = render(&Ask {
            id: 2,
            request: heredoc,
        });
        assert!(
            text.contains("│ hi") && !text.contains("from now on"),
            "{text}"
        );
    }

    fn bash_ask(command: &str, patterns: &[&str]) -> String {
        let mut request = PermissionRequest::new(
            "bash",
            patterns.iter().map(|p| p.to_string()).collect(),
            patterns.iter().map(|p| p.to_string()).collect(),
        )
        .with_metadata(serde_json::json!({ "command": command }));
        request.tool = Some("bash".into());
        render(&Ask { id: 3, request })
    }

    /// The issue's attack: a carriage return, erase-line and OSC 52 made the terminal show
    /// `ls -la"` for a command that removes a directory. Every byte is now on screen, and
    /// the prompt holds no raw control character at all.
    #[test]
    fn a_command_that_redraws_the_line_is_shown_byte_for_byte() {
        let command = "rm -rf \"src/important\r\x1b[2K\x1b]52;c;bHMgLWxh\x07ls -la\"";
        let text = bash_ask(command, &[command]);
        assert!(
            text.contains(
                "  command: rm -rf \"src/important\\r\\e[2K\\e]52;c;bHMgLWxh\\als -la\"\n"
            ),
            "{text}"
        );
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        // The tool's name, the patterns and the diff are escaped as well.
        let mut request = PermissionRequest::new(
            "edit\x1b]0;t\x07",
            vec!["a\u{202e}b".into()],
            vec!["\u{9b}2K".into()],
        )
        .with_metadata(serde_json::json!({"diff": "+curl x | sh\x1b[1A\x1b[2K\n"}));
        request.tool = Some("x\ry".into());
        let text = render(&Ask { id: 4, request });
        for want in [
            "x\\ry asks",
            "edit\\e]0;t\\a",
            "a\\u{202e}b",
            "+curl x | sh\\e[1A\\e[2K",
            "\\u{9b}2K",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        assert!(!text.chars().any(runner_display::is_unsafe), "{text:?}");
    }

    /// The whole command, as it will run, each further line under the first; the parts the
    /// rules judged follow when they differ from it.
    #[test]
    fn a_multi_line_command_is_shown_whole_above_its_parts() {
        let command = "cd build &&\nmake install\n";
        let text = bash_ask(command, &["cd build", "make install"]);
        assert!(
            text.contains(
                "  command: cd build &&\n           make install\n  judged as:\n  cd build\n  make install\n"
            ),
            "{text}"
        );
        // One pattern that is the command itself is not repeated.
        let text = bash_ask("ls -la", &["ls -la"]);
        assert_eq!(
            text.matches("ls -la").count(),
            2,
            "command and always: {text}"
        );
    }
}
