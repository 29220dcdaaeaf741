//! The OpenAPI 3.1 document of the API, generated from the handlers' own annotations. The
//! router is built by the same `routes!` that read each handler's annotation, so no route can
//! exist undocumented and the document cannot name a route that does not exist.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::extensions::ExtensionsBuilder;
use utoipa::openapi::path::Operation;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr};
use utoipa::{Modify, OpenApi as _, PartialSchema};

use super::error::Problem;
use crate::access::Need;

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Carillon",
        description = "The admin API of a Carillon node: jobs, runs, executors, the cluster. \
            Every `/api/v1` endpoint takes `Authorization: Bearer <token>`: the admin token \
            opens everything, the read-only token every read, executor tokens the executor \
            protocol (an app token only for its own app's executors), and a service token \
            what its role (`viewer`, `operator`, `editor`, `admin`) opens in its namespace. \
            Each operation's `x-carillon-permission` names what it needs: a role in the \
            namespace it works in, `signed-in`, `cluster-viewer`, `cluster-admin` or \
            `executor`. A namespace's resources are not found (`404`) by a token of another. \
            Errors are `application/problem+json` with a stable `type` and, for bad input, \
            the `field`.",
        license(name = "Apache-2.0")
    ),
    security(("bearer" = [])),
    tags(
        (name = "namespaces", description = "The teams' spaces: every job, workflow, task and calendar is in one"),
        (name = "secrets", description = "Named values sealed at rest, written and never read back through the API"),
        (name = "jobs", description = "Cron, RRULE, interval and one-shot jobs"),
        (name = "workflows", description = "DAGs of steps with a schedule, and their runs"),
        (name = "runs", description = "Run logs, cancellation, dead letters and re-runs"),
        (name = "tasks", description = "Delayed one-shot tasks, enqueued by the batch"),
        (name = "schedules", description = "Schedule checking and preview"),
        (name = "executors", description = "Executor instances and apps"),
        (name = "executor protocol", description = "What executors call (executor tokens)"),
        (name = "cluster", description = "Nodes, leader and partitions"),
        (name = "health", description = "Probes for orchestrators (no token)"),
        (name = "meta", description = "This document")
    )
)]
pub(super) struct ApiDoc;

/// The document a router's routes describe, completed with what every operation shares.
pub(super) fn complete(mut doc: OpenApi) -> OpenApi {
    let components = doc.components.get_or_insert_with(Default::default);
    components.security_schemes.insert(
        "bearer".to_owned(),
        RefOr::T(SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer))),
    );
    components
        .schemas
        .insert("Problem".to_owned(), Problem::schema());
    CommonErrors.modify(&mut doc);
    doc
}

/// The errors any operation can answer, added to each from what it takes: every `/api/v1`
/// operation needs a token (`401`), may be closed to the token's kind (`403`) and needs the
/// database (`503`); one with parameters or a body may get them wrong (`400`); one with a body
/// may send too much (`413`); one with a path parameter may name nothing, and one in a
/// namespace may name none (`404`).
struct CommonErrors;

impl Modify for CommonErrors {
    fn modify(&self, doc: &mut OpenApi) {
        for (path, item) in doc.paths.paths.iter_mut() {
            if !path.starts_with("/api/v1/") {
                continue;
            }
            let operations = [
                &mut item.get,
                &mut item.post,
                &mut item.patch,
                &mut item.put,
                &mut item.delete,
            ];
            for operation in operations.into_iter().flatten() {
                add_errors(path, operation);
                add_permission(operation);
            }
        }
    }
}

/// States what the operation needs of its caller (`super::permissions`).
fn add_permission(operation: &mut Operation) {
    let need = operation
        .operation_id
        .as_deref()
        .and_then(super::operations::need_of)
        .map_or("nobody", Need::name);
    operation
        .extensions
        .get_or_insert_with(Default::default)
        .merge(
            ExtensionsBuilder::new()
                .add("x-carillon-permission", need)
                .build(),
        );
}

fn add_errors(path: &str, operation: &mut Operation) {
    let has_params = operation.parameters.as_ref().is_some_and(|p| !p.is_empty());
    let has_body = operation.request_body.is_some();
    let in_a_namespace = operation
        .parameters
        .iter()
        .flatten()
        .any(|p| matches!(p, RefOr::T(p) if p.name == "namespace"));
    let missing = match (path.contains('{'), in_a_namespace) {
        (true, true) => "Nothing has this name or id, or there is no such namespace",
        (false, true) => "There is no such namespace",
        _ => "Nothing has this id",
    };
    let errors = [
        (true, "401", "No token, or not one of this cluster's"),
        (true, "403", "This token's kind or role may not do this"),
        (
            has_params || has_body,
            "400",
            "A parameter or field is wrong; `field` names it",
        ),
        (has_body, "413", body_limit(path)),
        (path.contains('{') || in_a_namespace, "404", missing),
        (true, "503", "The database did not answer; retry"),
    ];
    for (applies, status, description) in errors {
        if applies && !operation.responses.responses.contains_key(status) {
            operation
                .responses
                .responses
                .insert(status.to_owned(), RefOr::T(problem(description)));
        }
    }
}

/// What `413` says of the body of `path` (`super::routes` sets the limits).
fn body_limit(path: &str) -> &'static str {
    match path {
        "/api/v1/tasks" => "The body is larger than 32 MiB",
        "/api/v1/jobs/bulk" => "The body is larger than 64 MiB",
        _ => "The body is larger than 2 MiB",
    }
}

fn problem(description: &str) -> utoipa::openapi::response::Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/problem+json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Problem")))
                .build(),
        )
        .build()
}

/// The document, rendered once per process.
pub(super) fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let (_, doc) = super::routes().split_for_parts();
        serde_json::to_string(&complete(doc)).unwrap_or_default()
    })
}

/// This document.
#[utoipa::path(get, operation_id = "getOpenApi", path = "/openapi.json", tag = "meta",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API",
        content_type = "application/json", body = Object)))]
pub(super) async fn openapi_json() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], document())
}

/// The base of the document, for [`super::routes`].
pub(super) fn base() -> OpenApi {
    ApiDoc::openapi()
}
