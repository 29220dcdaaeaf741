//! The fenced claim of scheduled instants (`JobStore::runs_claim`), on the three backends:
//! one transaction locks the claim's partitions and jobs, advances the jobs, inserts the runs,
//! and starts those that are one attempt each.

/// Implements it for one backend's store; see `super` for the arguments.
macro_rules! claim_store {
    ($store:ident, $db:ty, $backend:expr) => {
        impl $store {
            /// Whether `claim`'s run starts in the claim here. Not on MySQL: there the claim's
            /// extra statements cost more than the start pass they save (MariaDB at 10,000
            /// jobs/s: 3,031-3,823 fires/s against 4,642 with every run started by the start
            /// pass, `bench/README.md`), so its runs wait `pending` as before.
            fn starts_here(claim: &RunClaim) -> bool {
                claim.start && $backend != Backend::Mysql
            }

            async fn runs_claim_once(
                &self,
                node_id: &str,
                claims: &[RunClaim],
            ) -> Result<Vec<ClaimOutcome>, Error> {
                let mut partition_ids: Vec<i64> = claims.iter().map(|c| c.partition_id).collect();
                partition_ids.sort_unstable();
                partition_ids.dedup();
                let Some(lock_partitions) =
                    with_partitions(&self.q.partitions_lock_many, &partition_ids)
                else {
                    return Ok(Vec::new());
                };
                let mut tx = self.begin_write().await?;
                // Partitions are locked in ascending order, in one statement, so two claimers
                // cannot deadlock; a hand-off of a locked partition waits for this claim.
                let owners: HashMap<i64, (Option<String>, i64)> =
                    sqlx::query_as::<$db, (i64, Option<String>, i64)>(lock_partitions)
                        .fetch_all(&mut *tx)
                        .await?
                        .into_iter()
                        .map(|(partition, owner, epoch)| (partition, (owner, epoch)))
                        .collect();
                let mut outcomes: Vec<Option<ClaimOutcome>> = claims
                    .iter()
                    .map(|c| {
                        let owned = matches!(owners.get(&c.partition_id),
                            Some((Some(owner), epoch)) if owner == node_id && *epoch == c.epoch);
                        (!owned).then_some(ClaimOutcome::Fenced)
                    })
                    .collect();
                self.claim_set_based(&mut tx, node_id, claims, &mut outcomes)
                    .await?;
                // Claims under an overlap rule read their job's unfinished runs: one at a time.
                for (claim, outcome) in claims.iter().zip(outcomes.iter_mut()) {
                    if outcome.is_some() {
                        continue;
                    }
                    let advanced = sqlx::query::<$db>(sql(&self.q.job_advance))
                        .bind(claim.scheduled_at_ms)
                        .bind(i64::from(claim.counts_as_fired()))
                        .bind(i64::from(claim.job_done))
                        .bind(claim.job_id)
                        .bind(claim.job_version)
                        .bind(claim.scheduled_at_ms)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    if advanced == 0 {
                        *outcome = Some(ClaimOutcome::Stale);
                        continue;
                    }
                    let (state, message) = self.overlap_decision(&mut tx, claim).await?;
                    let finished = i64::from(!run_state::UNFINISHED.contains(&state));
                    sqlx::query::<$db>(sql(&self.q.run_insert))
                        .bind(claim.job_id)
                        .bind(claim.scheduled_at_ms)
                        .bind(claim.partition_id)
                        .bind(claim.epoch)
                        .bind(node_id)
                        .bind(claim.trigger_kind)
                        .bind(state)
                        .bind(claim.priority)
                        .bind(finished)
                        .bind(message.as_deref())
                        .bind(claim.job_id)
                        .bind(claim.scheduled_at_ms)
                        .execute(&mut *tx)
                        .await?;
                    *outcome = Some(ClaimOutcome::Claimed);
                }
                tx.commit().await?;
                Ok(outcomes
                    .into_iter()
                    .map(|o| o.unwrap_or(ClaimOutcome::Stale))
                    .collect())
            }

            /// Claims the not yet decided claims whose job allows overlapping runs (nearly all)
            /// in a constant number of statements: lock their jobs, decide each claim in
            /// memory against the locked rows, advance the jobs in one `UPDATE`, and insert
            /// the runs in multi-row `INSERT`s.
            async fn claim_set_based(
                &self,
                tx: &mut Tx<$db>,
                node_id: &str,
                claims: &[RunClaim],
                outcomes: &mut [Option<ClaimOutcome>],
            ) -> Result<(), Error> {
                let chosen: Vec<usize> = (0..claims.len())
                    .filter(|&i| outcomes[i].is_none() && claims[i].overlap == OverlapRule::Allow)
                    .collect();
                let mut job_ids: Vec<i64> = chosen.iter().map(|&i| claims[i].job_id).collect();
                job_ids.sort_unstable();
                job_ids.dedup();
                // Per job: its version, whether it still runs, its last fired instant; and its
                // arguments, read only when one of its runs starts here.
                let starting = chosen.iter().any(|&i| Self::starts_here(&claims[i]));
                let lock_text = if starting {
                    &self.q.jobs_lock_many_with_args
                } else {
                    &self.q.jobs_lock_many
                };
                let Some(lock_jobs) = with_partitions(lock_text, &job_ids) else {
                    return Ok(());
                };
                let locked: Vec<(i64, i64, String, Option<i64>, Option<String>)> = if starting {
                    sqlx::query_as::<$db, (i64, i64, String, Option<i64>, String)>(lock_jobs)
                        .fetch_all(&mut **tx)
                        .await?
                        .into_iter()
                        .map(|(id, version, state, last, args)| (id, version, state, last, Some(args)))
                        .collect()
                } else {
                    sqlx::query_as::<$db, (i64, i64, String, Option<i64>)>(lock_jobs)
                        .fetch_all(&mut **tx)
                        .await?
                        .into_iter()
                        .map(|(id, version, state, last)| (id, version, state, last, None))
                        .collect()
                };
                let mut args: HashMap<i64, String> = HashMap::new();
                let mut jobs: HashMap<i64, (i64, bool, Option<i64>)> = locked
                    .into_iter()
                    .map(|(id, version, state, last, job_args)| {
                        if let Some(job_args) = job_args {
                            args.insert(id, job_args);
                        }
                        (id, (version, state == job_state::RUNNING, last))
                    })
                    .collect();
                // The same rule as `job_advance`, claim after claim in batch order.
                let mut advanced: Vec<(i64, i64, bool)> = Vec::new();
                let mut fired: HashMap<i64, i64> = HashMap::new();
                let mut inserts: Vec<&RunClaim> = Vec::new();
                for i in chosen {
                    let claim = &claims[i];
                    let at = claim.scheduled_at_ms;
                    let current = jobs.get_mut(&claim.job_id).filter(|(version, running, last)| {
                        *version == claim.job_version && *running && last.is_none_or(|l| l < at)
                    });
                    let Some((_, running, last)) = current else {
                        outcomes[i] = Some(ClaimOutcome::Stale);
                        continue;
                    };
                    *last = Some(at);
                    *running = !claim.job_done;
                    advanced.retain(|(job, _, _)| *job != claim.job_id);
                    advanced.push((claim.job_id, at, claim.job_done));
                    *fired.entry(claim.job_id).or_default() += i64::from(claim.counts_as_fired());
                    inserts.push(claim);
                    outcomes[i] = Some(ClaimOutcome::Claimed);
                }
                if advanced.is_empty() {
                    return Ok(());
                }
                let rows: Vec<JobAdvance> = advanced
                    .iter()
                    .map(|(job_id, at, done)| {
                        let count = fired.get(job_id).copied().unwrap_or(0);
                        (*job_id, *at, count, i64::from(*done))
                    })
                    .collect();
                self.advance_jobs(tx, &rows).await?;

                // The runs that started here get their one attempt in the same transaction,
                // so no run is ever `running` without attempts.
                let started = self.insert_claimed_runs(tx, node_id, &inserts).await?;
                let firsts: Vec<FirstAttempt<'_>> = started
                    .iter()
                    .map(|run| FirstAttempt {
                        run_id: run.0,
                        job_id: run.1,
                        partition_id: run.2,
                        priority: run.3,
                        shard_index: 0,
                        shard_total: 1,
                        args_json: args.get(&run.1).map_or("null", String::as_str),
                        not_before_ms: run.4,
                        executor_id: None,
                    })
                    .collect();
                self.insert_first_attempts(tx, &firsts).await
            }

            /// The state and message of a claimed run under the job's overlap rule.
            async fn overlap_decision(
                &self,
                tx: &mut Tx<$db>,
                claim: &RunClaim,
            ) -> Result<(&'static str, Option<String>), Error> {
                // A calendar's skip stands whatever the overlap rule.
                if claim.overlap == OverlapRule::Allow || claim.state == run_state::SKIPPED {
                    return Ok((claim.state, claim.message.clone()));
                }
                let unfinished = sqlx::query_scalar::<$db, i64>(sql(&self.q.run_unfinished_of_job))
                    .bind(claim.job_id)
                    .fetch_optional(&mut **tx)
                    .await?;
                let Some(previous) = unfinished else {
                    return Ok((claim.state, claim.message.clone()));
                };
                Ok(match claim.overlap {
                    OverlapRule::Allow => (claim.state, claim.message.clone()),
                    OverlapRule::Skip => (
                        run_state::SKIPPED,
                        Some(format!("run {previous} of this job is unfinished (overlap: skip)")),
                    ),
                    OverlapRule::Queue => (
                        run_state::QUEUED,
                        Some(format!("waiting for run {previous} of this job (overlap: queue)")),
                    ),
                    OverlapRule::Replace => {
                        let why = format!(
                            "replaced by the run of instant {} (overlap: replace)",
                            claim.scheduled_at_ms
                        );
                        sqlx::query::<$db>(sql(&self.q.runs_cancel_unfinished))
                            .bind(&why)
                            .bind(claim.job_id)
                            .execute(&mut **tx)
                            .await?;
                        // Their attempts stop too: none is retried or delivered any more.
                        sqlx::query::<$db>(sql(&self.q.attempts_cancel_of_job))
                            .bind(&why)
                            .bind(claim.partition_id)
                            .bind(claim.job_id)
                            .execute(&mut **tx)
                            .await?;
                        (claim.state, claim.message.clone())
                    }
                })
            }
        }
    };
}

pub(super) use claim_store;
