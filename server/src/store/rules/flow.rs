//! Flow control's admission, in the caller's transaction. A run under a `flow` policy is put
//! in line (`queued`, with its key) before it starts; every admission of a key locks the key's
//! row first, counts the key's runs in flight and its rate window, and lets the oldest queued
//! runs start (`pending` again, their key kept) while there is room. Runs that find the key
//! full wait, or end `skipped` when the key drops them. Every end of a run with a key admits
//! again in its own transaction; the key's row says when queued runs are looked at again
//! otherwise (a rate window's end, or a safety net for an end that admitted nothing).
//!
//! Two admissions of a key never interleave (the row lock; SQLite's writers are serialised),
//! and each statement after the lock reads what committed before it (READ COMMITTED on
//! PostgreSQL and MySQL): a run ending at that moment is still counted, which admits fewer,
//! never more, and its own end admits again once it holds the lock.

use async_trait::async_trait;

use super::super::error::Error;
use crate::jobs::FlowLimits;

/// Most runs one admission lets start: a larger backlog moves on at the next look.
const ADMIT_BATCH: i64 = 500;

/// When a key whose queued runs wait on `max_in_flight` is looked at again, whatever ends:
/// a safety net for runs ended by a way that does not admit (a whole job's runs cancelled).
pub(crate) const SAFETY_RECHECK_MS: i64 = 30_000;

/// A key's row as an admission locked it, with the database's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlowKeyRow {
    pub(crate) limits: FlowLimits,
    /// What the last admission left.
    pub(crate) saved: FlowKeySave,
    pub(crate) now_ms: i64,
}

/// What an admission leaves in the key's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlowKeySave {
    pub(crate) window_start_ms: i64,
    pub(crate) window_count: i64,
    /// When queued runs are looked at again; `None` when none waits.
    pub(crate) recheck_at_ms: Option<i64>,
}

/// What admissions did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admitted {
    /// Runs that may start now (`pending`).
    pub released: Vec<i64>,
    /// Runs ended `skipped` because their key was full, with why.
    pub dropped: Vec<(i64, String)>,
}

impl Admitted {
    pub(crate) fn extend(&mut self, other: Admitted) {
        self.released.extend(other.released);
        self.dropped.extend(other.dropped);
    }
}

/// What admission needs of a write transaction: statements with their binds.
#[async_trait]
pub(crate) trait FlowTx: Send {
    /// Locks the key's row, first creating it or replacing its limits when `limits` is given
    /// (a run is put in line under them); `None` when the key has no row.
    async fn lock_flow_key(
        &mut self,
        key: &str,
        limits: Option<&FlowLimits>,
    ) -> Result<Option<FlowKeyRow>, Error>;

    /// Moves those of `run_ids` pending without a key to `queued` under `key`, saying
    /// `message`; how many it moved.
    async fn flow_enqueue(
        &mut self,
        run_ids: &[i64],
        key: &str,
        message: &str,
    ) -> Result<u64, Error>;

    /// How many runs of the key are pending or running, and with `holding` those that failed
    /// for good and were not released.
    async fn flow_in_flight(&mut self, key: &str, holding: bool) -> Result<i64, Error>;

    /// The key's oldest queued runs, at most `limit`.
    async fn flow_queued(&mut self, key: &str, limit: i64) -> Result<Vec<i64>, Error>;

    /// Moves `run_ids`, which the caller read queued under the key it holds, to `pending`.
    /// A run ended meanwhile (cancelled) stays as it is.
    async fn flow_release(&mut self, run_ids: &[i64]) -> Result<(), Error>;

    /// Ends those of `run_ids` still queued as `skipped` with `message`; the ids it ended.
    async fn flow_drop(&mut self, run_ids: &[i64], message: &str) -> Result<Vec<i64>, Error>;

    async fn save_flow_key(&mut self, key: &str, save: &FlowKeySave) -> Result<(), Error>;

    /// The key of run `run_id` if it ended failed, timed out or with no executor under one.
    async fn flow_key_held_by(&mut self, run_id: i64) -> Result<Option<String>, Error>;

    /// Takes run `run_id` (failed for good) out of `key`'s count; whether it was in it.
    async fn flow_unhold(&mut self, run_id: i64, key: &str) -> Result<bool, Error>;

    /// Takes every run of `key` that failed for good out of its count.
    async fn flow_unhold_all(&mut self, key: &str) -> Result<(), Error>;

    /// Admits run `run_id` under `key` at once (`pending` with the key), if it is pending
    /// without a key or queued under this one; whether it did.
    async fn flow_take_place(&mut self, run_id: i64, key: &str) -> Result<bool, Error>;
}

/// Puts the pending runs `run_ids` in line under `key` with the key's `limits`, then admits
/// the key once (runs put in line may start at once).
pub(crate) async fn put_in_line<T: FlowTx + ?Sized>(
    tx: &mut T,
    run_ids: &[i64],
    key: &str,
    limits: &FlowLimits,
) -> Result<Admitted, Error> {
    let before = tx.lock_flow_key(key, None).await?;
    // A key that becomes `fifo` is not held by runs that failed before: only by those that
    // fail under it.
    if limits.hold_failed && before.is_some_and(|row| !row.limits.hold_failed) {
        tx.flow_unhold_all(key).await?;
    }
    // The limits are written only when they change: a key's row is written by its
    // admissions, not by every run put in line.
    let row = match before {
        Some(row) if row.limits == *limits => row,
        _ => match tx.lock_flow_key(key, Some(limits)).await? {
            Some(row) => row,
            None => return Ok(Admitted::default()),
        },
    };
    let message = format!("in line for flow key {}", shown(key));
    if tx.flow_enqueue(run_ids, key, &message).await? == 0 {
        // Started, ended or put in line by another node's pass meanwhile.
        return Ok(Admitted::default());
    }
    admit_locked(tx, key, &row).await
}

/// Admits `key` again: after one of its runs ended, or when its row said to look again.
pub(crate) async fn admit<T: FlowTx + ?Sized>(tx: &mut T, key: &str) -> Result<Admitted, Error> {
    let Some(row) = tx.lock_flow_key(key, None).await? else {
        return Ok(Admitted::default());
    };
    admit_locked(tx, key, &row).await
}

/// Admits each of `keys` once, in order (runs of them ended in the caller's transaction).
pub(crate) async fn admit_all<T: FlowTx + ?Sized>(
    tx: &mut T,
    mut keys: Vec<String>,
) -> Result<(), Error> {
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        admit(tx, &key).await?;
    }
    Ok(())
}

/// Lets the run `run_id`, failed for good under a `fifo` key, give the key up, and admits
/// the key: the key, or `None` when the run holds none.
pub(crate) async fn release_hold<T: FlowTx + ?Sized>(
    tx: &mut T,
    run_id: i64,
) -> Result<Option<String>, Error> {
    let Some(key) = tx.flow_key_held_by(run_id).await? else {
        return Ok(None);
    };
    let Some(row) = tx.lock_flow_key(&key, None).await? else {
        return Ok(None);
    };
    if !row.limits.hold_failed || !tx.flow_unhold(run_id, &key).await? {
        return Ok(None);
    }
    admit_locked(tx, &key, &row).await?;
    Ok(Some(key))
}

/// Hands the key held by run `from` (failed for good under a `fifo` key) to `to`, its rerun,
/// which takes its place at the head of the line and may start at once; whether `from` held
/// a key. A rerun already ended (or gone) lets the key's next run start instead.
pub(crate) async fn hand_over<T: FlowTx + ?Sized>(
    tx: &mut T,
    from: i64,
    to: i64,
) -> Result<bool, Error> {
    let Some(key) = tx.flow_key_held_by(from).await? else {
        return Ok(false);
    };
    let Some(row) = tx.lock_flow_key(&key, None).await? else {
        return Ok(false);
    };
    if !row.limits.hold_failed || !tx.flow_unhold(from, &key).await? {
        return Ok(false);
    }
    // The place is free unless more runs held the key (it became fifo with runs in flight).
    let free = match row.limits.max_in_flight {
        Some(max) => tx.flow_in_flight(&key, true).await? < max,
        None => true,
    };
    if free && tx.flow_take_place(to, &key).await? {
        // Written, as any admission that lets a run start (see `admit_locked`).
        let save = FlowKeySave {
            window_count: row.saved.window_count + 1,
            ..row.saved
        };
        tx.save_flow_key(&key, &save).await?;
    } else {
        admit_locked(tx, &key, &row).await?;
    }
    Ok(true)
}

async fn admit_locked<T: FlowTx + ?Sized>(
    tx: &mut T,
    key: &str,
    row: &FlowKeyRow,
) -> Result<Admitted, Error> {
    let limits = row.limits;
    let mut room = ADMIT_BATCH;
    let mut in_flight = None;
    if let Some(max) = limits.max_in_flight {
        let count = tx.flow_in_flight(key, limits.hold_failed).await?;
        in_flight = Some(count);
        room = room.min((max - count).max(0));
    }
    let (mut window_start_ms, mut window_count) =
        (row.saved.window_start_ms, row.saved.window_count);
    let mut window_full_until = None;
    if let Some((limit, per_ms)) = limits.rate {
        if row.now_ms >= window_start_ms.saturating_add(per_ms) {
            window_start_ms = row.now_ms;
            window_count = 0;
        }
        let left = (limit - window_count).max(0);
        if left <= room {
            room = left;
            window_full_until = Some(window_start_ms.saturating_add(per_ms));
        }
    }
    // One more than there is room for, whether any is left waiting; a key that drops reads
    // a batch more, to drop every run past its room at once.
    let beyond = if limits.drop_when_full {
        ADMIT_BATCH
    } else {
        1
    };
    let queued = tx.flow_queued(key, room + beyond).await?;
    let take = queued.len().min(usize::try_from(room).unwrap_or(0));
    let released = queued[..take].to_vec();
    if !released.is_empty() {
        tx.flow_release(&released).await?;
    }
    window_count += released.len() as i64;
    let waiting = &queued[take..];
    let mut admitted = Admitted {
        released,
        dropped: Vec::new(),
    };
    let mut recheck_at_ms = None;
    if !waiting.is_empty() {
        if limits.drop_when_full {
            let why = full_message(key, &limits, in_flight, window_full_until.is_some());
            let dropped = tx.flow_drop(waiting, &why).await?;
            admitted
                .dropped
                .extend(dropped.into_iter().map(|id| (id, why.clone())));
            // More may wait behind those read.
            if waiting.len() as i64 == ADMIT_BATCH {
                recheck_at_ms = Some(row.now_ms);
            }
        } else {
            recheck_at_ms = Some(match window_full_until {
                Some(end) => end,
                None if room == ADMIT_BATCH => row.now_ms,
                None => row.now_ms.saturating_add(SAFETY_RECHECK_MS),
            });
        }
    }
    let save = FlowKeySave {
        window_start_ms,
        window_count,
        recheck_at_ms,
    };
    // An admission that let runs start writes the key's row even when nothing in it changed:
    // on Galera a row lock holds on one member only, and two members' admissions conflict
    // only through writes to one row. One with nothing to note writes nothing.
    if save != row.saved || !admitted.released.is_empty() {
        tx.save_flow_key(key, &save).await?;
    }
    Ok(admitted)
}

/// The key as users wrote it: without its namespace.
fn shown(key: &str) -> &str {
    key.split_once('/').map_or(key, |(_, rest)| rest)
}

/// Why a run was dropped, naming the key as users wrote it (without its namespace).
fn full_message(key: &str, limits: &FlowLimits, in_flight: Option<i64>, rate_full: bool) -> String {
    let shown = shown(key);
    if rate_full && let Some((limit, per_ms)) = limits.rate {
        return format!(
            "flow key {shown} started its {limit} runs of this {per_ms} ms window (on_full: drop)"
        );
    }
    match (limits.max_in_flight, in_flight) {
        (Some(max), Some(count)) => {
            format!("flow key {shown} has {count} of its {max} runs in flight (on_full: drop)")
        }
        _ => format!("flow key {shown} is full (on_full: drop)"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::memory::MemoryDb;
    use super::super::memory::workflows::{add_pending_run, run_record};
    use super::*;
    use crate::states::RunState;

    const KEY: &str = "1/reports";

    fn limits(max: Option<i64>, rate: Option<(i64, i64)>, drop: bool) -> FlowLimits {
        FlowLimits {
            max_in_flight: max,
            rate,
            drop_when_full: drop,
            hold_failed: false,
        }
    }

    fn state(db: &MemoryDb, run_id: i64) -> RunState {
        run_record(db, run_id).state
    }

    #[tokio::test]
    async fn runs_start_while_the_key_has_room_and_wait_in_order_when_it_is_full() {
        let mut db = MemoryDb::default();
        let two = limits(Some(2), None, false);
        let runs: Vec<i64> = (0..4)
            .map(|i| add_pending_run(&mut db, 7, 1_000 * (i + 1), None).run_id)
            .collect();
        let mut released = Vec::new();
        for run in &runs {
            released.extend(
                put_in_line(&mut db, &[*run], KEY, &two)
                    .await
                    .unwrap()
                    .released,
            );
        }
        assert_eq!(released, runs[..2]);
        assert_eq!(state(&db, runs[2]), RunState::Queued);
        assert_eq!(
            db.flow.keys[KEY].recheck_at_ms,
            Some(SAFETY_RECHECK_MS),
            "queued runs are looked at again even if no end admits them"
        );
        // A run in line is put in line once.
        assert_eq!(
            put_in_line(&mut db, &[runs[2]], KEY, &two).await.unwrap(),
            Admitted::default()
        );
        // An end makes room for the oldest waiting run only.
        db.runs
            .iter_mut()
            .find(|r| r.run_id == runs[0])
            .unwrap()
            .state = RunState::Succeeded;
        assert_eq!(admit(&mut db, KEY).await.unwrap().released, [runs[2]]);
        assert_eq!(state(&db, runs[3]), RunState::Queued);
        assert_eq!(admit(&mut db, KEY).await.unwrap(), Admitted::default());
        db.runs
            .iter_mut()
            .find(|r| r.run_id == runs[1])
            .unwrap()
            .state = RunState::Failed;
        assert_eq!(admit(&mut db, KEY).await.unwrap().released, [runs[3]]);
        assert_eq!(db.flow.keys[KEY].recheck_at_ms, None, "nothing waits");
    }

    #[tokio::test]
    async fn a_rate_window_starts_so_many_and_the_rest_wait_for_its_end() {
        let mut db = MemoryDb {
            now_ms: 10_000,
            ..MemoryDb::default()
        };
        let rate = limits(None, Some((2, 5_000)), false);
        let runs: Vec<i64> = (0..3)
            .map(|i| add_pending_run(&mut db, 7, 1_000 * (i + 1), None).run_id)
            .collect();
        let mut released = Vec::new();
        for run in &runs {
            released.extend(
                put_in_line(&mut db, &[*run], KEY, &rate)
                    .await
                    .unwrap()
                    .released,
            );
        }
        assert_eq!(released, runs[..2]);
        assert_eq!(db.flow.keys[KEY].recheck_at_ms, Some(15_000));
        db.now_ms = 14_999;
        assert!(admit(&mut db, KEY).await.unwrap().released.is_empty());
        db.now_ms = 15_000;
        assert_eq!(admit(&mut db, KEY).await.unwrap().released, [runs[2]]);
        let key = &db.flow.keys[KEY];
        assert_eq!((key.window_start_ms, key.window_count), (15_000, 1));
    }

    #[tokio::test]
    async fn a_fifo_key_is_held_by_a_run_that_failed_until_it_is_released() {
        let mut db = MemoryDb::default();
        let fifo = FlowLimits {
            hold_failed: true,
            ..limits(Some(1), None, false)
        };
        let first = add_pending_run(&mut db, 7, 1_000, None).run_id;
        let second = add_pending_run(&mut db, 7, 2_000, None).run_id;
        put_in_line(&mut db, &[first], KEY, &fifo).await.unwrap();
        put_in_line(&mut db, &[second], KEY, &fifo).await.unwrap();
        db.runs
            .iter_mut()
            .find(|r| r.run_id == first)
            .unwrap()
            .state = RunState::Failed;
        assert!(admit(&mut db, KEY).await.unwrap().released.is_empty());
        assert_eq!(state(&db, second), RunState::Queued);
        assert_eq!(
            release_hold(&mut db, first).await.unwrap().as_deref(),
            Some(KEY)
        );
        assert_eq!(state(&db, second), RunState::Pending, "the next run starts");
        assert_eq!(
            release_hold(&mut db, first).await.unwrap(),
            None,
            "released once"
        );
        assert_eq!(
            release_hold(&mut db, second).await.unwrap(),
            None,
            "a live run holds nothing"
        );
    }

    #[tokio::test]
    async fn a_key_that_becomes_fifo_is_not_held_by_runs_that_failed_before() {
        let mut db = MemoryDb::default();
        let before = add_pending_run(&mut db, 7, 1_000, None).run_id;
        put_in_line(&mut db, &[before], KEY, &limits(Some(1), None, false))
            .await
            .unwrap();
        db.runs
            .iter_mut()
            .find(|r| r.run_id == before)
            .unwrap()
            .state = RunState::Failed;
        let fifo = FlowLimits {
            hold_failed: true,
            ..limits(Some(1), None, false)
        };
        let next = add_pending_run(&mut db, 7, 2_000, None).run_id;
        assert_eq!(
            put_in_line(&mut db, &[next], KEY, &fifo)
                .await
                .unwrap()
                .released,
            [next]
        );
    }

    #[tokio::test]
    async fn a_rerun_of_a_held_run_takes_its_place_ahead_of_the_line() {
        let mut db = MemoryDb::default();
        let fifo = FlowLimits {
            hold_failed: true,
            ..limits(Some(1), None, false)
        };
        let failed = add_pending_run(&mut db, 7, 1_000, None).run_id;
        let waiting = add_pending_run(&mut db, 7, 2_000, None).run_id;
        put_in_line(&mut db, &[failed], KEY, &fifo).await.unwrap();
        put_in_line(&mut db, &[waiting], KEY, &fifo).await.unwrap();
        db.runs
            .iter_mut()
            .find(|r| r.run_id == failed)
            .unwrap()
            .state = RunState::Failed;
        let rerun = add_pending_run(&mut db, 7, 3_000, None).run_id;
        assert!(hand_over(&mut db, failed, rerun).await.unwrap());
        assert_eq!(state(&db, rerun), RunState::Pending);
        assert_eq!(db.flow.run_keys.get(&rerun).map(String::as_str), Some(KEY));
        assert_eq!(
            state(&db, waiting),
            RunState::Queued,
            "still behind the rerun"
        );
        assert!(
            !hand_over(&mut db, failed, rerun).await.unwrap(),
            "handed over once"
        );
    }

    #[tokio::test]
    async fn a_full_key_that_drops_ends_the_run_skipped_saying_why() {
        let mut db = MemoryDb::default();
        let one = limits(Some(1), None, true);
        let first = add_pending_run(&mut db, 7, 1_000, None).run_id;
        let second = add_pending_run(&mut db, 7, 2_000, None).run_id;
        put_in_line(&mut db, &[first], KEY, &one).await.unwrap();
        let admitted = put_in_line(&mut db, &[second], KEY, &one).await.unwrap();
        assert_eq!(
            admitted.dropped,
            [(
                second,
                "flow key reports has 1 of its 1 runs in flight (on_full: drop)".to_owned()
            )]
        );
        assert_eq!(state(&db, second), RunState::Skipped);
        assert_eq!(state(&db, first), RunState::Pending);
    }
}
