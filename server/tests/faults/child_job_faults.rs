//! Child jobs through `kill -9`: parents firing every second whose runs end by a report that
//! comes later (the `slow` handler), each with a child job, while a follower and then the
//! leader die and come back. Every succeeded parent run has exactly one child run, created
//! with its ending (by whichever node stored the report) and run by the child's partition's
//! owner, even when that owner died between the two.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::harness::{Cluster, Database, id_list, instants, one_at_a_time};
use crate::invariants::{Verdict, each_at, runs, settle};
use crate::support::db::TestDb;
use crate::support::wait_for;

for_engine!(
    postgres,
    Postgres,
    [each_succeeded_parent_run_has_one_child_run_through_node_kills]
);
for_engine!(
    mysql,
    Mysql,
    [each_succeeded_parent_run_has_one_child_run_through_node_kills]
);

const PARENTS: usize = 20;

async fn each_succeeded_parent_run_has_one_child_run_through_node_kills(test_db: TestDb) {
    let _turn = one_at_a_time().await;
    let scenario = format!("child jobs through node kills ({:?})", test_db.engine);
    let db = Database::direct(test_db.engine, &test_db.url);
    let mut cluster = Cluster::start(&db, 3, |_| {}).await;
    let leader = Cluster::index(&cluster.leader().await);
    let follower = (leader + 1) % 3;
    let steady = (leader + 2) % 3;
    let _executor = cluster.executor(steady, "py-1", &["--capacity", "256"]);
    let children = cluster
        .create_jobs(
            steady,
            (0..PARENTS)
                .map(|i| {
                    json!({"name": format!("child-{i}"), "app": "py", "handler": "echo",
                           "schedule": {"manual": true},
                           "retry": {"max_attempts": 3, "initial_delay_ms": 100}})
                })
                .collect(),
        )
        .await;
    let parents = cluster
        .create_jobs(
            steady,
            children
                .iter()
                .enumerate()
                .map(|(i, child)| {
                    json!({"name": format!("parent-{i}"), "app": "py", "handler": "slow",
                           "args": {"seconds": 0.3}, "schedule": {"cron": "* * * * * *"},
                           "start": true, "children": {"on_success": [child]},
                           "retry": {"max_attempts": 3, "initial_delay_ms": 100}})
                })
                .collect(),
        )
        .await;
    let from = cluster.firing_from(&parents).await;

    db.sleep_until(from + 3_000).await;
    cluster.nodes[follower].kill9();
    db.sleep_until(from + 6_000).await;
    cluster.restart(follower).await;
    db.sleep_until(from + 8_000).await;
    cluster.nodes[leader].kill9();
    db.sleep_until(from + 11_000).await;
    cluster.restart(leader).await;
    let to = from + 14_000;
    db.sleep_until(to + 1_000).await;
    for parent in &parents {
        let (status, answer) = cluster.nodes[steady]
            .call(Method::POST, &format!("/api/v1/jobs/{parent}/stop"), None)
            .await;
        assert_eq!(status, 200, "{answer}");
    }

    // The parents: exactly once per instant of the window, as always.
    settle(&db, &parents, from, to, Duration::from_secs(90)).await;
    let parent_runs = runs(&db, &parents, from, to).await;
    let verdict = Verdict::of(&parent_runs, &each_at(&parents, &instants(from, to, 1_000)));
    verdict.assert_exactly_once(&scenario, false);
    let succeeded: BTreeSet<i64> = parent_runs
        .iter()
        .filter(|r| r.state == "succeeded")
        .map(|r| r.run_id)
        .collect();

    // Their children: every child run recorded against its parent, ended, and nothing else.
    let listed_children = id_list(&children);
    let all_children = || async {
        db.rows::<(i64, i64, String)>(
            &format!(
                "SELECT c.parent_run_id, r.run_id, r.state FROM child_runs c \
                 JOIN runs r ON r.run_id = c.child_run_id WHERE r.job_id IN ({listed_children})"
            ),
            &[],
        )
        .await
    };
    let child_rows = wait_for(Duration::from_secs(60), "the child runs to end", || async {
        let rows = all_children().await;
        rows.iter()
            .all(|(_, _, state)| !["pending", "queued", "running"].contains(&state.as_str()))
            .then_some(rows)
    })
    .await;
    let in_window: Vec<&(i64, i64, String)> = child_rows
        .iter()
        .filter(|(parent, _, _)| succeeded.contains(parent))
        .collect();
    let parents_with_a_child: BTreeSet<i64> = in_window.iter().map(|(p, _, _)| *p).collect();
    let missing: Vec<i64> = succeeded
        .difference(&parents_with_a_child)
        .copied()
        .collect();
    // One statement, so a child of a parent run past the window, created while this test
    // reads, is either counted with its record or not at all.
    let unrecorded = db
        .scalar(
            &format!(
                "SELECT COUNT(*) FROM runs r WHERE r.job_id IN ({listed_children}) \
                 AND NOT EXISTS (SELECT 1 FROM child_runs c WHERE c.child_run_id = r.run_id)"
            ),
            &[],
        )
        .await;
    let not_succeeded = child_rows
        .iter()
        .filter(|(_, _, state)| state != "succeeded")
        .count();
    figures!(
        "{scenario}: parents {}; succeeded parent runs {}, their child runs {}, missing {}, \
         child runs recorded {}, unrecorded {}, not succeeded {}",
        verdict.figures(),
        succeeded.len(),
        in_window.len(),
        missing.len(),
        child_rows.len(),
        unrecorded,
        not_succeeded
    );
    assert!(
        missing.is_empty(),
        "{scenario}: succeeded parent runs without a child run: {:?}",
        &missing[..missing.len().min(5)]
    );
    assert_eq!(
        in_window.len(),
        parents_with_a_child.len(),
        "{scenario}: a parent run with two child runs"
    );
    assert_eq!(unrecorded, 0, "{scenario}: a child run nobody recorded");
    assert_eq!(
        not_succeeded, 0,
        "{scenario}: child runs that did not succeed"
    );
}
