//! Jobs as users define them: the API's job document, its validation into a
//! [`JobDefinition`], and the policies that go with it. No I/O.

mod checks;
pub mod flow;
pub mod history;
pub mod http_call;
pub mod policy;
pub mod stored;

use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

pub use checks::{check_calendar_name, check_webhook, validate_work, window_of};
use checks::{check_secret_names, check_text, work_named};
pub use flow::{Flow, FlowLimits, OnFull, RateLimit};
pub use history::{JobHistory, KeepFor, RetentionConfig};
pub use http_call::{HTTP_APP, HttpCall};
pub use policy::{
    AlertFormat, Backoff, Balance, Bounds, Children, Delivery, JobAlerts, JobPolicy, Misfire,
    Overlap, Retry, Sharding, jitter_delay_ms,
};

use crate::schedule::{Schedule, ScheduleError, ScheduleSpec, parse_zone};

/// One bad item of a batch (a job of a bulk create, a task of an enqueue): its index in the
/// batch, the field at fault and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ItemError {
    pub index: usize,
    pub field: String,
    pub message: String,
}

/// Why a job document was refused; `field` names the JSON field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct JobError {
    pub field: String,
    pub message: String,
}

impl JobError {
    pub fn new(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

impl From<ScheduleError> for JobError {
    fn from(err: ScheduleError) -> Self {
        Self::new(err.field, err.message)
    }
}

/// The epoch of job ids' millisecond part (2024-01-01).
pub const ID_EPOCH_MS: i64 = 1_704_067_200_000;

/// A new job id: milliseconds since 2024 in the high bits and 12 random bits below, so ids
/// sort roughly by creation and stay below 2^53 (exact in JavaScript) for 69 years. The store
/// refuses a colliding id and the caller draws again.
pub fn new_job_id(now_ms: i64) -> i64 {
    let mut random = [0u8; 2];
    // Without OS randomness the low bits stay zero; a collision is then retried.
    let _ = getrandom::fill(&mut random);
    let low = i64::from(u16::from_le_bytes(random) & 0x0fff);
    ((now_ms - ID_EPOCH_MS).max(0) << 12) | low
}

/// The partition a job belongs to: a fixed mix of its id, so it never changes.
pub fn partition_of(job_id: i64, partition_count: i64) -> i64 {
    // splitmix64's finaliser: neighbouring ids land in unrelated partitions.
    let mut x = job_id as u64;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x % partition_count.max(1) as u64) as i64
}

/// Largest `args` accepted, serialised.
pub const MAX_ARGS_BYTES: usize = 64 * 1024;
const MAX_NAME: usize = 200;
const MAX_IDENT: usize = 128;
const MAX_TIMEOUT_MS: u64 = 7 * 24 * 3_600_000;
const MAX_CATCH_UP_WINDOW_MS: u64 = 31 * 24 * 3_600_000;
const MAX_JOB_CALENDARS: usize = 16;
const MAX_PAUSE_AFTER_FAILURES: u32 = 1_000;
const MAX_BOUNDED_RUNS: u64 = 1_000_000_000;
const MAX_DESCRIPTION: usize = 4_000;

/// The job document of `POST /api/v1/jobs`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobInput {
    pub name: String,
    /// The executor app whose handler runs the job (none for an HTTP job).
    #[serde(default)]
    pub app: Option<String>,
    #[serde(default)]
    pub handler: Option<String>,
    /// The URL an HTTP job calls at each instant, instead of an executor's handler.
    #[serde(default)]
    pub http: Option<HttpCall>,
    /// Secrets of the namespace each dispatch carries to the handler, by name (sent only to
    /// `https://` and loopback executors).
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Flow control: the key the job's runs are counted under and its limits.
    #[serde(default)]
    pub flow: Option<Flow>,
    pub schedule: ScheduleSpec,
    #[serde(default = "utc")]
    pub timezone: String,
    #[serde(default)]
    pub args: serde_json::Value,
    #[serde(default)]
    pub sharding: Sharding,
    #[serde(default)]
    pub balance: Balance,
    #[serde(default)]
    pub retry: Retry,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// What the delivery to executors promises: `at_least_once` (the default),
    /// `at_most_once` or `exactly_once_effect`.
    #[serde(default)]
    pub delivery: Delivery,
    #[serde(default)]
    pub misfire: Misfire,
    #[serde(default)]
    pub catch_up_window_ms: Option<u64>,
    #[serde(default)]
    pub overlap: Overlap,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 10)]
    pub priority: Option<i32>,
    /// The job's own alert webhook.
    #[serde(default)]
    pub alerts: Option<JobAlerts>,
    /// How long this job's runs are kept, and how many (default: the node's `retention`).
    #[serde(default)]
    pub history: Option<JobHistory>,
    /// When the job may fire (`not_before`, `not_after`) and how many times (`max_runs`).
    #[serde(default)]
    pub bounds: Option<Bounds>,
    /// Delay each scheduled run by up to this many milliseconds (fixed per instant).
    #[serde(default)]
    pub jitter_ms: Option<u64>,
    /// Names of exclusion calendars: instants in them are recorded as skipped.
    #[serde(default)]
    pub calendars: Vec<String>,
    /// Stop the job after this many failed runs in a row, and alert.
    #[serde(default)]
    pub pause_after_failures: Option<u32>,
    /// Jobs to run when a run of this job ends (by id), per outcome.
    #[serde(default)]
    pub children: Children,
    /// Free text for the people who run the job (what it does, who to call).
    #[serde(default)]
    pub description: Option<String>,
    /// Start the job at once (default: created stopped).
    #[serde(default)]
    pub start: bool,
}

fn utc() -> String {
    "UTC".to_owned()
}

/// The document of `PATCH /api/v1/jobs/{id}`: every field optional; `version`, when given,
/// must match the stored one.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobPatch {
    pub name: Option<String>,
    pub app: Option<String>,
    pub handler: Option<String>,
    /// An HTTP job's whole call (an executor's job cannot become one, nor an HTTP job stop
    /// being one).
    #[serde(default, deserialize_with = "present")]
    pub http: Option<Option<HttpCall>>,
    /// The whole list of secrets its dispatches carry (`[]` for none).
    pub secrets: Option<Vec<String>>,
    /// `null` removes the flow control; leaving the field out keeps it.
    #[serde(default, deserialize_with = "present")]
    pub flow: Option<Option<Flow>>,
    pub schedule: Option<ScheduleSpec>,
    pub timezone: Option<String>,
    /// `null` here sets the arguments to `null`; leaving the field out keeps them.
    #[serde(default, deserialize_with = "present")]
    pub args: Option<serde_json::Value>,
    pub sharding: Option<Sharding>,
    pub balance: Option<Balance>,
    pub retry: Option<Retry>,
    /// `null` clears the timeout; leaving the field out keeps it.
    #[serde(default, deserialize_with = "present")]
    pub timeout_ms: Option<Option<u64>>,
    pub delivery: Option<Delivery>,
    pub misfire: Option<Misfire>,
    pub catch_up_window_ms: Option<u64>,
    pub overlap: Option<Overlap>,
    #[schema(minimum = 0, maximum = 10)]
    pub priority: Option<i32>,
    /// `null` removes the job's alert webhook; leaving the field out keeps it.
    #[serde(default, deserialize_with = "present")]
    pub alerts: Option<Option<JobAlerts>>,
    /// `null` returns the job to the node's retention; leaving the field out keeps its rule.
    #[serde(default, deserialize_with = "present")]
    pub history: Option<Option<JobHistory>>,
    /// `null` removes the bounds; leaving the field out keeps them.
    #[serde(default, deserialize_with = "present")]
    pub bounds: Option<Option<Bounds>>,
    /// `null` removes the jitter.
    #[serde(default, deserialize_with = "present")]
    pub jitter_ms: Option<Option<u64>>,
    /// The whole list of calendars (`[]` for none).
    pub calendars: Option<Vec<String>>,
    /// `null` never pauses the job.
    #[serde(default, deserialize_with = "present")]
    pub pause_after_failures: Option<Option<u32>>,
    /// The whole set of children (`{}` for none).
    pub children: Option<Children>,
    /// `null` removes the description.
    #[serde(default, deserialize_with = "present")]
    pub description: Option<Option<String>>,
    pub version: Option<i64>,
}

/// A field that is present, even as `null`: serde calls this only for fields the document has.
pub(crate) fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// A job whose every field has been checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDefinition {
    pub name: String,
    pub app: String,
    pub handler: String,
    pub schedule: ScheduleSpec,
    pub timezone: String,
    pub args: serde_json::Value,
    pub policy: JobPolicy,
}

impl JobInput {
    pub fn into_definition(self) -> Result<JobDefinition, JobError> {
        let defaults = JobPolicy::default();
        let (app, handler) = work_named(self.app, self.handler, self.http.as_ref())?;
        let definition = JobDefinition {
            name: self.name,
            app,
            handler,
            schedule: self.schedule,
            timezone: self.timezone,
            args: self.args,
            policy: JobPolicy {
                balance: self.balance,
                sharding: self.sharding,
                retry: self.retry,
                timeout_ms: self.timeout_ms,
                delivery: self.delivery,
                misfire: self.misfire,
                catch_up_window_ms: self
                    .catch_up_window_ms
                    .unwrap_or(defaults.catch_up_window_ms),
                overlap: self.overlap,
                priority: self.priority.unwrap_or(defaults.priority),
                alerts: self.alerts,
                history: self.history,
                bounds: self.bounds,
                jitter_ms: self.jitter_ms,
                calendars: self.calendars,
                pause_after_failures: self.pause_after_failures,
                children: self.children,
                workflow: false,
                description: self.description,
                http: self.http,
                secrets: self.secrets,
                flow: self.flow,
            },
        };
        definition.validate()?;
        Ok(definition)
    }
}

impl JobPatch {
    /// `current` with this patch applied, validated.
    pub fn apply(self, current: &JobDefinition) -> Result<JobDefinition, JobError> {
        let mut next = current.clone();
        match (&current.policy.http, self.http) {
            (Some(_), Some(Some(call))) => {
                next.handler.clone_from(&call.method);
                next.policy.http = Some(call);
            }
            (Some(_), Some(None)) => {
                return Err(JobError::new(
                    "http",
                    "an HTTP job stays one: create a job of an executor instead",
                ));
            }
            (None, Some(_)) => {
                return Err(JobError::new(
                    "http",
                    "the job runs on an executor; an HTTP job is created as one",
                ));
            }
            (_, None) => {}
        }
        // What an HTTP job shows as its app and handler may be sent back unchanged.
        if current.policy.http.is_some() {
            if self.app.as_ref().is_some_and(|app| *app != current.app) {
                return Err(JobError::new("app", "an HTTP job has no app"));
            }
            if self.handler.as_ref().is_some_and(|h| *h != current.handler) {
                return Err(JobError::new("handler", "an HTTP job has no handler"));
            }
        }
        let p = &mut next.policy;
        macro_rules! take {
            ($($target:expr => $source:expr),* $(,)?) => {
                $(if let Some(value) = $source { $target = value; })*
            };
        }
        take!(
            next.name => self.name,
            next.app => self.app,
            next.handler => self.handler,
            next.schedule => self.schedule,
            next.timezone => self.timezone,
            next.args => self.args,
            p.sharding => self.sharding,
            p.balance => self.balance,
            p.retry => self.retry,
            p.delivery => self.delivery,
            p.misfire => self.misfire,
            p.catch_up_window_ms => self.catch_up_window_ms,
            p.overlap => self.overlap,
            p.priority => self.priority,
            p.calendars => self.calendars,
            p.bounds => self.bounds,
            p.jitter_ms => self.jitter_ms,
            p.pause_after_failures => self.pause_after_failures,
            p.description => self.description,
            p.children => self.children,
            p.secrets => self.secrets,
        );
        if let Some(timeout) = self.timeout_ms {
            p.timeout_ms = timeout;
        }
        if let Some(alerts) = self.alerts {
            p.alerts = alerts;
        }
        if let Some(history) = self.history {
            p.history = history;
        }
        if let Some(flow) = self.flow {
            p.flow = flow;
        }
        next.validate()?;
        Ok(next)
    }
}

impl JobDefinition {
    pub fn zone(&self) -> Result<Tz, JobError> {
        Ok(parse_zone(&self.timezone)?)
    }

    /// The parsed schedule in the job's zone, within the job's bounds.
    pub fn parsed_schedule(&self) -> Result<Schedule, JobError> {
        let zone = self.zone()?;
        let window = window_of(self.policy.bounds.as_ref(), zone)?;
        Ok(Schedule::parse(&self.schedule, zone)?.within(window))
    }

    fn validate(&self) -> Result<(), JobError> {
        check_text("name", &self.name, MAX_NAME, |c| !c.is_control())?;
        if let Some(description) = &self.policy.description
            && description.chars().count() > MAX_DESCRIPTION
        {
            return Err(JobError::new(
                "description",
                format!("is longer than {MAX_DESCRIPTION} characters"),
            ));
        }
        validate_work(&self.app, &self.handler, &self.args, &self.policy)?;
        self.parsed_schedule()?;
        let p = &self.policy;
        check_secret_names(&p.secrets, p.http.is_some())?;
        if let Some(flow) = &p.flow {
            flow.validate()?;
            if let Err(why) = flow.key_of(0, &self.args) {
                return Err(JobError::new("flow.key_arg", why));
            }
        }
        if let Some(call) = &p.http {
            call.validate()?;
            if p.sharding.split || p.sharding.broadcast {
                return Err(JobError::new(
                    "sharding",
                    "an HTTP job has no executors to split or broadcast over: use count",
                ));
            }
        }
        if p.catch_up_window_ms > MAX_CATCH_UP_WINDOW_MS {
            return Err(JobError::new(
                "catch_up_window_ms",
                format!("{} exceeds 31 days", p.catch_up_window_ms),
            ));
        }
        let modes = [
            p.sharding.split,
            p.sharding.broadcast,
            p.sharding.count.is_some(),
        ];
        if modes.iter().filter(|m| **m).count() > 1 {
            return Err(JobError::new(
                "sharding",
                "choose one of split, broadcast or count",
            ));
        }
        if let Some(count) = p.sharding.count
            && !(1..=10_000).contains(&count)
        {
            return Err(JobError::new(
                "sharding.count",
                format!("{count} is outside 1..=10000"),
            ));
        }
        if p.sharding.split && !self.args.is_array() {
            return Err(JobError::new(
                "args",
                "must be a JSON array when sharding.split is set",
            ));
        }
        if let Some(max_runs) = p.history.and_then(|h| h.max_runs)
            && !(1..=JobHistory::MAX_RUNS).contains(&max_runs)
        {
            return Err(JobError::new(
                "history.max_runs",
                format!("{max_runs} is outside 1..={}", JobHistory::MAX_RUNS),
            ));
        }
        self.validate_schedule_policies()?;
        if let Some(alerts) = &p.alerts {
            if let Some(url) = &alerts.webhook
                && let Err(why) = check_webhook(url)
            {
                return Err(JobError::new("alerts.webhook", why));
            }
            if let Some(late) = alerts.late_after_ms
                && !(1..=MAX_TIMEOUT_MS).contains(&late)
            {
                return Err(JobError::new(
                    "alerts.late_after_ms",
                    format!("{late} is outside 1..={MAX_TIMEOUT_MS} (7 days)"),
                ));
            }
        }
        Ok(())
    }
}

impl JobDefinition {
    fn validate_schedule_policies(&self) -> Result<(), JobError> {
        let p = &self.policy;
        if let Some(max_runs) = p.bounds.as_ref().and_then(|b| b.max_runs)
            && !(1..=MAX_BOUNDED_RUNS).contains(&max_runs)
        {
            return Err(JobError::new(
                "bounds.max_runs",
                format!("{max_runs} is outside 1..={MAX_BOUNDED_RUNS}"),
            ));
        }
        if let Some(jitter) = p.jitter_ms
            && !(1..=MAX_TIMEOUT_MS).contains(&jitter)
        {
            return Err(JobError::new(
                "jitter_ms",
                format!("{jitter} is outside 1..={MAX_TIMEOUT_MS} (7 days)"),
            ));
        }
        if let Some(failures) = p.pause_after_failures
            && !(1..=MAX_PAUSE_AFTER_FAILURES).contains(&failures)
        {
            return Err(JobError::new(
                "pause_after_failures",
                format!("{failures} is outside 1..={MAX_PAUSE_AFTER_FAILURES}"),
            ));
        }
        if p.calendars.len() > MAX_JOB_CALENDARS {
            return Err(JobError::new(
                "calendars",
                format!(
                    "names {} calendars; the limit is {MAX_JOB_CALENDARS}",
                    p.calendars.len()
                ),
            ));
        }
        for (i, name) in p.calendars.iter().enumerate() {
            check_calendar_name(name)
                .map_err(|why| JobError::new(&format!("calendars[{i}]"), why))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(json: serde_json::Value) -> Result<JobDefinition, JobError> {
        serde_json::from_value::<JobInput>(json)
            .unwrap()
            .into_definition()
    }

    fn base() -> serde_json::Value {
        serde_json::json!({"name": "nightly-report", "app": "billing", "handler": "report",
                           "schedule": {"cron": "0 30 2 * * ?"}, "timezone": "Asia/Shanghai"})
    }

    #[test]
    fn the_design_example_is_accepted_with_its_policies() {
        let job = input(
            serde_json::json!({ "name": "nightly-report", "app": "billing",
            "handler": "report", "schedule": { "cron": "0 30 2 * * ?" },
            "timezone": "Asia/Shanghai", "args": ["eu", "us", "apac"],
            "sharding": { "split": true }, "balance": "weighted",
            "retry": { "max_attempts": 3, "backoff": "exponential", "initial_delay_ms": 1000 },
            "timeout_ms": 600000, "misfire": "fire_once", "overlap": "skip", "priority": 5,
            "start": true }),
        )
        .unwrap();
        assert_eq!(job.policy.balance, Balance::Weighted);
        assert_eq!(job.policy.retry.max_attempts, 3);
        assert_eq!(job.policy.overlap, Overlap::Skip);
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases = [
            ("name", serde_json::json!("")),
            ("app", serde_json::json!("bad app")),
            ("timezone", serde_json::json!("Nowhere/City")),
            ("priority", serde_json::json!(11)),
        ];
        for (field, value) in cases {
            let mut doc = base();
            doc[field] = value;
            assert_eq!(input(doc).unwrap_err().field, field);
        }
        let mut doc = base();
        doc["schedule"] = serde_json::json!({"cron": "99 * * * *"});
        assert_eq!(input(doc).unwrap_err().field, "schedule.cron");
        let mut doc = base();
        doc["sharding"] = serde_json::json!({"split": true});
        assert_eq!(input(doc).unwrap_err().field, "args");
    }

    #[test]
    fn ids_are_javascript_safe_and_partitions_spread() {
        let now = 1_795_000_000_000;
        let id = new_job_id(now);
        assert!(id > 0 && id < (1 << 53));
        let mut counts = [0usize; 16];
        for i in 0..16_000 {
            counts[partition_of(id + i, 16) as usize] += 1;
        }
        assert!(
            counts.iter().all(|c| (800..1_200).contains(c)),
            "{counts:?}"
        );
    }

    #[test]
    fn a_patch_changes_only_what_it_names() {
        let job = input(base()).unwrap();
        let patch: JobPatch =
            serde_json::from_value(serde_json::json!({"schedule": {"every": "5m"}})).unwrap();
        let patched = patch.apply(&job).unwrap();
        assert_eq!(patched.schedule.every.as_deref(), Some("5m"));
        assert_eq!(patched.name, job.name);
        let bad: JobPatch =
            serde_json::from_value(serde_json::json!({"timezone": "Mars/Base"})).unwrap();
        assert_eq!(bad.apply(&job).unwrap_err().field, "timezone");
    }

    #[test]
    fn a_patch_null_clears_args_and_timeout_and_an_absent_field_keeps_them() {
        let mut doc = base();
        doc["args"] = serde_json::json!({"region": "eu"});
        doc["timeout_ms"] = serde_json::json!(60_000);
        let job = input(doc).unwrap();
        let patch = |json| {
            serde_json::from_value::<JobPatch>(json)
                .unwrap()
                .apply(&job)
        };
        let kept = patch(serde_json::json!({"priority": 7})).unwrap();
        assert_eq!(kept.args, serde_json::json!({"region": "eu"}));
        assert_eq!(kept.policy.timeout_ms, Some(60_000));
        let cleared = patch(serde_json::json!({"args": null, "timeout_ms": null})).unwrap();
        assert_eq!(cleared.args, serde_json::Value::Null);
        assert_eq!(cleared.policy.timeout_ms, None);
    }
}
