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
//! machine cannot resolve at all is left to the proxy).
//!
//! The proxy's own address is the user's choice, and may be loopback or private; it is
//! open only as the proxy, at the proxy's port. A proxy named `localhost:3128` with
//! `no_proxy=localhost` must not make `http://localhost:8080/` reachable, nor
//! `http://localhost:8080/` sent through the proxy (which would fetch it from its own
//! loopback). The resolver sees names without ports, so the clients are given the proxy
//! under a name of its own ([`PROXY_DOMAIN`], with a token made per process), which only
//! the resolver here turns into the proxy's addresses; the proxy's real name is judged
//! like any other, and a URL naming the proxy's own name is refused.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::address::{self, Reserved};
use super::egress::{BadProxy, Egress, ProxyServer};
use runner_permission::rules::{Action, Rule};
use runner_permission::wildcard;

/// How long a name may take to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The domain of the names the clients built here reach the upstream proxies by.
/// `.invalid` resolves nowhere else (RFC 6761), so a client that bypassed the resolver
/// here would fail rather than reach something.
pub const PROXY_DOMAIN: &str = "upstream-proxy.runner.invalid";

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
    /// The upstream proxies, which the user named and so may be anywhere, each with the
    /// name the clients reach it by.
    proxies: Vec<(String, ProxyServer)>,
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
                proxies: proxy_names(Egress::from_env()),
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
            let openings = self.openings.clone();
            builder = builder.proxy(reqwest::Proxy::custom(move |url| {
                let proxy = Egress::from_env().for_url(url).ok().flatten()?;
                Some(openings.proxy_url(proxy))
            }));
        }
        let built = builder
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Resolver(self.openings.clone()))
            .build()
            .map_err(OutboundError::Client)?;
        Ok(self.client.get_or_init(|| built))
    }

    /// The same guard for rmcp's streamable-HTTP transport, with `headers` on every
    /// request. rmcp follows redirects through the client, so the client follows only those
    /// to the same origin (the rules judged that URL, and the headers were meant for it),
    /// each judged again.
    pub fn client_with_headers(
        &self,
        headers: reqwest::header::HeaderMap,
    ) -> Result<reqwest::Client, OutboundError> {
        let openings = self.openings.clone();
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
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
        let mut builder = runner_http::client_builder()
            .default_headers(headers)
            .no_proxy();
        if Egress::from_env().is_set() {
            let openings = self.openings.clone();
            builder = builder.proxy(reqwest::Proxy::custom(move |url| {
                let proxy = Egress::from_env().for_url(url).ok().flatten()?;
                Some(openings.proxy_url(proxy))
            }));
        }
        builder
            .redirect(redirects)
            .dns_resolver(Resolver(self.openings.clone()))
            .build()
            .map_err(OutboundError::Client)
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

/// Each usable upstream proxy with the name the clients reach it by: `p<n>-<token>.`
/// [`PROXY_DOMAIN`], the token random per process, so that nobody who has not been told it
/// can name it (a URL under the domain is refused anyway).
fn proxy_names(egress: &Egress) -> Vec<(String, ProxyServer)> {
    use std::hash::BuildHasher;
    let token = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    egress
        .proxies()
        .into_iter()
        .enumerate()
        .map(|(i, p)| (format!("p{i}-{token:016x}.{PROXY_DOMAIN}"), p.clone()))
        .collect()
}

fn is_proxy_name(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == PROXY_DOMAIN || host.ends_with(&format!(".{PROXY_DOMAIN}"))
}

impl Openings {
    /// The proxy URL a client built here is given for `proxy`: the configured one (its
    /// credentials and port), under the name only [`Resolver`] knows.
    fn proxy_url(&self, proxy: &ProxyServer) -> String {
        let named = self.proxies.iter().find(|(_, p)| p == proxy);
        let renamed = named.and_then(|(name, _)| {
            let mut url = reqwest::Url::parse(proxy.url()).ok()?;
            url.set_host(Some(name)).ok()?;
            Some(url.to_string())
        });
        // Never direct instead: the proxy's own name, judged like any other, at worst.
        renamed.unwrap_or_else(|| proxy.url().to_string())
    }

    fn check_url(&self, url: &reqwest::Url) -> Result<(), Refused> {
        match host_of(url) {
            Some(Host::Ip(ip)) => match self.reserved(None, ip) {
                None => Ok(()),
                Some(why) => Err(self.refusal(&ip.to_string(), &[(ip, why)])),
            },
            Some(Host::Name(name)) if is_proxy_name(&name) => Err(Refused(format!(
                "{url} is not fetched: names under {PROXY_DOMAIN} are runner's own names for the upstream proxy, which is open only as the proxy"
            ))),
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
        // The upstream proxy, under the name only the clients' proxy setting uses: the
        // user's choice, wherever it is, and reached only at its port.
        let proxy = self
            .proxies
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(bare));
        if let Some((_, proxy)) = proxy {
            return lookup(&proxy.host)
                .await
                .map_err(|e| format!("the upstream proxy {}: {e}", proxy.address()).into());
        }
        let found = lookup(bare).await?;
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

/// The addresses `name` (a name, or an address without brackets) stands for, looked up
/// once.
async fn lookup(name: &str) -> Result<Vec<SocketAddr>, String> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, 0)]);
    }
    match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((name, 0))).await {
        Ok(Ok(addrs)) => Ok(addrs.collect()),
        Ok(Err(e)) => Err(format!("{name} does not resolve: {e}")),
        Err(_) => Err(format!(
            "resolving {name} took over {} s",
            RESOLVE_TIMEOUT.as_secs()
        )),
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

/// The loopback names ([`runner_sandbox::spec::LOOPBACK_NAMES`]) the user's own config
/// opens ([`opened_by_user`]). Inside the wall they mean the host's loopback, so the
/// sandbox's `no_proxy` leaves them to the proxy (`SandboxSpec::host_loopback`).
pub fn host_loopback(rules: &[Rule]) -> Vec<String> {
    runner_sandbox::spec::LOOPBACK_NAMES
        .into_iter()
        .filter(|name| opened_by_user(rules, name))
        .map(str::to_string)
        .collect()
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

    /// Only the loopback names the user's own config opens leave the sandbox's `no_proxy`:
    /// a repository's rule naming one does not send it to the host.
    #[test]
    fn host_loopback_is_what_the_users_own_rules_open() {
        let rules = [
            rule("127.0.0.1", Action::Allow, Layer::User),
            rule("localhost", Action::Allow, Layer::Project),
            rule("*", Action::Allow, Layer::User),
        ];
        assert_eq!(host_loopback(&rules[..2]), ["127.0.0.1"]);
        // The user's later wildcard is the user's last word (as for the proxy's check).
        assert!(host_loopback(&rules).is_empty());
        assert!(host_loopback(&[]).is_empty());
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

    #[tokio::test]
    async fn the_upstream_proxy_is_open_under_its_own_name_at_its_port_only() {
        let egress = Egress::from_vars(|k| {
            (k == "HTTP_PROXY").then(|| "http://me:pw@localhost:3128".to_string())
        });
        let openings = Openings {
            rules: Vec::new(),
            own: Vec::new(),
            proxies: proxy_names(&egress),
        };
        // The clients are given the proxy's URL with its credentials and port, under a
        // name only the resolver here knows.
        let given = url(&openings.proxy_url(egress.proxies()[0]));
        let name = given.host_str().unwrap().to_string();
        assert!(name.ends_with(PROXY_DOMAIN), "{given}");
        assert_eq!(
            (given.username(), given.password(), given.port()),
            ("me", Some("pw"), Some(3128))
        );
        let addrs = openings.resolve(&name).await.unwrap();
        assert!(
            !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()),
            "{addrs:?}"
        );
        // The proxy's real name is judged like any other: loopback, closed.
        let err = openings.resolve("localhost").await.unwrap_err();
        assert!(err.downcast_ref::<Refused>().is_some(), "{err}");
        // And no URL may name the proxy's own name, at any port.
        for port in [3128, 8080] {
            let refused = openings
                .check_url(&url(&format!("http://{name}:{port}/")))
                .unwrap_err();
            assert!(refused.0.contains("open only as the proxy"), "{refused}");
        }
        // The name carries a random token: it cannot be told from the proxy's address.
        assert_ne!(proxy_names(&egress)[0].0, name);
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
