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
/// which no pattern was found (`cd /etc`, a lone comment): every line the agent runs is shown
/// to the rules at least once.
pub fn scan(command: &str, cx: &ScanContext) -> BashScan {
    let text = command.trim();
    if text.is_empty() {
        return BashScan::default();
    }
    let mut scanner = Scanner::new(cx);
    if !scanner.script(text, 0) {
        return unreadable(text);
    }
    let mut found = scanner.finish();
    if found.patterns.is_empty() {
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

/// A runner with no options, for struct update syntax.
const BARE: Runner = Runner {
    names: &[],
    values: &[],
    dirs: &[],
    files: &[],
    scripts: &[],
    unsure: &[],
    no_run: &[],
    operands: &[],
    assignments: false,
    rest: Rest::Command,
};

/// Commands that run another command, and how to find it (see [`Runner`]). Shells, `eval`,
/// `trap` and `find` have handlers of their own.
const RUNNERS: &[Runner] = &[
    Runner {
        names: &["sudo"],
        values: &[
            "-u",
            "-g",
            "-C",
            "-D",
            "-h",
            "-p",
            "-r",
            "-t",
            "-U",
            "-T",
            "--user",
            "--group",
            "--close-from",
            "--chdir",
            "--host",
            "--prompt",
            "--role",
            "--type",
            "--other-user",
            "--command-timeout",
        ],
        dirs: &["-D", "--chdir"],
        unsure: &["-e", "--edit"],
        no_run: &[
            "-l",
            "--list",
            "-v",
            "--validate",
            "-K",
            "--remove-timestamp",
            "-V",
            "--version",
        ],
        assignments: true,
        ..BARE
    },
    Runner {
        names: &["doas"],
        values: &["-u", "-a", "-C"],
        no_run: &["-C"],
        ..BARE
    },
    Runner {
        names: &["env"],
        values: &[
            "-u",
            "-C",
            "-S",
            "-a",
            "--unset",
            "--chdir",
            "--split-string",
            "--argv0",
        ],
        dirs: &["-C", "--chdir"],
        unsure: &["-S", "--split-string"],
        assignments: true,
        ..BARE
    },
    Runner {
        names: &["nice"],
        values: &["-n", "--adjustment"],
        ..BARE
    },
    Runner {
        names: &["timeout"],
        values: &["-s", "-k", "--signal", "--kill-after"],
        operands: &[Role::Plain],
        ..BARE
    },
    Runner {
        names: &["time"],
        values: &["-o", "-f", "--output", "--format"],
        files: &["-o", "--output"],
        ..BARE
    },
    Runner {
        names: &["command"],
        no_run: &["-v", "-V"],
        ..BARE
    },
    Runner {
        names: &["exec"],
        values: &["-a"],
        ..BARE
    },
    Runner {
        names: &["stdbuf"],
        values: &["-i", "-o", "-e", "--input", "--output", "--error"],
        ..BARE
    },
    Runner {
        names: &["flock"],
        values: &[
            "-w",
            "-E",
            "-c",
            "--wait",
            "--timeout",
            "--conflict-exit-code",
            "--command",
        ],
        scripts: &["-c", "--command"],
        operands: &[Role::File],
        ..BARE
    },
    Runner {
        names: &["xargs"],
        values: &[
            "-a",
            "-d",
            "-E",
            "-I",
            "-L",
            "-n",
            "-P",
            "-s",
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--max-chars",
            "--process-slot-var",
        ],
        files: &["-a", "--arg-file"],
        rest: Rest::Appended,
        ..BARE
    },
    Runner {
        names: &["ionice"],
        values: &[
            "-c",
            "-n",
            "-p",
            "-P",
            "-u",
            "--class",
            "--classdata",
            "--pid",
            "--pgid",
            "--uid",
        ],
        no_run: &["-p", "-P", "-u", "--pid", "--pgid", "--uid"],
        ..BARE
    },
    Runner {
        names: &["chroot"],
        values: &["--userspec", "--groups"],
        operands: &[Role::Dir],
        ..BARE
    },
    Runner {
        names: &["watch"],
        values: &["-n", "-q", "--interval", "--equexit"],
        rest: Rest::Script,
        ..BARE
    },
    Runner {
        names: &["strace"],
        values: &[
            "-a", "-b", "-e", "-E", "-I", "-o", "-O", "-p", "-P", "-s", "-S", "-u", "-X",
            "--output",
        ],
        files: &["-o", "--output"],
        ..BARE
    },
    Runner {
        names: &["su", "runuser"],
        values: &[
            "-c",
            "-s",
            "-g",
            "-G",
            "-w",
            "-u",
            "--command",
            "--session-command",
            "--shell",
            "--group",
            "--supplementary-group",
            "--whitelist-environment",
            "--user",
        ],
        scripts: &["-c", "--command", "--session-command"],
        rest: Rest::Operands(Role::Plain),
        ..BARE
    },
    Runner {
        names: &["script"],
        values: &[
            "-c",
            "-E",
            "-O",
            "-I",
            "-B",
            "-T",
            "-m",
            "--command",
            "--echo",
            "--log-out",
            "--log-in",
            "--log-io",
            "--log-timing",
            "--logging-format",
        ],
        scripts: &["-c", "--command"],
        files: &[
            "-O",
            "-I",
            "-B",
            "-T",
            "--log-out",
            "--log-in",
            "--log-io",
            "--log-timing",
        ],
        rest: Rest::Operands(Role::File),
        ..BARE
    },
    Runner {
        names: &["parallel"],
        rest: Rest::Unsure,
        ..BARE
    },
    Runner {
        names: &["nohup", "builtin", "coproc", "setsid", "busybox"],
        ..BARE
    },
];

fn runner(name: &str) -> Option<&'static Runner> {
    RUNNERS.iter().find(|r| r.names.contains(&name))
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
}

impl<'a> Scanner<'a> {
    fn new(cx: &'a ScanContext<'a>) -> Self {
        Scanner {
            cx,
            home: cx.home.and_then(Path::to_str).map(str::to_string),
            worktree_real: resolve(cx.worktree),
            dirs: Dirs::Known(vec![cx.cwd.to_path_buf()]),
            changes: 0,
            nesting: 0,
            patterns: Ordered::default(),
            always: Ordered::default(),
            external: Ordered::default(),
            reads: Ordered::default(),
            spellings: Vec::new(),
            spelling_at: HashMap::new(),
        }
    }

    fn finish(self) -> BashScan {
        BashScan {
            patterns: self.patterns.items,
            always: self.always.items,
            external: self.external.items,
            reads: self.reads.items,
            deny_spellings: self
                .spellings
                .into_iter()
                .filter(|(_, forms)| !forms.items.is_empty())
                .map(|(pattern, forms)| (pattern, forms.items))
                .collect(),
        }
    }

    /// Parses and walks one script, `level` deep in the walk's recursion; false when it
    /// cannot be read reliably.
    fn script(&mut self, src: &str, level: usize) -> bool {
        let mut parser = Parser::new();
        if parser
            .set_language(&tree_sitter_bash::LANGUAGE.into())
            .is_err()
        {
            return false;
        }
        let Some(tree) = parser.parse(src, None) else {
            return false;
        };
        let root = tree.root_node();
        if root.has_error() || level + tree_depth(root) > MAX_DEPTH {
            return false;
        }
        self.walk(root, src, level);
        self.rewalk_functions(root, src, level);
        true
    }

    /// Visits `node` and everything below it. `level` is the recursion depth, bounded by
    /// `MAX_DEPTH` through the checks in `script`.
    fn walk(&mut self, node: Node, src: &str, level: usize) {
        self.redirected(node, src);
        match node.kind() {
            "command" => self.command(node, src, level),
            "file_redirect" => self.redirect(node, src),
            "for_statement" | "c_style_for_statement" | "while_statement" => {
                self.loop_variable(node, src);
                return self.walk_loop(node, src, level);
            }
            "function_definition" if node.child_by_field_name("redirect").is_some() => {
                // The redirection applies whenever the function runs.
                self.exact(node_text(node, src).trim());
            }
            "declaration_command" | "unset_command" => {
                self.names_cwd_var(node, src);
                self.exact(pattern_text(node, src));
            }
            "test_command" => self.exact(pattern_text(node, src)),
            "compound_statement" if is_arithmetic(node) => self.exact(pattern_text(node, src)),
            "variable_assignment" | "variable_assignments" => self.assignment(node, src),
            "expansion" => self.expansion(node, src),
            _ => {}
        }
        self.walk_children(node, src, level);
    }

    fn walk_children(&mut self, node: Node, src: &str, level: usize) {
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            self.walk(child, src, level + 1);
        }
    }

    /// A loop body runs again after its own `cd`s, so it is walked until the directory set
    /// stops growing (`for …; do rm x; cd /tmp; done` removes `/tmp/x` the second time round).
    fn walk_loop(&mut self, node: Node, src: &str, level: usize) {
        self.until_stable(|s| s.walk_children(node, src, level));
    }

    /// A function body runs wherever the function is called, possibly after later `cd`s, so
    /// the bodies are walked again against the final directory set.
    fn rewalk_functions(&mut self, root: Node, src: &str, level: usize) {
        let mut bodies = Vec::new();
        each_node(root, |n, depth| {
            if n.kind() == "function_definition" {
                bodies.push((n, level + depth));
            }
        });
        if !bodies.is_empty() {
            self.until_stable(|s| {
                for &(body, at) in &bodies {
                    s.walk_children(body, src, at);
                }
            });
        }
    }

    /// Runs `pass` until it no longer changes the directory set; if it keeps changing it
    /// (`while :; do cd sub; done`), the directory becomes unknown.
    fn until_stable(&mut self, mut pass: impl FnMut(&mut Self)) {
        for _ in 0..MAX_ROUNDS {
            let before = self.changes;
            pass(self);
            if self.changes == before {
                return;
            }
        }
        self.set_unknown();
    }

    /// Asks about a statement by its exact text, and remembers exactly that text: it is not a
    /// command with a name whose prefix could be remembered.
    fn exact(&mut self, text: &str) {
        self.patterns.push(text);
        self.always.push(text);
    }

    /// A redirection on anything but a simple command (`{ …; } > f`, `(…) > f`, a lone
    /// `> f`) shows in no command's pattern, so the statement it applies to is asked about
    /// with it, where a `*>*` rule sees it (when the walk reaches that statement, to keep
    /// source order).
    fn redirected(&mut self, node: Node, src: &str) {
        if REDIRECTABLE.contains(&node.kind()) && redirect_owner(node).is_some() {
            self.exact(pattern_text(node, src));
        }
        if node.kind() == "redirected_statement" && node.child_by_field_name("body").is_none() {
            self.exact(node_text(node, src).trim());
        }
    }

    /// `x=…` as a statement of its own can run code later (`x='a[$(rm y)]'; echo $((x))`) or
    /// change what later commands do (`GIT_EXTERNAL_DIFF=…`), so it is asked about exactly.
    /// Assigning `HOME`, `CDPATH` or `OLDPWD` anywhere changes what `cd` and `~` mean.
    fn assignment(&mut self, node: Node, src: &str) {
        if node.kind() == "variable_assignment" && assigns_cwd_var(node, src) {
            self.poison_cwd();
        }
        let standalone = node
            .parent()
            .is_none_or(|p| !NOT_STATEMENT_PARENTS.contains(&p.kind()));
        if standalone {
            self.exact(pattern_text(node, src));
        }
    }

    /// `export HOME`, `declare -n CDPATH=…`, `unset HOME`: see [`Self::assignment`].
    fn names_cwd_var(&mut self, node: Node, src: &str) {
        let mut cursor = node.walk();
        let named = node
            .named_children(&mut cursor)
            .filter(|c| matches!(c.kind(), "variable_name" | "word"))
            .any(|c| names_cwd_var(node_text(c, src)));
        if named {
            self.poison_cwd();
        }
    }

    /// `${HOME:=/etc}` assigns too.
    fn expansion(&mut self, node: Node, src: &str) {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        let assigns = children.iter().any(|c| matches!(c.kind(), "=" | ":="));
        let cwd_var = children
            .iter()
            .any(|c| c.kind() == "variable_name" && CWD_VARS.contains(&node_text(*c, src)));
        if assigns && cwd_var {
            self.poison_cwd();
        }
    }

    /// `for HOME in …` assigns too.
    fn loop_variable(&mut self, node: Node, src: &str) {
        let var = node.child_by_field_name("variable");
        if var.is_some_and(|v| CWD_VARS.contains(&node_text(v, src))) {
            self.poison_cwd();
        }
    }

    /// From here on `cd` and `~` may lead anywhere.
    fn poison_cwd(&mut self) {
        self.home = None;
        self.set_unknown();
    }

    fn command(&mut self, node: Node, src: &str, level: usize) {
        let parts = Parts::of(node, src);
        // `HOME=/etc cd` already goes somewhere else.
        for &assignment in &parts.assignments {
            if assigns_cwd_var(assignment, src) {
                self.poison_cwd();
            }
        }
        let name = parts.name.and_then(|n| static_word(n, src)).map(|w| w.text);
        let is_cd = name
            .as_deref()
            .is_some_and(|n| CD_COMMANDS.contains(&basename(n)));
        let asked = (!is_cd || parts.redirected).then(|| self.ask(node, &parts, src, is_cd));
        if let Some(pattern) = &asked {
            // Before `run`, so that the spellings stay in pattern order when a script inside
            // adds patterns of its own.
            let own = parts.name.map(|name| {
                normal_call(
                    Call {
                        name,
                        args: &parts.args,
                    },
                    &parts.tail,
                    src,
                )
            });
            self.spell(pattern, own.into_iter().collect());
        }
        let inner = self.run(node, &parts, src, level);
        if let Some(pattern) = &asked {
            self.spell(pattern, inner);
        }
        self.env_reads(&parts.args, src);
    }

    /// Records the command's `bash` pattern and its "always" pattern; returns the pattern.
    fn ask(&mut self, node: Node, parts: &Parts, src: &str, is_cd: bool) -> String {
        let text = pattern_text(node, src);
        let mut cursor = node.walk();
        let token_nodes: Vec<Node> = node
            .named_children(&mut cursor)
            .filter(|c| {
                matches!(
                    c.kind(),
                    "command_name" | "word" | "string" | "raw_string" | "concatenation"
                )
            })
            .collect();
        let tokens: Vec<&str> = token_nodes.iter().map(|&c| node_text(c, src)).collect();
        let name = parts.name.and_then(|n| static_word(n, src)).map(|w| w.text);
        // A name only known at run time could be anything, a wrapper or interpreter runs
        // anything, and a prefix would drop leading assignments (`PAGER=… git log`) or
        // redirections: for those, "always" approves exactly this line.
        let exact = is_cd || parts.prefixed || exact_always(name.as_deref(), &token_nodes, src);
        self.patterns.push(text);
        if exact {
            self.always.push(text);
        } else {
            self.always.push(&format!("{} *", arity::prefix(&tokens)));
        }
        text.to_string()
    }

    /// Adds the other spellings of `pattern`; the entry is made even with none, to hold the
    /// pattern's place (`finish` drops the empty ones).
    fn spell(&mut self, pattern: &str, forms: Vec<String>) {
        let at = match self.spelling_at.get(pattern) {
            Some(&at) => at,
            None => {
                self.spellings
                    .push((pattern.to_string(), Ordered::default()));
                self.spelling_at
                    .insert(pattern.to_string(), self.spellings.len() - 1);
                self.spellings.len() - 1
            }
        };
        for form in forms.iter().filter(|f| *f != pattern) {
            self.spellings[at].1.push(form);
        }
    }

    /// Follows the command through any wrappers to what finally runs, checking paths and
    /// scanning scripts on the way; returns the normalised wrapped commands.
    fn run(&mut self, node: Node, parts: &Parts, src: &str, level: usize) -> Vec<String> {
        let mut forms = Vec::new();
        let Some(name) = parts.name else {
            self.path_args("", &parts.args, src);
            return forms;
        };
        let mut queue = VecDeque::from([(
            Call {
                name,
                args: &parts.args,
            },
            Ctx::default(),
        )]);
        let (mut work, budget) = (0, PEEL_WORK_PER_WORD * (parts.args.len() + 1));
        while let Some((call, ctx)) = queue.pop_front() {
            let peeled = peel(call, src);
            if let Some(p) = &peeled {
                if work > budget {
                    self.under(ctx, |s| s.path_args("", call.args, src));
                    continue;
                }
                work += p.cost;
            }
            // Every command that finally runs is spelled out; the wrappers in between only up
            // to a bound, since each spelling is as long as the rest of the line.
            if ctx.depth > 0 && (peeled.is_none() || ctx.depth <= MAX_SPELLED_WRAPPERS) {
                forms.push(normal_call(call, &parts.tail, src));
            }
            match peeled {
                Some(peeled) => queue.extend(self.wrapper(call, ctx, peeled, node, src, level)),
                None => self.final_call(call, ctx, src),
            }
        }
        forms
    }

    /// A command that runs others: checks the places its own options name, scans the
    /// scripts it runs, and returns the commands it runs, each with its context.
    fn wrapper<'n, 't>(
        &mut self,
        call: Call<'n, 't>,
        ctx: Ctx,
        peeled: Peeled<'n, 't>,
        node: Node,
        src: &str,
        level: usize,
    ) -> Vec<(Call<'n, 't>, Ctx)> {
        for (word, is_dir) in peeled.places {
            if is_dir {
                self.judge_dir(word);
            } else {
                self.judge_arg(word);
            }
        }
        if peeled.unsure {
            // Where the command starts is unclear: no spelling, but every word may be a
            // path (as for a command whose name is only known at run time).
            self.under(ctx, |s| s.path_args("", call.args, src));
            return Vec::new();
        }
        if peeled.no_run {
            return Vec::new();
        }
        if peeled.cwd_unknown {
            self.poison_cwd();
        }
        if ctx.appended && !peeled.scripts.is_empty() {
            // `xargs -I{} sh -c 'rm {}'`: the script is completed at run time.
            self.anywhere();
        }
        for script in peeled.scripts {
            self.run_script(script, level, peeled.in_shell);
        }
        if peeled.reads_stdin {
            self.stdin_script(node, src, level);
        }
        let inner_ctx = |moved: bool| Ctx {
            moved: ctx.moved || peeled.moves || moved,
            appended: ctx.appended || peeled.appends,
            depth: ctx.depth + 1,
        };
        peeled
            .calls
            .into_iter()
            .map(|(inner, moved)| (inner, inner_ctx(moved)))
            .collect()
    }

    /// A command that runs no other: check its paths if it takes paths, and note what it
    /// does to the directory.
    fn final_call(&mut self, call: Call, ctx: Ctx, src: &str) {
        let name = static_word(call.name, src).map(|w| w.text);
        match name.as_deref().map(basename) {
            Some(cd) if CD_COMMANDS.contains(&cd) => {
                self.under(ctx, |s| s.change_dir(cd, call.args, src));
            }
            Some(n) if PATH_COMMANDS.contains(&n) => {
                self.under(ctx, |s| s.path_args(n, call.args, src));
                if ctx.appended {
                    self.anywhere();
                }
            }
            Some(n) => self.side_effects(n, call.args, src),
            // A name known only at run time may well be `rm`.
            None => {
                self.under(ctx, |s| s.path_args("", call.args, src));
                if ctx.appended {
                    self.anywhere();
                }
            }
        }
    }

    /// `shopt`, `read HOME`, … change what `cd` and `~` mean.
    fn side_effects(&mut self, name: &str, args: &[Node], src: &str) {
        let assigns = ASSIGNING.contains(&name)
            && args
                .iter()
                .filter_map(|&a| static_word(a, src))
                .any(|w| names_cwd_var(&w.text));
        if assigns || CWD_UNKNOWN_AFTER.contains(&name) {
            self.poison_cwd();
        }
    }

    /// Runs `f` with the directory unknown when a wrapper moved the command elsewhere; the
    /// shell itself stays where it was.
    fn under(&mut self, ctx: Ctx, f: impl FnOnce(&mut Self)) {
        if !ctx.moved {
            return f(self);
        }
        let saved = std::mem::replace(&mut self.dirs, Dirs::Unknown);
        f(self);
        self.dirs = saved;
    }

    /// A script a command runs: scanned when its text is known and we are not nested too
    /// deep, else it could do anything (`*`), and in the current shell that includes `cd`.
    fn run_script(&mut self, script: Option<String>, level: usize, in_shell: bool) {
        let Some(script) = script else {
            return self.unknown_script(in_shell);
        };
        let script = script.trim();
        if script.is_empty() {
            return;
        }
        if self.nesting >= MAX_NESTING {
            return self.unknown_script(in_shell);
        }
        self.nesting += 1;
        // A few frames (this call chain) on top of the command's own level.
        let readable = self.script(script, level + 4);
        self.nesting -= 1;
        if !readable {
            self.patterns.push(script);
            self.always.push(script);
        }
    }

    fn unknown_script(&mut self, in_shell: bool) {
        self.anywhere();
        if in_shell {
            self.poison_cwd();
        }
    }

    /// A shell with neither `-c` nor a script file reads its script from stdin.
    fn stdin_script(&mut self, node: Node, src: &str, level: usize) {
        match stdin_of(node, src) {
            Stdin::Text(text) => self.run_script(text, level, false),
            Stdin::Unknown => self.anywhere(),
            Stdin::File | Stdin::Inherited => {}
        }
    }

    /// Checks every path argument of a path-taking command.
    fn path_args(&mut self, name: &str, args: &[Node], src: &str) {
        let plus_is_flag = basename(name) == "chmod";
        let mut dashdash = false;
        for &arg in args {
            if let Arg::Value(word) = classify(arg, src, &mut dashdash, plus_is_flag) {
                self.judge_arg(word);
            }
        }
    }

    /// `cd`, `pushd`, `popd`, `chdir`: check the target and add it to the directory set.
    fn change_dir(&mut self, name: &str, args: &[Node], src: &str) {
        if name == "popd" {
            // popd only returns to directories already in the set.
            return;
        }
        let mut dashdash = false;
        let mut targets = 0;
        for &arg in args {
            let word = static_word(arg, src);
            if !dashdash && name != "pushd" && word.as_ref().is_some_and(|w| w.text == "-") {
                // `cd -` goes to $OLDPWD, which may have been set anywhere.
                targets += 1;
                self.anywhere();
                self.set_unknown();
                continue;
            }
            if let Arg::Value(word) = classify(arg, src, &mut dashdash, name == "pushd") {
                targets += 1;
                self.enter(word);
            }
        }
        if targets == 0 && name != "pushd" {
            let home = self.home.clone().map(|h| Word {
                text: h,
                glob: None,
                tilde: false,
            });
            self.enter(home);
        }
    }

    /// One `cd` target: where it is, and that the shell may now be there.
    fn enter(&mut self, word: Option<Word>) {
        match self.judge_dir(word) {
            Some(dirs) => dirs.into_iter().for_each(|d| self.add_dir(d)),
            None => self.set_unknown(),
        }
    }

    /// Checks a directory the shell or a command enters; returns where that may be, `None`
    /// when only known at run time.
    fn judge_dir(&mut self, word: Option<Word>) -> Option<Vec<PathBuf>> {
        let Some(word) = word.and_then(|w| self.expand_tilde(w)) else {
            self.anywhere();
            return None;
        };
        if let Some(at) = word.glob {
            self.judge_glob(&word.text, at);
            return None;
        }
        let Some(places) = self.candidates(&word.text) else {
            self.anywhere();
            return None;
        };
        let mut dirs = Vec::new();
        for place in places {
            // bash's `cd` is logical (`link/..` is where you started) while the kernel is
            // physical; the shell may end up in either, so both count.
            for dir in [resolve(&place), lexical(&place)] {
                self.judge_place(&dir, true);
                dirs.push(dir);
            }
        }
        Some(dirs)
    }

    fn add_dir(&mut self, dir: PathBuf) {
        let Dirs::Known(dirs) = &mut self.dirs else {
            return;
        };
        if dirs.contains(&dir) {
            return;
        }
        if dirs.len() >= MAX_DIRS {
            return self.set_unknown();
        }
        dirs.push(dir);
        self.changes += 1;
    }

    fn set_unknown(&mut self) {
        if self.dirs != Dirs::Unknown {
            self.dirs = Dirs::Unknown;
            self.changes += 1;
        }
    }

    fn anywhere(&mut self) {
        self.external.push("*");
    }

    /// A path argument or redirect target (`None` = only known at run time).
    fn judge_arg(&mut self, word: Option<Word>) {
        let Some(word) = word.and_then(|w| self.expand_tilde(w)) else {
            return self.anywhere();
        };
        match word.glob {
            Some(at) => self.judge_glob(&word.text, at),
            None => match self.candidates(&word.text) {
                Some(places) => {
                    for place in places {
                        if !harmless_device(&lexical(&place)) {
                            self.judge_place(&resolve(&place), false);
                        }
                    }
                }
                None => self.anywhere(),
            },
        }
    }

    /// A glob matches things below its static directory prefix, unless a `..` (or a brace
    /// alternative starting a new absolute path) lets it climb out; then it could be anywhere.
    fn judge_glob(&mut self, text: &str, at: usize) {
        let cut = text[..at].rfind('/').map_or(0, |i| i + 1);
        let (prefix, rest) = text.split_at(cut);
        let climbs = rest.split(['/', '{', ',', '}']).any(|piece| {
            [".*", ".?", ".[", ".."]
                .iter()
                .any(|p| piece.starts_with(p))
        });
        let rebases = prefix.is_empty() && rest.starts_with('{') && rest.contains(['/', '~']);
        if climbs || rebases {
            return self.anywhere();
        }
        let dir = if prefix.is_empty() { "." } else { prefix };
        match self.candidates(dir) {
            Some(places) => places
                .iter()
                .for_each(|p| self.judge_place(&resolve(p), true)),
            None => self.anywhere(),
        }
    }

    /// Asks for `<dir>/*` when a resolved place is outside the worktree. A directory stands
    /// for itself; a file (or something not yet created) for the directory holding it.
    fn judge_place(&mut self, real: &Path, as_dir: bool) {
        if self.inside(real) {
            return;
        }
        let dir = if as_dir || real.is_dir() {
            real
        } else {
            real.parent().unwrap_or(real)
        };
        let dir = dir.to_string_lossy();
        let dir = dir.trim_end_matches('/');
        self.external.push(&format!("{dir}/*"));
    }

    fn inside(&self, real: &Path) -> bool {
        real.starts_with(self.cx.worktree) || real.starts_with(&self.worktree_real)
    }

    /// The absolute paths `text` may name: itself when absolute, else one per possible
    /// directory; `None` when relative and the directory is unknown.
    fn candidates(&self, text: &str) -> Option<Vec<PathBuf>> {
        if text.starts_with('/') {
            return Some(vec![PathBuf::from(text)]);
        }
        match &self.dirs {
            Dirs::Known(dirs) => Some(dirs.iter().map(|d| d.join(text)).collect()),
            Dirs::Unknown => None,
        }
    }

    /// Applies tilde expansion; `None` when it cannot be done statically (`~user`, no home,
    /// `HOME` reassigned).
    fn expand_tilde(&self, word: Word) -> Option<Word> {
        if !word.tilde {
            return Some(word);
        }
        let end = word.text.find('/').unwrap_or(word.text.len());
        if end != 1 {
            return None;
        }
        let home = self.home.as_deref()?;
        Some(Word {
            text: wildcard::expand_home(&word.text, home),
            // The `~` (one byte) became `home`.
            glob: word.glob.map(|g| (g + home.len()).saturating_sub(1)),
            tilde: false,
        })
    }

    /// Every argument naming an env file is a read, whatever the command: `grep`, `source`
    /// and `docker --env-file=` read secrets just as well as `cat`.
    fn env_reads(&mut self, args: &[Node], src: &str) {
        let mut dashdash = false;
        for &arg in args {
            match classify(arg, src, &mut dashdash, false) {
                Arg::Value(Some(word)) => self.env_read(word),
                // `$'.env'` is as static as `'.env'`.
                Arg::Value(None) => {
                    if let Some(word) = decoded_word(arg, src) {
                        self.env_read(word);
                    }
                }
                Arg::Flag => {}
            }
        }
    }

    /// A static name that is an env file, or a glob that could match one (`.env*`, `*`,
    /// `.e{n,}v`): a glob is reported as written, resolved like a path, since the files it
    /// matches are only known when it runs. Arguments known only at run time (`cat "$f"`)
    /// are not reads: any command could be reading anything then, and reporting `*` for
    /// every `$f` would drown the rule in noise; the `external` check already covers where.
    fn env_read(&mut self, word: Word) {
        let named = match word.glob {
            None => is_env_file(&word.text),
            Some(at) => glob_may_name_env_file(&word.text, at),
        };
        if !named {
            return;
        }
        let Some(word) = self.expand_tilde(word) else {
            return;
        };
        let Some(places) = self.candidates(&word.text) else {
            // Directory unknown: the name is what the `read` rules match on.
            return self.reads.push(&word.text);
        };
        for place in places {
            let real = resolve(&place);
            let shown = self.display(&real);
            self.reads.push(&shown);
        }
    }

    /// Worktree-relative with `/` separators when inside, absolute when outside.
    fn display(&self, real: &Path) -> String {
        let relative = real
            .strip_prefix(self.cx.worktree)
            .or_else(|_| real.strip_prefix(&self.worktree_real));
        match relative {
            Ok(rel) => rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
            Err(_) => real.to_string_lossy().into_owned(),
        }
    }

    /// `> f`, `>> f`, `< f`, `&> f`, `2> f`…: the target is a path like any argument;
    /// `>&2`, `2>&1` and `>&-` only shuffle file descriptors.
    fn redirect(&mut self, node: Node, src: &str) {
        let mut cursor = node.walk();
        let mut op = "";
        for child in node.children(&mut cursor) {
            if !child.is_named() {
                op = child.kind();
                continue;
            }
            if child.kind() == "file_descriptor" {
                continue;
            }
            let duplicates = matches!(op, ">&" | "<&");
            if duplicates && (child.kind() == "number" || node_text(child, src) == "-") {
                continue;
            }
            let word = static_word(child, src);
            self.judge_arg(word.clone());
            if op == "<"
                && let Some(word) = word
            {
                self.env_read(word);
            }
        }
    }
}

impl<'t> Parts<'t> {
    fn of(node: Node<'t>, src: &str) -> Self {
        let mut parts = Parts {
            name: None,
            args: Vec::new(),
            assignments: Vec::new(),
            prefixed: false,
            redirected: false,
            tail: Vec::new(),
        };
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            match child.kind() {
                "command_name" => parts.name = Some(child),
                "variable_assignment" => {
                    parts.prefixed |= parts.name.is_none();
                    parts.assignments.push(child);
                }
                kind if REDIRECT_KINDS.contains(&kind) => {
                    parts.redirected = true;
                    if parts.name.is_none() {
                        parts.prefixed = true;
                    } else {
                        parts.redirect_after(child, src);
                    }
                }
                "comment" => {}
                _ => parts.args.push(child),
            }
        }
        // Redirections written after the command belong to it too (`ls > f 2>&1`).
        if let Some(owner) = redirect_owner(node) {
            let mut cursor = owner.walk();
            for child in owner.named_children(&mut cursor) {
                if REDIRECT_KINDS.contains(&child.kind()) {
                    parts.redirected = true;
                    parts.redirect_after(child, src);
                }
            }
        }
        parts.args.sort_by_key(Node::start_byte);
        parts
    }

    fn redirect_after(&mut self, redirect: Node<'t>, src: &str) {
        self.tail.push(normal_redirect(redirect, src));
        if redirect.kind() == "file_redirect" {
            self.args
                .extend(redirect_targets(redirect).into_iter().skip(1));
        }
    }
}

/// The words after a file redirection's operator: the target, then any words tree-sitter
/// wrongly attached to it.
fn redirect_targets(node: Node) -> Vec<Node> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor)
        .filter(|c| c.kind() != "file_descriptor")
        .collect()
}

/// What a command that runs others runs (`None` when it runs no other command).
fn peel<'n, 't>(call: Call<'n, 't>, src: &str) -> Option<Peeled<'n, 't>> {
    let name = static_word(call.name, src)?.text;
    let base = basename(&name);
    let peeled = match base {
        _ if SHELLS.contains(&base) => peel_shell(call.args, src),
        "eval" => Peeled {
            scripts: vec![eval_script(call.args, src)],
            in_shell: true,
            ..Peeled::default()
        },
        "trap" => peel_trap(call.args, src),
        "source" | "." => peel_source(call.args, src),
        "find" => Peeled {
            cost: call.args.len(),
            ..peel_find(call.args, src)
        },
        _ => peel_runner(runner(base)?, call.args, src),
    };
    Some(Peeled {
        cost: peeled.cost.max(1),
        ..peeled
    })
}

/// Reads a wrapper's options and operands up to the command it runs (see [`Runner`]).
fn peel_runner<'n, 't>(runner: &Runner, args: &'n [Node<'t>], src: &str) -> Peeled<'n, 't> {
    let mut out = Peeled {
        appends: runner.rest == Rest::Appended,
        unsure: runner.rest == Rest::Unsure,
        ..Peeled::default()
    };
    if out.unsure {
        return out;
    }
    let mut operands = runner.operands.iter();
    let mut options = true;
    let mut i = 0;
    while i < args.len() {
        let word = static_word(args[i], src);
        if options {
            let Some(word) = &word else {
                // `sudo $OPTS rm`: the value may be options, their values or the command.
                out.unsure = true;
                return out;
            };
            if word.text == "--" {
                options = false;
                i += 1;
                continue;
            }
            if let Some(used) = read_option(runner, word, args.get(i + 1), src, &mut out) {
                i += 1 + used;
                continue;
            }
            if runner.assignments && is_assignment(&word.text) {
                out.cwd_unknown |= names_cwd_var(&word.text);
                i += 1;
                continue;
            }
        }
        if let Some(&role) = operands.next() {
            out.apply(role, word);
            i += 1;
            continue;
        }
        match runner.rest {
            Rest::Command | Rest::Appended => {
                let call = Call {
                    name: args[i],
                    args: &args[i + 1..],
                };
                out.calls.push((call, false));
                return out;
            }
            Rest::Script => {
                out.scripts.push(eval_script(&args[i..], src));
                return out;
            }
            Rest::Operands(role) => out.apply(role, word),
            Rest::Unsure => {}
        }
        i += 1;
    }
    out
}

/// Reads one option word of a runner, applying the role of each option in it; returns how
/// many following words it consumed as a value, or `None` when the word is not an option.
fn read_option(
    runner: &Runner,
    word: &Word,
    next: Option<&Node>,
    src: &str,
    out: &mut Peeled,
) -> Option<usize> {
    let text = word.text.as_str();
    let next_value = || next.map(|&n| static_word(n, src));
    if text == "-" {
        // `env -` is `env -i`.
        return Some(0);
    }
    if let Some(long) = text.strip_prefix("--").filter(|l| !l.is_empty()) {
        let (key, inline) = match long.find('=') {
            Some(eq) => (&text[..eq + 2], Some(word.tail(eq + 3))),
            None => (text, None),
        };
        let role = runner.role(key);
        if !runner.values.contains(&key) {
            out.apply(role, None);
            return Some(0);
        }
        return Some(match inline {
            Some(value) => {
                out.apply(role, Some(value));
                0
            }
            None => next_value().map_or(0, |value| {
                out.apply(role, value);
                1
            }),
        });
    }
    if !text.starts_with('-') || text.len() < 2 {
        return None;
    }
    for (at, c) in text.char_indices().skip(1) {
        let key = format!("-{c}");
        let role = runner.role(&key);
        if !runner.values.contains(&key.as_str()) {
            if role != Role::Plain {
                out.apply(role, None);
            }
            continue;
        }
        let rest = at + c.len_utf8();
        if rest < text.len() {
            out.apply(role, Some(word.tail(rest)));
            return Some(0);
        }
        return Some(next_value().map_or(0, |value| {
            out.apply(role, value);
            1
        }));
    }
    Some(0)
}

/// `NAME=VALUE`, as `env` and `sudo` take before the command.
fn is_assignment(text: &str) -> bool {
    text.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// A shell's arguments: `-c STRING` (the first operand after the options, `--` skipped), a
/// script file, or, with neither (or with `-s`), a script on stdin.
fn peel_shell<'n, 't>(args: &'n [Node<'t>], src: &str) -> Peeled<'n, 't> {
    let mut out = Peeled::default();
    let (mut has_c, mut stdin) = (false, false);
    let mut i = 0;
    while i < args.len() {
        let Some(word) = static_word(args[i], src) else {
            // An option or the script itself, we cannot tell: could be anything.
            out.scripts.push(None);
            return out;
        };
        let text = word.text.as_str();
        if text == "--" || text == "-" {
            i += 1;
            break;
        }
        if text.starts_with("--") {
            if matches!(text, "--rcfile" | "--init-file") {
                out.places
                    .push((args.get(i + 1).and_then(|&n| static_word(n, src)), false));
                i += 1;
            }
            i += 1;
            continue;
        }
        let Some(cluster) = text.strip_prefix(['-', '+']).filter(|c| !c.is_empty()) else {
            break;
        };
        let dash = text.starts_with('-');
        has_c |= dash && cluster.contains('c');
        stdin |= dash && cluster.contains('s');
        // `-o NAME` / `-O NAME` (and their `+` forms) take the next word.
        i += 1 + cluster.chars().filter(|c| matches!(c, 'o' | 'O')).count();
    }
    match args.get(i) {
        Some(&operand) if has_c => out.scripts.push(static_word(operand, src).map(|w| w.text)),
        None if has_c => {}
        Some(&file) if !stdin => out.places.push((static_word(file, src), false)),
        _ => out.reads_stdin = true,
    }
    out
}

/// `trap [--] ACTION SIGNAL…`: the action is a script run in this shell; with one operand,
/// or `-` as the action, it resets the signal instead.
fn peel_trap<'n, 't>(args: &'n [Node<'t>], src: &str) -> Peeled<'n, 't> {
    let mut out = Peeled {
        in_shell: true,
        ..Peeled::default()
    };
    let mut dashdash = false;
    let operands: Vec<Node> = args
        .iter()
        .copied()
        .filter(|&a| matches!(classify(a, src, &mut dashdash, false), Arg::Value(_)))
        .collect();
    if operands.len() >= 2 {
        let action = static_word(operands[0], src).map(|w| w.text);
        if action.as_deref() != Some("-") {
            out.scripts.push(action);
        }
    }
    out
}

/// `source FILE` / `. FILE` runs a script in this shell: the file is a path it reads, and
/// after it `cd` and `~` may mean anything. `/dev/stdin` reads the script from stdin; a file
/// only known at run time (`source <(curl …)`) is an unknown script.
fn peel_source<'n, 't>(args: &'n [Node<'t>], src: &str) -> Peeled<'n, 't> {
    let mut out = Peeled {
        in_shell: true,
        cwd_unknown: true,
        ..Peeled::default()
    };
    let mut dashdash = false;
    let file = args
        .iter()
        .find(|&&a| matches!(classify(a, src, &mut dashdash, false), Arg::Value(_)));
    match file.map(|&f| static_word(f, src)) {
        None => {}
        Some(None) => out.scripts.push(None),
        Some(Some(w)) if matches!(w.text.as_str(), "/dev/stdin" | "/dev/fd/0") => {
            out.reads_stdin = true;
        }
        Some(Some(w)) => out.places.push((Some(w), false)),
    }
    out
}

/// `find`: each `-exec`/`-execdir`/`-ok`/`-okdir … ;` (or `+`) runs a command. When it runs
/// commands or deletes, its starting points are places it acts on, since `{}` stands for
/// whatever it finds there; `-fprint` and friends write a file.
fn peel_find<'n, 't>(args: &'n [Node<'t>], src: &str) -> Peeled<'n, 't> {
    let mut out = Peeled::default();
    let texts: Vec<Option<String>> = args
        .iter()
        .map(|&a| static_word(a, src).map(|w| w.text))
        .collect();
    let text = |i: usize| texts.get(i).and_then(|t| t.as_deref());
    let mut acts = false;
    let mut i = 0;
    while i < args.len() {
        match text(i) {
            Some(exec @ ("-exec" | "-execdir" | "-ok" | "-okdir")) => {
                acts = true;
                let start = i + 1;
                let end = (start..args.len())
                    .find(|&j| matches!(text(j), Some(";" | "+")))
                    .unwrap_or(args.len());
                if start < end {
                    let call = Call {
                        name: args[start],
                        args: &args[start + 1..end],
                    };
                    out.calls.push((call, exec.ends_with("dir")));
                }
                i = end;
            }
            Some("-delete") => acts = true,
            Some("-fprint" | "-fprint0" | "-fprintf" | "-fls" | "-files0-from") => {
                out.places
                    .push((args.get(i + 1).and_then(|&n| static_word(n, src)), false));
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    if acts {
        for start in find_starts(args, src) {
            out.places.push((start, true));
        }
    }
    out
}

/// `find`'s starting points: after its leading options (`-L`, `-D opts`, `-O2`), the words
/// before the first expression word.
fn find_starts(args: &[Node], src: &str) -> Vec<Option<Word>> {
    let mut starts = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let word = static_word(args[i], src);
        match word.as_ref().map(|w| w.text.as_str()) {
            Some("-H" | "-L" | "-P") => {}
            Some("-D") => i += 1,
            Some(t) if t.starts_with("-O") => {}
            Some(t) if t.starts_with(['-', '(', '!', ')', ',']) => break,
            _ => starts.push(word),
        }
        i += 1;
    }
    if starts.is_empty() {
        starts.push(Some(Word {
            text: ".".into(),
            glob: None,
            tilde: false,
        }));
    }
    starts
}

/// `eval` joins its arguments with spaces and runs the result (so does `watch`).
fn eval_script(args: &[Node], src: &str) -> Option<String> {
    let words: Option<Vec<String>> = args
        .iter()
        .map(|&a| static_word(a, src).map(|w| w.text))
        .collect();
    Some(words?.join(" "))
}

/// Where `node`'s stdin comes from: its own input redirection, else the nearest enclosing
/// statement's, else a pipe if it (or a statement around it) is not first in a pipeline.
fn stdin_of(node: Node, src: &str) -> Stdin {
    let own = input_redirect(node, src);
    let owner = || redirect_owner(node).and_then(|o| input_redirect(o, src));
    if let Some(stdin) = own.or_else(owner) {
        return stdin;
    }
    let mut child = node;
    while let Some(parent) = child.parent() {
        match parent.kind() {
            // Only when its redirections apply to the part holding `node`.
            "redirected_statement" => {
                let holds = redirect_target(parent).is_some_and(|t| {
                    t.start_byte() <= node.start_byte() && node.end_byte() <= t.end_byte()
                });
                if holds && let Some(stdin) = input_redirect(parent, src) {
                    return stdin;
                }
            }
            "pipeline" => {
                // `cat <<EOF | sh`: the pipeline hangs off the here-document.
                let after_heredoc = parent
                    .parent()
                    .is_some_and(|g| g.kind() == "heredoc_redirect");
                let first = parent.named_child(0).map(|c| c.id());
                if after_heredoc || first != Some(child.id()) {
                    return Stdin::Unknown;
                }
            }
            _ => {}
        }
        child = parent;
    }
    Stdin::Inherited
}

/// The last redirection of fd 0 directly on `node`, if any.
fn input_redirect(node: Node, src: &str) -> Option<Stdin> {
    let mut cursor = node.walk();
    let mut found = None;
    for child in node.named_children(&mut cursor) {
        let mut inner = child.walk();
        let fd = child
            .named_children(&mut inner)
            .find(|c| c.kind() == "file_descriptor")
            .map(|c| node_text(c, src));
        if fd.is_some_and(|fd| fd != "0") {
            continue;
        }
        let stdin = match child.kind() {
            "herestring_redirect" => {
                let word = child.named_children(&mut inner).last();
                Stdin::Text(word.and_then(|w| static_word(w, src)).map(|w| w.text))
            }
            "heredoc_redirect" => Stdin::Text(heredoc_text(child, src)),
            "file_redirect" => match child.child(u32::from(fd.is_some())).map(|c| c.kind()) {
                Some("<" | "<>" | "<&-") => Stdin::File,
                Some("<&") => Stdin::Unknown,
                _ => continue,
            },
            _ => continue,
        };
        found = Some(stdin);
    }
    found
}

/// A here-document's text as the command reads it; `None` when it expands parameters or
/// substitutions (delimiter unquoted and the body has `$`, a backquote or a backslash).
fn heredoc_text(node: Node, src: &str) -> Option<String> {
    let mut cursor = node.walk();
    let children: Vec<Node> = node.children(&mut cursor).collect();
    let quoted = children
        .iter()
        .find(|c| c.kind() == "heredoc_start")
        .is_some_and(|s| node_text(*s, src).contains(['\'', '"', '\\']));
    let strip_tabs = children.iter().any(|c| c.kind() == "<<-");
    let body = children
        .iter()
        .find(|c| c.kind() == "heredoc_body")
        .map_or("", |b| node_text(*b, src));
    if !quoted && body.contains(['$', '`', '\\']) {
        return None;
    }
    if !strip_tabs {
        return Some(body.to_string());
    }
    let lines: Vec<&str> = body.lines().map(|l| l.trim_start_matches('\t')).collect();
    Some(lines.join("\n"))
}

/// Decides whether an argument is an option or a value, tracking `--` (after which nothing
/// is an option). `--opt=VALUE` yields VALUE, since that is usually where a path hides.
fn classify(node: Node, src: &str, dashdash: &mut bool, plus_is_flag: bool) -> Arg {
    let word = static_word(node, src);
    if *dashdash {
        return Arg::Value(word);
    }
    let raw = node_text(node, src);
    let shown = word.as_ref().map_or(raw, |w| w.text.as_str());
    if shown == "--" {
        *dashdash = true;
        return Arg::Flag;
    }
    if shown.starts_with("--") {
        return match shown.find('=') {
            Some(eq) => Arg::Value(word.map(|w| w.tail(eq + 1))),
            None => Arg::Flag,
        };
    }
    if shown.starts_with('-') || (plus_is_flag && shown.starts_with('+')) {
        return Arg::Flag;
    }
    Arg::Value(word)
}

/// The static value of a word node, or `None` when it depends on run time.
fn static_word(node: Node, src: &str) -> Option<Word> {
    let mut dynamic = false;
    each_node(node, |n, _| dynamic |= DYNAMIC_KINDS.contains(&n.kind()));
    if dynamic {
        return None;
    }
    unquote(node_text(node, src))
}

/// A word whose only run-time parts are `$'…'` strings, decoded (`$'.en\x76'` → `.env`);
/// glob characters in it are taken literally.
fn decoded_word(node: Node, src: &str) -> Option<Word> {
    let mut other = false;
    each_node(node, |n, _| {
        other |= n.kind() != "ansi_c_string" && DYNAMIC_KINDS.contains(&n.kind());
    });
    (!other).then(|| Word {
        text: normal_word(node, src),
        glob: None,
        tilde: false,
    })
}

/// Removes shell quoting from one word. `None` if any unquoted or double-quoted `$` or
/// backtick remains: its value is only known at run time.
fn unquote(raw: &str) -> Option<Word> {
    let mut word = Word {
        text: String::new(),
        glob: None,
        tilde: raw.starts_with('~'),
    };
    let mut chars = raw.chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some('\''), '\'') => quote = None,
            (Some('\''), _) => word.text.push(c),
            (_, '$' | '`') => return None,
            (Some(_), '"') => quote = None,
            (Some(_), '\\') => match chars.next() {
                Some('\n') => {}
                Some(n @ ('$' | '`' | '"' | '\\')) => word.text.push(n),
                Some(n) => word.text.extend(['\\', n]),
                None => word.text.push('\\'),
            },
            (Some(_), _) => word.text.push(c),
            (None, '\\') => match chars.next() {
                Some('\n') | None => {}
                Some(n) => word.text.push(n),
            },
            (None, '\'' | '"') => quote = Some(c),
            (None, '*' | '?' | '[' | '{') => {
                word.glob.get_or_insert(word.text.len());
                word.text.push(c);
            }
            (None, _) => word.text.push(c),
        }
    }
    Some(word)
}

/// A word as bash passes it on, as far as the text tells: quotes and backslashes removed as
/// quote removal does (`-e''xec` → `-exec`, `\rm` → `rm`), `$'…'` decoded, and expansions
/// and substitutions kept as written, since their value is only known at run time.
fn normal_word(node: Node, src: &str) -> String {
    let text = node_text(node, src);
    let base = node.start_byte();
    // Byte ranges (within `text`) kept verbatim or decoded, outermost only.
    let mut spans: Vec<(usize, usize, bool)> = Vec::new();
    each_node(node, |n, _| {
        let ansi = n.kind() == "ansi_c_string";
        if !ansi && !VERBATIM_KINDS.contains(&n.kind()) {
            return;
        }
        let (start, end) = (n.start_byte() - base, n.end_byte() - base);
        if spans
            .last()
            .is_none_or(|&(_, last_end, _)| start >= last_end)
        {
            spans.push((start, end, ansi));
        }
    });
    let mut out = String::new();
    let mut quote: Option<char> = None;
    let mut spans = spans.into_iter().peekable();
    let mut i = 0;
    while i < text.len() {
        if let Some(&(start, end, ansi)) = spans.peek()
            && i >= start
        {
            spans.next();
            let piece = text.get(start..end).unwrap_or("");
            out.push_str(&if ansi { ansi_c(piece) } else { piece.into() });
            i = i.max(end);
            continue;
        }
        let Some(c) = text.get(i..).and_then(|t| t.chars().next()) else {
            break;
        };
        i += c.len_utf8();
        let next = text.get(i..).and_then(|t| t.chars().next());
        match (quote, c) {
            (Some('\''), '\'') | (Some('"'), '"') => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            (None, '\\') => {
                if let Some(n) = next {
                    i += n.len_utf8();
                    if n != '\n' {
                        out.push(n);
                    }
                }
            }
            (Some('"'), '\\') if matches!(next, Some('$' | '`' | '"' | '\\' | '\n')) => {
                let n = next.unwrap_or_default();
                i += n.len_utf8();
                if n != '\n' {
                    out.push(n);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Decodes a `$'…'` string as bash does.
fn ansi_c(raw: &str) -> String {
    let inner = raw
        .strip_prefix("$'")
        .and_then(|r| r.strip_suffix('\''))
        .unwrap_or(raw);
    let mut out = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let simple = match e {
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'e' | 'E' => Some('\x1b'),
            'f' => Some('\x0c'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\x0b'),
            '\\' | '\'' | '"' | '?' => Some(e),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            continue;
        }
        let code = match e {
            'x' => digits(&mut chars, 16, 2, 0),
            'u' => digits(&mut chars, 16, 4, 0),
            'U' => digits(&mut chars, 16, 8, 0),
            '0'..='7' => digits(&mut chars, 8, 2, e.to_digit(8).unwrap_or(0)),
            'c' => chars.next().map(|n| u32::from(n) & 0x1f),
            _ => None,
        };
        match code {
            Some(code) => out.extend(char::from_u32(code)),
            None => out.extend(['\\', e]),
        }
    }
    out
}

/// Reads up to `max` more digits of `radix` after `first` (for octal, the escape's own first
/// digit); `None` when a hex escape has no digits.
fn digits(
    chars: &mut std::iter::Peekable<std::str::Chars>,
    radix: u32,
    max: usize,
    first: u32,
) -> Option<u32> {
    let mut value = first;
    let mut count = 0;
    while count < max {
        let Some(d) = chars.peek().and_then(|c| c.to_digit(radix)) else {
            break;
        };
        chars.next();
        value = value.wrapping_mul(radix).wrapping_add(d);
        count += 1;
    }
    (radix == 8 || count > 0).then_some(value)
}

/// A redirection as deny rules see it: `[fd]op target` with the target normalised and one
/// space after the operator (`2>/dev/null` → `2> /dev/null`); descriptor duplications stay
/// joined (`2>&1`), here-documents stay as written.
fn normal_redirect(node: Node, src: &str) -> String {
    if node.kind() == "heredoc_redirect" {
        return node_text(node, src).trim().to_string();
    }
    let mut cursor = node.walk();
    let mut head = String::new();
    let mut target = None;
    for child in node.children(&mut cursor) {
        match child.kind() {
            "file_descriptor" => head.push_str(node_text(child, src)),
            _ if !child.is_named() => head.push_str(child.kind()),
            _ => {
                target = Some(child);
                break;
            }
        }
    }
    match target {
        None => head,
        Some(t) if matches!(head.trim_start_matches(char::is_numeric), ">&" | "<&") => {
            format!("{head}{}", normal_word(t, src))
        }
        Some(t) => format!("{head} {}", normal_word(t, src)),
    }
}

/// A command as deny rules see it: the name's directory dropped (`/bin/rm` → `rm`) when the
/// name is static, every word normalised, then the redirections after it.
fn normal_call(call: Call, tail: &[String], src: &str) -> String {
    let name = normal_word(call.name, src);
    let name = if static_word(call.name, src).is_some() {
        basename(&name).to_string()
    } else {
        name
    };
    let words = std::iter::once(name)
        .chain(call.args.iter().map(|&a| normal_word(a, src)))
        .chain(tail.iter().cloned())
        .filter(|w| !w.is_empty());
    words.collect::<Vec<_>>().join(" ")
}

/// Whether "always" must remember the exact text: a name known only at run time, a wrapper,
/// an interpreter, or a code-running option (`git -c`, `deno eval`), however quoted.
fn exact_always(name: Option<&str>, tokens: &[Node], src: &str) -> bool {
    let Some(name) = name else {
        return true;
    };
    if tokens.is_empty() {
        return true;
    }
    let base = basename(name);
    if WRAPPERS.contains(&base) || INTERPRETERS.contains(&without_version(base)) {
        return true;
    }
    let Some((_, flags)) = CODE_FLAGS.iter().find(|(command, _)| *command == base) else {
        return false;
    };
    tokens[1..].iter().any(|&t| {
        let word = normal_word(t, src);
        flags
            .iter()
            .any(|f| word == *f || word.strip_prefix(f).is_some_and(|r| r.starts_with('=')))
    })
}

/// `python3.12` → `python`, `lua5.4` → `lua`.
fn without_version(name: &str) -> &str {
    name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.')
}

/// Whether an assignment node assigns `HOME`, `CDPATH` or `OLDPWD` (`HOME[0]=` included).
fn assigns_cwd_var(node: Node, src: &str) -> bool {
    let Some(mut name) = node.child_by_field_name("name") else {
        return false;
    };
    if name.kind() == "subscript"
        && let Some(inner) = name.child_by_field_name("name")
    {
        name = inner;
    }
    CWD_VARS.contains(&node_text(name, src))
}

/// Whether a builtin's argument names `HOME`, `CDPATH` or `OLDPWD` as the variable it
/// assigns (`HOME`, `HOME=x`, `HOME+=x`, `HOME[0]=x`).
fn names_cwd_var(text: &str) -> bool {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    let (name, rest) = text.split_at(end);
    CWD_VARS.contains(&name) && (rest.is_empty() || rest.starts_with(['=', '+', '[']))
}

/// `(( … ))` as a statement, as opposed to a `{ …; }` group.
fn is_arithmetic(node: Node) -> bool {
    node.child(0).is_some_and(|c| c.kind() == "((")
}

/// The text the user approves: the statement, with its redirections when it has them.
fn pattern_text<'s>(node: Node, src: &'s str) -> &'s str {
    let end = redirect_owner(node).map_or(node.end_byte(), |owner| owner.end_byte());
    src.get(node.start_byte()..end).unwrap_or("").trim()
}

/// The statement a `redirected_statement`'s redirections apply to. tree-sitter-bash hangs
/// redirections written after a list or pipeline on the whole of it (`a && b > f`,
/// `a | b 2>&1`), but bash applies them to its last element only.
fn redirect_target(statement: Node) -> Option<Node> {
    let mut target = statement.child_by_field_name("body")?;
    while matches!(target.kind(), "list" | "pipeline") {
        target = last_statement(target)?;
    }
    Some(target)
}

/// The `redirected_statement` whose redirections apply to `node`, if any (see
/// [`redirect_target`]).
fn redirect_owner(node: Node) -> Option<Node> {
    let mut child = node;
    loop {
        let parent = child.parent()?;
        match parent.kind() {
            "list" | "pipeline" if last_statement(parent).map(|n| n.id()) == Some(child.id()) => {
                child = parent;
            }
            "redirected_statement"
                if parent.child_by_field_name("body").map(|b| b.id()) == Some(child.id()) =>
            {
                return Some(parent);
            }
            _ => return None,
        }
    }
}

fn last_statement(node: Node) -> Option<Node> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor)
        .filter(|c| c.kind() != "comment")
        .last()
}

fn node_text<'s>(node: Node, src: &'s str) -> &'s str {
    src.get(node.byte_range()).unwrap_or("")
}

fn basename(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// `.env`, `.env.local`, `.env.example`, `prod.env`, but not `.envrc` or `environment.ts`.
fn is_env_file(path: &str) -> bool {
    let name = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    name.starts_with(".env.") || name.ends_with(".env")
}

/// Whether a glob (its first unquoted glob or brace character at byte `at`) could match an
/// env file name in its last component: `.env` or `<x>.env` (the name ends in `.env`), or
/// `.env.<x>`. Bash globs never match a leading `.` with a wildcard, so `*.rs` and `*` cannot
/// match `.env.rs`, while `*` can match `prod.env`. Brace alternatives are expanded first
/// (`.e{n,}v` → `.env`, `.ev`); quoted glob characters after `at` are treated as wildcards,
/// which can only say "could" more often.
fn glob_may_name_env_file(text: &str, at: usize) -> bool {
    if text.len() > MAX_GLOB_LEN {
        return true;
    }
    let Some(alternatives) = brace_alternatives(text, at) else {
        return true;
    };
    alternatives.iter().any(|alt| {
        let name = alt.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        let tokens = glob_tokens(name);
        if tokens.is_empty() {
            return false;
        }
        let reversed: Vec<Glob> = tokens.iter().rev().cloned().collect();
        let ends_env = glob_may_start_with(&reversed, "vne.");
        // Only a literal `.` (or a bracket holding one) matches a leading dot.
        let dot_first = match &tokens[0] {
            Glob::Char(c) => *c == '.',
            class @ Glob::Class(..) => class.matches('.'),
            Glob::One | Glob::Star => false,
        };
        ends_env || (dot_first && glob_may_start_with(&tokens, ".env."))
    })
}

/// The words a brace expression expands to, braces before byte `from` being quoted;
/// `{a..z}` sequences become `*`. `None` when there would be too many to check.
fn brace_alternatives(text: &str, from: usize) -> Option<Vec<String>> {
    let mut pending = vec![(text.to_string(), from)];
    let mut done = Vec::new();
    let mut steps = 0;
    while let Some((word, from)) = pending.pop() {
        steps += 1;
        if steps > MAX_BRACE_ALTERNATIVES * 4 || done.len() + pending.len() > MAX_BRACE_ALTERNATIVES
        {
            return None;
        }
        match expand_first_brace(&word, from) {
            Some(expanded) => pending.extend(expanded),
            None => done.push(word),
        }
    }
    Some(done)
}

/// Expands the first brace expression at or after `from`: the words it becomes, each with
/// the offset to continue from. `None` when there is none.
fn expand_first_brace(word: &str, from: usize) -> Option<Vec<(String, usize)>> {
    let bytes = word.as_bytes();
    let mut open = from;
    while open < bytes.len() {
        if bytes[open] == b'{'
            && let Some(expanded) = expand_brace_at(word, open)
        {
            return Some(expanded);
        }
        open += 1;
    }
    None
}

/// Expands the brace expression opening at byte `open`, if it is one (`{a,b}`, `{1..3}`).
fn expand_brace_at(word: &str, open: usize) -> Option<Vec<(String, usize)>> {
    let bytes = word.as_bytes();
    let mut depth = 0usize;
    let mut commas = Vec::new();
    let mut close = None;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            b',' if depth == 1 => commas.push(i),
            _ => {}
        }
    }
    let close = close?;
    let (head, tail) = (&word[..open], &word[close + 1..]);
    let body = &word[open + 1..close];
    if commas.is_empty() {
        // `{x..y}` is a sequence; what it yields does not matter here, any text will do.
        return body
            .contains("..")
            .then(|| vec![(format!("{head}*{tail}"), open + 1)]);
    }
    let mut cuts = vec![open];
    cuts.extend(commas);
    cuts.push(close);
    let expanded = cuts
        .windows(2)
        .map(|w| {
            let piece = &word[w[0] + 1..w[1]];
            (format!("{head}{piece}{tail}"), open)
        })
        .collect();
    Some(expanded)
}

/// One element of a bash glob.
#[derive(Clone, Debug)]
enum Glob {
    Char(char),
    /// `?`, a bracket expression we do not model (`[[:alpha:]]`), or an extglob.
    One,
    Star,
    /// `[…]`: ranges, negated with `!` or `^`.
    Class(Vec<(char, char)>, bool),
}

impl Glob {
    fn matches(&self, c: char) -> bool {
        match self {
            Glob::Char(x) => *x == c,
            Glob::One | Glob::Star => true,
            Glob::Class(ranges, negated) => {
                ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
            }
        }
    }
}

fn glob_tokens(name: &str) -> Vec<Glob> {
    let chars: Vec<char> = name.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let token = match chars[i] {
            '*' => Glob::Star,
            '?' => Glob::One,
            // Extended globs (`@(…)`, `!(…)`): anything from here on.
            '(' | '|' | ')' => Glob::Star,
            '[' => match bracket(&chars, i) {
                Some((token, end)) => {
                    i = end;
                    token
                }
                None => Glob::Char('['),
            },
            c => Glob::Char(c),
        };
        tokens.push(token);
        i += 1;
    }
    tokens
}

/// The bracket expression starting at `chars[open]` (`[`), and the index of its `]`.
fn bracket(chars: &[char], open: usize) -> Option<(Glob, usize)> {
    let mut i = open + 1;
    let negated = matches!(chars.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let first = i;
    let mut ranges = Vec::new();
    let mut unmodelled = false;
    while i < chars.len() && (chars[i] != ']' || i == first) {
        if chars[i] == '[' && matches!(chars.get(i + 1), Some(':' | '=' | '.')) {
            unmodelled = true;
        }
        if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|&c| c != ']') {
            ranges.push((chars[i], chars[i + 2]));
            i += 3;
        } else {
            ranges.push((chars[i], chars[i]));
            i += 1;
        }
    }
    if i >= chars.len() {
        return None;
    }
    let token = if unmodelled {
        Glob::One
    } else {
        Glob::Class(ranges, negated)
    };
    Some((token, i))
}

/// Whether the glob matches some string that starts with `prefix`: the prefix is run through
/// the glob as a set of reachable positions; whatever remains can always match something.
fn glob_may_start_with(tokens: &[Glob], prefix: &str) -> bool {
    let close = |states: &mut Vec<bool>| {
        for k in 0..tokens.len() {
            if states[k] && matches!(tokens[k], Glob::Star) {
                states[k + 1] = true;
            }
        }
    };
    let mut states = vec![false; tokens.len() + 1];
    states[0] = true;
    close(&mut states);
    for c in prefix.chars() {
        let mut next = vec![false; tokens.len() + 1];
        for k in 0..tokens.len() {
            if !states[k] {
                continue;
            }
            match tokens[k] {
                Glob::Star => next[k] = true,
                ref t if t.matches(c) => next[k + 1] = true,
                _ => {}
            }
        }
        close(&mut next);
        if !next.contains(&true) {
            return false;
        }
        states = next;
    }
    true
}

fn harmless_device(path: &Path) -> bool {
    let path = path.to_string_lossy();
    HARMLESS_DEVICES.contains(&path.as_ref()) || path.starts_with("/dev/fd/")
}

/// Pre-order visit of a subtree without recursion (trees can be deep); `visit` also gets
/// the depth below `node`.
fn each_node<'t>(node: Node<'t>, mut visit: impl FnMut(Node<'t>, usize)) {
    let mut cursor = node.walk();
    let mut depth = 0usize;
    loop {
        visit(cursor.node(), depth);
        if cursor.goto_first_child() {
            depth += 1;
            continue;
        }
        loop {
            if depth == 0 {
                return;
            }
            if cursor.goto_next_sibling() {
                break;
            }
            cursor.goto_parent();
            depth -= 1;
        }
    }
}

fn tree_depth(root: Node) -> usize {
    let mut deepest = 0;
    each_node(root, |_, depth| deepest = deepest.max(depth));
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worktree and home that do not exist, so resolution below them is lexical. Paths
    /// outside them are chosen so their existence does not change the answer (`/etc`, `/tmp`
    /// and `/work` exist on any machine these tests run on; `bash-scan-none` and `zq` never do).
    const TREE: &str = "/work/tree";
    const HOME: &str = "/home/u";
    const E: &[&str] = &[];

    /// (command, patterns, always, external, reads), run from the worktree root.
    type Case = (
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
        &'static [&'static str],
        &'static [&'static str],
    );

    fn scan_in(command: &str, cwd: &str) -> BashScan {
        let cwd = Path::new(TREE).join(cwd);
        let cx = ScanContext {
            cwd: &cwd,
            worktree: Path::new(TREE),
            home: Some(Path::new(HOME)),
        };
        scan(command, &cx)
    }

    fn owned(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn check_in(cwd: &str, cases: &[Case]) {
        for &(command, patterns, always, external, reads) in cases {
            let got = scan_in(command, cwd);
            let want = BashScan {
                patterns: owned(patterns),
                always: owned(always),
                external: owned(external),
                reads: owned(reads),
                // Checked by their own tables.
                deny_spellings: got.deny_spellings.clone(),
            };
            assert_eq!(got, want, "{command:?} from {cwd:?}");
        }
    }

    fn check(cases: &[Case]) {
        check_in("", cases);
    }

    #[test]
    fn simple_commands_and_arity() {
        check(&[
            ("ls", &["ls"], &["ls *"], E, E),
            ("ls -la", &["ls -la"], &["ls *"], E, E),
            (
                "git checkout main",
                &["git checkout main"],
                &["git checkout *"],
                E,
                E,
            ),
            (
                "npm run dev x",
                &["npm run dev x"],
                &["npm run dev *"],
                E,
                E,
            ),
            (
                "frobnicate --all x y",
                &["frobnicate --all x y"],
                &["frobnicate *"],
                E,
                E,
            ),
            (
                "git -C /etc status",
                &["git -C /etc status"],
                &["git -C *"],
                E,
                E,
            ),
            (
                "cargo test --lib",
                &["cargo test --lib"],
                &["cargo test *"],
                E,
                E,
            ),
            (
                "docker compose up -d",
                &["docker compose up -d"],
                &["docker compose up *"],
                E,
                E,
            ),
            (
                "python -m http.server",
                &["python -m http.server"],
                &["python -m http.server"],
                E,
                E,
            ),
            (
                "npm run build -- --watch",
                &["npm run build -- --watch"],
                &["npm run build *"],
                E,
                E,
            ),
            (
                "FOO=1 make build",
                &["FOO=1 make build"],
                &["FOO=1 make build"],
                E,
                E,
            ),
            (
                "A=1 B=$(x) git push",
                &["A=1 B=$(x) git push", "x"],
                &["A=1 B=$(x) git push", "x *"],
                E,
                E,
            ),
            ("\"ls\" -la", &["\"ls\" -la"], &["\"ls\" *"], E, E),
            ("\\rm x", &["\\rm x"], &["\\rm *"], E, E),
            ("sleep 5", &["sleep 5"], &["sleep *"], E, E),
            ("ls &", &["ls"], &["ls *"], E, E),
            ("ls # rm -rf /", &["ls"], &["ls *"], E, E),
            ("export A=1", &["export A=1"], &["export A=1"], E, E),
            (
                "x=$(rm /etc/x)",
                &["x=$(rm /etc/x)", "rm /etc/x"],
                &["x=$(rm /etc/x)", "rm *"],
                &["/etc/*"],
                E,
            ),
            ("ls $HOME /etc", &["ls $HOME /etc"], &["ls *"], E, E),
            ("cp a b", &["cp a b"], &["cp *"], E, E),
        ]);
    }

    #[test]
    fn lists_pipelines_and_groups() {
        check(&[
            (
                "echo a && echo b || echo c; ls",
                &["echo a", "echo b", "echo c", "ls"],
                &["echo *", "ls *"],
                E,
                E,
            ),
            (
                "cat x | grep y | wc -l",
                &["cat x", "grep y", "wc -l"],
                &["cat *", "grep *", "wc *"],
                E,
                E,
            ),
            ("ls; ls", &["ls"], &["ls *"], E, E),
            ("! rm /etc/x", &["rm /etc/x"], &["rm *"], &["/etc/*"], E),
            ("(ls; pwd)", &["ls", "pwd"], &["ls *", "pwd *"], E, E),
            ("{ ls; pwd; }", &["ls", "pwd"], &["ls *", "pwd *"], E, E),
            ("a |& b", &["a", "b"], &["a *", "b *"], E, E),
        ]);
    }

    #[test]
    fn substitutions() {
        check(&[
            (
                "echo $(rm -rf x)",
                &["echo $(rm -rf x)", "rm -rf x"],
                &["echo *", "rm *"],
                E,
                E,
            ),
            (
                "echo `whoami`",
                &["echo `whoami`", "whoami"],
                &["echo *", "whoami *"],
                E,
                E,
            ),
            (
                "diff <(ls a) <(ls b)",
                &["diff <(ls a) <(ls b)", "ls a", "ls b"],
                &["diff *", "ls *"],
                E,
                E,
            ),
            (
                "echo \"a $(rm /etc/x)\"",
                &["echo \"a $(rm /etc/x)\"", "rm /etc/x"],
                &["echo *", "rm *"],
                &["/etc/*"],
                E,
            ),
            (
                "cat $(which foo)",
                &["cat $(which foo)", "which foo"],
                &["cat *", "which *"],
                &["*"],
                E,
            ),
            (
                "echo $(echo $(id))",
                &["echo $(echo $(id))", "echo $(id)", "id"],
                &["echo *", "id *"],
                E,
                E,
            ),
            (
                "tee >(gzip > out.gz) < in.txt",
                &["tee >(gzip > out.gz) < in.txt", "gzip > out.gz"],
                &["tee *", "gzip *"],
                &["*"],
                E,
            ),
        ]);
    }

    #[test]
    fn redirects() {
        check(&[
            (
                "echo hi > out.txt",
                &["echo hi > out.txt"],
                &["echo *"],
                E,
                E,
            ),
            (
                "echo hi > /etc/passwd",
                &["echo hi > /etc/passwd"],
                &["echo *"],
                &["/etc/*"],
                E,
            ),
            ("ls 2>/dev/null", &["ls 2>/dev/null"], &["ls *"], E, E),
            (
                "make build 2>&1 | tee log.txt",
                &["make build 2>&1", "tee log.txt"],
                &["make build *", "tee *"],
                E,
                E,
            ),
            ("cmd >&2", &["cmd >&2"], &["cmd *"], E, E),
            ("echo x 1>&-", &["echo x 1>&-"], &["echo *"], E, E),
            ("ls > $OUT", &["ls > $OUT"], &["ls *"], &["*"], E),
            (
                "cmd 2> \"$LOG\"",
                &["cmd 2> \"$LOG\""],
                &["cmd *"],
                &["*"],
                E,
            ),
            ("ls &> /etc/x", &["ls &> /etc/x"], &["ls *"], &["/etc/*"], E),
            ("ls >& /etc/x", &["ls >& /etc/x"], &["ls *"], &["/etc/*"], E),
            (
                "echo a >> /etc/x 2>> /tmp/bash-scan-none/err",
                &["echo a >> /etc/x 2>> /tmp/bash-scan-none/err"],
                &["echo *"],
                &["/etc/*", "/tmp/bash-scan-none/*"],
                E,
            ),
            (
                "sort < /etc/hosts > sorted.txt",
                &["sort < /etc/hosts > sorted.txt"],
                &["sort *"],
                &["/etc/*"],
                E,
            ),
            ("> /etc/x", &["> /etc/x"], &["> /etc/x"], &["/etc/*"], E),
            ("> f echo hi", &["> f echo hi"], &["> f echo hi"], E, E),
            (
                "{ echo a; echo b; } > /etc/x",
                &["{ echo a; echo b; } > /etc/x", "echo a", "echo b"],
                &["{ echo a; echo b; } > /etc/x", "echo *"],
                &["/etc/*"],
                E,
            ),
            (
                "while read l; do echo $l; done < /etc/hosts",
                &[
                    "while read l; do echo $l; done < /etc/hosts",
                    "read l",
                    "echo $l",
                ],
                &[
                    "while read l; do echo $l; done < /etc/hosts",
                    "read *",
                    "echo *",
                ],
                &["/etc/*"],
                E,
            ),
            (
                "echo x > /dev/stderr; cat /dev/stdin /dev/fd/3 /dev/urandom",
                &[
                    "echo x > /dev/stderr",
                    "cat /dev/stdin /dev/fd/3 /dev/urandom",
                ],
                &["echo *", "cat *"],
                E,
                E,
            ),
            (
                "cat ../../dev/null",
                &["cat ../../dev/null"],
                &["cat *"],
                E,
                E,
            ),
            (
                "echo x > /dev/sda",
                &["echo x > /dev/sda"],
                &["echo *"],
                &["/dev/*"],
                E,
            ),
            ("exec 3>&1", &["exec 3>&1"], &["exec 3>&1"], E, E),
            (
                "cat < \"$(echo f)\"",
                &["cat < \"$(echo f)\"", "echo f"],
                &["cat *", "echo *"],
                &["*"],
                E,
            ),
        ]);
    }

    /// tree-sitter puts a heredoc's body (and anything written after `<<EOF` on its line) in
    /// the `redirected_statement`, so the pattern the user sees includes the body.
    #[test]
    fn heredocs_and_herestrings() {
        check(&[
            (
                "cat <<EOF > out.txt\nhello\nEOF",
                &["cat <<EOF > out.txt\nhello\nEOF"],
                &["cat *"],
                E,
                E,
            ),
            (
                "cat <<EOF > /etc/x\nhi\nEOF",
                &["cat <<EOF > /etc/x\nhi\nEOF"],
                &["cat *"],
                &["/etc/*"],
                E,
            ),
            (
                "cat <<EOF\n$(rm -rf /tmp/bash-scan-none/x)\nEOF",
                &[
                    "cat <<EOF\n$(rm -rf /tmp/bash-scan-none/x)\nEOF",
                    "rm -rf /tmp/bash-scan-none/x",
                ],
                &["cat *", "rm *"],
                &["/tmp/bash-scan-none/*"],
                E,
            ),
            // A quoted delimiter makes the body literal: no command inside.
            (
                "cat <<'EOF'\n$(rm x)\nEOF",
                &["cat <<'EOF'\n$(rm x)\nEOF"],
                &["cat *"],
                E,
                E,
            ),
            (
                "cat <<EOF | grep x\nhi\nEOF",
                &["cat <<EOF | grep x\nhi\nEOF", "grep x"],
                &["cat *", "grep *"],
                E,
                E,
            ),
            (
                "cat <<-EOF\n\tx\n\tEOF\nrm y",
                &["cat <<-EOF\n\tx\n\tEOF", "rm y"],
                &["cat *", "rm *"],
                E,
                E,
            ),
            (
                "grep x <<< \"hello\"",
                &["grep x <<< \"hello\""],
                &["grep *"],
                E,
                E,
            ),
            (
                "cat <<< /etc/passwd",
                &["cat <<< /etc/passwd"],
                &["cat *"],
                E,
                E,
            ),
        ]);
    }

    #[test]
    fn quoting() {
        check(&[
            (
                "rm \"/etc/a b\"",
                &["rm \"/etc/a b\""],
                &["rm *"],
                &["/etc/*"],
                E,
            ),
            ("cat 'x y'", &["cat 'x y'"], &["cat *"], E, E),
            ("cat a\"b c\"", &["cat a\"b c\""], &["cat *"], E, E),
            (
                "rm a\"/../../b\"",
                &["rm a\"/../../b\""],
                &["rm *"],
                &["/work/*"],
                E,
            ),
            ("rm '/etc/'x", &["rm '/etc/'x"], &["rm *"], &["/etc/*"], E),
            (
                "rm /etc/a\\ b",
                &["rm /etc/a\\ b"],
                &["rm *"],
                &["/etc/*"],
                E,
            ),
            ("cat \"~/x\"", &["cat \"~/x\""], &["cat *"], E, E),
            ("cat \\~/x", &["cat \\~/x"], &["cat *"], E, E),
            // Single quotes make `$` literal: a directory really named `$HOME`.
            ("rm '$HOME/x'", &["rm '$HOME/x'"], &["rm *"], E, E),
            ("rm \"*\"", &["rm \"*\""], &["rm *"], E, E),
        ]);
    }

    #[test]
    fn unresolvable_arguments() {
        check(&[
            ("rm $X", &["rm $X"], &["rm *"], &["*"], E),
            ("rm \"$HOME/x\"", &["rm \"$HOME/x\""], &["rm *"], &["*"], E),
            ("rm ${DIR}/x", &["rm ${DIR}/x"], &["rm *"], &["*"], E),
            (
                "rm -rf \"$(pwd)/x\"",
                &["rm -rf \"$(pwd)/x\"", "pwd"],
                &["rm *", "pwd *"],
                &["*"],
                E,
            ),
            ("cat $'/etc/x'", &["cat $'/etc/x'"], &["cat *"], &["*"], E),
            ("rm $((1+2))", &["rm $((1+2))"], &["rm *"], &["*"], E),
            ("rm -$X file", &["rm -$X file"], &["rm *"], E, E),
            (
                "cp --target-directory=$D a",
                &["cp --target-directory=$D a"],
                &["cp *"],
                &["*"],
                E,
            ),
        ]);
    }

    #[test]
    fn globs() {
        check(&[
            ("rm *", &["rm *"], &["rm *"], E, &["*"]),
            ("rm *.o sub/*.tmp", &["rm *.o sub/*.tmp"], &["rm *"], E, E),
            (
                "rm /etc/*.conf",
                &["rm /etc/*.conf"],
                &["rm *"],
                &["/etc/*"],
                E,
            ),
            (
                "rm ../*",
                &["rm ../*"],
                &["rm *"],
                &["/work/*"],
                &["/work/*"],
            ),
            ("rm /et?/passwd", &["rm /et?/passwd"], &["rm *"], &["/*"], E),
            (
                "rm sub/*/../../../x",
                &["rm sub/*/../../../x"],
                &["rm *"],
                &["*"],
                E,
            ),
            // `.*` matches `..` in older bash.
            ("rm -rf .*", &["rm -rf .*"], &["rm *"], &["*"], &[".*"]),
            ("rm {a,b}.txt", &["rm {a,b}.txt"], &["rm *"], E, E),
            (
                "rm {a,/etc/passwd}",
                &["rm {a,/etc/passwd}"],
                &["rm *"],
                &["*"],
                E,
            ),
            (
                "touch file{1..3}.txt",
                &["touch file{1..3}.txt"],
                &["touch *"],
                E,
                E,
            ),
            (
                "cat ~/*.txt",
                &["cat ~/*.txt"],
                &["cat *"],
                &["/home/u/*"],
                E,
            ),
            ("rm [ab].txt", &["rm [ab].txt"], &["rm *"], E, E),
            ("cd sub* && rm x", &["rm x"], &["rm *"], &["*"], &["sub*"]),
        ]);
    }

    #[test]
    fn path_commands() {
        check(&[
            (
                "cat ../../etc/passwd",
                &["cat ../../etc/passwd"],
                &["cat *"],
                &["/etc/*"],
                E,
            ),
            (
                "cat ~/.ssh/id_rsa",
                &["cat ~/.ssh/id_rsa"],
                &["cat *"],
                &["/home/u/.ssh/*"],
                E,
            ),
            ("rm ~", &["rm ~"], &["rm *"], &["/home/*"], E),
            ("rm ~other/x", &["rm ~other/x"], &["rm *"], &["*"], E),
            ("rm -rf /", &["rm -rf /"], &["rm *"], &["/*"], E),
            ("rm -rf /etc", &["rm -rf /etc"], &["rm *"], &["/etc/*"], E),
            (
                "rm -rf node_modules target",
                &["rm -rf node_modules target"],
                &["rm *"],
                E,
                E,
            ),
            (
                "chmod +x script.sh",
                &["chmod +x script.sh"],
                &["chmod *"],
                E,
                E,
            ),
            (
                "chmod 755 /etc/x",
                &["chmod 755 /etc/x"],
                &["chmod *"],
                &["/etc/*"],
                E,
            ),
            (
                "chmod -R u+w /etc/x",
                &["chmod -R u+w /etc/x"],
                &["chmod *"],
                &["/etc/*"],
                E,
            ),
            (
                "rm -- -x /etc/y",
                &["rm -- -x /etc/y"],
                &["rm *"],
                &["/etc/*"],
                E,
            ),
            (
                "cp --target-directory=/opt/bash-scan-none a",
                &["cp --target-directory=/opt/bash-scan-none a"],
                &["cp *"],
                &["/opt/*"],
                E,
            ),
            (
                "cp -t /opt/bash-scan-none a b",
                &["cp -t /opt/bash-scan-none a b"],
                &["cp *"],
                &["/opt/*"],
                E,
            ),
            ("mv a /etc/", &["mv a /etc/"], &["mv *"], &["/etc/*"], E),
            (
                "ln -s /etc/passwd link",
                &["ln -s /etc/passwd link"],
                &["ln *"],
                &["/etc/*"],
                E,
            ),
            (
                "echo x | tee -a /tmp/bash-scan-none.log",
                &["echo x", "tee -a /tmp/bash-scan-none.log"],
                &["echo *", "tee *"],
                &["/tmp/*"],
                E,
            ),
            (
                "truncate -s 0 /etc/x.log",
                &["truncate -s 0 /etc/x.log"],
                &["truncate *"],
                &["/etc/*"],
                E,
            ),
            (
                "truncate --size=0 big.log",
                &["truncate --size=0 big.log"],
                &["truncate *"],
                E,
                E,
            ),
            (
                "mkdir -p /tmp/bash-scan-none/a/b",
                &["mkdir -p /tmp/bash-scan-none/a/b"],
                &["mkdir *"],
                &["/tmp/bash-scan-none/a/*"],
                E,
            ),
            (
                "rmdir /etc/foo",
                &["rmdir /etc/foo"],
                &["rmdir *"],
                &["/etc/*"],
                E,
            ),
            (
                "chown u:g /etc/x",
                &["chown u:g /etc/x"],
                &["chown *"],
                &["/etc/*"],
                E,
            ),
            (
                "touch /work/tree/new /work/treehouse/x",
                &["touch /work/tree/new /work/treehouse/x"],
                &["touch *"],
                &["/work/treehouse/*"],
                E,
            ),
            (
                "cat /etc/passwd /etc/hosts",
                &["cat /etc/passwd /etc/hosts"],
                &["cat *"],
                &["/etc/*"],
                E,
            ),
            (
                "/bin/rm /etc/x",
                &["/bin/rm /etc/x"],
                &["/bin/rm *"],
                &["/etc/*"],
                E,
            ),
            ("ls /etc", &["ls /etc"], &["ls *"], E, E),
        ]);
    }

    #[test]
    fn cd_sequences() {
        check(&[
            ("cd sub && rm x", &["rm x"], &["rm *"], E, E),
            (
                "cd /tmp && rm x.txt",
                &["rm x.txt"],
                &["rm *"],
                &["/tmp/*"],
                E,
            ),
            ("cd .. && rm x", &["rm x"], &["rm *"], &["/work/*"], E),
            ("cd $D && rm x", &["rm x"], &["rm *"], &["*"], E),
            ("cd /etc", &["cd /etc"], &["cd /etc"], &["/etc/*"], E),
            ("cd", &["cd"], &["cd"], &["/home/u/*"], E),
            ("cd ~ && rm x", &["rm x"], &["rm *"], &["/home/u/*"], E),
            ("cd - && rm x", &["rm x"], &["rm *"], &["*"], E),
            (
                "(cd /tmp); rm y.txt",
                &["rm y.txt"],
                &["rm *"],
                &["/tmp/*"],
                E,
            ),
            (
                "(cd /tmp && rm x.txt)",
                &["rm x.txt"],
                &["rm *"],
                &["/tmp/*"],
                E,
            ),
            (
                "pushd /tmp && rm x.txt && popd",
                &["rm x.txt"],
                &["rm *"],
                &["/tmp/*"],
                E,
            ),
            (
                "chdir /tmp",
                &["chdir /tmp"],
                &["chdir /tmp"],
                &["/tmp/*"],
                E,
            ),
            ("popd", &["popd"], &["popd"], E, E),
            (
                "cd /tmp; cd ..; rm x.txt",
                &["rm x.txt"],
                &["rm *"],
                &["/tmp/*", "/work/*", "/*"],
                E,
            ),
            (
                "cd sub && cd ../.. && rm x.txt",
                &["rm x.txt"],
                &["rm *"],
                &["/*", "/work/*"],
                E,
            ),
            (
                "cd \"$(mktemp -d)\" && rm x",
                &["mktemp -d", "rm x"],
                &["mktemp *", "rm *"],
                &["*"],
                E,
            ),
            (
                "cd $D && rm /etc/x",
                &["rm /etc/x"],
                &["rm *"],
                &["*", "/etc/*"],
                E,
            ),
            (
                "cd /tmp && ls ../etc",
                &["ls ../etc"],
                &["ls *"],
                &["/tmp/*"],
                E,
            ),
            (
                "cd -P /tmp",
                &["cd -P /tmp"],
                &["cd -P /tmp"],
                &["/tmp/*"],
                E,
            ),
            // The set still holds the starting directory.
            (
                "cd sub && cat .env",
                &["cat .env"],
                &["cat *"],
                E,
                &[".env", "sub/.env"],
            ),
        ]);
        check_in(
            "sub",
            &[
                ("cd .. && rm x", &["rm x"], &["rm *"], E, E),
                ("cd ../.. && rm x", &["rm x"], &["rm *"], &["/work/*"], E),
            ],
        );
    }

    #[test]
    fn control_flow_and_functions() {
        check(&[
            (
                "if true; then rm /etc/x; fi",
                &["true", "rm /etc/x"],
                &["true *", "rm *"],
                &["/etc/*"],
                E,
            ),
            (
                "if test -f a; then ls; else rm /etc/b; fi",
                &["test -f a", "ls", "rm /etc/b"],
                &["test *", "ls *", "rm *"],
                &["/etc/*"],
                E,
            ),
            (
                "for f in a b; do rm /etc/$f; done",
                &["rm /etc/$f"],
                &["rm *"],
                &["*"],
                E,
            ),
            (
                "for f in *.c; do gcc -c $f; done",
                &["gcc -c $f"],
                &["gcc *"],
                E,
                E,
            ),
            (
                "while read l; do echo $l; done < input.txt",
                &[
                    "while read l; do echo $l; done < input.txt",
                    "read l",
                    "echo $l",
                ],
                &[
                    "while read l; do echo $l; done < input.txt",
                    "read *",
                    "echo *",
                ],
                E,
                E,
            ),
            (
                "until false; do sleep 1; done",
                &["false", "sleep 1"],
                &["false *", "sleep *"],
                E,
                E,
            ),
            (
                "case $x in a) rm /etc/x;; esac",
                &["rm /etc/x"],
                &["rm *"],
                &["/etc/*"],
                E,
            ),
            (
                "f() { rm /etc/x; }",
                &["rm /etc/x"],
                &["rm *"],
                &["/etc/*"],
                E,
            ),
            (
                "function g { ls; }; g",
                &["ls", "g"],
                &["ls *", "g *"],
                E,
                E,
            ),
            // The second time round the loop, `rm` runs in /tmp.
            (
                "for i in 1 2; do rm zq/b; cd /tmp; done",
                &["rm zq/b"],
                &["rm *"],
                &["/tmp/*", "/tmp/zq/*"],
                E,
            ),
            (
                "while true; do cd ..; done",
                &["true"],
                &["true *"],
                &["/work/*", "/*"],
                E,
            ),
            (
                "while true; do cd sub; done; rm x",
                &["true", "rm x"],
                &["true *", "rm *"],
                &["*"],
                E,
            ),
            // The function runs after the `cd`, though it is defined before it.
            (
                "f() { rm zq/b; }; cd /tmp; f",
                &["rm zq/b", "f"],
                &["rm *", "f *"],
                &["/tmp/*", "/tmp/zq/*"],
                E,
            ),
        ]);
    }

    #[test]
    fn wrappers_and_dynamic_names() {
        check(&[
            (
                "sudo rm -rf /etc",
                &["sudo rm -rf /etc"],
                &["sudo rm -rf /etc"],
                &["/etc/*"],
                E,
            ),
            (
                "sudo -E cat /etc/shadow",
                &["sudo -E cat /etc/shadow"],
                &["sudo -E cat /etc/shadow"],
                &["/etc/*"],
                E,
            ),
            (
                "env FOO=1 rm /etc/x",
                &["env FOO=1 rm /etc/x"],
                &["env FOO=1 rm /etc/x"],
                &["/etc/*"],
                E,
            ),
            (
                "timeout 5 rm /etc/x",
                &["timeout 5 rm /etc/x"],
                &["timeout 5 rm /etc/x"],
                &["/etc/*"],
                E,
            ),
            (
                "nohup cargo build &",
                &["nohup cargo build"],
                &["nohup cargo build"],
                E,
                E,
            ),
            (
                "xargs rm < list.txt",
                &["xargs rm < list.txt"],
                &["xargs rm < list.txt"],
                &["*"],
                E,
            ),
            (
                "find . -name '*.o' -delete",
                &["find . -name '*.o' -delete"],
                &["find . -name '*.o' -delete"],
                E,
                E,
            ),
            ("time ls -l", &["time ls -l"], &["time ls -l"], E, E),
            (
                "watch -n 1 ls",
                &["watch -n 1 ls", "ls"],
                &["watch -n 1 ls", "ls *"],
                E,
                E,
            ),
            (
                "/usr/bin/sudo ls",
                &["/usr/bin/sudo ls"],
                &["/usr/bin/sudo ls"],
                E,
                E,
            ),
            ("exec ls", &["exec ls"], &["exec ls"], E, E),
            (
                "bash script.sh",
                &["bash script.sh"],
                &["bash script.sh"],
                E,
                E,
            ),
            (
                "bash -c 'rm -rf /'",
                &["bash -c 'rm -rf /'", "rm -rf /"],
                &["bash -c 'rm -rf /'", "rm *"],
                &["/*"],
                E,
            ),
            (
                "sh -c 'cd /tmp && rm zq/b'",
                &["sh -c 'cd /tmp && rm zq/b'", "rm zq/b"],
                &["sh -c 'cd /tmp && rm zq/b'", "rm *"],
                &["/tmp/*", "/tmp/zq/*"],
                E,
            ),
            (
                "bash -lc \"git status\"",
                &["bash -lc \"git status\"", "git status"],
                &["bash -lc \"git status\"", "git status *"],
                E,
                E,
            ),
            (
                "eval \"ls /etc\"",
                &["eval \"ls /etc\"", "ls /etc"],
                &["eval \"ls /etc\"", "ls *"],
                E,
                E,
            ),
            (
                "eval rm /etc/x",
                &["eval rm /etc/x", "rm /etc/x"],
                &["eval rm /etc/x", "rm *"],
                &["/etc/*"],
                E,
            ),
            (
                "bash -c \"$CMD\"",
                &["bash -c \"$CMD\""],
                &["bash -c \"$CMD\""],
                &["*"],
                E,
            ),
            (
                "bash -c 'echo \"unterminated'",
                &["bash -c 'echo \"unterminated'", "echo \"unterminated"],
                &["bash -c 'echo \"unterminated'", "echo \"unterminated"],
                E,
                E,
            ),
            ("$CMD arg", &["$CMD arg"], &["$CMD arg"], E, E),
            (
                "$CMD /etc/x",
                &["$CMD /etc/x"],
                &["$CMD /etc/x"],
                &["/etc/*"],
                E,
            ),
            (
                "$(echo rm) x",
                &["$(echo rm) x", "echo rm"],
                &["$(echo rm) x", "echo *"],
                E,
                E,
            ),
            (
                "\"$EDITOR\" file",
                &["\"$EDITOR\" file"],
                &["\"$EDITOR\" file"],
                E,
                E,
            ),
            (
                "`which ls` -la",
                &["`which ls` -la", "which ls"],
                &["`which ls` -la", "which *"],
                E,
                E,
            ),
            (
                "${TOOL:-cat} .env",
                &["${TOOL:-cat} .env"],
                &["${TOOL:-cat} .env"],
                E,
                &[".env"],
            ),
        ]);
    }

    #[test]
    fn unreadable_and_empty() {
        check(&[
            (
                "echo \"unterminated",
                &["echo \"unterminated"],
                &["echo \"unterminated"],
                E,
                E,
            ),
            ("if then fi", &["if then fi"], &["if then fi"], E, E),
            (")(", &[")("], &[")("], E, E),
            ("  cat <> f  ", &["cat <> f"], &["cat <> f"], E, E),
            (
                "rm /etc/x; echo \"oops",
                &["rm /etc/x; echo \"oops"],
                &["rm /etc/x; echo \"oops"],
                E,
                E,
            ),
            ("", E, E, E, E),
            ("   \n\t ", E, E, E, E),
        ]);
    }

    #[test]
    fn env_files() {
        check(&[
            ("cat .env", &["cat .env"], &["cat *"], E, &[".env"]),
            ("source .env", &["source .env"], &["source *"], E, &[".env"]),
            (
                ". .env.local",
                &[". .env.local"],
                &[". *"],
                E,
                &[".env.local"],
            ),
            (
                "grep KEY .env.production",
                &["grep KEY .env.production"],
                &["grep *"],
                E,
                &[".env.production"],
            ),
            (
                "cp .env.development.local x",
                &["cp .env.development.local x"],
                &["cp *"],
                E,
                &[".env.development.local"],
            ),
            ("cat < .env", &["cat < .env"], &["cat *"], E, &[".env"]),
            (
                "cat .env.example",
                &["cat .env.example"],
                &["cat *"],
                E,
                &[".env.example"],
            ),
            (
                "cat .envrc environment.ts .environment",
                &["cat .envrc environment.ts .environment"],
                &["cat *"],
                E,
                E,
            ),
            (
                "cat sub/.env",
                &["cat sub/.env"],
                &["cat *"],
                E,
                &["sub/.env"],
            ),
            (
                "cat prod.env 'staging.env'",
                &["cat prod.env 'staging.env'"],
                &["cat *"],
                E,
                &["prod.env", "staging.env"],
            ),
            (
                "cat ../.env",
                &["cat ../.env"],
                &["cat *"],
                &["/work/*"],
                &["/work/.env"],
            ),
            (
                "cat ~/.env",
                &["cat ~/.env"],
                &["cat *"],
                &["/home/u/*"],
                &["/home/u/.env"],
            ),
            (
                "cat /etc/app/.env.local",
                &["cat /etc/app/.env.local"],
                &["cat *"],
                &["/etc/app/*"],
                &["/etc/app/.env.local"],
            ),
            (
                "cd /tmp && cat .env",
                &["cat .env"],
                &["cat *"],
                &["/tmp/*"],
                &[".env", "/tmp/.env"],
            ),
            (
                "cd $D && cat .env",
                &["cat .env"],
                &["cat *"],
                &["*"],
                &[".env"],
            ),
            (
                "docker run --env-file=.env img",
                &["docker run --env-file=.env img"],
                &["docker run *"],
                E,
                &[".env"],
            ),
            (
                "docker run --env-file .env img",
                &["docker run --env-file .env img"],
                &["docker run *"],
                E,
                &[".env"],
            ),
            (
                "cat \"$F.env\" .env*",
                &["cat \"$F.env\" .env*"],
                &["cat *"],
                &["*"],
                &[".env*"],
            ),
            ("echo .env", &["echo .env"], &["echo *"], E, &[".env"]),
            (
                "cat ./sub/../.env",
                &["cat ./sub/../.env"],
                &["cat *"],
                E,
                &[".env"],
            ),
            (
                "sudo cat .env",
                &["sudo cat .env"],
                &["sudo cat .env"],
                E,
                &[".env"],
            ),
            (
                "cat .env > /dev/null; cat .env",
                &["cat .env > /dev/null", "cat .env"],
                &["cat *"],
                E,
                &[".env"],
            ),
            (
                "wc -l < config/prod.env",
                &["wc -l < config/prod.env"],
                &["wc *"],
                E,
                &["config/prod.env"],
            ),
            ("echo x > .env", &["echo x > .env"], &["echo *"], E, E),
        ]);
        check_in(
            "sub",
            &[("cat .env", &["cat .env"], &["cat *"], E, &["sub/.env"])],
        );
    }

    #[test]
    fn exact_always_does_not_cover_other_commands() {
        let approved = scan_in("bash -c 'ls'", "").always;
        assert!(wildcard::matches("bash -c 'ls'", &approved[0]));
        assert!(!wildcard::matches("bash -c 'rm -rf /'", &approved[0]));
        // The ordinary rule does generalise, as in OpenCode.
        let approved = scan_in("git checkout main", "").always;
        assert!(wildcard::matches("git checkout dev", &approved[0]));
    }

    #[test]
    fn home_missing_or_empty() {
        let cx = ScanContext {
            cwd: Path::new(TREE),
            worktree: Path::new(TREE),
            home: None,
        };
        assert_eq!(scan("cat ~/.ssh/id_rsa", &cx).external, ["*"]);
        assert_eq!(scan("cd && rm x", &cx).external, ["*"]);
        // An empty home is odd but must not upset the glob offsets.
        let cx = ScanContext {
            home: Some(Path::new("")),
            ..cx
        };
        assert_eq!(scan("cat ~/*.txt", &cx).external, ["/*"]);
    }

    #[test]
    fn many_relative_cds_give_up_tracking() {
        let cds: Vec<String> = (0..40).map(|i| format!("cd d{i}")).collect();
        let command = format!("{}; rm x", cds.join("; "));
        assert_eq!(scan_in(&command, "").external, ["*"]);
    }

    #[test]
    fn hostile_input_does_not_panic() {
        let nested = format!("{}ls{}", "(".repeat(10_000), ")".repeat(10_000));
        assert_eq!(scan_in(&nested, "").patterns, [nested.as_str()]);
        let substitutions = format!("echo {}x{}", "$(".repeat(3_000), ")".repeat(3_000));
        assert_eq!(scan_in(&substitutions, "").always, [substitutions.as_str()]);
        let chain = vec!["true"; 200].join(" && ");
        assert_eq!(scan_in(&chain, "").patterns, ["true"]);
        let chain = vec!["true"; 300].join(" && ");
        assert_eq!(scan_in(&chain, "").patterns, [chain.as_str()]);
        let long = "ls; ".repeat(20_000);
        assert_eq!(scan_in(&long, "").patterns, ["ls"]);
        let evals = format!("{}ls", "eval ".repeat(50));
        assert!(!scan_in(&evals, "").patterns.is_empty());
        // Wrapper chains: bounded spellings, and the paths are still checked.
        let wrapped = format!("{}rm /etc/x", "nice ".repeat(20_000));
        let found = scan_in(&wrapped, "");
        assert_eq!(found.external, ["/etc/*"]);
        assert!(found.deny_spellings[0].1.len() <= MAX_SPELLED_WRAPPERS + 1);
        let wrapped = format!("{}rm /etc/x", "nice ".repeat(100));
        assert!(
            scan_in(&wrapped, "").deny_spellings[0]
                .1
                .contains(&"rm /etc/x".to_string())
        );
        // Padding `find` does not hide its last command.
        let padded = format!(
            "find . {}-exec rm /etc/x {{}} +",
            "-exec true \\; ".repeat(2_000)
        );
        let found = scan_in(&padded, "");
        assert_eq!(found.external, ["/etc/*"]);
        assert!(
            found.deny_spellings[0]
                .1
                .contains(&"rm /etc/x {}".to_string())
        );
        let nested_finds = format!(
            "{}rm /etc/x{}",
            "find . -exec ".repeat(2_000),
            " \\;".repeat(2_000)
        );
        let _ = scan_in(&nested_finds, "");
        let braces = format!("cat .e{}", "{a,b}".repeat(30));
        assert_eq!(scan_in(&braces, "").reads, [&braces[4..]]);
        let deep_braces = format!("cat .{}x{}", "{".repeat(5_000), "}".repeat(5_000));
        let _ = scan_in(&deep_braces, "");
        let ansi = format!("$'{}' x", "\\x72\\u12345\\777\\c".repeat(2_000));
        let _ = scan_in(&ansi, "");
        let garbage = [
            "ls \0 rm",
            "$(((((",
            "'''",
            "\\",
            "<<EOF",
            "cat <<EOF\n",
            "${",
            "`",
            "a=(",
            "case",
            "[[ ",
            "rm \u{202e}x",
            "cd \0",
            "cat ~\0/x",
            "rm [",
            "rm {",
            "rm {,/}",
            "> ",
            "2>&",
            "cd ''",
            "rm ''",
            "éé ü",
            "cat\t.env\r\n",
        ];
        for input in garbage {
            let _ = scan_in(input, "");
        }
    }

    /// Statements that are not simple commands still run code or write files, so each is
    /// asked about by its exact text (substitutions inside still give their own patterns).
    #[test]
    fn non_command_statements() {
        check(&[
            (
                "[[ 1 -eq 'a[$(rm -rf src)]' ]]",
                &["[[ 1 -eq 'a[$(rm -rf src)]' ]]"],
                &["[[ 1 -eq 'a[$(rm -rf src)]' ]]"],
                E,
                E,
            ),
            (
                "> src/main.rs",
                &["> src/main.rs"],
                &["> src/main.rs"],
                E,
                E,
            ),
            (
                "cd . > src/main.rs",
                &["cd . > src/main.rs"],
                &["cd . > src/main.rs"],
                E,
                E,
            ),
            (
                "export X=1 > f",
                &["export X=1 > f"],
                &["export X=1 > f"],
                E,
                E,
            ),
            (
                "x='a[$(rm -rf src)]'; echo $((x))",
                &["x='a[$(rm -rf src)]'", "echo $((x))"],
                &["x='a[$(rm -rf src)]'", "echo *"],
                E,
                E,
            ),
            (
                "export GIT_EXTERNAL_DIFF='rm -rf src;:'",
                &["export GIT_EXTERNAL_DIFF='rm -rf src;:'"],
                &["export GIT_EXTERNAL_DIFF='rm -rf src;:'"],
                E,
                E,
            ),
            (
                "declare -x Y=1",
                &["declare -x Y=1"],
                &["declare -x Y=1"],
                E,
                E,
            ),
            ("unset PATH", &["unset PATH"], &["unset PATH"], E, E),
            ("(( x ))", &["(( x ))"], &["(( x ))"], E, E),
            ("let x=1", &["let x=1"], &["let x=1"], E, E),
            ("A=1 B=2", &["A=1 B=2"], &["A=1 B=2"], E, E),
            ("x+=1", &["x+=1"], &["x+=1"], E, E),
            (
                "if [[ -f a ]]; then ls; fi",
                &["[[ -f a ]]", "ls"],
                &["[[ -f a ]]", "ls *"],
                E,
                E,
            ),
            (
                "f() { local x=1; }; f",
                &["local x=1", "f"],
                &["local x=1", "f *"],
                E,
                E,
            ),
            (
                "x=1 y=2 > /etc/x",
                &["x=1 y=2 > /etc/x"],
                &["x=1 y=2 > /etc/x"],
                &["/etc/*"],
                E,
            ),
            // Nothing else to ask about: the line itself is asked about.
            (
                "# only a comment",
                &["# only a comment"],
                &["# only a comment"],
                E,
                E,
            ),
        ]);
    }

    /// A redirection on a compound statement shows in no inner command's pattern.
    #[test]
    fn redirected_compound_statements() {
        check(&[
            (
                "{ echo pwned; } > src/main.rs",
                &["{ echo pwned; } > src/main.rs", "echo pwned"],
                &["{ echo pwned; } > src/main.rs", "echo *"],
                E,
                E,
            ),
            (
                "(cat a) > b",
                &["(cat a) > b", "cat a"],
                &["(cat a) > b", "cat *"],
                E,
                E,
            ),
            (
                "if :; then echo x; fi > f",
                &["if :; then echo x; fi > f", ":", "echo x"],
                &["if :; then echo x; fi > f", ": *", "echo *"],
                E,
                E,
            ),
            (
                "f(){ echo; } > f",
                &["f(){ echo; } > f", "echo"],
                &["f(){ echo; } > f", "echo *"],
                E,
                E,
            ),
            (
                "while read l; do echo $l; done < in > out",
                &[
                    "while read l; do echo $l; done < in > out",
                    "read l",
                    "echo $l",
                ],
                &[
                    "while read l; do echo $l; done < in > out",
                    "read *",
                    "echo *",
                ],
                E,
                E,
            ),
            // tree-sitter hangs the redirection on the whole pipeline or list; bash applies
            // it to the last part.
            (
                "ls | cat > /etc/x",
                &["ls", "cat > /etc/x"],
                &["ls *", "cat *"],
                &["/etc/*"],
                E,
            ),
            (
                "a && b | { c; } > f",
                &["a", "b", "{ c; } > f", "c"],
                &["a *", "b *", "{ c; } > f", "c *"],
                E,
                E,
            ),
            ("! ls > f", &["! ls > f", "ls"], &["! ls > f", "ls *"], E, E),
            (
                "{ ls; } 2>/dev/null",
                &["{ ls; } 2>/dev/null", "ls"],
                &["{ ls; } 2>/dev/null", "ls *"],
                E,
                E,
            ),
        ]);
    }

    /// Options that take a value are skipped by the table, not taken for the command.
    #[test]
    fn wrappers_do_not_hide_paths() {
        check(&[
            (
                "nice -n 5 rm -rf /etc/x",
                &["nice -n 5 rm -rf /etc/x"],
                &["nice -n 5 rm -rf /etc/x"],
                &["/etc/*"],
                E,
            ),
            (
                "sudo -u root rm /etc/x",
                &["sudo -u root rm /etc/x"],
                &["sudo -u root rm /etc/x"],
                &["/etc/*"],
                E,
            ),
            (
                "timeout -s KILL 5 rm /etc/x",
                &["timeout -s KILL 5 rm /etc/x"],
                &["timeout -s KILL 5 rm /etc/x"],
                &["/etc/*"],
                E,
            ),
            (
                "exec -a n rm /etc/x",
                &["exec -a n rm /etc/x"],
                &["exec -a n rm /etc/x"],
                &["/etc/*"],
                E,
            ),
            (
                "env -u V rm /etc/x",
                &["env -u V rm /etc/x"],
                &["env -u V rm /etc/x"],
                &["/etc/*"],
                E,
            ),
            (
                "sudo -Eu root rm /etc/x",
                &["sudo -Eu root rm /etc/x"],
                &["sudo -Eu root rm /etc/x"],
                &["/etc/*"],
                E,
            ),
            (
                "sudo --user root -- rm /etc/x",
                &["sudo --user root -- rm /etc/x"],
                &["sudo --user root -- rm /etc/x"],
                &["/etc/*"],
                E,
            ),
            (
                "stdbuf -o L rm /etc/x",
                &["stdbuf -o L rm /etc/x"],
                &["stdbuf -o L rm /etc/x"],
                &["/etc/*"],
                E,
            ),
            (
                "sudo nice -n 5 timeout 5 rm /etc/x",
                &["sudo nice -n 5 timeout 5 rm /etc/x"],
                &["sudo nice -n 5 timeout 5 rm /etc/x"],
                &["/etc/*"],
                E,
            ),
            // Where the command starts is unclear: every word is a possible path.
            (
                "sudo $OPTS rm /etc/x",
                &["sudo $OPTS rm /etc/x"],
                &["sudo $OPTS rm /etc/x"],
                &["*", "/etc/*"],
                E,
            ),
            (
                "env -S 'rm -rf' /etc/x",
                &["env -S 'rm -rf' /etc/x"],
                &["env -S 'rm -rf' /etc/x"],
                &["/etc/*"],
                E,
            ),
            (
                "sudo -e /etc/hosts",
                &["sudo -e /etc/hosts"],
                &["sudo -e /etc/hosts"],
                &["/etc/*"],
                E,
            ),
            (
                "parallel rm ::: /etc/x",
                &["parallel rm ::: /etc/x"],
                &["parallel rm ::: /etc/x"],
                &["/etc/*"],
                E,
            ),
            // The wrapper's own files.
            (
                "flock /tmp/bash-scan-none.lock rm x",
                &["flock /tmp/bash-scan-none.lock rm x"],
                &["flock /tmp/bash-scan-none.lock rm x"],
                &["/tmp/*"],
                E,
            ),
            (
                "time -o /etc/x.log ls",
                &["time -o /etc/x.log ls"],
                &["time -o /etc/x.log ls"],
                &["/etc/*"],
                E,
            ),
            // A new root: where the wrapped command's relative paths lead is unknown.
            (
                "chroot /srv/bash-scan-none rm x",
                &["chroot /srv/bash-scan-none rm x"],
                &["chroot /srv/bash-scan-none rm x"],
                &["/srv/bash-scan-none/*", "*"],
                E,
            ),
            // `find` acts on what it finds below its starting points.
            (
                "find /etc -name x -delete",
                &["find /etc -name x -delete"],
                &["find /etc -name x -delete"],
                &["/etc/*"],
                E,
            ),
            (
                "find . -exec rm /etc/x {} \\;",
                &["find . -exec rm /etc/x {} \\;"],
                &["find . -exec rm /etc/x {} \\;"],
                &["/etc/*"],
                E,
            ),
            // xargs adds arguments at run time.
            (
                "find . -name '*.o' | xargs rm",
                &["find . -name '*.o'", "xargs rm"],
                &["find . -name '*.o'", "xargs rm"],
                &["*"],
                E,
            ),
            // `builtin cd` moves the shell like `cd`.
            (
                "builtin cd /tmp && rm zq/b",
                &["builtin cd /tmp", "rm zq/b"],
                &["builtin cd /tmp", "rm *"],
                &["/tmp/*", "/tmp/zq/*"],
                E,
            ),
            // `command -v` only looks names up.
            (
                "command -v rm /etc/x",
                &["command -v rm /etc/x"],
                &["command -v rm /etc/x"],
                E,
                E,
            ),
        ]);
    }

    /// Anything that changes what `cd` and `~` mean makes them unknown from there on.
    #[test]
    fn cwd_tracking_cannot_be_fooled() {
        check(&[
            (
                "CDPATH=/ cd etc && rm -rf *",
                &["rm -rf *"],
                &["rm *"],
                &["*"],
                &["*"],
            ),
            ("HOME=/etc cd && rm x", &["rm x"], &["rm *"], &["*"], E),
            (
                "HOME=/etc; rm -rf ~/x",
                &["HOME=/etc", "rm -rf ~/x"],
                &["HOME=/etc", "rm *"],
                &["*"],
                E,
            ),
            (
                "shopt -s cdable_vars; d=/etc; cd d",
                &["shopt -s cdable_vars", "d=/etc"],
                &["shopt *", "d=/etc"],
                &["*"],
                E,
            ),
            (
                "env --chdir=/etc rm -rf x",
                &["env --chdir=/etc rm -rf x"],
                &["env --chdir=/etc rm -rf x"],
                &["/etc/*", "*"],
                E,
            ),
            (
                "env -C /etc rm x",
                &["env -C /etc rm x"],
                &["env -C /etc rm x"],
                &["/etc/*", "*"],
                E,
            ),
            (
                "sudo -D /etc rm x",
                &["sudo -D /etc rm x"],
                &["sudo -D /etc rm x"],
                &["/etc/*", "*"],
                E,
            ),
            (
                "sudo --chdir=/etc rm x",
                &["sudo --chdir=/etc rm x"],
                &["sudo --chdir=/etc rm x"],
                &["/etc/*", "*"],
                E,
            ),
            // Only the wrapped command moved; the shell did not.
            (
                "env -C /etc rm x; rm y",
                &["env -C /etc rm x", "rm y"],
                &["env -C /etc rm x", "rm *"],
                &["/etc/*", "*"],
                E,
            ),
            (
                "export HOME=/etc && cd && rm x",
                &["export HOME=/etc", "rm x"],
                &["export HOME=/etc", "rm *"],
                &["*"],
                E,
            ),
            (
                ": ${HOME:=/etc}; rm ~/x",
                &[": ${HOME:=/etc}", "rm ~/x"],
                &[": *", "rm *"],
                &["*"],
                E,
            ),
            (
                "read -r HOME < f; rm ~/x",
                &["read -r HOME < f", "rm ~/x"],
                &["read *", "rm *"],
                &["*"],
                E,
            ),
            (
                "for HOME in /etc; do rm ~/x; done",
                &["rm ~/x"],
                &["rm *"],
                &["*"],
                E,
            ),
            (
                "env HOME=/etc bash -c 'rm ~/x'",
                &["env HOME=/etc bash -c 'rm ~/x'", "rm ~/x"],
                &["env HOME=/etc bash -c 'rm ~/x'", "rm *"],
                &["*"],
                E,
            ),
            (
                "unset HOME; cd; rm x",
                &["unset HOME", "rm x"],
                &["unset HOME", "rm *"],
                &["*"],
                E,
            ),
            (
                "source <(curl x)",
                &["source <(curl x)", "curl x"],
                &["source *", "curl *"],
                &["*"],
                E,
            ),
            (
                ". /dev/stdin <<< 'rm /etc/x'",
                &[". /dev/stdin <<< 'rm /etc/x'", "rm /etc/x"],
                &[". *", "rm *"],
                &["/etc/*"],
                E,
            ),
            (
                "source /etc/profile",
                &["source /etc/profile"],
                &["source *"],
                &["/etc/*"],
                E,
            ),
            (
                "source env.sh; rm x",
                &["source env.sh", "rm x"],
                &["source *", "rm *"],
                &["*"],
                E,
            ),
            // Before the assignment `~` is still known.
            (
                "rm ~/x; HOME=/etc",
                &["rm ~/x", "HOME=/etc"],
                &["rm *", "HOME=/etc"],
                &["/home/u/*"],
                E,
            ),
        ]);
    }

    #[test]
    fn nested_scripts() {
        check(&[
            (
                "bash -c -- 'rm -rf ~/x'",
                &["bash -c -- 'rm -rf ~/x'", "rm -rf ~/x"],
                &["bash -c -- 'rm -rf ~/x'", "rm *"],
                &["/home/u/*"],
                E,
            ),
            // The string is the first operand, not the word after `-c`.
            (
                "bash -c -x 'rm /etc/x'",
                &["bash -c -x 'rm /etc/x'", "rm /etc/x"],
                &["bash -c -x 'rm /etc/x'", "rm *"],
                &["/etc/*"],
                E,
            ),
            // `o` in the cluster takes `errexit`.
            (
                "bash -co errexit 'rm /etc/x'",
                &["bash -co errexit 'rm /etc/x'", "rm /etc/x"],
                &["bash -co errexit 'rm /etc/x'", "rm *"],
                &["/etc/*"],
                E,
            ),
            (
                "bash <<<'rm -rf /etc/x'",
                &["bash <<<'rm -rf /etc/x'", "rm -rf /etc/x"],
                &["bash <<<'rm -rf /etc/x'", "rm *"],
                &["/etc/*"],
                E,
            ),
            (
                "sh <<'EOF'\nrm /etc/x\nEOF",
                &["sh <<'EOF'\nrm /etc/x\nEOF", "rm /etc/x"],
                &["sh <<'EOF'\nrm /etc/x\nEOF", "rm *"],
                &["/etc/*"],
                E,
            ),
            // An unquoted delimiter expands the body: only known at run time.
            (
                "sh <<EOF\nrm $D/x\nEOF",
                &["sh <<EOF\nrm $D/x\nEOF"],
                &["sh <<EOF\nrm $D/x\nEOF"],
                &["*"],
                E,
            ),
            (
                "echo 'rm /etc/x' | sh",
                &["echo 'rm /etc/x'", "sh"],
                &["echo *", "sh"],
                &["*"],
                E,
            ),
            (
                "curl x | bash",
                &["curl x", "bash"],
                &["curl *", "bash"],
                &["*"],
                E,
            ),
            (
                "curl x | sudo bash -s",
                &["curl x", "sudo bash -s"],
                &["curl *", "sudo bash -s"],
                &["*"],
                E,
            ),
            (
                "cat <<EOF | sh\nrm x\nEOF",
                &["cat <<EOF | sh\nrm x\nEOF", "sh"],
                &["cat *", "sh"],
                &["*"],
                E,
            ),
            // Three strings deep are scanned; the fourth is unknown.
            (
                "eval eval eval eval ls",
                &[
                    "eval eval eval eval ls",
                    "eval eval eval ls",
                    "eval eval ls",
                    "eval ls",
                ],
                &[
                    "eval eval eval eval ls",
                    "eval eval eval ls",
                    "eval eval ls",
                    "eval ls",
                ],
                &["*"],
                E,
            ),
            // Unknown code in this shell may also `cd`.
            (
                "eval \"$CMD\"; rm x",
                &["eval \"$CMD\"", "rm x"],
                &["eval \"$CMD\"", "rm *"],
                &["*"],
                E,
            ),
            (
                "bash -c \"$(curl x)\"",
                &["bash -c \"$(curl x)\"", "curl x"],
                &["bash -c \"$(curl x)\"", "curl *"],
                &["*"],
                E,
            ),
            // A script file is a path like any other; its contents are not ours to read.
            (
                "bash /etc/x.sh",
                &["bash /etc/x.sh"],
                &["bash /etc/x.sh"],
                &["/etc/*"],
                E,
            ),
            (
                "trap 'rm /etc/x' EXIT",
                &["trap 'rm /etc/x' EXIT", "rm /etc/x"],
                &["trap 'rm /etc/x' EXIT", "rm *"],
                &["/etc/*"],
                E,
            ),
            ("trap - EXIT", &["trap - EXIT"], &["trap - EXIT"], E, E),
            (
                "trap \"$H\" EXIT",
                &["trap \"$H\" EXIT"],
                &["trap \"$H\" EXIT"],
                &["*"],
                E,
            ),
            (
                "sudo sh -c 'rm /etc/x'",
                &["sudo sh -c 'rm /etc/x'", "rm /etc/x"],
                &["sudo sh -c 'rm /etc/x'", "rm *"],
                &["/etc/*"],
                E,
            ),
            (
                "su -c 'rm /etc/x' root",
                &["su -c 'rm /etc/x' root", "rm /etc/x"],
                &["su -c 'rm /etc/x' root", "rm *"],
                &["/etc/*"],
                E,
            ),
            (
                "find . -exec sh -c 'rm /etc/x' \\;",
                &["find . -exec sh -c 'rm /etc/x' \\;", "rm /etc/x"],
                &["find . -exec sh -c 'rm /etc/x' \\;", "rm *"],
                &["/etc/*"],
                E,
            ),
            (
                "xargs -I{} sh -c 'rm {}'",
                &["xargs -I{} sh -c 'rm {}'", "rm {}"],
                &["xargs -I{} sh -c 'rm {}'", "rm *"],
                &["*"],
                E,
            ),
            (
                "watch 'rm /etc/x'",
                &["watch 'rm /etc/x'", "rm /etc/x"],
                &["watch 'rm /etc/x'", "rm *"],
                &["/etc/*"],
                E,
            ),
        ]);
    }

    #[test]
    fn env_file_globs() {
        check(&[
            ("cat .env*", &["cat .env*"], &["cat *"], E, &[".env*"]),
            ("cat .en?", &["cat .en?"], &["cat *"], E, &[".en?"]),
            ("cat .e{n,}v", &["cat .e{n,}v"], &["cat *"], E, &[".e{n,}v"]),
            (
                "cat sub/.env.*",
                &["cat sub/.env.*"],
                &["cat *"],
                E,
                &["sub/.env.*"],
            ),
            ("cat *.env", &["cat *.env"], &["cat *"], E, &["*.env"]),
            // Could match `config.env`.
            ("cat config*", &["cat config*"], &["cat *"], E, &["config*"]),
            (
                "cat $'.en\\x76'",
                &["cat $'.en\\x76'"],
                &["cat *"],
                &["*"],
                &[".env"],
            ),
            // `.[` might match `..`, so the place is unknown (see `judge_glob`).
            (
                "cat .[e]nv",
                &["cat .[e]nv"],
                &["cat *"],
                &["*"],
                &[".[e]nv"],
            ),
            ("cat */.env", &["cat */.env"], &["cat *"], E, &["*/.env"]),
            ("cat < .env*", &["cat < .env*"], &["cat *"], E, &[".env*"]),
            (
                "cat ~/.env*",
                &["cat ~/.env*"],
                &["cat *"],
                &["/home/u/*"],
                &["/home/u/.env*"],
            ),
            (
                "cat /etc/app/.env.*",
                &["cat /etc/app/.env.*"],
                &["cat *"],
                &["/etc/app/*"],
                &["/etc/app/.env.*"],
            ),
        ]);
    }

    #[test]
    fn exact_always_patterns() {
        check(&[
            (
                "python3 -c 'print(1)'",
                &["python3 -c 'print(1)'"],
                &["python3 -c 'print(1)'"],
                E,
                E,
            ),
            (
                "python3.12 x.py",
                &["python3.12 x.py"],
                &["python3.12 x.py"],
                E,
                E,
            ),
            ("node -e 'x'", &["node -e 'x'"], &["node -e 'x'"], E, E),
            (
                "deno eval 'x'",
                &["deno eval 'x'"],
                &["deno eval 'x'"],
                E,
                E,
            ),
            (
                "perl -ne 'print' f",
                &["perl -ne 'print' f"],
                &["perl -ne 'print' f"],
                E,
                E,
            ),
            ("ruby x.rb", &["ruby x.rb"], &["ruby x.rb"], E, E),
            ("php x.php", &["php x.php"], &["php x.php"], E, E),
            ("lua x.lua", &["lua x.lua"], &["lua x.lua"], E, E),
            (
                "awk '{print}' f",
                &["awk '{print}' f"],
                &["awk '{print}' f"],
                E,
                E,
            ),
            (
                "gawk -f x.awk",
                &["gawk -f x.awk"],
                &["gawk -f x.awk"],
                E,
                E,
            ),
            ("sed -n 1p f", &["sed -n 1p f"], &["sed -n 1p f"], E, E),
            (
                "su -c ls root",
                &["su -c ls root", "ls"],
                &["su -c ls root", "ls *"],
                E,
                E,
            ),
            (
                "script -q out.log",
                &["script -q out.log"],
                &["script -q out.log"],
                E,
                E,
            ),
            (
                "stdbuf -oL make",
                &["stdbuf -oL make"],
                &["stdbuf -oL make"],
                E,
                E,
            ),
            ("setsid make", &["setsid make"], &["setsid make"], E, E),
            ("flock l make", &["flock l make"], &["flock l make"], E, E),
            ("busybox ls", &["busybox ls"], &["busybox ls"], E, E),
            (
                "parallel echo ::: a",
                &["parallel echo ::: a"],
                &["parallel echo ::: a"],
                E,
                E,
            ),
            (
                "git -c core.pager=cat log",
                &["git -c core.pager=cat log"],
                &["git -c core.pager=cat log"],
                E,
                E,
            ),
            ("bun -e 'x'", &["bun -e 'x'"], &["bun -e 'x'"], E, E),
            (
                ">/dev/null make",
                &[">/dev/null make"],
                &[">/dev/null make"],
                E,
                E,
            ),
            (
                "LANG=C sort f",
                &["LANG=C sort f"],
                &["LANG=C sort f"],
                E,
                E,
            ),
        ]);
        // The exact pattern matches its own command, which the prefix did not.
        let approved = scan_in("FOO=1 make build", "").always;
        assert!(wildcard::matches("FOO=1 make build", &approved[0]));
        assert!(!wildcard::matches("FOO=2 make build", &approved[0]));
    }

    /// Cases the fixes must leave as they were: the new rules stop where they should (no
    /// `*` for a script file, no read for a glob that cannot name an env file, no exact
    /// "always" for ordinary subcommands). These pass before and after the fixes.
    #[test]
    fn fixes_do_not_overreach() {
        check(&[
            ("echo a; cd /tmp", &["echo a"], &["echo *"], &["/tmp/*"], E),
            (
                "sudo -uroot rm /etc/x",
                &["sudo -uroot rm /etc/x"],
                &["sudo -uroot rm /etc/x"],
                &["/etc/*"],
                E,
            ),
            (
                "find /etc -name x",
                &["find /etc -name x"],
                &["find /etc -name x"],
                E,
                E,
            ),
            ("sh ./x.sh", &["sh ./x.sh"], &["sh ./x.sh"], E, E),
            (
                "bash < /etc/x.sh",
                &["bash < /etc/x.sh"],
                &["bash < /etc/x.sh"],
                &["/etc/*"],
                E,
            ),
            // Cannot match an env file: a wildcard never matches a leading dot.
            ("cat *.rs", &["cat *.rs"], &["cat *"], E, E),
            ("cat .e[!n]v", &["cat .e[!n]v"], &["cat *"], E, E),
            ("cat .envrc?", &["cat .envrc?"], &["cat *"], E, E),
            ("cat {a,b}.txt", &["cat {a,b}.txt"], &["cat *"], E, E),
            // Only known at run time: not reported as a read (see `env_read`).
            ("cat \"$f\"", &["cat \"$f\""], &["cat *"], &["*"], E),
            ("deno run x.ts", &["deno run x.ts"], &["deno run *"], E, E),
            ("git log -p", &["git log -p"], &["git log *"], E, E),
            ("bun run dev", &["bun run dev"], &["bun run dev *"], E, E),
        ]);
    }

    /// (command, [(pattern, its other spellings)]).
    type Spellings = (
        &'static str,
        &'static [(&'static str, &'static [&'static str])],
    );

    fn check_spellings(cases: &[Spellings]) {
        for &(command, want) in cases {
            let want: Vec<(String, Vec<String>)> = want
                .iter()
                .map(|&(pattern, forms)| (pattern.to_string(), owned(forms)))
                .collect();
            assert_eq!(scan_in(command, "").deny_spellings, want, "{command:?}");
        }
    }

    #[test]
    fn deny_spellings() {
        check_spellings(&[
            ("ls", &[]),
            ("rm -rf x", &[]),
            ("\\rm x", &[("\\rm x", &["rm x"])]),
            ("\"rm\" -rf x", &[("\"rm\" -rf x", &["rm -rf x"])]),
            ("/bin/rm /etc/x", &[("/bin/rm /etc/x", &["rm /etc/x"])]),
            (
                "sort -\"o\" /etc/x y",
                &[("sort -\"o\" /etc/x y", &["sort -o /etc/x y"])],
            ),
            ("echo \"a b\"", &[("echo \"a b\"", &["echo a b"])]),
            (
                "echo \"$HOME\"/x",
                &[("echo \"$HOME\"/x", &["echo $HOME/x"])],
            ),
            ("$'\\x72m' -rf x", &[("$'\\x72m' -rf x", &["rm -rf x"])]),
            (
                "find . -e''xec rm -rf {} \\;",
                &[(
                    "find . -e''xec rm -rf {} \\;",
                    &["find . -exec rm -rf {} ;", "rm -rf {}"],
                )],
            ),
            (
                "find . -exec rm {} \\; -exec cat {} +",
                &[(
                    "find . -exec rm {} \\; -exec cat {} +",
                    &["find . -exec rm {} ; -exec cat {} +", "rm {}", "cat {}"],
                )],
            ),
            // Redirections: leading ones dropped, later ones kept, one space after `>`.
            ("ls > x", &[]),
            ("ls >x", &[("ls >x", &["ls > x"])]),
            (
                "ls 2>/dev/null",
                &[("ls 2>/dev/null", &["ls 2> /dev/null"])],
            ),
            ("make 2>&1", &[]),
            ("FOO=1 ls >x", &[("FOO=1 ls >x", &["ls > x"])]),
            ("> f echo hi", &[("> f echo hi", &["echo hi"])]),
            ("echo > f hi", &[("echo > f hi", &["echo hi > f"])]),
            ("cd /tmp >f", &[("cd /tmp >f", &["cd /tmp > f"])]),
            // Wrapped commands.
            ("sudo -u root rm x", &[("sudo -u root rm x", &["rm x"])]),
            (
                "nice -n 5 rm /etc/x",
                &[("nice -n 5 rm /etc/x", &["rm /etc/x"])],
            ),
            (
                "timeout -s KILL 5 rm x",
                &[("timeout -s KILL 5 rm x", &["rm x"])],
            ),
            ("env -u V FOO=1 rm x", &[("env -u V FOO=1 rm x", &["rm x"])]),
            ("xargs rm -rf", &[("xargs rm -rf", &["rm -rf"])]),
            ("busybox rm x", &[("busybox rm x", &["rm x"])]),
            ("command -p rm x", &[("command -p rm x", &["rm x"])]),
            ("stdbuf -oL rm x", &[("stdbuf -oL rm x", &["rm x"])]),
            (
                "flock -w 5 /tmp/l rm x",
                &[("flock -w 5 /tmp/l rm x", &["rm x"])],
            ),
            ("exec -a n rm x", &[("exec -a n rm x", &["rm x"])]),
            ("sudo -- rm x", &[("sudo -- rm x", &["rm x"])]),
            ("sudo FOO=1 rm x", &[("sudo FOO=1 rm x", &["rm x"])]),
            (
                "sudo nice 'rm' x > /etc/y",
                &[(
                    "sudo nice 'rm' x > /etc/y",
                    &[
                        "sudo nice rm x > /etc/y",
                        "nice rm x > /etc/y",
                        "rm x > /etc/y",
                    ],
                )],
            ),
            (
                "exec rm x 2>/dev/null",
                &[(
                    "exec rm x 2>/dev/null",
                    &["exec rm x 2> /dev/null", "rm x 2> /dev/null"],
                )],
            ),
            // Runs nothing, or where the command starts is unclear: no inner spelling.
            ("command -v rm", &[]),
            (
                "env -S 'rm x' y",
                &[("env -S 'rm x' y", &["env -S rm x y"])],
            ),
            // Scripts give patterns of their own, with their own spellings.
            (
                "trap 'rm x' EXIT",
                &[("trap 'rm x' EXIT", &["trap rm x EXIT"])],
            ),
            (
                "bash -c '\\rm x'",
                &[
                    ("bash -c '\\rm x'", &["bash -c \\rm x"]),
                    ("\\rm x", &["rm x"]),
                ],
            ),
            ("\\rm a; \\rm a", &[("\\rm a", &["rm a"])]),
        ]);
    }

    #[test]
    fn wrapper_tables_agree() {
        for name in RUNNERS.iter().flat_map(|r| r.names).chain(SHELLS) {
            assert!(WRAPPERS.contains(name), "{name} runs commands");
        }
    }

    #[test]
    fn glob_env_file_candidates() {
        // (glob, could name an env file)
        let cases = [
            (".env*", true),
            ("*", true),
            ("*env", true),
            (".*", true),
            ("?env", true),
            (".e[mn]v", true),
            (".env.[lp]*", true),
            ("@(.env|x)", true),
            ("*.rs", false),
            ("*.env.x", false),
            ("x*.txt", false),
            (".e[!n]v", false),
            ("[ab].txt", false),
            ("file{1..3}.txt", false),
            (".e{x,y}v", false),
            ("{.e,.f}nv", true),
        ];
        for (glob, want) in cases {
            let at = glob.find(['*', '?', '[', '{']).unwrap_or(0);
            assert_eq!(glob_may_name_env_file(glob, at), want, "{glob}");
        }
    }

    mod real_files {
        use super::super::*;
        use std::os::unix::fs::symlink;

        struct Fixture {
            _dir: tempfile::TempDir,
            root: PathBuf,
        }

        /// `root/wt` (the worktree, with `sub/`), `root/out` (outside), and links
        /// `wt/link → out`, `wt/inlink → wt/sub`, `root/alias → wt`.
        fn fixture() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let root = std::fs::canonicalize(dir.path()).unwrap();
            std::fs::create_dir_all(root.join("wt/sub")).unwrap();
            std::fs::create_dir_all(root.join("out")).unwrap();
            symlink(root.join("out"), root.join("wt/link")).unwrap();
            symlink(root.join("wt/sub"), root.join("wt/inlink")).unwrap();
            symlink(root.join("wt"), root.join("alias")).unwrap();
            Fixture { _dir: dir, root }
        }

        fn run(fx: &Fixture, worktree: &str, command: &str) -> BashScan {
            let wt = fx.root.join(worktree);
            let cx = ScanContext {
                cwd: &wt,
                worktree: &wt,
                home: None,
            };
            scan(command, &cx)
        }

        fn at(fx: &Fixture, rel: &str) -> String {
            format!("{}/{rel}", fx.root.display())
        }

        #[test]
        fn link_pointing_outside_is_outside() {
            let fx = fixture();
            assert_eq!(run(&fx, "wt", "cat link/x").external, [at(&fx, "out/*")]);
            let scan = run(&fx, "wt", "cat link/.env");
            assert_eq!(scan.external, [at(&fx, "out/*")]);
            assert_eq!(scan.reads, [at(&fx, "out/.env")]);
        }

        #[test]
        fn link_pointing_inside_is_inside() {
            let fx = fixture();
            assert_eq!(
                run(&fx, "wt", "cat inlink/x").external,
                Vec::<String>::new()
            );
            assert_eq!(run(&fx, "wt", "cat inlink/.env").reads, ["sub/.env"]);
        }

        #[test]
        fn worktree_reached_through_a_link() {
            let fx = fixture();
            let scan = run(&fx, "alias", "cat x sub/.env");
            assert_eq!(scan.external, Vec::<String>::new());
            assert_eq!(scan.reads, ["sub/.env"]);
            // `..` from the physical worktree is the fixture root.
            assert_eq!(
                run(&fx, "alias", "cat ../out/y").external,
                [at(&fx, "out/*")]
            );
        }

        #[test]
        fn existing_directory_stands_for_itself() {
            let fx = fixture();
            let out = at(&fx, "out");
            assert_eq!(
                run(&fx, "wt", &format!("rm -r {out}")).external,
                [at(&fx, "out/*")]
            );
            let cd = run(&fx, "wt", &format!("cd {out} && rm y"));
            assert_eq!(cd.external, [at(&fx, "out/*")]);
            assert_eq!(cd.patterns, ["rm y"]);
        }

        #[test]
        fn missing_file_under_outside_link() {
            let fx = fixture();
            let scan = run(&fx, "wt", "touch link/newdir/file");
            assert_eq!(scan.external, [at(&fx, "out/newdir/*")]);
        }

        #[test]
        fn dotdot_after_a_link_is_physical() {
            let fx = fixture();
            // The kernel resolves `link/..` to the parent of `out`, i.e. the fixture root.
            let root = format!("{}/*", fx.root.display());
            assert_eq!(run(&fx, "wt", "cat link/../x").external, [root]);
        }

        #[test]
        fn cd_through_a_link() {
            let fx = fixture();
            let scan = run(&fx, "wt", "cd link && rm y");
            assert_eq!(scan.external, [at(&fx, "out/*")]);
        }
    }
}
