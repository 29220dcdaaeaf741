//! Service tokens: bearer tokens with one role in one namespace, kept as the SHA-256 of the
//! token (the token itself is shown once, when it is created).

use async_trait::async_trait;

use super::Error;
use super::audit_records::AuditWrite;
use super::namespace_records::NamespaceId;

/// A row of `service_tokens`. `role` is the role's name: viewer, operator, editor, admin or
/// executor.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TokenRecord {
    pub token_id: i64,
    pub namespace_id: NamespaceId,
    pub name: String,
    pub role: String,
    /// Lower-case hex of the SHA-256 of the whole token.
    pub secret_sha256: String,
    pub display_prefix: String,
    pub created_at_ms: i64,
    /// Who created it, as the audit trail names callers.
    pub created_by: String,
    pub expires_at_ms: Option<i64>,
    pub last_used_at_ms: Option<i64>,
}

/// A token to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenWrite {
    pub namespace_id: NamespaceId,
    pub name: String,
    pub role: String,
    pub secret_sha256: String,
    pub display_prefix: String,
    pub created_by: String,
    pub expires_at_ms: Option<i64>,
}

/// The service tokens table.
#[async_trait]
pub trait TokenStore: Send + Sync + std::fmt::Debug + 'static {
    /// Every token, expired ones too, by namespace and name. Nodes keep the whole table in
    /// memory (it holds a few rows per team), so a request costs no query.
    async fn tokens_all(&self) -> Result<Vec<TokenRecord>, Error>;

    /// A new token; [`Error::Conflict`] when its namespace has one of that name, or (never in
    /// practice: the secret is random) one with the same secret.
    async fn token_insert(
        &self,
        token: &TokenWrite,
        audit: Option<&AuditWrite>,
    ) -> Result<TokenRecord, Error>;

    /// Deletes a token: false when there is none.
    async fn token_delete(&self, token_id: i64, audit: Option<&AuditWrite>) -> Result<bool, Error>;

    /// Records that a token was presented at `at_ms` (node clock; kept to the minute).
    async fn token_used(&self, token_id: i64, at_ms: i64) -> Result<(), Error>;
}
