//! Requests this machine makes for the agent: `webfetch`, remote MCP servers, and whatever
//! else fetches from the host on the model's or the repository's behalf. The sandbox's own
//! way out is the allow-list proxy; these requests never pass through it, yet they come
//! from the same untrusted source (a model told what to fetch by a page it read, a
//! repository's config naming a server), and they leave from the host, where loopback, the
//! private network and the cloud's metadata service are one connection away.
//!
//! So they keep the allow-list's address rules ([`super::address`]): an address that is not
//! on the public internet is refused unless the user's own config names it, or the name
//! that led to it, in a `network` rule without wildcards. Only the user's own files count
//! (`$XDG_CONFIG_HOME/runner/config.toml` and `--config`): a repository's
//! `.runner/config.toml` naming `127.0.0.1` is the repository asking, not the user.
//!
//! The check is made where the connection is made, not on the URL's text: the clients
//! built here resolve names with [`Resolver`], which looks the name up once, drops every
//! address the rules do not open and hands the rest to the connector, so a name that
//! resolves to 127.0.0.1 (or is re-pointed there between two lookups) cannot be connected
//! to. A URL whose host is an address (`http://2130706433/`, `http://[::ffff:127.0.0.1]/`;
//! the URL parser turns every spelling into the address) is never resolved, so
//! [`Outbound::check_url`] judges it before each request, and every redirect is a new
//! request judged again.
//!
//! Where runner's environment names an upstream proxy ([`super::egress`]), the clients
//! send through it, and the proxy resolves the names: then [`Outbound::judge`] resolves
//! each URL's name here first and refuses it if it leads somewhere closed (a name this
//! machine cannot resolve at all is left to the proxy). The proxy's own address is the
//! user's choice and never refused.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::address::{self, Reserved};
use super::egress::{BadProxy, Egress};
use runner_permission::rules::{Action, Rule};
use runner_permission::wildcard;

/// How long a name may take to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request was not made: the message says what was refused, why, and how the user
/// opens it on purpose.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Why a host-side request could not be made or its client set up.
#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    /// The rules refuse it.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The name did not resolve (or resolved only to refused addresses).
    #[error("{0}")]
    Resolve(Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot set up the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    #[error("cannot make an HTTP client: {0}")]
    Client012(#[source] reqwest012::Error),
    /// The upstream proxy of runner's environment cannot be used.
    #[error(transparent)]
    Proxy(#[from] BadProxy),
}

/// The policy of one session's host-side requests, and the HTTP client that keeps it.
pub struct Outbound {
    openings: Arc<Openings>,
    client: OnceLock<reqwest::Client>,
}

/// Which reserved addresses the user's own config opens.
struct Openings {
    /// The configured `network` rules, every layer, in precedence order.
    rules: Vec<Rule>,
    /// This machine's own addresses (a public one is still this machine).
    own: Vec<IpAddr>,
    /// The upstream proxies' hosts, which the user named and so may be anywhere.
    proxies: Vec<String>,
}

impl Outbound {
    /// The policy of a session whose configured rules are `rules` (every layer, merged).
    pub fn new(rules: &[Rule]) -> Outbound {
        Outbound {
            openings: Arc::new(Openings {
                rules: rules
                    .iter()
                    .filter(|r| wildcard::matches("network", &r.permission))
                    .cloned()
                    .collect(),
                own: address::own_addresses(),
                proxies: Egress::from_env().proxy_hosts(),
            }),
            client: OnceLock::new(),
        }
    }

    /// A client for one request at a time: no redirects followed (the caller follows them,
    /// calling [`Self::check_url`] for each), no proxy, every name resolved by
    /// [`Resolver`]. Built once per session.
    pub fn client(&self) -> Result<&reqwest::Client, OutboundError> {
        if let Some(c) = self.client.get() {
            return Ok(c);
        }
        let egress = Egress::from_env();
        let mut builder = runner_http::client_builder().no_proxy();
        if egress.is_set() {
            builder = builder.proxy(reqwest::Proxy::custom(|url| {
                Egress::from_env()
                    .for_url(url)
                    .ok()
                    .flatten()
                    .map(|p| p.url().to_string())
            }));
        }
        let built = builder
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Resolver(self.openings.clone()))
            .build()
            .map_err(OutboundError::Client)?;
        Ok(self.client.get_or_init(|| built))
    }

    /// The same guard on the older reqwest that rmcp's streamable-HTTP transport takes,
    /// with `headers` on every request. rmcp follows redirects through the client, so the
    /// client follows only those to the same origin (the rules judged that URL, and the
    /// headers were meant for it), each judged again.
    pub fn client_012(
        &self,
        headers: reqwest012::header::HeaderMap,
    ) -> Result<reqwest012::Client, OutboundError> {
        runner_http::install_tls();
        let openings = self.openings.clone();
        let redirects = reqwest012::redirect::Policy::custom(move |attempt| {
            let first = attempt.previous().first().cloned();
            let next = attempt.url().clone();
            if attempt.previous().len() > 10 {
                return attempt.error(format!("{next}: more than 10 redirects"));
            }
            if first.as_ref().map(|f| f.origin()) != Some(next.origin()) {
                let from = first.map(|f| f.to_string()).unwrap_or_default();
                return attempt.error(format!(
                    "{from} redirected to {next}, another origin; not followed: the rules judged {from}, and its headers are meant for it"
                ));
            }
            match openings.check_url(&next) {
                Ok(()) => attempt.follow(),
                Err(refused) => attempt.error(refused),
            }
        });
        let mut builder = reqwest012::Client::builder()
            .default_headers(headers)
            .connect_timeout(Duration::from_secs(30))
            .no_proxy();
        if Egress::from_env().is_set() {
            builder = builder.proxy(reqwest012::Proxy::custom(|url| {
                let url = reqwest::Url::parse(url.as_str()).ok()?;
                Egress::from_env()
                    .for_url(&url)
                    .ok()
                    .flatten()
                    .map(|p| p.url().to_string())
            }));
        }
        builder
            .redirect(redirects)
            .dns_resolver(Arc::new(Resolver(self.openings.clone())))
            .build()
            .map_err(OutboundError::Client012)
    }

    /// Judges a URL whose host is an address, which no resolver sees; a name is judged
    /// when the client resolves it (see [`Self::check`] to judge it now).
    pub fn check_url(&self, url: &reqwest::Url) -> Result<(), Refused> {
        self.openings.check_url(url)
    }

    /// Judges `url` before a request to it: by its text, and, when it goes through an
    /// upstream proxy (whose resolution no resolver here sees), by where its name leads.
    pub async fn judge(&self, url: &reqwest::Url) -> Result<(), OutboundError> {
        match Egress::from_env().for_url(url)? {
            Some(_) => self.check(url).await,
            None => Ok(self.openings.check_url(url)?),
        }
    }

    /// Judges `url` whole now, resolving its name: for a clear message before a client
    /// whose own errors would bury it. The connection is still judged when it is made.
    /// Through an upstream proxy, a name this machine cannot resolve is the proxy's.
    pub async fn check(&self, url: &reqwest::Url) -> Result<(), OutboundError> {
        let proxied = Egress::from_env().for_url(url)?.is_some();
        self.openings.check_url(url)?;
        let Some(Host::Name(name)) = host_of(url) else {
            return Ok(());
        };
        match self.openings.resolve(&name).await {
            Ok(_) => Ok(()),
            Err(e) if proxied && e.downcast_ref::<Refused>().is_none() => Ok(()),
            Err(e) => Err(OutboundError::Resolve(e)),
        }
    }

    /// The refusal carried anywhere in an error's chain of causes, if the error is one.
    pub fn refusal_in<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Refused> {
        let mut cur = Some(error);
        while let Some(e) = cur {
            if let Some(r) = e.downcast_ref::<Refused>() {
                return Some(r);
            }
            cur = e.source();
        }
        None
    }
}

enum Host {
    Name(String),
    Ip(IpAddr),
}

/// The URL's host: an address in any of its spellings is an address (the parser made it
/// one), anything else a name.
fn host_of(url: &reqwest::Url) -> Option<Host> {
    let host = url.host_str()?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    Some(match bare.parse::<IpAddr>() {
        Ok(ip) => Host::Ip(ip),
        Err(_) => Host::Name(host.to_string()),
    })
}

impl Openings {
    fn check_url(&self, url: &reqwest::Url) -> Result<(), Refused> {
        match host_of(url) {
            Some(Host::Ip(ip)) => match self.reserved(None, ip) {
                None => Ok(()),
                Some(why) => Err(self.refusal(&ip.to_string(), &[(ip, why)])),
            },
            Some(Host::Name(_)) => Ok(()),
            None => Err(Refused(format!("{url} names no host"))),
        }
    }

    /// Why `ip`, reached under `name`, stays closed; `None` when it may be connected to.
    fn reserved(&self, name: Option<&str>, ip: IpAddr) -> Option<Reserved> {
        let why = address::classify(ip, &self.own)?;
        let opened = name.is_some_and(|n| opened_by_user(&self.rules, n))
            || opened_by_user(&self.rules, &ip.to_string());
        (!opened).then_some(why)
    }

    /// Looks `name` up once and keeps the addresses that may be connected to.
    async fn resolve(
        &self,
        name: &str,
    ) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let bare = name.trim_start_matches('[').trim_end_matches(']');
        let found: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, 0)],
            Err(_) => {
                let lookup = tokio::net::lookup_host((bare, 0));
                match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
                    Ok(Ok(addrs)) => addrs.collect(),
                    Ok(Err(e)) => return Err(format!("{name} does not resolve: {e}").into()),
                    Err(_) => {
                        return Err(format!(
                            "resolving {name} took over {} s",
                            RESOLVE_TIMEOUT.as_secs()
                        )
                        .into());
                    }
                }
            }
        };
        if self.proxies.iter().any(|p| p == bare) {
            return Ok(found);
        }
        let mut refused = Vec::new();
        let usable: Vec<SocketAddr> = found
            .into_iter()
            .filter(|a| match self.reserved(Some(name), a.ip()) {
                None => true,
                Some(why) => {
                    refused.push((a.ip(), why));
                    false
                }
            })
            .collect();
        if usable.is_empty() {
            if refused.is_empty() {
                return Err(format!("{name} resolves to no address").into());
            }
            return Err(Box::new(self.refusal(name, &refused)));
        }
        Ok(usable)
    }

    /// What was refused, why, and how to open it; a repository's rule that tried is named.
    fn refusal(&self, host: &str, refused: &[(IpAddr, Reserved)]) -> Refused {
        let what: Vec<String> = refused
            .iter()
            .map(|(ip, why)| format!("{ip} ({})", why.describe()))
            .collect();
        let lead = if refused.iter().any(|(ip, _)| ip.to_string() == host) {
            format!("{} is not a public address", what.join(", "))
        } else {
            format!("{host} leads to {}, not a public address", what.join(", "))
        };
        let mut text = format!(
            "{lead}. Requests runner makes from this machine for the agent reach loopback, private, link-local (cloud metadata) and other reserved addresses only when your own config names the host. To open it on purpose, add `\"{host}\" = \"allow\"` under [permission.network] in {} (or in a file you pass with --config).",
            runner_dirs::user_config().display()
        );
        let subjects: Vec<String> = std::iter::once(host.to_string())
            .chain(refused.iter().map(|(ip, _)| ip.to_string()))
            .collect();
        if let Some(rule) = subjects.iter().find_map(|s| named_by_other(&self.rules, s)) {
            text.push_str(&format!(
                " The rule network {:?} = \"allow\" in {} does not count: a repository's config cannot open this machine's private addresses.",
                rule.pattern, rule.source.origin
            ));
        }
        Refused(text)
    }
}

/// Whether the user's own config opens `subject` (a host name or an address) although it
/// leads somewhere private: among the `network` rules of the user's own files, the last
/// one matching it allows it and names it exactly, without wildcards, and the last rule of
/// every layer matching it does not deny it. The allow-list proxy and the host's own
/// requests judge by this one function.
pub fn opened_by_user(rules: &[Rule], subject: &str) -> bool {
    let matching = |r: &&Rule| {
        wildcard::matches("network", &r.permission) && wildcard::matches(subject, &r.pattern)
    };
    let users = rules
        .iter()
        .filter(|r| r.source.layer.is_users_own())
        .rev()
        .find(matching);
    let last = rules.iter().rev().find(matching);
    users.is_some_and(|r| r.action == Action::Allow && is_exact(r, subject))
        && last.is_some_and(|r| r.action != Action::Deny)
}

/// A rule from outside the user's own files that names `subject` exactly as an allow (a
/// repository trying to open it), for the refusal's message.
fn named_by_other<'a>(rules: &'a [Rule], subject: &str) -> Option<&'a Rule> {
    rules.iter().rev().find(|r| {
        !r.source.layer.is_users_own()
            && wildcard::matches("network", &r.permission)
            && r.action == Action::Allow
            && is_exact(r, subject)
    })
}

fn is_exact(rule: &Rule, subject: &str) -> bool {
    rule.pattern == subject && !rule.pattern.contains(['*', '?'])
}

/// Resolves names for the clients built here: one lookup, and only the addresses the
/// rules open reach the connector, so what is judged is what is connected to.
struct Resolver(Arc<Openings>);

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let openings = self.0.clone();
        let name = name.as_str().to_string();
        Box::pin(async move {
            let addrs = openings.resolve(&name).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

impl reqwest012::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest012::dns::Name) -> reqwest012::dns::Resolving {
        let openings = self.0.clone();
        let name = name.as_str().to_string();
        Box::pin(async move {
            let addrs = openings.resolve(&name).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest012::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner_permission::rules::Layer;

    fn rule(pattern: &str, action: Action, layer: Layer) -> Rule {
        Rule::new("network", pattern, action, "test", 1).in_layer(layer)
    }

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).unwrap()
    }

    #[test]
    fn only_the_users_own_exact_rule_opens_an_address() {
        use Action::*;
        use Layer::*;
        type Rules<'a> = &'a [(&'a str, Action, Layer)];
        let cases: &[(Rules, bool)] = &[
            (&[("127.0.0.1", Allow, User)], true),
            (&[("127.0.0.1", Allow, Explicit)], true),
            // A repository's rule, the profile's, or an agent's, cannot.
            (&[("127.0.0.1", Allow, Project)], false),
            (&[("127.0.0.1", Allow, Profile)], false),
            (&[("127.0.0.1", Allow, Session)], false),
            // Wildcards never name a host, even when they match only it.
            (&[("*", Allow, User)], false),
            (&[("127.0.0.?", Allow, User)], false),
            // The user's later wildcard is the user's last word.
            (&[("127.0.0.1", Allow, User), ("*", Ask, User)], false),
            // A repository's later wildcard does not take the user's rule away; its deny does.
            (&[("127.0.0.1", Allow, User), ("*", Allow, Project)], true),
            (
                &[("127.0.0.1", Allow, User), ("127.0.0.1", Deny, Project)],
                false,
            ),
            (&[("127.0.0.1", Deny, User)], false),
        ];
        for (rules, want) in cases {
            let rules: Vec<Rule> = rules.iter().map(|(p, a, l)| rule(p, *a, *l)).collect();
            assert_eq!(opened_by_user(&rules, "127.0.0.1"), *want, "{rules:?}");
        }
    }

    #[test]
    fn every_spelling_of_a_reserved_address_is_judged_as_the_address() {
        let strict = Outbound::new(&[]);
        for u in [
            "http://127.0.0.1/",
            "http://127.1/",
            "http://0x7f000001/",
            "http://2130706433/",
            "http://0177.0.0.01/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:a9fe:a9fe]/",
            "http://[0:0:0:0:0:0:0:1]/",
            "http://0/",
            "http://169.254.169.254/latest/meta-data",
            "http://10.0.0.1/",
            "http://100.64.0.1/",
            "https://192.168.1.1:8443/",
            "http://[fd00::1]/",
        ] {
            let err = strict.check_url(&url(u)).unwrap_err();
            assert!(err.0.contains("not a public address"), "{u}: {err}");
        }
        // Names are left to the resolver; public addresses pass.
        assert!(strict.check_url(&url("http://localhost/")).is_ok());
        assert!(strict.check_url(&url("http://8.8.8.8/")).is_ok());
        assert!(strict.check_url(&url("http://[2606:4700::1111]/")).is_ok());
    }

    #[tokio::test]
    async fn a_name_is_judged_by_the_addresses_it_resolves_to() {
        // `localhost` comes from the hosts file: a name that leads to loopback.
        let strict = Outbound::new(&[]);
        let err = strict
            .check(&url("http://localhost:9/"))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("localhost leads to"), "{err}");
        assert!(err.contains("loopback"), "{err}");
        let refused = strict.openings.resolve("localhost").await.unwrap_err();
        assert!(refused.downcast_ref::<Refused>().is_some(), "{refused}");

        // Opened by its name, every address it leads to may be connected to; opened by
        // one address, only that one.
        let by_name = Outbound::new(&[rule("localhost", Action::Allow, Layer::User)]);
        let addrs = by_name.openings.resolve("localhost").await.unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
        let by_address = Outbound::new(&[rule("127.0.0.1", Action::Allow, Layer::User)]);
        let addrs = by_address.openings.resolve("localhost").await.unwrap();
        assert!(
            addrs.iter().all(|a| a.ip() == IpAddr::from([127, 0, 0, 1])),
            "{addrs:?}"
        );
    }

    #[test]
    fn a_refusal_says_how_to_open_it_and_why_a_repositorys_rule_did_not() {
        let project = Rule::new(
            "network",
            "169.254.169.254",
            Action::Allow,
            "/repo/.runner/config.toml",
            1,
        )
        .in_layer(Layer::Project);
        let o = Outbound::new(&[project]);
        let err = o
            .check_url(&url("http://169.254.169.254/latest/meta-data"))
            .unwrap_err()
            .0;
        assert!(err.contains("169.254.169.254 (link-local"), "{err}");
        assert!(
            err.contains("add `\"169.254.169.254\" = \"allow\"` under [permission.network]"),
            "{err}"
        );
        assert!(
            err.contains(&runner_dirs::user_config().display().to_string()),
            "{err}"
        );
        assert!(
            err.contains("/repo/.runner/config.toml does not count"),
            "{err}"
        );
    }

    #[test]
    fn a_refusal_is_found_in_an_errors_causes() {
        #[derive(Debug)]
        struct Wrapper(Refused);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("error sending request")
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Wrapper(Refused("no".into()));
        assert_eq!(Outbound::refusal_in(&e), Some(&Refused("no".into())));
    }
}
