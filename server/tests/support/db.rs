//! A fresh, empty database per test, on Postgres, MySQL/MariaDB or SQLite.
//!
//! An unreachable server fails the test, saying how to start it or how to leave that backend
//! out. A backend is left out only on request: `CARILLON_TEST_BACKENDS` lists the backends to
//! test (`postgres,mysql,sqlite`, all of them when unset); with `CI=true` it must list all.

use std::sync::Arc;
use std::time::Duration;

use carillon_server::store::{self, DatabaseUrl, PoolOptions, Store};
use sqlx::{AssertSqlSafe, Connection, Executor};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Postgres,
    Mysql,
    Sqlite,
}

impl Engine {
    fn admin_url(self) -> String {
        let (var, default) = match self {
            Engine::Postgres => (
                "CARILLON_TEST_POSTGRES_URL",
                "postgres://postgres@127.0.0.1:5432/test",
            ),
            Engine::Mysql => (
                "CARILLON_TEST_MYSQL_URL",
                "mysql://root@127.0.0.1:3306/test",
            ),
            Engine::Sqlite => ("", ""),
        };
        std::env::var(var).unwrap_or_else(|_| default.to_owned())
    }

    /// The schema script for DBAs, from `sql/`.
    pub fn schema_script(self) -> String {
        let name = match self {
            Engine::Postgres => "postgres",
            Engine::Mysql => "mysql",
            Engine::Sqlite => "sqlite",
        };
        let path = format!("{}/../sql/{name}.sql", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
    }
}

/// A database created for one test and dropped after it.
#[derive(Debug)]
pub struct TestDb {
    pub engine: Engine,
    pub url: String,
    /// The database's name on its server (empty for SQLite).
    pub name: String,
    admin_url: String,
    _dir: Option<tempfile::TempDir>,
    /// The stores of this database connect through this pgbouncer, in transaction mode;
    /// the test's own reads and scripts go straight to the server.
    behind: Option<super::pgbouncer::Pgbouncer>,
}

const BACKENDS_VAR: &str = "CARILLON_TEST_BACKENDS";

impl Engine {
    /// The name `CARILLON_TEST_BACKENDS` uses.
    pub fn key(self) -> &'static str {
        match self {
            Engine::Postgres => "postgres",
            Engine::Mysql => "mysql",
            Engine::Sqlite => "sqlite",
        }
    }

    /// Whether the person running the tests left this backend out (`CARILLON_TEST_BACKENDS`).
    /// With `CI=true` nothing may be left out.
    pub fn left_out(self) -> bool {
        let Ok(list) = std::env::var(BACKENDS_VAR) else {
            return false;
        };
        let listed = list
            .split(',')
            .any(|name| name.trim().eq_ignore_ascii_case(self.key()));
        if !listed && std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!(
                "CI=true: {BACKENDS_VAR}={list} leaves {} out; CI tests every backend",
                self.key()
            );
        }
        if !listed {
            eprintln!("{} left out by {BACKENDS_VAR}={list}", self.key());
        }
        !listed
    }

    /// How to make this engine's server answer, for a failure message.
    pub fn how_to_start(self) -> &'static str {
        match self {
            Engine::Postgres => {
                "start PostgreSQL (`pg_ctlcluster <version> main start`; `bash .ci/run` starts it)"
            }
            Engine::Mysql => {
                "start MariaDB (`start-stop-daemon --start --background --exec /usr/sbin/mariadbd`; \
                 `bash .ci/run` starts it)"
            }
            Engine::Sqlite => "",
        }
    }
}

impl TestDb {
    /// A new empty database, or `None` when `CARILLON_TEST_BACKENDS` leaves the engine out.
    /// Panics when the server does not answer.
    pub async fn create(engine: Engine) -> Option<TestDb> {
        if engine.left_out() {
            return None;
        }
        if engine == Engine::Sqlite {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite://{}", dir.path().join("carillon.db").display());
            return Some(TestDb {
                engine,
                url,
                name: String::new(),
                admin_url: String::new(),
                _dir: Some(dir),
                behind: None,
            });
        }
        let admin_url = engine.admin_url();
        let name = format!(
            "carillon_t_{}",
            carillon_server::data_dir::random_hex(6).expect("random")
        );
        let create = format!("CREATE DATABASE {name}");
        if let Err(err) = admin_execute(engine, &admin_url, &create).await {
            panic!(
                "{engine:?} is not reachable at {admin_url} ({err}): {}, point {} at a server, \
                 or leave it out explicitly with {BACKENDS_VAR} (e.g. {BACKENDS_VAR}=sqlite)",
                engine.how_to_start(),
                match engine {
                    Engine::Postgres => "CARILLON_TEST_POSTGRES_URL",
                    _ => "CARILLON_TEST_MYSQL_URL",
                },
            );
        }
        let base = admin_url
            .rsplit_once('/')
            .map_or(admin_url.as_str(), |(b, _)| b);
        let url = format!("{base}/{name}");
        Some(TestDb {
            engine,
            url,
            name,
            admin_url,
            _dir: None,
            behind: None,
        })
    }

    /// A new empty PostgreSQL database whose stores connect through a pgbouncer of the
    /// test's own, in transaction mode, with 4 server connections.
    pub async fn create_behind_pgbouncer() -> Option<TestDb> {
        let mut db = Self::create(Engine::Postgres).await?;
        let port = db
            .admin_url
            .rsplit_once('/')
            .and_then(|(base, _)| base.rsplit_once(':'))
            .and_then(|(_, port)| port.parse().ok())
            .expect("a port in the PostgreSQL URL");
        db.behind = Some(super::pgbouncer::Pgbouncer::start(port, 4).await);
        Some(db)
    }

    /// A store on this database (not migrated).
    pub async fn store(&self) -> Arc<dyn Store> {
        let url = match &self.behind {
            Some(bouncer) => bouncer.url_through(&self.url),
            None => self.url.clone(),
        };
        let url = DatabaseUrl::parse(&url).expect("test url");
        let options = PoolOptions {
            max_connections: 10,
            acquire_timeout: Duration::from_secs(10),
            statement_timeout: Duration::from_secs(10),
            transaction_pooler: self.behind.is_some(),
        };
        store::connect(&url, &options).await.expect("connect")
    }

    /// The handle of attempt `attempt_id`, as the nodes on this database give it (for a test
    /// that plays a node delivering an attempt).
    pub async fn attempt_handle(&self, attempt_id: i64) -> String {
        use carillon_server::dispatch::handles::{AttemptHandles, KEY_NAME};
        let key = self
            .store()
            .await
            .node_key(KEY_NAME, &AttemptHandles::random_key_hex().expect("random"))
            .await
            .expect("the nodes' key");
        AttemptHandles::new(&key).expect("a key").of(attempt_id)
    }

    /// A store on this database with the migrations applied.
    pub async fn migrated_store(&self) -> Arc<dyn Store> {
        let store = self.store().await;
        store.migrate().await.expect("migrate");
        store
    }

    /// A migrated store of 4 partitions whose partition 0 is owned by node `n1` at epoch 1
    /// (elected leader to assign it), for tests of claims and runs.
    pub async fn store_owning_partition_0(&self) -> Arc<dyn Store> {
        use carillon_server::store::{LeaderFence, NodeRegistration, PartitionChange};
        let store = self.migrated_store().await;
        store.cluster_init(4).await.expect("cluster init");
        store
            .node_register(&NodeRegistration {
                node_id: "n1".into(),
                incarnation: "i".into(),
                address: "http://n1".into(),
                version: "t".into(),
            })
            .await
            .expect("register");
        let term = store
            .leader_try_acquire("n1", 60_000)
            .await
            .expect("leader")
            .term;
        let fence = LeaderFence {
            node_id: "n1".into(),
            term,
        };
        let assign = PartitionChange::Assign {
            partition_id: 0,
            expected_epoch: 0,
            owner: "n1".into(),
        };
        store
            .partitions_apply(&fence, &[assign])
            .await
            .expect("assign partition 0");
        store
    }

    /// Runs `statement` on the server's admin database (as its admin), not on this one.
    pub async fn admin_execute(&self, statement: &str) {
        admin_execute(self.engine, &self.admin_url, statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }

    /// Drops this database (it is dropped again, if it exists, when this value is).
    pub async fn drop_database(&self) {
        let force = if self.engine == Engine::Postgres {
            " WITH (FORCE)"
        } else {
            ""
        };
        self.admin_execute(&format!("DROP DATABASE {}{force}", self.name))
            .await;
    }

    /// Applies the migrations up to `version` only: the schema a release of that version left.
    pub async fn migrate_to(&self, version: i64) {
        match self.engine {
            Engine::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url)
                    .await
                    .expect("connect");
                sqlx::migrate!("../migrations/postgres")
                    .run_to(version, &mut c)
                    .await
                    .expect("migrate");
            }
            Engine::Mysql => {
                let mut c = sqlx::MySqlConnection::connect(&self.url)
                    .await
                    .expect("connect");
                sqlx::migrate!("../migrations/mysql")
                    .run_to(version, &mut c)
                    .await
                    .expect("migrate");
            }
            Engine::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&format!("{}?mode=rwc", self.url))
                    .await
                    .expect("connect");
                sqlx::migrate!("../migrations/sqlite")
                    .run_to(version, &mut c)
                    .await
                    .expect("migrate");
            }
        }
    }

    /// Runs `statement` in a transaction left open until [`OpenTransaction::commit`]: what
    /// the store's own transactions meet meanwhile (its locks; on SQLite, the write lock).
    pub async fn open_transaction(&self, statement: &str) -> OpenTransaction {
        let statement = AssertSqlSafe(statement.to_owned());
        match self.engine {
            Engine::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url)
                    .await
                    .expect("connect");
                c.execute("BEGIN").await.expect("begin");
                c.execute(statement).await.expect("statement");
                OpenTransaction::Postgres(c)
            }
            Engine::Mysql => {
                let mut c = sqlx::MySqlConnection::connect(&self.url)
                    .await
                    .expect("connect");
                c.execute("BEGIN").await.expect("begin");
                c.execute(statement).await.expect("statement");
                OpenTransaction::Mysql(c)
            }
            Engine::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.url)
                    .await
                    .expect("connect");
                c.execute("BEGIN IMMEDIATE").await.expect("begin");
                c.execute(statement).await.expect("statement");
                OpenTransaction::Sqlite(c)
            }
        }
    }

    /// Runs a multi-statement SQL script.
    pub async fn execute_script(&self, script: &str) {
        let script = AssertSqlSafe(script.to_owned());
        match self.engine {
            Engine::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url)
                    .await
                    .expect("connect");
                c.execute(sqlx::raw_sql(script)).await.expect("script");
            }
            Engine::Mysql => {
                let mut c = sqlx::MySqlConnection::connect(&self.url)
                    .await
                    .expect("connect");
                c.execute(sqlx::raw_sql(script)).await.expect("script");
            }
            Engine::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&format!("{}?mode=rwc", self.url))
                    .await
                    .expect("connect");
                c.execute(sqlx::raw_sql(script)).await.expect("script");
            }
        }
    }

    /// Every table, column (type, nullability, default) and index, plus the seeded leader row,
    /// as sorted lines: two schemas are equal when their fingerprints are.
    pub async fn schema_fingerprint(&self) -> Vec<String> {
        let (columns, indexes) = match self.engine {
            Engine::Postgres => (
                "SELECT concat_ws(' ', table_name::text, column_name::text, data_type::text, \
                 is_nullable::text, coalesce(column_default::text, '-'), \
                 coalesce(character_maximum_length::text, '-'), is_identity::text) \
                 FROM information_schema.columns \
                 WHERE table_schema = 'public' AND table_name <> '_sqlx_migrations'",
                "SELECT concat_ws(' ', tablename::text, indexname::text, indexdef::text) \
                 FROM pg_indexes WHERE schemaname = 'public' AND tablename <> '_sqlx_migrations'",
            ),
            Engine::Mysql => (
                "SELECT CAST(CONCAT_WS(' ', TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, \
                 COALESCE(COLUMN_DEFAULT, '-'), COLUMN_KEY, EXTRA) AS CHAR) \
                 FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> '_sqlx_migrations'",
                "SELECT CAST(CONCAT_WS(' ', TABLE_NAME, INDEX_NAME, NON_UNIQUE, SEQ_IN_INDEX, \
                 COLUMN_NAME) AS CHAR) FROM information_schema.STATISTICS \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> '_sqlx_migrations'",
            ),
            Engine::Sqlite => (
                "SELECT m.name || ' ' || p.name || ' ' || p.type || ' ' || p.\"notnull\" || ' ' || \
                 ifnull(p.dflt_value, '-') || ' ' || p.pk FROM sqlite_master m \
                 JOIN pragma_table_info(m.name) p WHERE m.type = 'table' \
                 AND m.name NOT LIKE 'sqlite_%' AND m.name <> '_sqlx_migrations'",
                "SELECT m.name || ' ' || il.name || ' ' || il.\"unique\" || ' ' || ii.seqno || ' ' \
                 || ii.name FROM sqlite_master m JOIN pragma_index_list(m.name) il \
                 JOIN pragma_index_info(il.name) ii WHERE m.type = 'table' \
                 AND m.name NOT LIKE 'sqlite_%' AND m.name <> '_sqlx_migrations'",
            ),
        };
        let mut lines = Vec::new();
        for (label, query) in [("column", columns), ("index", indexes)] {
            for line in self.fetch_strings(query).await {
                lines.push(format!("{label} {line}"));
            }
        }
        let seeded = match self.engine {
            Engine::Mysql => {
                "SELECT CAST(CONCAT('leader row ', id, ' term ', term) AS CHAR) FROM leader"
            }
            Engine::Postgres | Engine::Sqlite => {
                "SELECT 'leader row ' || id || ' term ' || term FROM leader"
            }
        };
        lines.extend(self.fetch_strings(seeded).await);
        lines.sort();
        lines
    }

    /// Waits (up to 90 s) until every job has fired an instant past `until_ms`.
    pub async fn wait_fired_past(&self, until_ms: i64) {
        super::wait_for(
            std::time::Duration::from_secs(90),
            "every job to fire past the window",
            || async {
                let behind = self
                    .fetch_pairs(
                        "SELECT COUNT(*), COUNT(*) FROM jobs WHERE last_fired_at_ms IS NULL OR last_fired_at_ms < ?",
                        &[until_ms],
                    )
                    .await[0]
                    .0;
                (behind == 0).then_some(())
            },
        )
        .await;
    }

    /// (job id, runs) of the runs scheduled from `from_ms` to `to_ms`, both included.
    pub async fn runs_per_job(&self, from_ms: i64, to_ms: i64) -> Vec<(i64, i64)> {
        self.fetch_pairs(
            "SELECT job_id, COUNT(*) FROM runs WHERE scheduled_at_ms BETWEEN ? AND ? GROUP BY job_id",
            &[from_ms, to_ms],
        )
        .await
    }

    /// Rows of two integers from `query` (written with `?` placeholders) bound to `binds`.
    pub async fn fetch_pairs(&self, query: &str, binds: &[i64]) -> Vec<(i64, i64)> {
        fetch_rows(self.engine, &self.url, query, binds).await
    }

    async fn fetch_strings(&self, query: &'static str) -> Vec<String> {
        match self.engine {
            Engine::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url)
                    .await
                    .expect("connect");
                sqlx::query_scalar(query)
                    .fetch_all(&mut c)
                    .await
                    .expect(query)
            }
            Engine::Mysql => {
                let mut c = sqlx::MySqlConnection::connect(&self.url)
                    .await
                    .expect("connect");
                sqlx::query_scalar(query)
                    .fetch_all(&mut c)
                    .await
                    .expect(query)
            }
            Engine::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.url)
                    .await
                    .expect("connect");
                sqlx::query_scalar(query)
                    .fetch_all(&mut c)
                    .await
                    .expect(query)
            }
        }
    }
}

/// A row type (a tuple of columns, or a `FromRow` struct) readable on every backend.
pub trait AnyRow:
    Send
    + Unpin
    + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
    + for<'r> sqlx::FromRow<'r, sqlx::mysql::MySqlRow>
    + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
{
}

impl<T> AnyRow for T where
    T: Send
        + Unpin
        + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
        + for<'r> sqlx::FromRow<'r, sqlx::mysql::MySqlRow>
        + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
{
}

/// A transaction of the test's own, open on its connection.
pub enum OpenTransaction {
    Postgres(sqlx::PgConnection),
    Mysql(sqlx::MySqlConnection),
    Sqlite(sqlx::SqliteConnection),
}

impl OpenTransaction {
    pub async fn commit(self) {
        match self {
            Self::Postgres(mut c) => c.execute("COMMIT").await.map(drop),
            Self::Mysql(mut c) => c.execute("COMMIT").await.map(drop),
            Self::Sqlite(mut c) => c.execute("COMMIT").await.map(drop),
        }
        .expect("commit");
    }
}

/// Rows of `T` from `query`, written with `?` placeholders and bound to `binds`, on the
/// database at `url`.
pub async fn fetch_rows<T: AnyRow>(
    engine: Engine,
    url: &str,
    query: &str,
    binds: &[i64],
) -> Vec<T> {
    try_fetch_rows(engine, url, query, binds)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `fetch_rows`, or what the database answered instead.
pub async fn try_fetch_rows<T: AnyRow>(
    engine: Engine,
    url: &str,
    query: &str,
    binds: &[i64],
) -> Result<Vec<T>, String> {
    let query = match engine {
        Engine::Postgres => {
            let mut out = String::new();
            let mut n = 0;
            for ch in query.chars() {
                if ch == '?' {
                    n += 1;
                    out.push_str(&format!("${n}"));
                } else {
                    out.push(ch);
                }
            }
            out
        }
        _ => query.to_owned(),
    };
    let what = query.clone();
    let sql = AssertSqlSafe(query);
    macro_rules! run {
        ($conn:ty) => {{
            let mut c = <$conn>::connect(url)
                .await
                .map_err(|e| format!("connecting to {url}: {e}"))?;
            let mut q = sqlx::query_as::<_, T>(sql);
            for b in binds {
                q = q.bind(*b);
            }
            q.fetch_all(&mut c)
                .await
                .map_err(|e| format!("{what}: {e}"))
        }};
    }
    match engine {
        Engine::Postgres => run!(sqlx::PgConnection),
        Engine::Mysql => run!(sqlx::MySqlConnection),
        Engine::Sqlite => run!(sqlx::SqliteConnection),
    }
}

async fn admin_execute(engine: Engine, url: &str, statement: &str) -> Result<(), sqlx::Error> {
    let statement = AssertSqlSafe(statement.to_owned());
    let attempt = async {
        match engine {
            Engine::Postgres => {
                let mut c = sqlx::PgConnection::connect(url).await?;
                c.execute(statement).await?;
                c.close().await
            }
            Engine::Mysql => {
                let mut c = sqlx::MySqlConnection::connect(url).await?;
                c.execute(statement).await?;
                c.close().await
            }
            Engine::Sqlite => Ok(()),
        }
    };
    match tokio::time::timeout(Duration::from_secs(5), attempt).await {
        Ok(result) => result,
        Err(_) => Err(sqlx::Error::PoolTimedOut),
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if self.engine == Engine::Sqlite {
            return;
        }
        let (engine, url, name) = (self.engine, self.admin_url.clone(), self.name.clone());
        // Drop runs outside any runtime guarantee: use a thread with its own small runtime.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let force = if engine == Engine::Postgres {
                " WITH (FORCE)"
            } else {
                ""
            };
            let statement = format!("DROP DATABASE IF EXISTS {name}{force}");
            runtime.block_on(admin_execute(engine, &url, &statement))
        })
        .join();
        if let Ok(Err(err)) = dropped {
            eprintln!("note: could not drop test database {}: {err}", self.name);
        }
    }
}
