//! Every `/api/v1` operation, read once from the OpenAPI document the router is built from:
//! what it needs of its caller (the table below, by `operationId`, which the document states
//! as `x-carillon-permission`) and where the namespace it works in comes from. The
//! permission check finds a request's operation here, so no route goes without a need.

use std::collections::HashMap;
use std::sync::OnceLock;

use axum::http::Method;
use utoipa::openapi::RefOr;
use utoipa::openapi::path::ParameterIn;

use crate::access::{Need, Role};

/// What operation `operation_id` needs; `None` for one the table misses (refused).
pub(super) fn need_of(operation_id: &str) -> Option<Need> {
    use Role::{Admin, Editor, Operator, Viewer};
    Some(match operation_id {
        "getCluster" | "getOpenApi" | "listNamespaces" => Need::SignedIn,
        "getNamespace" | "listJobs" | "getJob" | "listJobRuns" | "listJobBackfills"
        | "getBackfill" | "previewSchedule" | "listCalendars" | "getCalendar" | "listWorkflows"
        | "getWorkflow" | "listWorkflowRuns" | "getWorkflowRun" | "listRuns" | "getRun"
        | "listDeadLetters" | "getRunLogs" | "listTasks" | "getTask" | "listExecutors"
        | "getExecutor" | "listApps" | "listSecrets" => Need::Role(Viewer),
        "startJob" | "stopJob" | "triggerJob" | "backfillJob" | "cancelBackfill"
        | "startWorkflow" | "stopWorkflow" | "triggerWorkflow" | "rerunWorkflowRun"
        | "cancelWorkflowRun" | "rerunRun" | "cancelRun" | "releaseRun" | "enqueueTasks"
        | "cancelTask" | "cancelTaskByKey" => Need::Role(Operator),
        "createJob" | "updateJob" | "deleteJob" | "createJobs" | "putCalendar"
        | "deleteCalendar" | "createWorkflow" | "updateWorkflow" | "deleteWorkflow"
        | "putSecret" | "deleteSecret" | "testHttpCall" => Need::Role(Editor),
        "updateNamespace" | "listTokens" | "createToken" | "revokeToken" | "listGrants"
        | "createGrant" | "revokeGrant" | "listAuditEvents" => Need::Role(Admin),
        "getStats" | "getMetrics" => Need::ClusterViewer,
        "createNamespace" | "deleteNamespace" | "drainExecutor" | "resumeExecutor"
        | "removeExecutor" | "purgeRuns" | "rotateSecrets" => Need::ClusterAdmin,
        "registerExecutor" | "executorHeartbeat" | "reportResult" | "deregisterExecutor"
        | "appendAttemptLogs" => Need::Executor,
        _ => return None,
    })
}

/// Where an operation's namespace comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// Cluster-wide: no namespace.
    Cluster,
    /// The `namespace` query parameter.
    Query,
    /// `/namespaces/{name}`.
    NamespaceName,
    /// The resource whose `{id}` is in the path, by the path's first segment.
    Resource(ResourceKind),
}

/// The resources the API names by id, with the namespace each is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ResourceKind {
    Job,
    Workflow,
    Backfill,
    Run,
    WorkflowRun,
    Task,
    Token,
    Grant,
}

impl ResourceKind {
    pub(super) fn of_segment(segment: &str) -> Option<Self> {
        Some(match segment {
            "jobs" => Self::Job,
            "workflows" => Self::Workflow,
            "backfills" => Self::Backfill,
            "runs" => Self::Run,
            "workflow-runs" => Self::WorkflowRun,
            "tasks" => Self::Task,
            "tokens" => Self::Token,
            "grants" => Self::Grant,
            _ => return None,
        })
    }

    /// How a `404` names it (as its handler does).
    pub(super) fn noun(self) -> &'static str {
        match self {
            Self::Job => "job",
            Self::Workflow => "workflow",
            Self::Backfill => "backfill",
            Self::Run => "run",
            Self::WorkflowRun => "workflow run",
            Self::Task => "task",
            Self::Token => "token",
            Self::Grant => "grant",
        }
    }
}

/// An operation of the document, with what it needs and where its namespace comes from.
#[derive(Debug, Clone)]
pub(super) struct Operation {
    pub(super) id: String,
    pub(super) need: Option<Need>,
    pub(super) scope: Scope,
}

/// The scope of an operation at `path` (as the document writes it).
pub(super) fn scope_of(path: &str, takes_namespace: bool, need: Option<Need>) -> Scope {
    if !matches!(need, Some(Need::Role(_))) {
        return Scope::Cluster;
    }
    if takes_namespace {
        return Scope::Query;
    }
    let mut segments = path.trim_start_matches("/api/v1/").split('/');
    let first = segments.next().unwrap_or_default();
    match (first, segments.next()) {
        ("namespaces", Some("{name}")) => Scope::NamespaceName,
        (_, Some("{id}")) => {
            ResourceKind::of_segment(first).map_or(Scope::Cluster, Scope::Resource)
        }
        _ => Scope::Cluster,
    }
}

/// Every `/api/v1` operation by route and method, read once from the document.
pub(super) fn operations() -> &'static HashMap<String, Vec<(Method, Operation)>> {
    static OPERATIONS: OnceLock<HashMap<String, Vec<(Method, Operation)>>> = OnceLock::new();
    OPERATIONS.get_or_init(|| {
        let (_, doc) = super::routes().split_for_parts();
        let mut all: HashMap<String, Vec<(Method, Operation)>> = HashMap::new();
        for (path, item) in doc.paths.paths {
            let methods = [
                (Method::GET, item.get),
                (Method::POST, item.post),
                (Method::PUT, item.put),
                (Method::PATCH, item.patch),
                (Method::DELETE, item.delete),
            ];
            for (method, operation) in methods {
                let Some(operation) = operation else { continue };
                let id = operation.operation_id.unwrap_or_default();
                let takes_namespace = operation.parameters.iter().flatten().any(|p| {
                    matches!(p, RefOr::T(p) if p.name == "namespace"
                        && matches!(p.parameter_in, ParameterIn::Query))
                });
                let need = need_of(&id);
                let scope = scope_of(&path, takes_namespace, need);
                all.entry(path.clone())
                    .or_default()
                    .push((method, Operation { id, need, scope }));
            }
        }
        all
    })
}

/// Whether an operation at `path` (`/api/v1/…`, any method, no query) works in the
/// namespace its `namespace` query parameter names: what a client adds `namespace=` to. Read
/// from the document, so a new operation is covered as soon as it exists.
pub fn takes_namespace(path: &str) -> bool {
    let route_matches = |route: &str| {
        let (mut route, mut path) = (route.split('/'), path.split('/'));
        loop {
            match (route.next(), path.next()) {
                (None, None) => return true,
                (Some(r), Some(p)) if r == p || (r.starts_with('{') && !p.is_empty()) => {}
                _ => return false,
            }
        }
    };
    let in_one =
        |methods: &Vec<(Method, Operation)>| methods.iter().any(|(_, op)| op.scope == Scope::Query);
    // A literal route (`/secrets/rotate`) is the path's before any template (`/secrets/{name}`).
    match operations().get(path) {
        Some(methods) => in_one(methods),
        None => operations()
            .iter()
            .any(|(route, methods)| route_matches(route) && in_one(methods)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_of_the_document_has_a_need_and_a_namespace_to_check_it_in() {
        let operations = operations();
        let all: Vec<_> = operations
            .iter()
            .flat_map(|(path, route)| route.iter().map(move |(method, op)| (method, path, op)))
            .collect();
        assert!(all.len() > 60, "{}", all.len());
        for (method, path, operation) in all {
            if !path.starts_with("/api/v1/") {
                continue;
            }
            let need = operation
                .need
                .unwrap_or_else(|| panic!("{method} {path} ({}) has no need", operation.id));
            if let Need::Role(_) = need {
                assert_ne!(
                    operation.scope,
                    Scope::Cluster,
                    "{method} {path} ({}) needs a role in a namespace but names none",
                    operation.id
                );
            }
        }
    }

    #[test]
    fn the_paths_that_work_in_a_namespace_are_read_from_the_document() {
        for path in [
            "/api/v1/jobs",
            "/api/v1/runs",
            "/api/v1/dead-letters",
            "/api/v1/secrets",
            "/api/v1/secrets/db-password",
            "/api/v1/calendars/holidays",
            "/api/v1/tokens",
        ] {
            assert!(takes_namespace(path), "{path}");
        }
        for path in [
            "/api/v1/jobs/5",
            "/api/v1/jobs/5/runs",
            "/api/v1/runs/7",
            "/api/v1/secrets/rotate",
            "/api/v1/namespaces",
            "/api/v1/executors/register",
            "/api/v1/nothing",
            "/api/v1/secrets/",
        ] {
            assert!(!takes_namespace(path), "{path}");
        }
    }
}
