//! A store's connections: a deadline on every answer of the database, and PostgreSQL behind a
//! pooler in transaction mode (pgbouncer, pgcat, Odyssey, RDS Proxy).
//!
//! **The deadline.** A statement sent on a connection that then goes silent (a firewall or NAT
//! that forgot it, a database host gone without a reset, a failover behind a virtual address)
//! waits for the kernel to give the connection up: with retransmissions, a quarter of an hour.
//! The database's own statement limit cannot help, as its error never arrives. So every
//! statement, `BEGIN` and `COMMIT` sent here has a deadline, the statement limit and half again
//! ([`answer_limit`]): past it the call fails. A connection whose answer did not come (or whose
//! caller gave up waiting) goes back to the pool only once the answer came, within the same
//! deadline, else it is closed: sqlx's own check of a returned connection would wait the
//! quarter of an hour, holding a slot. SQLite, in the process, has no deadline.
//!
//! **A pooler.** A transaction-mode pooler gives a client a server connection for one
//! transaction and takes it back at the end; outside a transaction, for one statement's round
//! trip. sqlx cannot run there as it is:
//! - it names its prepared statements (`sqlx_s_1`, …) and keeps them per client connection,
//!   but the next statement may run on another server connection, where that name is unknown
//!   or already taken by another client (a statement cache of 0 does not help: sqlx still
//!   names them, and only forgets them);
//! - a statement with parameters takes two round trips (Parse and Describe, then Bind and
//!   Execute, each ending with Sync), and outside a transaction the pooler may hand the second
//!   to another server connection, which never saw the first;
//! - settings sent at connection start (`statement_timeout`, …) are refused by pgbouncer, and
//!   a session `SET` would stay behind on a server connection other clients then use.
//!
//! So, with `database.pooler = "transaction"`, every statement runs inside a transaction
//! (one of its own when the caller has none) whose first round trip is `BEGIN` with the
//! settings as `SET LOCAL`, and every statement is unnamed (`persistent(false)`): an unnamed
//! statement lives until the next Parse on its server connection, which the transaction holds.
//! The cost, measured in `bench/README.md`: up to four round trips for a statement on its own
//! instead of one, and a plan made at every execution.

use std::fmt;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::{self, BoxStream, StreamExt};
use sqlx::pool::PoolConnection;
use sqlx::{
    AssertSqlSafe, Connection, Database, Describe, Either, Execute, Executor, Pool, SqlSafeStr,
    SqlStr,
};
use sqlx_core::transaction::TransactionManager;

/// How long a statement's answer may take before its connection is presumed dead: the
/// database's own limit (after which it answers with an error) and half again for the way.
pub(super) fn answer_limit(statement_timeout: Duration) -> Duration {
    statement_timeout + statement_timeout / 2
}

/// The error of a call the database did not answer in time.
fn no_answer(limit: Duration) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "the database did not answer within {} ms (database.statement_timeout_ms and half \
             again)",
            limit.as_millis()
        ),
    ))
}

/// `call`, sent on a connection: in flight until answered; past `limit`, failed with
/// [`no_answer`] and left in flight (see `Conn`'s drop).
async fn answered<T>(
    in_flight: &mut bool,
    limit: Option<Duration>,
    call: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    *in_flight = true;
    let answer = match limit {
        None => call.await,
        Some(limit) => tokio::time::timeout(limit, call)
            .await
            .map_err(|_| no_answer(limit))?,
    };
    *in_flight = false;
    answer
}

/// The connections of a store.
pub(super) struct SqlDb<DB: Database> {
    pool: Pool<DB>,
    /// `None` when connected directly; else the `BEGIN` that opens every transaction, with the
    /// settings a direct connection gets at its start (PostgreSQL behind a pooler).
    pooled_begin: Option<Arc<str>>,
    answer_limit: Option<Duration>,
}

impl<DB: Database> Clone for SqlDb<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            pooled_begin: self.pooled_begin.clone(),
            answer_limit: self.answer_limit,
        }
    }
}

impl<DB: Database> fmt::Debug for SqlDb<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlDb")
            .field("pool", &self.pool)
            .field("pooled", &self.pooled_begin.is_some())
            .field("answer_limit", &self.answer_limit)
            .finish()
    }
}

impl<DB: Database> SqlDb<DB> {
    /// `answer_limit`: see [`answer_limit`]; `None` for a database in the process.
    pub(super) fn new(pool: Pool<DB>, answer_limit: Option<Duration>) -> Self {
        Self {
            pool,
            pooled_begin: None,
            answer_limit,
        }
    }

    /// Behind a transaction-mode pooler: `settings` are `(name, value)` pairs applied with
    /// `SET LOCAL` at every `BEGIN`, where a direct pool got them as startup options.
    pub(super) fn behind_pooler(mut self, settings: &[(&str, &str)]) -> Self {
        let mut begin = String::from("BEGIN");
        for (name, value) in settings {
            begin.push_str(&format!("; SET LOCAL {name} = '{value}'"));
        }
        self.pooled_begin = Some(Arc::from(begin));
        self
    }

    /// The pool itself, for what runs without the deadline (migrations).
    pub(super) fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    pub(super) fn is_pooled(&self) -> bool {
        self.pooled_begin.is_some()
    }

    /// A connection of the pool, its statements under the deadline.
    pub(super) async fn acquire(&self) -> Result<Conn<DB>, sqlx::Error> {
        Ok(Conn {
            raw: Some(self.pool.acquire().await?),
            unnamed: self.is_pooled(),
            answer_limit: self.answer_limit,
            in_flight: false,
        })
    }

    /// Begins a transaction (with the settings, behind a pooler).
    pub(super) async fn begin(&self) -> Result<SqlTx<DB>, sqlx::Error> {
        let begin = self
            .pooled_begin
            .as_ref()
            .map(|begin| AssertSqlSafe(begin.to_string()).into_sql_str());
        self.begin_with_statement(begin).await
    }

    /// Begins a transaction with `statement` instead of `BEGIN`.
    pub(super) async fn begin_with(
        &self,
        statement: &'static str,
    ) -> Result<SqlTx<DB>, sqlx::Error> {
        self.begin_with_statement(Some(statement.into_sql_str()))
            .await
    }

    async fn begin_with_statement(
        &self,
        statement: Option<SqlStr>,
    ) -> Result<SqlTx<DB>, sqlx::Error> {
        let mut conn = self.acquire().await?;
        let limit = conn.answer_limit;
        let (raw, in_flight) = conn.parts();
        answered(
            in_flight,
            limit,
            DB::TransactionManager::begin(raw, statement),
        )
        .await?;
        Ok(SqlTx { conn, open: true })
    }
}

/// A connection taken from a store's pool. Dropped with a statement unanswered, it is given
/// back only once the answer came, within the deadline; else it is closed.
pub(super) struct Conn<DB: Database> {
    /// Taken only by the drop of a connection with a statement unanswered.
    raw: Option<PoolConnection<DB>>,
    /// Statements unnamed: behind a pooler.
    unnamed: bool,
    answer_limit: Option<Duration>,
    /// A statement was sent and its answer not read to the end: what the connection would
    /// read next is unknown, and it may never come.
    in_flight: bool,
}

impl<DB: Database> fmt::Debug for Conn<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("unnamed", &self.unnamed)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl<DB: Database> Conn<DB> {
    /// The connection, and its in-flight mark.
    fn parts(&mut self) -> (&mut DB::Connection, &mut bool) {
        let raw = self
            .raw
            .as_deref_mut()
            .expect("a connection is taken only when it is dropped");
        (raw, &mut self.in_flight)
    }
}

impl<DB: Database> Drop for Conn<DB> {
    fn drop(&mut self) {
        let (Some(limit), true) = (self.answer_limit, self.in_flight) else {
            // sqlx's return to the pool checks the connection (and, for a database in the
            // process, waits for what it was doing).
            return;
        };
        let Some(mut raw) = self.raw.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            raw.close_on_drop();
            return;
        };
        // The caller gave up, but on a slow link the answer may still come: read it to its end
        // within the deadline and give the connection back (a new one costs several round
        // trips); on a silent one, close it.
        runtime.spawn(async move {
            if !matches!(tokio::time::timeout(limit, raw.ping()).await, Ok(Ok(()))) {
                raw.close_on_drop();
            }
        });
    }
}

/// A write transaction. `&mut *tx` is what statements run on, as with sqlx's transactions;
/// dropped uncommitted, it is rolled back (on the connection's way back to the pool).
pub(super) struct SqlTx<DB: Database> {
    conn: Conn<DB>,
    open: bool,
}

impl<DB: Database> fmt::Debug for SqlTx<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlTx")
            .field("conn", &self.conn)
            .field("open", &self.open)
            .finish()
    }
}

impl<DB: Database> SqlTx<DB> {
    pub(super) async fn commit(mut self) -> Result<(), sqlx::Error> {
        let limit = self.conn.answer_limit;
        let (raw, in_flight) = self.conn.parts();
        answered(in_flight, limit, DB::TransactionManager::commit(raw)).await?;
        self.open = false;
        Ok(())
    }

    pub(super) async fn rollback(mut self) -> Result<(), sqlx::Error> {
        let limit = self.conn.answer_limit;
        let (raw, in_flight) = self.conn.parts();
        answered(in_flight, limit, DB::TransactionManager::rollback(raw)).await?;
        self.open = false;
        Ok(())
    }
}

impl<DB: Database> Drop for SqlTx<DB> {
    fn drop(&mut self) {
        // As sqlx's own transaction does: the rollback is queued, and sent before whatever the
        // connection does next (its check on the way back to the pool, or the reading of an
        // unanswered statement's answer). Also after a `COMMIT` the database refused: the
        // connection's count of open transactions goes back to zero.
        if self.open
            && let Some(raw) = self.conn.raw.as_deref_mut()
        {
            DB::TransactionManager::start_rollback(raw);
        }
    }
}

impl<DB: Database> Deref for SqlTx<DB> {
    type Target = Conn<DB>;

    fn deref(&self) -> &Conn<DB> {
        &self.conn
    }
}

impl<DB: Database> DerefMut for SqlTx<DB> {
    fn deref_mut(&mut self) -> &mut Conn<DB> {
        &mut self.conn
    }
}

/// A statement run unnamed when `persistent` is false, whatever it asked.
struct Unnamed<E> {
    query: E,
    persistent: bool,
}

impl<'q, DB: Database, E: Execute<'q, DB>> Execute<'q, DB> for Unnamed<E> {
    fn sql(self) -> SqlStr {
        self.query.sql()
    }

    fn statement(&self) -> Option<&DB::Statement> {
        self.query.statement()
    }

    fn take_arguments(&mut self) -> Result<Option<DB::Arguments>, sqlx::error::BoxDynError> {
        self.query.take_arguments()
    }

    fn persistent(&self) -> bool {
        self.persistent && self.query.persistent()
    }
}

type Step<DB> = Either<<DB as Database>::QueryResult, <DB as Database>::Row>;

/// `answers` ending in [`no_answer`] once `limit` has passed since the call; `in_flight`
/// cleared once they were read to the end (or to the database's error).
fn bounded<'e, T: Send + 'e>(
    answers: BoxStream<'e, Result<T, sqlx::Error>>,
    limit: Option<Duration>,
    in_flight: &'e mut bool,
) -> BoxStream<'e, Result<T, sqlx::Error>> {
    let deadline = limit.map(|limit| (tokio::time::Instant::now() + limit, limit));
    stream::unfold(Some((answers, in_flight)), move |reading| async move {
        let (mut answers, in_flight) = reading?;
        let next = match deadline {
            None => answers.next().await,
            Some((at, limit)) => match tokio::time::timeout_at(at, answers.next()).await {
                Ok(next) => next,
                Err(_) => return Some((Err(no_answer(limit)), None)),
            },
        };
        match next {
            None => {
                *in_flight = false;
                None
            }
            Some(Err(err)) => {
                *in_flight = false;
                Some((Err(err), None))
            }
            Some(Ok(step)) => Some((Ok(step), Some((answers, in_flight)))),
        }
    })
    .boxed()
}

impl<'c, DB> Executor<'c> for &'c mut Conn<DB>
where
    DB: Database,
    for<'x> &'x mut DB::Connection: Executor<'x, Database = DB>,
{
    type Database = DB;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Step<DB>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, DB>,
    {
        let persistent = !self.unnamed;
        let limit = self.answer_limit;
        let (raw, in_flight) = self.parts();
        *in_flight = true;
        let answers = raw.fetch_many(Unnamed { query, persistent });
        bounded(answers, limit, in_flight)
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<DB::Row>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, DB>,
    {
        let persistent = !self.unnamed;
        let limit = self.answer_limit;
        let (raw, in_flight) = self.parts();
        let answer = raw.fetch_optional(Unnamed { query, persistent });
        Box::pin(answered(in_flight, limit, answer))
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [DB::TypeInfo],
    ) -> BoxFuture<'e, Result<DB::Statement, sqlx::Error>>
    where
        'c: 'e,
    {
        self.parts().0.prepare_with(sql, parameters)
    }

    fn describe<'e>(self, sql: SqlStr) -> BoxFuture<'e, Result<Describe<DB>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.parts().0.describe(sql)
    }
}

/// A statement on its own, on a connection of the pool under the deadline; behind a pooler,
/// in a transaction of its own. Its results are gathered before the connection goes back.
impl<'p, DB> Executor<'p> for &'_ SqlDb<DB>
where
    DB: Database,
    for<'x> &'x mut DB::Connection: Executor<'x, Database = DB>,
{
    type Database = DB;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Step<DB>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, DB>,
    {
        if self.answer_limit.is_none() && !self.is_pooled() {
            return self.pool.fetch_many(query);
        }
        let db = self.clone();
        let gathered = async move {
            if !db.is_pooled() {
                let mut conn = db.acquire().await?;
                let steps: Vec<Result<Step<DB>, sqlx::Error>> =
                    (&mut conn).fetch_many(query).collect().await;
                return Ok(steps);
            }
            let mut tx = db.begin().await?;
            let steps: Vec<Result<Step<DB>, sqlx::Error>> =
                (&mut *tx).fetch_many(query).collect().await;
            if steps.iter().all(Result::is_ok) {
                tx.commit().await?;
            } else {
                tx.rollback().await?;
            }
            Ok::<_, sqlx::Error>(steps)
        };
        stream::once(gathered)
            .flat_map(|gathered| match gathered {
                Ok(steps) => stream::iter(steps).left_stream(),
                Err(err) => stream::iter([Err(err)]).right_stream(),
            })
            .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<DB::Row>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, DB>,
    {
        if self.answer_limit.is_none() && !self.is_pooled() {
            return self.pool.fetch_optional(query);
        }
        let db = self.clone();
        Box::pin(async move {
            if !db.is_pooled() {
                let mut conn = db.acquire().await?;
                return (&mut conn).fetch_optional(query).await;
            }
            let mut tx = db.begin().await?;
            let row = (&mut *tx).fetch_optional(query).await?;
            tx.commit().await?;
            Ok(row)
        })
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [DB::TypeInfo],
    ) -> BoxFuture<'e, Result<DB::Statement, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e>(self, sql: SqlStr) -> BoxFuture<'e, Result<Describe<DB>, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.describe(sql)
    }
}
