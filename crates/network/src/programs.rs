//! Which programs may reach a host: `[network.hosts."NAME"] programs = ["git", "pip",
//! "/usr/bin/curl"]` in the user's config.
//!
//! A host rule opens a host to every process in the sandbox; with a programs entry only the
//! named executables get through, so a token or a repository reachable by `git` is not also
//! reachable by a script the agent wrote. The sandbox server finds every process that holds
//! each connection's client end and names its executable (`/proc/PID/exe`: the file it was
//! started from, so renaming itself in `comm` or `argv[0]` changes nothing); the judging is
//! here, on the host, where the config is.
//!
//! Every holder must pass, not the first one found: a socket is a descriptor, and a python
//! that connects and then `exec`s git while a forked child keeps the socket has two
//! holders, the talking one not git. And a named program must run as installed: one
//! started with a loader variable (`LD_PRELOAD`, `LD_LIBRARY_PATH`, `LD_AUDIT`) or running
//! code from a file the sandbox could have written (the worktree, a temp directory: a
//! library, or the program's own copy) runs someone else's code under its name. A holder
//! the server could not read through is refused too (see
//! `runner_sandbox_server::holders` for what the server reports).
//!
//! An entry with a `/` is a path and must equal the executable's path inside the sandbox. Any
//! other entry is a name and matches the executable's file name. `git` also covers git's
//! transport helpers (`git-remote-http`, `git-remote-https`, …), which are what open the
//! connections of a `git clone` or `git push`. A connection whose program could not be
//! found is refused: the rule says who may connect, and an unknown one is not among them.

use runner_protocol::Holder;

/// The programs entries of one config: each host (a name, or a pattern with `*` as in
/// rules) with the executables allowed to reach it.
#[derive(Debug, Clone, Default)]
pub struct Programs {
    hosts: Vec<(String, Vec<String>)>,
}

impl Programs {
    /// From `(host, programs)` pairs, in the config's order; hosts compare without case.
    pub fn new(hosts: impl IntoIterator<Item = (String, Vec<String>)>) -> Programs {
        Programs {
            hosts: hosts
                .into_iter()
                .map(|(h, p)| (h.to_ascii_lowercase(), p))
                .collect(),
        }
    }

    /// Whether any host has an entry: only then does the sandbox name each connection's
    /// program (finding it costs a walk of `/proc` on every connection).
    pub fn any(&self) -> bool {
        !self.hosts.is_empty()
    }

    /// Whether the processes holding a connection may reach `host`: `Ok` when no entry
    /// names the host, or every holder is a program its entries name, running as
    /// installed; otherwise why not, in words for the refusal.
    pub fn allows(&self, host: &str, holders: &[Holder]) -> Result<(), String> {
        let host = host.to_ascii_lowercase();
        let entries: Vec<&str> = self
            .hosts
            .iter()
            .filter(|(pattern, _)| runner_permission::wildcard::matches(&host, pattern))
            .flat_map(|(_, programs)| programs.iter().map(String::as_str))
            .collect();
        if entries.is_empty() {
            return Ok(());
        }
        let only = format!(
            "only {} may reach {host} ([network.hosts] programs)",
            entries.join(", ")
        );
        if holders.is_empty() {
            return Err(format!(
                "{only}, and the program that opened this connection could not be found"
            ));
        }
        for h in holders {
            if let Some(unread) = &h.unread {
                return Err(format!(
                    "{only}, and a process holding this connection cannot be vouched for: {unread}"
                ));
            }
        }
        Self::names(&only, &entries, holders)?;
        for h in holders {
            let program = h.program.as_deref().unwrap_or("?");
            if let Some(var) = h.loader.first() {
                return Err(format!(
                    "{only}; {program} was started with {var}, which loads code into it that it was not installed with. Run it without that variable"
                ));
            }
            if let Some(file) = h.writable_code.first() {
                return Err(format!(
                    "{only}; {program} runs code from {file}, a file in a place the sandbox can write, so it is not the program as installed. Run the installed program, with its installed libraries"
                ));
            }
        }
        Ok(())
    }

    /// Whether every holder is named by an entry: the refusal names the first that is not,
    /// and the others that hold the connection with it.
    fn names(only: &str, entries: &[&str], holders: &[Holder]) -> Result<(), String> {
        let program = |h: &Holder| {
            h.program
                .clone()
                .unwrap_or_else(|| format!("process {} (its executable could not be read)", h.pid))
        };
        let Some(bad) = holders.iter().find(|h| {
            !h.program
                .as_deref()
                .is_some_and(|p| entries.iter().any(|e| matches(e, p)))
        }) else {
            return Ok(());
        };
        let others: Vec<String> = holders
            .iter()
            .filter(|h| h.pid != bad.pid)
            .map(program)
            .collect();
        let shared = match others.is_empty() {
            true => String::new(),
            false => format!(
                " (held also by {}: every process holding a connection must be allowed)",
                others.join(", ")
            ),
        };
        Err(format!(
            "{only}; this connection came from {}{shared}",
            program(bad)
        ))
    }
}

/// One entry against one executable path.
fn matches(entry: &str, program: &str) -> bool {
    if entry.contains('/') {
        return entry == program;
    }
    let name = program.rsplit('/').next().unwrap_or(program);
    name == entry || (entry == "git" && name.starts_with("git-remote-"))
}

#[cfg(test)]
mod tests {
    use super::{Holder, Programs};

    fn programs() -> Programs {
        Programs::new([
            ("github.com".to_string(), vec!["git".to_string()]),
            (
                "*.pythonhosted.org".to_string(),
                vec!["pip".to_string(), "/usr/bin/python3.11".to_string()],
            ),
        ])
    }

    /// One process per executable, as the sandbox reports a clean holder.
    fn held(programs: &[&str]) -> Vec<Holder> {
        programs
            .iter()
            .zip(100..)
            .map(|(p, pid)| Holder {
                pid,
                program: Some(p.to_string()),
                ..Holder::default()
            })
            .collect()
    }

    #[test]
    fn only_the_named_programs_reach_a_named_host() {
        let p = programs();
        assert!(p.allows("github.com", &held(&["/usr/bin/git"])).is_ok());
        let helper = held(&["/usr/lib/git-core/git-remote-https"]);
        assert!(p.allows("GitHub.com", &helper).is_ok());
        let refused = p
            .allows("github.com", &held(&["/usr/bin/curl"]))
            .unwrap_err();
        assert!(
            refused.contains("only git may reach github.com"),
            "{refused}"
        );
        assert!(refused.contains("came from /usr/bin/curl"), "{refused}");
        // A file called git-remote-x outside git's name is no git helper for another name.
        let pypi = "files.pythonhosted.org";
        assert!(p.allows(pypi, &held(&["/tmp/git-remote-x"])).is_err());
        assert!(p.allows(pypi, &held(&["/usr/bin/pip"])).is_ok());
        // A path entry is the whole path, not a name.
        assert!(p.allows(pypi, &held(&["/usr/bin/python3.11"])).is_ok());
        assert!(p.allows(pypi, &held(&["/tmp/python3.11"])).is_err());
        // Hosts no entry names are left to the host rules.
        assert!(p.allows("example.com", &held(&["/usr/bin/curl"])).is_ok());
        assert!(p.allows("example.com", &[]).is_ok());
    }

    #[test]
    fn every_holder_must_be_allowed() {
        let p = programs();
        // git and its helper together: both git.
        let both = held(&["/usr/bin/git", "/usr/lib/git-core/git-remote-http"]);
        assert!(p.allows("github.com", &both).is_ok());
        // git first (the lower pid), python beside it: refused, naming python and git.
        let shared = held(&["/usr/bin/git", "/usr/bin/python3.11"]);
        let refused = p.allows("github.com", &shared).unwrap_err();
        assert!(
            refused.contains("came from /usr/bin/python3.11 (held also by /usr/bin/git"),
            "{refused}"
        );
        // A holder whose executable could not be read is not allowed by any name.
        let mut hidden = held(&["/usr/bin/git", "/usr/bin/git"]);
        hidden[1].program = None;
        let refused = p.allows("github.com", &hidden).unwrap_err();
        assert!(refused.contains("process 101"), "{refused}");
    }

    #[test]
    fn a_named_program_must_run_as_installed() {
        let p = programs();
        let mut preloaded = held(&["/usr/lib/git-core/git-remote-http"]);
        preloaded[0].loader = vec!["LD_PRELOAD=/wt/evil.so".into()];
        preloaded[0].writable_code = vec!["/wt/evil.so".into()];
        let refused = p.allows("github.com", &preloaded).unwrap_err();
        assert!(
            refused.contains("git-remote-http was started with LD_PRELOAD=/wt/evil.so"),
            "{refused}"
        );
        let mut copied = held(&["/wt/git-remote-http"]);
        copied[0].writable_code = vec!["/wt/git-remote-http".into()];
        let refused = p.allows("github.com", &copied).unwrap_err();
        assert!(
            refused.contains(
                "runs code from /wt/git-remote-http, a file in a place the sandbox can write"
            ),
            "{refused}"
        );
        // Where no entry names the host, how a program runs is not this rule's business.
        assert!(p.allows("example.com", &copied).is_ok());
        // A process the server could not read through is refused, with the server's words.
        let mut unread = held(&["/usr/bin/git"]);
        unread.push(Holder {
            pid: 7,
            unread: Some("process 7 in the sandbox hides its descriptors".into()),
            ..Holder::default()
        });
        let refused = p.allows("github.com", &unread).unwrap_err();
        assert!(
            refused.contains("cannot be vouched for: process 7"),
            "{refused}"
        );
    }

    #[test]
    fn an_unknown_program_is_refused_where_programs_are_named() {
        let refused = programs().allows("github.com", &[]).unwrap_err();
        assert!(refused.contains("could not be found"), "{refused}");
        assert!(!Programs::default().any() && programs().any());
    }
}
