//! A node cut off from its database stops acting as leader and on its partitions before its
//! leases run out in the database, so no other node can ever act alongside it.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use carillon_server::clock::ClusterClock;
use carillon_server::cluster::{ClusterTimings, Coordinator, LocalView};
use carillon_server::store::{
    Backend, ClusterMeta, ClusterStore, Error, LeaderFence, LeaderRecord, NodeList,
    NodeRegistration, PartitionChange, PartitionRecord, SchemaVersion,
};
use support::db::TestDb;
use support::wait_for;
use tokio_util::sync::CancellationToken;

/// A store that can be cut off from its database: every call then fails as a lost connection.
#[derive(Debug)]
struct Severable {
    inner: Arc<dyn ClusterStore>,
    cut: AtomicBool,
}

impl Severable {
    fn check(&self) -> Result<(), Error> {
        if self.cut.load(Ordering::SeqCst) {
            return Err(Error::Database(sqlx::Error::PoolTimedOut));
        }
        Ok(())
    }
}

#[async_trait]
impl ClusterStore for Severable {
    fn backend(&self) -> Backend {
        self.inner.backend()
    }
    async fn migrate(&self) -> Result<(), Error> {
        self.check()?;
        self.inner.migrate().await
    }
    async fn schema_version(&self) -> Result<SchemaVersion, Error> {
        self.check()?;
        self.inner.schema_version().await
    }
    async fn now_ms(&self) -> Result<i64, Error> {
        self.check()?;
        self.inner.now_ms().await
    }
    async fn cluster_init(&self, partition_count: i64) -> Result<ClusterMeta, Error> {
        self.check()?;
        self.inner.cluster_init(partition_count).await
    }
    async fn node_key(&self, name: &str, candidate: &str) -> Result<String, Error> {
        self.check()?;
        self.inner.node_key(name, candidate).await
    }
    async fn node_register(&self, node: &NodeRegistration) -> Result<(), Error> {
        self.check()?;
        self.inner.node_register(node).await
    }
    async fn node_heartbeat(&self, node_id: &str, incarnation: &str) -> Result<(), Error> {
        self.check()?;
        self.inner.node_heartbeat(node_id, incarnation).await
    }
    async fn node_leave(&self, node_id: &str, incarnation: &str) -> Result<(), Error> {
        self.check()?;
        self.inner.node_leave(node_id, incarnation).await
    }
    async fn nodes_list(&self) -> Result<NodeList, Error> {
        self.check()?;
        self.inner.nodes_list().await
    }
    async fn leader_get(&self) -> Result<LeaderRecord, Error> {
        self.check()?;
        self.inner.leader_get().await
    }
    async fn leader_try_acquire(
        &self,
        node_id: &str,
        lease_ms: i64,
    ) -> Result<LeaderRecord, Error> {
        self.check()?;
        self.inner.leader_try_acquire(node_id, lease_ms).await
    }
    async fn partitions_list(&self) -> Result<Vec<PartitionRecord>, Error> {
        self.check()?;
        self.inner.partitions_list().await
    }
    async fn partitions_owned(&self, node_id: &str) -> Result<Vec<PartitionRecord>, Error> {
        self.check()?;
        self.inner.partitions_owned(node_id).await
    }
    async fn partitions_apply(
        &self,
        fence: &LeaderFence,
        changes: &[PartitionChange],
    ) -> Result<u64, Error> {
        self.check()?;
        self.inner.partitions_apply(fence, changes).await
    }
    async fn partition_hand_off(
        &self,
        node_id: &str,
        partition: &PartitionRecord,
    ) -> Result<bool, Error> {
        self.check()?;
        self.inner.partition_hand_off(node_id, partition).await
    }
}

for_engine!(
    postgres,
    Postgres,
    [a_node_cut_off_from_its_database_stops_acting_in_time]
);
for_engine!(
    mysql,
    Mysql,
    [a_node_cut_off_from_its_database_stops_acting_in_time]
);
for_engine!(
    sqlite,
    Sqlite,
    [a_node_cut_off_from_its_database_stops_acting_in_time]
);

async fn a_node_cut_off_from_its_database_stops_acting_in_time(db: TestDb) {
    let direct = db.migrated_store().await;
    direct.cluster_init(8).await.unwrap();
    let severable = Arc::new(Severable {
        inner: Arc::clone(&direct) as Arc<dyn ClusterStore>,
        cut: AtomicBool::new(false),
    });
    let node = NodeRegistration {
        node_id: "lonely".into(),
        incarnation: "i1".into(),
        address: "http://127.0.0.1:1".into(),
        version: "test".into(),
    };
    direct.node_register(&node).await.unwrap();
    let timings = ClusterTimings {
        heartbeat: Duration::from_millis(100),
        // Long enough that the safety margin (a fifth of a lease) dwarfs how late a loaded
        // machine may observe the change.
        node_lease: Duration::from_millis(3_000),
        leader_lease: Duration::from_millis(2_500),
    };
    let view = Arc::new(LocalView::new(node.node_id.clone()));
    let coordinator = Coordinator::new(
        severable.clone(),
        Arc::clone(&view),
        Arc::new(ClusterClock::new()),
        node.incarnation.clone(),
        timings,
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn(coordinator.run(stop.clone()));

    wait_for(
        Duration::from_secs(10),
        "the node to lead and own everything",
        || async {
            (view.leader_term().is_some() && view.owned_partitions().len() == 8).then_some(())
        },
    )
    .await;

    severable.cut.store(true, Ordering::SeqCst);
    let lease = direct.leader_get().await.unwrap();
    let heartbeat = direct.nodes_list().await.unwrap().nodes[0].heartbeat_at_ms;
    let (lease_ends, membership_ends) = (
        lease.lease_until_ms,
        heartbeat + timings.node_lease.as_millis() as i64,
    );

    wait_for(
        Duration::from_secs(5),
        "the node to stop leading",
        || async { view.leader_term().is_none().then_some(()) },
    )
    .await;
    let stopped_leading = direct.now_ms().await.unwrap();
    wait_for(
        Duration::from_secs(5),
        "the node to stop acting on partitions",
        || async { view.owned_partitions().is_empty().then_some(()) },
    )
    .await;
    let stopped_acting = direct.now_ms().await.unwrap();
    eprintln!(
        "{:?}: stopped leading {} ms before the lease ended, stopped acting {} ms before the \
         membership ended",
        db.engine,
        lease_ends - stopped_leading,
        membership_ends - stopped_acting
    );
    assert!(stopped_leading < lease_ends, "led past its lease");
    assert!(
        stopped_acting < membership_ends,
        "acted past its membership"
    );
    assert!(!view.is_member());

    // Back in touch, the node resumes without a restart. (Under the same term if its lease had
    // not yet run out in the database: nobody else can have led in between.)
    severable.cut.store(false, Ordering::SeqCst);
    let term = wait_for(
        Duration::from_secs(10),
        "the node to lead again",
        || async {
            view.leader_term()
                .filter(|_| view.owned_partitions().len() == 8)
        },
    )
    .await;
    assert!(term >= lease.term);
    stop.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(
        direct.leader_get().await.unwrap().holder(),
        None,
        "left cleanly"
    );
}
