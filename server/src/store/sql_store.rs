//! The three SQL stores. The logic of every method is written once, in `sql_store!`, and
//! instantiated for each backend's concrete sqlx types (being generic over `sqlx::Database`
//! fights the compiler); what differs per backend is the SQL text (see `dialect`), how a pool is
//! opened, and how a write transaction begins.

use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, Postgres};
use sqlx::sqlite::{
    Sqlite, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Executor, Transaction};

use super::dialect::Queries;
use super::job_records::{
    ClaimOutcome, JobChanges, JobFilter, JobRecord, JobWrite, OverlapRule, RunClaim, RunRecord,
    run_state,
};
use super::{
    Backend, ClusterMeta, DatabaseUrl, Error, LeaderFence, LeaderRecord, NodeList, NodeRecord,
    NodeRegistration, PartitionChange, PartitionRecord, PoolOptions, Store,
};

static POSTGRES_MIGRATOR: Migrator = sqlx::migrate!("../migrations/postgres");
static MYSQL_MIGRATOR: Migrator = sqlx::migrate!("../migrations/mysql");
static SQLITE_MIGRATOR: Migrator = sqlx::migrate!("../migrations/sqlite");

/// Our query texts are compile-time templates rendered once per backend; no input reaches them.
fn sql(query: &Arc<str>) -> AssertSqlSafe<Arc<str>> {
    AssertSqlSafe(Arc::clone(query))
}

/// A `LIKE` pattern matching names that start with `prefix` (escape character `!`).
fn like_prefix(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 1);
    for ch in prefix.chars() {
        if matches!(ch, '!' | '%' | '_') {
            pattern.push('!');
        }
        pattern.push(ch);
    }
    pattern.push('%');
    pattern
}

/// How often a transaction that lost a deadlock or serialisation race is tried in all.
const TRANSIENT_ATTEMPTS: u32 = 4;

/// Runs `attempt` again when the database aborted it for a deadlock or serialisation failure:
/// the transaction was rolled back whole, so trying again is safe.
async fn retry_transient<T, F, Fut>(mut attempt: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(err) if err.is_transient() && tries < TRANSIENT_ATTEMPTS => {
                tracing::debug!(error = %err, tries, "transaction aborted by the database; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(5 << tries)).await;
                tries += 1;
            }
            other => return other,
        }
    }
}

fn invalid_url(url: &DatabaseUrl, err: sqlx::Error) -> Error {
    Error::InvalidUrl {
        url: url.to_string(),
        reason: err.to_string(),
    }
}

/// PostgreSQL.
#[derive(Debug, Clone)]
pub(super) struct PostgresStore {
    pool: PgPool,
    q: Arc<Queries>,
}

impl PostgresStore {
    pub(super) async fn connect(url: &DatabaseUrl, options: &PoolOptions) -> Result<Self, Error> {
        let timeout_ms = options.statement_timeout.as_millis().to_string();
        let connect = PgConnectOptions::from_str(url.expose())
            .map_err(|e| invalid_url(url, e))?
            .options([
                ("statement_timeout", timeout_ms.as_str()),
                ("lock_timeout", timeout_ms.as_str()),
            ]);
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await?;
        Ok(Self::from_pool(pool))
    }

    async fn begin_write(&self) -> Result<Transaction<'static, Postgres>, Error> {
        Ok(self.pool.begin().await?)
    }
}

/// MySQL 8 and MariaDB 10.6+.
#[derive(Debug, Clone)]
pub(super) struct MysqlStore {
    pool: MySqlPool,
    q: Arc<Queries>,
}

impl MysqlStore {
    pub(super) async fn connect(url: &DatabaseUrl, options: &PoolOptions) -> Result<Self, Error> {
        let connect =
            MySqlConnectOptions::from_str(url.expose()).map_err(|e| invalid_url(url, e))?;
        // InnoDB counts lock waits in whole seconds; at least one.
        let lock_wait_s = options.statement_timeout.as_secs().max(1);
        let pool = MySqlPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    let set = format!("SET SESSION innodb_lock_wait_timeout = {lock_wait_s}");
                    conn.execute(AssertSqlSafe(set)).await?;
                    // Our transactions lock what they need explicitly (FOR UPDATE, epoch
                    // compare-and-set); REPEATABLE READ's gap locks would only add deadlocks.
                    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await?;
                    Ok(())
                })
            })
            .connect_with(connect)
            .await?;
        Ok(Self::from_pool(pool))
    }

    async fn begin_write(&self) -> Result<Transaction<'static, MySql>, Error> {
        Ok(self.pool.begin().await?)
    }
}

/// SQLite, for a single node.
#[derive(Debug, Clone)]
pub(super) struct SqliteStore {
    pool: SqlitePool,
    q: Arc<Queries>,
}

impl SqliteStore {
    pub(super) async fn connect(url: &DatabaseUrl, options: &PoolOptions) -> Result<Self, Error> {
        let connect = SqliteConnectOptions::from_str(url.expose())
            .map_err(|e| invalid_url(url, e))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // Durable by default: a run claimed must survive a power cut.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(options.statement_timeout)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await?;
        Ok(Self::from_pool(pool))
    }

    /// SQLite has no row locks: `BEGIN IMMEDIATE` takes the write lock up front, so a
    /// transaction that reads then writes cannot fail half-way on a lock upgrade.
    async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, Error> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }
}

macro_rules! sql_store {
    ($store:ident, $db:ty, $backend:expr, $migrator:expr) => {
        impl $store {
            fn from_pool(pool: sqlx::Pool<$db>) -> Self {
                Self {
                    pool,
                    q: Arc::new(Queries::for_backend($backend)),
                }
            }

            async fn cluster_meta_get(&self) -> Result<Option<ClusterMeta>, Error> {
                let row = sqlx::query_as::<$db, (i64, i64)>(sql(&self.q.cluster_meta_get))
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(row.map(|(partition_count, created_at_ms)| ClusterMeta {
                    partition_count,
                    created_at_ms,
                }))
            }

            async fn leader_lock(
                &self,
                tx: &mut Transaction<'static, $db>,
            ) -> Result<LeaderRecord, Error> {
                Ok(
                    sqlx::query_as::<$db, LeaderRecord>(sql(&self.q.leader_lock))
                        .fetch_one(&mut **tx)
                        .await?,
                )
            }

            /// Gives up the node's leadership and partitions. Lock order, here as in every
            /// transaction that writes partitions: the leader row first, then partitions;
            /// otherwise two such transactions can deadlock.
            async fn node_release_everything(
                &self,
                tx: &mut Transaction<'static, $db>,
                node_id: &str,
            ) -> Result<(), Error> {
                self.leader_lock(tx).await?;
                sqlx::query::<$db>(sql(&self.q.leader_release))
                    .bind(node_id)
                    .execute(&mut **tx)
                    .await?;
                sqlx::query::<$db>(sql(&self.q.partitions_release_owned))
                    .bind(node_id)
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            }
        }

        #[async_trait]
        impl Store for $store {
            fn backend(&self) -> Backend {
                $backend
            }

            async fn migrate(&self) -> Result<(), Error> {
                $migrator.run(&self.pool).await?;
                Ok(())
            }

            async fn now_ms(&self) -> Result<i64, Error> {
                let (now,) = sqlx::query_as::<$db, (i64,)>(sql(&self.q.now))
                    .fetch_one(&self.pool)
                    .await?;
                Ok(now)
            }

            async fn cluster_init(&self, partition_count: i64) -> Result<ClusterMeta, Error> {
                if let Some(meta) = self.cluster_meta_get().await? {
                    return Ok(meta);
                }
                let mut tx = self.begin_write().await?;
                let inserted = sqlx::query::<$db>(sql(&self.q.cluster_meta_insert))
                    .bind(partition_count)
                    .execute(&mut *tx)
                    .await
                    .map_err(Error::from);
                match inserted {
                    Ok(_) => {
                        for partition_id in 0..partition_count {
                            sqlx::query::<$db>(sql(&self.q.partition_insert))
                                .bind(partition_id)
                                .execute(&mut *tx)
                                .await?;
                        }
                        tx.commit().await?;
                    }
                    // Another node initialised the cluster at the same moment: use theirs.
                    Err(err) if err.is_unique_violation() => tx.rollback().await?,
                    Err(err) => return Err(err),
                }
                self.cluster_meta_get().await?.ok_or(Error::NotInitialised)
            }

            async fn node_register(&self, node: &NodeRegistration) -> Result<(), Error> {
                retry_transient(|| self.node_register_once(node)).await
            }

            async fn node_leave(&self, node_id: &str, incarnation: &str) -> Result<(), Error> {
                retry_transient(|| self.node_leave_once(node_id, incarnation)).await
            }

            async fn partitions_apply(
                &self,
                fence: &LeaderFence,
                changes: &[PartitionChange],
            ) -> Result<u64, Error> {
                retry_transient(|| self.partitions_apply_once(fence, changes)).await
            }
            async fn node_heartbeat(&self, node_id: &str, incarnation: &str) -> Result<(), Error> {
                let beat = sqlx::query::<$db>(sql(&self.q.node_heartbeat))
                    .bind(node_id)
                    .bind(incarnation)
                    .execute(&self.pool)
                    .await?;
                if beat.rows_affected() == 0 {
                    return Err(Error::IncarnationLost {
                        node_id: node_id.to_owned(),
                    });
                }
                Ok(())
            }

            async fn nodes_list(&self) -> Result<NodeList, Error> {
                let nodes = sqlx::query_as::<$db, NodeRecord>(sql(&self.q.nodes_list))
                    .fetch_all(&self.pool)
                    .await?;
                // Read after the rows, so a node is never judged by a clock older than its beat.
                let now_ms = self.now_ms().await?;
                Ok(NodeList { nodes, now_ms })
            }

            async fn leader_get(&self) -> Result<LeaderRecord, Error> {
                Ok(sqlx::query_as::<$db, LeaderRecord>(sql(&self.q.leader_get))
                    .fetch_one(&self.pool)
                    .await?)
            }

            async fn leader_try_acquire(
                &self,
                node_id: &str,
                lease_ms: i64,
            ) -> Result<LeaderRecord, Error> {
                let mut tx = self.begin_write().await?;
                let current = self.leader_lock(&mut tx).await?;
                match current.holder() {
                    Some(holder) if holder == node_id => {
                        sqlx::query::<$db>(sql(&self.q.leader_renew))
                            .bind(lease_ms)
                            .bind(node_id)
                            .execute(&mut *tx)
                            .await?;
                    }
                    Some(_) => {
                        tx.rollback().await?;
                        return Ok(current);
                    }
                    // Expired or free: a new holding, even by the same node, gets a new term.
                    None => {
                        sqlx::query::<$db>(sql(&self.q.leader_take))
                            .bind(node_id)
                            .bind(current.term + 1)
                            .bind(lease_ms)
                            .execute(&mut *tx)
                            .await?;
                    }
                }
                let after = sqlx::query_as::<$db, LeaderRecord>(sql(&self.q.leader_get))
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(after)
            }

            async fn partitions_list(&self) -> Result<Vec<PartitionRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, PartitionRecord>(sql(&self.q.partitions_list))
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn partitions_owned(&self, node_id: &str) -> Result<Vec<PartitionRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, PartitionRecord>(sql(&self.q.partitions_owned))
                        .bind(node_id)
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn partition_hand_off(
                &self,
                node_id: &str,
                partition: &PartitionRecord,
            ) -> Result<bool, Error> {
                let moved = sqlx::query::<$db>(sql(&self.q.partition_hand_off))
                    .bind(partition.partition_id)
                    .bind(node_id)
                    .bind(partition.epoch)
                    .execute(&self.pool)
                    .await?;
                Ok(moved.rows_affected() == 1)
            }

            async fn job_insert(
                &self,
                job_id: i64,
                partition_id: i64,
                job: &JobWrite,
                start: bool,
            ) -> Result<JobRecord, Error> {
                let inserted = sqlx::query::<$db>(sql(&self.q.job_insert))
                    .bind(job_id)
                    .bind(partition_id)
                    .bind(&job.name)
                    .bind(&job.app_name)
                    .bind(&job.handler_name)
                    .bind(&job.schedule_json)
                    .bind(&job.timezone)
                    .bind(&job.args_json)
                    .bind(&job.policy_json)
                    .bind(if start { "running" } else { "stopped" })
                    .bind(i64::from(start))
                    .execute(&self.pool)
                    .await
                    .map_err(Error::from);
                match inserted {
                    Ok(_) => {}
                    Err(err) if err.is_unique_violation() => {
                        let name_taken = self.jobs_list(&JobFilter {
                            name_prefix: Some(job.name.clone()),
                            limit: 1_000,
                            ..JobFilter::default()
                        })
                        .await?
                        .iter()
                        .any(|j| j.name == job.name);
                        let what = if name_taken {
                            format!("job name {:?}", job.name)
                        } else {
                            format!("job id {job_id}")
                        };
                        return Err(Error::Conflict { what });
                    }
                    Err(err) => return Err(err),
                }
                self.job_get(job_id).await?.ok_or(Error::NotInitialised)
            }

            async fn job_get(&self, job_id: i64) -> Result<Option<JobRecord>, Error> {
                Ok(sqlx::query_as::<$db, JobRecord>(sql(&self.q.job_get))
                    .bind(job_id)
                    .fetch_optional(&self.pool)
                    .await?)
            }

            async fn jobs_list(&self, filter: &JobFilter) -> Result<Vec<JobRecord>, Error> {
                let pattern = filter.name_prefix.as_deref().map(like_prefix);
                Ok(sqlx::query_as::<$db, JobRecord>(sql(&self.q.jobs_list))
                    .bind(filter.app.as_deref())
                    .bind(filter.app.as_deref())
                    .bind(filter.state.as_deref())
                    .bind(filter.state.as_deref())
                    .bind(pattern.as_deref())
                    .bind(pattern.as_deref())
                    .bind(filter.before_id)
                    .bind(filter.before_id)
                    .bind(filter.limit)
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn job_update(
                &self,
                job_id: i64,
                expected_version: i64,
                job: &JobWrite,
            ) -> Result<Option<JobRecord>, Error> {
                let updated = sqlx::query::<$db>(sql(&self.q.job_update))
                    .bind(&job.name)
                    .bind(&job.app_name)
                    .bind(&job.handler_name)
                    .bind(&job.schedule_json)
                    .bind(&job.timezone)
                    .bind(&job.args_json)
                    .bind(&job.policy_json)
                    .bind(job_id)
                    .bind(expected_version)
                    .execute(&self.pool)
                    .await
                    .map_err(Error::from);
                match updated {
                    Ok(done) if done.rows_affected() == 1 => self.job_get(job_id).await,
                    Ok(_) => Ok(None),
                    Err(err) if err.is_unique_violation() => Err(Error::Conflict {
                        what: format!("job name {:?}", job.name),
                    }),
                    Err(err) => Err(err),
                }
            }

            async fn job_start(&self, job_id: i64) -> Result<Option<JobRecord>, Error> {
                sqlx::query::<$db>(sql(&self.q.job_start))
                    .bind(job_id)
                    .execute(&self.pool)
                    .await?;
                self.job_get(job_id).await
            }

            async fn job_stop(&self, job_id: i64) -> Result<Option<JobRecord>, Error> {
                sqlx::query::<$db>(sql(&self.q.job_stop))
                    .bind(job_id)
                    .execute(&self.pool)
                    .await?;
                self.job_get(job_id).await
            }

            async fn job_delete(&self, job_id: i64) -> Result<bool, Error> {
                let Some(job) = self.job_get(job_id).await? else {
                    return Ok(false);
                };
                let mut tx = self.begin_write().await?;
                let deleted = sqlx::query::<$db>(sql(&self.q.job_delete))
                    .bind(job_id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if deleted == 1 {
                    sqlx::query::<$db>(sql(&self.q.job_deletion_insert))
                        .bind(job_id)
                        .bind(job.partition_id)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(deleted == 1)
            }

            async fn jobs_in_partition(&self, partition_id: i64) -> Result<Vec<JobRecord>, Error> {
                Ok(sqlx::query_as::<$db, JobRecord>(sql(&self.q.jobs_in_partition))
                    .bind(partition_id)
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn jobs_changed_since(
                &self,
                since_ms: i64,
                limit: i64,
            ) -> Result<JobChanges, Error> {
                // The clock first: a change committed after this read is seen by the next poll.
                let now_ms = self.now_ms().await?;
                let changed = sqlx::query_as::<$db, JobRecord>(sql(&self.q.jobs_changed_since))
                    .bind(since_ms)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                let deleted = sqlx::query_scalar::<$db, i64>(sql(&self.q.job_deletions_since))
                    .bind(since_ms)
                    .fetch_all(&self.pool)
                    .await?;
                Ok(JobChanges {
                    changed,
                    deleted,
                    now_ms,
                })
            }

            async fn runs_claim(
                &self,
                node_id: &str,
                claims: &[RunClaim],
            ) -> Result<Vec<ClaimOutcome>, Error> {
                retry_transient(|| self.runs_claim_once(node_id, claims)).await
            }

            async fn run_insert_manual(
                &self,
                job: &JobRecord,
                node_id: &str,
                state: &str,
                message: Option<&str>,
            ) -> Result<RunRecord, Error> {
                let now = self.now_ms().await?;
                let finished = i64::from(!run_state::UNFINISHED.contains(&state));
                // Two triggers in one millisecond take the next free millisecond.
                for at in now..now + 1_000 {
                    let inserted = sqlx::query::<$db>(sql(&self.q.run_insert))
                        .bind(job.job_id)
                        .bind(at)
                        .bind(job.partition_id)
                        .bind(0_i64)
                        .bind(node_id)
                        .bind("manual")
                        .bind(state)
                        .bind(i64::from(job.policy_priority()))
                        .bind(finished)
                        .bind(message)
                        .bind(job.job_id)
                        .bind(at)
                        .execute(&self.pool)
                        .await?;
                    if inserted.rows_affected() == 1 {
                        return Ok(sqlx::query_as::<$db, RunRecord>(sql(&self.q.run_by_instant))
                            .bind(job.job_id)
                            .bind(at)
                            .fetch_one(&self.pool)
                            .await?);
                    }
                }
                Err(Error::Conflict {
                    what: format!("every millisecond of the last second for job {}", job.job_id),
                })
            }

            async fn runs_of_job(
                &self,
                job_id: i64,
                before_run_id: Option<i64>,
                limit: i64,
            ) -> Result<Vec<RunRecord>, Error> {
                Ok(sqlx::query_as::<$db, RunRecord>(sql(&self.q.runs_of_job))
                    .bind(job_id)
                    .bind(before_run_id)
                    .bind(before_run_id)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?)
            }
        }

        impl $store {
            async fn runs_claim_once(
                &self,
                node_id: &str,
                claims: &[RunClaim],
            ) -> Result<Vec<ClaimOutcome>, Error> {
                let mut tx = self.begin_write().await?;
                // Partitions are locked in ascending order, once each, so two claimers cannot
                // deadlock; a hand-off of a locked partition waits for this claim to commit.
                let mut fences: Vec<(i64, i64)> =
                    claims.iter().map(|c| (c.partition_id, c.epoch)).collect();
                fences.sort_unstable();
                fences.dedup();
                let mut fenced = Vec::new();
                for (partition_id, epoch) in fences {
                    let row = sqlx::query_as::<$db, (Option<String>, i64)>(sql(
                        &self.q.partition_lock,
                    ))
                    .bind(partition_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                    let owned = matches!(&row, Some((Some(owner), e)) if owner == node_id && *e == epoch);
                    if !owned {
                        fenced.push((partition_id, epoch));
                    }
                }
                let mut outcomes = Vec::with_capacity(claims.len());
                for claim in claims {
                    if fenced.contains(&(claim.partition_id, claim.epoch)) {
                        outcomes.push(ClaimOutcome::Fenced);
                        continue;
                    }
                    let advanced = sqlx::query::<$db>(sql(&self.q.job_advance))
                        .bind(claim.scheduled_at_ms)
                        .bind(i64::from(claim.job_done))
                        .bind(claim.job_id)
                        .bind(claim.job_version)
                        .bind(claim.scheduled_at_ms)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    if advanced == 0 {
                        outcomes.push(ClaimOutcome::Stale);
                        continue;
                    }
                    let (state, message) = self.overlap_decision(&mut tx, claim).await?;
                    let finished = i64::from(!run_state::UNFINISHED.contains(&state));
                    sqlx::query::<$db>(sql(&self.q.run_insert))
                        .bind(claim.job_id)
                        .bind(claim.scheduled_at_ms)
                        .bind(claim.partition_id)
                        .bind(claim.epoch)
                        .bind(node_id)
                        .bind(claim.trigger_kind)
                        .bind(state)
                        .bind(claim.priority)
                        .bind(finished)
                        .bind(message.as_deref())
                        .bind(claim.job_id)
                        .bind(claim.scheduled_at_ms)
                        .execute(&mut *tx)
                        .await?;
                    outcomes.push(ClaimOutcome::Claimed);
                }
                tx.commit().await?;
                Ok(outcomes)
            }

            /// The state and message of a claimed run under the job's overlap rule.
            async fn overlap_decision(
                &self,
                tx: &mut Transaction<'static, $db>,
                claim: &RunClaim,
            ) -> Result<(&'static str, Option<String>), Error> {
                if claim.overlap == OverlapRule::Allow {
                    return Ok((claim.state, claim.message.clone()));
                }
                let unfinished = sqlx::query_scalar::<$db, i64>(sql(&self.q.run_unfinished_of_job))
                    .bind(claim.job_id)
                    .fetch_optional(&mut **tx)
                    .await?;
                let Some(previous) = unfinished else {
                    return Ok((claim.state, claim.message.clone()));
                };
                Ok(match claim.overlap {
                    OverlapRule::Allow => (claim.state, claim.message.clone()),
                    OverlapRule::Skip => (
                        run_state::SKIPPED,
                        Some(format!("run {previous} of this job is unfinished (overlap: skip)")),
                    ),
                    OverlapRule::Queue => (
                        run_state::QUEUED,
                        Some(format!("waiting for run {previous} of this job (overlap: queue)")),
                    ),
                    OverlapRule::Replace => {
                        sqlx::query::<$db>(sql(&self.q.runs_cancel_unfinished))
                            .bind(format!(
                                "replaced by the run of instant {} (overlap: replace)",
                                claim.scheduled_at_ms
                            ))
                            .bind(claim.job_id)
                            .execute(&mut **tx)
                            .await?;
                        (claim.state, claim.message.clone())
                    }
                })
            }

            async fn node_register_once(&self, node: &NodeRegistration) -> Result<(), Error> {
                let mut tx = self.begin_write().await?;
                let updated = sqlx::query::<$db>(sql(&self.q.node_update_registration))
                    .bind(&node.incarnation)
                    .bind(&node.address)
                    .bind(&node.version)
                    .bind(&node.node_id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if updated == 0 {
                    sqlx::query::<$db>(sql(&self.q.node_insert))
                        .bind(&node.node_id)
                        .bind(&node.incarnation)
                        .bind(&node.address)
                        .bind(&node.version)
                        .execute(&mut *tx)
                        .await?;
                }
                self.node_release_everything(&mut tx, &node.node_id).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn node_leave_once(&self, node_id: &str, incarnation: &str) -> Result<(), Error> {
                let mut tx = self.begin_write().await?;
                let left = sqlx::query::<$db>(sql(&self.q.node_mark_left))
                    .bind(node_id)
                    .bind(incarnation)
                    .execute(&mut *tx)
                    .await?;
                if left.rows_affected() == 0 {
                    // Whatever the node id owns now belongs to another process: leave it be.
                    tx.rollback().await?;
                    return Err(Error::IncarnationLost {
                        node_id: node_id.to_owned(),
                    });
                }
                self.node_release_everything(&mut tx, node_id).await?;
                sqlx::query::<$db>(sql(&self.q.partitions_cancel_pending_to))
                    .bind(node_id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn partitions_apply_once(
                &self,
                fence: &LeaderFence,
                changes: &[PartitionChange],
            ) -> Result<u64, Error> {
                let mut tx = self.begin_write().await?;
                let leader = self.leader_lock(&mut tx).await?;
                let still_leader =
                    leader.holder() == Some(fence.node_id.as_str()) && leader.term == fence.term;
                if !still_leader {
                    tx.rollback().await?;
                    return Err(Error::Fenced { term: fence.term });
                }
                let mut applied = 0;
                for change in changes {
                    let query = match change {
                        PartitionChange::Assign {
                            partition_id,
                            expected_epoch,
                            owner,
                        } => sqlx::query::<$db>(sql(&self.q.partition_assign))
                            .bind(owner.as_str())
                            .bind(*partition_id)
                            .bind(*expected_epoch),
                        PartitionChange::RequestHandOff {
                            partition_id,
                            expected_epoch,
                            to,
                        } => sqlx::query::<$db>(sql(&self.q.partition_request_hand_off))
                            .bind(to.as_str())
                            .bind(*partition_id)
                            .bind(*expected_epoch),
                        PartitionChange::CancelHandOff {
                            partition_id,
                            expected_epoch,
                        } => sqlx::query::<$db>(sql(&self.q.partition_cancel_hand_off))
                            .bind(*partition_id)
                            .bind(*expected_epoch),
                    };
                    applied += query.execute(&mut *tx).await?.rows_affected();
                }
                tx.commit().await?;
                Ok(applied)
            }
        }
    };
}

sql_store!(
    PostgresStore,
    Postgres,
    Backend::Postgres,
    POSTGRES_MIGRATOR
);
sql_store!(MysqlStore, MySql, Backend::Mysql, MYSQL_MIGRATOR);
sql_store!(SqliteStore, Sqlite, Backend::Sqlite, SQLITE_MIGRATOR);
