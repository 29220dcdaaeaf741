//! `carillon import xxl-job --from mysql://…`: XXL-JOB's jobs made Carillon jobs, by XXL-JOB
//! id, through the REST API. Running it again changes only what changed in XXL-JOB.

use std::collections::HashMap;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use super::apply::reconcile;
use super::client::ApiTarget;
use super::commands::{CommandError, Output, encode, out, show};
use crate::import::xxl_mapping::{Mapped, MappingOptions, map_all, name_prefix};
use crate::import::xxl_source;

#[derive(Debug, Subcommand)]
pub(crate) enum ImportCommand {
    /// Jobs of an XXL-JOB admin's database (XXL-JOB 2.3 or 2.4): each is created, or updated
    /// to match; GLUE (script) jobs are listed with why they cannot come across.
    XxlJob(XxlJobArgs),
}

#[derive(Debug, Args)]
pub(crate) struct XxlJobArgs {
    /// XXL-JOB's database, e.g. mysql://user:password@host:3306/xxl_job (read only).
    #[arg(long)]
    from: String,
    /// Print the plan and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// XXL_APP=CARILLON_APP: bring an XXL-JOB app's jobs under another Carillon app (repeat,
    /// or separate with commas).
    #[arg(long = "app-map", value_delimiter = ',')]
    app_map: Vec<String>,
    /// The IANA zone XXL-JOB's admin evaluated cron in (its JVM's zone).
    #[arg(long, default_value = "UTC")]
    timezone: String,
}

pub(super) async fn import(
    api: &ApiTarget,
    output: Output,
    command: ImportCommand,
) -> Result<(), CommandError> {
    let ImportCommand::XxlJob(args) = command;
    let options = MappingOptions {
        timezone: args.timezone.clone(),
        app_map: app_map(&args.app_map)?,
    };
    let source = xxl_source::read(&args.from)
        .await
        .map_err(|e| CommandError::Flag {
            flag: "from",
            reason: e.to_string(),
        })?;
    let plan = map_all(&source.groups, &source.jobs, &options);
    let mut rows = Vec::with_capacity(plan.len());
    for mapped in &plan {
        rows.push(carry(api, mapped, args.dry_run).await?);
    }
    let count = |action: &str| rows.iter().filter(|r| r["action"] == action).count();
    let summary = format!(
        "{}{} XXL-JOB jobs: {} created, {} updated, {} unchanged, {} not importable",
        if args.dry_run {
            "dry run, nothing changed: "
        } else {
            ""
        },
        rows.len(),
        count("created"),
        count("updated"),
        count("unchanged"),
        count("not importable"),
    );
    let report = json!({ "dry_run": args.dry_run, "summary": summary, "jobs": rows });
    show(
        output,
        &report,
        Some("jobs"),
        &[
            ("XXL", "/xxl_id"),
            ("NAME", "/name"),
            ("ID", "/id"),
            ("APP", "/app"),
            ("SCHEDULE", "/schedule"),
            ("ACTION", "/action"),
            ("NOTES", "/notes"),
        ],
    );
    if output == Output::Table {
        out(&summary);
    }
    Ok(())
}

/// One XXL-JOB job made true on the server (or, in a dry run, what would be done).
async fn carry(api: &ApiTarget, mapped: &Mapped, dry_run: bool) -> Result<Value, CommandError> {
    let mut row = json!({
        "xxl_id": mapped.xxl_id,
        "name": mapped.name,
        "id": null,
        "start": mapped.start,
        "notes": mapped.notes.join("; "),
    });
    let (Some(document), Some(definition)) = (&mapped.document, mapped.definition()) else {
        row["action"] = json!("not importable");
        row["notes"] = json!(mapped.not_importable.clone().unwrap_or_default());
        return Ok(row);
    };
    row["app"] = document["app"].clone();
    row["handler"] = document["handler"].clone();
    row["schedule"] = document["schedule"].clone();
    row["document"] = document.clone();
    let prefix = name_prefix(mapped.xxl_id);
    let found = api
        .call(
            Method::GET,
            &format!("/api/v1/jobs?name={}&limit=1000", encode(&prefix)),
            None,
        )
        .await?;
    let existing = found["jobs"].as_array().and_then(|list| {
        list.iter()
            .find(|j| j["name"].as_str().is_some_and(|n| n.starts_with(&prefix)))
            .cloned()
    });
    let mut create = document.clone();
    create["start"] = json!(mapped.start);
    let (id, action) = reconcile(
        api,
        &create,
        Some(mapped.start),
        &definition,
        existing,
        dry_run,
    )
    .await?;
    row["id"] = id;
    row["action"] = json!(action);
    Ok(row)
}

/// `--app-map` entries as a map, refusing one without its `=`.
fn app_map(entries: &[String]) -> Result<HashMap<String, String>, CommandError> {
    entries
        .iter()
        .map(|entry| match entry.split_once('=') {
            Some((from, to)) if !from.trim().is_empty() && !to.trim().is_empty() => {
                Ok((from.trim().to_owned(), to.trim().to_owned()))
            }
            _ => Err(CommandError::Flag {
                flag: "app-map",
                reason: format!("{entry:?} is not XXL_APP=CARILLON_APP"),
            }),
        })
        .collect()
}
