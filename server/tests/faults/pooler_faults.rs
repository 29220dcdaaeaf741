//! PostgreSQL through pgbouncer in transaction pooling mode (Debian's 1.18), with fewer server
//! connections than the nodes have clients: three nodes migrate, elect, fire and fail over
//! through it; the leader is killed, then the server behind pgbouncer crashes and restarts.
//! And a node not told of the pooler stops at start, naming the setting.

use std::time::Duration;

use crate::harness::{Cluster, Database, firing_again, instants, one_at_a_time};
use crate::invariants::{Verdict, each_at, max_lateness_ms, runs, runs_succeeded_twice, settle};
use crate::support::db::Engine;
use crate::support::node::{epoch_ms, refused_start};
use crate::support::pgbouncer::Pgbouncer;
use crate::support::private_server::PrivateServer;

/// Server connections pgbouncer may open to the database: the three nodes hold 36 client
/// connections between them.
const SERVER_CONNECTIONS: u32 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pgbouncer (Debian's package; .ci/run installs it)"]
async fn postgres_a_cluster_through_pgbouncer_fires_each_instant_once_through_faults() {
    let _turn = one_at_a_time().await;
    let scenario = "through pgbouncer, transaction mode (Postgres)";
    let Some(mut server) = PrivateServer::start(Engine::Postgres).await else {
        return;
    };
    let bouncer = Pgbouncer::start(server.port, SERVER_CONNECTIONS).await;
    let db = Database {
        engine: Engine::Postgres,
        node_url: bouncer.url_through(&server.url()),
        test_url: server.url(),
    };
    let pooled = |spec: &mut crate::support::node::NodeSpec| {
        spec.extra_env
            .push(("CARILLON_DATABASE_POOLER", "transaction".to_owned()));
    };
    let mut cluster = Cluster::start(&db, 3, pooled).await;
    let leader = cluster.leader().await;
    let victim = Cluster::index(&leader);
    let steady = (victim + 1) % 3;
    let _executor = cluster.executor(steady, "py-1", &["--capacity", "64"]);
    let (jobs, from) = cluster.ticking(steady, 60).await;
    db.sleep_until(from + 2_000).await;

    // The leader dies.
    let killed_at = db.now_ms().await;
    cluster.nodes[victim].kill9();
    let survivors: Vec<String> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    let survivors: Vec<&str> = survivors.iter().map(String::as_str).collect();
    let settled = cluster.settled(steady, &survivors).await;
    let failover_ms = epoch_ms(&settled.leader.unwrap().acquired_at) - killed_at;
    db.sleep_until(db.now_ms().await + 2_000).await;

    // The server behind pgbouncer crashes and is back 2 s later: pgbouncer keeps the nodes'
    // connections and opens new server connections.
    let crashed_at = db.now_ms().await;
    server.crash_and_restart(Duration::from_secs(2)).await;
    let restarted_at = db.now_ms().await;
    let recovered_ms = firing_again(&db, &jobs, restarted_at).await - restarted_at;
    cluster.settled(steady, &survivors).await;

    let to = (db.now_ms().await / 1_000 + 2) * 1_000;
    settle(&db, &jobs, from, to, Duration::from_secs(60)).await;
    let runs = runs(&db, &jobs, from, to).await;
    let verdict = Verdict::of(&runs, &each_at(&jobs, &instants(from, to, 1_000)));
    let twice = runs_succeeded_twice(&db, &jobs, from, to).await;
    // What pgbouncer opened, seen from the server: never more than its pool.
    let server_connections = db
        .scalar(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = 'test' \
             AND pid <> pg_backend_pid()",
            &[],
        )
        .await;
    figures!(
        "{scenario}: {SERVER_CONNECTIONS} server connections for 3 nodes; leader killed, new \
         leader after {failover_ms} ms; server down {} ms, every job firing again {recovered_ms} \
         ms after; max lateness {} ms; {}; attempts succeeded twice {}",
        restarted_at - crashed_at,
        max_lateness_ms(&runs),
        verdict.figures(),
        twice.len()
    );
    verdict.assert_exactly_once(scenario, true);
    assert!(twice.is_empty(), "{scenario}: runs done twice: {twice:?}");
    assert!(
        server_connections <= i64::from(SERVER_CONNECTIONS),
        "{scenario}: {server_connections} server connections, pgbouncer allows {SERVER_CONNECTIONS}"
    );
    assert!(
        failover_ms <= 6_000,
        "{scenario}: failover took {failover_ms} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pgbouncer (Debian's package; .ci/run installs it)"]
async fn postgres_a_node_not_told_of_pgbouncer_stops_naming_the_setting() {
    let Some(server) = PrivateServer::start(Engine::Postgres).await else {
        return;
    };
    let bouncer = Pgbouncer::start(server.port, SERVER_CONNECTIONS).await;
    let said = refused_start(&bouncer.url_through(&server.url())).await;
    assert!(
        said.contains("database.pooler = \"transaction\""),
        "the node did not name the setting: {said}"
    );
}
