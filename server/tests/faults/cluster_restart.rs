//! The whole cluster dies (`kill -9` of every node) and comes back after a gap longer than the
//! misfire threshold: each job's misfire policy decides the missed instants exactly, every run
//! claimed before the stop still finishes, and nothing runs twice.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{Cluster, Database, id_list, instants, one_at_a_time};
use crate::invariants::{RunRow, Verdict, runs, settle};
use crate::support::db::{Engine, TestDb};
use crate::support::wait_for;

for_engine!(
    postgres,
    Postgres,
    [a_cluster_restarted_after_a_gap_applies_each_misfire_policy_exactly]
);
for_engine!(
    mysql,
    Mysql,
    [a_cluster_restarted_after_a_gap_applies_each_misfire_policy_exactly]
);
for_engine!(
    sqlite,
    Sqlite,
    [a_cluster_restarted_after_a_gap_applies_each_misfire_policy_exactly]
);

const THRESHOLD_MS: i64 = 2_000;
const GAP: Duration = Duration::from_secs(6);
const PER_POLICY: usize = 4;

fn job(name: &str, misfire: &str) -> Value {
    json!({"name": name, "app": "py", "handler": "echo",
           "schedule": {"cron": "* * * * * *"}, "start": true, "misfire": misfire,
           "catch_up_window_ms": 600_000,
           "retry": {"max_attempts": 3, "initial_delay_ms": 100}})
}

async fn a_cluster_restarted_after_a_gap_applies_each_misfire_policy_exactly(test_db: TestDb) {
    let _turn = one_at_a_time().await;
    let scenario = format!("cluster restarted after a gap ({:?})", test_db.engine);
    let db = Database::direct(test_db.engine, &test_db.url);
    let size = if db.engine == Engine::Sqlite { 1 } else { 2 };
    let mut cluster = Cluster::start(&db, size, |spec| {
        spec.misfire_threshold_ms = THRESHOLD_MS as u64;
    })
    .await;
    let executor = cluster.executor(0, "py-1", &["--capacity", "64"]);
    let mut policies: BTreeMap<i64, &str> = BTreeMap::new();
    for policy in ["fire_once", "skip", "catch_up"] {
        let bodies = (0..PER_POLICY)
            .map(|i| job(&format!("{policy}-{i}"), policy))
            .collect();
        for id in cluster.create_jobs(0, bodies).await {
            policies.insert(id, policy);
        }
    }
    let jobs: Vec<i64> = policies.keys().copied().collect();
    let from = cluster.firing_from(&jobs).await;
    db.sleep_until(from + 2_000).await;

    for node in &mut cluster.nodes {
        node.kill9();
    }
    let stopped_at = db.now_ms().await;
    let last_fired: BTreeMap<i64, i64> = db
        .rows::<(i64, i64)>(
            &format!(
                "SELECT job_id, last_fired_at_ms FROM jobs WHERE job_id IN ({})",
                id_list(&jobs)
            ),
            &[],
        )
        .await
        .into_iter()
        .collect();
    tokio::time::sleep(GAP).await;

    // The executor's node is gone: it re-registers when the node answers again.
    let restarted_at = db.now_ms().await;
    for i in 0..size {
        cluster.restart(i).await;
    }
    let listed = id_list(&jobs);
    wait_for(
        Duration::from_secs(60),
        "every job to fire again",
        || async {
            let firing = db
            .scalar(
                &format!(
                    "SELECT COUNT(*) FROM jobs WHERE job_id IN ({listed}) AND last_fired_at_ms > ?"
                ),
                &[restarted_at],
            )
            .await;
            (firing == jobs.len() as i64).then_some(())
        },
    )
    .await;
    // Every job was loaded, and so planned, between the restart and now.
    let loaded_by = db.now_ms().await;
    let to = (loaded_by / 1_000 + 3) * 1_000;
    settle(&db, &jobs, from, to, Duration::from_secs(60)).await;
    let runs = runs(&db, &jobs, from, to).await;

    // The plan at load time N: instants up to N - threshold are missed, later ones merely
    // late. N is known to lie in [restarted_at, loaded_by].
    let (earliest_limit, latest_limit) = (restarted_at - THRESHOLD_MS, loaded_by - THRESHOLD_MS);
    let mut expected: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
    let mut figures: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (&job, &policy) in &policies {
        let last = last_fired[&job];
        let mine: Vec<&RunRow> = runs.iter().filter(|r| r.job_id == job).collect();
        let ran: BTreeSet<i64> = mine.iter().map(|r| r.scheduled_at_ms).collect();
        let gap: Vec<i64> = instants(last + 1_000, to, 1_000);
        // The last missed instant, as the node decided it: the latest gap instant before the
        // first one that ran on schedule.
        let on_schedule = mine
            .iter()
            .filter(|r| r.scheduled_at_ms > last && r.trigger_kind == "schedule")
            .map(|r| r.scheduled_at_ms)
            .min()
            .unwrap_or(to);
        let last_missed = on_schedule - 1_000;
        assert!(
            (earliest_limit - 1_000..=latest_limit).contains(&last_missed),
            "{scenario}: job {job} ({policy}) ran on schedule from {on_schedule}, so it took \
             {last_missed} as its last missed instant; the plan's limit lay in \
             [{earliest_limit}, {latest_limit}]"
        );
        let mut want: BTreeSet<i64> = instants(from, last, 1_000).into_iter().collect();
        want.extend(gap.iter().filter(|t| **t > last_missed));
        let missed_count = gap.iter().filter(|t| **t <= last_missed).count();
        match policy {
            "fire_once" => {
                want.insert(last_missed);
            }
            "catch_up" => want.extend(gap.iter().filter(|t| **t <= last_missed)),
            _ => {}
        }
        let caught_up = ran
            .iter()
            .filter(|t| **t > last && **t <= last_missed)
            .count();
        let entry = figures.entry(policy).or_default();
        entry.0 += missed_count;
        entry.1 += caught_up;
        expected.insert(job, want);
    }
    let verdict = Verdict::of(&runs, &expected);
    let claimed_before_stop = runs
        .iter()
        .filter(|r| r.created_at_ms <= stopped_at && r.scheduled_at_ms > stopped_at)
        .count();
    let redelivered = {
        let mut seen = BTreeSet::new();
        executor
            .log()
            .await
            .iter()
            .filter_map(|e| e["run_id"].as_i64())
            .filter(|run| !seen.insert(*run))
            .count()
    };
    figures!(
        "{scenario}: down {} ms, threshold {THRESHOLD_MS} ms; missed instants and \
         runs for them per policy {figures:?}; runs claimed ahead before the stop and finished \
         after it {claimed_before_stop}; runs delivered twice {redelivered}; {}",
        restarted_at - stopped_at,
        verdict.figures()
    );
    verdict.assert_exactly_once(&scenario, true);
}
