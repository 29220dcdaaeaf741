//! What an edit changed, for its audit event: the fields that differ between the resource
//! before and after, each with both values. A handler that edits gives [`Changes`] to the
//! event its store call writes, or, when its change is several writes (a workflow's), puts
//! them into its response's extensions, where `permissions::authorize` takes them into the
//! event it records.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// At most this many fields are listed; past it, the last entry says how many more.
const FIELDS_SHOWN: usize = 100;

/// A value longer than this (as JSON) is shown by its size, not whole.
const VALUE_SHOWN: usize = 500;

/// One changed field.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub(super) struct Change {
    /// Its path, dotted (`schedule.cron`, `policy.retry.max`).
    field: String,
    /// Absent when the field was added.
    #[serde(skip_serializing_if = "Value::is_null")]
    before: Value,
    /// Absent when the field was removed.
    #[serde(skip_serializing_if = "Value::is_null")]
    after: Value,
}

/// The fields an edit changed.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Changes(Vec<Change>);

impl Changes {
    /// What differs between `before` and `after` (as their JSON shows them).
    pub(super) fn between<T: Serialize>(before: &T, after: &T) -> Self {
        Self::between_except(before, after, &[])
    }

    /// [`Changes::between`] two views, leaving out their top-level fields `kept_out` (what
    /// every write moves on: a version, a time of update).
    pub(super) fn between_except<T: Serialize>(before: &T, after: &T, kept_out: &[&str]) -> Self {
        let (Ok(mut before), Ok(mut after)) =
            (serde_json::to_value(before), serde_json::to_value(after))
        else {
            return Self::default();
        };
        for value in [&mut before, &mut after] {
            if let Value::Object(fields) = value {
                fields.retain(|key, _| !kept_out.contains(&key.as_str()));
            }
        }
        let mut changes = Vec::new();
        diff("", &before, &after, &mut changes);
        if changes.len() > FIELDS_SHOWN {
            let more = changes.len() - FIELDS_SHOWN;
            changes.truncate(FIELDS_SHOWN);
            changes.push(Change {
                field: format!("({more} more fields)"),
                before: Value::Null,
                after: Value::Null,
            });
        }
        Self(changes)
    }

    /// As the audit trail stores them; `None` when nothing changed.
    pub(super) fn to_json(&self) -> Option<String> {
        (!self.0.is_empty())
            .then(|| serde_json::to_string(&self.0).ok())
            .flatten()
    }
}

fn diff(path: &str, before: &Value, after: &Value, changes: &mut Vec<Change>) {
    if before == after {
        return;
    }
    if let (Value::Object(was), Value::Object(is)) = (before, after) {
        let keys: BTreeSet<&String> = was.keys().chain(is.keys()).collect();
        for key in keys {
            let field = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            let null = Value::Null;
            diff(
                &field,
                was.get(key).unwrap_or(&null),
                is.get(key).unwrap_or(&null),
                changes,
            );
        }
        return;
    }
    changes.push(Change {
        field: if path.is_empty() {
            "(whole)".to_owned()
        } else {
            path.to_owned()
        },
        before: shown(before),
        after: shown(after),
    });
}

fn shown(value: &Value) -> Value {
    let size = value.to_string().len();
    if size > VALUE_SHOWN {
        Value::String(format!("({size} characters of JSON)"))
    } else {
        value.clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_the_fields_that_differ_are_listed_with_both_values() {
        let before = json!({"name": "a", "schedule": {"cron": "0 0 2 * * ?"}, "args": [1],
            "policy": {"retry": {"max": 3}, "timeout_ms": null}});
        let after = json!({"name": "a", "schedule": {"cron": "0 0 3 * * ?"}, "args": [1, 2],
            "policy": {"retry": {"max": 3}, "timeout_ms": 5000}});
        let changes = Changes::between(&before, &after);
        let text: Value = serde_json::from_str(&changes.to_json().unwrap()).unwrap();
        assert_eq!(
            text,
            json!([
                {"field": "args", "before": [1], "after": [1, 2]},
                {"field": "policy.timeout_ms", "after": 5000},
                {"field": "schedule.cron", "before": "0 0 2 * * ?", "after": "0 0 3 * * ?"}
            ])
        );
        assert_eq!(Changes::between(&before, &before).to_json(), None);
    }

    #[test]
    fn long_values_and_many_fields_are_cut() {
        let before = json!({"args": "x".repeat(2000)});
        let after = json!({"args": "y"});
        let changes = Changes::between(&before, &after);
        assert_eq!(changes.0[0].before, json!("(2002 characters of JSON)"));
        let many: serde_json::Map<String, Value> =
            (0..150).map(|n| (format!("f{n:03}"), json!(n))).collect();
        let changes = Changes::between(&json!({}), &Value::Object(many));
        assert_eq!(changes.0.len(), FIELDS_SHOWN + 1);
        assert_eq!(changes.0[FIELDS_SHOWN].field, "(50 more fields)");
    }
}
