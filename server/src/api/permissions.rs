//! The check every `/api/v1` route runs before its handler: whether the caller may call the
//! operation (found by method and matched route in [`super::operations`]), and in which
//! namespace.
//!
//! The namespace an operation works in is read the same way for every operation: its
//! `namespace` query parameter (the caller's home, else `default`, when left out), the
//! namespace's name in `/namespaces/{name}`, or the namespace of the resource whose id is in
//! the path. A caller whose role is too weak for the operation is refused (`403`) whatever
//! it names; one with no role where the operation works is told there is nothing there
//! (`404`), so ids and names cannot be probed across namespaces. The handler is handed the
//! namespace ([`Admitted`]) and reads no other.

use axum::extract::{ConnectInfo, MatchedPath, RawPathParams, Request, State};
use axum::http::{Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::admitted::Admitted;
use super::audit::{self, Audit, Call, Outcome, Peer};
use super::error::AuditNote;
use super::operations::{Operation, ResourceKind, Scope, operations};
use super::{ApiError, ApiState};
use crate::access::{Decision, Principal};
use crate::store::NamespaceId;

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
/// to, in the audit trail with what came of it.
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
        let admitted = admit(&state, &principal, operation, &params, request.uri())
            .await
            .map_err(|denied| *denied.error)?;
        request.extensions_mut().insert(admitted);
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
                namespace: note.namespace.or(admitted.recorded()),
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
    let admitted = admit(&state, &principal, operation, &params, request.uri()).await;
    let mut changes = None;
    let mut call = Call {
        principal: &principal,
        peer,
        operation: &operation.id,
        resource: &resource,
        namespace: None,
    };
    let (response, outcome, detail) = match admitted {
        Ok(admitted) => {
            call.namespace = admitted.recorded();
            let audit = Audit::ready(&state, &call);
            request.extensions_mut().insert(audit.clone());
            request.extensions_mut().insert(admitted);
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
    uri: &Uri,
) -> Result<Admitted, Denied> {
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
            let namespace = match principal {
                Principal::Executor(token) => token.namespace(),
                _ => None,
            };
            Admitted::new(namespace, false)
        }
        Scope::Query => {
            let asked = axum::extract::Query::<NamespaceParam>::try_from_uri(uri)
                .map(|query| query.0.namespace)
                .unwrap_or_default();
            let named = asked.is_some();
            let name = match (asked, principal.home()) {
                (Some(name), _) => name,
                (None, Some(home)) => super::namespaces::name_of(state, home).await?,
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
            Admitted::new(Some(namespace.id), named)
        }
        Scope::NamespaceName => {
            let name = param("name").unwrap_or_default();
            let namespace = super::namespaces::resolve(state, Some(&name)).await?;
            verdict(
                principal.decide(need, Some(namespace.id)),
                Some(namespace.id),
                || ApiError::missing(format!("namespace {name:?}")),
            )?;
            Admitted::new(Some(namespace.id), true)
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
                    Admitted::new(Some(namespace), true)
                }
                None => Admitted::new(None, false),
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
