//! MariaDB Galera Cluster: what Carillon needs of it, checked when a store connects.
//!
//! Galera is multi-primary and certifies each transaction's writes at commit: `SELECT … FOR
//! UPDATE` locks only on the member that runs it, and of two transactions on different
//! members that wrote the same row, the later one fails at commit with a deadlock error
//! (1213), which every write transaction of the store already retries whole
//! (`retry_transient`). Carillon's promises then rest on its writes, not its locks: a job's
//! advance is conditional on its last fired instant, a run is unique per job and instant, a
//! partition changes only from the epoch it was read at, the leader row only from the term.
//! What must hold of the cluster for that:
//! - `binlog_format = ROW`: Galera replicates row events only;
//! - `innodb_autoinc_lock_mode = 2`: Galera's own requirement for AUTO_INCREMENT inserts;
//! - `wsrep_osu_method = TOI`: migrations' DDL applied on every member in the same order;
//!   RSU would change one member's schema only;
//! - the member is ready (`wsrep_ready = ON`, in the primary component);
//! - every table is InnoDB with a primary key (Galera replicates only InnoDB and needs the key
//!   to apply a row change on the other members), checked after the migrations;
//! - and each session waits for the cluster's earlier commits before it reads
//!   (`wsrep_sync_wait = 1`), so a node reading through one member sees what another node
//!   committed through another, as on one server.

use sqlx::MySqlConnection;
use sqlx::mysql::MySqlPool;

use super::super::Error;

/// Whether the server is a Galera member (`wsrep_on`); MySQL 8 has no such variable.
pub(super) async fn is_member(conn: &mut MySqlConnection) -> Result<bool, Error> {
    let on: Result<(i64,), sqlx::Error> = sqlx::query_as("SELECT CAST(@@wsrep_on AS SIGNED)")
        .fetch_one(&mut *conn)
        .await;
    match on {
        Ok((on,)) => Ok(on == 1),
        // MySQL: error 1193, unknown system variable.
        Err(sqlx::Error::Database(db)) if db.message().contains("Unknown system variable") => {
            Ok(false)
        }
        Err(err) => Err(err.into()),
    }
}

fn unsuitable(reason: String) -> Error {
    Error::UnsuitableDatabase {
        reason: format!("this MariaDB server is a Galera cluster member, and {reason}"),
    }
}

/// The cluster's settings and this member's state; an error names what to change.
pub(super) async fn check_settings(conn: &mut MySqlConnection) -> Result<(), Error> {
    let (binlog_format, autoinc_lock_mode, osu_method): (String, i64, String) = sqlx::query_as(
        "SELECT CAST(@@binlog_format AS CHAR), CAST(@@innodb_autoinc_lock_mode AS SIGNED), \
         CAST(@@wsrep_osu_method AS CHAR)",
    )
    .fetch_one(&mut *conn)
    .await?;
    if !binlog_format.eq_ignore_ascii_case("ROW") {
        return Err(unsuitable(format!(
            "binlog_format is {binlog_format}: Galera replicates row events only; set \
             binlog_format = ROW"
        )));
    }
    if autoinc_lock_mode != 2 {
        return Err(unsuitable(format!(
            "innodb_autoinc_lock_mode is {autoinc_lock_mode}: Galera needs 2 (interleaved); \
             set innodb_autoinc_lock_mode = 2"
        )));
    }
    if !osu_method.eq_ignore_ascii_case("TOI") {
        return Err(unsuitable(format!(
            "wsrep_osu_method is {osu_method}: migrations must change every member's schema \
             in the same order; set wsrep_osu_method = TOI"
        )));
    }
    let status: Vec<(String, String)> = sqlx::query_as(
        "SHOW STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_cluster_status')",
    )
    .fetch_all(&mut *conn)
    .await?;
    let value = |name: &str| {
        status
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map_or("", |(_, v)| v.as_str())
    };
    if !value("wsrep_ready").eq_ignore_ascii_case("ON")
        || !value("wsrep_cluster_status").eq_ignore_ascii_case("Primary")
    {
        return Err(unsuitable(format!(
            "it is not ready to serve (wsrep_ready {}, wsrep_cluster_status {}): it is not in \
             the primary component; point this node at a member that is",
            value("wsrep_ready"),
            value("wsrep_cluster_status")
        )));
    }
    Ok(())
}

/// Every table of the schema is InnoDB with a primary key; run after the migrations.
pub(super) async fn check_tables(pool: &MySqlPool) -> Result<(), Error> {
    let unfit: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT CAST(t.TABLE_NAME AS CHAR), CAST(COALESCE(t.ENGINE, '') AS CHAR), \
         CAST(EXISTS (SELECT 1 FROM information_schema.TABLE_CONSTRAINTS c \
           WHERE c.TABLE_SCHEMA = t.TABLE_SCHEMA AND c.TABLE_NAME = t.TABLE_NAME \
           AND c.CONSTRAINT_TYPE = 'PRIMARY KEY') AS SIGNED) \
         FROM information_schema.TABLES t \
         WHERE t.TABLE_SCHEMA = DATABASE() AND t.TABLE_TYPE = 'BASE TABLE' \
         ORDER BY t.TABLE_NAME",
    )
    .fetch_all(pool)
    .await?;
    let named: Vec<String> = unfit
        .iter()
        .filter(|(_, engine, keyed)| !engine.eq_ignore_ascii_case("InnoDB") || *keyed == 0)
        .map(|(table, engine, keyed)| {
            format!(
                "{table} ({engine}{})",
                if *keyed == 0 { ", no primary key" } else { "" }
            )
        })
        .collect();
    if named.is_empty() {
        Ok(())
    } else {
        Err(unsuitable(format!(
            "Galera replicates only InnoDB tables with a primary key; these are not: {}",
            named.join(", ")
        )))
    }
}
