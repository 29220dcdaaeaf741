//! `POST /api/v1/jobs/bulk`: many jobs created by one request in one transaction, for teams
//! arriving with thousands of jobs. Each job is checked as `POST /api/v1/jobs` checks one;
//! a batch with any bad job stores none, and the answer names every bad one by its index.

use std::collections::{HashMap, HashSet};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::admitted::Admitted;
use super::audit::Audit;
use super::body::{JsonBody, described};
use super::error::Problem;
use super::jobs::{check_fires, write_of};
use super::namespaces::NamespaceQuery;
use super::params::QueryParams;
use super::{ApiError, ApiState};
use crate::jobs::{ItemError, JobDefinition, JobInput, new_job_id, partition_of};
use crate::store::{self, JobInsert, NamespaceId};

/// Most jobs in one request.
pub(super) const MAX_BULK_JOBS: usize = 100_000;

/// The largest body of a bulk create: 100,000 jobs of a few hundred bytes.
pub(super) const MAX_BULK_BYTES: usize = 64 * 1024 * 1024;

/// Ids drawn per millisecond of the id's clock part: half of the 4,096 a millisecond holds,
/// so a single create drawing at random in the same millisecond finds a free one at once.
const IDS_PER_MS: usize = 2_048;

/// How often a batch draws its ids before it gives up: only a batch inserted on another node
/// at the same moment takes them.
const ID_TRIES: u32 = 5;

/// The jobs to create, each as `POST /api/v1/jobs` takes one.
#[derive(Debug, ToSchema)]
#[allow(
    dead_code,
    reason = "the request's schema in the OpenAPI document; the body is read job by job"
)]
pub(super) struct BulkJobs {
    #[schema(max_items = 100000)]
    jobs: Vec<JobInput>,
}

/// What a bulk create stored.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct BulkCreated {
    created: usize,
    /// Each job's id, in the order of the request.
    jobs: Vec<CreatedJob>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct CreatedJob {
    id: i64,
    name: String,
}

/// Creates many jobs at once: all of them, or none.
#[utoipa::path(post, operation_id = "createJobs", path = "/jobs/bulk", tag = "jobs", request_body = BulkJobs,
    params(NamespaceQuery),
    responses(
        (status = 201, description = "Every job created", body = BulkCreated),
        (status = 400, description = "Nothing created: every bad job by its index (`errors`), a name given twice or taken among them", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Nothing created: the namespace's quota of jobs would be passed, or a name of the batch is taken in a way the checks could not name (on MySQL, two names differing only in letter case), or its ids met another batch's five times", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn create(
    State(state): State<ApiState>,
    audit: Audit,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
    JsonBody(body): JsonBody<Value>,
) -> Result<(StatusCode, Json<BulkCreated>), ApiError> {
    let namespace = admitted.namespace()?;
    let items = items_of(body)?;
    let mut errors = Vec::new();
    let mut checked: Vec<(usize, JobDefinition, bool)> = Vec::with_capacity(items.len());
    let mut calendars_known: HashMap<String, bool> = HashMap::new();
    let mut app_owners = HashMap::new();
    for (index, item) in items.into_iter().enumerate() {
        match check_one(
            &state,
            namespace,
            item,
            &mut calendars_known,
            &mut app_owners,
        )
        .await
        {
            Ok((definition, start)) => checked.push((index, definition, start)),
            Err(ApiError::Invalid { field, message }) => errors.push(ItemError {
                index,
                field,
                message,
            }),
            // Not the job's fault (the database failed): the request fails.
            Err(err) => return Err(err),
        }
    }
    names_free(&state, namespace, &checked, &mut errors).await?;
    if !errors.is_empty() {
        return Err(refused(errors));
    }
    super::quotas::check_jobs(&state, namespace, checked.len()).await?;
    // Ids are drawn past the largest there is; a batch that met another's (drawn from the
    // same largest id on another node) draws again past the one that won.
    let event = audit.event(StatusCode::CREATED, None);
    let mut tries = 0;
    let rows = loop {
        tries += 1;
        let largest = state.store.job_id_max().await?;
        let rows = rows_of(&state, namespace, &checked, largest);
        match state.store.jobs_insert_many(&rows, event.as_ref()).await {
            Ok(()) => {
                audit.written();
                break rows;
            }
            Err(store::Error::Conflict { .. }) => {
                let mut errors = Vec::new();
                names_free(&state, namespace, &checked, &mut errors).await?;
                if !errors.is_empty() {
                    return Err(refused(errors));
                }
                if tries >= ID_TRIES {
                    return Err(ApiError::Conflict(
                        "a job name or id of the batch is taken (on MySQL and MariaDB, names \
                         that differ only in letter case are the same name); nothing was created"
                            .to_owned(),
                    ));
                }
            }
            Err(err) => return Err(err.into()),
        }
    };
    let jobs: Vec<CreatedJob> = rows
        .into_iter()
        .map(|row| CreatedJob {
            id: row.job_id,
            name: row.write.name,
        })
        .collect();
    Ok((
        StatusCode::CREATED,
        Json(BulkCreated {
            created: jobs.len(),
            jobs,
        }),
    ))
}

/// The answer to a batch with bad jobs: each of them, in the order of the batch.
fn refused(mut errors: Vec<ItemError>) -> ApiError {
    errors.sort_by_key(|e| e.index);
    ApiError::InvalidItems {
        list: "jobs",
        errors,
    }
}

/// The request's jobs, each still a JSON value so a bad one is named by its index.
fn items_of(body: Value) -> Result<Vec<Value>, ApiError> {
    let Value::Object(mut object) = body else {
        return Err(ApiError::invalid("body", "send {\"jobs\": [...]}"));
    };
    if let Some(other) = object.keys().find(|k| *k != "jobs") {
        return Err(ApiError::invalid(
            other,
            "unknown field: a bulk create is {\"jobs\": [...]} and nothing else",
        ));
    }
    let items = match object.remove("jobs") {
        Some(Value::Array(items)) => items,
        Some(_) => return Err(ApiError::invalid("jobs", "must be a list of jobs")),
        None => return Err(ApiError::invalid("jobs", "is required")),
    };
    if items.is_empty() || items.len() > MAX_BULK_JOBS {
        return Err(ApiError::invalid(
            "jobs",
            format!(
                "holds {} jobs: send 1 to {MAX_BULK_JOBS} per request",
                items.len()
            ),
        ));
    }
    Ok(items)
}

/// One job checked as `POST /api/v1/jobs` checks it; calendars looked up once per name.
async fn check_one(
    state: &ApiState,
    namespace: NamespaceId,
    item: Value,
    calendars_known: &mut HashMap<String, bool>,
    app_owners: &mut HashMap<String, Option<NamespaceId>>,
) -> Result<(JobDefinition, bool), ApiError> {
    let input: JobInput = serde_path_to_error::deserialize(item).map_err(|err| {
        let (field, message) = described(&err, "job");
        ApiError::invalid(&field, message)
    })?;
    let start = input.start;
    let definition = input.into_definition()?;
    super::jobs::check_egress(state, &definition)?;
    if start || definition.schedule.manual.is_none() {
        check_fires(state, &definition)?;
    }
    super::calendars::check_named_known(state, namespace, &definition, calendars_known).await?;
    super::apps::check_reachable_known(state, namespace, "app", &definition.app, app_owners)
        .await?;
    super::children::check(
        state,
        namespace,
        None,
        &definition.name,
        &definition.policy.children,
    )
    .await?;
    Ok((definition, start))
}

/// Adds an error for each name given twice in the batch or already taken.
async fn names_free(
    state: &ApiState,
    namespace: NamespaceId,
    checked: &[(usize, JobDefinition, bool)],
    errors: &mut Vec<ItemError>,
) -> Result<(), ApiError> {
    let mut first_of: HashMap<&str, usize> = HashMap::with_capacity(checked.len());
    for (index, definition, _) in checked {
        if let Some(first) = first_of.get(definition.name.as_str()) {
            errors.push(ItemError {
                index: *index,
                field: "name".to_owned(),
                message: format!("{:?} is also the name of jobs[{first}]", definition.name),
            });
        } else {
            first_of.insert(&definition.name, *index);
        }
    }
    let names: Vec<String> = first_of.keys().map(|n| (*n).to_owned()).collect();
    // Keyed in lower case: the database said which names it holds equal (MySQL's collation
    // ignores case; PostgreSQL's and SQLite's do not, and return only exact ones).
    let taken: HashMap<String, i64> = state
        .store
        .jobs_named(namespace, &names)
        .await?
        .into_iter()
        .map(|(name, id)| (name.to_lowercase(), id))
        .collect();
    for (index, definition, _) in checked {
        if let Some(id) = taken.get(&definition.name.to_lowercase()) {
            errors.push(ItemError {
                index: *index,
                field: "name".to_owned(),
                message: format!("{:?} is taken by job {id}", definition.name),
            });
        }
    }
    Ok(())
}

/// The rows to insert, with ids drawn apart: from the millisecond after the largest id's
/// (`largest`), or from now, whichever is later, at most [`IDS_PER_MS`] in each millisecond,
/// at random within it, never twice (ids are a millisecond and 12 random bits).
fn rows_of(
    state: &ApiState,
    namespace: NamespaceId,
    checked: &[(usize, JobDefinition, bool)],
    largest: Option<i64>,
) -> Vec<JobInsert> {
    let after_largest = largest.map_or(0, |id| id_ms(id) + 1);
    let first_ms = state.clock.now_ms().max(after_largest);
    let mut drawn: HashSet<i64> = HashSet::with_capacity(checked.len());
    checked
        .iter()
        .enumerate()
        .map(|(i, (_, definition, start))| {
            let ms = first_ms + i64::try_from(i / IDS_PER_MS).unwrap_or(i64::MAX / 2);
            let mut job_id = new_job_id(ms);
            // The next id of the same millisecond, round: one is free, as at most half are
            // drawn in each.
            while !drawn.insert(job_id) {
                job_id = (job_id & !0xfff) | ((job_id + 1) & 0xfff);
            }
            JobInsert {
                job_id,
                partition_id: partition_of(job_id, state.partition_count),
                write: write_of(namespace, definition),
                start: *start,
            }
        })
        .collect()
}

/// The epoch millisecond a job id was drawn in (`new_job_id`'s inverse).
fn id_ms(job_id: i64) -> i64 {
    (job_id >> 12) + crate::jobs::ID_EPOCH_MS
}
