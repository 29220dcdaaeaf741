//! Run history in the benchmark: the bytes each fire leaves in the database, and a backlog of
//! old finished runs for the nodes' retention to delete while they fire.

use anyhow::bail;
use sqlx::Connection;

use crate::cluster::{Cluster, Db, now_ms};

/// The settings that make every node delete history older than `keep` (`forever`: none),
/// looking every second.
pub(crate) fn retention_env(keep: &str) -> Vec<(String, String)> {
    vec![
        ("CARILLON_RETENTION_RUNS".to_owned(), keep.to_owned()),
        (
            "CARILLON_RETENTION_INTERVAL_MS".to_owned(),
            "1000".to_owned(),
        ),
    ]
}

/// Database bytes (runs and attempts with their indexes) per run kept. PostgreSQL counts the
/// tables' own files; MySQL reads InnoDB's estimates after `ANALYZE TABLE`; SQLite has only
/// the whole file (jobs included), so its figure is a little high.
pub(crate) async fn bytes_per_fire(cluster: &Cluster) -> anyhow::Result<i64> {
    let runs = cluster.count("SELECT COUNT(*) FROM runs").await?.max(1);
    let bytes =
        match cluster.db {
            Db::Postgres => {
                cluster
                    .count(
                        "SELECT CAST(pg_total_relation_size('runs') \
                     + pg_total_relation_size('attempts') AS BIGINT)",
                    )
                    .await?
            }
            Db::Mysql => {
                let mut c = sqlx::MySqlConnection::connect(&cluster.database_url).await?;
                sqlx::raw_sql("ANALYZE TABLE runs, attempts")
                    .execute(&mut c)
                    .await?;
                cluster
                    .count(
                        "SELECT CAST(SUM(data_length + index_length) AS SIGNED) \
                     FROM information_schema.tables WHERE table_schema = DATABASE() \
                     AND table_name IN ('runs', 'attempts')",
                    )
                    .await?
            }
            Db::Sqlite => cluster
                .count("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()")
                .await?,
        };
    Ok(bytes / runs)
}

/// Inserts `runs` runs that finished two days ago, one attempt each, spread over the
/// partitions (PostgreSQL only: `generate_series` writes millions in a statement).
pub(crate) async fn insert_backlog(
    cluster: &Cluster,
    runs: u64,
    partitions: i64,
) -> anyhow::Result<()> {
    if cluster.db != Db::Postgres {
        bail!("--history-backlog is built for PostgreSQL (generate_series)");
    }
    let old = now_ms() - 2 * 86_400_000 - i64::try_from(runs).unwrap_or(0);
    let mut c = sqlx::PgConnection::connect(&cluster.database_url).await?;
    // In slices of a million, so no single statement holds a huge transaction.
    let slice: u64 = 1_000_000;
    let mut from = 0;
    while from < runs {
        let to = (from + slice).min(runs);
        let insert = format!(
            "INSERT INTO runs (job_id, scheduled_at_ms, partition_id, epoch, node_id, \
             trigger_kind, state, priority, created_at_ms, started_at_ms, finished_at_ms) \
             SELECT -1 - (i % 1000), {old} + i, i % {partitions}, 1, 'backlog', 'schedule', \
             'succeeded', 5, {old} + i, {old} + i, {old} + i + 5 \
             FROM generate_series({from}, {to} - 1) AS i;
             INSERT INTO attempts (run_id, job_id, partition_id, shard_index, shard_total, \
             attempt_no, priority, args_json, state, created_at_ms, not_before_ms, \
             executor_id, dispatched_at_ms, finished_at_ms) \
             SELECT run_id, job_id, partition_id, 0, 1, 1, 5, 'null', 'succeeded', \
             created_at_ms, created_at_ms, 'backlog', created_at_ms, finished_at_ms \
             FROM runs WHERE node_id = 'backlog' AND scheduled_at_ms >= {old} + {from} \
             AND scheduled_at_ms < {old} + {to} AND job_id < 0"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(insert))
            .execute(&mut c)
            .await?;
        from = to;
    }
    // One statement each: several in one simple query run as one transaction, where VACUUM
    // is refused.
    for table in ["runs", "attempts"] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE {table}")))
            .execute(&mut c)
            .await?;
    }
    Ok(())
}

/// Backlog runs still there.
pub(crate) async fn backlog_left(cluster: &Cluster) -> anyhow::Result<i64> {
    cluster
        .count("SELECT COUNT(*) FROM runs WHERE node_id = 'backlog'")
        .await
}

/// The whole database's size in bytes (PostgreSQL and MySQL: this database; SQLite: the
/// file).
pub(crate) async fn database_bytes(cluster: &Cluster) -> anyhow::Result<i64> {
    let sql = match cluster.db {
        Db::Postgres => "SELECT CAST(pg_database_size(current_database()) AS BIGINT)",
        Db::Mysql => {
            "SELECT CAST(SUM(data_length + index_length) AS SIGNED) \
             FROM information_schema.tables WHERE table_schema = DATABASE()"
        }
        Db::Sqlite => "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
    };
    cluster.count(sql).await
}

/// Says, every `every`, how large the database is and how many runs it keeps, until `until_ms`
/// (standard error: a time series beside the report).
pub(crate) async fn sample_size(cluster: &Cluster, every: std::time::Duration, until_ms: i64) {
    let started = now_ms();
    while now_ms() < until_ms {
        tokio::time::sleep(every).await;
        let bytes = database_bytes(cluster).await.unwrap_or(-1);
        let runs = cluster
            .count("SELECT COUNT(*) FROM runs")
            .await
            .unwrap_or(-1);
        eprintln!(
            "size t={:>5}s db_bytes={bytes} runs={runs}",
            (now_ms() - started) / 1_000
        );
    }
}
