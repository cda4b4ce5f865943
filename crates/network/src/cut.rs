//! Why a relayed connection ended before both sides were done: the reason the log and
//! the client's `NetClosed` carry.

use crate::tunnel;

#[derive(Debug, thiserror::Error)]
pub enum Cut {
    /// The run's byte allowance is used up.
    #[error("cut: the run's network allowance of {0} bytes is spent")]
    Spent(u64),
    /// A tunnel's first bytes were for another host than the one allowed.
    #[error(
        "refused: the tunnel to {host}:{port} carried {why} (one allowed host's tunnel cannot reach another)"
    )]
    Refused {
        host: String,
        port: u16,
        why: tunnel::Refused,
    },
    /// A tunnel's first bytes carried a secret's placeholder (named, never its value).
    #[error(
        "refused: the tunnel to {host}:{port} carried the placeholder of the secret {name}, which goes only to its own hosts, inspected"
    )]
    Secret {
        host: String,
        port: u16,
        name: String,
    },
    /// The sandbox closed its end, and said why.
    #[error("{0}")]
    BySandbox(String),
    /// The sandbox's connection to the relay is gone.
    #[error("the sandbox closed")]
    SandboxGone,
    /// A frame could not be sent to the sandbox.
    #[error("the sandbox closed: {0}")]
    SandboxSend(#[source] runner_sandbox::SandboxError),
    /// After the last bytes, the sandbox did not take them within the drain time.
    #[error("the sandbox did not take the last bytes in {0} s")]
    Drain(u64),
    #[error("reading from the destination failed: {0}")]
    Read(#[source] std::io::Error),
    #[error("writing to the destination failed: {0}")]
    Write(#[source] std::io::Error),
    #[error("cannot make a relay pipe: {0}")]
    Pipe(#[source] std::io::Error),
}
