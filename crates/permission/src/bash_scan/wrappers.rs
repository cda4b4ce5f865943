//! Wrapper tables: the commands that run other commands (`sudo`, `env`, `timeout`, `xargs`,
//! `find -exec`, shells, `eval`, `trap`, `source`), each with its options, and how the
//! command it runs is peeled off its arguments.

use super::*;

/// A runner with no options, for struct update syntax.
pub(super) const BARE: Runner = Runner {
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
pub(super) const RUNNERS: &[Runner] = &[
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

pub(super) fn runner(name: &str) -> Option<&'static Runner> {
    RUNNERS.iter().find(|r| r.names.contains(&name))
}

/// What a command that runs others runs (`None` when it runs no other command).
pub(super) fn peel<'n, 't>(call: Call<'n, 't>, src: &str) -> Option<Peeled<'n, 't>> {
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
pub(super) fn peel_runner<'n, 't>(
    runner: &Runner,
    args: &'n [Node<'t>],
    src: &str,
) -> Peeled<'n, 't> {
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
pub(super) fn read_option(
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
pub(super) fn is_assignment(text: &str) -> bool {
    text.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// A shell's arguments: `-c STRING` (the first operand after the options, `--` skipped), a
/// script file, or, with neither (or with `-s`), a script on stdin.
pub(super) fn peel_shell<'n, 't>(args: &'n [Node<'t>], src: &str) -> Peeled<'n, 't> {
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
pub(super) fn peel_trap<'n, 't>(args: &'n [Node<'t>], src: &str) -> Peeled<'n, 't> {
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
pub(super) fn peel_source<'n, 't>(args: &'n [Node<'t>], src: &str) -> Peeled<'n, 't> {
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
pub(super) fn peel_find<'n, 't>(args: &'n [Node<'t>], src: &str) -> Peeled<'n, 't> {
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
pub(super) fn find_starts(args: &[Node], src: &str) -> Vec<Option<Word>> {
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
pub(super) fn eval_script(args: &[Node], src: &str) -> Option<String> {
    let words: Option<Vec<String>> = args
        .iter()
        .map(|&a| static_word(a, src).map(|w| w.text))
        .collect();
    Some(words?.join(" "))
}
