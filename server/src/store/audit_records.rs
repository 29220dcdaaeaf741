//! The audit trail: who changed what through the API, from where, and what came of it.

use async_trait::async_trait;

use super::Error;
use super::namespace_records::NamespaceId;

/// An event to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditWrite {
    pub at_ms: i64,
    /// `None`: a change to the cluster, not to one namespace.
    pub namespace_id: Option<NamespaceId>,
    /// Who: `admin token`, `token ci (#4)`, …
    pub actor: String,
    /// Where from: the caller's address as the node saw it.
    pub source: String,
    /// The API operation (`operationId`).
    pub operation: String,
    /// The path it was called on.
    pub resource: String,
    /// `ok`, `failed` or `refused`.
    pub outcome: String,
    pub status: i32,
    /// Why it was refused or failed.
    pub detail: Option<String>,
    /// What an edit changed, as JSON.
    pub changes: Option<String>,
}

/// A row of `audit_events`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AuditRecord {
    pub event_id: i64,
    pub at_ms: i64,
    pub namespace_id: Option<NamespaceId>,
    pub actor: String,
    pub source: String,
    pub operation: String,
    pub resource: String,
    pub outcome: String,
    pub status: i32,
    pub detail: Option<String>,
    pub changes: Option<String>,
}

/// Which events, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Of this namespace only; of every namespace and the cluster when `None`.
    pub namespace: Option<NamespaceId>,
    pub actor: Option<String>,
    pub operation: Option<String>,
    pub outcome: Option<String>,
    /// Recorded at or after this instant.
    pub from_ms: Option<i64>,
    /// Recorded before this instant.
    pub to_ms: Option<i64>,
    /// Below this event id (the page before).
    pub before_id: Option<i64>,
    pub limit: i64,
}

/// The audit trail.
#[async_trait]
pub trait AuditStore: Send + Sync + std::fmt::Debug + 'static {
    async fn audit_insert(&self, event: &AuditWrite) -> Result<(), Error>;

    /// Events, newest first.
    async fn audit_list(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>, Error>;

    /// Deletes up to `batch` of the oldest events recorded before `before_ms`: how many.
    async fn audit_purge(&self, before_ms: i64, batch: i64) -> Result<u64, Error>;
}
