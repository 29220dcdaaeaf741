//! `carillon apply FILE`: jobs written in a YAML, TOML or JSON file, made true on the server.

use std::collections::HashMap;
use std::path::Path;

use reqwest::Method;
use serde_json::{Value, json};

use super::apply_children;
use super::client::ApiTarget;
use super::commands::{CommandError, Output, encode, read_document, show};
use crate::input_text;
use crate::jobs::{JobDefinition, JobInput};

/// Makes the server's jobs match the file, by name: a job not there is created, one that
/// differs is updated to exactly the file's definition (fields the file omits take their
/// defaults), and one that matches is not written at all, so applying twice changes nothing
/// more. Every job of the file is checked before the first write, so a bad file changes nothing.
/// The jobs are those of the file's `namespace`, else of the command's.
pub(super) async fn apply(
    api: &ApiTarget,
    output: Output,
    file: &Path,
) -> Result<(), CommandError> {
    let document = read_document(file)?;
    let bad = |reason: String| CommandError::File {
        path: file.to_owned(),
        reason,
    };
    // A file may say whose its jobs are (`namespace: team-a`).
    let in_file = match document.get("namespace") {
        None => None,
        Some(Value::String(namespace)) => Some(api.in_namespace(namespace).map_err(bad)?),
        Some(_) => return Err(bad("namespace: must be a namespace's name".to_owned())),
    };
    let api = in_file.as_ref().unwrap_or(api);
    let workflows: Vec<Value> = document
        .get("workflows")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let jobs = document
        .get("jobs")
        .and_then(Value::as_array)
        .cloned()
        .or_else(|| document.as_array().cloned())
        .or_else(|| (!workflows.is_empty()).then(Vec::new))
        .ok_or_else(|| {
            bad(
                "expected a list of jobs (`[[jobs]]` in TOML, `jobs:` in YAML, or a JSON array) \
                 or of workflows (`workflows:`)"
                    .to_owned(),
            )
        })?;
    let mut desired = Vec::with_capacity(jobs.len());
    for (index, job) in jobs.into_iter().enumerate() {
        let input: JobInput = input_text::from_value(apply_children::with_stand_ins(&job))
            .map_err(|e| bad(format!("job {}: {e}", index + 1)))?;
        let start = job.get("start").and_then(Value::as_bool);
        let definition = input
            .into_definition()
            .map_err(|e| bad(format!("job {}: {e}", index + 1)))?;
        desired.push((job, start, definition.name));
    }
    // The server's jobs of the file's names and of the children it names by name.
    let mut existing: HashMap<String, Value> = HashMap::new();
    let mut wanted: Vec<String> = desired.iter().map(|(_, _, name)| name.clone()).collect();
    wanted.extend(
        desired
            .iter()
            .flat_map(|(job, _, _)| apply_children::names(job)),
    );
    existing.extend(jobs_named(api, wanted).await?);
    // Jobs that the file's workflows name as steps, by name.
    for workflow in &workflows {
        for step in workflow["steps"].as_array().into_iter().flatten() {
            if let Some(name) = step["job"].as_str()
                && !existing.contains_key(name)
                && let Some(job) = job_named(api, name).await?
            {
                existing.insert(name.to_owned(), job);
            }
        }
    }
    let in_file: Vec<&str> = desired.iter().map(|(_, _, name)| name.as_str()).collect();
    for (index, workflow) in workflows.iter().enumerate() {
        for step in workflow["steps"].as_array().into_iter().flatten() {
            if let Some(name) = step["job"].as_str()
                && !in_file.contains(&name)
                && !existing.contains_key(name)
            {
                return Err(bad(format!(
                    "workflow {}: no job named {name:?} (a step) in the file or on the server",
                    index + 1
                )));
            }
        }
    }
    for (index, (job, _, _)) in desired.iter().enumerate() {
        for child in apply_children::names(job) {
            if !in_file.contains(&child.as_str()) && !existing.contains_key(&child) {
                return Err(bad(format!(
                    "job {}: no job named {child:?} (a child) in the file or on the server",
                    index + 1
                )));
            }
        }
    }
    // Jobs not there yet are created first, in bulk (without children: those they name may
    // not exist yet); then every job is made to match the file, children by id.
    let new: Vec<(&str, &Value)> = desired
        .iter()
        .filter(|(_, _, name)| !existing.contains_key(name))
        .map(|(job, _, name)| (name.as_str(), job))
        .collect();
    let mut created: Vec<String> = Vec::new();
    for chunk in new.chunks(BULK_CHUNK) {
        let jobs: Vec<Value> = chunk
            .iter()
            .map(|(_, job)| apply_children::without(job))
            .collect();
        let made = api
            .call(
                Method::POST,
                "/api/v1/jobs/bulk",
                Some(&json!({ "jobs": jobs })),
            )
            .await
            .map_err(|e| {
                // The server numbers the new jobs of its request: name them instead.
                let mut said = e.to_string();
                for (i, (name, _)) in chunk.iter().enumerate().rev() {
                    said = said.replace(&format!("jobs[{i}]"), &format!("job {name:?}"));
                }
                bad(said)
            })?;
        for ((name, job), made) in chunk
            .iter()
            .zip(made["jobs"].as_array().into_iter().flatten())
        {
            // Created as the file has it, but for its children: read back only to add those.
            let view = if apply_children::names(job).is_empty() {
                let mut view = (*job).clone();
                view["id"] = made["id"].clone();
                view
            } else {
                api.call(Method::GET, &format!("/api/v1/jobs/{}", made["id"]), None)
                    .await?
            };
            existing.insert((*name).to_owned(), view);
            created.push((*name).to_owned());
        }
    }
    let ids: HashMap<String, Value> = existing
        .iter()
        .map(|(name, job)| (name.clone(), job["id"].clone()))
        .collect();
    let mut report = Vec::new();
    for (job, start, name) in desired {
        // Created as the file has it but for its children, which only now have ids.
        let complete = created.contains(&name) && apply_children::names(&job).is_empty();
        let job =
            apply_children::by_id(&job, &ids).map_err(|e| bad(format!("job {name:?}: {e}")))?;
        let input: JobInput =
            input_text::from_value(job.clone()).map_err(|e| bad(format!("job {name:?}: {e}")))?;
        let definition = input
            .into_definition()
            .map_err(|e| bad(format!("job {name:?}: {e}")))?;
        let current = existing.get(&name).cloned();
        let (id, action) = if complete {
            (
                current.map(|c| c["id"].clone()).unwrap_or_default(),
                "created",
            )
        } else {
            let (id, action) = reconcile(api, &job, start, &definition, current, false).await?;
            (
                id,
                if created.contains(&name) {
                    "created"
                } else {
                    action
                },
            )
        };
        report.push(json!({ "name": name, "id": id, "action": action }));
    }
    // Then the workflows, their steps' jobs named by id.
    for workflow in &workflows {
        let mut workflow = workflow.clone();
        for step in workflow["steps"].as_array_mut().into_iter().flatten() {
            if let Some(name) = step["job"].as_str().map(str::to_owned) {
                step["job"] = ids.get(&name).cloned().unwrap_or(Value::Null);
            }
        }
        let (applied, action) = super::workflows::apply_one(api, &workflow).await?;
        report.push(json!({ "name": applied["name"], "id": applied["id"], "action": action }));
    }
    show(
        output,
        &json!({ "jobs": report }),
        Some("jobs"),
        &[("NAME", "/name"), ("ID", "/id"), ("ACTION", "/action")],
    );
    Ok(())
}

/// Jobs per bulk create request.
const BULK_CHUNK: usize = 10_000;

/// A file naming more jobs than this is matched against a listing of every job, read a page
/// at a time, rather than a lookup per name.
const LOOKUPS_MAX: usize = 20;

/// The server's jobs of `names` (those that exist), by name.
async fn jobs_named(
    api: &ApiTarget,
    mut names: Vec<String>,
) -> Result<HashMap<String, Value>, CommandError> {
    names.sort();
    names.dedup();
    let mut found = HashMap::new();
    if names.len() <= LOOKUPS_MAX {
        for name in names {
            if let Some(job) = job_named(api, &name).await? {
                found.insert(name, job);
            }
        }
        return Ok(found);
    }
    let wanted: std::collections::HashSet<String> = names.into_iter().collect();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/jobs?sort=created&limit=1000&cursor={}", encode(c)),
            None => "/api/v1/jobs?sort=created&limit=1000".to_owned(),
        };
        let page = api.call(Method::GET, &path, None).await?;
        for job in page["jobs"].as_array().into_iter().flatten() {
            if let Some(name) = job["name"].as_str()
                && wanted.contains(name)
            {
                found.insert(name.to_owned(), job.clone());
            }
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(found),
        }
    }
}

/// The server's job named `name`, if there is one.
async fn job_named(api: &ApiTarget, name: &str) -> Result<Option<Value>, CommandError> {
    let found = api
        .call(
            Method::GET,
            &format!("/api/v1/jobs?name={}&limit=1000", encode(name)),
            None,
        )
        .await?;
    Ok(found["jobs"]
        .as_array()
        .and_then(|list| list.iter().find(|j| j["name"] == json!(name)).cloned()))
}

/// Makes one job of the server (`existing`, as the API shows it, or none) match `job` (its
/// document, checked into `definition`) and `start` (run or stopped; `None` leaves it). Returns
/// the job's id (null for a job a dry run would create) and `created`, `updated` or
/// `unchanged`; a dry run writes nothing and says what it would do.
pub(super) async fn reconcile(
    api: &ApiTarget,
    job: &Value,
    start: Option<bool>,
    definition: &JobDefinition,
    existing: Option<Value>,
    dry_run: bool,
) -> Result<(Value, &'static str), CommandError> {
    let Some(current) = existing else {
        if dry_run {
            return Ok((Value::Null, "created"));
        }
        let created = api.call(Method::POST, "/api/v1/jobs", Some(job)).await?;
        return Ok((created["id"].clone(), "created"));
    };
    let id = current["id"].clone();
    let mut changed = false;
    if definition_of_view(&current).as_ref() != Some(definition) {
        if !dry_run {
            let mut patch = patch_of(definition);
            // Against the version read: a concurrent edit is a 409, not overwritten.
            patch["version"] = current["version"].clone();
            api.call(Method::PATCH, &format!("/api/v1/jobs/{id}"), Some(&patch))
                .await?;
        }
        changed = true;
    }
    let running = current["state"] == "running";
    let toggle = match start {
        Some(true) if !running => Some("start"),
        Some(false) if running => Some("stop"),
        _ => None,
    };
    if let Some(verb) = toggle {
        if !dry_run {
            api.call(Method::POST, &format!("/api/v1/jobs/{id}/{verb}"), None)
                .await?;
        }
        changed = true;
    }
    Ok((id, if changed { "updated" } else { "unchanged" }))
}

/// The definition a job of the API stands for (its view without what the server adds).
fn definition_of_view(view: &Value) -> Option<JobDefinition> {
    let mut fields = view.as_object()?.clone();
    for added in [
        "id",
        "namespace",
        "state",
        "version",
        "partition",
        "last_fired_at",
        "next_fire_at",
        "created_at",
        "updated_at",
        "started_at",
        "fired",
    ] {
        fields.remove(added);
    }
    // An HTTP job is shown under app `http`, its handler the call's method; its document
    // names neither.
    if fields.contains_key("http") {
        fields.remove("app");
        fields.remove("handler");
    }
    let input: JobInput = serde_json::from_value(Value::Object(fields)).ok()?;
    input.into_definition().ok()
}

/// A PATCH that sets every field of `definition`.
fn patch_of(definition: &JobDefinition) -> Value {
    let mut patch = json!({
        "name": definition.name,
        "app": definition.app,
        "handler": definition.handler,
        "schedule": definition.schedule,
        "timezone": definition.timezone,
        "args": definition.args,
        // Absent from the policy when unset; `null` clears one the job has.
        "timeout_ms": definition.policy.timeout_ms,
    });
    if let (Some(fields), Ok(Value::Object(policy))) = (
        patch.as_object_mut(),
        serde_json::to_value(&definition.policy),
    ) {
        fields.extend(policy);
        if definition.policy.http.is_some() {
            fields.remove("app");
            fields.remove("handler");
        }
    }
    // Fields the policy leaves out when unset: `null` (or `[]`) clears what the job has.
    for (key, cleared) in [
        ("bounds", Value::Null),
        ("jitter_ms", Value::Null),
        ("pause_after_failures", Value::Null),
        ("alerts", Value::Null),
        ("history", Value::Null),
        ("flow", Value::Null),
        ("secrets", json!([])),
        ("calendars", json!([])),
        ("children", json!({})),
    ] {
        if patch.get(key).is_none() {
            patch[key] = cleared;
        }
    }
    patch
}
