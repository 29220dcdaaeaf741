//! The rows and parameters of `TaskStore`.

use super::JobRecord;

/// A task's stored states. A fired task's progress is its run's.
pub mod task_state {
    /// Waiting for its instant.
    pub const PENDING: &str = "pending";
    /// Its run exists (`runs.job_id = -task_id`).
    pub const FIRED: &str = "fired";
    /// How the API shows a task it cancelled and deleted (no row is stored so).
    pub const CANCELLED: &str = "cancelled";
}

/// A task to insert, its id and partition chosen by the node.
#[derive(Debug, Clone)]
pub struct TaskWrite {
    pub task_id: i64,
    pub partition_id: i64,
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
    pub policy_json: String,
    pub priority: i64,
    pub due_at_ms: i64,
    pub state: String,
    pub created_at_ms: i64,
    pub ended_at_ms: Option<i64>,
    pub message: Option<String>,
    /// Its run, once fired.
    pub run_id: Option<i64>,
    pub run_state: Option<String>,
}

impl TaskRecord {
    /// The job id its run carries: the task's id negated (job ids are positive).
    pub fn run_job_id(&self) -> i64 {
        -self.task_id
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
            policy_json: self.policy_json.clone(),
            state: super::job_state::RUNNING.to_owned(),
            version: 1,
            last_fired_at_ms: None,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.created_at_ms,
            started_at_ms: None,
            fired_count: 0,
            kind: super::job_kind::JOB.to_owned(),
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TasksFired {
    /// Tasks read from the window.
    pub read: usize,
    /// Tasks that became runs.
    pub fired: usize,
    /// Tasks of partitions this node no longer owns at their epoch.
    pub fenced: usize,
}
