//! Why a sandbox could not start, one case per thing the user can do something about.
//!
//! A sandbox that never started is not a server that died: the session has not begun, and
//! "start a new session" would only fail the same way. Each case says what happened and
//! what to do; `runner run` exits with one status (the CLI's `exit::SANDBOX`) for all of them.

/// The wall could not be put up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxStartError {
    /// The engine answered but does not have the image the spec names.
    #[error(
        "the sandbox image {image} is not in the engine at {engine}: build it with `runner image build`, \
         or name another image (--image, or `image` under [sandbox] in the profile)"
    )]
    MissingImage { image: String, engine: String },
    /// The engine's socket is there, but this user may not open it.
    #[error(
        "permission denied on the container engine's socket {socket}: this user may not use that engine. \
         Join the group that owns it (for Docker: `sudo usermod -aG docker $USER`, then log in again), \
         or run your own rootless Podman (`systemctl --user start podman.socket`), or use --sandbox landlock"
    )]
    EnginePermission { socket: String },
    /// No engine answers where runner looked (the message names each place and why).
    #[error("{0}")]
    EngineDown(String),
    /// The OCI runtime asked for is not registered with the engine.
    #[error("{0}")]
    MissingRuntime(String),
    /// The image has no shell to run commands with.
    #[error(
        "the image {image} has no shell: runner runs every command with /bin/bash or /bin/sh, and the image has neither. \
         Use an image with a POSIX shell (add busybox-static to it for a small one), or `runner image build`"
    )]
    NoShell { image: String },
    /// The worktree would be mounted where the sandbox mounts something of its own (its
    /// `/tmp` tmpfs, `/proc`, `/dev`, `/sys`), or above all of them (`/`): the engine
    /// would hide the worktree under its own mount (Docker's `/tmp`), refuse, or fail at
    /// start. Said before anything is created.
    #[error(
        "a worktree at {path} collides with the sandbox's own {mount}: {engine} mounts its own there. \
         Run from another folder (--root DIR), or use --workspace copy"
    )]
    WorktreeCollides {
        path: String,
        mount: String,
        engine: String,
    },
    /// The engine refused to create or start a container (`step`: "create the sandbox
    /// container"): its own reason, verbatim.
    #[error(
        "{engine} could not {step}: {reason}. \
         No session began; `runner sandbox doctor` checks the engine and the image"
    )]
    Engine {
        engine: String,
        step: String,
        reason: String,
        /// Whether the engine itself failed (a 5xx, a broken connection, no answer in
        /// time) rather than refused: such a start may go through on another try.
        fault: Option<crate::engine_fault::EngineFault>,
    },
    /// The wall's self-test at start found a layer missing ([`crate::self_test`]).
    #[error(transparent)]
    WallCheck(Box<crate::self_test::WallCheckFailed>),
}

/// Where every container sandbox mounts something of its own: a worktree at one of these,
/// or at a folder above one of them, cannot be mounted as itself.
pub const OWN_MOUNTS: [&str; 4] = ["/tmp", "/proc", "/dev", "/sys"];

/// The sandbox's own mount a worktree mounted at `inside` would collide with: the same
/// path, or one below it (a worktree at `/` holds them all). A folder below one of them
/// (`/tmp/work`) is an ordinary bind mount on top of it, and fine.
pub fn own_mount_under(inside: &std::path::Path) -> Option<&'static str> {
    OWN_MOUNTS
        .into_iter()
        .find(|own| std::path::Path::new(own).starts_with(inside))
}

/// What a sandbox server prints (on its stderr, which the controller keeps the tail of)
/// when the image has no shell, before it exits: the controller finds it there and says
/// [`SandboxStartError::NoShell`] instead of "the server is gone".
pub const NO_SHELL_MARK: &str =
    "runner sandbox-server: no shell in this image (neither /bin/bash nor /bin/sh)";

#[cfg(test)]
mod tests {
    use super::own_mount_under;
    use std::path::Path;

    #[test]
    fn only_the_mount_points_and_what_holds_them_collide() {
        for (path, own) in [
            ("/tmp", "/tmp"),
            ("/tmp/", "/tmp"),
            ("/proc", "/proc"),
            ("/dev", "/dev"),
            ("/sys", "/sys"),
            ("/", "/tmp"),
        ] {
            assert_eq!(own_mount_under(Path::new(path)), Some(own), "{path}");
        }
        for path in [
            "/tmp/x",
            "/tmp/.tmpA1b2/wt",
            "/tmpx",
            "/home/me/proj",
            "/dev/shm/wt",
        ] {
            assert_eq!(own_mount_under(Path::new(path)), None, "{path}");
        }
    }
}
