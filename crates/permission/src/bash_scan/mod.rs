//! What a bash command asks permission for, read from its text before it runs.
//!
//! The agent hands us one string. Before anything executes, the permission layer needs to
//! know which `bash` rules to consult, what to remember if the user answers "always", which
//! directories outside the worktree the command may touch (`external_directory`), and which
//! `.env`-style files it reads (`read`). This module parses the string with tree-sitter-bash
//! and answers those four questions statically, leaning towards asking when it cannot tell.
//! A fifth answer, [`BashScan::deny_spellings`], serves deny rules only: the same command
//! written differently (`\rm`, `/bin/rm`, `sudo rm`) must not slip past `rm *: deny`.
//!
//! Static analysis of shell is necessarily approximate: variables, substitutions and globs are
//! only known at run time. Wherever the answer depends on run time we say "possibly anywhere"
//! (`*`), and the sandbox the command eventually runs in still bounds what it can do; this
//! scan decides what to *ask*, it is not the last line of defence.
//!
//! What the scan looks at, and why:
//!
//! * every statement that runs, not only simple commands: `[[ … ]]`, `(( … ))`, `let`,
//!   assignments, `export`/`declare`/`unset` can all run code (bash expands `a[$(cmd)]` when
//!   it evaluates arithmetic) or change what later commands do, so each is asked about with
//!   its exact text; a line with nothing else to ask about is asked about as a whole;
//! * redirections on compound statements (`{ …; } > f`), which no inner command shows;
//! * commands that run other commands (`sudo`, `env`, `timeout`, `xargs`, `find -exec`, …):
//!   the wrapped command is found with a table of each wrapper's options, so that its paths
//!   are checked and deny rules see it; shells, `eval` and `trap` run scripts, which are
//!   scanned in turn when their text is known and count as "anywhere" when it is not;
//! * what `cd` and `~` mean: assigning `HOME`, `CDPATH` or `OLDPWD`, `shopt` and `source`
//!   make the directory unknown from there on.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

use tree_sitter::{Node, Parser};

use super::paths::{lexical, resolve_existing as resolve};
use super::{arity, wildcard};

// One concern a file: the walk over the statements, the wrapper tables, path arguments,
// `.env` reads, and reading words.
mod env_files;
mod path_args;
#[cfg(test)]
mod tests;
mod walk;
mod words;
mod wrappers;

use walk::*;
use words::*;
use wrappers::*;

/// Where the command runs: the facts needed to turn its path arguments into places.
pub struct ScanContext<'a> {
    /// Directory the command starts in (absolute, normalised).
    pub cwd: &'a Path,
    /// The worktree root (absolute, normalised). Anything not under it is "outside".
    pub worktree: &'a Path,
    /// For `~` and `cd` with no argument. None → `~` is unresolvable.
    pub home: Option<&'a Path>,
}

/// The permissions one command line needs, each list deduplicated in source order so that the
/// user is asked about things in the order they appear in the command.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BashScan {
    /// `bash` patterns to ask about: the source text of every command that will run, nested
    /// ones included, since `echo $(rm -rf x)` runs `rm` as surely as `echo`; also the text of
    /// every other statement that can run code or redirect output (`[[ … ]]`, `x=…`,
    /// `{ …; } > f`), and the whole line when nothing else was found.
    pub patterns: Vec<String>,
    /// What an "always" answer remembers: OpenCode's `prefix *`, except that commands able to
    /// run arbitrary other commands or code, commands with leading assignments or
    /// redirections, and statements that are not plain commands get their exact text, so
    /// approval cannot widen.
    pub always: Vec<String>,
    /// `external_directory` patterns `<dir>/*`, or `*` when the place is only known at run
    /// time: the worktree is what the user agreed to let the agent touch.
    pub external: Vec<String>,
    /// Env files read, for the `read` rules that guard secrets: worktree-relative (`a/.env`)
    /// when inside, absolute when outside, the form those rules are written against. A glob
    /// that could name an env file is reported as the glob (`.env*`, `sub/.env.*`): the
    /// files it matches are only known when it runs.
    pub reads: Vec<String>,
    /// For a command pattern, other spellings of the same command that `deny` rules must
    /// also catch: its normalised form (quotes removed as bash removes them, leading
    /// assignments and redirections dropped, the name's directory dropped, later redirections
    /// kept) and the normalised form of every command a wrapper in it runs (`sudo -u root rm
    /// x` → `rm x`). Only patterns with at least one spelling other than themselves are
    /// listed, in pattern order. These never allow anything: a pattern is allowed only on its
    /// own text, so a spelling can only make a deny rule match, never an allow rule.
    pub deny_spellings: Vec<(String, Vec<String>)>,
}

/// Scans `command` and reports what it needs permission for.
///
/// Text tree-sitter cannot parse cleanly yields one exact pattern for the whole line (and an
/// exact "always"), because a prefix of something we could not read may approve more than the
/// user saw; the sandbox still bounds what such a command does. So does readable text in
/// which no pattern was found (a lone comment): every line the agent runs is shown
/// to the rules at least once, except a line that only changes directory (`cd /etc`): like
/// OpenCode, that asks nothing of `bash`, only `external_directory` when it leaves the
/// worktree, since a shell that changes directory and ends has done nothing.
pub fn scan(command: &str, cx: &ScanContext) -> BashScan {
    let text = command.trim();
    if text.is_empty() {
        return BashScan::default();
    }
    let mut scanner = Scanner::new(cx);
    if !scanner.script(text, 0) {
        return unreadable(text);
    }
    let changed_dir = scanner.changed_dir;
    let mut found = scanner.finish();
    if found.patterns.is_empty() && !changed_dir {
        found.patterns.push(text.to_string());
        found.always.push(text.to_string());
    }
    found
}

/// The answer for text we could not analyse: ask about exactly that text, nothing broader.
fn unreadable(text: &str) -> BashScan {
    BashScan {
        patterns: vec![text.to_string()],
        always: vec![text.to_string()],
        ..BashScan::default()
    }
}

/// Commands whose non-flag arguments are paths they read, write, create or enter.
const PATH_COMMANDS: &[&str] = &[
    "cd", "rm", "cp", "mv", "mkdir", "touch", "chmod", "chown", "cat", "ln", "tee", "rmdir",
    "truncate", "pushd", "popd", "chdir",
];

/// Commands that change the current directory. They get no `bash` pattern (as in OpenCode):
/// changing directory is harmless by itself, and where it leads is covered by the
/// `external_directory` check on its target. With a redirection they do more than change
/// directory (`cd . > f` truncates `f`), so then they are asked about like any statement.
const CD_COMMANDS: &[&str] = &["cd", "pushd", "popd", "chdir"];

/// Commands that run other commands (or arbitrary code). Their "always" pattern is the exact
/// command line rather than OpenCode's `prefix *`: approving `bash -c 'ls'` forever must not
/// approve `bash -c 'rm -rf /'`. This departs from OpenCode on purpose. `let` is here because
/// arithmetic evaluation runs the substitutions in array subscripts (`let 'x=a[$(rm y)]'`).
/// Every name in [`RUNNERS`] and [`SHELLS`] must be listed (a test checks it).
const WRAPPERS: &[&str] = &[
    "sudo", "doas", "env", "xargs", "timeout", "nice", "nohup", "command", "exec", "eval", "bash",
    "sh", "zsh", "dash", "ksh", "mksh", "ash", "time", "watch", "strace", "find", "builtin",
    "coproc", "trap", "stdbuf", "setsid", "flock", "busybox", "su", "runuser", "script",
    "parallel", "ionice", "chroot", "let",
];

/// Interpreters: whatever follows the name is a program, so approving one invocation by
/// prefix (`python -m *`, `sed *`) would approve any program. Matched after dropping a
/// version suffix (`python3.12` → `python`). `sed` is here because GNU sed's `e` command
/// runs shell commands.
const INTERPRETERS: &[&str] = &[
    "python",
    "pypy",
    "node",
    "nodejs",
    "perl",
    "ruby",
    "php",
    "lua",
    "luajit",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "sed",
    "gsed",
    "tclsh",
    "pwsh",
    "osascript",
];

/// Commands that only run code given on the command line with one of these options or
/// subcommands (`deno eval`, `bun -e`, `npx -c`); `git -c` sets configuration such as
/// `core.pager` or an alias, which runs commands. With one of them "always" is exact.
const CODE_FLAGS: &[(&str, &[&str])] = &[
    ("deno", &["eval"]),
    ("bun", &["-e", "--eval", "-p", "--print"]),
    ("Rscript", &["-e"]),
    ("npx", &["-c", "--call"]),
    ("npm", &["-c", "--call"]),
    ("git", &["-c", "--config-env"]),
];

/// Shells: `-c STRING`, a script file, or a script read from stdin.
const SHELLS: &[&str] = &["bash", "sh", "zsh", "dash", "ksh", "mksh", "ash"];

/// Variables that steer where `cd` goes and what `~` means.
const CWD_VARS: &[&str] = &["HOME", "CDPATH", "OLDPWD"];

/// Builtins that assign to a variable named in their arguments (`read HOME`,
/// `printf -v CDPATH …`), for when they are not parsed as declarations (`builtin export …`).
const ASSIGNING: &[&str] = &[
    "read",
    "printf",
    "mapfile",
    "readarray",
    "getopts",
    "let",
    "export",
    "declare",
    "typeset",
    "local",
    "readonly",
    "unset",
];

/// Commands after which `cd` and `~` mean something we cannot know: `shopt` can turn on
/// `cdable_vars` or `autocd` (a sourced file, which can do anything, is handled with the
/// commands that run scripts).
const CWD_UNKNOWN_AFTER: &[&str] = &["shopt"];

/// Device files that touch nothing on disk; redirecting to them is routine.
const HARMLESS_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/stdin",
    "/dev/tty",
    "/dev/zero",
    "/dev/urandom",
    "/dev/random",
];

/// Node kinds whose value is only known at run time.
const DYNAMIC_KINDS: &[&str] = &[
    "simple_expansion",
    "expansion",
    "command_substitution",
    "process_substitution",
    "arithmetic_expansion",
    "ansi_c_string",
    "translated_string",
];

/// Node kinds a normalised word keeps as written: their value is only known at run time.
const VERBATIM_KINDS: &[&str] = &[
    "simple_expansion",
    "expansion",
    "command_substitution",
    "process_substitution",
    "arithmetic_expansion",
];

/// Node kinds that redirect a command's input or output.
const REDIRECT_KINDS: &[&str] = &["file_redirect", "herestring_redirect", "heredoc_redirect"];

/// Statements other than simple commands that redirections can apply to.
const REDIRECTABLE: &[&str] = &[
    "compound_statement",
    "subshell",
    "if_statement",
    "while_statement",
    "for_statement",
    "c_style_for_statement",
    "case_statement",
    "negated_command",
    "test_command",
    "declaration_command",
    "unset_command",
    "variable_assignment",
    "variable_assignments",
];

/// Parents under which a `variable_assignment` is part of something else, not a statement.
const NOT_STATEMENT_PARENTS: &[&str] = &[
    "command",
    "declaration_command",
    "variable_assignments",
    "c_style_for_statement",
    "parenthesized_expression",
];

/// Syntax nested deeper than this (counting `bash -c` strings inside their command) is
/// treated as unreadable: the walk recurses, and nothing legitimate nests this deep, so
/// refusing is cheaper than risking the stack.
const MAX_DEPTH: usize = 256;
/// How many `bash -c '…'` / `eval '…'` strings inside each other are scanned; beyond that
/// the inner script counts as unknown (`*`), and the wrapper's exact pattern is all the user
/// approves.
const MAX_NESTING: usize = 3;
/// More possible directories than this and we stop tracking: every relative path becomes
/// "anywhere". Each relative `cd` can double the set, so it needs a bound.
const MAX_DIRS: usize = 32;
/// Passes over a loop body (or the function bodies) before giving up on a fixed point.
const MAX_ROUNDS: usize = 3;
/// Words read to unwrap one command line, per word of it. Unwrapping a chain of wrappers
/// (`sudo nice timeout 5 rm`) or `find`s side by side reads each word about once, but a
/// `find` reads all its words and `find -exec find -exec …` nests, so hostile input could
/// make it quadratic. Past the bound the rest of the line is treated as unknown arguments
/// and what it runs gets no spelling; no real command comes near it.
const PEEL_WORK_PER_WORD: usize = 16;
/// Wrappers between the command line and what finally runs that get a spelling of their own
/// (`sudo nice rm x` → `nice rm x`). Each is as long as the rest of the line, so hostile
/// input must not get one per word; what finally runs is always spelled out.
const MAX_SPELLED_WRAPPERS: usize = 16;
/// Globs longer than this are assumed to possibly name an env file rather than analysed.
const MAX_GLOB_LEN: usize = 1024;
/// Brace alternatives considered when deciding whether a glob could name an env file; past
/// this we assume it could.
const MAX_BRACE_ALTERNATIVES: usize = 64;

/// What an option's value, or an operand, is to a command that runs another command.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    /// Names nothing on disk (`sudo -u root`, `nice -n 5`, `timeout 5`).
    Plain,
    /// A directory the wrapped command runs in (`env -C`, `sudo -D`, `chroot DIR`): checked
    /// as a place, and the wrapped command's relative paths become unknown.
    Dir,
    /// A file the wrapper itself opens or creates (`time -o`, `flock FILE`, `xargs -a`).
    File,
    /// A shell command string (`su -c`, `flock -c`, `script -c`).
    Script,
    /// After it, where the wrapped command starts is unclear (`env -S`, `sudo -e`).
    Unsure,
    /// With it nothing is run (`command -v`, `sudo -l`).
    NoRun,
}

/// What follows a runner's options and operands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Rest {
    /// A command and its arguments (`sudo rm x`).
    Command,
    /// A command whose arguments are completed at run time from stdin (`xargs rm`).
    Appended,
    /// Words joined with spaces and run by a shell (`watch 'ls; df'`).
    Script,
    /// More operands of this role, options allowed anywhere (`su root -c CMD`, `script LOG`).
    Operands(Role),
    /// Syntax too rich to follow (`parallel`): every argument is a possible path.
    Unsure,
}

/// How a command that runs another command reads its arguments. Options are recognised until
/// the wrapped command starts (`--` ends them): short ones in clusters (`-Eu root`), with
/// their value attached (`-uroot`) or in the next word; long ones as `--opt=v` or
/// `--opt v`. An option not listed is assumed to take no value.
struct Runner {
    names: &'static [&'static str],
    /// Options that take a value (short and long spellings).
    values: &'static [&'static str],
    /// Options (with or without a value) whose role is not [`Role::Plain`].
    dirs: &'static [&'static str],
    files: &'static [&'static str],
    scripts: &'static [&'static str],
    unsure: &'static [&'static str],
    no_run: &'static [&'static str],
    /// Operands before the wrapped command (`timeout DURATION`, `flock FILE`).
    operands: &'static [Role],
    /// `NAME=VALUE` words before the command set its environment (`env`, `sudo`).
    assignments: bool,
    rest: Rest,
}

impl Runner {
    fn role(&self, option: &str) -> Role {
        let lists = [
            (self.dirs, Role::Dir),
            (self.files, Role::File),
            (self.scripts, Role::Script),
            (self.unsure, Role::Unsure),
            (self.no_run, Role::NoRun),
        ];
        lists
            .iter()
            .find(|(list, _)| list.contains(&option))
            .map_or(Role::Plain, |&(_, role)| role)
    }
}

/// A list that keeps the first occurrence of each entry, in order.
#[derive(Default)]
struct Ordered {
    items: Vec<String>,
    seen: HashSet<String>,
}

impl Ordered {
    fn push(&mut self, item: &str) {
        if self.seen.insert(item.to_string()) {
            self.items.push(item.to_string());
        }
    }
}

/// The directories the shell may be in. A set, never shrinking, because the scan does not
/// follow control flow: `(cd /tmp); rm y` and `cd /tmp && rm y` must both count `/tmp`.
#[derive(Clone, PartialEq)]
enum Dirs {
    Known(Vec<PathBuf>),
    /// After `cd $X`, `cd -` and the like: relative paths could be anywhere.
    Unknown,
}

/// A shell word with its quoting removed, when it is static.
#[derive(Clone, Debug)]
struct Word {
    /// The text as the command will receive it (before globbing).
    text: String,
    /// Byte offset in `text` of the first unquoted glob or brace character.
    glob: Option<usize>,
    /// Whether the word starts with an unquoted `~` (tilde expansion applies).
    tilde: bool,
}

impl Word {
    /// The part after byte `at` (the value of `--opt=VALUE`), still subject to expansion.
    fn tail(&self, at: usize) -> Word {
        let text = self.text.get(at..).unwrap_or("").to_string();
        Word {
            tilde: text.starts_with('~'),
            glob: self.glob.and_then(|g| g.checked_sub(at)),
            text,
        }
    }
}

/// How one command argument is to be read.
enum Arg {
    /// An option; not a path.
    Flag,
    /// A value: `Some` when static, `None` when only known at run time.
    Value(Option<Word>),
}

/// A command as found in the text: its name word and the argument words after it. For a
/// wrapped command (`sudo rm x`) both are words of the wrapper's command line.
#[derive(Clone, Copy)]
struct Call<'n, 't> {
    name: Node<'t>,
    args: &'n [Node<'t>],
}

/// The pieces of one `command` node.
struct Parts<'t> {
    name: Option<Node<'t>>,
    /// Argument words in source order, including the words tree-sitter attaches to a
    /// redirection (`echo > f hi` parses `hi` as a second target; bash passes it to `echo`).
    args: Vec<Node<'t>>,
    /// Assignments before the name (`FOO=1 make`).
    assignments: Vec<Node<'t>>,
    /// Whether assignments or redirections come before the name.
    prefixed: bool,
    /// Whether any redirection applies to the command.
    redirected: bool,
    /// The redirections after the name, normalised (`>x` → `> x`), for the deny spellings.
    tail: Vec<String>,
}

/// The context a wrapped command runs in.
#[derive(Clone, Copy, Default)]
struct Ctx {
    /// A wrapper changed its directory (`env -C`): its relative paths are unknown.
    moved: bool,
    /// A wrapper adds arguments at run time (`xargs`): its paths are unknown.
    appended: bool,
    /// How many wrappers it is inside.
    depth: usize,
}

/// What a command that runs other commands runs, once its own options are read.
#[derive(Default)]
struct Peeled<'n, 't> {
    /// Commands it runs, and whether each runs somewhere else (`find -execdir`).
    calls: Vec<(Call<'n, 't>, bool)>,
    /// Shell scripts it runs: the text when static, `None` when only known at run time.
    scripts: Vec<Option<String>>,
    /// The scripts run in the current shell (`eval`, `trap`), so they can `cd`.
    in_shell: bool,
    /// A shell that reads its script from stdin.
    reads_stdin: bool,
    /// Places its own options and operands name (`sudo -D DIR`, `flock FILE`): the word
    /// (`None` if dynamic) and whether it is a directory.
    places: Vec<(Option<Word>, bool)>,
    /// It runs the command in another directory.
    moves: bool,
    /// It adds arguments at run time.
    appends: bool,
    /// Where its command starts is unclear: every argument is a possible path.
    unsure: bool,
    /// It runs nothing (`command -v rm`).
    no_run: bool,
    /// Words read to find all this (see [`PEEL_WORK_PER_WORD`]).
    cost: usize,
    /// After it `cd` and `~` mean something we cannot know: it sets `HOME`, `CDPATH` or
    /// `OLDPWD` for what it runs (`env HOME=/etc …`), or sources a file into this shell.
    cwd_unknown: bool,
}

impl Peeled<'_, '_> {
    fn apply(&mut self, role: Role, value: Option<Word>) {
        match role {
            Role::Plain => {}
            Role::Dir => {
                self.places.push((value, true));
                self.moves = true;
            }
            Role::File => self.places.push((value, false)),
            Role::Script => self.scripts.push(value.map(|w| w.text)),
            Role::Unsure => self.unsure = true,
            Role::NoRun => self.no_run = true,
        }
    }
}

/// Where a shell reading its script from stdin gets it.
enum Stdin {
    /// A here-string or here-document: the text, `None` when it has expansions.
    Text(Option<String>),
    /// A file (`sh < x.sh`): a path argument like any other; or stdin closed.
    File,
    /// A pipe or a duplicated descriptor: only known at run time.
    Unknown,
    /// Whatever the runner gave the command line.
    Inherited,
}

struct Scanner<'a> {
    cx: &'a ScanContext<'a>,
    home: Option<String>,
    /// The worktree with symlinks resolved, since paths are compared after resolution.
    worktree_real: PathBuf,
    dirs: Dirs,
    /// Bumped whenever `dirs` changes, so loops can tell when they reached a fixed point.
    changes: usize,
    /// How many `bash -c` / `eval` strings we are inside.
    nesting: usize,
    patterns: Ordered,
    always: Ordered,
    external: Ordered,
    reads: Ordered,
    /// Pattern → its other spellings, in pattern order.
    spellings: Vec<(String, Ordered)>,
    spelling_at: HashMap<String, usize>,
    /// A plain `cd` (no redirection) was seen: a line that only changes directory has
    /// nothing for `bash` to ask about, as in OpenCode.
    changed_dir: bool,
}
