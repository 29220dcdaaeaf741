//! The transactions of the run-start and plain-success rules (`store/rules/run_start.rs`,
//! `store/rules/attempt_end.rs`) on the three backends: guarded updates that say which rows
//! they moved.

/// Implements them for one backend's store; see `super` for the arguments.
macro_rules! settle_tx_store {
    ($store:ident, $db:ty, $backend:expr) => {
        impl $store {
            /// The statements of a guarded update on `ids` whose caller must learn which rows
            /// it moved (their run ids): on PostgreSQL and SQLite the update itself with
            /// `RETURNING run_id`; on MySQL, which lacks it, `locking_read` (run first, the
            /// rows still live) and the plain update. `None` when `ids` is empty.
            fn guarded_update(
                update: &Arc<str>,
                locking_read: &Arc<str>,
                ids: &[i64],
            ) -> Option<GuardedUpdate> {
                let update = with_partitions(update, ids)?;
                Some(if $backend == Backend::Mysql {
                    GuardedUpdate {
                        locking_read: Some(with_partitions(locking_read, ids)?),
                        update,
                    }
                } else {
                    GuardedUpdate {
                        locking_read: None,
                        update: AssertSqlSafe(format!("{} RETURNING run_id", update.0)),
                    }
                })
            }

            /// Runs a [`GuardedUpdate`] in `tx`, binding `bind` to the update when given;
            /// returns the run ids of exactly the rows it moved.
            async fn run_guarded_update(
                tx: &mut Tx<$db>,
                statements: &GuardedUpdate,
                bind: Option<&str>,
            ) -> Result<Vec<i64>, Error> {
                let update = || {
                    let query = AssertSqlSafe(statements.update.0.clone());
                    match bind {
                        Some(value) => sqlx::query_scalar::<$db, i64>(query).bind(value.to_owned()),
                        None => sqlx::query_scalar::<$db, i64>(query),
                    }
                };
                Ok(match &statements.locking_read {
                    Some(read) => {
                        let moved = sqlx::query_scalar::<$db, i64>(AssertSqlSafe(read.0.clone()))
                            .fetch_all(&mut **tx)
                            .await?;
                        if !moved.is_empty() {
                            update().fetch_all(&mut **tx).await?;
                        }
                        moved
                    }
                    None => update().fetch_all(&mut **tx).await?,
                })
            }
        }

        #[async_trait]
        impl RunStartTx for StoreTx<'_, $store, Tx<$db>> {
            async fn start_pending_runs(&mut self, run_ids: &[i64]) -> Result<Vec<i64>, Error> {
                let q = &self.store.q;
                let Some(start) = $store::guarded_update(
                    &q.dispatch.runs_start_many,
                    &q.dispatch.runs_pending_among,
                    run_ids,
                ) else {
                    return Ok(Vec::new());
                };
                $store::run_guarded_update(self.tx, &start, None).await
            }
        }

        #[async_trait]
        impl PlainSuccessTx for StoreTx<'_, $store, Tx<$db>> {
            async fn succeed_live_attempts(
                &mut self,
                executor_id: &str,
                attempt_ids: &[i64],
            ) -> Result<Vec<i64>, Error> {
                let q = &self.store.q;
                let Some(end) = $store::guarded_update(
                    &q.dispatch.attempts_succeed_many,
                    &q.dispatch.attempts_live_among,
                    attempt_ids,
                ) else {
                    return Ok(Vec::new());
                };
                $store::run_guarded_update(self.tx, &end, Some(executor_id)).await
            }

            async fn set_outputs(
                &mut self,
                executor_id: &str,
                outputs: &[(i64, String)],
            ) -> Result<(), Error> {
                let ids: Vec<i64> = outputs.iter().map(|(id, _)| *id).collect();
                let Some(template) =
                    with_partitions(&self.store.q.dispatch.attempts_output_many, &ids)
                else {
                    return Ok(());
                };
                // A parameter per output, numbered where the backend numbers them.
                let cases: String = ids
                    .iter()
                    .enumerate()
                    .map(|(i, id)| match $backend {
                        Backend::Postgres => format!("WHEN {id} THEN ${} ", i + 1),
                        _ => format!("WHEN {id} THEN ? "),
                    })
                    .collect();
                let executor = match $backend {
                    Backend::Postgres => format!("${}", ids.len() + 1),
                    _ => "?".to_owned(),
                };
                let statement = AssertSqlSafe(
                    template
                        .0
                        .replace("{cases}", &cases)
                        .replace("{executor}", &executor),
                );
                // Its text differs with every batch: not worth a prepared statement.
                let mut query = sqlx::query::<$db>(statement).persistent(false);
                for (_, output) in outputs {
                    query = query.bind(output.as_str());
                }
                query.bind(executor_id).execute(&mut **self.tx).await?;
                Ok(())
            }

            async fn succeed_runs(&mut self, run_ids: &[i64]) -> Result<u64, Error> {
                let Some(finish) =
                    with_partitions(&self.store.q.dispatch.runs_succeed_many, run_ids)
                else {
                    return Ok(0);
                };
                // As text: its ids make it a new statement each time (`rows_as`).
                Ok(sqlx::raw_sql(finish)
                    .execute(&mut **self.tx)
                    .await?
                    .rows_affected())
            }
        }
    };
}

pub(super) use settle_tx_store;
