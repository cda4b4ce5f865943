//! Why a server runner keeps for the session (an MCP server, a language server, a search
//! service) could not be used. Each kind is something different to do about it: fix the
//! config, install the server, open the address, or read what the server said. The message
//! names the server; it is shown to the person (`runner mcp list`) or the model.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerError {
    /// The configuration that names it is wrong; the message names the key.
    #[error("{0}")]
    Config(String),
    /// No server serves what was asked (none configured, none installed).
    #[error("{0}")]
    Missing(String),
    /// It was not contacted: a rule or the person refused it.
    #[error("{0}")]
    NotContacted(String),
    /// It did not start, or stopped; the message has what it printed.
    #[error("{0}")]
    Failed(String),
    /// It answered a request with an error, or did not answer in time.
    #[error("{0}")]
    Answered(String),
}
