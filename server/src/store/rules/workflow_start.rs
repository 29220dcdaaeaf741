//! A workflow run starting, in a transaction of its own: the guarded move to `running`, the
//! workflow's definition and the run's params pinned into it (so an edit never changes a run in
//! flight), a row per step, and its first steps' runs. And a rerun of an ended one: a new run
//! with the definition and params the ended one had, its succeeded steps kept with their runs
//! and outputs, the others run again.

use async_trait::async_trait;

use super::super::child_records::FollowedUp;
use super::super::error::Error;
use super::super::job_records::RunRecord;
use super::super::workflow_records::{WorkflowRunRecord, params_of};
use super::flow::hand_over;
use super::follow_ups::{FollowUp, follow_up_runs};
use super::workflows::{WorkflowRunKey, WorkflowTx, advance_new, end_workflow_run, follow_ups};
use crate::states::{RunState, StepState, TriggerKind};
use crate::workflows::Definition;

/// A row of `step_runs` as a start or a rerun inserts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewStep<'a> {
    pub(crate) step_name: &'a str,
    /// `waiting`, or `succeeded` when a rerun keeps it.
    pub(crate) state: StepState,
    pub(crate) run_id: Option<i64>,
    pub(crate) output_json: Option<&'a str>,
}

/// What the rules read of a run before they end it or run it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunHead {
    pub(crate) job_id: i64,
    /// The node that created it: its follow-ups are recorded as created by the same node.
    pub(crate) node_id: String,
    pub(crate) state: RunState,
    /// The flow-control key it was put in line under, if any.
    pub(crate) flow_key: Option<String>,
}

impl RunHead {
    /// Whether it holds its job's turn (pending or running, not queued): its end passes the
    /// turn to the job's next queued run, whichever way it ends.
    pub(crate) fn holds_turn(&self) -> bool {
        self.state == RunState::Pending || self.state == RunState::Running
    }
}

/// What starting a workflow run needs of a write transaction, besides moving one on.
#[async_trait]
pub(crate) trait WorkflowStartTx: WorkflowTx {
    /// Moves the run from `pending` to `running`; whether it did.
    async fn start_run_if_pending(&mut self, run_id: i64) -> Result<bool, Error>;

    async fn run_head(&mut self, run_id: i64) -> Result<Option<RunHead>, Error>;

    /// The run's input (JSON), if it has one.
    async fn run_input(&mut self, run_id: i64) -> Result<Option<String>, Error>;

    /// The workflow's stored definition (JSON).
    async fn workflow_definition(&mut self, workflow_id: i64) -> Result<Option<String>, Error>;

    /// The workflow's own params (its row's arguments, JSON); `None` when `workflow_id` is no
    /// workflow.
    async fn workflow_params(&mut self, workflow_id: i64) -> Result<Option<String>, Error>;

    /// Pins the definition and params into the run (`created_at_ms` is the database's clock).
    async fn insert_pinned_run(&mut self, pinned: &WorkflowRunRecord) -> Result<(), Error>;

    async fn insert_steps(
        &mut self,
        workflow_run_id: i64,
        steps: &[NewStep<'_>],
    ) -> Result<(), Error>;
}

/// Starts the pending workflow run `run`, whose workflow's own params are `default_params`:
/// `None` when it was not pending, else what the follow-ups did. A run without a definition,
/// or whose trigger's input does not read, fails, naming why.
pub(crate) async fn start_workflow_run<T: WorkflowStartTx + ?Sized>(
    tx: &mut T,
    run: &RunRecord,
    default_params: &str,
) -> Result<Option<FollowedUp>, Error> {
    if !tx.start_run_if_pending(run.run_id).await? {
        return Ok(None);
    }
    // A re-run that waited in line for its flow key was pinned when it was made.
    if tx.pinned_run(run.run_id).await?.is_some() {
        return Ok(Some(advance_new(tx, run.run_id, &run.node_id).await?));
    }
    let pinned = match tx.workflow_definition(run.job_id).await? {
        None => Err("the workflow has no definition".to_owned()),
        Some(definition_json) => {
            let input = tx.run_input(run.run_id).await?;
            params_of(run.run_id, input.as_deref(), default_params)
                .map(|params_json| WorkflowRunRecord {
                    run_id: run.run_id,
                    workflow_id: run.job_id,
                    definition_json,
                    params_json,
                    rerun_of: None,
                    created_at_ms: 0,
                    flow_key: run.flow_key.clone(),
                })
                .map_err(|e| e.to_string())
        }
    };
    let pinned = match pinned {
        Ok(pinned) => pinned,
        Err(why) => {
            let key = WorkflowRunKey {
                run_id: run.run_id,
                workflow_id: run.job_id,
                flow_key: run.flow_key.as_deref(),
            };
            let over =
                end_workflow_run(tx, key, &run.node_id, RunState::Failed, Some(&why)).await?;
            let mut followed = FollowedUp::default();
            if let Some(over) = over {
                followed = follow_ups(tx, std::slice::from_ref(&over)).await?;
                followed.workflows_ended.insert(0, over);
            }
            return Ok(Some(followed));
        }
    };
    tx.insert_pinned_run(&pinned).await?;
    // A definition that does not read gets no step rows: the advance reads it again and fails
    // the run, naming it.
    if let Ok(definition) = crate::jobs::stored::lenient::<Definition>(&pinned.definition_json) {
        let steps: Vec<NewStep<'_>> = definition
            .steps
            .iter()
            .map(|step| NewStep {
                step_name: &step.name,
                state: StepState::Waiting,
                run_id: None,
                output_json: None,
            })
            .collect();
        tx.insert_steps(run.run_id, &steps).await?;
    }
    Ok(Some(advance_new(tx, run.run_id, &run.node_id).await?))
}

/// Runs the ended workflow run `run_id` again as a new run created by `node_id`: the new run's
/// id and what the follow-ups did; `None` when `run_id` is no workflow run; a conflict when it
/// has not ended or its workflow was deleted. What of it does not read refuses the rerun,
/// naming it; the caller then writes nothing.
pub(crate) async fn rerun_workflow_run<T: WorkflowStartTx + ?Sized>(
    tx: &mut T,
    run_id: i64,
    node_id: &str,
) -> Result<Option<(i64, FollowedUp)>, Error> {
    let Some(run) = tx.run_head(run_id).await? else {
        return Ok(None);
    };
    let pinned = match tx.pinned_run(run_id).await? {
        Some(pinned) => pinned,
        // A run cancelled before it started has nothing pinned: it runs the workflow's
        // definition and the params it was triggered with (else the workflow's).
        None => {
            let Some(default_params) = tx.workflow_params(run.job_id).await? else {
                return Ok(None);
            };
            let Some(definition_json) = tx.workflow_definition(run.job_id).await? else {
                return Ok(None);
            };
            let input = tx.run_input(run_id).await?;
            WorkflowRunRecord {
                run_id,
                workflow_id: run.job_id,
                definition_json,
                params_json: params_of(run_id, input.as_deref(), &default_params)?,
                rerun_of: None,
                created_at_ms: 0,
                flow_key: None,
            }
        }
    };
    if RunState::UNFINISHED.contains(&run.state) {
        return Err(Error::Conflict {
            what: format!("workflow run {run_id}, which has not ended"),
        });
    }
    let jobs = tx.lock_follow_up_jobs(&[pinned.workflow_id]).await?;
    let Some(workflow) = jobs.first() else {
        return Err(Error::Conflict {
            what: format!("workflow {}, which was deleted", pinned.workflow_id),
        });
    };
    let (definition, params) = pinned.read()?;
    let input = serde_json::json!({ "params": params }).to_string();
    let now = tx.now_ms().await?;
    let follow_up = FollowUp {
        job_id: pinned.workflow_id,
        partition_id: workflow.partition_id,
        namespace_id: workflow.namespace_id,
        node_id,
        trigger_kind: TriggerKind::Manual,
        input: &input,
        args_json: &workflow.args_json,
        policy_json: &workflow.policy_json,
    };
    let rerun = follow_up_runs(tx, &[follow_up], now)
        .await?
        .first()
        .map(|(run_id, _)| *run_id)
        .ok_or_else(|| Error::Conflict {
            what: format!("workflow {}: no run was created", pinned.workflow_id),
        })?;
    tx.insert_pinned_run(&WorkflowRunRecord {
        run_id: rerun,
        rerun_of: Some(run_id),
        ..pinned.clone()
    })
    .await?;
    let before = tx.steps_of(run_id).await?;
    let steps: Vec<NewStep<'_>> = definition
        .steps
        .iter()
        .map(|step| {
            let kept = before
                .iter()
                .find(|b| b.step_name == step.name && b.state == StepState::Succeeded);
            NewStep {
                step_name: &step.name,
                state: kept.map_or(StepState::Waiting, |_| StepState::Succeeded),
                run_id: kept.and_then(|k| k.run_id),
                output_json: kept.and_then(|k| k.output_json.as_deref()),
            }
        })
        .collect();
    tx.insert_steps(rerun, &steps).await?;
    // Under flow control the re-run takes the key a failure of it holds (`fifo`), else waits
    // in line as any run of the workflow: the start pass puts it there, and starts it with
    // the definition pinned here.
    let flowing = crate::jobs::stored::lenient::<crate::jobs::JobPolicy>(&workflow.policy_json)
        .is_ok_and(|policy| policy.flow.is_some());
    if flowing
        && !(hand_over(tx, run_id, rerun).await?
            && tx
                .run_head(rerun)
                .await?
                .is_some_and(|head| head.flow_key.is_some()))
    {
        return Ok(Some((
            rerun,
            FollowedUp {
                created: 1,
                workflows_ended: Vec::new(),
            },
        )));
    }
    // Started here, with the definition it had: no start pass pins another.
    tx.start_run_if_pending(rerun).await?;
    let followed = advance_new(tx, rerun, node_id).await?;
    Ok(Some((rerun, followed)))
}

#[cfg(test)]
mod tests {
    use super::super::attempt_end::EndingTx;
    use super::super::memory::MemoryDb;
    use super::super::memory::workflows::{add_pending_run, workflow_db};
    use super::super::workflows::WorkflowTx;
    use super::*;

    const WORKFLOW: i64 = 1;
    const NOW: i64 = 90_000;
    const TWO_STEPS: &str = r#"{"steps":[
        {"name":"a","job_id":10},
        {"name":"b","job_id":11,"needs":[{"step":"a"}]}]}"#;

    fn db(definition: &str) -> MemoryDb {
        workflow_db(WORKFLOW, definition, NOW)
    }

    fn run(db: &MemoryDb, run_id: i64) -> &super::super::memory::MemoryRun {
        db.runs.iter().find(|r| r.run_id == run_id).unwrap()
    }

    fn step_states(db: &MemoryDb, workflow_run: i64) -> Vec<(String, String)> {
        db.steps(workflow_run)
            .into_iter()
            .map(|s| (s.step_name.clone(), s.state.as_str().to_owned()))
            .collect()
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.to_owned(), b.to_owned())
    }

    #[tokio::test]
    async fn a_start_pins_the_definition_and_the_triggers_params_and_runs_the_first_steps() {
        let mut db = db(TWO_STEPS);
        let pending = add_pending_run(
            &mut db,
            WORKFLOW,
            1_000,
            Some(r#"{"params":{"day":"tue"}}"#),
        );
        let followed = start_workflow_run(&mut db, &pending, r#"{"day":"mon"}"#)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(followed.created, 1);
        assert_eq!(run(&db, pending.run_id).state, RunState::Running);
        let pinned = db.pinned_run(pending.run_id).await.unwrap().unwrap();
        assert_eq!(
            pinned.params_json, r#"{"day":"tue"}"#,
            "the trigger's params win"
        );
        // An edit of the workflow after the start changes nothing of this run.
        db.workflow_definitions
            .insert(WORKFLOW, r#"{"steps":[]}"#.to_owned());
        assert_eq!(pinned.definition_json, TWO_STEPS);
        assert_eq!(
            step_states(&db, pending.run_id),
            [pair("a", "running"), pair("b", "waiting")]
        );
        // A second start of the same run does nothing.
        assert!(
            start_workflow_run(&mut db, &pending, "{}")
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(db.workflow_runs.len(), 1);
    }

    #[tokio::test]
    async fn a_run_without_params_gets_the_workflows_and_one_whose_input_does_not_read_fails() {
        let mut db = db(TWO_STEPS);
        let plain = add_pending_run(&mut db, WORKFLOW, 1_000, Some(r#"{"other":1}"#));
        start_workflow_run(&mut db, &plain, r#"{"day":"mon"}"#)
            .await
            .unwrap()
            .unwrap();
        let pinned = db.pinned_run(plain.run_id).await.unwrap().unwrap();
        assert_eq!(pinned.params_json, r#"{"day":"mon"}"#);
        let broken = add_pending_run(&mut db, WORKFLOW, 2_000, Some("{\"params\":"));
        let followed = start_workflow_run(&mut db, &broken, r#"{"day":"mon"}"#)
            .await
            .unwrap()
            .unwrap();
        let ended: Vec<i64> = followed.workflows_ended.iter().map(|r| r.run_id).collect();
        assert_eq!(ended, [broken.run_id]);
        let failed = run(&db, broken.run_id);
        assert_eq!(failed.state, RunState::Failed);
        let message = failed.message.clone().unwrap();
        assert!(
            message.contains(&format!(
                "the stored input of workflow run {}",
                broken.run_id
            )),
            "{message}"
        );
        assert!(
            db.pinned_run(broken.run_id).await.unwrap().is_none(),
            "nothing is pinned"
        );
    }

    #[tokio::test]
    async fn a_workflow_without_a_definition_fails_its_run_and_passes_its_turn() {
        let mut db = db(TWO_STEPS);
        db.workflow_definitions.clear();
        let pending = add_pending_run(&mut db, WORKFLOW, 1_000, None);
        let queued = add_pending_run(&mut db, WORKFLOW, 2_000, None).run_id;
        db.runs
            .iter_mut()
            .find(|r| r.run_id == queued)
            .unwrap()
            .state = RunState::Queued;
        start_workflow_run(&mut db, &pending, "{}")
            .await
            .unwrap()
            .unwrap();
        let failed = run(&db, pending.run_id);
        assert_eq!(
            (failed.state.as_str(), failed.message.as_deref()),
            ("failed", Some("the workflow has no definition"))
        );
        assert_eq!(run(&db, queued).state, RunState::Pending);
    }

    /// A run of the two-step workflow whose `a` succeeded (output `{"rows":3}`) and `b`
    /// failed; its id.
    async fn ended_run(db: &mut MemoryDb) -> i64 {
        let pending = add_pending_run(db, WORKFLOW, 5_000, Some(r#"{"params":{"day":"tue"}}"#));
        start_workflow_run(db, &pending, "{}")
            .await
            .unwrap()
            .unwrap();
        let run_id = pending.run_id;
        for (step, state, output) in [
            ("a", "succeeded", Some(serde_json::json!({"rows": 3}))),
            ("b", "failed", None),
        ] {
            let step_run = db
                .steps(run_id)
                .into_iter()
                .find(|s| s.step_name == step)
                .and_then(|s| s.run_id)
                .unwrap();
            db.end_run(step_run, state.parse().unwrap(), None)
                .await
                .unwrap();
            let ended = crate::store::EndedRun {
                run_id: step_run,
                job_id: run(db, step_run).job_id,
                node_id: "n1".to_owned(),
                may_be_step: true,
                may_have_children: true,
                state: state.parse().unwrap(),
                output,
            };
            follow_ups(db, &[ended]).await.unwrap();
        }
        assert_eq!(run(db, run_id).state, RunState::Failed);
        run_id
    }

    #[tokio::test]
    async fn a_rerun_keeps_the_succeeded_steps_and_runs_the_others_with_what_the_run_had() {
        let mut db = db(TWO_STEPS);
        let first = ended_run(&mut db).await;
        let a_run = db.steps(first)[0].run_id;
        // The workflow changed since: the rerun runs what the first run had.
        db.workflow_definitions
            .insert(WORKFLOW, r#"{"steps":[]}"#.to_owned());
        let (rerun, followed) = rerun_workflow_run(&mut db, first, "n2")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(followed.created, 1, "only b runs again");
        let pinned = db.pinned_run(rerun).await.unwrap().unwrap();
        assert_eq!(
            (
                pinned.rerun_of,
                pinned.definition_json.as_str(),
                pinned.params_json.as_str()
            ),
            (Some(first), TWO_STEPS, r#"{"day":"tue"}"#)
        );
        assert_eq!(
            (
                run(&db, rerun).state.as_str(),
                run(&db, rerun).node_id.as_str()
            ),
            ("running", "n2")
        );
        let steps = db.steps(rerun);
        assert_eq!(
            (steps[0].state.as_str(), steps[0].run_id),
            ("succeeded", a_run),
            "a keeps its run"
        );
        assert_eq!(steps[1].state, StepState::Running);
        let b_input: serde_json::Value =
            serde_json::from_str(run(&db, steps[1].run_id.unwrap()).input.as_deref().unwrap())
                .unwrap();
        assert_eq!(
            b_input["upstream"]["a"]["output"],
            serde_json::json!({"rows": 3})
        );
        assert_eq!(b_input["workflow"]["run_id"], rerun);
    }

    #[tokio::test]
    async fn a_rerun_is_refused_for_an_unfinished_or_unreadable_run_and_writes_nothing() {
        let mut db = db(TWO_STEPS);
        let pending = add_pending_run(&mut db, WORKFLOW, 1_000, None);
        start_workflow_run(&mut db, &pending, "{}")
            .await
            .unwrap()
            .unwrap();
        let refused = rerun_workflow_run(&mut db, pending.run_id, "n1").await;
        assert!(
            matches!(refused, Err(Error::Conflict { .. })),
            "{refused:?}"
        );
        let ended = ended_run(&mut db).await;
        db.workflow_runs
            .iter_mut()
            .find(|w| w.run_id == ended)
            .unwrap()
            .params_json = "{\"day\":".to_owned();
        let runs = db.runs.len();
        let refused = rerun_workflow_run(&mut db, ended, "n1").await;
        assert!(
            matches!(refused, Err(Error::Unreadable { .. })),
            "{refused:?}"
        );
        assert_eq!(db.runs.len(), runs, "no run was created");
        assert!(
            rerun_workflow_run(&mut db, 999, "n1")
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_run_cancelled_before_it_started_reruns_the_workflows_definition() {
        let mut db = db(TWO_STEPS);
        let pending = add_pending_run(
            &mut db,
            WORKFLOW,
            1_000,
            Some(r#"{"params":{"day":"wed"}}"#),
        );
        db.end_run(pending.run_id, RunState::Cancelled, None)
            .await
            .unwrap();
        let (rerun, _) = rerun_workflow_run(&mut db, pending.run_id, "n1")
            .await
            .unwrap()
            .unwrap();
        let pinned = db.pinned_run(rerun).await.unwrap().unwrap();
        assert_eq!(
            (pinned.definition_json.as_str(), pinned.params_json.as_str()),
            (TWO_STEPS, r#"{"day":"wed"}"#)
        );
        assert_eq!(
            step_states(&db, rerun),
            [pair("a", "running"), pair("b", "waiting")]
        );
    }
}
