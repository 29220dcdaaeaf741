//! Three `carillon server` processes on one database elect one leader, spread the partitions,
//! and recover from `kill -9`, graceful stops and restarts. Run on Postgres and MariaDB.
//!
//! Timings are judged on the database's clock (the lease's own clock), with the figures printed.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::time::Duration;

use carillon_server::store::{DatabaseUrl, PoolOptions, Store};
use support::db::TestDb;
use support::node::{ClusterSnapshot, NodeProcess, NodeSpec, epoch_ms};
use support::wait_for;

const SETTLE: Duration = Duration::from_secs(30);

macro_rules! cluster_tests {
    ($($test:ident),* $(,)?) => {
        for_engine!(postgres, Postgres, [$($test),*]);
        for_engine!(mysql, Mysql, [$($test),*]);
    };
}

cluster_tests!(
    three_nodes_elect_one_leader_and_share_the_partitions,
    killing_the_leader_elects_a_new_leader_and_moves_its_partitions,
    a_graceful_stop_hands_over_without_waiting_for_the_lease,
    a_restarted_node_rejoins_and_gets_partitions_back,
);

struct Cluster {
    nodes: Vec<NodeProcess>,
    db_clock: std::sync::Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start(db: &TestDb, tune: impl Fn(&mut NodeSpec)) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut nodes = Vec::new();
        for id in ["n1", "n2", "n3"] {
            let mut spec = NodeSpec::fast(id, &db.url, dir.path());
            tune(&mut spec);
            nodes.push(NodeProcess::start(spec).await);
        }
        let url = DatabaseUrl::parse(&db.url).expect("url");
        let options = PoolOptions {
            max_connections: 2,
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(5),
            transaction_pooler: false,
        };
        let db_clock = carillon_server::store::connect(&url, &options)
            .await
            .expect("connect");
        Cluster {
            nodes,
            db_clock,
            _dir: dir,
        }
    }

    fn node(&mut self, id: &str) -> &mut NodeProcess {
        self.nodes
            .iter_mut()
            .find(|n| n.node_id() == id)
            .expect("node")
    }

    fn ids(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.node_id().to_owned()).collect()
    }

    /// Every node id but `except`.
    fn others(&self, except: &str) -> Vec<String> {
        self.ids().into_iter().filter(|id| id != except).collect()
    }

    /// The database's clock now: the clock leases are measured with.
    async fn db_now(&self) -> i64 {
        self.db_clock.now_ms().await.expect("db clock")
    }

    /// Waits until the nodes in `live` hold every partition evenly under one leader, as seen
    /// by `observer`.
    async fn settled(&self, observer: &str, live: &[&str]) -> ClusterSnapshot {
        let node = self
            .nodes
            .iter()
            .find(|n| n.node_id() == observer)
            .expect("observer");
        wait_for(
            SETTLE,
            &format!("a settled cluster of {live:?}"),
            || async { node.cluster().await.filter(|s| s.is_settled_on(live)) },
        )
        .await
    }
}

fn leader_of(snapshot: &ClusterSnapshot) -> (String, i64) {
    let leader = snapshot.leader.as_ref().expect("leader");
    (leader.node_id.clone(), leader.term)
}

/// Epochs never go back, and a partition's owner changes only with a new epoch.
fn check_history(history: &[ClusterSnapshot]) {
    for pair in history.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        let (owners_before, owners_after) = (before.owners(), after.owners());
        for (p, (a, b)) in owners_before.iter().zip(&owners_after).enumerate() {
            if a.is_some() && b.is_some() && a != b {
                // Moving between two owners without passing through a release is only legal
                // as a hand-off or a reassignment from a dead node.
                let from = before.node(a.as_deref().unwrap_or_default());
                let legal = from.is_some_and(|n| !n.alive || n.handing_off.contains(&(p as i64)))
                    || after
                        .node(a.as_deref().unwrap_or_default())
                        .is_some_and(|n| !n.alive);
                assert!(legal, "partition {p} jumped from {a:?} to {b:?}");
            }
        }
    }
}

async fn three_nodes_elect_one_leader_and_share_the_partitions(db: TestDb) {
    let cluster = Cluster::start(&db, |_| {}).await;
    let settled = cluster.settled("n1", &["n1", "n2", "n3"]).await;
    let (leader, term) = leader_of(&settled);
    assert_eq!(settled.nodes.iter().filter(|n| n.leader).count(), 1);
    assert_eq!(settled.partition_count, 24);
    for node in &settled.nodes {
        assert_eq!(node.partitions.len(), 8, "{node:?}");
        assert!(node.address.starts_with("http://127.0.0.1:"));
    }
    // Every node agrees, and each one acts on exactly what the database says it owns.
    let mut leaders_by_self = Vec::new();
    for node in &cluster.nodes {
        let seen = wait_for(SETTLE, "the node's own view to catch up", || async {
            let s = node.cluster().await?;
            let owned = s.node(node.node_id())?.partitions.len();
            (s.this_node.acting_partitions == owned && s.this_node.member).then_some(s)
        })
        .await;
        assert_eq!(leader_of(&seen), (leader.clone(), term));
        if seen.this_node.leader_term.is_some() {
            leaders_by_self.push(seen.this_node.node_id.clone());
        }
    }
    assert_eq!(
        leaders_by_self,
        vec![leader],
        "exactly one node believes it leads"
    );
}

async fn killing_the_leader_elects_a_new_leader_and_moves_its_partitions(db: TestDb) {
    let mut cluster = Cluster::start(&db, |_| {}).await;
    let before = cluster.settled("n1", &["n1", "n2", "n3"]).await;
    let (old_leader, old_term) = leader_of(&before);
    let survivors = cluster.others(&old_leader);
    let survivors: Vec<&str> = survivors.iter().map(String::as_str).collect();

    cluster.node(&old_leader).kill9();
    let killed_at = cluster.db_now().await;

    let observer = cluster
        .nodes
        .iter()
        .find(|n| n.node_id() == survivors[0])
        .expect("survivor");
    let mut history = vec![before.clone()];
    let deadline = tokio::time::Instant::now() + SETTLE;
    let after = loop {
        if let Some(snapshot) = observer.cluster().await {
            history.push(snapshot.clone());
            if snapshot.is_settled_on(&survivors) {
                break snapshot;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new leader with the dead node's partitions: {:#?}",
            history.last()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    check_history(&history);

    let (new_leader, new_term) = leader_of(&after);
    assert_ne!(new_leader, old_leader);
    assert!(new_term > old_term, "term {new_term} after {old_term}");
    let acquired = epoch_ms(&after.leader.as_ref().expect("leader").acquired_at);
    let failover_ms = acquired - killed_at;
    let lease_plus_beat = 1_000 + 200;
    eprintln!(
        "failover: new leader {failover_ms} ms after kill -9 (lease + heartbeat = {lease_plus_beat} ms)"
    );
    // Lease plus one heartbeat, with room for a loaded CI machine's scheduling.
    assert!(
        failover_ms <= lease_plus_beat + 1_000,
        "took {failover_ms} ms"
    );
    assert!(!after.node(&old_leader).expect("dead node listed").alive);
    assert!(
        after
            .node(&old_leader)
            .expect("dead node")
            .partitions
            .is_empty()
    );
    for id in &survivors {
        assert_eq!(after.node(id).expect("survivor").partitions.len(), 12);
    }
}

async fn a_graceful_stop_hands_over_without_waiting_for_the_lease(db: TestDb) {
    // Leases far longer than the test may wait: only a clean hand-over can pass.
    let mut cluster = Cluster::start(&db, |spec| {
        spec.node_lease_ms = 20_000;
        spec.leader_lease_ms = 20_000;
    })
    .await;
    let before = cluster.settled("n1", &["n1", "n2", "n3"]).await;
    let (old_leader, old_term) = leader_of(&before);
    let survivors = cluster.others(&old_leader);
    let survivors: Vec<&str> = survivors.iter().map(String::as_str).collect();

    let stopped_at = cluster.db_now().await;
    let status = cluster.node(&old_leader).terminate().await;
    assert!(status.success(), "a graceful stop exits 0, got {status}");

    let observer = cluster
        .nodes
        .iter()
        .find(|n| n.node_id() == survivors[0])
        .expect("survivor");
    let after = wait_for(
        Duration::from_secs(10),
        "the survivors to take over",
        || async {
            observer
                .cluster()
                .await
                .filter(|s| s.is_settled_on(&survivors))
        },
    )
    .await;
    let settled_at = cluster.db_now().await;
    let (new_leader, new_term) = leader_of(&after);
    assert_ne!(new_leader, old_leader);
    assert!(new_term > old_term);
    let acquired = epoch_ms(&after.leader.as_ref().expect("leader").acquired_at);
    eprintln!(
        "graceful stop: new leader after {} ms, partitions moved after {} ms (leases 20000 ms)",
        acquired - stopped_at,
        settled_at - stopped_at
    );
    assert!(settled_at - stopped_at < 10_000, "waited for the lease");
    assert!(
        !after.node(&old_leader).expect("listed").alive,
        "a node that left is not alive"
    );
}

async fn a_restarted_node_rejoins_and_gets_partitions_back(db: TestDb) {
    let mut cluster = Cluster::start(&db, |_| {}).await;
    let before = cluster.settled("n1", &["n1", "n2", "n3"]).await;
    let (leader, _) = leader_of(&before);
    let victim = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let others = cluster.others(&victim);
    let others: Vec<&str> = others.iter().map(String::as_str).collect();

    let spec = cluster.node(&victim).spec.clone();
    cluster.node(&victim).kill9();
    cluster.settled(others[0], &others).await;

    let restarted = NodeProcess::start(spec).await;
    let index = cluster
        .nodes
        .iter()
        .position(|n| n.node_id() == victim)
        .expect("slot");
    cluster.nodes[index] = restarted;
    let after = cluster.settled(&leader, &["n1", "n2", "n3"]).await;
    assert_eq!(after.node(&victim).expect("rejoined").partitions.len(), 8);
    let own_view = wait_for(
        SETTLE,
        "the restarted node to act on its partitions",
        || async {
            let s = cluster.nodes[index].cluster().await?;
            (s.this_node.member && s.this_node.acting_partitions == 8).then_some(s)
        },
    )
    .await;
    assert_eq!(own_view.this_node.node_id, victim);
}
