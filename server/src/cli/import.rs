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
    // Jobs not there yet are created first, so that child jobs have ids when their parents
    // are made to match (children by Carillon id).
    let mut existing: HashMap<i64, Value> = HashMap::new();
    let mut created: Vec<i64> = Vec::new();
    for mapped in &plan {
        let Some(document) = &mapped.document else {
            continue;
        };
        if let Some(job) = existing_job(api, mapped.xxl_id).await? {
            existing.insert(mapped.xxl_id, job);
        } else if !args.dry_run && mapped.definition().is_some() {
            let mut create = document.clone();
            create["start"] = json!(mapped.start);
            let made = api
                .call(Method::POST, "/api/v1/jobs", Some(&create))
                .await?;
            existing.insert(mapped.xxl_id, made);
            created.push(mapped.xxl_id);
        }
    }
    let ids: HashMap<i64, Value> = existing
        .iter()
        .map(|(xxl, job)| (*xxl, job["id"].clone()))
        .collect();
    let mut rows = Vec::with_capacity(plan.len());
    for mapped in &plan {
        let mut row = carry(api, mapped, &existing, &ids, args.dry_run).await?;
        if created.contains(&mapped.xxl_id) {
            row["action"] = json!("created");
        }
        rows.push(row);
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

/// The server's job imported from XXL-JOB job `xxl_id`, if there is one.
async fn existing_job(api: &ApiTarget, xxl_id: i64) -> Result<Option<Value>, CommandError> {
    let prefix = name_prefix(xxl_id);
    let found = api
        .call(
            Method::GET,
            &format!("/api/v1/jobs?name={}&limit=1000", encode(&prefix)),
            None,
        )
        .await?;
    Ok(found["jobs"].as_array().and_then(|list| {
        list.iter()
            .find(|j| j["name"].as_str().is_some_and(|n| n.starts_with(&prefix)))
            .cloned()
    }))
}

/// One XXL-JOB job made true on the server (or, in a dry run, what would be done), its child
/// jobs named by the Carillon ids of `ids` (XXL-JOB id → Carillon id).
async fn carry(
    api: &ApiTarget,
    mapped: &Mapped,
    existing: &HashMap<i64, Value>,
    ids: &HashMap<i64, Value>,
    dry_run: bool,
) -> Result<Value, CommandError> {
    let mut row = json!({
        "xxl_id": mapped.xxl_id,
        "name": mapped.name,
        "id": null,
        "start": mapped.start,
        "notes": mapped.notes.join("; "),
    });
    let (Some(document), Some(_)) = (&mapped.document, mapped.definition()) else {
        row["action"] = json!("not importable");
        row["notes"] = json!(mapped.not_importable.clone().unwrap_or_default());
        return Ok(row);
    };
    let mut document = document.clone();
    let (known, unknown): (Vec<i64>, Vec<i64>) =
        mapped.children.iter().partition(|c| ids.contains_key(c));
    if !known.is_empty() {
        document["children"] =
            json!({"on_success": known.iter().map(|c| ids[c].clone()).collect::<Vec<_>>()});
    }
    if !unknown.is_empty() {
        let list = unknown
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let why = if dry_run {
            "set when imported"
        } else {
            "not imported; left out"
        };
        row["notes"] = json!(format!(
            "{}; child jobs {list} {why}",
            mapped.notes.join("; ")
        ));
    }
    let definition = serde_json::from_value::<crate::jobs::JobInput>(document.clone())
        .ok()
        .and_then(|input| input.into_definition().ok())
        .ok_or_else(|| CommandError::Flag {
            flag: "from",
            reason: format!("XXL-JOB job {}: its children do not fit", mapped.xxl_id),
        })?;
    row["app"] = document["app"].clone();
    row["handler"] = document["handler"].clone();
    row["schedule"] = document["schedule"].clone();
    row["document"] = document.clone();
    let existing = existing.get(&mapped.xxl_id).cloned();
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
