//! The learned rules as a runner TOML config: `[permission]` with the catch-all deny, then
//! one table per permission, each rule commented with the calls it covers.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::narrow::Table;
use crate::trail::Observed;

/// A TOML basic string: quotes, backslashes and control characters escaped.
pub fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn calls(n: u64) -> String {
    match n {
        1 => "1 call".into(),
        n => format!("{n} calls"),
    }
}

/// A comment's text on one line: control characters shown escaped.
fn comment_safe(s: &str) -> String {
    let q = quoted(s);
    q[1..q.len() - 1].to_string()
}

/// The whole file.
pub fn toml(
    table: &Table,
    denied: &BTreeMap<String, BTreeMap<String, u64>>,
    unsayable: &BTreeMap<String, BTreeMap<String, u64>>,
    observed: &Observed,
    conflicts: &[String],
) -> String {
    let mut out = String::new();
    let names: Vec<String> = observed
        .trails
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let _ = writeln!(
        out,
        "# Learned by `runner permission learn` from {}: {} allowed, {} denied.",
        names.join(", "),
        calls(observed.allowed_calls()),
        calls(observed.denied_calls())
    );
    out.push_str(
        "# Each rule allows one subject the trails show allowed; the first rule denies\n\
         # everything else, what they show denied included, and what they show allowed but no\n\
         # pattern can say literally (a `*`, `?` or leading `~`). Use it with\n\
         # `runner run --config FILE`.\n",
    );
    for conflict in conflicts {
        let _ = writeln!(out, "# NOT REPRODUCED: {}", comment_safe(conflict));
    }
    out.push_str("\n[permission]\n\"*\" = \"deny\" # everything the trails do not show allowed\n");
    let permissions: std::collections::BTreeSet<&String> = table
        .keys()
        .chain(denied.keys())
        .chain(unsayable.keys())
        .collect();
    for permission in permissions {
        let _ = writeln!(out, "\n[permission.{}]", quoted(permission));
        for e in table.get(permission).into_iter().flatten() {
            let why = match &e.note {
                Some(note) if e.calls == 0 => comment_safe(note),
                Some(note) => format!("{}; {}", calls(e.calls), comment_safe(note)),
                None => calls(e.calls),
            };
            let _ = writeln!(
                out,
                "{} = {} # {why}",
                quoted(&e.pattern),
                quoted(e.action.as_str())
            );
        }
        for (subject, n) in unsayable.get(permission).into_iter().flatten() {
            let _ = writeln!(
                out,
                "# not learned (the rule language cannot say it literally, {}): {}",
                calls(*n),
                comment_safe(subject)
            );
        }
        for (subject, n) in denied.get(permission).into_iter().flatten() {
            let _ = writeln!(
                out,
                "# denied in the trails ({}), and here: {}",
                calls(*n),
                comment_safe(subject)
            );
        }
    }
    out
}
