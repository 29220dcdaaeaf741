//! The JSON messages. Unknown fields are ignored by both sides, so a newer peer may add fields
//! within a protocol version; removing or changing one needs a new version.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /api/v1/executors/register` (executor → admin node, executor token).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Registration {
    pub protocol: u32,
    /// Chosen by the executor, stable for the life of its process.
    pub executor_id: String,
    pub app: String,
    /// Base URL the admin nodes dispatch to, e.g. `http://10.0.0.7:9100`.
    pub address: String,
    /// Relative share of the app's work (`weighted` balancing, `split` sharding); at least 1.
    pub weight: u32,
    /// Attempts it runs at once; beyond that it answers `429`.
    pub capacity: u32,
    pub handlers: Vec<HandlerSpec>,
    /// It serves `POST /carillon/v1/dispatch-batch`: admin nodes then send the attempts due
    /// together in one request. Older executors omit it and get one request per attempt.
    #[serde(default)]
    pub batch: bool,
}

/// A handler an executor offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HandlerSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// A schedule declared in code: the admin node creates a job for it (named
    /// `<app>.<handler>`) the first time the handler registers, and never changes it after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<DefaultSchedule>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DefaultSchedule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rrule: Option<String>,
    /// IANA zone; default UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

/// The answer to a registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RegistrationAccepted {
    pub executor_id: String,
    /// How often to heartbeat.
    pub heartbeat_interval_ms: u64,
    /// An executor not heard from for this long is presumed dead: its attempts move elsewhere.
    pub lease_ms: u64,
}

/// `POST /api/v1/executors/heartbeat` (executor → admin node, executor token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Heartbeat {
    pub executor_id: String,
    /// Attempt ids the executor is running now.
    #[serde(default)]
    pub in_flight: Vec<i64>,
    /// True while shutting down: no new dispatches, in-flight ones finish.
    #[serde(default)]
    pub draining: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeartbeatReply {
    /// False when the admin nodes do not know this executor (any more): register again.
    pub registered: bool,
    /// Attempts to cancel.
    #[serde(default)]
    pub cancel: Vec<i64>,
}

/// `POST {executor}/carillon/v1/dispatch` (admin node → executor, signed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Dispatch {
    pub protocol: u32,
    pub run_id: i64,
    /// Unique per dispatch: use it to make a handler idempotent, and to report the result.
    pub attempt_id: i64,
    /// The attempt's handle: quote it in the attempt's result report and log lines, which
    /// are refused without it. Unguessable; keep it as private as the dispatch. Absent only
    /// from nodes older than the handle (an executor then reports without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// 1 for the first attempt of this shard, 2 for its first retry…
    pub attempt: u32,
    pub job_id: i64,
    pub job: String,
    pub handler: String,
    pub args: Value,
    pub shard: Shard,
    /// The scheduled instant, RFC 3339.
    pub scheduled_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Admin node base URLs that accept the result report, in order of preference.
    pub report_to: Vec<String>,
    /// Present when the job or task asks for `exactly_once_effect`: the same for every
    /// delivery of the same work (`<run_id>:<shard index>:<try>`; a failover after a lost
    /// executor keeps the try, a retry after a failure does not). An executor that has run
    /// the work of this key answers from its record of the result instead of running the
    /// handler again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect_key: Option<String>,
    /// What the run was given beside the job's arguments: a child job's run has
    /// `{"parent": {"run_id", "job_id", "job", "state", "output"}}`; a workflow step's run
    /// `{"workflow", "params", "upstream"}` (`protocol/README.md`). Absent for a run of the
    /// job's own schedule, a manual one or a task's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The W3C trace context of this delivery (`00-<trace id>-<parent span id>-<flags>`): the
    /// run's trace, and the node's span of this delivery as the parent. A single dispatch also
    /// carries it as the `traceparent` header; in a batch only here, one per dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The secrets the job names (its `secrets`), by name, as the admin node opened them: sent
    /// only to `https://` and loopback executors, inside the signed body. Never log them.
    #[serde(default, skip_serializing_if = "SecretValues::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub secrets: SecretValues,
}

/// Secret values by name; `Debug` shows only the names, so a dispatch logged whole does not
/// show them.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretValues(pub std::collections::BTreeMap<String, String>);

impl SecretValues {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of the secret `name`, if the dispatch carries it.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

impl std::fmt::Debug for SecretValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Shard {
    pub index: u32,
    pub total: u32,
}

/// `POST {executor}/carillon/v1/dispatch-batch` (admin node → executor, signed as one
/// body): attempts due together, for an executor that registered `batch`. Each is accepted or
/// refused on its own, exactly as if it came alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DispatchBatch {
    pub dispatches: Vec<Dispatch>,
}

/// The `200` answer to a batch: one reply per dispatch, in any order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DispatchBatchReply {
    pub replies: Vec<BatchItemReply>,
}

/// What the single dispatch of this attempt would have answered: `status` is its HTTP status
/// (`202` accepted, `200` done with `result`, `429`/`503` try another executor, other `4xx`
/// refused with `error`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchItemReply {
    pub attempt_id: i64,
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<DirectResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Succeeded,
    Failed,
    Cancelled,
}

/// The body of a `200` answer to a dispatch: the result, for executors that finish at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DirectResult {
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `POST /api/v1/executors/results` (executor → any admin node, executor token), for a dispatch
/// answered `202`. Reporting the same attempt twice is harmless.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AttemptReport {
    pub executor_id: String,
    pub attempt_id: i64,
    /// The [`Dispatch::handle`] of the attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `POST /api/v1/executors/logs` (executor → any admin node, executor token): lines handlers
/// logged, sent in batches while attempts run and before each result is reported. Each line
/// is numbered from 1 within its attempt, so a batch sent twice is stored once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogBatch {
    pub executor_id: String,
    pub attempts: Vec<AttemptLines>,
}

/// The lines of one attempt in a [`LogBatch`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AttemptLines {
    pub attempt_id: i64,
    /// The [`Dispatch::handle`] of the attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    pub lines: Vec<ShippedLine>,
}

/// One logged line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShippedLine {
    /// From 1, in the order the handler logged.
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub line: i64,
    /// When it was logged (epoch milliseconds).
    pub at_ms: i64,
    /// `ERROR`, `WARN`, `INFO`, `DEBUG` or `TRACE`.
    pub level: String,
    /// The message with its fields, one line of text (a node cuts it at 8 KiB).
    pub message: String,
}

/// The answer to a [`LogBatch`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogBatchAccepted {
    /// Lines stored now (a line sent again is not counted).
    pub stored: u64,
    /// Lines dropped: past their attempt's caps (its log ends with a line saying so), of an
    /// attempt that no longer exists, or refused.
    pub dropped: u64,
    /// Attempts that are neither pending nor the sender's: their lines were refused, and
    /// sending them again changes nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<i64>,
}

/// `POST {executor}/carillon/v1/cancel` (admin node → executor, signed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Cancel {
    pub attempt_id: i64,
}

/// `POST /api/v1/executors/deregister` (executor → admin node, executor token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Deregistration {
    pub executor_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dispatch_round_trips_and_ignores_unknown_fields() {
        let text = r#"{"protocol":1,"run_id":7,"attempt_id":70,"attempt":1,"job_id":3,
            "job":"nightly","handler":"report","args":["eu"],"shard":{"index":0,"total":2},
            "scheduled_at":"2026-01-01T02:30:00Z","report_to":["http://a:9001"],
            "added_in_a_later_minor":true}"#;
        let dispatch: Dispatch = serde_json::from_str(text).unwrap();
        assert_eq!(dispatch.shard, Shard { index: 0, total: 2 });
        assert_eq!(dispatch.timeout_ms, None);
        let again: Dispatch =
            serde_json::from_str(&serde_json::to_string(&dispatch).unwrap()).unwrap();
        assert_eq!(again, dispatch);
    }

    #[test]
    fn outcomes_are_snake_case() {
        let r = DirectResult {
            outcome: Outcome::Succeeded,
            output: None,
            error: None,
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"outcome":"succeeded"}"#
        );
    }
}
