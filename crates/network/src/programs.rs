//! Which programs may reach a host: `[network.hosts."NAME"] programs = ["git", "pip",
//! "/usr/bin/curl"]` in the user's config.
//!
//! A host rule opens a host to every process in the sandbox; with a programs entry only the
//! named executables get through, so a token or a repository reachable by `git` is not also
//! reachable by a script the agent wrote. The sandbox server finds the process that holds
//! each connection's client end and names its executable (`/proc/PID/exe`: the file it was
//! started from, so renaming itself in `comm` or `argv[0]` changes nothing); the judging is
//! here, on the host, where the config is.
//!
//! An entry with a `/` is a path and must equal the executable's path inside the sandbox. Any
//! other entry is a name and matches the executable's file name. `git` also covers git's
//! transport helpers (`git-remote-http`, `git-remote-https`, …), which are what open the
//! connections of a `git clone` or `git push`. A connection whose program could not be
//! found is refused: the rule says who may connect, and an unknown one is not among them.

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

    /// Whether `program` may reach `host`: `Ok` when no entry names the host or one of its
    /// entries matches, otherwise why not, in words for the refusal.
    pub fn allows(&self, host: &str, program: Option<&str>) -> Result<(), String> {
        let host = host.to_ascii_lowercase();
        let entries: Vec<&String> = self
            .hosts
            .iter()
            .filter(|(pattern, _)| runner_permission::wildcard::matches(&host, pattern))
            .flat_map(|(_, programs)| programs)
            .collect();
        if entries.is_empty() {
            return Ok(());
        }
        let allowed = || {
            entries
                .iter()
                .map(|e| e.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(program) = program else {
            return Err(format!(
                "only {} may reach {host} ([network.hosts] programs), and the program that opened this connection could not be found",
                allowed()
            ));
        };
        if entries.iter().any(|e| matches(e, program)) {
            return Ok(());
        }
        Err(format!(
            "only {} may reach {host} ([network.hosts] programs); this connection came from {program}",
            allowed()
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
    use super::Programs;

    fn programs() -> Programs {
        Programs::new([
            ("github.com".to_string(), vec!["git".to_string()]),
            (
                "*.pythonhosted.org".to_string(),
                vec!["pip".to_string(), "/usr/bin/python3.11".to_string()],
            ),
        ])
    }

    #[test]
    fn only_the_named_programs_reach_a_named_host() {
        let p = programs();
        assert!(p.allows("github.com", Some("/usr/bin/git")).is_ok());
        assert!(
            p.allows("GitHub.com", Some("/usr/lib/git-core/git-remote-https"))
                .is_ok()
        );
        let refused = p.allows("github.com", Some("/usr/bin/curl")).unwrap_err();
        assert!(
            refused.contains("only git may reach github.com"),
            "{refused}"
        );
        assert!(refused.contains("/usr/bin/curl"), "{refused}");
        // A file called git-remote-x outside git's name is no git helper for another name.
        assert!(
            p.allows("files.pythonhosted.org", Some("/tmp/git-remote-x"))
                .is_err()
        );
        assert!(
            p.allows("files.pythonhosted.org", Some("/usr/bin/pip"))
                .is_ok()
        );
        // A path entry is the whole path, not a name.
        assert!(
            p.allows("files.pythonhosted.org", Some("/usr/bin/python3.11"))
                .is_ok()
        );
        assert!(
            p.allows("files.pythonhosted.org", Some("/tmp/python3.11"))
                .is_err()
        );
        // Hosts no entry names are left to the host rules.
        assert!(p.allows("example.com", Some("/usr/bin/curl")).is_ok());
        assert!(p.allows("example.com", None).is_ok());
    }

    #[test]
    fn an_unknown_program_is_refused_where_programs_are_named() {
        let refused = programs().allows("github.com", None).unwrap_err();
        assert!(refused.contains("could not be found"), "{refused}");
        assert!(!Programs::default().any() && programs().any());
    }
}
