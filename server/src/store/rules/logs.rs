//! Appending the log lines of a batch of attempts: an attempt's lines are taken only from the
//! executor that has it (or while it is pending), a line sent again is skipped, and each
//! attempt keeps at most its caps of lines and bytes, the rest dropped behind one marker line
//! that says so. Three statements a batch, whatever its size.

use std::collections::HashMap;

use async_trait::async_trait;

use super::super::error::Error;
use super::super::log_records::{LogAppend, LogCaps, NewLogLine, TRUNCATED_LINE};
use crate::states::AttemptState;

/// Whose an attempt is, for its lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogOwner {
    pub(crate) run_id: i64,
    pub(crate) executor_id: Option<String>,
    pub(crate) state: AttemptState,
}

/// What an attempt's log keeps so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LogSize {
    pub(crate) lines: i64,
    pub(crate) bytes: i64,
    /// The last line number stored (not the marker).
    pub(crate) last_line_no: i64,
}

/// A line to store, with its attempt and run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogRow {
    pub(crate) attempt_id: i64,
    pub(crate) run_id: i64,
    pub(crate) line: NewLogLine,
}

/// What appending lines needs of the database.
#[async_trait]
pub(crate) trait LogDriver: Send {
    /// The attempts of `attempt_ids` that exist, by id.
    async fn log_owners(&mut self, attempt_ids: &[i64]) -> Result<HashMap<i64, LogOwner>, Error>;

    /// What the logs of `attempt_ids` keep so far, by id (an attempt without lines is absent).
    async fn log_sizes(&mut self, attempt_ids: &[i64]) -> Result<HashMap<i64, LogSize>, Error>;

    /// Stores `lines` and `markers` in one transaction, each skipped when its (attempt, line
    /// number) is stored already; how many of `lines` it stored.
    async fn store_log_lines(&mut self, lines: &[LogRow], markers: &[LogRow])
    -> Result<u64, Error>;
}

/// Appends `batch` (lines by attempt) sent by `executor_id` within `caps`.
pub(crate) async fn append_logs<D: LogDriver + ?Sized>(
    db: &mut D,
    executor_id: &str,
    batch: &[(i64, Vec<NewLogLine>)],
    caps: LogCaps,
) -> Result<LogAppend, Error> {
    let mut outcome = LogAppend::default();
    let ids: Vec<i64> = batch.iter().map(|(id, _)| *id).collect();
    if ids.is_empty() {
        return Ok(outcome);
    }
    // Lines of an attempt that is neither pending nor the sender's are refused, of one that no
    // longer exists dropped.
    let owners = db.log_owners(&ids).await?;
    let mut taken: Vec<(i64, i64, &Vec<NewLogLine>)> = Vec::new();
    for (attempt_id, lines) in batch {
        match owners.get(attempt_id) {
            None => outcome.dropped += lines.len() as u64,
            Some(owner)
                if owner.executor_id.as_deref() == Some(executor_id)
                    || owner.state == AttemptState::Pending =>
            {
                taken.push((*attempt_id, owner.run_id, lines));
            }
            Some(_) => {
                outcome.dropped += lines.len() as u64;
                outcome.refused.push(*attempt_id);
            }
        }
    }
    let taken_ids: Vec<i64> = taken.iter().map(|(id, _, _)| *id).collect();
    if taken_ids.is_empty() {
        return Ok(outcome);
    }
    // Two batches of one attempt at once (an executor sends them one at a time) could pass a cap by
    // one batch; never by more.
    let sizes = db.log_sizes(&taken_ids).await?;
    let mut rows = Vec::new();
    let mut markers = Vec::new();
    for (attempt_id, run_id, lines) in taken {
        let size = sizes.get(&attempt_id).copied().unwrap_or_default();
        let mut room_lines = (caps.max_lines - size.lines).max(0);
        let mut room_bytes = (caps.max_bytes - size.bytes).max(0);
        let mut cut = false;
        for line in lines {
            // Sent before: skipped, and not counted against the caps again.
            if line.line_no <= size.last_line_no {
                continue;
            }
            let bytes = i64::try_from(line.message.len()).unwrap_or(i64::MAX);
            if room_lines > 0 && bytes <= room_bytes && line.line_no < TRUNCATED_LINE {
                room_lines -= 1;
                room_bytes -= bytes;
                rows.push(LogRow {
                    attempt_id,
                    run_id,
                    line: line.clone(),
                });
            } else {
                outcome.dropped += 1;
                cut = true;
            }
        }
        if cut {
            markers.push(LogRow {
                attempt_id,
                run_id,
                line: NewLogLine {
                    line_no: TRUNCATED_LINE,
                    at_ms: lines.last().map_or(0, |l| l.at_ms),
                    level: "WARN".to_owned(),
                    message: format!(
                        "[carillon] log truncated: this attempt's log reached its cap ({} lines, \
                         {} bytes); later lines were dropped",
                        caps.max_lines, caps.max_bytes
                    ),
                },
            });
        }
    }
    if rows.is_empty() && markers.is_empty() {
        return Ok(outcome);
    }
    outcome.stored = db.store_log_lines(&rows, &markers).await?;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::super::memory::{MemoryDb, attempt_row};
    use super::*;

    const CAPS: LogCaps = LogCaps {
        max_lines: 3,
        max_bytes: 1_000,
    };

    /// Attempt 1 runs on e1, attempt 2 is pending, attempt 3 runs on e2.
    fn db() -> MemoryDb {
        let mut db = MemoryDb::default();
        for (id, state, executor) in [
            (1, "running", Some("e1")),
            (2, "pending", None),
            (3, "running", Some("e2")),
        ] {
            let mut attempt = attempt_row(id, id * 10, 7, (0, 1), 1);
            attempt.state = state.parse().unwrap();
            attempt.executor_id = executor.map(str::to_owned);
            db.attempts.push(attempt);
        }
        db
    }

    fn lines(from: i64, to: i64, text: &str) -> Vec<NewLogLine> {
        (from..=to)
            .map(|line_no| NewLogLine {
                line_no,
                at_ms: 100 + line_no,
                level: "INFO".to_owned(),
                message: text.to_owned(),
            })
            .collect()
    }

    fn stored(db: &MemoryDb, attempt_id: i64) -> Vec<i64> {
        db.logs
            .iter()
            .filter(|l| l.attempt_id == attempt_id)
            .map(|l| l.line.line_no)
            .collect()
    }

    #[tokio::test]
    async fn lines_are_taken_from_the_attempts_executor_or_while_it_is_pending() {
        let mut db = db();
        let batch = [
            (1, lines(1, 2, "a")),
            (2, lines(1, 1, "b")),
            (3, lines(1, 1, "c")),
            (99, lines(1, 1, "d")),
        ];
        let kept = append_logs(&mut db, "e1", &batch, CAPS).await.unwrap();
        assert_eq!(
            kept,
            LogAppend {
                stored: 3,
                dropped: 2,
                refused: vec![3]
            }
        );
        assert_eq!(db.logs[0].run_id, 10, "a line carries its attempt's run");
    }

    #[tokio::test]
    async fn an_attempt_keeps_its_caps_then_one_marker_and_a_line_sent_again_is_skipped() {
        let mut db = db();
        append_logs(&mut db, "e1", &[(1, lines(1, 2, "x"))], CAPS)
            .await
            .unwrap();
        let again = append_logs(&mut db, "e1", &[(1, lines(1, 5, "x"))], CAPS)
            .await
            .unwrap();
        assert_eq!(
            (again.stored, again.dropped),
            (1, 2),
            "lines 1 and 2 were there already"
        );
        assert_eq!(stored(&db, 1), [1, 2, 3, TRUNCATED_LINE]);
        let marker = &db.logs.last().unwrap().line;
        assert!(
            marker.message.contains("3 lines, 1000 bytes"),
            "{}",
            marker.message
        );
        let later = append_logs(&mut db, "e1", &[(1, lines(6, 6, "x"))], CAPS)
            .await
            .unwrap();
        assert_eq!((later.stored, later.dropped), (0, 1));
        assert_eq!(
            stored(&db, 1).len(),
            4,
            "one marker, however many batches pass the cap"
        );
    }

    #[tokio::test]
    async fn a_line_past_the_byte_cap_is_dropped_and_a_smaller_one_after_it_still_fits() {
        let mut db = db();
        let caps = LogCaps {
            max_lines: 10,
            max_bytes: 10,
        };
        let mut batch = lines(1, 1, "12345678");
        batch.extend(lines(2, 2, "123"));
        batch.extend(lines(3, 3, "12"));
        let kept = append_logs(&mut db, "e1", &[(1, batch)], caps)
            .await
            .unwrap();
        assert_eq!((kept.stored, kept.dropped), (2, 1));
        assert_eq!(stored(&db, 1), [1, 3, TRUNCATED_LINE]);
    }
}
