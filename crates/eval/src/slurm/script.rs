//! The job script: one array element per shard, the element's index the shard's number.
//!
//! It holds what the element needs and a compute node may not have: runner's own path
//! (this executable, absolute: a node's `PATH` may hold another runner, or none), the
//! working folder the relative paths of the command line are relative to, and the
//! settings that choose the engine and find Slurm (`DOCKER_HOST` and its TLS files,
//! `SLURM_CONF`, runner's own `RUNNER_*` and the XDG folders its config lives in).
//! Secrets (a provider's API key) are not written into a file on a shared disk: sbatch
//! carries the submitting environment into the job (`--export=ALL`), as Slurm does by
//! default.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The variables whose values the script sets, when this process has them.
const CARRIED: [&str; 10] = [
    "SLURM_CONF",
    "DOCKER_HOST",
    "DOCKER_TLS_VERIFY",
    "DOCKER_CERT_PATH",
    "DOCKER_CONFIG",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
    "HOME",
];

/// The variables of `env` the script carries: those of [`CARRIED`] and every `RUNNER_*`.
pub fn carried(env: impl Iterator<Item = (OsString, OsString)>) -> Vec<(OsString, OsString)> {
    let mut kept: Vec<(OsString, OsString)> = env
        .filter(|(k, _)| {
            let k = k.to_string_lossy();
            CARRIED.contains(&k.as_ref()) || k.starts_with("RUNNER_")
        })
        .collect();
    kept.sort();
    kept
}

/// `arg` as one word for `sh`, in single quotes.
fn quoted(arg: &OsStr) -> Vec<u8> {
    let mut out = vec![b'\''];
    for &b in arg.as_bytes() {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

/// The script's text: `runner eval run RUN_ARGS --shard $SLURM_ARRAY_TASK_ID/OF --json`
/// in `cwd`, with `env` set.
pub fn text(
    runner: &Path,
    run_args: &[OsString],
    of: u32,
    cwd: &Path,
    env: &[(OsString, OsString)],
) -> Vec<u8> {
    let mut s: Vec<u8> = Vec::new();
    s.extend_from_slice(
        format!(
            "#!/bin/sh\n\
             # One shard of an evaluation per element of a Slurm job array: the element's\n\
             # index is the shard's number, of {of}. Written by `runner eval submit`, which\n\
             # submits it with `sbatch --array=LIST --output=… --error=…`; the shard writes its\n\
             # events (JSON lines) to standard output.\n\
             #SBATCH --job-name=runner-eval\n\
             : \"${{SLURM_ARRAY_TASK_ID:?this script runs as a Slurm job array: sbatch --array=1-{of}}}\"\n"
        )
        .as_bytes(),
    );
    for (k, v) in env {
        s.extend_from_slice(b"export ");
        s.extend_from_slice(k.as_bytes());
        s.push(b'=');
        s.extend_from_slice(&quoted(v));
        s.push(b'\n');
    }
    s.extend_from_slice(b"cd ");
    s.extend_from_slice(&quoted(cwd.as_os_str()));
    s.extend_from_slice(b" || exit 1\nexec ");
    s.extend_from_slice(&quoted(runner.as_os_str()));
    s.extend_from_slice(b" eval run");
    for arg in run_args {
        s.push(b' ');
        s.extend_from_slice(&quoted(arg));
    }
    s.extend_from_slice(format!(" --shard \"$SLURM_ARRAY_TASK_ID/{of}\" --json\n").as_bytes());
    s
}

/// sbatch options the command sets itself: a user's would break what it follows.
pub fn refused(args: &[OsString]) -> Option<String> {
    const OURS: [(&str, &str); 4] = [
        ("--array", "-a"),
        ("--output", "-o"),
        ("--error", "-e"),
        ("--wrap", "--wrap"),
    ];
    args.iter().find_map(|a| {
        let a = a.to_string_lossy();
        OURS.iter()
            .find(|(long, short)| {
                a.as_ref() == *long
                    || a.starts_with(&format!("{long}="))
                    || (short.len() == 2 && a.starts_with(short))
            })
            .map(|(long, _)| {
                format!("{a}: eval submit sets sbatch's {long} itself (one element per shard, and the files it follows); leave it out")
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script runs the shard of its element's index with every argument as it was
    /// given (quotes, spaces and all), in the folder the command was given in, with the
    /// carried settings and none of the others.
    #[test]
    fn the_script_runs_the_elements_shard() {
        let env = carried(
            [
                ("SLURM_CONF", "/etc/x/slurm.conf"),
                ("ANTHROPIC_API_KEY", "secret"),
                ("RUNNER_BOUNDARY", "/b.toml"),
                ("DOCKER_HOST", "unix:///run/d.sock"),
            ]
            .into_iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        let args: Vec<OsString> = ["tasks dir", "--out", "it's/out", "--jobs", "2"]
            .map(OsString::from)
            .to_vec();
        let text = String::from_utf8(text(
            Path::new("/opt/runner"),
            &args,
            3,
            Path::new("/home/me"),
            &env,
        ))
        .unwrap();
        assert!(!text.contains("secret"), "{text}");
        assert!(
            text.contains("export SLURM_CONF='/etc/x/slurm.conf'\n"),
            "{text}"
        );
        assert!(
            text.contains("export RUNNER_BOUNDARY='/b.toml'\n"),
            "{text}"
        );
        assert!(text.contains("cd '/home/me' || exit 1\n"), "{text}");
        assert!(
            text.ends_with("exec '/opt/runner' eval run 'tasks dir' '--out' 'it'\\''s/out' '--jobs' '2' --shard \"$SLURM_ARRAY_TASK_ID/3\" --json\n"),
            "{text}"
        );
        // Run by sh as Slurm would (with the index set), the words arrive whole.
        let dir = tempfile::tempdir().unwrap();
        let echo = dir.path().join("runner");
        std::fs::write(
            &echo,
            "#!/bin/sh\nfor a in \"$@\"; do printf '[%s]' \"$a\"; done\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&echo, std::fs::Permissions::from_mode(0o755)).unwrap();
        let script = dir.path().join("job.sh");
        std::fs::write(&script, super::text(&echo, &args, 3, dir.path(), &[])).unwrap();
        let out = std::process::Command::new("sh")
            .arg(&script)
            .env("SLURM_ARRAY_TASK_ID", "2")
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "[eval][run][tasks dir][--out][it's/out][--jobs][2][--shard][2/3][--json]"
        );
        let bare = std::process::Command::new("sh")
            .arg(&script)
            .env_remove("SLURM_ARRAY_TASK_ID")
            .output()
            .unwrap();
        assert!(!bare.status.success());
        assert!(String::from_utf8_lossy(&bare.stderr).contains("sbatch --array=1-3"));
    }

    #[test]
    fn options_submit_sets_are_refused() {
        for ours in [
            "--array=1-3",
            "-a1",
            "--output",
            "-o",
            "--error=x",
            "--wrap=ls",
        ] {
            assert!(refused(&[OsString::from(ours)]).is_some(), "{ours}");
        }
        for theirs in [
            "--partition=gpu",
            "-p",
            "--cpus-per-task=8",
            "--time=1:00:00",
            "-A",
            "acct",
        ] {
            assert!(refused(&[OsString::from(theirs)]).is_none(), "{theirs}");
        }
    }
}
