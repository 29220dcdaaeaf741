//! Networks that fail, not processes: every node, the executor and the database on a test host
//! of their own (`support::netns`), and the links between them cut with packets dropped
//! silently, as a switch or a firewall loses them, rather than refused at once as on
//! loopback. Each scenario runs under load (30 jobs firing every second) and checks every
//! instant of its window: exactly one run, none missed, none left running, no run done twice.
//!
//! - A follower cut from the database (not from its executor) stops dispatching within its
//!   lease, its partitions move, and it rejoins when healed.
//! - A node cut from its executor (not from the database): its attempts, never sent, wait and
//!   go once healed, each run handed to the executor once.
//! - An executor's answers lost (the node sent, the executor ran, its answer never came), for
//!   each delivery guarantee: `at_least_once` delivers again (the handler may run twice),
//!   `at_most_once` ends the run failed, never delivered twice, and `exactly_once_effect`
//!   delivers the same work again, answered from the executor's record, the handler run once.
//! - The same when the executor's results arrive as far as their headers and the connection
//!   then goes silent: an answer lost, never a refusal that fails the attempt.
//! - The database link of every node losing 5 % of its packets, with 200 ms more on each
//!   round trip (through a proxy of the tests: this kernel has no netem), for 20 s
//!   here and a minute with `CARILLON_FAULTS_FULL=1`: later, never wrong.
//! - The leader cut from everything: a new term rules within the failover bound; healed, the
//!   old leader comes back as a follower under the new term.
//! - A node's open database connections made half-open (their packets dropped, new ones going
//!   through) while one of its statements waits for an answer: the statement is given up at
//!   its deadline, not after the kernel's TCP timeout, and the node goes on on fresh
//!   connections.
//! - The three nodes split 2 / 1 (the lone one cut from the database and the other nodes, the
//!   leader among those left alone in turn) and healed, again and again: 40 s here, five
//!   with `CARILLON_FAULTS_FULL=1`.
//!
//! Needs root, network namespaces and `iptables` (`.ci/run` installs it): ignored by a plain
//! `cargo test`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use crate::harness::{Cluster, Database, every_second, id_list, instants, one_at_a_time};
use crate::invariants::{
    RunRow, Verdict, each_at, max_lateness_ms, runs, runs_succeeded_twice, settle,
};
use crate::support::db::Engine;
use crate::support::delay_proxy::DelayProxy;
use crate::support::executor::{Executor, wait_registered};
use crate::support::netns::{NetHost, TestNet, Way};
use crate::support::node::{NodeSpec, epoch_ms};
use crate::support::private_server::PrivateServer;
use crate::support::wait_for;

mod degraded;
use degraded::{
    a_lossy_slow_database_link_makes_fires_later_never_wrong,
    a_statement_on_a_half_open_connection_is_given_up_at_its_deadline,
    answers_cut_after_their_headers_are_answers_lost_not_refusals,
    answers_lost_on_the_way_back_are_handled_per_delivery_guarantee,
};

const NEEDS: &str = "needs root, network namespaces and iptables";

/// Each scenario on PostgreSQL and on MariaDB, as `network_faults::<engine>::<scenario>`.
macro_rules! on_each_engine {
    ($($scenario:ident),+ $(,)?) => {
        on_each_engine!(@engine postgres, Postgres, $($scenario),+);
        on_each_engine!(@engine mysql, Mysql, $($scenario),+);
    };
    (@engine $module:ident, $engine:ident, $($scenario:ident),+) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs root, network namespaces and iptables (Debian's package; .ci/run installs it)"]
                async fn $scenario() {
                    super::$scenario(crate::support::db::Engine::$engine).await;
                }
            )+
        }
    };
}

on_each_engine!(
    a_follower_cut_from_the_database_fences_itself_and_rejoins,
    a_node_cut_from_its_executor_delivers_each_run_once_when_healed,
    answers_lost_on_the_way_back_are_handled_per_delivery_guarantee,
    answers_cut_after_their_headers_are_answers_lost_not_refusals,
    a_lossy_slow_database_link_makes_fires_later_never_wrong,
    a_leader_cut_from_everything_yields_to_the_new_one,
    a_statement_on_a_half_open_connection_is_given_up_at_its_deadline,
    nodes_split_two_to_one_and_healed_again_and_again_fire_each_instant_once,
);

/// How long the cut lasts: many node leases (1 s), so the partitions surely move.
const CUT: Duration = Duration::from_secs(8);

/// How long each 2 / 1 split lasts: several node leases (1 s), so the lone node's partitions
/// move every time.
const SPLIT: Duration = Duration::from_secs(4);

/// After the cut, how long the cut node may still send what it held: its node lease (1 s)
/// and a heartbeat's margin.
const FENCE_BOUND_MS: i64 = 1_500;

/// How late the cut follower's instants may fire on their new owners: its lease (1 s), the
/// server ending the transaction it may have left open with its locks (the statement limit,
/// 2 s), and the claims that follow.
const TAKEOVER_BOUND_MS: i64 = 10_000;

/// Three nodes and the database, each on a host of its own, and a host for an executor.
struct NetScene {
    cluster: Cluster,
    /// Between the nodes and the database, when the scenario slows that link.
    proxy: Option<DelayProxy>,
    server: PrivateServer,
    db_host: NetHost,
    node_hosts: Vec<NetHost>,
    executor_host: NetHost,
    // Dropped last (fields drop in order): the processes on its hosts go first.
    net: TestNet,
}

impl NetScene {
    async fn start(engine: Engine) -> NetScene {
        Self::start_tuned(engine, false, |_| {}).await
    }

    /// With `proxied`, the nodes reach the database through a [`DelayProxy`] in the test
    /// process (its link from each node is the node's link to the gateway).
    async fn start_tuned(engine: Engine, proxied: bool, tune: impl Fn(&mut NodeSpec)) -> NetScene {
        let mut net = TestNet::new();
        let db_host = net.host("db");
        let node_hosts: Vec<NetHost> = (1..=3).map(|i| net.host(&format!("n{i}"))).collect();
        let executor_host = net.host("e1");
        let server = PrivateServer::start_on(engine, &db_host)
            .await
            .unwrap_or_else(|| panic!("{NEEDS}, and the {engine:?} backend"));
        let mut db = Database::direct(engine, &server.url());
        let proxy = if proxied {
            let target = SocketAddr::from((db_host.ip, server.port));
            let proxy = DelayProxy::start(net.gateway().into(), target).await;
            db.node_url = proxy.url_through(&server.url());
            Some(proxy)
        } else {
            None
        };
        let cluster = Cluster::start(&db, 3, |spec| {
            spec.host = node_hosts.iter().find(|h| h.name == spec.node_id).cloned();
            tune(spec);
        })
        .await;
        NetScene {
            cluster,
            proxy,
            server,
            db_host,
            node_hosts,
            executor_host,
            net,
        }
    }

    /// An executor of app `py` on the executor's host, registered with node `via`.
    async fn executor(&self, via: usize) -> Executor {
        self.executor_with(via, &[]).await
    }

    /// The same, with more of its flags.
    async fn executor_with(&self, via: usize, extra: &[&str]) -> Executor {
        let executor = Executor::start_on(
            &self.executor_host,
            &self.cluster.nodes[via],
            "py",
            "e1",
            extra,
        );
        wait_registered(&self.cluster.nodes[via], "e1").await;
        executor
    }

    fn db(&self) -> &Database {
        &self.cluster.db
    }
}

/// The node `cluster` has led by, and a node other than it.
async fn leader_and_follower(cluster: &Cluster) -> (usize, usize) {
    let leader = Cluster::index(&cluster.leader().await);
    (leader, (leader + 1) % cluster.nodes.len())
}

/// The runs of `jobs` the executor was handed more than once (by run id), and how many runs
/// it was handed in all.
async fn handed_twice(executor: &Executor, jobs: &[i64]) -> (Vec<i64>, usize) {
    let mut handed: BTreeMap<i64, usize> = BTreeMap::new();
    for entry in executor.log().await {
        if jobs.contains(&entry["job_id"].as_i64().unwrap_or(0))
            && let Some(run) = entry["run_id"].as_i64()
        {
            *handed.entry(run).or_default() += 1;
        }
    }
    let twice = handed
        .iter()
        .filter(|(_, count)| **count > 1)
        .map(|(run, _)| *run)
        .collect();
    (twice, handed.len())
}

/// A scenario's window, from `from` to two seconds past now, once settled: its runs, what
/// they hold against every instant of every job, and the runs done twice.
struct Window {
    runs: Vec<RunRow>,
    verdict: Verdict,
    twice: Vec<i64>,
}

async fn judged(db: &Database, jobs: &[i64], from: i64) -> Window {
    let to = (db.now_ms().await / 1_000 + 2) * 1_000;
    settle(db, jobs, from, to, Duration::from_secs(60)).await;
    let runs = runs(db, jobs, from, to).await;
    let verdict = Verdict::of(&runs, &each_at(jobs, &instants(from, to, 1_000)));
    let twice = runs_succeeded_twice(db, jobs, from, to).await;
    Window {
        runs,
        verdict,
        twice,
    }
}

/// The dispatches the executor received from the node at `url`, by when it received them.
async fn received_from(executor: &Executor, url: &str) -> Vec<i64> {
    executor
        .log()
        .await
        .iter()
        .filter(|entry| entry["report_to"][0].as_str() == Some(url))
        .filter_map(|entry| entry["received_ms"].as_i64())
        .collect()
}

async fn a_follower_cut_from_the_database_fences_itself_and_rejoins(engine: Engine) {
    let _turn = one_at_a_time().await;
    let scenario = format!("follower cut from the database ({engine:?})");
    let scene = NetScene::start(engine).await;
    let (l, f) = leader_and_follower(&scene.cluster).await;
    // Registered with the leader: the follower is cut from the database only.
    let executor = scene.executor(l).await;
    let follower = scene.cluster.nodes[f].node_id().to_owned();
    let follower_url = scene.cluster.nodes[f].url("");
    let follower_url = follower_url.trim_end_matches('/');
    let db = scene.db().clone();
    let (jobs, from) = scene.cluster.ticking(l, 30).await;
    db.sleep_until(from + 2_000).await;
    let held = scene.cluster.partitions_of(&follower).await;
    assert!(!held.is_empty(), "{scenario}: the follower owns partitions");

    // The follower's packets to and from the database are dropped; its executor link stays.
    let cut_at = db.now_ms().await;
    scene
        .net
        .cut(&scene.node_hosts[f], &scene.db_host, Way::Both);
    let moved_at = wait_for(
        Duration::from_secs(30),
        "the cut follower's partitions to move",
        || async {
            let still: Vec<i64> = scene.cluster.partitions_of(&follower).await;
            if still.is_empty() {
                Some(db.now_ms().await)
            } else {
                None
            }
        },
    )
    .await;
    tokio::time::sleep(CUT).await;
    let last_sent = received_from(&executor, follower_url)
        .await
        .into_iter()
        .max()
        .unwrap_or(0);

    // Healed, it rejoins and takes partitions again.
    let healed_at = db.now_ms().await;
    scene.net.heal(&scene.node_hosts[f]);
    let ids = scene.cluster.ids();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let rejoined = wait_for(
        Duration::from_secs(60),
        "the healed follower to own partitions again",
        || async {
            let snapshot = scene.cluster.nodes[l].cluster().await?;
            let owns = snapshot
                .node(&follower)
                .is_some_and(|n| n.alive && !n.partitions.is_empty());
            if owns && snapshot.is_settled_on(&ids) {
                Some(db.now_ms().await)
            } else {
                None
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let Window {
        runs,
        verdict,
        twice,
    } = judged(&db, &jobs, from).await;
    let late = max_lateness_ms(&runs);
    let mut by_node: BTreeMap<&str, usize> = BTreeMap::new();
    for run in runs
        .iter()
        .filter(|r| r.scheduled_at_ms > cut_at + FENCE_BOUND_MS && r.scheduled_at_ms < healed_at)
    {
        *by_node.entry(run.node_id.as_str()).or_default() += 1;
    }
    let fenced_after = last_sent - cut_at;
    figures!(
        "{scenario}: {} partitions moved {} ms after the cut; the follower's last dispatch \
         {fenced_after} ms after it; runs of the cut by node {by_node:?}; rejoined {} ms after \
         the heal; max lateness {late} ms; {}; attempts succeeded twice {}",
        held.len(),
        moved_at - cut_at,
        rejoined - healed_at,
        verdict.figures(),
        twice.len()
    );
    verdict.assert_exactly_once(&scenario, true);
    assert!(twice.is_empty(), "{scenario}: runs done twice: {twice:?}");
    assert!(
        last_sent > 0,
        "{scenario}: the executor names no dispatch of the follower's at all"
    );
    assert!(
        fenced_after <= FENCE_BOUND_MS,
        "{scenario}: the cut follower dispatched {fenced_after} ms after the cut"
    );
    assert!(
        late <= TAKEOVER_BOUND_MS,
        "{scenario}: an instant fired {late} ms late"
    );
    assert!(
        !by_node.contains_key(follower.as_str()),
        "{scenario}: the cut follower created runs while cut: {by_node:?}"
    );
}

async fn a_node_cut_from_its_executor_delivers_each_run_once_when_healed(engine: Engine) {
    let _turn = one_at_a_time().await;
    let scenario = format!("node cut from its executor ({engine:?})");
    let scene = NetScene::start(engine).await;
    let (l, f) = leader_and_follower(&scene.cluster).await;
    let executor = scene.executor(l).await;
    let follower = scene.cluster.nodes[f].node_id().to_owned();
    let db = scene.db().clone();
    let (jobs, from) = scene.cluster.ticking(l, 30).await;
    db.sleep_until(from + 2_000).await;
    let held = scene.cluster.partitions_of(&follower).await;

    // The follower reaches the database, and the executor the other nodes, but the follower
    // and the executor do not reach each other: its attempts wait (nothing was sent, so no
    // guarantee is at stake) and go once the link is back.
    let cut_at = db.now_ms().await;
    scene
        .net
        .cut(&scene.node_hosts[f], &scene.executor_host, Way::Both);
    // The rules go in one process after another: a request the executor received before the
    // last of them was in force may have lost only its answer.
    let cut_in_force = db.now_ms().await;
    tokio::time::sleep(CUT).await;
    let healed_at = db.now_ms().await;
    scene.net.heal(&scene.node_hosts[f]);
    tokio::time::sleep(Duration::from_secs(3)).await;

    let Window {
        runs,
        verdict,
        twice,
    } = judged(&db, &jobs, from).await;
    let (handed_twice, handed) = handed_twice(&executor, &jobs).await;
    let log = executor.log().await;
    let cut_runs: Vec<_> = runs
        .iter()
        .filter(|r| r.scheduled_at_ms > cut_at && r.scheduled_at_ms < healed_at)
        .collect();
    let waited = cut_runs.iter().filter(|r| r.node_id == follower).count();
    let late = max_lateness_ms(&runs);
    // A dispatch the follower sent and heard nothing of (in flight when the link went, or
    // written to a connection the cut had silenced) ends `lost`: no answer came, or the
    // executor, done with it, heartbeats without listing it. `at_least_once` delivers it
    // again, as the guarantee allows. One that found the link gone before anything was sent
    // waits, keeps its attempt, and is delivered once.
    let with_a_lost_attempt: BTreeSet<i64> = db
        .rows(
            &format!(
                "SELECT DISTINCT a.run_id FROM attempts a JOIN runs r ON r.run_id = a.run_id \
                 WHERE r.job_id IN ({}) AND r.scheduled_at_ms >= ? AND a.state = 'lost'",
                id_list(&jobs)
            ),
            &[from],
        )
        .await
        .into_iter()
        .map(|(run,): (i64,)| run)
        .collect();
    figures!(
        "{scenario}: the follower held {} partitions; of the {} runs of the cut its {waited} \
         waited for the link; max lateness {late} ms; {}; attempts succeeded twice {}; runs \
         handed to the executor {handed}, twice {} (runs with an attempt lost {}; the cut's \
         rules were in force {} ms after it began)",
        held.len(),
        cut_runs.len(),
        verdict.figures(),
        twice.len(),
        handed_twice.len(),
        with_a_lost_attempt.len(),
        cut_in_force - cut_at
    );
    let received = |run: i64| -> Vec<i64> {
        let log = log.iter().filter(|e| e["run_id"].as_i64() == Some(run));
        let mut at: Vec<i64> = log.filter_map(|e| e["received_ms"].as_i64()).collect();
        at.sort_unstable();
        at.iter().map(|ms| ms - cut_at).collect()
    };
    // Nothing the follower sends crosses while the link is cut: a run the executor first
    // received before the heal was on its way before the cut, whatever its attempts say.
    let waited_twice: Vec<(i64, Vec<i64>)> = handed_twice
        .iter()
        .filter(|run| !with_a_lost_attempt.contains(run))
        .map(|run| (*run, received(*run)))
        .filter(|(_, at)| at.first().is_some_and(|first| *first >= healed_at - cut_at))
        .collect();
    verdict.assert_exactly_once(&scenario, true);
    assert!(twice.is_empty(), "{scenario}: runs done twice: {twice:?}");
    assert!(
        waited_twice.is_empty(),
        "{scenario}: runs sent first after the heal and handed to the executor twice though \
         no attempt of theirs was lost (run, receipts in ms from the cut; rules in force at {}, \
         healed at {}): {waited_twice:?}",
        cut_in_force - cut_at,
        healed_at - cut_at
    );
    assert!(
        waited > 0,
        "{scenario}: the cut follower fired no run to wait"
    );
}

async fn a_leader_cut_from_everything_yields_to_the_new_one(engine: Engine) {
    let _turn = one_at_a_time().await;
    let scenario = format!("leader cut from everything ({engine:?})");
    let scene = NetScene::start(engine).await;
    let (l, steady) = leader_and_follower(&scene.cluster).await;
    // Registered with a follower, which keeps it known to the cluster.
    let _executor = scene.executor(steady).await;
    let old_leader = scene.cluster.nodes[l].node_id().to_owned();
    let old_term = scene.cluster.settled(steady, &["n1", "n2", "n3"]).await;
    let old_term = old_term.leader.unwrap().term;
    let db = scene.db().clone();
    let (jobs, from) = scene.cluster.ticking(steady, 30).await;
    db.sleep_until(from + 2_000).await;

    // The leader reaches nothing: not the database, the other nodes, the executor, nor the test.
    let cut_at = db.now_ms().await;
    scene.net.isolate(&scene.node_hosts[l]);
    let others: Vec<String> = scene
        .cluster
        .ids()
        .into_iter()
        .filter(|id| *id != old_leader)
        .collect();
    let others: Vec<&str> = others.iter().map(String::as_str).collect();
    let settled = scene.cluster.settled(steady, &others).await;
    let new_leader = settled.leader.unwrap();
    let failover_ms = epoch_ms(&new_leader.acquired_at) - cut_at;
    tokio::time::sleep(CUT).await;

    // Healed while the new leader rules: the old one comes back as a follower, and its old
    // term's writes are refused.
    let healed_at = db.now_ms().await;
    scene.net.heal(&scene.node_hosts[l]);
    let ids = scene.cluster.ids();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let rejoined = wait_for(
        Duration::from_secs(60),
        "the old leader to rejoin as a follower",
        || async {
            let snapshot = scene.cluster.nodes[steady].cluster().await?;
            let owns = snapshot
                .node(&old_leader)
                .is_some_and(|n| n.alive && !n.leader && !n.partitions.is_empty());
            if owns && snapshot.is_settled_on(&ids) {
                Some((db.now_ms().await, snapshot.leader?))
            } else {
                None
            }
        },
    )
    .await;
    let (rejoined_at, ruling) = rejoined;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let Window {
        runs,
        verdict,
        twice,
    } = judged(&db, &jobs, from).await;
    let late = max_lateness_ms(&runs);
    figures!(
        "{scenario}: term {old_term} of {old_leader} followed by term {} of {} {failover_ms} ms \
         after the cut; the old leader back as a follower {} ms after the heal; max lateness \
         {late} ms; {}; attempts succeeded twice {}",
        new_leader.term,
        new_leader.node_id,
        rejoined_at - healed_at,
        verdict.figures(),
        twice.len()
    );
    assert!(new_leader.term > old_term, "{scenario}: a new term");
    assert_eq!(
        (ruling.node_id.as_str(), ruling.term),
        (new_leader.node_id.as_str(), new_leader.term),
        "{scenario}: the new leader keeps ruling after the heal"
    );
    verdict.assert_exactly_once(&scenario, true);
    assert!(twice.is_empty(), "{scenario}: runs done twice: {twice:?}");
    assert!(
        late <= TAKEOVER_BOUND_MS,
        "{scenario}: an instant fired {late} ms late"
    );
}

/// How long the repeated 2 / 1 split goes on: a sample in a plain run, the five minutes
/// with `CARILLON_FAULTS_FULL=1`.
fn splitting_for() -> Duration {
    if std::env::var("CARILLON_FAULTS_FULL").is_ok_and(|v| v == "1") {
        Duration::from_secs(300)
    } else {
        Duration::from_secs(40)
    }
}

async fn nodes_split_two_to_one_and_healed_again_and_again_fire_each_instant_once(engine: Engine) {
    let _turn = one_at_a_time().await;
    let scenario = format!("2 / 1 splits, healed again and again ({engine:?})");
    // The executor heartbeats through one node, which is left alone in its turn too: a lease
    // longer than a split keeps it a member meanwhile.
    let scene = NetScene::start_tuned(engine, false, |spec| {
        spec.extra_env
            .push(("CARILLON_EXECUTOR_LEASE_MS", "30000".to_owned()));
    })
    .await;
    let (l, _) = leader_and_follower(&scene.cluster).await;
    let _executor = scene.executor(l).await;
    let db = scene.db().clone();
    let (jobs, from) = scene.cluster.ticking(l, 30).await;
    db.sleep_until(from + 2_000).await;

    let count = scene.cluster.nodes.len();
    let ids = scene.cluster.ids();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let until = tokio::time::Instant::now() + splitting_for();
    let mut rounds = 0;
    let mut alone_led = 0;
    let mut rejoin_ms: Vec<i64> = Vec::new();
    while tokio::time::Instant::now() < until {
        // The leader alone every other round, a follower (each in turn) between.
        let leader = Cluster::index(&scene.cluster.leader().await);
        let lone = if rounds % 2 == 0 {
            leader
        } else {
            (leader + 1 + (rounds / 2) % (count - 1)) % count
        };
        alone_led += usize::from(lone == leader);
        let lone_host = &scene.node_hosts[lone];
        scene.net.cut(lone_host, &scene.db_host, Way::Both);
        for other in (0..count).filter(|i| *i != lone) {
            scene
                .net
                .cut(lone_host, &scene.node_hosts[other], Way::Both);
        }
        tokio::time::sleep(SPLIT).await;
        let healed_at = db.now_ms().await;
        scene.net.heal(lone_host);
        let watcher = (lone + 1) % count;
        let rejoined_at = wait_for(
            Duration::from_secs(60),
            "the lone node to rejoin and the partitions to settle",
            || async {
                let snapshot = scene.cluster.nodes[watcher].cluster().await?;
                if snapshot.is_settled_on(&ids) {
                    Some(db.now_ms().await)
                } else {
                    None
                }
            },
        )
        .await;
        rejoin_ms.push(rejoined_at - healed_at);
        rounds += 1;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    let Window {
        runs,
        verdict,
        twice,
    } = judged(&db, &jobs, from).await;
    let late = max_lateness_ms(&runs);
    let term = scene
        .cluster
        .settled(0, &ids)
        .await
        .leader
        .map_or(0, |leader| leader.term);
    figures!(
        "{scenario}: {rounds} splits of {} ms ({alone_led} with the leader alone), leader term \
         {term} at the end; rejoined and settled {} ms after each heal (slowest); max lateness \
         {late} ms; {}; attempts succeeded twice {}",
        SPLIT.as_millis(),
        rejoin_ms.iter().max().copied().unwrap_or(0),
        verdict.figures(),
        twice.len()
    );
    verdict.assert_exactly_once(&scenario, true);
    assert!(twice.is_empty(), "{scenario}: runs done twice: {twice:?}");
    assert!(alone_led > 0, "{scenario}: the leader was never left alone");
    assert!(
        late <= TAKEOVER_BOUND_MS,
        "{scenario}: an instant fired {late} ms late"
    );
}
