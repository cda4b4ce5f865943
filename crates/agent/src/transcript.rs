//! A session file as a readable transcript (`runner sessions show`, the eval report).

use super::record::{Loaded, Record};
use runner_llm::Message;

/// The transcript: who said what, each tool call with its result, the end.
pub fn transcript(l: &Loaded) -> String {
    let mut out = String::new();
    for r in &l.records {
        match r {
            Record::Session {
                session,
                parent,
                model,
                agent,
                sandbox,
                root,
                ..
            } => {
                let who = match parent {
                    Some(p) => format!("subagent {agent} {session} (of {p})"),
                    None => format!("session {session}"),
                };
                out.push_str(&format!(
                    "=== {who} · {model} · sandbox {sandbox} · {root}\n"
                ));
            }
            Record::Message {
                message: Message::User { text },
                ..
            } => {
                out.push_str(&format!("\n[user]\n{text}\n"));
            }
            Record::Message {
                message:
                    Message::Tool {
                        name,
                        content,
                        is_error,
                        ..
                    },
                ..
            } => {
                let tag = if *is_error { "error" } else { "result" };
                out.push_str(&format!("[{name} {tag}]\n{}\n", first_lines(content, 20)));
            }
            Record::Message { .. } => {}
            Record::Agent { agent, .. } => {
                out.push_str(&format!("\n=== now the {agent} agent\n"));
            }
            // Shown below, with its Compaction record.
            Record::Turn { summary: true, .. } => {}
            Record::Turn { turn, step, .. } => {
                out.push_str(&format!("\n[assistant, step {step}]\n"));
                if !turn.text.is_empty() {
                    out.push_str(&format!("{}\n", turn.text));
                }
                for c in &turn.tool_calls {
                    out.push_str(&format!("→ {} {}\n", c.name, c.arguments));
                }
            }
            Record::Permission {
                permission,
                patterns,
                decision,
                ..
            } => {
                out.push_str(&format!(
                    "[permission] {permission} {}: {decision}\n",
                    patterns.join(", ")
                ));
            }
            Record::Compaction { summary, .. } => {
                out.push_str(&format!("\n[compacted; summary]\n{summary}\n"));
            }
            Record::Network { connection, .. } => {
                out.push_str(&format!("[network] {}\n", connection.line()));
            }
            Record::End {
                reason,
                steps,
                usage,
                duration_ms,
                message,
                ..
            } => {
                out.push_str(&format!(
                    "\n=== end: {reason}{} · {steps} steps · {} in / {} out / {} cached tokens · {duration_ms} ms\n",
                    message.as_ref().map(|m| format!(" ({m})")).unwrap_or_default(),
                    usage.input + usage.cache_write,
                    usage.output,
                    usage.cache_read
                ));
            }
            Record::Tool { .. } => {}
        }
    }
    out
}

/// The first `n` lines of `s`, and how many more there were.
fn first_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    if lines.len() <= n {
        s.to_string()
    } else {
        format!(
            "{}\n… ({} more lines)",
            lines[..n].join("\n"),
            lines.len() - n
        )
    }
}
