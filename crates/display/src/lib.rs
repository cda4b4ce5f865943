//! Text that runner did not write, made safe to show to a person.
//!
//! What the model writes, a tool returns, a command prints or a repository names (a file
//! name, a line of a diff, a config file's error) can hold characters a terminal acts on
//! instead of showing: ESC starts sequences that move the cursor, erase a line, set the
//! window title (OSC 0) or write the clipboard (OSC 52); a carriage return sends the cursor
//! back so what follows covers what came before; the C1 controls (U+0080–U+009F) are ESC's
//! one-character forms on some terminals; bidi overrides reorder what the reader sees. Any of
//! them lets an attacker show a person something other than what is there: an ask prompt
//! approving `ls -la` that runs `rm -rf`, a diff hiding an added `curl … | sh` line.
//!
//! [`escape`] shows every such character as visible text (ESC as `\e`, CR as `\r`, others as
//! `\xNN` or `\u{…}`); newline and tab stay, as they only lay text out. Every string from
//! outside goes through it before it is printed for a person, and runner's own colours are
//! added around the escaped text afterwards, so they still work. A backslash is left as it
//! is: a literal `\e` in a command then reads like an escape, which shows more than is
//! there, never less.
//!
//! [`quote_path`] quotes a file name as git does in a diff header (`core.quotePath`), and
//! [`json`] / [`json_pretty`] write exact JSON in which no character a terminal acts on
//! appears raw.

pub mod spelling;

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether a terminal could act on `c` rather than show it (newline and tab excepted).
pub fn is_unsafe(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\0'..='\x1f' | '\x7f'..='\u{9f}' => true,
        c => is_bidi_control(c),
    }
}

/// The Unicode characters that change the order text is shown in: the marks (ALM, LRM,
/// RLM), the embeddings and overrides (U+202A–U+202E) and the isolates (U+2066–U+2069).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every character a terminal could act on shown visibly: `\e`, `\r`, `\a`,
/// `\b`, `\v`, `\f`, `\xNN` for the other C0 controls and DEL, `\u{NN}` for C1 controls and
/// bidi controls. Newline and tab are kept. Borrowed when there is nothing to change.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !is_unsafe(c) {
            out.push(c);
            continue;
        }
        match c {
            '\x1b' => out.push_str("\\e"),
            '\r' => out.push_str("\\r"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0b' => out.push_str("\\v"),
            '\x0c' => out.push_str("\\f"),
            '\0'..='\x1f' | '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            _ => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

/// [`escape`] of anything displayable (an error, a path), for `runner: {}` lines.
pub fn shown(value: impl std::fmt::Display) -> String {
    let text = value.to_string();
    match escape(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(safe) => safe,
    }
}

/// A file name as git writes it in a diff header with `core.quotePath` on (its default):
/// unchanged when every byte is printable ASCII other than `"` and `\`; otherwise in double
/// quotes, with `\a \b \t \n \v \f \r \" \\` and every other byte (control characters, DEL,
/// each byte of a non-ASCII character) as a three-digit octal escape. `prefix` (`a/`, `b/`)
/// goes inside the quotes, as git puts it.
pub fn quote_path(prefix: &str, name: &str) -> String {
    let must_quote = |b: u8| !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\';
    let whole = format!("{prefix}{name}");
    if !whole.bytes().any(must_quote) {
        return whole;
    }
    let mut out = String::with_capacity(whole.len() + 8);
    out.push('"');
    for b in whole.bytes() {
        match b {
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            0x0b => out.push_str("\\v"),
            0x0c => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b if must_quote(b) => {
                let _ = write!(out, "\\{b:03o}");
            }
            b => out.push(b as char),
        }
    }
    out.push('"');
    out
}

/// A serde_json formatter that also writes DEL, the C1 controls and the bidi controls as
/// `\uXXXX` (serde_json escapes only U+0000–U+001F): the same JSON value, safe to land on a
/// terminal. U+2028 and U+2029 too: JSON allows them raw, but readers that split lines the
/// way JavaScript does (and `str::lines` in some languages) would cut a record there.
struct TerminalSafe<F>(F);

impl<F: serde_json::ser::Formatter> serde_json::ser::Formatter for TerminalSafe<F> {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if is_unsafe(c) || matches!(c, '\u{2028}' | '\u{2029}') {
                writer.write_all(&fragment.as_bytes()[start..i])?;
                write!(writer, "\\u{:04x}", c as u32)?;
                start = i + c.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }

    // Everything else as the wrapped formatter writes it (indentation for pretty output).
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

fn to_json<T: serde::Serialize + ?Sized, F: serde_json::ser::Formatter>(
    value: &T,
    formatter: F,
) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, TerminalSafe(formatter));
    if value.serialize(&mut ser).is_err() {
        return String::new();
    }
    // Only whole UTF-8 strings and ASCII escapes were written.
    String::from_utf8(out).unwrap_or_default()
}

/// `value` as one line of JSON (empty if it cannot be serialised, as
/// `to_string(..).unwrap_or_default()` would be), with no raw character a terminal acts on.
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    to_json(value, serde_json::ser::CompactFormatter)
}

/// [`json`], indented.
pub fn json_pretty<T: serde::Serialize + ?Sized>(value: &T) -> String {
    to_json(value, serde_json::ser::PrettyFormatter::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The issue's ask: a command whose CR, erase-line and OSC 52 made a terminal show only
    /// `ls -la"`. Every byte of it is now on screen.
    #[test]
    fn the_hidden_command_is_shown_whole() {
        let command = "rm -rf \"src/important\r\x1b[2K\x1b]52;c;cm0gLXJmIH4=\x07ls -la\"";
        assert_eq!(
            escape(command),
            "rm -rf \"src/important\\r\\e[2K\\e]52;c;cm0gLXJmIH4=\\als -la\""
        );
        let shown = escape(command);
        assert!(!shown.chars().any(is_unsafe), "{shown}");
    }

    #[test]
    fn every_control_but_newline_and_tab_is_visible() {
        let cases = [
            ("a\nb\tc", "a\nb\tc"),
            ("\x1b]0;pwned\x07", "\\e]0;pwned\\a"),
            ("\x1b[1A\x1b[2K", "\\e[1A\\e[2K"),
            (
                "\0\x01\x08\x0b\x0c\x1f\x7f",
                "\\x00\\x01\\b\\v\\f\\x1f\\x7f",
            ),
            // C1: CSI (U+009B) and OSC (U+009D) act like ESC [ and ESC ] on some terminals.
            ("\u{9b}2K\u{9d}0;t\u{9c}", "\\u{9b}2K\\u{9d}0;t\\u{9c}"),
            ("\u{80}\u{9f}", "\\u{80}\\u{9f}"),
            // Bidi: `"txt.exe"` shown as `"exe.txt"`.
            ("\u{202e}txt.exe", "\\u{202e}txt.exe"),
            (
                "\u{2066}\u{2067}\u{2068}\u{2069}",
                "\\u{2066}\\u{2067}\\u{2068}\\u{2069}",
            ),
            (
                "\u{202a}\u{202b}\u{202c}\u{202d}",
                "\\u{202a}\\u{202b}\\u{202c}\\u{202d}",
            ),
            ("\u{200e}\u{200f}\u{61c}", "\\u{200e}\\u{200f}\\u{61c}"),
            // Ordinary non-ASCII text and a literal backslash stay as they are.
            ("ça va, 日本語, \\e", "ça va, 日本語, \\e"),
        ];
        for (raw, want) in cases {
            assert_eq!(escape(raw), want, "{raw:?}");
            assert!(!escape(raw).chars().any(is_unsafe), "{raw:?}");
        }
    }

    #[test]
    fn clean_text_is_borrowed() {
        assert!(matches!(escape("plain text\n"), Cow::Borrowed(_)));
        assert_eq!(shown(format_args!("x{}y", '\x1b')), "x\\ey");
    }

    /// Every character below U+3000 (controls, Latin, the bidi block), one at a time: only
    /// newline and tab may come out raw, and text without them is untouched.
    #[test]
    fn nothing_unsafe_survives() {
        for c in (0u32..0x3000).filter_map(char::from_u32) {
            let s = format!("a{c}b");
            let out = escape(&s);
            assert!(!out.chars().any(is_unsafe), "{c:?} -> {out:?}");
            if !is_unsafe(c) {
                assert_eq!(out, s);
            }
        }
    }

    /// Names checked against git itself: `git ls-files` quotes with the same rule a diff
    /// header does.
    #[test]
    fn paths_are_quoted_as_git_quotes_them() {
        let names = [
            "plain.txt",
            "with space.txt",
            "esc\x1b[1Aup",
            "tab\there",
            "new\nline",
            "cr\rhere",
            "quote\"and\\slash",
            "ça.txt",
            "\u{202e}gpj.sh",
            "del\x7f",
            "bell\x07",
        ];
        let tmp = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .arg("-C")
                .arg(tmp.path())
                .args(["-c", "core.quotePath=true"])
                .args(args)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .output()
                .unwrap()
        };
        assert!(git(&["init", "-q"]).status.success());
        for name in names {
            std::fs::write(tmp.path().join(name), "x").unwrap();
        }
        assert!(git(&["add", "-A"]).status.success());
        let listed = String::from_utf8(git(&["ls-files"]).stdout).unwrap();
        let mut ours: Vec<String> = names.iter().map(|n| quote_path("", n)).collect();
        let mut theirs: Vec<String> = listed.lines().map(str::to_string).collect();
        ours.sort();
        theirs.sort();
        assert_eq!(ours, theirs);
        assert_eq!(quote_path("a/", "plain.txt"), "a/plain.txt");
        assert_eq!(quote_path("b/", "x\x1by"), "\"b/x\\033y\"");
    }

    #[test]
    fn json_is_exact_and_holds_nothing_raw() {
        let value = serde_json::json!({
            "text": "\x1b]52;c;eA==\x07 \u{9b}1A \u{202e}x \x7f ok\n",
            "list": ["\r", 1, null],
        });
        for text in [json(&value), json_pretty(&value)] {
            assert!(!text.chars().any(|c| is_unsafe(c) && c != '\n'), "{text}");
            let back: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(back, value);
        }
        assert_eq!(
            json(&value),
            serde_json::to_string(&value)
                .unwrap()
                .replace('\u{9b}', "\\u009b")
                .replace('\u{202e}', "\\u202e")
                .replace('\x7f', "\\u007f")
        );
        assert!(json_pretty(&value).contains("\n  \"list\": [\n    \"\\r\","));
    }
}
