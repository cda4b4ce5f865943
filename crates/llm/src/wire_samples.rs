//! A conversation with every kind of message a request carries (and the awkward ones: blank
//! text, garbled and empty call arguments, images, errors, escapes), for the tests that hold
//! each wire format's bytes to what the `serde_json::Value` builders sent before.

use serde_json::json;

use super::{Image, Message, ToolCall, ToolSpec};

pub(crate) fn conversation() -> Vec<Message> {
    let call = |id: &str, name: &str, arguments: &str| ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    };
    let png = Image {
        mime: "image/png".into(),
        data: "iVBORw0KGgo=".into(),
    };
    let result = |id: &str, content: &str, is_error: bool, images: Vec<Image>| Message::Tool {
        call_id: id.into(),
        name: "read".into(),
        content: content.into(),
        is_error,
        images,
    };
    vec![
        Message::User {
            text: "Fix \"it\" — tabs\there,\nnewlines, \u{1} control, </script> & ünïcode 🦀"
                .into(),
        },
        Message::Assistant {
            text: "Looking.".into(),
            tool_calls: vec![
                call(
                    "a",
                    "read",
                    r#"{"zeta": 1.50, "alpha": [1e3, -0.0, true, null], "filePath": "x\u00e9.rs", "alpha": 2}"#,
                ),
                call("b", "glob", "{oops"),
                call("c", "list", ""),
                call("d", "bash", "[1, 2]"),
            ],
        },
        result("a", "1: fn main() {}\n", false, vec![png.clone()]),
        result("b", "bad arguments", true, vec![]),
        result("c", "   ", false, vec![]),
        result("d", "", true, vec![png.clone(), png]),
        Message::User { text: "  ".into() },
        Message::Assistant {
            text: "\n".into(),
            tool_calls: vec![],
        },
        Message::Assistant {
            text: " ".into(),
            tool_calls: vec![call("e", "read", r#"{"filePath":"y"}"#)],
        },
        result("e", "ok", false, vec![]),
        Message::Assistant {
            text: "Done: \\ backslash, \u{7f} and \u{2028}.".into(),
            tool_calls: vec![],
        },
        Message::User {
            text: "thanks".into(),
        },
    ]
}

pub(crate) fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "read".into(),
            description: "Reads a file.\n\nUsage:\n- \"filePath\" is absolute".into(),
            parameters: json!({"type": "object", "properties": {
                "filePath": {"type": "string", "description": "The file"},
                "offset": {"type": "number", "minimum": 0.5},
                "limit": {"type": "integer", "default": 2000}},
                "required": ["filePath"], "additionalProperties": false}),
        },
        ToolSpec {
            name: "glob".into(),
            description: "Finds files by pattern.".into(),
            parameters: json!({"properties": {"pattern": {"type": "string"}}, "type": "object"}),
        },
    ]
}
