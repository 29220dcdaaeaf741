//! `LogStore` on the three backends: appending an attempt's log lines within its caps, and
//! reading them a page at a time.

/// Implements it for one backend's store; `$ignore` starts an insert that skips a line
/// already stored, `$on_conflict` ends it.
macro_rules! log_store {
    ($store:ident, $db:ty, $ignore:literal, $on_conflict:literal) => {
        #[async_trait]
        impl LogStore for $store {
            async fn attempt_logs_append(
                &self,
                attempt_id: i64,
                run_id: i64,
                lines: &[NewLogLine],
                caps: LogCaps,
            ) -> Result<LogAppend, Error> {
                if lines.is_empty() {
                    return Ok(LogAppend::default());
                }
                // What is kept so far. Two batches of one attempt at once (an executor sends
                // them in order) could pass a cap by one batch; never by more.
                let (count, bytes): (i64, i64) =
                    sqlx::query_as::<$db, (i64, i64)>(sql(&self.q.attempt_logs_size))
                        .bind(attempt_id)
                        .bind(TRUNCATED_LINE)
                        .fetch_one(&self.pool)
                        .await?;
                let mut room_lines = (caps.max_lines - count).max(0);
                let mut room_bytes = (caps.max_bytes - bytes).max(0);
                let mut kept = Vec::with_capacity(lines.len());
                let mut dropped = 0u64;
                for line in lines {
                    let size = i64::try_from(line.message.len()).unwrap_or(i64::MAX);
                    if room_lines > 0 && size <= room_bytes && line.line_no < TRUNCATED_LINE {
                        room_lines -= 1;
                        room_bytes -= size;
                        kept.push(line);
                    } else {
                        dropped += 1;
                    }
                }
                let mut stored = 0;
                for chunk in kept.chunks(200) {
                    let mut insert = sqlx::QueryBuilder::<$db>::new(concat!(
                        $ignore,
                        " INTO attempt_logs (attempt_id, line_no, run_id, at_ms, level, message) "
                    ));
                    insert.push_values(chunk, |mut row, line| {
                        row.push_bind(attempt_id)
                            .push_bind(line.line_no)
                            .push_bind(run_id)
                            .push_bind(line.at_ms)
                            .push_bind(line.level.clone())
                            .push_bind(line.message.clone());
                    });
                    insert.push($on_conflict);
                    stored += insert.build().execute(&self.pool).await?.rows_affected();
                }
                if dropped > 0 {
                    let marker = format!(
                        "[carillon] log truncated: this attempt's log reached its cap ({} \
                         lines, {} bytes); later lines were dropped",
                        caps.max_lines, caps.max_bytes
                    );
                    let mut insert = sqlx::QueryBuilder::<$db>::new(concat!(
                        $ignore,
                        " INTO attempt_logs (attempt_id, line_no, run_id, at_ms, level, message) "
                    ));
                    let at_ms = lines.last().map_or(0, |l| l.at_ms);
                    insert.push_values([()], |mut row, ()| {
                        row.push_bind(attempt_id)
                            .push_bind(TRUNCATED_LINE)
                            .push_bind(run_id)
                            .push_bind(at_ms)
                            .push_bind("WARN")
                            .push_bind(marker.clone());
                    });
                    insert.push($on_conflict);
                    insert.build().execute(&self.pool).await?;
                }
                Ok(LogAppend { stored, dropped })
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

pub(super) use log_store;
