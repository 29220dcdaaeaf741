//! A workflow's creation or edit as one write: its row, a hidden job for each step with a
//! handler of its own, the definition naming every step's job, its start, and the call's audit
//! event, all in one transaction (`WorkflowStore::workflow_write`). Ids are drawn here, so the
//! definition and the view (with what an edit changed) are known before anything is written.

use std::collections::{HashMap, HashSet};

use axum::http::StatusCode;

use super::audit::Audit;
use super::changes::Changes;
use super::jobs::write_of;
use super::workflows::{WorkflowView, view_with};
use super::{ApiError, ApiState};
use crate::jobs::{JobDefinition, new_job_id, partition_of};
use crate::states::JobKind;
use crate::store::{self, JobRecord, JobWrite, NamespaceId, StoredPolicy, WorkflowWrite};
use crate::workflows::input::{NeedInput, WorkflowInput};
use crate::workflows::{Definition, Step};

/// Ids drawn at most: a job id holds 4,096 per millisecond, so a clash is rare and two are
/// rarer still.
const ID_DRAWS: usize = 20;

/// What an edit's view moves on at every write, left out of what it changed.
const VIEW_BOOKKEEPING: &[&str] = &["version", "updated_at", "last_fired_at", "partition"];

/// The steps of version `version` of workflow `workflow_id`, planned: the rows of the steps
/// that are jobs of their own (each with a fresh id), their definitions by id, and the
/// workflow's definition naming every step's job.
struct Planned {
    rows: Vec<(i64, JobWrite)>,
    own: HashMap<i64, JobDefinition>,
    definition: Definition,
}

fn plan(
    state: &ApiState,
    namespace: NamespaceId,
    workflow_id: i64,
    version: i64,
    input: &WorkflowInput,
) -> Result<Planned, ApiError> {
    let mut taken = HashSet::from([workflow_id]);
    let mut planned = Planned {
        rows: Vec::new(),
        own: HashMap::new(),
        definition: Definition::default(),
    };
    for (i, step) in input.steps.iter().enumerate() {
        let name = format!("workflow {workflow_id} v{version} {}", step.name);
        let job_id = match step.own_job(i, &name)? {
            Some(own) => {
                let mut id = new_job_id(state.clock.now_ms());
                while !taken.insert(id) {
                    id = new_job_id(state.clock.now_ms());
                }
                let mut row = write_of(namespace, &own);
                row.kind = JobKind::Step;
                planned.rows.push((id, row));
                planned.own.insert(id, own);
                id
            }
            None => step.job_id().unwrap_or_default(),
        };
        planned.definition.steps.push(Step {
            name: step.name.clone(),
            job_id,
            needs: step.needs.iter().map(NeedInput::need).collect(),
        });
    }
    Ok(planned)
}

/// `record` as it reads once `row` is written over it (an edit's view before it is made).
fn as_written(record: &JobRecord, row: &JobWrite) -> JobRecord {
    JobRecord {
        name: row.name.clone(),
        app_name: row.app_name.clone(),
        handler_name: row.handler_name.clone(),
        schedule_json: row.schedule_json.clone(),
        timezone: row.timezone.clone(),
        args_json: row.args_json.clone(),
        stored_policy: StoredPolicy::from(row.policy_json.clone()),
        ..record.clone()
    }
}

/// A new workflow of `namespace`, `row` with the steps of `input`, started when `start`:
/// the workflow and its view.
pub(super) async fn create(
    state: &ApiState,
    audit: &Audit,
    namespace: NamespaceId,
    row: &JobWrite,
    input: &WorkflowInput,
    start: bool,
) -> Result<WorkflowView, ApiError> {
    let mut draw = 0;
    loop {
        draw += 1;
        let workflow_id = new_job_id(state.clock.now_ms());
        let planned = plan(state, namespace, workflow_id, 1, input)?;
        let text = definition_text(&planned.definition)?;
        let write = WorkflowWrite {
            workflow_id,
            partition_id: partition_of(workflow_id, state.partition_count),
            row,
            expected_version: None,
            start,
            steps: &planned.rows,
            definition_json: &text,
        };
        let event = audit.event(StatusCode::CREATED, None);
        match state.store.workflow_write(&write, event.as_ref()).await {
            Ok(Some(record)) => {
                audit.written();
                return view_with(state, record, &planned.definition, &planned.own).await;
            }
            // An insert reads its row back: none would be a database that lost it.
            Ok(None) => return Err(store::Error::NotInitialised.into()),
            Err(store::Error::Conflict { what })
                if what.starts_with("job id") && draw < ID_DRAWS => {}
            Err(err) => return Err(err.into()),
        }
    }
}

/// Workflow `record` (whose view is `before`) rewritten as `row` with the steps of `input`:
/// the workflow's view and what the edit changed.
pub(super) async fn update(
    state: &ApiState,
    audit: &Audit,
    record: &JobRecord,
    before: &WorkflowView,
    row: &JobWrite,
    input: &WorkflowInput,
) -> Result<(WorkflowView, Changes), ApiError> {
    let id = record.job_id;
    let after_row = as_written(record, row);
    let mut draw = 0;
    loop {
        draw += 1;
        let planned = plan(state, record.namespace_id, id, record.version + 1, input)?;
        let text = definition_text(&planned.definition)?;
        let after = view_with(state, after_row.clone(), &planned.definition, &planned.own).await?;
        let changes = Changes::between_except(before, &after, VIEW_BOOKKEEPING);
        let write = WorkflowWrite {
            workflow_id: id,
            partition_id: record.partition_id,
            row,
            expected_version: Some(record.version),
            start: false,
            steps: &planned.rows,
            definition_json: &text,
        };
        let event = audit.event(StatusCode::OK, Some(&changes));
        match state.store.workflow_write(&write, event.as_ref()).await {
            Ok(Some(updated)) => {
                audit.written();
                let view = view_with(state, updated, &planned.definition, &planned.own).await?;
                return Ok((view, changes));
            }
            Ok(None) => {
                return Err(ApiError::Conflict(format!(
                    "workflow {id} changed while it was being updated; retry"
                )));
            }
            Err(store::Error::Conflict { what })
                if what.starts_with("job id") && draw < ID_DRAWS => {}
            Err(err) => return Err(err.into()),
        }
    }
}

fn definition_text(definition: &Definition) -> Result<String, ApiError> {
    serde_json::to_string(definition).map_err(|e| ApiError::invalid("steps", e.to_string()))
}
