//! The audit trail of the API: every call that changes something, or tries to, is recorded
//! with who made it, from where, what it was and what came of it, refusals included;
//! `GET /audit` pages it. `permissions::authorize`, which sees every call's caller, operation
//! and namespace, readies each call's event ([`Audit`]); a handler whose change is one store
//! call has the store write it in the change's own transaction, and `authorize` records the
//! rest (refusals, failures, and operations not made in one transaction) once answered.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::FromRequestParts;
use axum::extract::State;
use axum::extract::connect_info::Connected;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::serve::IncomingStream;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::admitted::Admitted;
use super::changes::Changes;
use super::params::QueryParams;
use super::{ApiError, ApiState, paging, rfc3339};
use crate::access::{Need, Principal};
use crate::store::{AuditFilter, AuditRecord, AuditWrite, NamespaceId};

/// The address a call came from, as the node's listener saw it.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

impl Connected<IncomingStream<'_, tokio::net::TcpListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, tokio::net::TcpListener>) -> Self {
        Peer(*stream.remote_addr())
    }
}

impl Connected<IncomingStream<'_, carillon_tls::TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, carillon_tls::TlsListener>) -> Self {
        Peer(*stream.remote_addr())
    }
}

/// Whether a call of `operation` is recorded: everything but reads, the schedule preview
/// (which changes nothing), and the executor protocol's traffic (heartbeats, results and
/// logs, many a second; registering and leaving are recorded).
pub(super) fn audited(operation: &str, reads: bool) -> bool {
    !reads
        && !matches!(
            operation,
            "previewSchedule" | "executorHeartbeat" | "reportResult" | "appendAttemptLogs"
        )
}

/// What came of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Done (`2xx`).
    Ok,
    /// Not done: the call was wrong, or what it names is not there.
    Failed,
    /// Not permitted: a role too weak, or another namespace's resource.
    Refused,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Refused => "refused",
        }
    }
}

/// One call, as recorded.
#[derive(Debug)]
pub(super) struct Call<'a> {
    pub(super) principal: &'a Principal,
    pub(super) peer: Option<Peer>,
    pub(super) operation: &'a str,
    pub(super) resource: &'a str,
    pub(super) namespace: Option<NamespaceId>,
}

/// The event of `call`.
fn event_of(
    state: &ApiState,
    call: &Call<'_>,
    outcome: Outcome,
    status: u16,
    detail: Option<String>,
    changes: Option<String>,
) -> AuditWrite {
    AuditWrite {
        at_ms: state.clock.now_ms(),
        namespace_id: call.namespace,
        actor: call.principal.describe(),
        source: call
            .peer
            .map_or_else(|| "unknown".to_owned(), |peer| peer.0.ip().to_string()),
        operation: call.operation.to_owned(),
        resource: call.resource.chars().take(512).collect(),
        outcome: outcome.name().to_owned(),
        status: i32::from(status),
        detail,
        changes,
    }
}

/// Records `call` on its own: the change it made, if any, is already committed (or was never
/// made), so a failure to record is logged, not answered.
pub(super) async fn record(
    state: &ApiState,
    call: &Call<'_>,
    outcome: Outcome,
    status: u16,
    detail: Option<String>,
    changes: Option<String>,
) {
    let event = event_of(state, call, outcome, status, detail, changes);
    if let Err(err) = state.store.audit_insert(&event).await {
        tracing::error!(error = %err, operation = call.operation, actor = %event.actor,
            "could not record an audit event");
    }
}

/// A call's audit event, readied by `permissions::authorize` before its handler runs (none for
/// calls that are not recorded). A handler whose change is one store call passes that call
/// [`Audit::event`], which the store writes in the change's own transaction, then says
/// [`Audit::written`]; `authorize` records the event of a call whose handler did not once it
/// is answered.
#[derive(Debug, Clone, Default)]
pub(super) struct Audit(Option<Arc<Draft>>);

#[derive(Debug)]
struct Draft {
    event: AuditWrite,
    written: AtomicBool,
}

impl Audit {
    /// The event of `call`, to be finished by its handler.
    pub(super) fn ready(state: &ApiState, call: &Call<'_>) -> Self {
        let event = event_of(state, call, Outcome::Ok, 0, None, None);
        Audit(Some(Arc::new(Draft {
            event,
            written: AtomicBool::new(false),
        })))
    }

    /// The event of the call done, answered with `status`, having made `changes`.
    pub(super) fn event(
        &self,
        status: StatusCode,
        changes: Option<&Changes>,
    ) -> Option<AuditWrite> {
        self.0.as_ref().map(|draft| AuditWrite {
            status: i32::from(status.as_u16()),
            changes: changes.and_then(Changes::to_json),
            ..draft.event.clone()
        })
    }

    /// The store wrote [`Audit::event`] with the change, which is committed.
    pub(super) fn written(&self) {
        if let Some(draft) = &self.0 {
            draft.written.store(true, Ordering::Release);
        }
    }

    pub(super) fn is_written(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|draft| draft.written.load(Ordering::Acquire))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Audit {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts.extensions.get::<Audit>().cloned().unwrap_or_default())
    }
}

/// Refused sign-ins (a bearer token that is no caller's: unknown, revoked, expired, or a
/// person's JWT that does not verify), recorded at most once a minute per address so that a
/// scanner cannot flood the trail; how many were held back is said by the address's next
/// recorded refusal.
#[derive(Debug, Default)]
pub struct RefusedSignIns {
    /// Per address: the minute of its last recorded refusal, and how many were held back since.
    by_source: Mutex<HashMap<IpAddr, (i64, u64)>>,
}

/// How many sources are remembered: past it, those of past minutes are forgotten, and when
/// all are of this minute, further sources share one count (so the trail takes at most this
/// many refusals a minute, and the map never grows past it).
const SOURCES_KEPT: usize = 10_000;

/// Where refusals are counted: an IPv4 address, or an IPv6 address's /64 (one host has many).
fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let mut segments = v6.segments();
            segments[4..].fill(0);
            IpAddr::V6(std::net::Ipv6Addr::from(segments))
        }
    }
}

impl RefusedSignIns {
    /// `Some(held back before it)` when a refusal from `source` at `now_ms` is recorded.
    fn admit(&self, source: IpAddr, now_ms: i64) -> Option<u64> {
        let minute = now_ms.div_euclid(60_000);
        let mut by_source = self
            .by_source
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut source = source_of(source);
        if by_source.len() >= SOURCES_KEPT && !by_source.contains_key(&source) {
            by_source.retain(|_, (at, _)| *at >= minute);
            if by_source.len() >= SOURCES_KEPT {
                source = IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED);
            }
        }
        match by_source.get_mut(&source) {
            Some((at, held)) if *at == minute => {
                *held += 1;
                None
            }
            Some((at, held)) => {
                *at = minute;
                Some(std::mem::take(held))
            }
            None => {
                by_source.insert(source, (minute, 0));
                Some(0)
            }
        }
    }
}

/// Records a refused sign-in at `resource` from `peer` (see [`RefusedSignIns`]).
pub(super) async fn record_refused_sign_in(
    state: &ApiState,
    peer: Option<Peer>,
    resource: &str,
    why: String,
) {
    let now_ms = state.clock.now_ms();
    let source = peer.map(|peer| peer.0.ip());
    let held = match source {
        Some(ip) => match state.refused_sign_ins.admit(ip, now_ms) {
            Some(held) => held,
            None => return,
        },
        None => 0,
    };
    let detail = if held > 0 {
        format!("{why}; {held} more refused from this address in its last minute of refusals")
    } else {
        why
    };
    let event = AuditWrite {
        at_ms: now_ms,
        namespace_id: None,
        actor: "unknown caller".to_owned(),
        source: source.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string()),
        operation: "signIn".to_owned(),
        resource: resource.chars().take(512).collect(),
        outcome: Outcome::Refused.name().to_owned(),
        status: 401,
        detail: Some(detail),
        changes: None,
    };
    if let Err(err) = state.store.audit_insert(&event).await {
        tracing::error!(error = %err, "could not record a refused sign-in");
    }
}

/// Which events.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    /// The namespace's events (a namespace's admin sees only its own); left out with the
    /// admin token: every namespace's and the cluster's.
    #[allow(
        dead_code,
        reason = "the permission check reads it and admits the call in it (`Admitted`)"
    )]
    #[param(max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]
    namespace: Option<String>,
    /// Who, as events name them (`admin token`, `token ci (#4)`).
    actor: Option<String>,
    /// An `operationId`, e.g. `deleteJob`.
    operation: Option<String>,
    /// `ok`, `failed` or `refused`.
    outcome: Option<String>,
    /// Recorded at or after this instant (RFC 3339).
    since: Option<String>,
    /// Recorded before this instant (RFC 3339).
    until: Option<String>,
    /// 1–1000, default 100.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
}

/// An event of the audit trail.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct AuditEventView {
    id: i64,
    at: Option<String>,
    /// The namespace changed; absent for a change to the cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    actor: String,
    /// The caller's address.
    source: String,
    /// The `operationId` called.
    operation: String,
    /// The path it was called on.
    resource: String,
    /// `ok`, `failed` (the call was wrong, or named nothing) or `refused` (not permitted).
    outcome: String,
    status: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    /// What an edit changed (`updateJob`, `updateWorkflow`, `putCalendar`,
    /// `updateNamespace`): each field with its value before and after.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<super::changes::Change>>)]
    changes: Option<serde_json::Value>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct AuditList {
    events: Vec<AuditEventView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

const LISTING: &str = "audit";
const SORTS: &[&str] = &["-created"];

/// The audit trail, newest first: every change made through the API and every refused one.
#[utoipa::path(get, operation_id = "listAuditEvents", path = "/audit", tag = "namespaces",
    params(AuditQuery),
    responses((status = 200, description = "A page of events", body = AuditList)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    axum::Extension(principal): axum::Extension<Principal>,
    admitted: Admitted,
    QueryParams(query): QueryParams<AuditQuery>,
) -> Result<Json<AuditList>, ApiError> {
    let limit = paging::limit(query.limit)?;
    // Every namespace's events are the cluster's admins' only.
    let namespace = admitted.listing(&principal, Need::ClusterAdmin)?;
    if let Some(outcome) = query.outcome.as_deref()
        && !["ok", "failed", "refused"].contains(&outcome)
    {
        return Err(ApiError::invalid(
            "outcome",
            "must be ok, failed or refused",
        ));
    }
    let before_id = query
        .cursor
        .as_deref()
        .map(|c| paging::position_id(c, LISTING, SORTS[0]))
        .transpose()?;
    let records = state
        .store
        .audit_list(&AuditFilter {
            namespace,
            actor: query.actor,
            operation: query.operation,
            outcome: query.outcome,
            from_ms: super::tasks::instant("since", query.since.as_deref())?,
            to_ms: super::tasks::instant("until", query.until.as_deref())?,
            before_id,
            limit,
        })
        .await?;
    let next_cursor = paging::next_cursor(&records, limit, LISTING, SORTS[0], |e| {
        e.event_id.to_string()
    });
    let mut events = Vec::with_capacity(records.len());
    for record in records {
        events.push(view(&state, record).await?);
    }
    Ok(Json(AuditList {
        events,
        next_cursor,
    }))
}

async fn view(state: &ApiState, record: AuditRecord) -> Result<AuditEventView, ApiError> {
    let namespace = match record.namespace_id {
        Some(id) => Some(super::namespaces::name_of(state, id).await?),
        None => None,
    };
    Ok(AuditEventView {
        id: record.event_id,
        at: rfc3339(record.at_ms),
        namespace,
        actor: record.actor,
        source: record.source,
        operation: record.operation,
        resource: record.resource,
        outcome: record.outcome,
        status: record.status,
        detail: record.detail,
        changes: record
            .changes
            .as_deref()
            .and_then(|text| serde_json::from_str(text).ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_sign_ins_are_recorded_once_a_minute_per_source_counting_the_rest() {
        let refusals = RefusedSignIns::default();
        let one: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        assert_eq!(refusals.admit(one, 60_000), Some(0));
        assert_eq!(refusals.admit(one, 60_001), None);
        assert_eq!(refusals.admit(one, 119_999), None);
        assert_eq!(refusals.admit(other, 119_999), Some(0));
        // The next minute's first is recorded, saying the two held back.
        assert_eq!(refusals.admit(one, 120_000), Some(2));
        assert_eq!(refusals.admit(one, 180_000), Some(0));
        // One IPv6 host's many addresses are one source.
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert_eq!(refusals.admit(a, 60_000), Some(0));
        assert_eq!(refusals.admit(b, 60_000), None);
    }

    #[test]
    fn a_flood_of_sources_in_one_minute_shares_one_count_past_the_cap() {
        let refusals = RefusedSignIns::default();
        let mut recorded = 0;
        for n in 0..(SOURCES_KEPT as u32 + 500) {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n));
            recorded += usize::from(refusals.admit(ip, 60_000).is_some());
        }
        assert_eq!(recorded, SOURCES_KEPT + 1);
        let kept = refusals.by_source.lock().unwrap().len();
        assert_eq!(kept, SOURCES_KEPT + 1);
        // A minute later the old sources make room.
        let late = IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, 1));
        assert_eq!(refusals.admit(late, 120_000), Some(0));
        assert!(refusals.by_source.lock().unwrap().len() <= 2);
    }
}
