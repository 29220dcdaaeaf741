//! A document as stored (a policy, a workflow's definition), read back by this version: a
//! field it does not know, at any depth, is left out, because a newer node of the same cluster
//! may have written it during a rolling upgrade. The API refuses unknown fields in what it is
//! sent; a stored document must not fail a job's runs for one. A field of the wrong type, or a
//! value this version does not know (an enum's), still does not read.

use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_path_to_error::Segment;

/// Most unknown fields left out of one document.
const MOST_UNKNOWN: usize = 64;

/// `text` as a `T`, leaving out the fields `T` does not know.
pub fn lenient<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    // What this version wrote reads at once: the fire path decodes a policy per row it reads.
    let first = match serde_json::from_str::<T>(text) {
        Ok(decoded) => return Ok(decoded),
        Err(err) => err,
    };
    if unknown_field(&first).is_none() {
        return Err(first);
    }
    let mut value: Value = serde_json::from_str(text)?;
    let mut left_out = 0;
    loop {
        let err = match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(decoded) => return Ok(decoded),
            Err(err) => err,
        };
        let field = unknown_field(err.inner()).filter(|_| left_out < MOST_UNKNOWN);
        let path: Vec<Segment> = err.path().iter().cloned().collect();
        let removed = field.is_some_and(|field| remove(&mut value, &path, &field));
        if !removed {
            return Err(err.into_inner());
        }
        left_out += 1;
    }
}

/// The field an error names as unknown (serde's `deny_unknown_fields`), if it is that error.
fn unknown_field(err: &serde_json::Error) -> Option<String> {
    let text = err.to_string();
    let rest = text.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_owned())
}

/// Removes `field` from the deepest object along `path` that has it; whether it did.
fn remove(value: &mut Value, path: &[Segment], field: &str) -> bool {
    if let Some((first, rest)) = path.split_first() {
        let child = match first {
            Segment::Map { key } => value.get_mut(key.as_str()),
            Segment::Seq { index } => value.get_mut(*index),
            _ => None,
        };
        if child.is_some_and(|child| remove(child, rest, field)) {
            return true;
        }
    }
    value
        .as_object_mut()
        .is_some_and(|object| object.remove(field).is_some())
}

#[cfg(test)]
mod tests {
    use super::super::policy::{Backoff, JobPolicy};
    use crate::workflows::Definition;

    #[test]
    fn fields_a_newer_version_wrote_are_left_out_at_any_depth() {
        let stored = r#"{"priority":7,"a_new_knob":true,
            "retry":{"max_attempts":3,"backoff":"exponential","jitter_seed":4},
            "children":{"on_success":[12],"on_cancel":[13]},
            "sharding":{"count":2,"spread":{"by":"zone"}}}"#;
        let policy = JobPolicy::from_stored(stored).unwrap();
        assert_eq!(policy.priority, 7);
        assert_eq!(
            (policy.retry.max_attempts, policy.retry.backoff),
            (3, Backoff::Exponential)
        );
        assert_eq!(policy.children.on_success, [12]);
        assert_eq!(policy.sharding.count, Some(2));
        let definition: Definition = super::lenient(
            r#"{"steps":[{"name":"a","job_id":1},
                {"name":"b","job_id":2,"needs":[{"step":"a","on":"failure","within_ms":5}]}]}"#,
        )
        .unwrap();
        assert_eq!(definition.steps[1].needs[0].step, "a");
    }

    #[test]
    fn a_wrong_type_or_an_unknown_value_still_does_not_read() {
        for stored in [
            r#"{"retry":{"max_attempts":"three"}}"#,
            r#"{"retry":{"backoff":"fibonacci"}}"#,
            r#"{"children":{"on_success":"12"}}"#,
            "{\"priority\":",
        ] {
            assert!(JobPolicy::from_stored(stored).is_err(), "{stored}");
        }
    }
}
