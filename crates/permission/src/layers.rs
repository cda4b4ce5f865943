//! Where rules come from and in which order they stack.
//!
//! Precedence is order (evaluation is last match wins), so the loader's one job is to put
//! every layer's rules in the right place and keep each file's own key order: built-in
//! defaults, the profile, the user's config, the project's config, `--config`, the session.
//! Approvals are not configuration; the gate keeps them apart (see [`super::gate`]).
//!
//! A config's `permission` value has OpenCode's shape, in TOML or JSON:
//! a bare action (`permission = "ask"`, meaning `{"*": "ask"}`), or a table whose keys are
//! permission names (wildcards allowed) mapping to an action or to a `{pattern: action}`
//! table. An OpenCode `opencode.json` is read as it is, including its legacy `tools`
//! booleans, so an OpenCode user's rules work unchanged.

use std::path::{Path, PathBuf};

use super::rules::{Action, Rule};

pub use crate::files::{
    ConfigError, RUNNER_KEYS, did_you_mean, line_of, load_file, parse_opencode_json, parse_toml,
    rules_from_value, strip_json_comments,
};

/// OpenCode's defaults (`agent.ts`), in its order: everything allowed except `doom_loop`
/// and `external_directory` (ask), `question` (deny), and `.env` files for reading (ask, with
/// `*.env.example` allowed). Then runner's own: `network` (the hosts a command may reach
/// through the allow-list proxy) asks, since an allow-list that allows everything would be
/// `--network host` with extra steps; `http` (one request to an inspected host, `METHOD
/// host/path`) allows what no rule names, as its host was already opened by `network`:
/// `http` rules only narrow what a host's connection may carry.
pub fn defaults() -> Vec<Rule> {
    let spec: [(&str, &str, Action); 10] = [
        ("*", "*", Action::Allow),
        ("doom_loop", "*", Action::Ask),
        ("external_directory", "*", Action::Ask),
        ("question", "*", Action::Deny),
        ("read", "*", Action::Allow),
        ("read", "*.env", Action::Ask),
        ("read", "*.env.*", Action::Ask),
        ("read", "*.env.example", Action::Allow),
        ("network", "*", Action::Ask),
        ("http", "*", Action::Allow),
    ];
    spec.into_iter()
        .enumerate()
        .map(|(i, (p, pat, a))| Rule::new(p, pat, a, DEFAULTS_ORIGIN, i + 1))
        .collect()
}

/// Long tool outputs are saved in `output_dir` and the model is told to read them there, so
/// that directory is allowed after every layer (a profile's blanket `external_directory`
/// deny must not hide them), unless some layer denies exactly it — OpenCode's rule for its
/// `Truncate.GLOB`.
fn output_rule(output_dir: &Path, configured: &[Rule]) -> Option<Rule> {
    let pattern = super::paths::dir_pattern(output_dir);
    let denied = configured.iter().any(|r| {
        r.permission == "external_directory" && r.pattern == pattern && r.action == Action::Deny
    });
    (!denied).then(|| {
        Rule::new(
            "external_directory",
            &pattern,
            Action::Allow,
            "saved tool output",
            1,
        )
    })
}

pub const DEFAULTS_ORIGIN: &str = "built-in defaults";

/// `.runner/config.toml` in the worktree.
pub fn project_config_path(worktree: &Path) -> PathBuf {
    worktree.join(".runner").join("config.toml")
}

/// The inputs of [`merge`], one per layer, lowest precedence first.
#[derive(Debug, Default)]
pub struct Layers {
    pub defaults: Vec<Rule>,
    pub profile: Vec<Rule>,
    pub user: Vec<Rule>,
    pub project: Vec<Rule>,
    /// `--config FILE`.
    pub explicit: Vec<Rule>,
    pub session: Vec<Rule>,
    /// Where saved tool output lives (see [`output_rule`]).
    pub output_dir: Option<PathBuf>,
    /// The boundary files' rules ([`super::boundary`]), in the [`Layer::Boundary`] layer:
    /// placed last, they cap what everything before them decides.
    ///
    /// [`Layer::Boundary`]: super::rules::Layer::Boundary
    pub boundary: Vec<Rule>,
}

/// The configured ruleset: the layers concatenated in precedence order. Nothing is sorted or
/// deduplicated: a later rule beats an earlier one because evaluation takes the last match.
pub fn merge(layers: Layers) -> Vec<Rule> {
    let Layers {
        defaults,
        profile,
        user,
        project,
        explicit,
        session,
        output_dir,
        boundary,
    } = layers;
    use super::rules::Layer;
    let stacked = [
        (defaults, Layer::Defaults),
        (profile, Layer::Profile),
        (user, Layer::User),
        (project, Layer::Project),
        (explicit, Layer::Explicit),
        (session, Layer::Session),
    ];
    let mut rules: Vec<Rule> = stacked
        .into_iter()
        .flat_map(|(rules, layer)| rules.into_iter().map(move |r| r.in_layer(layer)))
        .collect();
    if let Some(rule) = output_dir.and_then(|dir| output_rule(&dir, &rules)) {
        rules.push(rule);
    }
    rules.extend(boundary.into_iter().map(|r| r.in_layer(Layer::Boundary)));
    rules
}

/// What a profile says about permissions: its rules, and whether a project's file may
/// loosen anything.
pub struct ProfileRules<'a> {
    /// The profile's `[permission]` table, in OpenCode's shape.
    pub rules: Option<&'a serde_json::Value>,
    pub project_allows: Option<bool>,
    /// Where the profile came from, for messages.
    pub source: &'a str,
}

/// Everything a command that evaluates permissions needs to build its layers.
pub struct Sources<'a> {
    pub profile: ProfileRules<'a>,
    pub worktree: &'a Path,
    /// The user's own rules (`$XDG_CONFIG_HOME/runner/config.toml`, see the binary's `dirs`):
    /// where it is depends on the host, which this crate does not read.
    pub user_config: &'a Path,
    /// `--config FILE`.
    pub explicit: Option<&'a Path>,
    /// Where saved tool output lives (pre-approved for reading, see [`defaults`]).
    pub output_dir: Option<&'a Path>,
    pub session: Vec<Rule>,
    /// Asked when the project's config loosens a built-in default (and nothing of the
    /// profile's or the user's): whether this config, as it is now, is trusted to. The
    /// caller decides how (a remembered answer, `--trust-project`, a question on the
    /// terminal); this crate only says what would be loosened.
    pub trust: &'a mut dyn FnMut(&ProjectReview) -> bool,
}

/// What a trust decision is about: one project config file, its exact text, and the rules
/// in it that loosen a built-in default.
pub struct ProjectReview<'a> {
    pub worktree: &'a Path,
    pub path: &'a Path,
    pub text: &'a str,
    pub loosened: &'a [super::project::Loosening],
}

/// The layers from their files, plus notes for the person running runner (such as project
/// rules left out). A file that is absent is no layer; a file that is present but broken is
/// an error, never silently skipped.
pub fn load(mut sources: Sources) -> Result<(Layers, Vec<String>), ConfigError> {
    let home = std::env::var("HOME").unwrap_or_default();
    let profile = match sources.profile.rules {
        Some(value) => rules_from_value(value, sources.profile.source, &home)?,
        None => Vec::new(),
    };
    let user = if sources.user_config.is_file() {
        load_file(sources.user_config, &home)?
    } else {
        Vec::new()
    };
    let below = merge(Layers {
        defaults: defaults(),
        profile: profile.clone(),
        user: user.clone(),
        ..Layers::default()
    });
    let (project, notes) = load_project(&mut sources, &below, &home)?;
    let explicit = match sources.explicit {
        Some(path) => load_file(path, &home)?,
        None => Vec::new(),
    };
    let boundary = super::boundary::load_installed(&home)?;
    Ok((
        Layers {
            defaults: defaults(),
            profile,
            user,
            project,
            explicit,
            session: sources.session,
            output_dir: sources.output_dir.map(Path::to_path_buf),
            boundary,
        },
        notes,
    ))
}

/// The project's rules that may stand (see [`super::project`]), and a note for each that
/// was left out. `below` is the merged defaults, profile and user rules.
fn load_project(
    sources: &mut Sources,
    below: &[Rule],
    home: &str,
) -> Result<(Vec<Rule>, Vec<String>), ConfigError> {
    let path = project_config_path(sources.worktree);
    if !path.is_file() {
        return Ok((Vec::new(), Vec::new()));
    }
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: path.clone(),
        source,
    })?;
    let origin = path.display().to_string();
    let mut project = parse_toml(&text, &origin, home)?;
    let mut notes = Vec::new();
    if sources.profile.project_allows == Some(false) {
        let dropped = denies_only(&mut project);
        if dropped > 0 {
            notes.push(format!(
                "ignored {dropped} rule(s) that are not denies in {origin}: {} does not let a repository loosen its own rules",
                sources.profile.source
            ));
        }
    }
    let (mut kept, mut loosened) = super::project::screen(project, below, sources.worktree);
    for l in &mut loosened {
        l.line = super::project::line_of(&text, &l.rule, home);
    }
    let (of_defaults, of_own): (Vec<_>, Vec<_>) =
        loosened.into_iter().partition(|l| l.of_defaults_only());
    for l in &of_own {
        notes.push(format!(
            "ignored {}: it would loosen {}; a repository's config may tighten your rules, never loosen them",
            l.describe(),
            l.describe_over()
        ));
    }
    if !of_defaults.is_empty() {
        let review = ProjectReview {
            worktree: sources.worktree,
            path: &path,
            text: &text,
            loosened: &of_defaults,
        };
        if (sources.trust)(&review) {
            // Trusted: the rules go back in their place, since order is precedence.
            kept.extend(of_defaults.into_iter().map(|l| l.rule));
            kept.sort_by_key(|r| r.source.position);
        } else {
            for l in &of_defaults {
                notes.push(format!(
                    "ignored {}: it loosens the built-in default {}, and this repository's config is not trusted (run with --trust-project to trust it as it is now)",
                    l.describe(),
                    l.describe_over()
                ));
            }
        }
    }
    Ok((kept, notes))
}

/// Keeps only the deny rules of a project config, for profiles that do not trust the
/// repository to loosen its own rules: an untrusted checkout could otherwise ship
/// `"*" = "allow"`, or turn a profile's deny back into an ask with `edit = "ask"` (later rules
/// win). Returns how many were dropped.
pub fn denies_only(rules: &mut Vec<Rule>) -> usize {
    let before = rules.len();
    rules.retain(|r| r.action == Action::Deny);
    before - rules.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::evaluate;
    use Action::*;
    use serde_json::Value;

    fn triples(rules: &[Rule]) -> Vec<(String, String, Action, usize)> {
        rules
            .iter()
            .map(|r| {
                (
                    r.permission.clone(),
                    r.pattern.clone(),
                    r.action,
                    r.source.position,
                )
            })
            .collect()
    }

    fn t(p: &str, pat: &str, a: Action, pos: usize) -> (String, String, Action, usize) {
        (p.into(), pat.into(), a, pos)
    }

    #[test]
    fn toml_keeps_key_order_because_order_is_precedence() {
        let text = r#"
[permission]
bash = "allow"
"*" = "deny"
edit = { "*" = "ask", "src/*" = "allow", "~/notes/*" = "deny" }

[permission.read]
"z*" = "deny"
"a*" = "allow"
"#;
        let rules = parse_toml(text, "c.toml", "/home/u").unwrap();
        assert_eq!(
            triples(&rules),
            vec![
                t("bash", "*", Allow, 1),
                t("*", "*", Deny, 2),
                t("edit", "*", Ask, 3),
                t("edit", "src/*", Allow, 4),
                t("edit", "/home/u/notes/*", Deny, 5),
                t("read", "z*", Deny, 6),
                t("read", "a*", Allow, 7),
            ]
        );
        // `{bash = "allow", "*" = "deny"}` denies bash: the later key wins, as in OpenCode.
        assert_eq!(evaluate("bash", &["ls"], &rules, &[]).action, Deny);
        assert!(rules.iter().all(|r| r.source.origin == "c.toml"));
    }

    #[test]
    fn a_bare_action_means_everything() {
        let rules = parse_toml("permission = \"ask\"\n", "c", "/h").unwrap();
        assert_eq!(triples(&rules), vec![t("*", "*", Ask, 1)]);
    }

    #[test]
    fn bad_configs_say_where_and_what() {
        let cases: &[(&str, &str)] = &[
            ("[permission]\nbash = \"yes\"\n", "permission.bash"),
            ("[permission.bash]\n\"git *\" = 1\n", "\"git *\""),
            ("permission = 3\n", "must be an action"),
            (
                "[permision]\nbash = \"allow\"\n",
                "unknown key \"permision\"",
            ),
            ("[permission\n", "not valid TOML"),
        ];
        for (text, want) in cases {
            let e = parse_toml(text, "/x/config.toml", "/h")
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.contains("/x/config.toml"), "{text:?}: {e}");
        }
    }

    #[test]
    fn an_opencode_json_reads_unchanged_with_comments_and_legacy_tools() {
        let text = r#"{
  // OpenCode accepts comments
  "$schema": "https://opencode.ai/config.json",
  "model": "anthropic/claude",
  "tools": { "write": false, "webfetch": true },
  "permission": {
    "bash": { "*": "ask", "git status*": "allow", "rm *": "deny" }, /* inline */
    "edit": "ask",
    "external_directory": { "~/scratch/*": "allow" }
  }
}"#;
        let rules = parse_opencode_json(text, "opencode.json", "/home/u").unwrap();
        assert_eq!(
            triples(&rules),
            vec![
                // `write: false` is the edit key, and the later `edit` replaces it in place.
                t("edit", "*", Ask, 1),
                t("webfetch", "*", Allow, 2),
                t("bash", "*", Ask, 3),
                t("bash", "git status*", Allow, 4),
                t("bash", "rm *", Deny, 5),
                t("external_directory", "/home/u/scratch/*", Allow, 6),
            ]
        );
        let bare = parse_opencode_json(
            r#"{"tools": {"bash": false}, "permission": "ask"}"#,
            "o",
            "/h",
        )
        .unwrap();
        assert_eq!(
            triples(&bare),
            vec![t("bash", "*", Deny, 1), t("*", "*", Ask, 2)]
        );
        let e = parse_opencode_json("{\"permission\": {\"bash\": \"maybe\"}}", "o.json", "/h")
            .unwrap_err();
        assert!(e.to_string().contains("o.json") && e.to_string().contains("maybe"));
    }

    #[test]
    fn comment_stripping_leaves_strings_alone() {
        let text = r#"{"a": "http://x/*y*/", "b": "q\"//"} // tail"#;
        let v: Value = serde_json::from_str(&strip_json_comments(text)).unwrap();
        assert_eq!(v["a"], "http://x/*y*/");
        assert_eq!(v["b"], "q\"//");
    }

    #[test]
    fn trailing_commas_go_and_lines_stay_where_they_were() {
        let text = "{\n  /* two\n lines */ \"a\": [1, 2,],\n  \"b\": \"x,}\", // c\n}";
        let clean = strip_json_comments(text);
        let v: Value = serde_json::from_str(&clean).unwrap();
        assert_eq!(v["a"], serde_json::json!([1, 2]));
        assert_eq!(v["b"], "x,}");
        assert_eq!(clean.lines().count(), text.lines().count());
        // A real error still points at its own line.
        let broken = "{\n/* a\n b */\n\"a\": @\n}";
        let e = serde_json::from_str::<Value>(&strip_json_comments(broken)).unwrap_err();
        assert_eq!(e.line(), 4, "{e}");
    }

    #[test]
    fn every_unknown_key_is_named_with_its_line_and_nearest_key() {
        let text = "modle = \"x\"\n[permission]\nbash = \"ask\"\n[provder.a]\nbase_url = \"u\"\n[zzzzzz]\n";
        let e = parse_toml(text, "/x/c.toml", "/h").unwrap_err().to_string();
        assert!(
            e.contains("line 1: unknown key \"modle\" (did you mean `model`?)"),
            "{e}"
        );
        assert!(
            e.contains("line 4: unknown key \"provder\" (did you mean `provider`?)"),
            "{e}"
        );
        assert!(e.contains("line 6: unknown key \"zzzzzz\";"), "{e}");
        assert_eq!(did_you_mean("hoks", &RUNNER_KEYS), Some("hooks"));
        assert_eq!(did_you_mean("agent", &RUNNER_KEYS), None);
    }

    /// Each layer says something different about the same subject; the winner must be the
    /// latest layer present, and removing a layer hands the decision to the one before.
    #[test]
    fn merge_order_is_defaults_profile_user_project_explicit_session() {
        let layer = |name: &str, action: Action| vec![Rule::new("bash", "rm *", action, name, 1)];
        let names = ["profile", "user", "project", "explicit", "session"];
        let actions = [Deny, Allow, Deny, Allow, Deny];
        for present in 0..=names.len() {
            let mut layers = Layers {
                defaults: defaults(),
                ..Layers::default()
            };
            let slots = [
                &mut layers.profile,
                &mut layers.user,
                &mut layers.project,
                &mut layers.explicit,
                &mut layers.session,
            ];
            for (i, slot) in slots.into_iter().enumerate().take(present) {
                *slot = layer(names[i], actions[i]);
            }
            let merged = merge(layers);
            let d = evaluate("bash", &["rm x"], &merged, &[]);
            if present == 0 {
                assert_eq!(d.action, Allow);
                assert_eq!(d.rule.unwrap().source.origin, DEFAULTS_ORIGIN);
            } else {
                assert_eq!(d.action, actions[present - 1], "{present} layers");
                assert_eq!(d.rule.unwrap().source.origin, names[present - 1]);
            }
        }
    }

    #[test]
    fn merged_rules_know_their_layer() {
        use crate::rules::Layer;
        let one = |origin: &str| vec![Rule::new("network", "127.0.0.1", Allow, origin, 1)];
        let merged = merge(Layers {
            defaults: one("d"),
            profile: one("p"),
            user: one("u"),
            project: one("pr"),
            explicit: one("e"),
            session: one("s"),
            output_dir: None,
            boundary: one("b"),
        });
        let layers: Vec<Layer> = merged.iter().map(|r| r.source.layer).collect();
        use Layer::*;
        assert_eq!(
            layers,
            [
                Defaults, Profile, User, Project, Explicit, Session, Boundary
            ]
        );
        let own: Vec<bool> = layers.iter().map(|l| l.is_users_own()).collect();
        assert_eq!(own, [false, false, true, false, true, false, false]);
    }

    #[test]
    fn defaults_are_opencodes() {
        let d = merge(Layers {
            defaults: defaults(),
            output_dir: Some(PathBuf::from("/data/runner/tool-output/")),
            ..Layers::default()
        });
        let cases: &[(&str, &str, Action)] = &[
            ("bash", "rm -rf /", Allow),
            ("edit", "src/main.rs", Allow),
            ("doom_loop", "bash", Ask),
            ("external_directory", "/etc/*", Ask),
            ("external_directory", "/data/runner/tool-output/*", Allow),
            ("question", "*", Deny),
            ("read", ".env", Ask),
            ("read", "sub/.env.local", Ask),
            ("read", ".env.production", Ask),
            ("read", ".env.development.local", Ask),
            ("read", ".env.example", Allow),
            ("read", ".envrc", Allow),
            ("read", "src/environment.ts", Allow),
            ("webfetch", "https://x", Allow),
        ];
        for (p, s, want) in cases {
            assert_eq!(evaluate(p, &[s], &d, &[]).action, *want, "{p} {s}");
        }
    }

    #[test]
    fn saved_output_stays_readable_under_a_blanket_deny_unless_denied_by_name() {
        let out = PathBuf::from("/data/out");
        let deny_all = vec![Rule::new("external_directory", "*", Deny, "profile", 1)];
        let rules = merge(Layers {
            defaults: defaults(),
            profile: deny_all.clone(),
            output_dir: Some(out.clone()),
            ..Layers::default()
        });
        assert_eq!(
            evaluate("external_directory", &["/data/out/*"], &rules, &[]).action,
            Allow
        );
        assert_eq!(
            evaluate("external_directory", &["/etc/*"], &rules, &[]).action,
            Deny
        );
        let rules = merge(Layers {
            defaults: defaults(),
            profile: deny_all,
            user: vec![Rule::new(
                "external_directory",
                "/data/out/*",
                Deny,
                "user",
                1,
            )],
            output_dir: Some(out),
            ..Layers::default()
        });
        assert_eq!(
            evaluate("external_directory", &["/data/out/*"], &rules, &[]).action,
            Deny
        );
    }

    #[test]
    fn an_untrusted_project_can_tighten_but_not_loosen() {
        let mut rules = parse_toml(
            "[permission]\n\"*\" = \"allow\"\nbash = { \"curl *\" = \"deny\", \"make *\" = \"ask\" }\n",
            "p",
            "/h",
        )
        .unwrap();
        // The ask is dropped too: under a profile's `edit = "deny"` a project `edit = "ask"`
        // would otherwise bring edits back.
        assert_eq!(denies_only(&mut rules), 2);
        assert_eq!(triples(&rules), vec![t("bash", "curl *", Deny, 2)]);
    }
}
