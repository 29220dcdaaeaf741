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

use async_trait::async_trait;

use crate::states::RunState;

pub use audit_records::{AuditFilter, AuditRecord, AuditStore, AuditWrite};
pub use child_records::{
    CHILD_OUTPUT_CAP, ChildRunRef, ChildStore, EndedRun, EndedWorkflowRun, FollowUpEvents,
    FollowedUp, policy_children, run_output,
};
pub use cluster_records::{
    ClusterMeta, LeaderFence, LeaderRecord, NodeList, NodeRecord, NodeRegistration,
    PartitionChange, PartitionEpoch, PartitionRecord,
};
pub use dispatch_records::{
    ANY_HANDLER, AttemptEnd, AttemptEnded, AttemptRecord, DueAttempt, ExecutorList, ExecutorLoad,
    ExecutorRecord, ExecutorRegistration, LateRun, MinuteCount, NewAttempt, RegistrationOutcome,
    RunFilter, XxlJobRunning, executor_protocol,
};
pub use error::Error;
pub use flow_records::{Admitted, FlowStore, RunInLine};
pub use grant_records::{GrantRecord, GrantStore, GrantWrite};
pub use history_records::{
    DEAD_LETTER_STATES, JobHistoryRule, PurgeScope, PurgeStates, PurgeStep, Purged,
};
pub use job_records::{
    ClaimOutcome, JobChanges, JobFilter, JobInsert, JobKey, JobOrder, JobPolicyRow, JobRecord,
    JobWrite, OverlapRule, RunClaim, RunRecord, ScheduledJob, StoredPolicy,
};
pub use log_records::{LogAppend, LogCaps, LogLine, NewLogLine, TRUNCATED_LINE};
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

/// Nodes, the leader lease and partitions.
#[async_trait]
pub trait ClusterStore: Send + Sync + std::fmt::Debug + 'static {
    fn backend(&self) -> Backend;

    /// Applies the embedded migrations of this backend.
    async fn migrate(&self) -> Result<(), Error>;

    /// The last migration applied to the database (none on a database without the schema)
    /// and the last one this build embeds.
    async fn schema_version(&self) -> Result<SchemaVersion, Error>;

    /// The database's clock, in epoch milliseconds.
    async fn now_ms(&self) -> Result<i64, Error>;

    /// Creates the cluster's partitions on first use; afterwards returns what exists. The
    /// partition count is fixed at init: a different count later is reported, not applied.
    async fn cluster_init(&self, partition_count: i64) -> Result<ClusterMeta, Error>;

    /// Registers (or re-registers) a node under a fresh incarnation. Partitions still owned by
    /// an earlier incarnation of the same node id are released with their epoch bumped, and a
    /// leadership it held is given up, so nothing the old process claimed stays valid.
    async fn node_register(&self, node: &NodeRegistration) -> Result<(), Error>;

    /// Records a heartbeat. Fails with [`Error::IncarnationLost`] when another process has
    /// registered the same node id since, or the node has left.
    async fn node_heartbeat(&self, node_id: &str, incarnation: &str) -> Result<(), Error>;

    /// Leaves the cluster at once: releases the node's partitions and its leadership and marks it
    /// left, so the others take over without waiting for a lease to run out.
    async fn node_leave(&self, node_id: &str, incarnation: &str) -> Result<(), Error>;

    /// Every node ever registered, with the database's clock at the time of reading.
    async fn nodes_list(&self) -> Result<NodeList, Error>;

    /// The leader lease row as it is now.
    async fn leader_get(&self) -> Result<LeaderRecord, Error>;

    /// Takes or renews the leader lease in one short transaction: the row is locked, then taken
    /// only if its lease has expired (incrementing `term`) or renewed if `node_id` already holds
    /// it. Returns the row as it stands after the attempt; the caller compares `node_id`.
    async fn leader_try_acquire(&self, node_id: &str, lease_ms: i64)
    -> Result<LeaderRecord, Error>;

    /// Every partition with its owner, pending owner and epoch.
    async fn partitions_list(&self) -> Result<Vec<PartitionRecord>, Error>;

    /// The partitions a node owns (including those it has been asked to hand off).
    async fn partitions_owned(&self, node_id: &str) -> Result<Vec<PartitionRecord>, Error>;

    /// Applies a leader's partition decisions, fenced: the transaction locks the leader row and
    /// fails with [`Error::Fenced`] unless `fence` still holds an unexpired lease with the same
    /// term. Each change is a compare-and-set on the partition's epoch; returns how many applied.
    async fn partitions_apply(
        &self,
        fence: &LeaderFence,
        changes: &[PartitionChange],
    ) -> Result<u64, Error>;

    /// The owner hands a partition to the pending owner the leader chose, bumping its epoch.
    /// Returns false when the partition changed since it was read.
    async fn partition_hand_off(
        &self,
        node_id: &str,
        partition: &PartitionRecord,
    ) -> Result<bool, Error>;
}

/// Jobs and the claiming of their instants.
#[async_trait]
pub trait JobStore: Send + Sync + std::fmt::Debug + 'static {
    /// Inserts a job (started at once when `start`). Fails with [`Error::Conflict`] when the
    /// name or the id is taken. Each change to a job here records `audit`, when given, in the
    /// change's own transaction: both are stored or neither.
    async fn job_insert(
        &self,
        job_id: i64,
        partition_id: i64,
        job: &JobWrite,
        start: bool,
        audit: Option<&AuditWrite>,
    ) -> Result<JobRecord, Error>;

    async fn job_get(&self, job_id: i64) -> Result<Option<JobRecord>, Error>;

    async fn jobs_list(&self, filter: &JobFilter) -> Result<Vec<JobRecord>, Error>;

    /// Replaces a job's definition if its version is still `expected_version`; `None` when it
    /// is not (or the job is gone).
    async fn job_update(
        &self,
        job_id: i64,
        expected_version: i64,
        job: &JobWrite,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<JobRecord>, Error>;

    /// Starts a job (anchoring `every` schedules now); the job as it is afterwards.
    async fn job_start(
        &self,
        job_id: i64,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<JobRecord>, Error>;

    /// Stops a job; the job as it is afterwards.
    async fn job_stop(
        &self,
        job_id: i64,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<JobRecord>, Error>;

    /// Deletes a job, leaving a tombstone for the node that owns it. False if there was none.
    async fn job_delete(&self, job_id: i64, audit: Option<&AuditWrite>) -> Result<bool, Error>;

    /// The running jobs of a partition, as much of them as scheduling needs.
    async fn jobs_in_partition(&self, partition_id: i64) -> Result<Vec<ScheduledJob>, Error>;

    /// The jobs of `job_ids` that exist, in one statement, in no particular order.
    async fn jobs_get_many(&self, job_ids: &[i64]) -> Result<Vec<JobRecord>, Error>;

    /// Inserts many jobs, a few hundred rows per statement, in one transaction: all or none.
    /// A taken name or id fails them all with [`Error::Conflict`]. Their `updated_at_ms` is
    /// within a second of the commit, so that polling for changes sees them.
    async fn jobs_insert_many(
        &self,
        jobs: &[JobInsert],
        audit: Option<&AuditWrite>,
    ) -> Result<(), Error>;

    /// The largest job id, if there is a job.
    async fn job_id_max(&self) -> Result<Option<i64>, Error>;

    /// The jobs (of any kind) of `namespace` named one of `names`, as `(name, job_id)`, in one
    /// statement per few thousand names.
    async fn jobs_named(
        &self,
        namespace: NamespaceId,
        names: &[String],
    ) -> Result<Vec<(String, i64)>, Error>;

    /// Jobs updated and deleted after `since_ms` (database clock), at most `limit` updated.
    /// Paged by the key `(updated_at_ms, job_id)`: the page starts after `since_ms` and, among
    /// jobs updated at `since_ms` itself, after `after_job_id` (`i64::MAX`: none of them).
    async fn jobs_changed_since(
        &self,
        since_ms: i64,
        after_job_id: i64,
        limit: i64,
    ) -> Result<JobChanges, Error>;

    /// Claims scheduled instants in one transaction. Each partition is locked and checked to
    /// still be `node_id`'s at the claim's epoch; each job must still be running at the
    /// claim's version with its last fired instant before this one, which then advances; the
    /// run is inserted under the unique key `(job_id, scheduled_at_ms)`. One outcome per claim,
    /// in order.
    async fn runs_claim(
        &self,
        node_id: &str,
        claims: &[RunClaim],
    ) -> Result<Vec<ClaimOutcome>, Error>;

    /// A run now, outside the schedule (`trigger`), in `state`, with `input` (a re-run of a
    /// child run is given its parent's again), and `audit`, when given, in its transaction.
    async fn run_insert_manual(
        &self,
        job: &JobRecord,
        node_id: &str,
        state: RunState,
        message: Option<&str>,
        input: Option<&str>,
        audit: Option<&AuditWrite>,
    ) -> Result<RunRecord, Error>;

    /// A job's runs, newest first, before `before_run_id`.
    async fn runs_of_job(
        &self,
        job_id: i64,
        before_run_id: Option<i64>,
        limit: i64,
    ) -> Result<Vec<RunRecord>, Error>;
}

/// Executors, run and attempt state: dispatch.
#[async_trait]
pub trait DispatchStore: Send + Sync + std::fmt::Debug + 'static {
    /// Registers (or re-registers) an executor and replaces its handler list, creating its app
    /// in the registration's namespace (else `default`) when there is none. `audit` is written
    /// with a registration that is made.
    async fn executor_register(
        &self,
        executor: &ExecutorRegistration,
        audit: Option<&AuditWrite>,
    ) -> Result<RegistrationOutcome, Error>;

    /// The namespace of an executor's app; `None` for an unknown executor.
    async fn executor_namespace(&self, executor_id: &str) -> Result<Option<NamespaceId>, Error>;

    /// The namespace app `app` belongs to; `None` before any executor of it registered.
    async fn app_namespace(&self, app: &str) -> Result<Option<NamespaceId>, Error>;

    /// Records a heartbeat; false when the executor is unknown or has left.
    async fn executor_heartbeat(
        &self,
        executor_id: &str,
        in_flight: i64,
        draining: bool,
    ) -> Result<bool, Error>;

    /// Stops (`true`) or resumes (`false`) dispatching to an executor, whatever its heartbeats
    /// say; false when nothing changed. `audit`, when given, is recorded with the change.
    async fn executor_drain(
        &self,
        executor_id: &str,
        drain: bool,
        audit: Option<&AuditWrite>,
    ) -> Result<bool, Error>;

    /// Marks an executor left; false when it was unknown or had left. `audit`, when given, is
    /// recorded with the change.
    async fn executor_leave(
        &self,
        executor_id: &str,
        audit: Option<&AuditWrite>,
    ) -> Result<bool, Error>;

    /// Executors (of `app`, or all) with their handlers, and the database clock.
    async fn executors_list(&self, app: Option<&str>) -> Result<ExecutorList, Error>;

    /// Runs waiting to start in these partitions with an id above `after_run_id`, oldest first
    /// (the caller walks through them all, so runs that cannot start do not hide the others).
    async fn runs_pending(
        &self,
        partitions: &[i64],
        after_run_id: i64,
        limit: i64,
    ) -> Result<Vec<RunRecord>, Error>;

    /// Starts a pending run with its shards' first attempts; false if it was not pending.
    async fn run_start(&self, run: &RunRecord, attempts: &[NewAttempt]) -> Result<bool, Error> {
        Ok(self.runs_start(&[(run.clone(), attempts.to_vec())]).await? == 1)
    }

    /// [`run_start`](Self::run_start) for many runs in one transaction (one commit, so one
    /// flush to disk, serves them all); returns how many started.
    async fn runs_start(&self, runs: &[(RunRecord, Vec<NewAttempt>)]) -> Result<usize, Error>;

    /// Ends an unfinished run without (more) attempts, e.g. when no executor can take it.
    async fn run_end(
        &self,
        run_id: i64,
        state: RunState,
        message: Option<&str>,
    ) -> Result<bool, Error>;

    /// Cancels an unfinished run and its unfinished attempts; returns the attempts that were
    /// running (their executors should be told), or `None` if the run was not unfinished.
    /// `audit`, when given, is recorded with the change.
    async fn run_cancel(
        &self,
        run_id: i64,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<Vec<AttemptRecord>>, Error> {
        self.run_end_with_attempts(
            run_id,
            RunState::Cancelled,
            "cancelled through the API",
            audit,
        )
        .await
    }

    /// Ends an unfinished run in `state` with `message`, and its unfinished attempts as
    /// `cancelled` with that message, in one transaction; returns the attempts that were
    /// running, or `None` if the run was not unfinished.
    async fn run_end_with_attempts(
        &self,
        run_id: i64,
        state: RunState,
        message: &str,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<Vec<AttemptRecord>>, Error>;

    async fn run_get(&self, run_id: i64) -> Result<Option<RunRecord>, Error>;

    async fn runs_list(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, Error>;

    async fn attempts_of_run(&self, run_id: i64) -> Result<Vec<AttemptRecord>, Error>;

    async fn attempt_get(&self, attempt_id: i64) -> Result<Option<AttemptRecord>, Error>;

    /// Attempts due for dispatch in these partitions within `ahead_ms` (database clock),
    /// earliest due first, after the `(not_before_ms, attempt_id)` key `after` when given.
    async fn attempts_due(
        &self,
        partitions: &[i64],
        ahead_ms: i64,
        after: Option<(i64, i64)>,
        limit: i64,
    ) -> Result<Vec<DueAttempt>, Error>;

    /// Running attempts past their deadline in these partitions.
    async fn attempts_expired(
        &self,
        partitions: &[i64],
        limit: i64,
    ) -> Result<Vec<AttemptRecord>, Error>;

    /// Running attempts whose executor has left or not heartbeated within `lease_ms`, or has
    /// heartbeated `lease_ms` past the last time it listed the attempt as in flight (it
    /// restarted and forgot it).
    async fn attempts_orphaned(
        &self,
        partitions: &[i64],
        lease_ms: i64,
        limit: i64,
    ) -> Result<Vec<AttemptRecord>, Error>;

    /// Records that a heartbeat of `executor_id` listed these running attempts as in flight.
    async fn attempts_seen(&self, executor_id: &str, attempt_ids: &[i64]) -> Result<(), Error>;

    /// Marks a pending attempt as accepted by `executor_id`, with a deadline `timeout_ms` from
    /// now (none when 0); false if it was no longer pending.
    async fn attempt_dispatched(
        &self,
        attempt_id: i64,
        executor_id: &str,
        timeout_ms: i64,
    ) -> Result<bool, Error>;

    /// Makes `executor_id` the first choice for a pending attempt's next offer.
    async fn attempt_prefer(&self, attempt_id: i64, executor_id: &str) -> Result<(), Error>;

    /// Returns an attempt marked running at `executor_id` to the queue (`pending`, no
    /// executor): that executor answered that it did not take it. False if it had moved on.
    async fn attempt_undispatched(&self, attempt_id: i64, executor_id: &str)
    -> Result<bool, Error>;

    /// [`attempt_dispatched`](Self::attempt_dispatched) for many attempts of one executor and
    /// one timeout, in one statement; how many were still pending.
    async fn attempts_dispatched(
        &self,
        attempt_ids: &[i64],
        executor_id: &str,
        timeout_ms: i64,
    ) -> Result<u64, Error>;

    /// Ends an attempt and moves its run on: queues a retry of the shard, or ends the run when
    /// every shard has ended (`succeeded` if all succeeded, `cancelled` if one was cancelled,
    /// else `failed`), releasing the job's next queued run. Ending an attempt twice is harmless.
    async fn attempt_end(&self, attempt_id: i64, end: &AttemptEnd) -> Result<AttemptEnded, Error> {
        let mut ended = self.attempts_end(&[(attempt_id, end.clone())]).await?;
        Ok(ended.pop().unwrap_or(AttemptEnded::AlreadyEnded))
    }

    /// Ends attempts that `executor_id` answered at once with success, each the only shard of
    /// its run, of a job that queues nothing behind it and has no children (whose runs this
    /// does not create: `attempts_end` does): the attempts and their runs end `succeeded` in
    /// two statements (one transaction) whatever their number, and `outputs` (attempt id,
    /// output) are stored with them. An attempt no longer unfinished is left alone, and so are
    /// its run and its output. Returns how many runs ended.
    async fn attempts_succeed(
        &self,
        executor_id: &str,
        attempt_ids: &[i64],
        outputs: &[(i64, String)],
        flow_keys: &[String],
    ) -> Result<u64, Error>;

    /// [`attempt_end`](Self::attempt_end) for many attempts in one transaction, in the order
    /// given; returns what became of each.
    async fn attempts_end(&self, ends: &[(i64, AttemptEnd)]) -> Result<Vec<AttemptEnded>, Error>;

    /// Running attempts per executor, cluster-wide.
    async fn executor_loads(&self) -> Result<Vec<ExecutorLoad>, Error>;

    /// The jobs with an attempt running on an XXL-JOB executor, cluster-wide: such an
    /// executor runs one attempt of a job at a time.
    async fn xxl_jobs_running(&self) -> Result<Vec<XxlJobRunning>, Error>;

    /// Runs finished in `[since_ms, until_ms)`, counted per minute of finishing and state,
    /// with how many of them were first dispatched more than `late_ms` after their instant.
    async fn runs_finished_by_minute(
        &self,
        since_ms: i64,
        until_ms: i64,
        late_ms: i64,
    ) -> Result<Vec<MinuteCount>, Error>;

    /// Runs finished in `[since_ms, until_ms)` whose first dispatch (of shard 0) came more
    /// than `late_ms` after their instant, last finished first.
    async fn runs_late(
        &self,
        since_ms: i64,
        until_ms: i64,
        late_ms: i64,
        limit: i64,
    ) -> Result<Vec<LateRun>, Error>;
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

/// The standbys a failover could promote (PostgreSQL streaming replication), so that nothing
/// is delivered before they have it: an asynchronous standby promoted without a run it was
/// never sent would fire that run's instant again.
#[async_trait]
pub trait StandbyStore: Send + Sync + std::fmt::Debug + 'static {
    /// Where the database's log ends now (PostgreSQL: `pg_current_wal_lsn()`), or `None` where
    /// there are no standbys to wait for (MySQL, where Galera is synchronous, and SQLite).
    async fn log_position(&self) -> Result<Option<String>, Error>;

    /// The standbys that have not yet flushed the log up to `position`: those streaming, and
    /// those with a physical replication slot, streaming or not. Empty when all have it.
    async fn standbys_behind(&self, position: &str) -> Result<Vec<String>, Error>;

    /// The timeline the database writes on (PostgreSQL; a promoted standby starts a new one),
    /// or `None` where failovers are not seen this way (MySQL, SQLite).
    async fn timeline(&self) -> Result<Option<String>, Error>;
}

/// The lines handlers log while attempts run, kept with their runs (`history_delete_runs`
/// deletes them with the runs).
#[async_trait]
pub trait LogStore: Send + Sync + std::fmt::Debug + 'static {
    /// Stores the lines executor `executor_id` shipped, by attempt, within `caps` (lines
    /// already stored are skipped); past the caps, lines are dropped and a marker line
    /// ([`TRUNCATED_LINE`]) says so. Lines of an attempt that is neither pending nor the
    /// executor's are refused.
    async fn attempt_logs_append(
        &self,
        executor_id: &str,
        batch: &[(i64, Vec<NewLogLine>)],
        caps: LogCaps,
    ) -> Result<LogAppend, Error>;

    /// An attempt's lines numbered above `after_line`, in order, at most `limit`.
    async fn attempt_logs_page(
        &self,
        attempt_id: i64,
        after_line: i64,
        limit: i64,
    ) -> Result<Vec<LogLine>, Error>;
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

/// Run-history retention: deleting finished runs with their attempts, in bounded batches.
#[async_trait]
pub trait HistoryStore: Send + Sync + std::fmt::Debug + 'static {
    /// One step of a purge, in one transaction: looks at the `window` oldest runs that
    /// finished in `[scope.finished_from_ms, scope.finished_before_ms)` (in the order of
    /// `runs_finished_idx`, so the database walks the index and stops), and deletes those the
    /// rest of `scope` names, with their attempts. Only finished runs are ever deleted.
    async fn history_delete(&self, scope: &PurgeScope, window: i64) -> Result<PurgeStep, Error>;

    /// How many runs and attempts `history_delete` would delete for `scope`, without a limit.
    async fn history_count(&self, scope: &PurgeScope) -> Result<Purged, Error>;

    /// The jobs of `partitions` with a history rule of their own.
    async fn history_rules(&self, partitions: &[i64]) -> Result<Vec<JobHistoryRule>, Error>;

    /// The instant of a job's run that comes right after its `keep` newest (by instant), if it
    /// has more than `keep` runs: that run and older ones are beyond its limit.
    async fn history_beyond_newest(&self, job_id: i64, keep: i64) -> Result<Option<i64>, Error>;

    /// When the oldest run kept was created (epoch milliseconds), if there is a run.
    async fn history_oldest_run_ms(&self) -> Result<Option<i64>, Error>;
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
