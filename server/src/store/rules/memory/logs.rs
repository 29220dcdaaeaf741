//! Attempt logs in the in-memory driver: one line per (attempt, line number), as the SQL key.

use std::collections::HashMap;

use async_trait::async_trait;

use super::MemoryDb;
use crate::store::error::Error;
use crate::store::log_records::TRUNCATED_LINE;
use crate::store::rules::logs::{LogDriver, LogOwner, LogRow, LogSize};

#[async_trait]
impl LogDriver for MemoryDb {
    async fn log_owners(&mut self, attempt_ids: &[i64]) -> Result<HashMap<i64, LogOwner>, Error> {
        Ok(self
            .attempts
            .iter()
            .filter(|a| attempt_ids.contains(&a.attempt_id))
            .map(|a| {
                let owner = LogOwner {
                    run_id: a.run_id,
                    executor_id: a.executor_id.clone(),
                    state: a.state,
                };
                (a.attempt_id, owner)
            })
            .collect())
    }

    async fn log_sizes(&mut self, attempt_ids: &[i64]) -> Result<HashMap<i64, LogSize>, Error> {
        let mut sizes: HashMap<i64, LogSize> = HashMap::new();
        for row in &self.logs {
            // The marker is not counted: it is no line of the executor's.
            if !attempt_ids.contains(&row.attempt_id) || row.line.line_no >= TRUNCATED_LINE {
                continue;
            }
            let size = sizes.entry(row.attempt_id).or_default();
            size.lines += 1;
            size.bytes += i64::try_from(row.line.message.len()).unwrap_or(i64::MAX);
            size.last_line_no = size.last_line_no.max(row.line.line_no);
        }
        Ok(sizes)
    }

    async fn store_log_lines(
        &mut self,
        lines: &[LogRow],
        markers: &[LogRow],
    ) -> Result<u64, Error> {
        let mut stored = 0;
        for (kept, is_marker) in [(lines, false), (markers, true)] {
            for row in kept {
                let there = self
                    .logs
                    .iter()
                    .any(|l| l.attempt_id == row.attempt_id && l.line.line_no == row.line.line_no);
                if !there {
                    self.logs.push(row.clone());
                    stored += u64::from(!is_marker);
                }
            }
        }
        Ok(stored)
    }
}
