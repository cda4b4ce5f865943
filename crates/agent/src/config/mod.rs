//! Configuration files: the profiles (see `profiles/README.md`) and the non-permission keys
//! of the config files. This module loads and merges; each settings type belongs to the
//! layer that uses it (a provider's table to `llm`, hooks and MCP servers to `tool`), and
//! where the files live is [`runner_dirs`]. The permission layers have their own loader in
//! `permission::layers`.

mod keys;
pub mod opencode;
pub mod profile;
pub mod settings;
pub mod trust;
