//! A workflow run run again (`WorkflowStore::workflow_run_rerun`): a new run of the
//! workflow with the definition and parameters the ended one had, its succeeded steps kept
//! with their runs and outputs, the others run again.

/// Implements it for one backend's store; see `super` for the arguments.
macro_rules! workflow_rerun_store {
    ($store:ident, $db:ty) => {
        impl $store {
            async fn workflow_run_rerun_once(
                &self,
                run_id: i64,
                node_id: &str,
            ) -> Result<Option<i64>, Error> {
                let mut tx = self.begin_write().await?;
                let Some(run) = sqlx::query_as::<$db, RunRecord>(sql(&self.q.run_get))
                    .bind(run_id)
                    .fetch_optional(&mut *tx)
                    .await?
                else {
                    tx.rollback().await?;
                    return Ok(None);
                };
                let pinned =
                    sqlx::query_as::<$db, WorkflowRunRecord>(sql(&self.q.workflow_run_get))
                        .bind(run_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                // A run cancelled before it started has nothing pinned: it runs the workflow's
                // definition and the parameters it was triggered with (else the workflow's).
                let pinned = match pinned {
                    Some(pinned) => pinned,
                    None => {
                        let job = sqlx::query_as::<$db, JobRecord>(sql(&self.q.job_get))
                            .bind(run.job_id)
                            .fetch_optional(&mut *tx)
                            .await?
                            .filter(|j| j.is_workflow());
                        let definition: Option<String> = match &job {
                            Some(_) => sqlx::query_scalar::<$db, String>(sql(
                                &self.q.workflow_definition_get,
                            ))
                            .bind(run.job_id)
                            .fetch_optional(&mut *tx)
                            .await?,
                            None => None,
                        };
                        let (Some(job), Some(definition)) = (job, definition) else {
                            tx.rollback().await?;
                            return Ok(None);
                        };
                        let input: Option<String> =
                            sqlx::query_scalar::<$db, Option<String>>(sql(&self.q.run_input))
                                .bind(run_id)
                                .fetch_optional(&mut *tx)
                                .await?
                                .flatten();
                        let params = params_of(input.as_deref(), &job.args_json);
                        WorkflowRunRecord {
                            run_id,
                            workflow_id: run.job_id,
                            definition_json: definition,
                            params_json: params,
                            rerun_of: None,
                            created_at_ms: run.created_at_ms,
                        }
                    }
                };
                if run_state::UNFINISHED.contains(&run.state.as_str()) {
                    tx.rollback().await?;
                    return Err(Error::Conflict {
                        what: format!("workflow run {run_id}, which has not ended"),
                    });
                }
                let Some((_, partition_id, policy, args)) =
                    sqlx::query_as::<$db, (i64, i64, String, String)>(sql(
                        &self.q.child_job_lock_one,
                    ))
                .bind(pinned.workflow_id)
                .fetch_optional(&mut *tx)
                .await?
                else {
                    tx.rollback().await?;
                    return Err(Error::Conflict {
                        what: format!("workflow {}, which was deleted", pinned.workflow_id),
                    });
                };
                // What does not read refuses the rerun, naming it; nothing is written.
                let (definition, params) = match pinned.read() {
                    Ok(read) => read,
                    Err(e) => {
                        tx.rollback().await?;
                        return Err(e);
                    }
                };
                let input = serde_json::json!({ "params": params }).to_string();
                let now: i64 = sqlx::query_scalar::<$db, i64>(sql(&self.q.now))
                    .fetch_one(&mut *tx)
                    .await?;
                let rerun = self
                    .follow_up_runs_in(
                        &mut tx,
                        &[FollowUp {
                            job_id: pinned.workflow_id,
                            partition_id,
                            node_id,
                            trigger_kind: "manual",
                            input: &input,
                            args_json: &args,
                            policy_json: &policy,
                        }],
                        now,
                    )
                    .await?
                    .first()
                    .map(|(run_id, _)| *run_id)
                    .ok_or_else(|| Error::Conflict {
                        what: format!("workflow {}: no run was created", pinned.workflow_id),
                    })?;
                // Started here, with the definition it had: no start pass pins another.
                sqlx::query::<$db>(sql(&self.q.run_start_one))
                    .bind(rerun)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query::<$db>(sql(&self.q.workflow_run_insert))
                    .bind(rerun)
                    .bind(pinned.workflow_id)
                    .bind(&pinned.definition_json)
                    .bind(&pinned.params_json)
                    .bind(Some(run_id))
                    .execute(&mut *tx)
                    .await?;
                let before: Vec<StepRunRecord> =
                    sqlx::query_as::<$db, StepRunRecord>(sql(&self.q.step_runs_of_workflow_run))
                        .bind(run_id)
                        .fetch_all(&mut *tx)
                        .await?;
                for step in &definition.steps {
                    let kept = before
                        .iter()
                        .find(|b| b.step_name == step.name && b.state == step_state::SUCCEEDED);
                    sqlx::query::<$db>(sql(&self.q.step_run_insert_copy))
                        .bind(rerun)
                        .bind(&step.name)
                        .bind(kept.map_or(step_state::WAITING, |_| step_state::SUCCEEDED))
                        .bind(kept.and_then(|k| k.run_id))
                        .bind(kept.and_then(|k| k.output_json.clone()))
                        .execute(&mut *tx)
                        .await?;
                }
                self.advance_new_and_commit(tx, rerun, node_id).await?;
                Ok(Some(rerun))
            }
        }
    };
}

pub(super) use workflow_rerun_store;
