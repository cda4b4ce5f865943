//! The network allow-list: the host's end of the proxy that is a sandbox's only way out.
//!
//! In `--network allowlist` mode the sandbox has no route anywhere (a container without a
//! network, or a private network namespace with only `lo`). Its server listens on that
//! loopback and relays each connection, unread, over the sandbox protocol (see
//! `runner_sandbox_server::net`). Here, on the host, each connection's first bytes are read as an
//! HTTP proxy request ([`request`]), the destination is judged by the `network` permission
//! rules through the session's gate (so asks, `--ask` and `permission check` work as for
//! any other rule), the name is resolved here and checked against reserved ranges
//! ([`address`]), and only then does the host connect. Every connection is recorded.
//!
//! The hosts an `http` rule or a secret names are inspected ([`inspect`]): the proxy
//! answers their TLS itself and judges each request by method and path, and puts the
//! session's secrets ([`secrets`]) into the requests allowed to carry them.

pub mod address;
pub mod body;
mod cut;
pub mod egress;
pub mod inspect;
pub mod outbound;
pub mod programs;
mod pump;
pub mod record;
pub mod relay;
pub mod request;
pub mod scrub;
pub mod secrets;
pub mod settings;
pub mod sni;
pub mod tunnel;
mod upstream;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runner_permission::rules::Rule;
use runner_permission::{PermissionError, PermissionGate, PermissionRequest};
use runner_sandbox::SandboxClient;
use runner_sandbox::spec::PROXY_PORT;

pub use record::{ConnectionRecord, Uncounted};

/// Limits of one sandbox's network use.
#[derive(Debug, Clone, Copy)]
pub struct NetworkLimits {
    /// Connections open at once; one more is refused with `503`.
    pub connections: usize,
    /// Bytes both ways over the whole run; past it every connection is cut.
    pub bytes: u64,
    pub connect_timeout: Duration,
}

impl Default for NetworkLimits {
    fn default() -> Self {
        NetworkLimits {
            connections: 64,
            bytes: 8 << 30,
            connect_timeout: Duration::from_secs(15),
        }
    }
}

impl NetworkLimits {
    /// The limits a sandbox spec carries (profile keys `network_connections`, `network_bytes`).
    pub fn of(limits: &runner_sandbox::spec::Limits) -> NetworkLimits {
        NetworkLimits {
            connections: limits.net_connections as usize,
            bytes: limits.net_bytes,
            ..NetworkLimits::default()
        }
    }
}

/// Everything the proxy judges by, in one value: the session's gate, the configured rules
/// for the reserved-address check (which only a rule written without wildcards in the
/// user's own config can pass, as for the host's own requests:
/// [`outbound::opened_by_user`]), and what `[network]` adds ([`settings`]).
pub struct Policy {
    pub gate: Arc<dyn PermissionGate>,
    pub rules: Vec<Rule>,
    /// The hosts only some programs may reach (`[network.hosts."NAME"] programs`).
    pub programs: programs::Programs,
    /// The hosts read request by request, and the secrets put into them
    /// ([`settings::NetworkSettings::inspection`]: its authority must be in the sandbox's
    /// trust bundle, its placeholders in the sandbox's environment); `None`: none.
    pub inspection: Option<Arc<inspect::Inspection>>,
}

/// A refusal as the command inside sees it: the HTTP status and why.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub status: u16,
    pub reason: String,
}

impl Policy {
    /// `rules` alone decide: what they leave open is refused with `why_no_ask` (a shell
    /// holding the terminal, an evaluation nobody watches).
    pub fn without_asks(worktree: &std::path::Path, rules: Vec<Rule>, why_no_ask: &str) -> Policy {
        let asker = runner_permission::gate::PolicyAsker::deny(why_no_ask);
        let gate = runner_permission::gate::RuleGate::new(worktree, rules.clone(), Arc::new(asker));
        Policy {
            gate: Arc::new(gate),
            rules,
            programs: programs::Programs::default(),
            inspection: None,
        }
    }

    /// Judges `host:port` and resolves it; the addresses to try, or why not. `proxied`:
    /// the connection goes through the host's upstream proxy ([`egress`]), where a name
    /// this machine cannot resolve is the proxy's to resolve (the list is then empty); one
    /// that resolves is still checked, so a name leading to a private address is refused
    /// here as on a direct connection.
    pub async fn decide(
        &self,
        host: &str,
        port: u16,
        own: &[IpAddr],
        proxied: bool,
    ) -> Result<Vec<SocketAddr>, Refusal> {
        let mut request =
            PermissionRequest::new("network", vec![host.to_string()], vec![host.to_string()])
                .with_metadata(serde_json::json!({ "port": port }));
        // Who asks, for the person deciding: not a tool, a command behind the wall.
        request.tool = Some(format!("a command in the sandbox (port {port})"));
        if let Err(e) = self.gate.ask(&request).await {
            return Err(Refusal {
                status: 403,
                reason: refusal_reason(host, &e),
            });
        }
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => {
                let lookup = tokio::net::lookup_host((host, port));
                match tokio::time::timeout(Duration::from_secs(10), lookup).await {
                    Ok(Ok(addrs)) => addrs.collect(),
                    Ok(Err(_)) | Err(_) if proxied => return Ok(Vec::new()),
                    Ok(Err(e)) => {
                        return Err(Refusal {
                            status: 502,
                            reason: format!("{host} does not resolve on the host: {e}"),
                        });
                    }
                    Err(_) => {
                        return Err(Refusal {
                            status: 504,
                            reason: format!("resolving {host} took over 10 s"),
                        });
                    }
                }
            }
        };
        let name_named = self.named_exactly(host);
        let mut refused = Vec::new();
        let usable: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|a| match address::classify(a.ip(), own) {
                None => true,
                Some(_) if name_named || self.named_exactly(&a.ip().to_string()) => true,
                Some(why) => {
                    refused.push(format!("{} ({})", a.ip(), why.describe()));
                    false
                }
            })
            .collect();
        if usable.is_empty() {
            return Err(Refusal {
                status: 403,
                reason: if refused.is_empty() {
                    format!("{host} resolves to no address")
                } else if host.parse::<IpAddr>().is_ok() {
                    format!(
                        "{} is not a public address, and only a rule naming it exactly in your own config opens it (network \"{host}\" = \"allow\")",
                        refused.join(", ")
                    )
                } else {
                    format!(
                        "{host} leads to {}, which only a rule naming {host} or the address without wildcards in your own config can open (network \"{host}\" = \"allow\")",
                        refused.join(", ")
                    )
                },
            });
        }
        Ok(usable)
    }

    /// Whether the user's own config opens `subject` (see [`outbound::opened_by_user`]):
    /// a repository's `.runner/config.toml` cannot open the host's private addresses to
    /// its own commands.
    fn named_exactly(&self, subject: &str) -> bool {
        outbound::opened_by_user(&self.rules, subject)
    }
}

/// A short reason for the status line and the record: which rule, or who refused.
fn refusal_reason(host: &str, e: &PermissionError) -> String {
    match e {
        PermissionError::Denied(d) => match &d.rule {
            Some(r) => format!(
                "{host} is denied by the rule network {:?} = \"deny\" ({} #{})",
                r.pattern, r.source.origin, r.source.position
            ),
            None => format!("{host} is denied"),
        },
        PermissionError::Rejected { .. } => format!("the user refused network access to {host}"),
        PermissionError::Unanswered { reason, .. } => {
            format!("network access to {host} needs permission and was refused because {reason}")
        }
    }
}

/// What every connection of one sandbox shares.
pub(crate) struct Shared {
    pub client: SandboxClient,
    pub target: u64,
    pub policy: Policy,
    pub limits: NetworkLimits,
    pub own: Vec<IpAddr>,
    pub records: Mutex<record::Log>,
    pub bytes: AtomicU64,
    /// Told of each connection once it is over (the session file).
    pub observer: Mutex<Option<Observer>>,
    /// Holding pipes for downloads spliced into the server's input.
    pub pipes: runner_sandbox::splice::PipePool,
    /// The hosts read request by request, and the secrets; `None`: every host a tunnel.
    pub inspection: Option<Arc<inspect::Inspection>>,
}

/// Called with each connection's final record.
pub type Observer = Arc<dyn Fn(&ConnectionRecord) + Send + Sync>;

impl Shared {
    fn log(&self) -> std::sync::MutexGuard<'_, record::Log> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection judged; the number its record goes by.
    pub fn record(&self, record: ConnectionRecord) -> u64 {
        self.log().open(record)
    }

    /// The connection is over: its record is final, and the observer told of it.
    pub fn finish(&self, id: u64) {
        let record = self.log().finish(id);
        let observer = self
            .observer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let (Some(record), Some(observer)) = (record, observer) {
            observer(&record);
        }
    }

    pub fn update(&self, id: u64, f: impl FnOnce(&mut ConnectionRecord)) {
        self.log().update(id, f);
    }

    /// Counts bytes against the run's limit; false once it is spent.
    pub fn spend(&self, n: u64) -> bool {
        self.bytes.fetch_add(n, Ordering::Relaxed) + n <= self.limits.bytes
    }
}

/// The running proxy of one sandbox. It stops when the sandbox does.
pub struct NetworkProxy {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl NetworkProxy {
    /// Starts the listener in the sandbox and the dispatcher on the host, judging by
    /// `policy` (and inspecting the hosts its inspection names).
    pub async fn start(
        client: SandboxClient,
        policy: Policy,
        limits: NetworkLimits,
    ) -> Result<NetworkProxy, runner_sandbox::SandboxError> {
        let inspection = policy.inspection.clone();
        let (target, rx) = client
            .proxy_listen(PROXY_PORT, policy.programs.any())
            .await?;
        let shared = Arc::new(Shared {
            client,
            target,
            policy,
            limits,
            own: address::own_addresses(),
            records: Mutex::new(record::Log::new(record::MAX_KEPT)),
            bytes: AtomicU64::new(0),
            observer: Mutex::default(),
            pipes: Default::default(),
            inspection,
        });
        let task = tokio::spawn(relay::dispatch(shared.clone(), rx));
        Ok(NetworkProxy { shared, task })
    }

    /// Tells `observer` of every connection from now on, once it is over.
    pub fn observe(&self, observer: Observer) {
        *self
            .shared
            .observer
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(observer);
    }

    /// The connections kept one by one, finished or open, in the order they were judged.
    pub fn records(&self) -> Vec<ConnectionRecord> {
        self.shared.log().records()
    }

    /// Waits, at most `limit`, for the connections still open to finish. Once the commands
    /// that made them have ended, what remains is the host's side catching up (the last
    /// bytes acknowledged, the destination closed); a report made before that would show
    /// a connection's bytes as not yet counted.
    pub async fn settle(&self, limit: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.shared.log().any_open() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Connections past [`record::MAX_KEPT`], counted and not kept.
    pub fn past_limit(&self) -> Uncounted {
        self.shared.log().past_limit()
    }
}

impl Drop for NetworkProxy {
    fn drop(&mut self) {
        self.task.abort();
        // Connections open now are cut with the sandbox; the session file still hears of
        // them.
        let cut = self.shared.log().cut_open("cut: the sandbox closed");
        let observer = self
            .shared
            .observer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(observer) = observer {
            cut.iter().for_each(|r| observer(r));
        }
    }
}

/// The sandbox's events for the proxy's listener, every connection's.
pub(crate) type Events = runner_sandbox::client::Responses;

#[cfg(test)]
mod tests {
    use super::*;
    use runner_permission::rules::{Action, Layer};

    /// A policy of `rules` (all `network`, from the user's own config), where an ask is
    /// refused.
    fn policy(rules: &[(&str, Action)]) -> Policy {
        policy_in(rules, Layer::User)
    }

    fn policy_in(rules: &[(&str, Action)], layer: Layer) -> Policy {
        let rules: Vec<Rule> = rules
            .iter()
            .enumerate()
            .map(|(i, (pattern, action))| {
                Rule::new("network", pattern, *action, "test", i + 1).in_layer(layer)
            })
            .collect();
        Policy::without_asks(std::path::Path::new("/w"), rules, "nobody is there")
    }

    // Nothing here connects: `decide` judges and resolves (loopback names come from the
    // hosts file), the caller connects.

    #[tokio::test]
    async fn a_wildcard_never_opens_a_reserved_address() {
        let p = policy(&[("*", Action::Allow)]);
        for host in [
            "127.0.0.1",
            "localhost",
            "169.254.169.254",
            "10.0.0.1",
            "::1",
        ] {
            let err = p.decide(host, 80, &[], false).await.unwrap_err();
            assert_eq!(err.status, 403, "{host}");
            assert!(
                err.reason.contains("only a rule naming"),
                "{host}: {}",
                err.reason
            );
        }
        assert!(p.decide("8.8.8.8", 53, &[], false).await.is_ok());
        // The machine's own public address is the machine.
        let own: IpAddr = "198.51.100.7".parse().unwrap();
        let err = p
            .decide("198.51.100.7", 22, &[own], false)
            .await
            .unwrap_err();
        assert!(err.reason.contains("own addresses"), "{}", err.reason);
    }

    #[tokio::test]
    async fn an_exact_rule_opens_its_address_or_its_name() {
        let p = policy(&[("*", Action::Deny), ("127.0.0.1", Action::Allow)]);
        let addrs = p.decide("127.0.0.1", 8080, &[], false).await.unwrap();
        assert_eq!(addrs, vec!["127.0.0.1:8080".parse().unwrap()]);
        let p = policy(&[("localhost", Action::Allow)]);
        let addrs = p.decide("localhost", 8080, &[], false).await.unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
        // A pattern with a wildcard is not an exact rule, even if it matches only one name.
        let p = policy(&[("localhos?", Action::Allow)]);
        assert!(p.decide("localhost", 8080, &[], false).await.is_err());
    }

    #[tokio::test]
    async fn a_repositorys_exact_rule_does_not_open_the_hosts_addresses() {
        // The project's config allows the host (the gate lets it through) but cannot open
        // it: only the user's own files can.
        let p = policy_in(&[("127.0.0.1", Action::Allow)], Layer::Project);
        let err = p.decide("127.0.0.1", 8080, &[], false).await.unwrap_err();
        assert_eq!(err.status, 403);
        assert!(err.reason.contains("your own config"), "{}", err.reason);
        let p = policy_in(&[("127.0.0.1", Action::Allow)], Layer::Explicit);
        assert!(p.decide("127.0.0.1", 8080, &[], false).await.is_ok());
    }

    #[tokio::test]
    async fn a_refusal_names_the_rule_or_who_refused() {
        let p = policy(&[("*", Action::Deny), ("*.example.org", Action::Allow)]);
        let err = p.decide("evil.test", 443, &[], false).await.unwrap_err();
        assert_eq!(err.status, 403);
        assert!(
            err.reason.contains("network \"*\" = \"deny\" (test #1)"),
            "{}",
            err.reason
        );
        let p = policy(&[("*", Action::Ask)]);
        let err = p.decide("pypi.org", 443, &[], false).await.unwrap_err();
        assert!(err.reason.contains("nobody is there"), "{}", err.reason);
    }
}
