//! Run-history retention in the store, the same body on Postgres, MySQL/MariaDB and SQLite:
//! only finished runs in scope are deleted, with their attempts, a bounded batch at a time;
//! running runs, other partitions, dead letters and jobs with their own rule are left alone
//! unless the scope names them. And the attempts' log lines: kept once each, within their
//! caps, and deleted with their runs.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::sync::Arc;

use carillon_server::states::{AttemptState, JobKind, RunState};
use carillon_server::store::{
    AttemptEnd, ClaimOutcome, JobHistoryRule, JobWrite, LogCaps, NewAttempt, NewLogLine,
    PurgeScope, PurgeStates, Purged, RunFilter, Store, TRUNCATED_LINE,
};
use support::db::TestDb;
use support::records::{claim, job_write};

for_engine!(
    postgres,
    Postgres,
    [
        only_finished_runs_in_scope_are_deleted_with_their_attempts,
        log_lines_are_kept_once_within_their_caps
    ]
);
behind_pgbouncer!([
    only_finished_runs_in_scope_are_deleted_with_their_attempts,
    log_lines_are_kept_once_within_their_caps
]);
for_engine!(
    mysql,
    Mysql,
    [
        only_finished_runs_in_scope_are_deleted_with_their_attempts,
        log_lines_are_kept_once_within_their_caps
    ]
);
for_engine!(
    sqlite,
    Sqlite,
    [
        only_finished_runs_in_scope_are_deleted_with_their_attempts,
        log_lines_are_kept_once_within_their_caps
    ]
);

fn job(name: &str, keep_ms: Option<i64>, max_runs: Option<i64>) -> JobWrite {
    JobWrite {
        history_keep_ms: keep_ms,
        history_max_runs: max_runs,
        kind: JobKind::Job,
        ..job_write(name)
    }
}

/// A store whose partition 0 is owned by `n1` at epoch 1.
async fn owned(db: &TestDb) -> Arc<dyn Store> {
    db.store_owning_partition_0().await
}

/// Claims, starts and dispatches a run per instant; every one ends `succeeded` but those
/// at `still_running`. Returns the run ids by instant.
async fn runs(store: &Arc<dyn Store>, job_id: i64, at: &[i64], still_running: i64) -> Vec<i64> {
    let claims: Vec<_> = at
        .iter()
        .map(|a| claim(job_id, *a, RunState::Pending))
        .collect();
    let outcomes = store.runs_claim("n1", &claims).await.unwrap();
    assert!(outcomes.iter().all(|o| *o == ClaimOutcome::Claimed));
    let pending = store.runs_pending(&[0], 0, 100).await.unwrap();
    let starts: Vec<_> = pending
        .iter()
        .map(|r| {
            let shard = NewAttempt {
                shard_index: 0,
                shard_total: 1,
                args_json: "null".into(),
                prefer_executor_id: None,
                delay_ms: 0,
            };
            (r.clone(), vec![shard])
        })
        .collect();
    store.runs_start(&starts).await.unwrap();
    let mut ids = Vec::new();
    for due in store.attempts_due(&[0], 0, None, 100).await.unwrap() {
        let id = due.attempt.attempt_id;
        assert!(store.attempt_dispatched(id, "e1", 0).await.unwrap());
        ids.push((due.scheduled_at_ms, due.attempt.run_id));
        if due.scheduled_at_ms == still_running {
            continue;
        }
        let end = AttemptEnd {
            state: AttemptState::Succeeded,
            output: None,
            error: None,
            executor_id: Some("e1".into()),
            retry_after_ms: None,
            retry_to_same_executor: false,
            job_has_children: false,
        };
        store.attempt_end(id, &end).await.unwrap();
    }
    ids.sort_unstable();
    ids.into_iter().map(|(_, run)| run).collect()
}

/// Every step of a purge, as a node takes them: what they deleted, and how many there were.
async fn drain(store: &Arc<dyn Store>, scope: &PurgeScope, window: i64) -> (Purged, usize) {
    let mut scope = scope.clone();
    let (mut total, mut steps) = (Purged::default(), 0);
    loop {
        let step = store.history_delete(&scope, window).await.unwrap();
        total += step.purged;
        steps += 1;
        match step.next_from_ms {
            Some(next) => {
                assert!(next >= scope.finished_from_ms, "steps move forward");
                scope.finished_from_ms = next;
            }
            None => return (total, steps),
        }
        assert!(steps < 100, "a purge of a few runs ends");
    }
}

async fn exists(store: &Arc<dyn Store>, run_id: i64) -> bool {
    store.run_get(run_id).await.unwrap().is_some()
}

async fn only_finished_runs_in_scope_are_deleted_with_their_attempts(db: TestDb) {
    let store = owned(&db).await;
    store
        .job_insert(1, 0, &job("plain", None, None), true, None)
        .await
        .unwrap();
    store
        .job_insert(2, 0, &job("own", Some(0), Some(1)), true, None)
        .await
        .unwrap();
    let now = store.now_ms().await.unwrap();
    // A dead letter first: claims only move forward.
    let outcomes = store
        .runs_claim("n1", &[claim(1, now - 5_000, RunState::NoExecutor)])
        .await
        .unwrap();
    assert_eq!(outcomes, vec![ClaimOutcome::Claimed]);
    let plain = runs(
        &store,
        1,
        &[now - 4_000, now - 3_000, now - 2_000, now - 1_000],
        now - 1_000,
    )
    .await;
    let own = runs(&store, 2, &[now - 4_000, now - 3_000], 0).await;
    let running = plain[3];
    let dead = store
        .runs_list(&RunFilter {
            namespace: None,
            job_id: Some(1),
            state: Some(RunState::NoExecutor.as_str().to_owned()),
            oldest_first: false,
            after_id: None,
            limit: 10,
        })
        .await
        .unwrap()[0]
        .run_id;

    // Log lines of a run to delete and of the running run, which stays.
    let line = |n: i64| NewLogLine {
        line_no: n,
        at_ms: now,
        level: "INFO".into(),
        message: format!("line {n}"),
    };
    let caps = LogCaps {
        max_lines: 100,
        max_bytes: 10_000,
    };
    let first_attempt = store.attempts_of_run(plain[0]).await.unwrap()[0].attempt_id;
    let running_attempt = store.attempts_of_run(running).await.unwrap()[0].attempt_id;
    let both = [
        (first_attempt, vec![line(1), line(2)]),
        (running_attempt, vec![line(1), line(2)]),
    ];
    let kept = store.attempt_logs_append("e1", &both, caps).await.unwrap();
    assert_eq!(kept.stored, 4);

    let later = store.now_ms().await.unwrap() + 60_000;
    // What a node's global pass deletes: finished, not dead letters, jobs without a rule.
    let global = PurgeScope {
        finished_before_ms: later,
        partitions: Some(vec![0]),
        states: PurgeStates::NotDeadLetters,
        skip_jobs_with_own_keep: true,
        ..PurgeScope::default()
    };
    let three = Purged {
        runs: 3,
        attempts: 3,
    };
    assert_eq!(store.history_count(&global).await.unwrap(), three);
    // Nothing finished before the runs did, and nothing in a partition of no run.
    let earlier = PurgeScope {
        finished_before_ms: now - 60_000,
        ..global.clone()
    };
    assert_eq!(
        store.history_count(&earlier).await.unwrap(),
        Purged::default()
    );
    let elsewhere = PurgeScope {
        partitions: Some(vec![1, 2]),
        ..global.clone()
    };
    assert_eq!(drain(&store, &elsewhere, 100).await, (Purged::default(), 1));

    // A step looks at 2 runs, so it takes several to find the 3 in scope among the 6
    // finished.
    let (purged, steps) = drain(&store, &global, 2).await;
    assert_eq!(purged, three);
    assert!(steps >= 3, "{steps} steps");
    assert_eq!(drain(&store, &global, 2).await.0, Purged::default());
    for run in &plain[..3] {
        assert!(!exists(&store, *run).await, "run {run} deleted");
        assert!(store.attempts_of_run(*run).await.unwrap().is_empty());
    }
    assert!(
        store
            .attempt_logs_page(first_attempt, 0, 10)
            .await
            .unwrap()
            .is_empty(),
        "a deleted run's log lines go with it"
    );
    assert_eq!(
        store
            .attempt_logs_page(running_attempt, 0, 10)
            .await
            .unwrap()
            .len(),
        2
    );
    // The running run, the dead letter and the job with its own rule are untouched.
    assert!(exists(&store, running).await);
    assert_eq!(store.attempts_of_run(running).await.unwrap().len(), 1);
    assert!(exists(&store, dead).await);
    assert!(exists(&store, own[0]).await && exists(&store, own[1]).await);

    // Dead letters by their own rule.
    let dead_letters = PurgeScope {
        states: PurgeStates::DeadLetters,
        ..global.clone()
    };
    assert_eq!(
        drain(&store, &dead_letters, 100).await.0,
        Purged {
            runs: 1,
            attempts: 0
        }
    );
    assert!(!exists(&store, dead).await);

    // The job's own rule: found among the partition's jobs, and `max_runs: 1` keeps the
    // newest run only.
    assert_eq!(
        store.history_rules(&[0, 1]).await.unwrap(),
        vec![JobHistoryRule {
            job_id: 2,
            history_keep_ms: Some(0),
            history_max_runs: Some(1),
        }]
    );
    assert_eq!(store.history_rules(&[1]).await.unwrap(), vec![]);
    let beyond = store.history_beyond_newest(2, 1).await.unwrap();
    assert_eq!(beyond, Some(now - 4_000));
    assert_eq!(store.history_beyond_newest(2, 2).await.unwrap(), None);
    let capped = PurgeScope {
        finished_before_ms: i64::MAX,
        job_id: Some(2),
        scheduled_until_ms: beyond,
        ..PurgeScope::default()
    };
    assert_eq!(
        drain(&store, &capped, 100).await.0,
        Purged {
            runs: 1,
            attempts: 1
        }
    );
    assert!(!exists(&store, own[0]).await && exists(&store, own[1]).await);

    // The oldest run kept is the running one, created before job 2's last.
    let oldest = store.history_oldest_run_ms().await.unwrap().unwrap();
    assert!(oldest >= now - 1_000 && oldest <= later, "{oldest}");
    // Even an unbounded scope never takes a running run.
    let everything = PurgeScope {
        finished_before_ms: i64::MAX,
        ..PurgeScope::default()
    };
    drain(&store, &everything, 1).await;
    assert!(exists(&store, running).await);
}

async fn log_lines_are_kept_once_within_their_caps(db: TestDb) {
    let store = owned(&db).await;
    store
        .job_insert(1, 0, &job("talker", None, None), true, None)
        .await
        .unwrap();
    let now = store.now_ms().await.unwrap();
    let ran = runs(&store, 1, &[now - 2_000, now - 1_000], now - 1_000).await;
    let attempt = store.attempts_of_run(ran[0]).await.unwrap()[0].attempt_id;
    let other = store.attempts_of_run(ran[1]).await.unwrap()[0].attempt_id;
    let line = |n: i64, text: &str| NewLogLine {
        line_no: n,
        at_ms: now + n,
        level: "INFO".into(),
        message: text.into(),
    };
    let caps = LogCaps {
        max_lines: 4,
        max_bytes: 40,
    };
    let first = vec![line(1, "one"), line(2, "two émoji 🎉"), line(3, "three")];
    let kept = store
        .attempt_logs_append("e1", &[(attempt, first.clone())], caps)
        .await
        .unwrap();
    assert_eq!((kept.stored, kept.dropped), (3, 0));
    // The same batch again (its answer was lost): stored once.
    let again = store
        .attempt_logs_append("e1", &[(attempt, first)], caps)
        .await
        .unwrap();
    assert_eq!(again.stored, 0);
    // Past the caps (4 lines, 40 bytes): dropped, and the log says so in its last line; in
    // the same batch, a line of another attempt that would pass its bytes cap alone.
    let more = vec![line(4, "four"), line(5, "five"), line(6, "six")];
    let big = vec![line(1, &"x".repeat(41))];
    let capped = store
        .attempt_logs_append("e1", &[(attempt, more), (other, big)], caps)
        .await
        .unwrap();
    assert_eq!((capped.stored, capped.dropped), (1, 3));
    let page = store.attempt_logs_page(attempt, 0, 100).await.unwrap();
    let numbers: Vec<i64> = page.iter().map(|l| l.line_no).collect();
    assert_eq!(numbers, [1, 2, 3, 4, TRUNCATED_LINE]);
    assert_eq!(
        page[1].message, "two émoji 🎉",
        "text comes back byte for byte"
    );
    assert!(page[4].message.contains("truncated"), "{:?}", page[4]);
    let other_page = store.attempt_logs_page(other, 0, 100).await.unwrap();
    assert_eq!(other_page.len(), 1, "only the marker: {other_page:?}");
    // Paged by line number.
    let after = store.attempt_logs_page(attempt, 2, 2).await.unwrap();
    let numbers: Vec<i64> = after.iter().map(|l| l.line_no).collect();
    assert_eq!(numbers, [3, 4]);
    // Another executor's attempt is refused; an attempt that does not exist is dropped.
    let foreign = store
        .attempt_logs_append(
            "e2",
            &[
                (other, vec![line(2, "mine?")]),
                (other + 1_000, vec![line(1, "gone")]),
            ],
            caps,
        )
        .await
        .unwrap();
    assert_eq!(
        (foreign.stored, foreign.dropped, foreign.refused),
        (0, 2, vec![other])
    );
}
