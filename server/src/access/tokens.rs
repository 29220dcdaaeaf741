//! Service tokens on a node: minting one, and finding the grant a bearer belongs to. The
//! node keeps every token's hash in memory, read again when the copy is older than
//! [`super::snapshot::FRESH_FOR`], so an API call costs no query, and a token revoked on another node stops
//! working within that time. Unknown bearers never cause a read: a scanner trying random
//! tokens costs a hash and a map lookup.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::snapshot::Snapshot;
use super::{EXECUTOR_ROLE, ExecutorToken, Principal, Role, ServiceGrant};
use crate::store::{self, TokenRecord, TokenStore};

/// How often a token's `last_used_at` is written at most.
const LAST_USED_EVERY_MS: i64 = 60_000;

/// What every service token starts with, so that secret scanners and people can tell one.
pub const TOKEN_PREFIX: &str = "carillon_";

/// How many of a token's characters a listing shows.
const DISPLAY_CHARS: usize = TOKEN_PREFIX.len() + 6;

/// A new token and what is stored of it.
#[derive(Debug)]
pub struct Minted {
    /// Shown once, to whoever created it.
    pub token: String,
    pub secret_sha256: String,
    pub display_prefix: String,
}

/// A new random token: 256 bits, base64url.
pub fn mint() -> Result<Minted, getrandom::Error> {
    let mut random = [0u8; 32];
    getrandom::fill(&mut random)?;
    let token = format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random)
    );
    Ok(Minted {
        secret_sha256: sha256_hex(&token),
        display_prefix: token.chars().take(DISPLAY_CHARS).collect(),
        token,
    })
}

fn sha256_hex(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// What a bearer that looks like a service token turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Found(Principal),
    Expired,
    Unknown,
}

type ByHash = HashMap<String, TokenRecord>;

/// The node's copy of the service tokens.
#[derive(Debug)]
pub struct ServiceTokens {
    store: Arc<dyn TokenStore>,
    copy: Snapshot<ByHash>,
    /// When this node last wrote each token's `last_used_at`.
    used_written: Mutex<HashMap<i64, i64>>,
}

impl ServiceTokens {
    pub fn new(store: Arc<dyn TokenStore>) -> Self {
        Self {
            store,
            copy: Snapshot::default(),
            used_written: Mutex::new(HashMap::new()),
        }
    }

    /// The caller `bearer` names, at `now_ms` (the cluster's clock, the database's as this
    /// node reads it, so that every node expires a token at the same instant).
    pub async fn lookup(&self, bearer: &str, now_ms: i64) -> Result<Lookup, store::Error> {
        if !bearer.starts_with(TOKEN_PREFIX) {
            return Ok(Lookup::Unknown);
        }
        let hash = sha256_hex(bearer);
        let record = self.current().await?.get(&hash).cloned();
        let Some(record) = record else {
            return Ok(Lookup::Unknown);
        };
        if record.expires_at_ms.is_some_and(|at| at <= now_ms) {
            return Ok(Lookup::Expired);
        }
        let principal = if record.role == EXECUTOR_ROLE {
            Principal::Executor(ExecutorToken::Service {
                token_id: record.token_id,
                name: record.name,
                namespace: record.namespace_id,
            })
        } else if let Some(role) = Role::parse(&record.role) {
            Principal::Service(ServiceGrant {
                token_id: record.token_id,
                name: record.name,
                namespace: record.namespace_id,
                role,
            })
        } else {
            tracing::warn!(token = record.token_id, role = %record.role, "a stored token names no role");
            return Ok(Lookup::Unknown);
        };
        self.note_use(record.token_id, now_ms);
        Ok(Lookup::Found(principal))
    }

    /// The namespace of token `token_id`, from the node's copy read afresh.
    pub async fn namespace_of(
        &self,
        token_id: i64,
    ) -> Result<Option<store::NamespaceId>, store::Error> {
        self.forget();
        Ok(self
            .current()
            .await?
            .values()
            .find(|record| record.token_id == token_id)
            .map(|record| record.namespace_id))
    }

    /// Makes the next lookup read the tokens again (after this node created or revoked one).
    pub fn forget(&self) {
        self.copy.forget();
    }

    async fn current(&self) -> Result<Arc<ByHash>, store::Error> {
        self.copy
            .current("service tokens", || async {
                Ok(self
                    .store
                    .tokens_all()
                    .await?
                    .into_iter()
                    .map(|record| (record.secret_sha256.clone(), record))
                    .collect())
            })
            .await
    }

    fn note_use(&self, token_id: i64, now_ms: i64) {
        {
            let mut written = self
                .used_written
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let last = written.get(&token_id).copied().unwrap_or(i64::MIN);
            if now_ms.saturating_sub(last) < LAST_USED_EVERY_MS {
                return;
            }
            written.insert(token_id, now_ms);
        }
        let store = Arc::clone(&self.store);
        tokio::spawn(async move {
            if let Err(err) = store.token_used(token_id, now_ms).await {
                tracing::debug!(error = %err, token = token_id, "could not record a token's use");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_token_is_long_random_and_kept_only_as_its_hash() {
        let one = mint().unwrap();
        let two = mint().unwrap();
        assert_ne!(one.token, two.token);
        assert!(one.token.starts_with(TOKEN_PREFIX));
        assert_eq!(one.token.len(), TOKEN_PREFIX.len() + 43);
        assert_eq!(one.secret_sha256.len(), 64);
        assert_eq!(one.secret_sha256, sha256_hex(&one.token));
        assert!(!one.secret_sha256.contains(&one.token[TOKEN_PREFIX.len()..]));
        assert!(one.token.starts_with(&one.display_prefix));
        assert_eq!(one.display_prefix.len(), DISPLAY_CHARS);
    }
}
