//! The framing every local peer's output goes through (`runner-framing`): LSP messages from
//! a language server, lines from an MCP stdio server, hooks and user tools.

use std::time::Duration;

use runner_framing::{Limits, line_bound_from_slice, lines_from_slice, lsp_messages_from_slice};

use super::{MIB, Target};

pub const LSP: Target = Target {
    name: "lsp_framing",
    about: "LSP Content-Length messages; each body read is within the limit and writes back to the same messages",
    run: lsp,
    seeds: lsp_seeds,
    dictionary: &[
        b"Content-Length: ",
        b"content-length:",
        b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n",
        b"\r\n\r\n",
        b"\r\n",
        b"\n",
    ],
    max_len: 256 * 1024,
    memory: 4 * MIB,
    time: Duration::from_secs(2),
};

pub const LINES: Target = Target {
    name: "line_framing",
    about: "line reading (MCP stdio, hooks, user tools); lines are within the limit, what passes is the input's own prefix, and how the bytes are cut into reads changes nothing",
    run: lines,
    seeds: line_seeds,
    dictionary: &[
        b"\n",
        b"\r\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n",
    ],
    max_len: 256 * 1024,
    // The reader holds one line at most (`LINE`), but this target keeps every line it read
    // to compare them with the input: up to one small allocation and one result per input
    // byte. A budget of 4 MiB was spent by that bookkeeping alone on 72 KiB of newlines
    // (`regressions/line_framing/many-empty-lines`), not by the reader.
    memory: 32 * MIB,
    time: Duration::from_secs(2),
};

/// Small limits, so that the fuzzer's inputs reach them.
const SMALL: Limits = Limits {
    header_line: 256,
    body: 64 * 1024,
};
const LINE: usize = 4096;

fn lsp(data: &[u8]) {
    let read = lsp_messages_from_slice(data, SMALL);
    let bodies: Vec<Vec<u8>> = read.into_iter().filter_map(Result::ok).collect();
    let mut again = Vec::new();
    for body in &bodies {
        assert!(
            body.len() <= SMALL.body,
            "a body of {} bytes passed the limit",
            body.len()
        );
        again.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        again.extend_from_slice(body);
    }
    let back: Vec<Vec<u8>> = lsp_messages_from_slice(&again, SMALL)
        .into_iter()
        .map(|r| r.expect("messages written back read"))
        .collect();
    assert_eq!(
        back, bodies,
        "messages changed on their way through write and read"
    );
}

fn lines(data: &[u8]) {
    let mut at = 0;
    for line in lines_from_slice(data, LINE) {
        let Ok(line) = line else { break };
        assert!(
            line.len() <= LINE,
            "a line of {} bytes passed the limit",
            line.len()
        );
        assert_eq!(
            &data[at..at + line.len()],
            &line[..],
            "a line that is not the input's"
        );
        at += line.len();
    }
    let whole = line_bound_from_slice(data, LINE, data.len().max(1));
    for chunk in [1, 3, 64, 4097] {
        let cut = line_bound_from_slice(data, LINE, chunk);
        assert_eq!(
            cut.is_ok(),
            whole.is_ok(),
            "reads of {chunk} bytes decided otherwise"
        );
        if let Ok(passed) = &cut {
            assert!(
                data.starts_with(passed),
                "what passed is not the input's prefix"
            );
            assert_eq!(Some(passed), whole.as_ref().ok());
        }
    }
}

fn lsp_seeds() -> Vec<Vec<u8>> {
    let body = br#"{"jsonrpc":"2.0","id":1,"result":{"capabilities":{}}}"#;
    let mut one = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    one.extend_from_slice(body);
    let mut two = one.clone();
    two.extend_from_slice(
        b"Content-Type: application/vscode-jsonrpc\r\ncontent-length: 2\r\n\r\n{}",
    );
    vec![one, two]
}

fn line_seeds() -> Vec<Vec<u8>> {
    vec![
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n"
            .to_vec(),
        b"no newline at the end".to_vec(),
        b"\r\n\n\n".to_vec(),
    ]
}
