//! Flow keys through a node's death: jobs firing every second share two keys (one per value of
//! their `group` argument), each capped at two runs in flight, and a node is killed mid-run
//! and restarted. Every instant still has exactly one run, every run succeeds, and no key ever
//! had more than two runs running at once, whichever node started or ended them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{Cluster, Database, id_list, instants, one_at_a_time};
use crate::invariants::{Verdict, each_at, runs, settle};
use crate::support::db::{Engine, TestDb};

for_engine!(
    postgres,
    Postgres,
    [flow_keys_hold_their_limits_through_a_node_kill]
);
for_engine!(
    mysql,
    Mysql,
    [flow_keys_hold_their_limits_through_a_node_kill]
);
for_engine!(
    sqlite,
    Sqlite,
    [flow_keys_hold_their_limits_through_a_node_kill]
);

const MAX_IN_FLIGHT: usize = 2;
/// More jobs per key than its limit, all due at each instant: unlimited, they would all run
/// at once.
const PER_GROUP: usize = 3;

fn job(name: &str, group: &str) -> Value {
    json!({"name": name, "app": "py", "handler": "slow", "args": {"group": group, "seconds": 0.2},
           "schedule": {"cron": "* * * * * *"}, "start": true,
           "retry": {"max_attempts": 4, "initial_delay_ms": 100},
           "flow": {"key": "shared", "key_arg": "/group", "max_in_flight": MAX_IN_FLIGHT}})
}

/// The most runs of `spans` running at one moment.
fn most_at_once(spans: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = spans
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    // An end at the instant another starts frees its place first.
    edges.sort_unstable();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

async fn flow_keys_hold_their_limits_through_a_node_kill(test_db: TestDb) {
    let _turn = one_at_a_time().await;
    let scenario = format!("flow keys through a node kill ({:?})", test_db.engine);
    let db = Database::direct(test_db.engine, &test_db.url);
    let size = if db.engine == Engine::Sqlite { 1 } else { 2 };
    let mut cluster = Cluster::start(&db, size, |_| {}).await;
    // Registered with the node that stays up, where there are two.
    let _executor = cluster.executor(size - 1, "py-1", &["--capacity", "64"]);
    let mut groups: BTreeMap<i64, &str> = BTreeMap::new();
    for group in ["a", "b"] {
        let bodies = (0..PER_GROUP)
            .map(|i| job(&format!("flow-{group}-{i}"), group))
            .collect();
        for id in cluster.create_jobs(size - 1, bodies).await {
            groups.insert(id, group);
        }
    }
    let jobs: Vec<i64> = groups.keys().copied().collect();
    let from = cluster.firing_from(&jobs).await;

    db.sleep_until(from + 3_100).await;
    cluster.nodes[0].kill9();
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.restart(0).await;
    let to = db.now_ms().await / 1_000 * 1_000 + 4_000;
    settle(&db, &jobs, from, to, Duration::from_secs(60)).await;

    let runs = runs(&db, &jobs, from, to).await;
    let verdict = Verdict::of(&runs, &each_at(&jobs, &instants(from, to, 1_000)));
    let spans: Vec<(i64, i64, i64)> = db
        .rows(
            &format!(
                "SELECT job_id, started_at_ms, finished_at_ms FROM runs WHERE job_id IN ({}) \
                 AND scheduled_at_ms BETWEEN ? AND ? AND started_at_ms IS NOT NULL \
                 AND finished_at_ms IS NOT NULL",
                id_list(&jobs)
            ),
            &[from, to],
        )
        .await;
    let mut most = BTreeMap::new();
    for group in ["a", "b"] {
        let mine: Vec<(i64, i64)> = spans
            .iter()
            .filter(|(job, _, _)| groups[job] == group)
            .map(|&(_, start, end)| (start, end))
            .collect();
        most.insert(group, most_at_once(&mine));
    }
    figures!(
        "{scenario}: {}, most running at once per key {most:?} (limit {MAX_IN_FLIGHT})",
        verdict.figures()
    );
    verdict.assert_exactly_once(&scenario, true);
    for (group, at_once) in most {
        assert!(
            at_once <= MAX_IN_FLIGHT,
            "{scenario}: key shared/{group} had {at_once} runs running at once"
        );
        assert!(
            at_once == MAX_IN_FLIGHT,
            "{scenario}: key shared/{group} never ran {MAX_IN_FLIGHT} at once: the limit \
             was not reached, so it was not tested"
        );
    }
}
