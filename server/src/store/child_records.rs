//! Child jobs as the store sees them: which outcome of a run triggers which list of a job's
//! children (read from the stored policy, whose typed owner is `jobs::Children`), the runs
//! that ended in a transaction, and the input a child run is given.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Error, JobPolicyRow};
use crate::states::{ChildOutcome, RunState};

/// What the API reads of child jobs; the child runs themselves are created by the write
/// transactions that end their parents.
#[async_trait]
pub trait ChildStore: Send + Sync + std::fmt::Debug + 'static {
    /// The runs `run_id` triggered, by child job.
    async fn child_runs_of_run(&self, run_id: i64) -> Result<Vec<ChildRunRef>, Error>;

    /// A run's input (JSON), if it has one.
    async fn run_input(&self, run_id: i64) -> Result<Option<String>, Error>;

    /// Every job whose policy names children.
    async fn jobs_with_children(&self) -> Result<Vec<JobPolicyRow>, Error>;

    /// What this store's follow-ups did once committed (runs created, workflow runs ended).
    fn follow_up_events(&self) -> std::sync::Arc<FollowUpEvents>;
}

/// What follow-ups did, once their transactions committed: a node wakes its dispatcher for the
/// runs they created (a child's, a workflow step's), and reports the workflow runs that ended
/// (their metrics and alerts, as for any run's end).
#[derive(Debug, Default)]
pub struct FollowUpEvents {
    happened: tokio::sync::Notify,
    /// Workflow runs ended, not yet reported.
    ended: std::sync::Mutex<Vec<EndedWorkflowRun>>,
}

impl FollowUpEvents {
    /// Records a committed transaction's follow-ups.
    pub fn note(&self, created: usize, workflows_ended: &[EndedRun]) {
        if created == 0 && workflows_ended.is_empty() {
            return;
        }
        if !workflows_ended.is_empty() {
            let mut ended = self
                .ended
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            ended.extend(workflows_ended.iter().map(|r| EndedWorkflowRun {
                run_id: r.run_id,
                workflow_id: r.job_id,
                state: r.state,
            }));
        }
        self.happened.notify_one();
    }

    /// Waits for follow-ups, then returns the workflow runs ended since the last call.
    pub async fn next(&self) -> Vec<EndedWorkflowRun> {
        self.happened.notified().await;
        std::mem::take(
            &mut *self
                .ended
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// A child run that a parent run triggered (`child_runs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct ChildRunRef {
    pub child_job_id: i64,
    pub child_run_id: i64,
}

/// A workflow run that ended in a committed transaction, to report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndedWorkflowRun {
    pub run_id: i64,
    pub workflow_id: i64,
    pub state: RunState,
}

/// What the follow-ups of one transaction did, to note once it commits.
#[derive(Debug, Default)]
pub struct FollowedUp {
    pub created: usize,
    pub workflows_ended: Vec<EndedRun>,
}

/// Largest parent output passed on to a child (serialised); a larger one is left out and the
/// input says so.
pub const CHILD_OUTPUT_CAP: usize = 1 << 20;

/// `(list, child job id)` for every child a stored policy names, in the order written; an
/// error for a policy that does not read (the one rule: never no children in its place).
pub fn policy_children(policy_json: &str) -> Result<Vec<(ChildOutcome, i64)>, serde_json::Error> {
    Ok(crate::jobs::JobPolicy::from_stored(policy_json)?
        .children
        .named()
        .collect())
}

/// A run that ended in a write transaction, for its job's children.
#[derive(Debug, Clone)]
pub struct EndedRun {
    pub run_id: i64,
    pub job_id: i64,
    /// The node that created it; its children are recorded as created by the same node.
    pub node_id: String,
    /// It may be a workflow's step (it has an input): only such runs are looked up among
    /// the steps, so ending a plain job's runs costs no statement more.
    pub may_be_step: bool,
    /// Its job may name children: only such runs' jobs are looked up for them.
    pub may_have_children: bool,
    pub state: RunState,
    /// What its executors answered: the only shard's output, or every shard's in order.
    pub output: Option<Value>,
}

impl EndedRun {
    /// The input of a child run of this run, whose job is named `job`.
    pub fn child_input(&self, job: &str) -> String {
        let output = self.output.clone().unwrap_or(Value::Null);
        let too_big = serde_json::to_string(&output).map_or(0, |s| s.len()) > CHILD_OUTPUT_CAP;
        let mut parent = json!({
            "run_id": self.run_id,
            "job_id": self.job_id,
            "job": job,
            "state": self.state,
            "output": if too_big { Value::Null } else { output },
        });
        if too_big {
            parent["output_left_out"] = json!(format!(
                "the output was larger than {CHILD_OUTPUT_CAP} bytes"
            ));
        }
        json!({ "parent": parent }).to_string()
    }
}

/// The output of a run from its shards' latest outputs (`(shard, output text)`), each read as
/// JSON where it is (an executor's answer is JSON text), else as a string.
pub fn run_output(shards: &[(i64, Option<&str>)]) -> Option<Value> {
    let read = |o: Option<&str>| {
        o.map(|text| serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())))
    };
    match shards {
        [] => None,
        [(_, only)] => read(*only),
        many => Some(Value::Array(
            many.iter()
                .map(|(_, o)| read(*o).unwrap_or(Value::Null))
                .collect(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_names_its_children_by_list() {
        let policy = r#"{"priority":5,"children":{"on_success":[3,4],"always":[9]}}"#;
        assert_eq!(
            policy_children(policy).ok(),
            Some(vec![
                (ChildOutcome::OnSuccess, 3),
                (ChildOutcome::OnSuccess, 4),
                (ChildOutcome::Always, 9)
            ])
        );
        assert_eq!(policy_children(r#"{"priority":5}"#).ok(), Some(Vec::new()));
        assert!(policy_children("not json").is_err());
        assert!(
            policy_children(r#"{"children":{"on_success":"3"}}"#).is_err(),
            "a list of the wrong type is unreadable, not empty"
        );
    }

    #[test]
    fn cancelled_and_skipped_runs_trigger_nothing() {
        use ChildOutcome::*;
        assert_eq!(
            ChildOutcome::triggered_by(RunState::Succeeded),
            [OnSuccess, Always]
        );
        assert_eq!(
            ChildOutcome::triggered_by(RunState::NoExecutor),
            [OnFailure, Always]
        );
        assert!(ChildOutcome::triggered_by(RunState::Cancelled).is_empty());
        assert!(ChildOutcome::triggered_by(RunState::Skipped).is_empty());
    }

    #[test]
    fn an_output_past_the_cap_is_left_out_and_said() {
        let big = EndedRun {
            run_id: 1,
            job_id: 2,
            node_id: "n".into(),
            may_be_step: false,
            may_have_children: true,
            state: RunState::Succeeded,
            output: Some(Value::String("x".repeat(CHILD_OUTPUT_CAP + 1))),
        };
        let input: Value = serde_json::from_str(&big.child_input("a")).unwrap();
        assert_eq!(input["parent"]["output"], Value::Null);
        assert!(input["parent"]["output_left_out"].is_string());
        let shards = run_output(&[(0, Some("{\"n\":1}")), (1, None), (2, Some("plain"))]);
        assert_eq!(shards, Some(json!([{"n": 1}, null, "plain"])));
    }
}
