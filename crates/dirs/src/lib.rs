//! Where runner's own files live on the host, by the XDG base directory rules: the user's
//! config (`$XDG_CONFIG_HOME/runner`) and data (`$XDG_DATA_HOME/runner`: sessions,
//! workspaces). A leaf: the tools, the permission layers and the profiles all ask it, and
//! it asks nothing of them.

use std::path::PathBuf;

/// `$XDG_CONFIG_HOME/runner` (default `~/.config/runner`).
pub fn config_dir() -> PathBuf {
    base("XDG_CONFIG_HOME", ".config")
        .unwrap_or_else(|| PathBuf::from(".config"))
        .join("runner")
}

/// `$XDG_CONFIG_HOME/runner/config.toml` (default `~/.config/runner/config.toml`): the
/// user's own permission rules, MCP servers and network settings.
pub fn user_config() -> PathBuf {
    config_dir().join("config.toml")
}

/// `$XDG_DATA_HOME` (default `~/.local/share`), or nothing when neither it nor `HOME` is
/// set: each caller says where its files go then.
pub fn data_home() -> Option<PathBuf> {
    base("XDG_DATA_HOME", ".local/share")
}

/// The variable when set and not empty, else `$HOME/<under_home>`.
fn base(variable: &str, under_home: &str) -> Option<PathBuf> {
    std::env::var_os(variable)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(under_home)))
}
