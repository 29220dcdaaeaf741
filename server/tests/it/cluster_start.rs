//! Nodes started together on a fresh database (a Deployment of several replicas): they take
//! turns applying the migrations, each applied once, and all become members under one leader.
//! A migration left partly applied on MySQL (which commits each schema change on its own) by
//! a node that died is finished by the next node that starts. A node whose database does not
//! exist creates it, or says how to when its role may not.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::time::Duration;

use support::db::{Engine, TestDb};
use support::node::{NodeProcess, NodeSpec};

const NODES: usize = 5;

for_engine!(
    postgres,
    Postgres,
    [
        five_nodes_started_at_once_migrate_once_and_elect_one_leader,
        a_node_creates_its_database_when_it_does_not_exist,
        a_role_that_may_not_create_the_database_is_told_how,
        the_schema_version_is_read_from_the_database
    ]
);
for_engine!(
    mysql,
    Mysql,
    [
        five_nodes_started_at_once_migrate_once_and_elect_one_leader,
        a_node_creates_its_database_when_it_does_not_exist,
        an_interrupted_migration_is_finished_by_the_next_start,
        an_interrupted_migration_this_build_does_not_know_says_what_to_do,
        the_schema_version_is_read_from_the_database
    ]
);
for_engine!(
    sqlite,
    Sqlite,
    [
        five_nodes_started_at_once_migrate_once_and_elect_one_leader,
        the_schema_version_is_read_from_the_database
    ]
);

/// The migration files of `engine`, as sqlx numbers them.
fn migration_count(engine: Engine) -> i64 {
    let dir = format!(
        "{}/../migrations/{}",
        env!("CARGO_MANIFEST_DIR"),
        engine.key()
    );
    std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sql"))
        })
        .count() as i64
}

/// `(version, success)` of every recorded migration.
async fn recorded(db: &TestDb) -> Vec<(i64, i64)> {
    let success = match db.engine {
        Engine::Postgres => "CAST(CAST(success AS INT4) AS INT8)",
        Engine::Mysql => "CAST(success AS SIGNED)",
        Engine::Sqlite => "success",
    };
    db.fetch_pairs(
        &format!("SELECT version, {success} FROM _sqlx_migrations ORDER BY version"),
        &[],
    )
    .await
}

async fn five_nodes_started_at_once_migrate_once_and_elect_one_leader(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let specs: Vec<NodeSpec> = (1..=NODES)
        .map(|k| NodeSpec::fast(&format!("n{k}"), &db.url, dir.path()))
        .collect();
    // All processes are spawned before any is waited for: they reach the empty database
    // together.
    let starting: Vec<_> = specs
        .into_iter()
        .map(|spec| tokio::spawn(NodeProcess::start(spec)))
        .collect();
    let mut nodes = Vec::new();
    for start in starting {
        nodes.push(start.await.expect("every node starts and listens"));
    }
    let ids: Vec<String> = nodes.iter().map(|n| n.node_id().to_owned()).collect();
    let live: Vec<&str> = ids.iter().map(String::as_str).collect();
    let snapshot = support::wait_for(Duration::from_secs(30), "five members, one leader", || {
        let node = &nodes[0];
        let live = &live;
        async move {
            let snapshot = node.cluster().await?;
            snapshot.is_settled_on(live).then_some(snapshot)
        }
    })
    .await;
    let leaders: Vec<&str> = snapshot
        .nodes
        .iter()
        .filter(|n| n.leader)
        .map(|n| n.node_id.as_str())
        .collect();
    assert_eq!(leaders.len(), 1, "one leader: {leaders:?}");
    for node in &mut nodes {
        assert!(
            node.is_running(),
            "{} exited:\n{}",
            node.node_id(),
            node.log_text()
        );
        let this = node.cluster().await.unwrap().this_node;
        assert!(this.member, "{} is a member", node.node_id());
    }
    let expected: Vec<(i64, i64)> = (1..=migration_count(db.engine)).map(|v| (v, 1)).collect();
    assert_eq!(
        recorded(&db).await,
        expected,
        "each migration recorded once, applied whole"
    );
    for node in &mut nodes {
        node.terminate().await;
    }
}

/// A node died during migration 5 after its statement ran (or before): the next start
/// finishes it instead of refusing to start.
async fn an_interrupted_migration_is_finished_by_the_next_start(db: TestDb) {
    let store = db.migrated_store().await;
    for undo in ["", "ALTER TABLE attempts DROP COLUMN seen_at_ms;"] {
        db.execute_script(&format!(
            "{undo} UPDATE _sqlx_migrations SET success = FALSE WHERE version = 5;"
        ))
        .await;
        store
            .migrate()
            .await
            .unwrap_or_else(|e| panic!("resumed ({undo:?}): {e}"));
        let expected: Vec<(i64, i64)> = (1..=migration_count(db.engine)).map(|v| (v, 1)).collect();
        assert_eq!(recorded(&db).await, expected, "finished ({undo:?})");
        let columns = db
            .fetch_pairs(
                "SELECT COUNT(*), 0 FROM information_schema.columns \
                 WHERE table_schema = DATABASE() AND table_name = 'attempts' \
                 AND column_name = 'seen_at_ms'",
                &[],
            )
            .await;
        assert_eq!(columns, vec![(1, 0)], "the column is there ({undo:?})");
    }
}

/// What a node with `database.migrate` off checks before it starts: the last migration the
/// database has, none without a schema, against the last this build embeds.
async fn the_schema_version_is_read_from_the_database(db: TestDb) {
    let wanted = migration_count(db.engine);
    let version = db.store().await.schema_version().await.unwrap();
    assert_eq!((version.applied, version.wanted), (None, wanted));
    db.migrate_to(wanted - 1).await;
    let version = db.store().await.schema_version().await.unwrap();
    assert_eq!(version.applied, Some(wanted - 1));
    let version = db.migrated_store().await.schema_version().await.unwrap();
    assert_eq!(version.applied, Some(wanted));
}

/// A partly applied migration whose text this build does not carry is not guessed at: the
/// error names it and says what to do, and nothing else is changed.
async fn an_interrupted_migration_this_build_does_not_know_says_what_to_do(db: TestDb) {
    let store = db.migrated_store().await;
    db.execute_script(
        "UPDATE _sqlx_migrations SET success = FALSE, checksum = x'00' WHERE version = 5;",
    )
    .await;
    let err = store.migrate().await.unwrap_err().to_string();
    assert!(
        err.contains("migration 5 (attempts seen)") && err.contains("partly applied"),
        "{err}"
    );
    assert!(
        err.contains("start the version of Carillon that began it"),
        "{err}"
    );
    assert_eq!(recorded(&db).await.len() as i64, migration_count(db.engine));
}

/// A node pointed at a database that does not exist creates it (its role may), says so in
/// its log, and runs on it.
async fn a_node_creates_its_database_when_it_does_not_exist(db: TestDb) {
    db.drop_database().await;
    let dir = tempfile::tempdir().unwrap();
    let mut node = NodeProcess::start(NodeSpec::fast("first", &db.url, dir.path())).await;
    let (status, jobs) = node.call(reqwest::Method::GET, "/api/v1/jobs", None).await;
    assert_eq!(status, 200, "{jobs}");
    let log = node.log_text();
    assert!(
        log.contains("created the database, which did not exist"),
        "{log}"
    );
    node.terminate().await;
}

/// A role that may not create databases gets one line saying which database is missing and
/// the statement that creates it.
async fn a_role_that_may_not_create_the_database_is_told_how(db: TestDb) {
    db.drop_database().await;
    let role = format!("{}_role", db.name);
    db.admin_execute(&format!("CREATE ROLE {role} LOGIN NOCREATEDB"))
        .await;
    let url = db.url.replacen("postgres@", &format!("{role}@"), 1);
    assert_ne!(url, db.url, "the admin URL names the postgres role");
    let said = support::node::refused_start(&url).await;
    db.admin_execute(&format!("DROP ROLE {role}")).await;
    let line = said
        .lines()
        .find(|l| l.contains("does not exist"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        line.contains(&format!("database \"{}\" does not exist", db.name))
            && line.contains(&format!("CREATE DATABASE \"{}\"", db.name)),
        "{line}"
    );
}
