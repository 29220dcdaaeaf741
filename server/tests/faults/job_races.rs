//! Edits, stops and deletes of jobs racing their own fires: each sent at a moment near one of
//! the job's instants (as its claim is made a second ahead, and as it is delivered). Whatever
//! wins, an instant never runs twice, no run is left unfinished, nothing fires after a stop or
//! delete has had the claim-ahead time to take effect, and an edited schedule replaces the old
//! one without a gap.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::harness::{Cluster, Database, every_second, instants, one_at_a_time};
use crate::invariants::{Verdict, runs, settle};
use crate::support::db::{Engine, TestDb};

for_engine!(
    postgres,
    Postgres,
    [edits_stops_and_deletes_racing_a_fire_never_run_an_instant_twice]
);
for_engine!(
    mysql,
    Mysql,
    [edits_stops_and_deletes_racing_a_fire_never_run_an_instant_twice]
);
for_engine!(
    sqlite,
    Sqlite,
    [edits_stops_and_deletes_racing_a_fire_never_run_an_instant_twice]
);

/// The scheduler's default claim ahead: a change within it of an instant may miss that instant.
const CLAIM_AHEAD_MS: i64 = 1_000;
/// The default poll: how long an edit may take to reach the owning node.
const POLL_MS: i64 = 500;
/// Slack for the cluster clock's reading of the database clock and a busy machine.
const SLACK_MS: i64 = 300;
/// When, relative to an instant, each change is sent: around its claim and its delivery.
const OFFSETS_MS: [i64; 8] = [-1_010, -1_000, -990, -500, -10, 0, 10, 300];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Edit,
    Stop,
    Delete,
}

async fn edits_stops_and_deletes_racing_a_fire_never_run_an_instant_twice(test_db: TestDb) {
    let _turn = one_at_a_time().await;
    let scenario = format!("changes racing fires ({:?})", test_db.engine);
    let db = Database::direct(test_db.engine, &test_db.url);
    let size = if db.engine == Engine::Sqlite { 1 } else { 2 };
    let cluster = Cluster::start(&db, size, |_| {}).await;
    let _executor = cluster.executor(0, "py-1", &["--capacity", "64"]);
    let mut plan: Vec<(i64, Change, i64)> = Vec::new();
    for change in [Change::Edit, Change::Stop, Change::Delete] {
        let bodies = (0..OFFSETS_MS.len())
            .map(|i| every_second(&format!("{change:?}-{i}")))
            .collect();
        let ids = cluster.create_jobs(0, bodies).await;
        plan.extend(
            ids.into_iter()
                .zip(OFFSETS_MS)
                .map(|(id, at)| (id, change, at)),
        );
    }
    let jobs: Vec<i64> = plan.iter().map(|(id, _, _)| *id).collect();
    let from = cluster.firing_from(&jobs).await;

    // Every change near the instant `from + 3 s`, each from its own task, all through the
    // nodes in turn. The machine's clock is the database's here.
    let instant = from + 3_000;
    let mut sent = Vec::new();
    for (k, &(job, change, offset)) in plan.iter().enumerate() {
        let node = &cluster.nodes[k % size];
        let url = node.url(&format!("/api/v1/jobs/{job}"));
        let at = instant + offset;
        sent.push(tokio::spawn(async move {
            let wait = at - carillon_server::clock::system_now_ms();
            tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;
            let client = carillon_tls::http_client().unwrap();
            let request = match change {
                Change::Edit => client
                    .request(Method::PATCH, url)
                    .json(&json!({"schedule": {"cron": "*/2 * * * * *"}})),
                Change::Stop => client.post(format!("{url}/stop")),
                Change::Delete => client.delete(url),
            };
            let began = carillon_server::clock::system_now_ms();
            let status = request
                .bearer_auth(crate::support::node::TOKEN)
                .send()
                .await
                .unwrap()
                .status();
            let acked = carillon_server::clock::system_now_ms();
            assert!(status.is_success(), "{change:?} of {job}: {status}");
            (job, change, began, acked)
        }));
    }
    let mut changes = Vec::new();
    for task in sent {
        changes.push(task.await.unwrap());
    }
    let to = instant + 6_000;
    db.sleep_until(to + 1_000).await;
    settle(&db, &jobs, from, to, Duration::from_secs(30)).await;
    let runs = runs(&db, &jobs, from, to).await;

    // What each job must have run, and what it may have run depending on who won the race.
    let mut must: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
    let mut may: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
    for &(job, change, began, acked) in &changes {
        let every = instants(from, to, 1_000);
        // Claimed a second ahead, so before the change was sent.
        let before: BTreeSet<i64> = every.iter().copied().filter(|t| *t <= began).collect();
        let undecided_until = match change {
            Change::Edit => acked + POLL_MS + CLAIM_AHEAD_MS + SLACK_MS,
            Change::Stop | Change::Delete => acked + CLAIM_AHEAD_MS + SLACK_MS,
        };
        let undecided = every
            .iter()
            .copied()
            .filter(|t| *t > began && *t <= undecided_until);
        let after = every.iter().copied().filter(|t| *t > undecided_until);
        let (must_after, may_between): (BTreeSet<i64>, BTreeSet<i64>) = match change {
            // The new schedule fires the even seconds; either may fire in between.
            Change::Edit => (
                after.filter(|t| t % 2_000 == 0).collect(),
                undecided.collect(),
            ),
            Change::Stop | Change::Delete => (BTreeSet::new(), undecided.collect()),
        };
        must.insert(job, before.into_iter().chain(must_after).collect());
        may.insert(job, may_between);
    }
    let verdict = Verdict::allowing(&runs, &must, &may);
    let won: BTreeMap<String, usize> = changes.iter().fold(BTreeMap::new(), |mut m, c| {
        // The old schedule fired after the change was sent: the fire won the race.
        let fired_after = runs.iter().any(|r| {
            r.job_id == c.0
                && r.scheduled_at_ms > c.2
                && (c.1 != Change::Edit || r.scheduled_at_ms % 2_000 != 0)
        });
        *m.entry(format!("{:?} raced by a fire", c.1)).or_default() += usize::from(fired_after);
        m
    });
    figures!(
        "{scenario}: {} changes sent from {} ms to {} ms around an instant; {won:?}; {}",
        changes.len(),
        OFFSETS_MS[0],
        OFFSETS_MS[OFFSETS_MS.len() - 1],
        verdict.figures()
    );
    verdict.assert_exactly_once(&scenario, false);
    let failed: Vec<_> = verdict
        .not_succeeded
        .iter()
        .filter(|(_, state)| state != "cancelled")
        .collect();
    assert!(
        failed.is_empty(),
        "{scenario}: runs that failed: {failed:?}"
    );
}
