//! Role grants: a namespace's role given to a group of the identity provider's people.

use async_trait::async_trait;

use super::Error;
use super::audit_records::AuditWrite;
use super::namespace_records::NamespaceId;

/// A row of `role_grants`. `role` is the role's name: viewer, operator, editor or admin.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct GrantRecord {
    pub grant_id: i64,
    pub namespace_id: NamespaceId,
    pub group_name: String,
    pub role: String,
    pub created_at_ms: i64,
    /// Who granted it, as the audit trail names callers.
    pub created_by: String,
}

/// A grant to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantWrite {
    pub namespace_id: NamespaceId,
    pub group_name: String,
    pub role: String,
    pub created_by: String,
}

/// The role grants table.
#[async_trait]
pub trait GrantStore: Send + Sync + std::fmt::Debug + 'static {
    /// Every grant, by namespace and group. Nodes keep the whole table in memory (a few rows
    /// per team), so a person's call costs no query.
    async fn grants_all(&self) -> Result<Vec<GrantRecord>, Error>;

    /// A new grant; [`Error::Conflict`] when the group already has a role in the namespace.
    /// `audit`, when given, is recorded in the same transaction (here and below).
    async fn grant_insert(
        &self,
        grant: &GrantWrite,
        audit: Option<&AuditWrite>,
    ) -> Result<GrantRecord, Error>;

    /// Deletes a grant: false when there is none.
    async fn grant_delete(&self, grant_id: i64, audit: Option<&AuditWrite>) -> Result<bool, Error>;
}
