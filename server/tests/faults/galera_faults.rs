//! A MariaDB Galera cluster of three members, each Carillon node on a different member, under
//! load (500 jobs firing every second): a member is killed (`kill -9`) at the same moment as
//! a Carillon node on another member, both come back; then a member is cut off the group
//! (it becomes non-primary and must stop serving: its node loses its lease and its
//! partitions move), and rejoins. Every instant runs exactly once, counted in SQL.

use std::time::Duration;

use crate::harness::{Cluster, Database, instants, one_at_a_time};
use crate::invariants::{Verdict, each_at, max_lateness_ms, runs, runs_succeeded_twice, settle};
use crate::support::db::Engine;
use crate::support::galera::GaleraCluster;
use crate::support::node::{NodeProcess, epoch_ms, refused_start};

/// Jobs firing every second.
const JOBS: usize = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs galera-4 and rsync (Debian's packages; .ci/run installs them)"]
async fn galera_nodes_on_different_members_fire_each_instant_once_through_member_faults() {
    let _turn = one_at_a_time().await;
    let scenario = "Galera, 3 members, a node on each";
    let mut galera = GaleraCluster::start(3).await;
    // The test reads through member 0, which stays up; node n<i+1> uses member i.
    let db = Database::direct(Engine::Mysql, &galera.url(0));
    let urls: Vec<String> = (0..3).map(|i| galera.url(i)).collect();
    let on_own_member = move |spec: &mut crate::support::node::NodeSpec| {
        let i: usize = spec.node_id[1..].parse::<usize>().unwrap() - 1;
        spec.database_url = urls[i].clone();
        // The default timings (heartbeat 500 ms, leases 4 s), not the suite's fast ones: on
        // these two shared cores a commit through three members takes up to 3 s while the
        // group changes, and with 1 s leases each such commit cost a lease, a leader or a
        // partition (CI saw term 9), piling moves on the backlog the faults leave.
        spec.heartbeat_ms = 500;
        spec.node_lease_ms = 4_000;
        spec.leader_lease_ms = 4_000;
    };
    // The three start together on a new database, each migrating through its own member: the
    // migration lock is a row certification gives to one of them.
    let dir = tempfile::tempdir().unwrap();
    let spec = |i| Cluster::spec(&db, &dir, i, &on_own_member);
    let (n1, n2, n3) = tokio::join!(
        NodeProcess::start(spec(1)),
        NodeProcess::start(spec(2)),
        NodeProcess::start(spec(3))
    );
    let mut cluster = Cluster {
        db: db.clone(),
        nodes: vec![n1, n2, n3],
        dir,
    };
    cluster.settled(0, &["n1", "n2", "n3"]).await;
    let _executor = cluster.executor(0, "py-1", &["--capacity", "512"]);
    let (jobs, from) = cluster.ticking(0, JOBS).await;
    db.sleep_until(from + 3_000).await;

    // Member m1 (node n2's) and node n3 are killed at the same moment: n1 alone fires.
    let killed_at = db.now_ms().await;
    galera.kill9(1);
    cluster.nodes[2].kill9();
    let alone = cluster.settled(0, &["n1"]).await;
    let failover_ms =
        epoch_ms(&alone.leader.clone().unwrap().acquired_at).max(killed_at) - killed_at;
    let took_over_ms = db.now_ms().await - killed_at;
    let transfer = galera.restart(1).await;
    cluster.restart(2).await;
    cluster.settled(0, &["n1", "n2", "n3"]).await;
    let back_ms = db.now_ms().await - killed_at;

    // Member m2 (node n3's) is cut off: non-primary, it refuses its node, whose partitions
    // move to the others; then it rejoins.
    let isolated_at = db.now_ms().await;
    galera.isolate(2).await;
    cluster.settled(0, &["n1", "n2"]).await;
    let moved_ms = db.now_ms().await - isolated_at;
    let refused = crate::support::db::try_fetch_rows::<(i64,)>(
        Engine::Mysql,
        &galera.url(2),
        "SELECT COUNT(*) FROM jobs",
        &[],
    )
    .await
    .err()
    .unwrap_or_else(|| "answered".to_owned());
    let rejoined_by = galera.rejoin(2).await;
    cluster.settled(0, &["n1", "n2", "n3"]).await;

    let to = (db.now_ms().await / 1_000 + 2) * 1_000;
    settle(&db, &jobs, from, to, Duration::from_secs(90)).await;
    let runs = runs(&db, &jobs, from, to).await;
    let verdict = Verdict::of(&runs, &each_at(&jobs, &instants(from, to, 1_000)));
    let twice = runs_succeeded_twice(&db, &jobs, from, to).await;
    // When the latest run was due, from the first kill: which fault it rode out.
    let latest_due = runs
        .iter()
        .filter(|r| r.lateness_ms().is_some())
        .max_by_key(|r| r.lateness_ms())
        .map_or(0, |r| r.scheduled_at_ms - killed_at);
    figures!(
        "{scenario}: {JOBS} jobs every second; member and node killed: leader after \
         {failover_ms} ms, n1 alone after {took_over_ms} ms, all back after {back_ms} ms (the member by {transfer}); \
         member cut off ({} ms after the kill): its node's partitions moved after {moved_ms} ms, it rejoined by {rejoined_by}; \
         max lateness {} ms (due {latest_due} ms after the kill); {}; attempts succeeded \
         twice {}",
        isolated_at - killed_at,
        max_lateness_ms(&runs),
        verdict.figures(),
        twice.len()
    );
    assert!(
        refused.contains("WSREP") || refused.contains("1047"),
        "{scenario}: the cut-off member answered: {refused}"
    );
    verdict.assert_exactly_once(scenario, true);
    assert!(twice.is_empty(), "{scenario}: runs done twice: {twice:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs galera-4 and rsync (Debian's packages; .ci/run installs them)"]
async fn galera_a_member_without_interleaved_autoinc_locks_is_refused_naming_the_setting() {
    // MariaDB itself refuses to start a member without `binlog_format = ROW`; this one it
    // starts.
    let galera = GaleraCluster::start_with(1, &["--innodb-autoinc-lock-mode=1"]).await;
    let said = refused_start(&galera.url(0)).await;
    assert!(
        said.contains("innodb_autoinc_lock_mode is 1")
            && said.contains("set innodb_autoinc_lock_mode = 2"),
        "the node did not name the setting: {said}"
    );
}
