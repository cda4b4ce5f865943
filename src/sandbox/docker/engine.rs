//! Reaching the Docker engine, with errors that say how to make it answer.

use bollard::Docker;

/// Connects (DOCKER_HOST or the local socket) and negotiates the API version down to what
/// the engine speaks (20.10 speaks 1.41); the negotiation's request is the check that the
/// engine answers.
pub async fn connect() -> Result<Docker, String> {
    connect_to(None).await
}

/// Connects to `host` (`unix:///path`, `tcp://host:port`; `None`: DOCKER_HOST or the local
/// socket), as [`connect`] does.
pub async fn connect_to(host: Option<&str>) -> Result<Docker, String> {
    let docker = match host {
        Some(h) => Docker::connect_with_host(h)
            .map_err(|e| format!("cannot reach the Docker engine at {h}: {e}"))?,
        None => Docker::connect_with_defaults().map_err(|e| {
            format!("cannot reach the Docker engine: {e}. Start it (`dockerd &` or `systemctl start docker`) or set DOCKER_HOST")
        })?,
    };
    let docker = docker.negotiate_version().await.map_err(|e| match host {
        Some(h) => format!("the Docker engine at {h} does not answer: {e}"),
        None => format!(
            "the Docker engine does not answer: {e}. Is dockerd running? Start it with `dockerd &` \
             (Debian: `apt-get install docker.io`), or point DOCKER_HOST at a running engine"
        ),
    })?;
    Ok(docker)
}
