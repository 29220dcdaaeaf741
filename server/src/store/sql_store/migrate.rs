//! Applying the embedded migrations when several nodes start at once (a Deployment of three
//! replicas on a fresh database).
//!
//! sqlx's own migration lock cannot be relied on: on MySQL it asks `GET_LOCK(name, -1)`, which
//! MariaDB answers with NULL at once, and ignores the answer, so nodes starting together ran
//! the same migration side by side and left it half applied. Every backend therefore takes a
//! lock of ours, checks that it was granted, and only then runs the migrator (with sqlx's
//! locking off) on the same connection:
//! - PostgreSQL: a transaction advisory lock (`pg_try_advisory_xact_lock`) in the one
//!   transaction that applies every migration, which works behind a pooler in transaction mode;
//! - MySQL/MariaDB: a named lock (`GET_LOCK(name, 0)`, granted only when it answers 1);
//! - SQLite: an exclusive lock on a file beside the database (nodes on one machine).
//!
//! The lock is tried every 200 ms, for at most `LOCK_WAIT`; it dies with its connection (or
//! process), so a node killed while migrating never leaves it held.
//!
//! MySQL commits each DDL statement on its own, so a node killed during a migration leaves it
//! partly applied (sqlx marks it `success = FALSE` first). The node that next takes the lock
//! knows the one that started it is gone, and resumes it statement by statement: a statement
//! whose work is already there (a table, column or index that exists, or a dropped one that
//! does not) counts as done. What cannot be resumed so fails with what happened and what to do.

use std::path::PathBuf;
use std::time::Duration;

use sqlx::migrate::{Migration, Migrator};
use sqlx::mysql::{MySqlConnection, MySqlDatabaseError, MySqlPool};
use sqlx::postgres::{PgConnection, Postgres};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
use sqlx::{AssertSqlSafe, Connection, Executor};
use tokio::time::Instant;

use super::super::Error;
use super::connections::SqlDb;

/// How long a node waits for another node's migrations before it gives up.
const LOCK_WAIT: Duration = Duration::from_secs(600);
/// How often the lock is tried.
const LOCK_RETRY: Duration = Duration::from_millis(200);
/// How often a waiting node says so.
const WAIT_LOG_EVERY: Duration = Duration::from_secs(10);

/// The advisory lock key (PostgreSQL) and lock name (MySQL) of Carillon's migrations.
const PG_LOCK_KEY: i64 = 0x4361_7269_6c6c_6f6e; // "Carillon"
const MYSQL_LOCK_NAME: &str = "carillon.migrations";

/// The wait for a lock held by another node: tried again every `LOCK_RETRY`, said every
/// `WAIT_LOG_EVERY`, given up after `LOCK_WAIT`.
struct LockWait {
    backend: &'static str,
    started: Instant,
    said: Instant,
}

impl LockWait {
    fn new(backend: &'static str) -> Self {
        let now = Instant::now();
        Self {
            backend,
            started: now,
            said: now,
        }
    }

    /// After a try that did not get the lock: sleeps before the next, or fails past
    /// `LOCK_WAIT`.
    async fn refused(&mut self) -> Result<(), Error> {
        if self.started.elapsed() >= LOCK_WAIT {
            return Err(Error::MigrationLock {
                reason: format!(
                    "another node has held the {} migration lock for {} s; if no node is \
                     migrating, look for the session that holds it",
                    self.backend,
                    LOCK_WAIT.as_secs()
                ),
            });
        }
        if self.said.elapsed() >= WAIT_LOG_EVERY {
            tracing::info!(
                waited_s = self.started.elapsed().as_secs(),
                "another node is applying migrations; waiting for it"
            );
            self.said = Instant::now();
        }
        tokio::time::sleep(LOCK_RETRY).await;
        Ok(())
    }
}

pub(super) async fn postgres(db: &SqlDb<Postgres>, migrator: &Migrator) -> Result<(), Error> {
    // A connection of its own, closed at the end. Everything happens in one transaction, so
    // that nothing outlives it on the server connection (behind a pooler in transaction mode
    // the server connection goes to other clients next): the lock is a transaction lock,
    // released at its end on any path; the settings are `SET LOCAL`, with no statement
    // timeout (a migration that carries data may take long); each migration is a savepoint
    // of it (PostgreSQL's DDL is transactional); and sqlx's named statements are deallocated
    // before it ends.
    let mut conn = PgConnection::connect_with(&db.pool().connect_options()).await?;
    let mut wait = LockWait::new("PostgreSQL");
    let applied = loop {
        let mut tx = conn.begin().await?;
        tx.execute(
            "DEALLOCATE ALL; SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0; \
             SET LOCAL idle_in_transaction_session_timeout = 0",
        )
        .await?;
        let (granted,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_xact_lock($1)")
            .bind(PG_LOCK_KEY)
            .persistent(false)
            .fetch_one(&mut *tx)
            .await?;
        if !granted {
            tx.rollback().await?;
            wait.refused().await?;
            continue;
        }
        // `run_direct`: `run` on a connection trips the "Acquire is not general enough" error.
        let applied = migrator.run_direct(None, &mut *tx, false).await;
        break match applied {
            Ok(()) => {
                tx.execute("DEALLOCATE ALL").await?;
                tx.commit().await.map_err(Error::from)
            }
            Err(err) => Err(err.into()),
        };
    };
    let _ = conn.close().await;
    applied
}

pub(super) async fn mysql(
    pool: &MySqlPool,
    migrator: &Migrator,
    galera: bool,
) -> Result<(), Error> {
    let mut conn = pool.acquire().await?.detach();
    if galera {
        return galera_migrate(conn, migrator).await;
    }
    let mut wait = LockWait::new("MySQL");
    loop {
        // 1: granted; 0: held by another session; NULL: an error.
        let (granted,): (Option<i64>,) = sqlx::query_as("SELECT GET_LOCK(?, 0)")
            .bind(MYSQL_LOCK_NAME)
            .fetch_one(&mut conn)
            .await?;
        if granted == Some(1) {
            break;
        }
        wait.refused().await?;
    }
    let applied = async {
        mysql_resume_interrupted(&mut conn, migrator).await?;
        migrator.run_direct(None, &mut conn, false).await?;
        Ok(())
    }
    .await;
    let _ = conn.close().await;
    applied
}

/// How long the Galera migration lock is held before another node may take it: a node killed
/// while migrating holds it that long.
const GALERA_LOCK_MS: i64 = 120_000;

/// Galera does not replicate `GET_LOCK`: each member would grant it. The lock is a row of an
/// InnoDB table instead, which certification makes one node's: of two nodes taking it through
/// different members at once, one commit fails and that node waits.
async fn galera_migrate(mut conn: MySqlConnection, migrator: &Migrator) -> Result<(), Error> {
    conn.execute(
        "CREATE TABLE IF NOT EXISTS carillon_migration_lock (id INT NOT NULL PRIMARY KEY, \
         holder VARCHAR(64) NOT NULL, expires_at_ms BIGINT NOT NULL) ENGINE = InnoDB",
    )
    .await?;
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|e| Error::MigrationLock {
        reason: format!("naming this node's lock: {e}"),
    })?;
    let holder: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let now = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";
    let take = format!(
        "INSERT INTO carillon_migration_lock (id, holder, expires_at_ms) VALUES (1, ?, {now} + ?) \
         ON DUPLICATE KEY UPDATE \
         holder = IF(expires_at_ms < {now}, VALUES(holder), holder), \
         expires_at_ms = IF(holder = VALUES(holder), VALUES(expires_at_ms), expires_at_ms)"
    );
    let mut wait = LockWait::new("Galera");
    loop {
        let took = sqlx::query(AssertSqlSafe(take.clone()))
            .bind(&holder)
            .bind(GALERA_LOCK_MS)
            .execute(&mut conn)
            .await
            .map_err(Error::from);
        match took {
            // Another node's take certified first: read who holds it.
            Err(err) if !err.is_transient() => return Err(err),
            _ => {}
        }
        let held: Option<(String,)> =
            sqlx::query_as("SELECT holder FROM carillon_migration_lock WHERE id = 1")
                .fetch_optional(&mut conn)
                .await?;
        if held.is_some_and(|(h,)| h == holder) {
            break;
        }
        wait.refused().await?;
    }
    let applied = async {
        mysql_resume_interrupted(&mut conn, migrator).await?;
        migrator.run_direct(None, &mut conn, false).await?;
        Ok::<(), Error>(())
    }
    .await;
    let released = sqlx::query("DELETE FROM carillon_migration_lock WHERE id = 1 AND holder = ?")
        .bind(&holder)
        .execute(&mut conn)
        .await;
    let _ = conn.close().await;
    applied?;
    released?;
    Ok(())
}

pub(super) async fn sqlite(
    pool: &SqlitePool,
    options: &SqliteConnectOptions,
    migrator: &Migrator,
) -> Result<(), Error> {
    let filename = options.get_filename();
    let in_memory = filename.as_os_str().is_empty() || filename.to_string_lossy() == ":memory:";
    // An in-memory database belongs to one process: nothing to serialise.
    let _lock = if in_memory {
        None
    } else {
        let mut path = filename.as_os_str().to_owned();
        path.push(".migrate-lock");
        Some(sqlite_file_lock(PathBuf::from(path)).await?)
    };
    migrator.run(pool).await?;
    Ok(())
}

/// An exclusive lock on `path` (created if missing), held until the file is dropped.
async fn sqlite_file_lock(path: PathBuf) -> Result<std::fs::File, Error> {
    let lock_error = |path: &PathBuf, err: std::io::Error| Error::MigrationLock {
        reason: format!("locking {}: {err}", path.display()),
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| lock_error(&path, e))?;
    let mut wait = LockWait::new("SQLite");
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) => wait.refused().await?,
            Err(std::fs::TryLockError::Error(err)) => return Err(lock_error(&path, err)),
        }
    }
    Ok(file)
}

/// MySQL error numbers that say a DDL statement's work is already there.
const ALREADY_DONE: [u16; 7] = [
    1050, // table already exists
    1051, // unknown table (a DROP already done)
    1060, // duplicate column name
    1061, // duplicate key name
    1068, // multiple primary key defined
    1091, // can't drop: column or key does not exist
    1826, // duplicate foreign key constraint name
];

/// Finishes a migration that a node killed mid-way left marked `success = FALSE`. Called with
/// the migration lock held, so the node that started it is gone.
async fn mysql_resume_interrupted(
    conn: &mut MySqlConnection,
    migrator: &Migrator,
) -> Result<(), Error> {
    let (tables,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = '_sqlx_migrations'",
    )
    .fetch_one(&mut *conn)
    .await?;
    if tables == 0 {
        return Ok(());
    }
    let interrupted: Option<(i64, String, Vec<u8>)> = sqlx::query_as(
        "SELECT version, description, checksum FROM _sqlx_migrations \
         WHERE success = FALSE ORDER BY version LIMIT 1",
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some((version, description, checksum)) = interrupted else {
        return Ok(());
    };
    let what = format!("migration {version} ({description})");
    let migration = migrator
        .iter()
        .find(|m| m.version == version && !m.migration_type.is_down_migration())
        .filter(|m| *m.checksum == *checksum)
        .ok_or_else(|| Error::MigrationInterrupted {
            what: what.clone(),
            detail: "this build does not carry that migration with the same text, so it \
                     cannot finish it; start the version of Carillon that began it"
                .to_owned(),
        })?;
    tracing::warn!(
        version,
        "{what} was left partly applied by a node that stopped while applying it \
         (MySQL commits each schema change on its own); resuming it statement by statement"
    );
    for (index, statement) in statements(migration).into_iter().enumerate() {
        match conn.execute(AssertSqlSafe(statement)).await {
            Ok(_) => {}
            Err(sqlx::Error::Database(db))
                if db
                    .try_downcast_ref::<MySqlDatabaseError>()
                    .is_some_and(|e| ALREADY_DONE.contains(&e.number())) =>
            {
                tracing::debug!(version, index, "statement already applied: {db}");
            }
            Err(err) => {
                return Err(Error::MigrationInterrupted {
                    what,
                    detail: format!(
                        "resuming it, statement {} failed: {err}. Compare the schema with \
                         migrations/mysql/ and finish the migration by hand, then run \
                         `UPDATE _sqlx_migrations SET success = TRUE WHERE version = {version}`",
                        index + 1
                    ),
                });
            }
        }
    }
    sqlx::query("UPDATE _sqlx_migrations SET success = TRUE WHERE version = ?")
        .bind(version)
        .execute(&mut *conn)
        .await?;
    tracing::info!(version, "{what} resumed and finished");
    Ok(())
}

/// The statements of a migration: each ends with a line ending in `;`; comment lines are
/// dropped. Our migration files keep to that shape (no `;` inside a line, no procedures).
fn statements(migration: &Migration) -> Vec<String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    for line in migration.sql.as_ref().lines() {
        if line.trim_start().starts_with("--") {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if line.trim_end().ends_with(';') {
            let statement = current.trim().trim_end_matches(';').trim().to_owned();
            if !statement.is_empty() {
                statements.push(statement);
            }
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        statements.push(current.trim().to_owned());
    }
    statements
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mysql_migration_splits_into_its_statements() {
        let migrator = sqlx::migrate!("../migrations/mysql");
        for migration in migrator.iter() {
            let semicolons = migration
                .sql
                .as_ref()
                .lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .filter(|l| l.contains(';'))
                .inspect(|l| {
                    assert!(
                        l.trim_end().ends_with(';') && l.matches(';').count() == 1,
                        "migration {}: a `;` inside a line: {l}",
                        migration.version
                    );
                })
                .count();
            assert_eq!(
                statements(migration).len(),
                semicolons,
                "migration {}",
                migration.version
            );
        }
    }
}
