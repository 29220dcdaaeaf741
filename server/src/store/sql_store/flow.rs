//! Flow control on the three backends: the statements of admission (`super::rules::flow`)
//! and the transactions of `FlowStore`.

/// Implements it for one backend's store; see `super` for the arguments.
macro_rules! flow_store {
    ($store:ident, $db:ty) => {
        #[async_trait]
        impl FlowStore for $store {
            async fn runs_put_in_line(&self, runs: &[RunInLine]) -> Result<Admitted, Error> {
                // One admission per key, keys locked in one order, so two passes cannot
                // deadlock on them; a key's limits are those of its last run here.
                let mut keys: BTreeMap<&str, (FlowLimits, Vec<i64>)> = BTreeMap::new();
                for run in runs {
                    let entry = keys
                        .entry(run.key.as_str())
                        .or_insert_with(|| (run.limits, Vec::new()));
                    entry.0 = run.limits;
                    entry.1.push(run.run_id);
                }
                if keys.is_empty() {
                    return Ok(Admitted::default());
                }
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    let mut admitted = Admitted::default();
                    for (key, (limits, run_ids)) in &keys {
                        admitted.extend(
                            super::rules::flow::put_in_line(
                                &mut StoreTx {
                                    store: self,
                                    tx: &mut tx,
                                },
                                run_ids,
                                key,
                                limits,
                            )
                            .await?,
                        );
                    }
                    tx.commit().await?;
                    Ok(admitted)
                })
                .await
            }

            async fn run_flow_release(
                &self,
                run_id: i64,
                audit: Option<&AuditWrite>,
            ) -> Result<Option<String>, Error> {
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    let released = super::rules::flow::release_hold(
                        &mut StoreTx {
                            store: self,
                            tx: &mut tx,
                        },
                        run_id,
                    )
                    .await?;
                    if released.is_some() {
                        self.audit_in(&mut tx, audit).await?;
                        tx.commit().await?;
                    } else {
                        tx.rollback().await?;
                    }
                    Ok(released)
                })
                .await
            }

            async fn run_flow_hand_over(&self, from: i64, to: i64) -> Result<bool, Error> {
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    let handed = super::rules::flow::hand_over(
                        &mut StoreTx {
                            store: self,
                            tx: &mut tx,
                        },
                        from,
                        to,
                    )
                    .await?;
                    tx.commit().await?;
                    Ok(handed)
                })
                .await
            }

            async fn flow_keys_admit_due(&self, limit: i64) -> Result<Admitted, Error> {
                let keys = sqlx::query_scalar::<$db, String>(sql(&self.q.flow.flow_keys_due))
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                let mut admitted = Admitted::default();
                // One transaction per key: a key's admission holds its lock only for itself,
                // and one that fails does not keep the others waiting.
                for key in keys {
                    let done = retry_transient(|| async {
                            let mut tx = self.begin_write().await?;
                            let done = super::rules::flow::admit(
                                &mut StoreTx {
                                    store: self,
                                    tx: &mut tx,
                                },
                                &key,
                            )
                            .await?;
                            tx.commit().await?;
                            Ok(done)
                        })
                        .await;
                    match done {
                        Ok(done) => admitted.extend(done),
                        Err(err) => {
                            tracing::warn!(error = %err, key, "admitting a flow key failed");
                        }
                    }
                }
                Ok(admitted)
            }
        }

        #[async_trait]
        impl FlowTx for StoreTx<'_, $store, Tx<$db>> {
            async fn lock_flow_key(
                &mut self,
                key: &str,
                limits: Option<&FlowLimits>,
            ) -> Result<Option<FlowKeyRow>, Error> {
                if let Some(limits) = limits {
                    let (rate_limit, rate_per_ms) = limits.rate.unzip();
                    sqlx::query::<$db>(sql(&self.store.q.flow.flow_key_upsert))
                        .bind(key)
                        .bind(limits.max_in_flight)
                        .bind(rate_limit)
                        .bind(rate_per_ms)
                        .bind(i64::from(limits.drop_when_full))
                        .bind(i64::from(limits.hold_failed))
                        .execute(&mut **self.tx)
                        .await?;
                }
                type Row = (
                    Option<i64>,
                    Option<i64>,
                    Option<i64>,
                    i64,
                    i64,
                    i64,
                    i64,
                    Option<i64>,
                    i64,
                );
                let row = sqlx::query_as::<$db, Row>(sql(&self.store.q.flow.flow_key_lock))
                    .bind(key)
                    .fetch_optional(&mut **self.tx)
                    .await?;
                Ok(row.map(
                    |(max, rate_limit, rate_per, drop, hold, start, count, recheck, now_ms)| {
                        FlowKeyRow {
                            limits: FlowLimits {
                                max_in_flight: max,
                                rate: rate_limit.zip(rate_per),
                                drop_when_full: drop != 0,
                                hold_failed: hold != 0,
                            },
                            saved: FlowKeySave {
                                window_start_ms: start,
                                window_count: count,
                                recheck_at_ms: recheck,
                            },
                            now_ms,
                        }
                    },
                ))
            }

            async fn flow_enqueue(
                &mut self,
                run_ids: &[i64],
                key: &str,
                message: &str,
            ) -> Result<u64, Error> {
                let Some(update) = with_partitions(&self.store.q.flow.runs_flow_enqueue, run_ids) else {
                    return Ok(0);
                };
                Ok(sqlx::query::<$db>(update)
                    .bind(key)
                    .bind(message)
                    .execute(&mut **self.tx)
                    .await?
                    .rows_affected())
            }

            async fn flow_in_flight(&mut self, key: &str, holding: bool) -> Result<i64, Error> {
                let q = &self.store.q;
                let count = if holding {
                    &q.flow.runs_flow_holding
                } else {
                    &q.flow.runs_flow_in_flight
                };
                Ok(sqlx::query_scalar::<$db, i64>(sql(count))
                    .bind(key)
                    .fetch_one(&mut **self.tx)
                    .await?)
            }

            async fn flow_key_held_by(&mut self, run_id: i64) -> Result<Option<String>, Error> {
                Ok(
                    sqlx::query_scalar::<$db, String>(sql(&self.store.q.flow.run_flow_key_held))
                        .bind(run_id)
                        .fetch_optional(&mut **self.tx)
                        .await?,
                )
            }

            async fn flow_unhold_all(&mut self, key: &str) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.store.q.flow.runs_flow_unhold_all))
                    .bind(key)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }

            async fn flow_take_place(&mut self, run_id: i64, key: &str) -> Result<bool, Error> {
                let done = sqlx::query::<$db>(sql(&self.store.q.flow.run_flow_take_place))
                    .bind(key)
                    .bind(run_id)
                    .bind(key)
                    .execute(&mut **self.tx)
                    .await?
                    .rows_affected();
                Ok(done != 0)
            }

            async fn flow_unhold(&mut self, run_id: i64, key: &str) -> Result<bool, Error> {
                let done = sqlx::query::<$db>(sql(&self.store.q.flow.run_flow_unhold))
                    .bind(run_id)
                    .bind(key)
                    .execute(&mut **self.tx)
                    .await?
                    .rows_affected();
                Ok(done != 0)
            }

            async fn flow_queued(&mut self, key: &str, limit: i64) -> Result<Vec<i64>, Error> {
                Ok(
                    sqlx::query_scalar::<$db, i64>(sql(&self.store.q.flow.runs_flow_queued))
                        .bind(key)
                        .bind(limit)
                        .fetch_all(&mut **self.tx)
                        .await?,
                )
            }

            async fn flow_release(&mut self, run_ids: &[i64]) -> Result<(), Error> {
                if let Some(update) = with_partitions(&self.store.q.flow.runs_flow_release, run_ids) {
                    sqlx::query::<$db>(update).execute(&mut **self.tx).await?;
                }
                Ok(())
            }

            async fn flow_drop(
                &mut self,
                run_ids: &[i64],
                message: &str,
            ) -> Result<Vec<i64>, Error> {
                let mut ended = Vec::with_capacity(run_ids.len());
                for &run_id in run_ids {
                    let done = sqlx::query::<$db>(sql(&self.store.q.flow.run_flow_drop))
                        .bind(message)
                        .bind(run_id)
                        .execute(&mut **self.tx)
                        .await?
                        .rows_affected();
                    if done != 0 {
                        ended.push(run_id);
                    }
                }
                Ok(ended)
            }

            async fn save_flow_key(&mut self, key: &str, save: &FlowKeySave) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.store.q.flow.flow_key_save))
                    .bind(save.window_start_ms)
                    .bind(save.window_count)
                    .bind(save.recheck_at_ms)
                    .bind(key)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }
        }
    };
}

pub(super) use flow_store;
