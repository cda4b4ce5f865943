//! The sandbox's network mode and where its proxy listens. Both sides of the wall read
//! these: the host to set the sandbox up, the server to confine commands (landlock's TCP
//! rules and the seccomp socket filter depend on the mode).

/// Whether commands may reach a network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// No sockets but Unix ones (landlock: seccomp + landlock TCP rules; docker:
    /// `network_mode=none`).
    #[default]
    None,
    /// No route out but a proxy on the sandbox's own loopback, which carries each
    /// connection to the host, where the `network` permission rules decide (see
    /// the host's `network` module).
    Allowlist,
    /// The host's network, unfiltered.
    Host,
}

impl Network {
    /// Every mode, in the order the command line lists them.
    pub const ALL: [Network; 3] = [Network::None, Network::Allowlist, Network::Host];

    /// The name the command line uses.
    pub fn as_arg(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Allowlist => "allowlist",
            Network::Host => "host",
        }
    }

    /// The engine's `network_mode`: an allow-list container has no network of its own.
    pub fn docker_mode(self) -> &'static str {
        match self {
            Network::None | Network::Allowlist => "none",
            Network::Host => "host",
        }
    }
}

/// Where the proxy listens inside the sandbox (its own loopback; nothing else is there).
pub const PROXY_PORT: u16 = 3128;

/// Points HTTP clients at the proxy, replacing any proxy variables the profile passed on
/// from the host.
pub fn set_proxy_env(env: &mut Vec<(String, String)>) {
    let proxy = proxy_env();
    env.retain(|(k, _)| !proxy.iter().any(|(p, _)| p == k));
    env.extend(proxy);
}

/// The variables that point HTTP clients at the proxy: both spellings, since curl reads
/// only the lower-case `http_proxy` and some tools only the upper-case ones. Loopback stays
/// direct, so a test server the command starts in the sandbox is still reachable.
pub fn proxy_env() -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    let mut env = Vec::new();
    for key in ["http_proxy", "https_proxy", "all_proxy"] {
        env.push((key.to_string(), url.clone()));
        env.push((key.to_uppercase(), url.clone()));
    }
    let direct = "localhost,127.0.0.1,::1".to_string();
    env.push(("no_proxy".into(), direct.clone()));
    env.push(("NO_PROXY".into(), direct));
    env
}

/// A name that is no network mode. (The protocol links serde alone, so no derive.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownNetwork(pub String);

impl std::fmt::Display for UnknownNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown network mode {:?}: use none, allowlist or host",
            self.0
        )
    }
}

impl std::error::Error for UnknownNetwork {}

impl std::str::FromStr for Network {
    type Err = UnknownNetwork;

    fn from_str(s: &str) -> Result<Network, UnknownNetwork> {
        Network::ALL
            .into_iter()
            .find(|n| n.as_arg() == s)
            .ok_or_else(|| UnknownNetwork(s.to_string()))
    }
}
