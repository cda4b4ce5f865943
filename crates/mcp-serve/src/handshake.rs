//! Which MCP revisions the server speaks, and what it says to a request it does not know.
//!
//! A client proposes a revision in `initialize`; the server answers with that one when it
//! speaks it, and otherwise with the newest it speaks ([`NEWEST`]), which the client may
//! then leave. The revisions differ in what the server may send back: elicitation exists
//! from 2025-06-18, titled choices from 2025-11-25, so the revision agreed here decides how
//! an ask reaches the user ([`crate::ask`]).
//!
//! Revisions from 2026-07-28 on replace `initialize` with `server/discover` and per-request
//! metadata, and forbid the server's own requests (an ask would have to become a retried
//! call). runner speaks none of them, so `server/discover` is to it a method like any other
//! it does not know: JSON-RPC error -32601, after which a client falls back to `initialize`
//! and the session goes on. [`Handshake`] answers it so before rmcp's own handling, which
//! would answer with a discovery result or a protocol version error instead.

use std::borrow::Cow;

use rmcp::ErrorData as McpError;
use rmcp::model::{ClientRequest, ConstString, DiscoverRequestMethod, ErrorCode, ProtocolVersion};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, Service, ServiceRole};

/// The newest revision runner speaks; every known one before it is spoken too.
pub const NEWEST: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// The first revision with elicitation (`elicitation/create`).
pub const ELICITATION: ProtocolVersion = ProtocolVersion::V_2025_06_18;

/// The first revision whose elicitation schemas have titled choices (`oneOf` of
/// `const`/`title`); before it, titles are `enumNames` beside `enum`.
pub const TITLED_CHOICES: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// The revisions runner speaks, oldest first: 2024-11-05 to [`NEWEST`].
pub fn supported() -> Cow<'static, [ProtocolVersion]> {
    Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST))
}

/// Whether revision `version` has what the revision `since` brought (revisions are dated,
/// so their names order as their dates do).
pub fn at_least(version: &ProtocolVersion, since: &ProtocolVersion) -> bool {
    version.as_str() >= since.as_str()
}

/// JSON-RPC's "Method not found" (-32601) for `method`, saying why.
pub fn not_found(method: &str, why: &str) -> McpError {
    McpError::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("Method not found: {method} ({why})"),
        None,
    )
}

/// A server whose requests the inner handler answers, except `server/discover`, which
/// gets "Method not found" (see the module's documentation).
pub struct Handshake<S>(pub S);

impl<S: Service<RoleServer>> Service<RoleServer> for Handshake<S> {
    async fn handle_request(
        &self,
        request: <RoleServer as ServiceRole>::PeerReq,
        context: RequestContext<RoleServer>,
    ) -> Result<<RoleServer as ServiceRole>::Resp, McpError> {
        if matches!(request, ClientRequest::DiscoverRequest(_)) {
            return Err(not_found(
                DiscoverRequestMethod::VALUE,
                &format!(
                    "runner speaks MCP {} to {NEWEST}, which open with initialize",
                    ProtocolVersion::V_2024_11_05
                ),
            ));
        }
        self.0.handle_request(request, context).await
    }

    async fn handle_notification(
        &self,
        notification: <RoleServer as ServiceRole>::PeerNot,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.0.handle_notification(notification, context).await
    }

    fn get_info(&self) -> <RoleServer as ServiceRole>::Info {
        self.0.get_info()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.0.supported_protocol_versions()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spoken_revisions_run_from_the_first_to_the_newest_with_initialize() {
        let spoken = supported();
        let names: Vec<&str> = spoken.iter().map(ProtocolVersion::as_str).collect();
        assert_eq!(
            names,
            ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
        );
        assert!(supported().iter().all(ProtocolVersion::has_initialize));
    }

    #[test]
    fn elicitation_and_titled_choices_start_where_the_spec_added_them() {
        let v = |s: &str| -> ProtocolVersion { serde_json::from_value(s.into()).unwrap() };
        assert!(!at_least(&v("2025-03-26"), &ELICITATION));
        assert!(at_least(&v("2025-06-18"), &ELICITATION));
        assert!(!at_least(&v("2025-06-18"), &TITLED_CHOICES));
        assert!(at_least(&v("2025-11-25"), &TITLED_CHOICES));
    }
}
