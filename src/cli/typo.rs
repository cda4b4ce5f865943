//! A mistyped subcommand is a usage error, never a session.
//!
//! `runner [PROMPT]` runs the agent on any word that is not a subcommand, so `runner doctr`
//! or `runner sesions` would start a walled, paid session with the typo as its task. Before
//! clap parses anything (and so before any config, sandbox or model is touched), the first
//! word of the command line that is not an option is looked at: when it is a single word
//! close to a subcommand's name, or one of the commands other tools have and runner does
//! not (`status`, `version`, …), runner stops with clap's own "unrecognized subcommand"
//! error and its exit status 2. A one-word task stays possible, said plainly:
//! `runner run WORD`, `runner -- WORD`, or any prompt with a space in it.

use runner_display::spelling::edit_distance as distance;
use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// Words runner has no subcommand for but other command lines do, and where their job is
/// done in runner. Exact matches only (compared without case).
const FOREIGN: &[(&str, &[&str])] = &[
    ("status", &["changes", "sessions list"]),
    ("diff", &["changes"]),
    ("doctor", &["sandbox doctor"]),
    ("check", &["sandbox doctor", "permission check"]),
    ("clean", &["sandbox cleanup"]),
    ("version", &["--version"]),
    ("completion", &["completions"]),
    ("manual", &["man"]),
    ("usage", &["help"]),
    ("ls", &["sessions list"]),
    ("list", &["sessions list"]),
    ("log", &["sessions list"]),
    ("logs", &["sessions list"]),
    ("history", &["sessions list"]),
];

/// The clap error for a first word that looks like a subcommand, or `None` when the
/// command line is anything else (a real subcommand, a sentence, a quoted task after
/// `--`, no word at all).
pub fn check(cmd: &clap::Command, args: &[OsString]) -> Option<clap::Error> {
    let word = first_word(cmd, args.get(1..).unwrap_or_default())?;
    let suggestions = suggestions(cmd, &word);
    if suggestions.is_empty() {
        return None;
    }
    Some(error(cmd, &word, suggestions))
}

/// The first argument that is neither an option nor an option's value, if it is a lone
/// word that is not itself a subcommand. Options that take a value skip that value, so
/// `runner --model x doctr` finds `doctr`, not `x`.
fn first_word(cmd: &clap::Command, args: &[OsString]) -> Option<String> {
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let arg = arg.to_str()?;
        if arg == "--" {
            // Everything after `--` is the task, as the user said.
            return None;
        }
        if let Some(long) = arg.strip_prefix("--") {
            if !long.contains('=') && long_takes_value(cmd, long) {
                args.next();
            }
            continue;
        }
        if let Some(shorts) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            if last_short_takes_value(cmd, shorts) {
                args.next();
            }
            continue;
        }
        let is_subcommand = cmd
            .get_subcommands()
            .any(|s| s.get_name() == arg || s.get_all_aliases().any(|a| a == arg));
        let lone_word = !arg.is_empty() && !arg.chars().any(char::is_whitespace);
        return (lone_word && !is_subcommand && arg != "help").then(|| arg.to_string());
    }
    None
}

fn long_takes_value(cmd: &clap::Command, name: &str) -> bool {
    cmd.get_arguments()
        .find(|a| {
            a.get_long() == Some(name) || a.get_all_aliases().unwrap_or_default().contains(&name)
        })
        .is_some_and(|a| a.get_action().takes_values())
}

/// In `-abc`, a short option that takes a value eats the rest of the cluster, or, at its
/// end, the next argument.
fn last_short_takes_value(cmd: &clap::Command, shorts: &str) -> bool {
    let mut chars = shorts.chars().peekable();
    while let Some(c) = chars.next() {
        let takes = cmd
            .get_arguments()
            .find(|a| a.get_short() == Some(c))
            .is_some_and(|a| a.get_action().takes_values());
        if takes {
            return chars.peek().is_none();
        }
    }
    false
}

/// What `word` may have meant: every visible subcommand, top-level or nested (as
/// `sandbox doctor`), within the edit distance its length allows, and the pointers of
/// [`FOREIGN`]. Top-level names come first; no name twice.
fn suggestions(cmd: &clap::Command, word: &str) -> Vec<String> {
    let word = word.to_lowercase();
    let mut found: Vec<String> = Vec::new();
    let add = |found: &mut Vec<String>, s: String| {
        if !found.contains(&s) {
            found.push(s);
        }
    };
    let visible = || cmd.get_subcommands().filter(|s| !s.is_hide_set());
    for sub in visible() {
        if distance(&word, sub.get_name()) <= allowed(sub.get_name(), 0) {
            add(&mut found, sub.get_name().to_string());
        }
    }
    if let Some((_, pointers)) = FOREIGN.iter().find(|(w, _)| *w == word) {
        for p in *pointers {
            add(&mut found, p.to_string());
        }
    }
    for sub in visible() {
        for nested in sub.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = nested.get_name();
            // `Run` means `run`, not `eval run` as well.
            let named_above = found.iter().any(|f| f == name);
            if !named_above && distance(&word, name) <= allowed(name, 1) {
                add(&mut found, format!("{} {name}", sub.get_name()));
            }
        }
    }
    found
}

/// How many edits a word may be from `name` and still count as a typo of it: one for
/// short names, two from six letters on. A nested name (`list`, `show`, `build`) is one
/// edit stricter, since such words are likelier to be a real one-word task.
fn allowed(name: &str, strictness: usize) -> usize {
    let base: usize = if name.chars().count() < 6 { 1 } else { 2 };
    base.saturating_sub(strictness)
}

/// Clap's own "unrecognized subcommand" error, with its did-you-mean tip, a second tip
/// for the one-word task that was perhaps meant, and the usage line.
fn error(cmd: &clap::Command, word: &str, suggestions: Vec<String>) -> clap::Error {
    let mut cmd = cmd.clone();
    let usage = cmd.render_usage();
    let mut err = clap::Error::new(ErrorKind::InvalidSubcommand).with_cmd(&cmd);
    let styles = cmd.get_styles();
    let (invalid, valid) = (styles.get_invalid(), styles.get_valid());
    let mut as_task = clap::builder::StyledStr::new();
    as_task.push_str(&format!(
        "to give runner the one-word task '{invalid}{word}{invalid:#}', use \
         '{valid}runner run {word}{valid:#}'"
    ));
    err.insert(
        ContextKind::InvalidSubcommand,
        ContextValue::String(word.to_string()),
    );
    err.insert(
        ContextKind::SuggestedSubcommand,
        ContextValue::Strings(suggestions),
    );
    err.insert(
        ContextKind::Suggested,
        ContextValue::StyledStrs(vec![as_task]),
    );
    err.insert(ContextKind::Usage, ContextValue::StyledStr(usage));
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_counts_swaps_as_one_edit() {
        assert_eq!(distance("proflie", "profile"), 1);
        assert_eq!(distance("doctr", "doctor"), 1);
        assert_eq!(distance("evl", "eval"), 1);
        assert_eq!(distance("sesion", "sessions"), 2);
        assert_eq!(distance("lint", "list"), 1);
        assert_eq!(distance("", "run"), 3);
    }

    fn word(args: &[&str]) -> Option<String> {
        let cmd = super::super::command();
        let args: Vec<OsString> = std::iter::once("runner")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        check(&cmd, &args).map(|e| e.to_string())
    }

    #[test]
    fn suggestions_name_the_nearest_commands_once() {
        let cmd = super::super::command();
        assert_eq!(suggestions(&cmd, "Run"), ["run"]);
        assert_eq!(suggestions(&cmd, "doctr"), ["sandbox doctor"]);
        assert_eq!(suggestions(&cmd, "status"), ["changes", "sessions list"]);
        assert_eq!(suggestions(&cmd, "permision"), ["permission"]);
        assert!(suggestions(&cmd, "refactor").is_empty());
        // Hidden commands are never suggested.
        assert!(suggestions(&cmd, "sandbox-servr").is_empty());
    }

    #[test]
    fn option_values_are_not_taken_for_the_first_word() {
        assert!(word(&["--model", "openai/x", "doctr"]).is_some());
        assert!(word(&["-m", "sesions"]).is_none());
        assert!(word(&["-cm", "sesions", "refactor"]).is_none());
        assert!(word(&["--model=x", "sesions"]).is_some());
        assert!(word(&["--json", "sesions"]).is_some());
    }

    #[test]
    fn real_commands_sentences_and_escaped_words_pass() {
        for ok in [
            &["sessions", "list"][..],
            &["run", "doctr"],
            &["fix the bug"],
            &["--", "doctr"],
            &["refactor"],
            &["lint"],
            &["help"],
            &["-"],
            &[],
        ] {
            assert_eq!(word(ok), None, "{ok:?}");
        }
    }
}
