//! How a container engine failed a call, as a kind rather than a message: the docker
//! client classifies its errors here, and every layer above (the sandbox's start errors,
//! eval's verdicts) asks for the kind instead of reading it back out of text. It sits
//! beside [`crate::start_error`], not under [`crate::docker`], because start errors carry
//! it for every backend's caller.

/// How the engine itself failed a call, as against an answer about what was asked (a
/// missing image, a conflict, a bad request: the 4xx answers). A call the engine failed
/// this way may go through on another try; whatever it was for (an agent's attempt, a
/// verdict), it is the machine's failure, never the work's. Carried as a kind, from
/// bollard's own error, so that nobody has to read it back out of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineFault {
    /// The engine answered with a server error (a 5xx status).
    ServerError(u16),
    /// The connection to the engine broke: refused, reset, or closed before the answer
    /// was whole.
    Connection,
    /// The engine did not answer in time.
    Timeout,
}

impl EngineFault {
    /// The fault a failed call shows, if it is the engine's own.
    pub fn of(e: &bollard::errors::Error) -> Option<EngineFault> {
        use bollard::errors::Error as B;
        match e {
            B::DockerResponseServerError { status_code, .. } if *status_code >= 500 => {
                Some(EngineFault::ServerError(*status_code))
            }
            B::RequestTimeoutError => Some(EngineFault::Timeout),
            B::IOError { err } if err.kind() == std::io::ErrorKind::TimedOut => {
                Some(EngineFault::Timeout)
            }
            B::IOError { .. } | B::HyperResponseError { .. } | B::HyperLegacyError { .. } => {
                Some(EngineFault::Connection)
            }
            _ => None,
        }
    }
}

impl std::fmt::Display for EngineFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineFault::ServerError(code) => write!(f, "it answered with status {code}"),
            EngineFault::Connection => f.write_str("the connection to it broke"),
            EngineFault::Timeout => f.write_str("it did not answer in time"),
        }
    }
}
