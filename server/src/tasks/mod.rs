//! Tasks: delayed one-shot work that applications enqueue by the million ("cancel this order
//! in 30 minutes"). A task is not a job: it has no name and no schedule, only a handler of an
//! app, arguments, the instant it is due, and how it runs (priority, retry, timeout, balance).
//! It waits in the database, `pending`, until the owner of its partition reads it in the
//! window due next (`firer`) and fires it; from then on it is a run like any other (attempts,
//! the run log, dead letters, metrics, the console).
//!
//! This file is the task document and its checks, without I/O. A batch is checked whole: any
//! bad task refuses the batch, each error naming the task's index and its field.

pub mod firer;
pub mod ids;

use serde::Deserialize;

use crate::jobs::{Balance, Delivery, Flow, ItemError, JobError, JobPolicy, Retry, validate_work};
use crate::schedule::parse_instant;

/// Most tasks in one `POST /api/v1/tasks`.
pub const MAX_BATCH: usize = 10_000;
/// Longest idempotency key, in characters.
pub const MAX_KEY: usize = 255;
/// How far ahead a task may be due unless the node says otherwise (`tasks.horizon`): a year.
pub const DEFAULT_HORIZON_MS: i64 = 366 * 24 * 3_600_000;

/// One task of `POST /api/v1/tasks`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskInput {
    /// The executor app whose executors run it. An app no executor has registered yet is
    /// accepted (its executors may come later) and shown as unknown.
    pub app: String,
    pub handler: String,
    #[serde(default)]
    pub args: serde_json::Value,
    /// When it is due, as RFC 3339 (`2026-11-26T02:00:00Z`); a past instant is due now.
    #[serde(default)]
    pub at: Option<String>,
    /// Or due this long after it is enqueued: a duration (`30m`, `3d`, `1h30m`) or a number
    /// of milliseconds. Neither `at` nor `delay`: due now.
    #[serde(default)]
    #[schema(value_type = Option<serde_json::Value>)]
    pub delay: Option<Delay>,
    /// The client's idempotency key: while a task with this key is unfinished, enqueueing
    /// the key again returns that task instead of creating another.
    #[serde(default)]
    pub key: Option<String>,
    /// 0 (lowest) to 10, default 5.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 10)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub retry: Option<Retry>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub balance: Option<Balance>,
    /// `at_least_once` (the default), `at_most_once` or `exactly_once_effect`.
    #[serde(default)]
    pub delivery: Option<Delivery>,
    /// Flow control: the key the task's run is counted under (with jobs naming it too) and
    /// its limits; `fifo` runs the key's tasks one at a time, in order.
    #[serde(default)]
    pub flow: Option<Flow>,
}

/// A delay: a duration in words or a number of milliseconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Delay {
    Millis(u64),
    Text(String),
}

/// The body of `POST /api/v1/tasks`: one task, or `{"tasks": [...]}`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum TaskBatch {
    Many { tasks: Vec<TaskInput> },
    One(Box<TaskInput>),
}

impl TaskBatch {
    pub fn into_tasks(self) -> Vec<TaskInput> {
        match self {
            Self::Many { tasks } => tasks,
            Self::One(task) => vec![*task],
        }
    }
}

/// Why a batch was refused: every bad task, by index and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} bad task(s); the first: tasks[{}].{}", .errors.len(), .errors[0].index, .errors[0].field)]
pub struct BatchError {
    pub errors: Vec<ItemError>,
}

/// A checked task, ready to store.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskDefinition {
    pub app: String,
    pub handler: String,
    pub args_json: String,
    pub due_at_ms: i64,
    pub key: Option<String>,
    pub priority: i32,
    /// The job policy document of what the task set (`{}` when nothing).
    pub policy_json: String,
}

/// What a task sets of a job's policy; the rest stays the default.
#[derive(Debug, Clone, Default, serde::Serialize)]
struct TaskPolicy {
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry: Option<Retry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    balance: Option<Balance>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delivery: Option<Delivery>,
    #[serde(skip_serializing_if = "Option::is_none")]
    flow: Option<Flow>,
}

/// Checks a batch enqueued at `now_ms`, at most `horizon_ms` ahead; all or nothing.
pub fn check_batch(
    tasks: Vec<TaskInput>,
    now_ms: i64,
    horizon_ms: i64,
) -> Result<Vec<TaskDefinition>, BatchError> {
    let mut errors = Vec::new();
    if tasks.is_empty() {
        errors.push(ItemError {
            index: 0,
            field: "tasks".to_owned(),
            message: "is empty: enqueue at least one task".to_owned(),
        });
    }
    if tasks.len() > MAX_BATCH {
        errors.push(ItemError {
            index: MAX_BATCH,
            field: "tasks".to_owned(),
            message: format!(
                "holds {} tasks; the limit is {MAX_BATCH} per request",
                tasks.len()
            ),
        });
    }
    let mut checked = Vec::with_capacity(tasks.len());
    let mut keys = std::collections::HashMap::new();
    for (index, task) in tasks.into_iter().enumerate() {
        if let Some(key) = &task.key
            && let Some(first) = keys.insert(key.clone(), index)
        {
            errors.push(ItemError {
                index,
                field: "key".to_owned(),
                message: format!("{key:?} is also the key of tasks[{first}] in this batch"),
            });
        }
        match check_task(task, now_ms, horizon_ms) {
            Ok(task) => checked.push(task),
            Err(err) => errors.push(ItemError {
                index,
                field: err.field,
                message: err.message,
            }),
        }
    }
    if errors.is_empty() {
        Ok(checked)
    } else {
        Err(BatchError { errors })
    }
}

/// Checks one task.
pub fn check_task(
    task: TaskInput,
    now_ms: i64,
    horizon_ms: i64,
) -> Result<TaskDefinition, JobError> {
    let set = TaskPolicy {
        priority: task.priority,
        retry: task.retry.clone(),
        timeout_ms: task.timeout_ms,
        balance: task.balance,
        delivery: task.delivery,
        flow: task.flow.clone(),
    };
    let defaults = JobPolicy::default();
    let policy = JobPolicy {
        priority: set.priority.unwrap_or(defaults.priority),
        retry: set.retry.clone().unwrap_or_default(),
        timeout_ms: set.timeout_ms,
        balance: set.balance.unwrap_or_default(),
        delivery: set.delivery.unwrap_or_default(),
        ..defaults
    };
    validate_work(&task.app, &task.handler, &task.args, &policy)?;
    if let Some(flow) = &task.flow {
        flow.validate()?;
        flow.key_of(0, &task.args)
            .map_err(|why| JobError::new("flow.key_arg", why))?;
    }
    if let Some(key) = &task.key {
        if key.is_empty() || key.chars().count() > MAX_KEY {
            return Err(JobError::new(
                "key",
                format!("must be 1 to {MAX_KEY} characters"),
            ));
        }
        if key.chars().any(char::is_control) {
            return Err(JobError::new("key", "must not hold control characters"));
        }
    }
    let due_at_ms = due_at(&task, now_ms)?;
    if due_at_ms > now_ms.saturating_add(horizon_ms) {
        let days = horizon_ms / (24 * 3_600_000);
        let field = if task.at.is_some() { "at" } else { "delay" };
        return Err(JobError::new(
            field,
            format!("is more than {days} days ahead (the node's tasks.horizon)"),
        ));
    }
    Ok(TaskDefinition {
        app: task.app,
        handler: task.handler,
        args_json: serde_json::to_string(&task.args).unwrap_or_else(|_| "null".to_owned()),
        due_at_ms,
        key: task.key,
        priority: policy.priority,
        policy_json: serde_json::to_string(&set).unwrap_or_else(|_| "{}".to_owned()),
    })
}

fn due_at(task: &TaskInput, now_ms: i64) -> Result<i64, JobError> {
    match (&task.at, &task.delay) {
        (Some(_), Some(_)) => Err(JobError::new("delay", "give `at` or `delay`, not both")),
        (Some(at), None) => Ok(parse_instant(at, chrono_tz::UTC, "at")?.timestamp_millis()),
        (None, Some(Delay::Millis(ms))) => Ok(now_ms.saturating_add_unsigned(*ms)),
        (None, Some(Delay::Text(text))) => {
            let delay = crate::schedule::parse_duration(text, "delay")?;
            Ok(now_ms.saturating_add(delay.num_milliseconds()))
        }
        (None, None) => Ok(now_ms),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn task(extra: serde_json::Value) -> TaskInput {
        let mut doc = serde_json::json!({"app": "billing", "handler": "charge"});
        for (k, v) in extra.as_object().unwrap() {
            doc[k] = v.clone();
        }
        serde_json::from_value(doc).unwrap()
    }

    #[test]
    fn a_task_is_due_now_after_a_delay_or_at_an_instant() {
        let now = check_task(task(serde_json::json!({})), NOW, DEFAULT_HORIZON_MS).unwrap();
        assert_eq!(now.due_at_ms, NOW);
        assert_eq!(now.policy_json, "{}");
        assert_eq!(now.priority, 5);
        let later = check_task(
            task(serde_json::json!({"delay": "30m"})),
            NOW,
            DEFAULT_HORIZON_MS,
        );
        assert_eq!(later.unwrap().due_at_ms, NOW + 30 * 60_000);
        let ms = check_task(
            task(serde_json::json!({"delay": 1500})),
            NOW,
            DEFAULT_HORIZON_MS,
        );
        assert_eq!(ms.unwrap().due_at_ms, NOW + 1_500);
        let at = check_task(
            task(serde_json::json!({"at": "2027-01-15T08:30:00Z", "priority": 9})),
            NOW,
            DEFAULT_HORIZON_MS,
        )
        .unwrap();
        // NOW is 2027-01-15T08:00:00Z.
        assert_eq!(at.due_at_ms, NOW + 30 * 60_000);
        assert_eq!(at.policy_json, r#"{"priority":9}"#);
    }

    #[test]
    fn a_bad_batch_names_every_bad_task_by_index_and_field() {
        let batch = vec![
            task(serde_json::json!({})),
            task(serde_json::json!({"priority": 11})),
            task(serde_json::json!({"delay": "400d"})),
            task(serde_json::json!({"at": "tomorrow"})),
            task(serde_json::json!({"key": "k"})),
            task(serde_json::json!({"key": "k"})),
        ];
        let err = check_batch(batch, NOW, DEFAULT_HORIZON_MS).unwrap_err();
        let named: Vec<(usize, &str)> = err
            .errors
            .iter()
            .map(|e| (e.index, e.field.as_str()))
            .collect();
        assert_eq!(
            named,
            [(1, "priority"), (2, "delay"), (3, "at"), (5, "key")]
        );
        assert!(err.errors[1].message.contains("366 days"), "{err:?}");
    }

    #[test]
    fn a_batch_is_one_to_ten_thousand_tasks() {
        assert!(check_batch(Vec::new(), NOW, DEFAULT_HORIZON_MS).is_err());
        let too_many = vec![task(serde_json::json!({})); MAX_BATCH + 1];
        let err = check_batch(too_many, NOW, DEFAULT_HORIZON_MS).unwrap_err();
        assert_eq!(err.errors[0].field, "tasks");
        let most = vec![task(serde_json::json!({})); MAX_BATCH];
        assert_eq!(
            check_batch(most, NOW, DEFAULT_HORIZON_MS).unwrap().len(),
            MAX_BATCH
        );
    }
}
