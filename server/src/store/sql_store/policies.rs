//! `PolicyStore` on the three backends: what the schedule policies keep beyond the job row
//! (bounds ending a job, fixed delays reading run ends, calendars, backfills).

/// Implements it for one backend's store; see `super` for the arguments.
macro_rules! policy_store {
    ($store:ident, $db:ty) => {
        #[async_trait]
        impl PolicyStore for $store {
            async fn job_finish(&self, job_id: i64, version: i64) -> Result<bool, Error> {
                Ok(sqlx::query::<$db>(sql(&self.q.jobs.job_finish))
                    .bind(job_id)
                    .bind(version)
                    .execute(&self.pool)
                    .await?
                    .rows_affected()
                    == 1)
            }

            async fn runs_finished_at(
                &self,
                instants: &[JobInstant],
            ) -> Result<Vec<InstantEnd>, Error> {
                let mut found = Vec::with_capacity(instants.len());
                for chunk in instants.chunks(RUN_ROWS_PER_INSERT) {
                    let mut select = sqlx::QueryBuilder::<$db>::new(
                        "SELECT job_id, scheduled_at_ms, finished_at_ms FROM runs WHERE ",
                    );
                    let mut any = select.separated(" OR ");
                    for instant in chunk {
                        any.push("(job_id = ")
                            .push_bind_unseparated(instant.job_id)
                            .push_unseparated(" AND scheduled_at_ms = ")
                            .push_bind_unseparated(instant.scheduled_at_ms)
                            .push_unseparated(")");
                    }
                    let rows = select
                        .build_query_as::<(i64, i64, Option<i64>)>()
                        .fetch_all(&self.pool)
                        .await?;
                    found.extend(rows.into_iter().map(|(job_id, scheduled_at_ms, finished)| {
                        InstantEnd {
                            instant: JobInstant {
                                job_id,
                                scheduled_at_ms,
                            },
                            finished_at_ms: finished,
                        }
                    }));
                }
                Ok(found)
            }

            async fn jobs_naming_calendar(
                &self,
                namespace: NamespaceId,
                name: &str,
            ) -> Result<Vec<JobPolicyRow>, Error> {
                let pattern = format!("%{}", like_prefix(&format!("\"{name}\"")));
                Ok(
                    sqlx::query_as::<$db, JobPolicyRow>(sql(&self.q.jobs.jobs_naming_calendar))
                        .bind(namespace)
                        .bind(pattern)
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn calendar_insert(
                &self,
                namespace: NamespaceId,
                name: &str,
                definition_json: &str,
                audit: Option<&AuditWrite>,
            ) -> Result<CalendarRecord, Error> {
                let mut tx = self.begin_write().await?;
                let inserted = sqlx::query::<$db>(sql(&self.q.jobs.calendar_insert))
                    .bind(namespace)
                    .bind(name)
                    .bind(definition_json)
                    .execute(&mut *tx)
                    .await
                    .map_err(Error::from);
                match inserted {
                    Ok(_) => {}
                    Err(err) if err.is_unique_violation() => {
                        return Err(Error::Conflict {
                            what: format!("calendar name {name:?}"),
                        });
                    }
                    Err(err) => return Err(err),
                }
                let record = self
                    .calendar_in(&mut tx, namespace, name)
                    .await?
                    .ok_or(Error::NotInitialised)?;
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(record)
            }

            async fn calendar_update(
                &self,
                namespace: NamespaceId,
                name: &str,
                definition_json: &str,
                expected_version: Option<i64>,
                audit: Option<&AuditWrite>,
            ) -> Result<Option<CalendarRecord>, Error> {
                let mut tx = self.begin_write().await?;
                let updated = sqlx::query::<$db>(sql(&self.q.jobs.calendar_update))
                    .bind(definition_json)
                    .bind(namespace)
                    .bind(name)
                    .bind(expected_version)
                    .bind(expected_version)
                    .execute(&mut *tx)
                    .await?;
                if updated.rows_affected() != 1 {
                    return Ok(None);
                }
                let record = self.calendar_in(&mut tx, namespace, name).await?;
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(record)
            }

            async fn calendar_get(
                &self,
                namespace: NamespaceId,
                name: &str,
            ) -> Result<Option<CalendarRecord>, Error> {
                self.calendar_read(&self.pool, namespace, name).await
            }

            async fn calendars_list(&self) -> Result<Vec<CalendarRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, CalendarRecord>(sql(&self.q.jobs.calendars_list))
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn calendar_delete(
                &self,
                namespace: NamespaceId,
                name: &str,
                audit: Option<&AuditWrite>,
            ) -> Result<bool, Error> {
                let mut tx = self.begin_write().await?;
                let deleted = sqlx::query::<$db>(sql(&self.q.jobs.calendar_delete))
                    .bind(namespace)
                    .bind(name)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                self.commit_changed(tx, deleted == 1, audit).await
            }

            async fn backfill_insert(
                &self,
                job_id: i64,
                partition_id: i64,
                from_ms: i64,
                to_ms: i64,
                max_in_flight: i64,
                audit: Option<&AuditWrite>,
            ) -> Result<BackfillRecord, Error> {
                let mut tx = self.begin_write().await?;
                sqlx::query::<$db>(sql(&self.q.jobs.backfill_insert))
                    .bind(job_id)
                    .bind(partition_id)
                    .bind(from_ms)
                    .bind(to_ms)
                    .bind(from_ms - 1)
                    .bind(max_in_flight)
                    .execute(&mut *tx)
                    .await?;
                // The newest of the job's backfills is this one: ids only grow.
                let record =
                    sqlx::query_as::<$db, BackfillRecord>(sql(&self.q.jobs.backfills_of_job))
                        .bind(job_id)
                        .bind(1_i64)
                        .fetch_optional(&mut *tx)
                        .await?
                        .ok_or(Error::NotInitialised)?;
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(record)
            }

            async fn backfill_get(
                &self,
                backfill_id: i64,
            ) -> Result<Option<BackfillRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, BackfillRecord>(sql(&self.q.jobs.backfill_get))
                        .bind(backfill_id)
                        .fetch_optional(&self.pool)
                        .await?,
                )
            }

            async fn backfills_of_job(
                &self,
                job_id: i64,
                limit: i64,
            ) -> Result<Vec<BackfillRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, BackfillRecord>(sql(&self.q.jobs.backfills_of_job))
                        .bind(job_id)
                        .bind(limit)
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn backfills_running(
                &self,
                partitions: &[i64],
            ) -> Result<Vec<BackfillRecord>, Error> {
                let Some(query) = with_partitions(&self.q.jobs.backfills_running, partitions)
                else {
                    return Ok(Vec::new());
                };
                Ok(sqlx::query_as::<$db, BackfillRecord>(query)
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn backfill_cancel(
                &self,
                backfill_id: i64,
                audit: Option<&AuditWrite>,
            ) -> Result<bool, Error> {
                let mut tx = self.begin_write().await?;
                let cancelled = sqlx::query::<$db>(sql(&self.q.jobs.backfill_cancel))
                    .bind(backfill_id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                self.commit_changed(tx, cancelled == 1, audit).await
            }

            async fn runs_unfinished_count(
                &self,
                job_id: i64,
                range: Option<(i64, i64)>,
            ) -> Result<i64, Error> {
                let query = match range {
                    Some((from, to)) => {
                        sqlx::query_scalar::<$db, i64>(sql(&self.q.jobs.runs_unfinished_in_range))
                            .bind(job_id)
                            .bind(from)
                            .bind(to)
                    }
                    None => sqlx::query_scalar::<$db, i64>(sql(&self
                        .q
                        .jobs
                        .runs_unfinished_of_job_count))
                    .bind(job_id),
                };
                Ok(query.fetch_one(&self.pool).await?)
            }

            async fn backfill_step(
                &self,
                node_id: &str,
                step: &BackfillStep,
            ) -> Result<Option<u64>, Error> {
                retry_transient(|| self.backfill_step_once(node_id, step)).await
            }
        }

        impl $store {
            /// Calendar `name` of `namespace` as `tx` sees it.
            async fn calendar_in(
                &self,
                tx: &mut Tx<$db>,
                namespace: NamespaceId,
                name: &str,
            ) -> Result<Option<CalendarRecord>, Error> {
                self.calendar_read(&mut **tx, namespace, name).await
            }

            /// Calendar `name` of `namespace`, read through `conn` (the pool, or a
            /// transaction).
            async fn calendar_read<'e>(
                &self,
                conn: impl sqlx::Executor<'e, Database = $db>,
                namespace: NamespaceId,
                name: &str,
            ) -> Result<Option<CalendarRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, CalendarRecord>(sql(&self.q.jobs.calendar_get))
                        .bind(namespace)
                        .bind(name)
                        .fetch_optional(conn)
                        .await?,
                )
            }

            async fn backfill_step_once(
                &self,
                node_id: &str,
                step: &BackfillStep,
            ) -> Result<Option<u64>, Error> {
                let mut tx = self.begin_write().await?;
                let fired = super::rules::backfill::backfill_step(
                    &mut StoreTx {
                        store: self,
                        tx: &mut tx,
                    },
                    node_id,
                    step,
                )
                .await?;
                if fired.is_some() {
                    tx.commit().await?;
                } else {
                    tx.rollback().await?;
                }
                Ok(fired)
            }
        }

        #[async_trait]
        impl BackfillTx for StoreTx<'_, $store, Tx<$db>> {
            async fn backfill_job(&mut self, backfill_id: i64) -> Result<Option<i64>, Error> {
                Ok(
                    sqlx::query_as::<$db, BackfillRecord>(sql(&self.store.q.jobs.backfill_get))
                        .bind(backfill_id)
                        .fetch_optional(&mut **self.tx)
                        .await?
                        .map(|b| b.job_id),
                )
            }

            async fn insert_backfill_run(
                &mut self,
                node_id: &str,
                run: &BackfillRun<'_>,
            ) -> Result<bool, Error> {
                let inserted = sqlx::query::<$db>(sql(&self.store.q.jobs.run_insert))
                    .bind(run.job_id)
                    .bind(run.scheduled_at_ms)
                    .bind(run.step.partition_id)
                    .bind(run.step.epoch)
                    .bind(node_id)
                    .bind("backfill")
                    .bind(run.state.as_str())
                    .bind(run.step.priority)
                    .bind(i64::from(run.finished()))
                    .bind(run.message)
                    .bind(run.step.namespace_id)
                    .bind(run.job_id)
                    .bind(run.scheduled_at_ms)
                    .execute(&mut **self.tx)
                    .await?
                    .rows_affected();
                Ok(inserted != 0)
            }

            async fn advance_backfill(
                &mut self,
                step: &BackfillStep,
                fired: u64,
                done: bool,
            ) -> Result<bool, Error> {
                let advanced = sqlx::query::<$db>(sql(&self.store.q.jobs.backfill_advance))
                    .bind(step.cursor_ms)
                    .bind(i64::try_from(fired).unwrap_or(i64::MAX))
                    .bind(i64::from(done))
                    .bind(step.message.as_deref())
                    .bind(step.backfill_id)
                    .bind(step.expected_cursor_ms)
                    .execute(&mut **self.tx)
                    .await?
                    .rows_affected();
                Ok(advanced != 0)
            }
        }
    };
}

pub(super) use policy_store;
