//! Configuration files: the profiles (see `profiles/README.md`) and where user-level files
//! live. The permission layers have their own loader in `permission::config`.

use std::path::PathBuf;

pub mod profile;
pub mod settings;

/// `$XDG_CONFIG_HOME/runner` (default `~/.config/runner`).
pub fn config_dir() -> PathBuf {
    std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from(".config"))
        .join("runner")
}
