//! `HistoryStore` on the three backends: the statements of a purge step (the rule:
//! `super::rules::history`), counting what a purge would delete, and the jobs' own rules.

/// Implements it for one backend's store; see `super` for the arguments.
macro_rules! history_store {
    ($store:ident, $db:ty) => {
        impl $store {
            /// Appends `FROM runs r … WHERE …` for the runs `scope` names. Every value is bound
            /// or is one of our integers or state names.
            fn history_scope(query: &mut sqlx::QueryBuilder<$db>, scope: &PurgeScope) {
                query.push(" FROM runs r");
                if scope.skip_jobs_with_own_keep {
                    query.push(" LEFT JOIN jobs j ON j.job_id = r.job_id");
                }
                query
                    .push(" WHERE r.finished_at_ms < ")
                    .push_bind(scope.finished_before_ms);
                let states = scope
                    .states
                    .states()
                    .iter()
                    .map(|s| format!("'{s}'"))
                    .collect::<Vec<_>>()
                    .join(",");
                query.push(format!(" AND r.state IN ({states})"));
                if let Some(partitions) = &scope.partitions {
                    let list = partitions
                        .iter()
                        .map(i64::to_string)
                        .collect::<Vec<_>>()
                        .join(",");
                    query.push(format!(" AND r.partition_id IN ({list})"));
                }
                if let Some(job_id) = scope.job_id {
                    query.push(" AND r.job_id = ").push_bind(job_id);
                }
                if let Some(until) = scope.scheduled_until_ms {
                    query.push(" AND r.scheduled_at_ms <= ").push_bind(until);
                }
                if scope.skip_jobs_with_own_keep {
                    query.push(" AND j.history_keep_ms IS NULL");
                }
            }
        }

        #[async_trait]
        impl PurgeDriver for StorePool<'_, $store> {
            async fn purge_candidates(
                &mut self,
                scope: &PurgeScope,
                window: i64,
            ) -> Result<Vec<PurgeCandidate>, Error> {
                // An ordered walk of `runs_finished_idx` (or, for one job, of its runs),
                // stopped at `window`.
                let mut select = sqlx::QueryBuilder::<$db>::new(
                    "SELECT c.run_id, c.finished_at_ms, c.state, c.partition_id, \
                     COALESCE(j.history_keep_ms, -1) FROM \
                     (SELECT run_id, job_id, finished_at_ms, state, partition_id FROM runs \
                     WHERE finished_at_ms >= ",
                );
                select
                    .push_bind(scope.finished_from_ms)
                    .push(" AND finished_at_ms < ")
                    .push_bind(scope.finished_before_ms);
                if let Some(job_id) = scope.job_id {
                    select.push(" AND job_id = ").push_bind(job_id);
                }
                if let Some(until) = scope.scheduled_until_ms {
                    select.push(" AND scheduled_at_ms <= ").push_bind(until);
                }
                select
                    .push(" ORDER BY finished_at_ms LIMIT ")
                    .push_bind(window)
                    .push(") c LEFT JOIN jobs j ON j.job_id = c.job_id");
                let rows: Vec<(i64, i64, String, i64, i64)> =
                    select.build_query_as().fetch_all(&self.store.pool).await?;
                Ok(rows
                    .into_iter()
                    .map(
                        |(run_id, finished_at_ms, state, partition_id, own_keep)| PurgeCandidate {
                            run_id,
                            finished_at_ms,
                            state,
                            partition_id,
                            job_keeps_own: own_keep >= 0,
                        },
                    )
                    .collect())
            }

            async fn delete_finished_runs(&mut self, ids: &[i64]) -> Result<Purged, Error> {
                let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
                let finished = RunState::FINISHED
                    .iter()
                    .map(|s| format!("'{s}'"))
                    .collect::<Vec<_>>()
                    .join(",");
                // Runs before attempts (the lock order). A finished run never becomes
                // unfinished, but the state is checked again in the write all the same.
                let mut tx = self.store.begin_write().await?;
                let runs = sqlx::query::<$db>(AssertSqlSafe(format!(
                    "DELETE FROM runs WHERE run_id IN ({list}) AND state IN ({finished}) \
                     AND finished_at_ms IS NOT NULL"
                )))
                .execute(&mut *tx)
                .await?
                .rows_affected();
                let attempts = sqlx::query::<$db>(AssertSqlSafe(format!(
                    "DELETE FROM attempts WHERE run_id IN ({list}) AND NOT EXISTS \
                     (SELECT 1 FROM runs WHERE runs.run_id = attempts.run_id)"
                )))
                .execute(&mut *tx)
                .await?
                .rows_affected();
                // Their attempts' logs go with them.
                sqlx::query::<$db>(AssertSqlSafe(format!(
                    "DELETE FROM attempt_logs WHERE run_id IN ({list}) AND NOT EXISTS \
                     (SELECT 1 FROM runs WHERE runs.run_id = attempt_logs.run_id)"
                )))
                .execute(&mut *tx)
                .await?;
                // And the record of the child runs they triggered (the children stay), and
                // of the steps of those that were workflow runs (the steps' runs stay).
                for (table, column) in [
                    ("child_runs", "parent_run_id"),
                    ("workflow_runs", "run_id"),
                    ("step_runs", "workflow_run_id"),
                ] {
                    sqlx::query::<$db>(AssertSqlSafe(format!(
                        "DELETE FROM {table} WHERE {column} IN ({list}) AND NOT EXISTS \
                         (SELECT 1 FROM runs WHERE runs.run_id = {table}.{column})"
                    )))
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(Purged { runs, attempts })
            }
        }

        #[async_trait]
        impl HistoryStore for $store {
            async fn history_delete(
                &self,
                scope: &PurgeScope,
                window: i64,
            ) -> Result<PurgeStep, Error> {
                retry_transient(|| async move {
                    super::rules::history::purge_step(&mut StorePool { store: self }, scope, window)
                        .await
                })
                .await
            }

            async fn history_count(&self, scope: &PurgeScope) -> Result<Purged, Error> {
                if scope.partitions.as_ref().is_some_and(Vec::is_empty) {
                    return Ok(Purged::default());
                }
                let mut runs = sqlx::QueryBuilder::<$db>::new("SELECT COUNT(*)");
                Self::history_scope(&mut runs, scope);
                let runs: i64 = runs.build_query_scalar().fetch_one(&self.pool).await?;
                let mut attempts = sqlx::QueryBuilder::<$db>::new(
                    "SELECT COUNT(*) FROM attempts WHERE run_id IN (SELECT r.run_id",
                );
                Self::history_scope(&mut attempts, scope);
                attempts.push(")");
                let attempts: i64 = attempts.build_query_scalar().fetch_one(&self.pool).await?;
                Ok(Purged {
                    runs: u64::try_from(runs).unwrap_or(0),
                    attempts: u64::try_from(attempts).unwrap_or(0),
                })
            }

            async fn history_rules(
                &self,
                partitions: &[i64],
            ) -> Result<Vec<JobHistoryRule>, Error> {
                let Some(query) = with_partitions(&self.q.tasks.history_rules, partitions) else {
                    return Ok(Vec::new());
                };
                Ok(sqlx::query_as::<$db, JobHistoryRule>(query)
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn history_beyond_newest(
                &self,
                job_id: i64,
                keep: i64,
            ) -> Result<Option<i64>, Error> {
                Ok(
                    sqlx::query_scalar::<$db, i64>(sql(&self.q.tasks.history_beyond_newest))
                        .bind(job_id)
                        .bind(keep)
                        .fetch_optional(&self.pool)
                        .await?,
                )
            }

            async fn history_oldest_run_ms(&self) -> Result<Option<i64>, Error> {
                Ok(
                    sqlx::query_scalar::<$db, i64>(sql(&self.q.tasks.history_oldest_run))
                        .fetch_optional(&self.pool)
                        .await?,
                )
            }
        }
    };
}

pub(super) use history_store;
