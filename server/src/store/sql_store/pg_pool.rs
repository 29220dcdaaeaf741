//! PostgreSQL's connections, direct or through a pooler in transaction mode (pgbouncer,
//! pgcat, Odyssey, RDS Proxy).
//!
//! A transaction-mode pooler gives a client a server connection for one transaction and takes
//! it back at the end; outside a transaction, for one statement's round trip. sqlx cannot run
//! there as it is:
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
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::stream::{self, BoxStream, StreamExt};
use sqlx::postgres::{PgPool, PgQueryResult, PgRow, PgStatement, PgTypeInfo, Postgres};
use sqlx::{AssertSqlSafe, Either, Execute, Executor, SqlStr, Transaction};

/// The connections of a PostgreSQL store.
#[derive(Clone)]
pub(super) struct PgDb {
    pool: PgPool,
    /// `None` when connected directly; else the `BEGIN` that opens every transaction, with the
    /// settings a direct connection gets at its start.
    pooled_begin: Option<Arc<str>>,
}

impl fmt::Debug for PgDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgDb")
            .field("pool", &self.pool)
            .field("pooled", &self.pooled_begin.is_some())
            .finish()
    }
}

impl PgDb {
    /// `settings` are `(name, value)` pairs applied with `SET LOCAL` at every `BEGIN` when
    /// `pooled`; a direct pool got them as startup options.
    pub(super) fn new(pool: PgPool, pooled: bool, settings: &[(&str, &str)]) -> Self {
        let pooled_begin = pooled.then(|| {
            let mut begin = String::from("BEGIN");
            for (name, value) in settings {
                begin.push_str(&format!("; SET LOCAL {name} = '{value}'"));
            }
            Arc::from(begin)
        });
        Self { pool, pooled_begin }
    }

    pub(super) fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub(super) fn is_pooled(&self) -> bool {
        self.pooled_begin.is_some()
    }

    /// Begins a transaction (with the settings, behind a pooler).
    pub(super) async fn begin(&self) -> Result<PgTx, sqlx::Error> {
        let tx = match &self.pooled_begin {
            None => self.pool.begin().await?,
            Some(begin) => {
                self.pool
                    .begin_with(AssertSqlSafe(begin.to_string()))
                    .await?
            }
        };
        Ok(PgTx {
            conn: PgTxConn {
                tx,
                pooled: self.is_pooled(),
            },
        })
    }
}

/// A write transaction. `&mut *tx` is what statements run on, as with sqlx's transactions.
#[derive(Debug)]
pub(super) struct PgTx {
    conn: PgTxConn,
}

/// The connection of a `PgTx`: runs statements unnamed behind a pooler.
#[derive(Debug)]
pub(super) struct PgTxConn {
    tx: Transaction<'static, Postgres>,
    pooled: bool,
}

impl PgTx {
    pub(super) async fn commit(self) -> Result<(), sqlx::Error> {
        self.conn.tx.commit().await
    }

    pub(super) async fn rollback(self) -> Result<(), sqlx::Error> {
        self.conn.tx.rollback().await
    }
}

impl Deref for PgTx {
    type Target = PgTxConn;

    fn deref(&self) -> &PgTxConn {
        &self.conn
    }
}

impl DerefMut for PgTx {
    fn deref_mut(&mut self) -> &mut PgTxConn {
        &mut self.conn
    }
}

/// A statement run unnamed when `persistent` is false, whatever it asked.
struct Unnamed<E> {
    query: E,
    persistent: bool,
}

impl<'q, E: Execute<'q, Postgres>> Execute<'q, Postgres> for Unnamed<E> {
    fn sql(self) -> SqlStr {
        self.query.sql()
    }

    fn statement(&self) -> Option<&PgStatement> {
        self.query.statement()
    }

    fn take_arguments(
        &mut self,
    ) -> Result<Option<sqlx::postgres::PgArguments>, sqlx::error::BoxDynError> {
        self.query.take_arguments()
    }

    fn persistent(&self) -> bool {
        self.persistent && self.query.persistent()
    }
}

type Step = Either<PgQueryResult, PgRow>;

impl<'c> Executor<'c> for &'c mut PgTxConn {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Step, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let persistent = !self.pooled;
        (&mut *self.tx).fetch_many(Unnamed { query, persistent })
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let persistent = !self.pooled;
        (&mut *self.tx).fetch_optional(Unnamed { query, persistent })
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement, sqlx::Error>>
    where
        'c: 'e,
    {
        (&mut *self.tx).prepare_with(sql, parameters)
    }

    fn describe<'e>(
        self,
        sql: SqlStr,
    ) -> BoxFuture<'e, Result<sqlx::Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        (&mut *self.tx).describe(sql)
    }
}

/// A statement on its own: straight to the pool when direct; behind a pooler, in a
/// transaction of its own, its results gathered before the commit.
impl<'p> Executor<'p> for &'_ PgDb {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Step, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if !self.is_pooled() {
            return self.pool.fetch_many(query);
        }
        let db = self.clone();
        let gathered = async move {
            let mut tx = db.begin().await?;
            let steps: Vec<Result<Step, sqlx::Error>> =
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
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if !self.is_pooled() {
            return self.pool.fetch_optional(query);
        }
        let db = self.clone();
        Box::pin(async move {
            let mut tx = db.begin().await?;
            let row = (&mut *tx).fetch_optional(query).await?;
            tx.commit().await?;
            Ok(row)
        })
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e>(
        self,
        sql: SqlStr,
    ) -> BoxFuture<'e, Result<sqlx::Describe<Postgres>, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.describe(sql)
    }
}
