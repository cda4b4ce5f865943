//! Every unknown key of a runner TOML config, found in one pass with its line and the known
//! key it is closest to. serde's `deny_unknown_fields` stops at the first one and knows no
//! line once the document is a table; a user fixing typos should see them all at once.
//!
//! The known keys of each table are asked of the settings types themselves (the field
//! names their `Deserialize` hands to `deserialize_struct`), so this list cannot drift
//! from what the loader accepts.

use serde::Deserialize;
use serde::de::{Deserializer, Visitor};
use toml::de::{DeTable, DeValue};

use runner_permission::layers::{RUNNER_KEYS, did_you_mean, line_of};

/// The field names `T` accepts, in their config spelling (renames applied).
pub fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(FieldNames(&mut fields));
    fields
}

/// A deserializer that only records the fields a struct asks for, then stops.
struct FieldNames<'a>(&'a mut &'static [&'static str]);

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(serde::de::Error::custom("fields recorded"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// What the tables under one key hold.
#[derive(Clone, Copy)]
pub enum Shape {
    /// One table of these fields.
    Struct(fn() -> &'static [&'static str]),
    /// A table of named tables of these fields (`[provider.NAME]`).
    Named(fn() -> &'static [&'static str]),
    /// An array of tables of these fields (`[[hooks]]`).
    List(fn() -> &'static [&'static str]),
}

/// One line per unknown key in `text`: `line N: unknown key `a.b` (did you mean `c`?)`.
/// Empty for a document that does not parse (serde says why, with its line). `shape_of`
/// says what the table under a top-level key holds (the settings module knows its types).
pub fn unknown(text: &str, shape_of: fn(&str) -> Option<Shape>) -> Vec<String> {
    let Ok(doc) = DeTable::parse(text) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    check(text, doc.get_ref(), "", &RUNNER_KEYS, &mut found);
    for (key, value) in doc.get_ref() {
        let (Some(shape), DeValue::Table(_) | DeValue::Array(_)) =
            (shape_of(key.get_ref()), value.get_ref())
        else {
            continue;
        };
        let prefix = key.get_ref().to_string();
        nested(text, value.get_ref(), &prefix, shape, &mut found);
    }
    found
}

fn nested(text: &str, value: &DeValue, prefix: &str, shape: Shape, found: &mut Vec<String>) {
    match (shape, value) {
        (Shape::Struct(fields), DeValue::Table(t)) => check(text, t, prefix, fields(), found),
        (Shape::Named(fields), DeValue::Table(t)) => {
            for (name, inner) in t {
                if let DeValue::Table(inner) = inner.get_ref() {
                    let at = format!("{prefix}.{}", name.get_ref());
                    check(text, inner, &at, fields(), found);
                    if prefix == "provider" {
                        prices(text, inner, &at, found);
                    }
                }
            }
        }
        (Shape::List(fields), DeValue::Array(items)) => {
            for item in items {
                if let DeValue::Table(inner) = item.get_ref() {
                    check(text, inner, prefix, fields(), found);
                }
            }
        }
        _ => {}
    }
}

/// `[provider.NAME.prices.MODEL]` tables.
fn prices(text: &str, provider: &DeTable, at: &str, found: &mut Vec<String>) {
    let Some(DeValue::Table(models)) = provider
        .iter()
        .find(|(k, _)| k.get_ref() == "prices")
        .map(|(_, v)| v.get_ref())
    else {
        return;
    };
    for (model, price) in models {
        if let DeValue::Table(price) = price.get_ref() {
            let here = format!("{at}.prices.{}", model.get_ref());
            check(
                text,
                price,
                &here,
                fields_of::<runner_llm::models::Price>(),
                found,
            );
        }
    }
}

fn check(text: &str, table: &DeTable, prefix: &str, known: &[&str], found: &mut Vec<String>) {
    for key in table.keys() {
        let name = key.get_ref();
        if known.contains(&name.as_ref()) {
            continue;
        }
        let full = if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}.{name}")
        };
        let hint = did_you_mean(name, known)
            .map(|k| format!(" (did you mean `{k}`?)"))
            .unwrap_or_else(|| {
                let list: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
                format!(" (known here: {})", list.join(", "))
            });
        found.push(format!(
            "line {}: unknown key `{full}`{hint}",
            line_of(text, key.span().start)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape_of(key: &str) -> Option<Shape> {
        Some(match key {
            "provider" => Shape::Named(fields_of::<runner_llm::models::ProviderSettings>),
            "retry" => Shape::Struct(fields_of::<runner_llm::retry::RetrySettings>),
            "hooks" => Shape::List(fields_of::<runner_tool::hooks::HookSpec>),
            _ => return None,
        })
    }

    #[test]
    fn every_unknown_key_at_every_level_is_listed() {
        let text = "modle = \"x\"\n[provider.local]\nbase_ur = \"u\"\napi_key_env = \"K\"\ncontext_windw = 3\n[[hooks]]\nevnt = \"x\"\n[retry]\nzzzzzzzz = 1\n";
        let found = unknown(text, shape_of);
        assert_eq!(found.len(), 5, "{found:?}");
        assert_eq!(
            found[0],
            "line 1: unknown key `modle` (did you mean `model`?)"
        );
        assert_eq!(
            found[1],
            "line 3: unknown key `provider.local.base_ur` (did you mean `base_url`?)"
        );
        assert!(found[2].starts_with(
            "line 5: unknown key `provider.local.context_windw` (did you mean `context_window`?)"
        ));
        assert!(
            found[3].starts_with("line 7: unknown key `hooks.evnt`"),
            "{found:?}"
        );
        assert!(
            found[4].starts_with("line 9: unknown key `retry.zzzzzzzz` (known here: "),
            "{found:?}"
        );
    }

    #[test]
    fn the_field_names_are_the_types_own() {
        let fields = fields_of::<runner_llm::models::ProviderSettings>();
        assert!(
            fields.contains(&"type") && fields.contains(&"base_url"),
            "{fields:?}"
        );
    }
}
