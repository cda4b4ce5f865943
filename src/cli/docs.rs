//! What the command line says about itself: `--version` with the commit and build date,
//! the EXAMPLES at the end of `--help`, `runner completions SHELL` and `runner man`.
//!
//! All of it is generated from the one clap command tree, so a new flag or subcommand
//! shows up in completions and the manual without anyone remembering to add it. The man
//! page's ENVIRONMENT and EXIT STATUS are written here by hand, next to the constants they
//! name, because clap knows nothing of them.

use std::io::Write;

use clap::Args;
use clap_complete::Shell;
use clap_mangen::roff::{Roff, bold, roman};

use super::exit;

/// `runner --version`: the package version, the commit it was built from and the build
/// date (both from `build.rs`; the commit is `unknown` outside a git checkout).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("RUNNER_COMMIT"),
    ", built ",
    env!("RUNNER_BUILD_DATE"),
    ")"
);

/// The end of `runner -h`: a pointer to the longer list.
pub const EXAMPLES_SHORT: &str = "See `runner --help` for examples, `runner man` for the manual.";

/// The end of `runner --help`, and the man page's EXAMPLES.
pub const EXAMPLES: &str = "\
Examples:
  runner \"fix the failing test in src/parse.rs\"   one task, in the profile's sandbox
  runner                                          a conversation, one line per turn
  runner run status                               a one-word task (`runner status` alone is a typo)
  runner -m anthropic/claude-sonnet-4-5 --sandbox docker \"add a --verbose flag\"
  runner --workspace copy \"rename Foo to Bar\"     work on a copy; then:
  runner changes                                  the copies waiting for this worktree
  runner apply ID                                 bring a copy's changes over
  runner sessions list                            recorded sessions, newest first
  runner sandbox doctor                           which sandboxes work on this machine
  runner permission check bash '{\"command\":\"rm -rf x\"}'
  runner eval run tasks.jsonl --out results       many tasks, one sandbox each
  source <(runner completions bash)               tab completion for this shell
  runner man | man -l -                           the whole manual";

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    shell: Shell,
}

/// Writes the completion script for one shell to stdout.
pub fn completions(args: CompletionsArgs) -> u8 {
    let mut cmd = super::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "runner", &mut out);
    write_stdout(&out)
}

/// Writes the whole manual, as roff, to stdout.
pub fn man() -> u8 {
    match manual() {
        Ok(page) => write_stdout(&page),
        Err(e) => {
            eprintln!("runner: cannot render the manual page: {e}");
            exit::FAILED
        }
    }
}

fn write_stdout(bytes: &[u8]) -> u8 {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => exit::OK,
        // A reader that went away (`| head`) is not worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit::OK,
        Err(e) => {
            eprintln!("runner: cannot write to standard output: {e}");
            exit::FAILED
        }
    }
}

/// One page for the whole tree: clap_mangen renders one command per page, so the top
/// command's page comes first, then each visible subcommand (nested ones too) as a section
/// of its own whose SYNOPSIS, DESCRIPTION and OPTIONS are subsections, then the sections
/// clap cannot know.
pub fn manual() -> std::io::Result<Vec<u8>> {
    let mut cmd = super::command().disable_help_subcommand(true);
    cmd.build();
    let date = env!("RUNNER_BUILD_DATE");
    let top = clap_mangen::Man::new(cmd.clone())
        .date(date)
        .source(concat!("runner ", env!("CARGO_PKG_VERSION")));
    let mut page = Vec::new();
    top.render_title(&mut page)?;
    top.render_name_section(&mut page)?;
    top.render_synopsis_section(&mut page)?;
    top.render_description_section(&mut page)?;
    top.render_options_section(&mut page)?;
    commands_list(&cmd, "SH").to_writer(&mut page)?;
    for sub in visible_subcommands(&cmd) {
        subcommand_sections(sub, &mut page)?;
    }
    let mut tail = Roff::new();
    examples(&mut tail);
    environment(&mut tail);
    exit_status(&mut tail);
    tail.control("SH", ["VERSION"]).text([roman(LONG_VERSION)]);
    tail.to_writer(&mut page)?;
    Ok(page)
}

/// The subcommands a user types: not the hidden ones, nor clap's `help` (every command
/// has `--help`, and the page is the help).
fn visible_subcommands(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

/// `.SH "RUNNER SANDBOX DOCTOR"` and that command's own sections one level down, then its
/// own subcommands the same way.
fn subcommand_sections(cmd: &clap::Command, page: &mut Vec<u8>) -> std::io::Result<()> {
    let full = cmd.get_bin_name().unwrap_or(cmd.get_name()).to_uppercase();
    Roff::new().control("SH", [full.as_str()]).to_writer(page)?;
    let man = clap_mangen::Man::new(cmd.clone());
    let mut own = Vec::new();
    man.render_synopsis_section(&mut own)?;
    man.render_description_section(&mut own)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut own)?;
    }
    page.extend_from_slice(&demote_sections(&own));
    if cmd.has_subcommands() {
        commands_list(cmd, "SS").to_writer(page)?;
    }
    for sub in visible_subcommands(cmd) {
        subcommand_sections(sub, page)?;
    }
    Ok(())
}

/// The subcommands by their full names (`runner sandbox doctor`), each with its summary:
/// clap_mangen's own list names a page per subcommand (`runner-sandbox(1)`), and this
/// manual has one page, with each of them as a section further down.
fn commands_list(cmd: &clap::Command, level: &str) -> Roff {
    let mut roff = Roff::new();
    roff.control(level, ["COMMANDS"]);
    for sub in visible_subcommands(cmd) {
        let name = sub.get_bin_name().unwrap_or(sub.get_name());
        roff.control("TP", []).text([bold(name)]);
        if let Some(about) = sub.get_about() {
            roff.text([roman(about.to_string())]);
        }
    }
    roff
}

/// Turns each `.SH` of a rendered piece into `.SS`, so it nests under the subcommand's
/// own heading.
fn demote_sections(roff: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(roff);
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        match line.strip_prefix(".SH ") {
            Some(rest) => {
                out.push_str(".SS ");
                out.push_str(rest);
            }
            None => out.push_str(line),
        }
    }
    out.into_bytes()
}

fn examples(roff: &mut Roff) {
    roff.control("SH", ["EXAMPLES"]);
    for line in EXAMPLES.lines().skip(1) {
        let line = line.trim_start();
        let (command, what) = match line.find("   ") {
            Some(at) => (line[..at].trim_end(), line[at..].trim()),
            None => (line, ""),
        };
        roff.control("TP", []).text([bold(command)]);
        if !what.is_empty() {
            roff.text([roman(what)]);
        }
    }
}

/// The variables runner itself reads (a sandboxed command sees none of them unless the
/// config passes it on).
const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "ANTHROPIC_API_KEY, OPENAI_API_KEY",
        "The keys of the built-in providers. A [provider.NAME] table names its own variable \
         with api_key_env (default NAME_API_KEY).",
    ),
    (
        "ANTHROPIC_BASE_URL, OPENAI_BASE_URL",
        "Where the built-in providers are reached (OPENAI_BASE_URL includes /v1, \
         ANTHROPIC_BASE_URL does not); default the public APIs.",
    ),
    (
        "EXA_API_KEY",
        "The key of the websearch and codesearch tools, sent only to their endpoint.",
    ),
    (
        "HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY",
        "The upstream proxy for the model's and webfetch's traffic (lowercase names too), \
         and the hosts reached without it.",
    ),
    (
        "SSL_CERT_FILE",
        "Extra trusted certificates, also handed to the sandbox.",
    ),
    (
        "DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH",
        "The container engine the docker sandbox uses (default the local socket, else the \
         user's rootless Podman under XDG_RUNTIME_DIR).",
    ),
    (
        "XDG_CONFIG_HOME",
        "The user's config: $XDG_CONFIG_HOME/runner/config.toml and profiles/ (default \
         ~/.config).",
    ),
    (
        "XDG_DATA_HOME",
        "Sessions, saved outputs and copy workspaces: $XDG_DATA_HOME/runner (default \
         ~/.local/share).",
    ),
    (
        "XDG_RUNTIME_DIR",
        "Where the rootless Podman socket is looked for.",
    ),
    ("HOME", "The base of the XDG defaults."),
    ("NO_COLOR", "When set, the terminal view has no colour."),
    ("TERM", "Passed on to the shell of runner sandbox shell."),
    (
        "RUNNER_RESOLVE",
        "walk forces the path resolution used where openat2 is refused (for tests and \
         diagnosis).",
    ),
    (
        "RUNNER_IN_CONTAINER",
        "Set by runner's own container image: runner itself runs in a container.",
    ),
];

fn environment(roff: &mut Roff) {
    roff.control("SH", ["ENVIRONMENT"]);
    for (name, what) in ENVIRONMENT {
        roff.control("TP", [])
            .text([bold(*name)])
            .text([roman(*what)]);
    }
}

/// The statuses, from the one table the commands return ([`exit::TABLE`]).
fn exit_status(roff: &mut Roff) {
    roff.control("SH", ["EXIT STATUS"]);
    for (code, what) in exit::TABLE {
        roff.control("TP", [])
            .text([bold(code.to_string())])
            .text([roman(what)]);
    }
}
