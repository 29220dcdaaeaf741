//! The three SQL stores. The logic of every method is written once, in the macros of
//! `cluster`, `jobs` and `dispatch` (one per store trait), and instantiated for each backend's
//! concrete sqlx types (being generic over `sqlx::Database`
//! fights the compiler); what differs per backend is the SQL text (see `dialect`), how a pool is
//! opened, and how a write transaction begins.

mod attempt_end;
mod audit;
mod bulk;
mod claim;
mod cluster;
mod connections;
mod create_database;
mod dispatch;
mod flow;
mod follow_ups;
mod galera;
mod grants;
mod history;
mod jobs;
mod logs;
mod migrate;
mod namespaces;
mod policies;
mod secrets;
mod settle_tx;
mod standbys;
mod tasks;
mod tokens;
mod workflows;

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, Postgres};
use sqlx::sqlite::{
    Sqlite, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Connection, Executor};

use super::audit_records::{AuditFilter, AuditRecord, AuditStore, AuditWrite};
use super::child_records::{ChildRunRef, ChildStore, EndedRun, FollowUpEvents, FollowedUp};
use super::dialect::Queries;
use super::dispatch_records::{
    AttemptEnd, AttemptEnded, AttemptRecord, DueAttempt, ExecutorList, ExecutorLoad, ExecutorOwner,
    ExecutorRecord, ExecutorRegistration, LateRun, MinuteCount, NewAttempt, RegistrationOutcome,
    RunFilter, XxlJobRunning,
};
use super::flow_records::{Admitted, FlowStore, RunInLine};
use super::grant_records::{GrantRecord, GrantStore, GrantWrite};
use super::history_records::{JobHistoryRule, PurgeScope, PurgeStep, Purged};
use super::job_records::{
    ClaimOutcome, JobChanges, JobFilter, JobInsert, JobKey, JobOrder, JobPolicyRow, JobRecord,
    JobWrite, RunClaim, RunRecord, ScheduledJob,
};
use super::log_records::{LogAppend, LogCaps, LogLine, NewLogLine, TRUNCATED_LINE};
use super::namespace_records::{
    NamespaceDeletion, NamespaceId, NamespaceRecord, NamespaceStore, NamespaceUsage, NamespaceWrite,
};
use super::policy_records::{BackfillRecord, BackfillStep, CalendarRecord, InstantEnd, JobInstant};
use super::rules::attempt_end::{EndingTx, PlainSuccessTx, RetryAttempt, RunEnding};
use super::rules::backfill::{BackfillRun, BackfillTx};
use super::rules::claim::{
    ClaimJob, ClaimTx, ClaimedRun, FirstAttempt, FirstAttemptTx, JobAdvance, StartedRun,
};
use super::rules::cluster::ClusterTx;
use super::rules::fence::{FenceTx, PartitionLease};
use super::rules::flow::{FlowKeyRow, FlowKeySave, FlowTx};
use super::rules::follow_ups::{ChildRunLink, FollowUpJob, FollowUpRow, FollowUpTx, ParentJob};
use super::rules::history::{PurgeCandidate, PurgeDriver};
use super::rules::logs::{LogDriver, LogOwner, LogRow, LogSize};
use super::rules::manual_run::{ManualRun, ManualRunDriver};
use super::rules::namespaces::NamespaceTx;
use super::rules::run_end::RunEndTx;
use super::rules::run_start::RunStartTx;
use super::rules::workflow_start::{NewStep, RunHead, WorkflowStartTx};
use super::rules::workflows::{StepEnd, WorkflowTx};
use super::secret_records::{SecretRecord, SecretStore, SecretWrite};
use super::token_records::{TokenRecord, TokenStore, TokenWrite};
use super::workflow_records::{StepRunRecord, WorkflowRunRecord, WorkflowStore, WorkflowWrite};
use super::{
    Backend, ClusterMeta, ClusterStore, DatabaseUrl, DispatchStore, Error, HistoryStore, JobStore,
    LeaderFence, LeaderRecord, LogStore, NodeList, NodeRecord, NodeRegistration, PartitionChange,
    PartitionRecord, PolicyStore, PoolOptions, SchemaVersion, StandbyStore,
};
use crate::jobs::FlowLimits;
use crate::states::{JobKind, JobState, RunState, StepState};
use connections::{Conn, SqlDb, SqlTx, answer_limit};
use logs::LOG_ROWS_PER_INSERT;

/// The embedded migrations, with sqlx's own locking off: `migrate` takes a lock that works on
/// every backend and checks that it was granted.
fn migrator(embedded: Migrator) -> Migrator {
    let mut migrator = embedded;
    migrator.set_locking(false);
    migrator
}
static POSTGRES_MIGRATOR: LazyLock<Migrator> =
    LazyLock::new(|| migrator(sqlx::migrate!("../migrations/postgres")));
static MYSQL_MIGRATOR: LazyLock<Migrator> =
    LazyLock::new(|| migrator(sqlx::migrate!("../migrations/mysql")));
static SQLITE_MIGRATOR: LazyLock<Migrator> =
    LazyLock::new(|| migrator(sqlx::migrate!("../migrations/sqlite")));

/// Our query texts are compile-time templates rendered once per backend; no input reaches them.
fn sql(query: &Arc<str>) -> AssertSqlSafe<Arc<str>> {
    AssertSqlSafe(Arc::clone(query))
}

/// `rows` as `T`. For the rows of a statement that binds nothing (its ids written in by
/// [`with_partitions`]) sent as text, `sqlx::raw_sql`, instead of prepared: its text is new at
/// almost every call, and prepared it would take a slot of sqlx's statement cache; sqlx
/// 0.9.0's MySQL driver, the cache full, closes the oldest statement with a packet the server
/// does not answer and then sends the next command, which Nagle's algorithm (0.9.0 no longer
/// sets `TCP_NODELAY`) holds for the server's delayed ACK: 40 ms on Linux (bench/README.md,
/// "Workflows"). As text it is one round trip on every backend.
fn rows_as<R, T>(rows: &[R]) -> Result<Vec<T>, Error>
where
    R: sqlx::Row,
    T: for<'r> sqlx::FromRow<'r, R>,
{
    rows.iter()
        .map(|row| T::from_row(row))
        .collect::<Result<Vec<T>, sqlx::Error>>()
        .map_err(Error::from)
}

/// A query whose `{partitions}` is replaced by the ids (of partitions, or of any rows), formatted from integers (so safe), or
/// `None` when there are none.
fn with_partitions(query: &Arc<str>, partitions: &[i64]) -> Option<AssertSqlSafe<String>> {
    if partitions.is_empty() {
        return None;
    }
    let list = partitions
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    Some(AssertSqlSafe(query.replace("{partitions}", &list)))
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

/// The connections and the write transaction of each backend (see `connections`).
type Db<DB> = SqlDb<DB>;
type Tx<DB> = SqlTx<DB>;
type PgTx = SqlTx<Postgres>;

/// Rows per multi-row run insert: 10 parameters each.
const RUN_ROWS_PER_INSERT: usize = 500;

/// A store's write transaction, as the rules' traits see it (`super::rules`): the store for its
/// query texts and helpers, and the transaction.
struct StoreTx<'a, S, T> {
    store: &'a S,
    tx: &'a mut T,
}

/// A store as a rule that opens its own transactions sees it (`super::rules::history`).
struct StorePool<'a, S> {
    store: &'a S,
}

/// A guarded update whose caller learns which rows it moved (see `guarded_update` in
/// `dispatch.rs`): the update, and on MySQL the locking read that names them first.
struct GuardedUpdate {
    locking_read: Option<AssertSqlSafe<String>>,
    update: AssertSqlSafe<String>,
}

/// Whether sqlx pings a pooled connection before each use: a round trip before every
/// statement or transaction, which on a link of 200 ms doubled the heartbeat's time past its
/// budget. A connection that died is found by the use itself instead: at once when the
/// database reset it, at the answer deadline when it went silent (`connections`).
const CHECK_BEFORE_ACQUIRE: bool = false;

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
    pool: SqlDb<Postgres>,
    q: Arc<Queries>,
    events: Arc<FollowUpEvents>,
}

impl PostgresStore {
    pub(super) async fn connect(url: &DatabaseUrl, options: &PoolOptions) -> Result<Self, Error> {
        let timeout_ms = options.statement_timeout.as_millis().to_string();
        let settings = [
            ("statement_timeout", timeout_ms.as_str()),
            ("lock_timeout", timeout_ms.as_str()),
            // A node cut from the database in the middle of a transaction leaves it open on
            // the server, its row locks held until the server notices the connection is dead
            // (hours, by TCP keepalive): the partitions' next owner would wait on them. Our
            // transactions never wait on anything but their own statements, so one idle for a
            // statement's limit is abandoned, and the server ends it.
            ("idle_in_transaction_session_timeout", timeout_ms.as_str()),
            // Generic plans, made once the first executions are done, ignore which values
            // are rare: with thousands of pending runs a generic plan of the queue queries
            // scanned far more rows than the one made with the values (the cluster tests
            // stopped keeping up, and 512 run starts took 11 s at 3,000 fires/s). Unnamed
            // statements, as behind a pooler, are always planned with their values.
            ("plan_cache_mode", "force_custom_plan"),
            // The fire path's tables are read from memory, not from disk: with the default
            // cost of a random read (4.0) the planner chose a sequential scan of `jobs` for
            // the claim's advance of 500 of its 10,000 rows (12.5 ms against 1.3 ms by its
            // key) and of `attempts` for the settle's update of 8,192 attempts by id.
            ("random_page_cost", "1.1"),
        ];
        let mut connect =
            PgConnectOptions::from_str(url.expose()).map_err(|e| invalid_url(url, e))?;
        connect = if options.transaction_pooler {
            // Startup parameters pgbouncer does not know are refused at connection start
            // (sqlx sends `extra_float_digits`, for text floats, which it does not read);
            // settings passed there would stay on a server connection other clients use, so
            // each transaction sets them instead.
            connect.extra_float_digits(None)
        } else {
            connect.options(settings)
        };
        // Behind a pooler the database is the pooler's to name: nothing to create there.
        if !options.transaction_pooler {
            create_database::postgres(&connect).await?;
        }
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .test_before_acquire(CHECK_BEFORE_ACQUIRE)
            .connect_with(connect)
            .await?;
        let db = SqlDb::new(pool, Some(answer_limit(options.statement_timeout)));
        let db = if options.transaction_pooler {
            db.behind_pooler(&settings)
        } else {
            db
        };
        Ok(Self::from_pool(db))
    }

    async fn begin_write(&self) -> Result<PgTx, Error> {
        Ok(self.pool.begin().await?)
    }

    async fn migrate_schema(&self) -> Result<(), Error> {
        migrate::postgres(&self.pool, &POSTGRES_MIGRATOR).await
    }

    fn migrator() -> &'static Migrator {
        &POSTGRES_MIGRATOR
    }
}

/// MySQL 8 and MariaDB 10.6+.
#[derive(Debug, Clone)]
pub(super) struct MysqlStore {
    pool: SqlDb<MySql>,
    q: Arc<Queries>,
    events: Arc<FollowUpEvents>,
}

impl MysqlStore {
    pub(super) async fn connect(url: &DatabaseUrl, options: &PoolOptions) -> Result<Self, Error> {
        let connect =
            MySqlConnectOptions::from_str(url.expose()).map_err(|e| invalid_url(url, e))?;
        create_database::mysql(&connect).await?;
        let (galera, mariadb) = {
            let mut conn = sqlx::MySqlConnection::connect_with(&connect).await?;
            let member = galera::is_member(&mut conn).await?;
            if member {
                galera::check_settings(&mut conn).await?;
            }
            let (version,): (String,) = sqlx::query_as("SELECT VERSION()")
                .fetch_one(&mut conn)
                .await?;
            let _ = conn.close().await;
            (member, version.contains("MariaDB"))
        };
        // InnoDB counts lock waits in whole seconds; at least one.
        let lock_wait_s = options.statement_timeout.as_secs().max(1);
        let pool = MySqlPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .test_before_acquire(CHECK_BEFORE_ACQUIRE)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    let set = format!("SET SESSION innodb_lock_wait_timeout = {lock_wait_s}");
                    conn.execute(AssertSqlSafe(set)).await?;
                    // Our transactions lock what they need explicitly (FOR UPDATE, epoch
                    // compare-and-set); REPEATABLE READ's gap locks would only add deadlocks.
                    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await?;
                    if mariadb {
                        // A transaction a node cut from the database left open is ended by the
                        // server, its row locks with it (see PostgreSQL's
                        // `idle_in_transaction_session_timeout` above); MySQL 8 has no such
                        // setting.
                        let set = format!("SET SESSION idle_transaction_timeout = {lock_wait_s}");
                        conn.execute(AssertSqlSafe(set)).await?;
                    }
                    if galera {
                        // Reads wait for what other members committed first (`galera`).
                        conn.execute("SET SESSION wsrep_sync_wait = 1").await?;
                    }
                    Ok(())
                })
            })
            .connect_with(connect)
            .await?;
        let db = SqlDb::new(pool, Some(answer_limit(options.statement_timeout)));
        Ok(Self::from_pool(db))
    }

    async fn begin_write(&self) -> Result<SqlTx<MySql>, Error> {
        Ok(self.pool.begin().await?)
    }

    fn migrator() -> &'static Migrator {
        &MYSQL_MIGRATOR
    }

    async fn migrate_schema(&self) -> Result<(), Error> {
        let pool = self.pool.pool();
        let galera = galera::is_member(&mut *pool.acquire().await?).await?;
        migrate::mysql(pool, &MYSQL_MIGRATOR, galera).await?;
        if galera {
            galera::check_tables(pool).await?;
        }
        Ok(())
    }
}

/// SQLite, for a single node.
#[derive(Debug, Clone)]
pub(super) struct SqliteStore {
    pool: SqlDb<Sqlite>,
    q: Arc<Queries>,
    events: Arc<FollowUpEvents>,
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
        // Processes opening a new file together race to switch it to WAL, and SQLite answers
        // the losers "database is locked" without waiting for its busy timeout.
        let started = tokio::time::Instant::now();
        let pool = loop {
            let opened = SqlitePoolOptions::new()
                .max_connections(options.max_connections)
                .acquire_timeout(options.acquire_timeout)
                .connect_with(connect.clone())
                .await;
            match opened {
                Err(sqlx::Error::Database(db))
                    if db.code().as_deref() == Some("5")
                        && started.elapsed() < options.statement_timeout =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                other => break other?,
            }
        };
        // In the process: no connection to go silent, and its busy timeout bounds lock waits.
        Ok(Self::from_pool(SqlDb::new(pool, None)))
    }

    /// SQLite has no row locks: `BEGIN IMMEDIATE` takes the write lock up front, so a
    /// transaction that reads then writes cannot fail half-way on a lock upgrade.
    async fn begin_write(&self) -> Result<SqlTx<Sqlite>, Error> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    fn migrator() -> &'static Migrator {
        &SQLITE_MIGRATOR
    }

    async fn migrate_schema(&self) -> Result<(), Error> {
        let options = self.pool.pool().connect_options();
        migrate::sqlite(self.pool.pool(), &options, &SQLITE_MIGRATOR).await
    }
}

cluster::cluster_store!(PostgresStore, Postgres, Backend::Postgres);
jobs::job_store!(PostgresStore, Postgres, Backend::Postgres);
claim::claim_store!(PostgresStore, Postgres, Backend::Postgres);
dispatch::dispatch_store!(PostgresStore, Postgres, Backend::Postgres);
settle_tx::settle_tx_store!(PostgresStore, Postgres, Backend::Postgres);
cluster::cluster_store!(MysqlStore, MySql, Backend::Mysql);
jobs::job_store!(MysqlStore, MySql, Backend::Mysql);
claim::claim_store!(MysqlStore, MySql, Backend::Mysql);
dispatch::dispatch_store!(MysqlStore, MySql, Backend::Mysql);
settle_tx::settle_tx_store!(MysqlStore, MySql, Backend::Mysql);
cluster::cluster_store!(SqliteStore, Sqlite, Backend::Sqlite);
jobs::job_store!(SqliteStore, Sqlite, Backend::Sqlite);
claim::claim_store!(SqliteStore, Sqlite, Backend::Sqlite);
dispatch::dispatch_store!(SqliteStore, Sqlite, Backend::Sqlite);
settle_tx::settle_tx_store!(SqliteStore, Sqlite, Backend::Sqlite);
attempt_end::attempt_end_store!(PostgresStore, Postgres);
attempt_end::attempt_end_store!(MysqlStore, MySql);
attempt_end::attempt_end_store!(SqliteStore, Sqlite);
follow_ups::follow_ups_store!(PostgresStore, Postgres, Backend::Postgres);
follow_ups::follow_ups_store!(MysqlStore, MySql, Backend::Mysql);
follow_ups::follow_ups_store!(SqliteStore, Sqlite, Backend::Sqlite);
workflows::workflow_store!(PostgresStore, Postgres);
workflows::workflow_store!(MysqlStore, MySql);
workflows::workflow_store!(SqliteStore, Sqlite);
history::history_store!(PostgresStore, Postgres);
history::history_store!(MysqlStore, MySql);
history::history_store!(SqliteStore, Sqlite);
policies::policy_store!(PostgresStore, Postgres);
policies::policy_store!(MysqlStore, MySql);
policies::policy_store!(SqliteStore, Sqlite);
namespaces::namespace_store!(PostgresStore, Postgres);
namespaces::namespace_store!(MysqlStore, MySql);
namespaces::namespace_store!(SqliteStore, Sqlite);
tokens::token_store!(PostgresStore, Postgres);
tokens::token_store!(MysqlStore, MySql);
tokens::token_store!(SqliteStore, Sqlite);
secrets::secret_store!(PostgresStore, Postgres);
flow::flow_store!(PostgresStore, Postgres);
flow::flow_store!(MysqlStore, MySql);
flow::flow_store!(SqliteStore, Sqlite);
secrets::secret_store!(MysqlStore, MySql);
secrets::secret_store!(SqliteStore, Sqlite);
grants::grant_store!(PostgresStore, Postgres);
grants::grant_store!(MysqlStore, MySql);
grants::grant_store!(SqliteStore, Sqlite);
audit::audit_store!(PostgresStore, Postgres);
audit::audit_store!(MysqlStore, MySql);
audit::audit_store!(SqliteStore, Sqlite);
logs::log_store!(
    PostgresStore,
    Postgres,
    "INSERT",
    " ON CONFLICT (attempt_id, line_no) DO NOTHING",
    "SET LOCAL synchronous_commit TO OFF"
);
// INSERT IGNORE counts only the rows it inserted (a no-op ON DUPLICATE KEY UPDATE counts the
// duplicates too, as sqlx connects); the other errors it would hide cannot come from these
// rows: integers, a level of five letters, and valid UTF-8 cut to 8 KiB in a TEXT.
logs::log_store!(MysqlStore, MySql, "INSERT IGNORE", "", "");
logs::log_store!(
    SqliteStore,
    Sqlite,
    "INSERT",
    " ON CONFLICT (attempt_id, line_no) DO NOTHING",
    ""
);
