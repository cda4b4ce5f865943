//! Checks a record against the OCSF schema's own source files (the `ocsf/ocsf-schema`
//! repository's `dictionary.json`, `categories.json`, `events/`, `objects/`, `profiles/`),
//! so that "a SIEM takes it as it is" is tested rather than hoped.
//!
//! The schema is written as classes that extend classes, include profiles, and refine
//! attributes the dictionary defines. This resolves that the way the schema server does,
//! for what a record holds:
//! - every attribute is one its class (or object) has, with the dictionary's type: a
//!   string, an integer, a boolean, an object of the named kind, an array where the
//!   dictionary says so; ports in range, IP addresses that parse;
//! - every required attribute is there (a profile's only when the record says it applies
//!   the profile in `metadata.profiles`), and `at_least_one` / `just_one` hold;
//! - every id with an enum is one of its values, and a caption beside it (`severity`
//!   beside `severity_id`) is that value's caption;
//! - the ids agree: `class_uid` is the category's uid × 1000 plus the class's,
//!   `type_uid` is `class_uid` × 100 + `activity_id`, names match ids, and
//!   `metadata.version` is the schema's version.
//!
//! Only tests use it; it reads files and needs nothing beyond serde_json.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// One attribute as a class or object has it: the dictionary's definition refined by the
/// class's, and the profile it came with, if any.
#[derive(Debug, Clone)]
struct Attr {
    def: Map<String, Value>,
    profile: Option<String>,
}

/// A class or an object, resolved through `extends` and `$include`.
#[derive(Debug, Clone, Default)]
struct Def {
    caption: String,
    /// Class: its uid within the category; objects have none.
    uid: Option<u64>,
    category: Option<String>,
    attrs: BTreeMap<String, Attr>,
    constraints: Vec<(String, Vec<String>)>,
    profiles: BTreeSet<String>,
}

/// The schema files of one OCSF version.
pub struct Schema {
    root: PathBuf,
    version: String,
    dictionary: Map<String, Value>,
    types: Map<String, Value>,
    categories: Map<String, Value>,
    /// By class_uid.
    classes: BTreeMap<u64, Def>,
    /// Event files by class name (`network_activity`), for `extends`.
    event_files: BTreeMap<String, PathBuf>,
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))
}

fn obj(v: &Value, key: &str) -> Map<String, Value> {
    v.get(key)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
}

impl Schema {
    /// Reads the schema at `root` (a folder laid out as the `ocsf-schema` repository).
    pub fn load(root: &Path) -> Result<Schema, String> {
        let version = read_json(&root.join("version.json"))?["version"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let dict = read_json(&root.join("dictionary.json"))?;
        let categories = obj(&read_json(&root.join("categories.json"))?, "attributes");
        let mut schema = Schema {
            root: root.to_path_buf(),
            version,
            dictionary: obj(&dict, "attributes"),
            types: obj(&dict["types"], "attributes"),
            categories,
            classes: BTreeMap::new(),
            event_files: BTreeMap::new(),
        };
        let mut files = Vec::new();
        walk(&root.join("events"), &mut files);
        for f in &files {
            let v = read_json(f)?;
            if let Some(name) = v["name"].as_str() {
                schema.event_files.insert(name.to_string(), f.clone());
            }
        }
        for f in files {
            let v = read_json(&f)?;
            if v.get("uid").is_none() {
                continue;
            }
            let def = schema.resolve(&v, "events")?;
            let category = def.category.clone().unwrap_or_default();
            let cat_uid = schema
                .categories
                .get(&category)
                .and_then(|c| c["uid"].as_u64());
            let Some(cat_uid) = cat_uid else {
                return Err(format!("{}: unknown category {category:?}", f.display()));
            };
            let uid = cat_uid * 1000 + def.uid.unwrap_or_default();
            schema.classes.insert(uid, def);
        }
        Ok(schema)
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    /// The class uids the schema files define.
    pub fn class_uids(&self) -> Vec<u64> {
        self.classes.keys().copied().collect()
    }

    /// Resolves a class (kind `events`) or object (kind `objects`) definition.
    fn resolve(&self, v: &Value, kind: &str) -> Result<Def, String> {
        let mut def = match v["extends"].as_str() {
            None | Some("object") => Def::default(),
            Some(parent) => {
                let path = if kind == "events" {
                    self.event_files
                        .get(parent)
                        .cloned()
                        .ok_or_else(|| format!("no event file for {parent:?}"))?
                } else {
                    self.object_path(parent)
                };
                self.resolve(&read_json(&path)?, kind)?
            }
        };
        def.caption = v["caption"].as_str().unwrap_or_default().to_string();
        if let Some(uid) = v["uid"].as_u64() {
            def.uid = Some(uid);
        }
        if let Some(c) = v["category"].as_str() {
            def.category = Some(c.to_string());
        }
        if let Some(ps) = v["profiles"].as_array() {
            def.profiles
                .extend(ps.iter().filter_map(Value::as_str).map(str::to_string));
        }
        let attrs = obj(v, "attributes");
        if let Some(includes) = attrs.get("$include").and_then(Value::as_array) {
            for inc in includes.iter().filter_map(Value::as_str) {
                let file = read_json(&self.root.join(inc))?;
                let profile = (file["meta"] == "profile")
                    .then(|| file["name"].as_str().unwrap_or_default().to_string());
                for (name, a) in obj(&file, "attributes") {
                    self.refine(&mut def, &name, &a, profile.clone());
                }
            }
        }
        for (name, a) in &attrs {
            if name != "$include" {
                self.refine(&mut def, name, a, None);
            }
        }
        if let Some(cs) = v["constraints"].as_object() {
            def.constraints = cs
                .iter()
                .map(|(k, names)| {
                    let names = names.as_array().cloned().unwrap_or_default();
                    let names = names.iter().filter_map(Value::as_str).map(str::to_string);
                    (k.clone(), names.collect())
                })
                .collect();
        }
        Ok(def)
    }

    /// Adds or refines one attribute: the dictionary's definition, then what the class
    /// says over it (its requirement, its own enum values).
    fn refine(&self, def: &mut Def, name: &str, over: &Value, profile: Option<String>) {
        let entry = def.attrs.entry(name.to_string()).or_insert_with(|| Attr {
            def: self
                .dictionary
                .get(name)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            profile: profile.clone(),
        });
        for (k, v) in over.as_object().into_iter().flatten() {
            if k == "enum" {
                let mut merged = entry
                    .def
                    .get("enum")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                merged.extend(v.as_object().cloned().unwrap_or_default());
                entry.def.insert(k.clone(), Value::Object(merged));
            } else {
                entry.def.insert(k.clone(), v.clone());
            }
        }
        if profile.is_none() {
            entry.profile = None;
        }
    }

    fn object_path(&self, name: &str) -> PathBuf {
        self.root.join("objects").join(format!("{name}.json"))
    }

    fn object(&self, name: &str) -> Result<Def, String> {
        let path = self.object_path(name);
        if !path.is_file() {
            return Err(format!(
                "object {name:?} has no schema file here: copy objects/{name}.json of OCSF {} into {}",
                self.version,
                self.root.join("objects").display()
            ));
        }
        self.resolve(&read_json(&path)?, "objects")
    }

    /// Every way `record` departs from the schema; empty when it conforms.
    pub fn check(&self, record: &Value) -> Vec<String> {
        let mut problems = Vec::new();
        let Some(r) = record.as_object() else {
            return vec!["a record is a JSON object".into()];
        };
        let class_uid = r.get("class_uid").and_then(Value::as_u64).unwrap_or(0);
        let Some(class) = self.classes.get(&class_uid) else {
            return vec![format!(
                "class_uid {class_uid} is no class of OCSF {}",
                self.version
            )];
        };
        self.check_ids(class, class_uid, r, &mut problems);
        let applied: BTreeSet<String> = r
            .get("metadata")
            .and_then(|m| m.get("profiles"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        for p in &applied {
            if !class.profiles.contains(p) {
                problems.push(format!("profile {p:?} is not one {} takes", class.caption));
            }
        }
        self.check_fields(class, r, &applied, "", &mut problems);
        problems
    }

    fn check_ids(
        &self,
        class: &Def,
        class_uid: u64,
        r: &Map<String, Value>,
        out: &mut Vec<String>,
    ) {
        let category = class.category.clone().unwrap_or_default();
        let cat = self.categories.get(&category).cloned().unwrap_or_default();
        let want_cat = cat["uid"].as_u64();
        if r.get("category_uid").and_then(Value::as_u64) != want_cat {
            out.push(format!("category_uid is not {want_cat:?} ({category})"));
        }
        let caption_is = |key: &str, want: &str, out: &mut Vec<String>| {
            if let Some(v) = r.get(key)
                && v.as_str() != Some(want)
            {
                out.push(format!("{key} is {v}, not {want:?}"));
            }
        };
        caption_is(
            "category_name",
            cat["caption"].as_str().unwrap_or_default(),
            out,
        );
        caption_is("class_name", &class.caption, out);
        let activity = r.get("activity_id").and_then(Value::as_u64);
        let type_uid = r.get("type_uid").and_then(Value::as_u64);
        match (activity, type_uid) {
            (Some(a), Some(t)) if t == class_uid * 100 + a => {}
            _ => out.push(format!(
                "type_uid {type_uid:?} is not class_uid {class_uid} × 100 + activity_id {activity:?}"
            )),
        }
        if let Some(a) = activity {
            let caption = class.attrs.get("activity_id").and_then(|d| {
                d.def.get("enum")?.get(a.to_string())?["caption"]
                    .as_str()
                    .map(str::to_string)
            });
            if let Some(c) = caption {
                caption_is("type_name", &format!("{}: {c}", class.caption), out);
            }
        }
        let version = r
            .get("metadata")
            .and_then(|m| m.get("version"))
            .and_then(Value::as_str);
        if version != Some(self.version.as_str()) {
            out.push(format!(
                "metadata.version is {version:?}, not {:?}",
                self.version
            ));
        }
    }

    /// The attributes of one class or object instance.
    fn check_fields(
        &self,
        def: &Def,
        r: &Map<String, Value>,
        applied: &BTreeSet<String>,
        at: &str,
        out: &mut Vec<String>,
    ) {
        for (name, value) in r {
            let path = format!("{at}{name}");
            let Some(attr) = def.attrs.get(name) else {
                out.push(format!("{path} is not an attribute of {}", def.caption));
                continue;
            };
            self.check_value(attr, value, applied, &path, out);
            self.check_sibling(attr, value, r, &path, out);
        }
        for (name, attr) in &def.attrs {
            let required = attr.def.get("requirement").and_then(Value::as_str) == Some("required");
            let applies = attr.profile.as_ref().is_none_or(|p| applied.contains(p));
            if required && applies && !r.contains_key(name) {
                out.push(format!("{at}{name} is required in {}", def.caption));
            }
        }
        for (kind, names) in &def.constraints {
            let present = names.iter().filter(|n| r.contains_key(*n)).count();
            let ok = match kind.as_str() {
                "at_least_one" => present >= 1,
                "just_one" => present == 1,
                _ => true,
            };
            if !ok {
                out.push(format!("{at}: {kind} of {names:?} in {}", def.caption));
            }
        }
    }

    fn check_value(
        &self,
        attr: &Attr,
        value: &Value,
        applied: &BTreeSet<String>,
        path: &str,
        out: &mut Vec<String>,
    ) {
        if attr.def.get("is_array").and_then(Value::as_bool) == Some(true) {
            match value.as_array() {
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        self.check_one(attr, item, applied, &format!("{path}[{i}]"), out);
                    }
                }
                None => out.push(format!("{path} is an array in the schema")),
            }
        } else {
            self.check_one(attr, value, applied, path, out);
        }
    }

    fn check_one(
        &self,
        attr: &Attr,
        value: &Value,
        applied: &BTreeSet<String>,
        path: &str,
        out: &mut Vec<String>,
    ) {
        let ty = attr.def.get("type").and_then(Value::as_str).unwrap_or("");
        if ty == "object" {
            if !value.is_object() {
                out.push(format!("{path} is an object in the schema"));
            }
            return;
        }
        if !ty.ends_with("_t") {
            match (self.object(ty), value.as_object()) {
                (Ok(def), Some(o)) => self.check_fields(&def, o, applied, &format!("{path}."), out),
                (Err(e), _) => out.push(e),
                (_, None) => out.push(format!("{path} is a {ty} object in the schema")),
            }
            return;
        }
        let t = self.types.get(ty).cloned().unwrap_or_default();
        let base = t["type"].as_str().unwrap_or(ty);
        let base = self
            .types
            .get(base)
            .and_then(|b| b["type"].as_str())
            .unwrap_or(base);
        let fits = match base {
            "string_t" => value.is_string(),
            "integer_t" | "long_t" => value.is_i64() || value.is_u64(),
            "float_t" => value.is_number(),
            "boolean_t" => value.is_boolean(),
            "json_t" => true,
            _ => true,
        };
        if !fits {
            out.push(format!("{path} is {value}, not a {ty}"));
        }
        if let Some([lo, hi]) = t["range"].as_array().map(Vec::as_slice)
            && let (Some(lo), Some(hi), Some(n)) = (lo.as_i64(), hi.as_i64(), value.as_i64())
            && !(lo..=hi).contains(&n)
        {
            out.push(format!("{path} is {n}, outside {lo}..={hi}"));
        }
        if ty == "ip_t"
            && value
                .as_str()
                .is_none_or(|s| s.parse::<std::net::IpAddr>().is_err())
        {
            out.push(format!("{path} is {value}, not an IP address"));
        }
        // The ids of class, category and type are the base event's placeholders in the
        // files (0, "Base Event"): `check_ids` holds them to the class instead.
        let own_id = ["class_uid", "category_uid", "type_uid"].contains(&path);
        if let Some(values) = attr.def.get("enum").and_then(Value::as_object)
            && !own_id
        {
            let key = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if !values.contains_key(&key) {
                let known: Vec<&String> = values.keys().collect();
                out.push(format!("{path} is {value}, not one of {known:?}"));
            }
        }
    }

    /// A caption beside an id (`disposition` beside `disposition_id`) is the id's caption,
    /// unless the id is Other (99), whose caption is the source's own word.
    fn check_sibling(
        &self,
        attr: &Attr,
        value: &Value,
        r: &Map<String, Value>,
        path: &str,
        out: &mut Vec<String>,
    ) {
        let (Some(sibling), Some(id)) = (
            attr.def.get("sibling").and_then(Value::as_str),
            value.as_u64(),
        ) else {
            return;
        };
        if id == 99 {
            return;
        }
        let want = attr
            .def
            .get("enum")
            .and_then(|e| e.get(id.to_string()))
            .and_then(|e| e["caption"].as_str());
        if let (Some(want), Some(got)) = (want, r.get(sibling))
            && got.as_str() != Some(want)
        {
            out.push(format!("{path} {id} is {want:?}, but {sibling} says {got}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::*;
    use crate::{Audit, Decision};

    fn schema() -> Schema {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/ocsf/1.7.0");
        Schema::load(&root).unwrap()
    }

    fn rule() -> RuleRef {
        RuleRef {
            permission: "bash".into(),
            pattern: "rm *".into(),
            action: "deny".into(),
            origin: "/home/u/.config/runner/config.toml".into(),
            position: 3,
            layer: "user".into(),
        }
    }

    /// One of each record the sink makes, as written to a file and read back.
    fn every_kind() -> Vec<Value> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("audit.jsonl");
        let audit = Audit::open(std::slice::from_ref(&file), "0.1.0", Some("sess")).unwrap();
        permissions(&audit);
        network(&audit);
        sandbox(&audit);
        folded_and_capped(&file);
        std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Every decision on three permissions, with and without the rule that made it.
    fn permissions(audit: &Audit) {
        for (decision, rule) in [
            (Decision::Denied, Some(rule())),
            (Decision::Allowed, None),
            (Decision::Approved, Some(rule())),
            (Decision::Rejected, None),
            (Decision::Unanswered, None),
        ] {
            for permission in ["bash", "read", "edit"] {
                audit.permission(&Permission {
                    tool: Some(permission.into()),
                    permission: permission.into(),
                    patterns: vec!["rm -rf /".into(), "x".into()],
                    decision,
                    rule: rule.clone(),
                    detail: Some("asked".into()),
                });
            }
        }
    }

    /// Connections allowed and refused, requests judged inside TLS, a secret's uses.
    fn network(audit: &Audit) {
        for (allowed, address, reason) in [
            (true, Some("127.0.0.1:443"), None),
            (false, None, Some("denied by a rule")),
            (true, None, Some("connection refused")),
            (true, Some("via proxy.corp:3128"), None),
        ] {
            audit.connection(&Connection {
                host: "example.org".into(),
                port: 443,
                allowed,
                reason: reason.map(str::to_string),
                address: address.map(str::to_string),
                bytes_sent: 10,
                bytes_received: 20,
                summary: "allow example.org:443".into(),
            });
        }
        for (method, status) in [("GET", Some(200)), ("POST", Some(403)), ("PROPFIND", None)] {
            audit.http_request(&HttpRequest {
                method: method.into(),
                scheme: "https".into(),
                host: "api.github.com".into(),
                port: 443,
                path: "/repos/x?per_page=1".into(),
                decision: Decision::Denied,
                rule: Some(rule()),
                status,
                reason: Some("refused".into()),
            });
        }
        for allowed in [true, false] {
            audit.secret_use(&SecretUse {
                name: "GITHUB_TOKEN".into(),
                host: "10.0.0.1".into(),
                port: Some(443),
                allowed,
                detail: None,
            });
        }
    }

    /// A sandbox's start and end.
    fn sandbox(audit: &Audit) {
        audit.sandbox_start(&SandboxStart {
            backend: "landlock".into(),
            network: "allowlist".into(),
            worktree: "/w".into(),
            description: "sandbox: landlock".into(),
            command: Some(vec!["make".into(), "test".into()]),
        });
        audit.sandbox_end(&SandboxEnd {
            backend: "landlock".into(),
            reason: Some("done".into()),
        });
    }

    /// A session driven by a named client, a repeat folded; one over its budget at once.
    fn folded_and_capped(file: &Path) {
        let refuse = |audit: &Audit, host: &str| {
            audit.connection(&Connection {
                host: host.into(),
                port: 80,
                allowed: false,
                reason: Some("denied by a rule".into()),
                address: None,
                bytes_sent: 0,
                bytes_received: 0,
                summary: format!("deny {host}:80"),
            })
        };
        let limits = |fold_after, max_bytes| crate::Limits {
            fold_after,
            fold_window_ms: 60_000,
            max_bytes,
        };
        let driven = Audit::open(&[file.to_path_buf()], "0.1.0", None)
            .unwrap()
            .with_client(Some(crate::Client {
                name: "an MCP client".into(),
                version: Some("1.2".into()),
            }))
            .with_limits(limits(1, crate::fold::DEFAULT_MAX_BYTES));
        driven.sandbox_start(&SandboxStart {
            backend: "docker".into(),
            network: "none".into(),
            worktree: "/w".into(),
            description: "sandbox: docker".into(),
            command: None,
        });
        refuse(&driven, "a.example");
        refuse(&driven, "a.example");
        let end = SandboxEnd {
            backend: "docker".into(),
            reason: None,
        };
        driven.sandbox_end(&end);
        let capped = Audit::open(&[file.to_path_buf()], "0.1.0", None)
            .unwrap()
            .with_limits(limits(10, 1));
        refuse(&capped, "b.example");
        refuse(&capped, "c.example");
        capped.sandbox_end(&end);
    }

    #[test]
    fn every_kind_of_record_conforms_to_ocsf() {
        let schema = schema();
        assert_eq!(schema.version(), crate::OCSF_VERSION);
        for uid in [4001, 4002, 6002, 6003] {
            assert!(schema.class_uids().contains(&uid), "{uid}");
        }
        let records = every_kind();
        assert_eq!(records.len(), 15 + 4 + 3 + 2 + 2 + 7, "{records:#?}");
        // What the bounds add: the client on a start, a folded count, both budget records.
        let has = |f: &dyn Fn(&Value) -> bool| records.iter().any(f);
        assert!(has(&|r| r["actor"]["app_name"] == "an MCP client 1.2"));
        assert!(has(&|r| r["count"] == 1 && r["class_uid"] == 4001));
        assert!(has(
            &|r| r["activity_name"] == "Capped" && r["unmapped"]["dropped_lines"].is_u64()
        ));
        assert!(has(
            &|r| r["activity_name"] == "Capped" && r["unmapped"]["dropped_lines"].is_null()
        ));
        for r in &records {
            let problems = schema.check(r);
            assert!(problems.is_empty(), "{problems:#?}\nin {r:#}");
        }
    }

    #[test]
    fn the_check_catches_what_a_siem_would_choke_on() {
        let schema = schema();
        let good = every_kind().remove(0);
        let broken = |f: &dyn Fn(&mut Value)| {
            let mut r = good.clone();
            f(&mut r);
            schema.check(&r).join("\n")
        };
        type Break = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(&str, Break)> = vec![
            ("type_uid", Box::new(|r| r["type_uid"] = 600301.into())),
            (
                "disposition_id",
                Box::new(|r| r["disposition_id"] = 1000.into()),
            ),
            (
                "disposition_id 2 is \"Blocked\", but disposition",
                Box::new(|r| r["disposition"] = "Allowed".into()),
            ),
            (
                "api is required",
                Box::new(|r| {
                    r.as_object_mut().unwrap().remove("api");
                }),
            ),
            (
                "operation is required",
                Box::new(|r| r["api"] = serde_json::json!({})),
            ),
            ("time is", Box::new(|r| r["time"] = "yesterday".into())),
            (
                "not an attribute",
                Box::new(|r| r["verdict"] = "deny".into()),
            ),
            (
                "metadata.version",
                Box::new(|r| r["metadata"]["version"] = "1.3.0".into()),
            ),
            ("category_uid", Box::new(|r| r["category_uid"] = 4.into())),
            (
                "severity_id is required",
                Box::new(|r| {
                    r.as_object_mut().unwrap().remove("severity_id");
                }),
            ),
            (
                "resources is an array",
                Box::new(|r| r["resources"] = serde_json::json!({"name": "x"})),
            ),
            ("class_uid 9999", Box::new(|r| r["class_uid"] = 9999.into())),
            (
                "at_least_one",
                Box::new(|r| r["actor"] = serde_json::json!({})),
            ),
            (
                "device.type_id is required",
                Box::new(|r| {
                    r["device"].as_object_mut().unwrap().remove("type_id");
                }),
            ),
            (
                "actor.user.uid is 1000, not a string_t",
                Box::new(|r| r["actor"]["user"]["uid"] = 1000.into()),
            ),
        ];
        for (want, f) in cases {
            let problems = broken(&*f);
            assert!(problems.contains(want), "{want}: {problems}");
        }
        assert!(broken(&|_| {}).is_empty());
    }
}
