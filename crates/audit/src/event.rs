//! What each decision is in OCSF, and why that class.
//!
//! - **A permission decision** (a tool call judged by the rules, or by a person asked) is
//!   *API Activity* (6003). The agent calls runner's tool interface, one operation per tool
//!   (`api.operation`), on the subjects the rules match (`resources`); the gate is the
//!   security control whose outcome `action_id` / `disposition_id` carry, and the deciding
//!   rule is the `policy`. *Authorize Session* (3003) was the other candidate, but it is
//!   about privileges given to a logon session, not one call judged; *Base Event* would lose
//!   the `api` a SIEM groups calls by. Activities: reading tools are Read, editing ones
//!   Update, everything else (a command, a subagent, a fetch) Other, named in
//!   `activity_name`.
//! - **A connection through the allow-list's proxy** is *Network Activity* (4001): Refuse
//!   when refused, Fail when allowed but not made, else Close, since the record is written
//!   when it is over, with the bytes each way in `traffic`. The permission decision that
//!   let it (or not) is an API Activity of its own: the rules can allow a host whose
//!   address the proxy then refuses, so the two are different facts.
//! - **An inspected HTTP request** is *HTTP Activity* (4002), its activity the method.
//! - **A secret put on a request, or refused**, is *API Activity* Read of a resource of
//!   type `secret`, named and never valued: the proxy reads the secret to use it.
//! - **The sandbox's start and end** are *Application Lifecycle* (6002) Start and Stop:
//!   the sandbox is an application runner starts and stops; *Process Activity* would need
//!   a process (pid, executable) that a container or a landlock domain is not one of.
//! - **The wall's self-test at start** is *Application Lifecycle* too, activity Other
//!   (`Self-test`), `status` Success or Failure: a step of the sandbox's start, with every
//!   check in `unmapped.checks`. A *Compliance Finding* would suit a failure but not the
//!   passes, and one record for the whole test is what a reader wants beside the start.

use serde_json::{Map, Value, json};

use crate::ocsf::{self, Activity, Meta, OTHER, Outcome};

/// The rule that decided, as the permission layers know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleRef {
    pub permission: String,
    pub pattern: String,
    /// `allow`, `ask` or `deny`.
    pub action: String,
    /// A config file's path, `built-in defaults`, `profile NAME`, `approval`, …
    pub origin: String,
    /// The rule's 1-based position within its origin.
    pub position: usize,
    /// The layer it was stacked in: `defaults`, `profile`, `user`, `project`, `explicit`
    /// (`--config`), `session`, `boundary` (a managed boundary file, which caps the rest),
    /// `other` (approvals, rules made in code).
    pub layer: String,
}

impl RuleRef {
    /// `bash "rm *" = deny (~/.config/runner/config.toml #3)`: how runner shows a rule.
    pub fn line(&self) -> String {
        format!(
            "{} {:?} = {} ({} #{})",
            self.permission, self.pattern, self.action, self.origin, self.position
        )
    }

    /// OCSF's `policy`: the rule's text as its name, where it is written as its uid.
    fn policy(&self) -> Value {
        json!({
            "name": format!("{} {:?} = {}", self.permission, self.pattern, self.action),
            "uid": format!("{}#{}", self.origin, self.position),
            "desc": format!("rule {} of {} (layer {})", self.position, self.origin, self.layer),
            "data": {
                "permission": self.permission,
                "pattern": self.pattern,
                "action": self.action,
                "origin": self.origin,
                "position": self.position,
                "layer": self.layer,
            },
        })
    }
}

/// How a decision came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A rule (or an earlier "always") allowed it.
    Allowed,
    /// A person was asked and said yes.
    Approved,
    /// A rule or a check refused it.
    Denied,
    /// A person was asked and said no.
    Rejected,
    /// It needed asking and nobody could answer (no terminal, `--ask deny`, a profile).
    Unanswered,
}

impl Decision {
    fn outcome(self) -> Outcome {
        match self {
            Decision::Allowed => Outcome::Allowed,
            Decision::Approved => Outcome::Approved,
            Decision::Denied | Decision::Unanswered => Outcome::Blocked,
            Decision::Rejected => Outcome::Rejected,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Approved => "approved",
            Decision::Denied => "denied",
            Decision::Rejected => "rejected",
            Decision::Unanswered => "refused, nobody could answer",
        }
    }
}

/// One permission decision.
#[derive(Debug, Clone)]
pub struct Permission {
    /// The tool that asked, where a tool did.
    pub tool: Option<String>,
    pub permission: String,
    /// The subjects judged (a command, a path, a host).
    pub patterns: Vec<String>,
    pub decision: Decision,
    /// The rule that decided, or that sent it to a person; `None` when no rule matched
    /// (then the default, ask, applied).
    pub rule: Option<RuleRef>,
    /// More about it: who answered, why nobody could.
    pub detail: Option<String>,
}

/// One connection through the allow-list's proxy.
#[derive(Debug, Clone)]
pub struct Connection {
    pub host: String,
    pub port: u16,
    pub allowed: bool,
    /// Why it was refused or failed.
    pub reason: Option<String>,
    /// The address connected to (`IP:PORT`, or `via PROXY` through an upstream proxy).
    pub address: Option<String>,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// The proxy's own line for it.
    pub summary: String,
}

/// One request the proxy read, judged by method and path.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    pub method: String,
    /// `https` for an inspected TLS connection, `http` for plain.
    pub scheme: String,
    pub host: String,
    pub port: u16,
    /// The path with its query, as the request line has it.
    pub path: String,
    pub decision: Decision,
    pub rule: Option<RuleRef>,
    /// The status the sandbox got: 403 when refused, else the server's.
    pub status: Option<u16>,
    pub reason: Option<String>,
}

/// A secret put on a request (allowed) or refused, named and never valued.
#[derive(Debug, Clone)]
pub struct SecretUse {
    pub name: String,
    /// The host the request was for.
    pub host: String,
    pub port: Option<u16>,
    pub allowed: bool,
    /// Why refused (another host, a tunnel), or where it was put.
    pub detail: Option<String>,
}

#[derive(Debug, Clone)]
pub struct SandboxStart {
    /// `landlock`, `docker`, `none`.
    pub backend: String,
    /// `none`, `allowlist`, `host`.
    pub network: String,
    pub worktree: String,
    /// The session's first line: the wall its tools run behind.
    pub description: String,
    /// The program the sandbox runs, for `runner exec` (the whole of its argv).
    pub command: Option<Vec<String>>,
}

/// The wall's self-test at start: one record for every check.
#[derive(Debug, Clone)]
pub struct SelfTest {
    /// The wall as judged: `landlock`, `docker`, `podman (gVisor)`, ….
    pub wall: String,
    pub network: String,
    pub checks: Vec<WallCheck>,
    /// The whole test as the host waited for it.
    pub total_micros: u64,
}

/// One check of [`SelfTest`].
#[derive(Debug, Clone)]
pub struct WallCheck {
    pub name: String,
    /// `worktree`, `files`, `seccomp`, `network`, `capabilities`.
    pub layer: String,
    pub passed: bool,
    pub saw: String,
    pub want: String,
    pub micros: u64,
}

#[derive(Debug, Clone)]
pub struct SandboxEnd {
    pub backend: String,
    /// How the session ended, where known.
    pub reason: Option<String>,
}

/// What makes decisions alike for folding ([`crate::fold`]): everything but the time
/// (and, for connections, the bytes, which a folded record sums).
fn key(parts: &[&str]) -> String {
    parts.join("\u{0}")
}

impl Permission {
    pub(crate) fn fold_key(&self) -> String {
        let rule = self.rule.as_ref().map(RuleRef::line).unwrap_or_default();
        let patterns = self.patterns.join("\u{0}");
        let tool = self.tool.as_deref().unwrap_or_default();
        let detail = self.detail.as_deref().unwrap_or_default();
        key(&[
            "permission",
            &self.permission,
            tool,
            &patterns,
            self.decision.word(),
            &rule,
            detail,
        ])
    }
}

impl Connection {
    pub(crate) fn fold_key(&self) -> String {
        let (port, allowed) = (self.port.to_string(), self.allowed.to_string());
        let reached = if self.address.is_some() {
            "reached"
        } else {
            ""
        };
        let reason = self.reason.as_deref().unwrap_or_default();
        key(&["connection", &self.host, &port, &allowed, reached, reason])
    }
}

impl HttpRequest {
    pub(crate) fn fold_key(&self) -> String {
        let port = self.port.to_string();
        let status = self.status.map(|s| s.to_string()).unwrap_or_default();
        let rule = self.rule.as_ref().map(RuleRef::line).unwrap_or_default();
        let reason = self.reason.as_deref().unwrap_or_default();
        key(&[
            "http",
            &self.method,
            &self.scheme,
            &self.host,
            &port,
            &self.path,
            self.decision.word(),
            &status,
            &rule,
            reason,
        ])
    }
}

impl SecretUse {
    pub(crate) fn fold_key(&self) -> String {
        let port = self.port.map(|p| p.to_string()).unwrap_or_default();
        let detail = self.detail.as_deref().unwrap_or_default();
        let allowed = self.allowed.to_string();
        key(&["secret", &self.name, &self.host, &port, &allowed, detail])
    }
}

/// The trail reached its budget ([`crate::fold`]): said when the first line is dropped
/// (`over` false) and, with how much was dropped, when the session ends.
#[derive(Debug, Clone)]
pub struct Capped {
    /// The budget, in bytes of lines.
    pub budget: u64,
    /// Lines dropped, and their bytes (when `over`).
    pub lines: u64,
    pub bytes: u64,
    pub over: bool,
}

/// Where a sandbox's traffic and calls come from.
fn sandbox_endpoint() -> Value {
    json!({ "name": "sandbox" })
}

fn endpoint(host: &str, port: Option<u16>) -> Value {
    let mut e = Map::new();
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => e.insert("ip".into(), json!(ip.to_string())),
        Err(_) => e.insert("hostname".into(), json!(host)),
    };
    if let Some(p) = port {
        e.insert("port".into(), json!(p));
    }
    Value::Object(e)
}

fn permission_activity(permission: &str) -> Activity {
    match permission {
        "read" | "list" | "glob" | "grep" | "lsp" | "codesearch" | "websearch" => Activity {
            id: 2,
            name: "Read",
        },
        "edit" | "write" | "patch" | "todowrite" => Activity {
            id: 3,
            name: "Update",
        },
        _ => Activity {
            id: OTHER,
            name: "Invoke",
        },
    }
}

pub(crate) fn permission(p: &Permission, meta: Meta) -> Value {
    let subjects = p.patterns.join(", ");
    let mut message = format!("{} {subjects:?} {}", p.permission, p.decision.word());
    if let Some(rule) = &p.rule {
        message.push_str(&format!(" by {}", rule.line()));
    }
    let activity = permission_activity(&p.permission);
    let mut r = ocsf::record(
        ocsf::API_ACTIVITY,
        activity,
        Some(p.decision.outcome()),
        message,
        meta,
    );
    // The permission is the operation (`bash`, `edit`, `network`): what the rules are
    // written against. The tool that asked (`write` asks `edit`), or who did when no tool
    // did, is kept beside it.
    ocsf::actor_app(&mut r, "runner agent");
    r.insert(
        "api".into(),
        json!({ "operation": p.permission, "service": { "name": "runner tools" } }),
    );
    if let Some(tool) = &p.tool {
        r.insert("unmapped".into(), json!({ "tool": tool }));
    }
    r.insert("src_endpoint".into(), sandbox_endpoint());
    let resources: Vec<Value> = p
        .patterns
        .iter()
        .map(|s| json!({ "name": s, "type": p.permission }))
        .collect();
    r.insert("resources".into(), json!(resources));
    put_policy(&mut r, p.rule.as_ref());
    if let Some(d) = &p.detail {
        r.insert("status_detail".into(), json!(d));
    }
    Value::Object(r)
}

/// The deciding rule as `policy`; with none, the default that applied.
fn put_policy(r: &mut Map<String, Value>, rule: Option<&RuleRef>) {
    let policy = match rule {
        Some(rule) => rule.policy(),
        None => json!({
            "name": "no rule matched: ask",
            "uid": "default",
            "desc": "no rule matched, so the call was put to whoever answers asks",
        }),
    };
    r.insert("policy".into(), policy);
}

pub(crate) fn connection(c: &Connection, meta: Meta) -> Value {
    let (activity, outcome, status) = if !c.allowed {
        (
            Activity {
                id: 5,
                name: "Refuse",
            },
            Outcome::Blocked,
            (2, "Failure"),
        )
    } else if c.address.is_none() && c.reason.is_some() {
        (
            Activity {
                id: 4,
                name: "Fail",
            },
            Outcome::Allowed,
            (2, "Failure"),
        )
    } else {
        (
            Activity {
                id: 2,
                name: "Close",
            },
            Outcome::Allowed,
            (1, "Success"),
        )
    };
    let mut r = ocsf::record(
        ocsf::NETWORK_ACTIVITY,
        activity,
        Some(outcome),
        c.summary.clone(),
        meta,
    );
    let mut dst = endpoint(&c.host, Some(c.port));
    if let Some(addr) = c.address.as_deref()
        && let Ok(sa) = addr.parse::<std::net::SocketAddr>()
    {
        dst["ip"] = json!(sa.ip().to_string());
    }
    r.insert("src_endpoint".into(), sandbox_endpoint());
    r.insert("dst_endpoint".into(), dst);
    r.insert(
        "connection_info".into(),
        json!({ "direction_id": 2, "direction": "Outbound", "protocol_name": "tcp" }),
    );
    r.insert(
        "traffic".into(),
        json!({
            "bytes_out": c.bytes_sent,
            "bytes_in": c.bytes_received,
            "bytes": c.bytes_sent + c.bytes_received,
        }),
    );
    r.insert("status_id".into(), json!(status.0));
    r.insert("status".into(), json!(status.1));
    if let Some(reason) = &c.reason {
        r.insert("status_detail".into(), json!(reason));
    }
    Value::Object(r)
}

/// HTTP Activity's activities are the methods; any other method is Other.
fn http_activity(method: &str) -> Activity {
    let (id, name) = match method.to_ascii_uppercase().as_str() {
        "CONNECT" => (1, "Connect"),
        "DELETE" => (2, "Delete"),
        "GET" => (3, "Get"),
        "HEAD" => (4, "Head"),
        "OPTIONS" => (5, "Options"),
        "POST" => (6, "Post"),
        "PUT" => (7, "Put"),
        "TRACE" => (8, "Trace"),
        "PATCH" => (9, "Patch"),
        _ => (OTHER, "Other"),
    };
    Activity { id, name }
}

pub(crate) fn http_request(q: &HttpRequest, meta: Meta) -> Value {
    let mut message = format!("{} {}{} {}", q.method, q.host, q.path, q.decision.word());
    if let Some(rule) = &q.rule {
        message.push_str(&format!(" by {}", rule.line()));
    }
    let mut r = ocsf::record(
        ocsf::HTTP_ACTIVITY,
        http_activity(&q.method),
        Some(q.decision.outcome()),
        message,
        meta,
    );
    let (path, query) = match q.path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (q.path.as_str(), None),
    };
    let mut url = json!({
        "scheme": q.scheme,
        "hostname": q.host,
        "port": q.port,
        "path": path,
        "url_string": format!("{}://{}:{}{}", q.scheme, q.host, q.port, q.path),
    });
    if let Some(query) = query {
        url["query_string"] = json!(query);
    }
    let mut request = json!({ "http_method": q.method, "url": url });
    if http_activity(&q.method).id == OTHER {
        // The schema's list of methods is closed; another one is still named.
        request.as_object_mut().map(|o| o.remove("http_method"));
        r.insert("activity_name".into(), json!(q.method));
    }
    r.insert("http_request".into(), request);
    if let Some(code) = q.status {
        r.insert("http_response".into(), json!({ "code": code }));
        r.insert("http_status".into(), json!(code));
    }
    r.insert("src_endpoint".into(), sandbox_endpoint());
    r.insert("dst_endpoint".into(), endpoint(&q.host, Some(q.port)));
    // Where the deciding rule is not known here (the proxy's record names it in its
    // reason), no policy is claimed: "no rule matched" would be false.
    if q.rule.is_some() {
        put_policy(&mut r, q.rule.as_ref());
    }
    if let Some(reason) = &q.reason {
        r.insert("status_detail".into(), json!(reason));
    }
    Value::Object(r)
}

pub(crate) fn secret_use(s: &SecretUse, meta: Meta) -> Value {
    let word = if s.allowed { "put on" } else { "refused on" };
    let mut message = format!("secret {} {word} a request to {}", s.name, s.host);
    if let Some(d) = &s.detail {
        message.push_str(&format!(": {d}"));
    }
    let outcome = if s.allowed {
        Outcome::Allowed
    } else {
        Outcome::Blocked
    };
    let mut r = ocsf::record(
        ocsf::API_ACTIVITY,
        Activity {
            id: 2,
            name: "Read",
        },
        Some(outcome),
        message,
        meta,
    );
    ocsf::actor_app(&mut r, "runner network proxy");
    r.insert(
        "api".into(),
        json!({ "operation": "secret", "service": { "name": "runner network proxy" } }),
    );
    r.insert("src_endpoint".into(), sandbox_endpoint());
    r.insert("dst_endpoint".into(), endpoint(&s.host, s.port));
    r.insert(
        "resources".into(),
        json!([{ "name": s.name, "type": "secret" }]),
    );
    if let Some(d) = &s.detail {
        r.insert("status_detail".into(), json!(d));
    }
    Value::Object(r)
}

fn sandbox_app(backend: &str, version: &str) -> Value {
    json!({
        "name": "runner sandbox",
        "vendor_name": ocsf::VENDOR,
        "version": version,
        "feature": { "name": backend },
    })
}

/// The start names the wall, the program (`runner exec`) and who drove the session (an MCP
/// client), where known.
pub(crate) fn sandbox_start(s: &SandboxStart, client: Option<&crate::Client>, meta: Meta) -> Value {
    let version = meta.product_version.to_string();
    let mut message = s.description.clone();
    if let Some(command) = &s.command {
        message.push_str(&format!("; runs {command:?}"));
    }
    if let Some(c) = client {
        message.push_str(&format!("; driven by {}", client_name(c)));
    }
    let mut r = ocsf::record(
        ocsf::APPLICATION_LIFECYCLE,
        Activity {
            id: 3,
            name: "Start",
        },
        None,
        message,
        meta,
    );
    r.insert("app".into(), sandbox_app(&s.backend, &version));
    let mut unmapped = json!({ "network": s.network, "worktree": s.worktree });
    if let Some(command) = &s.command {
        unmapped["command"] = json!(command);
    }
    if let Some(c) = client {
        ocsf::actor_app(&mut r, &client_name(c));
        unmapped["client"] = json!({ "name": c.name, "version": c.version });
    }
    r.insert("unmapped".into(), unmapped);
    Value::Object(r)
}

fn client_name(c: &crate::Client) -> String {
    match &c.version {
        Some(v) => format!("{} {v}", c.name),
        None => c.name.clone(),
    }
}

/// The trail itself reaching its budget is a step in the trail's life: Application
/// Lifecycle of runner's audit trail, activity Other (`Capped`).
pub(crate) fn trail_capped(c: &Capped, meta: Meta) -> Value {
    let version = meta.product_version.to_string();
    let message = match c.over {
        false => format!(
            "this session's audit trail reached its budget of {} bytes: later decisions are counted, not written ([audit] max_bytes)",
            c.budget
        ),
        true => format!(
            "this session's audit trail was capped at {} bytes: {} lines ({} bytes) were dropped",
            c.budget, c.lines, c.bytes
        ),
    };
    let mut r = ocsf::record(
        ocsf::APPLICATION_LIFECYCLE,
        Activity {
            id: OTHER,
            name: "Capped",
        },
        None,
        message,
        meta,
    );
    r.insert(
        "app".into(),
        json!({ "name": "runner audit trail", "vendor_name": ocsf::VENDOR, "version": version }),
    );
    let mut unmapped = json!({ "budget_bytes": c.budget });
    if c.over {
        unmapped["dropped_lines"] = json!(c.lines);
        unmapped["dropped_bytes"] = json!(c.bytes);
    }
    r.insert("unmapped".into(), unmapped);
    Value::Object(r)
}

pub(crate) fn self_test(t: &SelfTest, meta: Meta) -> Value {
    let version = meta.product_version.to_string();
    let failed: Vec<&WallCheck> = t.checks.iter().filter(|c| !c.passed).collect();
    let message = match failed.first() {
        None => format!(
            "sandbox ({}) self-test passed: {} checks in {} µs",
            t.wall,
            t.checks.len(),
            t.total_micros
        ),
        Some(c) => format!(
            "sandbox ({}) self-test failed: {} ({} layer) saw {}, must show {}",
            t.wall, c.name, c.layer, c.saw, c.want
        ),
    };
    let mut r = ocsf::record(
        ocsf::APPLICATION_LIFECYCLE,
        Activity {
            id: OTHER,
            name: "Self-test",
        },
        None,
        message,
        meta,
    );
    r.insert("app".into(), sandbox_app(&t.wall, &version));
    let (status_id, status) = if failed.is_empty() {
        (1, "Success")
    } else {
        (2, "Failure")
    };
    r.insert("status_id".into(), json!(status_id));
    r.insert("status".into(), json!(status));
    if !failed.is_empty() {
        // A wall found missing is worth more than a look.
        r.insert("severity_id".into(), json!(4));
        r.insert("severity".into(), json!("High"));
    }
    let checks: Vec<Value> = t
        .checks
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "layer": c.layer,
                "passed": c.passed,
                "saw": c.saw,
                "want": c.want,
                "micros": c.micros,
            })
        })
        .collect();
    r.insert(
        "unmapped".into(),
        json!({
            "network": t.network,
            "passed": failed.is_empty(),
            "total_micros": t.total_micros,
            "checks": checks,
        }),
    );
    Value::Object(r)
}

pub(crate) fn sandbox_end(s: &SandboxEnd, meta: Meta) -> Value {
    let version = meta.product_version.to_string();
    let message = match &s.reason {
        Some(r) => format!("sandbox ({}) stopped: {r}", s.backend),
        None => format!("sandbox ({}) stopped", s.backend),
    };
    let mut r = ocsf::record(
        ocsf::APPLICATION_LIFECYCLE,
        Activity {
            id: 4,
            name: "Stop",
        },
        None,
        message,
        meta,
    );
    r.insert("app".into(), sandbox_app(&s.backend, &version));
    Value::Object(r)
}
