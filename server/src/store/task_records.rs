//! `TaskStore`, its rows and parameters.

use async_trait::async_trait;

use super::{AuditWrite, Error, JobRecord, NamespaceId, PartitionEpoch};
use crate::states::{JobKind, JobState, TaskState};

/// A task to insert, its id and partition chosen by the node.
#[derive(Debug, Clone)]
pub struct TaskWrite {
    pub task_id: i64,
    pub partition_id: i64,
    pub namespace_id: NamespaceId,
    /// Unique among the namespace's unfinished tasks.
    pub key: Option<String>,
    pub app_name: String,
    pub handler_name: String,
    pub args_json: String,
    pub policy_json: String,
    pub priority: i64,
    pub due_at_ms: i64,
}

/// What an enqueue did with one task, in the batch's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// Stored under the id given.
    Created(i64),
    /// An unfinished task already held the key: this is its id.
    Existing(i64),
}

/// A stored task, with its run once it fired.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct TaskRecord {
    pub task_id: i64,
    pub partition_id: i64,
    pub task_key: Option<String>,
    pub app_name: String,
    pub handler_name: String,
    pub args_json: String,
    /// What the task set of a job's policy (the rest is the default), decoded with the row.
    #[sqlx(rename = "policy_json", try_from = "String")]
    pub stored_policy: super::StoredPolicy,
    pub priority: i64,
    pub due_at_ms: i64,
    pub state: TaskState,
    pub created_at_ms: i64,
    pub ended_at_ms: Option<i64>,
    pub message: Option<String>,
    /// Its run, once fired.
    pub run_id: Option<i64>,
    pub run_state: Option<String>,
    pub namespace_id: NamespaceId,
}

impl TaskRecord {
    /// The job id its run carries: the task's id negated (job ids are positive).
    pub fn run_job_id(&self) -> i64 {
        -self.task_id
    }

    /// The policy its run follows, or the error naming the task whose stored policy does not
    /// read.
    pub fn policy(&self) -> Result<&crate::jobs::JobPolicy, super::Error> {
        self.stored_policy.read(|| format!("task {}", self.task_id))
    }

    /// The task as the one-shot job its run belongs to, so the fire path (plan, retry,
    /// timeout, balance) treats it as any job. Its name is `task <id>`.
    pub fn job_view(&self) -> JobRecord {
        JobRecord {
            job_id: self.run_job_id(),
            partition_id: self.partition_id,
            name: format!("task {}", self.task_id),
            app_name: self.app_name.clone(),
            handler_name: self.handler_name.clone(),
            schedule_json: "null".to_owned(),
            timezone: "UTC".to_owned(),
            args_json: self.args_json.clone(),
            stored_policy: self.stored_policy.clone(),
            state: JobState::Running,
            version: 1,
            last_fired_at_ms: None,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.created_at_ms,
            started_at_ms: None,
            fired_count: 0,
            kind: JobKind::Job,
            namespace_id: self.namespace_id,
        }
    }
}

/// Whether a run's job id names a task, and which.
pub fn task_of_job_id(job_id: i64) -> Option<i64> {
    (job_id < 0).then_some(-job_id)
}

/// What `tasks_list` returns, newest first.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    /// Tasks of this namespace only; of every namespace when `None`.
    pub namespace: Option<NamespaceId>,
    pub app: Option<String>,
    pub handler: Option<String>,
    /// `pending` or `fired`.
    pub state: Option<String>,
    pub due_from_ms: Option<i64>,
    pub due_to_ms: Option<i64>,
    /// Only tasks with an id below this (the page before).
    pub before_id: Option<i64>,
    pub limit: i64,
}

/// A window of due tasks fired: what the owner's fire stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TasksFired {
    /// Tasks read from the window.
    pub read: usize,
    /// Tasks that became runs.
    pub fired: usize,
    /// Of those, how many of each namespace.
    pub fired_by_namespace: std::collections::BTreeMap<NamespaceId, u64>,
    /// Tasks of partitions this node no longer owns at their epoch.
    pub fenced: usize,
}

/// Tasks: delayed one-shot work enqueued in bulk and fired by the owner of its partition. A
/// task's run carries `job_id = -task_id` (job ids are positive), so the runs' key allows one
/// run per task.
#[async_trait]
pub trait TaskStore: Send + Sync + std::fmt::Debug + 'static {
    /// Takes `count` task ids for this node to give out: the first of them.
    async fn task_ids_take(&self, count: i64) -> Result<i64, Error>;

    /// Stores a batch in one transaction; per task, in order: created, or the id of the
    /// unfinished task that already holds its key. A finished task (cancelled, or its run
    /// ended) gives its key up to the new one. `audit`, the event of the call, is written in
    /// the same transaction when a task was created (none is when every key was held).
    async fn tasks_enqueue(
        &self,
        tasks: &[TaskWrite],
        audit: Option<&AuditWrite>,
    ) -> Result<Vec<Enqueued>, Error>;

    async fn task_get(&self, task_id: i64) -> Result<Option<TaskRecord>, Error>;

    async fn task_by_key(
        &self,
        namespace: NamespaceId,
        key: &str,
    ) -> Result<Option<TaskRecord>, Error>;

    /// The tasks of `task_ids` that exist, in any order.
    async fn tasks_get_many(&self, task_ids: &[i64]) -> Result<Vec<TaskRecord>, Error>;

    /// Tasks newest first.
    async fn tasks_list(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, Error>;

    /// Deletes a task: only while it is `pending` when `only_pending` (so a task that fired
    /// meanwhile stays), or whatever its state; `false` when nothing was deleted. `audit` is
    /// written with the deletion, in its transaction.
    async fn task_remove(
        &self,
        task_id: i64,
        only_pending: bool,
        audit: Option<&AuditWrite>,
    ) -> Result<bool, Error>;

    /// Deletes up to `limit` tasks of `partitions` that left `pending` before
    /// `ended_before_ms` and whose run is gone (purged by the run-history rules; a cancelled
    /// task has none), oldest first; how many it deleted.
    async fn tasks_purge(
        &self,
        partitions: &[i64],
        ended_before_ms: i64,
        limit: i64,
    ) -> Result<u64, Error>;

    /// Fires the window: the pending tasks of `partitions` (`(partition, epoch)`, this node's)
    /// due by `due_by_ms`, at most `limit`, earliest first. One transaction, fenced by the
    /// partitions' epochs: each task moves to `fired` and gets its run (`running`, trigger
    /// `task`) and first attempt, due at the task's instant.
    async fn tasks_fire(
        &self,
        node_id: &str,
        partitions: &[PartitionEpoch],
        due_by_ms: i64,
        limit: i64,
    ) -> Result<TasksFired, Error>;
}
