//! `runner sandbox doctor | shell | cleanup`: what this machine can enforce, a look inside
//! the sandbox the way the agent sees it, and the removal of leftovers.

use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::exit;
use super::tool::SandboxArgs;
use crate::sandbox::BackendKind;
use crate::sandbox::docker::{cleanup, engine, image};
use crate::sandbox::landlock::cgroup;

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Check landlock, seccomp, namespaces, cgroups, the Docker engine, the image and the
    /// disk; say how to fix each problem.
    Doctor {
        #[arg(long, default_value = crate::sandbox::spec::DEFAULT_IMAGE)]
        image: String,
    },
    /// An interactive shell inside the sandbox, seeing what the agent's commands see.
    Shell {
        #[arg(long, default_value = ".")]
        root: PathBuf,
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// Remove every container, cgroup and temp directory runner left behind.
    Cleanup,
}

pub async fn run(cmd: SandboxCommand) -> u8 {
    match cmd {
        SandboxCommand::Doctor { image } => doctor(&image).await,
        SandboxCommand::Shell { root, sandbox } => shell(&root, &sandbox).await,
        SandboxCommand::Cleanup => cleanup_all().await,
    }
}

struct Report {
    failures: usize,
}

impl Report {
    fn ok(&mut self, what: &str, detail: impl std::fmt::Display) {
        println!("ok    {what}: {detail}");
    }
    fn warn(&mut self, what: &str, detail: impl std::fmt::Display) {
        println!("warn  {what}: {detail}");
    }
    fn fail(&mut self, what: &str, detail: impl std::fmt::Display, fix: &str) {
        self.failures += 1;
        println!("FAIL  {what}: {detail}\n      fix: {fix}");
    }
}

async fn doctor(image_name: &str) -> u8 {
    let mut r = Report { failures: 0 };
    println!("landlock backend");
    let ll = crate::sandbox::confine::probe_landlock();
    if ll.fully_enforced {
        r.ok("landlock", &ll.detail);
    } else {
        r.fail(
            "landlock",
            &ll.detail,
            "boot a kernel with landlock ABI 6 or later (Linux 6.12+, lsm=...,landlock), or use --sandbox docker",
        );
    }
    match seccomp_probe() {
        Ok(()) => r.ok("seccomp", "filters apply; an AF_INET socket is refused"),
        Err(e) => r.fail(
            "seccomp",
            e,
            "use a kernel built with CONFIG_SECCOMP_FILTER",
        ),
    }
    // SAFETY: plain syscall.
    let root = unsafe { libc::geteuid() } == 0;
    let userns = std::fs::read_to_string("/proc/sys/kernel/unprivileged_userns_clone")
        .map(|s| s.trim() != "0")
        .unwrap_or(true)
        && std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .map(|s| s.trim() != "0")
            .unwrap_or(true);
    if root {
        r.ok(
            "mount namespace",
            "running as root: .git/hooks read-only, tmpfs size limit",
        );
    } else if userns {
        r.ok(
            "user namespaces",
            "allowed: .git/hooks read-only, tmpfs size limit",
        );
    } else {
        r.fail(
            "user namespaces",
            "unprivileged user namespaces are off, so .git/hooks cannot be kept read-only (and /proc shows the host's processes)",
            "sysctl -w kernel.unprivileged_userns_clone=1 (or allow runner in AppArmor), or use --sandbox docker",
        );
    }
    let limits = crate::sandbox::spec::Limits::default();
    match cgroup::create(&limits) {
        Some(cg) => {
            let dirs = cg.dirs.clone();
            if cg.enforces_pids {
                r.ok("pids limit", "cgroup pids.max per sandbox");
            } else {
                r.warn(
                    "pids limit",
                    "no pids cgroup: RLIMIT_NPROC only (never applies to root)",
                );
            }
            if cg.enforces_memory {
                r.ok("memory limit", "cgroup memory limit per sandbox");
            } else {
                r.warn(
                    "memory limit",
                    "no memory cgroup: RLIMIT_AS per process only",
                );
            }
            drop(cg);
            cgroup::destroy(&dirs);
        }
        None => {
            r.warn(
                "limits",
                "no cgroup can be made: memory is limited per process (RLIMIT_AS), processes by \
                 RLIMIT_NPROC (not for root), CPUs not at all; run as root or delegate a cgroup",
            );
        }
    }
    if !root && !userns {
        r.warn(
            "temp space",
            "per-file limit only (RLIMIT_FSIZE), no tmpfs size limit",
        );
    }

    println!("docker backend");
    match engine::connect().await {
        Err(e) => r.fail(
            "engine",
            e,
            "apt-get install docker.io && (dockerd > /var/log/dockerd.log 2>&1 &)",
        ),
        Ok(docker) => {
            match docker.version().await {
                Ok(v) => r.ok(
                    "engine",
                    format!(
                        "Docker {} (API {})",
                        v.version.unwrap_or_default(),
                        v.api_version.unwrap_or_default()
                    ),
                ),
                Err(e) => r.fail("engine", e, "restart dockerd"),
            }
            if let Ok(info) = docker.info().await {
                r.ok(
                    "cgroups",
                    format!(
                        "cgroup {} with the {} driver; memory, CPU and pids limits enforced",
                        info.cgroup_version
                            .map(|v| v.to_string())
                            .unwrap_or_default(),
                        info.cgroup_driver
                            .map(|v| v.to_string())
                            .unwrap_or_default()
                    ),
                );
                r.ok(
                    "storage",
                    format!(
                        "{} in {}",
                        info.driver.unwrap_or_default(),
                        info.docker_root_dir.clone().unwrap_or_default()
                    ),
                );
                if let Some(dir) = info.docker_root_dir {
                    disk(&mut r, "engine disk", Path::new(&dir));
                }
            }
            if image::exists(&docker, image_name).await {
                r.ok("image", image_name);
            } else {
                r.fail(
                    "image",
                    format!("{image_name} is missing"),
                    "runner image build",
                );
            }
        }
    }
    disk(&mut r, "temp disk", &std::env::temp_dir());
    if r.failures == 0 {
        exit::OK
    } else {
        exit::FAILED
    }
}

fn disk(r: &mut Report, what: &str, dir: &Path) {
    let Ok(st) = rustix::fs::statvfs(dir) else {
        r.warn(what, format!("cannot stat {}", dir.display()));
        return;
    };
    let free = st.f_bavail * st.f_frsize;
    let gib = free as f64 / (1u64 << 30) as f64;
    if free < 2 << 30 {
        r.fail(
            what,
            format!("{gib:.1} GiB free in {}", dir.display()),
            "free disk space (docker system prune; runner sandbox cleanup)",
        );
    } else {
        r.ok(what, format!("{gib:.1} GiB free in {}", dir.display()));
    }
}

/// Applies the filter on a throwaway thread and checks that it bites.
fn seccomp_probe() -> Result<(), String> {
    std::thread::spawn(|| {
        let prog =
            crate::sandbox::confine::seccomp_program(crate::sandbox::spec::Network::None, true)
                .map_err(|e| e.to_string())?;
        seccompiler::apply_filter(&prog).map_err(|e| e.to_string())?;
        // SAFETY: plain syscall; the descriptor, if any, is closed at once.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        if fd >= 0 {
            unsafe { libc::close(fd) };
            return Err("the filter applied but an AF_INET socket was still created".into());
        }
        Ok(())
    })
    .join()
    .unwrap_or_else(|_| Err("the probe thread panicked".into()))
}

async fn shell(root: &Path, args: &SandboxArgs) -> u8 {
    // The shell owns the terminal where the protocol would run, so there is no channel
    // for the proxy's connections yet.
    if args
        .spec(root)
        .is_ok_and(|s| s.network == crate::sandbox::spec::Network::Allowlist)
    {
        eprintln!(
            "runner: sandbox shell cannot carry --network allowlist yet (the proxy's connections travel over the sandbox protocol, and the shell holds the terminal). Use `runner tool call bash` or `runner run` for allow-listed network, or --network none"
        );
        return exit::USAGE;
    }
    // With a copy workspace the shell works in the copy, which is kept for review.
    let copy_without_wall = args.workspace_mode() == Ok(crate::workspace::Mode::Copy)
        && args
            .spec(root)
            .is_ok_and(|s| s.backend == BackendKind::None);
    if copy_without_wall {
        eprintln!(
            "runner: --workspace copy needs a wall around the copy: with --sandbox none the shell can still reach the checkout. Use --sandbox landlock or docker"
        );
        return exit::USAGE;
    }
    let workspace = match args.workspace_mode() {
        Ok(crate::workspace::Mode::Copy) => match crate::workspace::Workspace::create(root) {
            Ok(ws) => Some(ws),
            Err(e) => {
                eprintln!("runner: {e}");
                return exit::FAILED;
            }
        },
        Ok(_) => None,
        Err(e) => {
            eprintln!("runner: {e}");
            return exit::FAILED;
        }
    };
    let work = workspace.as_ref().map(|w| w.work());
    let code = shell_in(work.as_deref().unwrap_or(root), args).await;
    super::changes::report(workspace);
    code
}

async fn shell_in(root: &Path, args: &SandboxArgs) -> u8 {
    let spec = match args.spec(root) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("runner: {e}");
            return exit::FAILED;
        }
    };
    match spec.backend {
        BackendKind::None | BackendKind::Landlock => {
            let worktree = match std::fs::canonicalize(root) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("runner: --root {}: {e}", root.display());
                    return exit::USAGE;
                }
            };
            let mut command = std::process::Command::new(&spec.server_exe);
            let _guards = if spec.backend == BackendKind::Landlock {
                let prepared = match crate::sandbox::landlock::prepare(&spec, &worktree) {
                    Ok(p) => p,
                    Err(e) => {
                        eprintln!("runner: {e}");
                        return exit::FAILED;
                    }
                };
                command.args(&prepared.args).env_clear().envs(prepared.env);
                (Some(prepared.tmp), prepared.cgroup, Some(prepared.sweep))
            } else {
                command
                    .args(["sandbox-server", "--root"])
                    .arg(&worktree)
                    .env_clear()
                    .envs(crate::sandbox::allowed_env());
                (None, None, None)
            };
            command.arg("--shell");
            // Ctrl-C goes to the shell; runner waits it out.
            // SAFETY: only async-signal-safe calls between fork and exec.
            unsafe {
                use std::os::unix::process::CommandExt;
                libc::signal(libc::SIGINT, libc::SIG_IGN);
                command.pre_exec(|| {
                    libc::signal(libc::SIGINT, libc::SIG_DFL);
                    Ok(())
                });
            }
            match command.status() {
                Ok(status) => status.code().map_or(exit::FAILED, |c| c as u8),
                Err(e) => {
                    eprintln!("runner: cannot start the shell: {e}");
                    exit::FAILED
                }
            }
        }
        BackendKind::Docker => match crate::sandbox::docker::shell(&spec).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("runner: {e}");
                exit::FAILED
            }
        },
    }
}

async fn cleanup_all() -> u8 {
    let mut code = exit::OK;
    match engine::connect().await {
        Ok(docker) => match cleanup::remove_all(&docker).await {
            Ok(n) => println!("removed {n} container(s)"),
            Err(e) => {
                eprintln!("runner: cannot list containers: {e}");
                code = exit::FAILED;
            }
        },
        Err(e) => println!("no Docker engine ({e}); no containers to remove"),
    }
    let cgroups = cgroup::leftovers();
    cgroup::destroy(&cgroups);
    println!("removed {} cgroup(s)", cgroups.len());
    let dirs = crate::sandbox::landlock::leftover_tmp_dirs()
        .into_iter()
        .filter(|d| std::fs::remove_dir_all(d).is_ok())
        .count();
    println!("removed {dirs} temp director(ies)");
    // Copies whose command never ended (a killed run) hold nothing meant for review.
    let mut copies = 0;
    for w in crate::workspace::orphans() {
        if w.discard().is_ok() {
            copies += 1;
        }
    }
    println!("removed {copies} unfinished workspace(s)");
    code
}
