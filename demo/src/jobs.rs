//! The demo's handlers. `#[job]` collects them at link time; `main` never lists them.

use std::time::Duration;

use carillon_executor::{JobContext, JobError, job};
use serde_json::{Value, json};
use tracing::info;

#[job(name = "hello", description = "a quick job", cron = "*/5 * * * * *")]
async fn hello(ctx: JobContext) -> Result<String, JobError> {
    info!(run_id = ctx.run_id(), "hello");
    Ok(format!(
        "hello from run {} at {}",
        ctx.run_id(),
        ctx.scheduled_at()
    ))
}

/// Sharded: each shard handles the elements whose position matches its index.
#[job(name = "reindex", description = "a sharded job")]
async fn reindex(ctx: JobContext) -> Result<Value, JobError> {
    let items: Vec<i64> = ctx.args().unwrap_or_default();
    let shard = ctx.shard();
    let mine: Vec<i64> = items
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i as u32 % shard.total == shard.index)
        .map(|(_, v)| v)
        .collect();
    info!(
        run_id = ctx.run_id(),
        shard = shard.index,
        of = shard.total,
        ?mine,
        "reindexing"
    );
    Ok(json!({ "shard": shard.index, "of": shard.total, "indexed": mine }))
}

/// Long-running: two minutes, so the result comes back by callback. Cancellable.
#[job(
    name = "long_report",
    description = "a long job",
    cron = "0 */5 * * * *"
)]
async fn long_report(ctx: JobContext) -> Result<String, JobError> {
    info!(
        run_id = ctx.run_id(),
        "long report started; it takes two minutes"
    );
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(120)) => Ok("report written".to_owned()),
        _ = ctx.cancelled() => Err(JobError::new("cancelled")),
    }
}

/// Flaky: fails about half of its attempts, to show retries and dead letters.
#[job(name = "flaky", description = "a job that fails half of the time")]
async fn flaky(ctx: JobContext) -> Result<String, JobError> {
    let coin = (ctx.attempt_id() ^ ctx.run_id()).rem_euclid(2) == 0;
    if coin {
        info!(
            run_id = ctx.run_id(),
            attempt = ctx.attempt(),
            "flaky job failed; it will be retried"
        );
        Err(JobError::new(format!(
            "flaky failure on attempt {}",
            ctx.attempt()
        )))
    } else {
        Ok(format!("succeeded on attempt {}", ctx.attempt()))
    }
}
