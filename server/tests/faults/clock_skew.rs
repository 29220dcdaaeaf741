//! Nodes whose clocks are minutes off (libfaketime: one 7 minutes ahead, one 7 minutes behind;
//! more than the executors' five-minute signature window) fire every instant once, never
//! before it is due, and their dispatches are accepted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::{Cluster, Database, instants, one_at_a_time};
use crate::invariants::{Verdict, each_at, max_lateness_ms, runs, settle};
use crate::support::db::TestDb;
use crate::support::node::NodeSpec;

for_engine!(
    postgres,
    Postgres,
    ignore = "needs libfaketime (apt-get install faketime; .ci/run installs it)",
    [nodes_minutes_off_fire_neither_early_nor_twice]
);
// Not on SQLite: embedded, its clock is the node's own, so a skewed node is a skewed database.
for_engine!(
    mysql,
    Mysql,
    ignore = "needs libfaketime (apt-get install faketime; .ci/run installs it)",
    [nodes_minutes_off_fire_neither_early_nor_twice]
);

const SKEW: [&str; 2] = ["+7m", "-7m"];

fn libfaketime() -> Option<PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ]
    .iter()
    .map(|dir| PathBuf::from(dir).join("faketime/libfaketime.so.1"))
    .find(|p| p.exists())
}

/// Runs node `n<k>` with its clock shifted by `SKEW[k-1]`.
fn skewed(library: &Path) -> impl Fn(&mut NodeSpec) + '_ {
    move |spec: &mut NodeSpec| {
        let k = Cluster::index(&spec.node_id);
        spec.extra_env
            .push(("LD_PRELOAD", library.display().to_string()));
        spec.extra_env.push(("FAKETIME", SKEW[k % 2].to_owned()));
        // Timers and leases run on the monotonic clock, which no clock change moves.
        spec.extra_env.push(("DONT_FAKE_MONOTONIC", "1".to_owned()));
    }
}

async fn nodes_minutes_off_fire_neither_early_nor_twice(test_db: TestDb) {
    let library = libfaketime()
        .expect("the clock skew scenario needs libfaketime (apt-get install faketime)");
    let _turn = one_at_a_time().await;
    let scenario = format!("clocks 7 minutes off ({:?})", test_db.engine);
    let db = Database::direct(test_db.engine, &test_db.url);
    let cluster = Cluster::start(&db, 2, skewed(&library)).await;
    let executor = cluster.executor(0, "py-1", &["--capacity", "64"]);
    let (jobs, from) = cluster.ticking(0, 30).await;
    db.sleep_until(from + 6_000).await;
    let to = from + 6_000;
    settle(&db, &jobs, from, to, Duration::from_secs(60)).await;
    let runs = runs(&db, &jobs, from, to).await;
    let verdict = Verdict::of(&runs, &each_at(&jobs, &instants(from, to, 1_000)));

    // Early, as the executor saw it: its clock is the true one.
    let mut earliest: BTreeMap<i64, i64> = BTreeMap::new();
    let mut early = Vec::new();
    let mut delivered = 0;
    for entry in executor.log().await {
        let (Some(received), Some(scheduled)) = (
            entry["received_ms"].as_i64(),
            entry["scheduled_at"].as_str(),
        ) else {
            continue;
        };
        let scheduled = chrono::DateTime::parse_from_rfc3339(scheduled)
            .unwrap()
            .timestamp_millis();
        delivered += 1;
        let ahead = scheduled - received;
        let worst = earliest.entry(scheduled).or_insert(ahead);
        *worst = (*worst).max(ahead);
        if received < scheduled {
            early.push((entry["run_id"].clone(), ahead));
        }
    }
    let refused = executor
        .log()
        .await
        .iter()
        .filter(|e| e["refused"].is_string())
        .count();
    figures!(
        "{scenario}: skews {:?}; dispatches received {delivered}, early {} (most {} ms \
         ahead), refused signatures {refused}; max lateness {} ms; {}",
        SKEW,
        early.len(),
        earliest.values().max().copied().unwrap_or(0),
        max_lateness_ms(&runs),
        verdict.figures()
    );
    verdict.assert_exactly_once(&scenario, true);
    assert!(early.is_empty(), "{scenario}: fired early: {early:?}");
    assert_eq!(refused, 0, "{scenario}: dispatches refused by the executor");
}
