//! `JobStore` on the three backends: jobs, their changes, and manual runs (the claim of
//! their scheduled instants is in `claim`).

/// Implements it for one backend's store; see `super` for the arguments.
macro_rules! job_store {
    ($store:ident, $db:ty, $backend:expr) => {
        impl $store {
            /// Job `job_id` as `tx` sees it.
            async fn job_in(
                &self,
                tx: &mut Tx<$db>,
                job_id: i64,
            ) -> Result<Option<JobRecord>, Error> {
                self.job_read(&mut **tx, job_id).await
            }

            /// Job `job_id`, read through `conn` (the pool, or a transaction).
            async fn job_read<'e>(
                &self,
                conn: impl sqlx::Executor<'e, Database = $db>,
                job_id: i64,
            ) -> Result<Option<JobRecord>, Error> {
                Ok(sqlx::query_as::<$db, JobRecord>(sql(&self.q.jobs.job_get))
                    .bind(job_id)
                    .fetch_optional(conn)
                    .await?)
            }

            /// `query` with the fields of `job` people write, in the order both the insert
            /// and the update of a job take them.
            fn bind_job_row<'q>(
                query: sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments>,
                job: &'q JobWrite,
            ) -> sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments> {
                query
                    .bind(&job.name)
                    .bind(&job.app_name)
                    .bind(&job.handler_name)
                    .bind(&job.schedule_json)
                    .bind(&job.timezone)
                    .bind(&job.args_json)
                    .bind(&job.policy_json)
                    .bind(job.history_keep_ms)
                    .bind(job.history_max_runs)
            }

            /// Inserts job `job_id` in `tx`; a unique key's refusal is left for
            /// [`Self::insert_refused`] to name, once `tx` is rolled back.
            async fn insert_job_in(
                &self,
                tx: &mut Tx<$db>,
                job_id: i64,
                partition_id: i64,
                job: &JobWrite,
                start: bool,
            ) -> Result<(), Error> {
                let insert = sqlx::query::<$db>(sql(&self.q.jobs.job_insert))
                    .bind(job_id)
                    .bind(partition_id);
                Self::bind_job_row(insert, job)
                    .bind(if start { "running" } else { "stopped" })
                    .bind(i64::from(start))
                    .bind(job.kind.as_str())
                    .bind(job.namespace_id)
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            }

            /// What refused the insert of job `job_id` as `job`: its name, taken in its
            /// namespace, or its id (the caller draws another); any other error as it is.
            async fn insert_refused(&self, err: Error, job_id: i64, job: &JobWrite) -> Error {
                if !err.is_unique_violation() {
                    return err;
                }
                let named = self
                    .jobs_list(&JobFilter {
                        namespace: Some(job.namespace_id),
                        name_prefix: Some(job.name.clone()),
                        limit: 1_000,
                        ..JobFilter::default()
                    })
                    .await;
                match named {
                    Ok(jobs) if jobs.iter().any(|j| j.name == job.name) => Error::Conflict {
                        what: format!("job name {:?}", job.name),
                    },
                    Ok(_) => Error::Conflict {
                        what: format!("job id {job_id}"),
                    },
                    Err(err) => err,
                }
            }

            /// Updates job `job_id` as `job` in `tx` when it is at `expected_version`; false
            /// when it is not (or is gone).
            async fn update_job_in(
                &self,
                tx: &mut Tx<$db>,
                job_id: i64,
                expected_version: i64,
                job: &JobWrite,
            ) -> Result<bool, Error> {
                let update = sqlx::query::<$db>(sql(&self.q.jobs.job_update));
                let updated = Self::bind_job_row(update, job)
                    .bind(job_id)
                    .bind(expected_version)
                    .execute(&mut **tx)
                    .await
                    .map_err(Error::from);
                match updated {
                    Ok(done) => Ok(done.rows_affected() == 1),
                    Err(err) if err.is_unique_violation() => Err(Error::Conflict {
                        what: format!("job name {:?}", job.name),
                    }),
                    Err(err) => Err(err),
                }
            }

            /// Ends a change of job `job_id` made in `tx`: the job as it is now, committed
            /// with `audit`; `None`, and nothing committed, when there is no such job.
            async fn job_changed_in(
                &self,
                mut tx: Tx<$db>,
                job_id: i64,
                audit: Option<&AuditWrite>,
            ) -> Result<Option<JobRecord>, Error> {
                let Some(record) = self.job_in(&mut tx, job_id).await? else {
                    return Ok(None);
                };
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(Some(record))
            }
        }

        #[async_trait]
        impl ManualRunDriver for StorePool<'_, $store> {
            async fn clock_ms(&mut self) -> Result<i64, Error> {
                self.store.now_ms().await
            }

            async fn insert_manual_run(
                &mut self,
                run: &ManualRun<'_>,
                at_ms: i64,
            ) -> Result<Option<RunRecord>, Error> {
                let q = &self.store.q;
                let job = run.job;
                let mut tx = self.store.begin_write().await?;
                let inserted = sqlx::query::<$db>(sql(&q.jobs.run_insert_manual))
                    .bind(job.job_id)
                    .bind(at_ms)
                    .bind(job.partition_id)
                    .bind(0_i64)
                    .bind(run.node_id)
                    .bind("manual")
                    .bind(run.state.as_str())
                    .bind(i64::from(job.policy_priority()))
                    .bind(i64::from(run.finished()))
                    .bind(run.message)
                    .bind(run.input)
                    .bind(job.namespace_id)
                    .bind(job.job_id)
                    .bind(at_ms)
                    .execute(&mut *tx)
                    .await?;
                if inserted.rows_affected() != 1 {
                    return Ok(None);
                }
                let record = sqlx::query_as::<$db, RunRecord>(sql(&q.follow_ups.run_by_instant))
                    .bind(job.job_id)
                    .bind(at_ms)
                    .fetch_one(&mut *tx)
                    .await?;
                self.store.audit_in(&mut tx, run.audit).await?;
                tx.commit().await?;
                Ok(Some(record))
            }
        }

        #[async_trait]
        impl JobStore for $store {
            async fn job_insert(
                &self,
                job_id: i64,
                partition_id: i64,
                job: &JobWrite,
                start: bool,
                audit: Option<&AuditWrite>,
            ) -> Result<JobRecord, Error> {
                let mut tx = self.begin_write().await?;
                if let Err(err) = self.insert_job_in(&mut tx, job_id, partition_id, job, start).await {
                    tx.rollback().await?;
                    return Err(self.insert_refused(err, job_id, job).await);
                }
                let record = self.job_in(&mut tx, job_id).await?.ok_or(Error::NotInitialised)?;
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(record)
            }

            async fn job_get(&self, job_id: i64) -> Result<Option<JobRecord>, Error> {
                self.job_read(&self.pool, job_id).await
            }

            async fn jobs_list(&self, filter: &JobFilter) -> Result<Vec<JobRecord>, Error> {
                let pattern = filter.name_prefix.as_deref().map(like_prefix);
                let contains = filter
                    .name_contains
                    .as_deref()
                    .map(|text| format!("%{}", like_prefix(text)));
                let query = match filter.order {
                    JobOrder::NewestFirst => &self.q.jobs.jobs_by_id_desc,
                    JobOrder::OldestFirst => &self.q.jobs.jobs_by_id_asc,
                    JobOrder::NameAscending => &self.q.jobs.jobs_by_name_asc,
                    JobOrder::NameDescending => &self.q.jobs.jobs_by_name_desc,
                };
                let query = sqlx::query_as::<$db, JobRecord>(sql(query))
                    .bind(filter.namespace)
                    .bind(filter.namespace)
                    .bind(filter.kind.map(JobKind::as_str))
                    .bind(filter.kind.map(JobKind::as_str))
                    .bind(filter.app.as_deref())
                    .bind(filter.app.as_deref())
                    .bind(filter.state.as_deref())
                    .bind(filter.state.as_deref())
                    .bind(pattern.as_deref())
                    .bind(pattern.as_deref())
                    .bind(contains.as_deref())
                    .bind(contains.as_deref());
                // A key of the other kind than the order's is no position in it: first page.
                let query = match (filter.order, &filter.after) {
                    (JobOrder::NameAscending | JobOrder::NameDescending, after) => {
                        let name = match after {
                            Some(JobKey::Name(name)) => Some(name.as_str()),
                            _ => None,
                        };
                        query.bind(name).bind(name)
                    }
                    (_, after) => {
                        let id = match after {
                            Some(JobKey::Id(id)) => Some(*id),
                            _ => None,
                        };
                        query.bind(id).bind(id)
                    }
                };
                Ok(query.bind(filter.limit).fetch_all(&self.pool).await?)
            }

            async fn job_update(
                &self,
                job_id: i64,
                expected_version: i64,
                job: &JobWrite,
                audit: Option<&AuditWrite>,
            ) -> Result<Option<JobRecord>, Error> {
                let mut tx = self.begin_write().await?;
                if self.update_job_in(&mut tx, job_id, expected_version, job).await? {
                    self.job_changed_in(tx, job_id, audit).await
                } else {
                    Ok(None)
                }
            }

            async fn job_start(
                &self,
                job_id: i64,
                audit: Option<&AuditWrite>,
            ) -> Result<Option<JobRecord>, Error> {
                let mut tx = self.begin_write().await?;
                sqlx::query::<$db>(sql(&self.q.jobs.job_start))
                    .bind(job_id)
                    .execute(&mut *tx)
                    .await?;
                self.job_changed_in(tx, job_id, audit).await
            }

            async fn job_stop(
                &self,
                job_id: i64,
                audit: Option<&AuditWrite>,
            ) -> Result<Option<JobRecord>, Error> {
                let mut tx = self.begin_write().await?;
                sqlx::query::<$db>(sql(&self.q.jobs.job_stop))
                    .bind(job_id)
                    .execute(&mut *tx)
                    .await?;
                self.job_changed_in(tx, job_id, audit).await
            }

            async fn job_delete(
                &self,
                job_id: i64,
                audit: Option<&AuditWrite>,
            ) -> Result<bool, Error> {
                let Some(job) = self.job_get(job_id).await? else {
                    return Ok(false);
                };
                let mut tx = self.begin_write().await?;
                let deleted = sqlx::query::<$db>(sql(&self.q.jobs.job_delete))
                    .bind(job_id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if deleted != 1 {
                    return Ok(false);
                }
                sqlx::query::<$db>(sql(&self.q.jobs.job_deletion_insert))
                    .bind(job_id)
                    .bind(job.partition_id)
                    .execute(&mut *tx)
                    .await?;
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn jobs_in_partition(
                &self,
                partition_id: i64,
            ) -> Result<Vec<ScheduledJob>, Error> {
                Ok(sqlx::query_as::<$db, ScheduledJob>(sql(&self.q.jobs.jobs_in_partition))
                    .bind(partition_id)
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn jobs_get_many(&self, job_ids: &[i64]) -> Result<Vec<JobRecord>, Error> {
                let Some(query) = with_partitions(&self.q.jobs.jobs_get_many, job_ids) else {
                    return Ok(Vec::new());
                };
                rows_as(&sqlx::raw_sql(query).fetch_all(&self.pool).await?)
            }

            async fn jobs_insert_many(
                &self,
                jobs: &[JobInsert],
                audit: Option<&AuditWrite>,
            ) -> Result<(), Error> {
                // Rows per statement: 17 bound parameters each, under the backend's limit of bound
                // parameters (65,535 on PostgreSQL and MySQL, 32,766 on SQLite); fewer, larger
                // statements insert a bulk create's rows sooner.
                let rows_per_statement: usize = match $backend {
                    Backend::Sqlite => 1_500,
                    Backend::Postgres | Backend::Mysql => 3_000,
                };
                if jobs.is_empty() {
                    return Ok(());
                }
                let now = self.now_ms().await?;
                let began = std::time::Instant::now();
                let mut tx = self.begin_write().await?;
                for chunk in jobs.chunks(rows_per_statement) {
                    let mut insert = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO jobs (job_id, partition_id, name, app_name, handler_name, \
                        schedule_json, timezone, args_json, policy_json, history_keep_ms, \
                        history_max_runs, state, version, next_fire_at_ms, last_fired_at_ms, \
                        created_at_ms, updated_at_ms, started_at_ms, kind, namespace_id) ",
                    );
                    insert.push_values(chunk, |mut row, job| {
                        let state = if job.start {
                            JobState::Running
                        } else {
                            JobState::Stopped
                        };
                        let w = &job.write;
                        row.push_bind(job.job_id)
                            .push_bind(job.partition_id)
                            .push_bind(w.name.clone())
                            .push_bind(w.app_name.clone())
                            .push_bind(w.handler_name.clone())
                            .push_bind(w.schedule_json.clone())
                            .push_bind(w.timezone.clone())
                            .push_bind(w.args_json.clone())
                            .push_bind(w.policy_json.clone())
                            .push_bind(w.history_keep_ms)
                            .push_bind(w.history_max_runs)
                            .push_bind(state.as_str())
                            .push("1, NULL, NULL")
                            .push_bind(now)
                            .push_bind(now)
                            .push_bind(job.start.then_some(now))
                            .push_bind(w.kind.as_str())
                            .push_bind(w.namespace_id);
                    });
                    match insert.build().execute(&mut *tx).await.map_err(Error::from) {
                        Ok(_) => {}
                        Err(err) if err.is_unique_violation() => {
                            return Err(Error::Conflict {
                                what: "a job name or id of the batch".to_owned(),
                            });
                        }
                        Err(err) => return Err(err),
                    }
                }
                // Changes are polled looking a few seconds back from the last poll: rows
                // stamped long before their commit would be missed.
                if began.elapsed() > std::time::Duration::from_secs(1) {
                    let low = jobs.iter().map(|j| j.job_id).min().unwrap_or_default();
                    let high = jobs.iter().map(|j| j.job_id).max().unwrap_or_default();
                    sqlx::query::<$db>(sql(&self.q.jobs.jobs_touch_range))
                        .bind(low)
                        .bind(high)
                        .execute(&mut *tx)
                        .await?;
                }
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn job_id_max(&self) -> Result<Option<i64>, Error> {
                Ok(sqlx::query_scalar::<$db, Option<i64>>(sql(&self.q.jobs.job_id_max))
                    .fetch_one(&self.pool)
                    .await?)
            }

            async fn jobs_named(
                &self,
                namespace: NamespaceId,
                names: &[String],
            ) -> Result<Vec<(String, i64)>, Error> {
                let mut found = Vec::new();
                // One bound parameter a name, under every backend's limit.
                for chunk in names.chunks(10_000) {
                    let mut query = sqlx::QueryBuilder::<$db>::new(
                        "SELECT name, job_id FROM jobs WHERE namespace_id = ",
                    );
                    query.push_bind(namespace).push(" AND name IN (");
                    let mut list = query.separated(", ");
                    for name in chunk {
                        list.push_bind(name.clone());
                    }
                    query.push(")");
                    found.extend(
                        query
                            .build_query_as::<(String, i64)>()
                            .fetch_all(&self.pool)
                            .await?,
                    );
                }
                Ok(found)
            }

            async fn jobs_changed_since(
                &self,
                since_ms: i64,
                after_job_id: i64,
                limit: i64,
            ) -> Result<JobChanges, Error> {
                // The clock first: a change committed after this read is seen by the next poll.
                let now_ms = self.now_ms().await?;
                let changed = sqlx::query_as::<$db, JobRecord>(sql(&self.q.jobs.jobs_changed_since))
                    .bind(since_ms)
                    .bind(since_ms)
                    .bind(after_job_id)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                let deleted = sqlx::query_scalar::<$db, i64>(sql(&self.q.jobs.job_deletions_since))
                    .bind(since_ms)
                    .fetch_all(&self.pool)
                    .await?;
                Ok(JobChanges {
                    changed,
                    deleted,
                    now_ms,
                })
            }

            async fn runs_claim(
                &self,
                node_id: &str,
                claims: &[RunClaim],
            ) -> Result<Vec<ClaimOutcome>, Error> {
                retry_transient(|| self.runs_claim_once(node_id, claims)).await
            }

            async fn run_insert_manual(
                &self,
                job: &JobRecord,
                node_id: &str,
                state: RunState,
                message: Option<&str>,
                input: Option<&str>,
                audit: Option<&AuditWrite>,
            ) -> Result<RunRecord, Error> {
                let run = ManualRun {
                    job,
                    node_id,
                    state,
                    message,
                    input,
                    audit,
                };
                super::rules::manual_run::insert_manual_run(&mut StorePool { store: self }, &run)
                    .await
            }

            async fn runs_of_job(
                &self,
                job_id: i64,
                before_run_id: Option<i64>,
                limit: i64,
            ) -> Result<Vec<RunRecord>, Error> {
                Ok(sqlx::query_as::<$db, RunRecord>(sql(&self.q.jobs.runs_of_job))
                    .bind(job_id)
                    .bind(before_run_id)
                    .bind(before_run_id)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?)
            }
        }
    };
}

pub(super) use job_store;
