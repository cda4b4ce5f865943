//! Who answers when runner's rules ask: the client's user, through an MCP elicitation, or
//! the `--ask` policy when the client cannot be asked.
//!
//! An elicitation is sent only when both sides have it: the session's revision
//! (2025-06-18 on, [`crate::handshake::ELICITATION`]) and the client's declared
//! `capabilities.elicitation` (with forms: a 2025-11-25 client may take URLs only). A
//! request the client cannot take would fail as "Method not found" at every ask, so
//! otherwise the policy answers, and its refusal tells the model why the user was not asked
//! and how the call can be allowed.
//!
//! The question is one choice of three: once, always (for the session), reject. It goes as
//! the spec's enum so a client can offer the three as buttons rather than a text box: a
//! titled `oneOf` of `const`/`title` from 2025-11-25, `enum` with `enumNames` in
//! 2025-06-18 ([`answer_schema`]).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use rmcp::model::{
    ConstTitle, ElicitRequestParams, ElicitationAction, ElicitationSchema, EnumSchema,
    LegacyEnumSchema, PrimitiveSchemaDefinition, ProtocolVersion, SingleSelectEnumSchema,
    TitledSingleSelectEnumSchema,
};
use rmcp::service::{Peer, RoleServer};
use runner_permission::gate::{Ask, Asker, Reply, ReplyFuture, Unanswerable};
use serde_json::Value;

use crate::handshake::{ELICITATION, TITLED_CHOICES, at_least};

/// Who answers when the client cannot: `--ask allow` approves each ask once; anything
/// else refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    Allow,
    Deny,
}

/// The property of the question's form that carries the answer.
const ANSWER: &str = "answer";

/// The three answers, each with the words a client shows for it.
const CHOICES: [(&str, &str); 3] = [
    ("once", "Allow once"),
    ("always", "Allow for this session"),
    ("reject", "Reject"),
];

/// How the choices are written, by the session's revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choices {
    /// 2025-06-18: `enum` with `enumNames`.
    EnumNames,
    /// 2025-11-25 on: `oneOf` of `const` and `title`.
    Titled,
}

/// Why an ask cannot go to the client's user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreachable {
    /// No `initialize` yet (no client is known).
    NoSession,
    /// The session's revision predates elicitation.
    Revision(ProtocolVersion),
    /// The client declared no `elicitation` capability.
    NotDeclared,
    /// The client takes URL elicitations only, not forms.
    UrlOnly,
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreachable::NoSession => write!(f, "no MCP session is open yet"),
            Unreachable::Revision(v) => write!(
                f,
                "the session speaks MCP {v}, and elicitation, how a server asks the user, came with {ELICITATION}"
            ),
            Unreachable::NotDeclared => {
                write!(
                    f,
                    "the MCP client did not declare that it takes elicitations"
                )
            }
            Unreachable::UrlOnly => write!(
                f,
                "the MCP client takes only URL elicitations, not the form runner asks with"
            ),
        }
    }
}

/// Whether the client on `peer` can be asked, and how its choices are written.
pub fn reachable(peer: Option<&Peer<RoleServer>>) -> Result<Choices, Unreachable> {
    let info = peer
        .and_then(Peer::peer_info)
        .ok_or(Unreachable::NoSession)?;
    let version = &info.protocol_version;
    if !at_least(version, &ELICITATION) {
        return Err(Unreachable::Revision(version.clone()));
    }
    let declared = info
        .capabilities
        .elicitation
        .as_ref()
        .ok_or(Unreachable::NotDeclared)?;
    // An empty `elicitation: {}` means forms (2025-06-18 had nothing else).
    if declared.form.is_none() && declared.url.is_some() {
        return Err(Unreachable::UrlOnly);
    }
    Ok(match at_least(version, &TITLED_CHOICES) {
        true => Choices::Titled,
        false => Choices::EnumNames,
    })
}

/// The question's form: one required string, the answer, one of [`CHOICES`].
pub fn answer_schema(choices: Choices) -> ElicitationSchema {
    let title = "Answer";
    let description = "once: allow this call; always: allow calls like it for the rest of this session; reject: refuse it";
    let values = || CHOICES.iter().map(|(v, _)| v.to_string()).collect();
    let answer = match choices {
        Choices::Titled => {
            let mut schema = TitledSingleSelectEnumSchema::new(
                CHOICES
                    .iter()
                    .map(|(v, t)| ConstTitle::new(*v, *t))
                    .collect(),
            );
            schema.title = Some(title.into());
            schema.description = Some(description.into());
            EnumSchema::Single(SingleSelectEnumSchema::Titled(schema))
        }
        Choices::EnumNames => {
            let mut schema = LegacyEnumSchema::new(values());
            schema.enum_names = Some(CHOICES.iter().map(|(_, t)| t.to_string()).collect());
            schema.title = Some(title.into());
            schema.description = Some(description.into());
            EnumSchema::Legacy(schema)
        }
    };
    let properties =
        BTreeMap::from([(ANSWER.to_string(), PrimitiveSchemaDefinition::Enum(answer))]);
    ElicitationSchema::new(properties).with_required(vec![ANSWER.to_string()])
}

/// Answers asks through the client when it can be asked, otherwise by the `--ask` policy.
pub struct ClientAsker {
    peer: OnceLock<Peer<RoleServer>>,
    fallback: Fallback,
}

impl ClientAsker {
    pub fn new(fallback: Fallback) -> Self {
        ClientAsker {
            peer: OnceLock::new(),
            fallback,
        }
    }

    /// The client, once it has said hello (and what it can do).
    pub fn reach(&self, peer: Peer<RoleServer>) {
        let _ = self.peer.set(peer);
    }

    fn fall_back(&self, why: &Unreachable) -> Result<Reply, Unanswerable> {
        match self.fallback {
            Fallback::Allow => Ok(Reply::Once),
            Fallback::Deny => Err(Unanswerable(format!(
                "the rules ask before this, and the user cannot be asked: {why}. So runner mcp serve refuses it (--ask deny, the default). The user can allow it with a rule in their runner config, or start the server with --ask allow"
            ))),
        }
    }
}

impl Asker for ClientAsker {
    fn ask<'a>(&'a self, ask: &'a Ask) -> ReplyFuture<'a> {
        Box::pin(async move {
            let peer = self.peer.get();
            match (reachable(peer), peer) {
                (Ok(choices), Some(peer)) => elicit(peer, ask, choices).await,
                (Err(why), _) => self.fall_back(&why),
                (Ok(_), None) => self.fall_back(&Unreachable::NoSession),
            }
        })
    }
}

/// One ask as an elicitation, its answer as the gate's reply.
async fn elicit(
    peer: &Peer<RoleServer>,
    ask: &Ask,
    choices: Choices,
) -> Result<Reply, Unanswerable> {
    let request = &ask.request;
    let tool = request.tool.as_deref().unwrap_or(&request.permission);
    let message = format!(
        "runner: allow {tool} to {} {}?",
        request.permission,
        request.patterns.join(", ")
    );
    let answer = peer
        .create_elicitation(ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: answer_schema(choices),
        })
        .await
        .map_err(|e| {
            Unanswerable(format!(
                "the MCP client did not answer runner's question ({e}), so the call is refused. The user can allow it with a rule in their runner config"
            ))
        })?;
    let chosen = answer
        .content
        .as_ref()
        .and_then(|c| c.get(ANSWER))
        .and_then(Value::as_str);
    Ok(reply(answer.action, chosen))
}

/// The gate's reply to what the client answered: anything but `once` or `always` accepted
/// refuses.
fn reply(action: ElicitationAction, chosen: Option<&str>) -> Reply {
    let refused = |why: String| Reply::Reject {
        feedback: Some(why),
    };
    match (action, chosen) {
        (ElicitationAction::Accept, Some("always")) => Reply::Always,
        (ElicitationAction::Accept, Some("once")) => Reply::Once,
        (ElicitationAction::Accept, Some("reject")) => {
            refused("the user rejected it in the MCP client".into())
        }
        (ElicitationAction::Accept, other) => refused(format!(
            "the MCP client answered {other:?}, not once or always, so runner refused it"
        )),
        // Decline, Cancel, and whatever a later revision adds.
        _ => refused("the user declined it in the MCP client".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_choices_go_as_titled_one_of_from_2025_11_25() {
        let schema = serde_json::to_value(answer_schema(Choices::Titled)).unwrap();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["answer"]));
        let answer = &schema["properties"]["answer"];
        assert_eq!(answer["type"], "string");
        assert_eq!(
            answer["oneOf"],
            json!([
                { "const": "once", "title": "Allow once" },
                { "const": "always", "title": "Allow for this session" },
                { "const": "reject", "title": "Reject" }
            ])
        );
        assert!(answer.get("enum").is_none(), "{answer}");
    }

    #[test]
    fn the_choices_go_as_enum_with_names_in_2025_06_18() {
        let schema = serde_json::to_value(answer_schema(Choices::EnumNames)).unwrap();
        let answer = &schema["properties"]["answer"];
        assert_eq!(answer["type"], "string");
        assert_eq!(answer["enum"], json!(["once", "always", "reject"]));
        assert_eq!(
            answer["enumNames"],
            json!(["Allow once", "Allow for this session", "Reject"])
        );
        assert!(answer.get("oneOf").is_none(), "{answer}");
    }

    #[test]
    fn only_once_and_always_allow() {
        assert_eq!(reply(ElicitationAction::Accept, Some("once")), Reply::Once);
        assert_eq!(
            reply(ElicitationAction::Accept, Some("always")),
            Reply::Always
        );
        for (action, chosen) in [
            (ElicitationAction::Accept, Some("reject")),
            (ElicitationAction::Accept, Some("yes")),
            (ElicitationAction::Accept, None),
            (ElicitationAction::Decline, Some("once")),
            (ElicitationAction::Cancel, None),
        ] {
            assert!(
                matches!(
                    reply(action.clone(), chosen),
                    Reply::Reject { feedback: Some(_) }
                ),
                "{action:?} {chosen:?}"
            );
        }
    }
}
