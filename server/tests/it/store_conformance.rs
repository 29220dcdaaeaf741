//! The storage conformance suite: the same test bodies run against Postgres, MySQL/MariaDB
//! and SQLite, each on a fresh database.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use carillon_server::store::{
    Error, LeaderFence, NodeRegistration, PartitionChange, PartitionRecord, Store,
};
use support::db::TestDb;

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        for_engine!(postgres, Postgres, [$($test),*]);
        behind_pgbouncer!([$($test),*]);
        for_engine!(mysql, Mysql, [$($test),*]);
        for_engine!(sqlite, Sqlite, [$($test),*]);
    };
}

conformance!(
    migrations_can_be_applied_twice,
    the_schema_script_matches_the_migrations,
    cluster_init_creates_the_partitions_once,
    concurrent_cluster_inits_agree,
    the_leader_lease_is_renewed_by_its_holder_and_refused_to_others,
    an_expired_lease_goes_to_the_next_node_with_a_higher_term,
    concurrent_candidates_elect_exactly_one_leader,
    a_deposed_leaders_partition_writes_are_rejected,
    a_leader_whose_lease_expired_cannot_write_even_if_nobody_took_over,
    partition_changes_are_compare_and_set_on_the_epoch,
    a_hand_off_is_completed_only_by_the_owner,
    node_liveness_is_judged_by_the_database_clock,
    re_registering_a_node_releases_what_its_previous_process_held,
    leaving_releases_partitions_and_leadership_at_once,
);

async fn register(store: &dyn Store, node_id: &str, incarnation: &str) {
    store
        .node_register(&NodeRegistration {
            node_id: node_id.into(),
            incarnation: incarnation.into(),
            address: format!("http://{node_id}.invalid:9001"),
            version: "test".into(),
        })
        .await
        .unwrap();
}

async fn partition(store: &dyn Store, id: i64) -> PartitionRecord {
    store.partitions_list().await.unwrap().remove(id as usize)
}

fn fence(node_id: &str, term: i64) -> LeaderFence {
    LeaderFence {
        node_id: node_id.into(),
        term,
    }
}

fn assign(partition_id: i64, expected_epoch: i64, owner: &str) -> PartitionChange {
    PartitionChange::Assign {
        partition_id,
        expected_epoch,
        owner: owner.into(),
    }
}

/// A store with the cluster initialised to 8 partitions.
async fn cluster(db: &TestDb) -> Arc<dyn Store> {
    let store = db.migrated_store().await;
    store.cluster_init(8).await.unwrap();
    store
}

async fn migrations_can_be_applied_twice(db: TestDb) {
    let store = db.migrated_store().await;
    store.migrate().await.unwrap();
    assert!(
        store.now_ms().await.unwrap() > 1_700_000_000_000,
        "epoch milliseconds"
    );
}

async fn the_schema_script_matches_the_migrations(db: TestDb) {
    db.migrated_store().await;
    let by_script = TestDb::create(db.engine).await.expect("second database");
    by_script.execute_script(&db.engine.schema_script()).await;
    let (migrated, scripted) = (
        db.schema_fingerprint().await,
        by_script.schema_fingerprint().await,
    );
    assert!(migrated.len() > 50, "fingerprint too small: {migrated:#?}");
    assert!(migrated.iter().any(|l| l.contains("leader row 1 term 0")));
    let only_migrations: Vec<_> = migrated.iter().filter(|l| !scripted.contains(l)).collect();
    let only_script: Vec<_> = scripted.iter().filter(|l| !migrated.contains(l)).collect();
    assert!(
        only_migrations.is_empty() && only_script.is_empty(),
        "sql/ and migrations/ disagree on {:?}:\nonly in migrations: {only_migrations:#?}\nonly in sql/: {only_script:#?}",
        db.engine
    );
}

async fn cluster_init_creates_the_partitions_once(db: TestDb) {
    let store = db.migrated_store().await;
    let meta = store.cluster_init(16).await.unwrap();
    assert_eq!(meta.partition_count, 16);
    let again = store.cluster_init(32).await.unwrap();
    assert_eq!(again, meta, "the count is fixed at first init");
    let partitions = store.partitions_list().await.unwrap();
    assert_eq!(partitions.len(), 16);
    assert!(
        partitions
            .iter()
            .enumerate()
            .all(|(i, p)| p.partition_id == i as i64 && p.owner_node_id.is_none() && p.epoch == 0)
    );
}

async fn concurrent_cluster_inits_agree(db: TestDb) {
    let store = db.migrated_store().await;
    let inits: Vec<_> = (0..4)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.cluster_init(16 + i).await })
        })
        .collect();
    let mut counts = Vec::new();
    for init in inits {
        counts.push(init.await.unwrap().unwrap().partition_count);
    }
    assert!(counts.windows(2).all(|w| w[0] == w[1]), "{counts:?}");
    assert_eq!(
        store.partitions_list().await.unwrap().len() as i64,
        counts[0]
    );
}

async fn the_leader_lease_is_renewed_by_its_holder_and_refused_to_others(db: TestDb) {
    let store = cluster(&db).await;
    let first = store.leader_try_acquire("a", 60_000).await.unwrap();
    assert_eq!((first.holder(), first.term), (Some("a"), 1));
    let renewed = store.leader_try_acquire("a", 60_000).await.unwrap();
    assert_eq!((renewed.holder(), renewed.term), (Some("a"), 1));
    assert!(renewed.lease_until_ms >= first.lease_until_ms);
    let other = store.leader_try_acquire("b", 60_000).await.unwrap();
    assert_eq!((other.holder(), other.term), (Some("a"), 1));
    assert_eq!(store.leader_get().await.unwrap().holder(), Some("a"));
}

async fn an_expired_lease_goes_to_the_next_node_with_a_higher_term(db: TestDb) {
    let store = cluster(&db).await;
    store.leader_try_acquire("a", 200).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(store.leader_get().await.unwrap().holder(), None);
    let taken = store.leader_try_acquire("b", 60_000).await.unwrap();
    assert_eq!((taken.holder(), taken.term), (Some("b"), 2));
    let refused = store.leader_try_acquire("a", 60_000).await.unwrap();
    assert_eq!((refused.holder(), refused.term), (Some("b"), 2));
}

async fn concurrent_candidates_elect_exactly_one_leader(db: TestDb) {
    let store = cluster(&db).await;
    let candidates: Vec<_> = (0..8)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.leader_try_acquire(&format!("n{i}"), 60_000).await })
        })
        .collect();
    let mut seen = Vec::new();
    for candidate in candidates {
        let record = candidate.await.unwrap().unwrap();
        seen.push((record.holder().map(str::to_owned), record.term));
    }
    let winner = seen[0].clone();
    assert!(winner.0.is_some());
    assert!(seen.iter().all(|s| *s == winner), "{seen:?}");
    assert_eq!(winner.1, 1, "one holder change, one term");
}

async fn a_deposed_leaders_partition_writes_are_rejected(db: TestDb) {
    let store = cluster(&db).await;
    let a = store.leader_try_acquire("a", 200).await.unwrap();
    assert_eq!(
        store
            .partitions_apply(&fence("a", a.term), &[assign(0, 0, "a")])
            .await
            .unwrap(),
        1
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = store.leader_try_acquire("b", 60_000).await.unwrap();
    assert_eq!(b.term, a.term + 1);

    let stale = store
        .partitions_apply(&fence("a", a.term), &[assign(1, 0, "a")])
        .await;
    assert!(
        matches!(stale, Err(Error::Fenced { term }) if term == a.term),
        "{stale:?}"
    );
    assert_eq!(
        partition(&*store, 1).await.owner_node_id,
        None,
        "nothing written"
    );

    // Claiming the new term under the old node's name is refused too.
    let forged = store
        .partitions_apply(&fence("a", b.term), &[assign(1, 0, "a")])
        .await;
    assert!(matches!(forged, Err(Error::Fenced { .. })), "{forged:?}");

    let current = store
        .partitions_apply(&fence("b", b.term), &[assign(1, 0, "b")])
        .await
        .unwrap();
    assert_eq!(current, 1);
    assert_eq!(
        partition(&*store, 1).await.owner_node_id.as_deref(),
        Some("b")
    );
}

async fn a_leader_whose_lease_expired_cannot_write_even_if_nobody_took_over(db: TestDb) {
    let store = cluster(&db).await;
    let a = store.leader_try_acquire("a", 200).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let late = store
        .partitions_apply(&fence("a", a.term), &[assign(0, 0, "a")])
        .await;
    assert!(matches!(late, Err(Error::Fenced { .. })), "{late:?}");
    assert_eq!(partition(&*store, 0).await.epoch, 0);
}

async fn partition_changes_are_compare_and_set_on_the_epoch(db: TestDb) {
    let store = cluster(&db).await;
    let term = store.leader_try_acquire("a", 60_000).await.unwrap().term;
    let f = fence("a", term);
    assert_eq!(
        store
            .partitions_apply(&f, &[assign(2, 0, "a")])
            .await
            .unwrap(),
        1
    );
    let after = partition(&*store, 2).await;
    assert_eq!(
        (after.owner_node_id.as_deref(), after.epoch),
        (Some("a"), 1)
    );

    // A plan made from a stale read changes nothing.
    assert_eq!(
        store
            .partitions_apply(&f, &[assign(2, 0, "b")])
            .await
            .unwrap(),
        0
    );
    assert_eq!(partition(&*store, 2).await, after);
}

async fn a_hand_off_is_completed_only_by_the_owner(db: TestDb) {
    let store = cluster(&db).await;
    let term = store.leader_try_acquire("a", 60_000).await.unwrap().term;
    let f = fence("a", term);
    store
        .partitions_apply(&f, &[assign(3, 0, "a")])
        .await
        .unwrap();
    let request = PartitionChange::RequestHandOff {
        partition_id: 3,
        expected_epoch: 1,
        to: "b".into(),
    };
    assert_eq!(store.partitions_apply(&f, &[request]).await.unwrap(), 1);
    let asked = partition(&*store, 3).await;
    assert_eq!(
        (
            asked.owner_node_id.as_deref(),
            asked.pending_owner_node_id.as_deref(),
            asked.epoch
        ),
        (Some("a"), Some("b"), 1),
        "the owner keeps it until it lets go"
    );
    assert_eq!(
        store.partitions_owned("a").await.unwrap(),
        vec![asked.clone()]
    );

    assert!(
        !store.partition_hand_off("b", &asked).await.unwrap(),
        "not the owner"
    );
    let stale = PartitionRecord {
        epoch: 0,
        ..asked.clone()
    };
    assert!(
        !store.partition_hand_off("a", &stale).await.unwrap(),
        "stale epoch"
    );
    assert!(store.partition_hand_off("a", &asked).await.unwrap());
    let moved = partition(&*store, 3).await;
    assert_eq!(
        (
            moved.owner_node_id.as_deref(),
            moved.pending_owner_node_id,
            moved.epoch
        ),
        (Some("b"), None, 2)
    );
    assert!(
        !store.partition_hand_off("a", &asked).await.unwrap(),
        "only once"
    );
}

async fn node_liveness_is_judged_by_the_database_clock(db: TestDb) {
    let store = cluster(&db).await;
    register(&*store, "a", "i1").await;
    let listed = store.nodes_list().await.unwrap();
    let a = &listed.nodes[0];
    assert!(a.heartbeat_at_ms <= listed.now_ms && a.heartbeat_at_ms > listed.now_ms - 5_000);
    assert!(a.is_alive(listed.now_ms, 1_000));
    assert_eq!(listed.alive_ids(1_000), vec!["a".to_owned()]);

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(store.nodes_list().await.unwrap().alive_ids(200).is_empty());
    store.node_heartbeat("a", "i1").await.unwrap();
    assert_eq!(
        store.nodes_list().await.unwrap().alive_ids(200),
        vec!["a".to_owned()]
    );
}

async fn re_registering_a_node_releases_what_its_previous_process_held(db: TestDb) {
    let store = cluster(&db).await;
    register(&*store, "a", "first").await;
    let term = store.leader_try_acquire("a", 60_000).await.unwrap().term;
    store
        .partitions_apply(&fence("a", term), &[assign(0, 0, "a"), assign(1, 0, "a")])
        .await
        .unwrap();

    register(&*store, "a", "second").await;
    for id in [0, 1] {
        let p = partition(&*store, id).await;
        assert_eq!(
            (p.owner_node_id, p.epoch),
            (None, 2),
            "released with a new epoch"
        );
    }
    assert_eq!(store.leader_get().await.unwrap().holder(), None);
    let old = store.node_heartbeat("a", "first").await;
    assert!(matches!(old, Err(Error::IncarnationLost { .. })), "{old:?}");
    store.node_heartbeat("a", "second").await.unwrap();
    let again = store.leader_try_acquire("a", 60_000).await.unwrap();
    assert_eq!(
        again.term,
        term + 1,
        "the new process leads under a new term"
    );
}

async fn leaving_releases_partitions_and_leadership_at_once(db: TestDb) {
    let store = cluster(&db).await;
    register(&*store, "a", "i1").await;
    register(&*store, "b", "i1").await;
    let term = store.leader_try_acquire("a", 60_000).await.unwrap().term;
    let f = fence("a", term);
    store
        .partitions_apply(&f, &[assign(0, 0, "a"), assign(1, 0, "b")])
        .await
        .unwrap();
    let to_a = PartitionChange::RequestHandOff {
        partition_id: 1,
        expected_epoch: 1,
        to: "a".into(),
    };
    store.partitions_apply(&f, &[to_a]).await.unwrap();

    store.node_leave("a", "i1").await.unwrap();
    let p0 = partition(&*store, 0).await;
    assert_eq!((p0.owner_node_id, p0.epoch), (None, 2));
    let p1 = partition(&*store, 1).await;
    assert_eq!(
        (p1.owner_node_id.as_deref(), p1.pending_owner_node_id),
        (Some("b"), None),
        "no hand-off to a node that left"
    );
    assert_eq!(
        store.leader_get().await.unwrap().holder(),
        None,
        "no lease to wait for"
    );
    let listed = store.nodes_list().await.unwrap();
    assert_eq!(listed.alive_ids(60_000), vec!["b".to_owned()]);
    assert!(
        listed
            .nodes
            .iter()
            .any(|n| n.node_id == "a" && n.left_at_ms.is_some())
    );
    assert!(matches!(
        store.node_heartbeat("a", "i1").await,
        Err(Error::IncarnationLost { .. })
    ));
    assert!(matches!(
        store.node_leave("a", "i1").await,
        Err(Error::IncarnationLost { .. })
    ));
}
