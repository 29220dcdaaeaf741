//! Attempt logs: executors append the lines their handlers log (`POST
//! /api/v1/executors/logs`), operators read them a page at a time while the attempt runs and
//! after (`GET /api/v1/runs/{id}/logs`). An XXL-JOB executor keeps its own log: the node reads
//! it from the executor's `/log` by line.

use axum::Json;
use axum::extract::{Extension, State};
use carillon_protocol::{LogBatch, LogBatchAccepted};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Principal;
use super::error::Problem;
use super::executors::check_owner;
use super::params::{IdParam, QueryParams};
use super::{ApiError, ApiState, rfc3339};
use crate::store::{AttemptRecord, NewLogLine, TRUNCATED_LINE, executor_protocol};

/// The longest line kept, in bytes: longer ones are cut (at a character boundary).
const MAX_LINE_BYTES: usize = 8 * 1024;

/// Stores the lines of a batch within each attempt's caps.
#[utoipa::path(post, operation_id = "appendAttemptLogs", path = "/executors/logs", tag = "executor protocol", request_body = LogBatch,
    responses(
        (status = 200, description = "Stored (a line sent again is stored once); `refused` names the attempts that are not this executor's", body = LogBatchAccepted),
        (status = 400, description = "A line number below 1", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn append(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    super::body::JsonBody(batch): super::body::JsonBody<LogBatch>,
) -> Result<Json<LogBatchAccepted>, ApiError> {
    check_owner(&state, &principal, &batch.executor_id).await?;
    let mut lines: Vec<(i64, Vec<NewLogLine>)> = Vec::with_capacity(batch.attempts.len());
    // An attempt whose handle is missing or not its own is refused like another executor's.
    let mut unquoted = Vec::new();
    for (i, attempt) in batch.attempts.into_iter().enumerate() {
        let quoted = attempt.handle.as_deref().is_some_and(|handle| {
            state
                .dispatch
                .handles()
                .verifies(attempt.attempt_id, handle)
        });
        let mut kept = Vec::with_capacity(attempt.lines.len());
        for (j, line) in attempt.lines.into_iter().enumerate() {
            if !(1..TRUNCATED_LINE).contains(&line.line) {
                return Err(ApiError::invalid(
                    &format!("attempts[{i}].lines[{j}].line"),
                    format!("{} is outside 1..{TRUNCATED_LINE}", line.line),
                ));
            }
            kept.push(NewLogLine {
                line_no: line.line,
                at_ms: line.at_ms,
                level: level_of(&line.level),
                message: cut(line.message, MAX_LINE_BYTES),
            });
        }
        if quoted {
            lines.push((attempt.attempt_id, kept));
        } else {
            unquoted.push(attempt.attempt_id);
        }
    }
    let appended = state
        .store
        .attempt_logs_append(&batch.executor_id, &lines, state.log_caps)
        .await?;
    let mut refused = appended.refused;
    refused.extend(unquoted);
    Ok(Json(LogBatchAccepted {
        stored: appended.stored,
        dropped: appended.dropped,
        refused,
    }))
}

/// A level as stored: one of the five, upper case.
fn level_of(level: &str) -> String {
    let upper = level.trim().to_ascii_uppercase();
    match upper.as_str() {
        "ERROR" | "WARN" | "INFO" | "DEBUG" | "TRACE" => upper,
        "WARNING" => "WARN".to_owned(),
        _ => "INFO".to_owned(),
    }
}

/// `text` cut to at most `max` bytes, at a character boundary, marked when cut.
fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    text
}

/// The query of `/runs/{id}/logs`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct LogsQuery {
    /// The attempt (its id; default: the run's latest attempt).
    attempt: Option<i64>,
    /// Lines after this line number (default 0: from the first).
    #[param(minimum = 0)]
    after: Option<i64>,
    /// Most lines to return, 1 to 1000 (default 500).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// One page of an attempt's log.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct LogPage {
    run_id: i64,
    /// The attempt shown; null while the run has none.
    attempt_id: Option<i64>,
    /// Its state (`pending`, `running`, `succeeded`…).
    attempt_state: Option<String>,
    /// Every attempt of the run, oldest first, to ask for another.
    attempts: Vec<i64>,
    lines: Vec<LogLineView>,
    /// Ask again with `after` = this for the lines that follow.
    next_after: i64,
    /// No line will follow: the attempt has ended and this page reached the end of its log.
    done: bool,
    /// The log reached its cap and later lines were dropped.
    truncated: bool,
    /// `node` (shipped by the executor and kept with the run) or `executor` (read from an
    /// XXL-JOB executor's `/log`).
    source: String,
    /// Why the log could not be read (an XXL-JOB executor that does not answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    unavailable: Option<String>,
}

/// One line. Plain text: never markup.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct LogLineView {
    line: i64,
    at: Option<String>,
    level: String,
    message: String,
}

/// A page of the lines a run's attempt logged, following it while it runs.
#[utoipa::path(get, operation_id = "getRunLogs", path = "/runs/{id}/logs", tag = "runs",
    params(("id" = i64, Path, description = "The run's id"), LogsQuery),
    responses(
        (status = 200, description = "One page of the attempt's log", body = LogPage),
        (status = 404, description = "No such run, or no such attempt of it", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn page(
    State(state): State<ApiState>,
    IdParam(id): IdParam,
    QueryParams(query): QueryParams<LogsQuery>,
) -> Result<Json<LogPage>, ApiError> {
    super::runs::load_run(&state, id, "run").await?;
    let limit = query.limit.unwrap_or(500);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("{limit} is outside 1..=1000"),
        ));
    }
    let after = query.after.unwrap_or(0);
    if after < 0 {
        return Err(ApiError::invalid("after", "must be 0 or more"));
    }
    let mut attempts = state.store.attempts_of_run(id).await?;
    attempts.sort_by_key(|a| a.attempt_id);
    let ids: Vec<i64> = attempts.iter().map(|a| a.attempt_id).collect();
    let shown = match query.attempt {
        Some(wanted) => Some(
            attempts
                .iter()
                .find(|a| a.attempt_id == wanted)
                .cloned()
                .ok_or_else(|| ApiError::missing(format!("attempt {wanted} of run {id}")))?,
        ),
        None => attempts.last().cloned(),
    };
    let Some(attempt) = shown else {
        return Ok(Json(LogPage {
            run_id: id,
            attempt_id: None,
            attempt_state: None,
            attempts: ids,
            lines: Vec::new(),
            next_after: after,
            done: false,
            truncated: false,
            source: "node".to_owned(),
            unavailable: None,
        }));
    };
    let ended = !attempt.state.is_live();
    let mut page = if attempt
        .executor_id
        .as_deref()
        .is_some_and(executor_protocol::is_xxl_id)
    {
        from_executor(&state, &attempt, after, limit).await?
    } else {
        from_node(&state, &attempt, after, limit).await?
    };
    page.run_id = id;
    page.attempts = ids;
    page.done = ended && page.done;
    Ok(Json(page))
}

/// A page of the lines the executor shipped; `done` here means the page reached the end.
async fn from_node(
    state: &ApiState,
    attempt: &AttemptRecord,
    after: i64,
    limit: i64,
) -> Result<LogPage, ApiError> {
    let lines = state
        .store
        .attempt_logs_page(attempt.attempt_id, after, limit)
        .await?;
    let truncated = lines.last().is_some_and(|l| l.line_no == TRUNCATED_LINE);
    let next_after = lines.last().map_or(after, |l| l.line_no);
    Ok(LogPage {
        run_id: attempt.run_id,
        attempt_id: Some(attempt.attempt_id),
        attempt_state: Some(attempt.state.as_str().to_owned()),
        attempts: Vec::new(),
        done: (lines.len() as i64) < limit || truncated,
        lines: lines
            .into_iter()
            .map(|l| LogLineView {
                line: l.line_no,
                at: rfc3339(l.at_ms),
                level: l.level,
                message: l.message,
            })
            .collect(),
        next_after,
        truncated,
        source: "node".to_owned(),
        unavailable: None,
    })
}

/// A page read from an XXL-JOB executor's `/log`, whose lines are numbered from 1.
async fn from_executor(
    state: &ApiState,
    attempt: &AttemptRecord,
    after: i64,
    limit: i64,
) -> Result<LogPage, ApiError> {
    let mut page = LogPage {
        run_id: attempt.run_id,
        attempt_id: Some(attempt.attempt_id),
        attempt_state: Some(attempt.state.as_str().to_owned()),
        attempts: Vec::new(),
        lines: Vec::new(),
        next_after: after,
        done: false,
        truncated: false,
        source: "executor".to_owned(),
        unavailable: None,
    };
    let executors = state.store.executors_list(None).await?;
    let Some(executor) = executors
        .executors
        .iter()
        .find(|e| Some(&e.executor_id) == attempt.executor_id.as_ref())
    else {
        page.unavailable = Some("the XXL-JOB executor is no longer registered".to_owned());
        page.done = true;
        return Ok(page);
    };
    match state
        .dispatch
        .xxl_log(
            &executor.address,
            attempt.created_at_ms,
            attempt.attempt_id,
            after + 1,
        )
        .await
    {
        Ok(read) => {
            let numbered = (read.from_line_num..).zip(read.log_content.lines());
            for (number, text) in numbered.take(usize::try_from(limit).unwrap_or(0)) {
                page.lines.push(LogLineView {
                    line: number,
                    at: None,
                    level: "INFO".to_owned(),
                    message: cut(text.to_owned(), MAX_LINE_BYTES),
                });
            }
            page.next_after = page.lines.last().map_or(after, |l| l.line);
            page.done = page.lines.is_empty() || read.is_end && (page.lines.len() as i64) < limit;
        }
        Err(why) => {
            page.unavailable = Some(format!("the XXL-JOB executor's log cannot be read: {why}"));
            page.done = true;
        }
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_at_a_character_boundary_and_marked() {
        let text = "é".repeat(10);
        let cut_text = cut(text, 8);
        assert!(cut_text.len() <= 8 + '…'.len_utf8(), "{cut_text}");
        assert!(cut_text.ends_with('…'));
        assert_eq!(cut("short".to_owned(), 8), "short");
        assert_eq!(level_of("warning"), "WARN");
        assert_eq!(level_of("<b>"), "INFO");
    }
}
