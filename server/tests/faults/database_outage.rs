//! The database goes away: unreachable for 10 s behind a TCP proxy the test cuts (open
//! connections reset, new ones unanswered), then crashed and restarted. The nodes recover on
//! their own, without a restart, and no instant is lost or run twice.

use std::time::Duration;

use crate::harness::{Cluster, Database, firing_again, instants, one_at_a_time};
use crate::invariants::{Verdict, each_at, max_lateness_ms, runs, runs_succeeded_twice, settle};
use crate::support::db::Engine;
use crate::support::private_server::PrivateServer;
use crate::support::proxy::TcpProxy;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_the_cluster_rides_out_a_lost_and_a_restarted_database() {
    the_cluster_rides_out_a_lost_and_a_restarted_database(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_the_cluster_rides_out_a_lost_and_a_restarted_database() {
    the_cluster_rides_out_a_lost_and_a_restarted_database(Engine::Mysql).await;
}

async fn the_cluster_rides_out_a_lost_and_a_restarted_database(engine: Engine) {
    let _turn = one_at_a_time().await;
    let scenario = format!("database lost and restarted ({engine:?})");
    let Some(mut server) = PrivateServer::start(engine).await else {
        return;
    };
    let proxy = TcpProxy::start(server.addr()).await;
    let db = Database {
        engine,
        node_url: proxy.url_through(&server.url()),
        test_url: server.url(),
    };
    let mut cluster = Cluster::start(&db, 2, |_| {}).await;
    let _executor = cluster.executor(0, "py-1", &["--capacity", "64"]);
    let (jobs, from) = cluster.ticking(0, 40).await;
    db.sleep_until(from + 2_000).await;

    // Unreachable for 10 s.
    let cut_at = db.now_ms().await;
    proxy.cut();
    tokio::time::sleep(Duration::from_secs(10)).await;
    proxy.restore();
    let restored_at = db.now_ms().await;
    let outage_recovered = firing_again(&db, &jobs, restored_at).await - restored_at;
    cluster.settled(0, &["n1", "n2"]).await;

    // Crashed and restarted, 2 s down.
    let crashed_at = db.now_ms().await;
    server.crash_and_restart(Duration::from_secs(2)).await;
    let restarted_at = db.now_ms().await;
    let restart_recovered = firing_again(&db, &jobs, restarted_at).await - restarted_at;
    cluster.settled(0, &["n1", "n2"]).await;

    let to = (db.now_ms().await / 1_000 + 2) * 1_000;
    settle(&db, &jobs, from, to, Duration::from_secs(60)).await;
    let runs = runs(&db, &jobs, from, to).await;
    let verdict = Verdict::of(&runs, &each_at(&jobs, &instants(from, to, 1_000)));
    let twice = runs_succeeded_twice(&db, &jobs, from, to).await;
    let restarted: Vec<String> = cluster
        .nodes
        .iter_mut()
        .filter_map(|n| (!n.is_running()).then(|| n.node_id().to_owned()))
        .collect();
    figures!(
        "{scenario}: unreachable {} ms, every job firing again {outage_recovered} ms \
         after; down {} ms for the restart, firing again {restart_recovered} ms after; \
         max lateness {} ms; {}; attempts succeeded twice {}; nodes that exited {}",
        restored_at - cut_at,
        restarted_at - crashed_at,
        max_lateness_ms(&runs),
        verdict.figures(),
        twice.len(),
        restarted.len()
    );
    assert!(
        restarted.is_empty(),
        "{scenario}: nodes exited: {restarted:?}"
    );
    verdict.assert_exactly_once(&scenario, true);
    assert!(twice.is_empty(), "{scenario}: runs done twice: {twice:?}");
}
