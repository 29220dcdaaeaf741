//! Flow control: a job's runs share a key with other runs (of the same job, of other jobs
//! naming the key, and of tasks), and the key caps how many of them are in flight at once and
//! how many start per window. A run over the cap waits in line, oldest first, or is dropped.
//! No I/O: the limits as users write them, checked, and the key a run is admitted under.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use super::JobError;

/// Longest key name.
const MAX_KEY_NAME: usize = 63;
/// Longest value taken from the arguments as it is; a longer one is replaced by its digest,
/// so that every stored key fits its column.
const MAX_KEY_VALUE: usize = 128;
/// Most runs a key lets run at once, and most starts per window.
const MAX_LIMIT: u32 = 100_000;
/// Longest rate window: a day.
const MAX_RATE_WINDOW_MS: u64 = 24 * 3_600_000;

/// What happens to a run that finds its key full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnFull {
    /// It waits in line and starts when the key has room, oldest first.
    #[default]
    Queue,
    /// It ends at once as `skipped`, saying the key was full.
    Drop,
}

/// At most `limit` runs of the key start per `per_ms` (a fixed window from the first start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    #[schema(minimum = 1, maximum = 100000)]
    pub limit: u32,
    #[schema(minimum = 1000, maximum = 86400000)]
    pub per_ms: u64,
}

/// A job's flow control: the key its runs are counted under and the key's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Flow {
    /// The key's name (letters, digits, `.`, `_`, `-`), shared by every job and task of the
    /// namespace naming it.
    pub key: String,
    /// A JSON pointer into the run's arguments (`/customer`): its value joins the name, so
    /// each value is a key of its own (`key` per customer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_arg: Option<String>,
    /// Most runs of the key pending or running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 100000)]
    pub max_in_flight: Option<u32>,
    /// Most runs of the key started per window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateLimit>,
    /// What a run finding the key full does: `queue` (the default) or `drop`.
    #[serde(default)]
    pub on_full: OnFull,
    /// Strict order: one run of the key at a time, oldest first, and a run that fails for
    /// good (after its retries) holds the key until it is released (`POST
    /// /runs/{id}/release`). Implies `max_in_flight` 1.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fifo: bool,
}

/// The limits a key is admitted under, as stored with it: those of the last run put in line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowLimits {
    pub max_in_flight: Option<i64>,
    pub rate: Option<(i64, i64)>,
    pub drop_when_full: bool,
    /// A run that failed for good still counts until released (`fifo`).
    pub hold_failed: bool,
}

impl Flow {
    /// Checks the document; the error names the field (`flow.key`, `flow.rate.per_ms`, …).
    pub fn validate(&self) -> Result<(), JobError> {
        let name_ok = !self.key.is_empty()
            && self.key.len() <= MAX_KEY_NAME
            && self
                .key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !name_ok {
            return Err(JobError::new(
                "flow.key",
                format!(
                    "{:?} is not a key name: 1 to {MAX_KEY_NAME} letters, digits, '.', '_' or '-'",
                    self.key
                ),
            ));
        }
        if let Some(pointer) = &self.key_arg
            && !(pointer.starts_with('/') && pointer.len() > 1 && pointer.len() <= 200)
        {
            return Err(JobError::new(
                "flow.key_arg",
                format!("{pointer:?} is not a JSON pointer into the arguments, like \"/customer\""),
            ));
        }
        if self.fifo {
            if self.max_in_flight.is_some_and(|max| max != 1) {
                return Err(JobError::new(
                    "flow.max_in_flight",
                    "fifo runs one run of the key at a time: leave max_in_flight out, or 1",
                ));
            }
            if self.on_full == OnFull::Drop {
                return Err(JobError::new(
                    "flow.on_full",
                    "fifo keeps every run in line: on_full drop would skip them",
                ));
            }
        } else if self.max_in_flight.is_none() && self.rate.is_none() {
            return Err(JobError::new(
                "flow",
                "names no limit: give max_in_flight, rate, fifo or a mix",
            ));
        }
        if let Some(max) = self.max_in_flight
            && !(1..=MAX_LIMIT).contains(&max)
        {
            return Err(JobError::new(
                "flow.max_in_flight",
                format!("{max} is outside 1..={MAX_LIMIT}"),
            ));
        }
        if let Some(rate) = self.rate {
            if !(1..=MAX_LIMIT).contains(&rate.limit) {
                return Err(JobError::new(
                    "flow.rate.limit",
                    format!("{} is outside 1..={MAX_LIMIT}", rate.limit),
                ));
            }
            if !(1_000..=MAX_RATE_WINDOW_MS).contains(&rate.per_ms) {
                return Err(JobError::new(
                    "flow.rate.per_ms",
                    format!(
                        "{} is outside 1000..={MAX_RATE_WINDOW_MS} (one second to a day)",
                        rate.per_ms
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The limits stored with the key.
    pub fn limits(&self) -> FlowLimits {
        FlowLimits {
            max_in_flight: if self.fifo {
                Some(1)
            } else {
                self.max_in_flight.map(i64::from)
            },
            rate: self.rate.map(|r| {
                (
                    i64::from(r.limit),
                    i64::try_from(r.per_ms).unwrap_or(i64::MAX),
                )
            }),
            drop_when_full: self.on_full == OnFull::Drop,
            hold_failed: self.fifo,
        }
    }

    /// The key a run with `args` of `namespace` is admitted under: the namespace, the name and,
    /// with `key_arg`, the value it points at (a string as it is, another value as JSON).
    /// An error when the arguments have no plain value there: the run cannot be counted.
    pub fn key_of(&self, namespace: i64, args: &serde_json::Value) -> Result<String, String> {
        let Some(pointer) = &self.key_arg else {
            return Ok(format!("{namespace}/{}", self.key));
        };
        let value = match args.pointer(pointer) {
            Some(serde_json::Value::String(text)) => text.clone(),
            Some(value @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                value.to_string()
            }
            Some(_) => {
                return Err(format!(
                    "flow.key_arg {pointer} points at an object, array or null in the run's \
                     arguments; it needs a string, number or boolean"
                ));
            }
            None => {
                return Err(format!(
                    "flow.key_arg {pointer} is not in the run's arguments"
                ));
            }
        };
        let value = if value.len() > MAX_KEY_VALUE || value.chars().any(char::is_control) {
            let digest = Sha256::digest(value.as_bytes());
            let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
            format!("sha256:{hex}")
        } else {
            value
        };
        Ok(format!("{namespace}/{}/{value}", self.key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(json: serde_json::Value) -> Flow {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_key_is_the_namespace_the_name_and_the_value_pointed_at() {
        let shared = flow(serde_json::json!({"key": "reports-db", "max_in_flight": 2}));
        assert_eq!(
            shared.key_of(3, &serde_json::json!({"x": 1})).unwrap(),
            "3/reports-db"
        );
        let per_customer = flow(
            serde_json::json!({"key": "sync", "key_arg": "/customer/id", "rate": {"limit": 5, "per_ms": 60000}}),
        );
        let args = serde_json::json!({"customer": {"id": "acme"}});
        assert_eq!(per_customer.key_of(1, &args).unwrap(), "1/sync/acme");
        let numeric = serde_json::json!({"customer": {"id": 42}});
        assert_eq!(per_customer.key_of(1, &numeric).unwrap(), "1/sync/42");
        let long = serde_json::json!({"customer": {"id": "x".repeat(500)}});
        let key = per_customer.key_of(1, &long).unwrap();
        assert!(
            key.starts_with("1/sync/sha256:") && key.len() < 100,
            "{key}"
        );
        let missing = per_customer.key_of(1, &serde_json::json!({})).unwrap_err();
        assert!(missing.contains("/customer/id is not in"), "{missing}");
        let object = per_customer
            .key_of(1, &serde_json::json!({"customer": {"id": {}}}))
            .unwrap_err();
        assert!(object.contains("needs a string"), "{object}");
    }

    #[test]
    fn bad_documents_name_their_field() {
        let cases = [
            (
                serde_json::json!({"key": "a b", "max_in_flight": 1}),
                "flow.key",
            ),
            (serde_json::json!({"key": "k"}), "flow"),
            (
                serde_json::json!({"key": "k", "max_in_flight": 0}),
                "flow.max_in_flight",
            ),
            (
                serde_json::json!({"key": "k", "rate": {"limit": 1, "per_ms": 10}}),
                "flow.rate.per_ms",
            ),
            (
                serde_json::json!({"key": "k", "key_arg": "customer", "max_in_flight": 1}),
                "flow.key_arg",
            ),
            (
                serde_json::json!({"key": "k", "fifo": true, "max_in_flight": 2}),
                "flow.max_in_flight",
            ),
            (
                serde_json::json!({"key": "k", "fifo": true, "on_full": "drop"}),
                "flow.on_full",
            ),
        ];
        for (json, field) in cases {
            assert_eq!(
                flow(json.clone()).validate().unwrap_err().field,
                field,
                "{json}"
            );
        }
        let good = flow(serde_json::json!({"key": "k", "max_in_flight": 3, "on_full": "drop"}));
        good.validate().unwrap();
        assert_eq!(
            good.limits(),
            FlowLimits {
                max_in_flight: Some(3),
                rate: None,
                drop_when_full: true,
                hold_failed: false,
            }
        );
    }
}
