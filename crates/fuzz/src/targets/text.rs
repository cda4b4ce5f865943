//! Text a model writes that the host parses before anything runs: a patch, and a bash line
//! the permission rules judge.

use std::path::Path;
use std::time::Duration;

use runner_patch::parse_patch;
use runner_permission::bash_scan::{ScanContext, scan};

use super::{MIB, Target};

pub const PATCH: Target = Target {
    name: "patch",
    about: "the apply_patch parser, and each update applied to a small file",
    run: patch,
    seeds: patch_seeds,
    dictionary: &[
        b"*** Begin Patch\n",
        b"*** End Patch\n",
        b"*** Add File: ",
        b"*** Update File: ",
        b"*** Delete File: ",
        b"*** Move to: ",
        b"*** End of File\n",
        b"@@ ",
        b"@@ -1,3 +1,4 @@\n",
        b"\n+",
        b"\n-",
        b"\n ",
        b"<<'EOF'\n",
        b"\r\n",
    ],
    max_len: 64 * 1024,
    memory: 32 * MIB,
    time: Duration::from_secs(3),
};

pub const BASH: Target = Target {
    name: "bash_scan",
    about: "the tree-sitter-bash scan that turns a command line into the permissions it needs",
    run: bash,
    seeds: bash_seeds,
    dictionary: &[
        b"$(",
        b")",
        b"`",
        b"<<EOF\n",
        b"\nEOF\n",
        b" | ",
        b" && ",
        b" ; ",
        b"'",
        b"\"",
        b"\\",
        b"sudo ",
        b"env ",
        b"bash -c ",
        b"rm -rf ",
        b"cd ",
        b"~/",
        b"../",
        b"> ",
        b"2>&1",
        b"${x:-",
        b"}",
        b"[[ ",
        b" ]]",
        b"case x in a) ;; esac",
        b".env",
    ],
    max_len: 8 * 1024,
    memory: 64 * MIB,
    time: Duration::from_secs(8),
};

/// The file each update is applied to: the parser's output is fed to the planner's text
/// step, where the search for each chunk's lines runs.
const FILE: &str = "fn main() {\n    println!(\"hi\");\n}\n\nfn other() {}\n";

fn patch(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(hunks) = parse_patch(&text) else {
        return;
    };
    for hunk in &hunks {
        if let runner_patch::Hunk::Update { chunks, .. } = hunk {
            let _ = runner_patch::derive_new_contents("f.rs", FILE, chunks);
        }
    }
}

fn bash(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let cx = ScanContext {
        cwd: Path::new("/work/repo"),
        worktree: Path::new("/work/repo"),
        home: Some(Path::new("/home/u")),
    };
    let found = scan(&text, &cx);
    // Every line is shown to the rules at least once, except one that only changes
    // directory (which asks nothing of `bash`).
    if !text.trim().is_empty() && found.patterns.is_empty() {
        // As bash reads the words: `c\d` and `'c'd` are `cd`.
        let words: String = text
            .chars()
            .filter(|c| !matches!(c, '\\' | '\'' | '"'))
            .collect();
        assert!(
            ["cd", "pushd", "popd"].iter().any(|w| words.contains(w)),
            "a command line with no pattern for the rules: {text:?}"
        );
    }
}

fn patch_seeds() -> Vec<Vec<u8>> {
    [
        "*** Begin Patch\n*** Update File: f.rs\n@@ fn main() {\n-    println!(\"hi\");\n+    println!(\"bye\");\n*** End Patch\n",
        "*** Begin Patch\n*** Add File: new.txt\n+one\n+two\n*** Delete File: old.txt\n*** End Patch",
        "cat <<'EOF'\n*** Begin Patch\n*** Update File: f.rs\n*** Move to: g.rs\n@@ -1,3 +1,3 @@\n fn main() {\n-    println!(\"hi\");\n+    println!(\"ho\");\n }\n*** End of File\n*** End Patch\nEOF",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn bash_seeds() -> Vec<Vec<u8>> {
    [
        "git status && cargo test -- --nocapture",
        "cat <<EOF > out.txt\n$(whoami)\nEOF",
        "sudo -u root env FOO=1 bash -c 'rm -rf ~/x' | tee log 2>&1",
        "for f in *.rs; do echo \"$f\"; done; [[ -f .env ]] && source .env",
        "cd ../other && ls",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}
