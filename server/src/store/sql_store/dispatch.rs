//! `DispatchStore` on the three backends: executors, runs and attempts.

/// Implements it for one backend's store; see `super` for the arguments.
macro_rules! dispatch_store {
    ($store:ident, $db:ty, $backend:expr) => {
        impl $store {
            /// Applies `query` (one executor's row, by id) with `audit`; whether it changed it.
            async fn executor_change(
                &self,
                query: &std::sync::Arc<str>,
                executor_id: &str,
                audit: Option<&AuditWrite>,
            ) -> Result<bool, Error> {
                let mut tx = self.begin_write().await?;
                let changed = sqlx::query::<$db>(sql(query))
                    .bind(executor_id)
                    .execute(&mut *tx)
                    .await?;
                self.commit_changed(tx, changed.rows_affected() == 1, audit)
                    .await
            }

            /// The smallest id of the runs finished in `[since_ms, until_ms)`, if any.
            async fn runs_first_id_finished(
                &self,
                since_ms: i64,
                until_ms: i64,
            ) -> Result<Option<i64>, Error> {
                Ok(sqlx::query_scalar::<$db, Option<i64>>(sql(&self
                    .q
                    .dispatch
                    .runs_first_id_finished))
                .bind(since_ms)
                .bind(until_ms)
                .fetch_one(&self.pool)
                .await?)
            }
        }

        #[async_trait]
        impl DispatchStore for $store {
            async fn executor_register(
                &self,
                executor: &ExecutorRegistration,
                audit: Option<&AuditWrite>,
            ) -> Result<RegistrationOutcome, Error> {
                let mut tx = self.begin_write().await?;
                sqlx::query::<$db>(sql(&self.q.dispatch.app_insert))
                    .bind(&executor.app)
                    .bind(executor.namespace.unwrap_or_default())
                    .bind(&executor.app)
                    .execute(&mut *tx)
                    .await?;
                if let Some(namespace) = executor.namespace {
                    let owner =
                        sqlx::query_scalar::<$db, NamespaceId>(sql(&self.q.dispatch.app_namespace))
                            .bind(&executor.app)
                            .fetch_optional(&mut *tx)
                            .await?;
                    if owner != Some(namespace) {
                        return Ok(RegistrationOutcome::AppOfAnotherNamespace);
                    }
                }
                let made = match &executor.owner_was {
                    Some(owner) => {
                        sqlx::query::<$db>(sql(&self.q.dispatch.executor_update))
                            .bind(&executor.app)
                            .bind(&executor.address)
                            .bind(executor.weight)
                            .bind(executor.capacity)
                            .bind(i64::from(executor.accepts_batch))
                            .bind(&executor.protocol)
                            .bind(executor.lease_ms)
                            .bind(&executor.registered_by)
                            .bind(&executor.executor_id)
                            .bind(owner)
                            .bind(owner)
                            .execute(&mut *tx)
                            .await?
                            .rows_affected()
                            == 1
                    }
                    None => {
                        let inserted = sqlx::query::<$db>(sql(&self.q.dispatch.executor_insert))
                            .bind(&executor.executor_id)
                            .bind(&executor.app)
                            .bind(&executor.address)
                            .bind(executor.weight)
                            .bind(executor.capacity)
                            .bind(i64::from(executor.accepts_batch))
                            .bind(&executor.protocol)
                            .bind(executor.lease_ms)
                            .bind(&executor.registered_by)
                            .execute(&mut *tx)
                            .await
                            .map_err(Error::from);
                        match inserted {
                            Ok(_) => true,
                            Err(err) if err.is_unique_violation() => false,
                            Err(err) => return Err(err),
                        }
                    }
                };
                if !made {
                    return Ok(RegistrationOutcome::Raced);
                }
                sqlx::query::<$db>(sql(&self.q.dispatch.handlers_delete))
                    .bind(&executor.executor_id)
                    .execute(&mut *tx)
                    .await?;
                for (name, description) in &executor.handlers {
                    sqlx::query::<$db>(sql(&self.q.dispatch.handler_insert))
                        .bind(&executor.executor_id)
                        .bind(name)
                        .bind(&executor.app)
                        .bind(description)
                        .execute(&mut *tx)
                        .await?;
                }
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(RegistrationOutcome::Registered)
            }

            async fn executor_owner(
                &self,
                executor_id: &str,
            ) -> Result<Option<ExecutorOwner>, Error> {
                Ok(
                    sqlx::query_as::<$db, ExecutorOwner>(sql(&self.q.dispatch.executor_owner))
                        .bind(executor_id)
                        .fetch_optional(&self.pool)
                        .await?,
                )
            }

            async fn app_namespace(&self, app: &str) -> Result<Option<NamespaceId>, Error> {
                Ok(
                    sqlx::query_scalar::<$db, NamespaceId>(sql(&self.q.dispatch.app_namespace))
                        .bind(app)
                        .fetch_optional(&self.pool)
                        .await?,
                )
            }

            async fn executor_heartbeat(
                &self,
                executor_id: &str,
                in_flight: i64,
                draining: bool,
            ) -> Result<bool, Error> {
                let beat = sqlx::query::<$db>(sql(&self.q.dispatch.executor_heartbeat))
                    .bind(in_flight)
                    .bind(i64::from(draining))
                    .bind(executor_id)
                    .execute(&self.pool)
                    .await?;
                Ok(beat.rows_affected() == 1)
            }

            async fn executor_drain(
                &self,
                executor_id: &str,
                drain: bool,
                audit: Option<&AuditWrite>,
            ) -> Result<bool, Error> {
                let query = if drain {
                    &self.q.dispatch.executor_set_drained
                } else {
                    &self.q.dispatch.executor_set_active
                };
                self.executor_change(query, executor_id, audit).await
            }

            async fn executor_leave(
                &self,
                executor_id: &str,
                audit: Option<&AuditWrite>,
            ) -> Result<bool, Error> {
                self.executor_change(&self.q.dispatch.executor_leave, executor_id, audit)
                    .await
            }

            async fn executor_remove(
                &self,
                executor_id: &str,
                audit: Option<&AuditWrite>,
            ) -> Result<bool, Error> {
                self.executor_change(&self.q.dispatch.executor_remove, executor_id, audit)
                    .await
            }

            async fn executors_list(&self, app: Option<&str>) -> Result<ExecutorList, Error> {
                let executors =
                    sqlx::query_as::<$db, ExecutorRecord>(sql(&self.q.dispatch.executors_all))
                        .bind(app)
                        .bind(app)
                        .fetch_all(&self.pool)
                        .await?;
                let handlers =
                    sqlx::query_as::<$db, (String, String)>(sql(&self.q.dispatch.handlers_all))
                        .bind(app)
                        .bind(app)
                        .fetch_all(&self.pool)
                        .await?;
                let now_ms = self.now_ms().await?;
                Ok(ExecutorList {
                    executors,
                    handlers,
                    now_ms,
                })
            }

            async fn runs_pending(
                &self,
                partitions: &[i64],
                after_run_id: i64,
                limit: i64,
            ) -> Result<Vec<RunRecord>, Error> {
                let Some(query) = with_partitions(&self.q.dispatch.runs_pending, partitions) else {
                    return Ok(Vec::new());
                };
                Ok(sqlx::query_as::<$db, RunRecord>(query)
                    .bind(after_run_id)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn runs_start(
                &self,
                runs: &[(RunRecord, Vec<NewAttempt>)],
            ) -> Result<usize, Error> {
                if runs.is_empty() {
                    return Ok(0);
                }
                // A transaction that lost a deadlock (on Galera, certification) is tried again.
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    let started = super::rules::run_start::start_runs(
                        &mut StoreTx {
                            store: self,
                            tx: &mut tx,
                        },
                        runs,
                    )
                    .await?;
                    if started == 0 {
                        tx.rollback().await?;
                    } else {
                        tx.commit().await?;
                    }
                    Ok(started)
                })
                .await
            }

            async fn run_end(
                &self,
                run_id: i64,
                state: RunState,
                message: Option<&str>,
            ) -> Result<bool, Error> {
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    let ended = super::rules::run_end::end_run(
                        &mut StoreTx {
                            store: self,
                            tx: &mut tx,
                        },
                        run_id,
                        state,
                        message,
                    )
                    .await?;
                    tx.commit().await?;
                    let Some(followed) = ended else {
                        return Ok(false);
                    };
                    self.events
                        .note(followed.created, &followed.workflows_ended);
                    Ok(true)
                })
                .await
            }

            async fn run_end_with_attempts(
                &self,
                run_id: i64,
                state: RunState,
                message: &str,
                audit: Option<&AuditWrite>,
            ) -> Result<Option<Vec<AttemptRecord>>, Error> {
                let mut tx = self.begin_write().await?;
                let ended = super::rules::run_end::end_run_with_attempts(
                    &mut StoreTx {
                        store: self,
                        tx: &mut tx,
                    },
                    run_id,
                    state,
                    message,
                )
                .await?;
                let Some((running, followed)) = ended else {
                    tx.rollback().await?;
                    return Ok(None);
                };
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                self.events
                    .note(followed.created, &followed.workflows_ended);
                Ok(Some(running))
            }

            async fn run_get(&self, run_id: i64) -> Result<Option<RunRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, RunRecord>(sql(&self.q.dispatch.run_get))
                        .bind(run_id)
                        .fetch_optional(&self.pool)
                        .await?,
                )
            }

            async fn runs_list(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, Error> {
                let query = if filter.oldest_first {
                    &self.q.dispatch.runs_by_id_asc
                } else {
                    &self.q.dispatch.runs_by_id_desc
                };
                Ok(sqlx::query_as::<$db, RunRecord>(sql(query))
                    .bind(filter.namespace)
                    .bind(filter.namespace)
                    .bind(filter.job_id)
                    .bind(filter.job_id)
                    .bind(filter.state.as_deref())
                    .bind(filter.state.as_deref())
                    .bind(filter.after_id)
                    .bind(filter.after_id)
                    .bind(filter.limit)
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn attempts_of_run(&self, run_id: i64) -> Result<Vec<AttemptRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, AttemptRecord>(sql(&self.q.dispatch.attempts_of_run))
                        .bind(run_id)
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn attempt_get(&self, attempt_id: i64) -> Result<Option<AttemptRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, AttemptRecord>(sql(&self.q.dispatch.attempt_get))
                        .bind(attempt_id)
                        .fetch_optional(&self.pool)
                        .await?,
                )
            }

            async fn attempts_due(
                &self,
                partitions: &[i64],
                ahead_ms: i64,
                after: Option<(i64, i64)>,
                limit: i64,
            ) -> Result<Vec<DueAttempt>, Error> {
                let Some(query) = with_partitions(&self.q.dispatch.attempts_due, partitions) else {
                    return Ok(Vec::new());
                };
                let (after_due, after_id) = after.unwrap_or((i64::MIN, i64::MIN));
                // The horizon, read once: every attempt of an instant is in or out together.
                let now: i64 = sqlx::query_scalar::<$db, i64>(sql(&self.q.cluster.now))
                    .fetch_one(&self.pool)
                    .await?;
                let due = sqlx::query_as::<$db, DueAttempt>(query)
                    .bind(now.saturating_add(ahead_ms))
                    .bind(after_due)
                    .bind(after_due)
                    .bind(after_id)
                    .bind(limit);
                if $backend != Backend::Postgres {
                    return Ok(due.fetch_all(&self.pool).await?);
                }
                // The slice must be read in the queue index's order, stopping at `limit`.
                // PostgreSQL without statistics (a server whose autovacuum is off never
                // analyzes) guesses few pending attempts and bitmap-scans and sorts all of
                // them instead: with 1.3 million pending that took 1.46 s against 117 ms in
                // index order, and past the statement timeout delivery stopped altogether.
                let mut tx = self.pool.begin().await?;
                sqlx::query::<$db>("SET LOCAL enable_bitmapscan = off")
                    .execute(&mut *tx)
                    .await?;
                let rows = due.fetch_all(&mut *tx).await?;
                tx.commit().await?;
                Ok(rows)
            }

            async fn attempts_expired(
                &self,
                partitions: &[i64],
                limit: i64,
            ) -> Result<Vec<AttemptRecord>, Error> {
                let Some(query) = with_partitions(&self.q.dispatch.attempts_expired, partitions)
                else {
                    return Ok(Vec::new());
                };
                Ok(sqlx::query_as::<$db, AttemptRecord>(query)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn attempts_orphaned(
                &self,
                partitions: &[i64],
                lease_ms: i64,
                limit: i64,
            ) -> Result<Vec<AttemptRecord>, Error> {
                let Some(query) = with_partitions(&self.q.dispatch.attempts_orphaned, partitions)
                else {
                    return Ok(Vec::new());
                };
                Ok(sqlx::query_as::<$db, AttemptRecord>(query)
                    .bind(lease_ms)
                    .bind(lease_ms)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn attempts_seen(
                &self,
                executor_id: &str,
                attempt_ids: &[i64],
            ) -> Result<(), Error> {
                let Some(query) = with_partitions(&self.q.dispatch.attempts_seen, attempt_ids)
                else {
                    return Ok(());
                };
                sqlx::query::<$db>(query)
                    .bind(executor_id)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn attempt_dispatched(
                &self,
                attempt_id: i64,
                executor_id: &str,
                timeout_ms: i64,
            ) -> Result<bool, Error> {
                let marked = sqlx::query::<$db>(sql(&self.q.dispatch.attempt_dispatched))
                    .bind(executor_id)
                    .bind(timeout_ms)
                    .bind(timeout_ms)
                    .bind(attempt_id)
                    .execute(&self.pool)
                    .await?;
                Ok(marked.rows_affected() == 1)
            }

            async fn attempt_prefer(
                &self,
                attempt_id: i64,
                executor_id: &str,
            ) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.q.dispatch.attempt_prefer))
                    .bind(executor_id)
                    .bind(attempt_id)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn attempt_undispatched(
                &self,
                attempt_id: i64,
                executor_id: &str,
            ) -> Result<bool, Error> {
                let returned = sqlx::query::<$db>(sql(&self.q.dispatch.attempt_undispatched))
                    .bind(attempt_id)
                    .bind(executor_id)
                    .execute(&self.pool)
                    .await?;
                Ok(returned.rows_affected() == 1)
            }

            async fn attempts_dispatched(
                &self,
                attempt_ids: &[i64],
                executor_id: &str,
                timeout_ms: i64,
            ) -> Result<u64, Error> {
                let Some(query) =
                    with_partitions(&self.q.dispatch.attempts_dispatched_many, attempt_ids)
                else {
                    return Ok(0);
                };
                let marked = sqlx::query::<$db>(query)
                    .bind(executor_id)
                    .bind(timeout_ms)
                    .bind(timeout_ms)
                    .execute(&self.pool)
                    .await?;
                Ok(marked.rows_affected())
            }

            async fn attempts_succeed(
                &self,
                executor_id: &str,
                attempt_ids: &[i64],
                outputs: &[(i64, String)],
                flow_keys: &[String],
            ) -> Result<u64, Error> {
                if attempt_ids.is_empty() {
                    return Ok(0);
                }
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    let mut store_tx = StoreTx {
                        store: self,
                        tx: &mut tx,
                    };
                    let runs = super::rules::attempt_end::succeed_plainly(
                        &mut store_tx,
                        executor_id,
                        &attempt_ids,
                        outputs,
                    )
                    .await?;
                    // The keys the runs were admitted under, beside those their offers give
                    // (a job's flow policy or arguments edited since differ): read only when
                    // the settle has runs of flow keys.
                    let mut keys = flow_keys.to_vec();
                    if !keys.is_empty()
                        && let Some(read) =
                            with_partitions(&self.q.flow.runs_flow_keys_of_attempts, &attempt_ids)
                    {
                        keys.extend(
                            sqlx::query_scalar::<$db, String>(read)
                                .fetch_all(&mut *tx)
                                .await?,
                        );
                    }
                    super::rules::flow::admit_all(
                        &mut StoreTx {
                            store: self,
                            tx: &mut tx,
                        },
                        keys,
                    )
                    .await?;
                    tx.commit().await?;
                    Ok(runs)
                })
                .await
            }

            async fn attempts_end(
                &self,
                ends: &[(i64, AttemptEnd)],
            ) -> Result<Vec<AttemptEnded>, Error> {
                // One lock order for every batch, so two batches cannot deadlock.
                let mut ordered = ends.to_vec();
                ordered.sort_by_key(|(id, _)| *id);
                let ended = retry_transient(|| self.attempts_end_once(&ordered)).await?;
                // Back in the caller's order.
                let by_id: std::collections::HashMap<i64, AttemptEnded> =
                    ordered.iter().map(|(id, _)| *id).zip(ended).collect();
                Ok(ends
                    .iter()
                    .map(|(id, _)| by_id.get(id).cloned().unwrap_or(AttemptEnded::AlreadyEnded))
                    .collect())
            }

            async fn executor_loads(&self) -> Result<Vec<ExecutorLoad>, Error> {
                Ok(
                    sqlx::query_as::<$db, ExecutorLoad>(sql(&self.q.dispatch.executor_loads))
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn xxl_jobs_running(&self) -> Result<Vec<XxlJobRunning>, Error> {
                Ok(
                    sqlx::query_as::<$db, XxlJobRunning>(sql(&self.q.dispatch.xxl_jobs_running))
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn runs_finished_by_minute(
                &self,
                since_ms: i64,
                until_ms: i64,
                late_ms: i64,
            ) -> Result<Vec<MinuteCount>, Error> {
                let Some(first_run) = self.runs_first_id_finished(since_ms, until_ms).await? else {
                    return Ok(Vec::new());
                };
                Ok(sqlx::query_as::<$db, MinuteCount>(sql(&self
                    .q
                    .dispatch
                    .runs_finished_by_minute))
                .bind(late_ms)
                .bind(first_run)
                .bind(since_ms)
                .bind(until_ms)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn runs_late(
                &self,
                since_ms: i64,
                until_ms: i64,
                late_ms: i64,
                limit: i64,
            ) -> Result<Vec<LateRun>, Error> {
                let Some(first_run) = self.runs_first_id_finished(since_ms, until_ms).await? else {
                    return Ok(Vec::new());
                };
                Ok(
                    sqlx::query_as::<$db, LateRun>(sql(&self.q.dispatch.runs_late))
                        .bind(first_run)
                        .bind(since_ms)
                        .bind(until_ms)
                        .bind(late_ms)
                        .bind(limit)
                        .fetch_all(&self.pool)
                        .await?,
                )
            }
        }
    };
}

pub(super) use dispatch_store;
