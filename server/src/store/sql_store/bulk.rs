//! The fire path's multi-row writes: the claim's advance of its jobs and insert of its runs,
//! and first attempts (the claim's and the start pass's).
//!
//! PostgreSQL takes each kind as one statement over arrays (`unnest`): one text whatever the
//! batch, prepared once per connection and planned in a fraction of a millisecond. A 500-row
//! `VALUES` list of runs took 3-10 ms to plan and 13-15 ms to run; the same rows from arrays
//! 0.3 ms and 8.5 ms (`bench/README.md`, "Arrays, and plans for a cached database").
//! MySQL and SQLite have no array binds: they take multi-row `VALUES` lists in chunks.

use super::super::dialect::postgres_now;
use super::*;
use crate::states::RunState;

/// The claim's run insert from arrays. A run already at its instant (a manual one) keeps it;
/// the rows inserted come back, and the `running` ones are the claims that start here.
const POSTGRES_CLAIMED_RUNS: &str = concat!(
    "INSERT INTO runs (job_id, scheduled_at_ms, partition_id, epoch, node_id, trigger_kind, \
     state, priority, created_at_ms, started_at_ms, finished_at_ms, message, namespace_id) \
     SELECT v.job_id, v.at_ms, v.partition_id, v.epoch, $1, v.trigger_kind, v.state, \
     v.priority, ",
    postgres_now!(),
    ", CASE WHEN v.started THEN ",
    postgres_now!(),
    " END, CASE WHEN v.finished THEN ",
    postgres_now!(),
    " END, v.message, v.namespace_id \
     FROM unnest($2::BIGINT[], $3::BIGINT[], $4::BIGINT[], $5::BIGINT[], $6::TEXT[], \
     $7::TEXT[], $8::BIGINT[], $9::BOOLEAN[], $10::BOOLEAN[], $11::TEXT[], $12::BIGINT[]) \
     AS v(job_id, at_ms, partition_id, epoch, trigger_kind, state, priority, started, \
     finished, message, namespace_id) \
     ON CONFLICT (job_id, scheduled_at_ms) DO NOTHING \
     RETURNING run_id, job_id, partition_id, priority, scheduled_at_ms, state"
);

/// The claim's job advance from arrays, joined by the jobs' key.
const POSTGRES_ADVANCE_JOBS: &str = "UPDATE jobs SET last_fired_at_ms = v.at_ms, \
    fired_count = jobs.fired_count + v.fired, \
    state = CASE WHEN v.done = 1 THEN 'done' ELSE jobs.state END \
    FROM unnest($1::BIGINT[], $2::BIGINT[], $3::BIGINT[], $4::BIGINT[]) \
    AS v(job_id, at_ms, fired, done) WHERE jobs.job_id = v.job_id";

/// First attempts from arrays.
const POSTGRES_FIRST_ATTEMPTS: &str = concat!(
    "INSERT INTO attempts (run_id, job_id, partition_id, shard_index, shard_total, \
     attempt_no, priority, args_json, state, created_at_ms, not_before_ms, avoid_executor_id, \
     executor_id) \
     SELECT v.run_id, v.job_id, v.partition_id, v.shard_index, v.shard_total, 1, v.priority, \
     v.args_json, 'pending', ",
    postgres_now!(),
    ", v.not_before_ms, NULL, v.executor_id \
     FROM unnest($1::BIGINT[], $2::BIGINT[], $3::BIGINT[], $4::BIGINT[], $5::BIGINT[], \
     $6::BIGINT[], $7::TEXT[], $8::BIGINT[], $9::TEXT[]) \
     AS v(run_id, job_id, partition_id, shard_index, shard_total, priority, args_json, \
     not_before_ms, executor_id)"
);

impl PostgresStore {
    /// Advances the claim's jobs in one statement.
    pub(super) async fn advance_jobs(
        &self,
        tx: &mut PgTx,
        rows: &[JobAdvance],
    ) -> Result<(), Error> {
        if rows.is_empty() {
            return Ok(());
        }
        let column = |pick: fn(&JobAdvance) -> i64| rows.iter().map(pick).collect::<Vec<i64>>();
        sqlx::query::<Postgres>(POSTGRES_ADVANCE_JOBS)
            .bind(column(|r| r.job_id))
            .bind(column(|r| r.at_ms))
            .bind(column(|r| r.fired))
            .bind(column(|r| i64::from(r.done)))
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Inserts the claimed runs in one statement and returns those inserted `running`.
    pub(super) async fn insert_claimed_runs(
        &self,
        tx: &mut PgTx,
        node_id: &str,
        runs: &[ClaimedRun<'_>],
    ) -> Result<Vec<StartedRun>, Error> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let ints =
            |pick: fn(&RunClaim) -> i64| runs.iter().map(|r| pick(r.claim)).collect::<Vec<_>>();
        let started: Vec<bool> = runs.iter().map(|r| r.starts).collect();
        let states: Vec<&str> = runs.iter().map(|r| r.state().as_str()).collect();
        let finished: Vec<bool> = runs.iter().map(ClaimedRun::finished).collect();
        let rows =
            sqlx::query_as::<Postgres, (i64, i64, i64, i64, i64, String)>(POSTGRES_CLAIMED_RUNS)
                .bind(node_id)
                .bind(ints(|c| c.job_id))
                .bind(ints(|c| c.scheduled_at_ms))
                .bind(ints(|c| c.partition_id))
                .bind(ints(|c| c.epoch))
                .bind(
                    runs.iter()
                        .map(|r| r.claim.trigger_kind.as_str())
                        .collect::<Vec<&str>>(),
                )
                .bind(states)
                .bind(ints(|c| c.priority))
                .bind(started)
                .bind(finished)
                .bind(
                    runs.iter()
                        .map(|r| r.claim.message.as_deref())
                        .collect::<Vec<Option<&str>>>(),
                )
                .bind(ints(|c| c.namespace_id.0))
                .fetch_all(&mut **tx)
                .await?;
        Ok(started_runs(rows))
    }

    /// Inserts first attempts in one statement.
    pub(super) async fn insert_first_attempts(
        &self,
        tx: &mut PgTx,
        attempts: &[FirstAttempt<'_>],
    ) -> Result<(), Error> {
        if attempts.is_empty() {
            return Ok(());
        }
        let ints =
            |pick: fn(&FirstAttempt<'_>) -> i64| attempts.iter().map(pick).collect::<Vec<_>>();
        sqlx::query::<Postgres>(POSTGRES_FIRST_ATTEMPTS)
            .bind(ints(|a| a.run_id))
            .bind(ints(|a| a.job_id))
            .bind(ints(|a| a.partition_id))
            .bind(ints(|a| a.shard_index))
            .bind(ints(|a| a.shard_total))
            .bind(ints(|a| a.priority))
            .bind(attempts.iter().map(|a| a.args_json).collect::<Vec<&str>>())
            .bind(ints(|a| a.not_before_ms))
            .bind(
                attempts
                    .iter()
                    .map(|a| a.executor_id)
                    .collect::<Vec<Option<&str>>>(),
            )
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}

/// The runs a claim's insert returned that were inserted `running`.
fn started_runs(rows: Vec<(i64, i64, i64, i64, i64, String)>) -> Vec<StartedRun> {
    rows.into_iter()
        .filter(|row| row.5 == RunState::Running.as_str())
        .map(
            |(run_id, job_id, partition_id, priority, scheduled_at_ms, _)| StartedRun {
                run_id,
                job_id,
                partition_id,
                priority,
                scheduled_at_ms,
            },
        )
        .collect()
}

/// Rows per multi-row attempt insert: 8 parameters each stays under every backend's limit.
const ATTEMPT_ROWS_PER_INSERT: usize = 1_000;

/// The job advance as one `UPDATE` joined to a list of the values, written in: they are
/// integers of ours, and binds would quadruple the statement's parameters. A `CASE job_id
/// WHEN … THEN …` per column would cost each row a walk of the whole list.
fn advance_jobs_values(backend: Backend, rows: &[JobAdvance]) -> String {
    use std::fmt::Write;
    let mut sql = String::with_capacity(120 + rows.len() * 40);
    if backend == Backend::Mysql {
        // MySQL and MariaDB: a multi-table `UPDATE` joined to a derived table.
        sql.push_str("UPDATE jobs JOIN (");
        for (i, row) in rows.iter().enumerate() {
            let (job_id, at, fired, done) = (row.job_id, row.at_ms, row.fired, i64::from(row.done));
            if i == 0 {
                let _ = write!(
                    sql,
                    "SELECT {job_id} AS job_id, {at} AS at_ms, {fired} AS fired, {done} AS done"
                );
            } else {
                let _ = write!(sql, " UNION ALL SELECT {job_id}, {at}, {fired}, {done}");
            }
        }
        sql.push_str(
            ") v ON jobs.job_id = v.job_id SET jobs.last_fired_at_ms = v.at_ms, \
             jobs.fired_count = jobs.fired_count + v.fired, \
             jobs.state = CASE WHEN v.done = 1 THEN 'done' ELSE jobs.state END",
        );
    } else {
        // SQLite: `UPDATE … FROM` a list of values.
        sql.push_str("WITH v (job_id, at_ms, fired, done) AS (VALUES ");
        for (i, row) in rows.iter().enumerate() {
            let (job_id, at, fired, done) = (row.job_id, row.at_ms, row.fired, i64::from(row.done));
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(sql, "{sep}({job_id}, {at}, {fired}, {done})");
        }
        sql.push_str(
            ") UPDATE jobs SET last_fired_at_ms = v.at_ms, \
             fired_count = jobs.fired_count + v.fired, \
             state = CASE WHEN v.done = 1 THEN 'done' ELSE jobs.state END \
             FROM v WHERE jobs.job_id = v.job_id",
        );
    }
    sql
}

/// The same writes as `PostgresStore`'s, as multi-row `VALUES` lists, for one backend's store.
macro_rules! values_bulk_store {
    ($store:ident, $db:ty, $backend:expr) => {
        impl $store {
            /// Advances the claim's jobs, a statement per chunk.
            pub(super) async fn advance_jobs(
                &self,
                tx: &mut Tx<$db>,
                rows: &[JobAdvance],
            ) -> Result<(), Error> {
                for chunk in rows.chunks(RUN_ROWS_PER_INSERT) {
                    sqlx::query::<$db>(AssertSqlSafe(advance_jobs_values($backend, chunk)))
                        .execute(&mut **tx)
                        .await?;
                }
                Ok(())
            }

            /// Inserts the claimed runs, a statement per chunk, and returns those inserted
            /// `running` (on a backend with `RETURNING`; MySQL starts none in the claim).
            pub(super) async fn insert_claimed_runs(
                &self,
                tx: &mut Tx<$db>,
                node_id: &str,
                runs: &[ClaimedRun<'_>],
            ) -> Result<Vec<StartedRun>, Error> {
                let mut started = Vec::new();
                for chunk in runs.chunks(RUN_ROWS_PER_INSERT) {
                    started.extend(self.insert_claimed_chunk(tx, node_id, chunk).await?);
                }
                Ok(started)
            }

            async fn insert_claimed_chunk(
                &self,
                tx: &mut Tx<$db>,
                node_id: &str,
                runs: &[ClaimedRun<'_>],
            ) -> Result<Vec<StartedRun>, Error> {
                let now: &str = &self.q.jobs.now_expr;
                let mut insert = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO runs (job_id, scheduled_at_ms, partition_id, epoch, \
                    node_id, trigger_kind, state, priority, created_at_ms, started_at_ms, \
                    finished_at_ms, message, namespace_id) ",
                );
                insert.push_values(runs, |mut row, run| {
                    let claim = run.claim;
                    row.push_bind(claim.job_id)
                        .push_bind(claim.scheduled_at_ms)
                        .push_bind(claim.partition_id)
                        .push_bind(claim.epoch)
                        .push_bind(node_id.to_owned())
                        .push_bind(claim.trigger_kind.as_str())
                        .push_bind(run.state().as_str())
                        .push_bind(claim.priority)
                        .push(now)
                        .push(if run.starts { now } else { "NULL" })
                        .push(if run.finished() { now } else { "NULL" })
                        .push_bind(claim.message.clone())
                        .push_bind(claim.namespace_id);
                });
                insert.push(" ").push(&*self.q.jobs.run_insert_ignore_duplicate);
                if !runs.iter().any(|r| r.starts) {
                    insert.build().execute(&mut **tx).await?;
                    return Ok(Vec::new());
                }
                insert.push(
                    " RETURNING run_id, job_id, partition_id, priority, scheduled_at_ms, state",
                );
                let rows = insert
                    .build_query_as::<(i64, i64, i64, i64, i64, String)>()
                    .fetch_all(&mut **tx)
                    .await?;
                Ok(started_runs(rows))
            }

            /// Inserts first attempts, a statement per chunk.
            pub(super) async fn insert_first_attempts(
                &self,
                tx: &mut Tx<$db>,
                attempts: &[FirstAttempt<'_>],
            ) -> Result<(), Error> {
                let now: &str = &self.q.jobs.now_expr;
                for chunk in attempts.chunks(ATTEMPT_ROWS_PER_INSERT) {
                    let mut insert = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO attempts (run_id, job_id, partition_id, shard_index, \
                        shard_total, attempt_no, priority, args_json, state, created_at_ms, \
                        not_before_ms, avoid_executor_id, executor_id) ",
                    );
                    insert.push_values(chunk, |mut row, attempt| {
                        row.push_bind(attempt.run_id)
                            .push_bind(attempt.job_id)
                            .push_bind(attempt.partition_id)
                            .push_bind(attempt.shard_index)
                            .push_bind(attempt.shard_total)
                            .push("1")
                            .push_bind(attempt.priority)
                            .push_bind(attempt.args_json.to_owned())
                            .push("'pending'")
                            .push(now)
                            .push_bind(attempt.not_before_ms)
                            .push("NULL")
                            .push_bind(attempt.executor_id.map(str::to_owned));
                    });
                    insert.build().execute(&mut **tx).await?;
                }
                Ok(())
            }
        }
    };
}

values_bulk_store!(MysqlStore, MySql, Backend::Mysql);
values_bulk_store!(SqliteStore, Sqlite, Backend::Sqlite);
