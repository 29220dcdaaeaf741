//! Ending attempts on the three backends: the transaction around the rule
//! (`super::super::rules::attempt_end`) and its follow-ups, the statements the rule runs, and
//! the release of a job's next queued run, which every way a run ends calls.

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
                let mut flow_keys = Vec::new();
                for (attempt_id, end) in ends {
                    ended.push(
                        super::rules::attempt_end::end_attempt(
                            &mut StoreTx {
                                store: self,
                                tx: &mut tx,
                            },
                            *attempt_id,
                            end,
                            &mut runs_ended,
                            &mut flow_keys,
                        )
                        .await?,
                    );
                }
                // The flow keys of the runs that ended: each admitted once, in order.
                super::rules::flow::admit_all(
                    &mut StoreTx {
                        store: self,
                        tx: &mut tx,
                    },
                    flow_keys,
                )
                .await?;
                // What follows the runs that ended (children, workflow steps), in the same
                // commit: once each.
                let followed = self.follow_ups_in(&mut tx, &runs_ended).await?;
                tx.commit().await?;
                self.events
                    .note(followed.created, &followed.workflows_ended);
                Ok(ended)
            }

            /// A run of `job_id` queued behind one that just ended (overlap `queue`) may
            /// start now.
            async fn release_queued_in(&self, tx: &mut Tx<$db>, job_id: i64) -> Result<(), Error> {
                let queued = sqlx::query_scalar::<$db, i64>(sql(&self.q.dispatch.run_next_queued))
                    .bind(job_id)
                    .fetch_optional(&mut **tx)
                    .await?;
                if let Some(next) = queued {
                    sqlx::query::<$db>(sql(&self.q.dispatch.run_release_queued))
                        .bind(next)
                        .execute(&mut **tx)
                        .await?;
                }
                Ok(())
            }
        }

        #[async_trait]
        impl EndingTx for StoreTx<'_, $store, Tx<$db>> {
            async fn lock_attempt(
                &mut self,
                attempt_id: i64,
            ) -> Result<Option<AttemptRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, AttemptRecord>(sql(&self.store.q.dispatch.attempt_lock))
                        .bind(attempt_id)
                        .fetch_optional(&mut **self.tx)
                        .await?,
                )
            }

            async fn end_attempt(
                &mut self,
                attempt_id: i64,
                end: &AttemptEnd,
            ) -> Result<bool, Error> {
                let ended = sqlx::query::<$db>(sql(&self.store.q.dispatch.attempt_end))
                    .bind(end.state.as_str())
                    .bind(end.output.as_deref())
                    .bind(end.error.as_deref())
                    .bind(end.executor_id.as_deref())
                    .bind(end.executor_id.as_deref())
                    .bind(attempt_id)
                    .execute(&mut **self.tx)
                    .await?
                    .rows_affected();
                Ok(ended != 0)
            }

            async fn insert_retry(&mut self, retry: &RetryAttempt<'_>) -> Result<(), Error> {
                let after = retry.after;
                sqlx::query::<$db>(sql(&self.store.q.dispatch.attempt_insert))
                    .bind(after.run_id)
                    .bind(after.job_id)
                    .bind(after.partition_id)
                    .bind(after.shard_index)
                    .bind(after.shard_total)
                    .bind(after.attempt_no + 1)
                    .bind(retry.lost_before)
                    .bind(after.priority)
                    .bind(&after.args_json)
                    .bind(retry.delay_ms)
                    .bind(retry.avoid_executor_id)
                    .bind(retry.executor_id)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }

            async fn lock_run_for_ending(
                &mut self,
                run_id: i64,
            ) -> Result<Option<RunEnding>, Error> {
                Ok(
                    sqlx::query_as::<$db, (String, i64, Option<String>)>(sql(&self
                        .store
                        .q
                        .dispatch
                        .run_lock_ending))
                    .bind(run_id)
                    .fetch_optional(&mut **self.tx)
                    .await?
                    .map(|(node_id, has_input, flow_key)| RunEnding {
                        node_id,
                        has_input: has_input == 1,
                        flow_key,
                    }),
                )
            }

            async fn attempts_of_run(&mut self, run_id: i64) -> Result<Vec<AttemptRecord>, Error> {
                Ok(sqlx::query_as::<$db, AttemptRecord>(sql(&self
                    .store
                    .q
                    .dispatch
                    .attempts_of_run))
                .bind(run_id)
                .fetch_all(&mut **self.tx)
                .await?)
            }

            async fn end_run(
                &mut self,
                run_id: i64,
                state: RunState,
                message: Option<&str>,
            ) -> Result<bool, Error> {
                let ended = sqlx::query::<$db>(sql(&self.store.q.dispatch.run_end))
                    .bind(state.as_str())
                    .bind(message)
                    .bind(run_id)
                    .execute(&mut **self.tx)
                    .await?
                    .rows_affected();
                Ok(ended != 0)
            }

            async fn release_next_queued(&mut self, job_id: i64) -> Result<(), Error> {
                self.store.release_queued_in(self.tx, job_id).await
            }
        }
    };
}

pub(super) use attempt_end_store;
