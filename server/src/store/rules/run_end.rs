//! A run ended other than by its attempts' ends: by the dispatcher (no executor, its job gone),
//! cancelled through the API with its attempts, or a workflow run cancelled with its steps.
//! Every way passes the job's turn on when the run held it (overlap `queue`), and runs what
//! follows the end in the transaction that ends it, as an attempt's end does.

use async_trait::async_trait;

use super::super::child_records::{EndedRun, FollowedUp};
use super::super::dispatch_records::AttemptRecord;
use super::super::error::Error;
use super::flow::{self, FlowTx};
use super::workflow_start::{RunHead, WorkflowStartTx};
use super::workflows::{StepEnd, follow_ups};
use crate::states::{AttemptState, RunState, StepState};

/// Why a workflow run's cancel ended a run or an attempt.
const WHY: &str = "the workflow run was cancelled";

/// What ending a run needs of a write transaction, besides what its follow-ups need.
#[async_trait]
pub(crate) trait RunEndTx: WorkflowStartTx + FlowTx {
    /// Cancels the run's pending and running attempts, with `why` as their error.
    async fn cancel_attempts_of_run(&mut self, run_id: i64, why: &str) -> Result<(), Error>;
}

/// Ends run `run_id` as `state` if it is unfinished, and runs what follows (a run that found no
/// executor triggers its job's `on_failure` children); `None` when it had ended already.
pub(crate) async fn end_run<T: RunEndTx + ?Sized>(
    tx: &mut T,
    run_id: i64,
    state: RunState,
    message: Option<&str>,
) -> Result<Option<FollowedUp>, Error> {
    let Some(run) = tx.run_head(run_id).await? else {
        return Ok(None);
    };
    if !end_passing_turn(tx, run_id, &run, state, message).await? {
        return Ok(None);
    }
    Ok(Some(follow_ups(tx, &[ended(run_id, &run, state)]).await?))
}

/// Ends run `run_id` as `state` with `message` if it is unfinished, cancels its live attempts
/// (and its steps, for a workflow's run), and runs what follows; the attempts that were running
/// (their executors should be told), or `None` when it had ended already.
pub(crate) async fn end_run_with_attempts<T: RunEndTx + ?Sized>(
    tx: &mut T,
    run_id: i64,
    state: RunState,
    message: &str,
) -> Result<Option<(Vec<AttemptRecord>, FollowedUp)>, Error> {
    let Some(run) = tx.run_head(run_id).await? else {
        return Ok(None);
    };
    if !end_passing_turn(tx, run_id, &run, state, Some(message)).await? {
        return Ok(None);
    }
    let mut running = Vec::new();
    end_attempts_or_steps(tx, run_id, message, &mut running).await?;
    let followed = follow_ups(tx, &[ended(run_id, &run, state)]).await?;
    Ok(Some((running, followed)))
}

/// Cancels the unfinished workflow run `run_id`: its waiting steps, and its running steps with
/// their runs and attempts (and their own steps, for a step that is a workflow run); then what
/// follows (the step it is of another workflow run).
/// The attempts that were running, or `None` when it was not unfinished.
pub(crate) async fn cancel_workflow_run<T: RunEndTx + ?Sized>(
    tx: &mut T,
    run_id: i64,
) -> Result<Option<(Vec<AttemptRecord>, FollowedUp)>, Error> {
    if tx.lock_run(run_id).await?.is_none() {
        return Ok(None);
    }
    let Some(run) = tx.run_head(run_id).await? else {
        return Ok(None);
    };
    if !end_passing_turn(tx, run_id, &run, RunState::Cancelled, Some(WHY)).await? {
        return Ok(None);
    }
    let mut running = Vec::new();
    cancel_steps(tx, run_id, &mut running).await?;
    let followed = follow_ups(tx, &[ended(run_id, &run, RunState::Cancelled)]).await?;
    Ok(Some((running, followed)))
}

/// Cancels the steps of the workflow run `run_id`, which the caller ended: the waiting ones
/// never run, the running ones end with their runs and attempts (those running are added to
/// `running`), and a step that is itself a workflow run has its own steps cancelled the same
/// way. No follow-up runs here: every run it ends was cancelled with what it belongs to.
fn cancel_steps<'a, T: RunEndTx + ?Sized>(
    tx: &'a mut T,
    run_id: i64,
    running: &'a mut Vec<AttemptRecord>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Error>> + Send + 'a>> {
    Box::pin(async move {
        for step in tx.steps_of(run_id).await? {
            match (step.state, step.run_id) {
                (StepState::Waiting, _) => {
                    tx.close_waiting_step(run_id, &step.step_name, StepState::Cancelled, None)
                        .await?;
                }
                (StepState::Running, Some(step_run)) => {
                    if let Some(head) = tx.run_head(step_run).await?
                        && end_passing_turn(tx, step_run, &head, RunState::Cancelled, Some(WHY))
                            .await?
                    {
                        end_attempts_or_steps(tx, step_run, WHY, running).await?;
                    }
                    let end = StepEnd {
                        step_name: &step.step_name,
                        state: StepState::Cancelled,
                        output: None,
                    };
                    tx.end_steps(run_id, std::slice::from_ref(&end)).await?;
                }
                _ => {}
            }
        }
        Ok(())
    })
}

/// Ends the run `run` (`run_id`) if it is unfinished and, when it held its job's turn, passes
/// the turn on; whether it ended it.
async fn end_passing_turn<T: RunEndTx + ?Sized>(
    tx: &mut T,
    run_id: i64,
    run: &RunHead,
    state: RunState,
    message: Option<&str>,
) -> Result<bool, Error> {
    if !tx.end_run(run_id, state, message).await? {
        return Ok(false);
    }
    if run.holds_turn() {
        tx.release_next_queued(run.job_id).await?;
    }
    // Whatever state the head read: an admission may have released the run since.
    if let Some(key) = &run.flow_key {
        flow::admit(tx, key).await?;
    }
    Ok(true)
}

/// Cancels the live attempts of the run `run_id`, which the caller ended, adding those running
/// to `running`; a run without attempts may be a workflow's, whose steps go with it (`POST
/// /runs/{id}/cancel` on one, or a cancelled step that is a workflow run). A job's run, which
/// has attempts, costs no read of workflow tables.
async fn end_attempts_or_steps<T: RunEndTx + ?Sized>(
    tx: &mut T,
    run_id: i64,
    why: &str,
    running: &mut Vec<AttemptRecord>,
) -> Result<(), Error> {
    let attempts = tx.attempts_of_run(run_id).await?;
    if attempts.is_empty() {
        if tx.pinned_run(run_id).await?.is_some() {
            cancel_steps(tx, run_id, running).await?;
        }
        return Ok(());
    }
    running.extend(
        attempts
            .into_iter()
            .filter(|a| a.state == AttemptState::Running),
    );
    tx.cancel_attempts_of_run(run_id, why).await
}

/// The run as it ended, for its follow-ups (a cancelled run triggers no children, but a
/// cancelled step moves its workflow run on).
fn ended(run_id: i64, run: &RunHead, state: RunState) -> EndedRun {
    EndedRun {
        run_id,
        job_id: run.job_id,
        node_id: run.node_id.clone(),
        may_be_step: true,
        may_have_children: true,
        state: state.to_owned(),
        output: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::memory::workflows::{
        add_pending_run, add_step_jobs, add_workflow, run_record,
    };
    use super::super::memory::{MemoryDb, MemoryJob, attempt_row};
    use super::super::workflow_start::start_workflow_run;
    use super::*;

    const JOB: i64 = 5;

    /// Job 5 names job 10 among its `on_failure` children; step jobs 10, 11, 12.
    fn db() -> MemoryDb {
        let mut db = MemoryDb {
            now_ms: 30_000,
            ..MemoryDb::default()
        };
        add_step_jobs(&mut db);
        db.jobs.insert(
            JOB,
            MemoryJob {
                name: "export".to_owned(),
                policy_json: r#"{"children":{"on_failure":[10]}}"#.to_owned(),
                ..MemoryJob::default()
            },
        );
        db
    }

    /// Starts workflow run `run` with empty params; it must start.
    async fn start(db: &mut MemoryDb, run: &crate::store::RunRecord) {
        start_workflow_run(db, run, "{}").await.unwrap().unwrap();
    }

    /// Workflow 2 whose only step is workflow 1, whose only step is job 10: both started; the
    /// outer run and the inner one's id.
    async fn nested() -> (MemoryDb, crate::store::RunRecord, i64) {
        let mut db = db();
        add_workflow(&mut db, 1, r#"{"steps":[{"name":"a","job_id":10}]}"#);
        add_workflow(&mut db, 2, r#"{"steps":[{"name":"inner","job_id":1}]}"#);
        let outer = add_pending_run(&mut db, 2, 1_000, None);
        start(&mut db, &outer).await;
        let inner = db.steps(outer.run_id)[0].run_id.unwrap();
        let inner_run = run_record(&db, inner);
        start(&mut db, &inner_run).await;
        (db, outer, inner)
    }

    fn state(db: &MemoryDb, run_id: i64) -> &str {
        db.runs
            .iter()
            .find(|r| r.run_id == run_id)
            .unwrap()
            .state
            .as_str()
    }

    fn set_state(db: &mut MemoryDb, run_id: i64, to: &str) {
        db.runs
            .iter_mut()
            .find(|r| r.run_id == run_id)
            .unwrap()
            .state = to.parse().unwrap();
    }

    /// A live attempt of `run_id` in `state`.
    fn add_attempt(db: &mut MemoryDb, run_id: i64, state: &str) -> i64 {
        let id = db.attempts.len() as i64 + 1;
        let job_id = db.runs.iter().find(|r| r.run_id == run_id).unwrap().job_id;
        let mut attempt = attempt_row(id, run_id, job_id, (0, 1), 1);
        attempt.state = state.parse().unwrap();
        db.attempts.push(attempt);
        id
    }

    #[tokio::test]
    async fn a_run_that_found_no_executor_passes_its_turn_and_triggers_its_failure_children() {
        let mut db = db();
        let run = add_pending_run(&mut db, JOB, 1_000, None).run_id;
        let queued = add_pending_run(&mut db, JOB, 2_000, None).run_id;
        set_state(&mut db, queued, "queued");
        let followed = end_run(&mut db, run, RunState::NoExecutor, Some("no executor"))
            .await
            .unwrap()
            .expect("it was unfinished");
        assert_eq!(followed.created, 1, "its on_failure child");
        assert_eq!(state(&db, run), "no_executor");
        assert_eq!(state(&db, queued), "pending");
        assert_eq!(db.child_runs.len(), 1);
        assert!(
            end_run(&mut db, run, RunState::Failed, None)
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(
            state(&db, run),
            "no_executor",
            "an ended run stays as it ended"
        );
    }

    #[tokio::test]
    async fn a_queued_run_that_ends_passes_no_turn() {
        let mut db = db();
        let first = add_pending_run(&mut db, JOB, 1_000, None).run_id;
        let second = add_pending_run(&mut db, JOB, 2_000, None).run_id;
        let third = add_pending_run(&mut db, JOB, 3_000, None).run_id;
        set_state(&mut db, second, "queued");
        set_state(&mut db, third, "queued");
        end_run_with_attempts(&mut db, second, RunState::Cancelled, "cancelled by alice")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (state(&db, first), state(&db, third)),
            ("pending", "queued")
        );
    }

    #[tokio::test]
    async fn a_cancel_ends_the_runs_attempts_and_returns_the_running_ones() {
        let mut db = db();
        let run = add_pending_run(&mut db, JOB, 1_000, None).run_id;
        let running = add_attempt(&mut db, run, "running");
        let pending = add_attempt(&mut db, run, "pending");
        let (told, followed) =
            end_run_with_attempts(&mut db, run, RunState::Cancelled, "cancelled by alice")
                .await
                .unwrap()
                .unwrap();
        assert_eq!(
            told.iter().map(|a| a.attempt_id).collect::<Vec<_>>(),
            [running]
        );
        assert_eq!(followed.created, 0, "a cancelled run triggers no children");
        for id in [running, pending] {
            let attempt = db.attempts.iter().find(|a| a.attempt_id == id).unwrap();
            assert_eq!(
                (attempt.state.as_str(), attempt.error.as_deref()),
                ("cancelled", Some("cancelled by alice"))
            );
        }
        assert!(
            end_run_with_attempts(&mut db, run, RunState::Cancelled, "again")
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_workflow_runs_cancel_ends_its_steps_and_their_runs_and_passes_every_turn() {
        let mut db = db();
        add_workflow(
            &mut db,
            1,
            r#"{"steps":[{"name":"a","job_id":10},{"name":"b","job_id":11,"needs":[{"step":"a"}]}]}"#,
        );
        let workflow_run = add_pending_run(&mut db, 1, 1_000, None);
        start(&mut db, &workflow_run).await;
        let workflow_run = workflow_run.run_id;
        let a_run = db.steps(workflow_run)[0].run_id.unwrap();
        db.attempts[0].state = AttemptState::Running;
        // Runs queued behind the workflow run and behind its running step's run.
        let after_workflow = add_pending_run(&mut db, 1, 2_000, None).run_id;
        let after_step = add_pending_run(&mut db, 10, 2_000, None).run_id;
        set_state(&mut db, after_workflow, "queued");
        set_state(&mut db, after_step, "queued");
        let (told, _) = cancel_workflow_run(&mut db, workflow_run)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(told.len(), 1, "the step's running attempt");
        let steps: Vec<(&str, &str)> = db
            .steps(workflow_run)
            .into_iter()
            .map(|s| (s.step_name.as_str(), s.state.as_str()))
            .collect();
        assert_eq!(steps, [("a", "cancelled"), ("b", "cancelled")]);
        assert_eq!(
            (state(&db, workflow_run), state(&db, a_run)),
            ("cancelled", "cancelled")
        );
        assert_eq!(db.attempts[0].state, AttemptState::Cancelled);
        assert_eq!(
            (state(&db, after_workflow), state(&db, after_step)),
            ("pending", "pending")
        );
        assert!(
            cancel_workflow_run(&mut db, workflow_run)
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_cancelled_inner_workflow_run_fails_the_outer_run_it_is_a_step_of() {
        let (mut db, outer, inner) = nested().await;
        let (_, followed) = cancel_workflow_run(&mut db, inner).await.unwrap().unwrap();
        let ended: Vec<i64> = followed.workflows_ended.iter().map(|r| r.run_id).collect();
        assert_eq!(ended, [outer.run_id]);
        assert_eq!(state(&db, outer.run_id), "failed");
        assert_eq!(db.steps(outer.run_id)[0].state, StepState::Cancelled);
    }

    #[tokio::test]
    async fn an_outer_workflow_runs_cancel_reaches_the_steps_of_an_inner_one() {
        let (mut db, outer, inner) = nested().await;
        let a_run = db.steps(inner)[0].run_id.unwrap();
        db.attempts[0].state = AttemptState::Running;
        let (told, _) = cancel_workflow_run(&mut db, outer.run_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(told.len(), 1, "the inner step's running attempt");
        assert_eq!(
            (
                state(&db, outer.run_id),
                state(&db, inner),
                state(&db, a_run)
            ),
            ("cancelled", "cancelled", "cancelled")
        );
        assert_eq!(db.steps(inner)[0].state, StepState::Cancelled);
        assert_eq!(db.steps(outer.run_id)[0].state, StepState::Cancelled);
    }

    #[tokio::test]
    async fn a_workflows_run_ended_as_any_run_takes_its_steps_with_it() {
        let mut db = db();
        add_workflow(&mut db, 1, r#"{"steps":[{"name":"a","job_id":10}]}"#);
        let run = add_pending_run(&mut db, 1, 1_000, None);
        start(&mut db, &run).await;
        let a_run = db.steps(run.run_id)[0].run_id.unwrap();
        end_run_with_attempts(
            &mut db,
            run.run_id,
            RunState::Cancelled,
            "cancelled through the API",
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(state(&db, a_run), "cancelled");
        assert_eq!(db.steps(run.run_id)[0].state, StepState::Cancelled);
    }
}
