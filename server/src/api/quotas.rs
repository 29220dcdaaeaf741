//! A namespace's quotas, checked where work is added: the jobs and workflows it holds, its
//! pending tasks, and the tasks this node takes from it per second. The quotas come from the
//! node's copy of the namespaces (at most 5 s old) and the counts from the database before the
//! write, so callers adding work at the same instant on several nodes can pass a quota
//! together by what they add; the rate is each node's own.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ApiError, ApiState};
use crate::store::{NamespaceId, NamespaceQuotas};

/// A namespace's quotas as the API shows and takes them; a field left out is no quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, try_from = "QuotasObject")]
pub(super) struct QuotasView {
    /// Jobs and workflows it may hold (their steps are not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0)]
    jobs: Option<i64>,
    /// Its tasks pending at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0)]
    pending_tasks: Option<i64>,
    /// Tasks each node takes from it per second (bursts of as many).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    enqueue_per_second: Option<i64>,
}

/// What `quotas` must be: an object (serde would take `[1, 2, 3]` for a struct's fields).
#[derive(Deserialize)]
struct QuotasObject(serde_json::Map<String, serde_json::Value>);

impl TryFrom<QuotasObject> for QuotasView {
    type Error = String;

    fn try_from(object: QuotasObject) -> Result<Self, Self::Error> {
        let mut quotas = QuotasView::default();
        for (key, value) in object.0 {
            let slot = match key.as_str() {
                "jobs" => &mut quotas.jobs,
                "pending_tasks" => &mut quotas.pending_tasks,
                "enqueue_per_second" => &mut quotas.enqueue_per_second,
                other => {
                    return Err(format!(
                        "unknown quota {other:?}: give jobs, pending_tasks or enqueue_per_second"
                    ));
                }
            };
            *slot = match value {
                serde_json::Value::Null => None,
                serde_json::Value::Number(n) if n.as_i64().is_some() => n.as_i64(),
                _ => return Err(format!("quota {key:?} is a whole number, or null for none")),
            };
        }
        Ok(quotas)
    }
}

impl QuotasView {
    pub(super) fn is_none(&self) -> bool {
        *self == QuotasView::default()
    }

    /// The quotas to store, or the field that cannot be one.
    pub(super) fn checked(self) -> Result<NamespaceQuotas, ApiError> {
        let at_least = |field: &str, value: Option<i64>, least: i64| match value {
            Some(v) if v < least => Err(ApiError::invalid(
                &format!("quotas.{field}"),
                format!("must be at least {least} (leave it out for no quota)"),
            )),
            _ => Ok(value),
        };
        Ok(NamespaceQuotas {
            max_jobs: at_least("jobs", self.jobs, 0)?,
            max_pending_tasks: at_least("pending_tasks", self.pending_tasks, 0)?,
            max_enqueue_per_second: at_least("enqueue_per_second", self.enqueue_per_second, 1)?,
        })
    }
}

impl From<NamespaceQuotas> for QuotasView {
    fn from(quotas: NamespaceQuotas) -> Self {
        Self {
            jobs: quotas.max_jobs,
            pending_tasks: quotas.max_pending_tasks,
            enqueue_per_second: quotas.max_enqueue_per_second,
        }
    }
}

/// The name and quotas of namespace `id` (none for a namespace deleted meanwhile).
async fn quotas_of(
    state: &ApiState,
    id: NamespaceId,
) -> Result<Option<(String, NamespaceQuotas)>, ApiError> {
    Ok(state
        .namespaces
        .get(id)
        .await?
        .map(|record| (record.name, record.quotas)))
}

/// Refuses `adding` jobs or workflows that would take namespace `id` past its quota.
pub(super) async fn check_jobs(
    state: &ApiState,
    id: NamespaceId,
    adding: usize,
) -> Result<(), ApiError> {
    let Some((
        name,
        NamespaceQuotas {
            max_jobs: Some(quota),
            ..
        },
    )) = quotas_of(state, id).await?
    else {
        return Ok(());
    };
    let (held, _) = state.store.namespace_counts(id).await?;
    refuse_past(&name, "jobs and workflows", quota, held, adding)
}

/// Refuses `adding` tasks that would take namespace `id` past its pending tasks' quota or
/// past its rate on this node.
pub(super) async fn check_tasks(
    state: &ApiState,
    id: NamespaceId,
    adding: usize,
) -> Result<(), ApiError> {
    let Some((name, quotas)) = quotas_of(state, id).await? else {
        return Ok(());
    };
    if let Some(quota) = quotas.max_pending_tasks {
        let (_, pending) = state.store.namespace_counts(id).await?;
        refuse_past(&name, "pending tasks", quota, pending, adding)?;
    }
    if let Some(rate) = quotas.max_enqueue_per_second {
        state
            .enqueue_rates
            .take(id, rate, adding)
            .map_err(|wait_s| ApiError::RateLimited {
                detail: format!(
                    "namespace {name:?} takes {rate} task(s) a second on each node; this batch of \
                 {adding} is over it: retry in {wait_s} s"
                ),
                retry_after_s: wait_s,
            })?;
    }
    Ok(())
}

fn refuse_past(
    namespace: &str,
    what: &str,
    quota: i64,
    held: i64,
    adding: usize,
) -> Result<(), ApiError> {
    let adding = i64::try_from(adding).unwrap_or(i64::MAX);
    if held.saturating_add(adding) <= quota {
        return Ok(());
    }
    Err(ApiError::QuotaExceeded(format!(
        "namespace {namespace:?} may hold {quota} {what} and holds {held}: {adding} more is over \
         its quota (the cluster's admins set it: PATCH /api/v1/namespaces/{namespace})"
    )))
}

/// Each namespace's tokens for tasks on this node: a bucket of `rate` tokens refilled at
/// `rate` a second.
#[derive(Debug, Default)]
pub struct EnqueueRates {
    buckets: Mutex<HashMap<NamespaceId, (f64, Instant)>>,
}

impl EnqueueRates {
    /// Takes `count` tokens of namespace `id`'s bucket; when it holds too few, takes none and
    /// says in how many whole seconds it will hold them. A batch larger than `rate` passes
    /// when the bucket is full and leaves it owing, so the next ones wait the longer.
    fn take(&self, id: NamespaceId, rate: i64, count: usize) -> Result<(), u64> {
        let rate = rate.max(1) as f64;
        let count = count as f64;
        let Ok(mut buckets) = self.buckets.lock() else {
            return Ok(());
        };
        let now = Instant::now();
        let (tokens, at) = buckets.entry(id).or_insert((rate, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * rate).min(rate);
        *at = now;
        let needed = count.min(rate);
        if needed <= *tokens {
            *tokens -= count;
            return Ok(());
        }
        Err((((needed - *tokens) / rate).ceil() as u64).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_lets_its_rate_through_then_asks_to_wait() {
        let rates = EnqueueRates::default();
        let ns = NamespaceId(2);
        assert_eq!(rates.take(ns, 10, 6), Ok(()));
        assert_eq!(rates.take(ns, 10, 4), Ok(()));
        assert_eq!(rates.take(ns, 10, 1), Err(1));
        // Another namespace has its own bucket.
        assert_eq!(rates.take(NamespaceId(3), 10, 10), Ok(()));
        // A batch larger than the rate passes a full bucket, and the next waits for the debt.
        let big = NamespaceId(4);
        assert_eq!(rates.take(big, 5, 12), Ok(()));
        assert_eq!(rates.take(big, 5, 1), Err(2));
    }

    #[test]
    fn quotas_are_an_object_of_whole_numbers() {
        let read = |text: &str| serde_json::from_str::<QuotasView>(text).map_err(|e| e.to_string());
        assert_eq!(
            read(r#"{"jobs": 5, "pending_tasks": null}"#).unwrap().jobs,
            Some(5)
        );
        assert!(read("[null, null]").is_err());
        assert!(
            read(r#"{"jobs": 1.5}"#)
                .unwrap_err()
                .contains("whole number")
        );
        assert!(
            read(r#"{"runs": 1}"#)
                .unwrap_err()
                .contains("unknown quota")
        );
    }

    #[test]
    fn quotas_below_their_least_value_name_their_field() {
        let view = QuotasView {
            enqueue_per_second: Some(0),
            ..QuotasView::default()
        };
        let err = view.checked().unwrap_err().to_string();
        assert!(err.contains("quotas.enqueue_per_second"), "{err}");
        let past = refuse_past("team-a", "pending tasks", 10, 9, 2).unwrap_err();
        assert!(
            past.to_string()
                .contains("may hold 10 pending tasks and holds 9"),
            "{past}"
        );
        assert!(refuse_past("team-a", "pending tasks", 10, 9, 1).is_ok());
    }
}
