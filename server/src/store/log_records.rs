//! Rows of `attempt_logs`: the lines handlers log while an attempt runs.

use async_trait::async_trait;

use super::Error;

/// The line number of the marker that ends a truncated log: above every real line, and exact
/// in JavaScript.
pub const TRUNCATED_LINE: i64 = 9_007_199_254_740_991;

/// A line as an executor ships it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLogLine {
    /// From 1, in the order the handler logged.
    pub line_no: i64,
    pub at_ms: i64,
    pub level: String,
    pub message: String,
}

/// A stored line.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LogLine {
    pub attempt_id: i64,
    pub line_no: i64,
    pub at_ms: i64,
    pub level: String,
    pub message: String,
}

/// How much of an attempt's log is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogCaps {
    pub max_lines: i64,
    pub max_bytes: i64,
}

/// What an append kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogAppend {
    /// New lines stored (a line sent again is not counted).
    pub stored: u64,
    /// Lines dropped: past the caps, of attempts that no longer exist, or refused.
    pub dropped: u64,
    /// Attempts that are neither pending nor the sender's: their lines were refused.
    pub refused: Vec<i64>,
}

/// The lines handlers log while attempts run, kept with their runs (`history_delete_runs`
/// deletes them with the runs).
#[async_trait]
pub trait LogStore: Send + Sync + std::fmt::Debug + 'static {
    /// Stores the lines executor `executor_id` shipped, by attempt, within `caps` (lines
    /// already stored are skipped); past the caps, lines are dropped and a marker line
    /// ([`TRUNCATED_LINE`]) says so. Lines of an attempt that is neither pending nor the
    /// executor's are refused.
    async fn attempt_logs_append(
        &self,
        executor_id: &str,
        batch: &[(i64, Vec<NewLogLine>)],
        caps: LogCaps,
    ) -> Result<LogAppend, Error>;

    /// An attempt's lines numbered above `after_line`, in order, at most `limit`.
    async fn attempt_logs_page(
        &self,
        attempt_id: i64,
        after_line: i64,
        limit: i64,
    ) -> Result<Vec<LogLine>, Error>;
}
