//! Starting and stopping a job's or a workflow's schedule, and running one now: one rule for
//! both kinds, so the jobs, workflows and runs APIs (and the CLI and console, which call them)
//! cannot drift apart.

use axum::http::StatusCode;

use super::audit::Audit;
use super::job_views::definition_of;
use super::jobs::check_fires;
use super::{ApiError, ApiState};
use crate::states::{JobKind, JobState, RunState};
use crate::store::{JobRecord, RunRecord};

/// Starts `record`'s schedule: it fires from its next instant. One that would never fire, or
/// has fired all of `bounds.max_runs`, is refused naming the field; one deleted meanwhile is
/// missing. Starting a running one changes nothing. `audit`'s event goes with the change.
pub(super) async fn start(
    state: &ApiState,
    record: &JobRecord,
    audit: &Audit,
) -> Result<JobRecord, ApiError> {
    if record.state != JobState::Running {
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
    let event = audit.event(StatusCode::OK, None);
    let started = state
        .store
        .job_start(record.job_id, event.as_ref())
        .await?
        .ok_or_else(|| gone(record))?;
    audit.written();
    Ok(started)
}

/// Stops `record`'s schedule; runs under way finish. One deleted meanwhile is missing.
/// `audit`'s event goes with the change.
pub(super) async fn stop(
    state: &ApiState,
    record: &JobRecord,
    audit: &Audit,
) -> Result<JobRecord, ApiError> {
    let event = audit.event(StatusCode::OK, None);
    let stopped = state
        .store
        .job_stop(record.job_id, event.as_ref())
        .await?
        .ok_or_else(|| gone(record))?;
    audit.written();
    Ok(stopped)
}

/// A run of `record` now, outside its schedule and whatever its state, created by this node
/// and pending dispatch: `message` says why (a re-run names its run), `input` is what its
/// handler is given (a workflow's params, a child run's parent again). Calendars do not hold
/// it back: someone asked for this run. `audit`'s event goes with the run.
pub(super) async fn trigger(
    state: &ApiState,
    record: &JobRecord,
    (message, input): (Option<&str>, Option<&str>),
    audit: &Audit,
) -> Result<RunRecord, ApiError> {
    let event = audit.event(StatusCode::ACCEPTED, None);
    let run = state
        .store
        .run_insert_manual(
            record,
            state.view.node_id(),
            RunState::Pending,
            message,
            input,
            event.as_ref(),
        )
        .await?;
    audit.written();
    Ok(run)
}

fn noun(record: &JobRecord) -> &'static str {
    if record.kind == JobKind::Workflow {
        "workflow"
    } else {
        "job"
    }
}

fn gone(record: &JobRecord) -> ApiError {
    ApiError::missing(format!("{} {}", noun(record), record.job_id))
}
