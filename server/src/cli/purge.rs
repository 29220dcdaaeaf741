//! `carillon runs purge`: deletes run history by hand, calling the node until it is done (each
//! call deletes a bounded number of runs, so no request runs for minutes).

use chrono::{SecondsFormat, Utc};
use reqwest::Method;
use serde_json::{Value, json};

use super::client::ApiTarget;
use super::commands::{CommandError, Output, out};
use crate::jobs::KeepFor;

/// Runs each call deletes at most.
const PER_CALL: u32 = 50_000;

/// `--before`: an RFC 3339 instant, or an age (`30d`: finished more than 30 days ago).
fn before_instant(text: &str) -> Result<String, CommandError> {
    if chrono::DateTime::parse_from_rfc3339(text).is_ok() {
        return Ok(text.to_owned());
    }
    let age = KeepFor::parse(text)
        .ok()
        .and_then(KeepFor::millis)
        .and_then(|ms| i64::try_from(ms).ok())
        .ok_or_else(|| CommandError::Flag {
            flag: "before",
            reason: format!(
                "{text:?} is neither an RFC 3339 instant (2026-01-01T00:00:00Z) nor an age (30d)"
            ),
        })?;
    let instant = Utc::now() - chrono::Duration::milliseconds(age);
    Ok(instant.to_rfc3339_opts(SecondsFormat::Millis, true))
}

pub(crate) async fn purge(
    api: &ApiTarget,
    output: Output,
    before: &str,
    job: Option<i64>,
    dry_run: bool,
) -> Result<(), CommandError> {
    let before = before_instant(before)?;
    let mut body = json!({ "before": before, "dry_run": dry_run, "limit": PER_CALL });
    if let Some(job) = job {
        body["job_id"] = json!(job);
    }
    let (mut runs, mut attempts) = (0, 0);
    loop {
        let report = api
            .call(Method::POST, "/api/v1/runs/purge", Some(&body))
            .await?;
        runs += report["runs"].as_u64().unwrap_or(0);
        attempts += report["attempts"].as_u64().unwrap_or(0);
        if report["done"].as_bool().unwrap_or(true) {
            break;
        }
        if output == Output::Table {
            out(&format!("deleted {runs} runs so far…"));
        }
    }
    let scope = job.map_or_else(String::new, |job| format!(" of job {job}"));
    match output {
        Output::Json => out(&Value::to_string(&json!({
            "dry_run": dry_run, "before": before, "job_id": job,
            "runs": runs, "attempts": attempts,
        }))),
        Output::Table if dry_run => out(&format!(
            "would delete {runs} runs and {attempts} attempts{scope} finished before {before} \
             (dry run: nothing deleted)"
        )),
        Output::Table => out(&format!(
            "deleted {runs} runs and {attempts} attempts{scope} finished before {before}"
        )),
    }
    Ok(())
}
