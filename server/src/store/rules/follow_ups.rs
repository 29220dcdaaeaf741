//! What follows a run's end inside the transaction that ended it: the runs of its job's
//! children (one per parent run and child job, with the parent's outcome as input), and the
//! insertion rule every follow-up run shares (a child's, a workflow step's, a rerun's): at the
//! first free millisecond of its job, started with its attempt when it is one attempt.

use std::collections::HashMap;

use async_trait::async_trait;

use super::super::child_records::{EndedRun, policy_children};
use super::super::error::Error;
use super::super::job_records::{StoredPolicy, policy_priority};
use super::super::namespace_records::NamespaceId;
use super::claim::{FirstAttempt, FirstAttemptTx};
use crate::states::{ChildOutcome, RunState, TriggerKind};

/// A run that follows another's end (a child job's, a workflow's next step, a rerun).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FollowUp<'a> {
    pub(crate) job_id: i64,
    pub(crate) partition_id: i64,
    /// The job's.
    pub(crate) namespace_id: NamespaceId,
    /// The node that created the run it follows.
    pub(crate) node_id: &'a str,
    /// `child`, `step` or `manual`.
    pub(crate) trigger_kind: TriggerKind,
    /// JSON.
    pub(crate) input: &'a str,
    /// The job's arguments and policy (JSON): a run that is one attempt with the job's
    /// arguments (`JobPolicy::starts_as_one_attempt`) starts with its attempt, so no start
    /// pass (and its commit) stands between a step and the next. The policy also gives the
    /// run's priority.
    pub(crate) args_json: &'a str,
    pub(crate) policy_json: &'a str,
}

/// A follow-up run to insert at one instant, in the state the rule chose.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FollowUpRow<'a> {
    pub(crate) run: &'a FollowUp<'a>,
    pub(crate) scheduled_at_ms: i64,
    /// `running` (started with its attempt) or `pending`.
    pub(crate) state: RunState,
    pub(crate) priority: i64,
}

/// A job whose policy names children, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParentJob {
    pub(crate) job_id: i64,
    pub(crate) name: String,
    pub(crate) policy_json: String,
}

/// A job a follow-up run belongs to, its row locked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FollowUpJob {
    pub(crate) job_id: i64,
    pub(crate) partition_id: i64,
    pub(crate) namespace_id: NamespaceId,
    pub(crate) policy_json: String,
    pub(crate) args_json: String,
}

/// A child run created for a parent run, for `child_runs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChildRunLink {
    pub(crate) parent_run_id: i64,
    pub(crate) child_job_id: i64,
    pub(crate) child_run_id: i64,
}

/// What follow-ups need of a write transaction: statements with their binds.
#[async_trait]
pub(crate) trait FollowUpTx: FirstAttemptTx {
    /// Those of `job_ids` (sorted, distinct) whose stored policy names children.
    async fn parents_with_children(&mut self, job_ids: &[i64]) -> Result<Vec<ParentJob>, Error>;

    /// `job_ids` (sorted, distinct), their rows locked in id order: follow-ups of one job
    /// take their instants one transaction at a time.
    async fn lock_follow_up_jobs(&mut self, job_ids: &[i64]) -> Result<Vec<FollowUpJob>, Error>;

    /// The database's clock, in epoch milliseconds.
    async fn now_ms(&mut self) -> Result<i64, Error>;

    /// Inserts the run unless its job has one at that instant; its id if inserted.
    async fn insert_follow_up_run(&mut self, row: &FollowUpRow<'_>) -> Result<Option<i64>, Error>;

    async fn record_child_runs(&mut self, links: &[ChildRunLink]) -> Result<(), Error>;
}

/// Creates the child runs of the runs `ended` in this transaction: one per (run, child job)
/// its job's policy names in a list its state triggers, in the child's partition, with the
/// parent's run, state and output as input. Returns how many it created.
pub(crate) async fn children<T: FollowUpTx + ?Sized>(
    tx: &mut T,
    ended: &[EndedRun],
) -> Result<usize, Error> {
    let mut job_ids: Vec<i64> = ended
        .iter()
        .filter(|r| {
            r.may_have_children && r.job_id > 0 && !ChildOutcome::triggered_by(r.state).is_empty()
        })
        .map(|r| r.job_id)
        .collect();
    job_ids.sort_unstable();
    job_ids.dedup();
    if job_ids.is_empty() {
        return Ok(0);
    }
    let parents = tx.parents_with_children(&job_ids).await?;
    // (child job, index of the parent run in `ended`)
    let mut wanted: Vec<(i64, usize)> = Vec::new();
    for (i, run) in ended.iter().enumerate() {
        let Some(parent) = parents.iter().find(|p| p.job_id == run.job_id) else {
            continue;
        };
        let named = match policy_children(&parent.policy_json) {
            Ok(named) => named,
            Err(e) => {
                // Nobody waits for an answer here: the run's end stands, and the children it
                // would have started are reported as not started.
                tracing::error!(
                    parent_run = run.run_id,
                    parent_job = run.job_id,
                    error = %e,
                    "the stored policy of the parent job is unreadable; its children do not run"
                );
                continue;
            }
        };
        let lists = ChildOutcome::triggered_by(run.state);
        let mut children: Vec<i64> = named
            .into_iter()
            .filter(|(list, _)| lists.contains(list))
            .map(|(_, id)| id)
            .collect();
        // A child named in two lists that both apply runs once.
        children.sort_unstable();
        children.dedup();
        wanted.extend(children.into_iter().map(|c| (c, i)));
    }
    let mut child_ids: Vec<i64> = wanted.iter().map(|(c, _)| *c).collect();
    child_ids.sort_unstable();
    child_ids.dedup();
    if child_ids.is_empty() {
        return Ok(0);
    }
    let jobs = tx.lock_follow_up_jobs(&child_ids).await?;
    wanted.sort_by_key(|(child, i)| (*child, ended[*i].run_id));
    let now = tx.now_ms().await?;
    // (parent run, the child job's row, the child run's input)
    let mut made = Vec::with_capacity(wanted.len());
    for (child, i) in wanted {
        let parent = &ended[i];
        let Some(job) = jobs.iter().find(|j| j.job_id == child) else {
            // Deleted since the parent's policy named it (a deletion of a job that is a child
            // is refused; this is the race with it).
            tracing::warn!(
                parent_run = parent.run_id,
                child_job = child,
                "a child job is gone; its run is not created"
            );
            continue;
        };
        let name = parents
            .iter()
            .find(|p| p.job_id == parent.job_id)
            .map_or("", |p| p.name.as_str());
        made.push((parent, job, parent.child_input(name)));
    }
    let follow_ups: Vec<FollowUp<'_>> = made
        .iter()
        .map(|(parent, job, input)| FollowUp {
            job_id: job.job_id,
            partition_id: job.partition_id,
            namespace_id: job.namespace_id,
            node_id: &parent.node_id,
            trigger_kind: TriggerKind::Child,
            input,
            args_json: &job.args_json,
            policy_json: &job.policy_json,
        })
        .collect();
    let runs = follow_up_runs(tx, &follow_ups, now).await?;
    let links: Vec<ChildRunLink> = made
        .iter()
        .zip(&runs)
        .map(|((parent, job, _), (run_id, _))| ChildRunLink {
            parent_run_id: parent.run_id,
            child_job_id: job.job_id,
            child_run_id: *run_id,
        })
        .collect();
    if !links.is_empty() {
        tx.record_child_runs(&links).await?;
    }
    Ok(runs.len())
}

/// Inserts `runs`, each at the first free millisecond of its job from `now_ms` (the jobs are
/// locked by the caller, so no other follow-up takes one meanwhile; two of one job here take
/// consecutive ones), `running` with its attempt when it is one attempt with its job's
/// arguments, `pending` otherwise. Returns each one's id and instant, in order.
pub(crate) async fn follow_up_runs<T: FollowUpTx + ?Sized>(
    tx: &mut T,
    runs: &[FollowUp<'_>],
    now_ms: i64,
) -> Result<Vec<(i64, i64)>, Error> {
    let mut next_free: HashMap<i64, i64> = HashMap::new();
    let mut inserted = Vec::with_capacity(runs.len());
    let mut firsts = Vec::new();
    for run in runs {
        let policy = StoredPolicy::from(run.policy_json.to_owned());
        // A policy that does not read leaves the run pending: its start fails it, naming the
        // policy.
        let one_attempt = policy.decoded().is_some_and(|p| p.starts_as_one_attempt());
        let priority = i64::from(policy_priority(&policy));
        let state = if one_attempt {
            RunState::Running
        } else {
            RunState::Pending
        };
        let from = next_free.get(&run.job_id).copied().unwrap_or(now_ms);
        let mut placed = None;
        for at in from..from + 1_000 {
            let row = FollowUpRow {
                run,
                scheduled_at_ms: at,
                state,
                priority,
            };
            if let Some(run_id) = tx.insert_follow_up_run(&row).await? {
                placed = Some((run_id, at));
                break;
            }
        }
        let Some((run_id, at)) = placed else {
            return Err(Error::Conflict {
                what: format!("every millisecond of a second for job {}", run.job_id),
            });
        };
        next_free.insert(run.job_id, at + 1);
        if one_attempt {
            firsts.push(FirstAttempt {
                run_id,
                job_id: run.job_id,
                partition_id: run.partition_id,
                priority,
                shard_index: 0,
                shard_total: 1,
                args_json: run.args_json,
                not_before_ms: at,
                executor_id: None,
            });
        }
        inserted.push((run_id, at));
    }
    if !firsts.is_empty() {
        tx.insert_first_attempts(&firsts).await?;
    }
    Ok(inserted)
}

#[cfg(test)]
mod tests {
    use super::super::memory::{MemoryDb, MemoryJob};
    use super::*;

    const PARENT: i64 = 1;
    const NOW: i64 = 50_000;

    /// A parent job naming `children` (a policy's `children` object), and child jobs 10, 11
    /// (one attempt each) and 12 (sharded: it starts pending).
    fn db(children: &str) -> MemoryDb {
        let mut db = MemoryDb {
            now_ms: NOW,
            ..MemoryDb::default()
        };
        db.jobs.insert(
            PARENT,
            MemoryJob {
                name: "nightly".to_owned(),
                policy_json: format!(r#"{{"children":{children}}}"#),
                ..MemoryJob::default()
            },
        );
        for (id, policy) in [(10, "{}"), (11, "{}"), (12, r#"{"sharding":{"count":2}}"#)] {
            db.jobs.insert(
                id,
                MemoryJob {
                    name: format!("child {id}"),
                    partition_id: id % 4,
                    policy_json: policy.to_owned(),
                    args_json: format!(r#"{{"child":{id}}}"#),
                    ..MemoryJob::default()
                },
            );
        }
        db
    }

    fn ended(run_id: i64, state: &str) -> EndedRun {
        EndedRun {
            run_id,
            job_id: PARENT,
            node_id: "n1".to_owned(),
            may_be_step: false,
            may_have_children: true,
            state: state.parse().unwrap(),
            output: Some(serde_json::json!({"rows": 3})),
        }
    }

    /// (child job, instant, state) of every run created, in creation order.
    fn created(db: &MemoryDb) -> Vec<(i64, i64, String)> {
        db.runs
            .iter()
            .map(|r| (r.job_id, r.scheduled_at_ms, r.state.as_str().to_owned()))
            .collect()
    }

    #[tokio::test]
    async fn a_runs_state_picks_the_lists_and_a_child_in_two_lists_runs_once() {
        let policy = r#"{"on_success":[10,11],"on_failure":[12],"always":[11]}"#;
        let mut succeeded = db(policy);
        assert_eq!(
            children(&mut succeeded, &[ended(100, "succeeded")])
                .await
                .unwrap(),
            2
        );
        assert_eq!(
            created(&succeeded),
            [
                (10, NOW, "running".to_owned()),
                (11, NOW, "running".to_owned())
            ]
        );
        let mut failed = db(policy);
        assert_eq!(
            children(&mut failed, &[ended(100, "no_executor")])
                .await
                .unwrap(),
            2
        );
        assert_eq!(
            created(&failed),
            [
                (11, NOW, "running".to_owned()),
                (12, NOW, "pending".to_owned())
            ],
            "a sharded child starts pending, for the start pass"
        );
        let mut cancelled = db(policy);
        assert_eq!(
            children(&mut cancelled, &[ended(100, "cancelled")])
                .await
                .unwrap(),
            0
        );
        assert!(cancelled.runs.is_empty() && cancelled.child_runs.is_empty());
    }

    #[tokio::test]
    async fn each_child_run_is_linked_to_its_parent_run_and_carries_its_outcome() {
        let mut db = db(r#"{"on_success":[10]}"#);
        children(&mut db, &[ended(100, "succeeded")]).await.unwrap();
        let run = &db.runs[0];
        assert_eq!(
            db.child_runs,
            [ChildRunLink {
                parent_run_id: 100,
                child_job_id: 10,
                child_run_id: run.run_id
            }]
        );
        assert_eq!(
            (
                run.trigger_kind.as_str(),
                run.node_id.as_str(),
                run.partition_id
            ),
            ("child", "n1", 2)
        );
        let input: serde_json::Value = serde_json::from_str(run.input.as_deref().unwrap()).unwrap();
        assert_eq!(input["parent"]["run_id"], 100, "{input}");
        assert_eq!(input["parent"]["state"], "succeeded", "{input}");
        assert_eq!(
            input["parent"]["output"],
            serde_json::json!({"rows": 3}),
            "{input}"
        );
        let attempt = &db.attempts[0];
        assert_eq!(
            (
                attempt.run_id,
                attempt.args_json.as_str(),
                attempt.not_before_ms
            ),
            (run.run_id, r#"{"child":10}"#, NOW),
            "one attempt with the child job's own arguments, due now"
        );
    }

    #[tokio::test]
    async fn a_fan_in_of_parents_gives_one_child_run_each_at_consecutive_milliseconds() {
        let mut db = db(r#"{"always":[10]}"#);
        let made = children(
            &mut db,
            &[
                ended(101, "succeeded"),
                ended(100, "failed"),
                ended(102, "succeeded"),
            ],
        )
        .await
        .unwrap();
        assert_eq!(made, 3);
        let instants: Vec<i64> = db.runs.iter().map(|r| r.scheduled_at_ms).collect();
        assert_eq!(instants, [NOW, NOW + 1, NOW + 2]);
        let parents: Vec<i64> = db.child_runs.iter().map(|l| l.parent_run_id).collect();
        assert_eq!(parents, [100, 101, 102], "in parent run order");
    }

    #[tokio::test]
    async fn an_instant_already_held_moves_the_child_run_to_the_next_free_millisecond() {
        let mut db = db(r#"{"on_success":[10]}"#);
        children(&mut db, &[ended(100, "succeeded")]).await.unwrap();
        children(&mut db, &[ended(101, "succeeded")]).await.unwrap();
        let instants: Vec<i64> = db.runs.iter().map(|r| r.scheduled_at_ms).collect();
        assert_eq!(instants, [NOW, NOW + 1]);
    }

    #[tokio::test]
    async fn a_gone_child_or_an_unreadable_parent_policy_starts_nothing_and_ends_nothing() {
        let mut gone = db(r#"{"on_success":[10,99]}"#);
        assert_eq!(
            children(&mut gone, &[ended(100, "succeeded")])
                .await
                .unwrap(),
            1
        );
        assert_eq!(gone.runs[0].job_id, 10);
        let mut unreadable = db(r#"{"on_success":"10"}"#);
        assert_eq!(
            children(&mut unreadable, &[ended(100, "succeeded")])
                .await
                .unwrap(),
            0
        );
        let mut no_children = db(r#"{"on_success":[10]}"#);
        let mut quiet = ended(100, "succeeded");
        quiet.may_have_children = false;
        assert_eq!(children(&mut no_children, &[quiet]).await.unwrap(), 0);
    }
}
