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

/// The loopback names `no_proxy` keeps direct, for a server a command starts in the
/// sandbox: its own loopback, which is not the host's.
pub const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Points HTTP clients at the proxy, replacing any proxy variables the profile passed on
/// from the host. `host_loopback`: the names of [`LOOPBACK_NAMES`] that mean the host's
/// loopback (the user's own config opens them), which go through the proxy.
pub fn set_proxy_env(env: &mut Vec<(String, String)>, host_loopback: &[String]) {
    let proxy = proxy_env(host_loopback);
    env.retain(|(k, _)| !proxy.iter().any(|(p, _)| p == k));
    env.extend(proxy);
}

/// The variables that point HTTP clients at the proxy: both spellings, since curl reads
/// only the lower-case `http_proxy` and some tools only the upper-case ones.
///
/// Loopback stays direct (`no_proxy`), so a test server the command starts in the sandbox
/// is still reachable, except for the names in `host_loopback`. Inside the wall nothing
/// of the host's loopback can be reached directly, so a client sending a name the user
/// opened on purpose (a model server on `127.0.0.1`) direct would only fail to connect;
/// through the proxy it reaches the host, where the rules judge it again.
pub fn proxy_env(host_loopback: &[String]) -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    let mut env = Vec::new();
    for key in ["http_proxy", "https_proxy", "all_proxy"] {
        env.push((key.to_string(), url.clone()));
        env.push((key.to_uppercase(), url.clone()));
    }
    let direct: Vec<&str> = LOOPBACK_NAMES
        .into_iter()
        .filter(|name| !host_loopback.iter().any(|h| h == name))
        .collect();
    let direct = direct.join(",");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn no_proxy(host_loopback: &[&str]) -> (String, String) {
        let host: Vec<String> = host_loopback.iter().map(|h| h.to_string()).collect();
        let env = proxy_env(&host);
        let get = |key: &str| {
            env.iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        (get("no_proxy"), get("NO_PROXY"))
    }

    /// Every loopback name is direct until the user opens one: then that name (and only
    /// it) goes to the proxy, in both spellings of the variable.
    #[test]
    fn a_loopback_name_the_user_opened_goes_through_the_proxy() {
        let all = "localhost,127.0.0.1,::1".to_string();
        assert_eq!(no_proxy(&[]), (all.clone(), all));
        let rest = "localhost,::1".to_string();
        assert_eq!(no_proxy(&["127.0.0.1"]), (rest.clone(), rest));
        let none = String::new();
        assert_eq!(
            no_proxy(&["localhost", "127.0.0.1", "::1"]),
            (none.clone(), none)
        );
    }

    /// The profile's own proxy variables are replaced, not kept beside runner's.
    #[test]
    fn the_profiles_proxy_variables_are_replaced() {
        let mut env = vec![
            ("no_proxy".to_string(), "*".to_string()),
            ("HTTPS_PROXY".to_string(), "http://corp:8080".to_string()),
            ("LANG".to_string(), "C.UTF-8".to_string()),
        ];
        set_proxy_env(&mut env, &["::1".to_string()]);
        let values = |key: &str| -> Vec<&str> {
            env.iter()
                .filter(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
                .collect()
        };
        assert_eq!(values("no_proxy"), ["localhost,127.0.0.1"]);
        assert_eq!(values("HTTPS_PROXY"), ["http://127.0.0.1:3128"]);
        assert_eq!(values("LANG"), ["C.UTF-8"]);
    }
}
