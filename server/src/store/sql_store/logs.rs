//! `LogStore` on the three backends: appending the lines of a batch's attempts within their
//! caps (three statements a batch, whatever its size), and reading them a page at a time.

/// Implements it for one backend's store; `$ignore` starts an insert that skips a line
/// already stored, `$on_conflict` ends it, and `$relaxed` (when not empty) lets the batch's
/// transaction commit without waiting for its flush to disk.
macro_rules! log_store {
    ($store:ident, $db:ty, $ignore:literal, $on_conflict:literal, $relaxed:literal) => {
        #[async_trait]
        impl LogStore for $store {
            async fn attempt_logs_append(
                &self,
                executor_id: &str,
                batch: &[(i64, Vec<NewLogLine>)],
                caps: LogCaps,
            ) -> Result<LogAppend, Error> {
                let mut outcome = LogAppend::default();
                let ids: Vec<i64> = batch.iter().map(|(id, _)| *id).collect();
                let Some(owners_sql) = with_partitions(&self.q.attempt_logs_owners, &ids) else {
                    return Ok(outcome);
                };
                // Whose the attempts are: lines of an attempt that is neither pending nor the
                // sender's are refused, of one that no longer exists dropped.
                let owners: HashMap<i64, (i64, Option<String>, String)> =
                    sqlx::query_as::<$db, (i64, i64, Option<String>, String)>(owners_sql)
                        .fetch_all(&self.pool)
                        .await?
                        .into_iter()
                        .map(|(id, run, executor, state)| (id, (run, executor, state)))
                        .collect();
                let mut taken: Vec<(i64, i64, &Vec<NewLogLine>)> = Vec::new();
                for (attempt_id, lines) in batch {
                    match owners.get(attempt_id) {
                        None => outcome.dropped += lines.len() as u64,
                        Some((run_id, executor, state))
                            if executor.as_deref() == Some(executor_id)
                                || state == attempt_state::PENDING =>
                        {
                            taken.push((*attempt_id, *run_id, lines));
                        }
                        Some(_) => {
                            outcome.dropped += lines.len() as u64;
                            outcome.refused.push(*attempt_id);
                        }
                    }
                }
                let taken_ids: Vec<i64> = taken.iter().map(|(id, _, _)| *id).collect();
                let Some(sizes_sql) = with_partitions(&self.q.attempt_logs_sizes, &taken_ids)
                else {
                    return Ok(outcome);
                };
                // What each keeps so far. Two batches of one attempt at once (an executor
                // sends them in order) could pass a cap by one batch; never by more.
                let sizes: HashMap<i64, (i64, i64, i64)> =
                    sqlx::query_as::<$db, (i64, i64, i64, i64)>(sizes_sql)
                        .bind(TRUNCATED_LINE)
                        .fetch_all(&self.pool)
                        .await?
                        .into_iter()
                        .map(|(id, count, bytes, last)| (id, (count, bytes, last)))
                        .collect();
                let mut rows: Vec<(i64, i64, NewLogLine)> = Vec::new();
                let mut markers: Vec<(i64, i64, NewLogLine)> = Vec::new();
                for (attempt_id, run_id, lines) in taken {
                    let (count, bytes, last) = sizes.get(&attempt_id).copied().unwrap_or((0, 0, 0));
                    let mut room_lines = (caps.max_lines - count).max(0);
                    let mut room_bytes = (caps.max_bytes - bytes).max(0);
                    let mut cut = false;
                    for line in lines {
                        // Sent before (executors send an attempt's lines in order): skipped,
                        // and not counted against the caps again.
                        if line.line_no <= last {
                            continue;
                        }
                        let size = i64::try_from(line.message.len()).unwrap_or(i64::MAX);
                        if room_lines > 0 && size <= room_bytes && line.line_no < TRUNCATED_LINE {
                            room_lines -= 1;
                            room_bytes -= size;
                            rows.push((attempt_id, run_id, line.clone()));
                        } else {
                            outcome.dropped += 1;
                            cut = true;
                        }
                    }
                    if cut {
                        markers.push((
                            attempt_id,
                            run_id,
                            NewLogLine {
                                line_no: TRUNCATED_LINE,
                                at_ms: lines.last().map_or(0, |l| l.at_ms),
                                level: "WARN".to_owned(),
                                message: format!(
                                    "[carillon] log truncated: this attempt's log reached its \
                                     cap ({} lines, {} bytes); later lines were dropped",
                                    caps.max_lines, caps.max_bytes
                                ),
                            },
                        ));
                    }
                }
                if rows.is_empty() && markers.is_empty() {
                    return Ok(outcome);
                }
                // One transaction, so one commit, per batch. Log lines are not worth an fsync
                // that the fire path's commits would queue behind: on PostgreSQL this commit
                // does not wait for its flush (a crash of the database loses at most the last
                // fraction of a second of lines, never a run).
                let mut tx = self.begin_write().await?;
                if !$relaxed.is_empty() {
                    sqlx::query::<$db>($relaxed).execute(&mut *tx).await?;
                }
                for (kept, is_marker) in [(&rows, false), (&markers, true)] {
                    for chunk in kept.chunks(LOG_ROWS_PER_INSERT) {
                        let mut insert = sqlx::QueryBuilder::<$db>::new(concat!(
                            $ignore,
                            " INTO attempt_logs (attempt_id, line_no, run_id, at_ms, level, message) "
                        ));
                        insert.push_values(chunk, |mut row, (attempt_id, run_id, line)| {
                            row.push_bind(*attempt_id)
                                .push_bind(line.line_no)
                                .push_bind(*run_id)
                                .push_bind(line.at_ms)
                                .push_bind(line.level.clone())
                                .push_bind(line.message.clone());
                        });
                        insert.push($on_conflict);
                        let inserted = insert.build().execute(&mut *tx).await?.rows_affected();
                        // A marker is no line of the executor's.
                        if !is_marker {
                            outcome.stored += inserted;
                        }
                    }
                }
                tx.commit().await?;
                Ok(outcome)
            }

            async fn attempt_logs_page(
                &self,
                attempt_id: i64,
                after_line: i64,
                limit: i64,
            ) -> Result<Vec<LogLine>, Error> {
                Ok(
                    sqlx::query_as::<$db, LogLine>(sql(&self.q.attempt_logs_page))
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
