//! `carillon runs logs RUN [-f]`: an attempt's log, and with `-f` the lines as they come
//! until the run ends (moving to a retry's attempt when one starts).

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use super::client::ApiTarget;
use super::commands::{CommandError, Output, out};

/// How often `-f` asks for new lines.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

pub(super) async fn logs(
    api: &ApiTarget,
    output: Output,
    run: i64,
    attempt: Option<i64>,
    follow: bool,
) -> Result<(), CommandError> {
    let mut shown = attempt;
    let mut after = 0;
    loop {
        let mut path = format!("/api/v1/runs/{run}/logs?after={after}&limit=1000");
        if let Some(attempt) = shown {
            path.push_str(&format!("&attempt={attempt}"));
        }
        let page = api.call(Method::GET, &path, None).await?;
        let attempt_id = page["attempt_id"].as_i64();
        if shown.is_none() && attempt_id.is_some() {
            shown = attempt_id;
        }
        print_lines(output, &page);
        if let Some(why) = page["unavailable"].as_str() {
            eprintln!("carillon: {why}");
        }
        after = page["next_after"].as_i64().unwrap_or(after);
        let done = page["done"].as_bool().unwrap_or(false);
        let more = page["lines"].as_array().is_some_and(|l| l.len() == 1000);
        if more {
            continue;
        }
        if !follow {
            return Ok(());
        }
        if done {
            // A retry's attempt, when the run goes on: follow it, unless one was asked for.
            let latest = page["attempts"]
                .as_array()
                .and_then(|ids| ids.last())
                .and_then(Value::as_i64);
            match latest {
                Some(next) if attempt.is_none() && Some(next) != shown => {
                    out(&format!("--- attempt {next} ---"));
                    shown = Some(next);
                    after = 0;
                    continue;
                }
                _ => {
                    let run_view = api
                        .call(Method::GET, &format!("/api/v1/runs/{run}"), None)
                        .await?;
                    let finished = !matches!(
                        run_view["state"].as_str(),
                        Some("pending" | "queued" | "running")
                    );
                    if finished || attempt.is_some() {
                        return Ok(());
                    }
                }
            }
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}

/// Lines as text (`time level message`), or one JSON object per line with `-o json`.
fn print_lines(output: Output, page: &Value) {
    for line in page["lines"].as_array().into_iter().flatten() {
        match output {
            Output::Json => out(&json!({
                "attempt_id": page["attempt_id"],
                "line": line["line"],
                "at": line["at"],
                "level": line["level"],
                "message": line["message"],
            })
            .to_string()),
            Output::Table => out(&format!(
                "{} {:<5} {}",
                line["at"].as_str().unwrap_or("-"),
                line["level"].as_str().unwrap_or(""),
                line["message"].as_str().unwrap_or("")
            )),
        }
    }
}
