//! Namespaces: the spaces of the teams sharing one cluster. Every job (workflows and steps are
//! jobs), task, calendar, executor app and run belongs to one; names are unique within it.

use std::fmt;

use async_trait::async_trait;

use super::AuditWrite;
use super::Error;

/// A namespace's id, the same on every node (its name is what people type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, sqlx::Type)]
#[sqlx(transparent)]
pub struct NamespaceId(pub i64);

impl NamespaceId {
    /// `default`: what is created without naming a namespace, and everything stored before
    /// namespaces existed (the migration's column default).
    pub const DEFAULT: NamespaceId = NamespaceId(1);
}

impl Default for NamespaceId {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for NamespaceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A row of `namespaces`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct NamespaceRecord {
    pub namespace_id: NamespaceId,
    pub name: String,
    pub description: String,
    pub created_at_ms: i64,
    /// Where its jobs' alerts go when a job names no webhook of its own.
    pub alert_webhook: Option<String>,
    #[sqlx(flatten)]
    pub quotas: NamespaceQuotas,
}

/// A namespace's quotas, set by the cluster's admins; `None` is no quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct NamespaceQuotas {
    /// Jobs and workflows it may hold (their steps are not counted).
    pub max_jobs: Option<i64>,
    /// Its tasks pending at once.
    pub max_pending_tasks: Option<i64>,
    /// Tasks each node takes from it per second.
    pub max_enqueue_per_second: Option<i64>,
}

/// What a namespace row holds that people set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceWrite {
    /// Set when it is created.
    pub name: String,
    pub description: String,
    pub alert_webhook: Option<String>,
    pub quotas: NamespaceQuotas,
}

/// What a namespace still holds. Finished tasks and runs are history, which retention
/// removes; they do not keep a namespace from being deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NamespaceUsage {
    /// Jobs, workflows and their steps.
    pub jobs: i64,
    pub pending_tasks: i64,
    pub calendars: i64,
    pub apps: i64,
}

impl NamespaceUsage {
    pub fn is_empty(&self) -> bool {
        *self == NamespaceUsage::default()
    }
}

/// What became of a namespace's deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceDeletion {
    Deleted,
    /// There is no such namespace.
    Missing,
    /// `default` is never deleted: what is created without a namespace goes there.
    Default,
    /// It still holds these: nothing was deleted.
    InUse(NamespaceUsage),
}

/// The namespaces table.
#[async_trait]
pub trait NamespaceStore: Send + Sync + std::fmt::Debug + 'static {
    /// Every namespace, by name.
    async fn namespaces_list(&self) -> Result<Vec<NamespaceRecord>, Error>;

    /// A new namespace; [`Error::Conflict`] when the name is taken.
    /// `audit`, when given, is recorded in the same transaction (here and below).
    async fn namespace_insert(
        &self,
        namespace: &NamespaceWrite,
        audit: Option<&AuditWrite>,
    ) -> Result<NamespaceRecord, Error>;

    /// Sets a namespace's description and webhook; `None` when there is no such namespace.
    async fn namespace_update(
        &self,
        namespace: NamespaceId,
        write: &NamespaceWrite,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<NamespaceRecord>, Error>;

    /// The jobs and workflows a namespace holds (not their steps), and its pending tasks: what
    /// its quotas count.
    async fn namespace_counts(&self, namespace: NamespaceId) -> Result<(i64, i64), Error>;

    /// Per namespace holding any: its jobs and workflows (not their steps) and its pending
    /// tasks, for `/metrics`.
    async fn namespaces_counts(&self) -> Result<Vec<(NamespaceId, i64, i64)>, Error>;

    /// Deletes an empty namespace other than `default`, in one transaction with the check.
    async fn namespace_delete(
        &self,
        namespace: NamespaceId,
        audit: Option<&AuditWrite>,
    ) -> Result<NamespaceDeletion, Error>;
}
