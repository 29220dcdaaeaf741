//! Rows and parameters of the schedule policies' tables: exclusion calendars and backfills.

/// A row of `calendars`. The definition is JSON that only `schedule::calendar` interprets.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CalendarRecord {
    pub name: String,
    pub definition_json: String,
    pub version: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// A row of `backfills`: a past range of a job's instants, fired a few at a time.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct BackfillRecord {
    pub backfill_id: i64,
    pub job_id: i64,
    pub partition_id: i64,
    /// The range, both ends included.
    pub from_ms: i64,
    pub to_ms: i64,
    /// Every instant up to this one has been claimed.
    pub cursor_ms: i64,
    /// Most of its runs unfinished at once.
    pub max_in_flight: i64,
    /// `running`, `done` or `cancelled`.
    pub state: String,
    /// Instants claimed so far (skipped ones included; an instant that already had a run is
    /// not claimed again and not counted).
    pub fired: i64,
    pub message: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// The states of a backfill.
pub mod backfill_state {
    pub const RUNNING: &str = "running";
    pub const DONE: &str = "done";
    pub const CANCELLED: &str = "cancelled";
}

/// One step of a backfill: the instants it claims, where its cursor goes, under which fence.
#[derive(Debug, Clone)]
pub struct BackfillStep {
    pub backfill_id: i64,
    pub partition_id: i64,
    /// The partition epoch the node owns: a step under an old epoch claims nothing.
    pub epoch: i64,
    /// The cursor the step was planned from: a step racing another changes nothing.
    pub expected_cursor_ms: i64,
    pub cursor_ms: i64,
    /// `(instant, state, message)`: `pending`, or `skipped` with the calendar that holds it.
    pub instants: Vec<(i64, &'static str, Option<String>)>,
    pub priority: i64,
    /// No instant of the range is left: the backfill is `done`.
    pub done: bool,
    pub message: Option<String>,
}
