//! Workflows on the three backends: a workflow run starts (its definition pinned, a row per
//! step, its first steps' runs), and each step run's end moves its workflow run on inside the
//! transaction that ended it (`follow_ups.rs` calls `steps_ended_in`): the workflow run's row
//! is locked, the step recorded, and `workflows::advance` says which steps run, which are
//! skipped, and whether the workflow run ends. So each step's run is created once, and no
//! node can die between a step's end and what follows it.

use crate::store::{StepRunRecord, WorkflowRunRecord};

/// Implements it for one backend's store; see `super` for the arguments.
macro_rules! workflow_store {
    ($store:ident, $db:ty) => {
        impl $store {
            /// Records the ends of the step runs among `ended` and moves their workflow runs
            /// on (in workflow run order); returns how many runs it created and the workflow
            /// runs that ended.
            async fn steps_ended_in(
                &self,
                tx: &mut Tx<$db>,
                ended: &[EndedRun],
            ) -> Result<(usize, Vec<EndedRun>), Error> {
                let ids: Vec<i64> = ended
                    .iter()
                    .filter(|r| r.may_be_step)
                    .map(|r| r.run_id)
                    .collect();
                let Some(query) = with_partitions(&self.q.step_runs_of_runs, &ids) else {
                    return Ok((0, Vec::new()));
                };
                let steps: Vec<StepRunRecord> =
                    rows_as(&sqlx::raw_sql(query).fetch_all(&mut **tx).await?)?;
                let mut created = 0;
                let mut workflows_ended = Vec::new();
                let mut i = 0;
                while i < steps.len() {
                    let workflow_run = steps[i].workflow_run_id;
                    let node_id: String = sqlx::query_scalar::<$db, String>(sql(&self.q.run_lock))
                        .bind(workflow_run)
                        .fetch_optional(&mut **tx)
                        .await?
                        .unwrap_or_default();
                    // Steps that ended without an output are recorded in one statement per
                    // state (a fan-in's parts settled together cost one), the others one
                    // each.
                    let mut quiet: std::collections::BTreeMap<&str, Vec<&str>> =
                        std::collections::BTreeMap::new();
                    while i < steps.len() && steps[i].workflow_run_id == workflow_run {
                        let step = &steps[i];
                        i += 1;
                        let Some(run) = ended.iter().find(|r| Some(r.run_id) == step.run_id) else {
                            continue;
                        };
                        let state = step_state::of_run(&run.state);
                        let output = run
                            .output
                            .as_ref()
                            .map(|o| o.to_string())
                            .filter(|o| o.len() <= CHILD_OUTPUT_CAP);
                        if output.is_none() {
                            quiet.entry(state).or_default().push(&step.step_name);
                            continue;
                        }
                        sqlx::query::<$db>(sql(&self.q.step_run_end))
                            .bind(state)
                            .bind(output)
                            .bind(workflow_run)
                            .bind(&step.step_name)
                            .execute(&mut **tx)
                            .await?;
                    }
                    for (state, names) in quiet {
                        let mut end =
                            sqlx::QueryBuilder::<$db>::new("UPDATE step_runs SET state = ");
                        end.push_bind(state)
                            .push(", output_json = NULL, updated_at_ms = ")
                            .push(&*self.q.now_expr)
                            .push(" WHERE workflow_run_id = ")
                            .push_bind(workflow_run)
                            .push(" AND state = 'running' AND step_name IN (");
                        let mut listed = end.separated(", ");
                        for name in names {
                            listed.push_bind(name);
                        }
                        end.push(")");
                        end.build().execute(&mut **tx).await?;
                    }
                    let (made, over) = self.workflow_advance_in(tx, workflow_run, &node_id).await?;
                    created += made;
                    workflows_ended.extend(over);
                }
                Ok((created, workflows_ended))
            }

            /// Moves the workflow run `workflow_run` (locked by the caller) on from its steps'
            /// states: runs the steps now ready, records the skipped ones, and ends it when no
            /// step is left. Returns how many runs it created, and itself if it ended.
            async fn workflow_advance_in(
                &self,
                tx: &mut Tx<$db>,
                workflow_run: i64,
                node_id: &str,
            ) -> Result<(usize, Option<EndedRun>), Error> {
                let Some(pinned) =
                    sqlx::query_as::<$db, WorkflowRunRecord>(sql(&self.q.workflow_run_get))
                        .bind(workflow_run)
                        .fetch_optional(&mut **tx)
                        .await?
                else {
                    return Ok((0, None));
                };
                let (definition, params) = match pinned.read() {
                    Ok(read) => read,
                    Err(e) => {
                        // Never zero steps or no params in its place: the run fails, naming
                        // what does not read.
                        let message = e.to_string();
                        let over = self
                            .workflow_run_end_in(tx, &pinned, node_id, "failed", Some(&message))
                            .await?;
                        return Ok((0, over));
                    }
                };
                let mut created = 0;
                loop {
                    let steps: Vec<StepRunRecord> =
                        sqlx::query_as::<$db, StepRunRecord>(sql(&self
                            .q
                            .step_runs_of_workflow_run))
                        .bind(workflow_run)
                        .fetch_all(&mut **tx)
                        .await?;
                    let states: HashMap<String, String> = steps
                        .iter()
                        .map(|s| (s.step_name.clone(), s.state.clone()))
                        .collect();
                    let next = advance::next(&definition, &states);
                    for name in &next.skipped {
                        sqlx::query::<$db>(sql(&self.q.step_run_unstarted))
                            .bind(step_state::SKIPPED)
                            .bind(None::<String>)
                            .bind(workflow_run)
                            .bind(name)
                            .execute(&mut **tx)
                            .await?;
                    }
                    // The ready steps' jobs, locked in id order in one statement, and the
                    // clock once: a fan-out of 50 costs its inserts, not 100 reads more.
                    let mut job_ids: Vec<i64> = next
                        .ready
                        .iter()
                        .filter_map(|name| definition.steps.iter().find(|s| &s.name == name))
                        .map(|s| s.job_id)
                        .collect();
                    job_ids.sort_unstable();
                    job_ids.dedup();
                    let jobs: Vec<(i64, i64, String, String)> =
                        match with_partitions(&self.q.child_jobs_lock, &job_ids) {
                            Some(lock) => {
                                rows_as(&sqlx::raw_sql(lock).fetch_all(&mut **tx).await?)?
                            }
                            None => Vec::new(),
                        };
                    let now: i64 = sqlx::query_scalar::<$db, i64>(sql(&self.q.now))
                        .fetch_one(&mut **tx)
                        .await?;
                    // A step whose job is gone fails at once; the rule then runs again.
                    let mut failed_now = false;
                    // (step name, its job's row, its run's input)
                    let mut starting = Vec::with_capacity(next.ready.len());
                    for name in &next.ready {
                        let Some(step) = definition.steps.iter().find(|s| &s.name == name) else {
                            continue;
                        };
                        let Some(job) = jobs.iter().find(|j| j.0 == step.job_id) else {
                            let why = serde_json::json!(format!("job {} is gone", step.job_id));
                            sqlx::query::<$db>(sql(&self.q.step_run_unstarted))
                                .bind(step_state::FAILED)
                                .bind(Some(why.to_string()))
                                .bind(workflow_run)
                                .bind(name)
                                .execute(&mut **tx)
                                .await?;
                            failed_now = true;
                            continue;
                        };
                        let input = step_input(&pinned, &params, name, &step.needs, &steps);
                        starting.push((name, job, input));
                    }
                    let follow_ups: Vec<FollowUp<'_>> = starting
                        .iter()
                        .map(
                            |(_, (job_id, partition_id, policy, args), input)| FollowUp {
                                job_id: *job_id,
                                partition_id: *partition_id,
                                node_id,
                                trigger_kind: "step",
                                input,
                                args_json: args,
                                policy_json: policy,
                            },
                        )
                        .collect();
                    let runs = self.follow_up_runs_in(tx, &follow_ups, now).await?;
                    if !runs.is_empty() {
                        // One statement for the steps started: the run each now has.
                        let mut started = sqlx::QueryBuilder::<$db>::new(
                            "UPDATE step_runs SET state = 'running', updated_at_ms = ",
                        );
                        started
                            .push(&*self.q.now_expr)
                            .push(", run_id = CASE step_name");
                        for ((name, _, _), (run_id, _)) in starting.iter().zip(&runs) {
                            started
                                .push(" WHEN ")
                                .push_bind(name.as_str())
                                .push(" THEN ")
                                .push_bind(*run_id);
                        }
                        started
                            .push(" END WHERE workflow_run_id = ")
                            .push_bind(workflow_run)
                            .push(" AND state = 'waiting' AND step_name IN (");
                        let mut names = started.separated(", ");
                        for (name, _, _) in &starting {
                            names.push_bind(name.as_str());
                        }
                        started.push(")");
                        started.build().execute(&mut **tx).await?;
                        created += runs.len();
                    }
                    if failed_now {
                        continue;
                    }
                    let Some(state) = next.finished else {
                        return Ok((created, None));
                    };
                    let message =
                        (state != "succeeded").then_some("a step failed or was cancelled");
                    let over = self
                        .workflow_run_end_in(tx, &pinned, node_id, state, message)
                        .await?;
                    return Ok((created, over));
                }
            }

            /// Ends workflow run `pinned` as `state` in `tx` and passes its workflow's turn to
            /// a queued run; the ended run, for its follow-ups, unless it had already ended.
            async fn workflow_run_end_in(
                &self,
                tx: &mut Tx<$db>,
                pinned: &WorkflowRunRecord,
                node_id: &str,
                state: &str,
                message: Option<&str>,
            ) -> Result<Option<EndedRun>, Error> {
                let ended = sqlx::query::<$db>(sql(&self.q.run_end))
                    .bind(state)
                    .bind(message)
                    .bind(pinned.run_id)
                    .execute(&mut **tx)
                    .await?
                    .rows_affected();
                if ended == 1 {
                    self.release_queued_in(tx, pinned.workflow_id).await?;
                }
                Ok((ended == 1).then(|| EndedRun {
                    run_id: pinned.run_id,
                    job_id: pinned.workflow_id,
                    node_id: node_id.to_owned(),
                    // A workflow may itself be another's step.
                    may_be_step: true,
                    may_have_children: true,
                    state: state.to_owned(),
                    output: None,
                }))
            }

            /// Runs the first steps of a workflow run just started in `tx` (and what follows
            /// if it ends at once), commits, and tells the node what the follow-ups did.
            async fn advance_new_and_commit(
                &self,
                mut tx: Tx<$db>,
                workflow_run: i64,
                node_id: &str,
            ) -> Result<(), Error> {
                let (created, over) = self
                    .workflow_advance_in(&mut tx, workflow_run, node_id)
                    .await?;
                let mut followed = FollowedUp {
                    created,
                    workflows_ended: Vec::new(),
                };
                if let Some(over) = over {
                    let after = self
                        .follow_ups_in(&mut tx, std::slice::from_ref(&over))
                        .await?;
                    followed.created += after.created;
                    followed.workflows_ended.push(over);
                    followed.workflows_ended.extend(after.workflows_ended);
                }
                tx.commit().await?;
                self.events
                    .note(followed.created, &followed.workflows_ended);
                Ok(())
            }

            /// Starts one pending workflow run in its own transaction; false if it was not
            /// pending.
            async fn workflow_run_start_once(
                &self,
                run: &RunRecord,
                default_params: &str,
            ) -> Result<bool, Error> {
                let mut tx = self.begin_write().await?;
                let moved = sqlx::query::<$db>(sql(&self.q.run_start_one))
                    .bind(run.run_id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if moved == 0 {
                    tx.rollback().await?;
                    return Ok(false);
                }
                let definition: Option<String> =
                    sqlx::query_scalar::<$db, String>(sql(&self.q.workflow_definition_get))
                        .bind(run.job_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                let Some(definition) = definition else {
                    sqlx::query::<$db>(sql(&self.q.run_end))
                        .bind("failed")
                        .bind(Some("the workflow has no definition"))
                        .bind(run.run_id)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    return Ok(true);
                };
                let input: Option<String> =
                    sqlx::query_scalar::<$db, Option<String>>(sql(&self.q.run_input))
                        .bind(run.run_id)
                        .fetch_optional(&mut *tx)
                        .await?
                        .flatten();
                let params = params_of(input.as_deref(), default_params);
                sqlx::query::<$db>(sql(&self.q.workflow_run_insert))
                    .bind(run.run_id)
                    .bind(run.job_id)
                    .bind(&definition)
                    .bind(&params)
                    .bind(None::<i64>)
                    .execute(&mut *tx)
                    .await?;
                // A definition that does not read gets no step rows: the advance below reads it
                // again and fails the run, naming it.
                if let Ok(steps) = serde_json::from_str::<Definition>(&definition) {
                    for step in &steps.steps {
                        sqlx::query::<$db>(sql(&self.q.step_run_insert))
                            .bind(run.run_id)
                            .bind(&step.name)
                            .execute(&mut *tx)
                            .await?;
                    }
                }
                self.advance_new_and_commit(tx, run.run_id, &run.node_id)
                    .await?;
                Ok(true)
            }
        }

        #[async_trait]
        impl WorkflowStore for $store {
            async fn workflow_run_rerun(
                &self,
                run_id: i64,
                node_id: &str,
            ) -> Result<Option<i64>, Error> {
                retry_transient(|| self.workflow_run_rerun_once(run_id, node_id)).await
            }

            async fn workflow_save(
                &self,
                workflow_id: i64,
                definition_json: &str,
            ) -> Result<(), Error> {
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    sqlx::query::<$db>(sql(&self.q.workflow_definition_delete))
                        .bind(workflow_id)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query::<$db>(sql(&self.q.workflow_definition_insert))
                        .bind(workflow_id)
                        .bind(definition_json)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(())
                })
                .await
            }

            async fn workflow_definition(&self, workflow_id: i64) -> Result<Option<String>, Error> {
                Ok(
                    sqlx::query_scalar::<$db, String>(sql(&self.q.workflow_definition_get))
                        .bind(workflow_id)
                        .fetch_optional(&self.pool)
                        .await?,
                )
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
                let Some(pinned) =
                    sqlx::query_as::<$db, WorkflowRunRecord>(sql(&self.q.workflow_run_get))
                        .bind(run_id)
                        .fetch_optional(&self.pool)
                        .await?
                else {
                    return Ok(None);
                };
                let steps =
                    sqlx::query_as::<$db, StepRunRecord>(sql(&self.q.step_runs_of_workflow_run))
                        .bind(run_id)
                        .fetch_all(&self.pool)
                        .await?;
                Ok(Some((pinned, steps)))
            }

            async fn workflow_run_cancel(
                &self,
                run_id: i64,
            ) -> Result<Option<Vec<AttemptRecord>>, Error> {
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    sqlx::query_scalar::<$db, String>(sql(&self.q.run_lock))
                        .bind(run_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                    // Every run this cancel ends that held its job's turn passes it on.
                    let mut turns = Vec::new();
                    turns.extend(self.run_turn_in(&mut tx, run_id).await?);
                    let message = "the workflow run was cancelled";
                    let ended = sqlx::query::<$db>(sql(&self.q.run_end))
                        .bind(run_state::CANCELLED)
                        .bind(Some(message))
                        .bind(run_id)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    if ended == 0 {
                        tx.rollback().await?;
                        return Ok(None);
                    }
                    let steps: Vec<StepRunRecord> =
                        sqlx::query_as::<$db, StepRunRecord>(sql(&self
                            .q
                            .step_runs_of_workflow_run))
                        .bind(run_id)
                        .fetch_all(&mut *tx)
                        .await?;
                    let mut running = Vec::new();
                    for step in &steps {
                        let statement = match (step.state.as_str(), step.run_id) {
                            (step_state::WAITING, _) => &self.q.step_run_unstarted,
                            (step_state::RUNNING, Some(step_run)) => {
                                let turn = self.run_turn_in(&mut tx, step_run).await?;
                                let cancelled = sqlx::query::<$db>(sql(&self.q.run_end))
                                    .bind(run_state::CANCELLED)
                                    .bind(Some(message))
                                    .bind(step_run)
                                    .execute(&mut *tx)
                                    .await?
                                    .rows_affected();
                                if cancelled == 1 {
                                    turns.extend(turn);
                                    running.extend(
                                        sqlx::query_as::<$db, AttemptRecord>(sql(&self
                                            .q
                                            .attempts_of_run))
                                        .bind(step_run)
                                        .fetch_all(&mut *tx)
                                        .await?
                                        .into_iter()
                                        .filter(|a| a.state == attempt_state::RUNNING),
                                    );
                                    sqlx::query::<$db>(sql(&self.q.attempts_cancel_of_run))
                                        .bind(message)
                                        .bind(step_run)
                                        .execute(&mut *tx)
                                        .await?;
                                }
                                &self.q.step_run_end
                            }
                            _ => continue,
                        };
                        sqlx::query::<$db>(sql(statement))
                            .bind(step_state::CANCELLED)
                            .bind(None::<String>)
                            .bind(run_id)
                            .bind(&step.step_name)
                            .execute(&mut *tx)
                            .await?;
                    }
                    for (job_id, held) in turns {
                        if held {
                            self.release_queued_in(&mut tx, job_id).await?;
                        }
                    }
                    tx.commit().await?;
                    Ok(Some(running))
                })
                .await
            }
        }
    };
}

pub(super) use workflow_store;

/// The input of step `name`'s run in the workflow run `pinned`: the workflow run, its
/// parameters, and the run, state and output of each step it `needs`.
pub(super) fn step_input(
    pinned: &WorkflowRunRecord,
    params: &serde_json::Value,
    name: &str,
    needs: &[crate::workflows::Need],
    steps: &[StepRunRecord],
) -> String {
    let upstream: serde_json::Map<String, serde_json::Value> = needs
        .iter()
        .filter_map(|need| steps.iter().find(|s| s.step_name == need.step))
        .map(|up| {
            let output = up
                .output_json
                .as_deref()
                .and_then(|o| serde_json::from_str(o).ok())
                .unwrap_or(serde_json::Value::Null);
            (
                up.step_name.clone(),
                serde_json::json!({ "run_id": up.run_id, "state": up.state, "output": output }),
            )
        })
        .collect();
    serde_json::json!({
        "workflow": { "id": pinned.workflow_id, "run_id": pinned.run_id, "step": name },
        "params": params,
        "upstream": upstream,
    })
    .to_string()
}
