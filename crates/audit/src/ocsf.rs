//! The parts every OCSF record shares: its class and category, its activity and the type
//! they make, its outcome, severity, time and metadata. The captions written here are the
//! schema's own (`tests/fixtures/ocsf`), so that a reader that prefers names to ids sees
//! what the schema calls them; the conformance check holds them to it.

use serde_json::{Map, Value, json};

/// The OCSF release the records follow. 1.7.0 is the first release where the base event
/// carries the `security_control` profile (`action_id`, `disposition_id`, `policy`) in
/// every class, so a permission decision (API Activity) says allowed or blocked the same
/// way a connection (Network Activity) does.
pub const OCSF_VERSION: &str = "1.7.0";

/// Who wrote the record, the vendor that names it (`metadata.product.vendor_name`).
pub const VENDOR: &str = "runner";

/// What a record needs from its sink. Its `metadata.sequence` is given when it is written
/// (a decision counted with others alike is never numbered).
pub(crate) struct Meta<'a> {
    pub product_version: &'a str,
    pub session: &'a str,
    pub time: u64,
    pub identity: &'a crate::Identity,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Class {
    pub uid: u32,
    pub name: &'static str,
    pub category_uid: u32,
    pub category_name: &'static str,
}

pub(crate) const API_ACTIVITY: Class = Class {
    uid: 6003,
    name: "API Activity",
    category_uid: 6,
    category_name: "Application Activity",
};

pub(crate) const APPLICATION_LIFECYCLE: Class = Class {
    uid: 6002,
    name: "Application Lifecycle",
    category_uid: 6,
    category_name: "Application Activity",
};

pub(crate) const NETWORK_ACTIVITY: Class = Class {
    uid: 4001,
    name: "Network Activity",
    category_uid: 4,
    category_name: "Network Activity",
};

pub(crate) const HTTP_ACTIVITY: Class = Class {
    uid: 4002,
    name: "HTTP Activity",
    category_uid: 4,
    category_name: "Network Activity",
};

/// An activity of a class: its id and the schema's caption for it. For `99` (Other) the
/// caption is "Other" and `name` is runner's own word for what happened.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Activity {
    pub id: u32,
    pub name: &'static str,
}

pub(crate) const OTHER: u32 = 99;

/// The outcome of a security control, as `action_id` and `disposition_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A rule let it through.
    Allowed,
    /// A person let it through.
    Approved,
    /// A rule, a check or a missing answer stopped it.
    Blocked,
    /// A person said no.
    Rejected,
}

impl Outcome {
    fn action(self) -> (u32, &'static str) {
        match self {
            Outcome::Allowed | Outcome::Approved => (1, "Allowed"),
            Outcome::Blocked | Outcome::Rejected => (2, "Denied"),
        }
    }

    fn disposition(self) -> (u32, &'static str) {
        match self {
            Outcome::Allowed => (1, "Allowed"),
            Outcome::Approved => (8, "Approved"),
            Outcome::Blocked => (2, "Blocked"),
            Outcome::Rejected => (25, "Rejected"),
        }
    }

    /// Informational when something was let through, Low when it was stopped: a refusal is
    /// the control working, worth a look, not an incident by itself.
    fn severity(self) -> (u32, &'static str) {
        match self {
            Outcome::Allowed | Outcome::Approved => (1, "Informational"),
            Outcome::Blocked | Outcome::Rejected => (2, "Low"),
        }
    }
}

/// The fields every record has, in the order a reader expects them; the caller adds its
/// class's own.
pub(crate) fn record(
    class: Class,
    activity: Activity,
    outcome: Option<Outcome>,
    message: String,
    meta: Meta,
) -> Map<String, Value> {
    let caption = if activity.id == OTHER {
        "Other"
    } else {
        activity.name
    };
    let mut r = Map::new();
    let mut put = |k: &str, v: Value| {
        r.insert(k.to_string(), v);
    };
    put("class_uid", json!(class.uid));
    put("class_name", json!(class.name));
    put("category_uid", json!(class.category_uid));
    put("category_name", json!(class.category_name));
    put("activity_id", json!(activity.id));
    put("activity_name", json!(activity.name));
    put(
        "type_uid",
        json!(u64::from(class.uid) * 100 + u64::from(activity.id)),
    );
    put("type_name", json!(format!("{}: {caption}", class.name)));
    put("time", json!(meta.time));
    let (severity_id, severity) = outcome.map_or((1, "Informational"), Outcome::severity);
    put("severity_id", json!(severity_id));
    put("severity", json!(severity));
    // Who and where (the `host` profile): the host user as the actor, the machine as the
    // device. A record whose actor is also an application adds its name beside the user.
    let mut profiles = vec!["host"];
    put("actor", json!({ "user": meta.identity.user_object() }));
    put("device", meta.identity.device_object());
    if let Some(o) = outcome {
        let (action_id, action) = o.action();
        let (disposition_id, disposition) = o.disposition();
        put("action_id", json!(action_id));
        put("action", json!(action));
        put("disposition_id", json!(disposition_id));
        put("disposition", json!(disposition));
        profiles.push("security_control");
    }
    put("message", json!(message));
    let metadata = json!({
        "version": OCSF_VERSION,
        "product": {
            "name": "runner",
            "vendor_name": VENDOR,
            "version": meta.product_version,
        },
        "log_name": "audit",
        "profiles": profiles,
        "correlation_uid": meta.session,
    });
    put("metadata", metadata);
    r
}

/// Names the application that acted (`actor.app_name`), beside the user.
pub(crate) fn actor_app(r: &mut Map<String, Value>, name: &str) {
    if let Some(actor) = r.get_mut("actor").and_then(Value::as_object_mut) {
        actor.insert("app_name".into(), json!(name));
    }
}
