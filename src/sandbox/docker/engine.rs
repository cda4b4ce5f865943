//! Reaching the Docker engine, with errors that say how to make it answer.

use bollard::Docker;

use crate::sandbox::spec::DEFAULT_RUNTIME;

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

/// The engine's OCI runtimes (sorted) and its default one, from `docker info`.
pub async fn runtimes(docker: &Docker) -> Result<(Vec<String>, Option<String>), String> {
    let info = docker
        .info()
        .await
        .map_err(|e| format!("cannot ask the Docker engine for its runtimes: {e}"))?;
    let mut names: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
    names.sort();
    Ok((names, info.default_runtime))
}

/// The runtime a container runs under: the first of `wanted` the engine has (`None`: the
/// engine's default, for an empty list or [`DEFAULT_RUNTIME`]). Asks the engine only when
/// a runtime is named. None of them there: an error naming the runtimes it has.
pub async fn choose_runtime(docker: &Docker, wanted: &[String]) -> Result<Option<String>, String> {
    if wanted.is_empty() || wanted[0] == DEFAULT_RUNTIME {
        return Ok(None);
    }
    let (have, default) = runtimes(docker).await?;
    for w in wanted {
        if w == DEFAULT_RUNTIME {
            return Ok(None);
        }
        if have.iter().any(|h| h == w) {
            return Ok(Some(w.clone()));
        }
    }
    Err(missing_runtime(wanted, &have, default.as_deref()))
}

/// "The engine has no runtime X; it has: …", with how to add gVisor when that was asked.
pub fn missing_runtime(wanted: &[String], have: &[String], default: Option<&str>) -> String {
    let asked = if wanted.len() == 1 {
        format!("no runtime {:?}", wanted[0])
    } else {
        format!("none of the runtimes {}", wanted.join(", "))
    };
    let mut msg = format!(
        "the Docker engine has {asked}; it has: {}{}",
        if have.is_empty() {
            "(none listed)".to_string()
        } else {
            have.join(", ")
        },
        default
            .map(|d| format!(" (default {d})"))
            .unwrap_or_default()
    );
    if wanted.iter().any(|w| w == "runsc") {
        msg.push_str(
            ". To add gVisor: apt-get install runsc, then in /etc/docker/daemon.json \
             \"runtimes\": {\"runsc\": {\"path\": \"/usr/bin/runsc\"}} and restart dockerd; \
             or choose another runtime with --runtime (\"default\": the engine's own)",
        );
    }
    msg
}
