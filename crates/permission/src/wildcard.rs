//! OpenCode's wildcard (`src/util/wildcard.ts`): not a path glob. `*` matches any run of
//! characters, `/` and newlines included; `?` exactly one character; everything else is
//! literal; the match is anchored at both ends; backslashes count as `/`. One special case
//! makes command rules read naturally: a pattern ending in `" *"` also matches with nothing
//! after it, so `"ls *"` matches `ls` and `ls -la` but not `lsblk`.
//!
//! Matching is by hand rather than through a regex: the classic two-pointer algorithm with
//! one backtrack point is linear in practice and cannot blow up on hostile input.

/// Whether `subject` matches `pattern`.
pub fn matches(subject: &str, pattern: &str) -> bool {
    let subject: Vec<char> = subject.chars().map(slash).collect();
    let pattern: Vec<char> = pattern.chars().map(slash).collect();
    if glob(&subject, &pattern) {
        return true;
    }
    // `"cmd *"` also matches `"cmd"`.
    pattern.len() >= 2
        && pattern[pattern.len() - 2..] == [' ', '*']
        && glob(&subject, &pattern[..pattern.len() - 2])
}

fn slash(c: char) -> char {
    if c == '\\' { '/' } else { c }
}

fn glob(s: &[char], p: &[char]) -> bool {
    let (mut si, mut pi) = (0, 0);
    // Where the last `*` was, and the subject position it currently stands for.
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == s[si])) {
            si += 1;
            pi += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            // Let the last star swallow one more character and retry.
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Expands `~` and `$HOME` at the start of a configured pattern, as OpenCode's config
/// loader does (including its quirk: `$HOMEfoo` becomes `<home>foo`). A `~` elsewhere stays.
pub fn expand_home(pattern: &str, home: &str) -> String {
    if pattern == "~" {
        home.to_string()
    } else if let Some(rest) = pattern.strip_prefix("~/") {
        format!("{home}/{rest}")
    } else if let Some(rest) = pattern.strip_prefix("$HOME") {
        format!("{home}{rest}")
    } else {
        pattern.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        // (subject, pattern, matches)
        let cases: &[(&str, &str, bool)] = &[
            ("anything", "*", true),
            ("", "*", true),
            ("", "", true),
            ("a", "", false),
            ("read", "read", true),
            ("reads", "read", false),
            ("mcp_github", "mcp_*", true),
            ("mcp", "mcp_*", false),
            // `*` crosses `/` and newlines.
            ("src/a/b/c.ts", "src/*", true),
            ("src/a/b/c.ts", "src/*.ts", true),
            ("src/a/b/c.rs", "src/*.ts", false),
            ("line1\nline2", "line1*", true),
            ("echo a\nrm -rf /", "echo *", true),
            // `**` is just `*`.
            ("a/b/c", "**/c", true),
            ("c", "**/c", false),
            ("x/.env", "**/.env", true),
            (".env", "**/.env", false),
            // `?` is exactly one character, `/` included.
            ("a/b", "a?b", true),
            ("ab", "a?b", false),
            ("axxb", "a?b", false),
            // The trailing " *" special case.
            ("ls", "ls *", true),
            ("ls -la", "ls *", true),
            ("ls a b", "ls *", true),
            ("lsblk", "ls *", false),
            ("git", "git checkout *", false),
            ("git checkout", "git checkout *", true),
            ("git checkout main", "git checkout *", true),
            ("git checkoutx", "git checkout *", false),
            // Not at the end, " *" is ordinary.
            ("ls  x", "ls * x", true),
            // Regex metacharacters are literal; there are no classes.
            ("a.b", "a.b", true),
            ("axb", "a.b", false),
            ("[abc]", "[abc]", true),
            ("a", "[abc]", false),
            ("(x)|y+", "(x)|y+", true),
            ("$HOME", "$HOME", true),
            ("^a$", "^a$", true),
            // Backslashes are slashes on both sides.
            ("src\\main.rs", "src/*", true),
            ("src/main.rs", "src\\*", true),
            // Anchored.
            ("xread", "read*", false),
            ("readx", "*read", false),
            ("a.env", "*.env", true),
            (".env.local", "*.env.*", true),
            (".env.example", "*.env.*", true),
            ("/home/u/p/.env", "*.env", true),
            ("environment.ts", "*.env", false),
            (".envrc", "*.env", false),
            (".envrc", "*.env.*", false),
            // Several stars with backtracking.
            ("abcabcabd", "*abd", true),
            ("abcabcabc", "*abd", false),
            ("a-b-c-d", "a*b*c*d", true),
            ("a-b-c-", "a*b*c*d", false),
            // Non-ASCII counts as one character for `?`.
            ("é", "?", true),
            ("日本", "??", true),
        ];
        for &(s, p, want) in cases {
            assert_eq!(matches(s, p), want, "matches({s:?}, {p:?})");
        }
    }

    #[test]
    fn hostile_patterns_stay_fast() {
        let subject = "a".repeat(10_000);
        let pattern = format!("{}b", "*a".repeat(50));
        let start = std::time::Instant::now();
        assert!(!matches(&subject, &pattern));
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn home_expansion() {
        let h = "/home/u";
        assert_eq!(expand_home("~", h), "/home/u");
        assert_eq!(expand_home("~/x/*", h), "/home/u/x/*");
        assert_eq!(expand_home("$HOME/x", h), "/home/u/x");
        assert_eq!(expand_home("$HOME", h), "/home/u");
        assert_eq!(expand_home("$HOMEfoo", h), "/home/ufoo");
        assert_eq!(expand_home("a/~/b", h), "a/~/b");
        assert_eq!(expand_home("~user/x", h), "~user/x");
    }
}
