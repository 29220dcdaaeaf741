//! The database a node's URL names, created at first start when it does not exist and the
//! role may create it (said in the log); when it may not, the error says how to create it.
//! Two nodes creating it at once is no error: one creates it, the other finds it there.

use sqlx::mysql::{MySqlConnectOptions, MySqlDatabaseError};
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};
use tracing::info;

use crate::store::Error;

/// PostgreSQL's `invalid_catalog_name` (the database does not exist) and
/// `duplicate_database`.
const PG_NO_DATABASE: &str = "3D000";
const PG_DUPLICATE_DATABASE: &str = "42P04";
const PG_UNIQUE_VIOLATION: &str = "23505";
/// MySQL's `ER_BAD_DB_ERROR` and `ER_DB_CREATE_EXISTS`.
const MYSQL_NO_DATABASE: u16 = 1049;
const MYSQL_DATABASE_EXISTS: u16 = 1007;

/// Whether `err` is PostgreSQL's error of SQLSTATE `code`.
fn is_code(err: &sqlx::Error, code: &str) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some(code))
}

/// Whether `err` is MySQL's error number `number` (its SQLSTATE is a class, shared by many).
fn is_number(err: &sqlx::Error, number: u16) -> bool {
    matches!(err, sqlx::Error::Database(db)
        if db.try_downcast_ref::<MySqlDatabaseError>().is_some_and(|e| e.number() == number))
}

/// Connects once to the database `options` names, creating it first if it does not exist.
pub(super) async fn postgres(options: &PgConnectOptions) -> Result<(), Error> {
    let err = match options.connect().await {
        Ok(conn) => {
            let _ = conn.close().await;
            return Ok(());
        }
        Err(err) if is_code(&err, PG_NO_DATABASE) => err,
        Err(err) => return Err(err.into()),
    };
    let name = options.get_database().unwrap_or_default().to_owned();
    let user = options.get_username().to_owned();
    let quoted = format!("\"{}\"", name.replace('"', "\"\""));
    let refused = |reason: String| Error::NoDatabase {
        name: name.clone(),
        user: user.clone(),
        reason,
        how: format!("CREATE DATABASE {quoted} OWNER \"{user}\"; or createdb {name}"),
    };
    if name.is_empty() {
        return Err(err.into());
    }
    // Any database the role may reach serves to create another: `postgres` is there on
    // every server, `template1` where it was dropped.
    let mut last = err.to_string();
    for maintenance in ["postgres", "template1"] {
        let mut conn = match options.clone().database(maintenance).connect().await {
            Ok(conn) => conn,
            Err(e) => {
                last = e.to_string();
                continue;
            }
        };
        // The node's statement timeout (a connection setting) is for its own statements;
        // creating a database on a slow disk may take longer.
        let created = match sqlx::query("SET statement_timeout = 0")
            .execute(&mut conn)
            .await
        {
            Ok(_) => {
                sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {quoted}")))
                    .execute(&mut conn)
                    .await
            }
            Err(e) => Err(e),
        };
        let _ = conn.close().await;
        return match created {
            Ok(_) => {
                info!(database = %name, "created the database, which did not exist");
                Ok(())
            }
            // Another node created it meanwhile (`pg_database`'s unique index may say so
            // before the duplicate check does).
            Err(e) if is_code(&e, PG_DUPLICATE_DATABASE) || is_code(&e, PG_UNIQUE_VIOLATION) => {
                Ok(())
            }
            Err(e) => Err(refused(e.to_string())),
        };
    }
    Err(refused(last))
}

/// Connects once to the database `options` names, creating it first if it does not exist.
pub(super) async fn mysql(options: &MySqlConnectOptions) -> Result<(), Error> {
    let err = match options.connect().await {
        Ok(conn) => {
            let _ = conn.close().await;
            return Ok(());
        }
        Err(err) if is_number(&err, MYSQL_NO_DATABASE) => err,
        Err(err) => return Err(err.into()),
    };
    let name = options.get_database().unwrap_or_default().to_owned();
    let user = options.get_username().to_owned();
    if name.is_empty() {
        return Err(err.into());
    }
    let quoted = format!("`{}`", name.replace('`', "``"));
    let refused = |reason: String| Error::NoDatabase {
        name: name.clone(),
        user: user.clone(),
        reason,
        how: format!(
            "CREATE DATABASE {quoted} CHARACTER SET utf8mb4; GRANT ALL ON {quoted}.* TO '{user}'"
        ),
    };
    // Every account may use `information_schema`: a session there may create the database.
    let mut conn = options
        .clone()
        .database("information_schema")
        .connect()
        .await
        .map_err(|e| refused(e.to_string()))?;
    let created = sqlx::query(AssertSqlSafe(format!(
        "CREATE DATABASE {quoted} CHARACTER SET utf8mb4"
    )))
    .execute(&mut conn)
    .await;
    let _ = conn.close().await;
    match created {
        Ok(_) => {
            info!(database = %name, "created the database, which did not exist");
            Ok(())
        }
        Err(e) if is_number(&e, MYSQL_DATABASE_EXISTS) => Ok(()),
        Err(e) => Err(refused(e.to_string())),
    }
}
