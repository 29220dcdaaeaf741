//! The machine's baseline, measured by every run before its scenario, so that a figure can be
//! read against what the machine and its database can do at all: the disk's sync rate (what
//! bounds every commit), the database's one-client commit rate and its batched-insert row
//! rate (what bounds a claim's and a settle's transactions), and the speed of one core.
//! `bench/README.md` states its headline figures as a share of these.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;
use sqlx::Connection;

use crate::cluster::Db;

/// How long each database figure is measured.
const SPAN: Duration = Duration::from_secs(3);

/// Rows per statement of the batched-insert figure.
const BATCH_ROWS: usize = 1_000;

/// The baseline's figures, each named `baseline_…`.
pub(crate) async fn measure(db: Db) -> anyhow::Result<Vec<(String, Value)>> {
    let mut rows = vec![
        ("baseline_cpu".to_owned(), Value::from(cpu_model())),
        ("baseline_cores".to_owned(), Value::from(cores())),
        (
            "baseline_core_mops".to_owned(),
            Value::from(core_mops().round()),
        ),
        (
            "baseline_fdatasync_per_s".to_owned(),
            Value::from(fdatasync_per_s().context("timing fdatasync")?.round()),
        ),
    ];
    if db != Db::Sqlite {
        let (commits, batched) = database_rates(db).await?;
        rows.push((
            "baseline_commits_per_s".to_owned(),
            Value::from(commits.round()),
        ));
        rows.push((
            "baseline_batched_rows_per_s".to_owned(),
            Value::from(batched.round()),
        ));
    }
    Ok(rows)
}

/// The processor's model name, as `/proc/cpuinfo` gives it.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// Millions of steps a second of a 64-bit mix (splitmix64's) on one core: the core's speed
/// at the integer work a node mostly does.
fn core_mops() -> f64 {
    let started = Instant::now();
    let mut steps = 0_u64;
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    while started.elapsed() < Duration::from_millis(500) {
        for _ in 0..100_000 {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            x ^= z ^ (z >> 31);
        }
        steps += 100_000;
    }
    std::hint::black_box(x);
    steps as f64 / started.elapsed().as_secs_f64() / 1e6
}

/// 8 kB writes each followed by `fdatasync`, one after another, for a second: what
/// `pg_test_fsync` reports as `fdatasync` (one 8kB write), in the temporary directory (on
/// this machine the disk the databases use).
fn fdatasync_per_s() -> anyhow::Result<f64> {
    let path = std::env::temp_dir().join(format!("carillon-bench-fsync-{}", std::process::id()));
    let mut file = std::fs::File::create(&path)?;
    let block = [0x5a_u8; 8_192];
    let started = Instant::now();
    let mut syncs = 0_u32;
    let result = loop {
        if let Err(err) = file.write_all(&block).and_then(|()| file.sync_data()) {
            break Err(err.into());
        }
        syncs += 1;
        if started.elapsed() >= Duration::from_secs(1) {
            break Ok(f64::from(syncs) / started.elapsed().as_secs_f64());
        }
    };
    let _ = std::fs::remove_file(&path);
    result
}

/// One client's commits a second (a one-row insert each) and rows a second inserted
/// [`BATCH_ROWS`] to a statement, each statement its own transaction, in a scratch table of a
/// scratch database on the server the scenario uses.
async fn database_rates(db: Db) -> anyhow::Result<(f64, f64)> {
    const TABLE: &str = "CREATE TABLE baseline_rows (id BIGINT NOT NULL PRIMARY KEY, \
        at_ms BIGINT NOT NULL, note VARCHAR(64) NOT NULL)";
    let (admin, url) = match db {
        Db::Postgres => (
            "postgres://postgres@127.0.0.1:5432/postgres",
            "postgres://postgres@127.0.0.1:5432/carillon_baseline",
        ),
        _ => (
            "mysql://root@127.0.0.1:3306/test",
            "mysql://root@127.0.0.1:3306/carillon_baseline",
        ),
    };
    let drop = if db == Db::Postgres {
        "DROP DATABASE IF EXISTS carillon_baseline WITH (FORCE)"
    } else {
        "DROP DATABASE IF EXISTS carillon_baseline"
    };
    admin_execute(db, admin, drop).await?;
    admin_execute(db, admin, "CREATE DATABASE carillon_baseline").await?;
    admin_execute(db, url, TABLE).await?;
    // Ids of the batched inserts start past the one-row inserts'.
    const BATCH_BASE: i64 = 1 << 40;
    let rates = match db {
        Db::Postgres => {
            let mut c = sqlx::PgConnection::connect(url).await?;
            let (one, many) = (postgres_insert(1), postgres_insert(BATCH_ROWS));
            let commits = rows_per_s(1, async |id| {
                sqlx::query(sqlx::AssertSqlSafe(one.clone()))
                    .bind(id)
                    .execute(&mut c)
                    .await?;
                Ok(())
            })
            .await?;
            let batched = rows_per_s(BATCH_ROWS, async |id| {
                sqlx::query(sqlx::AssertSqlSafe(many.clone()))
                    .bind(BATCH_BASE + id)
                    .execute(&mut c)
                    .await?;
                Ok(())
            })
            .await?;
            (commits, batched)
        }
        _ => {
            let mut c = sqlx::MySqlConnection::connect(url).await?;
            let (one, many) = (mysql_insert(1), mysql_insert(BATCH_ROWS));
            let commits = rows_per_s(1, async |id| {
                sqlx::query(sqlx::AssertSqlSafe(one.clone()))
                    .bind(id)
                    .execute(&mut c)
                    .await?;
                Ok(())
            })
            .await?;
            let batched = rows_per_s(BATCH_ROWS, async |id| {
                sqlx::raw_sql(sqlx::AssertSqlSafe(
                    many.replace("?", &(BATCH_BASE + id).to_string()),
                ))
                .execute(&mut c)
                .await?;
                Ok(())
            })
            .await?;
            (commits, batched)
        }
    };
    admin_execute(db, admin, drop).await?;
    Ok(rates)
}

/// An insert of `n` rows numbered from a bound parameter (PostgreSQL).
fn postgres_insert(n: usize) -> String {
    format!(
        "INSERT INTO baseline_rows (id, at_ms, note) \
         SELECT $1 + g, g, 'a row of the baseline' FROM generate_series(0, {}) g",
        n - 1
    )
}

/// The same for MySQL (no `generate_series`: the rows written out).
fn mysql_insert(n: usize) -> String {
    let rows: Vec<String> = (0..n)
        .map(|i| format!("(? + {i}, {i}, 'a row of the baseline')"))
        .collect();
    // The first id goes in each row: one bound `?` for one row, written in for many.
    format!(
        "INSERT INTO baseline_rows (id, at_ms, note) VALUES {}",
        rows.join(", ")
    )
}

/// Rows a second that `execute` inserts, `rows` to a call (each call one statement and one
/// transaction), over [`SPAN`]; it is given the first id of its rows.
async fn rows_per_s<F>(rows: usize, mut execute: F) -> anyhow::Result<f64>
where
    F: AsyncFnMut(i64) -> anyhow::Result<()>,
{
    let mut next_id = 0_i64;
    let started = Instant::now();
    let mut inserted = 0_usize;
    while started.elapsed() < SPAN {
        execute(next_id).await?;
        next_id += i64::try_from(rows).unwrap_or(i64::MAX / 2);
        inserted += rows;
    }
    Ok(inserted as f64 / started.elapsed().as_secs_f64())
}

async fn admin_execute(db: Db, url: &str, statement: &str) -> anyhow::Result<()> {
    let statement = sqlx::AssertSqlSafe(statement.to_owned());
    match db {
        Db::Postgres => {
            let mut c = sqlx::PgConnection::connect(url)
                .await
                .with_context(|| format!("connecting to {url}"))?;
            sqlx::raw_sql(statement).execute(&mut c).await?;
        }
        _ => {
            let mut c = sqlx::MySqlConnection::connect(url)
                .await
                .with_context(|| format!("connecting to {url}"))?;
            sqlx::raw_sql(statement).execute(&mut c).await?;
        }
    }
    Ok(())
}
