//! Other people's agent CLIs for the tests that put runner's wall around them: Codex CLI
//! (and OpenCode) installed from npm at a pinned version, and their configuration pointed
//! at a local scripted model ([`crate::provider::ScriptedModel`]) and at a runner command
//! as their MCP server. The official MCP SDKs' clients come the same way, pinned, for the
//! tests of `runner mcp serve` ([`npm_package`], [`pip_venv`]).
//!
//! The tests drive the real agents' loops, so what they show holds for the program users
//! run, not for a stand-in. A pinned version keeps a new release from changing a test's
//! outcome under it; moving the pin is a deliberate change. Each install lives under
//! [`cache_dir`] (`/var/cache/runner-tests` when it can be written), outside any
//! checkout, so a second CI run on the same machine finds it and does not download again.
//! Nothing here skips: without npm, or when the install fails, the test fails and says
//! what to do.
//!
//! Written for `tests/third_party_agent.rs` (Codex with `runner mcp serve` as its hands)
//! and meant to be reused by the `runner exec` tests, which run the same CLIs whole
//! inside the wall: [`opencode`] and [`codex`] install, [`codex_home`] and
//! [`opencode_config`] configure, [`codex_exec`] and [`opencode_run`] start one turn.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Codex CLI release the tests run (`@openai/codex` on npm). It speaks only the
/// Responses API to a custom provider (`wire_api = "chat"` is refused) and offers an MCP
/// server's tools to the model as the namespace `mcp__NAME`.
pub const CODEX_VERSION: &str = "0.169.0";

/// The OpenCode release the tests run (`opencode-ai` on npm).
pub const OPENCODE_VERSION: &str = "1.18.33";

/// Where pinned installs are kept between runs: `/var/cache/runner-tests` when this user
/// can write there (CI runs as root), otherwise `$XDG_CACHE_HOME/runner-tests` or
/// `~/.cache/runner-tests`.
pub fn cache_dir() -> PathBuf {
    let shared = Path::new("/var/cache/runner-tests");
    if std::fs::create_dir_all(shared).is_ok() && writable(shared) {
        return shared.to_path_buf();
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .expect("neither XDG_CACHE_HOME nor HOME is set: nowhere to keep the agent CLIs");
    let dir = base.join("runner-tests");
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

fn writable(dir: &Path) -> bool {
    tempfile::tempfile_in(dir).is_ok()
}

/// The Codex CLI at [`CODEX_VERSION`], installed on first use.
pub fn codex() -> PathBuf {
    npm_bin("@openai/codex", CODEX_VERSION, "codex")
}

/// The OpenCode CLI at [`OPENCODE_VERSION`], installed on first use.
pub fn opencode() -> PathBuf {
    npm_bin("opencode-ai", OPENCODE_VERSION, "opencode")
}

/// OpenCode's own executable for this machine (the platform package's binary the npm
/// wrapper starts), for running it where the wrapper's node_modules cannot be read (inside
/// `runner exec`'s wall).
pub fn opencode_native() -> PathBuf {
    let wrapper = opencode();
    let modules = wrapper
        .parent()
        .and_then(Path::parent)
        .expect("the wrapper lives in node_modules/.bin");
    let native = modules.join("opencode-linux-x64/bin/opencode");
    assert!(
        native.is_file(),
        "no {}: the opencode-ai install has no linux-x64 binary",
        native.display()
    );
    native
}

/// The executable `bin` of npm `package` at exactly `version`, installed on first use
/// ([`npm_install`]).
pub fn npm_bin(package: &str, version: &str, bin: &str) -> PathBuf {
    npm_install(package, version, &Path::new("node_modules/.bin").join(bin))
}

/// The folder npm `package` at exactly `version` is installed in (a library: its
/// `node_modules` is inside), installed on first use ([`npm_install`]).
pub fn npm_package(package: &str, version: &str) -> PathBuf {
    let manifest = Path::new("node_modules").join(package).join("package.json");
    let installed = npm_install(package, version, &manifest);
    installed
        .ancestors()
        .nth(manifest.components().count())
        .expect("the manifest is inside the install")
        .to_path_buf()
}

/// `made` (a path inside the install) of npm `package` at exactly `version`, installed
/// into a folder of its own under [`cache_dir`] unless a finished install is there. The
/// install goes to a scratch folder first and is renamed into place whole, under a lock,
/// so a run that was killed mid-download, or two test processes at once, never leave a
/// half install that later runs would take for a good one.
pub fn npm_install(package: &str, version: &str, made: &Path) -> PathBuf {
    let name = package.trim_start_matches('@').replace('/', "-");
    let dir = cache_dir().join(format!("{name}-{version}"));
    let exe = dir.join(made);
    if exe.exists() {
        return exe;
    }
    let _lock = super::engine::lock(&format!("runner-test-npm-{name}.lock"));
    if exe.exists() {
        return exe;
    }
    super::engine::ensure_package_for("npm", "npm (to install agent CLIs)", || {
        Command::new("npm")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let scratch = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", scratch.display()));
    let spec = format!("{package}@{version}");
    let out = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--no-save",
            "--prefix",
        ])
        .arg(&scratch)
        .arg(&spec)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("npm install {spec} could not start: {e}"));
    assert!(
        out.status.success(),
        "npm install {spec} into {} failed ({}); the test needs it and never skips. Install it \
         by hand there or fix the registry access:\n{}",
        scratch.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        scratch.join(made).exists(),
        "npm installed {spec} into {} but it has no {}",
        scratch.display(),
        made.display()
    );
    std::fs::rename(&scratch, &dir).unwrap_or_else(|e| {
        panic!(
            "cannot move {} to {}: {e}",
            scratch.display(),
            dir.display()
        )
    });
    exe
}

/// The Python of a virtual environment holding PyPI `package` at exactly `version` (and
/// what it depends on), made with the machine's `python3` under [`cache_dir`] unless a
/// finished one is there. As with npm, it is made in a scratch folder and renamed into
/// place whole, under a lock; the environment's Python finds its packages from where it
/// lies, so the move keeps it working.
pub fn pip_venv(package: &str, version: &str) -> PathBuf {
    let dir = cache_dir().join(format!("python-{package}-{version}"));
    let python = dir.join("bin/python");
    if python.exists() {
        return python;
    }
    let _lock = super::engine::lock(&format!("runner-test-pip-{package}.lock"));
    if python.exists() {
        return python;
    }
    super::engine::ensure_package_for("python3-venv", "python3 -m venv", || {
        let probe = tempfile::tempdir().expect("a temporary folder");
        Command::new("python3")
            .args(["-m", "venv"])
            .arg(probe.path().join("venv"))
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let scratch = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&scratch);
    let run = |cmd: &mut Command, what: &str| {
        let out = cmd
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{what} could not start: {e}"));
        assert!(
            out.status.success(),
            "{what} failed ({}); the test needs it and never skips. Make it by hand or fix \
             the index's access:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&scratch),
        &format!("python3 -m venv {}", scratch.display()),
    );
    let spec = format!("{package}=={version}");
    run(
        Command::new(scratch.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg(&spec),
        &format!("pip install {spec} into {}", scratch.display()),
    );
    std::fs::rename(&scratch, &dir).unwrap_or_else(|e| {
        panic!(
            "cannot move {} to {}: {e}",
            scratch.display(),
            dir.display()
        )
    });
    python
}

/// A TOML basic string: JSON's string escapes are valid TOML ones.
fn toml_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

fn os(s: &std::ffi::OsStr) -> String {
    s.to_str()
        .unwrap_or_else(|| panic!("{s:?} is not UTF-8 and cannot go into a config file"))
        .to_string()
}

/// Writes a Codex home (`CODEX_HOME`) in `dir` whose configuration:
/// - takes its model from `base_url` (e.g. [`ScriptedModel::openai_base`], which ends in
///   `/v1`) over the Responses API, with no login and no retries (a scripted model that
///   ran out of turns should fail the run at once, not be asked again);
/// - starts `mcp` (its program, arguments and the environment variables set on it) as the
///   MCP server `runner`, whose tools Codex runs without asking (the rules that judge them
///   are runner's, on the server side);
/// - turns Codex's own shell and web search off, so the model's only hands are the
///   server's.
///
/// Returns `dir`, to pass as `CODEX_HOME` ([`codex_exec`]).
///
/// [`ScriptedModel::openai_base`]: crate::provider::ScriptedModel::openai_base
pub fn codex_home(dir: &Path, base_url: &str, mcp: &Command) -> PathBuf {
    let args: Vec<String> = mcp.get_args().map(|a| toml_str(&os(a))).collect();
    let env: Vec<String> = mcp
        .get_envs()
        .filter_map(|(k, v)| Some(format!("{} = {}", toml_str(&os(k)), toml_str(&os(v?)))))
        .collect();
    let config = format!(
        r#"model = "scripted"
model_provider = "scripted"
web_search = "disabled"

[model_providers.scripted]
name = "scripted model"
base_url = {base_url}
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[mcp_servers.runner]
command = {command}
args = [{args}]
env = {{ {env} }}
startup_timeout_sec = 120
tool_timeout_sec = 120
default_tools_approval_mode = "approve"

[features]
shell_tool = false
"#,
        base_url = toml_str(base_url),
        command = toml_str(&os(mcp.get_program())),
        args = args.join(", "),
        env = env.join(", "),
    );
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let file = dir.join("config.toml");
    std::fs::write(&file, config)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.display()));
    dir.to_path_buf()
}

/// `codex exec PROMPT` in `cwd` with the configuration in `home` ([`codex_home`]): one
/// non-interactive turn, which ends when the model answers with text. `--strict-config`
/// makes a key this release does not know an error instead of a silent no-op, so a
/// setting the test relies on (the shell turned off) cannot quietly stop applying.
pub fn codex_exec(home: &Path, cwd: &Path, prompt: &str) -> Command {
    let mut cmd = Command::new(codex());
    cmd.args([
        "exec",
        "--strict-config",
        "--skip-git-repo-check",
        "--color",
        "never",
    ])
    .arg(prompt)
    .current_dir(cwd)
    .env("CODEX_HOME", home)
    .env_remove("OPENAI_API_KEY")
    .env_remove("OPENAI_BASE_URL")
    .stdin(std::process::Stdio::null());
    cmd
}

/// Writes `dir/opencode.json`, an OpenCode configuration whose model `scripted/m` comes from
/// `base_url` (an OpenAI Chat Completions server such as [`ScriptedModel::openai_base`])
/// through OpenCode's `@ai-sdk/openai-compatible` provider. With `mcp`, that command is the
/// local MCP server `runner` (its tools reach the model as `runner_bash`, `runner_read`, …)
/// and OpenCode's own shell, file and fetch tools are off; without it, OpenCode keeps its
/// own tools (for running the whole agent inside `runner exec`). Returns the file, for
/// [`opencode_run`].
///
/// [`ScriptedModel::openai_base`]: crate::provider::ScriptedModel::openai_base
pub fn opencode_config(dir: &Path, base_url: &str, mcp: Option<&Command>) -> PathBuf {
    let mut config = serde_json::json!({
        "$schema": "https://opencode.ai/config.json",
        "model": "scripted/m",
        "provider": {"scripted": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "scripted model",
            "options": {"baseURL": base_url, "apiKey": "scripted"},
            "models": {"m": {"name": "m"}}
        }},
    });
    if let Some(mcp) = mcp {
        let mut command = vec![os(mcp.get_program())];
        command.extend(mcp.get_args().map(os));
        let environment: serde_json::Map<String, serde_json::Value> = mcp
            .get_envs()
            .filter_map(|(k, v)| Some((os(k), os(v?).into())))
            .collect();
        config["mcp"] = serde_json::json!({"runner": {
            "type": "local", "command": command, "environment": environment
        }});
        let off = [
            "bash", "edit", "write", "patch", "read", "glob", "grep", "list", "webfetch",
        ];
        let tools: serde_json::Map<String, serde_json::Value> = off
            .iter()
            .map(|t| (t.to_string(), serde_json::Value::Bool(false)))
            .collect();
        config["tools"] = tools.into();
    }
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let file = dir.join("opencode.json");
    std::fs::write(&file, config.to_string())
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.display()));
    file
}

/// `opencode run PROMPT` in `cwd` with the configuration `config` ([`opencode_config`]).
/// OpenCode keeps its state and logs under `HOME` and the XDG folders, which are pointed
/// into `config`'s folder so a run neither reads nor changes the user's own; its caches
/// (and npm's, for the provider packages it fetches on first use) go under [`cache_dir`],
/// so later runs do not fetch them again. On start it also tries to fetch its model list
/// from models.dev; without a network that fails harmlessly.
pub fn opencode_run(config: &Path, cwd: &Path, prompt: &str) -> Command {
    let home = config
        .parent()
        .expect("a config file lives in a folder")
        .join("home");
    let mut cmd = Command::new(opencode());
    cmd.args(["run", prompt])
        .current_dir(cwd)
        .env("OPENCODE_CONFIG", config)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_CACHE_HOME", cache_dir().join("opencode-home-cache"))
        .env("npm_config_cache", cache_dir().join("npm-cache"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .stdin(std::process::Stdio::null());
    cmd
}
