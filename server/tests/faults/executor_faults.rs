//! Executors fail while they hold work: one is killed mid-run (`kill -9`), one hangs in its
//! handler (accepts, never finishes, ignores cancels), one freezes whole (SIGSTOP: no answers,
//! no heartbeats). Every run still ends `succeeded` exactly once, on the executors that work.
//! One goes silent (takes dispatches and answers nothing, while it heartbeats): only its own
//! attempts wait; the node's other jobs reach their executor within 100 ms (nine in ten).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use crate::harness::{Cluster, Database, id_list, instants, one_at_a_time};
use crate::invariants::{Verdict, each_at, runs, runs_succeeded_twice, settle};
use crate::support::db::{Engine, TestDb};

for_engine!(
    postgres,
    Postgres,
    [
        executors_killed_hung_or_frozen_mid_run_lose_no_run,
        an_executor_restarted_mid_run_has_what_it_forgot_run_again,
        a_silent_executor_delays_only_its_own_attempts,
    ]
);
for_engine!(
    mysql,
    Mysql,
    [
        executors_killed_hung_or_frozen_mid_run_lose_no_run,
        an_executor_restarted_mid_run_has_what_it_forgot_run_again,
        a_silent_executor_delays_only_its_own_attempts,
    ]
);
for_engine!(
    sqlite,
    Sqlite,
    [
        executors_killed_hung_or_frozen_mid_run_lose_no_run,
        an_executor_restarted_mid_run_has_what_it_forgot_run_again,
    ]
);

/// The attempts running on `executor`, by the database.
async fn running_on(db: &Database, executor: &str) -> i64 {
    db.scalar(
        &format!(
            "SELECT COUNT(*) FROM attempts WHERE state = 'running' AND executor_id = '{executor}'"
        ),
        &[],
    )
    .await
}

async fn executors_killed_hung_or_frozen_mid_run_lose_no_run(test_db: TestDb) {
    let _turn = one_at_a_time().await;
    let scenario = format!("executors killed, hung, frozen ({:?})", test_db.engine);
    let db = Database::direct(test_db.engine, &test_db.url);
    let size = if db.engine == Engine::Sqlite { 1 } else { 2 };
    let cluster = Cluster::start(&db, size, |_| {}).await;
    let mut killed = cluster.executor(0, "killed", &["--capacity", "64"]);
    let _steady = cluster.executor(0, "steady", &["--capacity", "64"]);
    let _hung = cluster.executor(0, "hung", &["--capacity", "64", "--hang"]);
    let frozen = cluster.executor(0, "frozen", &["--capacity", "64"]);
    // One-second handlers every other second, timed out after 2.5 s, retried elsewhere.
    let bodies = (0..12)
        .map(|i| {
            json!({"name": format!("slow-{i}"), "app": "py", "handler": "slow",
                   "args": {"seconds": 1}, "schedule": {"cron": "*/2 * * * * *"},
                   "start": true, "timeout_ms": 2_500, "balance": "round_robin",
                   "retry": {"max_attempts": 6, "initial_delay_ms": 100}})
        })
        .collect();
    let jobs = cluster.create_jobs(0, bodies).await;
    let from = (cluster.firing_from(&jobs).await / 2_000 + 1) * 2_000;

    // Killed, then frozen, 300 ms into one-second handlers.
    db.sleep_until(from + 300).await;
    killed.kill9();
    let killed_holding = running_on(&db, "killed").await;
    db.sleep_until(from + 2_300).await;
    frozen.signal("STOP");
    let frozen_holding = running_on(&db, "frozen").await;

    let to = from + 12_000;
    db.sleep_until(to).await;
    settle(&db, &jobs, from, to, Duration::from_secs(90)).await;
    let runs = runs(&db, &jobs, from, to).await;
    let verdict = Verdict::of(&runs, &each_at(&jobs, &instants(from, to, 2_000)));
    let twice = runs_succeeded_twice(&db, &jobs, from, to).await;
    let outcomes: BTreeMap<(String, String), i64> = db
        .rows::<(String, String, i64)>(
            &format!(
                "SELECT COALESCE(a.executor_id, '-'), a.state, COUNT(*) FROM attempts a \
                 JOIN runs r ON r.run_id = a.run_id WHERE r.job_id IN ({}) \
                 AND r.scheduled_at_ms BETWEEN ? AND ? GROUP BY a.executor_id, a.state",
                id_list(&jobs)
            ),
            &[from, to],
        )
        .await
        .into_iter()
        .map(|(executor, state, n)| ((executor, state), n))
        .collect();
    let count = |executor: &str, state: &str| {
        outcomes
            .get(&(executor.to_owned(), state.to_owned()))
            .copied()
            .unwrap_or(0)
    };
    figures!(
        "{scenario}: killed holding {killed_holding} attempts, frozen holding \
         {frozen_holding}; attempts by executor and state {outcomes:?}; {}; attempts succeeded \
         twice {}",
        verdict.figures(),
        twice.len()
    );
    verdict.assert_exactly_once(&scenario, true);
    assert!(twice.is_empty(), "{scenario}: runs done twice: {twice:?}");
    assert!(
        count("killed", "lost") > 0,
        "{scenario}: the kill lost attempts"
    );
    assert!(
        count("frozen", "lost") > 0,
        "{scenario}: the freeze lost attempts"
    );
    assert!(
        count("hung", "timed_out") > 0,
        "{scenario}: the hang timed out attempts"
    );
    assert_eq!(
        count("hung", "succeeded"),
        0,
        "{scenario}: a hung handler never succeeds"
    );
    frozen.signal("CONT");
}

/// An executor killed and started again at once under the same id (a restarted pod or
/// service) heartbeats on as if nothing happened, but has forgotten the attempts it ran: they
/// must not stay `running` forever (these jobs have no timeout to rescue them).
async fn an_executor_restarted_mid_run_has_what_it_forgot_run_again(test_db: TestDb) {
    let _turn = one_at_a_time().await;
    let scenario = format!("executor restarted mid-run ({:?})", test_db.engine);
    let db = Database::direct(test_db.engine, &test_db.url);
    let size = if db.engine == Engine::Sqlite { 1 } else { 2 };
    let cluster = Cluster::start(&db, size, |_| {}).await;
    let mut restarted = cluster.executor(0, "restarted", &["--capacity", "64"]);
    let _steady = cluster.executor(0, "steady", &["--capacity", "64"]);
    let bodies = (0..6)
        .map(|i| {
            json!({"name": format!("slow-{i}"), "app": "py", "handler": "slow",
                   "args": {"seconds": 2}, "schedule": {"cron": "*/4 * * * * *"},
                   "start": true, "balance": "round_robin",
                   "retry": {"max_attempts": 3, "initial_delay_ms": 100}})
        })
        .collect();
    let jobs = cluster.create_jobs(0, bodies).await;
    let from = (cluster.firing_from(&jobs).await / 4_000 + 1) * 4_000;
    db.sleep_until(from + 500).await;
    let holding = running_on(&db, "restarted").await;
    restarted.kill9();
    restarted = cluster.executor(0, "restarted", &["--capacity", "64"]);
    let to = from + 8_000;
    db.sleep_until(to).await;
    settle(&db, &jobs, from, to, Duration::from_secs(30)).await;
    let runs = runs(&db, &jobs, from, to).await;
    let verdict = Verdict::of(&runs, &each_at(&jobs, &instants(from, to, 4_000)));
    let twice = runs_succeeded_twice(&db, &jobs, from, to).await;
    let lost = db
        .scalar(
            "SELECT COUNT(*) FROM attempts WHERE state = 'lost' AND executor_id = 'restarted'",
            &[],
        )
        .await;
    figures!(
        "{scenario}: restarted holding {holding} attempts; attempts it forgot failed \
         over {lost}; {}; attempts succeeded twice {}",
        verdict.figures(),
        twice.len()
    );
    drop(restarted);
    verdict.assert_exactly_once(&scenario, true);
    assert!(twice.is_empty(), "{scenario}: runs done twice: {twice:?}");
    assert!(
        holding > 0 && lost >= holding,
        "{scenario}: forgotten attempts failed over"
    );
}

/// How late nine in ten of the other jobs' runs may reach their executor while one executor
/// is silent.
const OTHERS_BOUND_MS: i64 = 100;

/// How late any of them may: well under the request timeout (3 s) a pass that waited on the
/// silent executor would add; room for a pass the machine itself held up (one instant's runs
/// 139 ms late was seen in CI on two cores, with a debug build).
const OTHERS_MAX_MS: i64 = 1_000;

/// One executor takes every dispatch of its app and answers nothing for 30 s (longer than
/// the nodes wait for an answer, 3 s here) while it heartbeats on; the node's other jobs, on
/// another executor, fire every second meanwhile. Their runs reach their executor within
/// [`OTHERS_BOUND_MS`] of their instant (nine in ten; every one within [`OTHERS_MAX_MS`]):
/// the silent one delays only its own.
async fn a_silent_executor_delays_only_its_own_attempts(test_db: TestDb) {
    let _turn = one_at_a_time().await;
    let scenario = format!("a silent executor ({:?})", test_db.engine);
    let db = Database::direct(test_db.engine, &test_db.url);
    let config = tempfile::NamedTempFile::new().expect("config file");
    std::fs::write(config.path(), "[dispatch]\nrequest_timeout_ms = 3000\n").expect("config");
    let config_path = config.path().display().to_string();
    let cluster = Cluster::start(&db, 1, |spec| {
        spec.extra_env
            .push(("CARILLON_CONFIG", config_path.clone()));
    })
    .await;
    let _steady = cluster.executor(0, "steady", &["--capacity", "64"]);
    let _silent = cluster.executor(0, "silent", &["--app", "quiet", "--capacity", "64"]);
    let every_second = |name: String, app: &str, handler: &str| {
        json!({"name": name, "app": app, "handler": handler, "args": {"seconds": 30},
               "schedule": {"cron": "* * * * * *"}, "start": true})
    };
    let others = cluster
        .create_jobs(
            0,
            (0..20)
                .map(|i| every_second(format!("other-{i}"), "py", "echo"))
                .collect(),
        )
        .await;
    let from = cluster.firing_from(&others).await;
    db.sleep_until(from + 1_000).await;
    let silenced = cluster
        .create_jobs(
            0,
            (0..2)
                .map(|i| every_second(format!("silenced-{i}"), "quiet", "stall"))
                .collect(),
        )
        .await;
    let to = from + 15_000;
    db.sleep_until(to).await;
    settle(&db, &others, from, to, Duration::from_secs(30)).await;
    let runs = runs(&db, &others, from, to).await;
    let verdict = Verdict::of(&runs, &each_at(&others, &instants(from, to, 1_000)));
    let mut late: Vec<i64> = runs.iter().filter_map(|r| r.lateness_ms()).collect();
    late.sort_unstable();
    let at = |q: f64| {
        late.get(((late.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(0)
    };
    // Offers the silent executor took and never answered: taken again (`409`) once their
    // requests timed out, then running there.
    let silent_offers = db
        .scalar(
            &format!(
                "SELECT COUNT(*) FROM attempts a JOIN runs r ON r.run_id = a.run_id \
                 WHERE r.job_id IN ({}) AND a.executor_id = 'silent'",
                id_list(&silenced)
            ),
            &[],
        )
        .await;
    figures!(
        "{scenario}: the other jobs' runs reached their executor p50 {} ms, p90 {} ms, p99 {} ms, max {} \
         ms late; the silent executor's jobs made {silent_offers} attempts; {}",
        at(0.5),
        at(0.9),
        at(0.99),
        late.last().copied().unwrap_or(0),
        verdict.figures()
    );
    verdict.assert_exactly_once(&scenario, true);
    assert!(
        silent_offers > 0,
        "{scenario}: the silent executor was offered nothing"
    );
    let max = late.last().copied().unwrap_or(0);
    assert!(
        at(0.9) <= OTHERS_BOUND_MS,
        "{scenario}: one in ten runs of the other jobs reached their executor more than \
         {OTHERS_BOUND_MS} ms late ({} ms)",
        at(0.9)
    );
    assert!(
        max <= OTHERS_MAX_MS,
        "{scenario}: a run of another job reached its executor {max} ms late"
    );
}
