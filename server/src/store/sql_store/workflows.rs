//! Workflows on the three backends: the transactions around the rules of
//! `super::rules::{workflows, workflow_start}` (a workflow run starts, runs again, and moves on
//! inside the transaction that ended one of its steps' runs, which `follow_ups.rs` opens), the
//! statements those rules run, and what the API reads and cancels.

/// Implements it for one backend's store; see `super` for the arguments.
macro_rules! workflow_store {
    ($store:ident, $db:ty) => {
        impl $store {
            /// Starts one pending workflow run in its own transaction (the rule:
            /// `super::rules::workflow_start::start_workflow_run`); false if it was not
            /// pending.
            async fn workflow_run_start_once(
                &self,
                run: &RunRecord,
                default_params: &str,
            ) -> Result<bool, Error> {
                let mut tx = self.begin_write().await?;
                let started = super::rules::workflow_start::start_workflow_run(
                    &mut StoreTx {
                        store: self,
                        tx: &mut tx,
                    },
                    run,
                    default_params,
                )
                .await?;
                let Some(followed) = started else {
                    tx.rollback().await?;
                    return Ok(false);
                };
                tx.commit().await?;
                self.events
                    .note(followed.created, &followed.workflows_ended);
                Ok(true)
            }

            /// `workflow_write` once: a transient failure rolls it all back.
            async fn workflow_write_once(
                &self,
                write: &WorkflowWrite<'_>,
                audit: Option<&AuditWrite>,
            ) -> Result<Option<JobRecord>, Error> {
                let id = write.workflow_id;
                let mut tx = self.begin_write().await?;
                match write.expected_version {
                    Some(version) => {
                        if !self.update_job_in(&mut tx, id, version, write.row).await? {
                            return Ok(None);
                        }
                    }
                    None => {
                        let inserted = self
                            .insert_job_in(&mut tx, id, write.partition_id, write.row, false)
                            .await;
                        if let Err(err) = inserted {
                            tx.rollback().await?;
                            return Err(self.insert_refused(err, id, write.row).await);
                        }
                    }
                }
                for (step_id, step) in write.steps {
                    let inserted = self
                        .insert_job_in(&mut tx, *step_id, write.partition_id, step, false)
                        .await;
                    if let Err(err) = inserted {
                        tx.rollback().await?;
                        return Err(self.insert_refused(err, *step_id, step).await);
                    }
                }
                sqlx::query::<$db>(sql(&self.q.follow_ups.workflow_definition_delete))
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query::<$db>(sql(&self.q.follow_ups.workflow_definition_insert))
                    .bind(id)
                    .bind(write.definition_json)
                    .execute(&mut *tx)
                    .await?;
                // Started only with its steps and definition stored: a run must find them.
                if write.start {
                    sqlx::query::<$db>(sql(&self.q.jobs.job_start))
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                }
                self.job_changed_in(tx, id, audit).await
            }

            /// Runs an ended workflow run again in one transaction (the rule:
            /// `super::rules::workflow_start::rerun_workflow_run`); an error writes nothing.
            async fn workflow_run_rerun_once(
                &self,
                run_id: i64,
                node_id: &str,
                audit: Option<&AuditWrite>,
            ) -> Result<Option<i64>, Error> {
                let mut tx = self.begin_write().await?;
                let rerun = super::rules::workflow_start::rerun_workflow_run(
                    &mut StoreTx {
                        store: self,
                        tx: &mut tx,
                    },
                    run_id,
                    node_id,
                )
                .await;
                let Some((rerun, followed)) = rerun? else {
                    tx.rollback().await?;
                    return Ok(None);
                };
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                self.events
                    .note(followed.created, &followed.workflows_ended);
                Ok(Some(rerun))
            }
        }

        #[async_trait]
        impl WorkflowTx for StoreTx<'_, $store, Tx<$db>> {
            async fn running_steps_of_runs(
                &mut self,
                run_ids: &[i64],
            ) -> Result<Vec<StepRunRecord>, Error> {
                let Some(query) =
                    with_partitions(&self.store.q.follow_ups.step_runs_of_runs, run_ids)
                else {
                    return Ok(Vec::new());
                };
                rows_as(&sqlx::raw_sql(query).fetch_all(&mut **self.tx).await?)
            }

            async fn lock_run(&mut self, run_id: i64) -> Result<Option<String>, Error> {
                Ok(
                    sqlx::query_scalar::<$db, String>(sql(&self.store.q.dispatch.run_lock))
                        .bind(run_id)
                        .fetch_optional(&mut **self.tx)
                        .await?,
                )
            }

            async fn end_steps(
                &mut self,
                workflow_run_id: i64,
                ends: &[StepEnd<'_>],
            ) -> Result<(), Error> {
                // Steps that ended without an output are recorded in one statement per state
                // (a fan-in's parts settled together cost one), the others one each.
                let mut quiet: std::collections::BTreeMap<&str, Vec<&str>> =
                    std::collections::BTreeMap::new();
                for end in ends {
                    let Some(output) = &end.output else {
                        quiet
                            .entry(end.state.as_str())
                            .or_default()
                            .push(end.step_name);
                        continue;
                    };
                    sqlx::query::<$db>(sql(&self.store.q.follow_ups.step_run_end))
                        .bind(end.state.as_str())
                        .bind(output)
                        .bind(workflow_run_id)
                        .bind(end.step_name)
                        .execute(&mut **self.tx)
                        .await?;
                }
                for (state, names) in quiet {
                    let mut end = sqlx::QueryBuilder::<$db>::new("UPDATE step_runs SET state = ");
                    end.push_bind(state)
                        .push(", output_json = NULL, updated_at_ms = ")
                        .push(&*self.store.q.jobs.now_expr)
                        .push(" WHERE workflow_run_id = ")
                        .push_bind(workflow_run_id)
                        .push(" AND state = 'running' AND step_name IN (");
                    let mut listed = end.separated(", ");
                    for name in names {
                        listed.push_bind(name);
                    }
                    end.push(")");
                    end.build().execute(&mut **self.tx).await?;
                }
                Ok(())
            }

            async fn pinned_run(
                &mut self,
                run_id: i64,
            ) -> Result<Option<WorkflowRunRecord>, Error> {
                Ok(sqlx::query_as::<$db, WorkflowRunRecord>(sql(&self
                    .store
                    .q
                    .follow_ups
                    .workflow_run_get))
                .bind(run_id)
                .fetch_optional(&mut **self.tx)
                .await?)
            }

            async fn steps_of(
                &mut self,
                workflow_run_id: i64,
            ) -> Result<Vec<StepRunRecord>, Error> {
                Ok(sqlx::query_as::<$db, StepRunRecord>(sql(&self
                    .store
                    .q
                    .follow_ups
                    .step_runs_of_workflow_run))
                .bind(workflow_run_id)
                .fetch_all(&mut **self.tx)
                .await?)
            }

            async fn close_waiting_step(
                &mut self,
                workflow_run_id: i64,
                step_name: &str,
                state: StepState,
                output: Option<&str>,
            ) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.store.q.follow_ups.step_run_unstarted))
                    .bind(state.as_str())
                    .bind(output)
                    .bind(workflow_run_id)
                    .bind(step_name)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }

            async fn start_steps(
                &mut self,
                workflow_run_id: i64,
                started: &[(&str, i64)],
            ) -> Result<(), Error> {
                if started.is_empty() {
                    return Ok(());
                }
                // One statement for the steps started: the run each now has.
                let mut start = sqlx::QueryBuilder::<$db>::new(
                    "UPDATE step_runs SET state = 'running', updated_at_ms = ",
                );
                start
                    .push(&*self.store.q.jobs.now_expr)
                    .push(", run_id = CASE step_name");
                for (name, run_id) in started {
                    start
                        .push(" WHEN ")
                        .push_bind(*name)
                        .push(" THEN ")
                        .push_bind(*run_id);
                }
                start
                    .push(" END WHERE workflow_run_id = ")
                    .push_bind(workflow_run_id)
                    .push(" AND state = 'waiting' AND step_name IN (");
                let mut names = start.separated(", ");
                for (name, _) in started {
                    names.push_bind(*name);
                }
                start.push(")");
                start.build().execute(&mut **self.tx).await?;
                Ok(())
            }
        }

        #[async_trait]
        impl WorkflowStartTx for StoreTx<'_, $store, Tx<$db>> {
            async fn start_run_if_pending(&mut self, run_id: i64) -> Result<bool, Error> {
                let moved = sqlx::query::<$db>(sql(&self.store.q.follow_ups.run_start_one))
                    .bind(run_id)
                    .execute(&mut **self.tx)
                    .await?
                    .rows_affected();
                Ok(moved != 0)
            }

            async fn run_head(&mut self, run_id: i64) -> Result<Option<RunHead>, Error> {
                Ok(
                    sqlx::query_as::<$db, RunRecord>(sql(&self.store.q.dispatch.run_get))
                        .bind(run_id)
                        .fetch_optional(&mut **self.tx)
                        .await?
                        .map(|run| RunHead {
                            job_id: run.job_id,
                            node_id: run.node_id,
                            state: run.state,
                            flow_key: run.flow_key,
                        }),
                )
            }

            async fn run_input(&mut self, run_id: i64) -> Result<Option<String>, Error> {
                Ok(sqlx::query_scalar::<$db, Option<String>>(sql(&self
                    .store
                    .q
                    .follow_ups
                    .run_input))
                .bind(run_id)
                .fetch_optional(&mut **self.tx)
                .await?
                .flatten())
            }

            async fn workflow_definition(
                &mut self,
                workflow_id: i64,
            ) -> Result<Option<String>, Error> {
                Ok(sqlx::query_scalar::<$db, String>(sql(&self
                    .store
                    .q
                    .follow_ups
                    .workflow_definition_get))
                .bind(workflow_id)
                .fetch_optional(&mut **self.tx)
                .await?)
            }

            async fn workflow_params(&mut self, workflow_id: i64) -> Result<Option<String>, Error> {
                Ok(
                    sqlx::query_as::<$db, JobRecord>(sql(&self.store.q.jobs.job_get))
                        .bind(workflow_id)
                        .fetch_optional(&mut **self.tx)
                        .await?
                        .filter(|job| job.is_workflow())
                        .map(|job| job.args_json),
                )
            }

            async fn insert_pinned_run(&mut self, pinned: &WorkflowRunRecord) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.store.q.follow_ups.workflow_run_insert))
                    .bind(pinned.run_id)
                    .bind(pinned.workflow_id)
                    .bind(&pinned.definition_json)
                    .bind(&pinned.params_json)
                    .bind(pinned.rerun_of)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }

            async fn insert_steps(
                &mut self,
                workflow_run_id: i64,
                steps: &[NewStep<'_>],
            ) -> Result<(), Error> {
                for step in steps {
                    sqlx::query::<$db>(sql(&self.store.q.follow_ups.step_run_insert_copy))
                        .bind(workflow_run_id)
                        .bind(step.step_name)
                        .bind(step.state.as_str())
                        .bind(step.run_id)
                        .bind(step.output_json)
                        .execute(&mut **self.tx)
                        .await?;
                }
                Ok(())
            }
        }

        #[async_trait]
        impl WorkflowStore for $store {
            async fn workflow_run_rerun(
                &self,
                run_id: i64,
                node_id: &str,
                audit: Option<&AuditWrite>,
            ) -> Result<Option<i64>, Error> {
                retry_transient(|| self.workflow_run_rerun_once(run_id, node_id, audit)).await
            }

            async fn workflow_write(
                &self,
                write: &WorkflowWrite<'_>,
                audit: Option<&AuditWrite>,
            ) -> Result<Option<JobRecord>, Error> {
                retry_transient(|| self.workflow_write_once(write, audit)).await
            }

            async fn workflow_definition(&self, workflow_id: i64) -> Result<Option<String>, Error> {
                Ok(sqlx::query_scalar::<$db, String>(sql(&self
                    .q
                    .follow_ups
                    .workflow_definition_get))
                .bind(workflow_id)
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn workflow_runs_start(
                &self,
                runs: &[(RunRecord, String)],
            ) -> Result<usize, Error> {
                let mut started = 0;
                for (run, params) in runs {
                    if retry_transient(|| self.workflow_run_start_once(run, params)).await? {
                        started += 1;
                    }
                }
                Ok(started)
            }

            async fn workflow_run_get(
                &self,
                run_id: i64,
            ) -> Result<Option<(WorkflowRunRecord, Vec<StepRunRecord>)>, Error> {
                let Some(pinned) = sqlx::query_as::<$db, WorkflowRunRecord>(sql(&self
                    .q
                    .follow_ups
                    .workflow_run_get))
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await?
                else {
                    return Ok(None);
                };
                let steps = sqlx::query_as::<$db, StepRunRecord>(sql(&self
                    .q
                    .follow_ups
                    .step_runs_of_workflow_run))
                .bind(run_id)
                .fetch_all(&self.pool)
                .await?;
                Ok(Some((pinned, steps)))
            }

            async fn workflow_run_cancel(
                &self,
                run_id: i64,
                audit: Option<&AuditWrite>,
            ) -> Result<Option<Vec<AttemptRecord>>, Error> {
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    let cancelled = super::rules::run_end::cancel_workflow_run(
                        &mut StoreTx {
                            store: self,
                            tx: &mut tx,
                        },
                        run_id,
                    )
                    .await?;
                    let Some((running, followed)) = cancelled else {
                        tx.rollback().await?;
                        return Ok(None);
                    };
                    self.audit_in(&mut tx, audit).await?;
                    tx.commit().await?;
                    self.events
                        .note(followed.created, &followed.workflows_ended);
                    Ok(Some(running))
                })
                .await
            }
        }

        #[async_trait]
        impl RunEndTx for StoreTx<'_, $store, Tx<$db>> {
            async fn cancel_attempts_of_run(
                &mut self,
                run_id: i64,
                why: &str,
            ) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.store.q.dispatch.attempts_cancel_of_run))
                    .bind(why)
                    .bind(run_id)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }
        }
    };
}

pub(super) use workflow_store;
