//! OpenCode's BashArity (`src/permission/arity.ts`): how many leading tokens of a shell
//! command name "the command" a human approves. When someone answers "always" to
//! `git checkout main`, OpenCode remembers `git checkout *`, not `git *` (too broad) and not
//! `git checkout main *` (too narrow); the table below is what draws that line.
//!
//! The port is deliberately literal, quirks included, so that approvals remembered here mean
//! exactly what they mean in OpenCode:
//!
//! * the longest prefix of the tokens that is a key in the table wins, and its value is the
//!   arity; a command not in the table has arity 1;
//! * flags count as tokens (`git -C x status` gives `git -C`), although the prompt that
//!   generated the table says they should not;
//! * lookup is exact and case-sensitive (`/usr/bin/git` is not `git`);
//! * an arity larger than the number of tokens just takes all of them (JS `slice`).
//!
//! The table is the one in v1.2.27 and v1.18.3 (136 entries). Forks carry variants with extra
//! entries (`sudo`, `timeout`, `xargs`, ...); those are not in the upstream release table and
//! are deliberately absent here. Commands that run other commands (`sudo`, `bash -c`, `eval`,
//! …) are not remembered by prefix at all: [`super::bash_scan`] gives them an exact
//! always-pattern, so approving `sudo ls` forever does not approve `sudo rm -rf /`.

/// Command prefix → arity, exactly as in OpenCode's `ARITY` record. Grouped by arity and
/// sorted alphabetically within each group (arity 3 lists the single-word commands first,
/// then the multi-word keys that override a shorter key's arity 2).
const ARITY: &[(&str, usize)] = &[
    // Arity 1 (25).
    ("cat", 1),
    ("cd", 1),
    ("chmod", 1),
    ("chown", 1),
    ("cp", 1),
    ("echo", 1),
    ("env", 1),
    ("export", 1),
    ("grep", 1),
    ("kill", 1),
    ("killall", 1),
    ("ln", 1),
    ("ls", 1),
    ("mkdir", 1),
    ("mv", 1),
    ("ps", 1),
    ("pwd", 1),
    ("rm", 1),
    ("rmdir", 1),
    ("sleep", 1),
    ("source", 1),
    ("tail", 1),
    ("touch", 1),
    ("unset", 1),
    ("which", 1),
    // Arity 2 (64).
    ("bazel", 2),
    ("brew", 2),
    ("bun", 2),
    ("cargo", 2),
    ("cdk", 2),
    ("cf", 2),
    ("cmake", 2),
    ("composer", 2),
    ("consul", 2),
    ("crictl", 2),
    ("deno", 2),
    ("docker", 2),
    ("eksctl", 2),
    ("firebase", 2),
    ("flyctl", 2),
    ("git", 2),
    ("go", 2),
    ("gradle", 2),
    ("helm", 2),
    ("heroku", 2),
    ("hugo", 2),
    ("ip", 2),
    ("kind", 2),
    ("kubectl", 2),
    ("kustomize", 2),
    ("make", 2),
    ("mc", 2),
    ("minikube", 2),
    ("mongosh", 2),
    ("mvn", 2),
    ("mysql", 2),
    ("ng", 2),
    ("npm", 2),
    ("nvm", 2),
    ("nx", 2),
    ("openssl", 2),
    ("pip", 2),
    ("pipenv", 2),
    ("pnpm", 2),
    ("podman", 2),
    ("poetry", 2),
    ("psql", 2),
    ("pulumi", 2),
    ("pyenv", 2),
    ("python", 2),
    ("rake", 2),
    ("rbenv", 2),
    ("redis-cli", 2),
    ("rustup", 2),
    ("serverless", 2),
    ("skaffold", 2),
    ("sls", 2),
    ("sst", 2),
    ("swift", 2),
    ("systemctl", 2),
    ("terraform", 2),
    ("tmux", 2),
    ("turbo", 2),
    ("ufw", 2),
    ("vault", 2),
    ("vercel", 2),
    ("volta", 2),
    ("wp", 2),
    ("yarn", 2),
    // Arity 3 (47): single-word commands...
    ("aws", 3),
    ("az", 3),
    ("doctl", 3),
    ("gcloud", 3),
    ("gh", 3),
    ("sfdx", 3),
    // ...and multi-word keys.
    ("bun run", 3),
    ("bun x", 3),
    ("cargo add", 3),
    ("cargo run", 3),
    ("consul kv", 3),
    ("deno task", 3),
    ("docker builder", 3),
    ("docker compose", 3),
    ("docker container", 3),
    ("docker image", 3),
    ("docker network", 3),
    ("docker volume", 3),
    ("eksctl create", 3),
    ("git config", 3),
    ("git remote", 3),
    ("git stash", 3),
    ("ip addr", 3),
    ("ip link", 3),
    ("ip netns", 3),
    ("ip route", 3),
    ("kind create", 3),
    ("kubectl kustomize", 3),
    ("kubectl rollout", 3),
    ("mc admin", 3),
    ("npm exec", 3),
    ("npm init", 3),
    ("npm run", 3),
    ("npm view", 3),
    ("openssl req", 3),
    ("openssl x509", 3),
    ("pnpm dlx", 3),
    ("pnpm exec", 3),
    ("pnpm run", 3),
    ("podman container", 3),
    ("podman image", 3),
    ("pulumi stack", 3),
    ("terraform workspace", 3),
    ("vault auth", 3),
    ("vault kv", 3),
    ("yarn dlx", 3),
    ("yarn run", 3),
];

fn lookup(key: &str) -> Option<usize> {
    ARITY.iter().find(|(k, _)| *k == key).map(|&(_, n)| n)
}

/// How many leading tokens name the command (e.g. `git checkout` = 2, `npm run dev` = 3).
///
/// Never more than `tokens.len()`, so it can always be used to slice: 0 for no tokens, 1 for
/// a command the table does not know. The candidate keys are the tokens *joined by spaces*,
/// longest first, as OpenCode builds them, so a token that itself contains a space is
/// looked up the same way it would be there.
pub fn arity(tokens: &[&str]) -> usize {
    for len in (1..=tokens.len()).rev() {
        if let Some(n) = lookup(&tokens[..len].join(" ")) {
            return n.min(tokens.len());
        }
    }
    tokens.len().min(1)
}

/// The prefix OpenCode remembers on "always": the first `arity(tokens)` tokens joined by one
/// space. The bash tool's "always" pattern is this plus `" *"` (`ls -la` → `ls *`). Empty for
/// no tokens.
pub fn prefix(tokens: &[&str]) -> String {
    tokens[..arity(tokens)].join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<&str> {
        s.split_whitespace().collect()
    }

    /// (command split on whitespace, expected prefix). Every expectation is read off the
    /// reference table and algorithm (opencode.md §2), or is one of its listed examples.
    const CASES: &[(&str, &str)] = &[
        // The examples from OpenCode's own arity.test.ts.
        ("unknown command subcommand", "unknown"),
        ("touch foo.txt", "touch"),
        ("git checkout main", "git checkout"),
        ("docker run nginx", "docker run"),
        ("aws s3 ls my-bucket", "aws s3 ls"),
        ("npm run dev script", "npm run dev"),
        ("docker compose up service", "docker compose up"),
        ("consul kv get config", "consul kv get"),
        ("git checkout", "git checkout"),
        ("npm run dev", "npm run dev"),
        ("single", "single"),
        ("git", "git"),
        ("ls -la", "ls"),
        ("python script.py", "python script.py"),
        // Arity 1.
        ("cat README.md", "cat"),
        ("rm -rf target", "rm"),
        ("env FOO=1 make", "env"),
        ("echo hello world", "echo"),
        // git.
        ("git commit -m msg", "git commit"),
        ("git config user.name me", "git config user.name"),
        ("git remote add origin url", "git remote add"),
        ("git stash pop", "git stash pop"),
        ("git -C x status", "git -C"),
        // npm / yarn / pnpm / bun.
        ("npm install react", "npm install"),
        ("npm exec vite --port 1", "npm exec vite"),
        ("npm init vue", "npm init vue"),
        ("npm view react version", "npm view react"),
        ("yarn add react", "yarn add"),
        ("yarn run build --prod", "yarn run build"),
        ("yarn dlx create-react-app app", "yarn dlx create-react-app"),
        ("pnpm install", "pnpm install"),
        ("pnpm run dev", "pnpm run dev"),
        ("pnpm dlx create-next-app x", "pnpm dlx create-next-app"),
        ("pnpm exec vite", "pnpm exec vite"),
        ("bun install", "bun install"),
        ("bun run dev --watch", "bun run dev"),
        ("bun x vite", "bun x vite"),
        // cargo.
        ("cargo build --release", "cargo build"),
        ("cargo test --lib arity", "cargo test"),
        ("cargo add tokio --features full", "cargo add tokio"),
        ("cargo run main", "cargo run main"),
        // docker / podman.
        ("docker image prune -a", "docker image prune"),
        ("docker volume ls", "docker volume ls"),
        ("docker builder prune", "docker builder prune"),
        ("docker container ls -a", "docker container ls"),
        ("docker network inspect bridge", "docker network inspect"),
        ("podman run alpine", "podman run"),
        ("podman container ls", "podman container ls"),
        ("podman image prune", "podman image prune"),
        // kubectl & friends.
        ("kubectl get pods -A", "kubectl get"),
        (
            "kubectl rollout restart deploy/api",
            "kubectl rollout restart",
        ),
        (
            "kubectl kustomize overlays/dev",
            "kubectl kustomize overlays/dev",
        ),
        ("kustomize build .", "kustomize build"),
        ("helm install mychart", "helm install"),
        ("kind delete cluster", "kind delete"),
        ("kind create cluster --name x", "kind create cluster"),
        ("eksctl get clusters", "eksctl get"),
        ("eksctl create cluster", "eksctl create cluster"),
        // go, python, other language tools.
        ("go build ./...", "go build"),
        ("go test -run X ./...", "go test"),
        ("python -m venv env", "python -m"),
        ("python3 -m venv env", "python3"),
        ("pip install numpy", "pip install"),
        ("deno task dev", "deno task dev"),
        ("deno run server.ts", "deno run"),
        ("make build", "make build"),
        ("rustup update stable", "rustup update"),
        // Cloud CLIs of arity 3.
        ("gh pr list --state open", "gh pr list"),
        ("gcloud compute instances list", "gcloud compute instances"),
        ("az storage blob list", "az storage blob"),
        ("doctl kubernetes cluster list", "doctl kubernetes cluster"),
        // Multi-word keys elsewhere in the table.
        ("ip addr show", "ip addr show"),
        ("ip link set eth0 up", "ip link set"),
        ("ip netns exec foo bash", "ip netns exec"),
        ("ip route add default", "ip route add"),
        ("ip -br a", "ip -br"),
        ("openssl genrsa 2048", "openssl genrsa"),
        ("openssl req -new -key key.pem", "openssl req -new"),
        ("openssl x509 -in cert.pem", "openssl x509 -in"),
        ("terraform apply", "terraform apply"),
        (
            "terraform workspace select prod",
            "terraform workspace select",
        ),
        ("pulumi stack output", "pulumi stack output"),
        ("vault kv get secret/api", "vault kv get"),
        ("vault auth list", "vault auth list"),
        ("mc admin info myminio", "mc admin info"),
        ("consul members", "consul members"),
        // Not in the table: arity 1.
        ("sudo rm -rf /", "sudo"),
        ("npx prettier --write .", "npx"),
        ("node index.js", "node"),
        ("timeout 5 cargo test", "timeout"),
        ("xargs -I{} rm {}", "xargs"),
        ("curl -sSL https://x", "curl"),
        // Exact and case-sensitive lookup.
        ("/usr/bin/git status", "/usr/bin/git"),
        ("Git status", "Git"),
        // Fewer tokens than the arity: all of them.
        ("npm run", "npm run"),
        ("aws s3", "aws s3"),
        ("gh", "gh"),
        ("docker compose", "docker compose"),
        // No tokens.
        ("", ""),
    ];

    #[test]
    fn prefix_table() {
        for &(command, want) in CASES {
            let tokens = words(command);
            assert_eq!(prefix(&tokens), want, "prefix of {command:?}");
            assert_eq!(arity(&tokens), words(want).len(), "arity of {command:?}");
        }
    }

    #[test]
    fn always_pattern_is_prefix_plus_star() {
        // The bash tool's "always" (reference §2, bash test): `ls -la` → `ls *`.
        assert_eq!(format!("{} *", prefix(&["ls", "-la"])), "ls *");
    }

    #[test]
    fn keys_are_joined_tokens() {
        // The lookup key is the joined tokens, so one token holding a space matches a
        // multi-word key just as in OpenCode.
        assert_eq!(arity(&["npm run", "dev", "x"]), 3);
        assert_eq!(prefix(&["npm run", "dev", "x"]), "npm run dev x");
    }

    #[test]
    fn table_matches_reference_counts() {
        let count = |n| ARITY.iter().filter(|&&(_, a)| a == n).count();
        assert_eq!(ARITY.len(), 136);
        assert_eq!((count(1), count(2), count(3)), (25, 64, 47));
        let mut keys: Vec<&str> = ARITY.iter().map(|&(k, _)| k).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), ARITY.len(), "duplicate key");
    }
}
