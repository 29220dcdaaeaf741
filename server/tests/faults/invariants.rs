//! The promise, checked from the database after a scenario: the runs of a window compared
//! instant by instant with the instants each job was expected to fire.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::harness::{Database, id_list};

/// A run as the database holds it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunRow {
    pub run_id: i64,
    pub job_id: i64,
    pub scheduled_at_ms: i64,
    pub state: String,
    pub node_id: String,
    pub partition_id: i64,
    pub epoch: i64,
    pub created_at_ms: i64,
    pub trigger_kind: String,
    /// When its first attempt reached an executor.
    pub dispatched_at_ms: Option<i64>,
}

impl RunRow {
    /// How late it reached an executor, by the database clock.
    pub fn lateness_ms(&self) -> Option<i64> {
        self.dispatched_at_ms.map(|d| d - self.scheduled_at_ms)
    }
}

/// The latest a run of `runs` reached its executor.
pub fn max_lateness_ms(runs: &[RunRow]) -> i64 {
    runs.iter()
        .filter_map(RunRow::lateness_ms)
        .max()
        .unwrap_or(0)
}

const FINISHED: [&str; 5] = ["succeeded", "failed", "cancelled", "skipped", "no_executor"];

/// The runs of `jobs` scheduled in `[from, to]`.
pub async fn runs(db: &Database, jobs: &[i64], from: i64, to: i64) -> Vec<RunRow> {
    db.rows(
        &format!(
            "SELECT run_id, job_id, scheduled_at_ms, state, node_id, partition_id, epoch, \
             created_at_ms, trigger_kind, (SELECT MIN(a.dispatched_at_ms) FROM attempts a \
             WHERE a.run_id = runs.run_id) AS dispatched_at_ms FROM runs WHERE job_id IN ({}) \
             AND scheduled_at_ms BETWEEN ? AND ? ORDER BY job_id, scheduled_at_ms",
            id_list(jobs)
        ),
        &[from, to],
    )
    .await
}

/// Waits until every job of `jobs` has fired at or past `to` and every run of the window has
/// finished, or until nothing has moved for `stalled` (the check then names the unfinished
/// runs). A backlog that drains, however slowly, is waited for (up to [`SETTLE_CAP`]): the
/// scenarios assert that nothing is lost or doubled, and report lateness as a figure; how
/// fast two shared cores drain it is not theirs to judge.
pub async fn settle(db: &Database, jobs: &[i64], from: i64, to: i64, stalled: Duration) {
    let listed = id_list(jobs);
    let began = tokio::time::Instant::now();
    let mut deadline = began + stalled;
    let mut least_left = i64::MAX;
    loop {
        let open = db
            .scalar(
                &format!(
                    "SELECT COUNT(*) FROM runs WHERE job_id IN ({listed}) \
                     AND scheduled_at_ms BETWEEN ? AND ? AND state IN ('pending', 'queued', 'running')"
                ),
                &[from, to],
            )
            .await;
        let behind = db
            .scalar(
                &format!(
                    "SELECT COUNT(*) FROM jobs WHERE job_id IN ({listed}) AND state = 'running' \
                     AND (last_fired_at_ms IS NULL OR last_fired_at_ms < ?)"
                ),
                &[to],
            )
            .await;
        let now = tokio::time::Instant::now();
        if open + behind < least_left {
            least_left = open + behind;
            deadline = now + stalled;
        }
        if least_left == 0 || now >= deadline || now - began >= SETTLE_CAP {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The longest [`settle`] waits for a backlog that keeps draining.
const SETTLE_CAP: Duration = Duration::from_secs(300);

/// What a window held, against what was expected.
#[derive(Debug, Default)]
pub struct Verdict {
    pub runs: usize,
    /// (job, instant) with more than one run.
    pub duplicates: Vec<(i64, i64)>,
    /// (job, instant) expected and not run.
    pub missed: Vec<(i64, i64)>,
    /// (job, instant) run though not expected.
    pub unexpected: Vec<(i64, i64)>,
    /// Runs still pending, queued or running.
    pub unfinished: Vec<i64>,
    /// Runs that finished otherwise than `succeeded`.
    pub not_succeeded: Vec<(i64, String)>,
}

impl Verdict {
    /// Compares `runs` with `expected` (job → instants).
    pub fn of(runs: &[RunRow], expected: &BTreeMap<i64, BTreeSet<i64>>) -> Verdict {
        Self::allowing(runs, expected, &BTreeMap::new())
    }

    /// Compares `runs` with `expected`, where the instants of `allowed` may have run or not
    /// (a race the contract leaves open), but not twice.
    pub fn allowing(
        runs: &[RunRow],
        expected: &BTreeMap<i64, BTreeSet<i64>>,
        allowed: &BTreeMap<i64, BTreeSet<i64>>,
    ) -> Verdict {
        let mut verdict = Verdict {
            runs: runs.len(),
            ..Verdict::default()
        };
        let mut seen: BTreeMap<(i64, i64), usize> = BTreeMap::new();
        for run in runs {
            *seen.entry((run.job_id, run.scheduled_at_ms)).or_default() += 1;
            if !FINISHED.contains(&run.state.as_str()) {
                verdict.unfinished.push(run.run_id);
            } else if run.state != "succeeded" {
                verdict.not_succeeded.push((run.run_id, run.state.clone()));
            }
        }
        for (&(job, at), &count) in &seen {
            if count > 1 {
                verdict.duplicates.push((job, at));
            }
            let listed =
                |m: &BTreeMap<i64, BTreeSet<i64>>| m.get(&job).is_some_and(|e| e.contains(&at));
            if !listed(expected) && !listed(allowed) {
                verdict.unexpected.push((job, at));
            }
        }
        for (&job, instants) in expected {
            for &at in instants {
                if !seen.contains_key(&(job, at)) {
                    verdict.missed.push((job, at));
                }
            }
        }
        verdict
    }

    /// The figures a scenario prints.
    pub fn figures(&self) -> String {
        format!(
            "runs checked {}, duplicates {}, missed {}, unexpected {}, unfinished {}",
            self.runs,
            self.duplicates.len(),
            self.missed.len(),
            self.unexpected.len(),
            self.unfinished.len()
        )
    }

    /// Panics, naming the first offenders, unless every expected instant ran exactly once,
    /// nothing else ran, and every run finished; with `all_succeed`, every run succeeded.
    pub fn assert_exactly_once(&self, scenario: &str, all_succeed: bool) {
        let first = |v: &[(i64, i64)]| v[..v.len().min(5)].to_vec();
        assert!(
            self.duplicates.is_empty(),
            "{scenario}: instants run twice: {:?}",
            first(&self.duplicates)
        );
        assert!(
            self.missed.is_empty(),
            "{scenario}: {} instants missed, first {:?}",
            self.missed.len(),
            first(&self.missed)
        );
        assert!(
            self.unexpected.is_empty(),
            "{scenario}: {} runs at instants not expected, first {:?}",
            self.unexpected.len(),
            first(&self.unexpected)
        );
        assert!(
            self.unfinished.is_empty(),
            "{scenario}: {} runs left unfinished, first {:?}",
            self.unfinished.len(),
            &self.unfinished[..self.unfinished.len().min(5)]
        );
        if all_succeed {
            assert!(
                self.not_succeeded.is_empty(),
                "{scenario}: runs that did not succeed: {:?}",
                &self.not_succeeded[..self.not_succeeded.len().min(5)]
            );
        }
    }
}

/// Every job of `jobs` expected at each of `instants`.
pub fn each_at(jobs: &[i64], instants: &[i64]) -> BTreeMap<i64, BTreeSet<i64>> {
    jobs.iter()
        .map(|j| (*j, instants.iter().copied().collect()))
        .collect()
}

/// Runs whose attempts succeeded more than once: a handler's work done twice for one run.
pub async fn runs_succeeded_twice(db: &Database, jobs: &[i64], from: i64, to: i64) -> Vec<i64> {
    let rows: Vec<(i64, i64)> = db
        .rows(
            &format!(
                "SELECT a.run_id, COUNT(*) FROM attempts a JOIN runs r ON r.run_id = a.run_id \
                 WHERE r.job_id IN ({}) AND r.scheduled_at_ms BETWEEN ? AND ? \
                 AND a.state = 'succeeded' GROUP BY a.run_id, a.shard_index HAVING COUNT(*) > 1",
                id_list(jobs)
            ),
            &[from, to],
        )
        .await;
    rows.into_iter().map(|(run, _)| run).collect()
}
