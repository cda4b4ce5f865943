use super::env_files::glob_may_name_env_file;
use super::*;

/// A worktree and home that do not exist, so resolution below them is lexical. Paths
/// outside them are chosen so their existence does not change the answer (`/etc`, `/tmp`
/// and `/work` exist on any machine these tests run on; `bash-scan-none` and `zq` never do).
const TREE: &str = "/work/tree";
const HOME: &str = "/home/u";
const E: &[&str] = &[];

/// (command, patterns, always, external, reads), run from the worktree root.
type Case = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

fn scan_in(command: &str, cwd: &str) -> BashScan {
    let cwd = Path::new(TREE).join(cwd);
    let cx = ScanContext {
        cwd: &cwd,
        worktree: Path::new(TREE),
        home: Some(Path::new(HOME)),
    };
    scan(command, &cx)
}

fn owned(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn check_in(cwd: &str, cases: &[Case]) {
    for &(command, patterns, always, external, reads) in cases {
        let got = scan_in(command, cwd);
        let want = BashScan {
            patterns: owned(patterns),
            always: owned(always),
            external: owned(external),
            reads: owned(reads),
            // Checked by their own tables.
            deny_spellings: got.deny_spellings.clone(),
        };
        assert_eq!(got, want, "{command:?} from {cwd:?}");
    }
}

fn check(cases: &[Case]) {
    check_in("", cases);
}

#[test]
fn simple_commands_and_arity() {
    check(&[
        ("ls", &["ls"], &["ls *"], E, E),
        ("ls -la", &["ls -la"], &["ls *"], E, E),
        (
            "git checkout main",
            &["git checkout main"],
            &["git checkout *"],
            E,
            E,
        ),
        (
            "npm run dev x",
            &["npm run dev x"],
            &["npm run dev *"],
            E,
            E,
        ),
        (
            "frobnicate --all x y",
            &["frobnicate --all x y"],
            &["frobnicate *"],
            E,
            E,
        ),
        (
            "git -C /etc status",
            &["git -C /etc status"],
            &["git -C *"],
            E,
            E,
        ),
        (
            "cargo test --lib",
            &["cargo test --lib"],
            &["cargo test *"],
            E,
            E,
        ),
        (
            "docker compose up -d",
            &["docker compose up -d"],
            &["docker compose up *"],
            E,
            E,
        ),
        (
            "python -m http.server",
            &["python -m http.server"],
            &["python -m http.server"],
            E,
            E,
        ),
        (
            "npm run build -- --watch",
            &["npm run build -- --watch"],
            &["npm run build *"],
            E,
            E,
        ),
        (
            "FOO=1 make build",
            &["FOO=1 make build"],
            &["FOO=1 make build"],
            E,
            E,
        ),
        (
            "A=1 B=$(x) git push",
            &["A=1 B=$(x) git push", "x"],
            &["A=1 B=$(x) git push", "x *"],
            E,
            E,
        ),
        ("\"ls\" -la", &["\"ls\" -la"], &["\"ls\" *"], E, E),
        ("\\rm x", &["\\rm x"], &["\\rm *"], E, E),
        ("sleep 5", &["sleep 5"], &["sleep *"], E, E),
        ("ls &", &["ls"], &["ls *"], E, E),
        ("ls # rm -rf /", &["ls"], &["ls *"], E, E),
        ("export A=1", &["export A=1"], &["export A=1"], E, E),
        (
            "x=$(rm /etc/x)",
            &["x=$(rm /etc/x)", "rm /etc/x"],
            &["x=$(rm /etc/x)", "rm *"],
            &["/etc/*"],
            E,
        ),
        ("ls $HOME /etc", &["ls $HOME /etc"], &["ls *"], E, E),
        ("cp a b", &["cp a b"], &["cp *"], E, E),
    ]);
}

#[test]
fn lists_pipelines_and_groups() {
    check(&[
        (
            "echo a && echo b || echo c; ls",
            &["echo a", "echo b", "echo c", "ls"],
            &["echo *", "ls *"],
            E,
            E,
        ),
        (
            "cat x | grep y | wc -l",
            &["cat x", "grep y", "wc -l"],
            &["cat *", "grep *", "wc *"],
            E,
            E,
        ),
        ("ls; ls", &["ls"], &["ls *"], E, E),
        ("! rm /etc/x", &["rm /etc/x"], &["rm *"], &["/etc/*"], E),
        ("(ls; pwd)", &["ls", "pwd"], &["ls *", "pwd *"], E, E),
        ("{ ls; pwd; }", &["ls", "pwd"], &["ls *", "pwd *"], E, E),
        ("a |& b", &["a", "b"], &["a *", "b *"], E, E),
    ]);
}

#[test]
fn substitutions() {
    check(&[
        (
            "echo $(rm -rf x)",
            &["echo $(rm -rf x)", "rm -rf x"],
            &["echo *", "rm *"],
            E,
            E,
        ),
        (
            "echo `whoami`",
            &["echo `whoami`", "whoami"],
            &["echo *", "whoami *"],
            E,
            E,
        ),
        (
            "diff <(ls a) <(ls b)",
            &["diff <(ls a) <(ls b)", "ls a", "ls b"],
            &["diff *", "ls *"],
            E,
            E,
        ),
        (
            "echo \"a $(rm /etc/x)\"",
            &["echo \"a $(rm /etc/x)\"", "rm /etc/x"],
            &["echo *", "rm *"],
            &["/etc/*"],
            E,
        ),
        (
            "cat $(which foo)",
            &["cat $(which foo)", "which foo"],
            &["cat *", "which *"],
            &["*"],
            E,
        ),
        (
            "echo $(echo $(id))",
            &["echo $(echo $(id))", "echo $(id)", "id"],
            &["echo *", "id *"],
            E,
            E,
        ),
        (
            "tee >(gzip > out.gz) < in.txt",
            &["tee >(gzip > out.gz) < in.txt", "gzip > out.gz"],
            &["tee *", "gzip *"],
            &["*"],
            E,
        ),
    ]);
}

#[test]
fn redirects() {
    check(&[
        (
            "echo hi > out.txt",
            &["echo hi > out.txt"],
            &["echo *"],
            E,
            E,
        ),
        (
            "echo hi > /etc/passwd",
            &["echo hi > /etc/passwd"],
            &["echo *"],
            &["/etc/*"],
            E,
        ),
        ("ls 2>/dev/null", &["ls 2>/dev/null"], &["ls *"], E, E),
        (
            "make build 2>&1 | tee log.txt",
            &["make build 2>&1", "tee log.txt"],
            &["make build *", "tee *"],
            E,
            E,
        ),
        ("cmd >&2", &["cmd >&2"], &["cmd *"], E, E),
        ("echo x 1>&-", &["echo x 1>&-"], &["echo *"], E, E),
        ("ls > $OUT", &["ls > $OUT"], &["ls *"], &["*"], E),
        (
            "cmd 2> \"$LOG\"",
            &["cmd 2> \"$LOG\""],
            &["cmd *"],
            &["*"],
            E,
        ),
        ("ls &> /etc/x", &["ls &> /etc/x"], &["ls *"], &["/etc/*"], E),
        ("ls >& /etc/x", &["ls >& /etc/x"], &["ls *"], &["/etc/*"], E),
        (
            "echo a >> /etc/x 2>> /tmp/bash-scan-none/err",
            &["echo a >> /etc/x 2>> /tmp/bash-scan-none/err"],
            &["echo *"],
            &["/etc/*", "/tmp/bash-scan-none/*"],
            E,
        ),
        (
            "sort < /etc/hosts > sorted.txt",
            &["sort < /etc/hosts > sorted.txt"],
            &["sort *"],
            &["/etc/*"],
            E,
        ),
        ("> /etc/x", &["> /etc/x"], &["> /etc/x"], &["/etc/*"], E),
        ("> f echo hi", &["> f echo hi"], &["> f echo hi"], E, E),
        (
            "{ echo a; echo b; } > /etc/x",
            &["{ echo a; echo b; } > /etc/x", "echo a", "echo b"],
            &["{ echo a; echo b; } > /etc/x", "echo *"],
            &["/etc/*"],
            E,
        ),
        (
            "while read l; do echo $l; done < /etc/hosts",
            &[
                "while read l; do echo $l; done < /etc/hosts",
                "read l",
                "echo $l",
            ],
            &[
                "while read l; do echo $l; done < /etc/hosts",
                "read *",
                "echo *",
            ],
            &["/etc/*"],
            E,
        ),
        (
            "echo x > /dev/stderr; cat /dev/stdin /dev/fd/3 /dev/urandom",
            &[
                "echo x > /dev/stderr",
                "cat /dev/stdin /dev/fd/3 /dev/urandom",
            ],
            &["echo *", "cat *"],
            E,
            E,
        ),
        (
            "cat ../../dev/null",
            &["cat ../../dev/null"],
            &["cat *"],
            E,
            E,
        ),
        (
            "echo x > /dev/sda",
            &["echo x > /dev/sda"],
            &["echo *"],
            &["/dev/*"],
            E,
        ),
        ("exec 3>&1", &["exec 3>&1"], &["exec 3>&1"], E, E),
        (
            "cat < \"$(echo f)\"",
            &["cat < \"$(echo f)\"", "echo f"],
            &["cat *", "echo *"],
            &["*"],
            E,
        ),
    ]);
}

/// tree-sitter puts a heredoc's body (and anything written after `<<EOF` on its line) in
/// the `redirected_statement`, so the pattern the user sees includes the body.
#[test]
fn heredocs_and_herestrings() {
    check(&[
        (
            "cat <<EOF > out.txt\nhello\nEOF",
            &["cat <<EOF > out.txt\nhello\nEOF"],
            &["cat *"],
            E,
            E,
        ),
        (
            "cat <<EOF > /etc/x\nhi\nEOF",
            &["cat <<EOF > /etc/x\nhi\nEOF"],
            &["cat *"],
            &["/etc/*"],
            E,
        ),
        (
            "cat <<EOF\n$(rm -rf /tmp/bash-scan-none/x)\nEOF",
            &[
                "cat <<EOF\n$(rm -rf /tmp/bash-scan-none/x)\nEOF",
                "rm -rf /tmp/bash-scan-none/x",
            ],
            &["cat *", "rm *"],
            &["/tmp/bash-scan-none/*"],
            E,
        ),
        // A quoted delimiter makes the body literal: no command inside.
        (
            "cat <<'EOF'\n$(rm x)\nEOF",
            &["cat <<'EOF'\n$(rm x)\nEOF"],
            &["cat *"],
            E,
            E,
        ),
        (
            "cat <<EOF | grep x\nhi\nEOF",
            &["cat <<EOF | grep x\nhi\nEOF", "grep x"],
            &["cat *", "grep *"],
            E,
            E,
        ),
        (
            "cat <<-EOF\n\tx\n\tEOF\nrm y",
            &["cat <<-EOF\n\tx\n\tEOF", "rm y"],
            &["cat *", "rm *"],
            E,
            E,
        ),
        (
            "grep x <<< \"hello\"",
            &["grep x <<< \"hello\""],
            &["grep *"],
            E,
            E,
        ),
        (
            "cat <<< /etc/passwd",
            &["cat <<< /etc/passwd"],
            &["cat *"],
            E,
            E,
        ),
    ]);
}

#[test]
fn quoting() {
    check(&[
        (
            "rm \"/etc/a b\"",
            &["rm \"/etc/a b\""],
            &["rm *"],
            &["/etc/*"],
            E,
        ),
        ("cat 'x y'", &["cat 'x y'"], &["cat *"], E, E),
        ("cat a\"b c\"", &["cat a\"b c\""], &["cat *"], E, E),
        (
            "rm a\"/../../b\"",
            &["rm a\"/../../b\""],
            &["rm *"],
            &["/work/*"],
            E,
        ),
        ("rm '/etc/'x", &["rm '/etc/'x"], &["rm *"], &["/etc/*"], E),
        (
            "rm /etc/a\\ b",
            &["rm /etc/a\\ b"],
            &["rm *"],
            &["/etc/*"],
            E,
        ),
        ("cat \"~/x\"", &["cat \"~/x\""], &["cat *"], E, E),
        ("cat \\~/x", &["cat \\~/x"], &["cat *"], E, E),
        // Single quotes make `$` literal: a directory really named `$HOME`.
        ("rm '$HOME/x'", &["rm '$HOME/x'"], &["rm *"], E, E),
        ("rm \"*\"", &["rm \"*\""], &["rm *"], E, E),
    ]);
}

#[test]
fn unresolvable_arguments() {
    check(&[
        ("rm $X", &["rm $X"], &["rm *"], &["*"], E),
        ("rm \"$HOME/x\"", &["rm \"$HOME/x\""], &["rm *"], &["*"], E),
        ("rm ${DIR}/x", &["rm ${DIR}/x"], &["rm *"], &["*"], E),
        (
            "rm -rf \"$(pwd)/x\"",
            &["rm -rf \"$(pwd)/x\"", "pwd"],
            &["rm *", "pwd *"],
            &["*"],
            E,
        ),
        ("cat $'/etc/x'", &["cat $'/etc/x'"], &["cat *"], &["*"], E),
        ("rm $((1+2))", &["rm $((1+2))"], &["rm *"], &["*"], E),
        ("rm -$X file", &["rm -$X file"], &["rm *"], E, E),
        (
            "cp --target-directory=$D a",
            &["cp --target-directory=$D a"],
            &["cp *"],
            &["*"],
            E,
        ),
    ]);
}

#[test]
fn globs() {
    check(&[
        ("rm *", &["rm *"], &["rm *"], E, &["*"]),
        ("rm *.o sub/*.tmp", &["rm *.o sub/*.tmp"], &["rm *"], E, E),
        (
            "rm /etc/*.conf",
            &["rm /etc/*.conf"],
            &["rm *"],
            &["/etc/*"],
            E,
        ),
        (
            "rm ../*",
            &["rm ../*"],
            &["rm *"],
            &["/work/*"],
            &["/work/*"],
        ),
        ("rm /et?/passwd", &["rm /et?/passwd"], &["rm *"], &["/*"], E),
        (
            "rm sub/*/../../../x",
            &["rm sub/*/../../../x"],
            &["rm *"],
            &["*"],
            E,
        ),
        // `.*` matches `..` in older bash.
        ("rm -rf .*", &["rm -rf .*"], &["rm *"], &["*"], &[".*"]),
        ("rm {a,b}.txt", &["rm {a,b}.txt"], &["rm *"], E, E),
        (
            "rm {a,/etc/passwd}",
            &["rm {a,/etc/passwd}"],
            &["rm *"],
            &["*"],
            E,
        ),
        (
            "touch file{1..3}.txt",
            &["touch file{1..3}.txt"],
            &["touch *"],
            E,
            E,
        ),
        (
            "cat ~/*.txt",
            &["cat ~/*.txt"],
            &["cat *"],
            &["/home/u/*"],
            E,
        ),
        ("rm [ab].txt", &["rm [ab].txt"], &["rm *"], E, E),
        ("cd sub* && rm x", &["rm x"], &["rm *"], &["*"], &["sub*"]),
    ]);
}

#[test]
fn path_commands() {
    check(&[
        (
            "cat ../../etc/passwd",
            &["cat ../../etc/passwd"],
            &["cat *"],
            &["/etc/*"],
            E,
        ),
        (
            "cat ~/.ssh/id_rsa",
            &["cat ~/.ssh/id_rsa"],
            &["cat *"],
            &["/home/u/.ssh/*"],
            E,
        ),
        ("rm ~", &["rm ~"], &["rm *"], &["/home/*"], E),
        ("rm ~other/x", &["rm ~other/x"], &["rm *"], &["*"], E),
        ("rm -rf /", &["rm -rf /"], &["rm *"], &["/*"], E),
        ("rm -rf /etc", &["rm -rf /etc"], &["rm *"], &["/etc/*"], E),
        (
            "rm -rf node_modules target",
            &["rm -rf node_modules target"],
            &["rm *"],
            E,
            E,
        ),
        (
            "chmod +x script.sh",
            &["chmod +x script.sh"],
            &["chmod *"],
            E,
            E,
        ),
        (
            "chmod 755 /etc/x",
            &["chmod 755 /etc/x"],
            &["chmod *"],
            &["/etc/*"],
            E,
        ),
        (
            "chmod -R u+w /etc/x",
            &["chmod -R u+w /etc/x"],
            &["chmod *"],
            &["/etc/*"],
            E,
        ),
        (
            "rm -- -x /etc/y",
            &["rm -- -x /etc/y"],
            &["rm *"],
            &["/etc/*"],
            E,
        ),
        (
            "cp --target-directory=/opt/bash-scan-none a",
            &["cp --target-directory=/opt/bash-scan-none a"],
            &["cp *"],
            &["/opt/*"],
            E,
        ),
        (
            "cp -t /opt/bash-scan-none a b",
            &["cp -t /opt/bash-scan-none a b"],
            &["cp *"],
            &["/opt/*"],
            E,
        ),
        ("mv a /etc/", &["mv a /etc/"], &["mv *"], &["/etc/*"], E),
        (
            "ln -s /etc/passwd link",
            &["ln -s /etc/passwd link"],
            &["ln *"],
            &["/etc/*"],
            E,
        ),
        (
            "echo x | tee -a /tmp/bash-scan-none.log",
            &["echo x", "tee -a /tmp/bash-scan-none.log"],
            &["echo *", "tee *"],
            &["/tmp/*"],
            E,
        ),
        (
            "truncate -s 0 /etc/x.log",
            &["truncate -s 0 /etc/x.log"],
            &["truncate *"],
            &["/etc/*"],
            E,
        ),
        (
            "truncate --size=0 big.log",
            &["truncate --size=0 big.log"],
            &["truncate *"],
            E,
            E,
        ),
        (
            "mkdir -p /tmp/bash-scan-none/a/b",
            &["mkdir -p /tmp/bash-scan-none/a/b"],
            &["mkdir *"],
            &["/tmp/bash-scan-none/a/*"],
            E,
        ),
        (
            "rmdir /etc/foo",
            &["rmdir /etc/foo"],
            &["rmdir *"],
            &["/etc/*"],
            E,
        ),
        (
            "chown u:g /etc/x",
            &["chown u:g /etc/x"],
            &["chown *"],
            &["/etc/*"],
            E,
        ),
        (
            "touch /work/tree/new /work/treehouse/x",
            &["touch /work/tree/new /work/treehouse/x"],
            &["touch *"],
            &["/work/treehouse/*"],
            E,
        ),
        (
            "cat /etc/passwd /etc/hosts",
            &["cat /etc/passwd /etc/hosts"],
            &["cat *"],
            &["/etc/*"],
            E,
        ),
        (
            "/bin/rm /etc/x",
            &["/bin/rm /etc/x"],
            &["/bin/rm *"],
            &["/etc/*"],
            E,
        ),
        ("ls /etc", &["ls /etc"], &["ls *"], E, E),
    ]);
}

#[test]
fn cd_sequences() {
    check(&[
        ("cd sub && rm x", &["rm x"], &["rm *"], E, E),
        (
            "cd /tmp && rm x.txt",
            &["rm x.txt"],
            &["rm *"],
            &["/tmp/*"],
            E,
        ),
        ("cd .. && rm x", &["rm x"], &["rm *"], &["/work/*"], E),
        ("cd $D && rm x", &["rm x"], &["rm *"], &["*"], E),
        // Only a change of directory: nothing for `bash`, the outside directory asked.
        ("cd /etc", E, E, &["/etc/*"], E),
        ("cd", E, E, &["/home/u/*"], E),
        ("cd sub", E, E, E, E),
        ("(cd /tmp)", E, E, &["/tmp/*"], E),
        // Anything more is asked.
        (
            "cd /etc > f",
            &["cd /etc > f"],
            &["cd /etc > f"],
            &["/etc/*"],
            E,
        ),
        (
            "# only a comment",
            &["# only a comment"],
            &["# only a comment"],
            E,
            E,
        ),
        ("cd ~ && rm x", &["rm x"], &["rm *"], &["/home/u/*"], E),
        ("cd - && rm x", &["rm x"], &["rm *"], &["*"], E),
        (
            "(cd /tmp); rm y.txt",
            &["rm y.txt"],
            &["rm *"],
            &["/tmp/*"],
            E,
        ),
        (
            "(cd /tmp && rm x.txt)",
            &["rm x.txt"],
            &["rm *"],
            &["/tmp/*"],
            E,
        ),
        (
            "pushd /tmp && rm x.txt && popd",
            &["rm x.txt"],
            &["rm *"],
            &["/tmp/*"],
            E,
        ),
        ("chdir /tmp", E, E, &["/tmp/*"], E),
        ("popd", E, E, E, E),
        (
            "cd /tmp; cd ..; rm x.txt",
            &["rm x.txt"],
            &["rm *"],
            &["/tmp/*", "/work/*", "/*"],
            E,
        ),
        (
            "cd sub && cd ../.. && rm x.txt",
            &["rm x.txt"],
            &["rm *"],
            &["/*", "/work/*"],
            E,
        ),
        (
            "cd \"$(mktemp -d)\" && rm x",
            &["mktemp -d", "rm x"],
            &["mktemp *", "rm *"],
            &["*"],
            E,
        ),
        (
            "cd $D && rm /etc/x",
            &["rm /etc/x"],
            &["rm *"],
            &["*", "/etc/*"],
            E,
        ),
        (
            "cd /tmp && ls ../etc",
            &["ls ../etc"],
            &["ls *"],
            &["/tmp/*"],
            E,
        ),
        ("cd -P /tmp", E, E, &["/tmp/*"], E),
        // The set still holds the starting directory.
        (
            "cd sub && cat .env",
            &["cat .env"],
            &["cat *"],
            E,
            &[".env", "sub/.env"],
        ),
    ]);
    check_in(
        "sub",
        &[
            ("cd .. && rm x", &["rm x"], &["rm *"], E, E),
            ("cd ../.. && rm x", &["rm x"], &["rm *"], &["/work/*"], E),
        ],
    );
}

#[test]
fn control_flow_and_functions() {
    check(&[
        (
            "if true; then rm /etc/x; fi",
            &["true", "rm /etc/x"],
            &["true *", "rm *"],
            &["/etc/*"],
            E,
        ),
        (
            "if test -f a; then ls; else rm /etc/b; fi",
            &["test -f a", "ls", "rm /etc/b"],
            &["test *", "ls *", "rm *"],
            &["/etc/*"],
            E,
        ),
        (
            "for f in a b; do rm /etc/$f; done",
            &["rm /etc/$f"],
            &["rm *"],
            &["*"],
            E,
        ),
        (
            "for f in *.c; do gcc -c $f; done",
            &["gcc -c $f"],
            &["gcc *"],
            E,
            E,
        ),
        (
            "while read l; do echo $l; done < input.txt",
            &[
                "while read l; do echo $l; done < input.txt",
                "read l",
                "echo $l",
            ],
            &[
                "while read l; do echo $l; done < input.txt",
                "read *",
                "echo *",
            ],
            E,
            E,
        ),
        (
            "until false; do sleep 1; done",
            &["false", "sleep 1"],
            &["false *", "sleep *"],
            E,
            E,
        ),
        (
            "case $x in a) rm /etc/x;; esac",
            &["rm /etc/x"],
            &["rm *"],
            &["/etc/*"],
            E,
        ),
        (
            "f() { rm /etc/x; }",
            &["rm /etc/x"],
            &["rm *"],
            &["/etc/*"],
            E,
        ),
        (
            "function g { ls; }; g",
            &["ls", "g"],
            &["ls *", "g *"],
            E,
            E,
        ),
        // The second time round the loop, `rm` runs in /tmp.
        (
            "for i in 1 2; do rm zq/b; cd /tmp; done",
            &["rm zq/b"],
            &["rm *"],
            &["/tmp/*", "/tmp/zq/*"],
            E,
        ),
        (
            "while true; do cd ..; done",
            &["true"],
            &["true *"],
            &["/work/*", "/*"],
            E,
        ),
        (
            "while true; do cd sub; done; rm x",
            &["true", "rm x"],
            &["true *", "rm *"],
            &["*"],
            E,
        ),
        // The function runs after the `cd`, though it is defined before it.
        (
            "f() { rm zq/b; }; cd /tmp; f",
            &["rm zq/b", "f"],
            &["rm *", "f *"],
            &["/tmp/*", "/tmp/zq/*"],
            E,
        ),
    ]);
}

#[test]
fn wrappers_and_dynamic_names() {
    check(&[
        (
            "sudo rm -rf /etc",
            &["sudo rm -rf /etc"],
            &["sudo rm -rf /etc"],
            &["/etc/*"],
            E,
        ),
        (
            "sudo -E cat /etc/shadow",
            &["sudo -E cat /etc/shadow"],
            &["sudo -E cat /etc/shadow"],
            &["/etc/*"],
            E,
        ),
        (
            "env FOO=1 rm /etc/x",
            &["env FOO=1 rm /etc/x"],
            &["env FOO=1 rm /etc/x"],
            &["/etc/*"],
            E,
        ),
        (
            "timeout 5 rm /etc/x",
            &["timeout 5 rm /etc/x"],
            &["timeout 5 rm /etc/x"],
            &["/etc/*"],
            E,
        ),
        (
            "nohup cargo build &",
            &["nohup cargo build"],
            &["nohup cargo build"],
            E,
            E,
        ),
        (
            "xargs rm < list.txt",
            &["xargs rm < list.txt"],
            &["xargs rm < list.txt"],
            &["*"],
            E,
        ),
        (
            "find . -name '*.o' -delete",
            &["find . -name '*.o' -delete"],
            &["find . -name '*.o' -delete"],
            E,
            E,
        ),
        ("time ls -l", &["time ls -l"], &["time ls -l"], E, E),
        (
            "watch -n 1 ls",
            &["watch -n 1 ls", "ls"],
            &["watch -n 1 ls", "ls *"],
            E,
            E,
        ),
        (
            "/usr/bin/sudo ls",
            &["/usr/bin/sudo ls"],
            &["/usr/bin/sudo ls"],
            E,
            E,
        ),
        ("exec ls", &["exec ls"], &["exec ls"], E, E),
        (
            "bash script.sh",
            &["bash script.sh"],
            &["bash script.sh"],
            E,
            E,
        ),
        (
            "bash -c 'rm -rf /'",
            &["bash -c 'rm -rf /'", "rm -rf /"],
            &["bash -c 'rm -rf /'", "rm *"],
            &["/*"],
            E,
        ),
        (
            "sh -c 'cd /tmp && rm zq/b'",
            &["sh -c 'cd /tmp && rm zq/b'", "rm zq/b"],
            &["sh -c 'cd /tmp && rm zq/b'", "rm *"],
            &["/tmp/*", "/tmp/zq/*"],
            E,
        ),
        (
            "bash -lc \"git status\"",
            &["bash -lc \"git status\"", "git status"],
            &["bash -lc \"git status\"", "git status *"],
            E,
            E,
        ),
        (
            "eval \"ls /etc\"",
            &["eval \"ls /etc\"", "ls /etc"],
            &["eval \"ls /etc\"", "ls *"],
            E,
            E,
        ),
        (
            "eval rm /etc/x",
            &["eval rm /etc/x", "rm /etc/x"],
            &["eval rm /etc/x", "rm *"],
            &["/etc/*"],
            E,
        ),
        (
            "bash -c \"$CMD\"",
            &["bash -c \"$CMD\""],
            &["bash -c \"$CMD\""],
            &["*"],
            E,
        ),
        (
            "bash -c 'echo \"unterminated'",
            &["bash -c 'echo \"unterminated'", "echo \"unterminated"],
            &["bash -c 'echo \"unterminated'", "echo \"unterminated"],
            E,
            E,
        ),
        ("$CMD arg", &["$CMD arg"], &["$CMD arg"], E, E),
        (
            "$CMD /etc/x",
            &["$CMD /etc/x"],
            &["$CMD /etc/x"],
            &["/etc/*"],
            E,
        ),
        (
            "$(echo rm) x",
            &["$(echo rm) x", "echo rm"],
            &["$(echo rm) x", "echo *"],
            E,
            E,
        ),
        (
            "\"$EDITOR\" file",
            &["\"$EDITOR\" file"],
            &["\"$EDITOR\" file"],
            E,
            E,
        ),
        (
            "`which ls` -la",
            &["`which ls` -la", "which ls"],
            &["`which ls` -la", "which *"],
            E,
            E,
        ),
        (
            "${TOOL:-cat} .env",
            &["${TOOL:-cat} .env"],
            &["${TOOL:-cat} .env"],
            E,
            &[".env"],
        ),
    ]);
}

#[test]
fn unreadable_and_empty() {
    check(&[
        (
            "echo \"unterminated",
            &["echo \"unterminated"],
            &["echo \"unterminated"],
            E,
            E,
        ),
        ("if then fi", &["if then fi"], &["if then fi"], E, E),
        (")(", &[")("], &[")("], E, E),
        ("  cat <> f  ", &["cat <> f"], &["cat <> f"], E, E),
        (
            "rm /etc/x; echo \"oops",
            &["rm /etc/x; echo \"oops"],
            &["rm /etc/x; echo \"oops"],
            E,
            E,
        ),
        ("", E, E, E, E),
        ("   \n\t ", E, E, E, E),
    ]);
}

#[test]
fn env_files() {
    check(&[
        ("cat .env", &["cat .env"], &["cat *"], E, &[".env"]),
        ("source .env", &["source .env"], &["source *"], E, &[".env"]),
        (
            ". .env.local",
            &[". .env.local"],
            &[". *"],
            E,
            &[".env.local"],
        ),
        (
            "grep KEY .env.production",
            &["grep KEY .env.production"],
            &["grep *"],
            E,
            &[".env.production"],
        ),
        (
            "cp .env.development.local x",
            &["cp .env.development.local x"],
            &["cp *"],
            E,
            &[".env.development.local"],
        ),
        ("cat < .env", &["cat < .env"], &["cat *"], E, &[".env"]),
        (
            "cat .env.example",
            &["cat .env.example"],
            &["cat *"],
            E,
            &[".env.example"],
        ),
        (
            "cat .envrc environment.ts .environment",
            &["cat .envrc environment.ts .environment"],
            &["cat *"],
            E,
            E,
        ),
        (
            "cat sub/.env",
            &["cat sub/.env"],
            &["cat *"],
            E,
            &["sub/.env"],
        ),
        (
            "cat prod.env 'staging.env'",
            &["cat prod.env 'staging.env'"],
            &["cat *"],
            E,
            &["prod.env", "staging.env"],
        ),
        (
            "cat ../.env",
            &["cat ../.env"],
            &["cat *"],
            &["/work/*"],
            &["/work/.env"],
        ),
        (
            "cat ~/.env",
            &["cat ~/.env"],
            &["cat *"],
            &["/home/u/*"],
            &["/home/u/.env"],
        ),
        (
            "cat /etc/app/.env.local",
            &["cat /etc/app/.env.local"],
            &["cat *"],
            &["/etc/app/*"],
            &["/etc/app/.env.local"],
        ),
        (
            "cd /tmp && cat .env",
            &["cat .env"],
            &["cat *"],
            &["/tmp/*"],
            &[".env", "/tmp/.env"],
        ),
        (
            "cd $D && cat .env",
            &["cat .env"],
            &["cat *"],
            &["*"],
            &[".env"],
        ),
        (
            "docker run --env-file=.env img",
            &["docker run --env-file=.env img"],
            &["docker run *"],
            E,
            &[".env"],
        ),
        (
            "docker run --env-file .env img",
            &["docker run --env-file .env img"],
            &["docker run *"],
            E,
            &[".env"],
        ),
        (
            "cat \"$F.env\" .env*",
            &["cat \"$F.env\" .env*"],
            &["cat *"],
            &["*"],
            &[".env*"],
        ),
        ("echo .env", &["echo .env"], &["echo *"], E, &[".env"]),
        (
            "cat ./sub/../.env",
            &["cat ./sub/../.env"],
            &["cat *"],
            E,
            &[".env"],
        ),
        (
            "sudo cat .env",
            &["sudo cat .env"],
            &["sudo cat .env"],
            E,
            &[".env"],
        ),
        (
            "cat .env > /dev/null; cat .env",
            &["cat .env > /dev/null", "cat .env"],
            &["cat *"],
            E,
            &[".env"],
        ),
        (
            "wc -l < config/prod.env",
            &["wc -l < config/prod.env"],
            &["wc *"],
            E,
            &["config/prod.env"],
        ),
        ("echo x > .env", &["echo x > .env"], &["echo *"], E, E),
    ]);
    check_in(
        "sub",
        &[("cat .env", &["cat .env"], &["cat *"], E, &["sub/.env"])],
    );
}

#[test]
fn exact_always_does_not_cover_other_commands() {
    let approved = scan_in("bash -c 'ls'", "").always;
    assert!(wildcard::matches("bash -c 'ls'", &approved[0]));
    assert!(!wildcard::matches("bash -c 'rm -rf /'", &approved[0]));
    // The ordinary rule does generalise, as in OpenCode.
    let approved = scan_in("git checkout main", "").always;
    assert!(wildcard::matches("git checkout dev", &approved[0]));
}

#[test]
fn home_missing_or_empty() {
    let cx = ScanContext {
        cwd: Path::new(TREE),
        worktree: Path::new(TREE),
        home: None,
    };
    assert_eq!(scan("cat ~/.ssh/id_rsa", &cx).external, ["*"]);
    assert_eq!(scan("cd && rm x", &cx).external, ["*"]);
    // An empty home is odd but must not upset the glob offsets.
    let cx = ScanContext {
        home: Some(Path::new("")),
        ..cx
    };
    assert_eq!(scan("cat ~/*.txt", &cx).external, ["/*"]);
}

#[test]
fn many_relative_cds_give_up_tracking() {
    let cds: Vec<String> = (0..40).map(|i| format!("cd d{i}")).collect();
    let command = format!("{}; rm x", cds.join("; "));
    assert_eq!(scan_in(&command, "").external, ["*"]);
}

#[test]
fn hostile_input_does_not_panic() {
    let nested = format!("{}ls{}", "(".repeat(10_000), ")".repeat(10_000));
    assert_eq!(scan_in(&nested, "").patterns, [nested.as_str()]);
    let substitutions = format!("echo {}x{}", "$(".repeat(3_000), ")".repeat(3_000));
    assert_eq!(scan_in(&substitutions, "").always, [substitutions.as_str()]);
    let chain = vec!["true"; 200].join(" && ");
    assert_eq!(scan_in(&chain, "").patterns, ["true"]);
    let chain = vec!["true"; 300].join(" && ");
    assert_eq!(scan_in(&chain, "").patterns, [chain.as_str()]);
    let long = "ls; ".repeat(20_000);
    assert_eq!(scan_in(&long, "").patterns, ["ls"]);
    let evals = format!("{}ls", "eval ".repeat(50));
    assert!(!scan_in(&evals, "").patterns.is_empty());
    // Wrapper chains: bounded spellings, and the paths are still checked.
    let wrapped = format!("{}rm /etc/x", "nice ".repeat(20_000));
    let found = scan_in(&wrapped, "");
    assert_eq!(found.external, ["/etc/*"]);
    assert!(found.deny_spellings[0].1.len() <= MAX_SPELLED_WRAPPERS + 1);
    let wrapped = format!("{}rm /etc/x", "nice ".repeat(100));
    assert!(
        scan_in(&wrapped, "").deny_spellings[0]
            .1
            .contains(&"rm /etc/x".to_string())
    );
    // Padding `find` does not hide its last command.
    let padded = format!(
        "find . {}-exec rm /etc/x {{}} +",
        "-exec true \\; ".repeat(2_000)
    );
    let found = scan_in(&padded, "");
    assert_eq!(found.external, ["/etc/*"]);
    assert!(
        found.deny_spellings[0]
            .1
            .contains(&"rm /etc/x {}".to_string())
    );
    let nested_finds = format!(
        "{}rm /etc/x{}",
        "find . -exec ".repeat(2_000),
        " \\;".repeat(2_000)
    );
    let _ = scan_in(&nested_finds, "");
    let braces = format!("cat .e{}", "{a,b}".repeat(30));
    assert_eq!(scan_in(&braces, "").reads, [&braces[4..]]);
    let deep_braces = format!("cat .{}x{}", "{".repeat(5_000), "}".repeat(5_000));
    let _ = scan_in(&deep_braces, "");
    let ansi = format!("$'{}' x", "\\x72\\u12345\\777\\c".repeat(2_000));
    let _ = scan_in(&ansi, "");
    let garbage = [
        "ls \0 rm",
        "$(((((",
        "'''",
        "\\",
        "<<EOF",
        "cat <<EOF\n",
        "${",
        "`",
        "a=(",
        "case",
        "[[ ",
        "rm \u{202e}x",
        "cd \0",
        "cat ~\0/x",
        "rm [",
        "rm {",
        "rm {,/}",
        "> ",
        "2>&",
        "cd ''",
        "rm ''",
        "éé ü",
        "cat\t.env\r\n",
    ];
    for input in garbage {
        let _ = scan_in(input, "");
    }
}

/// Statements that are not simple commands still run code or write files, so each is
/// asked about by its exact text (substitutions inside still give their own patterns).
#[test]
fn non_command_statements() {
    check(&[
        (
            "[[ 1 -eq 'a[$(rm -rf src)]' ]]",
            &["[[ 1 -eq 'a[$(rm -rf src)]' ]]"],
            &["[[ 1 -eq 'a[$(rm -rf src)]' ]]"],
            E,
            E,
        ),
        (
            "> src/main.rs",
            &["> src/main.rs"],
            &["> src/main.rs"],
            E,
            E,
        ),
        (
            "cd . > src/main.rs",
            &["cd . > src/main.rs"],
            &["cd . > src/main.rs"],
            E,
            E,
        ),
        (
            "export X=1 > f",
            &["export X=1 > f"],
            &["export X=1 > f"],
            E,
            E,
        ),
        (
            "x='a[$(rm -rf src)]'; echo $((x))",
            &["x='a[$(rm -rf src)]'", "echo $((x))"],
            &["x='a[$(rm -rf src)]'", "echo *"],
            E,
            E,
        ),
        (
            "export GIT_EXTERNAL_DIFF='rm -rf src;:'",
            &["export GIT_EXTERNAL_DIFF='rm -rf src;:'"],
            &["export GIT_EXTERNAL_DIFF='rm -rf src;:'"],
            E,
            E,
        ),
        (
            "declare -x Y=1",
            &["declare -x Y=1"],
            &["declare -x Y=1"],
            E,
            E,
        ),
        ("unset PATH", &["unset PATH"], &["unset PATH"], E, E),
        ("(( x ))", &["(( x ))"], &["(( x ))"], E, E),
        ("let x=1", &["let x=1"], &["let x=1"], E, E),
        ("A=1 B=2", &["A=1 B=2"], &["A=1 B=2"], E, E),
        ("x+=1", &["x+=1"], &["x+=1"], E, E),
        (
            "if [[ -f a ]]; then ls; fi",
            &["[[ -f a ]]", "ls"],
            &["[[ -f a ]]", "ls *"],
            E,
            E,
        ),
        (
            "f() { local x=1; }; f",
            &["local x=1", "f"],
            &["local x=1", "f *"],
            E,
            E,
        ),
        (
            "x=1 y=2 > /etc/x",
            &["x=1 y=2 > /etc/x"],
            &["x=1 y=2 > /etc/x"],
            &["/etc/*"],
            E,
        ),
        // Nothing else to ask about: the line itself is asked about.
        (
            "# only a comment",
            &["# only a comment"],
            &["# only a comment"],
            E,
            E,
        ),
    ]);
}

/// A redirection on a compound statement shows in no inner command's pattern.
#[test]
fn redirected_compound_statements() {
    check(&[
        (
            "{ echo pwned; } > src/main.rs",
            &["{ echo pwned; } > src/main.rs", "echo pwned"],
            &["{ echo pwned; } > src/main.rs", "echo *"],
            E,
            E,
        ),
        (
            "(cat a) > b",
            &["(cat a) > b", "cat a"],
            &["(cat a) > b", "cat *"],
            E,
            E,
        ),
        (
            "if :; then echo x; fi > f",
            &["if :; then echo x; fi > f", ":", "echo x"],
            &["if :; then echo x; fi > f", ": *", "echo *"],
            E,
            E,
        ),
        (
            "f(){ echo; } > f",
            &["f(){ echo; } > f", "echo"],
            &["f(){ echo; } > f", "echo *"],
            E,
            E,
        ),
        (
            "while read l; do echo $l; done < in > out",
            &[
                "while read l; do echo $l; done < in > out",
                "read l",
                "echo $l",
            ],
            &[
                "while read l; do echo $l; done < in > out",
                "read *",
                "echo *",
            ],
            E,
            E,
        ),
        // tree-sitter hangs the redirection on the whole pipeline or list; bash applies
        // it to the last part.
        (
            "ls | cat > /etc/x",
            &["ls", "cat > /etc/x"],
            &["ls *", "cat *"],
            &["/etc/*"],
            E,
        ),
        (
            "a && b | { c; } > f",
            &["a", "b", "{ c; } > f", "c"],
            &["a *", "b *", "{ c; } > f", "c *"],
            E,
            E,
        ),
        ("! ls > f", &["! ls > f", "ls"], &["! ls > f", "ls *"], E, E),
        (
            "{ ls; } 2>/dev/null",
            &["{ ls; } 2>/dev/null", "ls"],
            &["{ ls; } 2>/dev/null", "ls *"],
            E,
            E,
        ),
    ]);
}

/// Options that take a value are skipped by the table, not taken for the command.
#[test]
fn wrappers_do_not_hide_paths() {
    check(&[
        (
            "nice -n 5 rm -rf /etc/x",
            &["nice -n 5 rm -rf /etc/x"],
            &["nice -n 5 rm -rf /etc/x"],
            &["/etc/*"],
            E,
        ),
        (
            "sudo -u root rm /etc/x",
            &["sudo -u root rm /etc/x"],
            &["sudo -u root rm /etc/x"],
            &["/etc/*"],
            E,
        ),
        (
            "timeout -s KILL 5 rm /etc/x",
            &["timeout -s KILL 5 rm /etc/x"],
            &["timeout -s KILL 5 rm /etc/x"],
            &["/etc/*"],
            E,
        ),
        (
            "exec -a n rm /etc/x",
            &["exec -a n rm /etc/x"],
            &["exec -a n rm /etc/x"],
            &["/etc/*"],
            E,
        ),
        (
            "env -u V rm /etc/x",
            &["env -u V rm /etc/x"],
            &["env -u V rm /etc/x"],
            &["/etc/*"],
            E,
        ),
        (
            "sudo -Eu root rm /etc/x",
            &["sudo -Eu root rm /etc/x"],
            &["sudo -Eu root rm /etc/x"],
            &["/etc/*"],
            E,
        ),
        (
            "sudo --user root -- rm /etc/x",
            &["sudo --user root -- rm /etc/x"],
            &["sudo --user root -- rm /etc/x"],
            &["/etc/*"],
            E,
        ),
        (
            "stdbuf -o L rm /etc/x",
            &["stdbuf -o L rm /etc/x"],
            &["stdbuf -o L rm /etc/x"],
            &["/etc/*"],
            E,
        ),
        (
            "sudo nice -n 5 timeout 5 rm /etc/x",
            &["sudo nice -n 5 timeout 5 rm /etc/x"],
            &["sudo nice -n 5 timeout 5 rm /etc/x"],
            &["/etc/*"],
            E,
        ),
        // Where the command starts is unclear: every word is a possible path.
        (
            "sudo $OPTS rm /etc/x",
            &["sudo $OPTS rm /etc/x"],
            &["sudo $OPTS rm /etc/x"],
            &["*", "/etc/*"],
            E,
        ),
        (
            "env -S 'rm -rf' /etc/x",
            &["env -S 'rm -rf' /etc/x"],
            &["env -S 'rm -rf' /etc/x"],
            &["/etc/*"],
            E,
        ),
        (
            "sudo -e /etc/hosts",
            &["sudo -e /etc/hosts"],
            &["sudo -e /etc/hosts"],
            &["/etc/*"],
            E,
        ),
        (
            "parallel rm ::: /etc/x",
            &["parallel rm ::: /etc/x"],
            &["parallel rm ::: /etc/x"],
            &["/etc/*"],
            E,
        ),
        // The wrapper's own files.
        (
            "flock /tmp/bash-scan-none.lock rm x",
            &["flock /tmp/bash-scan-none.lock rm x"],
            &["flock /tmp/bash-scan-none.lock rm x"],
            &["/tmp/*"],
            E,
        ),
        (
            "time -o /etc/x.log ls",
            &["time -o /etc/x.log ls"],
            &["time -o /etc/x.log ls"],
            &["/etc/*"],
            E,
        ),
        // A new root: where the wrapped command's relative paths lead is unknown.
        (
            "chroot /srv/bash-scan-none rm x",
            &["chroot /srv/bash-scan-none rm x"],
            &["chroot /srv/bash-scan-none rm x"],
            &["/srv/bash-scan-none/*", "*"],
            E,
        ),
        // `find` acts on what it finds below its starting points.
        (
            "find /etc -name x -delete",
            &["find /etc -name x -delete"],
            &["find /etc -name x -delete"],
            &["/etc/*"],
            E,
        ),
        (
            "find . -exec rm /etc/x {} \\;",
            &["find . -exec rm /etc/x {} \\;"],
            &["find . -exec rm /etc/x {} \\;"],
            &["/etc/*"],
            E,
        ),
        // xargs adds arguments at run time.
        (
            "find . -name '*.o' | xargs rm",
            &["find . -name '*.o'", "xargs rm"],
            &["find . -name '*.o'", "xargs rm"],
            &["*"],
            E,
        ),
        // `builtin cd` moves the shell like `cd`.
        (
            "builtin cd /tmp && rm zq/b",
            &["builtin cd /tmp", "rm zq/b"],
            &["builtin cd /tmp", "rm *"],
            &["/tmp/*", "/tmp/zq/*"],
            E,
        ),
        // `command -v` only looks names up.
        (
            "command -v rm /etc/x",
            &["command -v rm /etc/x"],
            &["command -v rm /etc/x"],
            E,
            E,
        ),
    ]);
}

/// Anything that changes what `cd` and `~` mean makes them unknown from there on.
#[test]
fn cwd_tracking_cannot_be_fooled() {
    check(&[
        (
            "CDPATH=/ cd etc && rm -rf *",
            &["rm -rf *"],
            &["rm *"],
            &["*"],
            &["*"],
        ),
        ("HOME=/etc cd && rm x", &["rm x"], &["rm *"], &["*"], E),
        (
            "HOME=/etc; rm -rf ~/x",
            &["HOME=/etc", "rm -rf ~/x"],
            &["HOME=/etc", "rm *"],
            &["*"],
            E,
        ),
        (
            "shopt -s cdable_vars; d=/etc; cd d",
            &["shopt -s cdable_vars", "d=/etc"],
            &["shopt *", "d=/etc"],
            &["*"],
            E,
        ),
        (
            "env --chdir=/etc rm -rf x",
            &["env --chdir=/etc rm -rf x"],
            &["env --chdir=/etc rm -rf x"],
            &["/etc/*", "*"],
            E,
        ),
        (
            "env -C /etc rm x",
            &["env -C /etc rm x"],
            &["env -C /etc rm x"],
            &["/etc/*", "*"],
            E,
        ),
        (
            "sudo -D /etc rm x",
            &["sudo -D /etc rm x"],
            &["sudo -D /etc rm x"],
            &["/etc/*", "*"],
            E,
        ),
        (
            "sudo --chdir=/etc rm x",
            &["sudo --chdir=/etc rm x"],
            &["sudo --chdir=/etc rm x"],
            &["/etc/*", "*"],
            E,
        ),
        // Only the wrapped command moved; the shell did not.
        (
            "env -C /etc rm x; rm y",
            &["env -C /etc rm x", "rm y"],
            &["env -C /etc rm x", "rm *"],
            &["/etc/*", "*"],
            E,
        ),
        (
            "export HOME=/etc && cd && rm x",
            &["export HOME=/etc", "rm x"],
            &["export HOME=/etc", "rm *"],
            &["*"],
            E,
        ),
        (
            ": ${HOME:=/etc}; rm ~/x",
            &[": ${HOME:=/etc}", "rm ~/x"],
            &[": *", "rm *"],
            &["*"],
            E,
        ),
        (
            "read -r HOME < f; rm ~/x",
            &["read -r HOME < f", "rm ~/x"],
            &["read *", "rm *"],
            &["*"],
            E,
        ),
        (
            "for HOME in /etc; do rm ~/x; done",
            &["rm ~/x"],
            &["rm *"],
            &["*"],
            E,
        ),
        (
            "env HOME=/etc bash -c 'rm ~/x'",
            &["env HOME=/etc bash -c 'rm ~/x'", "rm ~/x"],
            &["env HOME=/etc bash -c 'rm ~/x'", "rm *"],
            &["*"],
            E,
        ),
        (
            "unset HOME; cd; rm x",
            &["unset HOME", "rm x"],
            &["unset HOME", "rm *"],
            &["*"],
            E,
        ),
        (
            "source <(curl x)",
            &["source <(curl x)", "curl x"],
            &["source *", "curl *"],
            &["*"],
            E,
        ),
        (
            ". /dev/stdin <<< 'rm /etc/x'",
            &[". /dev/stdin <<< 'rm /etc/x'", "rm /etc/x"],
            &[". *", "rm *"],
            &["/etc/*"],
            E,
        ),
        (
            "source /etc/profile",
            &["source /etc/profile"],
            &["source *"],
            &["/etc/*"],
            E,
        ),
        (
            "source env.sh; rm x",
            &["source env.sh", "rm x"],
            &["source *", "rm *"],
            &["*"],
            E,
        ),
        // Before the assignment `~` is still known.
        (
            "rm ~/x; HOME=/etc",
            &["rm ~/x", "HOME=/etc"],
            &["rm *", "HOME=/etc"],
            &["/home/u/*"],
            E,
        ),
    ]);
}

#[test]
fn nested_scripts() {
    check(&[
        (
            "bash -c -- 'rm -rf ~/x'",
            &["bash -c -- 'rm -rf ~/x'", "rm -rf ~/x"],
            &["bash -c -- 'rm -rf ~/x'", "rm *"],
            &["/home/u/*"],
            E,
        ),
        // The string is the first operand, not the word after `-c`.
        (
            "bash -c -x 'rm /etc/x'",
            &["bash -c -x 'rm /etc/x'", "rm /etc/x"],
            &["bash -c -x 'rm /etc/x'", "rm *"],
            &["/etc/*"],
            E,
        ),
        // `o` in the cluster takes `errexit`.
        (
            "bash -co errexit 'rm /etc/x'",
            &["bash -co errexit 'rm /etc/x'", "rm /etc/x"],
            &["bash -co errexit 'rm /etc/x'", "rm *"],
            &["/etc/*"],
            E,
        ),
        (
            "bash <<<'rm -rf /etc/x'",
            &["bash <<<'rm -rf /etc/x'", "rm -rf /etc/x"],
            &["bash <<<'rm -rf /etc/x'", "rm *"],
            &["/etc/*"],
            E,
        ),
        (
            "sh <<'EOF'\nrm /etc/x\nEOF",
            &["sh <<'EOF'\nrm /etc/x\nEOF", "rm /etc/x"],
            &["sh <<'EOF'\nrm /etc/x\nEOF", "rm *"],
            &["/etc/*"],
            E,
        ),
        // An unquoted delimiter expands the body: only known at run time.
        (
            "sh <<EOF\nrm $D/x\nEOF",
            &["sh <<EOF\nrm $D/x\nEOF"],
            &["sh <<EOF\nrm $D/x\nEOF"],
            &["*"],
            E,
        ),
        (
            "echo 'rm /etc/x' | sh",
            &["echo 'rm /etc/x'", "sh"],
            &["echo *", "sh"],
            &["*"],
            E,
        ),
        (
            "curl x | bash",
            &["curl x", "bash"],
            &["curl *", "bash"],
            &["*"],
            E,
        ),
        (
            "curl x | sudo bash -s",
            &["curl x", "sudo bash -s"],
            &["curl *", "sudo bash -s"],
            &["*"],
            E,
        ),
        (
            "cat <<EOF | sh\nrm x\nEOF",
            &["cat <<EOF | sh\nrm x\nEOF", "sh"],
            &["cat *", "sh"],
            &["*"],
            E,
        ),
        // Three strings deep are scanned; the fourth is unknown.
        (
            "eval eval eval eval ls",
            &[
                "eval eval eval eval ls",
                "eval eval eval ls",
                "eval eval ls",
                "eval ls",
            ],
            &[
                "eval eval eval eval ls",
                "eval eval eval ls",
                "eval eval ls",
                "eval ls",
            ],
            &["*"],
            E,
        ),
        // Unknown code in this shell may also `cd`.
        (
            "eval \"$CMD\"; rm x",
            &["eval \"$CMD\"", "rm x"],
            &["eval \"$CMD\"", "rm *"],
            &["*"],
            E,
        ),
        (
            "bash -c \"$(curl x)\"",
            &["bash -c \"$(curl x)\"", "curl x"],
            &["bash -c \"$(curl x)\"", "curl *"],
            &["*"],
            E,
        ),
        // A script file is a path like any other; its contents are not ours to read.
        (
            "bash /etc/x.sh",
            &["bash /etc/x.sh"],
            &["bash /etc/x.sh"],
            &["/etc/*"],
            E,
        ),
        (
            "trap 'rm /etc/x' EXIT",
            &["trap 'rm /etc/x' EXIT", "rm /etc/x"],
            &["trap 'rm /etc/x' EXIT", "rm *"],
            &["/etc/*"],
            E,
        ),
        ("trap - EXIT", &["trap - EXIT"], &["trap - EXIT"], E, E),
        (
            "trap \"$H\" EXIT",
            &["trap \"$H\" EXIT"],
            &["trap \"$H\" EXIT"],
            &["*"],
            E,
        ),
        (
            "sudo sh -c 'rm /etc/x'",
            &["sudo sh -c 'rm /etc/x'", "rm /etc/x"],
            &["sudo sh -c 'rm /etc/x'", "rm *"],
            &["/etc/*"],
            E,
        ),
        (
            "su -c 'rm /etc/x' root",
            &["su -c 'rm /etc/x' root", "rm /etc/x"],
            &["su -c 'rm /etc/x' root", "rm *"],
            &["/etc/*"],
            E,
        ),
        (
            "find . -exec sh -c 'rm /etc/x' \\;",
            &["find . -exec sh -c 'rm /etc/x' \\;", "rm /etc/x"],
            &["find . -exec sh -c 'rm /etc/x' \\;", "rm *"],
            &["/etc/*"],
            E,
        ),
        (
            "xargs -I{} sh -c 'rm {}'",
            &["xargs -I{} sh -c 'rm {}'", "rm {}"],
            &["xargs -I{} sh -c 'rm {}'", "rm *"],
            &["*"],
            E,
        ),
        (
            "watch 'rm /etc/x'",
            &["watch 'rm /etc/x'", "rm /etc/x"],
            &["watch 'rm /etc/x'", "rm *"],
            &["/etc/*"],
            E,
        ),
    ]);
}

#[test]
fn env_file_globs() {
    check(&[
        ("cat .env*", &["cat .env*"], &["cat *"], E, &[".env*"]),
        ("cat .en?", &["cat .en?"], &["cat *"], E, &[".en?"]),
        ("cat .e{n,}v", &["cat .e{n,}v"], &["cat *"], E, &[".e{n,}v"]),
        (
            "cat sub/.env.*",
            &["cat sub/.env.*"],
            &["cat *"],
            E,
            &["sub/.env.*"],
        ),
        ("cat *.env", &["cat *.env"], &["cat *"], E, &["*.env"]),
        // Could match `config.env`.
        ("cat config*", &["cat config*"], &["cat *"], E, &["config*"]),
        (
            "cat $'.en\\x76'",
            &["cat $'.en\\x76'"],
            &["cat *"],
            &["*"],
            &[".env"],
        ),
        // `.[` might match `..`, so the place is unknown (see `judge_glob`).
        (
            "cat .[e]nv",
            &["cat .[e]nv"],
            &["cat *"],
            &["*"],
            &[".[e]nv"],
        ),
        ("cat */.env", &["cat */.env"], &["cat *"], E, &["*/.env"]),
        ("cat < .env*", &["cat < .env*"], &["cat *"], E, &[".env*"]),
        (
            "cat ~/.env*",
            &["cat ~/.env*"],
            &["cat *"],
            &["/home/u/*"],
            &["/home/u/.env*"],
        ),
        (
            "cat /etc/app/.env.*",
            &["cat /etc/app/.env.*"],
            &["cat *"],
            &["/etc/app/*"],
            &["/etc/app/.env.*"],
        ),
    ]);
}

#[test]
fn exact_always_patterns() {
    check(&[
        (
            "python3 -c 'print(1)'",
            &["python3 -c 'print(1)'"],
            &["python3 -c 'print(1)'"],
            E,
            E,
        ),
        (
            "python3.12 x.py",
            &["python3.12 x.py"],
            &["python3.12 x.py"],
            E,
            E,
        ),
        ("node -e 'x'", &["node -e 'x'"], &["node -e 'x'"], E, E),
        (
            "deno eval 'x'",
            &["deno eval 'x'"],
            &["deno eval 'x'"],
            E,
            E,
        ),
        (
            "perl -ne 'print' f",
            &["perl -ne 'print' f"],
            &["perl -ne 'print' f"],
            E,
            E,
        ),
        ("ruby x.rb", &["ruby x.rb"], &["ruby x.rb"], E, E),
        ("php x.php", &["php x.php"], &["php x.php"], E, E),
        ("lua x.lua", &["lua x.lua"], &["lua x.lua"], E, E),
        (
            "awk '{print}' f",
            &["awk '{print}' f"],
            &["awk '{print}' f"],
            E,
            E,
        ),
        (
            "gawk -f x.awk",
            &["gawk -f x.awk"],
            &["gawk -f x.awk"],
            E,
            E,
        ),
        ("sed -n 1p f", &["sed -n 1p f"], &["sed -n 1p f"], E, E),
        (
            "su -c ls root",
            &["su -c ls root", "ls"],
            &["su -c ls root", "ls *"],
            E,
            E,
        ),
        (
            "script -q out.log",
            &["script -q out.log"],
            &["script -q out.log"],
            E,
            E,
        ),
        (
            "stdbuf -oL make",
            &["stdbuf -oL make"],
            &["stdbuf -oL make"],
            E,
            E,
        ),
        ("setsid make", &["setsid make"], &["setsid make"], E, E),
        ("flock l make", &["flock l make"], &["flock l make"], E, E),
        ("busybox ls", &["busybox ls"], &["busybox ls"], E, E),
        (
            "parallel echo ::: a",
            &["parallel echo ::: a"],
            &["parallel echo ::: a"],
            E,
            E,
        ),
        (
            "git -c core.pager=cat log",
            &["git -c core.pager=cat log"],
            &["git -c core.pager=cat log"],
            E,
            E,
        ),
        ("bun -e 'x'", &["bun -e 'x'"], &["bun -e 'x'"], E, E),
        (
            ">/dev/null make",
            &[">/dev/null make"],
            &[">/dev/null make"],
            E,
            E,
        ),
        (
            "LANG=C sort f",
            &["LANG=C sort f"],
            &["LANG=C sort f"],
            E,
            E,
        ),
    ]);
    // The exact pattern matches its own command, which the prefix did not.
    let approved = scan_in("FOO=1 make build", "").always;
    assert!(wildcard::matches("FOO=1 make build", &approved[0]));
    assert!(!wildcard::matches("FOO=2 make build", &approved[0]));
}

/// Cases the fixes must leave as they were: the new rules stop where they should (no
/// `*` for a script file, no read for a glob that cannot name an env file, no exact
/// "always" for ordinary subcommands). These pass before and after the fixes.
#[test]
fn fixes_do_not_overreach() {
    check(&[
        ("echo a; cd /tmp", &["echo a"], &["echo *"], &["/tmp/*"], E),
        (
            "sudo -uroot rm /etc/x",
            &["sudo -uroot rm /etc/x"],
            &["sudo -uroot rm /etc/x"],
            &["/etc/*"],
            E,
        ),
        (
            "find /etc -name x",
            &["find /etc -name x"],
            &["find /etc -name x"],
            E,
            E,
        ),
        ("sh ./x.sh", &["sh ./x.sh"], &["sh ./x.sh"], E, E),
        (
            "bash < /etc/x.sh",
            &["bash < /etc/x.sh"],
            &["bash < /etc/x.sh"],
            &["/etc/*"],
            E,
        ),
        // Cannot match an env file: a wildcard never matches a leading dot.
        ("cat *.rs", &["cat *.rs"], &["cat *"], E, E),
        ("cat .e[!n]v", &["cat .e[!n]v"], &["cat *"], E, E),
        ("cat .envrc?", &["cat .envrc?"], &["cat *"], E, E),
        ("cat {a,b}.txt", &["cat {a,b}.txt"], &["cat *"], E, E),
        // Only known at run time: not reported as a read (see `env_read`).
        ("cat \"$f\"", &["cat \"$f\""], &["cat *"], &["*"], E),
        ("deno run x.ts", &["deno run x.ts"], &["deno run *"], E, E),
        ("git log -p", &["git log -p"], &["git log *"], E, E),
        ("bun run dev", &["bun run dev"], &["bun run dev *"], E, E),
    ]);
}

/// (command, [(pattern, its other spellings)]).
type Spellings = (
    &'static str,
    &'static [(&'static str, &'static [&'static str])],
);

fn check_spellings(cases: &[Spellings]) {
    for &(command, want) in cases {
        let want: Vec<(String, Vec<String>)> = want
            .iter()
            .map(|&(pattern, forms)| (pattern.to_string(), owned(forms)))
            .collect();
        assert_eq!(scan_in(command, "").deny_spellings, want, "{command:?}");
    }
}

#[test]
fn deny_spellings() {
    check_spellings(&[
        ("ls", &[]),
        ("rm -rf x", &[]),
        ("\\rm x", &[("\\rm x", &["rm x"])]),
        ("\"rm\" -rf x", &[("\"rm\" -rf x", &["rm -rf x"])]),
        ("/bin/rm /etc/x", &[("/bin/rm /etc/x", &["rm /etc/x"])]),
        (
            "sort -\"o\" /etc/x y",
            &[("sort -\"o\" /etc/x y", &["sort -o /etc/x y"])],
        ),
        ("echo \"a b\"", &[("echo \"a b\"", &["echo a b"])]),
        (
            "echo \"$HOME\"/x",
            &[("echo \"$HOME\"/x", &["echo $HOME/x"])],
        ),
        ("$'\\x72m' -rf x", &[("$'\\x72m' -rf x", &["rm -rf x"])]),
        (
            "find . -e''xec rm -rf {} \\;",
            &[(
                "find . -e''xec rm -rf {} \\;",
                &["find . -exec rm -rf {} ;", "rm -rf {}"],
            )],
        ),
        (
            "find . -exec rm {} \\; -exec cat {} +",
            &[(
                "find . -exec rm {} \\; -exec cat {} +",
                &["find . -exec rm {} ; -exec cat {} +", "rm {}", "cat {}"],
            )],
        ),
        // Redirections: leading ones dropped, later ones kept, one space after `>`.
        ("ls > x", &[]),
        ("ls >x", &[("ls >x", &["ls > x"])]),
        (
            "ls 2>/dev/null",
            &[("ls 2>/dev/null", &["ls 2> /dev/null"])],
        ),
        ("make 2>&1", &[]),
        ("FOO=1 ls >x", &[("FOO=1 ls >x", &["ls > x"])]),
        ("> f echo hi", &[("> f echo hi", &["echo hi"])]),
        ("echo > f hi", &[("echo > f hi", &["echo hi > f"])]),
        ("cd /tmp >f", &[("cd /tmp >f", &["cd /tmp > f"])]),
        // Wrapped commands.
        ("sudo -u root rm x", &[("sudo -u root rm x", &["rm x"])]),
        (
            "nice -n 5 rm /etc/x",
            &[("nice -n 5 rm /etc/x", &["rm /etc/x"])],
        ),
        (
            "timeout -s KILL 5 rm x",
            &[("timeout -s KILL 5 rm x", &["rm x"])],
        ),
        ("env -u V FOO=1 rm x", &[("env -u V FOO=1 rm x", &["rm x"])]),
        ("xargs rm -rf", &[("xargs rm -rf", &["rm -rf"])]),
        ("busybox rm x", &[("busybox rm x", &["rm x"])]),
        ("command -p rm x", &[("command -p rm x", &["rm x"])]),
        ("stdbuf -oL rm x", &[("stdbuf -oL rm x", &["rm x"])]),
        (
            "flock -w 5 /tmp/l rm x",
            &[("flock -w 5 /tmp/l rm x", &["rm x"])],
        ),
        ("exec -a n rm x", &[("exec -a n rm x", &["rm x"])]),
        ("sudo -- rm x", &[("sudo -- rm x", &["rm x"])]),
        ("sudo FOO=1 rm x", &[("sudo FOO=1 rm x", &["rm x"])]),
        (
            "sudo nice 'rm' x > /etc/y",
            &[(
                "sudo nice 'rm' x > /etc/y",
                &[
                    "sudo nice rm x > /etc/y",
                    "nice rm x > /etc/y",
                    "rm x > /etc/y",
                ],
            )],
        ),
        (
            "exec rm x 2>/dev/null",
            &[(
                "exec rm x 2>/dev/null",
                &["exec rm x 2> /dev/null", "rm x 2> /dev/null"],
            )],
        ),
        // Runs nothing, or where the command starts is unclear: no inner spelling.
        ("command -v rm", &[]),
        (
            "env -S 'rm x' y",
            &[("env -S 'rm x' y", &["env -S rm x y"])],
        ),
        // Scripts give patterns of their own, with their own spellings.
        (
            "trap 'rm x' EXIT",
            &[("trap 'rm x' EXIT", &["trap rm x EXIT"])],
        ),
        (
            "bash -c '\\rm x'",
            &[
                ("bash -c '\\rm x'", &["bash -c \\rm x"]),
                ("\\rm x", &["rm x"]),
            ],
        ),
        ("\\rm a; \\rm a", &[("\\rm a", &["rm a"])]),
    ]);
}

#[test]
fn wrapper_tables_agree() {
    for name in RUNNERS.iter().flat_map(|r| r.names).chain(SHELLS) {
        assert!(WRAPPERS.contains(name), "{name} runs commands");
    }
}

#[test]
fn glob_env_file_candidates() {
    // (glob, could name an env file)
    let cases = [
        (".env*", true),
        ("*", true),
        ("*env", true),
        (".*", true),
        ("?env", true),
        (".e[mn]v", true),
        (".env.[lp]*", true),
        ("@(.env|x)", true),
        ("*.rs", false),
        ("*.env.x", false),
        ("x*.txt", false),
        (".e[!n]v", false),
        ("[ab].txt", false),
        ("file{1..3}.txt", false),
        (".e{x,y}v", false),
        ("{.e,.f}nv", true),
    ];
    for (glob, want) in cases {
        let at = glob.find(['*', '?', '[', '{']).unwrap_or(0);
        assert_eq!(glob_may_name_env_file(glob, at), want, "{glob}");
    }
}

mod real_files {
    use super::super::*;
    use std::os::unix::fs::symlink;

    struct Fixture {
        _dir: tempfile::TempDir,
        root: PathBuf,
    }

    /// `root/wt` (the worktree, with `sub/`), `root/out` (outside), and links
    /// `wt/link → out`, `wt/inlink → wt/sub`, `root/alias → wt`.
    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("wt/sub")).unwrap();
        std::fs::create_dir_all(root.join("out")).unwrap();
        symlink(root.join("out"), root.join("wt/link")).unwrap();
        symlink(root.join("wt/sub"), root.join("wt/inlink")).unwrap();
        symlink(root.join("wt"), root.join("alias")).unwrap();
        Fixture { _dir: dir, root }
    }

    fn run(fx: &Fixture, worktree: &str, command: &str) -> BashScan {
        let wt = fx.root.join(worktree);
        let cx = ScanContext {
            cwd: &wt,
            worktree: &wt,
            home: None,
        };
        scan(command, &cx)
    }

    fn at(fx: &Fixture, rel: &str) -> String {
        format!("{}/{rel}", fx.root.display())
    }

    #[test]
    fn link_pointing_outside_is_outside() {
        let fx = fixture();
        assert_eq!(run(&fx, "wt", "cat link/x").external, [at(&fx, "out/*")]);
        let scan = run(&fx, "wt", "cat link/.env");
        assert_eq!(scan.external, [at(&fx, "out/*")]);
        assert_eq!(scan.reads, [at(&fx, "out/.env")]);
    }

    #[test]
    fn link_pointing_inside_is_inside() {
        let fx = fixture();
        assert_eq!(
            run(&fx, "wt", "cat inlink/x").external,
            Vec::<String>::new()
        );
        assert_eq!(run(&fx, "wt", "cat inlink/.env").reads, ["sub/.env"]);
    }

    #[test]
    fn worktree_reached_through_a_link() {
        let fx = fixture();
        let scan = run(&fx, "alias", "cat x sub/.env");
        assert_eq!(scan.external, Vec::<String>::new());
        assert_eq!(scan.reads, ["sub/.env"]);
        // `..` from the physical worktree is the fixture root.
        assert_eq!(
            run(&fx, "alias", "cat ../out/y").external,
            [at(&fx, "out/*")]
        );
    }

    #[test]
    fn existing_directory_stands_for_itself() {
        let fx = fixture();
        let out = at(&fx, "out");
        assert_eq!(
            run(&fx, "wt", &format!("rm -r {out}")).external,
            [at(&fx, "out/*")]
        );
        let cd = run(&fx, "wt", &format!("cd {out} && rm y"));
        assert_eq!(cd.external, [at(&fx, "out/*")]);
        assert_eq!(cd.patterns, ["rm y"]);
    }

    #[test]
    fn missing_file_under_outside_link() {
        let fx = fixture();
        let scan = run(&fx, "wt", "touch link/newdir/file");
        assert_eq!(scan.external, [at(&fx, "out/newdir/*")]);
    }

    #[test]
    fn dotdot_after_a_link_is_physical() {
        let fx = fixture();
        // The kernel resolves `link/..` to the parent of `out`, i.e. the fixture root.
        let root = format!("{}/*", fx.root.display());
        assert_eq!(run(&fx, "wt", "cat link/../x").external, [root]);
    }

    #[test]
    fn cd_through_a_link() {
        let fx = fixture();
        let scan = run(&fx, "wt", "cd link && rm y");
        assert_eq!(scan.external, [at(&fx, "out/*")]);
    }
}
