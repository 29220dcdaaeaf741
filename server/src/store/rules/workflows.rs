//! A workflow run moved on inside the transaction that ended one of its steps' runs, or that
//! started it: the ended steps recorded, `workflows::advance::next` says which steps run and
//! which are skipped, and the run ends when no step is left. A step whose job is gone, or whose
//! upstream's output does not read, fails at once. So each step's run is created once, and no
//! node can die between a step's end and what follows it. The loop of what follows a run's end
//! lives here too: children, steps, and the workflow runs that ended with them, until nothing
//! more ends.

use std::collections::HashMap;

use async_trait::async_trait;

use super::super::child_records::{CHILD_OUTPUT_CAP, EndedRun, FollowedUp};
use super::super::error::Error;
use super::super::workflow_records::{StepRunRecord, WorkflowRunRecord};
use super::attempt_end::EndingTx;
use super::flow::{self, FlowTx};
use super::follow_ups::{FollowUp, FollowUpJob, FollowUpTx, children, follow_up_runs};
use crate::states::{RunState, StepState, TriggerKind};
use crate::workflows::advance;

/// A running step whose run ended: the step's state, and its run's output (JSON) when it has
/// one that fits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepEnd<'a> {
    pub(crate) step_name: &'a str,
    pub(crate) state: StepState,
    pub(crate) output: Option<String>,
}

/// What moving a workflow run on needs of a write transaction, besides the follow-up
/// insertion's statements and a run's guarded end: statements with their binds.
#[async_trait]
pub(crate) trait WorkflowTx: FollowUpTx + EndingTx + FlowTx {
    /// The running steps whose runs are among `run_ids`, by workflow run and step name.
    async fn running_steps_of_runs(&mut self, run_ids: &[i64])
    -> Result<Vec<StepRunRecord>, Error>;

    /// The workflow run's row (`runs`), locked: two of its steps ending at once are recorded
    /// one transaction after the other. The node that created it.
    async fn lock_run(&mut self, run_id: i64) -> Result<Option<String>, Error>;

    /// Records the ends of steps still running.
    async fn end_steps(&mut self, workflow_run_id: i64, ends: &[StepEnd<'_>]) -> Result<(), Error>;

    /// The definition and params pinned into the workflow run when it started.
    async fn pinned_run(&mut self, run_id: i64) -> Result<Option<WorkflowRunRecord>, Error>;

    /// Every step of the workflow run, by name.
    async fn steps_of(&mut self, workflow_run_id: i64) -> Result<Vec<StepRunRecord>, Error>;

    /// Closes a waiting step that will not run: `skipped`, or `failed` with `output` (JSON)
    /// saying why.
    async fn close_waiting_step(
        &mut self,
        workflow_run_id: i64,
        step_name: &str,
        state: StepState,
        output: Option<&str>,
    ) -> Result<(), Error>;

    /// Waiting steps now running, each with its run.
    async fn start_steps(
        &mut self,
        workflow_run_id: i64,
        started: &[(&str, i64)],
    ) -> Result<(), Error>;
}

/// What follows, in the caller's transaction, the runs `ended` there: their child jobs' runs,
/// and the next steps of the workflow runs they are steps of, and so on while workflow runs end
/// with them.
pub(crate) async fn follow_ups<T: WorkflowTx + ?Sized>(
    tx: &mut T,
    ended: &[EndedRun],
) -> Result<FollowedUp, Error> {
    let mut followed = FollowedUp::default();
    let mut batch = ended.to_vec();
    while !batch.is_empty() {
        followed.created += children(tx, &batch).await?;
        let (steps, workflows_ended) = steps_ended(tx, &batch).await?;
        followed.created += steps;
        followed
            .workflows_ended
            .extend(workflows_ended.iter().cloned());
        batch = workflows_ended;
    }
    Ok(followed)
}

/// Records the ends of the step runs among `ended` and moves their workflow runs on, in
/// workflow run order; how many runs it created, and the workflow runs that ended.
async fn steps_ended<T: WorkflowTx + ?Sized>(
    tx: &mut T,
    ended: &[EndedRun],
) -> Result<(usize, Vec<EndedRun>), Error> {
    let ids: Vec<i64> = ended
        .iter()
        .filter(|r| r.may_be_step)
        .map(|r| r.run_id)
        .collect();
    if ids.is_empty() {
        return Ok((0, Vec::new()));
    }
    let steps = tx.running_steps_of_runs(&ids).await?;
    let mut created = 0;
    let mut workflows_ended = Vec::new();
    for group in steps.chunk_by(|a, b| a.workflow_run_id == b.workflow_run_id) {
        let workflow_run = group[0].workflow_run_id;
        let Some(node_id) = tx.lock_run(workflow_run).await? else {
            // Deleted with its workflow meanwhile: nothing is left to move on.
            continue;
        };
        let ends: Vec<StepEnd<'_>> = group
            .iter()
            .filter_map(|step| {
                let run = ended.iter().find(|r| Some(r.run_id) == step.run_id)?;
                Some(StepEnd {
                    step_name: &step.step_name,
                    state: StepState::of_run(run.state),
                    output: run
                        .output
                        .as_ref()
                        .map(|o| o.to_string())
                        .filter(|o| o.len() <= CHILD_OUTPUT_CAP),
                })
            })
            .collect();
        tx.end_steps(workflow_run, &ends).await?;
        let (made, over) = advance_run(tx, workflow_run, &node_id).await?;
        created += made;
        workflows_ended.extend(over);
    }
    Ok((created, workflows_ended))
}

/// Moves the workflow run `workflow_run` (its row locked by the caller) on from its steps'
/// states: runs the steps now ready, closes the skipped ones, and ends it when no step is left.
/// How many runs it created, and itself if it ended.
pub(crate) async fn advance_run<T: WorkflowTx + ?Sized>(
    tx: &mut T,
    workflow_run: i64,
    node_id: &str,
) -> Result<(usize, Option<EndedRun>), Error> {
    let Some(pinned) = tx.pinned_run(workflow_run).await? else {
        return Ok((0, None));
    };
    let (definition, params) = match pinned.read() {
        Ok(read) => read,
        Err(e) => {
            // Never zero steps or no params in its place: the run fails, naming what does
            // not read.
            let message = e.to_string();
            let over = end_workflow_run(
                tx,
                (&pinned).into(),
                node_id,
                RunState::Failed,
                Some(&message),
            )
            .await?;
            return Ok((0, over));
        }
    };
    let mut created = 0;
    loop {
        let steps = tx.steps_of(workflow_run).await?;
        let states: HashMap<String, StepState> = steps
            .iter()
            .map(|s| (s.step_name.clone(), s.state))
            .collect();
        let next = advance::next(&definition, &states);
        for name in &next.skipped {
            tx.close_waiting_step(workflow_run, name, StepState::Skipped, None)
                .await?;
        }
        let ready: Vec<(&str, &crate::workflows::Step)> = next
            .ready
            .iter()
            .filter_map(|name| {
                let step = definition.steps.iter().find(|s| &s.name == name)?;
                Some((name.as_str(), step))
            })
            .collect();
        // The ready steps' jobs, locked in id order in one statement, and the clock once: a
        // fan-out of 50 costs its inserts, not 100 reads more.
        let mut job_ids: Vec<i64> = ready.iter().map(|(_, s)| s.job_id).collect();
        job_ids.sort_unstable();
        job_ids.dedup();
        let jobs = if job_ids.is_empty() {
            Vec::new()
        } else {
            tx.lock_follow_up_jobs(&job_ids).await?
        };
        // A step that cannot start fails at once; the rule then runs again.
        let mut failed_now = false;
        let mut starting: Vec<(&str, &FollowUpJob, String)> = Vec::with_capacity(ready.len());
        for (name, step) in ready {
            let input = match jobs.iter().find(|j| j.job_id == step.job_id) {
                Some(job) => pinned
                    .step_input(&params, name, &step.needs, &steps)
                    .map(|input| (job, input))
                    .map_err(|e| e.to_string()),
                None => Err(format!("job {} is gone", step.job_id)),
            };
            match input {
                Ok((job, input)) => starting.push((name, job, input)),
                Err(why) => {
                    let why = serde_json::Value::String(why).to_string();
                    tx.close_waiting_step(workflow_run, name, StepState::Failed, Some(&why))
                        .await?;
                    failed_now = true;
                }
            }
        }
        if !starting.is_empty() {
            let now = tx.now_ms().await?;
            let runs: Vec<FollowUp<'_>> = starting
                .iter()
                .map(|(_, job, input)| FollowUp {
                    job_id: job.job_id,
                    partition_id: job.partition_id,
                    namespace_id: job.namespace_id,
                    node_id,
                    trigger_kind: TriggerKind::Step,
                    input,
                    args_json: &job.args_json,
                    policy_json: &job.policy_json,
                })
                .collect();
            let inserted = follow_up_runs(tx, &runs, now).await?;
            let started: Vec<(&str, i64)> = starting
                .iter()
                .zip(&inserted)
                .map(|((name, _, _), (run_id, _))| (*name, *run_id))
                .collect();
            tx.start_steps(workflow_run, &started).await?;
            created += inserted.len();
        }
        if failed_now {
            continue;
        }
        let Some(state) = next.finished else {
            return Ok((created, None));
        };
        let message = (state != RunState::Succeeded).then_some("a step failed or was cancelled");
        let over = end_workflow_run(tx, (&pinned).into(), node_id, state, message).await?;
        return Ok((created, over));
    }
}

/// Moves a workflow run started in this transaction on (its first steps, and what follows if
/// it ends at once); what the follow-ups did, to note once it commits.
pub(crate) async fn advance_new<T: WorkflowTx + ?Sized>(
    tx: &mut T,
    workflow_run: i64,
    node_id: &str,
) -> Result<FollowedUp, Error> {
    let (created, over) = advance_run(tx, workflow_run, node_id).await?;
    let mut followed = FollowedUp {
        created,
        workflows_ended: Vec::new(),
    };
    if let Some(over) = over {
        let after = follow_ups(tx, std::slice::from_ref(&over)).await?;
        followed.created += after.created;
        followed.workflows_ended.push(over);
        followed.workflows_ended.extend(after.workflows_ended);
    }
    Ok(followed)
}

/// A workflow run, by its run and its workflow, and the flow key it counts under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WorkflowRunKey<'a> {
    pub(crate) run_id: i64,
    pub(crate) workflow_id: i64,
    pub(crate) flow_key: Option<&'a str>,
}

impl<'a> From<&'a WorkflowRunRecord> for WorkflowRunKey<'a> {
    fn from(pinned: &'a WorkflowRunRecord) -> Self {
        WorkflowRunKey {
            run_id: pinned.run_id,
            workflow_id: pinned.workflow_id,
            flow_key: pinned.flow_key.as_deref(),
        }
    }
}

/// Ends the workflow run `run` as `state`, passes its workflow's turn to a queued run and
/// admits its flow key again; the ended run, for its follow-ups, unless it had already ended.
pub(crate) async fn end_workflow_run<T: WorkflowTx + ?Sized>(
    tx: &mut T,
    run: WorkflowRunKey<'_>,
    node_id: &str,
    state: RunState,
    message: Option<&str>,
) -> Result<Option<EndedRun>, Error> {
    if !tx.end_run(run.run_id, state, message).await? {
        return Ok(None);
    }
    tx.release_next_queued(run.workflow_id).await?;
    if let Some(key) = run.flow_key {
        flow::admit(tx, key).await?;
    }
    Ok(Some(EndedRun {
        run_id: run.run_id,
        job_id: run.workflow_id,
        node_id: node_id.to_owned(),
        // A workflow may itself be another's step.
        may_be_step: true,
        may_have_children: true,
        state: state.to_owned(),
        output: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::super::memory::MemoryDb;
    use super::super::memory::workflows::{add_pending_run, add_workflow, workflow_db};
    use super::super::workflow_start::start_workflow_run;
    use super::*;

    const WORKFLOW: i64 = 1;
    const NOW: i64 = 70_000;

    fn db(definition: &str) -> MemoryDb {
        workflow_db(WORKFLOW, definition, NOW)
    }

    /// A started run of `workflow` (pending until then); its id.
    async fn started(db: &mut MemoryDb, workflow: i64) -> i64 {
        let run = add_pending_run(db, workflow, 1_000, None);
        start_workflow_run(db, &run, r#"{"day":"mon"}"#)
            .await
            .unwrap()
            .expect("it was pending");
        run.run_id
    }

    /// Ends run `run_id` as `state` with `output`, as an attempt's end does, and what follows.
    async fn end(
        db: &mut MemoryDb,
        run_id: i64,
        state: RunState,
        output: Option<serde_json::Value>,
    ) -> FollowedUp {
        assert!(
            db.end_run(run_id, state, None).await.unwrap(),
            "run {run_id} was unfinished"
        );
        let job_id = db.runs.iter().find(|r| r.run_id == run_id).unwrap().job_id;
        let ended = EndedRun {
            run_id,
            job_id,
            node_id: "n1".to_owned(),
            may_be_step: true,
            may_have_children: true,
            state: state.to_owned(),
            output,
        };
        follow_ups(db, &[ended]).await.unwrap()
    }

    /// (step, state, its run's job) of every step of the workflow run.
    fn steps(db: &MemoryDb, workflow_run: i64) -> Vec<(String, String, Option<i64>)> {
        db.steps(workflow_run)
            .into_iter()
            .map(|s| {
                let job = s
                    .run_id
                    .and_then(|r| db.runs.iter().find(|run| run.run_id == r))
                    .map(|r| r.job_id);
                (s.step_name.clone(), s.state.as_str().to_owned(), job)
            })
            .collect()
    }

    fn run_of_step(db: &MemoryDb, workflow_run: i64, step: &str) -> i64 {
        db.steps(workflow_run)
            .into_iter()
            .find(|s| s.step_name == step)
            .and_then(|s| s.run_id)
            .unwrap_or_else(|| panic!("step {step} has no run"))
    }

    fn input_of(db: &MemoryDb, run_id: i64) -> serde_json::Value {
        let run = db.runs.iter().find(|r| r.run_id == run_id).unwrap();
        serde_json::from_str(run.input.as_deref().unwrap()).unwrap()
    }

    fn state_of(db: &MemoryDb, run_id: i64) -> (String, Option<String>) {
        let run = db.runs.iter().find(|r| r.run_id == run_id).unwrap();
        (run.state.as_str().to_owned(), run.message.clone())
    }

    const FAN_OUT: &str = r#"{"steps":[
        {"name":"extract","job_id":10},
        {"name":"load","job_id":11,"needs":[{"step":"extract"}]},
        {"name":"report","job_id":12,"needs":[{"step":"extract"}]}]}"#;

    fn s(step: &str, state: &str, job: Option<i64>) -> (String, String, Option<i64>) {
        (step.to_owned(), state.to_owned(), job)
    }

    #[tokio::test]
    async fn each_step_runs_once_its_needs_ended_and_is_given_their_outputs() {
        let mut db = db(FAN_OUT);
        let run = started(&mut db, WORKFLOW).await;
        assert_eq!(
            steps(&db, run),
            [
                s("extract", "running", Some(10)),
                s("load", "waiting", None),
                s("report", "waiting", None)
            ]
        );
        let extract = run_of_step(&db, run, "extract");
        assert_eq!(
            input_of(&db, extract)["params"],
            serde_json::json!({"day": "mon"})
        );
        let followed = end(
            &mut db,
            extract,
            RunState::Succeeded,
            Some(serde_json::json!({"rows": 3})),
        )
        .await;
        assert_eq!((followed.created, followed.workflows_ended.len()), (2, 0));
        assert_eq!(
            steps(&db, run),
            [
                s("extract", "succeeded", Some(10)),
                s("load", "running", Some(11)),
                s("report", "running", Some(12))
            ]
        );
        let load = run_of_step(&db, run, "load");
        let input = input_of(&db, load);
        assert_eq!(
            input["upstream"]["extract"]["output"],
            serde_json::json!({"rows": 3})
        );
        assert_eq!(input["workflow"]["step"], "load", "{input}");
        assert_eq!(
            db.attempts.iter().filter(|a| a.run_id == load).count(),
            1,
            "a one-attempt step starts with its attempt"
        );
        end(&mut db, load, RunState::Succeeded, None).await;
        assert_eq!(state_of(&db, run).0, "running", "report is still running");
        let report = run_of_step(&db, run, "report");
        let followed = end(&mut db, report, RunState::Succeeded, None).await;
        assert_eq!(state_of(&db, run), ("succeeded".to_owned(), None));
        let ended: Vec<i64> = followed.workflows_ended.iter().map(|r| r.run_id).collect();
        assert_eq!(ended, [run]);
        // Ending a step again changes nothing.
        assert!(!db.end_run(report, RunState::Failed, None).await.unwrap());
    }

    #[tokio::test]
    async fn a_step_whose_job_is_gone_fails_and_what_needs_it_is_skipped() {
        let mut db = db(r#"{"steps":[
            {"name":"a","job_id":10},
            {"name":"b","job_id":99,"needs":[{"step":"a"}]},
            {"name":"c","job_id":11,"needs":[{"step":"b"}]}]}"#);
        let run = started(&mut db, WORKFLOW).await;
        let a = run_of_step(&db, run, "a");
        let followed = end(&mut db, a, RunState::Succeeded, None).await;
        assert_eq!(followed.created, 0);
        assert_eq!(
            steps(&db, run),
            [
                s("a", "succeeded", Some(10)),
                s("b", "failed", None),
                s("c", "skipped", None)
            ]
        );
        let b = db
            .steps(run)
            .into_iter()
            .find(|s| s.step_name == "b")
            .unwrap();
        assert_eq!(b.output_json.as_deref(), Some(r#""job 99 is gone""#));
        assert_eq!(
            state_of(&db, run),
            (
                "failed".to_owned(),
                Some("a step failed or was cancelled".to_owned())
            )
        );
    }

    #[tokio::test]
    async fn an_upstream_output_that_does_not_read_fails_the_step_naming_it() {
        let mut db = db(r#"{"steps":[
            {"name":"a","job_id":10},
            {"name":"b","job_id":11,"needs":[{"step":"a"}]}]}"#);
        let run = started(&mut db, WORKFLOW).await;
        // The output as a hand edit leaves it, the step's end committed before the advance.
        let a = run_of_step(&db, run, "a");
        db.end_run(a, RunState::Succeeded, None).await.unwrap();
        let step = db
            .step_runs
            .iter_mut()
            .find(|s| s.step_name == "a")
            .unwrap();
        step.state = StepState::Succeeded;
        step.output_json = Some("{\"rows\":".to_owned());
        let (created, over) = advance_run(&mut db, run, "n1").await.unwrap();
        assert_eq!(created, 0, "b gets no run");
        let b = db
            .steps(run)
            .into_iter()
            .find(|s| s.step_name == "b")
            .unwrap();
        assert_eq!(b.state, StepState::Failed);
        let why: String = serde_json::from_str(b.output_json.as_deref().unwrap()).unwrap();
        assert!(
            why.contains(&format!(
                "the stored output of step a of workflow run {run}"
            )),
            "{why}"
        );
        assert_eq!(over.map(|o| o.state), Some(RunState::Failed));
    }

    #[tokio::test]
    async fn a_pinned_definition_that_does_not_read_fails_the_run_naming_it() {
        let mut db = db(FAN_OUT);
        let run = started(&mut db, WORKFLOW).await;
        db.workflow_runs[0].definition_json = "{\"steps\":".to_owned();
        let (created, over) = advance_run(&mut db, run, "n1").await.unwrap();
        assert_eq!(created, 0);
        assert_eq!(over.map(|o| o.run_id), Some(run));
        let (state, message) = state_of(&db, run);
        assert_eq!(state, "failed");
        let message = message.unwrap();
        assert!(
            message.contains(&format!("the stored definition of workflow run {run}")),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_workflow_run_that_is_a_step_moves_its_outer_run_on_when_it_ends() {
        let mut db = db(r#"{"steps":[{"name":"a","job_id":10}]}"#);
        const OUTER: i64 = 2;
        add_workflow(
            &mut db,
            OUTER,
            r#"{"steps":[{"name":"inner","job_id":1},{"name":"after","job_id":11,"needs":[{"step":"inner"}]}]}"#,
        );
        let outer = started(&mut db, OUTER).await;
        // A workflow's run as a step starts pending: the start pass pins its definition.
        let inner = run_of_step(&db, outer, "inner");
        assert_eq!(state_of(&db, inner).0, "pending");
        let inner_run = super::super::memory::workflows::run_record(&db, inner);
        start_workflow_run(&mut db, &inner_run, r#"{"day":"mon"}"#)
            .await
            .unwrap()
            .unwrap();
        let a = run_of_step(&db, inner, "a");
        let followed = end(&mut db, a, RunState::Succeeded, None).await;
        let ended: Vec<i64> = followed.workflows_ended.iter().map(|r| r.run_id).collect();
        assert_eq!(
            ended,
            [inner],
            "the inner run ends; the outer has a step left"
        );
        assert_eq!(
            steps(&db, outer),
            [
                s("after", "running", Some(11)),
                s("inner", "succeeded", Some(1))
            ]
        );
        let after = run_of_step(&db, outer, "after");
        let followed = end(&mut db, after, RunState::Failed, None).await;
        assert_eq!(
            followed
                .workflows_ended
                .iter()
                .map(|r| r.run_id)
                .collect::<Vec<_>>(),
            [outer]
        );
        assert_eq!(state_of(&db, outer).0, "failed");
    }

    #[tokio::test]
    async fn a_workflow_runs_end_passes_its_turn_to_its_next_queued_run() {
        let mut db = db(r#"{"steps":[{"name":"a","job_id":10}]}"#);
        let run = started(&mut db, WORKFLOW).await;
        let queued = add_pending_run(&mut db, WORKFLOW, 2_000, None).run_id;
        db.runs
            .iter_mut()
            .find(|r| r.run_id == queued)
            .unwrap()
            .state = RunState::Queued;
        let a = run_of_step(&db, run, "a");
        end(&mut db, a, RunState::Cancelled, None).await;
        assert_eq!(
            state_of(&db, run).0,
            "failed",
            "a cancelled step fails its run"
        );
        assert_eq!(state_of(&db, queued).0, "pending");
    }
}
