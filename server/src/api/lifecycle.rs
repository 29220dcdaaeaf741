//! Starting and stopping a job's or a workflow's schedule: one rule for both kinds, so the
//! jobs and workflows APIs (and the CLI and console, which call them) cannot drift apart.

use super::jobs::{check_fires, definition_of};
use super::{ApiError, ApiState};
use crate::store::{JobRecord, job_kind, job_state};

/// Starts `record`'s schedule: it fires from its next instant. One that would never fire, or
/// has fired all of `bounds.max_runs`, is refused naming the field; one deleted meanwhile is
/// missing. Starting a running one changes nothing.
pub(super) async fn start(state: &ApiState, record: &JobRecord) -> Result<JobRecord, ApiError> {
    if record.state != job_state::RUNNING {
        let definition = definition_of(record)?;
        check_fires(state, &definition)?;
        if let Some(max) = definition.policy.bounds.as_ref().and_then(|b| b.max_runs)
            && record.fired_count >= i64::try_from(max).unwrap_or(i64::MAX)
        {
            return Err(ApiError::invalid(
                "bounds.max_runs",
                format!(
                    "the {} has fired {} of its {max} runs: raise bounds.max_runs to run it again",
                    noun(record),
                    record.fired_count
                ),
            ));
        }
    }
    state
        .store
        .job_start(record.job_id)
        .await?
        .ok_or_else(|| gone(record))
}

/// Stops `record`'s schedule; runs under way finish. One deleted meanwhile is missing.
pub(super) async fn stop(state: &ApiState, record: &JobRecord) -> Result<JobRecord, ApiError> {
    state
        .store
        .job_stop(record.job_id)
        .await?
        .ok_or_else(|| gone(record))
}

fn noun(record: &JobRecord) -> &'static str {
    if record.kind == job_kind::WORKFLOW {
        "workflow"
    } else {
        "job"
    }
}

fn gone(record: &JobRecord) -> ApiError {
    ApiError::missing(format!("{} {}", noun(record), record.job_id))
}
