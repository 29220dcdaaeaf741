//! `carillon workflows`: list, show, create or replace from a file (by name, idempotent),
//! trigger with parameters, pause and resume, their runs, a run's steps, cancel, delete.

use std::path::PathBuf;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use super::client::ApiTarget;
use super::commands::{CommandError, Output, read_document, show};

#[derive(Debug, Subcommand)]
pub(crate) enum WorkflowsCommand {
    /// List the workflows.
    Ls,
    /// Show one workflow, with its steps.
    Get { id: i64 },
    /// Create a workflow from a JSON, TOML or YAML file, or replace the one of its name (a run
    /// in flight keeps the steps it started with).
    Apply {
        #[arg(short = 'f', long)]
        file: PathBuf,
    },
    /// Run a workflow now, with these parameters (JSON) instead of its own.
    Trigger {
        id: i64,
        #[arg(long)]
        params: Option<String>,
    },
    /// Resume a workflow's schedule.
    Start { id: i64 },
    /// Pause a workflow's schedule (runs in flight finish).
    Stop { id: i64 },
    /// A workflow's runs, newest first.
    Runs { id: i64 },
    /// A workflow run with each step's state and run.
    Run { run_id: i64 },
    /// Cancel a workflow run: its running steps are told to stop.
    Cancel { run_id: i64 },
    /// Run an ended workflow run again: its succeeded steps are kept, the others run again.
    Rerun { run_id: i64 },
    /// Delete a workflow (its runs stay in the log).
    Rm { id: i64 },
}

const WORKFLOW_COLUMNS: [(&str, &str); 4] = [
    ("ID", "/id"),
    ("NAME", "/name"),
    ("STATE", "/state"),
    ("LAST FIRED", "/last_fired_at"),
];

const RUN_COLUMNS: [(&str, &str); 5] = [
    ("RUN", "/id"),
    ("STATE", "/state"),
    ("SCHEDULED", "/scheduled_at"),
    ("TRIGGER", "/trigger"),
    ("FINISHED", "/finished_at"),
];

const STEP_COLUMNS: [(&str, &str); 4] = [
    ("STEP", "/name"),
    ("STATE", "/state"),
    ("RUN", "/run_id"),
    ("UPDATED", "/updated_at"),
];

pub(crate) async fn workflows(
    api: &ApiTarget,
    output: Output,
    command: WorkflowsCommand,
) -> Result<(), CommandError> {
    match command {
        WorkflowsCommand::Ls => {
            let list = api.call(Method::GET, "/api/v1/workflows", None).await?;
            show(output, &list, Some("workflows"), &WORKFLOW_COLUMNS);
        }
        WorkflowsCommand::Get { id } => {
            let workflow = api
                .call(Method::GET, &format!("/api/v1/workflows/{id}"), None)
                .await?;
            show(output, &workflow, None, &WORKFLOW_COLUMNS);
        }
        WorkflowsCommand::Apply { file } => {
            let document = read_document(&file)?;
            let (applied, _) = apply_one(api, &document).await?;
            show(output, &applied, None, &WORKFLOW_COLUMNS);
        }
        WorkflowsCommand::Trigger { id, params } => {
            let body = match params {
                Some(text) => {
                    let params: Value =
                        serde_json::from_str(&text).map_err(|e| CommandError::Flag {
                            flag: "params",
                            reason: format!("not JSON: {e}"),
                        })?;
                    json!({ "params": params })
                }
                None => json!({}),
            };
            let run = api
                .call(
                    Method::POST,
                    &format!("/api/v1/workflows/{id}/trigger"),
                    Some(&body),
                )
                .await?;
            show(output, &run, None, &RUN_COLUMNS);
        }
        WorkflowsCommand::Start { id } | WorkflowsCommand::Stop { id } => {
            let verb = if matches!(command, WorkflowsCommand::Start { .. }) {
                "start"
            } else {
                "stop"
            };
            let workflow = api
                .call(
                    Method::POST,
                    &format!("/api/v1/workflows/{id}/{verb}"),
                    None,
                )
                .await?;
            show(output, &workflow, None, &WORKFLOW_COLUMNS);
        }
        WorkflowsCommand::Runs { id } => {
            let page = api
                .call(Method::GET, &format!("/api/v1/workflows/{id}/runs"), None)
                .await?;
            show(output, &page, Some("runs"), &RUN_COLUMNS);
        }
        WorkflowsCommand::Run { run_id }
        | WorkflowsCommand::Cancel { run_id }
        | WorkflowsCommand::Rerun { run_id } => {
            let (method, path) = match command {
                WorkflowsCommand::Cancel { .. } => (
                    Method::POST,
                    format!("/api/v1/workflow-runs/{run_id}/cancel"),
                ),
                WorkflowsCommand::Rerun { .. } => (
                    Method::POST,
                    format!("/api/v1/workflow-runs/{run_id}/rerun"),
                ),
                _ => (Method::GET, format!("/api/v1/workflow-runs/{run_id}")),
            };
            let run = api.call(method, &path, None).await?;
            show(output, &run, Some("steps"), &STEP_COLUMNS);
        }
        WorkflowsCommand::Rm { id } => {
            api.call(Method::DELETE, &format!("/api/v1/workflows/{id}"), None)
                .await?;
        }
    }
    Ok(())
}

/// Creates the workflow of `document`, or replaces the one of its name (the same document
/// again changes nothing); `apply` files use it for their `workflows`. Returns the workflow
/// as the server has it and `created`, `updated` or `unchanged`.
pub(super) async fn apply_one(
    api: &ApiTarget,
    document: &Value,
) -> Result<(Value, &'static str), CommandError> {
    let name = document["name"].as_str().unwrap_or_default();
    let list = api.call(Method::GET, "/api/v1/workflows", None).await?;
    let existing = list["workflows"]
        .as_array()
        .and_then(|all| all.iter().find(|w| w["name"] == json!(name)).cloned());
    match existing {
        None => Ok((
            api.call(Method::POST, "/api/v1/workflows", Some(document))
                .await?,
            "created",
        )),
        Some(current) => {
            let id = &current["id"];
            let mut body = document.clone();
            let start = body
                .as_object_mut()
                .and_then(|fields| fields.remove("start"))
                .and_then(|s| s.as_bool());
            let mut updated = api
                .call(Method::PUT, &format!("/api/v1/workflows/{id}"), Some(&body))
                .await?;
            let running = updated["state"] == "running";
            let verb = match start {
                Some(true) if !running => Some("start"),
                Some(false) if running => Some("stop"),
                _ => None,
            };
            let mut action = if updated["version"] == current["version"] {
                "unchanged"
            } else {
                "updated"
            };
            if let Some(verb) = verb {
                updated = api
                    .call(
                        Method::POST,
                        &format!("/api/v1/workflows/{id}/{verb}"),
                        None,
                    )
                    .await?;
                action = "updated";
            }
            Ok((updated, action))
        }
    }
}
