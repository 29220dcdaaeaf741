//! The workflow tables of the in-memory driver: pinned runs and their steps, with the guards
//! the SQL statements keep (a step ends only while running, starts or closes only while
//! waiting).

use async_trait::async_trait;

use super::MemoryDb;
use crate::states::{AttemptState, RunState, StepState, TriggerKind};
use crate::store::error::Error;
use crate::store::namespace_records::NamespaceId;
use crate::store::rules::run_end::RunEndTx;
use crate::store::rules::workflow_start::{NewStep, RunHead, WorkflowStartTx};
use crate::store::rules::workflows::{StepEnd, WorkflowTx};
use crate::store::workflow_records::{StepRunRecord, WorkflowRunRecord};

impl MemoryDb {
    /// The step, if it is in state `from`.
    fn step_in(
        &mut self,
        workflow_run_id: i64,
        name: &str,
        from: StepState,
    ) -> Option<&mut StepRunRecord> {
        self.step_runs.iter_mut().find(|s| {
            s.workflow_run_id == workflow_run_id && s.step_name == name && s.state == from
        })
    }

    /// The steps of one workflow run, by name.
    pub(crate) fn steps(&self, workflow_run_id: i64) -> Vec<&StepRunRecord> {
        let mut steps: Vec<&StepRunRecord> = self
            .step_runs
            .iter()
            .filter(|s| s.workflow_run_id == workflow_run_id)
            .collect();
        steps.sort_by(|a, b| a.step_name.cmp(&b.step_name));
        steps
    }
}

#[async_trait]
impl WorkflowTx for MemoryDb {
    async fn running_steps_of_runs(
        &mut self,
        run_ids: &[i64],
    ) -> Result<Vec<StepRunRecord>, Error> {
        let mut steps: Vec<StepRunRecord> = self
            .step_runs
            .iter()
            .filter(|s| {
                s.state == StepState::Running && s.run_id.is_some_and(|r| run_ids.contains(&r))
            })
            .cloned()
            .collect();
        steps.sort_by(|a, b| {
            (a.workflow_run_id, &a.step_name).cmp(&(b.workflow_run_id, &b.step_name))
        });
        Ok(steps)
    }

    async fn lock_run(&mut self, run_id: i64) -> Result<Option<String>, Error> {
        Ok(self
            .runs
            .iter()
            .find(|r| r.run_id == run_id)
            .map(|r| r.node_id.clone()))
    }

    async fn end_steps(&mut self, workflow_run_id: i64, ends: &[StepEnd<'_>]) -> Result<(), Error> {
        for end in ends {
            if let Some(step) = self.step_in(workflow_run_id, end.step_name, StepState::Running) {
                step.state = end.state.to_owned();
                step.output_json.clone_from(&end.output);
            }
        }
        Ok(())
    }

    async fn pinned_run(&mut self, run_id: i64) -> Result<Option<WorkflowRunRecord>, Error> {
        Ok(self
            .workflow_runs
            .iter()
            .find(|w| w.run_id == run_id)
            .map(|w| WorkflowRunRecord {
                flow_key: self.flow.run_keys.get(&run_id).cloned(),
                ..w.clone()
            }))
    }

    async fn steps_of(&mut self, workflow_run_id: i64) -> Result<Vec<StepRunRecord>, Error> {
        Ok(self.steps(workflow_run_id).into_iter().cloned().collect())
    }

    async fn close_waiting_step(
        &mut self,
        workflow_run_id: i64,
        step_name: &str,
        state: StepState,
        output: Option<&str>,
    ) -> Result<(), Error> {
        if let Some(step) = self.step_in(workflow_run_id, step_name, StepState::Waiting) {
            step.state = state.to_owned();
            step.output_json = output.map(str::to_owned);
        }
        Ok(())
    }

    async fn start_steps(
        &mut self,
        workflow_run_id: i64,
        started: &[(&str, i64)],
    ) -> Result<(), Error> {
        for (name, run_id) in started {
            if let Some(step) = self.step_in(workflow_run_id, name, StepState::Waiting) {
                step.state = StepState::Running;
                step.run_id = Some(*run_id);
            }
        }
        Ok(())
    }
}

#[async_trait]
impl WorkflowStartTx for MemoryDb {
    async fn start_run_if_pending(&mut self, run_id: i64) -> Result<bool, Error> {
        let Some(run) = self
            .runs
            .iter_mut()
            .find(|r| r.run_id == run_id && r.state == RunState::Pending)
        else {
            return Ok(false);
        };
        run.state = RunState::Running;
        run.started = true;
        Ok(true)
    }

    async fn run_head(&mut self, run_id: i64) -> Result<Option<RunHead>, Error> {
        Ok(self
            .runs
            .iter()
            .find(|r| r.run_id == run_id)
            .map(|r| RunHead {
                job_id: r.job_id,
                node_id: r.node_id.clone(),
                state: r.state,
                flow_key: self.flow.run_keys.get(&r.run_id).cloned(),
            }))
    }

    async fn run_input(&mut self, run_id: i64) -> Result<Option<String>, Error> {
        Ok(self
            .runs
            .iter()
            .find(|r| r.run_id == run_id)
            .and_then(|r| r.input.clone()))
    }

    async fn workflow_definition(&mut self, workflow_id: i64) -> Result<Option<String>, Error> {
        Ok(self.workflow_definitions.get(&workflow_id).cloned())
    }

    async fn workflow_params(&mut self, workflow_id: i64) -> Result<Option<String>, Error> {
        Ok(self
            .jobs
            .get(&workflow_id)
            .filter(|j| j.workflow)
            .map(|j| j.args_json.clone()))
    }

    async fn insert_pinned_run(&mut self, pinned: &WorkflowRunRecord) -> Result<(), Error> {
        if self.workflow_runs.iter().any(|w| w.run_id == pinned.run_id) {
            return Err(Error::Conflict {
                what: format!("workflow run {} is pinned already", pinned.run_id),
            });
        }
        self.workflow_runs.push(WorkflowRunRecord {
            created_at_ms: self.now_ms,
            ..pinned.clone()
        });
        Ok(())
    }

    async fn insert_steps(
        &mut self,
        workflow_run_id: i64,
        steps: &[NewStep<'_>],
    ) -> Result<(), Error> {
        for step in steps {
            self.step_runs.push(StepRunRecord {
                workflow_run_id,
                step_name: step.step_name.to_owned(),
                state: step.state.to_owned(),
                run_id: step.run_id,
                output_json: step.output_json.map(str::to_owned),
                updated_at_ms: self.now_ms,
            });
        }
        Ok(())
    }
}

#[async_trait]
impl RunEndTx for MemoryDb {
    async fn cancel_attempts_of_run(&mut self, run_id: i64, why: &str) -> Result<(), Error> {
        for attempt in &mut self.attempts {
            if attempt.run_id == run_id && matches!(attempt.state.as_str(), "pending" | "running") {
                attempt.state = AttemptState::Cancelled;
                attempt.error = Some(why.to_owned());
            }
        }
        Ok(())
    }
}

/// A workflow of id `workflow_id` whose stored definition is `definition` (JSON) and whose own
/// params are `{"day":"mon"}`; a workflow's policy starts its runs pending (the start pass pins
/// them).
pub(crate) fn add_workflow(db: &mut MemoryDb, workflow_id: i64, definition: &str) {
    db.jobs.insert(
        workflow_id,
        super::MemoryJob {
            name: format!("workflow {workflow_id}"),
            partition_id: workflow_id % 4,
            policy_json: r#"{"workflow":true}"#.to_owned(),
            args_json: r#"{"day":"mon"}"#.to_owned(),
            workflow: true,
            ..super::MemoryJob::default()
        },
    );
    db.workflow_definitions
        .insert(workflow_id, definition.to_owned());
}

/// A database at `now_ms` with workflow `workflow_id` (of `definition`) and step jobs 10, 11
/// and 12.
pub(crate) fn workflow_db(workflow_id: i64, definition: &str, now_ms: i64) -> MemoryDb {
    let mut db = MemoryDb {
        now_ms,
        ..MemoryDb::default()
    };
    add_workflow(&mut db, workflow_id, definition);
    add_step_jobs(&mut db);
    db
}

/// Step jobs 10, 11 and 12: one attempt each, with their own arguments.
pub(crate) fn add_step_jobs(db: &mut MemoryDb) {
    for id in [10, 11, 12] {
        db.jobs.insert(
            id,
            super::MemoryJob {
                name: format!("step job {id}"),
                partition_id: id % 4,
                policy_json: "{}".to_owned(),
                args_json: format!(r#"{{"job":{id}}}"#),
                ..super::MemoryJob::default()
            },
        );
    }
}

/// A pending run of `job_id` at `at_ms` created by node `n1`, triggered with `input`.
pub(crate) fn add_pending_run(
    db: &mut MemoryDb,
    job_id: i64,
    at_ms: i64,
    input: Option<&str>,
) -> crate::store::RunRecord {
    let run_id = db
        .insert_unique(super::MemoryRun {
            run_id: 0,
            job_id,
            scheduled_at_ms: at_ms,
            partition_id: job_id % 4,
            epoch: 1,
            node_id: "n1".to_owned(),
            trigger_kind: TriggerKind::Manual,
            state: RunState::Pending,
            priority: 5,
            message: None,
            namespace_id: db
                .jobs
                .get(&job_id)
                .map_or(NamespaceId::DEFAULT, |j| j.namespace_id),
            started: false,
            finished_at_ms: None,
            input: input.map(str::to_owned),
        })
        .unwrap_or_else(|| panic!("job {job_id} has a run at {at_ms} already"));
    run_record(db, run_id)
}

/// The run `run_id` as the store reads it.
pub(crate) fn run_record(db: &MemoryDb, run_id: i64) -> crate::store::RunRecord {
    let run = db
        .runs
        .iter()
        .find(|r| r.run_id == run_id)
        .unwrap_or_else(|| panic!("no run {run_id}"));
    crate::store::RunRecord {
        run_id,
        job_id: run.job_id,
        scheduled_at_ms: run.scheduled_at_ms,
        partition_id: run.partition_id,
        epoch: run.epoch,
        node_id: run.node_id.clone(),
        trigger_kind: run.trigger_kind,
        state: run.state,
        priority: run.priority,
        created_at_ms: 0,
        started_at_ms: None,
        finished_at_ms: None,
        message: run.message.clone(),
        namespace_id: run.namespace_id,
        flow_key: db.flow.run_keys.get(&run_id).cloned(),
    }
}
