//! `runner eval environment`: one [`TaskEnvironment`] served over standard input and
//! output, as JSON lines, to the Harbor plug-in (`python/runner_sandbox/harbor.py`).
//!
//! The lines follow `runner sandbox serve --stdio`'s conventions (docs/PYTHON.md), so one
//! client speaks both: each request `{"id": N, "op": …}`, each answer `{"id": N, "ok":
//! true, "result": …}` or `{"id": N, "ok": false, "error": {"kind", "message"}}`, bytes
//! as base64. The first request must be `start`; requests after it run at once, each in
//! a task of its own, and their answers come in any order. `stop`, or the end of standard
//! input (the harness went away), ends every request, kills and removes the container,
//! and then runner exits: nothing of the trial is left.
//!
//! Operations: `start` ([`StartRequest`]), `exec` ([`Exec`]), `upload` (`dir`, `tar`: a
//! tar unpacked there), `download` (`path`: a tar of it, `not_found` when absent),
//! `network` ([`NetworkPolicy`]: the phase's policy from now on), `stop`.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::{Exec, NetworkPolicy, StartRequest, TaskEnvironment};
use crate::EvalError;

#[derive(Debug, Deserialize)]
struct Incoming {
    id: u64,
    #[serde(flatten)]
    request: Request,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    Start(Box<StartRequest>),
    Exec(Exec),
    Upload { dir: String, tar: String },
    Download { path: String },
    Network(NetworkPolicy),
    Stop,
}

/// A failed request's kind, as the client tells them apart.
fn failure(kind: &str, message: impl std::fmt::Display) -> Value {
    json!({"kind": kind, "message": message.to_string()})
}

fn answer(id: u64, result: Result<Value, Value>) -> Value {
    match result {
        Ok(result) => json!({"id": id, "ok": true, "result": result}),
        Err(error) => json!({"id": id, "ok": false, "error": error}),
    }
}

/// Serves requests from standard input until `stop` or its end. Returns once the
/// environment (if one started) is gone.
pub async fn serve() -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(line) = rx.recv().await {
            let mut text = line.to_string();
            text.push('\n');
            if out.write_all(text.as_bytes()).await.is_err() || out.flush().await.is_err() {
                break;
            }
        }
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut env: Option<Arc<TaskEnvironment>> = None;
    let mut running = tokio::task::JoinSet::new();
    let mut stop_id = None;
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let incoming: Incoming = match serde_json::from_str(&line) {
            Ok(i) => i,
            Err(e) => {
                let id = serde_json::from_str::<Value>(&line)
                    .ok()
                    .and_then(|v| v.get("id").and_then(Value::as_u64))
                    .unwrap_or(0);
                let _ = tx.send(answer(id, Err(failure("invalid_request", e))));
                continue;
            }
        };
        let id = incoming.id;
        match (incoming.request, &env) {
            (Request::Start(start), None) => match TaskEnvironment::start(&start).await {
                Ok((started, about)) => {
                    env = Some(Arc::new(started));
                    let _ = tx.send(answer(id, Ok(json!(about))));
                }
                Err(e) => {
                    let _ = tx.send(answer(id, Err(failure(kind_of(&e), &e))));
                }
            },
            (Request::Start(_), Some(_)) => {
                let _ = tx.send(answer(
                    id,
                    Err(failure("invalid_request", "already started")),
                ));
            }
            (Request::Stop, _) => {
                stop_id = Some(id);
                break;
            }
            (_, None) => {
                let _ = tx.send(answer(
                    id,
                    Err(failure(
                        "invalid_request",
                        "the first request must be start",
                    )),
                ));
            }
            (request, Some(started)) => {
                let (started, tx) = (started.clone(), tx.clone());
                running.spawn(async move {
                    let result = handle(&started, request).await;
                    let _ = tx.send(answer(id, result));
                });
            }
        }
    }
    // Whatever still runs ends with the container.
    running.shutdown().await;
    let connections = match env.map(Arc::try_unwrap) {
        Some(Ok(started)) => started.stop().await,
        Some(Err(shared)) => {
            drop(shared);
            Vec::new()
        }
        None => Vec::new(),
    };
    if let Some(id) = stop_id {
        let lines: Vec<String> = connections.iter().map(|c| c.line()).collect();
        let _ = tx.send(answer(id, Ok(json!({"connections": lines}))));
    }
    drop(tx);
    let _ = writer.await;
    Ok(())
}

async fn handle(env: &TaskEnvironment, request: Request) -> Result<Value, Value> {
    let failed = |e: EvalError| failure(kind_of(&e), &e);
    match request {
        Request::Exec(exec) => {
            let ran = env.exec(&exec).await.map_err(failed)?;
            Ok(json!({
                "code": ran.code,
                "stdout": STANDARD.encode(&ran.stdout),
                "stderr": STANDARD.encode(&ran.stderr),
                "timed_out": ran.timed_out,
            }))
        }
        Request::Upload { dir, tar } => {
            let tar = STANDARD
                .decode(tar.as_bytes())
                .map_err(|e| failure("invalid_request", format!("tar is not base64: {e}")))?;
            env.upload(&dir, tar).await.map_err(failed)?;
            Ok(json!({}))
        }
        Request::Download { path } => match env.download(&path).await.map_err(failed)? {
            Some(tar) => Ok(json!({"tar": STANDARD.encode(&tar)})),
            None => Err(json!({
                "kind": "not_found",
                "message": format!("{path} is not in the task container"),
                "path": path,
            })),
        },
        Request::Network(policy) => {
            env.set_network(&policy).map_err(failed)?;
            Ok(json!({}))
        }
        Request::Start(_) | Request::Stop => Err(failure("invalid_request", "not here")),
    }
}

/// The kind a client maps an error onto: the task's own (a bad policy, a compose file, a
/// missing Dockerfile) or runner's sandbox failing.
fn kind_of(e: &EvalError) -> &'static str {
    match e {
        EvalError::Task(_) | EvalError::Options(_) => "invalid_request",
        EvalError::Image(_) => "build_failed",
        _ => "sandbox",
    }
}
