//! A session's audit trail: where it goes, and what the session itself tells it.
//!
//! The lines go to every file asked for: `--audit FILE`, the user's `[audit] file` (never
//! a repository's: the trail is the user's record of what was done on their behalf, and a
//! repository that could point it elsewhere could hide its own doings), and the session's
//! own trail ([`trail_of`]), which `runner sessions audit ID` prints. The gate
//! tells it of permission decisions ([`runner_permission::gate::RuleGate::with_audit`]);
//! here the session tells it of the sandbox's start and end and of every connection the
//! allow-list's proxy records, inspected requests and secrets among them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use runner_audit::{Audit, Connection, Decision, HttpRequest, SecretUse};

/// Where a session's own trail is kept. The user's sessions (`runner run`) keep theirs in
/// the data directory's `audit/ID.ndjson`, beside `sessions/` (not in it: whatever lists
/// or finds session files there must not take a trail for one). A sessions folder of
/// runner's own choosing elsewhere (an evaluation attempt's, which holds its one session)
/// keeps it in that folder as `audit.ndjson`.
pub fn trail_of(sessions_dir: &Path, id: &str) -> PathBuf {
    let users = crate::record::sessions_dir();
    if sessions_dir == users {
        users.with_file_name("audit").join(format!("{id}.ndjson"))
    } else {
        sessions_dir.join("audit.ndjson")
    }
}

use runner_network::ConnectionRecord;
use runner_sandbox::spec::SandboxSpec;

/// Where a session's trail goes, besides the user's `[audit] file`.
#[derive(Debug, Clone, Default)]
pub struct AuditOptions {
    /// `--audit FILE`.
    pub file: Option<PathBuf>,
    /// The session's own trail, beside its session file (`runner run` sets it).
    pub trail: Option<PathBuf>,
    /// The session id every line carries (`metadata.correlation_uid`); `None`: a new one.
    pub session: Option<String>,
    /// Who drives the session, when a client names itself (an MCP client's
    /// `clientInfo`): written on the sandbox's start record.
    pub client: Option<runner_audit::Client>,
}

/// The folders the sandbox of `spec` can write, which no trail may be in: the checkout
/// (`root`, where the host has one), the worktree the sandbox is given, and the folder
/// copies of worktrees are made in (a `--workspace copy` session's, or a later one's).
pub fn writable_by(spec: &SandboxSpec, root: Option<&Path>) -> Vec<runner_audit::Writable> {
    use runner_audit::Writable;
    let mut areas = Vec::new();
    if let Some(root) = root {
        areas.push(Writable::new(root, "the worktree"));
    }
    // Over a task's image the worktree is the container's own, not a host folder.
    if !spec.docker.over_task_image {
        areas.push(Writable::new(&spec.worktree, "the worktree"));
    }
    areas.push(Writable::new(
        runner_workspace::root_dir(),
        "the folder --workspace copy makes its copies in",
    ));
    areas
}

/// Opens every file the options and the user's config name; a file that cannot be
/// written, or that lies where the sandbox can write (`writable`, see [`writable_by`]),
/// stops the session before anything is decided unrecorded.
pub fn open(
    options: &AuditOptions,
    settings: &crate::config::settings::Settings,
    writable: &[runner_audit::Writable],
) -> Result<Arc<Audit>, runner_audit::AuditError> {
    let named: Vec<PathBuf> = [
        options.file.clone(),
        settings.audit.file.clone(),
        options.trail.clone(),
    ]
    .into_iter()
    .flatten()
    .collect();
    if named.is_empty() {
        return Ok(Arc::new(Audit::disabled()));
    }
    let files = named
        .iter()
        .map(|f| runner_audit::place::check(f, writable))
        .collect::<Result<Vec<PathBuf>, _>>()?;
    let mut limits = runner_audit::Limits::default();
    if let Some(max) = settings.audit.max_bytes {
        limits.max_bytes = max.0;
    }
    // A resumed session numbers on from where its own trail stopped.
    let resumed = match (&options.trail, &options.session) {
        (Some(trail), Some(id)) => runner_audit::last_sequence(trail, id),
        _ => None,
    };
    let audit = Audit::open(
        &files,
        env!("CARGO_PKG_VERSION"),
        options.session.as_deref(),
    )?
    .with_limits(limits)
    .with_client(options.client.clone())
    .continuing(resumed.unwrap_or(0));
    Ok(Arc::new(audit))
}

/// The trail as an open session holds it: records the sandbox's end when the last holder
/// lets go ([`SessionGate`]).
pub struct SessionAudit {
    audit: Arc<Audit>,
    backend: String,
    ended: Mutex<Option<String>>,
}

impl SessionAudit {
    /// Records the sandbox's start (`wall`: the session's line naming its wall; `command`:
    /// the program it runs, for `runner exec`), and its end once this is dropped.
    pub fn started(
        audit: Arc<Audit>,
        spec: &SandboxSpec,
        wall: String,
        command: Option<Vec<String>>,
    ) -> SessionAudit {
        let network = match spec.network {
            runner_sandbox::spec::Network::None => "none",
            runner_sandbox::spec::Network::Allowlist => "allowlist",
            runner_sandbox::spec::Network::Host => "host",
        };
        audit.sandbox_start(&runner_audit::SandboxStart {
            backend: spec.backend.name().to_string(),
            network: network.to_string(),
            worktree: spec.worktree.display().to_string(),
            description: wall,
            command,
        });
        SessionAudit {
            audit,
            backend: spec.backend.name().to_string(),
            ended: Mutex::new(None),
        }
    }

    pub fn sink(&self) -> &Arc<Audit> {
        &self.audit
    }

    /// How the session ended, for the sandbox's stop record.
    pub fn ended(&self, reason: &str) {
        *self.ended.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.to_string());
    }
}

impl Drop for SessionAudit {
    fn drop(&mut self) {
        let reason = self.ended.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.audit.sandbox_end(&runner_audit::SandboxEnd {
            backend: self.backend.clone(),
            reason,
        });
    }
}

/// The session's own gate, holding the trail open: the sandbox's end is written once the
/// last context of the session is gone (a `tool call` keeps only its context, and a
/// run's subagents and proxy hold the session's), not when the caller lets go of the
/// [`crate::session::OpenSession`] it was built from.
pub struct SessionGate {
    pub inner: runner_permission::gate::RuleGate,
    pub trail: Arc<SessionAudit>,
}

impl runner_permission::PermissionGate for SessionGate {
    fn ask<'a>(
        &'a self,
        request: &'a runner_permission::PermissionRequest,
    ) -> runner_permission::AskFuture<'a> {
        self.inner.ask(request)
    }

    fn confirm<'a>(
        &'a self,
        request: &'a runner_permission::PermissionRequest,
    ) -> runner_permission::AskFuture<'a> {
        self.inner.confirm(request)
    }

    fn disabled(&self, permission: &str) -> Option<runner_permission::rules::Rule> {
        self.inner.disabled(permission)
    }
}

/// The wall's self-test at start, as the trail's one record of it.
pub fn self_test(audit: &Audit, report: &runner_sandbox::self_test::SelfTestReport) {
    audit.self_test(&runner_audit::SelfTest {
        wall: report.wall.clone(),
        network: report.network.as_arg().to_string(),
        checks: report
            .checks
            .iter()
            .map(|c| runner_audit::WallCheck {
                name: c.name.to_string(),
                layer: c.layer.name().to_string(),
                passed: c.passed,
                saw: c.saw.clone(),
                want: c.want.clone(),
                micros: c.micros,
            })
            .collect(),
        total_micros: report.total_micros,
    });
}

/// A sandbox that failed its self-test leaves the report in the trail before the session
/// stops: the reason nothing ran is part of the record.
pub fn start_failed(audit: &Audit, error: &runner_sandbox::SandboxError) {
    if let runner_sandbox::SandboxError::Start(
        runner_sandbox::start_error::SandboxStartError::WallCheck(failed),
    ) = error
    {
        self_test(audit, &failed.report);
    }
}

/// Tells `audit` of every connection `proxy` records from now on (replacing any other
/// observer: a caller with one of its own calls [`connection`] from it).
pub fn observe(audit: &Arc<Audit>, proxy: Option<&runner_network::NetworkProxy>) {
    if let Some(proxy) = proxy.filter(|_| audit.is_on()) {
        let audit = audit.clone();
        proxy.observe(Arc::new(move |c| connection(&audit, c)));
    }
}

/// One of the proxy's records as audit lines: an inspected request is HTTP Activity, any
/// other connection Network Activity, and each secret it names a secret's use (or refusal).
pub fn connection(audit: &Audit, c: &ConnectionRecord) {
    if !audit.is_on() {
        return;
    }
    let allowed = c.decision == "allow";
    match c.request.as_deref().and_then(split_request) {
        Some((method, host, path)) => audit.http_request(&HttpRequest {
            method: method.to_string(),
            // As the proxy read it: plain or inside TLS (the port says nothing of it).
            scheme: c.scheme.clone().unwrap_or_else(|| "https".into()),
            host: host.to_string(),
            port: c.port,
            path: path.to_string(),
            decision: if allowed {
                Decision::Allowed
            } else {
                Decision::Denied
            },
            rule: None,
            // A refused request is answered 403 by the proxy itself.
            status: c.status.or((!allowed).then_some(403)),
            reason: c.reason.clone(),
        }),
        None => audit.connection(&Connection {
            host: c.host.clone(),
            port: c.port,
            allowed,
            reason: c.reason.clone(),
            address: c.address.clone(),
            bytes_sent: c.bytes_sent,
            bytes_received: c.bytes_received,
            summary: c.line(),
        }),
    }
    for name in &c.secrets {
        audit.secret_use(&SecretUse {
            name: name.clone(),
            host: c.host.clone(),
            port: Some(c.port),
            allowed,
            detail: c.reason.clone().filter(|_| !allowed),
        });
    }
}

/// `GET host/path?q` as method, host and path (with its query).
fn split_request(request: &str) -> Option<(&str, &str, &str)> {
    let (method, rest) = request.split_once(' ')?;
    let slash = rest.find('/').unwrap_or(rest.len());
    let (host, path) = rest.split_at(slash);
    Some((method, host, if path.is_empty() { "/" } else { path }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_splits_into_method_host_and_path() {
        assert_eq!(
            split_request("POST github.com/me/tool.git/git-receive-pack?x=1"),
            Some(("POST", "github.com", "/me/tool.git/git-receive-pack?x=1"))
        );
        assert_eq!(
            split_request("GET example.org"),
            Some(("GET", "example.org", "/"))
        );
        assert_eq!(split_request("garbage"), None);
    }

    #[test]
    fn a_record_is_told_as_its_kind_with_its_secrets_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.jsonl");
        let audit = Audit::open(std::slice::from_ref(&file), "1", None).unwrap();
        let mut tunnel = ConnectionRecord::new("pypi.org", 443);
        tunnel.address = Some("151.101.0.223:443".into());
        connection(&audit, &tunnel);
        let mut request = ConnectionRecord::new("github.com", 443);
        request.request = Some("POST github.com/x/y.git/git-receive-pack".into());
        request.decision = "deny".into();
        request.status = Some(403);
        request.secrets = vec!["GITHUB_TOKEN".into()];
        request.scheme = Some("https".into());
        connection(&audit, &request);
        // A plain request on a port that is not 80 is still http.
        let mut plain = ConnectionRecord::new("127.0.0.1", 8080);
        plain.request = Some("GET 127.0.0.1/blob".into());
        plain.scheme = Some("http".into());
        connection(&audit, &plain);
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let classes: Vec<u64> = lines
            .iter()
            .map(|l| l["class_uid"].as_u64().unwrap())
            .collect();
        assert_eq!(classes, [4001, 4002, 6003, 4002]);
        let url = &lines[3]["http_request"]["url"];
        assert_eq!(url["scheme"], "http");
        assert_eq!(url["url_string"], "http://127.0.0.1:8080/blob");
        assert_eq!(lines[1]["http_request"]["url"]["scheme"], "https");
        assert_eq!(lines[1]["activity_id"], 6, "POST");
        assert_eq!(lines[1]["disposition_id"], 2);
        assert_eq!(lines[2]["resources"][0]["name"], "GITHUB_TOKEN");
        assert_eq!(lines[2]["disposition_id"], 2);
    }
}
