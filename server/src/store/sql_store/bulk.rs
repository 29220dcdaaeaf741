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

/// A job the claim advances: `(job_id, instant, fired, done)`. Its `last_fired_at_ms` becomes
/// the instant, `fired` is added to `fired_count`, and `done = 1` finishes the job.
pub(super) type JobAdvance = (i64, i64, i64, i64);

/// The claim's run insert from arrays. A run already at its instant (a manual one) keeps it;
/// the rows inserted come back, and the `running` ones are the claims that start here.
const POSTGRES_CLAIMED_RUNS: &str = concat!(
    "INSERT INTO runs (job_id, scheduled_at_ms, partition_id, epoch, node_id, trigger_kind, \
     state, priority, created_at_ms, started_at_ms, finished_at_ms, message) \
     SELECT v.job_id, v.at_ms, v.partition_id, v.epoch, $1, v.trigger_kind, v.state, \
     v.priority, ",
    postgres_now!(),
    ", CASE WHEN v.started THEN ",
    postgres_now!(),
    " END, CASE WHEN v.finished THEN ",
    postgres_now!(),
    " END, v.message \
     FROM unnest($2::BIGINT[], $3::BIGINT[], $4::BIGINT[], $5::BIGINT[], $6::TEXT[], \
     $7::TEXT[], $8::BIGINT[], $9::BOOLEAN[], $10::BOOLEAN[], $11::TEXT[]) \
     AS v(job_id, at_ms, partition_id, epoch, trigger_kind, state, priority, started, \
     finished, message) \
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
            .bind(column(|r| r.0))
            .bind(column(|r| r.1))
            .bind(column(|r| r.2))
            .bind(column(|r| r.3))
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Inserts the claimed runs in one statement and returns those inserted `running`.
    pub(super) async fn insert_claimed_runs(
        &self,
        tx: &mut PgTx,
        node_id: &str,
        claims: &[&RunClaim],
    ) -> Result<Vec<StartedRun>, Error> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let ints = |pick: fn(&RunClaim) -> i64| claims.iter().map(|c| pick(c)).collect::<Vec<_>>();
        let started: Vec<bool> = claims.iter().map(|c| Self::starts_here(c)).collect();
        let states: Vec<&str> = claims
            .iter()
            .zip(&started)
            .map(|(c, &start)| if start { run_state::RUNNING } else { c.state })
            .collect();
        let finished: Vec<bool> = claims
            .iter()
            .map(|c| !run_state::UNFINISHED.contains(&c.state))
            .collect();
        let rows =
            sqlx::query_as::<Postgres, (i64, i64, i64, i64, i64, String)>(POSTGRES_CLAIMED_RUNS)
                .bind(node_id)
                .bind(ints(|c| c.job_id))
                .bind(ints(|c| c.scheduled_at_ms))
                .bind(ints(|c| c.partition_id))
                .bind(ints(|c| c.epoch))
                .bind(claims.iter().map(|c| c.trigger_kind).collect::<Vec<&str>>())
                .bind(states)
                .bind(ints(|c| c.priority))
                .bind(started)
                .bind(finished)
                .bind(
                    claims
                        .iter()
                        .map(|c| c.message.as_deref())
                        .collect::<Vec<Option<&str>>>(),
                )
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
        .filter(|row| row.5 == run_state::RUNNING)
        .map(|(run_id, job_id, partition_id, priority, at, _)| {
            (run_id, job_id, partition_id, priority, at)
        })
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
        for (i, (job_id, at, fired, done)) in rows.iter().enumerate() {
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
        for (i, (job_id, at, fired, done)) in rows.iter().enumerate() {
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
                claims: &[&RunClaim],
            ) -> Result<Vec<StartedRun>, Error> {
                let mut started = Vec::new();
                for chunk in claims.chunks(RUN_ROWS_PER_INSERT) {
                    started.extend(self.insert_claimed_chunk(tx, node_id, chunk).await?);
                }
                Ok(started)
            }

            async fn insert_claimed_chunk(
                &self,
                tx: &mut Tx<$db>,
                node_id: &str,
                claims: &[&RunClaim],
            ) -> Result<Vec<StartedRun>, Error> {
                let now: &str = &self.q.now_expr;
                let mut insert = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO runs (job_id, scheduled_at_ms, partition_id, epoch, \
                    node_id, trigger_kind, state, priority, created_at_ms, started_at_ms, \
                    finished_at_ms, message) ",
                );
                insert.push_values(claims, |mut row, claim| {
                    let finished = !run_state::UNFINISHED.contains(&claim.state);
                    let state = if Self::starts_here(claim) {
                        run_state::RUNNING
                    } else {
                        claim.state
                    };
                    row.push_bind(claim.job_id)
                        .push_bind(claim.scheduled_at_ms)
                        .push_bind(claim.partition_id)
                        .push_bind(claim.epoch)
                        .push_bind(node_id.to_owned())
                        .push_bind(claim.trigger_kind)
                        .push_bind(state)
                        .push_bind(claim.priority)
                        .push(now)
                        .push(if Self::starts_here(claim) { now } else { "NULL" })
                        .push(if finished { now } else { "NULL" })
                        .push_bind(claim.message.clone());
                });
                insert.push(" ").push(&*self.q.run_insert_ignore_duplicate);
                if !claims.iter().any(|c| Self::starts_here(c)) {
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
                let now: &str = &self.q.now_expr;
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
