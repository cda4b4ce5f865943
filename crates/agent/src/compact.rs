//! Keeping the conversation inside the model's context window. Past the threshold, old
//! tool output goes first (it is the bulk, and the model can re-run a tool); if that is not
//! enough, the model writes a summary of the work so far, which replaces the older turns.

use runner_llm::{LlmError, Message, Provider, Request, ToolSpec, Turn};

/// The most recent tool output kept whole when pruning, in characters (about 40k tokens).
pub const PROTECT_CHARS: usize = 160_000;
pub const PRUNED: &str =
    "[This tool output was removed to save context. Run the tool again if you need it.]";

/// What an image weighs in the estimate, in characters (about 1.5k tokens).
const IMAGE_CHARS: usize = 6_000;

/// Characters per token, for estimates between the provider's exact counts.
pub const CHARS_PER_TOKEN: u64 = 4;

/// Characters the conversation holds, for estimating what pruning saved.
pub fn chars(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| match m {
            Message::User { text } => text.len(),
            Message::Assistant { text, tool_calls } => {
                text.len()
                    + tool_calls
                        .iter()
                        .map(|c| c.arguments.len() + c.name.len())
                        .sum::<usize>()
            }
            Message::Tool {
                content, images, ..
            // An image costs the model about the same whatever its size in base64.
            } => content.len() + images.len() * IMAGE_CHARS,
        })
        .sum()
}

/// Replaces tool outputs older than the newest `protect` characters of them with a note.
/// Returns how many were pruned.
pub fn prune(messages: &mut [Message], protect: usize) -> usize {
    let mut seen = 0;
    let mut pruned = 0;
    for m in messages.iter_mut().rev() {
        if let Message::Tool {
            content, images, ..
        } = m
        {
            if content == PRUNED {
                continue;
            }
            seen += content.len();
            if seen > protect {
                *content = PRUNED.to_string();
                images.clear();
                pruned += 1;
            }
        }
    }
    pruned
}

const INSTRUCTION: &str = "Stop working on the task for a moment. The conversation is about to be shortened, and your summary will replace everything above. Write a summary another engineer could continue from without seeing this conversation: the task as the user gave it, what has been done (files changed and how), what was found out (important paths, commands, errors and their causes), what is still left to do, and anything the user asked for that must not be forgotten. Do not call tools.";

/// Enough for a thorough summary, and small enough to leave room in a full window.
const SUMMARY_TOKENS: u32 = 8_192;

/// The model writes the summary. The same system prompt and tools are offered (a history
/// holding tool calls needs its tools declared, and the prompt cache stays warm), but the
/// instruction says not to call them. The whole turn comes back, so that its usage is
/// counted and the session records it for replay.
pub async fn summarize(
    provider: &dyn Provider,
    model: &str,
    system: &str,
    messages: &[Message],
    tools: &[ToolSpec],
    max_tokens: Option<u32>,
) -> Result<Turn, LlmError> {
    let mut with_ask = messages.to_vec();
    with_ask.push(Message::User {
        text: INSTRUCTION.to_string(),
    });
    let request = Request {
        model,
        system,
        messages: &with_ask,
        tools,
        max_tokens: Some(max_tokens.unwrap_or(SUMMARY_TOKENS).min(SUMMARY_TOKENS)),
    };
    provider.turn(&request, &|_| {}).await
}

/// The message a compacted conversation restarts from.
pub fn summary_message(summary: &str) -> Message {
    Message::User {
        text: format!(
            "The earlier part of this session was compacted to save context. Summary of it:\n\n{}\n\nContinue the task from where the summary leaves off.",
            summary.trim()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(n: usize) -> Message {
        Message::Tool {
            call_id: n.to_string(),
            name: "read".into(),
            content: "x".repeat(100),
            is_error: false,
            images: vec![],
        }
    }

    #[test]
    fn pruning_keeps_the_newest_output() {
        let mut m = vec![
            Message::User { text: "go".into() },
            tool(1),
            tool(2),
            tool(3),
        ];
        assert_eq!(prune(&mut m, 250), 1);
        assert!(matches!(&m[1], Message::Tool { content, .. } if content == PRUNED));
        assert!(matches!(&m[3], Message::Tool { content, .. } if content.len() == 100));
        assert_eq!(
            prune(&mut m, 250),
            0,
            "already pruned output is not counted again"
        );
    }
}
