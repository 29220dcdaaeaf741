//! Who may call which operation: each operation's need (the table below, by `operationId`),
//! and the check every `/api/v1` route runs before its handler. The operation of a request is
//! found from its method and matched route in the same OpenAPI document the router is built
//! from, so no route can go without a need (a test walks the document), and the document
//! states each one as `x-carillon-permission`.
//!
//! The namespace an operation works in is read the same way for every operation: its
//! `namespace` query parameter (a service token's own namespace when left out), the
//! namespace's name in `/namespaces/{name}`, or the namespace of the resource whose id is in
//! the path. A caller whose role is too weak for the operation is refused (`403`) whatever
//! it names; one with no role where the operation works is told there is nothing there
//! (`404`), so ids and names cannot be probed across namespaces.

use std::collections::HashMap;
use std::sync::OnceLock;

use axum::extract::{ConnectInfo, MatchedPath, RawPathParams, Request, State};
use axum::http::{Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::openapi::RefOr;
use utoipa::openapi::path::ParameterIn;

use super::audit::{self, Audit, Call, Outcome, Peer};
use super::error::AuditNote;
use super::{ApiError, ApiState};
use crate::access::{Decision, Need, Principal, Role};
use crate::store::NamespaceId;

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
    fn of_segment(segment: &str) -> Option<Self> {
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
    fn noun(self) -> &'static str {
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
fn operations() -> &'static HashMap<String, Vec<(Method, Operation)>> {
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

/// `Ok` when `decision` allows; `hidden` when the caller may not know there is anything.
pub(super) fn check(decision: Decision, hidden: impl FnOnce() -> ApiError) -> Result<(), ApiError> {
    verdict(decision, None, hidden).map_err(|denied| *denied.error)
}

#[derive(Debug, Default, Deserialize)]
struct NamespaceParam {
    namespace: Option<String>,
}

/// Checks the caller ([`super::auth::authenticate`] put it in the request) may call the
/// matched operation in its namespace, and records a call that changes something, or tries
/// to, in the audit trail with what came of it. A service token's request that names no
/// namespace works in the token's own: the query gains it, so the handler reads it as if it
/// were sent.
pub(super) async fn authorize(
    State(state): State<ApiState>,
    matched: MatchedPath,
    params: RawPathParams,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let method = match *request.method() {
        Method::HEAD => Method::GET,
        ref method => method.clone(),
    };
    let principal = request
        .extensions()
        .get::<Principal>()
        .cloned()
        .ok_or(ApiError::Unauthorized)?;
    let operation = operations()
        .get(matched.as_str())
        .and_then(|route| route.iter().find(|(m, _)| *m == method))
        .map(|(_, operation)| operation);
    let Some(operation) = operation else {
        return Err(ApiError::Forbidden(
            "this operation is open to nobody".to_owned(),
        ));
    };
    if !audit::audited(&operation.id, method == Method::GET) {
        let peer = request
            .extensions()
            .get::<ConnectInfo<Peer>>()
            .map(|info| info.0);
        let resource = format!("{}{}", super::API_PREFIX, request.uri().path());
        let namespace = admit(&state, &principal, operation, &params, &mut request)
            .await
            .map_err(|denied| *denied.error)?;
        request.extensions_mut().insert(Admitted(namespace));
        let mut response = next.run(request).await;
        // A refusal of a call not otherwise recorded (an executor's heartbeat, result or log
        // lines for an executor or attempt that is not its own) is: it is what a caller
        // reaching past its boundary looks like.
        if let Some(note) = response
            .extensions_mut()
            .remove::<AuditNote>()
            .filter(|note| note.refused)
        {
            let call = Call {
                principal: &principal,
                peer,
                operation: &operation.id,
                resource: &resource,
                namespace: note.namespace.or(namespace),
            };
            let status = response.status().as_u16();
            audit::record(
                &state,
                &call,
                Outcome::Refused,
                status,
                Some(note.detail),
                None,
            )
            .await;
        }
        return Ok(response);
    }
    // Inside the nested router the path has lost its prefix.
    let resource = format!("{}{}", super::API_PREFIX, request.uri().path());
    let peer = request
        .extensions()
        .get::<ConnectInfo<Peer>>()
        .map(|info| info.0);
    let admitted = admit(&state, &principal, operation, &params, &mut request).await;
    let mut changes = None;
    let mut call = Call {
        principal: &principal,
        peer,
        operation: &operation.id,
        resource: &resource,
        namespace: None,
    };
    let (response, outcome, detail) = match admitted {
        Ok(namespace) => {
            call.namespace = namespace;
            let audit = Audit::ready(&state, &call);
            request.extensions_mut().insert(audit.clone());
            request.extensions_mut().insert(Admitted(namespace));
            let mut response = next.run(request).await;
            if audit.is_written() {
                return Ok(response);
            }
            let note = response.extensions_mut().remove::<AuditNote>();
            let outcome = match &note {
                _ if response.status().is_success() => Outcome::Ok,
                Some(note) if note.refused => Outcome::Refused,
                _ => Outcome::Failed,
            };
            if let Some(namespace) = note.as_ref().and_then(|note| note.namespace) {
                call.namespace = Some(namespace);
            }
            changes = response
                .extensions_mut()
                .remove::<super::changes::Changes>()
                .and_then(|changes| changes.to_json());
            (response, outcome, note.map(|note| note.detail))
        }
        Err(denied) => {
            call.namespace = denied.namespace;
            let detail = denied.why.unwrap_or_else(|| match *denied.error {
                // Internal details are logged, never sent, and the trail is read through the API.
                ApiError::Store(_) | ApiError::Internal(_) => "the node could not check".to_owned(),
                ref error => error.to_string(),
            });
            let outcome = if denied.refused {
                Outcome::Refused
            } else {
                Outcome::Failed
            };
            (denied.error.into_response(), outcome, Some(detail))
        }
    };
    let status = response.status().as_u16();
    audit::record(&state, &call, outcome, status, detail, changes).await;
    Ok(response)
}

/// The namespace a call was admitted in: where [`authorize`] found the caller's role (the
/// `namespace` query parameter, the caller's home, `default`, or the namespace of the resource
/// in the path). Handlers work in it and filter inside it, so no other parameter (`job_id`, a
/// cursor) can widen what a caller sees; `None` for a cluster-wide operation.
#[derive(Debug, Clone, Copy)]
pub(super) struct Admitted(pub(super) Option<NamespaceId>);

impl Admitted {
    /// The namespace, for an operation that works in one.
    pub(super) fn namespace(self) -> Result<NamespaceId, ApiError> {
        self.0.ok_or_else(|| {
            ApiError::Internal("an operation in a namespace was admitted without one".to_owned())
        })
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Admitted {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Admitted>().copied().ok_or_else(|| {
            ApiError::Internal("a handler ran without the permission check".to_owned())
        })
    }
}

/// Why a call was not let through to its handler, and the namespace it aimed at.
struct Denied {
    error: Box<ApiError>,
    /// Not permitted (rather than wrong or naming nothing).
    refused: bool,
    namespace: Option<NamespaceId>,
    /// What the audit trail says, when the answer says less (a hidden namespace).
    why: Option<String>,
}

impl From<ApiError> for Denied {
    fn from(error: ApiError) -> Self {
        Denied {
            error: Box::new(error),
            refused: false,
            namespace: None,
            why: None,
        }
    }
}

/// `Ok` when `decision` allows; otherwise the denial, `hidden` when the caller may not know
/// there is anything.
fn verdict(
    decision: Decision,
    namespace: Option<NamespaceId>,
    hidden: impl FnOnce() -> ApiError,
) -> Result<(), Denied> {
    match decision {
        Decision::Allow => Ok(()),
        Decision::Hide => Err(Denied {
            error: Box::new(hidden()),
            refused: true,
            namespace,
            why: Some("the caller has no role in this namespace".to_owned()),
        }),
        Decision::Refuse(why) => Err(Denied {
            error: Box::new(ApiError::Forbidden(why)),
            refused: true,
            namespace,
            why: None,
        }),
    }
}

/// Whether `principal` may call `operation`; the namespace it works in.
async fn admit(
    state: &ApiState,
    principal: &Principal,
    operation: &Operation,
    params: &RawPathParams,
    request: &mut Request,
) -> Result<Option<NamespaceId>, Denied> {
    let Some(need) = operation.need else {
        return Err(ApiError::Forbidden(format!(
            "{} is open to nobody: it has no permission",
            operation.id
        ))
        .into());
    };
    verdict(principal.decide_anywhere(need), principal.home(), || {
        ApiError::NotFound
    })?;
    let param = |name: &str| {
        params
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_owned())
    };
    Ok(match operation.scope {
        Scope::Cluster => {
            verdict(principal.decide(need, None), None, || ApiError::NotFound)?;
            // A namespace's executor token works in its namespace, where its calls are
            // recorded.
            match principal {
                Principal::Executor(token) => token.namespace(),
                _ => None,
            }
        }
        Scope::Query => {
            let asked = axum::extract::Query::<NamespaceParam>::try_from_uri(request.uri())
                .map(|query| query.0.namespace)
                .unwrap_or_default();
            let name = match (asked, principal.home()) {
                (Some(name), _) => name,
                (None, Some(home)) => {
                    let name = super::namespaces::name_of(state, home).await?;
                    *request.uri_mut() = with_namespace(request.uri(), &name)?;
                    name
                }
                (None, None) => {
                    if let Principal::Person(person) = principal
                        && person.cluster.is_none()
                        && !person.roles.contains_key(&NamespaceId::DEFAULT)
                    {
                        return Err(name_one_of_yours(state, person).await.into());
                    }
                    crate::namespaces::DEFAULT_NAME.to_owned()
                }
            };
            let namespace = super::namespaces::resolve(state, Some(&name)).await?;
            verdict(
                principal.decide(need, Some(namespace.id)),
                Some(namespace.id),
                || ApiError::missing(format!("namespace {name:?}")),
            )?;
            Some(namespace.id)
        }
        Scope::NamespaceName => {
            let name = param("name").unwrap_or_default();
            let namespace = super::namespaces::resolve(state, Some(&name)).await?;
            verdict(
                principal.decide(need, Some(namespace.id)),
                Some(namespace.id),
                || ApiError::missing(format!("namespace {name:?}")),
            )?;
            Some(namespace.id)
        }
        Scope::Resource(kind) => {
            // An id that is no number is the handler's to refuse (`400`).
            match param("id").and_then(|id| id.parse::<i64>().ok()) {
                Some(id) => {
                    let missing = || ApiError::missing(format!("{} {id}", kind.noun()));
                    let namespace = namespace_of(state, kind, id).await?.ok_or_else(missing)?;
                    verdict(
                        principal.decide(need, Some(namespace)),
                        Some(namespace),
                        missing,
                    )?;
                    Some(namespace)
                }
                None => None,
            }
        }
    })
}

/// A person with roles in several namespaces, none of them `default`, named none: which to
/// name (it sees only its own).
async fn name_one_of_yours(state: &ApiState, person: &crate::access::Person) -> ApiError {
    let mut names = Vec::new();
    for id in person.roles.keys() {
        match super::namespaces::name_of(state, *id).await {
            Ok(name) => names.push(name),
            Err(err) => return err,
        }
    }
    ApiError::invalid(
        "namespace",
        format!(
            "name the namespace to work in (?namespace=, or the CLI's --namespace): yours are {}",
            names.join(", ")
        ),
    )
}

/// The namespace resource `id` of `kind` is in; `None` when there is no such resource.
async fn namespace_of(
    state: &ApiState,
    kind: ResourceKind,
    id: i64,
) -> Result<Option<NamespaceId>, ApiError> {
    let store = &state.store;
    Ok(match kind {
        ResourceKind::Job | ResourceKind::Workflow => {
            store.job_get(id).await?.map(|job| job.namespace_id)
        }
        ResourceKind::Backfill => match store.backfill_get(id).await? {
            Some(backfill) => store
                .job_get(backfill.job_id)
                .await?
                .map(|job| job.namespace_id),
            None => None,
        },
        ResourceKind::Run | ResourceKind::WorkflowRun => {
            store.run_get(id).await?.map(|run| run.namespace_id)
        }
        ResourceKind::Task => store.task_get(id).await?.map(|task| task.namespace_id),
        ResourceKind::Token => state.tokens.namespace_of(id).await?,
        ResourceKind::Grant => {
            state.grants.forget();
            let grants = state.grants.all().await?;
            grants
                .iter()
                .find(|grant| grant.grant_id == id)
                .map(|grant| grant.namespace_id)
        }
    })
}

/// `uri` with `namespace=<name>` added to its query (`name` is a checked DNS label, which
/// needs no escaping).
fn with_namespace(uri: &Uri, name: &str) -> Result<Uri, ApiError> {
    let path = uri.path();
    let query = match uri.query() {
        Some(query) if !query.is_empty() => format!("{query}&namespace={name}"),
        _ => format!("namespace={name}"),
    };
    format!("{path}?{query}")
        .parse()
        .map_err(|_| ApiError::invalid("namespace", "does not fit in a URI"))
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

    #[test]
    fn a_service_tokens_namespace_joins_the_query() {
        let uri: Uri = "/api/v1/jobs?limit=5".parse().unwrap();
        assert_eq!(
            with_namespace(&uri, "team-a").unwrap(),
            "/api/v1/jobs?limit=5&namespace=team-a"
        );
        let uri: Uri = "/api/v1/jobs".parse().unwrap();
        assert_eq!(
            with_namespace(&uri, "team-a").unwrap(),
            "/api/v1/jobs?namespace=team-a"
        );
    }
}
