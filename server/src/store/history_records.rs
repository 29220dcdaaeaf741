//! Parameters and results of run-history retention: which finished runs a purge deletes, and
//! the jobs that keep their history by a rule of their own.

use async_trait::async_trait;

use super::Error;
use crate::states::RunState;

/// The finished states of a dead letter: failed after its last attempt, or never dispatched.
pub const DEAD_LETTER_STATES: [RunState; 2] = [RunState::Failed, RunState::NoExecutor];

/// The finished states that are not dead letters.
const SETTLED_STATES: [RunState; 3] = [RunState::Succeeded, RunState::Cancelled, RunState::Skipped];

/// Which of the finished runs a purge considers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PurgeStates {
    /// Every finished run.
    #[default]
    Finished,
    /// Dead letters only.
    DeadLetters,
    /// Finished runs that are not dead letters.
    NotDeadLetters,
}

impl PurgeStates {
    pub fn states(self) -> &'static [RunState] {
        match self {
            PurgeStates::Finished => &RunState::FINISHED,
            PurgeStates::DeadLetters => &DEAD_LETTER_STATES,
            PurgeStates::NotDeadLetters => &SETTLED_STATES,
        }
    }
}

/// The finished runs a purge deletes, with their attempts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeScope {
    /// Runs that finished before this instant (epoch milliseconds).
    pub finished_before_ms: i64,
    /// A step looks at runs that finished at or after this instant: where the previous step
    /// stopped (0 for the start).
    pub finished_from_ms: i64,
    /// Only runs of these partitions; `None` for every partition.
    pub partitions: Option<Vec<i64>>,
    /// Only this job's runs.
    pub job_id: Option<i64>,
    /// Only runs scheduled at or before this instant (a job's limit on runs kept).
    pub scheduled_until_ms: Option<i64>,
    pub states: PurgeStates,
    /// Leave out the runs of jobs that keep their history for a time of their own.
    pub skip_jobs_with_own_keep: bool,
}

/// How many rows a purge deleted (or, dry, would delete).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    pub runs: u64,
    pub attempts: u64,
}

impl std::ops::AddAssign for Purged {
    fn add_assign(&mut self, other: Purged) {
        self.runs += other.runs;
        self.attempts += other.attempts;
    }
}

/// One step of a purge: the oldest finished runs from `finished_from_ms` looked at, those
/// in scope deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgeStep {
    pub purged: Purged,
    /// Where the next step starts; `None` when this step reached the end of the scope.
    pub next_from_ms: Option<i64>,
}

/// A job's own history rule (`history` in the job document), as its columns hold it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct JobHistoryRule {
    pub job_id: i64,
    /// How long its finished runs are kept, in milliseconds; 0 keeps them forever. `None`:
    /// the node's `retention.runs`.
    pub history_keep_ms: Option<i64>,
    /// How many of its newest runs are kept at most.
    pub history_max_runs: Option<i64>,
}

/// Run-history retention: deleting finished runs with their attempts, in bounded batches.
#[async_trait]
pub trait HistoryStore: Send + Sync + std::fmt::Debug + 'static {
    /// One step of a purge, in one transaction: looks at the `window` oldest runs that
    /// finished in `[scope.finished_from_ms, scope.finished_before_ms)` (in the order of
    /// `runs_finished_idx`, so the database walks the index and stops), and deletes those the
    /// rest of `scope` names, with their attempts. Only finished runs are ever deleted.
    async fn history_delete(&self, scope: &PurgeScope, window: i64) -> Result<PurgeStep, Error>;

    /// How many runs and attempts `history_delete` would delete for `scope`, without a limit.
    async fn history_count(&self, scope: &PurgeScope) -> Result<Purged, Error>;

    /// The jobs of `partitions` with a history rule of their own.
    async fn history_rules(&self, partitions: &[i64]) -> Result<Vec<JobHistoryRule>, Error>;

    /// The instant of a job's run that comes right after its `keep` newest (by instant), if it
    /// has more than `keep` runs: that run and older ones are beyond its limit.
    async fn history_beyond_newest(&self, job_id: i64, keep: i64) -> Result<Option<i64>, Error>;

    /// When the oldest run kept was created (epoch milliseconds), if there is a run.
    async fn history_oldest_run_ms(&self) -> Result<Option<i64>, Error>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_letters_and_the_rest_split_the_finished_states() {
        let texts = |states: &[RunState]| states.iter().map(|s| s.as_str()).collect::<Vec<_>>();
        let mut both = texts(PurgeStates::DeadLetters.states());
        both.extend(texts(PurgeStates::NotDeadLetters.states()));
        both.sort_unstable();
        let mut finished = texts(PurgeStates::Finished.states());
        finished.sort_unstable();
        assert_eq!(both, finished);
    }
}
