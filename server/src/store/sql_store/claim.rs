//! The claim's statements on the three backends: the transaction around the rule
//! (`super::super::rules::claim`), and the primitives it runs, each a statement with its binds.

/// Implements it for one backend's store; see `super` for the arguments.
macro_rules! claim_store {
    ($store:ident, $db:ty, $backend:expr) => {
        impl $store {
            async fn runs_claim_once(
                &self,
                node_id: &str,
                claims: &[RunClaim],
            ) -> Result<Vec<ClaimOutcome>, Error> {
                if claims.is_empty() {
                    return Ok(Vec::new());
                }
                let mut tx = self.begin_write().await?;
                let outcomes = super::rules::claim::claim(
                    &mut StoreTx {
                        store: self,
                        tx: &mut tx,
                    },
                    node_id,
                    claims,
                )
                .await?;
                tx.commit().await?;
                Ok(outcomes)
            }
        }

        #[async_trait]
        impl FenceTx for StoreTx<'_, $store, Tx<$db>> {
            async fn lock_partitions(
                &mut self,
                partition_ids: &[i64],
            ) -> Result<Vec<PartitionLease>, Error> {
                let Some(lock) =
                    with_partitions(&self.store.q.jobs.partitions_lock_many, partition_ids)
                else {
                    return Ok(Vec::new());
                };
                Ok(sqlx::query_as::<$db, (i64, Option<String>, i64)>(lock)
                    .fetch_all(&mut **self.tx)
                    .await?
                    .into_iter()
                    .map(|(partition_id, owner_node_id, epoch)| PartitionLease {
                        partition_id,
                        owner_node_id,
                        epoch,
                    })
                    .collect())
            }
        }

        #[async_trait]
        impl FirstAttemptTx for StoreTx<'_, $store, Tx<$db>> {
            async fn insert_first_attempts(
                &mut self,
                attempts: &[FirstAttempt<'_>],
            ) -> Result<(), Error> {
                self.store.insert_first_attempts(self.tx, attempts).await
            }
        }

        #[async_trait]
        impl ClaimTx for StoreTx<'_, $store, Tx<$db>> {
            fn starts_in_claim(&self) -> bool {
                $backend != Backend::Mysql
            }

            async fn lock_jobs(
                &mut self,
                job_ids: &[i64],
                with_args: bool,
            ) -> Result<Vec<ClaimJob>, Error> {
                let q = &self.store.q;
                let text = if with_args {
                    &q.jobs.jobs_lock_many_with_args
                } else {
                    &q.jobs.jobs_lock_many
                };
                let Some(lock) = with_partitions(text, job_ids) else {
                    return Ok(Vec::new());
                };
                let job = |job_id,
                           version,
                           state: String,
                           last_fired_at_ms,
                           args_json|
                 -> Result<ClaimJob, Error> {
                    Ok(ClaimJob {
                        job_id,
                        version,
                        state: state.parse()?,
                        last_fired_at_ms,
                        args_json,
                    })
                };
                Ok(if with_args {
                    sqlx::query_as::<$db, (i64, i64, String, Option<i64>, String)>(lock)
                        .fetch_all(&mut **self.tx)
                        .await?
                        .into_iter()
                        .map(|(id, version, state, last, args)| {
                            job(id, version, state, last, Some(args))
                        })
                        .collect::<Result<_, Error>>()
                } else {
                    sqlx::query_as::<$db, (i64, i64, String, Option<i64>)>(lock)
                        .fetch_all(&mut **self.tx)
                        .await?
                        .into_iter()
                        .map(|(id, version, state, last)| job(id, version, state, last, None))
                        .collect::<Result<_, Error>>()
                }?)
            }

            async fn advance_jobs(&mut self, rows: &[JobAdvance]) -> Result<(), Error> {
                self.store.advance_jobs(self.tx, rows).await
            }

            async fn insert_claimed_runs(
                &mut self,
                node_id: &str,
                runs: &[ClaimedRun<'_>],
            ) -> Result<Vec<StartedRun>, Error> {
                self.store.insert_claimed_runs(self.tx, node_id, runs).await
            }

            async fn advance_job_if_current(&mut self, claim: &RunClaim) -> Result<bool, Error> {
                let advanced = sqlx::query::<$db>(sql(&self.store.q.jobs.job_advance))
                    .bind(claim.scheduled_at_ms)
                    .bind(i64::from(claim.counts_as_fired()))
                    .bind(i64::from(claim.job_done))
                    .bind(claim.job_id)
                    .bind(claim.job_version)
                    .bind(claim.scheduled_at_ms)
                    .execute(&mut **self.tx)
                    .await?
                    .rows_affected();
                Ok(advanced != 0)
            }

            async fn unfinished_run_of_job(&mut self, job_id: i64) -> Result<Option<i64>, Error> {
                Ok(
                    sqlx::query_scalar::<$db, i64>(sql(&self.store.q.jobs.run_unfinished_of_job))
                        .bind(job_id)
                        .fetch_optional(&mut **self.tx)
                        .await?,
                )
            }

            async fn cancel_unfinished_of_job(
                &mut self,
                job_id: i64,
                partition_id: i64,
                why: &str,
            ) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.store.q.jobs.runs_cancel_unfinished))
                    .bind(why)
                    .bind(job_id)
                    .execute(&mut **self.tx)
                    .await?;
                sqlx::query::<$db>(sql(&self.store.q.jobs.attempts_cancel_of_job))
                    .bind(why)
                    .bind(partition_id)
                    .bind(job_id)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }

            async fn insert_run(
                &mut self,
                node_id: &str,
                claim: &RunClaim,
                state: RunState,
                message: Option<&str>,
            ) -> Result<(), Error> {
                let finished = i64::from(!RunState::UNFINISHED.contains(&state));
                sqlx::query::<$db>(sql(&self.store.q.jobs.run_insert))
                    .bind(claim.job_id)
                    .bind(claim.scheduled_at_ms)
                    .bind(claim.partition_id)
                    .bind(claim.epoch)
                    .bind(node_id)
                    .bind(claim.trigger_kind.as_str())
                    .bind(state.as_str())
                    .bind(claim.priority)
                    .bind(finished)
                    .bind(message)
                    .bind(claim.namespace_id)
                    .bind(claim.job_id)
                    .bind(claim.scheduled_at_ms)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }
        }
    };
}

pub(super) use claim_store;
