//! `carillon calendars` (exclusion calendars) and `carillon backfill` (past ranges of a job).

use std::path::PathBuf;

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use super::client::ApiTarget;
use super::commands::{CommandError, Output, encode, read_document, show};

#[derive(Debug, Subcommand)]
pub(crate) enum CalendarsCommand {
    /// List the calendars.
    Ls,
    /// Show one calendar.
    Get { name: String },
    /// Create a calendar, or replace it, from a JSON, TOML or YAML file (`timezone`,
    /// `description`, `dates`, `ranges`, `rrules`).
    Put {
        name: String,
        #[arg(short = 'f', long)]
        file: PathBuf,
    },
    /// Delete a calendar no job names.
    Rm { name: String },
}

#[derive(Debug, Subcommand)]
pub(crate) enum BackfillCommand {
    /// Fire every instant of a job's schedule in a past range, once each.
    Start {
        /// The job's id.
        job: i64,
        /// The range's first instant (RFC 3339, or a wall time in the job's zone).
        #[arg(long)]
        from: String,
        /// Its last instant, included.
        #[arg(long)]
        to: String,
        /// Most runs of the backfill unfinished at once (default 1).
        #[arg(long)]
        max_in_flight: Option<u32>,
    },
    /// A job's backfills, newest first.
    Ls { job: i64 },
    /// Show one backfill.
    Get { id: i64 },
    /// Stop claiming a backfill's instants.
    Cancel { id: i64 },
}

const CALENDAR_COLUMNS: [(&str, &str); 5] = [
    ("NAME", "/name"),
    ("ZONE", "/timezone"),
    ("DATES", "/dates"),
    ("RANGES", "/ranges"),
    ("RRULES", "/rrules"),
];

const BACKFILL_COLUMNS: [(&str, &str); 7] = [
    ("ID", "/id"),
    ("JOB", "/job_id"),
    ("FROM", "/from"),
    ("TO", "/to"),
    ("CLAIMED UNTIL", "/claimed_until"),
    ("STATE", "/state"),
    ("FIRED", "/fired"),
];

pub(crate) async fn calendars(
    api: &ApiTarget,
    output: Output,
    command: CalendarsCommand,
) -> Result<(), CommandError> {
    match command {
        CalendarsCommand::Ls => {
            let list = api.call(Method::GET, "/api/v1/calendars", None).await?;
            show(output, &list, Some("calendars"), &CALENDAR_COLUMNS);
        }
        CalendarsCommand::Get { name } => {
            let path = format!("/api/v1/calendars/{}", encode(&name));
            let calendar = api.call(Method::GET, &path, None).await?;
            show(output, &calendar, None, &CALENDAR_COLUMNS);
        }
        CalendarsCommand::Put { name, file } => {
            let definition = read_document(&file)?;
            let path = format!("/api/v1/calendars/{}", encode(&name));
            let calendar = api.call(Method::PUT, &path, Some(&definition)).await?;
            show(output, &calendar, None, &CALENDAR_COLUMNS);
        }
        CalendarsCommand::Rm { name } => {
            let path = format!("/api/v1/calendars/{}", encode(&name));
            api.call(Method::DELETE, &path, None).await?;
        }
    }
    Ok(())
}

pub(crate) async fn backfill(
    api: &ApiTarget,
    output: Output,
    command: BackfillCommand,
) -> Result<(), CommandError> {
    let (path, method, body) = match command {
        BackfillCommand::Start {
            job,
            from,
            to,
            max_in_flight,
        } => {
            let mut body = json!({"from": from, "to": to});
            if let Some(n) = max_in_flight {
                body["max_in_flight"] = json!(n);
            }
            (
                format!("/api/v1/jobs/{job}/backfill"),
                Method::POST,
                Some(body),
            )
        }
        BackfillCommand::Ls { job } => {
            let list = api
                .call(Method::GET, &format!("/api/v1/jobs/{job}/backfills"), None)
                .await?;
            show(output, &list, Some("backfills"), &BACKFILL_COLUMNS);
            return Ok(());
        }
        BackfillCommand::Get { id } => (format!("/api/v1/backfills/{id}"), Method::GET, None),
        BackfillCommand::Cancel { id } => {
            (format!("/api/v1/backfills/{id}/cancel"), Method::POST, None)
        }
    };
    let backfill = api.call(method, &path, body.as_ref()).await?;
    show(output, &backfill, None, &BACKFILL_COLUMNS);
    Ok(())
}
