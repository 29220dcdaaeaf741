//! `HistoryStore` on the three backends: deleting finished runs with their attempts.

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

            async fn history_delete_once(
                &self,
                scope: &PurgeScope,
                limit: i64,
            ) -> Result<Purged, Error> {
                let mut select = sqlx::QueryBuilder::<$db>::new("SELECT r.run_id");
                Self::history_scope(&mut select, scope);
                select
                    .push(" ORDER BY r.finished_at_ms LIMIT ")
                    .push_bind(limit);
                let ids: Vec<i64> = select.build_query_scalar().fetch_all(&self.pool).await?;
                if ids.is_empty() {
                    return Ok(Purged::default());
                }
                let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
                let finished = FINISHED_STATES
                    .iter()
                    .map(|s| format!("'{s}'"))
                    .collect::<Vec<_>>()
                    .join(",");
                // Runs before attempts (the lock order). A finished run never becomes
                // unfinished, but the state is checked again in the write all the same.
                let mut tx = self.begin_write().await?;
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
                tx.commit().await?;
                Ok(Purged { runs, attempts })
            }
        }

        #[async_trait]
        impl HistoryStore for $store {
            async fn history_delete(
                &self,
                scope: &PurgeScope,
                limit: i64,
            ) -> Result<Purged, Error> {
                if scope.partitions.as_ref().is_some_and(Vec::is_empty) || limit <= 0 {
                    return Ok(Purged::default());
                }
                retry_transient(|| self.history_delete_once(scope, limit)).await
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
                let Some(query) = with_partitions(&self.q.history_rules, partitions) else {
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
                    sqlx::query_scalar::<$db, i64>(sql(&self.q.history_beyond_newest))
                        .bind(job_id)
                        .bind(keep)
                        .fetch_optional(&self.pool)
                        .await?,
                )
            }

            async fn history_oldest_run_ms(&self) -> Result<Option<i64>, Error> {
                Ok(
                    sqlx::query_scalar::<$db, i64>(sql(&self.q.history_oldest_run))
                        .fetch_optional(&self.pool)
                        .await?,
                )
            }
        }
    };
}

pub(super) use history_store;
