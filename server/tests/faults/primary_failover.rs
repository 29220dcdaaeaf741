//! The PostgreSQL primary dies (`kill -9` of every process of it) under load and its streaming
//! standby is promoted (`pg_ctl promote`, what Patroni does), the nodes reaching whichever is
//! primary through HAProxy. With synchronous replication nothing committed is lost: every
//! instant runs exactly once. With asynchronous replication a lagging standby loses what the
//! primary committed last; the scenario makes the standby lag (its WAL receiver stopped for
//! cut off for two seconds before the primary dies) and counts what was lost and what ran
//! twice.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{Cluster, Database, firing_again, instants, one_at_a_time};
use crate::invariants::{Verdict, each_at, max_lateness_ms, runs, runs_succeeded_twice, settle};
use crate::support::db::Engine;
use crate::support::haproxy::Haproxy;
use crate::support::node::{NodeProcess, epoch_ms};
use crate::support::private_server::PrivateServer;
use crate::support::proxy::TcpProxy;

/// What a failover did, from the database and from the executor.
struct Failover {
    scenario: String,
    verdict: Verdict,
    /// Runs that succeeded twice, from the database.
    succeeded_twice: usize,
    /// `(job, instant)`s the executor ran under more than one run id: fired twice.
    fired_twice: Vec<(i64, i64)>,
    /// `(job, instant)`s the executor ran whose run the new primary does not have.
    lost_after_running: Vec<(i64, i64)>,
    /// `carillon_deliveries_held_for_standbys_seconds` of a node while the standby lagged.
    held_for_standbys_s: Option<f64>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs haproxy (Debian's package; .ci/run installs it)"]
async fn postgres_a_synchronous_standby_promoted_loses_and_repeats_nothing() {
    let failover = primary_dies(true, true).await;
    failover
        .verdict
        .assert_exactly_once(&failover.scenario, true);
    assert_eq!(failover.succeeded_twice, 0, "{}", failover.scenario);
    assert!(
        failover.fired_twice.is_empty() && failover.lost_after_running.is_empty(),
        "{}: fired twice {:?}, ran but lost {:?}",
        failover.scenario,
        failover.fired_twice,
        failover.lost_after_running
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs haproxy (Debian's package; .ci/run installs it)"]
async fn postgres_a_lagging_asynchronous_standby_promoted_never_fires_an_instant_twice() {
    let failover = primary_dies(false, true).await;
    assert!(
        failover.fired_twice.is_empty() && failover.lost_after_running.is_empty(),
        "{}: instants fired twice {:?}, ran but lost {:?}",
        failover.scenario,
        failover.fired_twice,
        failover.lost_after_running
    );
    failover
        .verdict
        .assert_exactly_once(&failover.scenario, true);
    let held = failover.held_for_standbys_s.unwrap();
    assert!(
        held > 0.0,
        "{}: the metric did not show deliveries held for the lagging standby ({held} s)",
        failover.scenario
    );
}

/// What `database.wait_for_standbys` prevents: without it, the runs delivered while the
/// standby lagged are lost with the primary, and their instants are fired again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs haproxy (Debian's package; .ci/run installs it)"]
async fn postgres_without_waiting_for_standbys_a_lagging_standby_promoted_fires_instants_twice() {
    let failover = primary_dies(false, false).await;
    assert!(
        !failover.fired_twice.is_empty() && !failover.lost_after_running.is_empty(),
        "{}: nothing fired twice: the scenario did not make the standby lag",
        failover.scenario
    );
}

/// `carillon_deliveries_held_for_standbys_seconds` as `node` reports it now.
async fn held_for_standbys(node: &NodeProcess) -> f64 {
    let text = node.metrics().await;
    text.lines()
        .find_map(|line| line.strip_prefix("carillon_deliveries_held_for_standbys_seconds "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no carillon_deliveries_held_for_standbys_seconds in:\n{text}"))
}

async fn primary_dies(synchronous: bool, wait_for_standbys: bool) -> Failover {
    let _turn = one_at_a_time().await;
    let scenario = format!(
        "primary killed, {} standby promoted behind HAProxy{} (Postgres)",
        if synchronous {
            "synchronous"
        } else {
            "lagging asynchronous"
        },
        if wait_for_standbys {
            ""
        } else {
            ", nodes not waiting for standbys"
        }
    );
    let mut primary = PrivateServer::start(Engine::Postgres)
        .await
        .expect("PostgreSQL is not left out");
    // The standby streams through a link the scenario can cut.
    let link = TcpProxy::start(primary.addr()).await;
    let standby = primary.start_replica(synchronous, link.port).await;
    let haproxy = Haproxy::start(primary.addr(), standby.addr()).await;
    let mut db = Database {
        engine: Engine::Postgres,
        node_url: haproxy.url_through(&primary.url()),
        test_url: primary.url(),
    };
    let mut cluster = Cluster::start(&db, 2, |spec| {
        spec.extra_env
            .push(("CARILLON_WAIT_FOR_STANDBYS", wait_for_standbys.to_string()));
    })
    .await;
    let executor = cluster.executor(0, "py-1", &["--capacity", "64"]);
    let (jobs, from) = cluster.ticking(0, 40).await;
    db.sleep_until(from + 2_000).await;

    let mut held_for_standbys_s = None;
    if !synchronous {
        // The standby falls behind: its link to the primary is cut for the last two seconds.
        link.cut();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        held_for_standbys_s = Some(held_for_standbys(&cluster.nodes[0]).await);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let killed_at = db.now_ms().await;
    primary.kill9();
    // The failover manager's decision time, shortened.
    tokio::time::sleep(Duration::from_secs(1)).await;
    standby.promote().await;
    db.test_url = standby.url();
    cluster.db.test_url = standby.url();
    let promoted_at = db.now_ms().await;

    let recovered_ms = firing_again(&db, &jobs, promoted_at).await - promoted_at;
    cluster.settled(0, &["n1", "n2"]).await;

    let to = (db.now_ms().await / 1_000 + 2) * 1_000;
    settle(&db, &jobs, from, to, Duration::from_secs(60)).await;
    let runs = runs(&db, &jobs, from, to).await;
    let expected = each_at(&jobs, &instants(from, to, 1_000));
    let verdict = Verdict::of(&runs, &expected);
    let succeeded_twice = runs_succeeded_twice(&db, &jobs, from, to).await.len();

    // The executor's side: which run ids it ran for each instant, and how often each run. A
    // run is known by its id with its job and instant: a promoted standby that lagged hands
    // out again the ids the old primary gave the runs it lost, to other instants.
    let mut ran: BTreeMap<(i64, i64), Vec<i64>> = BTreeMap::new();
    let mut attempts_of: BTreeMap<(i64, i64, i64), usize> = BTreeMap::new();
    for entry in executor.log().await {
        let field = |name: &str| entry.get(name).and_then(Value::as_i64);
        let at = entry
            .get("scheduled_at")
            .and_then(Value::as_str)
            .map(|at| epoch_ms(&Some(at.to_owned())));
        let (Some(job), Some(at), Some(run)) = (field("job_id"), at, field("run_id")) else {
            continue;
        };
        *attempts_of.entry((run, job, at)).or_default() += 1;
        if jobs.contains(&job) && (from..=to).contains(&at) {
            let runs = ran.entry((job, at)).or_default();
            if !runs.contains(&run) {
                runs.push(run);
            }
        }
    }
    assert!(
        ran.len() >= runs.len() / 2,
        "{scenario}: the executor's log names {} instants of {} runs",
        ran.len(),
        runs.len()
    );
    let fired_twice: Vec<(i64, i64)> = ran
        .iter()
        .filter(|(_, runs)| runs.len() > 1)
        .map(|(key, _)| *key)
        .collect();
    let stored: std::collections::BTreeSet<(i64, i64, i64)> = runs
        .iter()
        .map(|r| (r.run_id, r.job_id, r.scheduled_at_ms))
        .collect();
    let lost_after_running: Vec<(i64, i64)> = ran
        .iter()
        .filter(|((job, at), runs)| runs.iter().any(|run| !stored.contains(&(*run, *job, *at))))
        .map(|(key, _)| *key)
        .collect();
    // A run delivered again: its outcome was stored on the old primary only, so the new one
    // saw it in flight, and failed it over to an executor again.
    let delivered_again = attempts_of.values().filter(|n| **n > 1).count();
    figures!(
        "{scenario}: down {} ms until promoted, every job firing again {recovered_ms} ms \
         after; max lateness {} ms; {}; attempts succeeded twice {succeeded_twice}; instants \
         the executor ran twice {}; ran but lost by the failover {}; runs delivered again \
         {delivered_again}; deliveries held for the standby {} s (1.5 s \
         into its lag)",
        promoted_at - killed_at,
        max_lateness_ms(&runs),
        verdict.figures(),
        fired_twice.len(),
        lost_after_running.len(),
        held_for_standbys_s.map_or("-".to_owned(), |held| format!("{held:.2}"))
    );
    Failover {
        held_for_standbys_s,
        scenario,
        verdict,
        succeeded_twice,
        fired_twice,
        lost_after_running,
    }
}
