//! Child jobs on the three backends: what follows the runs a transaction ended, in the same
//! transaction, so no node can die between the two (the rules: `super::rules::follow_ups`, the
//! statements they run here); and what the API reads of them.

/// Implements it for one backend's store; see `super` for the arguments.
macro_rules! follow_ups_store {
    ($store:ident, $db:ty, $backend:expr) => {
        impl $store {
            /// What follows, inside the caller's transaction, the runs `ended` there (the
            /// rule: `super::rules::workflows::follow_ups`).
            async fn follow_ups_in(
                &self,
                tx: &mut Tx<$db>,
                ended: &[EndedRun],
            ) -> Result<FollowedUp, Error> {
                super::rules::workflows::follow_ups(&mut StoreTx { store: self, tx }, ended).await
            }
        }

        #[async_trait]
        impl ChildStore for $store {
            async fn child_runs_of_run(&self, run_id: i64) -> Result<Vec<ChildRunRef>, Error> {
                Ok(
                    sqlx::query_as::<$db, ChildRunRef>(sql(&self.q.follow_ups.child_runs_of_run))
                        .bind(run_id)
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn run_input(&self, run_id: i64) -> Result<Option<String>, Error> {
                Ok(
                    sqlx::query_scalar::<$db, Option<String>>(sql(&self.q.follow_ups.run_input))
                        .bind(run_id)
                        .fetch_optional(&self.pool)
                        .await?
                        .flatten(),
                )
            }

            fn follow_up_events(&self) -> Arc<FollowUpEvents> {
                Arc::clone(&self.events)
            }

            async fn jobs_with_children(&self) -> Result<Vec<JobPolicyRow>, Error> {
                Ok(
                    sqlx::query_as::<$db, JobPolicyRow>(sql(&self.q.follow_ups.jobs_with_children))
                        .fetch_all(&self.pool)
                        .await?,
                )
            }
        }

        #[async_trait]
        impl FollowUpTx for StoreTx<'_, $store, Tx<$db>> {
            async fn parents_with_children(
                &mut self,
                job_ids: &[i64],
            ) -> Result<Vec<ParentJob>, Error> {
                let Some(query) =
                    with_partitions(&self.store.q.follow_ups.parents_with_children, job_ids)
                else {
                    return Ok(Vec::new());
                };
                let rows: Vec<(i64, String, String)> =
                    rows_as(&sqlx::raw_sql(query).fetch_all(&mut **self.tx).await?)?;
                Ok(rows
                    .into_iter()
                    .map(|(job_id, name, policy_json)| ParentJob {
                        job_id,
                        name,
                        policy_json,
                    })
                    .collect())
            }

            async fn lock_follow_up_jobs(
                &mut self,
                job_ids: &[i64],
            ) -> Result<Vec<FollowUpJob>, Error> {
                let Some(lock) = with_partitions(&self.store.q.follow_ups.child_jobs_lock, job_ids)
                else {
                    return Ok(Vec::new());
                };
                let rows: Vec<(i64, i64, String, String, NamespaceId)> =
                    rows_as(&sqlx::raw_sql(lock).fetch_all(&mut **self.tx).await?)?;
                Ok(rows
                    .into_iter()
                    .map(
                        |(job_id, partition_id, policy_json, args_json, namespace_id)| {
                            FollowUpJob {
                                job_id,
                                partition_id,
                                namespace_id,
                                policy_json,
                                args_json,
                            }
                        },
                    )
                    .collect())
            }

            async fn now_ms(&mut self) -> Result<i64, Error> {
                Ok(
                    sqlx::query_scalar::<$db, i64>(sql(&self.store.q.cluster.now))
                        .fetch_one(&mut **self.tx)
                        .await?,
                )
            }

            async fn insert_follow_up_run(
                &mut self,
                row: &FollowUpRow<'_>,
            ) -> Result<Option<i64>, Error> {
                let q = &self.store.q;
                // MySQL has no `RETURNING`: the id is read back by the run's key.
                let returning: Option<String> = ($backend != Backend::Mysql)
                    .then(|| format!("{} RETURNING run_id", q.follow_ups.child_run_insert));
                let run = row.run;
                let insert = sqlx::query::<$db>(match returning {
                    Some(query) => AssertSqlSafe(Arc::from(query)),
                    None => sql(&q.follow_ups.child_run_insert),
                })
                .bind(run.job_id)
                .bind(row.scheduled_at_ms)
                .bind(run.partition_id)
                .bind(run.node_id)
                .bind(run.trigger_kind.as_str())
                .bind(row.state.as_str())
                .bind(row.priority)
                .bind(row.state.as_str())
                .bind(run.input)
                .bind(run.namespace_id)
                .bind(run.job_id)
                .bind(row.scheduled_at_ms);
                if $backend != Backend::Mysql {
                    return Ok(match insert.fetch_optional(&mut **self.tx).await? {
                        Some(found) => Some(sqlx::Row::try_get::<i64, _>(&found, 0)?),
                        None => None,
                    });
                }
                if insert.execute(&mut **self.tx).await?.rows_affected() != 1 {
                    return Ok(None);
                }
                Ok(Some(
                    sqlx::query_scalar::<$db, i64>(sql(&q.follow_ups.run_id_at_instant))
                        .bind(run.job_id)
                        .bind(row.scheduled_at_ms)
                        .fetch_one(&mut **self.tx)
                        .await?,
                ))
            }

            async fn record_child_runs(&mut self, links: &[ChildRunLink]) -> Result<(), Error> {
                let mut record = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO child_runs (parent_run_id, child_job_id, child_run_id, \
                    created_at_ms) ",
                );
                let now_expr: &str = &self.store.q.jobs.now_expr;
                record.push_values(links, |mut row, link| {
                    row.push_bind(link.parent_run_id)
                        .push_bind(link.child_job_id)
                        .push_bind(link.child_run_id)
                        .push(now_expr);
                });
                record.build().execute(&mut **self.tx).await?;
                Ok(())
            }
        }
    };
}

pub(super) use follow_ups_store;
