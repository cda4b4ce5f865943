//! Tools behind the real rule gate: what each tool asks, that the analysis `permission
//! check` prints is exactly what a call asks, the `.env` rules through the read tool and
//! through bash, external directories reached through symlinks, the doom-loop guard, and
//! tools hidden by a `"*"` deny.

use std::sync::Arc;

use common::{Fixture, fixture};
use runner_permission::PermissionRequest;
use runner_permission::gate::{PolicyAsker, RuleGate};
use runner_permission::layers::{self, Layers};
use runner_permission::rules::{Action, Rule};
use runner_tool::ToolContext;
use runner_tool::registry::Outcome;
use serde_json::{Value, json};

/// The fixture's context with a rule gate of OpenCode's defaults plus `extra`, where asks
/// are refused (as without a terminal).
fn ruled(f: &Fixture, extra: &[(&str, &str, Action)]) -> (ToolContext, Arc<RuleGate>) {
    let rules = layers::merge(Layers {
        defaults: layers::defaults(),
        session: extra
            .iter()
            .enumerate()
            .map(|(i, (p, pat, a))| Rule::new(p, pat, *a, "test", i + 1))
            .collect(),
        output_dir: Some(f.out.clone()),
        ..Layers::default()
    });
    let gate = Arc::new(RuleGate::new(
        &f.wt,
        rules,
        Arc::new(PolicyAsker::deny("nobody is watching")),
    ));
    let ctx = ToolContext {
        gate: gate.clone(),
        ..f.ctx.clone()
    };
    (ctx, gate)
}

fn strip(asks: Vec<PermissionRequest>) -> Vec<(String, Vec<String>, Vec<String>)> {
    asks.into_iter().map(common::ask_tuple).collect()
}

/// Every tool's analysis, compared with what its execution really asked. A tool whose
/// `execute` asked something its `permissions` did not list (or in another order) would
/// make `runner permission check` lie.
#[tokio::test]
async fn the_analysis_is_what_execution_asks() {
    let f = fixture().await;
    f.write("src/a.rs", "fn a() {}\n");
    f.write("notes.txt", "one\ntwo\n");
    common::write_file(&f.outside.join("o.txt"), b"outside\n");
    std::os::unix::fs::symlink(&f.outside, f.path("link")).unwrap();
    let outside = f.outside.to_string_lossy().into_owned();
    let calls: Vec<(&str, Value)> = vec![
        ("read", json!({ "filePath": "src/a.rs" })),
        ("read", json!({ "filePath": "src" })),
        ("read", json!({ "filePath": format!("{outside}/o.txt") })),
        ("read", json!({ "filePath": "link/o.txt" })),
        ("write", json!({ "filePath": "new.txt", "content": "x" })),
        (
            "write",
            json!({ "filePath": format!("{outside}/w.txt"), "content": "x" }),
        ),
        ("read", json!({ "filePath": "notes.txt" })),
        (
            "edit",
            json!({ "filePath": "notes.txt", "oldString": "one", "newString": "uno" }),
        ),
        (
            "multiedit",
            json!({ "filePath": "notes.txt", "edits": [{ "oldString": "two", "newString": "dos" }] }),
        ),
        (
            "apply_patch",
            json!({ "patchText": "*** Begin Patch\n*** Add File: p.txt\n+p\n*** Update File: src/a.rs\n*** Move to: ../outside/moved.rs\n@@\n-fn a() {}\n+fn b() {}\n*** End Patch" }),
        ),
        ("glob", json!({ "pattern": "*.txt", "path": outside })),
        ("grep", json!({ "pattern": "fn", "path": "src" })),
        ("list", json!({ "path": outside })),
        (
            "bash",
            json!({ "command": "cat .env; cd /tmp && ls x | wc -l", "description": "d" }),
        ),
        (
            "bash",
            json!({ "command": "ls", "workdir": outside, "description": "d" }),
        ),
    ];
    for (tool, args) in calls {
        let planned = f
            .registry
            .permissions(tool, args.clone(), &f.ctx)
            .await
            .unwrap_or_else(|e| panic!("{tool} {args}: {e}"));
        let before = f.raw_asks().len();
        let result = f.call(tool, args.clone()).await;
        let asked: Vec<PermissionRequest> = f.raw_asks().into_iter().skip(before).collect();
        assert!(!planned.is_empty(), "{tool} {args} asks nothing");
        // A call that succeeds asked everything; one the sandbox refused (outside paths)
        // stopped partway, after asking a prefix of the plan.
        let planned = strip(planned);
        let asked_t = strip(asked.clone());
        if result.outcome == Outcome::Ok {
            assert_eq!(planned, asked_t, "{tool} {args}");
        } else {
            assert!(
                !asked_t.is_empty() && planned.starts_with(&asked_t),
                "{tool} {args}: asked {asked_t:?}, planned {planned:?} (error {:?})",
                result.error
            );
        }
        assert!(
            asked.iter().all(|a| a.tool.as_deref() == Some(tool)),
            "{tool}: every ask names its tool"
        );
    }
}

#[tokio::test]
async fn env_files_ask_through_the_read_tool_and_through_bash() {
    let f = fixture().await;
    let asking = [
        ".env",
        ".env.local",
        ".env.production",
        ".env.development.local",
        "sub/.env",
    ];
    let free = [
        ".env.example",
        ".envrc",
        "environment.ts",
        "sub/.env.example",
    ];
    for name in asking.iter().chain(free.iter()) {
        f.write(name, "SECRET=1\n");
    }
    let (ctx, _) = ruled(&f, &[]);
    for name in asking {
        let r = f
            .registry
            .call("read", json!({ "filePath": name }), &ctx)
            .await;
        assert_eq!(r.outcome, Outcome::Denied, "read {name}");
        assert!(r.error.as_deref().unwrap().contains(name), "{r:?}");
        for command in [
            format!("cat {name}"),
            format!("source {name}"),
            format!(". ./{name}"),
            format!("grep SECRET {name}"),
            format!("wc -l < {name}"),
        ] {
            let r = f
                .registry
                .call(
                    "bash",
                    json!({ "command": command, "description": "d" }),
                    &ctx,
                )
                .await;
            assert_eq!(r.outcome, Outcome::Denied, "{command}: {:?}", r.output);
            assert!(
                r.error.as_deref().unwrap().contains("read"),
                "{command}: {r:?}"
            );
        }
    }
    for name in free {
        let r = f
            .registry
            .call("read", json!({ "filePath": name }), &ctx)
            .await;
        assert_eq!(r.outcome, Outcome::Ok, "read {name}: {:?}", r.error);
        let r = f
            .registry
            .call(
                "bash",
                json!({ "command": format!("cat {name}"), "description": "d" }),
                &ctx,
            )
            .await;
        assert_eq!(r.outcome, Outcome::Ok, "cat {name}: {:?}", r.error);
        assert!(r.output.contains("SECRET=1"), "cat {name}");
    }
    // Globs and quoting that can reach an env file ask too.
    for command in [
        "cat .env*",
        "cat .e{n,}v",
        "cat sub/.env.*",
        "cat '.env'",
        "cat \\.env",
    ] {
        let r = f
            .registry
            .call(
                "bash",
                json!({ "command": command, "description": "d" }),
                &ctx,
            )
            .await;
        assert_eq!(r.outcome, Outcome::Denied, "{command}: {:?}", r.output);
    }
    // A link to an env file asks like the file itself.
    std::os::unix::fs::symlink(".env", f.path("notes")).unwrap();
    let r = f
        .registry
        .call("read", json!({ "filePath": "notes" }), &ctx)
        .await;
    assert_eq!(r.outcome, Outcome::Denied, "{r:?}");
    // The defaults ask (not deny): with someone to approve, the read goes through.
    let (_, gate) = ruled(&f, &[]);
    for name in asking {
        let verdict = gate.verdict(&PermissionRequest::new("read", vec![name.into()], vec![]));
        assert_eq!(verdict.action, Action::Ask, "{name}");
    }
    // An allow rule for one file lets exactly that file through, in either spelling.
    let (ctx, _) = ruled(&f, &[("read", &f.abs(".env.local"), Action::Allow)]);
    let r = f
        .registry
        .call("read", json!({ "filePath": ".env.local" }), &ctx)
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
    let r = f
        .registry
        .call(
            "bash",
            json!({ "command": "cat .env.local", "description": "d" }),
            &ctx,
        )
        .await;
    assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
    let r = f
        .registry
        .call("read", json!({ "filePath": ".env" }), &ctx)
        .await;
    assert_eq!(r.outcome, Outcome::Denied);
}

#[tokio::test]
async fn a_symlink_out_of_the_worktree_asks_for_where_it_leads() {
    let f = fixture().await;
    common::write_file(&f.outside.join("secret.txt"), b"s\n");
    std::os::unix::fs::symlink(&f.outside, f.path("link")).unwrap();
    let want = format!("{}/*", f.outside.display());
    for (tool, args) in [
        ("read", json!({ "filePath": "link/secret.txt" })),
        (
            "write",
            json!({ "filePath": "link/new.txt", "content": "x" }),
        ),
        ("list", json!({ "path": "link" })),
        (
            "bash",
            json!({ "command": "cat link/secret.txt", "description": "d" }),
        ),
    ] {
        let asks = f
            .registry
            .permissions(tool, args.clone(), &f.ctx)
            .await
            .unwrap();
        let external = asks
            .iter()
            .find(|a| a.permission == "external_directory")
            .unwrap_or_else(|| panic!("{tool} {args}: no external_directory ask in {asks:?}"));
        assert_eq!(external.patterns, vec![want.clone()], "{tool}");
        // With nobody to approve it, the call stops before anything happens.
        let (ctx, _) = ruled(&f, &[]);
        let r = f.registry.call(tool, args.clone(), &ctx).await;
        assert_eq!(r.outcome, Outcome::Denied, "{tool} {args}");
    }
    assert!(!f.outside.join("new.txt").exists());
}

/// A worktree opened through a symlinked path still contains its own files: the real
/// worktree is resolved once, and resolved paths are compared against it.
#[tokio::test]
async fn a_worktree_named_through_a_symlink_contains_its_files() {
    let f = fixture().await;
    f.write("sub/a.txt", "a\n");
    let alias = f.wt.parent().unwrap().join("alias");
    std::os::unix::fs::symlink(&f.wt, &alias).unwrap();
    let sandbox = common::open_sandbox(common::Backend::InProcess, &alias, &[])
        .await
        .unwrap();
    let ctx = ToolContext::new(
        Arc::new(sandbox),
        f.ctx.conversation.clone(),
        f.ctx.gate.clone(),
        f.ctx.services.truncator.clone(),
    );
    assert_eq!(ctx.services.real_worktree.as_path(), f.wt.as_path());
    assert!(
        ctx.external_request(&alias.join("sub/a.txt"), false)
            .is_none()
    );
    let asks = strip(ctx.file_asks(&alias.join("sub/a.txt"), false, "read"));
    assert_eq!(asks.len(), 1, "{asks:?}");
    assert_eq!(asks[0].0, "read");
    let outside = ctx.external_request(&f.outside.join("x"), false).unwrap();
    assert_eq!(outside.patterns, vec![format!("{}/*", f.outside.display())]);
}

#[tokio::test]
async fn the_third_identical_call_in_a_row_asks_doom_loop() {
    let f = fixture().await;
    f.write("a.txt", "a\n");
    let read = json!({ "filePath": "a.txt" });
    for _ in 0..2 {
        f.ok("read", read.clone()).await;
    }
    assert!(f.asks().iter().all(|a| a.0 != "doom_loop"));
    f.ok("read", read.clone()).await;
    let doom: Vec<_> = f
        .asks()
        .into_iter()
        .filter(|a| a.0 == "doom_loop")
        .collect();
    assert_eq!(doom, vec![common::ask("doom_loop", &["read"], &["read"])]);

    // Under the defaults (doom_loop: ask) with nobody to answer, the third call stops; a
    // different call in between resets the count.
    let (ctx, _) = ruled(&f, &[]);
    let g = json!({ "pattern": "a" });
    let grep = |args: Value| {
        let ctx = ctx.clone();
        let registry = f.registry.clone();
        async move { registry.call("grep", args, &ctx).await.outcome }
    };
    assert_eq!(grep(g.clone()).await, Outcome::Ok);
    assert_eq!(grep(g.clone()).await, Outcome::Ok);
    assert_eq!(grep(json!({ "pattern": "b" })).await, Outcome::Ok);
    assert_eq!(grep(g.clone()).await, Outcome::Ok);
    assert_eq!(grep(g.clone()).await, Outcome::Ok);
    assert_eq!(grep(g.clone()).await, Outcome::Denied);
    // `doom_loop: allow` turns the guard off.
    let (ctx, _) = ruled(&f, &[("doom_loop", "*", Action::Allow)]);
    for _ in 0..4 {
        assert_eq!(
            f.registry.call("grep", g.clone(), &ctx).await.outcome,
            Outcome::Ok
        );
    }
}

#[tokio::test]
async fn a_star_deny_hides_the_tool_and_refuses_its_calls() {
    let f = fixture().await;
    let (ctx, gate) = ruled(
        &f,
        &[
            ("edit", "*", Action::Deny),
            ("bash", "*", Action::Deny),
            ("bash", "git *", Action::Allow),
        ],
    );
    let visible: Vec<&str> = f.registry.visible(gate.as_ref()).map(|t| t.id()).collect();
    for hidden in ["write", "edit", "multiedit", "apply_patch"] {
        assert!(!visible.contains(&hidden), "{hidden} in {visible:?}");
    }
    // A later specific allow keeps bash visible (OpenCode's rule).
    for shown in ["bash", "read", "glob", "grep", "list"] {
        assert!(visible.contains(&shown), "{shown} missing from {visible:?}");
    }
    let r = f
        .registry
        .call(
            "write",
            json!({ "filePath": "x.txt", "content": "x" }),
            &ctx,
        )
        .await;
    assert_eq!(r.outcome, Outcome::Denied);
    let error = r.error.unwrap();
    assert!(
        error.contains("not available") && error.contains("test #1"),
        "{error}"
    );
    assert!(!f.path("x.txt").exists());
}

#[tokio::test]
async fn a_denied_command_names_the_rule_and_runs_nothing() {
    let f = fixture().await;
    f.write("keep.txt", "k\n");
    let (ctx, _) = ruled(&f, &[("bash", "rm *", Action::Deny)]);
    let r = f
        .registry
        .call(
            "bash",
            json!({ "command": "echo hi && rm keep.txt", "description": "d" }),
            &ctx,
        )
        .await;
    assert_eq!(r.outcome, Outcome::Denied);
    let error = r.error.unwrap();
    assert!(
        error.contains("\"rm keep.txt\" is denied by bash \"rm *\" = deny (test #1)"),
        "{error}"
    );
    assert!(f.path("keep.txt").exists());
    // The subcommand inside a substitution is judged too.
    let r = f
        .registry
        .call(
            "bash",
            json!({ "command": "echo $(rm keep.txt)", "description": "d" }),
            &ctx,
        )
        .await;
    assert_eq!(r.outcome, Outcome::Denied);
    assert!(f.path("keep.txt").exists());
}

/// OpenCode's asks where runner used to differ: reading a directory outside the worktree
/// asks for that directory (`O/external/*`), not its parent; a command that only changes
/// directory asks nothing of `bash`, only `external_directory` when it leaves the worktree.
#[tokio::test]
async fn outside_directories_and_a_lone_cd_ask_what_opencode_asks() {
    let f = fixture().await;
    let dir = f.outside.join("external");
    std::fs::create_dir_all(&dir).unwrap();
    let dir_text = dir.to_string_lossy().into_owned();
    let asks = strip(
        f.registry
            .permissions("read", json!({ "filePath": dir_text }), &f.ctx)
            .await
            .unwrap(),
    );
    let pattern = format!("{dir_text}/*");
    assert_eq!(asks[0].0, "external_directory", "{asks:?}");
    assert_eq!(asks[0].1, vec![pattern], "{asks:?}");

    for (command, external) in [
        (format!("cd {dir_text}"), Some(format!("{dir_text}/*"))),
        ("cd src".to_string(), None),
    ] {
        let asks = strip(
            f.registry
                .permissions(
                    "bash",
                    json!({ "command": command, "description": "d" }),
                    &f.ctx,
                )
                .await
                .unwrap(),
        );
        assert!(
            asks.iter().all(|a| a.0 != "bash"),
            "{command}: a lone cd asked bash: {asks:?}"
        );
        let outside: Vec<&Vec<String>> = asks
            .iter()
            .filter(|a| a.0 == "external_directory")
            .map(|a| &a.1)
            .collect();
        match &external {
            Some(p) => assert_eq!(outside, vec![&vec![p.clone()]], "{command}"),
            None => assert!(outside.is_empty(), "{command}: {asks:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// A repository's config against the user's rules and the built-in defaults, through the
// real binary (`runner permission check`), with the user's config and runner's data dir in
// a temp dir.
// ---------------------------------------------------------------------------------------

/// A worktree with a `.runner/config.toml`, a user config, and a data dir of its own.
struct Repo {
    _tmp: tempfile::TempDir,
    wt: std::path::PathBuf,
    home: std::path::PathBuf,
}

impl Repo {
    fn new(user: &str, project: &str) -> Repo {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let wt = base.join("wt");
        std::fs::create_dir_all(wt.join(".runner")).unwrap();
        std::fs::create_dir_all(base.join("config/runner")).unwrap();
        std::fs::write(base.join("config/runner/config.toml"), user).unwrap();
        let repo = Repo {
            _tmp: tmp,
            wt,
            home: base,
        };
        repo.write_project(project);
        repo
    }

    fn project(&self) -> std::path::PathBuf {
        self.wt.join(".runner/config.toml")
    }

    fn write_project(&self, text: &str) {
        std::fs::write(self.project(), text).unwrap();
    }

    /// `runner permission check bash {command}` (plus `extra`): the JSON verdict and stderr.
    fn check(&self, command: &str, extra: &[&str]) -> (Value, String) {
        let args = json!({ "command": command, "description": "d" }).to_string();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["permission", "check", "bash", &args, "--root"])
            .arg(&self.wt)
            .args(extra)
            .env("XDG_CONFIG_HOME", self.home.join("config"))
            .env("XDG_DATA_HOME", self.home.join("data"))
            .env("HOME", &self.home)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("runner runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        (v, stderr)
    }
}

/// The case: the user's `"rm *" = "deny"` and the repository's `"rm *" = "allow"`.
/// On the old stacking the project layer came later and won: allow, and nothing said.
#[test]
fn a_repository_cannot_loosen_the_users_deny() {
    let repo = Repo::new(
        "[permission.bash]\n\"rm *\" = \"deny\"\n",
        "# the repository's\n[permission.bash]\n\"rm *\" = \"allow\"\n\"*\" = \"allow\"\n",
    );
    for extra in [&[][..], &["--trust-project"], &["--profile", "laptop"]] {
        let (v, stderr) = repo.check("rm -rf x", extra);
        assert_eq!(v["decision"], "deny", "{extra:?}: {v}");
        let origin = v["asks"][0]["rule"]["source"]["origin"].as_str().unwrap();
        assert!(origin.ends_with("config/runner/config.toml"), "{v}");
        // Each ignored rule is named once, with its file and line.
        let project = repo.project().display().to_string();
        for (line, rule) in [
            (3, "bash \"rm *\" = \"allow\""),
            (4, "bash \"*\" = \"allow\""),
        ] {
            let needle = format!("ignored {rule} ({project}:{line})");
            assert_eq!(stderr.matches(&needle).count(), 1, "{extra:?}: {stderr}");
        }
    }
}

/// A repository may tighten anything: the user's allow, the repository's deny, is a deny.
#[test]
fn a_repository_may_tighten_the_users_allow() {
    let repo = Repo::new(
        "[permission.bash]\n\"git *\" = \"allow\"\n",
        "[permission.bash]\n\"git push *\" = \"deny\"\n\"make *\" = \"ask\"\n",
    );
    let (v, stderr) = repo.check("git push origin main", &[]);
    assert_eq!(v["decision"], "deny", "{v}");
    assert_eq!(
        v["asks"][0]["rule"]["source"]["origin"],
        repo.project().display().to_string()
    );
    assert!(!stderr.contains("ignored"), "{stderr}");
    assert_eq!(repo.check("make all", &[]).0["decision"], "ask");
    assert_eq!(repo.check("git status", &[]).0["decision"], "allow");
}

/// Loosening a built-in default (an outside directory asks) needs trust: ignored without
/// it, honoured with `--trust-project`, remembered for the same content, asked again (here:
/// ignored, no terminal) once the file changes.
#[test]
fn loosening_a_default_needs_trust_in_this_very_config() {
    let project = "[permission.external_directory]\n\"/srv/runner-zz/*\" = \"allow\"\n";
    let repo = Repo::new("", project);
    let outside = |repo: &Repo, extra: &[&str]| {
        let (v, stderr) = repo.check("cat /srv/runner-zz/a.txt", extra);
        let ask = v["asks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["permission"] == "external_directory")
            .cloned()
            .unwrap_or_else(|| panic!("no external_directory ask: {v}"));
        (ask["decision"].as_str().unwrap().to_string(), stderr)
    };
    let (decision, stderr) = outside(&repo, &[]);
    assert_eq!(decision, "ask", "{stderr}");
    let named = format!(
        "ignored external_directory \"/srv/runner-zz/*\" = \"allow\" ({}:2)",
        repo.project().display()
    );
    assert_eq!(stderr.matches(&named).count(), 1, "{stderr}");
    assert!(stderr.contains("--trust-project"), "{stderr}");

    let (decision, stderr) = outside(&repo, &["--trust-project"]);
    assert_eq!(decision, "allow", "{stderr}");
    assert!(!stderr.contains("ignored"), "{stderr}");
    // Remembered: the next run without the flag trusts the same file.
    let (decision, stderr) = outside(&repo, &[]);
    assert_eq!(decision, "allow", "{stderr}");
    // New content is a new question.
    repo.write_project(&format!("{project}# changed\n"));
    let (decision, stderr) = outside(&repo, &[]);
    assert_eq!(decision, "ask", "{stderr}");
    assert!(stderr.contains(&named), "{stderr}");
    // Trust never reaches the user's own rules.
    std::fs::write(
        repo.home.join("config/runner/config.toml"),
        "[permission.external_directory]\n\"/srv/*\" = \"deny\"\n",
    )
    .unwrap();
    let (decision, _) = outside(&repo, &["--trust-project"]);
    assert_eq!(decision, "deny");
}

/// On a terminal the trust question names the rule with its file and line, and only `y`
/// grants it: `n` leaves the rule out (and is not remembered), `y` is remembered, so the
/// next run without a terminal trusts the same file.
#[test]
fn on_a_terminal_trust_is_asked_once_and_only_y_grants_it() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};

    let repo = Repo::new(
        "",
        "[permission.external_directory]\n\"/srv/runner-zz/*\" = \"allow\"\n",
    );
    let args = json!({ "command": "cat /srv/runner-zz/a.txt", "description": "d" });
    common::engine::ensure_package("bsdutils", "/usr/bin/script");
    let on_a_terminal = |answer: &str| -> String {
        let inner = format!(
            "{} permission check bash '{}' --root {}",
            env!("CARGO_BIN_EXE_runner"),
            args,
            repo.wt.display()
        );
        let mut child = std::process::Command::new("script")
            .args(["-qec", &inner, "/dev/null"])
            .env("XDG_CONFIG_HOME", repo.home.join("config"))
            .env("XDG_DATA_HOME", repo.home.join("data"))
            .env("HOME", &repo.home)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("util-linux script: {e}"));
        let screen = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let mut stdout = child.stdout.take().unwrap();
        let sink = screen.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while !String::from_utf8_lossy(&screen.lock().unwrap()).contains("[y/N]") {
            assert!(
                Instant::now() < deadline,
                "the trust question never appeared"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(answer.as_bytes()).unwrap();
        stdin.flush().unwrap();
        let status = child.wait().unwrap();
        reader.join().unwrap();
        assert!(status.success(), "{status:?}");
        String::from_utf8_lossy(&screen.lock().unwrap()).into_owned()
    };
    let external = |screen: &str| {
        let start = screen.find('{').expect("the JSON verdict");
        let end = screen.rfind('}').unwrap();
        let v: Value = serde_json::from_str(&screen[start..=end].replace("\r\n", "\n"))
            .unwrap_or_else(|e| panic!("{e}: {screen}"));
        v["asks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["permission"] == "external_directory")
            .map(|a| a["decision"].as_str().unwrap().to_string())
            .unwrap()
    };
    let rule_at = format!(
        "external_directory \"/srv/runner-zz/*\" = \"allow\" ({}:2)",
        repo.project().display()
    );
    let screen = on_a_terminal("n");
    assert!(
        screen.contains(&rule_at),
        "the question names the rule: {screen}"
    );
    assert!(screen.contains("ignored"), "{screen}");
    assert_eq!(external(&screen), "ask", "{screen}");
    // `n` is not remembered: the question comes again, and `y` grants it.
    let screen = on_a_terminal("y");
    assert_eq!(external(&screen), "allow", "{screen}");
    let (v, stderr) = repo.check("cat /srv/runner-zz/a.txt", &[]);
    assert!(!stderr.contains("ignored"), "{stderr}");
    assert!(
        v["asks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["permission"] == "external_directory" && a["decision"] == "allow"),
        "{v}"
    );
}
