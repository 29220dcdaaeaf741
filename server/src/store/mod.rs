//! Storage: the one interface every other module uses to reach the database.
//!
//! Architecture invariant: this module is the only place that knows SQL and `sqlx`. Every lease
//! and liveness comparison is made with the database's clock (`now_ms` columns computed in SQL),
//! never with a node's clock.

mod audit_records;
mod child_records;
mod cluster_records;
mod dialect;
mod dispatch_records;
mod error;
mod flow_records;
mod grant_records;
mod history_records;
mod job_records;
mod log_records;
mod namespace_records;
mod policy_records;
mod rules;
mod secret_records;
mod sql_store;
mod task_records;
mod text_columns;
mod token_records;
mod url;
mod workflow_records;

use std::sync::Arc;
use std::time::Duration;

pub use audit_records::{AuditFilter, AuditRecord, AuditStore, AuditWrite};
pub use child_records::{
    CHILD_OUTPUT_CAP, ChildRunRef, ChildStore, EndedRun, EndedWorkflowRun, FollowUpEvents,
    FollowedUp, policy_children, run_output,
};
pub use cluster_records::{
    ClusterMeta, ClusterStore, LeaderFence, LeaderRecord, NodeList, NodeRecord, NodeRegistration,
    PartitionChange, PartitionEpoch, PartitionRecord, StandbyStore,
};
pub use dispatch_records::{
    ANY_HANDLER, AttemptEnd, AttemptEnded, AttemptRecord, DispatchStore, DueAttempt, ExecutorList,
    ExecutorLoad, ExecutorOwner, ExecutorRecord, ExecutorRegistration, LateRun, MinuteCount,
    NewAttempt, RegistrationOutcome, RunFilter, XxlJobRunning, executor_protocol,
};
pub use error::Error;
pub use flow_records::{Admitted, FlowStore, RunInLine};
pub use grant_records::{GrantRecord, GrantStore, GrantWrite};
pub use history_records::{
    DEAD_LETTER_STATES, HistoryStore, JobHistoryRule, PurgeScope, PurgeStates, PurgeStep, Purged,
};
pub use job_records::{
    ClaimOutcome, JobChanges, JobFilter, JobInsert, JobKey, JobOrder, JobPolicyRow, JobRecord,
    JobStore, JobWrite, OverlapRule, RunClaim, RunRecord, ScheduledJob, StoredPolicy,
};
pub use log_records::{LogAppend, LogCaps, LogLine, LogStore, NewLogLine, TRUNCATED_LINE};
pub use namespace_records::{
    NamespaceDeletion, NamespaceId, NamespaceQuotas, NamespaceRecord, NamespaceStore,
    NamespaceUsage, NamespaceWrite,
};
pub use policy_records::{
    BackfillRecord, BackfillStep, CalendarRecord, InstantEnd, JobInstant, PolicyStore,
};
pub use rules::attempt_end::PlainSuccessCheck;
pub use secret_records::{SecretRecord, SecretStore, SecretWrite};
pub use task_records::{
    Enqueued, TaskFilter, TaskRecord, TaskStore, TaskWrite, TasksFired, task_of_job_id,
};
pub use token_records::{TokenRecord, TokenStore, TokenWrite};
pub use url::{Backend, DatabaseUrl};
pub use workflow_records::{
    StepRunRecord, WorkflowRunRecord, WorkflowStore, WorkflowWrite, params_of,
};

/// Connection settings for one pool.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    pub max_connections: u32,
    /// How long a caller waits for a free connection. Short for the pool that renews leases, so
    /// a lost database is noticed well inside a lease (sqlx waits 30 s by default).
    pub acquire_timeout: Duration,
    /// Server-side limit on one statement (and on lock waits), where the backend supports it;
    /// half again more, and the node gives the statement up and closes its connection.
    pub statement_timeout: Duration,
    /// PostgreSQL reached through a pooler in transaction mode (pgbouncer): every statement
    /// runs in a transaction, unnamed, with the settings set per transaction (`sql_store::connections`).
    pub transaction_pooler: bool,
}

/// Where the database's schema is against this build's migrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaVersion {
    pub applied: Option<i64>,
    pub wanted: i64,
}

/// The storage interface. One implementation per backend; the same conformance suite runs
/// against all of them.
///
/// Method names are noun first (`leader_try_acquire`, `partitions_apply`) so related calls sort
/// together.
pub trait Store:
    ClusterStore
    + JobStore
    + DispatchStore
    + HistoryStore
    + PolicyStore
    + TaskStore
    + LogStore
    + StandbyStore
    + ChildStore
    + WorkflowStore
    + NamespaceStore
    + TokenStore
    + SecretStore
    + FlowStore
    + GrantStore
    + AuditStore
{
}

impl<
    T: ClusterStore
        + JobStore
        + DispatchStore
        + HistoryStore
        + PolicyStore
        + TaskStore
        + LogStore
        + StandbyStore
        + ChildStore
        + WorkflowStore
        + NamespaceStore
        + TokenStore
        + SecretStore
        + FlowStore
        + GrantStore
        + AuditStore,
> Store for T
{
}

/// The job a run belongs to: the job itself, or for a task's run (a negative job id) the task
/// as a one-shot job (`TaskRecord::job_view`). `None` when neither exists any more.
pub async fn job_of_run(store: &dyn Store, job_id: i64) -> Result<Option<JobRecord>, Error> {
    match task_of_job_id(job_id) {
        Some(task_id) => Ok(store.task_get(task_id).await?.map(|t| t.job_view())),
        None => store.job_get(job_id).await,
    }
}

/// [`job_of_run`] for many runs' job ids at once (two statements at most).
pub async fn jobs_of_runs(store: &dyn Store, job_ids: &[i64]) -> Result<Vec<JobRecord>, Error> {
    let (tasks, jobs): (Vec<i64>, Vec<i64>) = job_ids.iter().partition(|id| **id < 0);
    let mut found = if jobs.is_empty() {
        Vec::new()
    } else {
        store.jobs_get_many(&jobs).await?
    };
    if !tasks.is_empty() {
        let task_ids: Vec<i64> = tasks.iter().map(|id| -id).collect();
        found.extend(
            store
                .tasks_get_many(&task_ids)
                .await?
                .iter()
                .map(TaskRecord::job_view),
        );
    }
    Ok(found)
}

/// Opens a pool for the database `url` names and returns its store.
pub async fn connect(url: &DatabaseUrl, options: &PoolOptions) -> Result<Arc<dyn Store>, Error> {
    // sqlx verifies a server's certificate with rustls' process-wide provider.
    carillon_tls::install_default_provider();
    let store: Arc<dyn Store> = match url.backend() {
        Backend::Postgres => Arc::new(sql_store::PostgresStore::connect(url, options).await?),
        Backend::Mysql => Arc::new(sql_store::MysqlStore::connect(url, options).await?),
        Backend::Sqlite => Arc::new(sql_store::SqliteStore::connect(url, options).await?),
    };
    Ok(store)
}
