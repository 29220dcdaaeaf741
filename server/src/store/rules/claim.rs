//! The fenced claim of scheduled instants (`JobStore::runs_claim`): in the caller's
//! transaction, lock the claim's partitions and jobs, keep only the claims still this node's at
//! their epoch and still current for their job, advance the jobs, insert the runs (under the
//! job's overlap rule), and start those that are one attempt each.

use std::collections::HashMap;

use async_trait::async_trait;

use super::super::error::Error;
use super::super::job_records::{ClaimOutcome, OverlapRule, RunClaim};
use super::fence::{FenceTx, owned};
use crate::states::{JobState, RunState};

/// A job as the claim locked it: what decides whether an instant is still its to fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClaimJob {
    pub(crate) job_id: i64,
    pub(crate) version: i64,
    pub(crate) state: JobState,
    pub(crate) last_fired_at_ms: Option<i64>,
    /// Its arguments, read only when asked for (a run of it starts in the claim).
    pub(crate) args_json: Option<String>,
}

/// A job the claim advances: its `last_fired_at_ms` becomes `at_ms`, `fired` is added to its
/// `fired_count`, and `done` finishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JobAdvance {
    pub(crate) job_id: i64,
    pub(crate) at_ms: i64,
    pub(crate) fired: i64,
    pub(crate) done: bool,
}

/// A run to insert for a claim: `running` when it starts in the claim, else the claim's state.
/// A run already at its instant (a manual one) keeps it, and nothing is inserted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimedRun<'a> {
    pub(crate) claim: &'a RunClaim,
    pub(crate) starts: bool,
}

impl ClaimedRun<'_> {
    /// The state it is inserted in.
    pub(crate) fn state(&self) -> RunState {
        if self.starts {
            RunState::Running
        } else {
            self.claim.state
        }
    }

    /// Whether it is inserted finished (a calendar's skip).
    pub(crate) fn finished(&self) -> bool {
        !RunState::UNFINISHED.contains(&self.claim.state)
    }
}

/// A run the claim inserted `running`, to get its first attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StartedRun {
    pub(crate) run_id: i64,
    pub(crate) job_id: i64,
    pub(crate) partition_id: i64,
    pub(crate) priority: i64,
    pub(crate) scheduled_at_ms: i64,
}

/// A run's first attempt (of one shard), inserted `pending` with attempt number 1.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FirstAttempt<'a> {
    pub(crate) run_id: i64,
    pub(crate) job_id: i64,
    pub(crate) partition_id: i64,
    pub(crate) priority: i64,
    pub(crate) shard_index: i64,
    pub(crate) shard_total: i64,
    pub(crate) args_json: &'a str,
    /// Its run's instant (plus any jitter): a run claimed ahead waits for it.
    pub(crate) not_before_ms: i64,
    /// The executor its shard prefers, if any.
    pub(crate) executor_id: Option<&'a str>,
}

/// Inserts the first attempts of runs started where they are inserted (by a claim, as a
/// follow-up, as a task's run).
#[async_trait]
pub(crate) trait FirstAttemptTx: Send {
    async fn insert_first_attempts(&mut self, attempts: &[FirstAttempt<'_>]) -> Result<(), Error>;
}

/// What the claim needs of a write transaction: statements with their binds, no decisions.
/// Lists of ids are locked in ascending order, in one statement each, so two claimers cannot
/// deadlock.
#[async_trait]
pub(crate) trait ClaimTx: FenceTx + FirstAttemptTx {
    /// Whether a one-attempt run may start in its claim here. Not on MySQL: there the claim's
    /// extra statements cost more than the start pass they save (`bench/README.md`).
    fn starts_in_claim(&self) -> bool;

    /// Locks `job_ids` (sorted, distinct, not empty), with their arguments when `with_args`.
    async fn lock_jobs(&mut self, job_ids: &[i64], with_args: bool)
    -> Result<Vec<ClaimJob>, Error>;

    /// Advances the jobs, each named once.
    async fn advance_jobs(&mut self, rows: &[JobAdvance]) -> Result<(), Error>;

    /// Inserts the runs, skipping an instant a run already holds; the `running` runs inserted.
    async fn insert_claimed_runs(
        &mut self,
        node_id: &str,
        runs: &[ClaimedRun<'_>],
    ) -> Result<Vec<StartedRun>, Error>;

    /// Advances the claim's job if it is still `running` at the claim's version and last fired
    /// before its instant; whether it did.
    async fn advance_job_if_current(&mut self, claim: &RunClaim) -> Result<bool, Error>;

    /// The oldest unfinished run of a job, if any.
    async fn unfinished_run_of_job(&mut self, job_id: i64) -> Result<Option<i64>, Error>;

    /// Cancels every unfinished run of a job and their unfinished attempts, saying `why`.
    async fn cancel_unfinished_of_job(
        &mut self,
        job_id: i64,
        partition_id: i64,
        why: &str,
    ) -> Result<(), Error>;

    /// Inserts one claim's run in `state`, unless a run already holds its instant.
    async fn insert_run(
        &mut self,
        node_id: &str,
        claim: &RunClaim,
        state: RunState,
        message: Option<&str>,
    ) -> Result<(), Error>;
}

/// Claims `claims` for `node_id` in `tx`: each is `Fenced` unless its partition is this
/// node's at its epoch, `Stale` unless its job still runs at its version and last fired before
/// its instant (claims of one job are taken in batch order), else `Claimed`: the job advanced
/// and the run inserted, in the state its overlap rule gives it (`Skipped` when that state is
/// `skipped`, as a calendar's exclusion or the overlap rule `skip` makes it).
pub(crate) async fn claim<T: ClaimTx + ?Sized>(
    tx: &mut T,
    node_id: &str,
    claims: &[RunClaim],
) -> Result<Vec<ClaimOutcome>, Error> {
    if claims.is_empty() {
        return Ok(Vec::new());
    }
    let wanted: Vec<(i64, i64)> = claims.iter().map(|c| (c.partition_id, c.epoch)).collect();
    let held = owned(tx, node_id, &wanted).await?;
    let mut outcomes: Vec<Option<ClaimOutcome>> = claims
        .iter()
        .map(|c| (!held.contains(&(c.partition_id, c.epoch))).then_some(ClaimOutcome::Fenced))
        .collect();
    claim_set_based(tx, node_id, claims, &mut outcomes).await?;
    // Claims under an overlap rule read their job's unfinished runs: one at a time.
    for (claim, outcome) in claims.iter().zip(outcomes.iter_mut()) {
        if outcome.is_some() {
            continue;
        }
        if !tx.advance_job_if_current(claim).await? {
            *outcome = Some(ClaimOutcome::Stale);
            continue;
        }
        let (state, message) = overlap_decision(tx, claim).await?;
        tx.insert_run(node_id, claim, state, message.as_deref())
            .await?;
        *outcome = Some(inserted_as(state));
    }
    Ok(outcomes
        .into_iter()
        .map(|o| o.unwrap_or(ClaimOutcome::Stale))
        .collect())
}

/// Claims the undecided claims whose job allows overlapping runs (nearly all) in a constant
/// number of statements: lock their jobs, decide each claim against the locked rows, advance
/// the jobs in one write and insert the runs in multi-row writes.
async fn claim_set_based<T: ClaimTx + ?Sized>(
    tx: &mut T,
    node_id: &str,
    claims: &[RunClaim],
    outcomes: &mut [Option<ClaimOutcome>],
) -> Result<(), Error> {
    let starts_in_claim = tx.starts_in_claim();
    let chosen: Vec<usize> = (0..claims.len())
        .filter(|&i| outcomes[i].is_none() && claims[i].overlap == OverlapRule::Allow)
        .collect();
    if chosen.is_empty() {
        return Ok(());
    }
    let mut job_ids: Vec<i64> = chosen.iter().map(|&i| claims[i].job_id).collect();
    job_ids.sort_unstable();
    job_ids.dedup();
    // Only a pending run starts in its claim (never one a calendar skipped), and only where
    // the driver allows it.
    let starts =
        |claim: &RunClaim| starts_in_claim && claim.start && claim.state == RunState::Pending;
    let starting = chosen.iter().any(|&i| starts(&claims[i]));
    let mut args: HashMap<i64, String> = HashMap::new();
    let mut jobs: HashMap<i64, (i64, bool, Option<i64>)> = HashMap::new();
    for job in tx.lock_jobs(&job_ids, starting).await? {
        if let Some(job_args) = job.args_json {
            args.insert(job.job_id, job_args);
        }
        let running = job.state == JobState::Running;
        jobs.insert(job.job_id, (job.version, running, job.last_fired_at_ms));
    }
    // The same rule as `advance_job_if_current`, claim after claim in batch order.
    let mut advanced: Vec<JobAdvance> = Vec::new();
    let mut advanced_at: HashMap<i64, usize> = HashMap::new();
    let mut inserts: Vec<ClaimedRun<'_>> = Vec::new();
    for i in chosen {
        let claim = &claims[i];
        let at = claim.scheduled_at_ms;
        let current = jobs
            .get_mut(&claim.job_id)
            .filter(|(version, running, last)| {
                *version == claim.job_version && *running && last.is_none_or(|l| l < at)
            });
        let Some((_, running, last)) = current else {
            outcomes[i] = Some(ClaimOutcome::Stale);
            continue;
        };
        *last = Some(at);
        *running = !claim.job_done;
        let fired = i64::from(claim.counts_as_fired());
        match advanced_at.get(&claim.job_id) {
            Some(&row) => {
                let row = &mut advanced[row];
                row.at_ms = at;
                row.fired += fired;
                row.done = claim.job_done;
            }
            None => {
                advanced_at.insert(claim.job_id, advanced.len());
                advanced.push(JobAdvance {
                    job_id: claim.job_id,
                    at_ms: at,
                    fired,
                    done: claim.job_done,
                });
            }
        }
        inserts.push(ClaimedRun {
            claim,
            starts: starts(claim),
        });
        outcomes[i] = Some(inserted_as(claim.state));
    }
    if advanced.is_empty() {
        return Ok(());
    }
    tx.advance_jobs(&advanced).await?;
    // The runs that started here get their one attempt in the same transaction, so no run is
    // ever `running` without attempts.
    let started = tx.insert_claimed_runs(node_id, &inserts).await?;
    let firsts: Vec<FirstAttempt<'_>> = started
        .iter()
        .map(|run| FirstAttempt {
            run_id: run.run_id,
            job_id: run.job_id,
            partition_id: run.partition_id,
            priority: run.priority,
            shard_index: 0,
            shard_total: 1,
            args_json: args.get(&run.job_id).map_or("null", String::as_str),
            not_before_ms: run.scheduled_at_ms,
            executor_id: None,
        })
        .collect();
    if firsts.is_empty() {
        return Ok(());
    }
    tx.insert_first_attempts(&firsts).await
}

/// The outcome of a claim whose run was inserted in `state`.
fn inserted_as(state: RunState) -> ClaimOutcome {
    if state == RunState::Skipped {
        ClaimOutcome::Skipped
    } else {
        ClaimOutcome::Claimed
    }
}

/// The state and message of a claimed run under its job's overlap rule.
async fn overlap_decision<T: ClaimTx + ?Sized>(
    tx: &mut T,
    claim: &RunClaim,
) -> Result<(RunState, Option<String>), Error> {
    // A calendar's skip stands whatever the overlap rule.
    if claim.overlap == OverlapRule::Allow || claim.state == RunState::Skipped {
        return Ok((claim.state, claim.message.clone()));
    }
    let Some(previous) = tx.unfinished_run_of_job(claim.job_id).await? else {
        return Ok((claim.state, claim.message.clone()));
    };
    Ok(match claim.overlap {
        OverlapRule::Allow => (claim.state, claim.message.clone()),
        OverlapRule::Skip => (
            RunState::Skipped,
            Some(format!(
                "run {previous} of this job is unfinished (overlap: skip)"
            )),
        ),
        OverlapRule::Queue => (
            RunState::Queued,
            Some(format!(
                "waiting for run {previous} of this job (overlap: queue)"
            )),
        ),
        OverlapRule::Replace => {
            let why = format!(
                "replaced by the run of instant {} (overlap: replace)",
                claim.scheduled_at_ms
            );
            tx.cancel_unfinished_of_job(claim.job_id, claim.partition_id, &why)
                .await?;
            (claim.state, claim.message.clone())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::memory::{MemoryDb, MemoryJob, MemoryRun, attempt_row};
    use super::*;
    use crate::states::{AttemptState, TriggerKind};
    use crate::store::dispatch_records::AttemptRecord;
    use crate::store::namespace_records::NamespaceId;

    const NODE: &str = "n1";
    const JOB: i64 = 7;
    const PARTITION: i64 = 3;
    const EPOCH: i64 = 2;

    /// A database where `NODE` owns `PARTITION` at `EPOCH` and `JOB` runs at version 1.
    fn db(starts_in_claim: bool) -> MemoryDb {
        let mut db = MemoryDb {
            starts_in_claim,
            ..MemoryDb::default()
        };
        db.partitions
            .insert(PARTITION, (Some(NODE.to_owned()), EPOCH));
        db.jobs.insert(
            JOB,
            MemoryJob {
                version: 1,
                state: JobState::Running,
                args_json: r#"{"region":"eu"}"#.to_owned(),
                ..MemoryJob::default()
            },
        );
        db
    }

    fn claim_at(at_ms: i64) -> RunClaim {
        RunClaim {
            job_id: JOB,
            namespace_id: NamespaceId(3),
            job_version: 1,
            partition_id: PARTITION,
            epoch: EPOCH,
            scheduled_at_ms: at_ms,
            trigger_kind: TriggerKind::Schedule,
            priority: 5,
            state: RunState::Pending,
            message: None,
            overlap: OverlapRule::Allow,
            job_done: false,
            start: false,
        }
    }

    async fn run(db: &mut MemoryDb, claims: &[RunClaim]) -> Vec<ClaimOutcome> {
        claim(db, NODE, claims).await.unwrap()
    }

    fn states(db: &MemoryDb) -> Vec<(i64, String)> {
        db.runs_of(JOB)
            .iter()
            .map(|r| (r.scheduled_at_ms, r.state.as_str().to_owned()))
            .collect()
    }

    #[tokio::test]
    async fn a_partition_that_is_not_this_nodes_at_its_epoch_fences_the_claim() {
        for owner in [(Some("n2"), EPOCH), (Some(NODE), EPOCH + 1), (None, EPOCH)] {
            let mut db = db(true);
            db.partitions
                .insert(PARTITION, (owner.0.map(str::to_owned), owner.1));
            assert_eq!(
                run(&mut db, &[claim_at(1_000)]).await,
                [ClaimOutcome::Fenced]
            );
            assert!(db.runs.is_empty(), "{owner:?}");
            assert_eq!(db.job(JOB).last_fired_at_ms, None, "{owner:?}");
        }
    }

    #[tokio::test]
    async fn a_changed_stopped_or_already_fired_job_makes_the_claim_stale() {
        let mut changed = db(true);
        changed.jobs.get_mut(&JOB).unwrap().version = 2;
        let mut stopped = db(true);
        stopped.jobs.get_mut(&JOB).unwrap().state = JobState::Stopped;
        let mut fired = db(true);
        fired.jobs.get_mut(&JOB).unwrap().last_fired_at_ms = Some(1_000);
        let mut deleted = db(true);
        deleted.jobs.clear();
        for (what, mut db) in [
            ("changed", changed),
            ("stopped", stopped),
            ("fired", fired),
            ("deleted", deleted),
        ] {
            assert_eq!(
                run(&mut db, &[claim_at(1_000)]).await,
                [ClaimOutcome::Stale],
                "{what}"
            );
            assert!(db.runs.is_empty(), "{what}");
        }
    }

    #[tokio::test]
    async fn claims_of_one_job_are_taken_in_batch_order() {
        let mut db = db(false);
        let outcomes = run(
            &mut db,
            &[claim_at(1_000), claim_at(2_000), claim_at(1_500)],
        )
        .await;
        assert_eq!(
            outcomes,
            [
                ClaimOutcome::Claimed,
                ClaimOutcome::Claimed,
                ClaimOutcome::Stale
            ]
        );
        let job = db.job(JOB);
        assert_eq!((job.last_fired_at_ms, job.fired_count), (Some(2_000), 2));
        assert_eq!(
            states(&db),
            [(1_000, "pending".to_owned()), (2_000, "pending".to_owned())]
        );
        assert!(
            db.runs.iter().all(|r| r.namespace_id == NamespaceId(3)),
            "each run is its claim's namespace's"
        );
    }

    #[tokio::test]
    async fn a_one_attempt_run_starts_in_its_claim_only_where_the_driver_allows() {
        for starts_in_claim in [true, false] {
            let mut db = db(starts_in_claim);
            let claim = RunClaim {
                start: true,
                ..claim_at(1_000)
            };
            assert_eq!(run(&mut db, &[claim]).await, [ClaimOutcome::Claimed]);
            let run = db.runs_of(JOB)[0].clone();
            if starts_in_claim {
                assert_eq!((run.state.as_str(), run.started), ("running", true));
                let attempt = &db.attempts[0];
                assert_eq!(db.attempts.len(), 1);
                assert_eq!(
                    (attempt.run_id, attempt.shard_total, attempt.not_before_ms),
                    (run.run_id, 1, 1_000)
                );
                assert_eq!(
                    attempt.args_json, r#"{"region":"eu"}"#,
                    "the job's arguments"
                );
            } else {
                assert_eq!((run.state.as_str(), run.started), ("pending", false));
                assert!(db.attempts.is_empty(), "the start pass starts it");
            }
        }
    }

    #[tokio::test]
    async fn a_run_already_at_the_instant_keeps_it_and_gets_no_second_attempt() {
        let mut db = db(true);
        db.runs.push(MemoryRun {
            run_id: 40,
            job_id: JOB,
            scheduled_at_ms: 1_000,
            partition_id: PARTITION,
            epoch: EPOCH,
            node_id: NODE.to_owned(),
            trigger_kind: TriggerKind::Manual,
            state: RunState::Running,
            priority: 5,
            message: None,
            namespace_id: NamespaceId(3),
            started: true,
            finished_at_ms: None,
            input: None,
        });
        let claim = RunClaim {
            start: true,
            ..claim_at(1_000)
        };
        assert_eq!(run(&mut db, &[claim]).await, [ClaimOutcome::Claimed]);
        assert_eq!(db.runs.len(), 1, "one run per (job, instant)");
        assert_eq!(db.runs[0].trigger_kind, TriggerKind::Manual);
        assert!(db.attempts.is_empty());
        assert_eq!(
            db.job(JOB).last_fired_at_ms,
            Some(1_000),
            "the instant is past"
        );
    }

    #[tokio::test]
    async fn a_calendar_skip_is_recorded_finished_and_not_counted_whatever_the_overlap_rule() {
        for overlap in [OverlapRule::Allow, OverlapRule::Skip, OverlapRule::Replace] {
            let mut db = db(true);
            let claims = [
                claim_at(1_000),
                RunClaim {
                    state: RunState::Skipped,
                    message: Some("in calendar holidays".to_owned()),
                    overlap,
                    start: true,
                    ..claim_at(2_000)
                },
            ];
            run(&mut db, &claims).await;
            let skipped = db.runs_of(JOB)[1].clone();
            assert_eq!(
                (
                    skipped.state.as_str(),
                    skipped.finished_at_ms.is_some(),
                    skipped.message.as_deref()
                ),
                ("skipped", true, Some("in calendar holidays")),
                "{overlap:?}"
            );
            assert_eq!(db.runs_of(JOB)[0].state, RunState::Pending, "{overlap:?}");
            assert_eq!(db.job(JOB).fired_count, 1, "{overlap:?}");
            assert!(db.attempts.is_empty(), "{overlap:?}");
        }
    }

    #[tokio::test]
    async fn overlap_rules_decide_against_the_jobs_unfinished_run() {
        let expect = [
            (
                OverlapRule::Skip,
                "pending",
                "skipped",
                "run 1 of this job is unfinished (overlap: skip)",
            ),
            (
                OverlapRule::Queue,
                "pending",
                "queued",
                "waiting for run 1 of this job (overlap: queue)",
            ),
            (OverlapRule::Replace, "cancelled", "pending", ""),
        ];
        for (overlap, first, second, message) in expect {
            let mut db = db(false);
            let first_claim = RunClaim {
                overlap,
                ..claim_at(1_000)
            };
            let second_claim = RunClaim {
                overlap,
                ..claim_at(2_000)
            };
            assert_eq!(run(&mut db, &[first_claim]).await, [ClaimOutcome::Claimed]);
            db.attempts.push(AttemptRecord {
                partition_id: PARTITION,
                state: AttemptState::Running,
                ..attempt_row(1, 1, JOB, (0, 1), 1)
            });
            let outcome = if second == "skipped" {
                ClaimOutcome::Skipped
            } else {
                ClaimOutcome::Claimed
            };
            assert_eq!(run(&mut db, &[second_claim]).await, [outcome]);
            let attempt = if overlap == OverlapRule::Replace {
                AttemptState::Cancelled
            } else {
                AttemptState::Running
            };
            assert_eq!(db.attempts[0].state, attempt, "{overlap:?}");
            assert_eq!(
                states(&db),
                [(1_000, first.to_owned()), (2_000, second.to_owned())],
                "{overlap:?}"
            );
            let runs = db.runs_of(JOB);
            let said = match overlap {
                OverlapRule::Replace => runs[0].message.clone(),
                _ => runs[1].message.clone(),
            };
            let wanted = match overlap {
                OverlapRule::Replace => "replaced by the run of instant 2000 (overlap: replace)",
                _ => message,
            };
            assert_eq!(said.as_deref(), Some(wanted), "{overlap:?}");
            assert_eq!(db.job(JOB).fired_count, 2, "{overlap:?}");
        }
    }

    #[tokio::test]
    async fn with_nothing_unfinished_an_overlap_rule_changes_nothing_and_a_last_instant_ends_the_job()
     {
        let mut db = db(false);
        db.runs.clear();
        let claim = RunClaim {
            overlap: OverlapRule::Skip,
            job_done: true,
            ..claim_at(1_000)
        };
        assert_eq!(run(&mut db, &[claim]).await, [ClaimOutcome::Claimed]);
        assert_eq!(states(&db), [(1_000, "pending".to_owned())]);
        assert_eq!(db.job(JOB).state, JobState::Done);
        let mut allow = self::db(false);
        let last = RunClaim {
            job_done: true,
            ..claim_at(1_000)
        };
        run(&mut allow, &[last, claim_at(2_000)]).await;
        assert_eq!(allow.job(JOB).state, JobState::Done);
        assert_eq!(allow.runs.len(), 1, "nothing after the last instant");
    }
}
