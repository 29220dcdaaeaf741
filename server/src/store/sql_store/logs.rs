//! `LogStore` on the three backends: the statements that append a batch's lines (the rule:
//! `super::rules::logs`), and reading them a page at a time.

/// Implements it for one backend's store; `$ignore` starts an insert that skips a line
/// already stored, `$on_conflict` ends it, and `$relaxed` (when not empty) lets the batch's
/// transaction commit without waiting for its flush to disk.
macro_rules! log_store {
    ($store:ident, $db:ty, $ignore:literal, $on_conflict:literal, $relaxed:literal) => {
        #[async_trait]
        impl LogDriver for StorePool<'_, $store> {
            async fn log_owners(
                &mut self,
                attempt_ids: &[i64],
            ) -> Result<HashMap<i64, LogOwner>, Error> {
                let Some(owners) = with_partitions(&self.store.q.dispatch.attempt_logs_owners, attempt_ids)
                else {
                    return Ok(HashMap::new());
                };
                Ok(
                    sqlx::query_as::<$db, (i64, i64, Option<String>, String)>(owners)
                        .fetch_all(&self.store.pool)
                        .await?
                        .into_iter()
                        .map(|(id, run_id, executor_id, state)| {
                            let owner = LogOwner {
                                run_id,
                                executor_id,
                                state: state.parse()?,
                            };
                            Ok((id, owner))
                        })
                        .collect::<Result<_, Error>>()?,
                )
            }

            async fn log_sizes(
                &mut self,
                attempt_ids: &[i64],
            ) -> Result<HashMap<i64, LogSize>, Error> {
                let Some(sizes) = with_partitions(&self.store.q.dispatch.attempt_logs_sizes, attempt_ids)
                else {
                    return Ok(HashMap::new());
                };
                Ok(sqlx::query_as::<$db, (i64, i64, i64, i64)>(sizes)
                    .bind(TRUNCATED_LINE)
                    .fetch_all(&self.store.pool)
                    .await?
                    .into_iter()
                    .map(|(id, lines, bytes, last_line_no)| {
                        let size = LogSize {
                            lines,
                            bytes,
                            last_line_no,
                        };
                        (id, size)
                    })
                    .collect())
            }

            async fn store_log_lines(
                &mut self,
                lines: &[LogRow],
                markers: &[LogRow],
            ) -> Result<u64, Error> {
                // One transaction, so one commit, per batch. Log lines are not worth an fsync
                // that the fire path's commits would queue behind: on PostgreSQL this commit
                // does not wait for its flush (a crash of the database loses at most the last
                // fraction of a second of lines, never a run).
                let mut tx = self.store.begin_write().await?;
                if !$relaxed.is_empty() {
                    sqlx::query::<$db>($relaxed).execute(&mut *tx).await?;
                }
                let mut stored = 0;
                for (kept, is_marker) in [(lines, false), (markers, true)] {
                    for chunk in kept.chunks(LOG_ROWS_PER_INSERT) {
                        let mut insert = sqlx::QueryBuilder::<$db>::new(concat!(
                            $ignore,
                            " INTO attempt_logs (attempt_id, line_no, run_id, at_ms, level, message) "
                        ));
                        insert.push_values(chunk, |mut row, kept| {
                            row.push_bind(kept.attempt_id)
                                .push_bind(kept.line.line_no)
                                .push_bind(kept.run_id)
                                .push_bind(kept.line.at_ms)
                                .push_bind(kept.line.level.clone())
                                .push_bind(kept.line.message.clone());
                        });
                        insert.push($on_conflict);
                        let inserted = insert.build().execute(&mut *tx).await?.rows_affected();
                        // A marker is no line of the executor's.
                        if !is_marker {
                            stored += inserted;
                        }
                    }
                }
                tx.commit().await?;
                Ok(stored)
            }
        }

        #[async_trait]
        impl LogStore for $store {
            async fn attempt_logs_append(
                &self,
                executor_id: &str,
                batch: &[(i64, Vec<NewLogLine>)],
                caps: LogCaps,
            ) -> Result<LogAppend, Error> {
                super::rules::logs::append_logs(
                    &mut StorePool { store: self },
                    executor_id,
                    batch,
                    caps,
                )
                .await
            }

            async fn attempt_logs_page(
                &self,
                attempt_id: i64,
                after_line: i64,
                limit: i64,
            ) -> Result<Vec<LogLine>, Error> {
                Ok(
                    sqlx::query_as::<$db, LogLine>(sql(&self.q.dispatch.attempt_logs_page))
                        .bind(attempt_id)
                        .bind(after_line)
                        .bind(limit)
                        .fetch_all(&self.pool)
                        .await?,
                )
            }
        }
    };
}

/// Lines in one insert: six binds each, well under every backend's limit.
pub(super) const LOG_ROWS_PER_INSERT: usize = 500;

pub(super) use log_store;
