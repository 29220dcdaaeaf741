//! The network scenarios where the links stay up but go bad: a connection half-open under a
//! statement, an executor's answers lost on the way back, a lossy and slow database link.
//! The scenes, helpers and the bounds they share are the parent's (`network_faults`).

use super::*;

/// How many of the database sessions from `host` wait for a row lock.
async fn waiting_for_a_lock(db: &Database, host: &NetHost) -> i64 {
    let query = match db.engine {
        Engine::Postgres => format!(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE client_addr = '{}' AND wait_event_type = 'Lock'",
            host.ip
        ),
        // MariaDB's INNODB_TRX is a cache that can lag for seconds: its process list shows
        // the statement itself, and only a locking read of ours waits there.
        _ => format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
             WHERE HOST LIKE '{}:%' AND INFO LIKE '%FOR UPDATE%'",
            host.ip
        ),
    };
    db.scalar(&query, &[]).await
}

pub(super) async fn a_statement_on_a_half_open_connection_is_given_up_at_its_deadline(
    engine: Engine,
) {
    let _turn = one_at_a_time().await;
    let scenario = format!("half-open database connections ({engine:?})");
    let scene = NetScene::start(engine).await;
    let (l, f) = leader_and_follower(&scene.cluster).await;
    let _executor = scene.executor(l).await;
    let follower = scene.cluster.nodes[f].node_id().to_owned();
    let db = scene.db().clone();
    let (jobs, from) = scene.cluster.ticking(l, 30).await;
    db.sleep_until(from + 2_000).await;

    // One of the follower's partitions locked by the test, so that a write of the follower's
    // surely waits on it: then every connection the follower has open goes silent, the waiting
    // one included, and the lock goes (the database answers, and the answer is lost).
    let held = scene.cluster.partitions_of(&follower).await;
    let busiest = db
        .scalar(
            &format!(
                "SELECT partition_id FROM jobs WHERE job_id IN ({}) AND partition_id IN ({}) \
                 GROUP BY partition_id ORDER BY COUNT(*) DESC, partition_id LIMIT 1",
                id_list(&jobs),
                id_list(&held)
            ),
            &[],
        )
        .await;
    assert!(
        held.contains(&busiest),
        "{scenario}: the follower owns partitions with jobs"
    );
    let lock = db.lock_partition(busiest).await;
    let follower_host = &scene.node_hosts[f];
    wait_for(
        Duration::from_secs(10),
        "a statement of the follower's to wait for the test's lock",
        || async { (waiting_for_a_lock(&db, follower_host).await > 0).then_some(()) },
    )
    .await;
    let severed_at = db.now_ms().await;
    let severed =
        scene
            .net
            .sever_open_connections(follower_host, &scene.db_host, scene.server.port);
    lock.release().await;
    assert!(severed > 0, "{scenario}: the follower had connections open");

    let ids = scene.cluster.ids();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let resumed_at = wait_for(
        Duration::from_secs(30),
        "the follower to act on fresh connections",
        || async {
            let fired: Vec<(i64,)> = db
                .rows(
                    &format!(
                        "SELECT COUNT(*) FROM runs WHERE job_id IN ({}) AND node_id = '{follower}' \
                         AND state = 'succeeded' AND scheduled_at_ms > {}",
                        id_list(&jobs),
                        severed_at + 1_000
                    ),
                    &[],
                )
                .await;
            let snapshot = scene.cluster.nodes[l].cluster().await?;
            let settled = snapshot.is_settled_on(&ids);
            if fired.first().is_some_and(|c| c.0 > 0) && settled {
                Some(db.now_ms().await)
            } else {
                None
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let gave_up = scene.cluster.nodes[f]
        .log_text()
        .matches("the database did not answer within")
        .count();

    let Window {
        runs,
        verdict,
        twice,
    } = judged(&db, &jobs, from).await;
    let late = max_lateness_ms(&runs);
    figures!(
        "{scenario}: {severed} connections severed, one mid-statement; the node gave up \
         {gave_up} calls at their deadline and fired on fresh connections {} ms after; max \
         lateness {late} ms; {}; attempts succeeded twice {}",
        resumed_at - severed_at,
        verdict.figures(),
        twice.len()
    );
    verdict.assert_exactly_once(&scenario, true);
    assert!(twice.is_empty(), "{scenario}: runs done twice: {twice:?}");
    assert!(
        gave_up > 0,
        "{scenario}: the follower never gave up the statement whose answer was lost"
    );
    assert!(
        late <= TAKEOVER_BOUND_MS,
        "{scenario}: an instant fired {late} ms late"
    );
}

/// How long the executor's answers are lost: longer than the nodes wait for an answer
/// (`dispatch.request_timeout_ms`, 1.5 s here), shorter than its lease (10 s here: the executor's heartbeats are lost too).
const ANSWERS_LOST: Duration = Duration::from_secs(4);

/// What becomes of the executor's answers on their way back to the nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AnswerFault {
    /// Nothing it sends arrives (its heartbeats and reports neither).
    Lost,
    /// The direct results it answers arrive as far as their headers, then the connection is
    /// silent; everything else arrives.
    CutAfterHeaders,
}

pub(super) async fn answers_lost_on_the_way_back_are_handled_per_delivery_guarantee(
    engine: Engine,
) {
    answers_gone_astray(engine, AnswerFault::Lost).await;
}

pub(super) async fn answers_cut_after_their_headers_are_answers_lost_not_refusals(engine: Engine) {
    answers_gone_astray(engine, AnswerFault::CutAfterHeaders).await;
}

async fn answers_gone_astray(engine: Engine, fault: AnswerFault) {
    let _turn = one_at_a_time().await;
    let scenario = match fault {
        AnswerFault::Lost => format!("executor answers lost ({engine:?})"),
        AnswerFault::CutAfterHeaders => format!("executor answers cut after headers ({engine:?})"),
    };
    let config = tempfile::NamedTempFile::new().expect("config file");
    std::fs::write(config.path(), "[dispatch]\nrequest_timeout_ms = 1500\n").expect("config file");
    let config_path = config.path().display().to_string();
    // The lease in the environment, where the tests' executor settings put theirs (it
    // outranks the file): its heartbeats are lost with its answers, and with a shorter lease
    // the nodes would stop offering it work, which would then wait out the fault instead of
    // meeting it.
    let scene = NetScene::start_tuned(engine, false, |spec| {
        spec.extra_env
            .push(("CARILLON_CONFIG", config_path.clone()));
        spec.extra_env
            .push(("CARILLON_EXECUTOR_LEASE_MS", "10000".to_owned()));
    })
    .await;
    let (l, _) = leader_and_follower(&scene.cluster).await;
    // Room for every attempt of the window (its default is 8).
    let executor = scene.executor_with(l, &["--capacity", "64"]).await;
    let db = scene.db().clone();
    let delivered = |name: String, delivery: &str| {
        let mut body = every_second(&name);
        body["delivery"] = delivery.into();
        if delivery == "at_most_once" {
            body.as_object_mut().map(|b| b.remove("retry"));
        }
        body
    };
    let mut bodies = Vec::new();
    for (kind, delivery) in [
        ("alo", "at_least_once"),
        ("amo", "at_most_once"),
        ("eoe", "exactly_once_effect"),
    ] {
        bodies.extend((0..10).map(|i| delivered(format!("{kind}-{i}"), delivery)));
    }
    let jobs = scene.cluster.create_jobs(l, bodies).await;
    let (alo, rest) = jobs.split_at(10);
    let (amo, eoe) = rest.split_at(10);
    let from = scene.cluster.firing_from(&jobs).await;
    // Mid-second, so the rules are in place before the next second's deliveries begin.
    db.sleep_until(from + 2_500).await;

    // Whatever the executor sends the nodes is lost (or its results cut after their
    // headers); what they send it still arrives.
    for node in &scene.node_hosts {
        match fault {
            AnswerFault::Lost => scene.net.lose_answers(&scene.executor_host, node),
            AnswerFault::CutAfterHeaders => {
                scene
                    .net
                    .cut_results_after_headers(&scene.executor_host, node, executor.port);
            }
        }
    }
    tokio::time::sleep(ANSWERS_LOST).await;
    scene.net.heal(&scene.executor_host);
    tokio::time::sleep(Duration::from_secs(5)).await;

    let to = (db.now_ms().await / 1_000 + 2) * 1_000;
    settle(&db, &jobs, from, to, Duration::from_secs(60)).await;
    let runs = runs(&db, &jobs, from, to).await;
    let verdict = Verdict::of(&runs, &each_at(&jobs, &instants(from, to, 1_000)));
    let not_succeeded = |of: &[i64]| {
        runs.iter()
            .filter(|r| of.contains(&r.job_id) && r.state != "succeeded")
            .count()
    };
    // What the executor did for the window's runs (it also served the runs before it).
    let log = executor.log().await;
    let window_runs: std::collections::BTreeSet<i64> = runs.iter().map(|r| r.run_id).collect();
    let of_window = |of: &[i64]| {
        log.iter()
            .filter(|e| window_runs.contains(&e["run_id"].as_i64().unwrap_or(0)))
            .filter(|e| of.contains(&e["job_id"].as_i64().unwrap_or(0)))
            .cloned()
            .collect::<Vec<_>>()
    };
    let ran = |of: &[i64]| {
        of_window(of)
            .iter()
            .filter(|e| e["handler"].is_string())
            .count()
    };
    let mut effect_runs: BTreeMap<String, usize> = BTreeMap::new();
    for entry in of_window(eoe) {
        if let Some(key) = entry["effect_key"].as_str() {
            *effect_runs.entry(key.to_owned()).or_default() += 1;
        }
    }
    // A run's work under two attempts has two keys (`run:shard:attempt`): its handler ran
    // twice all the same.
    let mut handled: BTreeMap<i64, usize> = BTreeMap::new();
    for entry in of_window(eoe).iter().filter(|e| e["handler"].is_string()) {
        *handled
            .entry(entry["run_id"].as_i64().unwrap_or(0))
            .or_default() += 1;
    }
    let runs_handled_twice: Vec<i64> = handled
        .iter()
        .filter(|(_, count)| **count > 1)
        .map(|(run, _)| *run)
        .collect();
    let effects_twice: Vec<&String> = effect_runs
        .iter()
        .filter(|(_, count)| **count > 1)
        .map(|(key, _)| key)
        .collect();
    let from_record = of_window(eoe)
        .iter()
        .filter(|e| e["from_record"].is_string())
        .count();
    let (amo_twice, _) = handed_twice(&executor, amo).await;
    let amo_lost = db
        .scalar(
            &format!(
                "SELECT COUNT(*) FROM attempts a JOIN runs r ON r.run_id = a.run_id \
                 WHERE r.job_id IN ({}) AND a.state = 'lost' \
                 AND r.scheduled_at_ms >= {from} AND r.scheduled_at_ms <= {to}",
                id_list(amo)
            ),
            &[],
        )
        .await;
    // An answer cut after its headers read as a refusal ended its attempt failed.
    let refused = db
        .scalar(
            &format!(
                "SELECT COUNT(*) FROM attempts a JOIN runs r ON r.run_id = a.run_id \
                 WHERE r.job_id IN ({}) AND a.error LIKE '%not a result%'",
                id_list(&jobs)
            ),
            &[],
        )
        .await;
    let in_window = |of: &[i64]| runs.iter().filter(|r| of.contains(&r.job_id)).count();
    figures!(
        "{scenario}: for {} ms; at_least_once: {} runs, handler ran {} times, {} \
         not succeeded; at_most_once: {} runs, {amo_lost} attempts lost (their runs failed), \
         {} handed twice; exactly_once_effect: {} runs, {} keys run, {from_record} deliveries \
         answered from the record, {} keys run twice, {} not succeeded; {refused} attempts \
         failed as refused; {}",
        ANSWERS_LOST.as_millis(),
        in_window(alo),
        ran(alo),
        not_succeeded(alo),
        in_window(amo),
        amo_twice.len(),
        in_window(eoe),
        effect_runs.len(),
        effects_twice.len(),
        not_succeeded(eoe),
        verdict.figures()
    );
    verdict.assert_exactly_once(&scenario, false);
    assert_eq!(
        refused, 0,
        "{scenario}: answers cut after their headers were taken as refusals"
    );
    assert_eq!(
        not_succeeded(alo),
        0,
        "{scenario}: at_least_once runs failed"
    );
    assert!(
        amo_twice.is_empty(),
        "{scenario}: at_most_once runs handed to the executor twice: {amo_twice:?}"
    );
    assert!(
        amo_lost > 0,
        "{scenario}: no at_most_once answer was lost (the fault did not bite)"
    );
    assert_eq!(
        not_succeeded(amo) as i64,
        amo_lost,
        "{scenario}: at_most_once runs failed other than by their lost answers"
    );
    assert!(
        effects_twice.is_empty(),
        "{scenario}: exactly_once_effect work run twice: {effects_twice:?}"
    );
    assert!(
        runs_handled_twice.is_empty(),
        "{scenario}: exactly_once_effect runs whose handler ran twice: {runs_handled_twice:?}"
    );
    assert_eq!(
        not_succeeded(eoe),
        0,
        "{scenario}: exactly_once_effect runs failed"
    );
}

/// How late an instant may fire while the database link is lossy and slow: every stage's
/// pass takes several round trips, each 200 ms and some a retransmission more (3 to 6 s a
/// delivery pass measured), and an instant waits for a claim, a start and a delivery pass
/// (13 s at most measured). A stalled cluster is caught by the rate handed out meanwhile.
const SLOW_LINK_BOUND_MS: i64 = 30_000;

/// How long the database link is lossy and slow: a sample in a plain run, the minute
/// with `CARILLON_FAULTS_FULL=1`.
fn degraded_for() -> Duration {
    if std::env::var("CARILLON_FAULTS_FULL").is_ok_and(|v| v == "1") {
        Duration::from_secs(60)
    } else {
        Duration::from_secs(20)
    }
}

/// What the cluster did in `[from, to)`: runs handed to the executor a second (whatever
/// their instant), and the lateness of the runs scheduled then: p50, p99 and maximum (ms).
fn pace(runs: &[RunRow], from: i64, to: i64) -> (f64, i64, i64, i64) {
    let handed = runs
        .iter()
        .filter(|r| r.dispatched_at_ms.is_some_and(|d| d >= from && d < to))
        .count();
    let mut late: Vec<i64> = runs
        .iter()
        .filter(|r| r.scheduled_at_ms >= from && r.scheduled_at_ms < to)
        .filter_map(|r| r.lateness_ms())
        .collect();
    late.sort_unstable();
    let at = |q: f64| {
        late.get(((late.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(0)
    };
    let per_s = handed as f64 * 1_000.0 / (to - from).max(1) as f64;
    (per_s, at(0.5), at(0.99), late.last().copied().unwrap_or(0))
}

pub(super) async fn a_lossy_slow_database_link_makes_fires_later_never_wrong(engine: Engine) {
    let _turn = one_at_a_time().await;
    let scenario = format!("lossy, slow database link ({engine:?})");
    // The default timings (heartbeat 500 ms, leases 4 s): the tests' fast ones (a 1 s lease)
    // are no lease for a link with 200 ms round trips.
    let scene = NetScene::start_tuned(engine, true, |spec| {
        spec.heartbeat_ms = 500;
        spec.node_lease_ms = 4_000;
        spec.leader_lease_ms = 4_000;
    })
    .await;
    let (l, _) = leader_and_follower(&scene.cluster).await;
    // Room for every attempt the slow link keeps in flight (each waits for its settle): what
    // is measured is the link, not the executor's capacity.
    let _executor = scene.executor_with(l, &["--capacity", "500"]).await;
    let db = scene.db().clone();
    let (jobs, from) = scene.cluster.ticking(l, 30).await;
    db.sleep_until(from + 10_000).await;

    // Every node's database link: 5 % of the packets lost either way, 200 ms more a round trip.
    let degraded_at = db.now_ms().await;
    let proxy = scene.proxy.as_ref().expect("the scene's proxy");
    proxy.delay_round_trips(Duration::from_millis(200));
    for host in &scene.node_hosts {
        scene.net.lose_to_gateway(host, 0.05);
    }
    tokio::time::sleep(degraded_for()).await;
    let restored_at = db.now_ms().await;
    proxy.delay_round_trips(Duration::ZERO);
    for host in &scene.node_hosts {
        scene.net.heal(host);
    }
    tokio::time::sleep(Duration::from_secs(10)).await;

    let Window {
        runs,
        verdict,
        twice,
    } = judged(&db, &jobs, from).await;
    let before = pace(&runs, from, degraded_at);
    let during = pace(&runs, degraded_at, restored_at);
    let after = pace(&runs, restored_at + 5_000, restored_at + 10_000);
    let show = |(per_s, p50, p99, max): (f64, i64, i64, i64)| {
        format!(
            "{per_s:.1} runs handed out a second, lateness p50 {p50} ms, p99 {p99} ms, max {max} ms"
        )
    };
    figures!(
        "{scenario}: before: {}; for {} ms of 5 % loss and +200 ms a round trip: {}; after: \
         {}; {}; attempts succeeded twice {}",
        show(before),
        restored_at - degraded_at,
        show(during),
        show(after),
        verdict.figures(),
        twice.len()
    );
    verdict.assert_exactly_once(&scenario, true);
    assert!(twice.is_empty(), "{scenario}: runs done twice: {twice:?}");
    assert!(
        during.0 >= 10.0,
        "{scenario}: {:.1} runs handed out a second on the slow link, for 30 due",
        during.0
    );
    assert!(
        during.3 <= SLOW_LINK_BOUND_MS,
        "{scenario}: an instant fired {} ms late on the slow link",
        during.3
    );
    assert!(
        after.2 <= 2_000,
        "{scenario}: 5 s after the link was restored the p99 lateness is still {} ms",
        after.2
    );
}
