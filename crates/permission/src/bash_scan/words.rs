//! Words: what a node of the syntax tree says once quotes, escapes and ANSI-C strings are
//! read, how a call is spelled for a rule, and where a command's stdin comes from.

use super::*;

/// Where `node`'s stdin comes from: its own input redirection, else the nearest enclosing
/// statement's, else a pipe if it (or a statement around it) is not first in a pipeline.
pub(super) fn stdin_of(node: Node, src: &str) -> Stdin {
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
pub(super) fn input_redirect(node: Node, src: &str) -> Option<Stdin> {
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
pub(super) fn heredoc_text(node: Node, src: &str) -> Option<String> {
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
pub(super) fn classify(node: Node, src: &str, dashdash: &mut bool, plus_is_flag: bool) -> Arg {
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
pub(super) fn static_word(node: Node, src: &str) -> Option<Word> {
    let mut dynamic = false;
    each_node(node, |n, _| dynamic |= DYNAMIC_KINDS.contains(&n.kind()));
    if dynamic {
        return None;
    }
    unquote(node_text(node, src))
}

/// A word whose only run-time parts are `$'…'` strings, decoded (`$'.en\x76'` → `.env`);
/// glob characters in it are taken literally.
pub(super) fn decoded_word(node: Node, src: &str) -> Option<Word> {
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
pub(super) fn unquote(raw: &str) -> Option<Word> {
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
pub(super) fn normal_word(node: Node, src: &str) -> String {
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
pub(super) fn ansi_c(raw: &str) -> String {
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
pub(super) fn digits(
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
pub(super) fn normal_redirect(node: Node, src: &str) -> String {
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
pub(super) fn normal_call(call: Call, tail: &[String], src: &str) -> String {
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
pub(super) fn exact_always(name: Option<&str>, tokens: &[Node], src: &str) -> bool {
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
pub(super) fn without_version(name: &str) -> &str {
    name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.')
}

/// Whether an assignment node assigns `HOME`, `CDPATH` or `OLDPWD` (`HOME[0]=` included).
pub(super) fn assigns_cwd_var(node: Node, src: &str) -> bool {
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
pub(super) fn names_cwd_var(text: &str) -> bool {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    let (name, rest) = text.split_at(end);
    CWD_VARS.contains(&name) && (rest.is_empty() || rest.starts_with(['=', '+', '[']))
}

/// `(( … ))` as a statement, as opposed to a `{ …; }` group.
pub(super) fn is_arithmetic(node: Node) -> bool {
    node.child(0).is_some_and(|c| c.kind() == "((")
}

/// The text the user approves: the statement, with its redirections when it has them.
pub(super) fn pattern_text<'s>(node: Node, src: &'s str) -> &'s str {
    let end = redirect_owner(node).map_or(node.end_byte(), |owner| owner.end_byte());
    src.get(node.start_byte()..end).unwrap_or("").trim()
}

/// The statement a `redirected_statement`'s redirections apply to. tree-sitter-bash hangs
/// redirections written after a list or pipeline on the whole of it (`a && b > f`,
/// `a | b 2>&1`), but bash applies them to its last element only.
pub(super) fn redirect_target(statement: Node) -> Option<Node> {
    let mut target = statement.child_by_field_name("body")?;
    while matches!(target.kind(), "list" | "pipeline") {
        target = last_statement(target)?;
    }
    Some(target)
}

/// The `redirected_statement` whose redirections apply to `node`, if any (see
/// [`redirect_target`]).
pub(super) fn redirect_owner(node: Node) -> Option<Node> {
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

pub(super) fn last_statement(node: Node) -> Option<Node> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor)
        .filter(|c| c.kind() != "comment")
        .last()
}

pub(super) fn node_text<'s>(node: Node, src: &'s str) -> &'s str {
    src.get(node.byte_range()).unwrap_or("")
}

pub(super) fn basename(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}
