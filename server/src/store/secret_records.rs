//! Named secrets of a namespace, kept sealed (`secrets::seal`): the store never sees a value
//! in clear, and nothing it returns is shown by the API but names and dates.

use async_trait::async_trait;

use super::Error;
use super::audit_records::AuditWrite;
use super::namespace_records::NamespaceId;

/// A row of `secrets`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SecretRecord {
    pub secret_id: i64,
    pub namespace_id: NamespaceId,
    pub name: String,
    /// `v1.<key id>.<nonce, ciphertext and tag>`.
    pub sealed: String,
    /// The id of the key that sealed it.
    pub key_id: String,
    /// 1 when created; each write adds one (a rotation does not: the value is the same).
    pub version: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// Who wrote it last, as the audit trail names callers.
    pub updated_by: String,
}

/// A value to store under a name, sealed by the caller for `(namespace_id, name)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretWrite {
    pub namespace_id: NamespaceId,
    pub name: String,
    pub sealed: String,
    pub key_id: String,
    pub updated_by: String,
}

/// The secrets table.
#[async_trait]
pub trait SecretStore: Send + Sync + std::fmt::Debug + 'static {
    /// A namespace's secrets, by name.
    async fn secrets_list(&self, namespace: NamespaceId) -> Result<Vec<SecretRecord>, Error>;

    /// Stores a value under its name, replacing what was there; true when it is new.
    /// [`Error::Conflict`] when another write created the name at the same moment.
    async fn secret_put(
        &self,
        secret: &SecretWrite,
        audit: Option<&AuditWrite>,
    ) -> Result<(SecretRecord, bool), Error>;

    /// Deletes a secret: false when there is none of that name.
    async fn secret_delete(
        &self,
        namespace: NamespaceId,
        name: &str,
        audit: Option<&AuditWrite>,
    ) -> Result<bool, Error>;

    /// Up to `limit` secrets of every namespace sealed with another key than `key_id`, with
    /// ids above `after`, by id: what a rotation has left to do.
    async fn secrets_under_other_keys(
        &self,
        key_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<SecretRecord>, Error>;

    /// Replaces a secret's sealed value with the same value sealed again (under `key_id`),
    /// unless it was written since it was read at `version`: false then.
    async fn secret_reseal(
        &self,
        secret_id: i64,
        version: i64,
        sealed: &str,
        key_id: &str,
    ) -> Result<bool, Error>;
}
