//! Workflows as the store keeps them: a definition per workflow, the definition pinned into
//! each workflow run, and each step of a run (`step_runs`), moved on by the transactions that
//! end step runs (`sql_store/workflows.rs`).

use async_trait::async_trait;

use super::{AttemptRecord, AuditWrite, Error, JobRecord, JobWrite, RunRecord};
use crate::states::StepState;

/// A row of `workflow_runs`: the definition a workflow run runs, pinned when it started.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct WorkflowRunRecord {
    /// The workflow's run (`runs.run_id`).
    pub run_id: i64,
    pub workflow_id: i64,
    pub definition_json: String,
    /// What every step is given as `params`.
    pub params_json: String,
    /// The workflow run this one runs again (its succeeded steps are not run again).
    pub rerun_of: Option<i64>,
    pub created_at_ms: i64,
    /// The flow key its run counts under (`runs.flow_key`), read with it; never written here.
    #[sqlx(default)]
    pub flow_key: Option<String>,
}

impl WorkflowRunRecord {
    /// The pinned definition and params, decoded; an error naming the run and what of it does
    /// not read (never zero steps or no params in its place).
    pub fn read(&self) -> Result<(crate::workflows::Definition, serde_json::Value), Error> {
        let unreadable = |what: &str, e: serde_json::Error| Error::Unreadable {
            what: format!("the stored {what} of workflow run {}", self.run_id),
            reason: e.to_string(),
        };
        let definition = crate::jobs::stored::lenient(&self.definition_json)
            .map_err(|e| unreadable("definition", e))?;
        let params =
            serde_json::from_str(&self.params_json).map_err(|e| unreadable("params", e))?;
        Ok((definition, params))
    }

    /// The input of step `name`'s run in this workflow run: the workflow run, its parameters,
    /// and the run, state and output of each step it `needs`. An upstream output that does not
    /// read is an error naming it, never a null in its place.
    pub fn step_input(
        &self,
        params: &serde_json::Value,
        name: &str,
        needs: &[crate::workflows::Need],
        steps: &[StepRunRecord],
    ) -> Result<String, Error> {
        let mut upstream = serde_json::Map::new();
        for up in needs
            .iter()
            .filter_map(|need| steps.iter().find(|s| s.step_name == need.step))
        {
            let output = match up.output_json.as_deref() {
                Some(stored) => serde_json::from_str(stored).map_err(|e| Error::Unreadable {
                    what: format!(
                        "the stored output of step {} of workflow run {}",
                        up.step_name, self.run_id
                    ),
                    reason: e.to_string(),
                })?,
                None => serde_json::Value::Null,
            };
            upstream.insert(
                up.step_name.clone(),
                serde_json::json!({ "run_id": up.run_id, "state": up.state, "output": output }),
            );
        }
        Ok(serde_json::json!({
            "workflow": { "id": self.workflow_id, "run_id": self.run_id, "step": name },
            "params": params,
            "upstream": upstream,
        })
        .to_string())
    }
}

/// A row of `step_runs`: one step of one workflow run.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StepRunRecord {
    pub workflow_run_id: i64,
    pub step_name: String,
    pub state: StepState,
    /// The step's own run, once it has one.
    pub run_id: Option<i64>,
    /// What the step's run answered (JSON), once it ended.
    pub output_json: Option<String>,
    pub updated_at_ms: i64,
}

/// The parameters a workflow run's steps are given: the `params` of its run's input (a
/// trigger's), else the workflow's own (`default_params`, JSON). An input that does not read is
/// an error naming the run, never the workflow's params in its place.
pub fn params_of(
    run_id: i64,
    run_input: Option<&str>,
    default_params: &str,
) -> Result<String, Error> {
    let Some(input) = run_input else {
        return Ok(default_params.to_owned());
    };
    let input: serde_json::Value = serde_json::from_str(input).map_err(|e| Error::Unreadable {
        what: format!("the stored input of workflow run {run_id}"),
        reason: e.to_string(),
    })?;
    Ok(input
        .get("params")
        .map_or_else(|| default_params.to_owned(), |p| p.to_string()))
}

/// A workflow's whole write: its row, the rows of the steps that are jobs of their own, its
/// definition naming them, and its start.
#[derive(Debug)]
pub struct WorkflowWrite<'a> {
    pub workflow_id: i64,
    /// The workflow's partition, which its own steps share.
    pub partition_id: i64,
    pub row: &'a JobWrite,
    /// `None` for a new workflow; the version an edit was made from otherwise.
    pub expected_version: Option<i64>,
    /// Started once written (a new workflow only; an edit keeps its state).
    pub start: bool,
    /// The steps' own jobs: id and row.
    pub steps: &'a [(i64, JobWrite)],
    pub definition_json: &'a str,
}

#[async_trait]
pub trait WorkflowStore: Send + Sync + std::fmt::Debug + 'static {
    /// Writes a workflow (new or edited) with its steps, definition and start, and `audit`,
    /// in one transaction: all of it or nothing; runs already started keep their definition.
    /// The workflow as it is then; `None` when an edit's workflow has moved on from
    /// `expected_version` (or is gone). A name or id already taken is a conflict naming it
    /// (`job id …`: the caller draws other ids).
    async fn workflow_write(
        &self,
        write: &WorkflowWrite<'_>,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<JobRecord>, Error>;

    async fn workflow_definition(&self, workflow_id: i64) -> Result<Option<String>, Error>;

    /// Starts pending runs of workflows, each in a transaction of its own: the guarded move to
    /// `running`, the workflow's definition pinned, a `waiting` row per step, and the runs of
    /// the steps that need nothing. `params` of each is its run's input's `params`, else
    /// `default_params`. Returns how many started.
    async fn workflow_runs_start(&self, runs: &[(RunRecord, String)]) -> Result<usize, Error>;

    /// A workflow run's pinned definition and its steps, by step name.
    async fn workflow_run_get(
        &self,
        run_id: i64,
    ) -> Result<Option<(WorkflowRunRecord, Vec<StepRunRecord>)>, Error>;

    /// Runs an ended workflow run again as a new one, with the definition and parameters it
    /// had: its succeeded steps keep their runs and outputs, the others run again. Returns the
    /// new run's id; `None` when `run_id` is no started workflow run; a conflict when it has not
    /// ended. `audit`, when given, is recorded with the change (here and below).
    async fn workflow_run_rerun(
        &self,
        run_id: i64,
        node_id: &str,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<i64>, Error>;

    /// Cancels an unfinished workflow run: its waiting steps are cancelled, and so are its
    /// running steps' runs and their attempts; returns the attempts that were running (their
    /// executors should be told), or `None` when the run was not unfinished.
    async fn workflow_run_cancel(
        &self,
        run_id: i64,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<Vec<AttemptRecord>>, Error>;
}
