//! What a bash command asks permission for, read from its text before it runs.
//!
//! The agent hands us one string. Before anything executes, the permission layer needs to
//! know which `bash` rules to consult, what to remember if the user answers "always", which
//! directories outside the worktree the command may touch (`external_directory`), and which
//! `.env`-style files it reads (`read`). This module parses the string with tree-sitter-bash
//! and answers those four questions statically, leaning towards asking when it cannot tell.
//!
//! Static analysis of shell is necessarily approximate: variables, substitutions and globs are
//! only known at run time. Wherever the answer depends on run time we say "possibly anywhere"
//! (`*`), and the sandbox the command eventually runs in still bounds what it can do; this
//! scan decides what to *ask*, it is not the last line of defence.

use std::collections::HashSet;
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
    /// ones included, since `echo $(rm -rf x)` runs `rm` as surely as `echo`.
    pub patterns: Vec<String>,
    /// What an "always" answer remembers: OpenCode's `prefix *`, except that commands able to
    /// run arbitrary other commands get their exact text, so approval cannot widen.
    pub always: Vec<String>,
    /// `external_directory` patterns `<dir>/*`, or `*` when the place is only known at run
    /// time: the worktree is what the user agreed to let the agent touch.
    pub external: Vec<String>,
    /// Env files read, for the `read` rules that guard secrets: worktree-relative (`a/.env`)
    /// when inside, absolute when outside, the form those rules are written against.
    pub reads: Vec<String>,
}

/// Scans `command` and reports what it needs permission for.
///
/// Text tree-sitter cannot parse cleanly yields one exact pattern for the whole line (and an
/// exact "always"), because a prefix of something we could not read may approve more than the
/// user saw; the sandbox still bounds what such a command does.
pub fn scan(command: &str, cx: &ScanContext) -> BashScan {
    let text = command.trim();
    if text.is_empty() {
        return BashScan::default();
    }
    let mut scanner = Scanner::new(cx);
    if scanner.script(text, 0) {
        scanner.finish()
    } else {
        unreadable(text)
    }
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
/// `external_directory` check on its target.
const CD_COMMANDS: &[&str] = &["cd", "pushd", "popd", "chdir"];

/// Commands that run other commands (or arbitrary code). Their "always" pattern is the exact
/// command line rather than OpenCode's `prefix *`: approving `bash -c 'ls'` forever must not
/// approve `bash -c 'rm -rf /'`. This departs from OpenCode on purpose.
const WRAPPERS: &[&str] = &[
    "sudo", "doas", "env", "xargs", "timeout", "nice", "nohup", "command", "exec", "eval", "bash",
    "sh", "zsh", "dash", "time", "watch", "strace", "find", "builtin", "coproc",
];

/// Wrappers whose wrapped command is easy to find (`sudo rm x` → `rm x`), so that the path
/// checks of the wrapped command still apply.
const UNWRAPPABLE: &[&str] = &[
    "sudo", "doas", "nohup", "time", "command", "exec", "nice", "env", "timeout", "builtin",
];

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

/// Syntax nested deeper than this (counting `bash -c` strings inside their command) is
/// treated as unreadable: the walk recurses, and nothing legitimate nests this deep, so
/// refusing is cheaper than risking the stack.
const MAX_DEPTH: usize = 256;
/// How many `bash -c '…'` / `eval '…'` strings inside each other are scanned; beyond that
/// the wrapper's exact pattern is all the user approves.
const MAX_NESTING: usize = 3;
/// More possible directories than this and we stop tracking: every relative path becomes
/// "anywhere". Each relative `cd` can double the set, so it needs a bound.
const MAX_DIRS: usize = 32;
/// Passes over a loop body (or the function bodies) before giving up on a fixed point.
const MAX_ROUNDS: usize = 3;

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
        let text = self.text[at..].to_string();
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
        }
    }

    fn finish(self) -> BashScan {
        BashScan {
            patterns: self.patterns.items,
            always: self.always.items,
            external: self.external.items,
            reads: self.reads.items,
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
        match node.kind() {
            "command" => self.command(node, src, level),
            "file_redirect" => self.redirect(node, src),
            "for_statement" | "c_style_for_statement" | "while_statement" => {
                return self.walk_loop(node, src, level);
            }
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

    fn command(&mut self, node: Node, src: &str, level: usize) {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.named_children(&mut cursor).collect();
        let name_node = children.iter().find(|c| c.kind() == "command_name");
        let name = name_node.and_then(|&n| static_word(n, src)).map(|w| w.text);
        let args: Vec<Node> = children.into_iter().filter(|c| is_argument(c)).collect();
        if let Some(cd) = name.as_deref().filter(|n| CD_COMMANDS.contains(n)) {
            self.change_dir(cd, &args, src);
        } else {
            self.ask(node, name.as_deref(), src);
            match unwrap(name.clone(), &args, src) {
                Some((inner, rest)) if PATH_COMMANDS.contains(&basename(&inner)) => {
                    self.path_args(&inner, rest, src);
                }
                // A name known only at run time may well be `rm`.
                _ if name.is_none() => self.path_args("", &args, src),
                _ => {}
            }
            self.nested_script(name.as_deref(), &args, src, level);
        }
        self.env_reads(&args, src);
    }

    /// Records the command's `bash` pattern and its "always" pattern.
    fn ask(&mut self, node: Node, name: Option<&str>, src: &str) {
        let text = pattern_text(node, src);
        let mut cursor = node.walk();
        let tokens: Vec<&str> = node
            .named_children(&mut cursor)
            .filter(|c| {
                matches!(
                    c.kind(),
                    "command_name" | "word" | "string" | "raw_string" | "concatenation"
                )
            })
            .map(|c| node_text(c, src))
            .collect();
        // A name only known at run time could be anything, and a wrapper runs anything: for
        // those, "always" approves exactly this line.
        let exact = match name {
            None => true,
            Some(n) => WRAPPERS.contains(&basename(n)) || tokens.is_empty(),
        };
        self.patterns.push(text);
        if exact {
            self.always.push(text);
        } else {
            self.always.push(&format!("{} *", arity::prefix(&tokens)));
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
        let Some(word) = word.and_then(|w| self.expand_tilde(w)) else {
            self.anywhere();
            return self.set_unknown();
        };
        if let Some(at) = word.glob {
            self.judge_glob(&word.text, at);
            return self.set_unknown();
        }
        let Some(places) = self.candidates(&word.text) else {
            return self.anywhere();
        };
        for place in places {
            // bash's `cd` is logical (`link/..` is where you started) while the kernel is
            // physical; the shell may end up in either, so both count.
            let real = resolve(&place);
            let logical = lexical(&place);
            for dir in [real, logical] {
                self.judge_place(&dir, true);
                self.add_dir(dir);
            }
        }
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

    /// Applies tilde expansion; `None` when it cannot be done statically (`~user`, no home).
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
            if let Arg::Value(Some(word)) = classify(arg, src, &mut dashdash, false) {
                self.env_read(word);
            }
        }
    }

    fn env_read(&mut self, word: Word) {
        if word.glob.is_some() || !is_env_file(&word.text) {
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

    /// `bash -c STR`, `sh -c STR`, `eval STR…` with a static string: the string is a script
    /// too, so its commands are asked about as well (the wrapper keeps its exact pattern).
    fn nested_script(&mut self, name: Option<&str>, args: &[Node], src: &str, level: usize) {
        let Some(name) = name.map(basename) else {
            return;
        };
        let script = match name {
            "bash" | "sh" | "zsh" | "dash" => shell_script(args, src),
            "eval" => eval_script(args, src),
            _ => None,
        };
        let Some(script) = script else {
            return;
        };
        let script = script.trim();
        if script.is_empty() || self.nesting >= MAX_NESTING {
            return;
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
}

/// The text after `-c` (or `-ec`, `-lc`, …) when it is static.
fn shell_script(args: &[Node], src: &str) -> Option<String> {
    let words: Vec<Option<Word>> = args.iter().map(|&a| static_word(a, src)).collect();
    let flag = words.iter().position(|w| {
        w.as_ref().is_some_and(|w| {
            w.text.starts_with('-') && !w.text.starts_with("--") && w.text.contains('c')
        })
    })?;
    words.get(flag + 1)?.as_ref().map(|w| w.text.clone())
}

/// `eval` joins its arguments with spaces and runs the result.
fn eval_script(args: &[Node], src: &str) -> Option<String> {
    let words: Option<Vec<String>> = args
        .iter()
        .map(|&a| static_word(a, src).map(|w| w.text))
        .collect();
    Some(words?.join(" "))
}

/// Finds the command a wrapper runs (`sudo -E rm x` → `rm`, `x`), so its path arguments are
/// still checked. Wrapper options that take a value defeat this; it only ever adds checks.
fn unwrap<'n, 't>(
    name: Option<String>,
    args: &'n [Node<'t>],
    src: &str,
) -> Option<(String, &'n [Node<'t>])> {
    let mut name = name?;
    let mut rest = args;
    while UNWRAPPABLE.contains(&basename(&name)) {
        let is_env = basename(&name) == "env";
        let mut needs_duration = basename(&name) == "timeout";
        let mut next = None;
        for (i, &arg) in rest.iter().enumerate() {
            let word = static_word(arg, src)?;
            if word.text.starts_with('-') || (is_env && word.text.contains('=')) {
                continue;
            }
            if needs_duration {
                needs_duration = false;
                continue;
            }
            next = Some((word.text, i));
            break;
        }
        let (inner, i) = next?;
        name = inner;
        rest = &rest[i + 1..];
    }
    Some((name, rest))
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

/// Arguments are everything but the name, assignments and redirections.
fn is_argument(node: &Node) -> bool {
    !matches!(
        node.kind(),
        "command_name"
            | "variable_assignment"
            | "file_redirect"
            | "herestring_redirect"
            | "heredoc_redirect"
            | "comment"
    )
}

/// The text the user approves: the command, with its redirections when it has them.
fn pattern_text<'s>(node: Node, src: &'s str) -> &'s str {
    let shown = match node.parent() {
        Some(parent) if parent.kind() == "redirected_statement" => parent,
        _ => node,
    };
    node_text(shown, src).trim()
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
            let want = BashScan {
                patterns: owned(patterns),
                always: owned(always),
                external: owned(external),
                reads: owned(reads),
            };
            assert_eq!(scan_in(command, cwd), want, "{command:?} from {cwd:?}");
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
                &["python -m *"],
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
                &["make build *"],
                E,
                E,
            ),
            (
                "A=1 B=$(x) git push",
                &["A=1 B=$(x) git push", "x"],
                &["git push *", "x *"],
                E,
                E,
            ),
            ("\"ls\" -la", &["\"ls\" -la"], &["\"ls\" *"], E, E),
            ("\\rm x", &["\\rm x"], &["\\rm *"], E, E),
            ("sleep 5", &["sleep 5"], &["sleep *"], E, E),
            ("ls &", &["ls"], &["ls *"], E, E),
            ("ls # rm -rf /", &["ls"], &["ls *"], E, E),
            ("export A=1", E, E, E, E),
            ("x=$(rm /etc/x)", &["rm /etc/x"], &["rm *"], &["/etc/*"], E),
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
            ("> /etc/x", E, E, &["/etc/*"], E),
            ("> f echo hi", &["> f echo hi"], &["echo *"], E, E),
            (
                "{ echo a; echo b; } > /etc/x",
                &["echo a", "echo b"],
                &["echo *"],
                &["/etc/*"],
                E,
            ),
            (
                "while read l; do echo $l; done < /etc/hosts",
                &["read l", "echo $l"],
                &["read *", "echo *"],
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
            ("rm *", &["rm *"], &["rm *"], E, E),
            ("rm *.o sub/*.tmp", &["rm *.o sub/*.tmp"], &["rm *"], E, E),
            (
                "rm /etc/*.conf",
                &["rm /etc/*.conf"],
                &["rm *"],
                &["/etc/*"],
                E,
            ),
            ("rm ../*", &["rm ../*"], &["rm *"], &["/work/*"], E),
            ("rm /et?/passwd", &["rm /et?/passwd"], &["rm *"], &["/*"], E),
            (
                "rm sub/*/../../../x",
                &["rm sub/*/../../../x"],
                &["rm *"],
                &["*"],
                E,
            ),
            // `.*` matches `..` in older bash.
            ("rm -rf .*", &["rm -rf .*"], &["rm *"], &["*"], E),
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
            ("cd sub* && rm x", &["rm x"], &["rm *"], &["*"], E),
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
            ("cd /etc", E, E, &["/etc/*"], E),
            ("cd", E, E, &["/home/u/*"], E),
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
            ("chdir /tmp", E, E, &["/tmp/*"], E),
            ("popd", E, E, E, E),
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
            ("cd -P /tmp", E, E, &["/tmp/*"], E),
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
                &["read l", "echo $l"],
                &["read *", "echo *"],
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
                E,
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
                &["watch -n 1 ls"],
                &["watch -n 1 ls"],
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
                E,
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
                E,
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
