//! Ending one attempt on the three backends: the guarded update from a live state, then the
//! shard's retry or, when every shard has ended, the run's end and the release of the job's
//! next queued run, all in the caller's transaction.

/// Implements it for one backend's store; see `super` for the arguments.
macro_rules! attempt_end_store {
    ($store:ident, $db:ty) => {
        impl $store {
            async fn attempts_end_once(
                &self,
                ends: &[(i64, AttemptEnd)],
            ) -> Result<Vec<AttemptEnded>, Error> {
                let mut tx = self.begin_write().await?;
                let mut ended = Vec::with_capacity(ends.len());
                let mut runs_ended = Vec::new();
                for (attempt_id, end) in ends {
                    ended.push(
                        self.attempt_end_in(&mut tx, *attempt_id, end, &mut runs_ended)
                            .await?,
                    );
                }
                // What follows the runs that ended (children, workflow steps), in the same
                // commit: once each.
                let followed = self.follow_ups_in(&mut tx, &runs_ended).await?;
                tx.commit().await?;
                self.events
                    .note(followed.created, &followed.workflows_ended);
                Ok(ended)
            }

            /// Ends one attempt inside the caller's transaction; a run that ends with it is
            /// added to `runs_ended`.
            async fn attempt_end_in(
                &self,
                tx: &mut Tx<$db>,
                attempt_id: i64,
                end: &AttemptEnd,
                runs_ended: &mut Vec<EndedRun>,
            ) -> Result<AttemptEnded, Error> {
                let Some(attempt) = sqlx::query_as::<$db, AttemptRecord>(sql(&self.q.attempt_lock))
                    .bind(attempt_id)
                    .fetch_optional(&mut **tx)
                    .await?
                else {
                    return Ok(AttemptEnded::AlreadyEnded);
                };
                let ended = sqlx::query::<$db>(sql(&self.q.attempt_end))
                    .bind(end.state)
                    .bind(end.output.as_deref())
                    .bind(end.error.as_deref())
                    .bind(end.executor_id.as_deref())
                    .bind(end.executor_id.as_deref())
                    .bind(attempt_id)
                    .execute(&mut **tx)
                    .await?
                    .rows_affected();
                if ended == 0 {
                    return Ok(AttemptEnded::AlreadyEnded);
                }
                if let Some(delay) = end.retry_after_ms {
                    sqlx::query::<$db>(sql(&self.q.attempt_insert))
                        .bind(attempt.run_id)
                        .bind(attempt.job_id)
                        .bind(attempt.partition_id)
                        .bind(attempt.shard_index)
                        .bind(attempt.shard_total)
                        .bind(attempt.attempt_no + 1)
                        // Failover does not use up the retry budget: the next attempt
                        // knows how many of those before it were lost.
                        .bind(attempt.lost_before + i64::from(end.state == attempt_state::LOST))
                        .bind(attempt.priority)
                        .bind(&attempt.args_json)
                        .bind(delay.max(0))
                        .bind(
                            end.executor_id
                                .as_deref()
                                .or(attempt.executor_id.as_deref())
                                .filter(|_| !end.retry_to_same_executor),
                        )
                        .bind(
                            end.executor_id
                                .as_deref()
                                .or(attempt.executor_id.as_deref())
                                .filter(|_| end.retry_to_same_executor),
                        )
                        .execute(&mut **tx)
                        .await?;
                    return Ok(AttemptEnded::Retrying);
                }
                // The run ends when every shard's latest attempt has ended. Its row is locked
                // first: two shards ending at once would otherwise each see the other still
                // running (neither committed), and the run would never end.
                let (node_id, has_input): (String, i64) =
                    sqlx::query_as::<$db, (String, i64)>(sql(&self.q.run_lock_ending))
                        .bind(attempt.run_id)
                        .fetch_optional(&mut **tx)
                        .await?
                        .unwrap_or_default();
                let attempts = sqlx::query_as::<$db, AttemptRecord>(sql(&self.q.attempts_of_run))
                    .bind(attempt.run_id)
                    .fetch_all(&mut **tx)
                    .await?;
                let mut latest_attempts: std::collections::BTreeMap<i64, &AttemptRecord> =
                    std::collections::BTreeMap::new();
                for a in &attempts {
                    latest_attempts.insert(a.shard_index, a);
                }
                let latest: std::collections::BTreeMap<i64, &str> = latest_attempts
                    .iter()
                    .map(|(shard, a)| (*shard, a.state.as_str()))
                    .collect();
                let unfinished = latest
                    .values()
                    .any(|s| *s == attempt_state::PENDING || *s == attempt_state::RUNNING);
                if unfinished {
                    return Ok(AttemptEnded::RunContinues);
                }
                let (state, message) = if latest.values().all(|s| *s == attempt_state::SUCCEEDED) {
                    ("succeeded", None)
                } else if latest.values().any(|s| *s == attempt_state::CANCELLED) {
                    ("cancelled", Some("a shard was cancelled".to_owned()))
                } else {
                    let failed = latest
                        .iter()
                        .filter(|(_, s)| **s != attempt_state::SUCCEEDED)
                        .map(|(shard, s)| format!("shard {shard}: {s}"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    (
                        "failed",
                        Some(format!("failed after its last attempt ({failed})")),
                    )
                };
                let run_ended = sqlx::query::<$db>(sql(&self.q.run_end))
                    .bind(state)
                    .bind(message.as_deref())
                    .bind(attempt.run_id)
                    .execute(&mut **tx)
                    .await?
                    .rows_affected();
                if run_ended == 0 {
                    // The run had ended already (cancelled, or replaced): this attempt's end
                    // changes nothing more.
                    return Ok(AttemptEnded::AlreadyEnded);
                }
                runs_ended.push(EndedRun {
                    run_id: attempt.run_id,
                    job_id: attempt.job_id,
                    node_id,
                    may_be_step: has_input == 1,
                    may_have_children: end.job_has_children,
                    state: state.to_owned(),
                    output: run_output(
                        &latest_attempts
                            .iter()
                            .map(|(shard, a)| (*shard, a.output.as_deref()))
                            .collect::<Vec<_>>(),
                    ),
                });
                self.release_queued_in(tx, attempt.job_id).await?;
                Ok(AttemptEnded::RunEnded(state.to_owned()))
            }

            /// The job of `run_id`, and whether the run holds its job's turn (pending or
            /// running, not queued) so that its end passes the turn to the next queued run:
            /// every way a run ends releases it, not only an attempt's end.
            async fn run_turn_in(
                &self,
                tx: &mut Tx<$db>,
                run_id: i64,
            ) -> Result<Option<(i64, bool)>, Error> {
                let run = sqlx::query_as::<$db, RunRecord>(sql(&self.q.run_get))
                    .bind(run_id)
                    .fetch_optional(&mut **tx)
                    .await?;
                Ok(run.map(|r| {
                    let holds = r.state == run_state::PENDING || r.state == run_state::RUNNING;
                    (r.job_id, holds)
                }))
            }

            /// A run of `job_id` queued behind one that just ended (overlap `queue`) may
            /// start now.
            async fn release_queued_in(&self, tx: &mut Tx<$db>, job_id: i64) -> Result<(), Error> {
                let queued = sqlx::query_scalar::<$db, i64>(sql(&self.q.run_next_queued))
                    .bind(job_id)
                    .fetch_optional(&mut **tx)
                    .await?;
                if let Some(next) = queued {
                    sqlx::query::<$db>(sql(&self.q.run_release_queued))
                        .bind(next)
                        .execute(&mut **tx)
                        .await?;
                }
                Ok(())
            }
        }
    };
}

pub(super) use attempt_end_store;
